/* RMSNorm (Hugging Face LlamaRMSNorm in fp32), one warp per row, over fp32,
 * bf16 or fp16 activations and weights: out = x * rstd * weight with
 * rstd = 1 / sqrt(mean(x^2) + eps) fp32, each dt output rounded once, as on
 * the CPU. Backward: dinp += one warp per row (read, add in fp32, round
 * once); dweight += column sums over rows, deterministic unlike layernorm's:
 * each block sums a chunk of rows for 32 columns in a fixed order and writes
 * its partial to the stream's cuBLASLt workspace (stream order keeps GEMMs
 * out of it, common.cuh), then one thread per column adds the partials in
 * chunk order. The chunk count depends only on N, C and the device.
 * dweight NULL (a frozen norm) skips the column kernels. The per-head
 * variant (Qwen3's q/k norms, strided rows of a qkv row) follows the same plan. */
#include "rmsnorm.cuh"

#define RMS_WARPS 8     /* rows (warps) per block in the row kernels */
#define RMS_COL_ROWS 8  /* threadIdx.y extent of the column kernel */
#define RMS_MIN_ROWS 64 /* rows per column-kernel block at least */

template <typename scalar_t>
static __global__ void rmsnorm_forward_kernel(scalar_t *out, float *rstd,
                                              const scalar_t *__restrict__ inp,
                                              const scalar_t *__restrict__ weight, float eps, int N,
                                              int C) {
  int row = blockIdx.x * RMS_WARPS + threadIdx.y;
  if (row >= N) return;
  const scalar_t *x = inp + (size_t)row * C;
  scalar_t *o = out + (size_t)row * C;
  float sq = 0.0f;
  for (int c = threadIdx.x; c < C; c += ZO_WARP) {
    float v = zo_ld(x, c);
    sq += v * v;
  }
  float s = 1.0f / sqrtf(zo_warp_sum(sq) / (float)C + eps);
  for (int c = threadIdx.x; c < C; c += ZO_WARP) zo_st(o, c, zo_ld(x, c) * s * zo_ld(weight, c));
  if (threadIdx.x == 0) rstd[row] = s;
}

/* dinp += rstd * (dnorm - norm * mean(dnorm * norm)), norm = x * rstd, dnorm = weight * dout. */
template <typename scalar_t>
static __global__ void rmsnorm_backward_dinp_kernel(scalar_t *dinp, const scalar_t *__restrict__ dout,
                                                    const scalar_t *__restrict__ inp,
                                                    const scalar_t *__restrict__ weight,
                                                    const float *__restrict__ rstd, int N, int C) {
  int row = blockIdx.x * RMS_WARPS + threadIdx.y;
  if (row >= N) return;
  const scalar_t *x = inp + (size_t)row * C;
  const scalar_t *d = dout + (size_t)row * C;
  scalar_t *di = dinp + (size_t)row * C;
  const float s = rstd[row];
  float dot = 0.0f;
  for (int c = threadIdx.x; c < C; c += ZO_WARP) dot += zo_ld(weight, c) * zo_ld(d, c) * (zo_ld(x, c) * s);
  const float dot_mean = zo_warp_sum(dot) / (float)C;
  for (int c = threadIdx.x; c < C; c += ZO_WARP) {
    float norm = zo_ld(x, c) * s;
    float g = (zo_ld(weight, c) * zo_ld(d, c) - norm * dot_mean) * s;
    zo_st(di, c, zo_ld(di, c) + g);
  }
}

/* Block (32, RMS_COL_ROWS): rows [row0, row0 + rows_per_chunk) of 32
 * columns; partial (chunks, C) row blockIdx.y. */
template <typename scalar_t>
static __global__ void rmsnorm_backward_partial_kernel(float *partial,
                                                       const scalar_t *__restrict__ dout,
                                                       const scalar_t *__restrict__ inp,
                                                       const float *__restrict__ rstd, int N, int C,
                                                       int rows_per_chunk) {
  __shared__ float part[RMS_COL_ROWS][ZO_WARP + 1];
  int c = blockIdx.x * ZO_WARP + threadIdx.x;
  int row0 = blockIdx.y * rows_per_chunk;
  int row1 = min(row0 + rows_per_chunk, N);
  float dw = 0.0f;
  if (c < C) {
    for (int r = row0 + threadIdx.y; r < row1; r += RMS_COL_ROWS) {
      size_t i = (size_t)r * C + c;
      dw += zo_ld(dout, i) * (zo_ld(inp, i) * rstd[r]);
    }
  }
  part[threadIdx.y][threadIdx.x] = dw;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int y = 1; y < RMS_COL_ROWS; y++) dw += part[y][threadIdx.x];
  partial[(size_t)blockIdx.y * C + c] = dw;
}

