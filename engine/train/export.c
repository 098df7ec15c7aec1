/* zoffload export (zo/sample.h's zo_export): a checkpoint of ours, checked
 * as a load checks it, or a Hugging Face directory, streamed to a
 * Hugging Face directory without building a model
 * (engine/store/hf_dir.c); a LoRA run's checkpoint or a PEFT adapter
 * directory as a PEFT adapter directory (--adapter) or merged into its base
 * (--merge: W + scale B A in float64, rounded once to the export's dtype).
 * The output is written into OUT.tmp.PID beside OUT and renamed into place
 * once whole, so a failed or killed export leaves OUT as it was. */
#include "zo/sample.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "zo/checkpoint.h"
#include "zo/fsutil.h"
#include "zo/hf.h"
#include "zo/lora.h"
#include "zo/run_tokenizer.h"
#include "zo/state.h"

#include "../model/arch.h"
#include "../model/lora_attach.h"

/* Bytes and safetensors files of the exported directory, into res. */
static int export_sizes(const char *dir, struct zo_export_result *res) {
  DIR *d = opendir(dir);
  if (!d) return zo_error(-errno, "%s: %s", dir, strerror(errno));
  const struct dirent *e;
  while ((e = readdir(d))) {
    char p[PATH_MAX];
    struct stat sb;
    if (e->d_name[0] == '.' || snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p ||
        stat(p, &sb) != 0)
      continue;
    res->bytes += (size_t)sb.st_size;
    const size_t n = strlen(e->d_name);
    if (n > 12 && strcmp(e->d_name + n - 12, ".safetensors") == 0) res->n_files++;
  }
  closedir(d);
  return 0;
}

/* The output: o->out new or empty; its temporary OUT.tmp.PID created (a
 * dead export's leftovers beside it removed). */
static int out_begin(const char *o_out, char out[PATH_MAX], char tmp[PATH_MAX + 32]) {
  if (snprintf(out, PATH_MAX, "%s", o_out) >= PATH_MAX)
    return zo_error(-ENAMETOOLONG, "--out %.80s...: path too long", o_out);
  for (size_t n = strlen(out); n > 1 && out[n - 1] == '/'; n--) out[n - 1] = '\0';
  DIR *d = opendir(out);
  if (d) {
    const struct dirent *e;
    bool empty = true;
    while (empty && (e = readdir(d))) empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(d);
    if (!empty) return zo_error(-EEXIST, "--out %s is not empty: give a new or empty directory", out);
  } else if (errno != ENOENT) {
    return zo_error(-errno, "--out %s: %s", out, strerror(errno));
  }
  const int swept = zo_atomic_sweep_stale(out);
  if (swept < 0) return swept;
  if (swept > 0) fprintf(stderr, "zoffload: removed %d leftover(s) of a killed export beside %s\n", swept, out);
  snprintf(tmp, PATH_MAX + 32, "%s.tmp.%ld", out, (long)getpid());
  if (mkdir(tmp, 0755) != 0)
    return zo_error(-errno, "--out %s: cannot create %s: %s%s", out, tmp, strerror(errno),
                    errno == ENOENT ? " (its parent directory does not exist)" : "");
  return 0;
}

/* err == 0: tmp into place as out, the parent's entry made durable, the
 * sizes into res; else (or when that fails) tmp removed, out as it was. */
static int out_finish(int err, const char *tmp, const char *out, struct zo_export_result *res) {
  if (!err && rename(tmp, out) != 0) err = zo_error(-errno, "cannot rename %s to %s: %s", tmp, out, strerror(errno));
  if (!err) {
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", out);
    char *slash = strrchr(parent, '/');
    if (!slash) snprintf(parent, sizeof parent, ".");
    else slash[slash == parent] = '\0';
    err = zo_fsync_dir(parent);
  }
  if (!err) return export_sizes(out, res);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", zo_last_error());
  /* Everything in the temporary is this export's; OUT is as it was. */
  if (zo_remove_tree(tmp) == 0) return zo_error(err, "%s (%s left as it was)", msg, out);
  return zo_error(err, "%s", msg);
}

/* The tokenizer files beside path's weights into dir (a whole model
 * directory: AutoTokenizer, generation config); *copied says whether any. */
static int copy_tokenizer(const char *path, const char *dir, bool *copied) {
  char tok_json[PATH_MAX];
  *copied = zo_tokenizer_json_of(path, tok_json, sizeof tok_json);
  return *copied ? zo_tokenizer_copy_files(tok_json, dir) : 0;
}

