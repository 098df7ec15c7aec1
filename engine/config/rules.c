/* The rules across keys that run after every key has its value, and the
 * fields derived from them: lr_schedule, model.spec.padded_vocab_size, the
 * steps of data.epochs. */
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* The schedule ends at total_num_steps: warns when the run stops elsewhere. */
void zo_config_warn_total_steps(const struct zo_config *cfg, const char *src) {
  const struct zo_config_scheduler *s = &cfg->scheduler;
  if (!s->total_num_steps_set || s->total_num_steps == cfg->steps ||
      (s->type != ZO_SCHEDULER_WARMUP_COSINE_LR && s->type != ZO_SCHEDULER_WARMUP_DECAY_LR))
    return;
  char what[160];
  if (s->total_num_steps > cfg->steps)
    snprintf(what, sizeof what, "the run ends at lr %.3g, before the %s schedule reaches %.3g",
             zo_lr_at(&cfg->lr_schedule, cfg->steps), zo_config_scheduler_names[s->type], cfg->lr_schedule.min_lr);
  else
    snprintf(what, sizeof what, "the %s schedule reaches %.3g at step %ld and stays there for the last %ld steps",
             zo_config_scheduler_names[s->type], cfg->lr_schedule.min_lr, s->total_num_steps,
             cfg->steps - s->total_num_steps);
  fprintf(stderr, "zoffload: warning: %s: scheduler.params.total_num_steps = %ld but the run has %ld step%s: %s; "
                  "remove total_num_steps to make it follow steps\n",
          src, s->total_num_steps, cfg->steps, cfg->steps == 1 ? "" : "s", what);
}

static int check_warmup(const struct zo_config *cfg, const char *src);
static void derive_schedule(struct zo_config *cfg);

/* lora: which keys the config gave (the conflicts with lora.init_from are
 * zo_lora_resolve's, which reads the adapter); a key of a LoRA that is off
 * is refused rather than ignored. */
