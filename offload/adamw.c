/* CPU AdamW in fp32, global gradient norm, clip coefficient, learning-rate
 * schedules. The update is one fused pass over p, g, m, v (28 bytes per
 * parameter, memory bound) that reproduces torch 1.13's CPU (AVX2 kernels)
 * _single_tensor_adamw bit for bit: the same scalars rounded to float at the
 * same points, the same roundings per element (tests/reference/adamw_torch.py).
 * It does not write grads, does not allocate and keeps no state: the step
 * count t comes from the caller. */
#include "zo/adamw.h"

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
void zo_adamw_update(float *p, const float *g, float *m, float *v, size_t n,
                     const struct zo_adamw_hparams *hp, bool decay, long t, float grad_scale) {
  ZO_ASSERT(hp != NULL);
  ZO_ASSERT(t >= 1);
  if (n == 0) return;
  ZO_ASSERT(p != NULL && g != NULL && m != NULL && v != NULL);

  /* Scalars as PyTorch forms them: Python doubles, cast to float by the kernel
   * that consumes them. */
  const double lr = hp->lr, beta1 = hp->beta1, beta2 = hp->beta2;
  const double bc1 = 1.0 - pow(beta1, (double)t);
  const double bc2 = 1.0 - pow(beta2, (double)t);
  const float decay_f = decay ? (float)(1.0 - lr * (double)hp->weight_decay) : 1.0f;
  const float b1 = hp->beta1, c1 = (float)(1.0 - beta1);
  const float b2 = hp->beta2, c2 = (float)(1.0 - beta2);
  const float neg_step = (float)(-(lr / bc1));
  const float bc2_sqrt = (float)sqrt(bc2);
  const float eps = hp->eps;

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

/* A fixed number of chunks, each summed by one thread and combined in chunk
 * order: the result depends on neither the thread count nor the scheduling,
 * so two runs (and every offload placement) get the bit-identical norm. An
 * OpenMP reduction combines per-thread partials in arrival order instead. */
#define ZO_SUMSQ_CHUNKS 64

double zo_sumsq(const float *x, size_t n) {
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

/* NaN norms stay NaN (as torch's clamp does) so that a poisoned gradient is
 * never silently applied unclipped; an infinite norm gives 0. */
float zo_clip_coef(double norm, double max_norm) {
  if (!(max_norm > 0.0)) return 1.0f;
  const double coef = max_norm / (norm + 1e-6);
  if (isnan(coef)) return NAN;
  return coef < 1.0 ? (float)coef : 1.0f;
}

double zo_lr_at(const struct zo_lr_schedule *s, long t) {
  ZO_ASSERT(s != NULL);
  const long w = s->warmup_steps > 0 ? s->warmup_steps : 0;
  const bool warming = w > 0 && t <= w;

  switch (s->kind) {
  case ZO_LR_CONSTANT:
    return s->lr;
  case ZO_LR_WARMUP:
    return warming ? s->min_lr + (s->lr - s->min_lr) * (double)t / (double)w : s->lr;
  case ZO_LR_WARMUP_COSINE: {
    if (warming) return s->lr * (double)t / (double)w;
    if (t >= s->total_steps) return s->min_lr;
    const double frac = (double)(t - w) / (double)(s->total_steps - w);
    return s->min_lr + 0.5 * (s->lr - s->min_lr) * (1.0 + cos(M_PI * frac));
  }
  case ZO_LR_WARMUP_DECAY: {
    if (warming) return s->lr * (double)t / (double)w;
    if (t >= s->total_steps) return 0.0;
    return s->lr * (double)(s->total_steps - t) / (double)(s->total_steps - w);
  }
  }
  zo_abort(__FILE__, __LINE__, "unknown zo_lr_schedule_kind %d", (int)s->kind);
}
