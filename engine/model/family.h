/* The model_type registry: one row per config.json model_type the engine
 * knows, built (its family, the architecture that runs it, the class name
 * config.json's "architectures" carries) or refused by name with what is
 * missing. The Hugging Face loader (engine/store/hf_dir.c, arch_llama_hf.c)
 * and the config.json writers read it; no other list of families exists.
 * Private to the engine. */
#ifndef ZO_ENGINE_FAMILY_H
#define ZO_ENGINE_FAMILY_H

#include <stddef.h>

#include "zo/model.h"

struct zo_family {
  const char *model_type;      /* config.json's model_type */
  enum zo_model_family family; /* ZO_FAMILY_UNSET: known, not built */
  enum zo_model_arch arch;     /* the program that runs it (built rows) */
  const char *architecture;    /* config.json's "architectures" entry */
  const char *refusal;         /* not built: what is missing; NULL when built */
};

/* The row of model_type, NULL when the engine does not know it. */
const struct zo_family *zo_family_find(const char *model_type);

/* The row of built family f (not ZO_FAMILY_UNSET: a broken contract aborts). */
const struct zo_family *zo_family_of(enum zo_model_family f);

/* The built model_types for messages, "\"gpt2\", \"llama\", ... or \"qwen2\"",
 * into buf (truncated to size). Returns buf. */
const char *zo_family_list(char *buf, size_t size);

/* The refusal of a config.json (path) whose model_type is type: unknown, or
 * known and not built (naming what is missing). Returns -ENOTSUP. */
int zo_family_refuse(const char *path, const char *type);

/* The family cfg is: cfg->family, or where unset the one its architecture
 * and features make (a window: Mistral; q/k/v biases: Qwen2). */
enum zo_model_family zo_family_resolve(const struct zo_model_config *cfg);

/* Fills cfg->family where unset (zo_family_resolve) and checks it against
 * the architecture and the features the family has. Returns 0 or -EINVAL
 * naming the keys. */
int zo_family_check(struct zo_model_config *cfg);

#endif /* ZO_ENGINE_FAMILY_H */
