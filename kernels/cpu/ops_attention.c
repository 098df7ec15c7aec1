/* Causal self-attention with grouped-query heads, forward and backward, one
 * (batch, head) pair at a time: GEMMs on the strided q, k, v views of qkv
 * (rows of ld = (NH + 2 NKV) hs: NH query heads, then NKV key and NKV value
 * heads; query head h reads key/value head h / (NH / NKV)) and a row-wise
 * fp32 softmax. Rows are processed in blocks of ZO_ATT_BLOCK so each GEMM
 * covers only the causal staircase (about half of T x T) and the block of att
 * it produces is still in cache when the next GEMM reads it. Forward: threads
 * split the (batch, query head) pairs. Backward, in one parallel region: a
 * row pass over (batch, query head) pairs (datt and dq), then a column pass
 * over (batch, kv head) pairs that sums dk, dv over the group's query heads
 * in head order (sgemm with beta 1 after the first), so no two threads write
 * one kv head and the sum's order is fixed. Each sgemm call runs
 * single-threaded inside the region (OpenBLAS does so by itself when called
 * in a parallel region), which measured faster than threaded sgemm per head.
 * With NKV == NH every GEMM is the one multi-head attention ran before GQA.
 * A sliding window W (Mistral's sliding_window) restricts query i to keys
 * (i - W, i]; the probabilities outside it are stored as exact zeros, so the
 * backward (which reads them) needs no window of its own.
 * bf16/fp16: each head's q, k, v (and dout) are widened into per-thread fp32
 * scratch, the probabilities are rounded to the dtype as they are stored and
 * those rounded values weight v (what a GPU storing att in bf16 computes);
 * backward widens att and datt a row block or column strip at a time, sums
 * dk, dv over the group in fp32 scratch and rounds them once. */
#include "cpu.h"
#include "ops_half.h"
#include "ops_math.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#define ZO_ATT_BLOCK 64 /* rows (queries) per block */

/* Element offsets of the views of one attention call. */
struct att_shape {
  int T, NH, NKV, hs;
  int ld;  /* qkv row: (NH + 2 NKV) hs */
  int ldo; /* out row: NH hs */
  int W;   /* window: query i attends to keys (i - W, i]; 0: all of [0, i] */
};

static struct att_shape att_shape_of(int T, int NH, int NKV, int hs, int W) {
  ZO_ASSERT(NH > 0 && NKV > 0 && NH % NKV == 0 && hs > 0 && W >= 0);
  struct att_shape s = {T, NH, NKV, hs, (NH + 2 * NKV) * hs, NH * hs, W};
  return s;
}

/* The first key query i attends to under window W. */
static inline int att_lo(int W, int i) { return W > 0 && i - W + 1 > 0 ? i - W + 1 : 0; }

static size_t att_q(const struct att_shape *s, int b, int h) {
  return (size_t)b * s->T * s->ld + (size_t)h * s->hs;
}
static size_t att_k(const struct att_shape *s, int b, int g) {
  return (size_t)b * s->T * s->ld + (size_t)(s->NH + g) * s->hs;
}
static size_t att_v(const struct att_shape *s, int b, int g) {
  return (size_t)b * s->T * s->ld + (size_t)(s->NH + s->NKV + g) * s->hs;
}
static size_t att_o(const struct att_shape *s, int b, int h) {
  return (size_t)b * s->T * s->ldo + (size_t)h * s->hs;
}
static size_t att_a(const struct att_shape *s, int b, int h) {
  return ((size_t)b * s->NH + h) * (size_t)s->T * s->T;
}

/* One head: q, k, v (T, hs) with row stride ld; out (T, hs) with row stride
 * ldo; att (T, T). */
static void attention_forward_head(float *out, float *att, const float *q, const float *k,
                                   const float *v, int T, int ld, int ldo, int hs, int W) {
  const float scale = 1.0f / sqrtf((float)hs);
  for (int i0 = 0; i0 < T; i0 += ZO_ATT_BLOCK) {
    int i1 = i0 + ZO_ATT_BLOCK < T ? i0 + ZO_ATT_BLOCK : T;
    float *att_blk = att + (size_t)i0 * T;
    /* Scores of queries [i0, i1) against keys [0, i1). */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, i1, hs, scale,
                q + (size_t)i0 * ld, ld, k, ld, 0.0f, att_blk, T);
    for (int i = i0; i < i1; i++) {
      float *row = att + (size_t)i * T;
      const int lo = att_lo(W, i);
      float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
      for (int j = lo; j <= i; j++) maxv = row[j] > maxv ? row[j] : maxv;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int j = lo; j <= i; j++) {
        row[j] = zo_expf(row[j] - maxv);
        sum += row[j];
      }
      float inv = 1.0f / sum;
#pragma omp simd
      for (int j = lo; j <= i; j++) row[j] *= inv;
      memset(row, 0, (size_t)lo * sizeof(float)); /* outside the window: exactly 0 */
      memset(row + i + 1, 0, (size_t)(T - i - 1) * sizeof(float));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i1 - i0, hs, i1, 1.0f, att_blk, T, v,
                ld, 0.0f, out + (size_t)i0 * ldo, ldo);
  }
}