static __global__ void rmsnorm_backward_reduce_kernel(float *dweight, const float *partial,
                                                      int chunks, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int k = 0; k < chunks; k++) s += partial[(size_t)k * C + c];
  dweight[c] += s;
}

/* ---- per-head RMSNorm (Qwen3's q_norm, k_norm): row r = n H + h of D
 * elements at n ld + h D. Forward and dinp one warp per row (dinp
 * overwritten, may be dout: the column kernel runs first on the stream);
 * dweight the partials-then-reduce of rmsnorm_backward over strided rows. */

template <typename scalar_t>
static __global__ void rmsnorm_heads_forward_kernel(scalar_t *out, float *rstd, const scalar_t *inp,
                                                    const scalar_t *__restrict__ weight, float eps, int N,
                                                    int H, int D, int ld_out, int ld_inp) {
  const long row = (long)blockIdx.x * RMS_WARPS + threadIdx.y;
  if (row >= (long)N * H) return;
  const size_t n = (size_t)(row / H), hd = (size_t)(row % H) * (size_t)D;
  const scalar_t *x = inp + n * (size_t)ld_inp + hd;
  scalar_t *o = out + n * (size_t)ld_out + hd;
  float sq = 0.0f;
  for (int c = threadIdx.x; c < D; c += ZO_WARP) {
    float v = zo_ld(x, c);
    sq += v * v;
  }
  const float s = 1.0f / sqrtf(zo_warp_sum(sq) / (float)D + eps);
  /* In place (out == inp): every lane's reads above precede the warp sum's shuffles. */
  for (int c = threadIdx.x; c < D; c += ZO_WARP) zo_st(o, c, zo_ld(x, c) * s * zo_ld(weight, c));
  if (threadIdx.x == 0) rstd[row] = s;
}

template <typename scalar_t>
static __global__ void rmsnorm_heads_dinp_kernel(scalar_t *dinp, const scalar_t *dout,
                                                 const scalar_t *__restrict__ inp,
                                                 const scalar_t *__restrict__ weight,
                                                 const float *__restrict__ rstd, int N, int H, int D, int ld_d,
                                                 int ld_inp) {
  const long row = (long)blockIdx.x * RMS_WARPS + threadIdx.y;
  if (row >= (long)N * H) return;
  const size_t n = (size_t)(row / H), hd = (size_t)(row % H) * (size_t)D;
  const scalar_t *x = inp + n * (size_t)ld_inp + hd;
  const scalar_t *d = dout + n * (size_t)ld_d + hd;
  scalar_t *di = dinp + n * (size_t)ld_d + hd;
  const float s = rstd[row];
  float dot = 0.0f;
  for (int c = threadIdx.x; c < D; c += ZO_WARP) dot += zo_ld(weight, c) * zo_ld(d, c) * (zo_ld(x, c) * s);
  const float dot_mean = zo_warp_sum(dot) / (float)D;
  for (int c = threadIdx.x; c < D; c += ZO_WARP) {
    const float norm = zo_ld(x, c) * s;
    zo_st(di, c, (zo_ld(weight, c) * zo_ld(d, c) - norm * dot_mean) * s);
  }
}

