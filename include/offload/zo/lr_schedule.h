/* The learning-rate schedule (offload/lr_schedule.c): the one place that
 * knows how the rate moves with the step. The config derives a struct
 * zo_lr_schedule from optimizer.params and scheduler (zo/config.h); the
 * trainer asks zo_lr_at for each applied step's rate, logs it and hands it
 * to the update (struct zo_adamw_hparams.lr); the config dump asks it for
 * the last step's. Pure: no state, no allocation. */
#ifndef ZO_LR_SCHEDULE_H
#define ZO_LR_SCHEDULE_H

#ifdef __cplusplus
extern "C" {
#endif

enum zo_lr_schedule_kind {
  ZO_LR_CONSTANT,      /* lr */
  ZO_LR_WARMUP,        /* DeepSpeed WarmupLR, linear: min_lr -> lr over warmup, then lr */
  ZO_LR_WARMUP_COSINE, /* linear warmup from 0 to lr, then cosine from lr to min_lr at total */
  ZO_LR_WARMUP_DECAY,  /* DeepSpeed WarmupDecayLR: linear warmup, then linear decay to 0 at total */
};

struct zo_lr_schedule {
  enum zo_lr_schedule_kind kind;
  double lr;           /* peak learning rate */
  double min_lr;       /* floor (cosine end, warmup start for ZO_LR_WARMUP) */
  long warmup_steps;   /* steps of linear warmup */
  long total_steps;    /* end of the decay */
};

/* Learning rate for 1-based step t:
 *   warmup (t <= warmup_steps): lr * t / warmup_steps (WARMUP: min_lr + (lr - min_lr) * t / warmup_steps)
 *   cosine after warmup: min_lr + 0.5 (lr - min_lr)(1 + cos(pi * (t - warmup) / (total - warmup))),
 *   clamped to min_lr once t >= total. */
double zo_lr_at(const struct zo_lr_schedule *s, long t);

#ifdef __cplusplus
}
#endif
#endif /* ZO_LR_SCHEDULE_H */