static int export_model(const char *path, const struct zo_export_opts *o, const char *tmp,
                        struct zo_export_result *res) {
  struct zo_model_config mc;
  int err = zo_model_config_from_pretrained(path, 0, &mc);
  if (err) return err;
  /* Streamed from the checkpoint's files to the output's, tensor by tensor
   * (zo_model_export_pretrained): no model in memory. A checkpoint is
   * checked first as a load would check it (trainer_state.json, every
   * checksum, its config). */
  struct zo_model m = {.cfg = mc, .arch = zo_arch_of(mc.arch)};
  struct zo_train_state st = {0};
  char file[PATH_MAX + 32];
  const bool is_checkpoint = snprintf(file, sizeof file, "%s/trainer_state.json", path) > 0 && access(file, F_OK) == 0;
  const double t0 = zo_time_s();
  if (is_checkpoint) err = zo_checkpoint_load_io(path, &m, NULL, NULL, false, &st);
  snprintf(file, sizeof file, "%s/model.safetensors", path);
  const char *src = is_checkpoint || access(file, F_OK) == 0 ? file : path;
  const double t1 = zo_time_s();
  const struct zo_hf_save_opts so = {.dtype = o->dtype, .max_shard_bytes = o->max_shard_bytes};
  size_t read_bytes = 0;
  if (!err) err = zo_model_export_pretrained(src, tmp, &mc, &so, &read_bytes);
  if (!err) err = copy_tokenizer(path, tmp, &res->tokenizer);
  res->load_s = t1 - t0;
  res->save_s = zo_time_s() - t1;
  res->load_bytes = read_bytes;
  res->step = is_checkpoint ? st.step : -1;
  return err;
}

/* ---- a LoRA run's checkpoint or a PEFT adapter directory ------------------- */

/* Whether path holds a PEFT adapter (adapter_config.json). */
static bool is_adapter(const char *path) {
  char p[PATH_MAX + 32];
  return snprintf(p, sizeof p, "%s/adapter_config.json", path) > 0 && access(p, F_OK) == 0;
}

/* The base of the adapter at path: o->base, else adapter_config.json's
 * base_model_name_or_path, which must be a directory here. */
