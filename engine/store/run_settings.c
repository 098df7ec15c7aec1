/* What a run's mathematics depends on, recorded in every checkpoint and
 * compared at resume (zo/run_settings.h): one table of keys, each value
 * formatted as a string from the run's config and model config, compared as
 * strings (model.init_from and lora.init_from by their files' fingerprint,
 * not their path). "unused" marks a key another key governs (fp16's scaling
 * without fp16, the rotary keys of a GPT-2, LoRA's keys without LoRA): it is
 * not compared, the governing key is. Does not read or load any weights. */
#include "zo/run_settings.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "zo/checkpoint.h"
#include "zo/data.h"
#include "zo/fsutil.h"
#include "zo/hf.h"
#include "zo/lora.h"

#include "state_files.h"

enum kind {
  FIXED,   /* never changes on resume: shapes, the optimizer states' format */
  REFUSED, /* refused unless --resume-allow KEY, then said */
  SAID,    /* one line when it changes */
};

enum id {
  S_ARCH, S_FAMILY, S_ACT, S_LAYERS, S_HEADS, S_KV_HEADS, S_EMBD, S_INTER, S_VOCAB, S_MAXT, S_HEAD_DIM, S_TIED, S_QKV_BIAS, S_QK_NORM,
  S_EPS, S_THETA, S_ROPE_SCALING, S_WINDOW, S_PAD, S_DROPOUT, S_INIT_FROM,
  S_PRECISION, S_LS, S_LS_WINDOW, S_LS_HYST, S_LS_MIN,
  S_ROWS, S_ACCUM, S_SEQ, S_SHUFFLE, S_FORMAT,
  S_OPT, S_OPT_BLOCK, S_OPT_MIN8, S_BETAS, S_EPS_ADAM, S_WD, S_CLIP, S_SCHEDULE,
  S_LORA_R, S_LORA_ALPHA, S_LORA_DROPOUT, S_LORA_TARGETS, S_LORA_RSLORA, S_LORA_INIT,
  N_SETTINGS
};

static const struct setting {
  const char *key;
  enum kind kind;
  bool in_config_json; /* an older checkpoint's config.json gives it */
} table[N_SETTINGS] = {
    [S_ARCH] = {"model.arch", FIXED, true},
    /* The name config.json carries (model_type); the features it has are
     * their own keys (model.qkv_bias, model.qk_norm, model.sliding_window). */
    [S_FAMILY] = {"model.family", SAID, true},
    [S_ACT] = {"model.hidden_act", FIXED, true},
    [S_LAYERS] = {"model.n_layer", FIXED, true},
    [S_HEADS] = {"model.n_head", FIXED, true},
    [S_KV_HEADS] = {"model.num_key_value_heads", FIXED, true},
    [S_EMBD] = {"model.n_embd", FIXED, true},
    [S_INTER] = {"model.intermediate_size", FIXED, true},
    [S_VOCAB] = {"model.vocab_size", FIXED, true},
    [S_MAXT] = {"model.max_seq_len", FIXED, true},
    [S_HEAD_DIM] = {"model.head_dim", FIXED, true},
    [S_TIED] = {"model.tie_word_embeddings", FIXED, true},
    [S_QKV_BIAS] = {"model.qkv_bias", FIXED, true},
    [S_QK_NORM] = {"model.qk_norm", FIXED, true},
    [S_EPS] = {"model.rms_norm_eps", REFUSED, true},
    [S_THETA] = {"model.rope_theta", REFUSED, true},
    [S_ROPE_SCALING] = {"model.rope_scaling", REFUSED, true},
    [S_WINDOW] = {"model.sliding_window", REFUSED, true},
    /* The embedding's padding index: which row the lookup's gradient skips. */
    [S_PAD] = {"model.pad_token_id", REFUSED, true},
    [S_DROPOUT] = {"model.dropout", REFUSED, false},
    [S_INIT_FROM] = {"model.init_from", REFUSED, false},
    [S_PRECISION] = {"precision", REFUSED, false},
    [S_LS] = {"fp16.loss_scale", REFUSED, false},
    [S_LS_WINDOW] = {"fp16.loss_scale_window", REFUSED, false},
    [S_LS_HYST] = {"fp16.hysteresis", REFUSED, false},
    [S_LS_MIN] = {"fp16.min_loss_scale", REFUSED, false},
    [S_ROWS] = {"micro_batch_rows", REFUSED, false},
    [S_ACCUM] = {"gradient_accumulation_steps", REFUSED, false},
    [S_SEQ] = {"data.seq_len", REFUSED, false},
    [S_SHUFFLE] = {"data.shuffle", REFUSED, false},
    [S_FORMAT] = {"data.format", REFUSED, false},
    [S_OPT] = {"optimizer.type", FIXED, false},
    [S_OPT_BLOCK] = {"optimizer.params.block_size", FIXED, false},
    [S_OPT_MIN8] = {"optimizer.params.min_8bit_size", FIXED, false},
    [S_BETAS] = {"optimizer.params.betas", REFUSED, false},
    [S_EPS_ADAM] = {"optimizer.params.eps", REFUSED, false},
    [S_WD] = {"optimizer.params.weight_decay", REFUSED, false},
    [S_CLIP] = {"gradient_clipping", REFUSED, false},
    [S_SCHEDULE] = {"lr_schedule", SAID, false},
    [S_LORA_R] = {"lora.r", REFUSED, false},
    [S_LORA_ALPHA] = {"lora.alpha", REFUSED, false},
    [S_LORA_DROPOUT] = {"lora.dropout", REFUSED, false},
    [S_LORA_TARGETS] = {"lora.target_modules", REFUSED, false},
    [S_LORA_RSLORA] = {"lora.use_rslora", REFUSED, false},
    [S_LORA_INIT] = {"lora.init_from", REFUSED, false},
};

