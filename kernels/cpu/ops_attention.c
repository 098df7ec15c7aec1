/* Causal multi-head self-attention, forward and backward, one (batch, head)
 * pair at a time: GEMMs on the strided q, k, v views of qkv (leading dimension
 * 3C) and a row-wise fp32 softmax. Rows are processed in blocks of ZO_ATT_BLOCK
 * so each GEMM covers only the causal staircase (about half of T x T) and the
 * block of att it produces is still in cache when the next GEMM reads it.
 * Threads split the (batch, head) pairs and each sgemm call runs
 * single-threaded inside that region (OpenBLAS does so by itself when called
 * in a parallel region), which measured faster than threaded sgemm per head.
 * bf16/fp16: each head's q, k, v (and dout) are widened into per-thread fp32
 * scratch, the probabilities are rounded to the dtype as they are stored and
 * those rounded values weight v (what a GPU storing att in bf16 computes);
 * backward widens att and datt a row block or column strip at a time. */
#include "cpu.h"
#include "ops_half.h"
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

static void attention_forward_f32(float *out, float *att, const float *qkv, int B, int T, int C,
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

static void attention_backward_f32(float *dqkv, float *datt, const float *dout, const float *qkv,
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

/* ---- bf16 / fp16 ------------------------------------------------------------ */

/* dst (T, hs) contiguous = rows of a dt head view with row stride ld. */
ZO_INLINE void widen_head(float *dst, const void *src, size_t off, int T, int ld, int hs,
                          enum zo_dtype dt) {
  for (int t = 0; t < T; t++) {
    const size_t o = off + (size_t)t * ld;
#pragma omp simd
    for (int d = 0; d < hs; d++) dst[(size_t)t * hs + d] = zo_ld(src, o + d, dt);
  }
}

/* rows (n, hs) contiguous fp32 -> a dt head view from row r0, row stride ld. */
ZO_INLINE void narrow_rows(void *dst, size_t off, int r0, int n, int ld, const float *src, int hs,
                           enum zo_dtype dt) {
  for (int r = 0; r < n; r++) {
    const size_t o = off + (size_t)(r0 + r) * ld;
#pragma omp simd
    for (int d = 0; d < hs; d++) zo_st(dst, o + d, src[(size_t)r * hs + d], dt);
  }
}

/* Row i of a probability block: softmax over [0, i] of the scores, rounded to
 * dt and stored in att (row stride T, zero above the diagonal), the rounded
 * values kept in row for the P @ v GEMM. */
ZO_INLINE void softmax_store_row(void *att, size_t off, float *row, int i, int T, enum zo_dtype dt) {
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
  for (int j = 0; j <= i; j++) {
    row[j] = zo_round_dt(row[j] * inv, dt);
    zo_st(att, off + (size_t)j, row[j], dt);
  }
#pragma omp simd
  for (int j = i + 1; j < T; j++) {
    row[j] = 0.0f; /* the P @ v GEMM reads the block's columns up to its last row */
    zo_st(att, off + (size_t)j, 0.0f, dt);
  }
}

/* Scratch of one head: q, k, v, dout (T, hs) each, two (ZO_ATT_BLOCK, T)
 * blocks and one (ZO_ATT_BLOCK, hs) output block. */
static size_t head_scratch(int T, int hs) {
  return 4 * (size_t)T * hs + 2 * (size_t)ZO_ATT_BLOCK * T + (size_t)ZO_ATT_BLOCK * hs;
}

ZO_INLINE void attention_forward_head_x(void *out, void *att, const void *qkv, int b, int h, int T,
                                        int C, int NH, enum zo_dtype dt) {
  const int hs = C / NH, ld = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  const size_t qoff = (size_t)b * T * ld + (size_t)h * hs;
  const size_t ooff = (size_t)b * T * C + (size_t)h * hs;
  const size_t aoff = ((size_t)b * NH + h) * (size_t)T * T;
  float *q = zo_cpu_scratch(head_scratch(T, hs));
  float *k = q + (size_t)T * hs, *v = k + (size_t)T * hs;
  float *blk = v + (size_t)T * hs, *ob = blk + 2 * (size_t)ZO_ATT_BLOCK * T;
  widen_head(q, qkv, qoff, T, ld, hs, dt);
  widen_head(k, qkv, qoff + C, T, ld, hs, dt);
  widen_head(v, qkv, qoff + 2 * (size_t)C, T, ld, hs, dt);
  for (int i0 = 0; i0 < T; i0 += ZO_ATT_BLOCK) {
    int i1 = i0 + ZO_ATT_BLOCK < T ? i0 + ZO_ATT_BLOCK : T;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, i1, hs, scale, q + (size_t)i0 * hs,
                hs, k, hs, 0.0f, blk, T);
    for (int i = i0; i < i1; i++)
      softmax_store_row(att, aoff + (size_t)i * T, blk + (size_t)(i - i0) * T, i, T, dt);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i1 - i0, hs, i1, 1.0f, blk, T, v, hs, 0.0f,
                ob, hs);
    narrow_rows(out, ooff, i0, i1 - i0, C, ob, hs, dt);
  }
}

/* The column strip rows [j0, T), columns [j0, j1) of a dt (T, T) matrix as
 * fp32 (T - j0, j1 - j0). */
