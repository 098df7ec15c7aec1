/* LayerNorm over the last dimension (PyTorch semantics: biased variance,
 * eps 1e-5), forward saving mean and rstd per row, and backward, over fp32,
 * bf16 or fp16 activations and weights; statistics and weight gradients are
 * fp32. Statistics use two passes (mean, then centred squares): no E[x^2] -
 * E[x]^2 cancellation. Backward makes one pass over rows for dinp and one
 * over column blocks for dweight/dbias, so threads never share an
 * accumulator; dweight and dbias NULL (a frozen norm) skip the column pass,
 * and either alone skips its own sum. The row and column workers are instantiated per dtype inside
 * the parallel loops (ZO_DT_DISPATCH), never around them: OpenMP outlines a
 * region before inlining, which would leave the dtype a run-time value. */
#include "cpu.h"
#include "ops_half.h"
#include "ops_math.h"

#include <math.h>

ZO_INLINE void ln_forward_row(void *out, float *mean, float *rstd, const void *inp,
                              const void *weight, const void *bias, int n, int C,
                              enum zo_dtype dt) {
  const size_t r = (size_t)n * C;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int c = 0; c < C; c++) sum += zo_ld(inp, r + c, dt);
  float m = sum / (float)C;
  float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
  for (int c = 0; c < C; c++) {
    const float x = zo_ld(inp, r + c, dt);
    sq += (x - m) * (x - m);
  }
  float s = 1.0f / sqrtf(sq / (float)C + 1e-5f);
#pragma omp simd
  for (int c = 0; c < C; c++)
    zo_st(out, r + c, (zo_ld(inp, r + c, dt) - m) * s * zo_ld(weight, c, dt) + zo_ld(bias, c, dt), dt);
  mean[n] = m;
  rstd[n] = s;
}

void zo_cpu_layernorm_forward(void *out, float *mean, float *rstd, const void *inp,
                              const void *weight, const void *bias, int N, int C,
                              enum zo_dtype dt) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) ZO_DT_DISPATCH(dt, ln_forward_row, out, mean, rstd, inp, weight, bias, n, C);
}

/* dnorm = weight * dout; dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) */
ZO_INLINE void ln_backward_row(void *dinp, const void *dout, const void *inp, const void *weight,
                               float m, float s, int n, int C, enum zo_dtype dt) {
  const size_t r = (size_t)n * C;
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
#pragma omp simd reduction(+ : dnorm_sum, dnorm_norm_sum)
  for (int c = 0; c < C; c++) {
    float dnorm = zo_ld(weight, c, dt) * zo_ld(dout, r + c, dt);
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * (zo_ld(inp, r + c, dt) - m) * s;
  }
  float dnorm_mean = dnorm_sum / (float)C;
  float dnorm_norm_mean = dnorm_norm_sum / (float)C;
#pragma omp simd
  for (int c = 0; c < C; c++) {
    float norm = (zo_ld(inp, r + c, dt) - m) * s;
    float d = (zo_ld(weight, c, dt) * zo_ld(dout, r + c, dt) - dnorm_mean - norm * dnorm_norm_mean) * s;
    zo_st(dinp, r + c, zo_ld(dinp, r + c, dt) + d, dt);
  }
}

/* Columns [c0, c0 + width) of dweight and dbias: summed over rows first,
 * then added once: adding each row straight into dweight would round
 * against its (possibly large) accumulated value N times. */
ZO_INLINE void ln_backward_cols(float *dweight, float *dbias, const void *dout, const void *inp,
                                const float *mean, const float *rstd, int N, int C, int c0,
                                int width, enum zo_dtype dt) {
  float dw[ZO_COL_BLOCK] = {0}, db[ZO_COL_BLOCK] = {0};
  for (int n = 0; n < N; n++) {
    const size_t r = (size_t)n * C + (size_t)c0;
    float m = mean[n], s = rstd[n];
#pragma omp simd
    for (int c = 0; c < width; c++) {
      const float d = zo_ld(dout, r + c, dt);
      dw[c] += d * (zo_ld(inp, r + c, dt) - m) * s;
      db[c] += d;
    }
  }
  if (dweight) {
#pragma omp simd
    for (int c = 0; c < width; c++) dweight[c0 + c] += dw[c];
  }
  if (dbias) {
#pragma omp simd
    for (int c = 0; c < width; c++) dbias[c0 + c] += db[c];
  }
}

void zo_cpu_layernorm_backward(void *dinp, float *dweight, float *dbias, const void *dout,
                               const void *inp, const void *weight, const float *mean,
                               const float *rstd, int N, int C, enum zo_dtype dt) {
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int n = 0; n < N; n++)
      ZO_DT_DISPATCH(dt, ln_backward_row, dinp, dout, inp, weight, mean[n], rstd[n], n, C);

    /* dweight and dbias NULL: a frozen norm, no column pass. */
    int n_blocks = dweight || dbias ? (C + ZO_COL_BLOCK - 1) / ZO_COL_BLOCK : 0;
#pragma omp for schedule(static)
    for (int blk = 0; blk < n_blocks; blk++) {
      int c0 = blk * ZO_COL_BLOCK;
      int width = C - c0 < ZO_COL_BLOCK ? C - c0 : ZO_COL_BLOCK;
      ZO_DT_DISPATCH(dt, ln_backward_cols, dweight, dbias, dout, inp, mean, rstd, N, C, c0, width);
    }
  }
}