struct zo_run_settings {
  char *value[N_SETTINGS]; /* NULL: not recorded */
};

static const char UNUSED[] = "unused";

/* What the values are formatted from: cfg NULL for an older checkpoint's
 * config.json (only the in_config_json keys then). */
struct source {
  const struct zo_config *cfg;
  const struct zo_model_config *mc;
  int n_ranks;
  bool lora_on;
  struct zo_lora lora;      /* resolved, when lora_on */
  const char *init_from;    /* model.init_from's "path (fingerprint ...)", or "none" */
  const char *lora_init;    /* lora.init_from's, or "none" */
};

/* The shortest %g of v that reads back as v. */
static void fmt_real(char *buf, size_t n, double v) {
  for (int p = 6; p <= 17; p++) {
    snprintf(buf, n, "%.*g", p, v);
    if (strtod(buf, NULL) == v) return;
  }
}

/* The same for a float (the dropout rates). */
static void fmt_float(char *buf, size_t n, float v) {
  for (int p = 6; p <= 9; p++) {
    snprintf(buf, n, "%.*g", p, (double)v);
    if ((float)strtod(buf, NULL) == v) return;
  }
}

static void fmt_dropout(char *buf, size_t n, const struct zo_model_config *mc) {
  char e[32], a[32], r[32];
  fmt_float(e, sizeof e, mc->embd_pdrop);
  fmt_float(a, sizeof a, mc->attn_pdrop);
  fmt_float(r, sizeof r, mc->resid_pdrop);
  if (mc->embd_pdrop == mc->attn_pdrop && mc->attn_pdrop == mc->resid_pdrop) snprintf(buf, n, "%s", e);
  else snprintf(buf, n, "embd_pdrop %s, attn_pdrop %s, resid_pdrop %s", e, a, r);
}

static void fmt_rope_scaling(char *buf, size_t n, const struct zo_model_config *mc) {
  if (mc->rope_scaling_factor == 0.0) {
    snprintf(buf, n, "none");
    return;
  }
  char f[32], lo[32], hi[32];
  fmt_real(f, sizeof f, mc->rope_scaling_factor);
  fmt_real(lo, sizeof lo, mc->rope_low_freq_factor);
  fmt_real(hi, sizeof hi, mc->rope_high_freq_factor);
  snprintf(buf, n, "llama3 factor %s, low_freq_factor %s, high_freq_factor %s, original_max_position_embeddings %d",
           f, lo, hi, mc->rope_original_max_seq_len);
}

