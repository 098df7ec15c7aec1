/* Config loading, validation and dump, driven by one schema table.
 * The file and the --set overrides are merged into one JSON tree first; then
 * every key of the tree must name a schema entry (else: nearest valid key by
 * edit distance), every schema leaf takes its value or its default, and the
 * cross-field rules run last. Table order is dump order, and a default that
 * follows another key ("def_from") must come after that key. A few DeepSpeed
 * keys are accepted, checked and ignored ("ignored"): a config that sets one
 * loads with one warning line on stderr per key. The struct owns copies of
 * its strings: nothing points into the JSON tree once it is freed. */
#include "zo/config.h"

#include "zo/adamw8bit.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum key_type {
  KEY_SECTION, /* JSON object */
  KEY_INT,     /* int or long or uint64_t (by field size) */
  KEY_REAL,    /* double */
  KEY_BOOL,    /* bool */
  KEY_STRING,  /* char *, owned */
  KEY_ENUM,    /* an enum, matched by name (case-insensitive) */
  KEY_BYTES,   /* size_t, "10GiB" or a whole number */
  KEY_PAIR,    /* double[2] */
};

enum {
  HAS_MIN = 1 << 0,
  HAS_MAX = 1 << 1,
  MIN_OPEN = 1 << 2, /* min excluded */
  MAX_OPEN = 1 << 3, /* max excluded */
};

struct zo_config_key {
  const char *path;         /* "optimizer.params.lr" */
  enum key_type type;
  size_t offset, size;      /* field in struct zo_config */
  double min, max;          /* range, per flags; KEY_PAIR: of each element */
  unsigned flags;
  const char *const *names; /* KEY_ENUM: names in enum order, NULL-terminated */
  const char *def;          /* default as JSON text */
  const char *def_from;     /* or: the default is this (earlier) key's value */
  unsigned sched;           /* scheduler.params.*: bit (1 << type) per scheduler that takes it */
  const char *ignored;      /* accepted for DeepSpeed compatibility without effect: why (the
                             * warning when a config sets it); NULL for the keys in use */
};

static const char *const optimizer_names[] = {"AdamW", "AdamW8bit", NULL};
static const char *const scheduler_names[] = {"none", "WarmupLR", "WarmupCosineLR", "WarmupDecayLR",
                                              NULL};
static const char *const warmup_names[] = {"linear", "log", NULL};
static const char *const offload_names[] = {"none", "cpu", "nvme", NULL};
static const char *const arch_names[] = {"gpt2", "llama", NULL};
static const char *const nonfinite_names[] = {"stop", "skip", NULL};
static const char *const format_names[] = {"text", "llmc", "u16", "u32", NULL};
static const char *const device_names[] = {"auto", "cpu", "cuda", NULL};

const char *zo_device_name(enum zo_device d) {
  ZO_ASSERT((unsigned)d < 3);
  return device_names[d];
}

_Static_assert(sizeof(enum zo_optimizer_type) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(enum zo_scheduler_type) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(enum zo_warmup_type) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(enum zo_offload_device) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(enum zo_model_arch) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(enum zo_data_format) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(enum zo_device) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(enum zo_on_nonfinite) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof format_names / sizeof format_names[0] == ZO_DATA_U32 + 2,
               "format_names follows enum zo_data_format");

#define S_WLR (1u << ZO_SCHEDULER_WARMUP_LR)
#define S_WCL (1u << ZO_SCHEDULER_WARMUP_COSINE_LR)
#define S_WDL (1u << ZO_SCHEDULER_WARMUP_DECAY_LR)

#define SECTION(p) {.path = (p), .type = KEY_SECTION}
#define KEY(p, t, member)                                                                      \
  .path = (p), .type = (t), .offset = offsetof(struct zo_config, member),                      \
  .size = sizeof(((struct zo_config *)0)->member)
#define RANGE(a, b) .min = (a), .max = (b), .flags = HAS_MIN | HAS_MAX
#define ATLEAST(a) .min = (a), .flags = HAS_MIN
#define ABOVE(a) .min = (a), .flags = HAS_MIN | MIN_OPEN
#define OFFLOAD(sec, member, nbuf)                                                              \
  SECTION("zero_optimization." sec),                                                           \
  {KEY("zero_optimization." sec ".device", KEY_ENUM, zero.member.device),                     \
   .names = offload_names, .def = "\"none\""},                                                 \
  {KEY("zero_optimization." sec ".nvme_path", KEY_STRING, zero.member.nvme_path), .def = "\"\""}, \
  {KEY("zero_optimization." sec ".pin_memory", KEY_BOOL, zero.member.pin_memory), .def = "true"}, \
  {KEY("zero_optimization." sec ".buffer_count", KEY_INT, zero.member.buffer_count),          \
   RANGE(1, 1024), .def = nbuf}

