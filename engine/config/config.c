/* The config's schema table and its loader. The file and the --set
 * overrides (overrides.c) are merged into one JSON tree first, DeepSpeed's
 * shorthands rewritten (ds_compat.c); then every key of the tree must name a
 * schema entry (else: nearest valid key by edit distance, suggest.c), every
 * schema leaf takes its value or its default ("auto": ds_compat.c), and the
 * cross-field rules run last (rules.c). Table order is dump order (dump.c),
 * and a default that follows another key ("def_from") must come after that
 * key. DeepSpeed's keys that do nothing here are accepted ("ignored": checked
 * when they have a field, any value when KEY_ANY): a config that sets some
 * loads with one warning listing them. Every unknown key of a file is
 * reported in one error. The struct owns copies of its strings: nothing
 * points into the JSON tree once it is freed. engine/config/internal.h maps
 * the files. */
#include "internal.h"

#include "zo/adamw8bit.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const optimizer_names[] = {"AdamW", "AdamW8bit", NULL};
const char *const zo_config_scheduler_names[] = {"none", "WarmupLR", "WarmupCosineLR", "WarmupDecayLR",
                                                 NULL};
const char *const zo_config_warmup_names[] = {"linear", "log", NULL};
const char *const zo_config_offload_names[] = {"none", "cpu", "nvme", NULL};
static const char *const arch_names[] = {"gpt2", "llama", NULL};
static const char *const nonfinite_names[] = {"stop", "skip", NULL};
static const char *const placement_names[] = {"config", "auto", NULL};
static const char *const schedule_names[] = {"auto", "layer_major", "micro_batch_major", NULL};
static const char *const format_names[] = {"text", "llmc", "u16", "u32", NULL};
static const char *const device_names[] = {"auto", "cpu", "cuda", NULL};
const char *const zo_config_quant_type_names[] = {"fp4", "nf4", NULL};
static const char *const quant_method_names[] = {"bitsandbytes", NULL};
static const char *const quant_skip_names[] = {"lm_head", NULL};

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
_Static_assert(sizeof(enum zo_quant_type) == sizeof(int), "enum fields are stored as int");
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
   .names = zo_config_offload_names, .def = "\"none\""},                                                 \
  {KEY("zero_optimization." sec ".nvme_path", KEY_STRING, zero.member.nvme_path), .def = "\"\""}, \
  {KEY("zero_optimization." sec ".pin_memory", KEY_BOOL, zero.member.pin_memory), .def = "true"}, \
  {KEY("zero_optimization." sec ".buffer_count", KEY_INT, zero.member.buffer_count),          \
   RANGE(1, 1024), .def = nbuf}

