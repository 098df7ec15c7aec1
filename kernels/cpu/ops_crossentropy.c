/* Fused softmax + cross-entropy over rows of padded logits, with the gradient
 * written in the same pass. Only columns [0, V) are read; [V, Vp) of dlogits
 * are written 0. The max-subtracted exponentials are summed in fp32 chunks
 * joined in double (one fp32 sum over 50k terms drifts by ~1e-6 relative);
 * everything else is fp32. dlogits may alias logits: each row reads its
 * target logit before overwriting, and every later write to element i
 * depends on element i only. */
#include "cpu.h"
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

void zo_cpu_crossentropy_forward(float *losses, float *dlogits, const float *logits,
                                 const int32_t *targets, float dloss, int N, int V, int Vp) {
  ZO_ASSERT(V <= Vp);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *x = logits + (size_t)n * Vp;
    float *dx = dlogits ? dlogits + (size_t)n * Vp : NULL;
    int target = targets[n];
    ZO_ASSERT(target >= -1 && target < V);
    if (target < 0) {
      losses[n] = 0.0f;
      if (dx) memset(dx, 0, (size_t)Vp * sizeof(float));
      continue;
    }
    float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
    for (int i = 0; i < V; i++) maxv = x[i] > maxv ? x[i] : maxv;
    float x_target = x[target];
    /* With dx, the exponentials stay there for the gradient below. */
    double sum = sum_exp(dx, x, V, maxv);
    losses[n] = (float)(log(sum) - ((double)x_target - (double)maxv));
    if (!dx) continue;
    float norm = (float)(dloss / sum);
#pragma omp simd
    for (int i = 0; i < V; i++) dx[i] *= norm;
    dx[target] -= dloss;
    memset(dx + V, 0, (size_t)(Vp - V) * sizeof(float));
  }
}