static const struct zo_config_key zo_config_schema[] = {
  {KEY("train_micro_batch_size_per_gpu", KEY_INT, micro_batch), ATLEAST(1), .def = "1"},
  {KEY("gradient_accumulation_steps", KEY_INT, grad_accum), ATLEAST(1), .def = "1"},
  {KEY("steps", KEY_INT, steps), ATLEAST(1), .def = "1000"},

  SECTION("optimizer"),
  {KEY("optimizer.type", KEY_ENUM, optimizer.type), .names = optimizer_names, .def = "\"AdamW\""},
  SECTION("optimizer.params"),
  {KEY("optimizer.params.lr", KEY_REAL, optimizer.lr), ABOVE(0), .def = "1e-3"},
  {KEY("optimizer.params.betas", KEY_PAIR, optimizer.betas), .min = 0, .max = 1,
   .flags = HAS_MIN | HAS_MAX | MAX_OPEN, .def = "[0.9, 0.999]"},
  {KEY("optimizer.params.eps", KEY_REAL, optimizer.eps), ABOVE(0), .def = "1e-8"},
  {KEY("optimizer.params.weight_decay", KEY_REAL, optimizer.weight_decay), ATLEAST(0),
   .def = "0.01"},
  /* AdamW8bit only (AdamW ignores them): DeepSpeed has no 8-bit AdamW, these
   * follow bitsandbytes (block size 256, min_8bit_size 4096). */
  {KEY("optimizer.params.block_size", KEY_INT, optimizer.block_size), RANGE(1, ZO_ADAMW8BIT_BLOCK_MAX),
   .def = "256"},
  {KEY("optimizer.params.min_8bit_size", KEY_INT, optimizer.min_8bit_size), ATLEAST(0), .def = "4096"},

  SECTION("scheduler"),
  {KEY("scheduler.type", KEY_ENUM, scheduler.type), .names = scheduler_names, .def = "\"none\""},
  SECTION("scheduler.params"),
  {KEY("scheduler.params.warmup_min_lr", KEY_REAL, scheduler.warmup_min_lr), ATLEAST(0),
   .def = "0", .sched = S_WLR | S_WDL},
  {KEY("scheduler.params.warmup_max_lr", KEY_REAL, scheduler.warmup_max_lr), ABOVE(0),
   .def_from = "optimizer.params.lr", .sched = S_WLR | S_WDL},
  {KEY("scheduler.params.warmup_num_steps", KEY_INT, scheduler.warmup_num_steps), ATLEAST(0),
   .def = "1000", .sched = S_WLR | S_WCL | S_WDL},
  {KEY("scheduler.params.warmup_type", KEY_ENUM, scheduler.warmup_type), .names = warmup_names,
   .def = "\"linear\"", .sched = S_WLR | S_WCL | S_WDL},
  {KEY("scheduler.params.total_num_steps", KEY_INT, scheduler.total_num_steps), ATLEAST(1),
   .def_from = "steps", .sched = S_WCL | S_WDL},
  {KEY("scheduler.params.warmup_min_ratio", KEY_REAL, scheduler.warmup_min_ratio), RANGE(0, 1),
   .def = "0", .sched = S_WCL},
  {KEY("scheduler.params.cos_min_ratio", KEY_REAL, scheduler.cos_min_ratio), RANGE(0, 1),
   .def = "1e-4", .sched = S_WCL},

  {KEY("gradient_clipping", KEY_REAL, gradient_clipping), ATLEAST(0), .def = "0"},

  SECTION("bf16"),
  {KEY("bf16.enabled", KEY_BOOL, bf16), .def = "false"},

  SECTION("fp16"),
  {KEY("fp16.enabled", KEY_BOOL, fp16.enabled), .def = "false"},
  {KEY("fp16.loss_scale", KEY_REAL, fp16.loss_scale), ATLEAST(0), .def = "0"},
  {KEY("fp16.initial_scale_power", KEY_INT, fp16.initial_scale_power), RANGE(0, 32), .def = "16"},
  {KEY("fp16.loss_scale_window", KEY_INT, fp16.loss_scale_window), ATLEAST(1), .def = "1000"},
  {KEY("fp16.hysteresis", KEY_INT, fp16.hysteresis), ATLEAST(1), .def = "2"},
  {KEY("fp16.min_loss_scale", KEY_REAL, fp16.min_loss_scale), ABOVE(0), .def = "1"},

  SECTION("zero_optimization"),
  {KEY("zero_optimization.stage", KEY_INT, zero.stage), RANGE(0, 3), .def = "0"},
  {KEY("zero_optimization.sub_group_size", KEY_INT, zero.sub_group_size), ATLEAST(1), .def = "16777216"},
  {KEY("zero_optimization.overlap_comm", KEY_BOOL, zero.overlap_comm), .def = "true"},
  OFFLOAD("offload_optimizer", offload_optimizer, "4"),
  OFFLOAD("offload_param", offload_param, "5"),

  SECTION("aio"),
  {KEY("aio.block_size", KEY_BYTES, aio.block_size), RANGE(4096, 1 << 30), .def = "\"1MiB\""},
  {KEY("aio.queue_depth", KEY_INT, aio.queue_depth), RANGE(1, 65536), .def = "8"},
  /* DeepSpeed's libaio knobs: the NVMe tier has one io_uring thread per store
   * (offload/nvme_uring.c) and the scheduler orders its I/O with events. */
  {KEY("aio.thread_count", KEY_INT, aio.thread_count), RANGE(1, 1024), .def = "1",
   .ignored = "zoffload's NVMe tier submits from one io_uring per store"},
  {KEY("aio.single_submit", KEY_BOOL, aio.single_submit), .def = "false",
   .ignored = "zoffload's NVMe tier submits every prepared block at once on one io_uring per store"},
  {KEY("aio.overlap_events", KEY_BOOL, aio.overlap_events), .def = "true",
   .ignored = "zoffload's NVMe tier always overlaps submission and completion on one io_uring per "
              "store, and the scheduler orders its transfers with its own events"},

  SECTION("activation_checkpointing"),
  {KEY("activation_checkpointing.enabled", KEY_BOOL, activation_checkpointing.enabled),
   .def = "false"},
  {KEY("activation_checkpointing.number_checkpoints", KEY_INT,
       activation_checkpointing.number_checkpoints), ATLEAST(0), .def = "0"},
  {KEY("activation_checkpointing.cpu_checkpointing", KEY_BOOL,
       activation_checkpointing.cpu_checkpointing), .def = "false"},
  {KEY("activation_checkpointing.partition_activations", KEY_BOOL,
       activation_checkpointing.partition_activations), .def = "false"},

  SECTION("model"),
  {KEY("model.arch", KEY_ENUM, model.spec.arch), .names = arch_names, .def = "\"gpt2\""},
  {KEY("model.init_from", KEY_STRING, model.init_from), .def = "\"\""},
  {KEY("model.n_layer", KEY_INT, model.spec.n_layer), RANGE(1, 1024), .def = "12"},
  {KEY("model.n_head", KEY_INT, model.spec.n_head), RANGE(1, 1024), .def = "12"},
  {KEY("model.n_embd", KEY_INT, model.spec.n_embd), RANGE(1, 65536), .def = "768"},
  {KEY("model.vocab_size", KEY_INT, model.spec.vocab_size), RANGE(1, 1 << 24), .def = "50257"},
  {KEY("model.max_seq_len", KEY_INT, model.spec.max_seq_len), RANGE(1, 1 << 20), .def = "1024"},
  {KEY("model.num_key_value_heads", KEY_INT, model.spec.n_kv_head), RANGE(0, 1024), .def = "0"},
  {KEY("model.intermediate_size", KEY_INT, model.spec.intermediate_size), RANGE(0, 1 << 20), .def = "0"},
  {KEY("model.rms_norm_eps", KEY_REAL, model.spec.rms_norm_eps), ABOVE(0), .def = "1e-5"},
  {KEY("model.rope_theta", KEY_REAL, model.spec.rope_theta), ABOVE(0), .def = "10000"},
  {KEY("model.tie_word_embeddings", KEY_BOOL, model.spec.tie_embeddings), .def = "false"},
  SECTION("model.rope_scaling"),
  {KEY("model.rope_scaling.factor", KEY_REAL, model.spec.rope_scaling_factor), ATLEAST(0), .def = "0"},
  {KEY("model.rope_scaling.low_freq_factor", KEY_REAL, model.spec.rope_low_freq_factor), ATLEAST(0),
   .def = "1"},
  {KEY("model.rope_scaling.high_freq_factor", KEY_REAL, model.spec.rope_high_freq_factor), ATLEAST(0),
   .def = "4"},
  {KEY("model.rope_scaling.original_max_position_embeddings", KEY_INT, model.spec.rope_original_max_seq_len),
   RANGE(0, 1 << 24), .def = "8192"},

  SECTION("data"),
  {KEY("data.train", KEY_STRING, data.train), .def = "\"\""},
  {KEY("data.val", KEY_STRING, data.val), .def = "\"\""},
  {KEY("data.format", KEY_ENUM, data.format), .names = format_names, .def = "\"llmc\""},
  {KEY("data.seq_len", KEY_INT, data.seq_len), ATLEAST(1), .def_from = "model.max_seq_len"},
  {KEY("data.shuffle", KEY_BOOL, data.shuffle), .def = "true"},

  SECTION("engine"),
  {KEY("engine.device", KEY_ENUM, engine.device), .names = device_names, .def = "\"auto\""},
  {KEY("engine.gpu_memory_budget", KEY_BYTES, engine.gpu_memory_budget), .def = "0"},
  {KEY("engine.host_memory_budget", KEY_BYTES, engine.host_memory_budget), .def = "0"},
  {KEY("engine.threads", KEY_INT, engine.threads), ATLEAST(0), .def = "0"},
  {KEY("engine.seed", KEY_INT, engine.seed), ATLEAST(0), .def = "1337"},
  {KEY("engine.on_nonfinite", KEY_ENUM, engine.on_nonfinite), .names = nonfinite_names, .def = "\"stop\""},
  SECTION("engine.trace"),
  {KEY("engine.trace.path", KEY_STRING, engine.trace.path), .def = "\"\""},
  {KEY("engine.trace.first_step", KEY_INT, engine.trace.first_step), RANGE(1, 1 << 30), .def = "2"},
  {KEY("engine.trace.steps", KEY_INT, engine.trace.steps), RANGE(1, 1000), .def = "2"},

  SECTION("log"),
  {KEY("log.every", KEY_INT, log.every), ATLEAST(1), .def = "10"},
  {KEY("log.metrics_path", KEY_STRING, log.metrics_path), .def = "\"\""},

  SECTION("checkpoint"),
  {KEY("checkpoint.dir", KEY_STRING, checkpoint.dir), .def = "\"\""},
  {KEY("checkpoint.every", KEY_INT, checkpoint.every), ATLEAST(0), .def = "0"},
  {KEY("checkpoint.keep", KEY_INT, checkpoint.keep), ATLEAST(0), .def = "3"},
};

