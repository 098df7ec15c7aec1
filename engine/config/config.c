/* Config loading, validation and dump, driven by one schema table.
 * The file and the --set overrides are merged into one JSON tree first; then
 * every key of the tree must name a schema entry (else: nearest valid key by
 * edit distance), every schema leaf takes its value or its default, and the
 * cross-field rules run last. Table order is dump order, and a default that
 * follows another key ("def_from") must come after that key. DeepSpeed's
 * keys that do nothing here are accepted ("ignored": checked when they have a
 * field, any value when KEY_ANY): a config that sets some loads with one
 * warning listing them. Every unknown key of a file is reported in one error;
 * "auto" (Hugging Face's DeepSpeed configs) is the key's default; a few
 * aliases (bf16: true, gradient_checkpointing) are rewritten first. The
 * struct owns copies of its strings: nothing points into the JSON tree once
 * it is freed. */
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
  KEY_ANY,     /* no field: a DeepSpeed key without effect here, any value */
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
  const char *auto_def;     /* what "auto" means when not the default, as JSON text */
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
static const char *const placement_names[] = {"config", "auto", NULL};
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
#define NO_EFFECT(p, why) {.path = (p), .type = KEY_ANY, .ignored = (why)}
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
  {KEY("train_batch_size", KEY_INT, train_batch_size), ATLEAST(0), .def = "0"},

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
   .def = "1000", .auto_def = "0", .sched = S_WLR | S_WCL | S_WDL},
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
  {KEY("zero_optimization.offload_param.max_in_cpu", KEY_INT, zero.offload_param.max_in_cpu), ATLEAST(0),
   .def = "0"},
  /* DeepSpeed's communication buckets, stage-3 fetch heuristics and save
   * options: the scheduler moves whole blocks (one ZeRO unit each, prefetch
   * depth offload_param.buffer_count) and saves fp32 master weights. */
  NO_EFFECT("zero_optimization.contiguous_gradients", "gradients land in one contiguous buffer anyway"),
  NO_EFFECT("zero_optimization.reduce_bucket_size", "gradients are reduced per block, not per bucket"),
  NO_EFFECT("zero_optimization.allgather_bucket_size", "parameters are gathered per block, not per bucket"),
  NO_EFFECT("zero_optimization.reduce_scatter", "stage >= 2 always reduce-scatters"),
  NO_EFFECT("zero_optimization.allgather_partitions", "parameters are gathered per block"),
  NO_EFFECT("zero_optimization.round_robin_gradients", "each rank owns a contiguous range of the state"),
  NO_EFFECT("zero_optimization.stage3_prefetch_bucket_size", "prefetch is offload_param.buffer_count blocks"),
  NO_EFFECT("zero_optimization.stage3_param_persistence_threshold", "every block is streamed"),
  NO_EFFECT("zero_optimization.stage3_max_live_parameters", "live blocks are offload_param.buffer_count"),
  NO_EFFECT("zero_optimization.stage3_max_reuse_distance", "blocks are reloaded in schedule order"),
  NO_EFFECT("zero_optimization.stage3_gather_16bit_weights_on_model_save", "checkpoints hold fp32 weights"),
  NO_EFFECT("zero_optimization.stage3_gather_fp16_weights_on_model_save", "checkpoints hold fp32 weights"),
  NO_EFFECT("zero_optimization.ignore_unused_parameters", "every parameter is used"),
  NO_EFFECT("zero_optimization.elastic_checkpoint", "checkpoints load on any rank count"),
  NO_EFFECT("zero_optimization.load_from_fp32_weights", "checkpoints hold fp32 weights"),
  NO_EFFECT("zero_optimization.offload_optimizer.fast_init", "the NVMe files are written at start-up"),
  NO_EFFECT("zero_optimization.offload_optimizer.pipeline_read", "NVMe reads are always pipelined"),
  NO_EFFECT("zero_optimization.offload_optimizer.pipeline_write", "NVMe writes are always pipelined"),
  NO_EFFECT("zero_optimization.offload_optimizer.ratio", "the whole optimizer step runs where it is placed"),
  NO_EFFECT("zero_optimization.offload_param.buffer_size", "a slot and a ring buffer hold one block; an untied "
            "embedding stays on the host, an LM head larger than a block streams in block-sized pieces"),

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
  NO_EFFECT("activation_checkpointing.contiguous_memory_optimization", "checkpoints live in one buffer"),
  NO_EFFECT("activation_checkpointing.synchronize_checkpoint_boundary", "streams are ordered by events"),
  NO_EFFECT("activation_checkpointing.profile", "see engine.trace"),
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
  {KEY("model.tokenizer", KEY_STRING, model.tokenizer), .def = "\"\""},
  {KEY("model.dropout", KEY_REAL, model.dropout), .min = 0, .max = 1, .flags = HAS_MIN | HAS_MAX | MAX_OPEN,
   .def = "0"},
  {KEY("model.hf_dropout", KEY_BOOL, model.hf_dropout), .def = "false"},
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
  {KEY("model.qkv_bias", KEY_BOOL, model.spec.qkv_bias), .def = "false"},
  {KEY("model.head_dim", KEY_INT, model.spec.head_dim), RANGE(0, 65536), .def = "0"},
  {KEY("model.sliding_window", KEY_INT, model.spec.sliding_window), RANGE(0, 1 << 24), .def = "0"},
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
  {KEY("data.epochs", KEY_REAL, data.epochs), ATLEAST(0), .def = "0"},

  SECTION("eval"),
  {KEY("eval.every", KEY_INT, eval.every), ATLEAST(0), .def = "0"},
  {KEY("eval.steps", KEY_INT, eval.steps), RANGE(0, 1 << 20), .def = "0"},

  SECTION("engine"),
  {KEY("engine.device", KEY_ENUM, engine.device), .names = device_names, .def = "\"auto\""},
  {KEY("engine.gpu_memory_budget", KEY_BYTES, engine.gpu_memory_budget), .def = "0"},
  {KEY("engine.host_memory_budget", KEY_BYTES, engine.host_memory_budget), .def = "0"},
  {KEY("engine.threads", KEY_INT, engine.threads), ATLEAST(0), .def = "0"},
  {KEY("engine.seed", KEY_INT, engine.seed), ATLEAST(0), .def = "1337"},
  {KEY("engine.on_nonfinite", KEY_ENUM, engine.on_nonfinite), .names = nonfinite_names, .def = "\"stop\""},
  {KEY("engine.placement", KEY_ENUM, engine.placement), .names = placement_names, .def = "\"config\""},
  {KEY("engine.grad_slots", KEY_INT, engine.grad_slots), RANGE(1, 2), .def = "2"}, /* 2: ZO_SCHED_GRAD_SLOTS */
  SECTION("engine.trace"),
  {KEY("engine.trace.path", KEY_STRING, engine.trace.path), .def = "\"\""},
  {KEY("engine.trace.first_step", KEY_INT, engine.trace.first_step), RANGE(1, 1 << 30), .def = "2"},
  {KEY("engine.trace.steps", KEY_INT, engine.trace.steps), RANGE(1, 1000), .def = "2"},

  SECTION("log"),
  {KEY("log.every", KEY_INT, log.every), ATLEAST(1), .def = "10"},
  {KEY("log.metrics_path", KEY_STRING, log.metrics_path), .def = "\"\""},
  {KEY("log.tensorboard_dir", KEY_STRING, log.tensorboard_dir), .def = "\"\""},

  SECTION("checkpoint"),
  {KEY("checkpoint.dir", KEY_STRING, checkpoint.dir), .def = "\"\""},
  {KEY("checkpoint.every", KEY_INT, checkpoint.every), ATLEAST(0), .def = "0"},
  {KEY("checkpoint.keep", KEY_INT, checkpoint.keep), ATLEAST(0), .def = "3"},
  {KEY("checkpoint.save_optimizer", KEY_BOOL, checkpoint.save_optimizer), .def = "true"},

  /* DeepSpeed's monitoring and numerics switches without a counterpart. */
  NO_EFFECT("steps_per_print", "progress lines follow log.every"),
  NO_EFFECT("wall_clock_breakdown", "every progress line has the step's timings"),
  NO_EFFECT("memory_breakdown", "see train --memory-report"),
  NO_EFFECT("dump_state", "see zoffload config"),
  NO_EFFECT("zero_allow_untested_optimizer", "the optimizer is zoffload's own"),
  NO_EFFECT("zero_force_ds_cpu_optimizer", "the optimizer is zoffload's own"),
  NO_EFFECT("prescale_gradients", "gradients are summed in fp32 and divided once"),
  NO_EFFECT("gradient_predivide_factor", "gradients are summed in fp32 and divided once"),
  NO_EFFECT("communication_data_type", "gradients are reduced in fp32"),
  NO_EFFECT("fp16.auto_cast", "fp16.enabled casts the whole model"),
  NO_EFFECT("fp16.consecutive_hysteresis", "hysteresis counts overflows as DeepSpeed's default does"),
  NO_EFFECT("tensorboard", "see log.tensorboard_dir"),
  NO_EFFECT("wandb", "see log.metrics_path"),
  NO_EFFECT("csv_monitor", "see log.metrics_path"),
  NO_EFFECT("comms_logger", "see log.metrics_path"),
  NO_EFFECT("flops_profiler", "every progress line has TFLOP/s"),
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