static void fmt_schedule(char *buf, size_t n, const struct zo_lr_schedule *s) {
  static const char *const kinds[] = {"constant", "warmup", "warmup_cosine", "warmup_decay"};
  char lr[32], min[32];
  fmt_real(lr, sizeof lr, s->lr);
  fmt_real(min, sizeof min, s->min_lr);
  if (s->kind == ZO_LR_CONSTANT) snprintf(buf, n, "constant lr %s", lr);
  else if (s->kind == ZO_LR_WARMUP) snprintf(buf, n, "warmup lr %s from %s over %ld steps", lr, min, s->warmup_steps);
  else
    snprintf(buf, n, "%s lr %s, min_lr %s, warmup_steps %ld, total_steps %ld", kinds[s->kind], lr, min,
             s->warmup_steps, s->total_steps);
}

static void fmt_targets(char *buf, size_t n, unsigned targets) {
  size_t used = 0;
  buf[0] = '\0';
  for (int t = 0; t < ZO_LORA_N_TARGETS && used < n; t++)
    if (targets & (1u << t))
      used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? ", " : "", zo_lora_target_names[t]);
}

static void put(char *buf, size_t n, const char *s) { snprintf(buf, n, "%s", s); }
static void put_int(char *buf, size_t n, long v) { snprintf(buf, n, "%ld", v); }
static void put_bool(char *buf, size_t n, bool v) { put(buf, n, v ? "true" : "false"); }

/* The model's keys: from mc alone. The rotary, norm, window and padding
 * keys are a Llama's (a GPT-2's are fixed: model.arch governs them). */
static void format_model(enum id i, const struct source *s, char *buf, size_t n) {
  const struct zo_model_config *mc = s->mc;
  const bool llama = mc->arch == ZO_ARCH_LLAMA;
  if (!llama && (i == S_EPS || i == S_THETA || i == S_ROPE_SCALING || i == S_WINDOW || i == S_PAD)) {
    put(buf, n, UNUSED);
    return;
  }
  switch (i) {
  case S_ARCH: put(buf, n, zo_model_arch_name(mc->arch)); break;
  case S_FAMILY: put(buf, n, zo_model_family_name(mc->family)); break;
  case S_ACT: put(buf, n, llama ? "silu" : "gelu_new"); break;
  case S_LAYERS: put_int(buf, n, mc->n_layer); break;
  case S_HEADS: put_int(buf, n, mc->n_head); break;
  case S_KV_HEADS: put_int(buf, n, mc->n_kv_head); break;
  case S_EMBD: put_int(buf, n, mc->n_embd); break;
  case S_INTER: put_int(buf, n, mc->intermediate_size); break;
  case S_VOCAB: put_int(buf, n, mc->vocab_size); break;
  case S_MAXT: put_int(buf, n, mc->max_seq_len); break;
  case S_HEAD_DIM: put_int(buf, n, mc->head_dim ? mc->head_dim : mc->n_embd / mc->n_head); break;
  case S_TIED: put_bool(buf, n, mc->tie_embeddings); break;
  case S_QKV_BIAS: put_bool(buf, n, mc->qkv_bias); break;
  case S_QK_NORM: put_bool(buf, n, mc->qk_norm); break;
  case S_EPS: fmt_real(buf, n, mc->rms_norm_eps); break;
  case S_THETA: fmt_real(buf, n, mc->rope_theta); break;
  case S_ROPE_SCALING: fmt_rope_scaling(buf, n, mc); break;
  case S_WINDOW: put_int(buf, n, mc->sliding_window); break;
  case S_PAD:
    if (mc->has_padding_idx) put_int(buf, n, mc->padding_idx);
    else put(buf, n, "none");
    break;
  case S_DROPOUT: fmt_dropout(buf, n, mc); break;
  default: ZO_ASSERT(!"not a model key");
  }
}

