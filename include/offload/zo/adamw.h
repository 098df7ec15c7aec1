/* CPU optimizer: AdamW in fp32 (PyTorch semantics), global gradient norm and
 * clipping (the learning rate of a step: zo/lr_schedule.h). Runs on host memory with OpenMP + SIMD;
 * the update is bound by memory traffic (28 bytes per parameter). */
#ifndef ZO_ADAMW_H
#define ZO_ADAMW_H

#include "zo/adamw_hparams.h" /* struct zo_adamw_hparams */
#include "zo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One AdamW step over n elements, in place on p, m, v (fp32, host memory):
 *   g' = g * grad_scale
 *   p -= lr * weight_decay * p                   (only when decay is true)
 *   m = beta1 m + (1 - beta1) g'; v = beta2 v + (1 - beta2) g'^2
 *   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * exactly in PyTorch's (non-foreach, non-fused) order of operations.
 * t is the 1-based step count. grad_scale folds the clipping coefficient
 * (and, for fp16, the loss-scale inverse) into the read of g. Uses the
 * calling thread's OpenMP team. */
void zo_adamw_update(float *p, const float *g, float *m, float *v, size_t n,
                     const struct zo_adamw_hparams *hp, bool decay, long t, float grad_scale);

/* Sum of squares of x[0..n) accumulated in double (OpenMP + SIMD). */
double zo_sumsq(const float *x, size_t n);

/* PyTorch's clip_grad_norm_ coefficient: min(1, max_norm / (norm + 1e-6));
 * 1 when max_norm <= 0 (clipping off). */
float zo_clip_coef(double norm, double max_norm);

#ifdef __cplusplus
}
#endif
#endif /* ZO_ADAMW_H */
