/* Fully connected layer (out = inp @ weight^T + bias) and its backward as
 * cuBLASLt GEMMs (gemm.cu: CUBLAS_COMPUTE_32F, so fp32 stays fp32 without
 * TF32 and bf16/fp16 accumulate in fp32), plus a column-sum kernel for dbias.
 * Per dtype dt: out and dinp are dt (rounded once from the fp32 sums, the
 * bias added before that rounding); dweight and dbias are fp32 and
 * accumulate, so their GEMM has dt A and B but an fp32 D with beta 1.
 *
 * Row major onto cuBLASLt's column major: a row-major (R, K) matrix with row
 * stride ld is, byte for byte, the column-major (K, R) matrix with leading
 * dimension ld, i.e. its transpose. So a row-major product Y = X @ W^T is
 * computed as the column-major Y^T = W @ X^T with the operands' memory as is:
 *   forward   out^T (OC,N) = op_T(weight as col-major (C,OC), ld C) @ inp as col-major (C,N), ld C
 *             m = OC, n = N, k = C; the bias (OC) runs along D's rows: EPILOGUE_BIAS.
 *   dinp      dinp^T (C,N) = weight as col-major (C,OC) @ dout as col-major (OC,N)
 *             m = C, n = N, k = OC, no transposes, beta 0 (overwrite).
 *   dweight   dweight^T (C,OC) = inp as col-major (C,N) @ op_T(dout as col-major (OC,N))
 *             m = C, n = OC, k = N, beta 1 (+=), D fp32.
 * Where cuBLASLt offers no bias epilogue for a layout or type, out is first
 * filled with the bias rows and the GEMM adds to it (beta 1): C is read into
 * fp32 and D rounded once, the same single rounding as the epilogue.
 * dbias is a separate column sum: CUBLASLT_EPILOGUE_BGRADB overwrites rather
 * than accumulates, and in dt rather than fp32. It is deterministic: blocks
 * write per-chunk partials to the stream's cuBLASLt workspace (the dweight
 * GEMM before it on the same stream is done with it by then: stream order),
 * added in chunk order by one thread per column; no atomics. */
#include "matmul.cuh"

#include "gemm.cuh"

#include <string.h>

/* ---- bias rows: the fallback when there is no bias epilogue ---------------------- */

template <typename scalar_t>
static __global__ void bias_rows_kernel(scalar_t *out, const scalar_t *bias, int N, int OC) {
  const size_t n = (size_t)N * OC;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = bias[i % (size_t)OC];
}

template <typename scalar_t>
static void bias_rows(void *out, const void *bias, int N, int OC, zo_stream_t stream) {
  const size_t n = (size_t)N * OC;
  const int block = 256;
  bias_rows_kernel<scalar_t><<<zo_cuda_grid_1d(n, block), block, 0, zo_cuda_stream(stream)>>>(
      (scalar_t *)out, (const scalar_t *)bias, N, OC);
  ZO_CUDA_CHECK_LAUNCH();
}

/* ---- dbias: column sums of dout (N, OC), added to dbias ------------------------ */

#define COLSUM_ROWS 8      /* threadIdx.y extent: rows summed side by side */
#define COLSUM_MIN_ROWS 64 /* rows per block at least, before splitting the rows */

/* Block (32, COLSUM_ROWS) sums rows [row0, row1) of 32 columns in fp32 in a
 * fixed order into partial (chunks, OC) row blockIdx.y. */
template <typename scalar_t>
static __global__ void colsum_partial_kernel(float *partial, const scalar_t *dout, int N, int OC,
                                             int rows_per_chunk) {
  __shared__ float part[COLSUM_ROWS][ZO_WARP + 1];
  int c = blockIdx.x * ZO_WARP + threadIdx.x;
  int row0 = blockIdx.y * rows_per_chunk;
  int row1 = min(row0 + rows_per_chunk, N);
  float s = 0.0f;
  if (c < OC)
    for (int r = row0 + threadIdx.y; r < row1; r += COLSUM_ROWS)
      s += zo_ld(dout, (size_t)r * OC + c);
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || c >= OC) return;
  for (int y = 1; y < COLSUM_ROWS; y++) s += part[y][threadIdx.x];
  partial[(size_t)blockIdx.y * OC + c] = s;
}

static __global__ void colsum_reduce_kernel(float *dbias, const float *partial, int chunks,
                                            int OC) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= OC) return;
  float s = 0.0f;
  for (int k = 0; k < chunks; k++) s += partial[(size_t)k * OC + c];
  dbias[c] += s;
}

