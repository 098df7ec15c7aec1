/* float64 references of the backend ops, shared by the CPU op tests
 * (tests/test-kernels-cpu-ops.c, tests/test-kernels-cpu-mixed.c): plain loops
 * in double precision, written from the ops' contracts (zo/backend.h) and
 * not from their implementations. Header-only (static), one test per
 * translation unit; libc and libm only. */
#ifndef ZO_REF64_H
#define ZO_REF64_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "zo_test.h"

/* wpe may be NULL (no position embedding). */
static inline void encoder_forward64(double *out, const int32_t *inp, const double *wte, const double *wpe,
                              int B, int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++)
        out[((size_t)b * T + t) * C + c] =
            wte[(size_t)inp[b * T + t] * C + c] + (wpe ? wpe[(size_t)t * C + c] : 0.0);
}

/* mean and rstd may be NULL. */
static inline void layernorm_forward64(double *out, double *mean, double *rstd, const double *inp,
                                const double *w, const double *bias, int N, int C) {
  for (int n = 0; n < N; n++) {
    const double *x = inp + (size_t)n * C;
    double m = 0.0, v = 0.0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
    double s = 1.0 / sqrt(v / C + 1e-5);
    for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (x[c] - m) * s * w[c] + bias[c];
    if (mean) mean[n] = m;
    if (rstd) rstd[n] = s;
  }
}

/* dinp, dw, db +=. */
static inline void layernorm_backward64(double *dinp, double *dw, double *db, const double *dout,
                                 const double *inp, const double *w, int N, int C) {
  for (int n = 0; n < N; n++) {
    const double *x = inp + (size_t)n * C;
    const double *d = dout + (size_t)n * C;
    double m = 0.0, v = 0.0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
    double s = 1.0 / sqrt(v / C + 1e-5);
    double a = 0.0, g = 0.0;
    for (int c = 0; c < C; c++) {
      a += w[c] * d[c];
      g += w[c] * d[c] * (x[c] - m) * s;
    }
    a /= C;
    g /= C;
    for (int c = 0; c < C; c++) {
      double norm = (x[c] - m) * s;
      dinp[(size_t)n * C + c] += (w[c] * d[c] - a - norm * g) * s;
      dw[c] += d[c] * norm;
      db[c] += d[c];
    }
  }
}

/* out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) per row; rstd may be NULL. */
static inline void rmsnorm_forward64(double *out, double *rstd, const double *inp, const double *w,
                                     double eps, int N, int C) {
  for (int n = 0; n < N; n++) {
    const double *x = inp + (size_t)n * C;
    double ss = 0.0;
    for (int c = 0; c < C; c++) ss += x[c] * x[c];
    const double s = 1.0 / sqrt(ss / C + eps);
    for (int c = 0; c < C; c++) out[(size_t)n * C + c] = x[c] * s * w[c];
    if (rstd) rstd[n] = s;
  }
}

/* dinp, dw +=. With s = rstd, norm = x s: d out_c / d x_k = w_c (s [c == k]
 * - x_c s^3 x_k / C), so dinp_k += s (w_k d_k - norm_k mean_c(w_c d_c norm_c)),
 * dw_c += d_c norm_c. */
static inline void rmsnorm_backward64(double *dinp, double *dw, const double *dout,
                                      const double *inp, const double *w, double eps, int N,
                                      int C) {
  for (int n = 0; n < N; n++) {
    const double *x = inp + (size_t)n * C;
    const double *d = dout + (size_t)n * C;
    double ss = 0.0;
    for (int c = 0; c < C; c++) ss += x[c] * x[c];
    const double s = 1.0 / sqrt(ss / C + eps);
    double g = 0.0;
    for (int c = 0; c < C; c++) g += w[c] * d[c] * x[c] * s;
    g /= C;
    for (int c = 0; c < C; c++) {
      dinp[(size_t)n * C + c] += s * (w[c] * d[c] - x[c] * s * g);
      dw[c] += d[c] * x[c] * s;
    }
  }
}

/* bias may be NULL. */
static inline void matmul_forward64(double *out, const double *inp, const double *w, const double *bias,
                             int N, int C, int OC) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double s = bias ? bias[o] : 0.0;
      for (int c = 0; c < C; c++) s += inp[(size_t)n * C + c] * w[(size_t)o * C + c];
      out[(size_t)n * OC + o] = s;
    }
}

/* dinp =, dw +=, db +=; each may be NULL. */
static inline void matmul_backward64(double *dinp, double *dw, double *db, const double *dout,
                              const double *inp, const double *w, int N, int C, int OC) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      double s = 0.0;
      for (int o = 0; o < OC; o++) s += dout[(size_t)n * OC + o] * w[(size_t)o * C + c];
      if (dinp) dinp[(size_t)n * C + c] = s;
    }
  for (int o = 0; o < OC; o++) {
    for (int c = 0; c < C; c++) {
      double s = 0.0;
      for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + o] * inp[(size_t)n * C + c];
      if (dw) dw[(size_t)o * C + c] += s;
    }
    double s = 0.0;
    for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + o];
    if (db) db[o] += s;
  }
}