#define N_KEYS (sizeof zo_config_schema / sizeof zo_config_schema[0])
#define PATH_MAX_LEN 256
#define CONFIG_MAX_BYTES ((size_t)16 << 20)

/* ---- small helpers ------------------------------------------------------- */

static const struct zo_config_key *find_key(const char *path) {
  for (size_t i = 0; i < N_KEYS; i++)
    if (strcmp(zo_config_schema[i].path, path) == 0) return &zo_config_schema[i];
  return NULL;
}

static const char *leaf_of(const char *path) {
  const char *dot = strrchr(path, '.');
  return dot ? dot + 1 : path;
}

static size_t parent_len(const char *path) {
  const char *dot = strrchr(path, '.');
  return dot ? (size_t)(dot - path) : 0;
}

/* Case-insensitive Levenshtein distance; strings past 127 bytes are cut. */
static int edit_distance(const char *a, const char *b) {
  enum { N = 128 };
  int prev[N + 1], cur[N + 1];
  size_t na = strlen(a), nb = strlen(b);
  if (na > N) na = N;
  if (nb > N) nb = N;
  for (size_t j = 0; j <= nb; j++) prev[j] = (int)j;
  for (size_t i = 1; i <= na; i++) {
    cur[0] = (int)i;
    for (size_t j = 1; j <= nb; j++) {
      bool same = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]);
      int sub = prev[j - 1] + !same;
      int del = prev[j] + 1, ins = cur[j - 1] + 1;
      cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
    memcpy(prev, cur, sizeof(int) * (nb + 1));
  }
  return prev[nb];
}

/* Nearest schema path to an unknown one: by the whole path, or by the last
 * component alone (a key put in the wrong section), siblings first on ties. */
static const char *nearest_key(const char *path) {
  const char *best = NULL;
  int best_score = INT_MAX;
  const char *leaf = leaf_of(path);
  size_t plen = parent_len(path);
  for (size_t i = 0; i < N_KEYS; i++) {
    const char *cand = zo_config_schema[i].path;
    bool sibling = parent_len(cand) == plen && strncmp(cand, path, plen) == 0;
    int by_path = edit_distance(path, cand);
    int by_leaf = edit_distance(leaf, leaf_of(cand));
    int score = 2 * (by_path < by_leaf ? by_path : by_leaf) + (sibling ? 0 : 1);
    if (score < best_score) best_score = score, best = cand;
  }
  return best;
}

static int enum_index(const char *const *names, const char *s) {
  for (int i = 0; names[i]; i++)
    if (strcasecmp(names[i], s) == 0) return i;
  return -1;
}

static const char *enum_name(const struct zo_config_key *k, int value) {
  for (int i = 0; k->names[i]; i++)
    if (i == value) return k->names[i];
  return "?";
}

/* Shortest text that reads back as the same double. */
static void fmt_real(double x, char *buf, size_t cap) {
  if (x == floor(x) && fabs(x) < 1e15) {
    snprintf(buf, cap, "%.1f", x);
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, cap, "%.*g", prec, x);
    if (strtod(buf, NULL) == x) return;
  }
}

/* "1MiB" when a whole number of binary units, else the plain number. */
static void fmt_bytes(size_t n, char *buf, size_t cap, bool quote) {
  static const struct { const char *unit; int shift; } units[] = {
    {"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}};
  const char *q = quote ? "\"" : "";
  if (n != 0) {
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
      size_t unit = (size_t)1 << units[i].shift;
      if (n % unit == 0) {
        snprintf(buf, cap, "%s%zu%s%s", q, n / unit, units[i].unit, q);
        return;
      }
    }
  }
  snprintf(buf, cap, "%zu", n);
}

/* A JSON value as it should appear in a message (shortest reals, cut at ~80). */
static void fmt_json(const json_t *v, char *buf, size_t cap) {
  if (json_is_real(v)) {
    fmt_real(json_real_value(v), buf, cap);
    return;
  }
  if (json_is_array(v) && json_array_size(v) <= 8) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (size_t i = 0; i < json_array_size(v) && n + 1 < cap; i++) {
      if (i) n += (size_t)snprintf(buf + n, cap - n, ", ");
      if (n + 1 < cap) fmt_json(json_array_get(v, i), buf + n, cap - n);
      n += strlen(buf + n);
    }
    if (n + 1 < cap) snprintf(buf + n, cap - n, "]");
    return;
  }
  char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
  if (!s) {
    snprintf(buf, cap, "?");
    return;
  }
  if (strlen(s) > 80) memcpy(s + 72, "...", 4);
  snprintf(buf, cap, "%s", s);
  free(s);
}

