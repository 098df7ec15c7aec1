/* RMSNorm over the last dimension (Hugging Face LlamaRMSNorm computed in
 * fp32): out = x * rstd * weight with rstd = 1 / sqrt(mean(x^2) + eps) saved
 * per row, and backward, over fp32, bf16 or fp16 activations and weights;
 * rstd and the weight gradient are fp32. No centring, so one pass gives the
 * statistic. Backward makes one pass over rows for dinp and one over column
 * blocks for dweight, each block summing its columns over the rows in row
 * order: threads never share an accumulator and dweight does not depend on
 * the thread count. The workers are instantiated per dtype inside the
 * parallel loops (ZO_DT_DISPATCH), as in ops_layernorm.c. The per-head
 * variant (Qwen3's q/k norms, strided rows inside a qkv row) is at the end. */
#include "cpu.h"
#include "ops_half.h"
#include "ops_math.h"

#include <math.h>

ZO_INLINE void rms_forward_row(void *out, float *rstd, const void *inp, const void *weight,
                               float eps, int n, int C, enum zo_dtype dt) {
  const size_t r = (size_t)n * C;
  float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
  for (int c = 0; c < C; c++) {
    const float x = zo_ld(inp, r + c, dt);
    sq += x * x;
  }
  const float s = 1.0f / sqrtf(sq / (float)C + eps);
  /* (x * rstd) * weight: Hugging Face's association. */
#pragma omp simd
  for (int c = 0; c < C; c++) zo_st(out, r + c, zo_ld(inp, r + c, dt) * s * zo_ld(weight, c, dt), dt);
  rstd[n] = s;
}

void zo_cpu_rmsnorm_forward(void *out, float *rstd, const void *inp, const void *weight, float eps,
                            int N, int C, enum zo_dtype dt) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) ZO_DT_DISPATCH(dt, rms_forward_row, out, rstd, inp, weight, eps, n, C);
}

/* With norm = x * rstd and dnorm = weight * dout:
 * dinp += rstd * (dnorm - norm * mean(dnorm * norm)). */
ZO_INLINE void rms_backward_row(void *dinp, const void *dout, const void *inp, const void *weight,
                                float s, int n, int C, enum zo_dtype dt) {
  const size_t r = (size_t)n * C;
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int c = 0; c < C; c++)
    dot += zo_ld(weight, c, dt) * zo_ld(dout, r + c, dt) * (zo_ld(inp, r + c, dt) * s);
  const float dot_mean = dot / (float)C;
#pragma omp simd
  for (int c = 0; c < C; c++) {
    const float norm = zo_ld(inp, r + c, dt) * s;
    const float d = (zo_ld(weight, c, dt) * zo_ld(dout, r + c, dt) - norm * dot_mean) * s;
    zo_st(dinp, r + c, zo_ld(dinp, r + c, dt) + d, dt);
  }
}

/* Columns [c0, c0 + width) of dweight, summed over rows first and then added
 * once (as ln_backward_cols). */
ZO_INLINE void rms_backward_cols(float *dweight, const void *dout, const void *inp,
                                 const float *rstd, int N, int C, int c0, int width,
                                 enum zo_dtype dt) {
  float dw[ZO_COL_BLOCK] = {0};
  for (int n = 0; n < N; n++) {
    const size_t r = (size_t)n * C + (size_t)c0;
    const float s = rstd[n];
#pragma omp simd
    for (int c = 0; c < width; c++) dw[c] += zo_ld(dout, r + c, dt) * (zo_ld(inp, r + c, dt) * s);
  }
#pragma omp simd
  for (int c = 0; c < width; c++) dweight[c0 + c] += dw[c];
}

void zo_cpu_rmsnorm_backward(void *dinp, float *dweight, const void *dout, const void *inp,
                             const void *weight, const float *rstd, int N, int C,
                             enum zo_dtype dt) {
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int n = 0; n < N; n++)
      ZO_DT_DISPATCH(dt, rms_backward_row, dinp, dout, inp, weight, rstd[n], n, C);

    /* dweight NULL: a frozen norm, no column pass. */
    int n_blocks = dweight ? (C + ZO_COL_BLOCK - 1) / ZO_COL_BLOCK : 0;
#pragma omp for schedule(static)
    for (int blk = 0; blk < n_blocks; blk++) {
      int c0 = blk * ZO_COL_BLOCK;
      int width = C - c0 < ZO_COL_BLOCK ? C - c0 : ZO_COL_BLOCK;
      ZO_DT_DISPATCH(dt, rms_backward_cols, dweight, dout, inp, rstd, N, C, c0, width);
    }
  }
}