/* The precision and batch keys. fp16's scaling keys are a dynamic scale's
 * (fp16.loss_scale alone for a static one; none without fp16). */
static void format_batch(enum id i, const struct source *s, char *buf, size_t n) {
  const struct zo_config *c = s->cfg;
  const bool fp16 = c->fp16.enabled, dyn = fp16 && c->fp16.loss_scale == 0;
  if ((i == S_LS && !fp16) || ((i == S_LS_WINDOW || i == S_LS_HYST || i == S_LS_MIN) && !dyn)) {
    put(buf, n, UNUSED);
    return;
  }
  switch (i) {
  case S_PRECISION: put(buf, n, c->bf16 ? "bf16" : fp16 ? "fp16" : "fp32"); break;
  case S_LS:
    if (dyn) put(buf, n, "0 (dynamic)");
    else fmt_real(buf, n, c->fp16.loss_scale);
    break;
  case S_LS_WINDOW: put_int(buf, n, c->fp16.loss_scale_window); break;
  case S_LS_HYST: put_int(buf, n, c->fp16.hysteresis); break;
  case S_LS_MIN: fmt_real(buf, n, c->fp16.min_loss_scale); break;
  case S_ROWS: put_int(buf, n, (long)c->micro_batch * s->n_ranks); break;
  case S_ACCUM: put_int(buf, n, c->grad_accum); break;
  case S_SEQ: put_int(buf, n, c->data.seq_len); break;
  case S_SHUFFLE: put_bool(buf, n, c->data.shuffle); break;
  case S_FORMAT: put(buf, n, zo_data_format_name(c->data.format)); break;
  default: ZO_ASSERT(!"not a batch key");
  }
}

/* The optimizer's and the lora section's keys: AdamW8bit's block keys
 * without it, and LoRA's keys without LoRA (lora.r 0), are unused. */
static void format_optim(enum id i, const struct source *s, char *buf, size_t n) {
  const struct zo_config_optimizer *o = &s->cfg->optimizer;
  const bool q = o->type == ZO_OPTIMIZER_ADAMW8BIT;
  if (((i == S_OPT_BLOCK || i == S_OPT_MIN8) && !q) || (i > S_LORA_R && !s->lora_on)) {
    put(buf, n, UNUSED);
    return;
  }
  char a[32], b[32];
  switch (i) {
  case S_OPT: put(buf, n, q ? "AdamW8bit" : "AdamW"); break;
  case S_OPT_BLOCK: put_int(buf, n, o->block_size); break;
  case S_OPT_MIN8: put_int(buf, n, o->min_8bit_size); break;
  case S_BETAS:
    fmt_real(a, sizeof a, o->betas[0]);
    fmt_real(b, sizeof b, o->betas[1]);
    snprintf(buf, n, "[%s, %s]", a, b);
    break;
  case S_EPS_ADAM: fmt_real(buf, n, o->eps); break;
  case S_WD: fmt_real(buf, n, o->weight_decay); break;
  case S_CLIP: fmt_real(buf, n, s->cfg->gradient_clipping); break;
  case S_SCHEDULE: fmt_schedule(buf, n, &s->cfg->lr_schedule); break;
  case S_LORA_R: put_int(buf, n, s->lora_on ? s->lora.r : 0); break;
  case S_LORA_ALPHA: fmt_real(buf, n, s->lora.alpha); break;
  case S_LORA_DROPOUT: fmt_real(buf, n, s->lora.dropout); break;
  case S_LORA_TARGETS: fmt_targets(buf, n, s->lora.targets); break;
  case S_LORA_RSLORA: put_bool(buf, n, s->lora.use_rslora); break;
  case S_LORA_INIT: put(buf, n, s->lora_init); break;
  default: ZO_ASSERT(!"not an optimizer key");
  }
}

static void format_value(enum id i, const struct source *s, char *buf, size_t n) {
  if (i == S_INIT_FROM) snprintf(buf, n, "%s", s->init_from);
  else if (i <= S_DROPOUT) format_model(i, s, buf, n);
  else if (i <= S_FORMAT) format_batch(i, s, buf, n);
  else format_optim(i, s, buf, n);
}

