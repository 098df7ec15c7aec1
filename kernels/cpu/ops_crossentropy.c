/* Fused softmax + cross-entropy over rows of padded logits, with the gradient
 * written in the same pass. Only columns [0, V) are read; [V, Vp) of dlogits
 * are written 0. The max-subtracted exponentials are summed in fp32 chunks
 * joined in double (one fp32 sum over 50k terms drifts by ~1e-6 relative);
 * everything else is fp32. dlogits may alias logits: each row reads its
 * target logit before overwriting, and every later write to element i
 * depends on element i only. bf16/fp16 logits: each row is widened into a
 * per-thread fp32 row first and dlogits rounded once from the fp32 values
 * the fp32 path would store. */
#include "cpu.h"
#include "ops_half.h"
#include "ops_math.h"

#include <math.h>
#include <string.h>

#define ZO_CE_CHUNK 512 /* terms summed in fp32 before joining the double sum */

/* Sum over [0, n) of e^(x[i] - maxv), in double across fp32 chunks (a double
 * accumulator inside the simd loop keeps gcc from vectorizing it). When e is
 * not NULL the exponentials are stored there too; e may alias x. */
static double sum_exp(float *e, const float *x, int n, float maxv) {
  double sum = 0.0;
  for (int i0 = 0; i0 < n; i0 += ZO_CE_CHUNK) {
    int i1 = i0 + ZO_CE_CHUNK < n ? i0 + ZO_CE_CHUNK : n;
    float part = 0.0f;
    if (e) {
#pragma omp simd reduction(+ : part)
      for (int i = i0; i < i1; i++) {
        e[i] = zo_expf(x[i] - maxv);
        part += e[i];
      }
    } else {
#pragma omp simd reduction(+ : part)
      for (int i = i0; i < i1; i++) part += zo_expf(x[i] - maxv);
    }
    sum += part;
  }
  return sum;
}

/* One row in fp32: the loss, and with dx the gradient (dx may alias x). */
static void crossentropy_row(float *loss, float *dx, const float *x, int target, float dloss, int V,
                             int Vp) {
  if (target < 0) {
    *loss = 0.0f;
    if (dx) memset(dx, 0, (size_t)Vp * sizeof(float));
    return;
  }
  float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
  for (int i = 0; i < V; i++) maxv = x[i] > maxv ? x[i] : maxv;
  float x_target = x[target];
  /* With dx, the exponentials stay there for the gradient below. */
  double sum = sum_exp(dx, x, V, maxv);
  *loss = (float)(log(sum) - ((double)x_target - (double)maxv));
  if (!dx) return;
  float norm = (float)(dloss / sum);
#pragma omp simd
  for (int i = 0; i < V; i++) dx[i] *= norm;
  dx[target] -= dloss;
  memset(dx + V, 0, (size_t)(Vp - V) * sizeof(float));
}

ZO_INLINE void widen_row(float *dst, const void *src, size_t off, int n, enum zo_dtype dt) {
#pragma omp simd
  for (int i = 0; i < n; i++) dst[i] = zo_ld(src, off + (size_t)i, dt);
}

ZO_INLINE void narrow_row(void *dst, size_t off, const float *src, int n, enum zo_dtype dt) {
#pragma omp simd
  for (int i = 0; i < n; i++) zo_st(dst, off + (size_t)i, src[i], dt);
}

void zo_cpu_crossentropy_forward(float *losses, void *dlogits, const void *logits,
                                 const int32_t *targets, float dloss, int N, int V, int Vp,
                                 enum zo_dtype dt) {
  ZO_ASSERT(V <= Vp);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const int target = targets[n];
    ZO_ASSERT(target >= -1 && target < V);
    const size_t off = (size_t)n * Vp;
    if (dt == ZO_F32) {
      crossentropy_row(losses + n, dlogits ? (float *)dlogits + off : NULL, (const float *)logits + off,
                       target, dloss, V, Vp);
      continue;
    }
    float *row = zo_cpu_scratch((size_t)Vp);
    ZO_DT_DISPATCH(dt, widen_row, row, logits, off, V);
    crossentropy_row(losses + n, dlogits ? row : NULL, row, target, dloss, V, Vp);
    if (dlogits) ZO_DT_DISPATCH(dt, narrow_row, dlogits, off, row, Vp);
  }
}