/* A distance d between a typed name of n characters and a valid one is a
 * typo worth suggesting when it is small relative to the name: 1 edit in
 * 1-4 characters, 2 in 5-7, 3 in 8-10, ... */
static bool is_close(int d, size_t n) {
  return 3 * (size_t)d <= n + 2;
}

/* Nearest schema path to an unknown one: by the whole path, or by the last
 * component alone (a key put in the wrong section), siblings first on ties.
 * NULL when even the nearest is not close (is_close on the last component,
 * or on the part of the path after what both share); a valid leaf the path
 * continues ("optimizer.params.lr.x") is always close. */
static const char *nearest_key(const char *path) {
  const char *best = NULL;
  int best_score = INT_MAX;
  bool best_close = false;
  const char *leaf = leaf_of(path);
  size_t plen = parent_len(path), n = strlen(path);
  for (size_t i = 0; i < N_KEYS; i++) {
    const char *cand = zo_config_schema[i].path;
    size_t clen = strlen(cand), common = 0;
    while (common < n && common < clen && tolower((unsigned char)path[common]) ==
                                              tolower((unsigned char)cand[common]))
      common++;
    bool sibling = parent_len(cand) == plen && strncmp(cand, path, plen) == 0;
    bool below = common == clen && path[clen] == '.' && zo_config_schema[i].type != KEY_SECTION;
    int by_path = edit_distance(path, cand);
    int by_leaf = edit_distance(leaf, leaf_of(cand));
    int score = below ? 0 : 2 * (by_path < by_leaf ? by_path : by_leaf) + (sibling ? 0 : 1);
    if (score < best_score) {
      best_score = score, best = cand;
      best_close = below || is_close(by_leaf, strlen(leaf)) ||
                   is_close(by_path, (n > clen ? n : clen) - common);
    }
  }
  return best_close ? best : NULL;
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
  case KEY_ANY: snprintf(buf, cap, "any value"); break;
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
  bool given[N_KEYS];      /* the tree set the key (not null, not "auto") */
  bool any_auto;           /* some key said "auto" */
  /* unknown keys, reported together */
  int n_unknown;
  char unknown_src[PATH_MAX_LEN];
  char unknown_first[PATH_MAX_LEN];
  const char *unknown_first_near;
  char unknown_list[720];  /* "\"a\" (did you mean \"b\"?), \"c\"" */
  int n_unlisted;          /* unknown keys that did not fit the list */
};

