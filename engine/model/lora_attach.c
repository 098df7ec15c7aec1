/* LoRA adapters attached to a model (engine/model/lora_attach.h): their own
 * device arena sized by zo_lora_device_plan, the table's modules mapped to
 * the model's tensors through the architecture's Hugging Face tensor map
 * (the fused qkv / gate_up rows), the linear entry's workspace. */
#include "lora_attach.h"

#include "arch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The widest input and output of t's modules. */
static void widest(const struct zo_lora_table *t, int *in_max, int *out_max) {
  *in_max = *out_max = 0;
  for (int i = 0; i < t->n_modules; i++) {
    if (t->modules[i].in > *in_max) *in_max = t->modules[i].in;
    if (t->modules[i].out > *out_max) *out_max = t->modules[i].out;
  }
}

static size_t work_bytes(const struct zo_lora_table *t, int N, enum zo_dtype dt) {
  int in_max, out_max;
  widest(t, &in_max, &out_max);
  return zo_linear_work_numel(N, in_max, t->lora.r, out_max) * zo_dtype_size(dt);
}

size_t zo_lora_device_plan(const struct zo_lora_table *t, int N, enum zo_dtype dt, bool training,
                           size_t by_category[ZO_MEM_N_CATEGORIES]) {
  const size_t f32 = zo_arena_round(t->numel * sizeof(float));
  size_t cat[ZO_MEM_N_CATEGORIES] = {0};
  cat[dt != ZO_F32 && training ? ZO_MEM_MASTER : ZO_MEM_PARAMS] += f32;
  if (dt != ZO_F32) cat[ZO_MEM_PARAMS] += zo_arena_round(t->numel * zo_dtype_size(dt));
  if (training) {
    cat[ZO_MEM_GRADS] += f32 + zo_arena_round(sizeof(double));
    cat[ZO_MEM_ADAM_M] += f32;
    cat[ZO_MEM_ADAM_V] += f32;
  }
  cat[ZO_MEM_WORKSPACE] += zo_arena_round(work_bytes(t, N, dt));
  size_t bytes = 0;
  for (int c = 0; c < ZO_MEM_N_CATEGORIES; c++) {
    bytes += cat[c];
    if (by_category) by_category[c] += cat[c];
  }
  return bytes;
}

/* The table tensor of every module of t in m (tensor[i] for module i), from
 * the architecture's map of m: the entry of the module's base weight, whose
 * rows must be the module's. Returns 0 or -errno. */
static int module_tensors(const struct zo_model *m, const struct zo_lora_table *t, int *tensor) {
  const int n = m->arch->hf_tensors(m, NULL);
  struct zo_hf_tensor *map = calloc((size_t)n + 1, sizeof *map);
  if (!map) return zo_error(-ENOMEM, "lora: out of memory for the model's tensor map");
  m->arch->hf_tensors(m, map);
  int err = 0;
  for (int i = 0; i < t->n_modules && !err; i++) {
    const struct zo_lora_module *mod = &t->modules[i];
    tensor[i] = -1;
    for (int j = 0; j < n && tensor[i] < 0; j++)
      if (!strcmp(map[j].name, mod->base) && map[j].row0 == mod->row0 && map[j].rows == mod->out)
        tensor[i] = map[j].tensor;
    if (tensor[i] < 0)
      err = zo_error(-EINVAL, "lora: the adapter %s (rows %d..%d of %s) matches no tensor of the model: the "
                     "adapter table was built for another model", mod->peft, mod->row0, mod->row0 + mod->out,
                     mod->base);
  }
  free(map);
  return err;
}

/* d->ad.first and d->ad.list: the modules grouped by table tensor, in table
 * order within a tensor. */
static int map_adapters(const struct zo_model *m, const struct zo_lora_table *t, struct zo_lora_device *d) {
  const int nt = m->table.n_tensors;
  int *tensor = calloc((size_t)t->n_modules + 1, sizeof *tensor);
  d->ad.first = calloc((size_t)nt + 1, sizeof *d->ad.first);
  d->ad.list = calloc((size_t)t->n_modules + 1, sizeof *d->ad.list);
  if (!tensor || !d->ad.first || !d->ad.list) {
    free(tensor);
    return zo_error(-ENOMEM, "lora: out of memory for the model's adapter map");
  }
  int err = module_tensors(m, t, tensor);
  for (int i = 0; i < t->n_modules && !err; i++) d->ad.first[tensor[i] + 1]++;
  for (int k = 0; k < nt && !err; k++) d->ad.first[k + 1] += d->ad.first[k];
  int *fill = err ? NULL : calloc((size_t)nt + 1, sizeof *fill);
  if (!err && !fill) err = zo_error(-ENOMEM, "lora: out of memory for the model's adapter map");
  const size_t es = zo_dtype_size(m->dtype);
  for (int i = 0; i < t->n_modules && !err; i++) {
    const struct zo_lora_module *mod = &t->modules[i];
    struct zo_linear_adapter *a = &d->ad.list[d->ad.first[tensor[i]] + fill[tensor[i]]++];
    a->a = (char *)d->wparams + mod->a_off * es;
    a->b = (char *)d->wparams + mod->b_off * es;
    a->r = t->lora.r, a->out = mod->out, a->row0 = mod->row0;
    a->da = d->grads ? d->grads + mod->a_off : NULL;
    a->db = d->grads ? d->grads + mod->b_off : NULL;
    a->scale = (float)t->lora.scale;
  }
  free(fill);
  free(tensor);
  return err;
}

