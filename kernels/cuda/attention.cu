/* Causal self-attention with grouped-query heads as in the CPU backend: full
 * T x T score GEMMs per head (strided-batched cuBLASLt over the q, k, v views
 * of qkv, whose rows are ld = (NH + 2 NKV) hs apart: NH query heads, then NKV
 * key and NKV value heads, query head h reading kv head h / G, G = NH / NKV),
 * a causal softmax kernel that writes att with zeros above the diagonal, and
 * the AV GEMM. Backward: datt = dout V^T, the softmax backward (zeros above
 * the diagonal, so the full GEMMs after it add nothing from there), then
 * dq = datt K, dk = datt^T Q, dv = att^T dout; dk and dv sum over the G query
 * heads of their group, in head order (the first GEMM writes, the next add).
 * A sliding window W (zo_cuda_attention_window_forward) restricts query t to
 * keys (t - W, t] in the softmax kernels, which store zeros outside it: the
 * backward, reading att, is unchanged. Deliberately simple: the GEMMs compute the masked half too (2x the FLOPs)
 * and att is materialised; a flash-style kernel is the next step.
 *
 * fp32: the scores are computed into att and the softmax runs in place (and
 * likewise datt), exactly the code that existed before dtypes; dk, dv of a
 * group accumulate in dqkv (GEMM beta 1 after the group's first head).
 * bf16/fp16: the scores must stay fp32 (the CPU reference never rounds them),
 * but att is dt, so they go to fp32 scratch: the upper half of the stream's
 * cuBLASLt workspace (ATT_SCORES_BYTES), the score GEMMs getting the lower
 * half as their own workspace (stream order keeps every other use apart).
 * The heads of one cuBLASLt batch are processed in chunks of as many heads
 * as fit, or, when one head's T x T scores do not fit (T > 2048), in blocks
 * of query rows against keys [0, last row]. The softmax kernel reads a chunk
 * of scores and stores the probabilities rounded to dt into att; the AV GEMM
 * then multiplies those rounded values (dt operands, fp32 accumulation, out
 * rounded once). Backward the same way: dout V^T into fp32 scratch, the
 * softmax backward from it and the dt att, rounded into datt, then the dt
 * GEMMs from the stored datt and att. With G > 1, dk and dv are summed over
 * the group in fp32 in that same scratch (GEMMs with fp32 D, in chunks of kv
 * heads and key rows) and rounded once into dqkv by a store kernel; with
 * G == 1 their GEMMs write dt directly, as before GQA.
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
 * One cuBLASLt call covers, for one query head of each group, either all kv
 * heads of one batch row or all batch rows of one kv head, whichever is
 * longer: the strides are uniform there (att_split). */
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

/* The first key query t attends to under window W (0: no window). */
static __device__ __forceinline__ int att_lo(int W, int t) { return W > 0 && t - W + 1 > 0 ? t - W + 1 : 0; }

/* att rows (B*NH*T of them, length T) hold scaled scores; row r is query
 * r % T. Softmax over [lo, t] (lo: the sliding window's first key, 0
 * without one), zeros elsewhere. */