/* What a valid value of k looks like: "an integer >= 0", "one of ...". */
static void describe(const struct zo_config_key *k, char *buf, size_t cap) {
  char lo[48], hi[48], range[128] = "";
  if (k->type == KEY_BYTES) {
    fmt_bytes((size_t)k->min, lo, sizeof lo, false);
    fmt_bytes((size_t)k->max, hi, sizeof hi, false);
  } else {
    snprintf(lo, sizeof lo, "%.10g", k->min);
    snprintf(hi, sizeof hi, "%.10g", k->max);
  }
  if ((k->flags & HAS_MIN) && (k->flags & HAS_MAX))
    snprintf(range, sizeof range, " in %s%s, %s%s", k->flags & MIN_OPEN ? "(" : "[", lo, hi,
             k->flags & MAX_OPEN ? ")" : "]");
  else if (k->flags & HAS_MIN)
    snprintf(range, sizeof range, " %s %s", k->flags & MIN_OPEN ? ">" : ">=", lo);

  switch (k->type) {
  case KEY_SECTION: snprintf(buf, cap, "an object"); break;
  case KEY_INT: snprintf(buf, cap, "an integer%s", range); break;
  case KEY_REAL: snprintf(buf, cap, "a number%s", range); break;
  case KEY_BOOL: snprintf(buf, cap, "true or false"); break;
  case KEY_STRING: snprintf(buf, cap, "a string"); break;
  case KEY_PAIR: snprintf(buf, cap, "an array of 2 numbers, each%s", range); break;
  case KEY_BYTES:
    snprintf(buf, cap, "a byte size such as \"10GiB\", \"512MiB\", \"1.5GB\" or a whole number%s",
             range);
    break;
  case KEY_ENUM: {
    size_t n = (size_t)snprintf(buf, cap, "one of");
    for (int i = 0; k->names[i] && n < cap; i++)
      n += (size_t)snprintf(buf + n, cap - n, "%s \"%s\"", i ? "," : "", k->names[i]);
    break;
  }
  }
}

/* ---- load ------------------------------------------------------------------ */

struct load_ctx {
  const char *file;        /* name for messages */
  const char *const *sets; /* the --set arguments that parsed */
  int n_sets;
};

/* Who gave the value at path: the last --set at or above it, else the file. */
static const char *source_of(const struct load_ctx *ctx, const char *path) {
  for (int i = ctx->n_sets - 1; i >= 0; i--) {
    size_t n = strcspn(ctx->sets[i], "=");
    if (strncmp(ctx->sets[i], path, n) == 0 && (path[n] == '\0' || path[n] == '.')) return "--set";
  }
  return ctx->file;
}

/* The source to name for a rule between two keys: --set when either came from one. */
static const char *source_of2(const struct load_ctx *ctx, const char *a, const char *b) {
  const char *src = source_of(ctx, a);
  return src != ctx->file ? src : source_of(ctx, b);
}

static int unknown_key(const char *src, const char *path) {
  return zo_error(-EINVAL, "%s: unknown key \"%s\"; did you mean \"%s\"?", src, path,
                  nearest_key(path));
}

static int bad_value(const struct load_ctx *ctx, const struct zo_config_key *k, const json_t *v,
                     const char *hint) {
  char val[96], want[256];
  fmt_json(v, val, sizeof val);
  describe(k, want, sizeof want);
  return zo_error(-EINVAL, "%s: %s = %s: must be %s%s", source_of(ctx, k->path), k->path, val,
                  want, hint ? hint : "");
}

static bool json_to_ll(const json_t *v, long long *out) {
  if (json_is_integer(v)) {
    *out = json_integer_value(v);
    return true;
  }
  if (json_is_real(v)) {
    double d = json_real_value(v);
    if (d == floor(d) && fabs(d) < 9.2e18) {
      *out = (long long)d;
      return true;
    }
  }
  return false;
}

static bool in_range(const struct zo_config_key *k, double x) {
  if (k->flags & HAS_MIN) {
    if (k->flags & MIN_OPEN ? !(x > k->min) : !(x >= k->min)) return false;
  }
  if (k->flags & HAS_MAX) {
    if (k->flags & MAX_OPEN ? !(x < k->max) : !(x <= k->max)) return false;
  }
  return true;
}

static int set_leaf(const struct load_ctx *ctx, struct zo_config *cfg,
                    const struct zo_config_key *k, const json_t *v) {
  char *dst = (char *)cfg + k->offset;
  switch (k->type) {
  case KEY_SECTION:
    break;
  case KEY_INT: {
    long long x;
    if (!json_to_ll(v, &x) || !in_range(k, (double)x)) return bad_value(ctx, k, v, NULL);
    if (k->size == sizeof(int)) {
      if (x < INT_MIN || x > INT_MAX) return bad_value(ctx, k, v, " and <= 2147483647");
      int i = (int)x;
      memcpy(dst, &i, sizeof i);
    } else {
      ZO_ASSERT(k->size == sizeof(int64_t));
      int64_t i = (int64_t)x;
      memcpy(dst, &i, sizeof i);
    }
    break;
  }
  case KEY_REAL: {
    ZO_ASSERT(k->size == sizeof(double));
    if (!json_is_number(v) || !in_range(k, json_number_value(v))) return bad_value(ctx, k, v, NULL);
    double x = json_number_value(v);
    memcpy(dst, &x, sizeof x);
    break;
  }
  case KEY_PAIR: {
    ZO_ASSERT(k->size == 2 * sizeof(double));
    if (!json_is_array(v) || json_array_size(v) != 2) return bad_value(ctx, k, v, NULL);
    double x[2];
    for (size_t i = 0; i < 2; i++) {
      const json_t *e = json_array_get(v, i);
      if (!json_is_number(e) || !in_range(k, json_number_value(e)))
        return bad_value(ctx, k, v, NULL);
      x[i] = json_number_value(e);
    }
    memcpy(dst, x, sizeof x);
    break;
  }
  case KEY_BOOL: {
    if (!json_is_boolean(v)) return bad_value(ctx, k, v, NULL);
    bool b = json_is_true(v);
    memcpy(dst, &b, sizeof b);
    break;
  }
  case KEY_STRING: {
    if (!json_is_string(v)) return bad_value(ctx, k, v, NULL);
    char *s = strdup(json_string_value(v));
    if (!s) return zo_error(-ENOMEM, "config: out of memory copying %s", k->path);
    char *old;
    memcpy(&old, dst, sizeof old);
    free(old);
    memcpy(dst, &s, sizeof s);
    break;
  }
  case KEY_ENUM: {
    int i = json_is_string(v) ? enum_index(k->names, json_string_value(v)) : -1;
    if (i < 0) {
      char hint[96] = "";
      if (json_is_string(v)) {
        const char *best = NULL;
        int best_d = INT_MAX;
        for (int j = 0; k->names[j]; j++) {
          int d = edit_distance(json_string_value(v), k->names[j]);
          if (d < best_d) best_d = d, best = k->names[j];
        }
        if (best && best_d <= 3) snprintf(hint, sizeof hint, "; did you mean \"%s\"?", best);
      }
      return bad_value(ctx, k, v, hint);
    }
    memcpy(dst, &i, sizeof i);
    break;
  }
  case KEY_BYTES: {
    ZO_ASSERT(k->size == sizeof(size_t));
    size_t n;
    long long x;
    if (json_is_string(v)) {
      if (zo_parse_bytes(json_string_value(v), &n) != 0) return bad_value(ctx, k, v, NULL);
    } else if (json_to_ll(v, &x) && x >= 0) {
      n = (size_t)x;
    } else {
      return bad_value(ctx, k, v, NULL);
    }
    if (!in_range(k, (double)n)) return bad_value(ctx, k, v, NULL);
    memcpy(dst, &n, sizeof n);
    break;
  }
  }
  return 0;
}

