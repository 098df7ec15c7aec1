/* The model_type registry (family.h): the rows, their look-ups, the refusal
 * of a type not built, and a configuration's family filled and checked
 * against its features. Reads no file: the Hugging Face loader and the
 * config.json writers do, through these rows. */
#include "family.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "zo/common.h"

static const struct zo_family FAMILIES[] = {
    {"gpt2", ZO_FAMILY_GPT2, ZO_ARCH_GPT2, "GPT2LMHeadModel", NULL},
    {"llama", ZO_FAMILY_LLAMA, ZO_ARCH_LLAMA, "LlamaForCausalLM", NULL},
    {"mistral", ZO_FAMILY_MISTRAL, ZO_ARCH_LLAMA, "MistralForCausalLM", NULL},
    {"qwen2", ZO_FAMILY_QWEN2, ZO_ARCH_LLAMA, "Qwen2ForCausalLM", NULL},
    {"qwen3", ZO_FAMILY_QWEN3, ZO_ARCH_LLAMA, "Qwen3ForCausalLM", NULL},
    {"qwen3_moe", ZO_FAMILY_UNSET, ZO_ARCH_LLAMA, "Qwen3MoeForCausalLM",
     "mixture-of-experts MLPs (mlp.experts, mlp.gate) are not implemented (a dense \"qwen3\" is)"},
    {"phi3", ZO_FAMILY_PHI3, ZO_ARCH_LLAMA, "Phi3ForCausalLM", NULL},
    {"mixtral", ZO_FAMILY_UNSET, ZO_ARCH_LLAMA, "MixtralForCausalLM",
     "mixture-of-experts MLPs (block_sparse_moe) are not implemented"},
    {"gemma", ZO_FAMILY_UNSET, ZO_ARCH_LLAMA, "GemmaForCausalLM",
     "its scaled embedding, RMSNorm of (1 + weight) and GeGLU MLP are not implemented"},
    {"gemma2", ZO_FAMILY_UNSET, ZO_ARCH_LLAMA, "Gemma2ForCausalLM",
     "its logit soft-capping, alternating sliding-window layers and extra norms are not implemented"},
    {"gemma3", ZO_FAMILY_UNSET, ZO_ARCH_LLAMA, "Gemma3ForConditionalGeneration",
     "its q/k norms, local and global layers with two rotary bases and extra norms are not implemented"},
    {"gemma3_text", ZO_FAMILY_UNSET, ZO_ARCH_LLAMA, "Gemma3ForCausalLM",
     "its q/k norms, local and global layers with two rotary bases and extra norms are not implemented"},
};
#define N_FAMILIES (sizeof FAMILIES / sizeof *FAMILIES)

const struct zo_family *zo_family_find(const char *model_type) {
  for (size_t i = 0; model_type && i < N_FAMILIES; i++)
    if (strcmp(FAMILIES[i].model_type, model_type) == 0) return &FAMILIES[i];
  return NULL;
}

const struct zo_family *zo_family_of(enum zo_model_family f) {
  for (size_t i = 0; i < N_FAMILIES; i++)
    if (FAMILIES[i].family == f && !FAMILIES[i].refusal) return &FAMILIES[i];
  zo_abort(__FILE__, __LINE__, "no built family %d", (int)f);
}

const char *zo_model_family_name(enum zo_model_family f) {
  return f == ZO_FAMILY_UNSET ? "unset" : zo_family_of(f)->model_type;
}

const char *zo_family_list(char *buf, size_t size) {
  size_t used = 0, n = 0, built = 0;
  for (size_t i = 0; i < N_FAMILIES; i++) built += !FAMILIES[i].refusal;
  buf[0] = '\0';
  for (size_t i = 0; i < N_FAMILIES && used < size; i++) {
    if (FAMILIES[i].refusal) continue;
    const char *sep = n == 0 ? "" : n + 1 == built ? " or " : ", ";
    const int w = snprintf(buf + used, size - used, "%s\"%s\"", sep, FAMILIES[i].model_type);
    used += w > 0 ? (size_t)w : 0;
    n++;
  }
  return buf;
}

int zo_family_refuse(const char *path, const char *type) {
  const struct zo_family *f = zo_family_find(type);
  char built[128];
  zo_family_list(built, sizeof built);
  if (f && f->refusal)
    return zo_error(-ENOTSUP, "%s: model_type \"%s\" is not supported: %s (\"%s\": %s)", path, type, built, type,
                    f->refusal);
  return zo_error(-ENOTSUP, "%s: model_type \"%s\" is not supported: %s", path, type, built);
}

enum zo_model_family zo_family_resolve(const struct zo_model_config *cfg) {
  if (cfg->family != ZO_FAMILY_UNSET) return cfg->family;
  if (cfg->arch == ZO_ARCH_GPT2) return ZO_FAMILY_GPT2;
  if (cfg->sliding_window > 0) return ZO_FAMILY_MISTRAL;
  if (cfg->qk_norm) return ZO_FAMILY_QWEN3;
  return cfg->qkv_bias ? ZO_FAMILY_QWEN2 : ZO_FAMILY_LLAMA;
}

int zo_family_check(struct zo_model_config *cfg) {
  if ((unsigned)cfg->family >= ZO_FAMILY_N)
    return zo_error(-EINVAL, "model family %d: not a family (gpt2, llama, mistral, qwen2, qwen3, phi3)", (int)cfg->family);
  cfg->family = zo_family_resolve(cfg);
  const struct zo_family *f = zo_family_of(cfg->family);
  if (f->arch != cfg->arch)
    return zo_error(-EINVAL, "model family \"%s\" runs on model.arch \"%s\", not \"%s\"", f->model_type,
                    zo_model_arch_name(f->arch), zo_model_arch_name(cfg->arch));
  if (cfg->arch == ZO_ARCH_GPT2) return 0;
  /* Each feature is one family's: its config.json could name no other. */
  if (cfg->qkv_bias != (cfg->family == ZO_FAMILY_QWEN2))
    return zo_error(-EINVAL, "model.qkv_bias = %s with model family \"%s\": q/k/v biases are Qwen2's (qwen2 always "
                             "has them, llama and mistral never)%s",
                    cfg->qkv_bias ? "true" : "false", f->model_type,
                    cfg->sliding_window > 0 ? "; with model.sliding_window too no family has both (Qwen2's "
                                              "windows are not implemented)" : "");
  if (cfg->qk_norm != (cfg->family == ZO_FAMILY_QWEN3))
    return zo_error(-EINVAL, "model.qk_norm = %s with model family \"%s\": per-head q/k norms are Qwen3's (qwen3 "
                             "always has them, the other families never)",
                    cfg->qk_norm ? "true" : "false", f->model_type);
  if (cfg->sliding_window > 0 && cfg->family != ZO_FAMILY_MISTRAL && cfg->family != ZO_FAMILY_PHI3)
    return zo_error(-EINVAL, "model.sliding_window = %d with model family \"%s\": a window is Mistral's or "
                             "Phi-3's",
                    cfg->sliding_window, f->model_type);
  return 0;
}