/* ---- fingerprints of model.init_from and lora.init_from ------------------ */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool is_fingerprinted(const char *name) {
  const size_t n = strlen(name);
  return name[0] != '.' &&
         ((n > 12 && !strcmp(name + n - 12, ".safetensors")) || (n > 5 && !strcmp(name + n - 5, ".json")));
}

/* The fingerprints of dir's *.safetensors and *.json files, in name order,
 * folded into one CRC32 (names included) and their total bytes. */
static int fingerprint_dir(const char *dir, uint64_t *bytes, uint32_t *crc) {
  DIR *d = opendir(dir);
  if (!d) return zo_error(-errno, "%s: %s", dir, strerror(errno));
  char **names = NULL;
  int n = 0, cap = 0, err = 0;
  for (const struct dirent *e; !err && (e = readdir(d));) {
    if (!is_fingerprinted(e->d_name)) continue;
    if (n == cap) {
      char **p = realloc(names, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *p);
      if (!p) err = zo_error(-ENOMEM, "out of host memory listing %s", dir);
      else names = p;
    }
    if (!err && !(names[n++] = strdup(e->d_name))) err = zo_error(-ENOMEM, "out of host memory listing %s", dir);
  }
  closedir(d);
  if (n > 1 && !err) qsort(names, (size_t)n, sizeof *names, cmp_str);
  *bytes = 0;
  *crc = zo_crc32(0, NULL, 0);
  for (int i = 0; i < n && !err; i++) {
    char p[PATH_MAX];
    uint64_t b = 0;
    uint32_t c = 0;
    if (!names[i] || (err = join(p, sizeof p, dir, names[i])) || (err = zo_file_fingerprint(p, false, &b, &c))) break;
    const uint64_t rec[2] = {b, c};
    *crc = zo_crc32(zo_crc32(*crc, names[i], strlen(names[i]) + 1), rec, sizeof rec);
    *bytes += b;
  }
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
  return err;
}

/* "path (fingerprint XXXXXXXX of N bytes)" of a file or directory into
 * *out (malloc'd), "none" for an empty path. */
static int describe_files(const char *what, const char *path, char **out) {
  char buf[PATH_MAX + 96];
  if (!path || !path[0]) {
    snprintf(buf, sizeof buf, "none");
  } else {
    struct stat st;
    uint64_t bytes;
    uint32_t crc;
    int err = stat(path, &st) != 0 ? zo_error(-errno, "%s: %s", path, strerror(errno))
              : S_ISDIR(st.st_mode) ? fingerprint_dir(path, &bytes, &crc)
                                    : zo_file_fingerprint(path, false, &bytes, &crc);
    if (err) return zo_error(err, "%s: %s", what, zo_last_error());
    snprintf(buf, sizeof buf, "%s (fingerprint %08x of %llu bytes)", path, crc, (unsigned long long)bytes);
  }
  return (*out = strdup(buf)) ? 0 : zo_error(-ENOMEM, "out of host memory");
}

/* Two values of key i the same: the init_from keys by their files. */
static bool same_value(enum id i, const char *a, const char *b) {
  if (i == S_INIT_FROM || i == S_LORA_INIT) {
    const char *fa = strrchr(a, '('), *fb = strrchr(b, '(');
    if (fa && fb) return strcmp(fa, fb) == 0;
  }
  return strcmp(a, b) == 0;
}

/* ---- the run's, the checkpoint's ------------------------------------------ */

void zo_run_settings_free(struct zo_run_settings *s) {
  if (!s) return;
  for (int i = 0; i < N_SETTINGS; i++) free(s->value[i]);
  free(s);
}

/* Fills s's keys from src (the in_config_json ones only when src->cfg is NULL). */
static int fill(struct zo_run_settings *s, const struct source *src) {
  for (int i = 0; i < N_SETTINGS; i++) {
    if (!src->cfg && !table[i].in_config_json) continue;
    char buf[PATH_MAX + 128];
    format_value((enum id)i, src, buf, sizeof buf);
    if (!(s->value[i] = strdup(buf))) return zo_error(-ENOMEM, "out of host memory");
  }
  return 0;
}

