/* The learning-rate schedules (see zo/lr_schedule.h): constant, DeepSpeed's
 * WarmupLR and WarmupDecayLR, and linear warmup then cosine decay. */
#include "zo/lr_schedule.h"

#include <math.h>

#include "zo/common.h"

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