/* The value at a dotted path of the tree; NULL when absent or null. */
static json_t *tree_get(json_t *root, const char *path) {
  json_t *node = root;
  char comp[PATH_MAX_LEN];
  while (node && json_is_object(node)) {
    size_t n = strcspn(path, ".");
    if (n >= sizeof comp) return NULL;
    memcpy(comp, path, n);
    comp[n] = '\0';
    node = json_object_get(node, comp);
    if (path[n] == '\0') return json_is_null(node) ? NULL : node;
    path += n + 1;
  }
  return NULL;
}

/* Pass 1: every key in the tree names a schema entry; sections are objects. */
static int check_keys(const struct load_ctx *ctx, json_t *obj, const char *prefix) {
  const char *key;
  json_t *val;
  json_object_foreach(obj, key, val) {
    char path[PATH_MAX_LEN];
    int n = snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", key);
    bool fits = n > 0 && (size_t)n < sizeof path;
    const struct zo_config_key *k = fits ? find_key(path) : NULL;
    const char *src = source_of(ctx, fits ? path : prefix);
    if (fits && strchr(key, '.') != NULL)
      return zo_error(-EINVAL, "%s: key \"%s\" contains '.': nest objects instead, as in "
                      "{\"optimizer\": {\"params\": {\"lr\": 1e-3}}}", src, key);
    if (!k) return unknown_key(src, fits ? path : key);
    if (k->type != KEY_SECTION || json_is_null(val)) continue;
    if (!json_is_object(val)) return bad_value(ctx, k, val, NULL);
    int err = check_keys(ctx, val, path);
    if (err) return err;
  }
  return 0;
}

static int sched_param_misplaced(const struct load_ctx *ctx, const struct zo_config *cfg,
                                 const struct zo_config_key *k) {
  char takes[256] = "";
  size_t n = 0;
  for (size_t i = 0; i < N_KEYS; i++) {
    if (!(zo_config_schema[i].sched & (1u << cfg->scheduler.type))) continue;
    n += (size_t)snprintf(takes + n, sizeof takes - n, "%s%s", n ? ", " : "",
                          leaf_of(zo_config_schema[i].path));
    if (n >= sizeof takes) break;
  }
  if (cfg->scheduler.type == ZO_SCHEDULER_NONE)
    return zo_error(-EINVAL, "%s: %s is set but scheduler.type is \"none\" (constant lr), which "
                    "takes no parameters: set scheduler.type to \"WarmupLR\", \"WarmupCosineLR\" "
                    "or \"WarmupDecayLR\", or remove scheduler.params",
                    source_of(ctx, k->path), k->path);
  return zo_error(-EINVAL, "%s: %s is not a parameter of %s, which takes %s",
                  source_of(ctx, k->path), k->path, scheduler_names[cfg->scheduler.type], takes);
}

/* Pass 2: every leaf, in table order, from the tree or its default. */
static int fill_values(const struct load_ctx *ctx, struct zo_config *cfg, json_t *root) {
  for (size_t i = 0; i < N_KEYS; i++) {
    const struct zo_config_key *k = &zo_config_schema[i];
    if (k->type == KEY_SECTION) continue;
    json_t *v = tree_get(root, k->path);
    if (v && k->sched && !(k->sched & (1u << cfg->scheduler.type)))
      return sched_param_misplaced(ctx, cfg, k);
    if (v) {
      int err = set_leaf(ctx, cfg, k, v);
      if (err) return err;
    } else if (k->def_from) {
      const struct zo_config_key *from = find_key(k->def_from);
      ZO_ASSERT(from && from < k && from->size == k->size && from->type != KEY_STRING);
      memcpy((char *)cfg + k->offset, (const char *)cfg + from->offset, k->size);
    } else {
      json_error_t jerr;
      json_t *def = json_loads(k->def, JSON_DECODE_ANY, &jerr);
      ZO_ASSERT(def != NULL);
      int err = set_leaf(ctx, cfg, k, def);
      json_decref(def);
      ZO_ASSERT(err == 0 || err == -ENOMEM);
      if (err) return err;
    }
  }
  return 0;
}