/* host_params into d->params, and rounded into d->wparams when they differ. */
static int upload(zo_backend_t be, const struct zo_lora_table *t, const float *host_params,
                  struct zo_lora_device *d, enum zo_dtype dt) {
  const size_t f32 = t->numel * sizeof(float);
  int err = be->memcpy_async(d->params, host_params, f32, ZO_COPY_H2D, NULL);
  if (!err && dt != ZO_F32) be->cast(d->wparams, dt, d->params, ZO_F32, t->numel, NULL);
  for (int i = 0; i < 3 && !err && d->grads; i++)
    err = be->memset_async(i == 0 ? d->grads : i == 1 ? d->adam_m : d->adam_v, 0, f32, NULL);
  if (!err) err = be->stream_synchronize(NULL);
  return err ? zo_error(err, "lora: copying the adapter tensors to the device failed") : 0;
}

int zo_lora_attach(struct zo_model *m, const struct zo_lora_table *t, const float *host_params,
                   struct zo_lora_device **out) {
  *out = NULL;
  if (t->lora.dropout > 0 && m->training)
    return zo_error(-ENOTSUP, "lora: lora_dropout = %g in training is not built (eval applies none, as PEFT's "
                    "eval mode)", t->lora.dropout);
  struct zo_lora_device *d = calloc(1, sizeof *d);
  if (!d) return zo_error(-ENOMEM, "lora: out of memory");
  const int N = m->B * m->T;
  const bool train = m->training, mixed = m->dtype != ZO_F32;
  /* Group names the memory report classifies (zo_sched_device_category). */
  int err = zo_arena_init(&d->arena, m->backend, zo_lora_device_plan(t, N, m->dtype, train, NULL),
                          "device (LoRA adapters)");
  const size_t f32 = t->numel * sizeof(float);
  if (!err)
    err = zo_arena_alloc(&d->arena, f32, train && mixed ? "master weights (LoRA adapters)" : "parameters (LoRA adapters)",
                         (void **)&d->params);
  d->wparams = d->params;
  if (!err && mixed)
    err = zo_arena_alloc(&d->arena, t->numel * zo_dtype_size(m->dtype), "parameters (LoRA adapters, working dtype)",
                         &d->wparams);
  if (!err && train) err = zo_arena_alloc(&d->arena, f32, "gradients (LoRA adapters)", (void **)&d->grads);
  if (!err && train)
    err = zo_arena_alloc(&d->arena, sizeof(double), "gradients (LoRA adapters: sum of squares)", (void **)&d->sumsq);
  if (!err && train) err = zo_arena_alloc(&d->arena, f32, "AdamW m (LoRA adapters)", (void **)&d->adam_m);
  if (!err && train) err = zo_arena_alloc(&d->arena, f32, "AdamW v (LoRA adapters)", (void **)&d->adam_v);
  if (!err) err = zo_arena_alloc(&d->arena, work_bytes(t, N, m->dtype), "workspace (LoRA)", &d->ad.work);
  if (!err) err = upload(m->backend, t, host_params, d, m->dtype);
  if (!err) err = map_adapters(m, t, d);
  if (err) {
    zo_lora_detach(NULL, d);
    return err;
  }
  d->ad.frozen_base = true;
  m->adapters = &d->ad;
  *out = d;
  return 0;
}

int zo_lora_merge(const struct zo_model *m, const struct zo_lora_table *t, const float *ad, float *params) {
  int *tensor = calloc((size_t)t->n_modules + 1, sizeof *tensor);
  if (!tensor) return zo_error(-ENOMEM, "lora: out of memory merging the adapters");
  int err = module_tensors(m, t, tensor);
  const int r = t->lora.r;
  for (int i = 0; i < t->n_modules && !err; i++) {
    const struct zo_lora_module *mod = &t->modules[i];
    const struct zo_tensor_info *ti = &m->table.tensors[tensor[i]];
    ZO_ASSERT(ti->ndim == 2 && ti->shape[1] == mod->in && mod->row0 + mod->out <= ti->shape[0]);
    const float *A = ad + mod->a_off, *B = ad + mod->b_off;
    float *W = params + ti->offset + (size_t)mod->row0 * (size_t)mod->in;
#pragma omp parallel for schedule(static)
    for (int o = 0; o < mod->out; o++)
      for (int c = 0; c < mod->in; c++) {
        double d = 0.0;
        for (int k = 0; k < r; k++) d += (double)B[(size_t)o * r + k] * (double)A[(size_t)k * mod->in + c];
        float *w = &W[(size_t)o * mod->in + c];
        *w = (float)((double)*w + t->lora.scale * d);
      }
  }
  free(tensor);
  return err;
}

void zo_lora_detach(struct zo_model *m, struct zo_lora_device *d) {
  if (m) m->adapters = NULL;
  if (!d) return;
  zo_arena_free(&d->arena);
  free(d->ad.first);
  free(d->ad.list);
  free(d);
}
