/* The adapters' tensor table (zo/lora.h): one module per targeted Hugging
 * Face module, PEFT's names and shapes; PEFT's initialisation. The files:
 * engine/store/lora_io.c. */
#include "zo/lora.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* (target, Hugging Face module path after the layer prefix, in, out, row0) of one layer. */
struct slot {
  enum zo_lora_target target;
  const char *path;
  int in, out, row0;
};

static int arch_slots(const struct zo_model_config *c, struct slot *s) {
  const int C = c->n_embd, I = c->intermediate_size;
  if (c->arch == ZO_ARCH_GPT2) {
    const struct slot g[] = {{ZO_LORA_C_ATTN, "attn.c_attn", C, 3 * C, 0},
                             {ZO_LORA_C_PROJ, "attn.c_proj", C, C, 0},
                             {ZO_LORA_C_FC, "mlp.c_fc", C, I, 0},
                             {ZO_LORA_C_PROJ, "mlp.c_proj", I, C, 0}};
    memcpy(s, g, sizeof g);
    return 4;
  }
  const int hs = C / c->n_head, q = c->n_head * hs, kv = (c->n_kv_head ? c->n_kv_head : c->n_head) * hs;
  const struct slot l[] = {{ZO_LORA_Q_PROJ, "self_attn.q_proj", C, q, 0},
                           {ZO_LORA_K_PROJ, "self_attn.k_proj", C, kv, q},
                           {ZO_LORA_V_PROJ, "self_attn.v_proj", C, kv, q + kv},
                           {ZO_LORA_O_PROJ, "self_attn.o_proj", q, C, 0},
                           {ZO_LORA_GATE_PROJ, "mlp.gate_proj", C, I, 0},
                           {ZO_LORA_UP_PROJ, "mlp.up_proj", C, I, I},
                           {ZO_LORA_DOWN_PROJ, "mlp.down_proj", I, C, 0}};
  memcpy(s, l, sizeof l);
  return 7;
}

int zo_lora_table_build(const struct zo_model_config *mc, const struct zo_lora *l, struct zo_lora_table *t) {
  memset(t, 0, sizeof *t);
  if ((l->targets & ~zo_lora_arch_targets(mc->arch)) || l->r < 1)
    return zo_error(-EINVAL, "lora: targets or rank invalid for a %s model", zo_model_arch_name(mc->arch));
  struct slot s[8];
  const int ns = arch_slots(mc, s);
  const char *prefix = mc->arch == ZO_ARCH_GPT2 ? "transformer.h" : "model.layers";
  t->modules = calloc((size_t)mc->n_layer * (size_t)ns, sizeof *t->modules);
  if (!t->modules) return zo_error(-ENOMEM, "lora: out of memory for the adapter table");
  t->lora = *l;
  for (int layer = 0; layer < mc->n_layer; layer++)
    for (int i = 0; i < ns; i++) {
      if (!(l->targets & (1u << s[i].target))) continue;
      struct zo_lora_module *m = &t->modules[t->n_modules++];
      snprintf(m->base, sizeof m->base, "%s.%d.%s.weight", prefix, layer, s[i].path);
      snprintf(m->peft, sizeof m->peft, "base_model.model.%s.%d.%s", prefix, layer, s[i].path);
      m->layer = layer, m->target = s[i].target;
      m->in = s[i].in, m->out = s[i].out, m->row0 = s[i].row0;
      m->a_off = t->numel;
      m->b_off = m->a_off + (size_t)l->r * (size_t)m->in;
      t->numel = m->b_off + (size_t)m->out * (size_t)l->r;
    }
  return 0;
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
