/* LoRA adapters attached to a model: the adapter tensors in their own device
 * arena (fp32, plus a working-dtype copy when the model's dtype is not fp32),
 * the linear entry's workspace, and the table's modules mapped onto the
 * model's tensors (struct zo_model_adapters, engine/model/linear.h). The base
 * is frozen. Forward-only so far (eval, sample): no adapter gradients are carved.
 * Private to the engine. */
#ifndef ZO_ENGINE_LORA_ATTACH_H
#define ZO_ENGINE_LORA_ATTACH_H

#include "zo/lora.h"
#include "zo/model.h"

#include "linear.h"

struct zo_lora_device {
  struct zo_arena arena;         /* owns the buffers below */
  struct zo_model_adapters ad;   /* what m->adapters points at while attached */
  float *params;                 /* (table numel) fp32, device */
  void *wparams;                 /* (table numel) working dtype: params itself for fp32 */
};

/* Device bytes zo_lora_attach carves for table t on a model of working
 * dtype dt running N = B * T rows: exactly its arena's peak. */
size_t zo_lora_device_plan(const struct zo_lora_table *t, int N, enum zo_dtype dt);

/* Attaches t's adapters, host_params (t->numel fp32, zo_lora_load's) copied
 * to the device, to m (whose cfg t was built for): sets m->adapters. Returns
 * 0 with *out (free with zo_lora_detach) or -errno with a message. */
int zo_lora_attach(struct zo_model *m, const struct zo_lora_table *t, const float *host_params,
                   struct zo_lora_device **out);

/* Clears m->adapters and frees d (accepts NULL). */
void zo_lora_detach(struct zo_model *m, struct zo_lora_device *d);

#endif /* ZO_ENGINE_LORA_ATTACH_H */