/* Causal attention with grouped-query heads: qkv rows (B,T) of
 * (NH + 2 NKV) hs = [q heads | k heads | v heads], query head h using kv
 * head h / (NH / NKV); out (B,T,NH*hs). att (B,NH,T,T) may be NULL. */
static inline void attention_window_forward64(double *out, double *att, const double *qkv, int B, int T,
                                              int NH, int NKV, int hs, int W);
static inline void attention_forward64(double *out, double *att, const double *qkv, int B, int T,
                                       int NH, int NKV, int hs) {
  attention_window_forward64(out, att, qkv, B, T, NH, NKV, hs, 0);
}

/* The same, query t attending to keys (t - W, t] only (W 0: [0, t]). */
static inline void attention_window_forward64(double *out, double *att, const double *qkv, int B, int T,
                                              int NH, int NKV, int hs, int W) {
  const size_t ld = (size_t)(NH + 2 * NKV) * hs, ldo = (size_t)NH * hs;
  const int G = NH / NKV;
  double scale = 1.0 / sqrt((double)hs);
  double *row = zo_test_xmalloc((size_t)T * sizeof(double));
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const size_t kcol = (size_t)(NH + h / G) * hs, vcol = (size_t)(NH + NKV + h / G) * hs;
        const double *q = qkv + ((size_t)b * T + t) * ld + (size_t)h * hs;
        double maxv = -INFINITY, sum = 0.0;
        const int lo = W > 0 && t - W + 1 > 0 ? t - W + 1 : 0;
        for (int u = lo; u <= t; u++) {
          const double *k = qkv + ((size_t)b * T + u) * ld + kcol;
          double s = 0.0;
          for (int i = 0; i < hs; i++) s += q[i] * k[i];
          row[u] = s * scale;
          maxv = fmax(maxv, row[u]);
        }
        for (int u = lo; u <= t; u++) sum += (row[u] = exp(row[u] - maxv));
        for (int u = 0; u < T; u++) row[u] = u >= lo && u <= t ? row[u] / sum : 0.0;
        if (att) memcpy(att + (((size_t)b * NH + h) * T + t) * T, row, (size_t)T * sizeof(double));
        double *o = out + ((size_t)b * T + t) * ldo + (size_t)h * hs;
        const double *v = qkv + (size_t)b * T * ld + vcol;
        for (int i = 0; i < hs; i++) {
          double s = 0.0;
          for (int u = lo; u <= t; u++) s += row[u] * v[(size_t)u * ld + i];
          o[i] = s;
        }
      }
  free(row);
}

/* dqkv (B,T,(NH+2*NKV)*hs) overwritten; dk, dv of a kv head summed over
 * its group's query heads. */
static inline void attention_window_backward64(double *dqkv, const double *dout, const double *qkv, int B,
                                               int T, int NH, int NKV, int hs, int W);
static inline void attention_backward64(double *dqkv, const double *dout, const double *qkv, int B,
                                        int T, int NH, int NKV, int hs) {
  attention_window_backward64(dqkv, dout, qkv, B, T, NH, NKV, hs, 0);
}

/* The backward of attention_window_forward64: keys outside the window get
 * nothing. */
static inline void attention_window_backward64(double *dqkv, const double *dout, const double *qkv, int B,
                                               int T, int NH, int NKV, int hs, int W) {
  const size_t ld = (size_t)(NH + 2 * NKV) * hs, ldo = (size_t)NH * hs;
  const int G = NH / NKV;
  double scale = 1.0 / sqrt((double)hs);
  size_t n_att = (size_t)B * NH * T * T;
  double *att = zo_test_xmalloc(n_att * sizeof(double));
  double *out = zo_test_xmalloc((size_t)B * T * ldo * sizeof(double));
  double *datt = zo_test_xmalloc((size_t)T * sizeof(double));
  attention_window_forward64(out, att, qkv, B, T, NH, NKV, hs, W);
  memset(dqkv, 0, (size_t)B * T * ld * sizeof(double));
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const size_t kcol = (size_t)(NH + h / G) * hs, vcol = (size_t)(NH + NKV + h / G) * hs;
        const double *a = att + (((size_t)b * NH + h) * T + t) * T;
        const double *d = dout + ((size_t)b * T + t) * ldo + (size_t)h * hs;
        size_t qoff = ((size_t)b * T + t) * ld + (size_t)h * hs;
        const int lo = W > 0 && t - W + 1 > 0 ? t - W + 1 : 0;
        double dot = 0.0;
        for (int u = lo; u <= t; u++) {
          size_t voff = ((size_t)b * T + u) * ld + vcol;
          double s = 0.0;
          for (int i = 0; i < hs; i++) {
            s += d[i] * qkv[voff + i];
            dqkv[voff + i] += a[u] * d[i];
          }
          datt[u] = s;
          dot += a[u] * s;
        }
        for (int u = lo; u <= t; u++) {
          double dpre = a[u] * (datt[u] - dot) * scale;
          size_t koff = ((size_t)b * T + u) * ld + kcol;
          for (int i = 0; i < hs; i++) {
            dqkv[qoff + i] += dpre * qkv[koff + i];
            dqkv[koff + i] += dpre * qkv[qoff + i];
          }
        }
      }
  free(datt);
  free(out);
  free(att);
}

