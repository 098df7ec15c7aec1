/* Causal multi-head self-attention as in the CPU backend: full T x T score
 * GEMMs per head (strided-batched cuBLASLt over the q, k, v views of qkv,
 * whose rows are 3C apart and whose heads are hs apart), a causal softmax
 * kernel that writes att with zeros above the diagonal, and the AV GEMM.
 * Backward: datt = dout V^T, the softmax backward (zeros above the diagonal,
 * so the full GEMMs after it add nothing from there), then dq = datt K,
 * dk = datt^T Q, dv = att^T dout, each overwriting its third of dqkv.
 * Deliberately simple: the GEMMs compute the masked half too (2x the FLOPs)
 * and att is materialised; a flash-style kernel is the next step.
 *
 * fp32: the scores are computed into att and the softmax runs in place (and
 * likewise datt), exactly the code that existed before dtypes.
 * bf16/fp16: the scores must stay fp32 (the CPU reference never rounds them),
 * but att is dt, so they go to fp32 scratch: the upper half of the stream's
 * cuBLASLt workspace (ATT_SCORES_BYTES), the score GEMMs getting the lower
 * half as their own workspace (stream order keeps every other use apart).
 * The (b, h) pairs of one cuBLASLt batch are processed in chunks of as many
 * heads as fit, or, when one head's T x T scores do not fit (T > 2048), in
 * blocks of query rows against keys [0, last row]. The softmax kernel reads
 * a chunk of scores and stores the probabilities rounded to dt into att; the
 * AV GEMM then multiplies those rounded values (dt operands, fp32
 * accumulation, out rounded once). Backward the same way: dout V^T into fp32
 * scratch, the softmax backward from it and the dt att, rounded into datt,
 * then the three dt GEMMs from the stored datt and att.
 *
 * Column-major views (see matmul.cu): a row-major (T, hs) head slice with row
 * stride ld is the column-major (hs, T) matrix with leading dimension ld, and
 * row-major att (T_q, T_k) is column-major (T_k, T_q) with ld T. So:
 *   scores  att(Tk,Tq)  = scale * op_T(k (hs,Tk)) @ q (hs,Tq)
 *   out     out(hs,Tq)  = v (hs,Tk) @ att (Tk,Tq)
 *   datt    datt(Tk,Tq) = op_T(v (hs,Tk)) @ dout (hs,Tq)
 *   dq      dq(hs,Tq)   = k (hs,Tk) @ datt (Tk,Tq)
 *   dk      dk(hs,Tk)   = q (hs,Tq) @ op_T(datt (Tk,Tq))
 *   dv      dv(hs,Tk)   = dout (hs,Tq) @ op_T(att (Tk,Tq))
 * One cuBLASLt call covers all heads of one batch row (or all batch rows of
 * one head, whichever loop is shorter): the strides are uniform there. */
#include "attention.cuh"

#include "gemm.cuh"

#include <math.h>
#include <string.h>

#define ATT_WARPS 8 /* rows (warps) per block in the softmax kernels */

/* The bf16/fp16 path's split of the stream workspace: GEMM workspace first,
 * fp32 score blocks after it. */
#define ATT_GEMM_WS_BYTES (ZO_CUDA_WORKSPACE_BYTES / 2)
#define ATT_SCORES_BYTES (ZO_CUDA_WORKSPACE_BYTES - ATT_GEMM_WS_BYTES)

/* ---- fp32 ------------------------------------------------------------------------ */

/* att rows (B*NH*T of them, length T) hold scaled scores; row r is query
 * r % T. Softmax over [0, t], zeros after. */
