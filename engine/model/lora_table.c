/* The adapters' tensor table (zo/lora.h): one module per targeted Hugging
 * Face module, PEFT's names, its shapes and fused row ranges read from the
 * architecture's Hugging Face tensor map (zo_arch's hf_tensors: head_dim,
 * GQA, Conv1D's transpose as the checkpoint has them); PEFT's
 * initialisation. The files: engine/store/lora_io.c. */
#include "zo/lora.h"

#include "arch.h"
#include "family.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* (target, Hugging Face module path after the layer prefix) of one layer;
 * shapes and fused row ranges come from the architecture's tensor map. */
struct slot {
  enum zo_lora_target target;
  const char *path;
};

static const struct slot gpt2_slots[] = {{ZO_LORA_C_ATTN, "attn.c_attn"},
                                         {ZO_LORA_C_PROJ, "attn.c_proj"},
                                         {ZO_LORA_C_FC, "mlp.c_fc"},
                                         {ZO_LORA_C_PROJ, "mlp.c_proj"}};
static const struct slot llama_slots[] = {{ZO_LORA_Q_PROJ, "self_attn.q_proj"}, {ZO_LORA_K_PROJ, "self_attn.k_proj"},
                                          {ZO_LORA_V_PROJ, "self_attn.v_proj"}, {ZO_LORA_O_PROJ, "self_attn.o_proj"},
                                          {ZO_LORA_GATE_PROJ, "mlp.gate_proj"}, {ZO_LORA_UP_PROJ, "mlp.up_proj"},
                                          {ZO_LORA_DOWN_PROJ, "mlp.down_proj"}};
/* Phi-3: one adapter over each fused projection's whole output (PEFT wraps
 * the Linear qkv_proj, (q + 2 kv) rows; gate_up_proj, 2 I rows). */
static const struct slot phi3_slots[] = {{ZO_LORA_QKV_PROJ, "self_attn.qkv_proj"},
                                         {ZO_LORA_O_PROJ, "self_attn.o_proj"},
                                         {ZO_LORA_GATE_UP_PROJ, "mlp.gate_up_proj"},
                                         {ZO_LORA_DOWN_PROJ, "mlp.down_proj"}};

/* Module m's shape and rows from the map's entry for its base weight: in and
 * out as the Linear PEFT wraps (Conv1D's weight is (in, out)), row0 within
 * our fused tensor. Returns 0 or -EINVAL when the map lacks it. */
static int module_from_map(const struct zo_hf_tensor *map, int n, struct zo_lora_module *m) {
  for (int i = 0; i < n; i++) {
    const struct zo_hf_tensor *h = &map[i];
    if (strcmp(h->name, m->base) != 0) continue;
    if (h->ndim != 2)
      return zo_error(-EINVAL, "lora: %s is %d-D in the tensor map: a projection's weight is 2-D", m->base, h->ndim);
    m->in = (int)(h->transpose ? h->shape[0] : h->shape[1]);
    m->out = (int)(h->transpose ? h->shape[1] : h->shape[0]);
    m->row0 = h->row0;
    return 0;
  }
  return zo_error(-EINVAL, "lora: the model's tensor map has no %s for the adapter %s", m->base, m->peft);
}

int zo_lora_table_build(const struct zo_model_config *mc, const struct zo_lora *l, struct zo_lora_table *t) {
  memset(t, 0, sizeof *t);
  const enum zo_model_family f = zo_family_resolve(mc);
  if ((l->targets & ~zo_lora_family_targets(f)) || l->r < 1)
    return zo_error(-EINVAL, "lora: targets or rank invalid for a %s model", zo_model_family_name(f));
  const bool gpt2 = mc->arch == ZO_ARCH_GPT2;
  const struct slot *s = gpt2 ? gpt2_slots : f == ZO_FAMILY_PHI3 ? phi3_slots : llama_slots;
  const int ns = gpt2                  ? (int)(sizeof gpt2_slots / sizeof *gpt2_slots)
                 : f == ZO_FAMILY_PHI3 ? (int)(sizeof phi3_slots / sizeof *phi3_slots)
                                       : (int)(sizeof llama_slots / sizeof *llama_slots);
  const char *prefix = gpt2 ? "transformer.h" : "model.layers";
  struct zo_hf_tensor *map;
  int n_map;
  int err = zo_arch_hf_map(mc, &map, &n_map, NULL);
  if (err) return err;
  t->modules = calloc((size_t)mc->n_layer * (size_t)ns, sizeof *t->modules);
  if (!t->modules) {
    free(map);
    return zo_error(-ENOMEM, "lora: out of memory for the adapter table");
  }
  t->lora = *l;
  for (int layer = 0; layer < mc->n_layer && !err; layer++)
    for (int i = 0; i < ns && !err; i++) {
      if (!(l->targets & (1u << s[i].target))) continue;
      struct zo_lora_module *m = &t->modules[t->n_modules++];
      snprintf(m->base, sizeof m->base, "%s.%d.%s.weight", prefix, layer, s[i].path);
      snprintf(m->peft, sizeof m->peft, "base_model.model.%s.%d.%s", prefix, layer, s[i].path);
      m->layer = layer, m->target = s[i].target;
      err = module_from_map(map, n_map, m);
      m->a_off = t->numel;
      m->b_off = m->a_off + (size_t)l->r * (size_t)m->in;
      t->numel = m->b_off + (size_t)m->out * (size_t)l->r;
    }
  free(map);
  if (err) zo_lora_table_free(t);
  return err;
}

void zo_lora_table_free(struct zo_lora_table *t) {
  if (!t) return;
  free(t->modules);
  memset(t, 0, sizeof *t);
}

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void zo_lora_init(const struct zo_lora_table *t, uint64_t seed, float *params) {
  const int r = t->lora.r;
  for (int i = 0; i < t->n_modules; i++) {
    const struct zo_lora_module *m = &t->modules[i];
    /* kaiming_uniform_(a = sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain sqrt(3 / fan_in) = 1 / sqrt(in) */
    const double bound = 1.0 / sqrt((double)m->in);
    uint64_t st = seed ^ (0x4c6f5241ull * (uint64_t)(i + 1)); /* "LoRA", per module */
    for (size_t j = 0; j < (size_t)r * (size_t)m->in; j++) {
      const double u = (double)(splitmix64(&st) >> 11) * 0x1.0p-53; /* [0, 1) */
      params[m->a_off + j] = (float)((2 * u - 1) * bound);
    }
    memset(params + m->b_off, 0, (size_t)m->out * (size_t)r * sizeof *params);
  }
}