static int base_of(const char *path, const struct zo_export_opts *o, char *base, size_t size) {
  char p[PATH_MAX + 32], named[PATH_MAX] = "";
  snprintf(p, sizeof p, "%s/adapter_config.json", path);
  json_t *j = o->base && o->base[0] ? NULL : json_load_file(p, 0, NULL);
  const char *b = o->base && o->base[0] ? o->base : json_string_value(json_object_get(j, "base_model_name_or_path"));
  snprintf(named, sizeof named, "%s", b ? b : "");
  json_decref(j);
  struct stat sb;
  if (!named[0] || stat(named, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return zo_error(-EINVAL, "export %s: the base model %s is not a directory here: give it with --base DIR (the "
                    "Hugging Face directory the adapter was trained on)", path,
                    named[0] ? named : "(adapter_config.json names none)");
  snprintf(base, size, "%s", named);
  return 0;
}

/* The adapter's table for model mc, its values read (params: malloc'd). */
static int read_adapter(const char *path, const struct zo_model_config *mc, struct zo_lora *l,
                        struct zo_lora_table *t, float **params) {
  const struct zo_config_lora lc = {.init_from = (char *)path};
  int err = zo_lora_resolve(&lc, mc, l);
  if (err < 0) return err;
  if ((err = zo_lora_table_build(mc, l, t))) return err;
  *params = malloc(t->numel * sizeof **params + 1);
  err = *params ? zo_lora_load(t, path, *params) : zo_error(-ENOMEM, "out of host memory for the adapter");
  if (err) zo_lora_table_free(t);
  return err;
}

/* The base (base) with the adapter at path merged, into dir. */
static int merge(const char *path, const char *base, const struct zo_export_opts *o, const char *dir,
                 struct zo_export_result *res) {
  struct zo_model m = {.arch = NULL};
  int err = zo_model_config_from_pretrained(base, 0, &m.cfg);
  if (err || (err = zo_model_build_table(&m.cfg, &m.table))) return err;
  m.arch = zo_arch_of(m.cfg.arch);
  struct zo_lora l;
  struct zo_lora_table t;
  float *ad = NULL, *w = NULL;
  struct zo_state_mem mem = {0};
  struct zo_state_io io = {0};
  if ((err = read_adapter(path, &m.cfg, &l, &t, &ad))) goto out_table;
  if ((err = zo_lora_check_base(&l, path, base))) goto out;
  if (!(w = malloc(m.table.numel * sizeof *w + 1))) {
    err = zo_error(-ENOMEM, "export --merge: out of host memory for the base's %zu parameters (fp32)", m.table.numel);
    goto out;
  }
  mem.parts[ZO_STATE_PARAMS] = w;
  mem.nbytes[ZO_STATE_PARAMS] = m.table.numel * sizeof *w;
  const double t0 = zo_time_s();
  if ((err = zo_state_io_memory(&io, &mem, &m.table))) goto out;
  char file[PATH_MAX + 32];
  snprintf(file, sizeof file, "%s/model.safetensors", base);
  if ((err = zo_model_load_safetensors_io(access(file, F_OK) == 0 ? file : base, &m, &io))) goto out;
  if ((err = zo_lora_merge(&m, &t, ad, w))) goto out;
  const double t1 = zo_time_s();
  const struct zo_hf_save_opts so = {.dtype = o->dtype, .max_shard_bytes = o->max_shard_bytes};
  if (!(err = zo_model_save_pretrained_opts(dir, &m, &io, &so))) {
    /* The run's tokenizer (a checkpoint's), else the base's. */
    err = copy_tokenizer(path, dir, &res->tokenizer);
    if (!err && !res->tokenizer) err = copy_tokenizer(base, dir, &res->tokenizer);
  }
  res->load_s = t1 - t0;
  res->save_s = zo_time_s() - t1;
  res->load_bytes = m.table.numel * sizeof(float);
out:
  zo_state_io_free(&io);
  free(w);
  free(ad);
  zo_lora_table_free(&t);
out_table:
  zo_tensor_table_free(&m.table);
  return err;
}

/* --adapter: the adapter read (names and shapes checked against its base's
 * shapes when the base is here, else its own config's) and written as PEFT
 * does; fp32. */
static int export_adapter(const char *path, const struct zo_export_opts *o, const char *dir,
                          struct zo_export_result *res) {
  char base[PATH_MAX];
  int err = base_of(path, o, base, sizeof base);
  if (err) return err;
  struct zo_model_config mc;
  if ((err = zo_model_config_from_pretrained(base, 0, &mc))) return err;
  struct zo_lora l;
  struct zo_lora_table t;
  float *ad;
  const double t0 = zo_time_s();
  if ((err = read_adapter(path, &mc, &l, &t, &ad))) return err;
  if (!(err = zo_lora_check_base(&l, path, base))) err = zo_lora_save(&t, ad, l.base_model, dir);
  if (!err) err = copy_tokenizer(path, dir, &res->tokenizer);
  res->load_s = 0;
  res->save_s = zo_time_s() - t0;
  res->load_bytes = t.numel * sizeof(float);
  free(ad);
  zo_lora_table_free(&t);
  return err;
}

/* A LoRA checkpoint (checked: trainer state, checksums) or a PEFT adapter. */
static int export_lora(const char *path, const struct zo_export_opts *o, const char *dir,
                       struct zo_export_result *res) {
  char file[PATH_MAX + 32];
  struct zo_train_state st = {0};
  int err = 0;
  res->step = -1;
  if (snprintf(file, sizeof file, "%s/trainer_state.json", path) > 0 && access(file, F_OK) == 0) {
    if ((err = zo_checkpoint_load_io(path, NULL, NULL, NULL, false, &st))) return err;
    res->step = st.step;
  }
  if (o->adapter) return export_adapter(path, o, dir, res);
  char base[PATH_MAX];
  if ((err = base_of(path, o, base, sizeof base))) return err;
  return merge(path, base, o, dir, res);
}

int zo_export(const char *path, const struct zo_export_opts *o, struct zo_export_result *res) {
  struct stat sb;
  *res = (struct zo_export_result){0};
  if (stat(path, &sb) != 0) return zo_error(-errno, "%s: %s", path, strerror(errno));
  if (!S_ISDIR(sb.st_mode))
    return zo_error(-EINVAL, "%s: export takes a checkpoint directory (checkpoint-<step>) or a Hugging Face "
                             "directory holding config.json", path);
  /* A checkpoint that lost trainer_state.json has lost its checksums. */
  int err = zo_checkpoint_refuse_unchecked(path);
  if (err) return err;
  const bool lora = is_adapter(path);
  if ((o->adapter || o->merge) && !lora)
    return zo_error(-EINVAL, "export --%s: %s is not a LoRA run's checkpoint or a PEFT adapter directory (no "
                    "adapter_config.json)", o->adapter ? "adapter" : "merge", path);
  if (lora && !o->adapter && !o->merge)
    return zo_error(-EINVAL, "%s is a LoRA adapter (adapter_config.json): export it with --adapter (a PEFT adapter "
                    "directory) or --merge (the base with the adapter folded in; --base DIR names the base)", path);
  if (o->adapter && (o->dtype != ZO_F32 || o->max_shard_bytes))
    return zo_error(-EINVAL, "export --adapter writes the adapter in fp32 in one file, as PEFT saves it: --dtype "
                    "and --max-shard-size apply to full models (--merge)");
  char out[PATH_MAX], tmp[PATH_MAX + 32];
  if ((err = out_begin(o->out, out, tmp))) return err;
  err = lora ? export_lora(path, o, tmp, res) : export_model(path, o, tmp, res);
  return out_finish(err, tmp, out, res);
}