static int check_lora(const struct load_ctx *ctx, struct zo_config *cfg) {
  struct zo_config_lora *l = &cfg->lora;
  l->r_set = zo_config_given(ctx, "lora.r");
  l->alpha_set = zo_config_given(ctx, "lora.alpha");
  l->dropout_set = zo_config_given(ctx, "lora.dropout");
  l->target_modules_set = zo_config_given(ctx, "lora.target_modules") && l->target_modules != 0;
  l->use_rslora_set = zo_config_given(ctx, "lora.use_rslora");
  if (l->r > 0 || (l->init_from && l->init_from[0])) return 0;
  static const char *const keys[] = {"lora.alpha", "lora.dropout", "lora.target_modules", "lora.use_rslora"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    if (zo_config_given(ctx, keys[i]))
      return zo_error(-EINVAL, "%s: %s is set but LoRA is off (lora.r = 0 and no lora.init_from): set lora.r "
                      "(PEFT's r, such as 8 or 16) or lora.init_from (a PEFT adapter directory), or remove %s",
                      zo_config_source(ctx, keys[i]), keys[i], keys[i]);
  return 0;
}

/* bnb_4bit_compute_dtype: "" follows the run; given, it must be the run's
 * dtype (the compute dtype is the working dtype here: fp32, or bf16 with
 * bf16.enabled). torch's names, as transformers reads them. */
static int check_quant_dtype(const struct load_ctx *ctx, struct zo_config *cfg) {
  struct zo_config_quant *q = &cfg->quant;
  const char *d = q->compute_dtype ? q->compute_dtype : "";
  const char *key = "quantization.bnb_4bit_compute_dtype";
  const bool run_bf16 = cfg->bf16;
  q->compute_bf16 = run_bf16;
  if (!d[0]) return 0;
  const bool f32 = !strcmp(d, "float32") || !strcmp(d, "float") || !strcmp(d, "torch.float32");
  const bool b16 = !strcmp(d, "bfloat16") || !strcmp(d, "torch.bfloat16");
  const bool h16 = !strcmp(d, "float16") || !strcmp(d, "half") || !strcmp(d, "torch.float16");
  if (h16)
    return zo_error(-EINVAL, "%s: %s = \"%s\": fp16 compute is not built with LoRA; use \"float32\" (bf16.enabled "
                    "false) or \"bfloat16\" (bf16.enabled true)", zo_config_source(ctx, key), key, d);
  if (!f32 && !b16)
    return zo_error(-EINVAL, "%s: %s = \"%s\": must be \"float32\" or \"bfloat16\" (torch's names; the compute "
                    "dtype is the run's dtype), or \"\" to follow the run", zo_config_source(ctx, key), key, d);
  if (b16 != run_bf16)
    return zo_error(-EINVAL, "%s: %s = \"%s\" but the run computes in %s (bf16.enabled = %s): the 4-bit base is "
                    "dequantized into the run's dtype; set bf16.enabled = %s, or bnb_4bit_compute_dtype \"%s\" "
                    "(or remove it)", zo_config_source2(ctx, key, "bf16.enabled"), key, d,
                    run_bf16 ? "bf16" : "fp32", run_bf16 ? "true" : "false", b16 ? "true" : "false",
                    run_bf16 ? "bfloat16" : "float32");
  return 0;
}

/* quantization: transformers' BitsAndBytesConfig. 8-bit is not built; 4-bit
 * needs LoRA (the base is frozen: without adapters nothing trains); a key of
 * a quantization that is off is refused rather than ignored. */
static int check_quant(const struct load_ctx *ctx, struct zo_config *cfg) {
  struct zo_config_quant *q = &cfg->quant;
#define QSRC(k) zo_config_source(ctx, "quantization." k)
  if (q->load_in_8bit || q->load_in_8bit_alias)
    return zo_error(-ENOTSUP, "%s: quantization.%s = true: LLM.int8 (an 8-bit base) is not built; use "
                    "load_in_4bit (QLoRA, with a lora section) or remove it", q->load_in_8bit ? QSRC("load_in_8bit")
                    : QSRC("_load_in_8bit"), q->load_in_8bit ? "load_in_8bit" : "_load_in_8bit");
  if (zo_config_given(ctx, "quantization._load_in_4bit") && q->load_in_4bit_alias != q->load_in_4bit)
    return zo_error(-EINVAL, "%s: quantization._load_in_4bit = %s but load_in_4bit = %s: give one value (or remove "
                    "_load_in_4bit)", zo_config_source2(ctx, "quantization._load_in_4bit", "quantization.load_in_4bit"),
                    q->load_in_4bit_alias ? "true" : "false", q->load_in_4bit ? "true" : "false");
  if (!q->load_in_4bit) {
    static const char *const keys[] = {"quantization.bnb_4bit_quant_type", "quantization.bnb_4bit_use_double_quant",
                                       "quantization.bnb_4bit_compute_dtype", "quantization.bnb_4bit_quant_storage",
                                       "quantization.llm_int8_enable_fp32_cpu_offload",
                                       "quantization.llm_int8_skip_modules"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
      if (zo_config_given(ctx, keys[i]))
        return zo_error(-EINVAL, "%s: %s is set but quantization.load_in_4bit is false: set load_in_4bit = true "
                        "(QLoRA) or remove %s", zo_config_source(ctx, keys[i]), keys[i], keys[i]);
    return 0;
  }
  if (cfg->lora.r == 0 && !(cfg->lora.init_from && cfg->lora.init_from[0]))
    return zo_error(-EINVAL, "%s: quantization.load_in_4bit = true without LoRA: the 4-bit base is frozen, so "
                    "nothing would train; add a lora section (lora.r, such as 16, or lora.init_from) for QLoRA, "
                    "or remove load_in_4bit", QSRC("load_in_4bit"));
  if (!q->quant_storage || strcmp(q->quant_storage, "uint8"))
    return zo_error(-EINVAL, "%s: quantization.bnb_4bit_quant_storage = \"%s\": only \"uint8\" is built (two "
                    "codes per byte, bitsandbytes' default); remove it or set \"uint8\"",
                    QSRC("bnb_4bit_quant_storage"), q->quant_storage ? q->quant_storage : "");
  if (q->llm_int8_enable_fp32_cpu_offload)
    return zo_error(-ENOTSUP, "%s: quantization.llm_int8_enable_fp32_cpu_offload = true: modules kept in fp32 on "
                    "the host are not built; remove it", QSRC("llm_int8_enable_fp32_cpu_offload"));
#undef QSRC
  return check_quant_dtype(ctx, cfg);
}

/* Pass 3: rules across keys, then the derived fields. */
int zo_config_check_cross(const struct load_ctx *ctx, struct zo_config *cfg) {
  struct zo_model_config *m = &cfg->model.spec;
#define SRC(path) zo_config_source(ctx, path)
#define SRC2(a, b) zo_config_source2(ctx, a, b)
  int lerr = check_lora(ctx, cfg);
  if (!lerr) lerr = check_quant(ctx, cfg);
  if (lerr) return lerr;

  if (m->n_embd % m->n_head != 0) {
    int lo = m->n_embd / m->n_head * m->n_head;
    return zo_error(-EINVAL, "%s: model.n_embd = %d is not a multiple of model.n_head = %d: "
                    "use n_embd %d or %d, or an n_head that divides %d",
                    SRC2("model.n_embd", "model.n_head"),
                    m->n_embd, m->n_head, lo > 0 ? lo : m->n_head, lo + m->n_head, m->n_embd);
  }
  /* With model.init_from the model's own length (max_position_embeddings)
   * is the limit, checked once it is read (zo_train_model_config); the
   * config's default 1024 is not the model's. */
  const bool from_model = cfg->model.init_from && cfg->model.init_from[0] && !zo_config_given(ctx, "model.max_seq_len");
  if (!from_model && cfg->data.seq_len > m->max_seq_len)
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
                      SRC2(path, "zero_optimization.stage"), path, zo_config_offload_names[o->device],
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
                    zo_config_warmup_names[s->warmup_type]);
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
  if (cfg->data.epochs > 0 && ctx->given[key_index(zo_config_key_find("steps"))])
    return zo_error(-EINVAL, "%s: steps = %ld and data.epochs = %g are both set: keep one (data.epochs derives "
                    "the steps from data.train)", SRC2("steps", "data.epochs"), cfg->steps, cfg->data.epochs);
#undef SRC
#undef SRC2

  m->padded_vocab_size = (m->vocab_size + 63) / 64 * 64;
  m->has_padding_idx = cfg->model.pad_token_id >= 0;
  m->padding_idx = m->has_padding_idx ? cfg->model.pad_token_id : 0;
  derive_schedule(cfg);
  return 0;
}

static int check_warmup(const struct zo_config *cfg, const char *src) {
  const struct zo_config_scheduler *s = &cfg->scheduler;
  if ((s->type == ZO_SCHEDULER_WARMUP_COSINE_LR || s->type == ZO_SCHEDULER_WARMUP_DECAY_LR) &&
      s->warmup_num_steps > s->total_num_steps)
    return zo_error(-EINVAL, "%s: scheduler.params.warmup_num_steps = %ld exceeds "
                    "scheduler.params.total_num_steps = %ld (%s; total_num_steps defaults to "
                    "steps)", src, s->warmup_num_steps, s->total_num_steps, zo_config_scheduler_names[s->type]);
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
  zo_config_warn_total_steps(cfg, "data.epochs");
  return 0;
}
