/* CPU AdamW in fp32, global gradient norm, clip coefficient (the learning
 * rate's schedule: offload/lr_schedule.c). The update is one fused pass
 * over p, g, m, v (28 bytes per parameter, memory bound) that reproduces torch 1.13's CPU (AVX2 kernels)
 * _single_tensor_adamw bit for bit; its element loop and the chunked sum of
 * squares live in the CPU backend (kernels/cpu/ops_adamw.c, where the
 * fp-contract and FMA notes are), so the backend ops and these functions are
 * one code. It does not write grads, does not allocate and keeps no state:
 * the step count t comes from the caller. */
#include "zo/adamw.h"
#include "zo/cpu.h"

#include <math.h>
#include <stddef.h>

void zo_adamw_update(float *p, const float *g, float *m, float *v, size_t n,
                     const struct zo_adamw_hparams *hp, bool decay, long t, float grad_scale) {
  ZO_ASSERT(hp != NULL);
  zo_cpu_adamw_update(p, g, m, v, n, hp->lr, hp->beta1, hp->beta2, hp->eps, hp->weight_decay, decay, t,
                      grad_scale);
}

double zo_sumsq(const float *x, size_t n) { return zo_cpu_sumsq(x, n); }

/* NaN norms stay NaN (as torch's clamp does) so that a poisoned gradient is
 * never silently applied unclipped; an infinite norm gives 0. */
float zo_clip_coef(double norm, double max_norm) {
  if (!(max_norm > 0.0)) return 1.0f;
  const double coef = max_norm / (norm + 1e-6);
  if (isnan(coef)) return NAN;
  return coef < 1.0 ? (float)coef : 1.0f;
}