static __global__ void attention_softmax_kernel(float *att, int n_rows, int T) {
  int row = blockIdx.x * ATT_WARPS + threadIdx.y;
  if (row >= n_rows) return;
  int t = row % T;
  float *a = att + (size_t)row * T;
  float maxv = -INFINITY;
  for (int j = threadIdx.x; j <= t; j += ZO_WARP) maxv = fmaxf(maxv, a[j]);
  maxv = zo_warp_max(maxv);
  float sum = 0.0f;
  for (int j = threadIdx.x; j <= t; j += ZO_WARP) {
    float e = expf(a[j] - maxv);
    a[j] = e;
    sum += e;
  }
  float inv = 1.0f / zo_warp_sum(sum);
  for (int j = threadIdx.x; j <= t; j += ZO_WARP) a[j] *= inv;
  for (int j = t + 1 + threadIdx.x; j < T; j += ZO_WARP) a[j] = 0.0f;
}

/* datt (n_rows, T) in place: scale * att * (datt - sum_j att * datt) over
 * [0, t], zeros after: the gradient of the scaled scores. */
static __global__ void attention_softmax_backward_kernel(float *datt, const float *att, int n_rows,
                                                         int T, float scale) {
  int row = blockIdx.x * ATT_WARPS + threadIdx.y;
  if (row >= n_rows) return;
  int t = row % T;
  const float *a = att + (size_t)row * T;
  float *da = datt + (size_t)row * T;
  float dot = 0.0f;
  for (int j = threadIdx.x; j <= t; j += ZO_WARP) dot += a[j] * da[j];
  dot = zo_warp_sum(dot);
  for (int j = threadIdx.x; j <= t; j += ZO_WARP) da[j] = scale * a[j] * (da[j] - dot);
  for (int j = t + 1 + threadIdx.x; j < T; j += ZO_WARP) da[j] = 0.0f;
}

/* ---- bf16 / fp16 ------------------------------------------------------------------ */

/* One chunk: nb heads (att_stride elements apart in att) by query rows
 * [r0, r0 + nr). Row `row` of the chunk (head row / nr, query r0 + row % nr)
 * has its fp32 scaled scores at scores + row * T, keys [0, r0 + nr) valid.
 * Stores softmax over [0, t] rounded to the storage type, zeros after, in
 * att row t; the exponentials are kept in the scratch row between passes. */
template <typename scalar_t>
static __global__ void attention_softmax_dt_kernel(scalar_t *att, float *scores, int nb, int nr,
                                                   int r0, int T, long long att_stride) {
  int row = blockIdx.x * ATT_WARPS + threadIdx.y;
  if (row >= nb * nr) return;
  const int t = r0 + row % nr;
  float *s = scores + (size_t)row * T;
  scalar_t *a = att + (size_t)(row / nr) * att_stride + (size_t)t * T;
  float maxv = -INFINITY;
  for (int j = threadIdx.x; j <= t; j += ZO_WARP) maxv = fmaxf(maxv, s[j]);
  maxv = zo_warp_max(maxv);
  float sum = 0.0f;
  for (int j = threadIdx.x; j <= t; j += ZO_WARP) {
    float e = expf(s[j] - maxv);
    s[j] = e;
    sum += e;
  }
  float inv = 1.0f / zo_warp_sum(sum);
  for (int j = threadIdx.x; j <= t; j += ZO_WARP) zo_st(a, j, s[j] * inv);
  for (int j = t + 1 + threadIdx.x; j < T; j += ZO_WARP) zo_st(a, j, 0.0f);
}

/* The chunk layout of attention_softmax_dt_kernel; draw holds dout v^T in
 * fp32. datt row t = scale * att * (draw - sum_j att * draw) over [0, t]
 * from the stored (dt) att, rounded to the storage type, zeros after. */