/* As rmsnorm_backward_partial_kernel over the strided rows. */
template <typename scalar_t>
static __global__ void rmsnorm_heads_partial_kernel(float *partial, const scalar_t *__restrict__ dout,
                                                    const scalar_t *__restrict__ inp,
                                                    const float *__restrict__ rstd, long rows, int H, int D,
                                                    int ld_d, int ld_inp, int rows_per_chunk) {
  __shared__ float part[RMS_COL_ROWS][ZO_WARP + 1];
  const int c = blockIdx.x * ZO_WARP + threadIdx.x;
  const long row0 = (long)blockIdx.y * rows_per_chunk;
  const long row1 = min(row0 + rows_per_chunk, rows);
  float dw = 0.0f;
  if (c < D) {
    for (long r = row0 + threadIdx.y; r < row1; r += RMS_COL_ROWS) {
      const size_t n = (size_t)(r / H), hd = (size_t)(r % H) * (size_t)D + (size_t)c;
      dw += zo_ld(dout, n * (size_t)ld_d + hd) * (zo_ld(inp, n * (size_t)ld_inp + hd) * rstd[r]);
    }
  }
  part[threadIdx.y][threadIdx.x] = dw;
  __syncthreads();
  if (threadIdx.y != 0 || c >= D) return;
  for (int y = 1; y < RMS_COL_ROWS; y++) dw += part[y][threadIdx.x];
  partial[(size_t)blockIdx.y * D + c] = dw;
}

template <typename scalar_t>
static void rmsnorm_heads_forward(void *out, float *rstd, const void *inp, const void *weight, float eps,
                                  int N, int H, int D, int ld_out, int ld_inp, zo_stream_t stream) {
  dim3 block(ZO_WARP, RMS_WARPS);
  rmsnorm_heads_forward_kernel<scalar_t><<<zo_ceil_div((size_t)N * H, RMS_WARPS), block, 0,
                                           zo_cuda_stream(stream)>>>(
      (scalar_t *)out, rstd, (const scalar_t *)inp, (const scalar_t *)weight, eps, N, H, D, ld_out, ld_inp);
  ZO_CUDA_CHECK_LAUNCH();
}

template <typename scalar_t>
static void rmsnorm_heads_backward(void *dinp, float *dweight, const void *dout, const void *inp,
                                   const void *weight, const float *rstd, int N, int H, int D, int ld_d,
                                   int ld_inp, zo_stream_t stream) {
  cudaStream_t s = zo_cuda_stream(stream);
  const size_t rows = (size_t)N * H;
  if (dweight) { /* before the dinp kernel: dinp may be dout */
    unsigned col_blocks = zo_ceil_div((size_t)D, ZO_WARP);
    unsigned want = 2u * (unsigned)zo_cuda.prop.multiProcessorCount;
    unsigned chunks = want > col_blocks ? want / col_blocks : 1u;
    unsigned max_chunks = zo_ceil_div(rows, RMS_MIN_ROWS);
    const size_t fit = ZO_CUDA_WORKSPACE_BYTES / sizeof(float) / (size_t)D;
    ZO_ASSERT(fit >= 1);
    if (chunks > max_chunks) chunks = max_chunks;
    if (chunks > fit) chunks = (unsigned)fit;
    if (chunks < 1) chunks = 1;
    int rows_per_chunk = (int)zo_ceil_div(rows, chunks);
    chunks = zo_ceil_div(rows, (size_t)rows_per_chunk);
    float *partial = (float *)zo_cuda_workspace(stream);
    dim3 grid(col_blocks, chunks), col_block(ZO_WARP, RMS_COL_ROWS);
    rmsnorm_heads_partial_kernel<scalar_t><<<grid, col_block, 0, s>>>(
        partial, (const scalar_t *)dout, (const scalar_t *)inp, rstd, (long)rows, H, D, ld_d, ld_inp,
        rows_per_chunk);
    ZO_CUDA_CHECK_LAUNCH();
    rmsnorm_backward_reduce_kernel<<<zo_ceil_div((size_t)D, 256), 256, 0, s>>>(dweight, partial, (int)chunks,
                                                                               D);
    ZO_CUDA_CHECK_LAUNCH();
  }
  dim3 row_block(ZO_WARP, RMS_WARPS);
  rmsnorm_heads_dinp_kernel<scalar_t><<<zo_ceil_div(rows, RMS_WARPS), row_block, 0, s>>>(
      (scalar_t *)dinp, (const scalar_t *)dout, (const scalar_t *)inp, (const scalar_t *)weight, rstd, N, H, D,
      ld_d, ld_inp);
  ZO_CUDA_CHECK_LAUNCH();
}

