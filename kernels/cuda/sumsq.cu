/* Sum of squares in double with a fixed association, so every run (and
 * every stream) gives the bit-identical result: the CPU backend's
 * ZO_SUMSQ_CHUNKS chunks, one block each, whose threads stride through the
 * chunk and combine in a fixed shared-memory tree; the partials are then
 * added in chunk order by one thread. Within a chunk the association is not
 * the CPU's (SIMD lanes), so the two agree to ~1e-15 relative, not bitwise.
 * No atomics. The partials go to the stream's cuBLASLt workspace: work on
 * one stream runs in order, so no GEMM uses it meanwhile (common.cuh). */
#include "sumsq.cuh"

#define ZO_SUMSQ_BLOCK 256

static __global__ void sumsq_chunks_kernel(double *partial, const float *x, size_t n,
                                           size_t chunk) {
  __shared__ double acc[ZO_SUMSQ_BLOCK];
  const size_t c = blockIdx.x;
  const size_t lo = c * chunk < n ? c * chunk : n;
  const size_t hi = lo + chunk < n ? lo + chunk : n;
  double s = 0.0;
  for (size_t i = lo + threadIdx.x; i < hi; i += ZO_SUMSQ_BLOCK) {
    const double xi = x[i];
    s = __fma_rn(xi, xi, s);
  }
  acc[threadIdx.x] = s;
  __syncthreads();
  for (int w = ZO_SUMSQ_BLOCK / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) acc[threadIdx.x] = __dadd_rn(acc[threadIdx.x], acc[threadIdx.x + w]);
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[c] = acc[0];
}

static __global__ void sumsq_combine_kernel(double *out, const double *partial) {
  double s = 0.0;
  for (int c = 0; c < ZO_SUMSQ_CHUNKS; c++) s = __dadd_rn(s, partial[c]);
  *out = s;
}

extern "C" void zo_cuda_sumsq(double *out, const float *x, size_t n, zo_stream_t stream) {
  static_assert(ZO_SUMSQ_CHUNKS * sizeof(double) <= ZO_CUDA_WORKSPACE_BYTES,
                "sumsq partials fit the stream workspace");
  double *partial = (double *)zo_cuda_workspace(stream);
  const size_t chunk = (n + ZO_SUMSQ_CHUNKS - 1) / ZO_SUMSQ_CHUNKS;
  cudaStream_t cu = zo_cuda_stream(stream);
  sumsq_chunks_kernel<<<ZO_SUMSQ_CHUNKS, ZO_SUMSQ_BLOCK, 0, cu>>>(partial, x, n, chunk);
  ZO_CUDA_CHECK_LAUNCH();
  sumsq_combine_kernel<<<1, 1, 0, cu>>>(out, partial);
  ZO_CUDA_CHECK_LAUNCH();
}