template <typename scalar_t>
static __global__ void
attention_softmax_backward_dt_kernel(scalar_t *datt, const float *draw, const scalar_t *att, int nb,
                                     int nr, int r0, int T, long long att_stride, float scale) {
  int row = blockIdx.x * ATT_WARPS + threadIdx.y;
  if (row >= nb * nr) return;
  const int t = r0 + row % nr;
  const float *d = draw + (size_t)row * T;
  const size_t off = (size_t)(row / nr) * att_stride + (size_t)t * T;
  const scalar_t *a = att + off;
  scalar_t *da = datt + off;
  float dot = 0.0f;
  for (int j = threadIdx.x; j <= t; j += ZO_WARP) dot += zo_ld(a, j) * d[j];
  dot = zo_warp_sum(dot);
  for (int j = threadIdx.x; j <= t; j += ZO_WARP) zo_st(da, j, scale * zo_ld(a, j) * (d[j] - dot));
  for (int j = t + 1 + threadIdx.x; j < T; j += ZO_WARP) zo_st(da, j, 0.0f);
}

template <typename scalar_t>
static void attention_softmax_dt(void *att, float *scores, int nb, int nr, int r0, int T,
                                 long long att_stride, zo_stream_t stream) {
  attention_softmax_dt_kernel<scalar_t>
      <<<zo_ceil_div((size_t)nb * nr, ATT_WARPS), dim3(ZO_WARP, ATT_WARPS), 0,
         zo_cuda_stream(stream)>>>((scalar_t *)att, scores, nb, nr, r0, T, att_stride);
  ZO_CUDA_CHECK_LAUNCH();
}

template <typename scalar_t>
static void attention_softmax_backward_dt(void *datt, const float *draw, const void *att, int nb,
                                          int nr, int r0, int T, long long att_stride, float scale,
                                          zo_stream_t stream) {
  attention_softmax_backward_dt_kernel<scalar_t>
      <<<zo_ceil_div((size_t)nb * nr, ATT_WARPS), dim3(ZO_WARP, ATT_WARPS), 0,
         zo_cuda_stream(stream)>>>((scalar_t *)datt, draw, (const scalar_t *)att, nb, nr, r0, T,
                                   att_stride, scale);
  ZO_CUDA_CHECK_LAUNCH();
}

/* ---- shared --------------------------------------------------------------------- */

/* How the (b, h) pairs split into an outer loop and a cuBLASLt batch, and the
 * element offsets of one step of each for the three tensor shapes. */
struct att_split {
  int n_outer, batch;
  long long outer_qkv, outer_bt, outer_att; /* qkv (B,T,3C), (B,T,C), att (B,NH,T,T) */
  long long inner_qkv, inner_bt, inner_att;
};

static struct att_split att_split_of(int B, int T, int C, int NH) {
  const int hs = C / NH;
  const long long b_qkv = (long long)T * 3 * C, b_bt = (long long)T * C,
                  b_att = (long long)NH * T * T, h_qkv = hs, h_bt = hs, h_att = (long long)T * T;
  struct att_split s;
  if (B <= NH) { /* loop over batch rows, batch the heads */
    s.n_outer = B;
    s.batch = NH;
    s.outer_qkv = b_qkv, s.outer_bt = b_bt, s.outer_att = b_att;
    s.inner_qkv = h_qkv, s.inner_bt = h_bt, s.inner_att = h_att;
  } else { /* loop over heads, batch the batch rows */
    s.n_outer = NH;
    s.batch = B;
    s.outer_qkv = h_qkv, s.outer_bt = h_bt, s.outer_att = h_att;
    s.inner_qkv = b_qkv, s.inner_bt = b_bt, s.inner_att = b_att;
  }
  return s;
}

/* A bf16/fp16 chunk: `heads` consecutive entries of the cuBLASLt batch by
 * `rows` query rows, whose fp32 scores (heads * rows * T floats) fill at
 * most ATT_SCORES_BYTES. */
struct att_chunk {
  int heads, rows;
};

static struct att_chunk att_chunk_of(int T, int batch) {
  const size_t cap = ATT_SCORES_BYTES / sizeof(float), tt = (size_t)T * T;
  struct att_chunk ch;
  if (tt <= cap) {
    ch.rows = T;
    ch.heads = cap / tt < (size_t)batch ? (int)(cap / tt) : batch;
  } else {
    if ((size_t)T > cap)
      zo_abort(__FILE__, __LINE__,
               "attention: T = %d: one query row's fp32 scores (%zu bytes) exceed the %zu bytes "
               "of score scratch in the stream workspace; use T <= %zu",
               T, (size_t)T * sizeof(float), (size_t)ATT_SCORES_BYTES, cap);
    ch.heads = 1;
    ch.rows = (int)(cap / (size_t)T);
  }
  return ch;
}