static void attention_forward_f32(float *out, float *att, const float *qkv, int b, int h,
                                  const struct att_shape *s) {
  const int g = h / (s->NH / s->NKV);
  attention_forward_head(out + att_o(s, b, h), att + att_a(s, b, h), qkv + att_q(s, b, h),
                         qkv + att_k(s, b, g), qkv + att_v(s, b, g), s->T, s->ld, s->ldo, s->hs, s->W);
}

/* Row pass of one query head, strides as in attention_forward_head: datt
 * (T, T) = the gradient of the scaled scores, dq (T, hs) with row stride ld. */
static void attention_backward_rows(float *dq, float *datt, const float *dout, const float *k,
                                    const float *v, const float *att, int T, int ld, int ldo,
                                    int hs) {
  const float scale = 1.0f / sqrtf((float)hs);
  /* Row blocks: datt = dout @ v^T, then softmax backward in place (scaled, so
   * datt becomes d(q k^T)), then dq = datt @ k. */
  for (int i0 = 0; i0 < T; i0 += ZO_ATT_BLOCK) {
    int i1 = i0 + ZO_ATT_BLOCK < T ? i0 + ZO_ATT_BLOCK : T;
    float *datt_blk = datt + (size_t)i0 * T;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, i1, hs, 1.0f,
                dout + (size_t)i0 * ldo, ldo, v, ld, 0.0f, datt_blk, T);
    for (int i = i0; i < i1; i++) {
      const float *a = att + (size_t)i * T;
      float *da = datt + (size_t)i * T;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int j = 0; j <= i; j++) dot += a[j] * da[j];
#pragma omp simd
      for (int j = 0; j <= i; j++) da[j] = scale * a[j] * (da[j] - dot);
      /* The staircase GEMMs below and the column pass read up to column i1
       * of this row. */
      memset(da + i + 1, 0, (size_t)(i1 - i - 1) * sizeof(float));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i1 - i0, hs, i1, 1.0f, datt_blk, T, k,
                ld, 0.0f, dq + (size_t)i0 * ld, ld);
  }
}

/* Column pass of one query head into its kv head's dk, dv (T, hs), row
 * stride ld: = (beta 0) or += (beta 1). Key j gets gradient from queries
 * i >= j only. */
static void attention_backward_cols(float *dk, float *dv, const float *datt, const float *dout,
                                    const float *q, const float *att, int T, int ld, int ldo,
                                    int hs, float beta) {
  for (int j0 = 0; j0 < T; j0 += ZO_ATT_BLOCK) {
    int j1 = j0 + ZO_ATT_BLOCK < T ? j0 + ZO_ATT_BLOCK : T;
    size_t corner = (size_t)j0 * T + j0;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, j1 - j0, hs, T - j0, 1.0f, att + corner,
                T, dout + (size_t)j0 * ldo, ldo, beta, dv + (size_t)j0 * ld, ld);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, j1 - j0, hs, T - j0, 1.0f, datt + corner,
                T, q + (size_t)j0 * ld, ld, beta, dk + (size_t)j0 * ld, ld);
  }
}

static void attention_backward_rows_f32(float *dqkv, float *datt, const float *dout,
                                        const float *qkv, const float *att, int b, int h,
                                        const struct att_shape *s) {
  const int g = h / (s->NH / s->NKV);
  attention_backward_rows(dqkv + att_q(s, b, h), datt + att_a(s, b, h), dout + att_o(s, b, h),
                          qkv + att_k(s, b, g), qkv + att_v(s, b, g), att + att_a(s, b, h), s->T,
                          s->ld, s->ldo, s->hs);
}

