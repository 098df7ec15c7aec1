/* Causal multi-head self-attention as in the CPU backend: full T x T score
 * GEMMs per head (strided-batched cuBLASLt over the q, k, v views of qkv,
 * whose rows are 3C apart and whose heads are hs apart), a causal softmax
 * kernel that writes att with zeros above the diagonal, and the AV GEMM.
 * Backward: datt = dout V^T, the softmax backward in place (zeros above the
 * diagonal, so the full GEMMs after it add nothing from there), then
 * dq = datt K, dk = datt^T Q, dv = att^T dout, each overwriting its third of
 * dqkv. Deliberately simple: the GEMMs compute the masked half too (2x the
 * FLOPs) and att is materialised; a flash-style kernel is the next step.
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
#include "matmul.cuh"

#include <math.h>
#include <string.h>

#define ATT_WARPS 8 /* rows (warps) per block in the softmax kernels */

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

static void att_gemm(bool trans_a, bool trans_b, int m, int n, int k, const float *a, int lda,
                     long long stride_a, const float *b, int ldb, long long stride_b, float *d,
                     int ldd, long long stride_d, int batch, float alpha, zo_stream_t stream) {
  struct zo_gemm g;
  memset(&g, 0, sizeof g);
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = m;
  g.n = n;
  g.k = k;
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
  zo_cuda_gemm(&g, stream);
}

extern "C" void zo_cuda_attention_forward(float *out, float *att, const float *qkv, int B, int T,
                                          int C, int NH, zo_stream_t stream) {
  ZO_ASSERT(NH > 0 && C % NH == 0);
  if (B == 0 || T == 0) return;
  const int hs = C / NH, ld = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  struct att_split s = att_split_of(B, T, C, NH);
  for (int o = 0; o < s.n_outer; o++) {
    const float *q = qkv + o * s.outer_qkv;
    float *a = att + o * s.outer_att;
    att_gemm(true, false, T, T, hs, q + C, ld, s.inner_qkv, q, ld, s.inner_qkv, a, T, s.inner_att,
             s.batch, scale, stream);
  }
  int n_rows = B * NH * T;
  attention_softmax_kernel<<<zo_ceil_div((size_t)n_rows, ATT_WARPS), dim3(ZO_WARP, ATT_WARPS), 0,
                             zo_cuda_stream(stream)>>>(att, n_rows, T);
  ZO_CUDA_CHECK_LAUNCH();
  for (int o = 0; o < s.n_outer; o++) {
    const float *q = qkv + o * s.outer_qkv;
    att_gemm(false, false, hs, T, T, q + 2 * C, ld, s.inner_qkv, att + o * s.outer_att, T,
             s.inner_att, out + o * s.outer_bt, C, s.inner_bt, s.batch, 1.0f, stream);
  }
}

extern "C" void zo_cuda_attention_backward(float *dqkv, float *datt, const float *dout,
                                           const float *qkv, const float *att, int B, int T, int C,
                                           int NH, zo_stream_t stream) {
  ZO_ASSERT(NH > 0 && C % NH == 0);
  if (B == 0 || T == 0) return;
  const int hs = C / NH, ld = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  struct att_split s = att_split_of(B, T, C, NH);
  for (int o = 0; o < s.n_outer; o++) {
    const float *q = qkv + o * s.outer_qkv;
    att_gemm(true, false, T, T, hs, q + 2 * C, ld, s.inner_qkv, dout + o * s.outer_bt, C,
             s.inner_bt, datt + o * s.outer_att, T, s.inner_att, s.batch, 1.0f, stream);
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
    att_gemm(false, false, hs, T, T, q + C, ld, s.inner_qkv, da, T, s.inner_att, dq, ld,
             s.inner_qkv, s.batch, 1.0f, stream);
    att_gemm(false, true, hs, T, T, q, ld, s.inner_qkv, da, T, s.inner_att, dq + C, ld, s.inner_qkv,
             s.batch, 1.0f, stream);
    att_gemm(false, true, hs, T, T, d, C, s.inner_bt, a, T, s.inner_att, dq + 2 * C, ld,
             s.inner_qkv, s.batch, 1.0f, stream);
  }
}
