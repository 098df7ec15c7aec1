/* The AdamW hyperparameters of one step: a kernels-level type, shared by the
 * CPU optimizer (zo/adamw.h, offload/adamw.c) and the AdamW8bit update that
 * the CPU backend implements (zo/adamw8bit.h, kernels/cpu/ops_adamw8bit.c),
 * so that kernels/ needs no offload header for it. Types only. */
#ifndef ZO_ADAMW_HPARAMS_H
#define ZO_ADAMW_HPARAMS_H

#ifdef __cplusplus
extern "C" {
#endif

struct zo_adamw_hparams {
  float lr;           /* this step's learning rate (after the schedule) */
  float beta1, beta2; /* 0.9, 0.999 */
  float eps;          /* 1e-8 */
  float weight_decay; /* decoupled: p -= lr * weight_decay * p, before the Adam step */
};

#ifdef __cplusplus
}
#endif
#endif /* ZO_ADAMW_HPARAMS_H */