/* ---- per-head RMSNorm (Qwen3's q_norm, k_norm) ----------------------------
 * Row k = n H + h of N H rows of D elements at n ld + h D: the rows of
 * rmsnorm_forward strided through a fused qkv row. The backward overwrites
 * dinp (the rows are q or k inside the qkv gradient, which nothing else
 * writes); dweight sums one column per task over every row in row order. */

ZO_INLINE void rmsh_forward_row(void *out, float *rstd, const void *inp, const void *weight, float eps,
                                size_t ro, size_t ri, size_t k, int D, enum zo_dtype dt) {
  float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
  for (int d = 0; d < D; d++) {
    const float x = zo_ld(inp, ri + d, dt);
    sq += x * x;
  }
  const float s = 1.0f / sqrtf(sq / (float)D + eps);
#pragma omp simd
  for (int d = 0; d < D; d++) zo_st(out, ro + d, zo_ld(inp, ri + d, dt) * s * zo_ld(weight, d, dt), dt);
  rstd[k] = s;
}

void zo_cpu_rmsnorm_heads_forward(void *out, float *rstd, const void *inp, const void *weight, float eps,
                                  int N, int H, int D, int ld_out, int ld_inp, enum zo_dtype dt) {
  const long rows = (long)N * H;
#pragma omp parallel for schedule(static)
  for (long k = 0; k < rows; k++) {
    const size_t n = (size_t)(k / H), hd = (size_t)(k % H) * (size_t)D;
    ZO_DT_DISPATCH(dt, rmsh_forward_row, out, rstd, inp, weight, eps, n * (size_t)ld_out + hd,
                   n * (size_t)ld_inp + hd, (size_t)k, D);
  }
}

/* dinp = rstd * (dnorm - norm * mean(dnorm * norm)), overwriting; dinp may
 * be dout (each element is read before its own write). */
ZO_INLINE void rmsh_backward_row(void *dinp, const void *dout, const void *inp, const void *weight, float s,
                                 size_t rd, size_t ri, int D, enum zo_dtype dt) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int d = 0; d < D; d++) dot += zo_ld(weight, d, dt) * zo_ld(dout, rd + d, dt) * (zo_ld(inp, ri + d, dt) * s);
  const float dot_mean = dot / (float)D;
#pragma omp simd
  for (int d = 0; d < D; d++) {
    const float norm = zo_ld(inp, ri + d, dt) * s;
    zo_st(dinp, rd + d, (zo_ld(weight, d, dt) * zo_ld(dout, rd + d, dt) - norm * dot_mean) * s, dt);
  }
}

/* Column d of dweight: the rows' products in row order, then added once. */
ZO_INLINE void rmsh_backward_col(float *dweight, const void *dout, const void *inp, const float *rstd, int N,
                                 int H, int D, int ld_d, int ld_inp, int d, enum zo_dtype dt) {
  float dw = 0.0f;
  for (int n = 0; n < N; n++)
    for (int h = 0; h < H; h++) {
      const size_t hd = (size_t)h * (size_t)D + (size_t)d;
      dw += zo_ld(dout, (size_t)n * ld_d + hd, dt) *
            (zo_ld(inp, (size_t)n * ld_inp + hd, dt) * rstd[(size_t)n * H + h]);
    }
  dweight[d] += dw;
}

void zo_cpu_rmsnorm_heads_backward(void *dinp, float *dweight, const void *dout, const void *inp,
                                   const void *weight, const float *rstd, int N, int H, int D, int ld_d,
                                   int ld_inp, enum zo_dtype dt) {
  const long rows = (long)N * H;
  /* The column sums read dout before the row pass overwrites it (dinp may be dout). */
  if (dweight) {
#pragma omp parallel for schedule(static)
    for (int d = 0; d < D; d++)
      ZO_DT_DISPATCH(dt, rmsh_backward_col, dweight, dout, inp, rstd, N, H, D, ld_d, ld_inp, d);
  }
#pragma omp parallel for schedule(static)
  for (long k = 0; k < rows; k++) {
    const size_t n = (size_t)(k / H), hd = (size_t)(k % H) * (size_t)D;
    ZO_DT_DISPATCH(dt, rmsh_backward_row, dinp, dout, inp, weight, rstd[k], n * (size_t)ld_d + hd,
                   n * (size_t)ld_inp + hd, D);
  }
}