static float *att_scores(zo_stream_t stream) {
  return (float *)((char *)zo_cuda_workspace(stream) + ATT_GEMM_WS_BYTES);
}

/* Element i of a tensor of es-byte elements. */
static const void *att_at(const void *p, long long i, size_t es) {
  return (const char *)p + i * (long long)es;
}
static void *att_at_mut(void *p, long long i, size_t es) { return (char *)p + i * (long long)es; }

static void att_gemm(bool trans_a, bool trans_b, int m, int n, int k, cudaDataType_t ab_type,
                     cudaDataType_t d_type, const void *a, int lda, long long stride_a,
                     const void *b, int ldb, long long stride_b, void *d, int ldd,
                     long long stride_d, int batch, float alpha, size_t workspace_bytes,
                     zo_stream_t stream) {
  struct zo_gemm g;
  memset(&g, 0, sizeof g);
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = m;
  g.n = n;
  g.k = k;
  g.ab_type = ab_type;
  g.d_type = d_type;
  g.a = a;
  g.lda = lda;
  g.stride_a = stride_a;
  g.b = b;
  g.ldb = ldb;
  g.stride_b = stride_b;
  g.d = d;
  g.ldd = ldd;
  g.stride_d = stride_d;
  g.batch = batch;
  g.alpha = alpha;
  g.beta = 0.0f;
  g.workspace_bytes = workspace_bytes;
  zo_cuda_gemm(&g, stream);
}

/* ---- forward -------------------------------------------------------------------- */

static void attention_forward_f32(float *out, float *att, const float *qkv, int B, int T, int C,
                                  int NH, zo_stream_t stream) {
  const int hs = C / NH, ld = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  struct att_split s = att_split_of(B, T, C, NH);
  for (int o = 0; o < s.n_outer; o++) {
    const float *q = qkv + o * s.outer_qkv;
    float *a = att + o * s.outer_att;
    att_gemm(true, false, T, T, hs, CUDA_R_32F, CUDA_R_32F, q + C, ld, s.inner_qkv, q, ld,
             s.inner_qkv, a, T, s.inner_att, s.batch, scale, 0, stream);
  }
  int n_rows = B * NH * T;
  attention_softmax_kernel<<<zo_ceil_div((size_t)n_rows, ATT_WARPS), dim3(ZO_WARP, ATT_WARPS), 0,
                             zo_cuda_stream(stream)>>>(att, n_rows, T);
  ZO_CUDA_CHECK_LAUNCH();
  for (int o = 0; o < s.n_outer; o++) {
    const float *q = qkv + o * s.outer_qkv;
    att_gemm(false, false, hs, T, T, CUDA_R_32F, CUDA_R_32F, q + 2 * C, ld, s.inner_qkv,
             att + o * s.outer_att, T, s.inner_att, out + o * s.outer_bt, C, s.inner_bt, s.batch,
             1.0f, 0, stream);
  }
}