/* Pass 3: rules across keys, then the derived fields. */
static int check_cross(const struct load_ctx *ctx, struct zo_config *cfg) {
  struct zo_model_config *m = &cfg->model.spec;
#define SRC(path) source_of(ctx, path)
#define SRC2(a, b) source_of2(ctx, a, b)

  if (m->n_embd % m->n_head != 0) {
    int lo = m->n_embd / m->n_head * m->n_head;
    return zo_error(-EINVAL, "%s: model.n_embd = %d is not a multiple of model.n_head = %d: "
                    "use n_embd %d or %d, or an n_head that divides %d",
                    SRC2("model.n_embd", "model.n_head"),
                    m->n_embd, m->n_head, lo > 0 ? lo : m->n_head, lo + m->n_head, m->n_embd);
  }
  if (cfg->data.seq_len > m->max_seq_len)
    return zo_error(-EINVAL, "%s: data.seq_len = %d exceeds model.max_seq_len = %d: lower "
                    "data.seq_len or raise model.max_seq_len",
                    SRC2("data.seq_len", "model.max_seq_len"),
                    cfg->data.seq_len, m->max_seq_len);
  if (cfg->data.format == ZO_DATA_TEXT && m->vocab_size < 256)
    return zo_error(-EINVAL, "%s: data.format = \"text\" has 256 byte tokens but "
                    "model.vocab_size = %d: set model.vocab_size >= 256",
                    SRC2("data.format", "model.vocab_size"),
                    m->vocab_size);
  /* An llm.c shard's header says whether its ids are uint16 or uint32, so
   * only "u16" fixes the width here. */
  if (cfg->data.format == ZO_DATA_U16 && m->vocab_size > 65536)
    return zo_error(-EINVAL, "%s: data.format = \"u16\" stores uint16 token ids but "
                    "model.vocab_size = %d > 65536: use data.format \"u32\" (flat uint32 ids) "
                    "or \"llmc\" (llm.c version 7 shards)", SRC2("model.vocab_size", "data.format"),
                    m->vocab_size);
  if (cfg->activation_checkpointing.number_checkpoints > m->n_layer)
    return zo_error(-EINVAL, "%s: activation_checkpointing.number_checkpoints = %d exceeds "
                    "model.n_layer = %d (0 = one per layer)",
                    SRC2("activation_checkpointing.number_checkpoints", "model.n_layer"),
                    cfg->activation_checkpointing.number_checkpoints, m->n_layer);
  if (cfg->activation_checkpointing.partition_activations)
    return zo_error(-ENOTSUP, "%s: activation_checkpointing.partition_activations = true splits "
                    "activations across model-parallel ranks, which zoffload does not have: "
                    "set it to false", SRC("activation_checkpointing.partition_activations"));

  if (cfg->bf16 && cfg->fp16.enabled)
    return zo_error(-EINVAL, "%s: bf16.enabled and fp16.enabled are both true: choose one",
                    SRC2("fp16.enabled", "bf16.enabled"));

  static const struct { const char *name; size_t offset; int min_stage; } offloads[] = {
    {"offload_optimizer", offsetof(struct zo_config, zero.offload_optimizer), 1},
    {"offload_param", offsetof(struct zo_config, zero.offload_param), 3},
  };
  for (size_t i = 0; i < 2; i++) {
    const struct zo_config_offload *o =
        (const struct zo_config_offload *)((const char *)cfg + offloads[i].offset);
    char path[96];
    snprintf(path, sizeof path, "zero_optimization.%s.device", offloads[i].name);
    if (o->device != ZO_OFFLOAD_NONE && cfg->zero.stage < offloads[i].min_stage)
      return zo_error(-EINVAL, "%s: %s = \"%s\" needs zero_optimization.stage %s %d (it is %d)",
                      SRC2(path, "zero_optimization.stage"), path, offload_names[o->device],
                      offloads[i].min_stage == 3 ? "=" : ">=", offloads[i].min_stage,
                      cfg->zero.stage);
    if (o->device == ZO_OFFLOAD_NVME && o->nvme_path[0] == '\0')
      return zo_error(-EINVAL, "%s: %s = \"nvme\" needs zero_optimization.%s.nvme_path "
                      "(a directory on the NVMe drive)", SRC(path), path, offloads[i].name);
  }
  if (cfg->aio.block_size % 4096 != 0)
    return zo_error(-EINVAL, "%s: aio.block_size = %zu: must be a multiple of 4096 (O_DIRECT "
                    "alignment), e.g. \"1MiB\"", SRC("aio.block_size"), cfg->aio.block_size);

  const struct zo_config_scheduler *s = &cfg->scheduler;
  const char *sname = scheduler_names[s->type];
  if (s->type != ZO_SCHEDULER_NONE && s->warmup_type != ZO_WARMUP_LINEAR)
    return zo_error(-ENOTSUP, "%s: scheduler.params.warmup_type = \"%s\": only \"linear\" "
                    "warmup is supported", SRC("scheduler.params.warmup_type"),
                    warmup_names[s->warmup_type]);
  if (s->type == ZO_SCHEDULER_WARMUP_COSINE_LR && s->warmup_min_ratio != 0)
    return zo_error(-ENOTSUP, "%s: scheduler.params.warmup_min_ratio = %g: WarmupCosineLR "
                    "warms up from 0 here; only 0 is supported",
                    SRC("scheduler.params.warmup_min_ratio"), s->warmup_min_ratio);
  if (s->type == ZO_SCHEDULER_WARMUP_DECAY_LR && s->warmup_min_lr != 0)
    return zo_error(-ENOTSUP, "%s: scheduler.params.warmup_min_lr = %g: WarmupDecayLR warms "
                    "up from 0 and decays to 0 here; only 0 is supported",
                    SRC("scheduler.params.warmup_min_lr"), s->warmup_min_lr);
  if (s->type == ZO_SCHEDULER_WARMUP_LR && s->warmup_min_lr > s->warmup_max_lr)
    return zo_error(-EINVAL, "%s: scheduler.params.warmup_min_lr = %g exceeds "
                    "scheduler.params.warmup_max_lr = %g",
                    SRC2("scheduler.params.warmup_min_lr", "scheduler.params.warmup_max_lr"),
                    s->warmup_min_lr, s->warmup_max_lr);
  if ((s->type == ZO_SCHEDULER_WARMUP_COSINE_LR || s->type == ZO_SCHEDULER_WARMUP_DECAY_LR) &&
      s->warmup_num_steps > s->total_num_steps)
    return zo_error(-EINVAL, "%s: scheduler.params.warmup_num_steps = %ld exceeds "
                    "scheduler.params.total_num_steps = %ld (%s; total_num_steps defaults to "
                    "steps)",
                    SRC2("scheduler.params.warmup_num_steps", "scheduler.params.total_num_steps"),
                    s->warmup_num_steps,
                    s->total_num_steps, sname);
#undef SRC
#undef SRC2

  m->padded_vocab_size = (m->vocab_size + 63) / 64 * 64;

  struct zo_lr_schedule *lr = &cfg->lr_schedule;
  *lr = (struct zo_lr_schedule){.kind = ZO_LR_CONSTANT, .lr = cfg->optimizer.lr,
                                .min_lr = cfg->optimizer.lr, .total_steps = cfg->steps};
  switch (s->type) {
  case ZO_SCHEDULER_NONE:
    break;
  case ZO_SCHEDULER_WARMUP_LR:
    lr->kind = ZO_LR_WARMUP;
    lr->lr = s->warmup_max_lr;
    lr->min_lr = s->warmup_min_lr;
    lr->warmup_steps = s->warmup_num_steps;
    break;
  case ZO_SCHEDULER_WARMUP_COSINE_LR:
    lr->kind = ZO_LR_WARMUP_COSINE;
    lr->min_lr = cfg->optimizer.lr * s->cos_min_ratio;
    lr->warmup_steps = s->warmup_num_steps;
    lr->total_steps = s->total_num_steps;
    break;
  case ZO_SCHEDULER_WARMUP_DECAY_LR:
    lr->kind = ZO_LR_WARMUP_DECAY;
    lr->lr = s->warmup_max_lr;
    lr->min_lr = 0;
    lr->warmup_steps = s->warmup_num_steps;
    lr->total_steps = s->total_num_steps;
    break;
  }
  return 0;
}

