/* The adapters' tensor table (zo/lora.h): one module per targeted Hugging
 * Face module, PEFT's names and shapes; PEFT's initialisation; a PEFT
 * adapter_model.safetensors read and written. */
#include "zo/lora.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo/safetensors.h"

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

/* One factor read: name, shape (rows, cols) checked. */
static int load_factor(const struct zo_st_file *f, const char *module, const char *factor, int64_t rows,
                       int64_t cols, float *out) {
  char name[ZO_LORA_NAME_MAX + 32];
  snprintf(name, sizeof name, "%s.%s.weight", module, factor);
  const struct zo_st_tensor *st = zo_st_find(f, name);
  if (!st) return zo_error(-EINVAL, "%s: no tensor %s (the adapter does not match lora's targets and the model)",
                           zo_st_path(f), name);
  if (st->ndim != 2 || st->shape[0] != rows || st->shape[1] != cols)
    return zo_error(-EINVAL, "%s: %s has shape [%lld, %lld], the model needs [%lld, %lld]", zo_st_path(f), name,
                    st->ndim > 0 ? (long long)st->shape[0] : -1LL, st->ndim > 1 ? (long long)st->shape[1] : -1LL,
                    (long long)rows, (long long)cols);
  int err = zo_st_read_f32(st, out, (size_t)(rows * cols));
  return err ? zo_error(err, "%s: %s: %s", zo_st_path(f), name, zo_last_error()) : 0;
}

int zo_lora_load(const struct zo_lora_table *t, const char *dir, float *params) {
  char path[4096];
  snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
  struct zo_st_file *f = zo_st_open(path);
  if (!f) return zo_error(-EINVAL, "lora.init_from: %s", zo_last_error());
  const int r = t->lora.r;
  int err = 0;
  for (int i = 0; i < t->n_modules && !err; i++) {
    const struct zo_lora_module *m = &t->modules[i];
    err = load_factor(f, m->peft, "lora_A", r, m->in, params + m->a_off);
    if (!err) err = load_factor(f, m->peft, "lora_B", m->out, r, params + m->b_off);
  }
  /* every tensor of the file is one of the table's (a trained bias, an
   * embedding, another adapter name would be silently dropped) */
  for (int i = 0; i < zo_st_n_tensors(f) && !err && zo_st_n_tensors(f) != 2 * t->n_modules; i++) {
    const char *name = zo_st_tensor_at(f, i)->name;
    bool known = false;
    for (int j = 0; j < t->n_modules && !known; j++) {
      const size_t n = strlen(t->modules[j].peft);
      known = !strncmp(name, t->modules[j].peft, n) &&
              (!strcmp(name + n, ".lora_A.weight") || !strcmp(name + n, ".lora_B.weight"));
    }
    if (!known)
      err = zo_error(-ENOTSUP, "%s: tensor %s is not a LoRA factor of the configured targets; zoffload loads "
                     "only lora_A and lora_B weights", path, name);
  }
  zo_st_close(f);
  return err;
}

static json_t *adapter_config(const struct zo_lora_table *t, const char *base, bool gpt2) {
  const struct zo_lora *l = &t->lora;
  json_t *targets = json_array();
  for (int i = 0; i < ZO_LORA_ALL_LINEAR; i++)
    if (l->targets & (1u << i)) json_array_append_new(targets, json_string(zo_lora_target_names[i]));
  return json_pack("{s:s, s:s, s:i, s:f, s:f, s:o, s:b, s:b, s:s, s:s, s:b, s:b}", "peft_type", "LORA",
                   "task_type", "CAUSAL_LM", "r", l->r, "lora_alpha", l->alpha, "lora_dropout", l->dropout,
                   "target_modules", targets, "use_rslora", l->use_rslora, "fan_in_fan_out", gpt2, "bias", "none",
                   "base_model_name_or_path", base ? base : "", "inference_mode", 1, "init_lora_weights", 1);
}

int zo_lora_save(const struct zo_lora_table *t, const float *params, const char *base, const char *dir) {
  struct zo_st_writer *w = zo_st_writer_init();
  if (!w) return -ENOMEM;
  const int r = t->lora.r;
  int err = 0;
  bool gpt2 = false;
  for (int i = 0; i < t->n_modules && !err; i++) {
    const struct zo_lora_module *m = &t->modules[i];
    char name[ZO_LORA_NAME_MAX + 32];
    const int64_t a[2] = {r, m->in}, b[2] = {m->out, r};
    gpt2 = gpt2 || m->target >= ZO_LORA_C_ATTN;
    snprintf(name, sizeof name, "%s.lora_A.weight", m->peft);
    err = zo_st_writer_add(w, name, ZO_F32, 2, a, params + m->a_off);
    snprintf(name, sizeof name, "%s.lora_B.weight", m->peft);
    if (!err) err = zo_st_writer_add(w, name, ZO_F32, 2, b, params + m->b_off);
  }
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
  if (!err) err = zo_st_writer_write(w, path);
  zo_st_writer_free(w);
  if (err) return err;
  json_t *cfg = adapter_config(t, base, gpt2);
  if (!cfg) return zo_error(-ENOMEM, "lora: out of memory writing adapter_config.json");
  snprintf(path, sizeof path, "%s/adapter_config.json", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  err = json_dump_file(cfg, tmp, JSON_INDENT(2) | JSON_SORT_KEYS) ? -EIO : 0;
  json_decref(cfg);
  if (err) return zo_error(err, "lora: cannot write %s", tmp);
  if (rename(tmp, path) != 0) return zo_error(-errno, "lora: rename %s to %s failed", tmp, path);
  return 0;
}
