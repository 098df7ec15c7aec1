/* Loss scaling for fp16 training with DeepSpeed's semantics (fp16.loss_scale,
 * initial_scale_power, loss_scale_window, hysteresis, min_loss_scale; its
 * DynamicLossScaler with consecutive_hysteresis false and scale factor 2).
 * The loss (dloss) is multiplied by the scale before backward and the
 * optimizer divides the gradients by it again; a step whose gradients hold
 * an inf or NaN is skipped (engine/sched.c). After every step the scaler is
 * told whether it overflowed:
 *   overflow: with hysteresis left above 1, one hysteresis is used up and the
 *     scale stays; otherwise the scale halves (not below min_loss_scale). An
 *     overflow at the minimum scale is an error, as in DeepSpeed.
 *   no overflow: every loss_scale_window steps counted from the last overflow
 *     the scale doubles and the hysteresis is restored.
 * A static scale (fp16.loss_scale > 0) never changes. Pure state, no I/O. */
#ifndef ZO_LOSS_SCALE_H
#define ZO_LOSS_SCALE_H

#include "zo/config.h"

#ifdef __cplusplus
extern "C" {
#endif

struct zo_loss_scaler {
  bool enabled;         /* fp16.enabled: scale and skip; false: scale 1, never skips */
  bool dynamic;         /* fp16.loss_scale == 0 */
  double scale;         /* current loss scale (a power of two when dynamic) */
  double min_scale;     /* fp16.min_loss_scale */
  long window;          /* fp16.loss_scale_window: clean steps per doubling */
  int hysteresis;       /* fp16.hysteresis: overflows absorbed before halving */
  int hysteresis_left;  /* DeepSpeed's cur_hysteresis */
  long iter;            /* steps seen (cur_iter) */
  long last_overflow;   /* iter of the last overflow, -1 none (last_overflow_iter) */
};

/* The scaler of a config: fp16 with its keys, or a disabled one (scale 1). */
void zo_loss_scaler_init(struct zo_loss_scaler *ls, const struct zo_config *cfg);

/* Records one step. Returns 0, or -ERANGE (message: the scale, the minimum
 * and what to change) for an overflow at the minimum dynamic scale. */
int zo_loss_scaler_update(struct zo_loss_scaler *ls, bool overflow);

#ifdef __cplusplus
}
#endif
#endif /* ZO_LOSS_SCALE_H */