const struct zo_config_key zo_config_schema[] = {
  /* "auto": the Hugging Face Trainer's per_device_train_batch_size default */
  {KEY("train_micro_batch_size_per_gpu", KEY_INT, micro_batch), ATLEAST(1), .def = "1", .auto_def = "8"},
  {KEY("gradient_accumulation_steps", KEY_INT, grad_accum), ATLEAST(1), .def = "1"},
  {KEY("steps", KEY_INT, steps), ATLEAST(1), .def = "1000"},
  {KEY("train_batch_size", KEY_INT, train_batch_size), ATLEAST(0), .def = "0"},

  SECTION("optimizer"),
  {KEY("optimizer.type", KEY_ENUM, optimizer.type), .names = optimizer_names, .def = "\"AdamW\""},
  SECTION("optimizer.params"),
  /* "auto": the Hugging Face Trainer's TrainingArguments defaults (learning_rate
   * 5e-5, weight_decay 0, max_grad_norm 1.0; betas and eps are the same) */
  {KEY("optimizer.params.lr", KEY_REAL, optimizer.lr), ABOVE(0), .def = "1e-3", .auto_def = "5e-5"},
  {KEY("optimizer.params.betas", KEY_PAIR, optimizer.betas), .min = 0, .max = 1,
   .flags = HAS_MIN | HAS_MAX | MAX_OPEN, .def = "[0.9, 0.999]"},
  {KEY("optimizer.params.eps", KEY_REAL, optimizer.eps), ABOVE(0), .def = "1e-8"},
  {KEY("optimizer.params.weight_decay", KEY_REAL, optimizer.weight_decay), ATLEAST(0),
   .def = "0.01", .auto_def = "0"},
  /* AdamW8bit only (AdamW ignores them): DeepSpeed has no 8-bit AdamW, these
   * follow bitsandbytes (block size 256, min_8bit_size 4096). */
  {KEY("optimizer.params.block_size", KEY_INT, optimizer.block_size), RANGE(1, ZO_ADAMW8BIT_BLOCK_MAX),
   .def = "256"},
  {KEY("optimizer.params.min_8bit_size", KEY_INT, optimizer.min_8bit_size), ATLEAST(0), .def = "4096"},

  SECTION("scheduler"),
  {KEY("scheduler.type", KEY_ENUM, scheduler.type), .names = zo_config_scheduler_names, .def = "\"none\""},
  SECTION("scheduler.params"),
  {KEY("scheduler.params.warmup_min_lr", KEY_REAL, scheduler.warmup_min_lr), ATLEAST(0),
   .def = "0", .sched = S_WLR | S_WDL},
  {KEY("scheduler.params.warmup_max_lr", KEY_REAL, scheduler.warmup_max_lr), ABOVE(0),
   .def_from = "optimizer.params.lr", .sched = S_WLR | S_WDL},
  {KEY("scheduler.params.warmup_num_steps", KEY_INT, scheduler.warmup_num_steps), ATLEAST(0),
   .def = "1000", .auto_def = "0", .sched = S_WLR | S_WCL | S_WDL},
  {KEY("scheduler.params.warmup_type", KEY_ENUM, scheduler.warmup_type), .names = zo_config_warmup_names,
   .def = "\"linear\"", .sched = S_WLR | S_WCL | S_WDL},
  {KEY("scheduler.params.total_num_steps", KEY_INT, scheduler.total_num_steps), ATLEAST(1),
   .def_from = "steps", .sched = S_WCL | S_WDL},
  {KEY("scheduler.params.warmup_min_ratio", KEY_REAL, scheduler.warmup_min_ratio), RANGE(0, 1),
   .def = "0", .sched = S_WCL},
  {KEY("scheduler.params.cos_min_ratio", KEY_REAL, scheduler.cos_min_ratio), RANGE(0, 1),
   .def = "1e-4", .sched = S_WCL},

  {KEY("gradient_clipping", KEY_REAL, gradient_clipping), ATLEAST(0), .def = "0", .auto_def = "1.0"},

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
  {KEY("model.qk_norm", KEY_BOOL, model.spec.qk_norm), .def = "false"},
  {KEY("model.head_dim", KEY_INT, model.spec.head_dim), RANGE(0, 65536), .def = "0"},
  {KEY("model.sliding_window", KEY_INT, model.spec.sliding_window), RANGE(0, 1 << 24), .def = "0"},
  {KEY("model.pad_token_id", KEY_INT, model.pad_token_id), RANGE(-1, 1 << 24), .def = "-1"},
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
  {KEY("engine.schedule", KEY_ENUM, engine.schedule), .names = schedule_names, .def = "\"auto\""},
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

  /* PEFT's LoraConfig (lora_alpha, lora_dropout as alpha, dropout); checked
   * against the arch and lora.init_from by zo_lora_resolve (zo/lora.h). */
  SECTION("lora"),
  {KEY("lora.r", KEY_INT, lora.r), RANGE(0, 65536), .def = "0"},
  {KEY("lora.alpha", KEY_REAL, lora.alpha), ABOVE(0), .def = "8"},
  {KEY("lora.dropout", KEY_REAL, lora.dropout), .min = 0, .max = 1, .flags = HAS_MIN | HAS_MAX | MAX_OPEN,
   .def = "0"},
  {KEY("lora.target_modules", KEY_NAMESET, lora.target_modules), .names = zo_lora_target_names, .def = "[]"},
  {KEY("lora.use_rslora", KEY_BOOL, lora.use_rslora), .def = "false"},
  {KEY("lora.init_from", KEY_STRING, lora.init_from), .def = "\"\""},

  /* transformers' BitsAndBytesConfig (its to_dict, as config.json's
   * quantization_config holds it); the cross-key rules are rules.c's. */
  SECTION("quantization"),
  {KEY("quantization.quant_method", KEY_ENUM, quant.quant_method), .names = quant_method_names,
   .def = "\"bitsandbytes\""},
  {KEY("quantization.load_in_4bit", KEY_BOOL, quant.load_in_4bit), .def = "false"},
  {KEY("quantization.load_in_8bit", KEY_BOOL, quant.load_in_8bit), .def = "false"},
  {KEY("quantization._load_in_4bit", KEY_BOOL, quant.load_in_4bit_alias), .def = "false"},
  {KEY("quantization._load_in_8bit", KEY_BOOL, quant.load_in_8bit_alias), .def = "false"},
  {KEY("quantization.bnb_4bit_quant_type", KEY_ENUM, quant.quant_type), .names = zo_config_quant_type_names,
   .def = "\"fp4\""},
  {KEY("quantization.bnb_4bit_use_double_quant", KEY_BOOL, quant.use_double_quant), .def = "false"},
  {KEY("quantization.bnb_4bit_compute_dtype", KEY_STRING, quant.compute_dtype), .def = "\"\""},
  {KEY("quantization.bnb_4bit_quant_storage", KEY_STRING, quant.quant_storage), .def = "\"uint8\""},
  {KEY("quantization.llm_int8_enable_fp32_cpu_offload", KEY_BOOL, quant.llm_int8_enable_fp32_cpu_offload),
   .def = "false"},
  {KEY("quantization.llm_int8_skip_modules", KEY_NAMESET, quant.llm_int8_skip_modules),
   .names = quant_skip_names, .def = "[]"},
  NO_EFFECT("quantization.llm_int8_threshold", "LLM.int8's outlier threshold: load_in_8bit is not built"),
  NO_EFFECT("quantization.llm_int8_has_fp16_weight", "LLM.int8's fp16 main weights: load_in_8bit is not built"),

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

const size_t zo_config_n_keys = sizeof zo_config_schema / sizeof zo_config_schema[0];
_Static_assert(sizeof zo_config_schema / sizeof zo_config_schema[0] <= ZO_CONFIG_MAX_KEYS,
               "raise ZO_CONFIG_MAX_KEYS (engine/config/internal.h)");

#define CONFIG_MAX_BYTES ((size_t)16 << 20)

/* ---- small helpers ------------------------------------------------------- */

const struct zo_config_key *zo_config_key_find(const char *path) {
  for (size_t i = 0; i < zo_config_n_keys; i++)
    if (strcmp(zo_config_schema[i].path, path) == 0) return &zo_config_schema[i];
  return NULL;
}

const char *zo_config_key_leaf(const char *path) {
  const char *dot = strrchr(path, '.');
  return dot ? dot + 1 : path;
}

size_t zo_config_key_parent_len(const char *path) {
  const char *dot = strrchr(path, '.');
  return dot ? (size_t)(dot - path) : 0;
}

int zo_config_enum_index(const char *const *names, const char *s) {
  for (int i = 0; names[i]; i++)
    if (strcasecmp(names[i], s) == 0) return i;
  return -1;
}

/* What a valid value of k looks like: "an integer >= 0", "one of ...". */
static void describe(const struct zo_config_key *k, char *buf, size_t cap) {
  char lo[48], hi[48], range[128] = "";
  if (k->type == KEY_BYTES) {
    zo_config_fmt_bytes((size_t)k->min, lo, sizeof lo, false);
    zo_config_fmt_bytes((size_t)k->max, hi, sizeof hi, false);
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
  case KEY_NAMESET: {
    size_t n = (size_t)snprintf(buf, cap, "a list of names (or one name as a string) from");
    for (int i = 0; k->names[i] && n < cap; i++)
      n += (size_t)snprintf(buf + n, cap - n, "%s \"%s\"", i ? "," : "", k->names[i]);
    break;
  }
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

static int bad_value(const struct load_ctx *ctx, const struct zo_config_key *k, const json_t *v,
                     const char *hint) {
  char val[96], want[256];
  zo_config_fmt_json(v, val, sizeof val);
  describe(k, want, sizeof want);
  return zo_error(-EINVAL, "%s: %s = %s: must be %s%s", zo_config_source(ctx, k->path), k->path, val,
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
    int i = json_is_string(v) ? zo_config_enum_index(k->names, json_string_value(v)) : -1;
    if (i < 0) {
      char hint[96] = "";
      if (json_is_string(v)) {
        const char *best = NULL;
        int best_d = INT_MAX;
        for (int j = 0; k->names[j]; j++) {
          int d = zo_config_edit_distance(json_string_value(v), k->names[j]);
          if (d < best_d) best_d = d, best = k->names[j];
        }
        if (best && best_d <= 3) snprintf(hint, sizeof hint, "; did you mean \"%s\"?", best);
      }
      return bad_value(ctx, k, v, hint);
    }
    memcpy(dst, &i, sizeof i);
    break;
  }
  case KEY_NAMESET: {
    ZO_ASSERT(k->size == sizeof(unsigned));
    unsigned set = 0;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_array(v) && !json_is_string(v)) return bad_value(ctx, k, v, NULL);
    for (size_t j = 0; j < n; j++) {
      const json_t *e = json_is_array(v) ? json_array_get(v, j) : v;
      int i = -1;
      if (json_is_string(e))
        for (int t = 0; k->names[t]; t++) /* exact: PEFT matches names case-sensitively */
          if (strcmp(k->names[t], json_string_value(e)) == 0) i = t;
      if (i < 0) return bad_value(ctx, k, e, NULL);
      set |= 1u << i;
    }
    memcpy(dst, &set, sizeof set);
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
json_t *zo_config_tree_get(json_t *root, const char *path) {
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
 * collected for zo_config_unknown_report); sections are objects. */
static int check_keys(struct load_ctx *ctx, json_t *obj, const char *prefix) {
  const char *key;
  json_t *val;
  json_object_foreach(obj, key, val) {
    char path[PATH_MAX_LEN];
    int n = snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", key);
    bool fits = n > 0 && (size_t)n < sizeof path;
    const struct zo_config_key *k = fits ? zo_config_key_find(path) : NULL;
    const char *src = zo_config_source(ctx, fits ? path : prefix);
    if (fits && strchr(key, '.') != NULL)
      return zo_error(-EINVAL, "%s: key \"%s\" contains '.': nest objects instead, as in "
                      "{\"optimizer\": {\"params\": {\"lr\": 1e-3}}}", src, key);
    if (!k) {
      zo_config_unknown_add(ctx, src, fits ? path : key);
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
  for (size_t i = 0; i < zo_config_n_keys; i++) {
    if (!(zo_config_schema[i].sched & (1u << cfg->scheduler.type))) continue;
    n += (size_t)snprintf(takes + n, sizeof takes - n, "%s%s", n ? ", " : "",
                          zo_config_key_leaf(zo_config_schema[i].path));
    if (n >= sizeof takes) break;
  }
  if (cfg->scheduler.type == ZO_SCHEDULER_NONE)
    return zo_error(-EINVAL, "%s: %s is set but scheduler.type is \"none\" (constant lr), which "
                    "takes no parameters: set scheduler.type to \"WarmupLR\", \"WarmupCosineLR\" "
                    "or \"WarmupDecayLR\", or remove scheduler.params",
                    zo_config_source(ctx, k->path), k->path);
  return zo_error(-EINVAL, "%s: %s is not a parameter of %s, which takes %s",
                  zo_config_source(ctx, k->path), k->path, zo_config_scheduler_names[cfg->scheduler.type], takes);
}

int zo_config_set_default(const struct load_ctx *ctx, struct zo_config *cfg, const struct zo_config_key *k,
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
  for (size_t i = 0; i < zo_config_n_keys; i++) {
    const struct zo_config_key *k = &zo_config_schema[i];
    if (k->type == KEY_SECTION || k->type == KEY_ANY) continue;
    json_t *v = zo_config_tree_get(root, k->path);
    if (v) {
      int done = zo_config_auto(ctx, cfg, k, &v);
      if (done < 0) return done;
      if (done) continue;
    }
    ctx->given[i] = v != NULL;
    if (v && k->sched && !(k->sched & (1u << cfg->scheduler.type)))
      return sched_param_misplaced(ctx, cfg, k);
    if (v) {
      int err = set_leaf(ctx, cfg, k, v);
      if (err) return err;
    } else if (k->def_from) {
      const struct zo_config_key *from = zo_config_key_find(k->def_from);
      ZO_ASSERT(from && from < k && from->size == k->size && from->type != KEY_STRING);
      memcpy((char *)cfg + k->offset, (const char *)cfg + from->offset, k->size);
    } else {
      int err = zo_config_set_default(ctx, cfg, k, k->def);
      if (err) return err;
    }
  }
  return 0;
}

bool zo_config_given(const struct load_ctx *ctx, const char *path) {
  const struct zo_config_key *k = zo_config_key_find(path);
  ZO_ASSERT(k != NULL);
  return ctx->given[key_index(k)];
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

/* quiet: none of the warnings (zo_config_load_quiet). */
static int load(struct zo_config *cfg, const char *path, const char *const *sets, int n_sets, bool quiet) {
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
    err = zo_config_apply_set(root, sets[i]);
    if (err) goto out_free;
    ctx.n_sets = i + 1;
  }
  if ((err = zo_config_apply_aliases(&ctx, root))) goto out_free;
  err = check_keys(&ctx, root, "");
  if (!err && ctx.n_unknown) err = zo_config_unknown_report(&ctx);
  if (err) goto out_free;
  cfg->path = strdup(path ? path : "");
  if (!cfg->path) {
    err = zo_error(-ENOMEM, "config: out of memory");
    goto out_free;
  }
  err = fill_values(&ctx, cfg, root);
  if (err) goto out_free;
  cfg->scheduler.total_num_steps_set = zo_config_given(&ctx, "scheduler.params.total_num_steps");
  if ((err = zo_config_batch_rule(&ctx, cfg))) goto out_free;
  err = zo_config_check_cross(&ctx, cfg);
  if (err) goto out_free;
  if (!quiet) zo_config_warn_ignored(&ctx, cfg, root);
  if (!quiet) zo_config_note_auto(&ctx, cfg);
  if (cfg->data.epochs == 0 && !quiet)
    zo_config_warn_total_steps(cfg, zo_config_source2(&ctx, "scheduler.params.total_num_steps", "steps"));
  json_decref(root);
  return 0;

out_free:
  json_decref(root);
  zo_config_free(cfg);
  return err;
}

int zo_config_load(struct zo_config *cfg, const char *path, const char *const *sets, int n_sets) {
  return load(cfg, path, sets, n_sets, false);
}

int zo_config_load_quiet(struct zo_config *cfg, const char *path, const char *const *sets, int n_sets) {
  return load(cfg, path, sets, n_sets, true);
}

void zo_config_free(struct zo_config *cfg) {
  if (!cfg) return;
  for (size_t i = 0; i < zo_config_n_keys; i++) {
    if (zo_config_schema[i].type != KEY_STRING) continue;
    char *s;
    memcpy(&s, (char *)cfg + zo_config_schema[i].offset, sizeof s);
    free(s);
  }
  free(cfg->path);
  memset(cfg, 0, sizeof *cfg);
}
