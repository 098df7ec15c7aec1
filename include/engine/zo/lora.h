/* LoRA (PEFT's LoraConfig) resolved for one model: the config's lora section,
 * or the PEFT adapter directory of lora.init_from, checked against the
 * architecture. The adapted output of a targeted projection is
 * y = W x + scale B A dropout(x), scale = alpha / r (alpha / sqrt(r) with
 * use_rslora), A (r, in), B (out, r), as in PEFT.
 * Built so far: this resolution (config, adapter_config.json, targets per
 * arch). Training with adapters is not built: zo_train_model_config refuses a
 * config with LoRA on (-ENOTSUP) after resolving it. */
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
};

/* Resolves c for a model of arch. With c->init_from, reads
 * init_from/adapter_config.json (and requires adapter_model.safetensors
 * beside it): its r, lora_alpha, lora_dropout, target_modules and use_rslora
 * win, and a value the config gave that differs is refused. PEFT features not
 * built here are refused by name (bias other than "none", use_dora,
 * rank_pattern, alpha_pattern, modules_to_save, layers_to_transform, a regex
 * target_modules, peft_type other than "LORA", fan_in_fan_out that does not
 * match the arch). Returns 1 with *out filled when LoRA is on, 0 when it is
 * off (lora.r = 0, no init_from), -EINVAL / -ENOTSUP / -ENOENT with a message
 * naming the key, the value and what would be valid. */
int zo_lora_resolve(const struct zo_config_lora *c, enum zo_model_arch arch, struct zo_lora *out);

/* The targets an arch has (its Linear layers but the LM head: "all-linear"),
 * and PEFT's default when target_modules is not given (Llama q_proj, v_proj;
 * GPT-2 c_attn). */
unsigned zo_lora_arch_targets(enum zo_model_arch arch);
unsigned zo_lora_default_targets(enum zo_model_arch arch);

#ifdef __cplusplus
}
#endif
#endif /* ZO_LORA_H */