static int read_file(const char *path, char **out, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = errno;
    return zo_error(-e, "%s: cannot open config: %s", path, strerror(e));
  }
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  int err = 0;
  if (!buf) {
    err = zo_error(-ENOMEM, "%s: out of memory reading config", path);
    goto out_close;
  }
  for (;;) {
    if (n == cap) {
      if (cap >= CONFIG_MAX_BYTES) {
        err = zo_error(-EINVAL, "%s: over %zu MiB: not a config file", path,
                       CONFIG_MAX_BYTES >> 20);
        goto out_free;
      }
      char *bigger = realloc(buf, cap * 2);
      if (!bigger) {
        err = zo_error(-ENOMEM, "%s: out of memory reading config", path);
        goto out_free;
      }
      buf = bigger;
      cap *= 2;
    }
    size_t want = cap - n, got = fread(buf + n, 1, want, f);
    n += got;
    if (got < want) break;
  }
  if (ferror(f)) {
    err = zo_error(-EIO, "%s: cannot read config: %s", path, strerror(errno));
    goto out_free;
  }
  fclose(f);
  *out = buf;
  *len = n;
  return 0;

out_free:
  free(buf);
out_close:
  fclose(f);
  return err;
}

static int parse_file(const char *path, json_t **root) {
  char *text = NULL;
  size_t len = 0;
  int err = read_file(path, &text, &len);
  if (err) return err;
  const size_t bom = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0; /* UTF-8 byte-order mark */
  size_t i = bom;
  while (i < len && isspace((unsigned char)text[i])) i++;
  if (i == len) {
    free(text);
    return zo_error(-EINVAL, "%s: empty file: expected a JSON object such as "
                    "{\"model\": {\"n_layer\": 12}}", path);
  }
  json_error_t jerr;
  *root = json_loadb(text + bom, len - bom, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
  free(text);
  if (!*root)
    return zo_error(-EINVAL, "%s:%d:%d: JSON syntax error: %s", path, jerr.line, jerr.column,
                    jerr.text);
  if (!json_is_object(*root)) {
    json_decref(*root);
    *root = NULL;
    return zo_error(-EINVAL, "%s: the top level must be a JSON object {...}", path);
  }
  return 0;
}

/* Merges one "a.b.c=value" into root. */
static int apply_set(json_t *root, const char *set) {
  const char *eq = strchr(set, '=');
  if (!eq)
    return zo_error(-EINVAL, "--set \"%s\": expected key.path=value, e.g. "
                    "--set optimizer.params.lr=3e-4", set);
  size_t klen = (size_t)(eq - set);
  char path[PATH_MAX_LEN];
  if (klen == 0 || klen >= sizeof path)
    return zo_error(-EINVAL, "--set \"%s\": expected key.path=value with a key before '='", set);
  memcpy(path, set, klen);
  path[klen] = '\0';
  for (size_t i = 0; i < klen; i++) {
    bool edge = i == 0 || i + 1 == klen || path[i + 1] == '.';
    if (!(isalnum((unsigned char)path[i]) || path[i] == '_' || (path[i] == '.' && !edge)))
      return zo_error(-EINVAL, "--set \"%s\": \"%s\" is not a key path like "
                      "optimizer.params.lr", set, path);
  }
  const struct zo_config_key *k = find_key(path);
  if (!k) return unknown_key("--set", path);

  const char *text = eq + 1;
  json_error_t jerr;
  json_t *value = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
  bool stringy = k->type == KEY_STRING || k->type == KEY_ENUM || k->type == KEY_BYTES;
  bool keep = value && (!stringy || json_is_string(value) || json_is_null(value) ||
                        (k->type == KEY_BYTES && json_is_number(value)));
  if (!keep) {
    json_decref(value);
    value = json_string(text);
    if (!value) return zo_error(-EINVAL, "--set \"%s\": the value is not valid UTF-8", set);
  }

  json_t *node = root;
  char *comp = path;
  for (char *dot; (dot = strchr(comp, '.')) != NULL; comp = dot + 1) {
    *dot = '\0';
    json_t *child = json_object_get(node, comp);
    if (!json_is_object(child)) {
      child = json_object();
      if (!child || json_object_set_new(node, comp, child) != 0) goto out_nomem;
    }
    node = child;
  }
  if (json_object_set_new(node, comp, value) != 0) return zo_error(-ENOMEM, "--set: out of memory");
  return 0;

out_nomem:
  json_decref(value);
  return zo_error(-ENOMEM, "--set: out of memory");
}

/* One warning line on stderr for each ignored key the tree sets (JSON null
 * means unset). */
static void warn_ignored(const struct load_ctx *ctx, json_t *root) {
  for (size_t i = 0; i < N_KEYS; i++) {
    const struct zo_config_key *k = &zo_config_schema[i];
    const json_t *v = k->ignored ? tree_get(root, k->path) : NULL;
    if (!v) continue;
    char val[96];
    fmt_json(v, val, sizeof val);
    fprintf(stderr, "zoffload: warning: %s: %s = %s is accepted for DeepSpeed compatibility and has no effect: "
                    "%s\n", source_of(ctx, k->path), k->path, val, k->ignored);
  }
}

int zo_config_load(struct zo_config *cfg, const char *path, const char *const *sets, int n_sets) {
  ZO_ASSERT(cfg != NULL && n_sets >= 0 && (n_sets == 0 || sets != NULL));
  memset(cfg, 0, sizeof *cfg);
  struct load_ctx ctx = {.file = path ? path : "config", .sets = sets, .n_sets = 0};
  json_t *root = NULL;
  int err;

  if (path) {
    err = parse_file(path, &root);
    if (err) return err;
  } else {
    root = json_object();
    if (!root) return zo_error(-ENOMEM, "config: out of memory");
  }
  for (int i = 0; i < n_sets; i++) {
    err = apply_set(root, sets[i]);
    if (err) goto out_free;
    ctx.n_sets = i + 1;
  }
  err = check_keys(&ctx, root, "");
  if (err) goto out_free;
  cfg->path = strdup(path ? path : "");
  if (!cfg->path) {
    err = zo_error(-ENOMEM, "config: out of memory");
    goto out_free;
  }
  err = fill_values(&ctx, cfg, root);
  if (err) goto out_free;
  err = check_cross(&ctx, cfg);
  if (err) goto out_free;
  warn_ignored(&ctx, root);
  json_decref(root);
  return 0;

out_free:
  json_decref(root);
  zo_config_free(cfg);
  return err;
}

void zo_config_free(struct zo_config *cfg) {
  if (!cfg) return;
  for (size_t i = 0; i < N_KEYS; i++) {
    if (zo_config_schema[i].type != KEY_STRING) continue;
    char *s;
    memcpy(&s, (char *)cfg + zo_config_schema[i].offset, sizeof s);
    free(s);
  }
  free(cfg->path);
  memset(cfg, 0, sizeof *cfg);
}

/* ---- dump ------------------------------------------------------------------ */

static bool dump_skips(const struct zo_config *cfg, const struct zo_config_key *k) {
  if (k->ignored) return true; /* no effect: not part of the effective config */
  if (cfg->scheduler.type == ZO_SCHEDULER_NONE && strncmp(k->path, "scheduler", 9) == 0)
    return true;
  return k->sched && !(k->sched & (1u << cfg->scheduler.type));
}

static void dump_string(FILE *out, const char *s) {
  fputc('"', out);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
    else if (c == '\n') fputs("\\n", out);
    else if (c == '\t') fputs("\\t", out);
    else if (c < 0x20) fprintf(out, "\\u%04x", c);
    else fputc(c, out);
  }
  fputc('"', out);
}

