/* The strided scaled add (a LoRA adapter's output into its projection's
 * columns of a fused output): y (N, ld_y) columns [col0, col0 + M) +=
 * s * v (N, M), and its backward dv (N, M) = s * dy[:, col0:col0+M]
 * (overwritten), over fp32, bf16 or fp16: each element in fp32, rounded
 * once when stored, as on the CPU. One thread an element (grid-stride over
 * the N * M elements of v), so no atomics and no order to keep. */
#include "scaled_add.cuh"

template <typename scalar_t>
static __global__ void scaled_add_forward_kernel(scalar_t *y, const scalar_t *__restrict__ v, float s,
                                                 size_t total, int M, int ld_y, int col0) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    const size_t n = i / (size_t)M, j = i % (size_t)M;
    const size_t k = n * (size_t)ld_y + (size_t)col0 + j;
    zo_st(y, k, zo_ld(y, k) + s * zo_ld(v, i));
  }
}

template <typename scalar_t>
static __global__ void scaled_add_backward_kernel(scalar_t *dv, const scalar_t *__restrict__ dy, float s,
                                                  size_t total, int M, int ld_y, int col0) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    const size_t n = i / (size_t)M, j = i % (size_t)M;
    zo_st(dv, i, s * zo_ld(dy, n * (size_t)ld_y + (size_t)col0 + j));
  }
}

template <typename scalar_t>
static void scaled_add_forward(void *y, const void *v, float s, int N, int M, int ld_y, int col0,
                               zo_stream_t stream) {
  const int block = 256;
  const size_t total = (size_t)N * (size_t)M;
  scaled_add_forward_kernel<scalar_t><<<zo_cuda_grid_1d(total, block), block, 0, zo_cuda_stream(stream)>>>(
      (scalar_t *)y, (const scalar_t *)v, s, total, M, ld_y, col0);
  ZO_CUDA_CHECK_LAUNCH();
}

template <typename scalar_t>
static void scaled_add_backward(void *dv, const void *dy, float s, int N, int M, int ld_y, int col0,
                                zo_stream_t stream) {
  const int block = 256;
  const size_t total = (size_t)N * (size_t)M;
  scaled_add_backward_kernel<scalar_t><<<zo_cuda_grid_1d(total, block), block, 0, zo_cuda_stream(stream)>>>(
      (scalar_t *)dv, (const scalar_t *)dy, s, total, M, ld_y, col0);
  ZO_CUDA_CHECK_LAUNCH();
}

extern "C" void zo_cuda_scaled_add_forward(void *y, const void *v, float s, int N, int M, int ld_y, int col0,
                                           enum zo_dtype dt, zo_stream_t stream) {
  ZO_ASSERT(N >= 0 && M >= 0 && col0 >= 0 && (long)col0 + M <= ld_y);
  if (N == 0 || M == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, scaled_add_forward, y, v, s, N, M, ld_y, col0, stream);
}

extern "C" void zo_cuda_scaled_add_backward(void *dv, const void *dy, float s, int N, int M, int ld_y,
                                            int col0, enum zo_dtype dt, zo_stream_t stream) {
  ZO_ASSERT(N >= 0 && M >= 0 && col0 >= 0 && (long)col0 + M <= ld_y);
  if (N == 0 || M == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, scaled_add_backward, dv, dy, s, N, M, ld_y, col0, stream);
}