static size_t key_index(const struct zo_config_key *k) {
  return (size_t)(k - zo_config_schema);
}

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
  const char *near = nearest_key(path);
  if (!near)
    return zo_error(-EINVAL, "%s: unknown key \"%s\" (no valid key is close to it; docs/config.md "
                    "lists them)", src, path);
  return zo_error(-EINVAL, "%s: unknown key \"%s\"; did you mean \"%s\"?", src, path, near);
}

static void unknown_add(struct load_ctx *ctx, const char *src, const char *path) {
  const char *near = nearest_key(path);
  if (ctx->n_unknown++ == 0) {
    snprintf(ctx->unknown_src, sizeof ctx->unknown_src, "%s", src);
    snprintf(ctx->unknown_first, sizeof ctx->unknown_first, "%s", path);
    ctx->unknown_first_near = near;
  }
  char item[2 * PATH_MAX_LEN + 40];
  if (near)
    snprintf(item, sizeof item, "%s\"%s\" (did you mean \"%s\"?)", ctx->n_unknown > 1 ? ", " : "", path,
             near);
  else
    snprintf(item, sizeof item, "%s\"%s\"", ctx->n_unknown > 1 ? ", " : "", path);
  size_t used = strlen(ctx->unknown_list);
  if (ctx->n_unlisted == 0 && used + strlen(item) < sizeof ctx->unknown_list)
    memcpy(ctx->unknown_list + used, item, strlen(item) + 1);
  else
    ctx->n_unlisted++;
}