/* Rotary embedding, in place on the q and k heads of qkv (the attention
 * layout; v untouched): at position t, with h2 = hs/2, c = cos[t*h2+i],
 * s = sin[t*h2+i], each head's (x[i], x[i+h2]) becomes
 * (x[i] c - x[i+h2] s, x[i+h2] c + x[i] s). sgn = -1 gives the transpose
 * rotation (rope_backward's). */
static inline void rope64(double *qkv, const double *cos_t, const double *sin_t, double sgn, int B,
                          int T, int NH, int NKV, int hs) {
  const size_t ld = (size_t)(NH + 2 * NKV) * hs;
  const int h2 = hs / 2;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int hd = 0; hd < NH + NKV; hd++) {
        double *x = qkv + ((size_t)b * T + t) * ld + (size_t)hd * hs;
        for (int i = 0; i < h2; i++) {
          const double c = cos_t[(size_t)t * h2 + i], s = sgn * sin_t[(size_t)t * h2 + i];
          const double a = x[i], y = x[i + h2];
          x[i] = a * c - y * s;
          x[i + h2] = y * c + a * s;
        }
      }
}

static const double gelu_k = 0.79788456080286535588; /* sqrt(2/pi) */

static inline double gelu64(double x) {
  return 0.5 * x * (1.0 + tanh(gelu_k * (x + 0.044715 * x * x * x)));
}

static inline double gelu_grad64(double x) {
  double th = tanh(gelu_k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * gelu_k * (1.0 + 3.0 * 0.044715 * x * x);
}

/* SwiGLU over rows [gate (I) | up (I)] of inp (N, 2I): out (N, I) =
 * silu(gate) * up, silu(x) = x / (1 + e^-x). */
static inline void swiglu_forward64(double *out, const double *inp, size_t N, int I) {
  for (size_t n = 0; n < N; n++)
    for (int i = 0; i < I; i++) {
      const double g = inp[n * 2 * I + i], u = inp[n * 2 * I + I + i];
      out[n * I + i] = g / (1.0 + exp(-g)) * u;
    }
}

/* dinp (N, 2I) overwritten: with s = sigmoid(g), d silu / dg = s + g s (1 - s). */
static inline void swiglu_backward64(double *dinp, const double *inp, const double *dout, size_t N,
                                     int I) {
  for (size_t n = 0; n < N; n++)
    for (int i = 0; i < I; i++) {
      const double g = inp[n * 2 * I + i], u = inp[n * 2 * I + I + i], d = dout[n * I + i];
      const double s = 1.0 / (1.0 + exp(-g));
      dinp[n * 2 * I + i] = d * u * (s + g * s * (1.0 - s));
      dinp[n * 2 * I + I + i] = d * g * s;
    }
}

/* dlogits (N,Vp) may be NULL; padded columns get 0. */
static inline void crossentropy_forward64(double *losses, double *dlogits, const double *logits,
                                   const int32_t *targets, double dloss, int N, int V, int Vp) {
  for (int n = 0; n < N; n++) {
    const double *x = logits + (size_t)n * Vp;
    double *dx = dlogits ? dlogits + (size_t)n * Vp : NULL;
    if (dx)
      for (int i = 0; i < Vp; i++) dx[i] = 0.0;
    if (targets[n] < 0) {
      losses[n] = 0.0;
      continue;
    }
    double maxv = -INFINITY, sum = 0.0;
    for (int i = 0; i < V; i++) maxv = fmax(maxv, x[i]);
    for (int i = 0; i < V; i++) sum += exp(x[i] - maxv);
    losses[n] = log(sum) - (x[targets[n]] - maxv);
    if (dx)
      for (int i = 0; i < V; i++) dx[i] = (exp(x[i] - maxv) / sum - (i == targets[n])) * dloss;
  }
}

#endif /* ZO_REF64_H */