static __global__ void attention_softmax_kernel(float *att, int n_rows, int T, int W) {
  int row = blockIdx.x * ATT_WARPS + threadIdx.y;
  if (row >= n_rows) return;
  int t = row % T, lo = att_lo(W, t);
  float *a = att + (size_t)row * T;
  float maxv = -INFINITY;
  for (int j = lo + threadIdx.x; j <= t; j += ZO_WARP) maxv = fmaxf(maxv, a[j]);
  maxv = zo_warp_max(maxv);
  float sum = 0.0f;
  for (int j = lo + threadIdx.x; j <= t; j += ZO_WARP) {
    float e = expf(a[j] - maxv);
    a[j] = e;
    sum += e;
  }
  float inv = 1.0f / zo_warp_sum(sum);
  for (int j = lo + threadIdx.x; j <= t; j += ZO_WARP) a[j] *= inv;
  for (int j = threadIdx.x; j < lo; j += ZO_WARP) a[j] = 0.0f;
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
                                                   int r0, int T, long long att_stride, int W) {
  int row = blockIdx.x * ATT_WARPS + threadIdx.y;
  if (row >= nb * nr) return;
  const int t = r0 + row % nr, lo = att_lo(W, t);
  float *s = scores + (size_t)row * T;
  scalar_t *a = att + (size_t)(row / nr) * att_stride + (size_t)t * T;
  float maxv = -INFINITY;
  for (int j = lo + threadIdx.x; j <= t; j += ZO_WARP) maxv = fmaxf(maxv, s[j]);
  maxv = zo_warp_max(maxv);
  float sum = 0.0f;
  for (int j = lo + threadIdx.x; j <= t; j += ZO_WARP) {
    float e = expf(s[j] - maxv);
    s[j] = e;
    sum += e;
  }
  float inv = 1.0f / zo_warp_sum(sum);
  for (int j = lo + threadIdx.x; j <= t; j += ZO_WARP) zo_st(a, j, s[j] * inv);
  for (int j = threadIdx.x; j < lo; j += ZO_WARP) zo_st(a, j, 0.0f);
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
                                 long long att_stride, int W, zo_stream_t stream) {
  attention_softmax_dt_kernel<scalar_t>
      <<<zo_ceil_div((size_t)nb * nr, ATT_WARPS), dim3(ZO_WARP, ATT_WARPS), 0,
         zo_cuda_stream(stream)>>>((scalar_t *)att, scores, nb, nr, r0, T, att_stride, W);
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

/* How the (b, g, r) triples (batch row, kv head, query head h = g G + r of
 * its group) split into an outer loop over (kvo, r) and a cuBLASLt batch,
 * the batch being over kv heads g (kvo = b) or over batch rows b (kvo = g);
 * element offsets and per-batch-entry strides of each tensor. */
struct att_split {
  int NH, NKV, G, hs, T;
  int ld, ldo;    /* qkv row (NH + 2 NKV) hs, out row NH hs */
  int n_kvo;      /* outer kv units: B (batch over g) or NKV (batch over b) */
  int batch;      /* NKV or B */
  bool over_g;    /* the batch runs over kv heads */
  long long inner_q, inner_kv, inner_bt, inner_att;
};

static struct att_split att_split_of(int B, int T, int NH, int NKV, int hs) {
  struct att_split s;
  s.NH = NH, s.NKV = NKV, s.G = NH / NKV, s.hs = hs, s.T = T;
  s.ld = (NH + 2 * NKV) * hs, s.ldo = NH * hs;
  s.over_g = B <= NKV;
  if (s.over_g) { /* loop over batch rows, batch the kv heads (and their query heads) */
    s.n_kvo = B;
    s.batch = NKV;
    s.inner_q = (long long)s.G * hs, s.inner_kv = hs, s.inner_bt = (long long)s.G * hs;
    s.inner_att = (long long)s.G * T * T;
  } else { /* loop over heads, batch the batch rows */
    s.n_kvo = NKV;
    s.batch = B;
    s.inner_q = (long long)T * s.ld, s.inner_kv = (long long)T * s.ld;
    s.inner_bt = (long long)T * s.ldo, s.inner_att = (long long)NH * T * T;
  }
  return s;
}

/* Offsets of the first batch entry of outer step (kvo, r): q of its query
 * head, k of its kv head (v is NKV hs after k), out, att. */
struct att_at {
  long long q, k, v, bt, att;
};

static struct att_at att_offsets(const struct att_split *s, int kvo, int r) {
  const long long T = s->T, hs = s->hs;
  int b, g;
  if (s->over_g) {
    b = kvo, g = 0;
  } else {
    b = 0, g = kvo;
  }
  const int h = g * s->G + r;
  struct att_at o;
  o.q = b * T * s->ld + h * hs;
  o.k = b * T * s->ld + (s->NH + g) * hs;
  o.v = o.k + s->NKV * hs;
  o.bt = b * T * s->ldo + h * hs;
  o.att = ((long long)b * s->NH + h) * T * T;
  return o;
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
static const void *att_ptr(const void *p, long long i, size_t es) {
  return (const char *)p + i * (long long)es;
}
static void *att_ptr_mut(void *p, long long i, size_t es) { return (char *)p + i * (long long)es; }

static void att_gemm(bool trans_a, bool trans_b, int m, int n, int k, cudaDataType_t ab_type,
                     cudaDataType_t d_type, const void *a, int lda, long long stride_a,
                     const void *b, int ldb, long long stride_b, void *d, int ldd,
                     long long stride_d, int batch, float alpha, float beta,
                     size_t workspace_bytes, zo_stream_t stream) {
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
  g.beta = beta;
  g.workspace_bytes = workspace_bytes;
  zo_cuda_gemm(&g, stream);
}

/* ---- forward -------------------------------------------------------------------- */

static void attention_forward_f32(float *out, float *att, const float *qkv, int B, int T, int NH,
                                  int NKV, int hs, int W, zo_stream_t stream) {
  const float scale = 1.0f / sqrtf((float)hs);
  const struct att_split s = att_split_of(B, T, NH, NKV, hs);
  for (int kvo = 0; kvo < s.n_kvo; kvo++)
    for (int r = 0; r < s.G; r++) {
      const struct att_at o = att_offsets(&s, kvo, r);
      att_gemm(true, false, T, T, hs, CUDA_R_32F, CUDA_R_32F, qkv + o.k, s.ld, s.inner_kv,
               qkv + o.q, s.ld, s.inner_q, att + o.att, T, s.inner_att, s.batch, scale, 0.0f, 0,
               stream);
    }
  int n_rows = B * NH * T;
  attention_softmax_kernel<<<zo_ceil_div((size_t)n_rows, ATT_WARPS), dim3(ZO_WARP, ATT_WARPS), 0,
                             zo_cuda_stream(stream)>>>(att, n_rows, T, W);
  ZO_CUDA_CHECK_LAUNCH();
  for (int kvo = 0; kvo < s.n_kvo; kvo++)
    for (int r = 0; r < s.G; r++) {
      const struct att_at o = att_offsets(&s, kvo, r);
      att_gemm(false, false, hs, T, T, CUDA_R_32F, CUDA_R_32F, qkv + o.v, s.ld, s.inner_kv,
               att + o.att, T, s.inner_att, out + o.bt, s.ldo, s.inner_bt, s.batch, 1.0f, 0.0f, 0,
               stream);
    }
}

static void attention_forward_dt(void *out, void *att, const void *qkv, int B, int T, int NH,
                                 int NKV, int hs, int W, enum zo_dtype dt, zo_stream_t stream) {
  const float scale = 1.0f / sqrtf((float)hs);
  const cudaDataType_t type = zo_cuda_data_type(dt);
  const size_t es = zo_dtype_size(dt);
  const struct att_split s = att_split_of(B, T, NH, NKV, hs);
  const struct att_chunk ch = att_chunk_of(T, s.batch);
  float *scores = att_scores(stream);
  for (int kvo = 0; kvo < s.n_kvo; kvo++)
    for (int r = 0; r < s.G; r++) {
      const struct att_at o = att_offsets(&s, kvo, r);
      for (int h0 = 0; h0 < s.batch; h0 += ch.heads) {
        const int nb = s.batch - h0 < ch.heads ? s.batch - h0 : ch.heads;
        const long long q0 = o.q + h0 * s.inner_q, k0 = o.k + h0 * s.inner_kv;
        void *a = att_ptr_mut(att, o.att + h0 * s.inner_att, es);
        for (int r0 = 0; r0 < T; r0 += ch.rows) {
          const int nr = T - r0 < ch.rows ? T - r0 : ch.rows;
          /* Queries [r0, r0 + nr) against the keys they see, [0, r0 + nr). */
          att_gemm(true, false, r0 + nr, nr, hs, type, CUDA_R_32F, att_ptr(qkv, k0, es), s.ld,
                   s.inner_kv, att_ptr(qkv, q0 + (long long)r0 * s.ld, es), s.ld, s.inner_q,
                   scores, T, (long long)nr * T, nb, scale, 0.0f, ATT_GEMM_WS_BYTES, stream);
          ZO_CUDA_DT_DISPATCH(dt, attention_softmax_dt, a, scores, nb, nr, r0, T, s.inner_att, W,
                              stream);
        }
      }
    }
  for (int kvo = 0; kvo < s.n_kvo; kvo++)
    for (int r = 0; r < s.G; r++) {
      const struct att_at o = att_offsets(&s, kvo, r);
      att_gemm(false, false, hs, T, T, type, type, att_ptr(qkv, o.v, es), s.ld, s.inner_kv,
               att_ptr(att, o.att, es), T, s.inner_att, att_ptr_mut(out, o.bt, es), s.ldo,
               s.inner_bt, s.batch, 1.0f, 0.0f, 0, stream);
    }
}

extern "C" void zo_cuda_attention_window_forward(void *out, void *att, const void *qkv, int B, int T,
                                                 int NH, int NKV, int hs, int window, enum zo_dtype dt,
                                                 zo_stream_t stream) {
  ZO_ASSERT(NH > 0 && NKV > 0 && NH % NKV == 0 && hs > 0 && window >= 0);
  (void)zo_cuda_data_type(dt);
  if (B == 0 || T == 0) return;
  if (dt == ZO_F32)
    attention_forward_f32((float *)out, (float *)att, (const float *)qkv, B, T, NH, NKV, hs, window,
                          stream);
  else
    attention_forward_dt(out, att, qkv, B, T, NH, NKV, hs, window, dt, stream);
}

extern "C" void zo_cuda_attention_forward(void *out, void *att, const void *qkv, int B, int T,
                                          int NH, int NKV, int hs, enum zo_dtype dt,
                                          zo_stream_t stream) {
  zo_cuda_attention_window_forward(out, att, qkv, B, T, NH, NKV, hs, 0, dt, stream);
}

/* ---- backward ------------------------------------------------------------------- */

static void attention_backward_f32(float *dqkv, float *datt, const float *dout, const float *qkv,
                                   const float *att, int B, int T, int NH, int NKV, int hs,
                                   zo_stream_t stream) {
  const float scale = 1.0f / sqrtf((float)hs);
  const struct att_split s = att_split_of(B, T, NH, NKV, hs);
  for (int kvo = 0; kvo < s.n_kvo; kvo++)
    for (int r = 0; r < s.G; r++) {
      const struct att_at o = att_offsets(&s, kvo, r);
      att_gemm(true, false, T, T, hs, CUDA_R_32F, CUDA_R_32F, qkv + o.v, s.ld, s.inner_kv,
               dout + o.bt, s.ldo, s.inner_bt, datt + o.att, T, s.inner_att, s.batch, 1.0f, 0.0f,
               0, stream);
    }
  int n_rows = B * NH * T;
  attention_softmax_backward_kernel<<<zo_ceil_div((size_t)n_rows, ATT_WARPS),
                                      dim3(ZO_WARP, ATT_WARPS), 0, zo_cuda_stream(stream)>>>(
      datt, att, n_rows, T, scale);
  ZO_CUDA_CHECK_LAUNCH();
  for (int kvo = 0; kvo < s.n_kvo; kvo++)
    for (int r = 0; r < s.G; r++) {
      const struct att_at o = att_offsets(&s, kvo, r);
      const float beta = r == 0 ? 0.0f : 1.0f; /* dk, dv: the group's sum */
      att_gemm(false, false, hs, T, T, CUDA_R_32F, CUDA_R_32F, qkv + o.k, s.ld, s.inner_kv,
               datt + o.att, T, s.inner_att, dqkv + o.q, s.ld, s.inner_q, s.batch, 1.0f, 0.0f, 0,
               stream);
      att_gemm(false, true, hs, T, T, CUDA_R_32F, CUDA_R_32F, qkv + o.q, s.ld, s.inner_q,
               datt + o.att, T, s.inner_att, dqkv + o.k, s.ld, s.inner_kv, s.batch, 1.0f, beta, 0,
               stream);
      att_gemm(false, true, hs, T, T, CUDA_R_32F, CUDA_R_32F, dout + o.bt, s.ldo, s.inner_bt,
               att + o.att, T, s.inner_att, dqkv + o.v, s.ld, s.inner_kv, s.batch, 1.0f, beta, 0,
               stream);
    }
}

/* G > 1, bf16/fp16: the fp32 sums of dk and dv of nb kv heads (batch entries
 * e0.., inner_kv apart) over key rows [j0, j0 + nr), at acc as (2, nb, nr,
 * hs), rounded once into dqkv at k (v is NKV hs after it). */
template <typename scalar_t>
static __global__ void attention_store_kv_kernel(scalar_t *dqkv, const float *acc, long long k,
                                                 long long v, long long inner_kv, int ld, int nb,
                                                 int nr, int j0, int hs) {
  const size_t n = (size_t)2 * nb * nr * hs;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const int d = (int)(i % hs);
    const size_t row = i / hs; /* (which, e, j) */
    const int j = (int)(row % nr), e = (int)(row / nr % nb), which = (int)(row / nr / nb);
    const long long base = (which ? v : k) + e * inner_kv + (long long)(j0 + j) * ld + d;
    zo_st(dqkv, (size_t)base, acc[i]);
  }
}

template <typename scalar_t>
static void attention_store_kv(void *dqkv, const float *acc, long long k, long long v,
                               long long inner_kv, int ld, int nb, int nr, int j0, int hs,
                               zo_stream_t stream) {
  const int block = 256;
  const size_t n = (size_t)2 * nb * nr * hs;
  attention_store_kv_kernel<scalar_t><<<zo_cuda_grid_1d(n, block), block, 0, zo_cuda_stream(stream)>>>(
      (scalar_t *)dqkv, acc, k, v, inner_kv, ld, nb, nr, j0, hs);
  ZO_CUDA_CHECK_LAUNCH();
}

/* G > 1, bf16/fp16: dk, dv summed over each group in fp32 scratch (the
 * upper half of the workspace, the GEMMs getting the lower half), in chunks
 * of kv heads and key rows that fit, then rounded once into dqkv. */
static void attention_backward_kv_grouped(void *dqkv, const void *datt, const void *dout,
                                          const void *qkv, const void *att,
                                          const struct att_split *s, enum zo_dtype dt,
                                          zo_stream_t stream) {
  const int T = s->T, hs = s->hs;
  const cudaDataType_t type = zo_cuda_data_type(dt);
  const size_t es = zo_dtype_size(dt), cap = ATT_SCORES_BYTES / sizeof(float);
  const size_t per_head = (size_t)2 * T * hs; /* dk and dv of one kv head */
  int nb_max, nr_max;
  if (per_head <= cap) {
    nr_max = T;
    nb_max = cap / per_head < (size_t)s->batch ? (int)(cap / per_head) : s->batch;
  } else {
    /* Whole 16-row steps keep the datt and att row offsets aligned. */
    nb_max = 1;
    nr_max = (int)(cap / ((size_t)2 * hs)) / 16 * 16;
    if (nr_max == 0)
      zo_abort(__FILE__, __LINE__,
               "attention: hs = %d: 16 key rows of fp32 dk and dv exceed the %zu bytes of scratch "
               "in the stream workspace",
               hs, (size_t)ATT_SCORES_BYTES);
  }
  float *acc = att_scores(stream);
  for (int kvo = 0; kvo < s->n_kvo; kvo++)
    for (int e0 = 0; e0 < s->batch; e0 += nb_max) {
      const int nb = s->batch - e0 < nb_max ? s->batch - e0 : nb_max;
      for (int j0 = 0; j0 < T; j0 += nr_max) {
        const int nr = T - j0 < nr_max ? T - j0 : nr_max;
        float *dk = acc, *dv = acc + (size_t)nb * nr * hs;
        for (int r = 0; r < s->G; r++) {
          const struct att_at o = att_offsets(s, kvo, r);
          const float beta = r == 0 ? 0.0f : 1.0f;
          /* Keys [j0, j0 + nr): rows j0.. of datt and att seen as (Tk, Tq). */
          const long long a0 = o.att + e0 * s->inner_att + j0;
          att_gemm(false, true, hs, nr, T, type, CUDA_R_32F,
                   att_ptr(qkv, o.q + e0 * s->inner_q, es), s->ld, s->inner_q,
                   att_ptr(datt, a0, es), T, s->inner_att, dk, hs, (long long)nr * hs, nb, 1.0f,
                   beta, ATT_GEMM_WS_BYTES, stream);
          att_gemm(false, true, hs, nr, T, type, CUDA_R_32F,
                   att_ptr(dout, o.bt + e0 * s->inner_bt, es), s->ldo, s->inner_bt,
                   att_ptr(att, a0, es), T, s->inner_att, dv, hs, (long long)nr * hs, nb, 1.0f,
                   beta, ATT_GEMM_WS_BYTES, stream);
        }
        const struct att_at o = att_offsets(s, kvo, 0);
        ZO_CUDA_DT_DISPATCH(dt, attention_store_kv, dqkv, acc, o.k + e0 * s->inner_kv,
                            o.v + e0 * s->inner_kv, s->inner_kv, s->ld, nb, nr, j0, hs, stream);
      }
    }
}

static void attention_backward_dt(void *dqkv, void *datt, const void *dout, const void *qkv,
                                  const void *att, int B, int T, int NH, int NKV, int hs,
                                  enum zo_dtype dt, zo_stream_t stream) {
  const float scale = 1.0f / sqrtf((float)hs);
  const cudaDataType_t type = zo_cuda_data_type(dt);
  const size_t es = zo_dtype_size(dt);
  const struct att_split s = att_split_of(B, T, NH, NKV, hs);
  const struct att_chunk ch = att_chunk_of(T, s.batch);
  float *draw = att_scores(stream);
  for (int kvo = 0; kvo < s.n_kvo; kvo++)
    for (int r = 0; r < s.G; r++) {
      const struct att_at o = att_offsets(&s, kvo, r);
      for (int h0 = 0; h0 < s.batch; h0 += ch.heads) {
        const int nb = s.batch - h0 < ch.heads ? s.batch - h0 : ch.heads;
        const long long v0 = o.v + h0 * s.inner_kv, d0 = o.bt + h0 * s.inner_bt;
        const long long a0 = o.att + h0 * s.inner_att;
        for (int r0 = 0; r0 < T; r0 += ch.rows) {
          const int nr = T - r0 < ch.rows ? T - r0 : ch.rows;
          /* dout rows [r0, r0 + nr) against the values of keys [0, r0 + nr). */
          att_gemm(true, false, r0 + nr, nr, hs, type, CUDA_R_32F, att_ptr(qkv, v0, es), s.ld,
                   s.inner_kv, att_ptr(dout, d0 + (long long)r0 * s.ldo, es), s.ldo, s.inner_bt,
                   draw, T, (long long)nr * T, nb, 1.0f, 0.0f, ATT_GEMM_WS_BYTES, stream);
          ZO_CUDA_DT_DISPATCH(dt, attention_softmax_backward_dt, att_ptr_mut(datt, a0, es), draw,
                              att_ptr(att, a0, es), nb, nr, r0, T, s.inner_att, scale, stream);
        }
      }
    }
  for (int kvo = 0; kvo < s.n_kvo; kvo++)
    for (int r = 0; r < s.G; r++) {
      const struct att_at o = att_offsets(&s, kvo, r);
      const void *da = att_ptr(datt, o.att, es), *a = att_ptr(att, o.att, es);
      att_gemm(false, false, hs, T, T, type, type, att_ptr(qkv, o.k, es), s.ld, s.inner_kv, da, T,
               s.inner_att, att_ptr_mut(dqkv, o.q, es), s.ld, s.inner_q, s.batch, 1.0f, 0.0f, 0,
               stream);
      if (s.G > 1) continue; /* dk, dv: summed over the group below */
      att_gemm(false, true, hs, T, T, type, type, att_ptr(qkv, o.q, es), s.ld, s.inner_q, da, T,
               s.inner_att, att_ptr_mut(dqkv, o.k, es), s.ld, s.inner_kv, s.batch, 1.0f, 0.0f, 0,
               stream);
      att_gemm(false, true, hs, T, T, type, type, att_ptr(dout, o.bt, es), s.ldo, s.inner_bt, a, T,
               s.inner_att, att_ptr_mut(dqkv, o.v, es), s.ld, s.inner_kv, s.batch, 1.0f, 0.0f, 0,
               stream);
    }
  if (s.G > 1) attention_backward_kv_grouped(dqkv, datt, dout, qkv, att, &s, dt, stream);
}

extern "C" void zo_cuda_attention_backward(void *dqkv, void *datt, const void *dout,
                                           const void *qkv, const void *att, int B, int T, int NH,
                                           int NKV, int hs, enum zo_dtype dt, zo_stream_t stream) {
  ZO_ASSERT(NH > 0 && NKV > 0 && NH % NKV == 0 && hs > 0);
  (void)zo_cuda_data_type(dt);
  if (B == 0 || T == 0) return;
  if (dt == ZO_F32)
    attention_backward_f32((float *)dqkv, (float *)datt, (const float *)dout, (const float *)qkv,
                           (const float *)att, B, T, NH, NKV, hs, stream);
  else
    attention_backward_dt(dqkv, datt, dout, qkv, att, B, T, NH, NKV, hs, dt, stream);
}