ZO_INLINE void widen_strip(float *dst, const void *src, size_t off, int T, int j0, int j1,
                           enum zo_dtype dt) {
  const int w = j1 - j0;
  for (int i = j0; i < T; i++) {
    const size_t o = off + (size_t)i * T + (size_t)j0;
#pragma omp simd
    for (int j = 0; j < w; j++) dst[(size_t)(i - j0) * w + j] = zo_ld(src, o + j, dt);
  }
}

ZO_INLINE void attention_backward_head_x(void *dqkv, void *datt, const void *dout, const void *qkv,
                                         const void *att, int b, int h, int T, int C, int NH,
                                         enum zo_dtype dt) {
  const int hs = C / NH, ld = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  const size_t qoff = (size_t)b * T * ld + (size_t)h * hs;
  const size_t ooff = (size_t)b * T * C + (size_t)h * hs;
  const size_t aoff = ((size_t)b * NH + h) * (size_t)T * T;
  float *q = zo_cpu_scratch(head_scratch(T, hs));
  float *k = q + (size_t)T * hs, *v = k + (size_t)T * hs, *dout_f = v + (size_t)T * hs;
  float *da = dout_f + (size_t)T * hs, *a = da + (size_t)ZO_ATT_BLOCK * T;
  float *ob = a + (size_t)ZO_ATT_BLOCK * T;
  widen_head(q, qkv, qoff, T, ld, hs, dt);
  widen_head(k, qkv, qoff + C, T, ld, hs, dt);
  widen_head(v, qkv, qoff + 2 * (size_t)C, T, ld, hs, dt);
  widen_head(dout_f, dout, ooff, T, C, hs, dt);
  /* Row blocks: datt = dout @ v^T, softmax backward (scaled), rounded and
   * stored in datt; dq = datt @ k from the rounded values. */
  for (int i0 = 0; i0 < T; i0 += ZO_ATT_BLOCK) {
    int i1 = i0 + ZO_ATT_BLOCK < T ? i0 + ZO_ATT_BLOCK : T;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, i1, hs, 1.0f,
                dout_f + (size_t)i0 * hs, hs, v, hs, 0.0f, da, T);
    for (int i = i0; i < i1; i++) {
      float *dr = da + (size_t)(i - i0) * T, *ar = a + (size_t)(i - i0) * T;
      const size_t ro = aoff + (size_t)i * T;
#pragma omp simd
      for (int j = 0; j <= i; j++) ar[j] = zo_ld(att, ro + j, dt);
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int j = 0; j <= i; j++) dot += ar[j] * dr[j];
#pragma omp simd
      for (int j = 0; j <= i; j++) {
        dr[j] = zo_round_dt(scale * ar[j] * (dr[j] - dot), dt);
        zo_st(datt, ro + j, dr[j], dt);
      }
      /* The staircase GEMM below reads up to column i1; the column pass
       * reads datt's zeros above the diagonal. */
#pragma omp simd
      for (int j = i + 1; j < T; j++) {
        if (j < i1) dr[j] = 0.0f;
        zo_st(datt, ro + j, 0.0f, dt);
      }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i1 - i0, hs, i1, 1.0f, da, T, k, hs, 0.0f,
                ob, hs);
    narrow_rows(dqkv, qoff, i0, i1 - i0, ld, ob, hs, dt);
  }
  /* Column strips: key j gets gradient from queries i >= j only. The strips
   * (at most T x ZO_ATT_BLOCK each) reuse the two row blocks. */
  for (int j0 = 0; j0 < T; j0 += ZO_ATT_BLOCK) {
    int j1 = j0 + ZO_ATT_BLOCK < T ? j0 + ZO_ATT_BLOCK : T, w = j1 - j0;
    widen_strip(a, att, aoff, T, j0, j1, dt);
    widen_strip(da, datt, aoff, T, j0, j1, dt);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, w, hs, T - j0, 1.0f, a, w,
                dout_f + (size_t)j0 * hs, hs, 0.0f, ob, hs);
    narrow_rows(dqkv, qoff + 2 * (size_t)C, j0, w, ld, ob, hs, dt);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, w, hs, T - j0, 1.0f, da, w, q + (size_t)j0 * hs,
                hs, 0.0f, ob, hs);
    narrow_rows(dqkv, qoff + C, j0, w, ld, ob, hs, dt);
  }
}

void zo_cpu_attention_forward(void *out, void *att, const void *qkv, int B, int T, int C, int NH,
                              enum zo_dtype dt) {
  ZO_ASSERT(C % NH == 0);
  if (dt == ZO_F32) {
    attention_forward_f32(out, att, qkv, B, T, C, NH);
    return;
  }
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) ZO_DT_DISPATCH(dt, attention_forward_head_x, out, att, qkv, b, h, T, C, NH);
}

void zo_cpu_attention_backward(void *dqkv, void *datt, const void *dout, const void *qkv,
                               const void *att, int B, int T, int C, int NH, enum zo_dtype dt) {
  ZO_ASSERT(C % NH == 0);
  if (dt == ZO_F32) {
    attention_backward_f32(dqkv, datt, dout, qkv, att, B, T, C, NH);
    return;
  }
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      ZO_DT_DISPATCH(dt, attention_backward_head_x, dqkv, datt, dout, qkv, att, b, h, T, C, NH);
}