/* The one error for every unknown key check_keys found. */
static int unknown_report(const struct load_ctx *ctx) {
  if (ctx->n_unknown == 1) {
    if (!ctx->unknown_first_near)
      return zo_error(-EINVAL, "%s: unknown key \"%s\" (no valid key is close to it; docs/config.md "
                      "lists them)", ctx->unknown_src, ctx->unknown_first);
    return zo_error(-EINVAL, "%s: unknown key \"%s\"; did you mean \"%s\"?", ctx->unknown_src,
                    ctx->unknown_first, ctx->unknown_first_near);
  }
  char more[48] = "";
  if (ctx->n_unlisted) snprintf(more, sizeof more, " and %d more", ctx->n_unlisted);
  return zo_error(-EINVAL, "%s: %d unknown keys: %s%s. Fix them all before rerunning (docs/config.md lists "
                  "the valid keys)", ctx->unknown_src, ctx->n_unknown, ctx->unknown_list, more);
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
  case KEY_ANY:
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

/* Pass 1: every key in the tree names a schema entry (the unknown ones are
 * collected for unknown_report); sections are objects. */
static int check_keys(struct load_ctx *ctx, json_t *obj, const char *prefix) {
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
    if (!k) {
      unknown_add(ctx, src, fits ? path : key);
      continue;
    }
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

/* "auto" in a Hugging Face DeepSpeed config: the key's default here (or
 * auto_def), except for the names where "auto" is itself a value. */
static bool is_auto(const struct zo_config_key *k, const json_t *v) {
  if (!json_is_string(v) || strcasecmp(json_string_value(v), "auto") != 0) return false;
  return k->type != KEY_STRING && !(k->type == KEY_ENUM && enum_index(k->names, "auto") >= 0);
}

static int set_default(const struct load_ctx *ctx, struct zo_config *cfg, const struct zo_config_key *k,
                       const char *text) {
  json_error_t jerr;
  json_t *def = json_loads(text, JSON_DECODE_ANY, &jerr);
  ZO_ASSERT(def != NULL);
  int err = set_leaf(ctx, cfg, k, def);
  json_decref(def);
  ZO_ASSERT(err == 0 || err == -ENOMEM);
  return err;
}

/* Pass 2: every leaf, in table order, from the tree or its default. */
static int fill_values(struct load_ctx *ctx, struct zo_config *cfg, json_t *root) {
  for (size_t i = 0; i < N_KEYS; i++) {
    const struct zo_config_key *k = &zo_config_schema[i];
    if (k->type == KEY_SECTION || k->type == KEY_ANY) continue;
    json_t *v = tree_get(root, k->path);
    if (v && is_auto(k, v)) {
      ctx->any_auto = true;
      /* train chooses these two with the planner (zo/autoplan.h) */
      if (!strcmp(k->path, "train_micro_batch_size_per_gpu")) cfg->micro_batch_auto = true;
      if (!strcmp(k->path, "gradient_accumulation_steps")) cfg->grad_accum_auto = true;
      if (k->auto_def) {
        int err = set_default(ctx, cfg, k, k->auto_def);
        if (err) return err;
        continue;
      }
      v = NULL;
    }
    ctx->given[i] = v != NULL;
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
      int err = set_default(ctx, cfg, k, k->def);
      if (err) return err;
    }
  }
  return 0;
}

static bool given(const struct load_ctx *ctx, const char *path) {
  const struct zo_config_key *k = find_key(path);
  ZO_ASSERT(k != NULL);
  return ctx->given[key_index(k)];
}

/* Ranks of this job as its launcher (mpirun) tells them; 1 without one. */
static long launcher_ranks(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    char *end;
    long n = v ? strtol(v, &end, 10) : 0;
    if (v && *end == '\0' && n >= 1) return n;
  }
  return 1;
}

