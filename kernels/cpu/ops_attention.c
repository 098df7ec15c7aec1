/* Causal multi-head self-attention, forward and backward, one (batch, head)
 * pair at a time: GEMMs on the strided q, k, v views of qkv (leading dimension
 * 3C) and a row-wise fp32 softmax. Rows are processed in blocks of ZO_ATT_BLOCK
 * so each GEMM covers only the causal staircase (about half of T x T) and the
 * block of att it produces is still in cache when the next GEMM reads it.
 * Threads split the (batch, head) pairs and each sgemm call runs
 * single-threaded inside that region (OpenBLAS does so by itself when called
 * in a parallel region), which measured faster than threaded sgemm per head. */
#include "cpu.h"
#include "ops_math.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#define ZO_ATT_BLOCK 64 /* rows (queries) per block */

/* One head: q, k, v (T, hs) with row stride 3C; out (T, hs) with row stride C;
 * att (T, T). */
static void attention_forward_head(float *out, float *att, const float *q, const float *k,
                                   const float *v, int T, int C, int hs) {
  const int ld = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  for (int i0 = 0; i0 < T; i0 += ZO_ATT_BLOCK) {
    int i1 = i0 + ZO_ATT_BLOCK < T ? i0 + ZO_ATT_BLOCK : T;
    float *att_blk = att + (size_t)i0 * T;
    /* Scores of queries [i0, i1) against keys [0, i1). */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, i1, hs, scale,
                q + (size_t)i0 * ld, ld, k, ld, 0.0f, att_blk, T);
    for (int i = i0; i < i1; i++) {
      float *row = att + (size_t)i * T;
      float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
      for (int j = 0; j <= i; j++) maxv = row[j] > maxv ? row[j] : maxv;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j <= i; j++) {
        row[j] = zo_expf(row[j] - maxv);
        sum += row[j];
      }
      float inv = 1.0f / sum;
#pragma omp simd
      for (int j = 0; j <= i; j++) row[j] *= inv;
      memset(row + i + 1, 0, (size_t)(T - i - 1) * sizeof(float));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i1 - i0, hs, i1, 1.0f, att_blk, T, v,
                ld, 0.0f, out + (size_t)i0 * C, C);
  }
}

void zo_cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                              int NH) {
  ZO_ASSERT(C % NH == 0);
  const int hs = C / NH;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      const float *q = qkv + (size_t)b * T * 3 * C + (size_t)h * hs;
      attention_forward_head(out + (size_t)b * T * C + (size_t)h * hs,
                             att + ((size_t)b * NH + h) * T * T, q, q + C, q + 2 * C, T, C, hs);
    }
  }
}

/* One head, with the strides of attention_forward_head; dq, dk, dv (T, hs) with
 * row stride 3C, dout (T, hs) with row stride C, datt (T, T) scratch. */
static void attention_backward_head(float *dq, float *dk, float *dv, float *datt, const float *dout,
                                    const float *q, const float *k, const float *v,
                                    const float *att, int T, int C, int hs) {
  const int ld = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  /* Row blocks: datt = dout @ v^T, then softmax backward in place (scaled, so
   * datt becomes d(q k^T)), then dq = datt @ k. */
  for (int i0 = 0; i0 < T; i0 += ZO_ATT_BLOCK) {
    int i1 = i0 + ZO_ATT_BLOCK < T ? i0 + ZO_ATT_BLOCK : T;
    float *datt_blk = datt + (size_t)i0 * T;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, i1, hs, 1.0f,
                dout + (size_t)i0 * C, C, v, ld, 0.0f, datt_blk, T);
    for (int i = i0; i < i1; i++) {
      const float *a = att + (size_t)i * T;
      float *da = datt + (size_t)i * T;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int j = 0; j <= i; j++) dot += a[j] * da[j];
#pragma omp simd
      for (int j = 0; j <= i; j++) da[j] = scale * a[j] * (da[j] - dot);
      /* The staircase GEMMs below read up to column i1 of this row. */
      memset(da + i + 1, 0, (size_t)(i1 - i - 1) * sizeof(float));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i1 - i0, hs, i1, 1.0f, datt_blk, T, k,
                ld, 0.0f, dq + (size_t)i0 * ld, ld);
  }
  /* Column blocks: key j gets gradient from queries i >= j only. */
  for (int j0 = 0; j0 < T; j0 += ZO_ATT_BLOCK) {
    int j1 = j0 + ZO_ATT_BLOCK < T ? j0 + ZO_ATT_BLOCK : T;
    size_t corner = (size_t)j0 * T + j0;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, j1 - j0, hs, T - j0, 1.0f, att + corner,
                T, dout + (size_t)j0 * C, C, 0.0f, dv + (size_t)j0 * ld, ld);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, j1 - j0, hs, T - j0, 1.0f, datt + corner,
                T, q + (size_t)j0 * ld, ld, 0.0f, dk + (size_t)j0 * ld, ld);
  }
}

void zo_cpu_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH) {
  ZO_ASSERT(C % NH == 0);
  const int hs = C / NH;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      size_t qkv_off = (size_t)b * T * 3 * C + (size_t)h * hs;
      size_t out_off = (size_t)b * T * C + (size_t)h * hs;
      size_t att_off = ((size_t)b * NH + h) * T * T;
      const float *q = qkv + qkv_off;
      float *dq = dqkv + qkv_off;
      attention_backward_head(dq, dq + C, dq + 2 * C, datt + att_off, dout + out_off, q, q + C,
                              q + 2 * C, att + att_off, T, C, hs);
    }
  }
}