int zo_run_settings_of_run(const struct zo_config *cfg, const struct zo_model_config *mc, int n_ranks,
                           struct zo_run_settings **out) {
  struct zo_run_settings *s = calloc(1, sizeof *s);
  struct source src = {.cfg = cfg, .mc = mc, .n_ranks = n_ranks};
  char *init = NULL, *lora_init = NULL;
  int err = s ? zo_lora_resolve(&cfg->lora, mc, &src.lora) : zo_error(-ENOMEM, "out of host memory");
  src.lora_on = err > 0;
  if (err > 0) err = 0;
  if (!err) err = describe_files("model.init_from", cfg->model.init_from, &init);
  if (!err) err = describe_files("lora.init_from", cfg->lora.init_from, &lora_init);
  src.init_from = init;
  src.lora_init = lora_init;
  if (!err) err = fill(s, &src);
  free(init);
  free(lora_init);
  if (err) zo_run_settings_free(s);
  *out = err ? NULL : s;
  return err;
}

/* An older checkpoint's settings: its config.json's model, its batch_rows. */
static int of_config_json(struct zo_run_settings *s, const char *path, int n_head, json_t *state) {
  struct zo_model_config c;
  int err = zo_model_config_from_pretrained(path, n_head, &c);
  if (err) return err;
  const struct source src = {.mc = &c};
  if ((err = fill(s, &src))) return err;
  json_t *rows = json_object_get(state, "batch_rows");
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(rows));
  if (json_is_integer(rows) && json_integer_value(rows) > 0 && !(s->value[S_ROWS] = strdup(buf)))
    return zo_error(-ENOMEM, "out of host memory");
  return 0;
}

int zo_run_settings_of_checkpoint(const char *path, int n_head, struct zo_run_settings **out) {
  char p[PATH_MAX];
  json_error_t je;
  int err = join(p, sizeof p, path, "trainer_state.json");
  json_t *j = err ? NULL : json_load_file(p, 0, &je);
  if (!err && !j) err = zo_error(-EINVAL, "%s: not a complete checkpoint (%s)", path, je.text);
  json_t *rec = json_object_get(j, "settings");
  struct zo_run_settings *s = err ? NULL : calloc(1, sizeof *s);
  if (!err && !s) err = zo_error(-ENOMEM, "out of host memory");
  if (!err && rec && !json_is_object(rec))
    err = zo_error(-EINVAL, "%s: \"settings\" is not an object: the file was edited or damaged; resume from another "
                            "checkpoint", p);
  for (int i = 0; !err && rec && i < N_SETTINGS; i++) {
    json_t *v = json_object_get(rec, table[i].key);
    if (v && !json_is_string(v))
      err = zo_error(-EINVAL, "%s: settings \"%s\" is not a string: the file was edited or damaged; resume from "
                              "another checkpoint", p, table[i].key);
    else if (v && !(s->value[i] = strdup(json_string_value(v))))
      err = zo_error(-ENOMEM, "out of host memory");
  }
  if (!err && !rec) err = of_config_json(s, path, n_head, j);
  json_decref(j);
  if (err) zo_run_settings_free(s);
  *out = err ? NULL : s;
  return err;
}

int zo_run_settings_n(void) { return N_SETTINGS; }
const char *zo_run_settings_key(int i) { return table[i].key; }
const char *zo_run_settings_value(const struct zo_run_settings *s, int i) { return s->value[i]; }

/* ---- the comparison -------------------------------------------------------- */

static int find_key(const char *key) {
  for (int i = 0; i < N_SETTINGS; i++)
    if (!strcmp(table[i].key, key)) return i;
  return -1;
}