/* DeepSpeed's train_batch_size = micro-batch x accumulation x ranks: derives
 * whichever of the first two the config left out, and checks the product. */
static int batch_rule(const struct load_ctx *ctx, struct zo_config *cfg) {
  const long tbs = cfg->train_batch_size, N = launcher_ranks();
  if (tbs == 0) return 0;
  const bool has_mb = given(ctx, "train_micro_batch_size_per_gpu"), has_ga = given(ctx, "gradient_accumulation_steps");
  const char *src = source_of(ctx, "train_batch_size");
  char ranks_s[64] = "";
  if (N > 1) snprintf(ranks_s, sizeof ranks_s, " x %ld ranks", N);
  if (!has_mb || !has_ga) {
    const long other = has_mb ? (long)cfg->micro_batch : has_ga ? (long)cfg->grad_accum : 1;
    const long div = other * N;
    if (tbs % div != 0 || tbs / div > INT_MAX)
      return zo_error(-EINVAL, "%s: train_batch_size = %ld is not a multiple of %s%s = %ld: set it to a "
                      "multiple, or give train_micro_batch_size_per_gpu and gradient_accumulation_steps",
                      src, tbs, has_mb ? "train_micro_batch_size_per_gpu" : "gradient_accumulation_steps",
                      ranks_s, div);
    if (!has_mb) cfg->micro_batch = (int)(tbs / div);
    else cfg->grad_accum = (int)(tbs / div);
  }
  const long prod = (long)cfg->micro_batch * cfg->grad_accum * N;
  if (prod != tbs)
    return zo_error(-EINVAL, "%s: train_batch_size = %ld but train_micro_batch_size_per_gpu %d x "
                    "gradient_accumulation_steps %d%s = %ld: make them agree, or leave one of the three out",
                    src, tbs, cfg->micro_batch, cfg->grad_accum, ranks_s, prod);
  return 0;
}

/* The schedule ends at total_num_steps: warns when the run stops elsewhere. */
static void warn_total_steps(const struct zo_config *cfg, const char *src) {
  const struct zo_config_scheduler *s = &cfg->scheduler;
  if (!s->total_num_steps_set || s->total_num_steps == cfg->steps ||
      (s->type != ZO_SCHEDULER_WARMUP_COSINE_LR && s->type != ZO_SCHEDULER_WARMUP_DECAY_LR))
    return;
  char what[160];
  if (s->total_num_steps > cfg->steps)
    snprintf(what, sizeof what, "the run ends at lr %.3g, before the %s schedule reaches %.3g",
             zo_lr_at(&cfg->lr_schedule, cfg->steps), scheduler_names[s->type], cfg->lr_schedule.min_lr);
  else
    snprintf(what, sizeof what, "the %s schedule reaches %.3g at step %ld and stays there for the last %ld steps",
             scheduler_names[s->type], cfg->lr_schedule.min_lr, s->total_num_steps,
             cfg->steps - s->total_num_steps);
  fprintf(stderr, "zoffload: warning: %s: scheduler.params.total_num_steps = %ld but the run has %ld step%s: %s; "
                  "remove total_num_steps to make it follow steps\n",
          src, s->total_num_steps, cfg->steps, cfg->steps == 1 ? "" : "s", what);
}

static int check_warmup(const struct zo_config *cfg, const char *src);
static void derive_schedule(struct zo_config *cfg);

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
    /* offload_param's store defaults to the optimizer's (one store). */
    if (o->device == ZO_OFFLOAD_NVME && o->nvme_path[0] == '\0' &&
        !(i == 1 && cfg->zero.offload_optimizer.nvme_path[0] != '\0'))
      return zo_error(-EINVAL, "%s: %s = \"nvme\" needs zero_optimization.%s.nvme_path "
                      "(a directory on the NVMe drive)", SRC(path), path, offloads[i].name);
  }
  if (cfg->aio.block_size % 4096 != 0)
    return zo_error(-EINVAL, "%s: aio.block_size = %zu: must be a multiple of 4096 (O_DIRECT "
                    "alignment), e.g. \"1MiB\"", SRC("aio.block_size"), cfg->aio.block_size);

  const struct zo_config_scheduler *s = &cfg->scheduler;
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
  int err = check_warmup(cfg, SRC2("scheduler.params.warmup_num_steps", "scheduler.params.total_num_steps"));
  if (err) return err;
  if (cfg->data.epochs > 0 && ctx->given[key_index(find_key("steps"))])
    return zo_error(-EINVAL, "%s: steps = %ld and data.epochs = %g are both set: keep one (data.epochs derives "
                    "the steps from data.train)", SRC2("steps", "data.epochs"), cfg->steps, cfg->data.epochs);