static void attention_backward_cols_f32(float *dqkv, const float *datt, const float *dout,
                                        const float *qkv, const float *att, int b, int g,
                                        const struct att_shape *s) {
  const int G = s->NH / s->NKV;
  for (int r = 0; r < G; r++) {
    const int h = g * G + r;
    attention_backward_cols(dqkv + att_k(s, b, g), dqkv + att_v(s, b, g), datt + att_a(s, b, h),
                            dout + att_o(s, b, h), qkv + att_q(s, b, h), att + att_a(s, b, h),
                            s->T, s->ld, s->ldo, s->hs, r == 0 ? 0.0f : 1.0f);
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

/* Row i of a probability block: softmax over [lo, i] of the scores, rounded
 * to dt and stored in att (row stride T, zero above the diagonal and before
 * lo), the rounded values kept in row for the P @ v GEMM. */
ZO_INLINE void softmax_store_row(void *att, size_t off, float *row, int lo, int i, int T, enum zo_dtype dt) {
  float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
  for (int j = lo; j <= i; j++) maxv = row[j] > maxv ? row[j] : maxv;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = lo; j <= i; j++) {
    row[j] = zo_expf(row[j] - maxv);
    sum += row[j];
  }
  float inv = 1.0f / sum;
#pragma omp simd
  for (int j = lo; j <= i; j++) {
    row[j] = zo_round_dt(row[j] * inv, dt);
    zo_st(att, off + (size_t)j, row[j], dt);
  }
  for (int j = 0; j < lo; j++) {
    row[j] = 0.0f;
    zo_st(att, off + (size_t)j, 0.0f, dt);
  }
#pragma omp simd
  for (int j = i + 1; j < T; j++) {
    row[j] = 0.0f; /* the P @ v GEMM reads the block's columns up to its last row */
    zo_st(att, off + (size_t)j, 0.0f, dt);
  }
}

/* Scratch of one head: four (T, hs) matrices, two (ZO_ATT_BLOCK, T) blocks
 * (or column strips of at most T x ZO_ATT_BLOCK) and one (ZO_ATT_BLOCK, hs)
 * output block. */
static size_t head_scratch(int T, int hs) {
  return 4 * (size_t)T * hs + 2 * (size_t)ZO_ATT_BLOCK * T + (size_t)ZO_ATT_BLOCK * hs;
}

ZO_INLINE void attention_forward_head_x(void *out, void *att, const void *qkv, int b, int h,
                                        const struct att_shape *s, enum zo_dtype dt) {
  const int T = s->T, hs = s->hs, g = h / (s->NH / s->NKV);
  const float scale = 1.0f / sqrtf((float)hs);
  const size_t aoff = att_a(s, b, h);
  float *q = zo_cpu_scratch(head_scratch(T, hs));
  float *k = q + (size_t)T * hs, *v = k + (size_t)T * hs;
  float *blk = v + (size_t)T * hs, *ob = blk + 2 * (size_t)ZO_ATT_BLOCK * T;
  widen_head(q, qkv, att_q(s, b, h), T, s->ld, hs, dt);
  widen_head(k, qkv, att_k(s, b, g), T, s->ld, hs, dt);
  widen_head(v, qkv, att_v(s, b, g), T, s->ld, hs, dt);
  for (int i0 = 0; i0 < T; i0 += ZO_ATT_BLOCK) {
    int i1 = i0 + ZO_ATT_BLOCK < T ? i0 + ZO_ATT_BLOCK : T;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, i1, hs, scale, q + (size_t)i0 * hs,
                hs, k, hs, 0.0f, blk, T);
    for (int i = i0; i < i1; i++)
      softmax_store_row(att, aoff + (size_t)i * T, blk + (size_t)(i - i0) * T, att_lo(s->W, i), i, T, dt);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i1 - i0, hs, i1, 1.0f, blk, T, v, hs, 0.0f,
                ob, hs);
    narrow_rows(out, att_o(s, b, h), i0, i1 - i0, s->ldo, ob, hs, dt);
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

/* Row pass of query head h: datt = dout @ v^T, softmax backward (scaled),
 * rounded and stored in datt; dq = datt @ k from the rounded values. */
ZO_INLINE void attention_backward_rows_x(void *dqkv, void *datt, const void *dout, const void *qkv,
                                         const void *att, int b, int h, const struct att_shape *s,
                                         enum zo_dtype dt) {
  const int T = s->T, hs = s->hs, g = h / (s->NH / s->NKV);
  const float scale = 1.0f / sqrtf((float)hs);
  const size_t aoff = att_a(s, b, h);
  float *k = zo_cpu_scratch(head_scratch(T, hs));
  float *v = k + (size_t)T * hs, *dout_f = v + (size_t)T * hs;
  float *da = dout_f + (size_t)T * hs, *a = da + (size_t)ZO_ATT_BLOCK * T;
  float *ob = a + (size_t)ZO_ATT_BLOCK * T;
  widen_head(k, qkv, att_k(s, b, g), T, s->ld, hs, dt);
  widen_head(v, qkv, att_v(s, b, g), T, s->ld, hs, dt);
  widen_head(dout_f, dout, att_o(s, b, h), T, s->ldo, hs, dt);
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
    narrow_rows(dqkv, att_q(s, b, h), i0, i1 - i0, s->ld, ob, hs, dt);
  }
}

