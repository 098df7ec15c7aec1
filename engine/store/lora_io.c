/* A PEFT adapter directory read and written (zo/lora.h):
 * adapter_model.safetensors with PEFT's tensor names and shapes, and
 * adapter_config.json. */
#include "zo/lora.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "zo/safetensors.h"

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
  if (err) return zo_error(err, "%s: %s: %s", zo_st_path(f), name, zo_last_error());
  /* A NaN or infinity would make every output it touches one: refused. */
  for (size_t i = 0; i < (size_t)(rows * cols); i++)
    if (!isfinite(out[i]))
      return zo_error(-EINVAL, "%s: %s[%zu, %zu] = %g: an adapter's weights must be finite (a diverged or damaged "
                      "adapter)", zo_st_path(f), name, i / (size_t)cols, i % (size_t)cols, (double)out[i]);
  return 0;
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
    gpt2 = gpt2 || m->target == ZO_LORA_C_ATTN || m->target == ZO_LORA_C_PROJ || m->target == ZO_LORA_C_FC;
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
