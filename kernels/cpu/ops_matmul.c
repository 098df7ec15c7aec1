/* Fully connected layer, out = inp @ weight^T + bias, and its backward, as
 * OpenBLAS sgemm calls (fp32 accumulation). fp32 operands go to sgemm as they
 * are; sgemm then runs on its own OpenMP pool, so it is never called from
 * inside one of our parallel regions. bf16/fp16 operands are computed tile
 * by tile (zo_cpu_gemm): threads split the output tiles, widen their tiles of
 * both operands into per-thread fp32 scratch and call a single-threaded
 * sgemm on them (OpenBLAS runs single-threaded inside a parallel region),
 * summing over the reduction dimension in an fp32 tile that is stored once:
 * rounded to the dtype (out, dinp, bias added before rounding) or added to an
 * fp32 gradient (dweight). Tiles are small enough that re-widening an
 * operand tile for every output tile it meets costs a few percent. bf16
 * GEMMs go to oneDNN's AMX / AVX512_BF16 kernels instead when the CPU has
 * them (gemm_onednn.c; ZO_CPU_GEMM=fallback forces the tiles above). */
#include "cpu.h"
#include "gemm_onednn.h"
#include "ops_half.h"
#include "ops_math.h"

#include <cblas.h>

#define ZO_GEMM_TM 256 /* rows of an output tile */
#define ZO_GEMM_TN 256 /* columns of an output tile */
#define ZO_GEMM_TK 512 /* depth of one widened operand tile */

/* dst (rows, cols), ld cols = src rows [r0, r0+rows), columns [c0, c0+cols) of
 * a row-major dt matrix with leading dimension ld. */
ZO_INLINE void widen_tile(float *dst, const void *src, int ld, int r0, int c0, int rows, int cols,
                          enum zo_dtype dt) {
  for (int r = 0; r < rows; r++) {
    const size_t o = (size_t)(r0 + r) * (size_t)ld + (size_t)c0;
    float *d = dst + (size_t)r * cols;
#pragma omp simd
    for (int c = 0; c < cols; c++) d[c] = zo_ld(src, o + c, dt);
  }
}

/* Stores the fp32 tile acc (rows, cols) at rows r0.., columns c0.. of C. */
ZO_INLINE void store_tile(void *C, int ldc, bool accumulate_f32, const void *bias, const float *acc,
                          int r0, int c0, int rows, int cols, enum zo_dtype dt) {
  for (int r = 0; r < rows; r++) {
    const size_t o = (size_t)(r0 + r) * (size_t)ldc + (size_t)c0;
    const float *a = acc + (size_t)r * cols;
    if (accumulate_f32) {
      float *c32 = (float *)C + o;
#pragma omp simd
      for (int c = 0; c < cols; c++) c32[c] += a[c];
    } else if (bias) {
#pragma omp simd
      for (int c = 0; c < cols; c++) zo_st(C, o + c, a[c] + zo_ld(bias, (size_t)(c0 + c), dt), dt);
    } else {
#pragma omp simd
      for (int c = 0; c < cols; c++) zo_st(C, o + c, a[c], dt);
    }
  }
}

/* One output tile of C = op(A) @ op(B): widen, multiply, sum over K tiles. */
ZO_INLINE void gemm_tile(bool ta, bool tb, int K, const void *A, int lda, const void *B, int ldb,
                         void *C, int ldc, bool accumulate_f32, const void *bias, int m0, int n0,
                         int tm, int tn, enum zo_dtype dt) {
  float *acc = zo_cpu_scratch((size_t)ZO_GEMM_TM * ZO_GEMM_TN +
                              2 * (size_t)ZO_GEMM_TK * (ZO_GEMM_TM > ZO_GEMM_TN ? ZO_GEMM_TM : ZO_GEMM_TN));
  float *a = acc + (size_t)ZO_GEMM_TM * ZO_GEMM_TN;
  float *b = a + (size_t)ZO_GEMM_TK * (ZO_GEMM_TM > ZO_GEMM_TN ? ZO_GEMM_TM : ZO_GEMM_TN);
  for (int k0 = 0; k0 < K; k0 += ZO_GEMM_TK) {
    const int tk = K - k0 < ZO_GEMM_TK ? K - k0 : ZO_GEMM_TK;
    /* op(A) (tm, tk): A is (M, K) row-major, or (K, M) when transposed. */
    if (ta) widen_tile(a, A, lda, k0, m0, tk, tm, dt);
    else widen_tile(a, A, lda, m0, k0, tm, tk, dt);
    if (tb) widen_tile(b, B, ldb, n0, k0, tn, tk, dt);
    else widen_tile(b, B, ldb, k0, n0, tk, tn, dt);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, tm, tn,
                tk, 1.0f, a, ta ? tm : tk, b, tb ? tk : tn, k0 == 0 ? 0.0f : 1.0f, acc, tn);
  }
  store_tile(C, ldc, accumulate_f32, bias, acc, m0, n0, tm, tn, dt);
}