/* Column pass of kv head g: dk, dv summed in fp32 over the group's query
 * heads (from the stored att and datt), then rounded once. The strips (at
 * most T x ZO_ATT_BLOCK each) take the place of the row pass's blocks. */
ZO_INLINE void attention_backward_cols_x(void *dqkv, const void *datt, const void *dout,
                                         const void *qkv, const void *att, int b, int g,
                                         const struct att_shape *s, enum zo_dtype dt) {
  const int T = s->T, hs = s->hs, G = s->NH / s->NKV;
  float *q = zo_cpu_scratch(head_scratch(T, hs));
  float *dout_f = q + (size_t)T * hs, *dk = dout_f + (size_t)T * hs, *dv = dk + (size_t)T * hs;
  float *da = dv + (size_t)T * hs, *a = da + (size_t)ZO_ATT_BLOCK * T;
  for (int r = 0; r < G; r++) {
    const int h = g * G + r;
    const size_t aoff = att_a(s, b, h);
    const float beta = r == 0 ? 0.0f : 1.0f;
    widen_head(q, qkv, att_q(s, b, h), T, s->ld, hs, dt);
    widen_head(dout_f, dout, att_o(s, b, h), T, s->ldo, hs, dt);
    for (int j0 = 0; j0 < T; j0 += ZO_ATT_BLOCK) {
      int j1 = j0 + ZO_ATT_BLOCK < T ? j0 + ZO_ATT_BLOCK : T, w = j1 - j0;
      widen_strip(a, att, aoff, T, j0, j1, dt);
      widen_strip(da, datt, aoff, T, j0, j1, dt);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, w, hs, T - j0, 1.0f, a, w,
                  dout_f + (size_t)j0 * hs, hs, beta, dv + (size_t)j0 * hs, hs);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, w, hs, T - j0, 1.0f, da, w,
                  q + (size_t)j0 * hs, hs, beta, dk + (size_t)j0 * hs, hs);
    }
  }
  narrow_rows(dqkv, att_k(s, b, g), 0, T, s->ld, dk, hs, dt);
  narrow_rows(dqkv, att_v(s, b, g), 0, T, s->ld, dv, hs, dt);
}

void zo_cpu_attention_forward(void *out, void *att, const void *qkv, int B, int T, int NH, int NKV,
                              int hs, enum zo_dtype dt) {
  zo_cpu_attention_window_forward(out, att, qkv, B, T, NH, NKV, hs, 0, dt);
}

void zo_cpu_attention_window_forward(void *out, void *att, const void *qkv, int B, int T, int NH, int NKV,
                                     int hs, int window, enum zo_dtype dt) {
  const struct att_shape s = att_shape_of(T, NH, NKV, hs, window);
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      if (dt == ZO_F32)
        attention_forward_f32(out, att, qkv, b, h, &s);
      else
        ZO_DT_DISPATCH(dt, attention_forward_head_x, out, att, qkv, b, h, &s);
    }
}

void zo_cpu_attention_backward(void *dqkv, void *datt, const void *dout, const void *qkv,
                               const void *att, int B, int T, int NH, int NKV, int hs,
                               enum zo_dtype dt) {
  /* Probabilities outside a window are stored as 0: the backward of a
   * windowed forward is this one (a zero probability has a zero gradient). */
  const struct att_shape s = att_shape_of(T, NH, NKV, hs, 0);
#pragma omp parallel
  {
    /* The column pass reads every datt of a group: the barrier at the end
     * of the row pass orders them. */
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++) {
        if (dt == ZO_F32)
          attention_backward_rows_f32(dqkv, datt, dout, qkv, att, b, h, &s);
        else
          ZO_DT_DISPATCH(dt, attention_backward_rows_x, dqkv, datt, dout, qkv, att, b, h, &s);
      }
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
      for (int g = 0; g < NKV; g++) {
        if (dt == ZO_F32)
          attention_backward_cols_f32(dqkv, datt, dout, qkv, att, b, g, &s);
        else
          ZO_DT_DISPATCH(dt, attention_backward_cols_x, dqkv, datt, dout, qkv, att, b, g, &s);
      }
  }
}
