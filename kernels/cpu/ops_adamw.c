/* AdamW update and deterministic sum of squares on host memory (OpenMP +
 * SIMD): the CPU backend's adamw_update and sumsq, and what offload/adamw.c's
 * zo_adamw_update and zo_sumsq call. The update reproduces torch 1.13's CPU
 * (AVX2 kernels) _single_tensor_adamw bit for bit: the same scalars rounded to
 * float at the same points, the same roundings per element
 * (tests/reference/adamw_torch.py). Neither allocates nor keeps state. */
#include "cpu.h"

#include <math.h>
#include <stddef.h>

/* Below this many elements a parallel region costs more than it saves. */
#define ZO_ADAMW_PAR_MIN ((size_t)1 << 15)

/* -ffp-contract=fast (project-wide) would fuse p*decay into the final add:
 * PyTorch rounds each in-place op, so contraction is off here and the two
 * fusions torch 1.13 does perform (Vectorized fmadd in add_ and addcmul_) are
 * written as fmaf. clang's -ffp-contract=fast overrides every pragma, so a
 * clang build is within an ulp of torch, not bit-equal. */
#if defined(__clang__)
#define ZO_FP_CONTRACT_OFF
#else
#define ZO_FP_CONTRACT_OFF __attribute__((optimize("fp-contract=off")))
#endif

ZO_FP_CONTRACT_OFF
void zo_cpu_adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr_f,
                         float beta1_f, float beta2_f, float eps, float weight_decay, bool decay,
                         long t, float grad_scale) {
  ZO_ASSERT(t >= 1);
  if (n == 0) return;
  ZO_ASSERT(p != NULL && g != NULL && m != NULL && v != NULL);

  /* Scalars as PyTorch forms them: Python doubles, cast to float by the kernel
   * that consumes them. */
  const double lr = lr_f, beta1 = beta1_f, beta2 = beta2_f;
  const double bc1 = 1.0 - pow(beta1, (double)t);
  const double bc2 = 1.0 - pow(beta2, (double)t);
  const float decay_f = decay ? (float)(1.0 - lr * (double)weight_decay) : 1.0f;
  const float b1 = beta1_f, c1 = (float)(1.0 - beta1);
  const float b2 = beta2_f, c2 = (float)(1.0 - beta2);
  const float neg_step = (float)(-(lr / bc1));
  const float bc2_sqrt = (float)sqrt(bc2);

#pragma omp parallel for simd schedule(static) if (n >= ZO_ADAMW_PAR_MIN)
  for (size_t i = 0; i < n; i++) {
    const float gi = g[i] * grad_scale;
    const float pi = p[i] * decay_f; /* decay_f == 1 is exact */
    const float mi = fmaf(gi, c1, m[i] * b1);
    const float vi = fmaf(c2 * gi, gi, v[i] * b2);
    const float denom = sqrtf(vi) / bc2_sqrt + eps;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + (neg_step * mi) / denom;
  }
}

/* ZO_SUMSQ_CHUNKS chunks, each summed by one thread and combined in chunk
 * order: the result depends on neither the thread count nor the scheduling,
 * so two runs (and every offload placement) get the bit-identical norm. An
 * OpenMP reduction combines per-thread partials in arrival order instead. */
double zo_cpu_sumsq(const float *x, size_t n) {
  ZO_ASSERT(n == 0 || x != NULL);
  double partial[ZO_SUMSQ_CHUNKS];
  const size_t chunk = (n + ZO_SUMSQ_CHUNKS - 1) / ZO_SUMSQ_CHUNKS;
#pragma omp parallel for schedule(static) if (n >= ZO_ADAMW_PAR_MIN)
  for (int c = 0; c < ZO_SUMSQ_CHUNKS; c++) {
    const size_t lo = (size_t)c * chunk < n ? (size_t)c * chunk : n;
    const size_t hi = lo + chunk < n ? lo + chunk : n;
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (size_t i = lo; i < hi; i++) {
      const double xi = x[i];
      acc += xi * xi;
    }
    partial[c] = acc;
  }
  double sum = 0.0;
  for (int c = 0; c < ZO_SUMSQ_CHUNKS; c++) sum += partial[c];
  return sum;
}