#undef SRC
#undef SRC2

  m->padded_vocab_size = (m->vocab_size + 63) / 64 * 64;
  derive_schedule(cfg);
  return 0;
}

static int check_warmup(const struct zo_config *cfg, const char *src) {
  const struct zo_config_scheduler *s = &cfg->scheduler;
  if ((s->type == ZO_SCHEDULER_WARMUP_COSINE_LR || s->type == ZO_SCHEDULER_WARMUP_DECAY_LR) &&
      s->warmup_num_steps > s->total_num_steps)
    return zo_error(-EINVAL, "%s: scheduler.params.warmup_num_steps = %ld exceeds "
                    "scheduler.params.total_num_steps = %ld (%s; total_num_steps defaults to "
                    "steps)", src, s->warmup_num_steps, s->total_num_steps, scheduler_names[s->type]);
  return 0;
}

static void derive_schedule(struct zo_config *cfg) {
  const struct zo_config_scheduler *s = &cfg->scheduler;
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
}

long zo_config_steps_for_epochs(const struct zo_config *cfg, size_t n_tokens, int n_ranks) {
  ZO_ASSERT(cfg && cfg->data.epochs > 0 && n_ranks >= 1);
  const double window = (double)cfg->micro_batch * cfg->data.seq_len * n_ranks;
  const double per_epoch = n_tokens > 1 ? floor((double)(n_tokens - 1) / window) : 0;
  const double steps = ceil(cfg->data.epochs * per_epoch / cfg->grad_accum);
  return steps < 1 ? 1 : steps > 1e15 ? (long)1e15 : (long)steps;
}