template <typename scalar_t>
static void colsum_add(float *dbias, const void *dout, int N, int OC, zo_stream_t stream) {
  unsigned col_blocks = zo_ceil_div((size_t)OC, ZO_WARP);
  /* Enough blocks to cover the SMs twice, each with at least COLSUM_MIN_ROWS rows. */
  unsigned want = 2u * (unsigned)zo_cuda.prop.multiProcessorCount;
  unsigned chunks = want > col_blocks ? want / col_blocks : 1u;
  unsigned max_chunks = zo_ceil_div((size_t)N, COLSUM_MIN_ROWS);
  const size_t fit = ZO_CUDA_WORKSPACE_BYTES / sizeof(float) / (size_t)OC; /* partial rows */
  ZO_ASSERT(fit >= 1);
  if (chunks > max_chunks) chunks = max_chunks;
  if (chunks > fit) chunks = (unsigned)fit;
  if (chunks < 1) chunks = 1;
  int rows_per_chunk = (int)zo_ceil_div((size_t)N, chunks);
  chunks = zo_ceil_div((size_t)N, (size_t)rows_per_chunk);
  cudaStream_t s = zo_cuda_stream(stream);
  float *partial = (float *)zo_cuda_workspace(stream);
  dim3 grid(col_blocks, chunks), block(ZO_WARP, COLSUM_ROWS);
  colsum_partial_kernel<scalar_t><<<grid, block, 0, s>>>(partial, (const scalar_t *)dout, N, OC,
                                                         rows_per_chunk);
  ZO_CUDA_CHECK_LAUNCH();
  colsum_reduce_kernel<<<zo_ceil_div((size_t)OC, 256), 256, 0, s>>>(dbias, partial, (int)chunks,
                                                                    OC);
  ZO_CUDA_CHECK_LAUNCH();
}

/* ---- the ops ----------------------------------------------------------------------- */

extern "C" void zo_cuda_matmul_forward(void *out, const void *inp, const void *weight,
                                       const void *bias, int N, int C, int OC, enum zo_dtype dt,
                                       zo_stream_t stream) {
  const cudaDataType_t type = zo_cuda_data_type(dt);
  if (N == 0 || OC == 0) return;
  if (C == 0) { /* an empty sum: out is the bias, or zero */
    if (bias)
      ZO_CUDA_DT_DISPATCH(dt, bias_rows, out, bias, N, OC, stream);
    else
      ZO_CUDA_CHECK(
          cudaMemsetAsync(out, 0, (size_t)N * OC * zo_dtype_size(dt), zo_cuda_stream(stream)));
    return;
  }
  struct zo_gemm g;
  memset(&g, 0, sizeof g);
  g.trans_a = true;
  g.m = OC;
  g.n = N;
  g.k = C;
  g.ab_type = type;
  g.d_type = type;
  g.a = weight;
  g.lda = C;
  g.b = inp;
  g.ldb = C;
  g.d = out;
  g.ldd = OC;
  g.batch = 1;
  g.alpha = 1.0f;
  g.beta = 0.0f;
  g.bias = bias; /* the epilogue, or a separate kernel where cuBLASLt has none (gemm.cu) */
  zo_cuda_gemm(&g, stream);
}

extern "C" void zo_cuda_matmul_backward(void *dinp, float *dweight, float *dbias, const void *dout,
                                        const void *inp, const void *weight, int N, int C, int OC,
                                        enum zo_dtype dt, zo_stream_t stream) {
  const cudaDataType_t type = zo_cuda_data_type(dt);
  if (N == 0 || C == 0) return; /* nothing to add; an empty dinp */
  if (OC == 0) {                /* dinp is an empty sum */
    if (dinp)
      ZO_CUDA_CHECK(
          cudaMemsetAsync(dinp, 0, (size_t)N * C * zo_dtype_size(dt), zo_cuda_stream(stream)));
    return;
  }
  struct zo_gemm g;
  if (dinp) {
    memset(&g, 0, sizeof g);
    g.m = C;
    g.n = N;
    g.k = OC;
    g.ab_type = type;
    g.d_type = type;
    g.a = weight;
    g.lda = C;
    g.b = dout;
    g.ldb = OC;
    g.d = dinp;
    g.ldd = C;
    g.batch = 1;
    g.alpha = 1.0f;
    g.beta = 0.0f;
    zo_cuda_gemm(&g, stream);
  }
  if (!dweight) { /* a frozen weight: the input gradient only */
    if (dbias) ZO_CUDA_DT_DISPATCH(dt, colsum_add, dbias, dout, N, OC, stream);
    return;
  }
  memset(&g, 0, sizeof g);
  g.trans_b = true;
  g.m = C;
  g.n = OC;
  g.k = N;
  g.ab_type = type;
  g.d_type = CUDA_R_32F;
  g.a = inp;
  g.lda = C;
  g.b = dout;
  g.ldb = OC;
  g.d = dweight;
  g.ldd = C;
  g.batch = 1;
  g.alpha = 1.0f;
  g.beta = 1.0f;
  zo_cuda_gemm(&g, stream);
  if (dbias) ZO_CUDA_DT_DISPATCH(dt, colsum_add, dbias, dout, N, OC, stream);
}
