/* LoRA (PEFT's LoraConfig) resolved for one model: the config's lora section,
 * or the PEFT adapter directory of lora.init_from, checked against the
 * architecture. The adapted output of a targeted projection is
 * y = W x + scale B A dropout(x), scale = alpha / r (alpha / sqrt(r) with
 * use_rslora), A (r, in), B (out, r), as in PEFT.
 * Built so far: this resolution (config, adapter_config.json, targets per
 * arch), the table, PEFT's files, the projections' arithmetic
 * (engine/model/linear.h), adapters attached to a model
 * (engine/model/lora_attach.h) for eval and sample, and training them over
 * a frozen base on the device (the scheduler's placement.frozen,
 * engine/sched/lora_step.c; train, plan, plan --auto, bench step), its
 * checkpoints (zo/lora_ckpt.h) and export. zo_train_model_config (bench
 * memory, calibrate) refuses a config with LoRA on (-ENOTSUP) after
 * resolving it. */
#ifndef ZO_LORA_H
#define ZO_LORA_H

#include "zo/config.h"

#ifdef __cplusplus
extern "C" {
#endif

struct zo_lora {
  int r;               /* rank, >= 1 */
  double alpha;        /* lora_alpha */
  double dropout;      /* lora_dropout */
  bool use_rslora;
  unsigned targets;    /* bits (1 << enum zo_lora_target) of the arch's module names,
                        * all-linear and PEFT's default expanded (never ZO_LORA_ALL_LINEAR) */
  double scale;        /* alpha / r, or alpha / sqrt(r) with use_rslora */
  bool from_adapter;   /* the values came from lora.init_from's adapter_config.json */
  char base_model[512]; /* its base_model_name_or_path ("" when absent, null or too long) */
};

/* Resolves c for the model mc (its family's module names: Phi-3's
 * qkv_proj and gate_up_proj, the Llama family's q/k/v_proj and
 * gate/up_proj, GPT-2's c_attn, c_proj, c_fc). With c->init_from, reads
 * init_from/adapter_config.json (and requires adapter_model.safetensors
 * beside it): its r, lora_alpha, lora_dropout, target_modules and use_rslora
 * win, and a value the config gave that differs is refused. PEFT features not
 * built here are refused by name (bias other than "none", use_dora,
 * rank_pattern, alpha_pattern, modules_to_save, layers_to_transform, a regex
 * target_modules, peft_type other than "LORA", fan_in_fan_out that does not
 * match the arch). Returns 1 with *out filled when LoRA is on, 0 when it is
 * off (lora.r = 0, no init_from), -EINVAL / -ENOTSUP / -ENOENT with a message
 * naming the key, the value and what would be valid. */
int zo_lora_resolve(const struct zo_config_lora *c, const struct zo_model_config *mc, struct zo_lora *out);

/* The adapter's base (l->base_model, from adapter_config.json) against the
 * model the run loads from weights (a directory or file; "" for the seeded
 * init): they agree when either has no name, when they are equal, when they
 * end in the same path component (a hub id "org/name" and a local
 * ".../name", trailing slashes ignored), or when weights/config.json's
 * _name_or_path agrees so. Otherwise -EINVAL naming both and the file. */
int zo_lora_check_base(const struct zo_lora *l, const char *adapter_dir, const char *weights);

/* The targets a family has (its Linear layers but the LM head:
 * "all-linear"), and PEFT's default when target_modules is not given (Llama
 * family q_proj, v_proj; GPT-2 c_attn; Phi-3 none, 0: PEFT refuses, and so
 * does zo_lora_resolve). */
unsigned zo_lora_family_targets(enum zo_model_family f);
unsigned zo_lora_default_targets(enum zo_model_family f);

/* One adapter: PEFT's module (one per Hugging Face module: q, k and v
 * separately; Phi-3's qkv_proj one module over all three), attached to rows
 * [row0, row0 + out) of the output of our (possibly fused) base tensor. A (r, in) at a_off and B (out, r) at b_off of
 * the flat fp32 adapter buffer, Linear layout as PEFT stores them (GPT-2's
 * Conv1D base is transposed, its adapters are not). */
#define ZO_LORA_NAME_MAX 128
struct zo_lora_module {
  char peft[ZO_LORA_NAME_MAX]; /* "base_model.model.model.layers.0.self_attn.q_proj" */
  char base[ZO_LORA_NAME_MAX]; /* Hugging Face name of the base weight it adapts */
  int layer;
  enum zo_lora_target target;
  int in, out, row0;             /* row0: first output row within the fused base tensor */
  size_t a_off, b_off;           /* elements into the adapter buffer */
};

/* The adapters of a model: the small trainable tensor table, block-major. */
struct zo_lora_table {
  struct zo_lora lora;
  int n_modules;
  struct zo_lora_module *modules;
  size_t numel;                  /* fp32 elements of every A and B */
};

/* Builds the table of l's targets for mc (zo_model_config_check'd): each
 * module's in, out and row0 from the architecture's Hugging Face tensor map
 * (the entry of its base weight: head_dim, GQA and Conv1D's transpose as the
 * checkpoint has them). Returns 0, -ENOMEM or -EINVAL (a target mc's arch
 * lacks). */
int zo_lora_table_build(const struct zo_model_config *mc, const struct zo_lora *l, struct zo_lora_table *t);
void zo_lora_table_free(struct zo_lora_table *t);

/* PEFT's initialisation into params (t->numel floats): every A
 * kaiming_uniform_(a = sqrt(5)) as nn.Linear does (uniform in
 * [-1/sqrt(in), 1/sqrt(in)]), drawn from a splitmix64 stream of seed and the
 * module's index (not torch's generator: same distribution, other values);
 * every B zero. */
void zo_lora_init(const struct zo_lora_table *t, uint64_t seed, float *params);

/* Reads dir/adapter_model.safetensors into params: every module's
 * lora_A.weight and lora_B.weight (F32, BF16 or F16) with PEFT's names and
 * shapes; a missing, misshapen or unexpected tensor is refused by name.
 * Returns 0 or -errno with a message. */
int zo_lora_load(const struct zo_lora_table *t, const char *dir, float *params);

/* Device bytes the adapters of t take attached to a model of working
 * dtype dt running N = B * T rows (engine/model/lora_attach.c), training
 * (gradients, their sum of squares, m, v; the fp32 copy is the master) or
 * not: exactly the arena's peak. by_category (may be NULL) receives them
 * by enum zo_mem_category, added to what it holds. */
size_t zo_lora_device_plan(const struct zo_lora_table *t, int N, enum zo_dtype dt, bool training,
                           size_t by_category[ZO_MEM_N_CATEGORIES]);

/* Writes a PEFT adapter directory: dir/adapter_config.json (peft_type LORA,
 * r, lora_alpha, lora_dropout, target_modules, use_rslora, fan_in_fan_out for
 * GPT-2, bias "none", base_model_name_or_path = base) and
 * dir/adapter_model.safetensors (fp32). dir must exist. Returns 0 or -errno. */
int zo_lora_save(const struct zo_lora_table *t, const float *params, const char *base, const char *dir);

#ifdef __cplusplus
}
#endif
#endif /* ZO_LORA_H */