template <typename scalar_t>
static void rmsnorm_forward(void *out, float *rstd, const void *inp, const void *weight, float eps,
                            int N, int C, zo_stream_t stream) {
  dim3 block(ZO_WARP, RMS_WARPS);
  rmsnorm_forward_kernel<scalar_t><<<zo_ceil_div((size_t)N, RMS_WARPS), block, 0,
                                     zo_cuda_stream(stream)>>>(
      (scalar_t *)out, rstd, (const scalar_t *)inp, (const scalar_t *)weight, eps, N, C);
  ZO_CUDA_CHECK_LAUNCH();
}

template <typename scalar_t>
static void rmsnorm_backward(void *dinp, float *dweight, const void *dout, const void *inp,
                             const void *weight, const float *rstd, int N, int C,
                             zo_stream_t stream) {
  cudaStream_t s = zo_cuda_stream(stream);
  dim3 row_block(ZO_WARP, RMS_WARPS);
  rmsnorm_backward_dinp_kernel<scalar_t><<<zo_ceil_div((size_t)N, RMS_WARPS), row_block, 0, s>>>(
      (scalar_t *)dinp, (const scalar_t *)dout, (const scalar_t *)inp, (const scalar_t *)weight,
      rstd, N, C);
  ZO_CUDA_CHECK_LAUNCH();
  if (!dweight) return; /* a frozen norm: no column reduction */

  unsigned col_blocks = zo_ceil_div((size_t)C, ZO_WARP);
  unsigned want = 2u * (unsigned)zo_cuda.prop.multiProcessorCount;
  unsigned chunks = want > col_blocks ? want / col_blocks : 1u;
  unsigned max_chunks = zo_ceil_div((size_t)N, RMS_MIN_ROWS);
  const size_t fit = ZO_CUDA_WORKSPACE_BYTES / sizeof(float) / (size_t)C; /* partial rows */
  ZO_ASSERT(fit >= 1);
  if (chunks > max_chunks) chunks = max_chunks;
  if (chunks > fit) chunks = (unsigned)fit;
  if (chunks < 1) chunks = 1;
  int rows_per_chunk = (int)zo_ceil_div((size_t)N, chunks);
  chunks = zo_ceil_div((size_t)N, (size_t)rows_per_chunk);
  float *partial = (float *)zo_cuda_workspace(stream);
  dim3 grid(col_blocks, chunks), col_block(ZO_WARP, RMS_COL_ROWS);
  rmsnorm_backward_partial_kernel<scalar_t><<<grid, col_block, 0, s>>>(
      partial, (const scalar_t *)dout, (const scalar_t *)inp, rstd, N, C, rows_per_chunk);
  ZO_CUDA_CHECK_LAUNCH();
  rmsnorm_backward_reduce_kernel<<<zo_ceil_div((size_t)C, 256), 256, 0, s>>>(dweight, partial,
                                                                             (int)chunks, C);
  ZO_CUDA_CHECK_LAUNCH();
}

extern "C" void zo_cuda_rmsnorm_forward(void *out, float *rstd, const void *inp, const void *weight,
                                        float eps, int N, int C, enum zo_dtype dt,
                                        zo_stream_t stream) {
  if (N == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, rmsnorm_forward, out, rstd, inp, weight, eps, N, C, stream);
}

extern "C" void zo_cuda_rmsnorm_backward(void *dinp, float *dweight, const void *dout,
                                         const void *inp, const void *weight, const float *rstd,
                                         int N, int C, enum zo_dtype dt, zo_stream_t stream) {
  if (N == 0 || C == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, rmsnorm_backward, dinp, dweight, dout, inp, weight, rstd, N, C, stream);
}

extern "C" void zo_cuda_rmsnorm_heads_forward(void *out, float *rstd, const void *inp, const void *weight,
                                              float eps, int N, int H, int D, int ld_out, int ld_inp,
                                              enum zo_dtype dt, zo_stream_t stream) {
  if (N == 0 || H == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, rmsnorm_heads_forward, out, rstd, inp, weight, eps, N, H, D, ld_out, ld_inp, stream);
}

extern "C" void zo_cuda_rmsnorm_heads_backward(void *dinp, float *dweight, const void *dout, const void *inp,
                                               const void *weight, const float *rstd, int N, int H, int D,
                                               int ld_d, int ld_inp, enum zo_dtype dt, zo_stream_t stream) {
  if (N == 0 || H == 0 || D == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, rmsnorm_heads_backward, dinp, dweight, dout, inp, weight, rstd, N, H, D, ld_d, ld_inp,
                      stream);
}
