/* fp16 loss scaler (see zo/loss_scale.h): DeepSpeed's DynamicLossScaler
 * update rule, step for step, including its window arithmetic counted from
 * the last overflow (the first doubling comes after `window` clean steps
 * from the start, since last_overflow starts at -1). */
#include "zo/loss_scale.h"

#include <errno.h>
#include <math.h>

void zo_loss_scaler_init(struct zo_loss_scaler *ls, const struct zo_config *cfg) {
  const struct zo_config_fp16 *f = &cfg->fp16;
  *ls = (struct zo_loss_scaler){.enabled = f->enabled, .scale = 1.0, .last_overflow = -1};
  if (!f->enabled) return;
  ls->dynamic = f->loss_scale == 0.0;
  ls->scale = ls->dynamic ? ldexp(1.0, f->initial_scale_power) : f->loss_scale;
  ls->min_scale = f->min_loss_scale;
  ls->window = f->loss_scale_window;
  ls->hysteresis = f->hysteresis;
  ls->hysteresis_left = f->hysteresis;
}

int zo_loss_scaler_update(struct zo_loss_scaler *ls, bool overflow) {
  if (!ls->enabled || !ls->dynamic) {
    ls->iter++;
    return 0;
  }
  if (overflow) {
    if (ls->hysteresis == 1 || ls->hysteresis_left == 1) {
      if (ls->scale <= ls->min_scale)
        return zo_error(-ERANGE, "fp16: gradient overflow at the minimum loss scale %g "
                                 "(fp16.min_loss_scale): the loss scale cannot go lower; train "
                                 "with bf16.enabled = true, lower optimizer.params.lr or set "
                                 "gradient_clipping",
                        ls->scale);
      ls->scale = fmax(ls->scale / 2.0, ls->min_scale);
    } else {
      ls->hysteresis_left--;
    }
    ls->last_overflow = ls->iter;
  } else if ((ls->iter - ls->last_overflow) % ls->window == 0) {
    ls->hysteresis_left = ls->hysteresis;
    ls->scale *= 2.0;
  }
  ls->iter++;
  return 0;
}