static void attention_forward_dt(void *out, void *att, const void *qkv, int B, int T, int C, int NH,
                                 enum zo_dtype dt, zo_stream_t stream) {
  const int hs = C / NH, ld = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  const cudaDataType_t type = zo_cuda_data_type(dt);
  const size_t es = zo_dtype_size(dt);
  struct att_split s = att_split_of(B, T, C, NH);
  struct att_chunk ch = att_chunk_of(T, s.batch);
  float *scores = att_scores(stream);
  for (int o = 0; o < s.n_outer; o++) {
    for (int h0 = 0; h0 < s.batch; h0 += ch.heads) {
      const int nb = s.batch - h0 < ch.heads ? s.batch - h0 : ch.heads;
      const long long q0 = o * s.outer_qkv + h0 * s.inner_qkv;
      void *a = att_at_mut(att, o * s.outer_att + h0 * s.inner_att, es);
      for (int r0 = 0; r0 < T; r0 += ch.rows) {
        const int nr = T - r0 < ch.rows ? T - r0 : ch.rows;
        /* Queries [r0, r0 + nr) against the keys they see, [0, r0 + nr). */
        att_gemm(true, false, r0 + nr, nr, hs, type, CUDA_R_32F, att_at(qkv, q0 + C, es), ld,
                 s.inner_qkv, att_at(qkv, q0 + (long long)r0 * ld, es), ld, s.inner_qkv, scores, T,
                 (long long)nr * T, nb, scale, ATT_GEMM_WS_BYTES, stream);
        ZO_CUDA_DT_DISPATCH(dt, attention_softmax_dt, a, scores, nb, nr, r0, T, s.inner_att,
                            stream);
      }
    }
  }
  for (int o = 0; o < s.n_outer; o++)
    att_gemm(false, false, hs, T, T, type, type, att_at(qkv, o * s.outer_qkv + 2 * C, es), ld,
             s.inner_qkv, att_at(att, o * s.outer_att, es), T, s.inner_att,
             att_at_mut(out, o * s.outer_bt, es), C, s.inner_bt, s.batch, 1.0f, 0, stream);
}

extern "C" void zo_cuda_attention_forward(void *out, void *att, const void *qkv, int B, int T,
                                          int C, int NH, enum zo_dtype dt, zo_stream_t stream) {
  ZO_ASSERT(NH > 0 && C % NH == 0);
  (void)zo_cuda_data_type(dt);
  if (B == 0 || T == 0) return;
  if (dt == ZO_F32)
    attention_forward_f32((float *)out, (float *)att, (const float *)qkv, B, T, C, NH, stream);
  else
    attention_forward_dt(out, att, qkv, B, T, C, NH, dt, stream);
}

/* ---- backward ------------------------------------------------------------------- */

static void attention_backward_f32(float *dqkv, float *datt, const float *dout, const float *qkv,
                                   const float *att, int B, int T, int C, int NH,
                                   zo_stream_t stream) {
  const int hs = C / NH, ld = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  struct att_split s = att_split_of(B, T, C, NH);
  for (int o = 0; o < s.n_outer; o++) {
    const float *q = qkv + o * s.outer_qkv;
    att_gemm(true, false, T, T, hs, CUDA_R_32F, CUDA_R_32F, q + 2 * C, ld, s.inner_qkv,
             dout + o * s.outer_bt, C, s.inner_bt, datt + o * s.outer_att, T, s.inner_att, s.batch,
             1.0f, 0, stream);
  }
  int n_rows = B * NH * T;
  attention_softmax_backward_kernel<<<zo_ceil_div((size_t)n_rows, ATT_WARPS),
                                      dim3(ZO_WARP, ATT_WARPS), 0, zo_cuda_stream(stream)>>>(
      datt, att, n_rows, T, scale);
  ZO_CUDA_CHECK_LAUNCH();
  for (int o = 0; o < s.n_outer; o++) {
    const float *q = qkv + o * s.outer_qkv;
    const float *da = datt + o * s.outer_att, *a = att + o * s.outer_att;
    const float *d = dout + o * s.outer_bt;
    float *dq = dqkv + o * s.outer_qkv;
    att_gemm(false, false, hs, T, T, CUDA_R_32F, CUDA_R_32F, q + C, ld, s.inner_qkv, da, T,
             s.inner_att, dq, ld, s.inner_qkv, s.batch, 1.0f, 0, stream);
    att_gemm(false, true, hs, T, T, CUDA_R_32F, CUDA_R_32F, q, ld, s.inner_qkv, da, T, s.inner_att,
             dq + C, ld, s.inner_qkv, s.batch, 1.0f, 0, stream);
    att_gemm(false, true, hs, T, T, CUDA_R_32F, CUDA_R_32F, d, C, s.inner_bt, a, T, s.inner_att,
             dq + 2 * C, ld, s.inner_qkv, s.batch, 1.0f, 0, stream);
  }
}