static void dump_leaf(const struct zo_config *cfg, const struct zo_config_key *k, FILE *out) {
  const char *src = (const char *)cfg + k->offset;
  char buf[64], buf2[64];
  switch (k->type) {
  case KEY_SECTION:
    break;
  case KEY_INT: {
    long long x;
    if (k->size == sizeof(int)) {
      int i;
      memcpy(&i, src, sizeof i);
      x = i;
    } else {
      int64_t i;
      memcpy(&i, src, sizeof i);
      x = i;
    }
    fprintf(out, "%lld", x);
    break;
  }
  case KEY_REAL: {
    double x;
    memcpy(&x, src, sizeof x);
    fmt_real(x, buf, sizeof buf);
    fputs(buf, out);
    break;
  }
  case KEY_PAIR: {
    double x[2];
    memcpy(x, src, sizeof x);
    fmt_real(x[0], buf, sizeof buf);
    fmt_real(x[1], buf2, sizeof buf2);
    fprintf(out, "[%s, %s]", buf, buf2);
    break;
  }
  case KEY_BOOL: {
    bool b;
    memcpy(&b, src, sizeof b);
    fputs(b ? "true" : "false", out);
    break;
  }
  case KEY_STRING: {
    const char *s;
    memcpy(&s, src, sizeof s);
    dump_string(out, s ? s : "");
    break;
  }
  case KEY_ENUM: {
    int i;
    memcpy(&i, src, sizeof i);
    dump_string(out, enum_name(k, i));
    break;
  }
  case KEY_BYTES: {
    size_t n;
    memcpy(&n, src, sizeof n);
    fmt_bytes(n, buf, sizeof buf, true);
    fputs(buf, out);
    break;
  }
  }
}

/* Writes the members of the section at prefix ("" = top level) in table order. */
static void dump_section(const struct zo_config *cfg, const char *prefix, int depth, FILE *out) {
  size_t plen = strlen(prefix);
  bool first = true;
  fputs("{", out);
  for (size_t i = 0; i < N_KEYS; i++) {
    const struct zo_config_key *k = &zo_config_schema[i];
    if (parent_len(k->path) != plen || strncmp(k->path, prefix, plen) != 0) continue;
    if (dump_skips(cfg, k)) continue;
    fprintf(out, "%s\n%*s\"%s\": ", first ? "" : ",", 2 * (depth + 1), "", leaf_of(k->path));
    first = false;
    if (k->type == KEY_SECTION) dump_section(cfg, k->path, depth + 1, out);
    else dump_leaf(cfg, k, out);
  }
  fprintf(out, "\n%*s}", 2 * depth, "");
}

int zo_config_dump(const struct zo_config *cfg, FILE *out) {
  ZO_ASSERT(cfg != NULL && out != NULL);
  dump_section(cfg, "", 0, out);
  fputc('\n', out);
  if (fflush(out) != 0 || ferror(out)) return zo_error(-EIO, "config dump: write failed");
  return 0;
}

/* ---- byte sizes -------------------------------------------------------------- */

int zo_parse_bytes(const char *s, size_t *out) {
  static const struct { const char *unit; uint64_t mult; } units[] = {
    {"", 1}, {"b", 1},
    {"k", 1ull << 10}, {"kib", 1ull << 10}, {"kb", 1000ull},
    {"m", 1ull << 20}, {"mib", 1ull << 20}, {"mb", 1000000ull},
    {"g", 1ull << 30}, {"gib", 1ull << 30}, {"gb", 1000000000ull},
    {"t", 1ull << 40}, {"tib", 1ull << 40}, {"tb", 1000000000000ull},
  };
  ZO_ASSERT(s != NULL && out != NULL);
  const char *p = s;
  while (isspace((unsigned char)*p)) p++;
  if (!isdigit((unsigned char)*p)) goto out_bad;

  unsigned __int128 whole = 0, frac = 0, scale = 1;
  for (; isdigit((unsigned char)*p); p++) {
    whole = whole * 10 + (unsigned)(*p - '0');
    if (whole > (unsigned __int128)SIZE_MAX) goto out_bad;
  }
  bool has_frac = *p == '.';
  if (has_frac) {
    p++;
    if (!isdigit((unsigned char)*p)) goto out_bad;
    for (int n = 0; isdigit((unsigned char)*p); p++, n++) {
      if (n < 18) {
        frac = frac * 10 + (unsigned)(*p - '0');
        scale *= 10;
      }
    }
  }
  while (isspace((unsigned char)*p)) p++;
  char unit[4];
  size_t n = 0;
  for (; isalpha((unsigned char)*p) && n < sizeof unit - 1; p++)
    unit[n++] = (char)tolower((unsigned char)*p);
  unit[n] = '\0';
  while (isspace((unsigned char)*p)) p++;
  if (*p != '\0') goto out_bad;

  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strcmp(unit, units[i].unit) != 0) continue;
    uint64_t mult = units[i].mult;
    if (has_frac && mult == 1) goto out_bad;
    /* whole <= SIZE_MAX and frac < scale <= 1e18, so neither product wraps 128 bits. */
    unsigned __int128 bytes = whole * mult + (frac * mult + scale / 2) / scale;
    if (bytes > (unsigned __int128)SIZE_MAX) goto out_bad;
    *out = (size_t)bytes;
    return 0;
  }

out_bad:
  return zo_error(-EINVAL, "\"%s\" is not a byte size: write a whole number of bytes or a "
                  "number with a unit, e.g. \"10GiB\", \"512MiB\", \"1.5GB\"", s);
}
