/* LayerNorm (PyTorch semantics: biased variance, eps 1e-5), one warp per row,
 * over fp32, bf16 or fp16 activations and weights; statistics, arithmetic and
 * the weight gradients are fp32, and each dt output is rounded once.
 * Statistics are fp32 in two passes, mean then centred squares, as on the CPU
 * (no E[x^2] - E[x]^2 cancellation); the second pass re-reads the row, which
 * is in L1 by then. Backward: dinp += one warp per row (read, add in fp32,
 * round once); dweight and dbias += column sums over rows, deterministic as
 * rmsnorm's: each block sums a chunk of rows for 32 columns in a fixed order
 * and writes its partials to the stream's cuBLASLt workspace (stream order
 * keeps GEMMs out of it, common.cuh), then one thread per column adds them in
 * chunk order. The chunk count depends only on N, C and the device. No
 * atomics. dweight and dbias NULL (a frozen norm) skip the column kernels;
 * either alone is not written. */
#include "layernorm.cuh"

#define LN_WARPS 8     /* rows (warps) per block in the row kernels */
#define LN_COL_ROWS 8  /* threadIdx.y extent of the column kernel */
#define LN_MIN_ROWS 64 /* rows per column-kernel block at least */

template <typename scalar_t>
static __global__ void layernorm_forward_kernel(scalar_t *out, float *mean, float *rstd,
                                                const scalar_t *__restrict__ inp,
                                                const scalar_t *__restrict__ weight,
                                                const scalar_t *__restrict__ bias, int N, int C) {
  int row = blockIdx.x * LN_WARPS + threadIdx.y;
  if (row >= N) return;
  const scalar_t *x = inp + (size_t)row * C;
  scalar_t *o = out + (size_t)row * C;
  float sum = 0.0f;
  for (int c = threadIdx.x; c < C; c += ZO_WARP) sum += zo_ld(x, c);
  float m = zo_warp_sum(sum) / (float)C;
  float sq = 0.0f;
  for (int c = threadIdx.x; c < C; c += ZO_WARP) {
    float d = zo_ld(x, c) - m;
    sq += d * d;
  }
  float s = 1.0f / sqrtf(zo_warp_sum(sq) / (float)C + 1e-5f);
  for (int c = threadIdx.x; c < C; c += ZO_WARP)
    zo_st(o, c, (zo_ld(x, c) - m) * s * zo_ld(weight, c) + zo_ld(bias, c));
  if (threadIdx.x == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

/* dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = weight * dout. */
template <typename scalar_t>
static __global__ void
layernorm_backward_dinp_kernel(scalar_t *dinp, const scalar_t *__restrict__ dout,
                               const scalar_t *__restrict__ inp,
                               const scalar_t *__restrict__ weight, const float *__restrict__ mean,
                               const float *__restrict__ rstd, int N, int C) {
  int row = blockIdx.x * LN_WARPS + threadIdx.y;
  if (row >= N) return;
  const scalar_t *x = inp + (size_t)row * C;
  const scalar_t *d = dout + (size_t)row * C;
  scalar_t *di = dinp + (size_t)row * C;
  float m = mean[row], s = rstd[row];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int c = threadIdx.x; c < C; c += ZO_WARP) {
    float dnorm = zo_ld(weight, c) * zo_ld(d, c);
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * (zo_ld(x, c) - m) * s;
  }
  float dnorm_mean = zo_warp_sum(dnorm_sum) / (float)C;
  float dnorm_norm_mean = zo_warp_sum(dnorm_norm_sum) / (float)C;
  for (int c = threadIdx.x; c < C; c += ZO_WARP) {
    float norm = (zo_ld(x, c) - m) * s;
    float g = (zo_ld(weight, c) * zo_ld(d, c) - dnorm_mean - norm * dnorm_norm_mean) * s;
    zo_st(di, c, zo_ld(di, c) + g);
  }
}

/* Block (32, LN_COL_ROWS): rows [row0, row0 + rows_per_chunk) of 32
 * columns; partial_w, partial_b (chunks, C) row blockIdx.y. */
template <typename scalar_t>
static __global__ void
layernorm_backward_partial_kernel(float *partial_w, float *partial_b,
                                  const scalar_t *__restrict__ dout,
                                  const scalar_t *__restrict__ inp, const float *__restrict__ mean,
                                  const float *__restrict__ rstd, int N, int C,
                                  int rows_per_chunk) {
  __shared__ float part_w[LN_COL_ROWS][ZO_WARP + 1], part_b[LN_COL_ROWS][ZO_WARP + 1];
  int c = blockIdx.x * ZO_WARP + threadIdx.x;
  int row0 = blockIdx.y * rows_per_chunk;
  int row1 = min(row0 + rows_per_chunk, N);
  float dw = 0.0f, db = 0.0f;
  if (c < C) {
    for (int r = row0 + threadIdx.y; r < row1; r += LN_COL_ROWS) {
      size_t i = (size_t)r * C + c;
      float d = zo_ld(dout, i);
      dw += d * (zo_ld(inp, i) - mean[r]) * rstd[r];
      db += d;
    }
  }
  part_w[threadIdx.y][threadIdx.x] = dw;
  part_b[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int y = 1; y < LN_COL_ROWS; y++) {
    dw += part_w[y][threadIdx.x];
    db += part_b[y][threadIdx.x];
  }
  partial_w[(size_t)blockIdx.y * C + c] = dw;
  partial_b[(size_t)blockIdx.y * C + c] = db;
}

static __global__ void layernorm_backward_reduce_kernel(float *dweight, float *dbias,
                                                        const float *partial_w,
                                                        const float *partial_b, int chunks,
                                                        int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float w = 0.0f, b = 0.0f;
  for (int k = 0; k < chunks; k++) {
    w += partial_w[(size_t)k * C + c];
    b += partial_b[(size_t)k * C + c];
  }
  if (dweight) dweight[c] += w;
  if (dbias) dbias[c] += b;
}

template <typename scalar_t>
static void layernorm_forward(void *out, float *mean, float *rstd, const void *inp,
                              const void *weight, const void *bias, int N, int C,
                              zo_stream_t stream) {
  dim3 block(ZO_WARP, LN_WARPS);
  layernorm_forward_kernel<scalar_t>
      <<<zo_ceil_div((size_t)N, LN_WARPS), block, 0, zo_cuda_stream(stream)>>>(
          (scalar_t *)out, mean, rstd, (const scalar_t *)inp, (const scalar_t *)weight,
          (const scalar_t *)bias, N, C);
  ZO_CUDA_CHECK_LAUNCH();
}

template <typename scalar_t>
static void layernorm_backward(void *dinp, float *dweight, float *dbias, const void *dout,
                               const void *inp, const void *weight, const float *mean,
                               const float *rstd, int N, int C, zo_stream_t stream) {
  cudaStream_t s = zo_cuda_stream(stream);
  dim3 row_block(ZO_WARP, LN_WARPS);
  layernorm_backward_dinp_kernel<scalar_t><<<zo_ceil_div((size_t)N, LN_WARPS), row_block, 0, s>>>(
      (scalar_t *)dinp, (const scalar_t *)dout, (const scalar_t *)inp, (const scalar_t *)weight,
      mean, rstd, N, C);
  ZO_CUDA_CHECK_LAUNCH();
  if (!dweight && !dbias) return; /* a frozen norm: no column reduction */

  unsigned col_blocks = zo_ceil_div((size_t)C, ZO_WARP);
  unsigned want = 2u * (unsigned)zo_cuda.prop.multiProcessorCount;
  unsigned chunks = want > col_blocks ? want / col_blocks : 1u;
  unsigned max_chunks = zo_ceil_div((size_t)N, LN_MIN_ROWS);
  const size_t fit = ZO_CUDA_WORKSPACE_BYTES / (2 * sizeof(float)) / (size_t)C; /* partial rows */
  ZO_ASSERT(fit >= 1);
  if (chunks > max_chunks) chunks = max_chunks;
  if (chunks > fit) chunks = (unsigned)fit;
  if (chunks < 1) chunks = 1;
  int rows_per_chunk = (int)zo_ceil_div((size_t)N, chunks);
  chunks = zo_ceil_div((size_t)N, (size_t)rows_per_chunk);
  float *partial_w = (float *)zo_cuda_workspace(stream);
  float *partial_b = partial_w + (size_t)chunks * C;
  dim3 grid(col_blocks, chunks), col_block(ZO_WARP, LN_COL_ROWS);
  layernorm_backward_partial_kernel<scalar_t><<<grid, col_block, 0, s>>>(
      partial_w, partial_b, (const scalar_t *)dout, (const scalar_t *)inp, mean, rstd, N, C,
      rows_per_chunk);
  ZO_CUDA_CHECK_LAUNCH();
  layernorm_backward_reduce_kernel<<<zo_ceil_div((size_t)C, 256), 256, 0, s>>>(
      dweight, dbias, partial_w, partial_b, (int)chunks, C);
  ZO_CUDA_CHECK_LAUNCH();
}

extern "C" void zo_cuda_layernorm_forward(void *out, float *mean, float *rstd, const void *inp,
                                          const void *weight, const void *bias, int N, int C,
                                          enum zo_dtype dt, zo_stream_t stream) {
  if (N == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, layernorm_forward, out, mean, rstd, inp, weight, bias, N, C, stream);
}

extern "C" void zo_cuda_layernorm_backward(void *dinp, float *dweight, float *dbias,
                                           const void *dout, const void *inp, const void *weight,
                                           const float *mean, const float *rstd, int N, int C,
                                           enum zo_dtype dt, zo_stream_t stream) {
  if (N == 0 || C == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, layernorm_backward, dinp, dweight, dbias, dout, inp, weight, mean, rstd,
                      N, C, stream);
}