/* Each allowed key is one whose change can be allowed; *mask gets them. */
static int check_allowed(const char *const *allowed, int n_allowed, bool mask[N_SETTINGS]) {
  for (int k = 0; k < n_allowed; k++) {
    const int i = find_key(allowed[k]);
    if (i >= 0 && table[i].kind == REFUSED) {
      mask[i] = true;
      continue;
    }
    char keys[1024] = "";
    for (int r = 0, used = 0; r < N_SETTINGS && used < (int)sizeof keys; r++)
      if (table[r].kind == REFUSED)
        used += snprintf(keys + used, sizeof keys - (size_t)used, "%s%s", used ? ", " : "", table[r].key);
    if (i < 0)
      return zo_error(-EINVAL, "--resume-allow %s: not a setting a resume compares; one of: %s", allowed[k], keys);
    return zo_error(-EINVAL, "--resume-allow %s: %s", allowed[k],
                    table[i].kind == FIXED ? "it can never change on resume (the weights' shapes or the optimizer "
                                             "states' format follow it): start a new run from the checkpoint's "
                                             "weights with --set model.init_from=CHECKPOINT instead"
                                           : "a change of it is never refused (it is said in one line): drop the flag");
  }
  return 0;
}

/* Appends "; KEY: the checkpoint's A, this run's B" to msg while it fits. */
static void append_change(char *msg, size_t size, int *listed, int i, const char *a, const char *b) {
  const size_t used = strlen(msg);
  const int w = snprintf(msg + used, size - used, "%s%s: the checkpoint's %s, this run's %s", *listed ? "; " : "",
                         table[i].key, a, b);
  if (w < 0 || used + (size_t)w >= size - 64) msg[used] = '\0';
  else (*listed)++;
}

int zo_run_settings_compare(const struct zo_run_settings *was, const struct zo_run_settings *now, const char *path,
                            const char *const *allowed, int n_allowed, FILE *notes) {
  bool allow[N_SETTINGS] = {false};
  int err = check_allowed(allowed, n_allowed, allow);
  if (err) return err;
  char refused[700] = "", fixed[256] = "", unrecorded[512] = "";
  int n_refused = 0, listed = 0, n_fixed = 0;
  for (int i = 0; i < N_SETTINGS; i++) {
    const char *a = was->value[i], *b = now->value[i];
    if (!a) {
      const size_t u = strlen(unrecorded);
      snprintf(unrecorded + u, sizeof unrecorded - u, "%s%s", u ? ", " : "", table[i].key);
      continue;
    }
    if (same_value((enum id)i, a, b)) {
      if (allow[i] && notes) fprintf(notes, "note: --resume-allow %s: unchanged (%s)\n", table[i].key, b);
      continue;
    }
    if (!strcmp(a, UNUSED) || !strcmp(b, UNUSED)) continue; /* another key governs it, and differs */
    if (table[i].kind == SAID || allow[i]) {
      if (notes)
        fprintf(notes, "note: resumed with a change: %s: the checkpoint's %s, this run's %s%s\n", table[i].key, a, b,
                allow[i] ? " (--resume-allow given)" : "");
      continue;
    }
    n_refused++;
    append_change(refused, sizeof refused, &listed, i, a, b);
    if (table[i].kind == FIXED && n_fixed++ < 4) {
      const size_t u = strlen(fixed);
      snprintf(fixed + u, sizeof fixed - u, "%s%s", u ? ", " : "", table[i].key);
    }
  }
  if (unrecorded[0] && notes)
    fprintf(notes, "note: %s records no %s (saved before checkpoints recorded them): not compared\n", path, unrecorded);
  if (!n_refused) return 0;
  char more[48] = "";
  if (listed < n_refused) snprintf(more, sizeof more, " and %d more", n_refused - listed);
  if (n_fixed)
    return zo_error(-EINVAL, "%s was trained with other settings: %s%s: %s can never change on resume (the weights' "
                             "shapes or the optimizer states' format follow it): resume with the checkpoint's "
                             "settings, or start a new run from its weights (--set model.init_from=%s)",
                    path, refused, more, fixed, path);
  return zo_error(-EINVAL, "%s was trained with other settings: %s%s: these change the training's arithmetic; resume "
                           "with the checkpoint's settings, or pass --resume-allow KEY for each change meant",
                  path, refused, more);
}
