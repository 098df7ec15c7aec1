/* Training configuration: one JSON file, DeepSpeed's key names where DeepSpeed
 * has one, plus sections of our own (model, data, engine, log, checkpoint),
 * then `--set key.path=value` overrides. Every key is validated against one
 * schema table (type, range, allowed values, default); the unknown keys are
 * one error that names them all, each with the nearest valid key when it is
 * close. DeepSpeed configs load as written: "auto" is the key's default, and
 * DeepSpeed's keys without effect here are accepted with one warning. This
 * module only reads and checks:
 * it does not open data files, probe devices or decide memory placement.
 * A loaded struct zo_config owns copies of all its strings. */
#ifndef ZO_CONFIG_H
#define ZO_CONFIG_H

#include <stdio.h>

#include "zo/lr_schedule.h" /* struct zo_lr_schedule */
#include "zo/common.h"
#include "zo/data.h" /* enum zo_data_format */
#include "zo/model.h"

#ifdef __cplusplus
extern "C" {
#endif

enum zo_optimizer_type {
  ZO_OPTIMIZER_ADAMW,     /* "AdamW" */
  ZO_OPTIMIZER_ADAMW8BIT, /* "AdamW8bit" (bitsandbytes): block-wise 8-bit m, v, zo/adamw8bit.h */
};

/* DeepSpeed scheduler types. The raw DeepSpeed parameters are kept in
 * struct zo_config_scheduler (for the dump); struct zo_config.lr_schedule is
 * the schedule they map to:
 *   WarmupLR:       lr = warmup_max_lr, min_lr = warmup_min_lr, linear warmup, then flat.
 *   WarmupCosineLR: lr = optimizer.params.lr, min_lr = lr * cos_min_ratio, linear
 *                   warmup from 0, cosine to min_lr at total_num_steps.
 *   WarmupDecayLR:  lr = warmup_max_lr, linear warmup from 0, linear decay to 0 at
 *                   total_num_steps.
 * Approximations of DeepSpeed, each enforced with a clear error: warmup_type
 * "linear" only (DeepSpeed's default is "log"; ours is "linear");
 * WarmupCosineLR needs warmup_min_ratio = 0; WarmupDecayLR needs
 * warmup_min_lr = 0. Defaults that differ from DeepSpeed because they follow
 * another key when absent: warmup_max_lr = optimizer.params.lr,
 * total_num_steps = steps. */
enum zo_scheduler_type {
  ZO_SCHEDULER_NONE,             /* "none" or no scheduler section: constant lr */
  ZO_SCHEDULER_WARMUP_LR,        /* "WarmupLR" */
  ZO_SCHEDULER_WARMUP_COSINE_LR, /* "WarmupCosineLR" */
  ZO_SCHEDULER_WARMUP_DECAY_LR,  /* "WarmupDecayLR" */
};

enum zo_warmup_type {
  ZO_WARMUP_LINEAR, /* "linear" */
  ZO_WARMUP_LOG,    /* "log": known (DeepSpeed), rejected by zo_config_load */
};

enum zo_offload_device {
  ZO_OFFLOAD_NONE, /* "none": stays on the compute device */
  ZO_OFFLOAD_CPU,  /* "cpu": host memory */
  ZO_OFFLOAD_NVME, /* "nvme": files under nvme_path */
};



enum zo_device {
  ZO_DEVICE_AUTO, /* "auto": CUDA when a GPU and driver are present, else CPU */
  ZO_DEVICE_CPU,  /* "cpu" */
  ZO_DEVICE_CUDA, /* "cuda" */
};

struct zo_config_optimizer {      /* "optimizer" */
  enum zo_optimizer_type type;    /* "type", default "AdamW" */
  double lr;                      /* params.lr: peak learning rate, > 0, default 1e-3 */
  double betas[2];                /* params.betas: each in [0, 1), default [0.9, 0.999] */
  double eps;                     /* params.eps: > 0, default 1e-8 */
  double weight_decay;            /* params.weight_decay: decoupled, >= 0, default 0.01 */
  int block_size;                 /* params.block_size: AdamW8bit elements per quantization
                                   * block (one fp32 absmax each), 1..4096, default 256 */
  long min_8bit_size;             /* params.min_8bit_size: AdamW8bit keeps fp32 m, v for
                                   * tensors with fewer elements (bitsandbytes' name),
                                   * >= 0, default 4096 */
};

struct zo_config_scheduler {      /* "scheduler" (DeepSpeed parameters, see above) */
  enum zo_scheduler_type type;    /* "type", default "none" */
  double warmup_min_lr;           /* WarmupLR, WarmupDecayLR: warmup start, default 0 */
  double warmup_max_lr;           /* WarmupLR, WarmupDecayLR: peak, default optimizer lr */
  long warmup_num_steps;          /* all: steps of linear warmup, default 1000 */
  enum zo_warmup_type warmup_type; /* all: default "linear" */
  long total_num_steps;           /* WarmupCosineLR, WarmupDecayLR: end of decay, default steps */
  bool total_num_steps_set;       /* given in the config; false: it follows steps (and data.epochs) */
  double warmup_min_ratio;        /* WarmupCosineLR: warmup start / lr, must be 0 */
  double cos_min_ratio;           /* WarmupCosineLR: final lr / lr, in [0, 1], default 1e-4 */
};

struct zo_config_fp16 {           /* "fp16": dynamic loss scaling as in DeepSpeed */
  bool enabled;                   /* default false; exclusive with bf16 */
  double loss_scale;              /* 0 = dynamic, else a static scale; default 0 */
  int initial_scale_power;        /* dynamic: start at 2^this, in [0, 32], default 16 */
  int loss_scale_window;          /* steps without overflow before doubling, default 1000 */
  int hysteresis;                 /* overflows tolerated before halving, default 2 */
  double min_loss_scale;          /* floor of the dynamic scale, > 0, default 1 */
};

struct zo_config_offload {        /* zero_optimization.offload_optimizer / offload_param */
  enum zo_offload_device device;  /* default "none" */
  char *nvme_path;                /* directory for the NVMe tier, required for "nvme"; default "" */
  bool pin_memory;                /* pinned host buffers, default true (DeepSpeed: false) */
  int buffer_count;               /* staging buffers, default 4 (optimizer) / 5 (param) */
  int64_t max_in_cpu;             /* offload_param on nvme: parameter elements kept in host
                                   * memory (whole blocks), default 0 (DeepSpeed's: 1e9) */
};

struct zo_config_zero {           /* "zero_optimization" */
  int stage;                      /* 0..3, default 0; offload_optimizer needs >= 1,
                                   * offload_param needs 3 (DeepSpeed's rules) */
  struct zo_config_offload offload_optimizer; /* optimizer states and fp32 master weights */
  struct zo_config_offload offload_param;     /* parameters */
  int64_t sub_group_size;         /* elements per optimizer chunk on the NVMe tier (each of
                                   * buffer_count staging sets holds one chunk's master,
                                   * m and v), at most one block; default 16777216 */
  bool overlap_comm;              /* data parallel, stage >= 2 with the optimizer offloaded:
                                   * each block's gradient sum runs during the backward,
                                   * as soon as the block's gradients are final; default true */
};

struct zo_config_aio {            /* "aio": NVMe tier I/O (DeepSpeed defaults) */
  size_t block_size;              /* bytes per request, multiple of 4096, default 1MiB */
  int queue_depth;                /* io_uring entries in flight, default 8 */
  int thread_count;               /* accepted and ignored (DeepSpeed's I/O threads), default 1 */
  bool single_submit;             /* accepted and ignored, default false */
  bool overlap_events;            /* accepted and ignored, default true */
};

struct zo_config_checkpointing {  /* "activation_checkpointing" */
  bool enabled;                   /* ours: keep only block inputs, recompute in backward */
  int number_checkpoints;         /* checkpointed blocks, 0 = every block; <= n_layer */
  bool cpu_checkpointing;         /* keep the checkpoints in host memory, default false */
  bool partition_activations;     /* DeepSpeed model parallelism: must be false */
};

struct zo_config_model {          /* "model" */
  char *init_from;                /* safetensors file or Hugging Face directory to start
                                   * from (its shapes win); "" = random init (engine.seed) */
  char *tokenizer;                /* tokenizer.json or a directory holding it (tokenizer_config.json,
                                   * special_tokens_map.json, generation_config.json beside it are
                                   * copied into checkpoints); "" = model.init_from's directory when
                                   * it holds tokenizer.json, else none */
  double dropout;                 /* every dropout site's probability, [0, 1); default 0 (off) */
  bool hf_dropout;                /* the rates of model.init_from's config.json instead (GPT-2
                                   * embd/attn/resid_pdrop, Llama attention_dropout); default false */
  int pad_token_id;               /* the embedding's padding index of a model defined here
                                   * (spec.has_padding_idx, spec.padding_idx); -1 (default) none;
                                   * model.init_from's config.json gives its own */
  struct zo_model_config spec;    /* arch ("gpt2" default, "llama"), n_layer, n_head,
                                   * n_embd, vocab_size, max_seq_len (default GPT-2 124M:
                                   * 12, 12, 768, 50257, 1024), num_key_value_heads,
                                   * intermediate_size, rms_norm_eps, rope_theta,
                                   * tie_word_embeddings; padded_vocab_size filled
                                   * (multiple of 64) */
};

struct zo_config_data {           /* "data" */
  char *train;                    /* training tokens path; default "" (the trainer requires one) */
  char *val;                      /* validation tokens path; "" = no validation */
  enum zo_data_format format;     /* default "llmc" */
  int seq_len;                    /* T, <= model.max_seq_len, default max_seq_len */
  bool shuffle;                   /* shuffle sequence order per epoch (engine.seed), default true */
  double epochs;                  /* passes over data.train instead of steps; 0 = use steps (default).
                                   * The trainer derives steps from the file's micro-batches
                                   * (zo_config_steps_for_epochs); exclusive with steps */
};

struct zo_config_eval {           /* "eval": validation loss during training (data.val) */
  long every;                     /* steps between evaluations, 0 = at checkpoints and the end only
                                   * (default) */
  int steps;                      /* micro-batches per evaluation, 0 = the file's, at most 20 */
};

/* engine.on_nonfinite: what an fp32 or bf16 step with a non-finite loss or
 * gradient norm does (fp16 always skips it and lowers the loss scale). */
enum zo_on_nonfinite {
  ZO_NONFINITE_STOP, /* "stop": the run ends with an error naming the step, the value and the
                      * last good checkpoint; nothing of the step is saved */
  ZO_NONFINITE_SKIP, /* "skip": the update is skipped (data consumed), as fp16 does */
};

/* engine.placement: the config's placement as written, or the best candidate
 * of the planner's search (zo/autoplan.h), chosen by train. */
enum zo_placement_mode {
  ZO_PLACEMENT_CONFIG, /* "config" (default) */
  ZO_PLACEMENT_AUTO,   /* "auto" */
};

/* engine.schedule: the order of a step's K micro-batches through the
 * blocks (zo_plan_build resolves it; zo/plan.h). */
enum zo_schedule_mode {
  ZO_SCHEDULE_AUTO,              /* "auto" (default): layer-major when it can run, else micro-batch-major */
  ZO_SCHEDULE_LAYER_MAJOR,       /* "layer_major": each block once forward and once backward per step */
  ZO_SCHEDULE_MICRO_BATCH_MAJOR, /* "micro_batch_major": each micro-batch through the whole model in turn */
};

struct zo_config_engine {         /* "engine" */
  enum zo_device device;          /* default "auto" */
  size_t gpu_memory_budget;       /* bytes: ceiling for the device plan; 0 = the device's free memory */
  size_t host_memory_budget;      /* bytes of host tier, 0 = as much as the plan needs */
  int threads;                    /* OpenMP threads, 0 = all cores; at most 4x the hardware
                                   * threads (zo_train_backend refuses more) */
  uint64_t seed;                  /* init, shuffle; < 2^63, default 1337 */
  enum zo_on_nonfinite on_nonfinite; /* default "stop" */
  enum zo_placement_mode placement; /* default "config" */
  enum zo_schedule_mode schedule; /* default "auto" */
  int grad_slots;                 /* device gradient slots when gradients go to the host,
                                   * 1 .. ZO_SCHED_GRAD_SLOTS (default) */
  struct {                        /* "engine.trace": a timeline of some steps (zo/trace_file.h) */
    char *path;                   /* Chrome trace-event JSON file, "" = none */
    int first_step;               /* first traced step (of the run, 1-based), default 2 */
    int steps;                    /* steps traced, default 2 */
  } trace;
};

struct zo_config_log {            /* "log" */
  int every;                      /* steps between progress lines, >= 1, default 10 */
  char *metrics_path;             /* JSONL metrics file, "" = none */
  char *tensorboard_dir;          /* TensorBoard event files (the JSONL's scalars), "" = none */
};

struct zo_config_checkpoint {     /* "checkpoint" */
  char *dir;                      /* "" = no checkpoints */
  long every;                     /* steps between checkpoints, 0 = only at the end */
  int keep;                       /* most recent checkpoints kept, 0 = all; default 3 */
  bool save_optimizer;            /* false: the run's final checkpoint holds the weights only
                                     (not resumable; eval, sample, export, model.init_from read
                                     it); default true */
};

/* lora.target_modules: the module names PEFT matches (a module matches when
 * its name ends with the target). GPT-2's c_proj names both attn.c_proj and
 * mlp.c_proj, as in PEFT. The bits are never stored: files hold the names. */
enum zo_lora_target {
  ZO_LORA_Q_PROJ, ZO_LORA_K_PROJ, ZO_LORA_V_PROJ, ZO_LORA_O_PROJ, /* Llama attention */
  ZO_LORA_GATE_PROJ, ZO_LORA_UP_PROJ, ZO_LORA_DOWN_PROJ,         /* Llama MLP */
  ZO_LORA_C_ATTN, ZO_LORA_C_PROJ, ZO_LORA_C_FC,                  /* GPT-2 (Conv1D: fan_in_fan_out) */
  ZO_LORA_QKV_PROJ, ZO_LORA_GATE_UP_PROJ,                        /* Phi-3's fused projections (with
                                                                  * o_proj, down_proj) */
  ZO_LORA_ALL_LINEAR,                                            /* "all-linear": every Linear
                                                                  * but the LM head */
  ZO_LORA_N_TARGETS
};
extern const char *const zo_lora_target_names[]; /* in enum order, NULL-terminated */

struct zo_config_lora {           /* "lora": PEFT's LoraConfig names and meanings */
  int r;                          /* rank, 0 = no LoRA (default) unless init_from is set */
  double alpha;                   /* lora_alpha: scale alpha / r (alpha / sqrt(r) with use_rslora),
                                   * > 0, default 8 (PEFT's) */
  double dropout;                 /* lora_dropout on the adapter's input, [0, 1), default 0 */
  unsigned target_modules;        /* bit (1 << enum zo_lora_target) per name; a JSON list of
                                   * names or the string "all-linear"; 0 (default, []) = PEFT's
                                   * default for the arch (Llama q_proj, v_proj; GPT-2 c_attn) */
  bool use_rslora;                /* default false */
  char *init_from;                /* a PEFT adapter directory (adapter_config.json +
                                   * adapter_model.safetensors): its r, alpha, dropout, targets
                                   * and rslora win; a config value given that differs is
                                   * refused (zo/lora.h). "" = PEFT's init (default) */
  /* which of the above the config gave (not defaults): for the conflicts with init_from */
  bool r_set, alpha_set, dropout_set, target_modules_set, use_rslora_set;
};

/* "quantization": Hugging Face's BitsAndBytesConfig names and meanings (QLoRA:
 * a 4-bit frozen base under LoRA adapters; blocks of 64, bitsandbytes' 4-bit
 * default). Checked by the rules (rules.c); the base quantized at load and
 * training over it are not built yet: zo_train_model_config_lora refuses
 * load_in_4bit by name (docs/STATUS.md, issue 48). */
enum zo_quant_type { ZO_QUANT_FP4, ZO_QUANT_NF4 }; /* bnb_4bit_quant_type, in zo_config_quant_type_names order */
extern const char *const zo_config_quant_type_names[];
#define ZO_QUANT_BLOCKSIZE 64

struct zo_config_quant {
  int quant_method;               /* "bitsandbytes" only (transformers writes it) */
  bool load_in_4bit;              /* QLoRA: the base in 4 bits; needs LoRA on. Default false */
  bool load_in_8bit;              /* LLM.int8: true is refused by name (not built) */
  bool load_in_4bit_alias;        /* "_load_in_4bit" (transformers >= 4.37 writes it): equal to
                                   * load_in_4bit when given */
  bool load_in_8bit_alias;        /* "_load_in_8bit": likewise */
  enum zo_quant_type quant_type;  /* bnb_4bit_quant_type, default "fp4" (transformers') */
  bool use_double_quant;          /* bnb_4bit_use_double_quant: the absmax in 8 bits, blocks of 256 */
  char *compute_dtype;            /* bnb_4bit_compute_dtype: "" (default) = the run's dtype; given,
                                   * "float32" (bf16 off) or "bfloat16" (bf16.enabled): the run's
                                   * dtype is the compute dtype, a mismatch is refused */
  bool compute_bf16;              /* derived: compute_dtype resolved, true = bfloat16 */
  char *quant_storage;            /* bnb_4bit_quant_storage: "uint8" only (default) */
  bool llm_int8_enable_fp32_cpu_offload; /* true refused: no fp32 modules on the host */
  unsigned llm_int8_skip_modules; /* [] or ["lm_head"] (the LM head is never quantized); other
                                   * names refused: every block Linear is quantized */
};

struct zo_config {
  char *path;                     /* file it was loaded from, "" when none */
  int micro_batch;                /* train_micro_batch_size_per_gpu: B, default 1 */
  int grad_accum;                 /* gradient_accumulation_steps, default 1 */
  bool micro_batch_auto;          /* train_micro_batch_size_per_gpu was "auto": train chooses it */
  bool grad_accum_auto;           /* gradient_accumulation_steps was "auto": train chooses it */
  long steps;                     /* optimizer steps to train, default 1000 */
  long train_batch_size;          /* DeepSpeed's: micro_batch x grad_accum x ranks, checked; 0 = not
                                   * given (default). Given with only one of micro_batch and
                                   * grad_accum, the other is derived (ranks from the launcher's
                                   * environment, 1 without one) */
  struct zo_config_optimizer optimizer;
  struct zo_config_scheduler scheduler;
  struct zo_lr_schedule lr_schedule; /* derived from optimizer + scheduler (see above) */
  double gradient_clipping;       /* max global grad norm, 0 = off (default) */
  bool bf16;                      /* bf16.enabled, default false */
  struct zo_config_fp16 fp16;
  struct zo_config_zero zero;
  struct zo_config_aio aio;
  struct zo_config_checkpointing activation_checkpointing;
  struct zo_config_model model;
  struct zo_config_data data;
  struct zo_config_eval eval;
  struct zo_config_engine engine;
  struct zo_config_log log;
  struct zo_config_checkpoint checkpoint;
  struct zo_config_lora lora;
  struct zo_config_quant quant;
};

/* Fills cfg with the defaults, then the JSON file at path (NULL = defaults
 * only), then each of sets[0..n_sets) in order: "a.b.c=value", where value is
 * read as JSON when it parses (for string keys: when it is a quoted string or
 * null) and as a plain string otherwise. An override replaces the whole value
 * at its path; JSON null anywhere means "the default". Then checks every key
 * and the cross-field rules and derives lr_schedule and
 * model.spec.padded_vocab_size.
 * Prints on stderr, once per load: one warning listing the keys set that have
 * no effect here, one when an explicit scheduler.params.total_num_steps
 * differs from steps.
 * Returns 0; -EINVAL for a syntax error, unknown keys (one message names the
 * file or --set and every unknown key path, each with the nearest valid key
 * when it is close), a wrong type or an
 * out-of-range value (the message names the valid range or values);
 * -ENOTSUP for a known but unsupported value (model.arch "llama",
 * warmup_type "log", ...); -ENOENT or another -errno when the file cannot be
 * opened, -EIO when it cannot be read. On error cfg holds no allocations
 * (zo_config_free on it is harmless). Any thread; the message goes to that
 * thread's zo_last_error(). */
int zo_config_load(struct zo_config *cfg, const char *path, const char *const *sets, int n_sets);

/* zo_config_load without its warnings (the same errors): for the planner,
 * which loads many candidates of one config (zo/autoplan.h). */
int zo_config_load_quiet(struct zo_config *cfg, const char *path, const char *const *sets, int n_sets);

/* Steps of data.epochs passes over a training file of n_tokens tokens with
 * n_ranks ranks: ceil(epochs x micro-batches per epoch / grad_accum), where a
 * micro-batch is n_ranks x micro_batch windows of data.seq_len + 1 tokens
 * (one token overlapping), at least 1. cfg->data.epochs must be > 0. */
long zo_config_steps_for_epochs(const struct zo_config *cfg, size_t n_tokens, int n_ranks);

/* Sets cfg->steps (a run's steps decided after loading: data.epochs), and
 * with it total_num_steps and lr_schedule when total_num_steps follows
 * steps; warns once on stderr when an explicit total_num_steps differs.
 * Returns 0, or -EINVAL when warmup_num_steps then exceeds total_num_steps. */
int zo_config_set_steps(struct zo_config *cfg, long steps);

/* "auto", "cpu" or "cuda": the engine.device value, as zo_backend_init takes it. */
const char *zo_device_name(enum zo_device d);

/* Frees the strings cfg owns and zeroes it. Accepts NULL. */
void zo_config_free(struct zo_config *cfg);

/* Writes the effective config (defaults filled, DeepSpeed key names) as
 * indented JSON. Loading the output gives an identical config. The scheduler
 * section is omitted when it is "none", and only the type's own parameters
 * are written. Returns 0 or -EIO. */
int zo_config_dump(const struct zo_config *cfg, FILE *out);

/* Parses a byte size: a whole number ("1048576"), or a number with a unit:
 * K, M, G, T with or without "iB" are binary (KiB = 1024), KB, MB, GB, TB are
 * decimal (GB = 1e9), B is bytes; fractions allowed ("1.5GB"), rounded to the
 * nearest byte; case-insensitive; spaces allowed before the unit.
 * Returns 0 or -EINVAL (syntax, negative, or over SIZE_MAX) with a message. */
int zo_parse_bytes(const char *s, size_t *out);

#ifdef __cplusplus
}
#endif
#endif /* ZO_CONFIG_H */