static void attention_backward_dt(void *dqkv, void *datt, const void *dout, const void *qkv,
                                  const void *att, int B, int T, int C, int NH, enum zo_dtype dt,
                                  zo_stream_t stream) {
  const int hs = C / NH, ld = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  const cudaDataType_t type = zo_cuda_data_type(dt);
  const size_t es = zo_dtype_size(dt);
  struct att_split s = att_split_of(B, T, C, NH);
  struct att_chunk ch = att_chunk_of(T, s.batch);
  float *draw = att_scores(stream);
  for (int o = 0; o < s.n_outer; o++) {
    for (int h0 = 0; h0 < s.batch; h0 += ch.heads) {
      const int nb = s.batch - h0 < ch.heads ? s.batch - h0 : ch.heads;
      const long long q0 = o * s.outer_qkv + h0 * s.inner_qkv;
      const long long d0 = o * s.outer_bt + h0 * s.inner_bt;
      const long long a0 = o * s.outer_att + h0 * s.inner_att;
      for (int r0 = 0; r0 < T; r0 += ch.rows) {
        const int nr = T - r0 < ch.rows ? T - r0 : ch.rows;
        /* dout rows [r0, r0 + nr) against the values of keys [0, r0 + nr). */
        att_gemm(true, false, r0 + nr, nr, hs, type, CUDA_R_32F, att_at(qkv, q0 + 2 * C, es), ld,
                 s.inner_qkv, att_at(dout, d0 + (long long)r0 * C, es), C, s.inner_bt, draw, T,
                 (long long)nr * T, nb, 1.0f, ATT_GEMM_WS_BYTES, stream);
        ZO_CUDA_DT_DISPATCH(dt, attention_softmax_backward_dt, att_at_mut(datt, a0, es), draw,
                            att_at(att, a0, es), nb, nr, r0, T, s.inner_att, scale, stream);
      }
    }
  }
  for (int o = 0; o < s.n_outer; o++) {
    const long long q0 = o * s.outer_qkv;
    const void *da = att_at(datt, o * s.outer_att, es), *a = att_at(att, o * s.outer_att, es);
    const void *d = att_at(dout, o * s.outer_bt, es);
    att_gemm(false, false, hs, T, T, type, type, att_at(qkv, q0 + C, es), ld, s.inner_qkv, da, T,
             s.inner_att, att_at_mut(dqkv, q0, es), ld, s.inner_qkv, s.batch, 1.0f, 0, stream);
    att_gemm(false, true, hs, T, T, type, type, att_at(qkv, q0, es), ld, s.inner_qkv, da, T,
             s.inner_att, att_at_mut(dqkv, q0 + C, es), ld, s.inner_qkv, s.batch, 1.0f, 0, stream);
    att_gemm(false, true, hs, T, T, type, type, d, C, s.inner_bt, a, T, s.inner_att,
             att_at_mut(dqkv, q0 + 2 * C, es), ld, s.inner_qkv, s.batch, 1.0f, 0, stream);
  }
}

extern "C" void zo_cuda_attention_backward(void *dqkv, void *datt, const void *dout,
                                           const void *qkv, const void *att, int B, int T, int C,
                                           int NH, enum zo_dtype dt, zo_stream_t stream) {
  ZO_ASSERT(NH > 0 && C % NH == 0);
  (void)zo_cuda_data_type(dt);
  if (B == 0 || T == 0) return;
  if (dt == ZO_F32)
    attention_backward_f32((float *)dqkv, (float *)datt, (const float *)dout, (const float *)qkv,
                           (const float *)att, B, T, C, NH, stream);
  else
    attention_backward_dt(dqkv, datt, dout, qkv, att, B, T, C, NH, dt, stream);
}