/* Row-major C (M, N) = op(A) (M, K) @ op(B) (K, N) over dt operands; C is dt
 * (overwritten, plus bias (N) when not NULL) or, with accumulate_f32, fp32
 * and added to. */
void zo_cpu_gemm(bool ta, bool tb, int M, int N, int K, const void *A, int lda, const void *B,
                 int ldb, void *C, int ldc, bool accumulate_f32, const void *bias, enum zo_dtype dt) {
  if (dt == ZO_BF16 && zo_cpu_gemm_onednn_on()) {
    zo_cpu_gemm_onednn_bf16(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, accumulate_f32, bias);
    return;
  }
  const int mt = (M + ZO_GEMM_TM - 1) / ZO_GEMM_TM, nt = (N + ZO_GEMM_TN - 1) / ZO_GEMM_TN;
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int i = 0; i < mt; i++) {
    for (int j = 0; j < nt; j++) {
      const int m0 = i * ZO_GEMM_TM, n0 = j * ZO_GEMM_TN;
      const int tm = M - m0 < ZO_GEMM_TM ? M - m0 : ZO_GEMM_TM;
      const int tn = N - n0 < ZO_GEMM_TN ? N - n0 : ZO_GEMM_TN;
      ZO_DT_DISPATCH(dt, gemm_tile, ta, tb, K, A, lda, B, ldb, C, ldc, accumulate_f32, bias, m0, n0,
                     tm, tn);
    }
  }
}

void zo_cpu_matmul_forward(void *out, const void *inp, const void *weight, const void *bias, int N,
                           int C, int OC, enum zo_dtype dt) {
  if (dt != ZO_F32) {
    zo_cpu_gemm(false, true, N, OC, C, inp, C, weight, C, out, OC, false, bias, dt);
    return;
  }
  /* Pre-filling out with the bias and accumulating (beta = 1) saves a pass
   * over out: OpenBLAS implements beta = 0 as a separate zeroing pass. */
  float beta = 0.0f;
  float *o32 = out;
  const float *b32 = bias;
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
      float *o = o32 + (size_t)n * OC;
#pragma omp simd
      for (int oc = 0; oc < OC; oc++) o[oc] = b32[oc];
    }
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, beta, o32,
              OC);
}

/* Columns [c0, c0 + width) of dbias += column sums of dout (N, OC): summed
 * block by block, added to dbias once (see layernorm backward). */
ZO_INLINE void dbias_cols(float *dbias, const void *dout, int N, int OC, int c0, int width,
                          enum zo_dtype dt) {
  float db[ZO_COL_BLOCK] = {0};
  for (int n = 0; n < N; n++) {
    const size_t o = (size_t)n * OC + (size_t)c0;
#pragma omp simd
    for (int c = 0; c < width; c++) db[c] += zo_ld(dout, o + c, dt);
  }
#pragma omp simd
  for (int c = 0; c < width; c++) dbias[c0 + c] += db[c];
}

void zo_cpu_matmul_backward(void *dinp, float *dweight, float *dbias, const void *dout,
                            const void *inp, const void *weight, int N, int C, int OC,
                            enum zo_dtype dt) {
  if (dt != ZO_F32) {
    if (dinp) zo_cpu_gemm(false, false, N, C, OC, dout, OC, weight, C, dinp, C, false, NULL, dt);
    if (dweight) zo_cpu_gemm(true, false, OC, C, N, dout, OC, inp, C, dweight, C, true, NULL, dt);
  } else {
    if (dinp)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C,
                  0.0f, dinp, C);
    if (dweight)
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f,
                  dweight, C);
  }
  if (!dbias) return;
  int n_blocks = (OC + ZO_COL_BLOCK - 1) / ZO_COL_BLOCK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < n_blocks; blk++) {
    int c0 = blk * ZO_COL_BLOCK;
    int width = OC - c0 < ZO_COL_BLOCK ? OC - c0 : ZO_COL_BLOCK;
    ZO_DT_DISPATCH(dt, dbias_cols, dbias, dout, N, OC, c0, width);
  }
}
