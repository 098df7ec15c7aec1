/* LoRA adapters attached to a model: the adapter tensors in their own device
 * arena (fp32, plus a working-dtype copy when the model's dtype is not fp32),
 * the linear entry's workspace, and the table's modules mapped onto the
 * model's tensors (struct zo_model_adapters, engine/model/linear.h). The base
 * is frozen. Attached to a training model the arena also holds the
 * adapters' fp32 gradients (the linear entry accumulates dA, dB into them)
 * and AdamW's m and v: the trained set, updated by the scheduler
 * (engine/sched/lora_step.c). Private to the engine. */
#ifndef ZO_ENGINE_LORA_ATTACH_H
#define ZO_ENGINE_LORA_ATTACH_H

#include "zo/lora.h"
#include "zo/model.h"

#include "linear.h"

struct zo_lora_device {
  struct zo_arena arena;         /* owns the buffers below */
  struct zo_model_adapters ad;   /* what m->adapters points at while attached */
  float *params;                 /* (table numel) fp32, device: the master when training */
  void *wparams;                 /* (table numel) working dtype: params itself for fp32 */
  float *grads;                  /* (table numel) fp32, training only (else NULL) */
  float *adam_m, *adam_v;        /* (table numel) fp32, training only (else NULL) */
  double *sumsq;                 /* (1) the gradients' sum of squares, training only */
};

/* Attaches t's adapters, host_params (t->numel fp32, zo_lora_load's) copied
 * to the device, to m (whose cfg t was built for): sets m->adapters. A
 * training m (m->training) gets the trained set too: gradients zeroed, each
 * adapter's da, db pointing into them, m and v zeroed. Returns
 * 0 with *out (free with zo_lora_detach) or -errno with a message. */
int zo_lora_attach(struct zo_model *m, const struct zo_lora_table *t, const float *host_params,
                   struct zo_lora_device **out);

/* Folds t's adapters (ad: t->numel fp32, host) into params (m's table,
 * fp32, host): W[row0 + i, :] += scale (B A)[i, :] for every module, the
 * product and the sum in float64, rounded once (PEFT's merge_and_unload).
 * m needs its cfg, arch and table only. Returns 0 or -errno. */
int zo_lora_merge(const struct zo_model *m, const struct zo_lora_table *t, const float *ad, float *params);

/* Clears m->adapters and frees d (accepts NULL). */
void zo_lora_detach(struct zo_model *m, struct zo_lora_device *d);

#endif /* ZO_ENGINE_LORA_ATTACH_H */