int zo_config_set_steps(struct zo_config *cfg, long steps) {
  ZO_ASSERT(cfg && steps >= 1);
  cfg->steps = steps;
  if (!cfg->scheduler.total_num_steps_set) cfg->scheduler.total_num_steps = steps;
  int err = check_warmup(cfg, "data.epochs");
  if (err) return err;
  derive_schedule(cfg);
  warn_total_steps(cfg, "data.epochs");
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
  if (!strcmp(path, "gradient_checkpointing")) {
    snprintf(path, sizeof path, "activation_checkpointing.enabled");
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

/* Keys in use that do nothing for this config when set to another value
 * than their default: why, or NULL. */
static const char *unused_here(const struct zo_config *cfg, const struct zo_config_key *k) {
  if (k->ignored) return k->ignored;
  if (!strcmp(k->path, "zero_optimization.sub_group_size") && cfg->zero.sub_group_size != 16777216 &&
      cfg->zero.offload_optimizer.device != ZO_OFFLOAD_NVME)
    return "it sizes NVMe optimizer chunks and the optimizer is not on NVMe";
  if (!strcmp(k->path, "zero_optimization.overlap_comm") && !cfg->zero.overlap_comm &&
      (cfg->zero.stage < 2 || cfg->zero.offload_optimizer.device == ZO_OFFLOAD_NONE))
    return "it applies to stage >= 2 with the optimizer offloaded";
  return NULL;
}

/* One warning on stderr for the keys the tree sets that have no effect
 * (JSON null means unset): with its reason when there is one, else listed
 * with their values in one line. */
static void warn_ignored(const struct load_ctx *ctx, const struct zo_config *cfg, json_t *root) {
  char list[900];
  size_t used = 0;
  int n = 0, n_unlisted = 0;
  const struct zo_config_key *only = NULL;
  for (size_t i = 0; i < N_KEYS; i++) {
    const struct zo_config_key *k = &zo_config_schema[i];
    const json_t *v = unused_here(cfg, k) ? tree_get(root, k->path) : NULL;
    if (!v || k->type == KEY_SECTION) continue;
    char val[64], item[PATH_MAX_LEN + 96];
    fmt_json(v, val, sizeof val);
    const char *src = source_of(ctx, k->path);
    snprintf(item, sizeof item, "%s%s = %s%s", n ? ", " : "", k->path, val, src != ctx->file ? " (--set)" : "");
    if (n++ == 0) only = k;
    if (used + strlen(item) < sizeof list && n_unlisted == 0) {
      memcpy(list + used, item, strlen(item) + 1);
      used += strlen(item);
    } else {
      n_unlisted++;
    }
  }
  if (n == 0) return;
  if (n == 1) {
    char val[96];
    fmt_json(tree_get(root, only->path), val, sizeof val);
    fprintf(stderr, "zoffload: warning: %s: %s = %s is accepted for DeepSpeed compatibility and has no effect: "
                    "%s\n", source_of(ctx, only->path), only->path, val, unused_here(cfg, only));
    return;
  }
  fprintf(stderr, "zoffload: warning: %s: %d DeepSpeed keys are accepted and have no effect here: %s%s%.0d%s "
                  "(docs/config.md says why for each)\n",
          ctx->file, n, list, n_unlisted ? " and " : "", n_unlisted, n_unlisted ? " more" : "");
}

/* Hugging Face's and DeepSpeed's shorthands: "bf16": true and "fp16": true
 * (also "auto") for their .enabled, "gradient_checkpointing" for
 * activation_checkpointing.enabled. */
static int apply_aliases(const struct load_ctx *ctx, json_t *root) {
  static const char *const shorthand[] = {"bf16", "fp16"};
  for (size_t i = 0; i < 2; i++) {
    json_t *v = json_object_get(root, shorthand[i]);
    if (!v || !(json_is_boolean(v) || json_is_string(v))) continue;
    json_t *obj = json_object();
    if (!obj || json_object_set(obj, "enabled", v) != 0 || json_object_set_new(root, shorthand[i], obj) != 0)
      return zo_error(-ENOMEM, "config: out of memory");
  }
  json_t *gc = json_object_get(root, "gradient_checkpointing");
  if (!gc) return 0;
  json_t *ac = json_object_get(root, "activation_checkpointing");
  if (ac && json_is_object(ac) && json_object_get(ac, "enabled"))
    return zo_error(-EINVAL, "%s: gradient_checkpointing and activation_checkpointing.enabled are both set: "
                    "gradient_checkpointing is a name for the second, keep one",
                    source_of2(ctx, "gradient_checkpointing", "activation_checkpointing.enabled"));
  if (!ac || json_is_null(ac)) {
    ac = json_object();
    if (!ac || json_object_set_new(root, "activation_checkpointing", ac) != 0)
      return zo_error(-ENOMEM, "config: out of memory");
  }
  if (!json_is_object(ac)) return 0; /* check_keys names the wrong type */
  if (json_object_set(ac, "enabled", gc) != 0 || json_object_del(root, "gradient_checkpointing") != 0)
    return zo_error(-ENOMEM, "config: out of memory");
  return 0;
}

/* zo_config_set_quiet: the planner's candidate loads print no warnings. */
static _Thread_local bool config_quiet;

bool zo_config_set_quiet(bool quiet) {
  const bool was = config_quiet;
  config_quiet = quiet;
  return was;
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
  if ((err = apply_aliases(&ctx, root))) goto out_free;
  err = check_keys(&ctx, root, "");
  if (!err && ctx.n_unknown) err = unknown_report(&ctx);
  if (err) goto out_free;
  cfg->path = strdup(path ? path : "");
  if (!cfg->path) {
    err = zo_error(-ENOMEM, "config: out of memory");
    goto out_free;
  }
  err = fill_values(&ctx, cfg, root);
  if (err) goto out_free;
  cfg->scheduler.total_num_steps_set = given(&ctx, "scheduler.params.total_num_steps");
  if ((err = batch_rule(&ctx, cfg))) goto out_free;
  err = check_cross(&ctx, cfg);
  if (err) goto out_free;
  if (!config_quiet) warn_ignored(&ctx, cfg, root);
  if (cfg->data.epochs == 0 && !config_quiet)
    warn_total_steps(cfg, source_of2(&ctx, "scheduler.params.total_num_steps", "steps"));
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
  /* derived: written, they would read back as given */
  if (!strcmp(k->path, "steps") && cfg->data.epochs > 0) return true;
  if (!strcmp(k->path, "scheduler.params.total_num_steps") && !cfg->scheduler.total_num_steps_set) return true;
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
  case KEY_ANY:
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
