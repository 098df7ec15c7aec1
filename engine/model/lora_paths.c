/* PEFT target_modules given as module paths ("model.layers.0.self_attn.q_proj",
 * or suffixes such as "self_attn.q_proj"): matched with PEFT's rule against
 * the full names of every block's Linear layers, as transformers names them,
 * and reduced to our per-module targets. Only the uniform case is built: a
 * module adapted in every block; one adapted in some blocks is refused. */
#include "lora_paths.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct block_module {
  const char *path;          /* within the block, e.g. "self_attn.q_proj" */
  enum zo_lora_target target; /* our target adapting it */
};

static const struct block_module llama_modules[] = {
    {"self_attn.q_proj", ZO_LORA_Q_PROJ},   {"self_attn.k_proj", ZO_LORA_K_PROJ}, {"self_attn.v_proj", ZO_LORA_V_PROJ},
    {"self_attn.o_proj", ZO_LORA_O_PROJ},   {"mlp.gate_proj", ZO_LORA_GATE_PROJ}, {"mlp.up_proj", ZO_LORA_UP_PROJ},
    {"mlp.down_proj", ZO_LORA_DOWN_PROJ}};
static const struct block_module phi3_modules[] = {{"self_attn.qkv_proj", ZO_LORA_QKV_PROJ},
                                                   {"self_attn.o_proj", ZO_LORA_O_PROJ},
                                                   {"mlp.gate_up_proj", ZO_LORA_GATE_UP_PROJ},
                                                   {"mlp.down_proj", ZO_LORA_DOWN_PROJ}};
/* c_proj is two modules, attention's and the MLP's: our C_PROJ adapts both,
 * as PEFT's bare "c_proj" does. */
static const struct block_module gpt2_modules[] = {{"attn.c_attn", ZO_LORA_C_ATTN},
                                                   {"attn.c_proj", ZO_LORA_C_PROJ},
                                                   {"mlp.c_fc", ZO_LORA_C_FC},
                                                   {"mlp.c_proj", ZO_LORA_C_PROJ}};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* PEFT's check_target_module_exists for a list: equal, or a "."-suffix. */
static bool peft_matches(const char *full, const char *entry) {
  const size_t nf = strlen(full), ne = strlen(entry);
  return !strcmp(full, entry) || (nf > ne && full[nf - ne - 1] == '.' && !strcmp(full + nf - ne, entry));
}

static void full_name(char *buf, size_t cap, const char *prefix, int layer, const char *path) {
  snprintf(buf, cap, "%s%d.%s", prefix, layer, path);
}

/* Marks covered[layer * nm + i] for every block module entry matches;
 * false when it matches none. */
static bool mark(const char *entry, const char *prefix, const struct block_module *m, size_t nm, int n_layer,
                 bool *covered) {
  char full[128];
  bool hit = false;
  for (int l = 0; l < n_layer; l++)
    for (size_t i = 0; i < nm; i++) {
      full_name(full, sizeof full, prefix, l, m[i].path);
      if (peft_matches(full, entry)) covered[(size_t)l * nm + i] = hit = true;
    }
  return hit;
}

int zo_lora_paths_targets(const char *const *paths, size_t n, enum zo_model_family f, int n_layer,
                          unsigned named, const char *file, unsigned *out) {
  const bool gpt2 = f == ZO_FAMILY_GPT2, phi3 = f == ZO_FAMILY_PHI3;
  const struct block_module *m = gpt2 ? gpt2_modules : phi3 ? phi3_modules : llama_modules;
  const size_t nm = gpt2 ? N_OF(gpt2_modules) : phi3 ? N_OF(phi3_modules) : N_OF(llama_modules);
  const char *prefix = gpt2 ? "transformer.h." : "model.layers.";
  *out = 0;
  if (n == 0) return 0;
  bool *covered = calloc((size_t)n_layer * nm + 1, sizeof *covered); /* + 1: never calloc(0) */
  if (!covered)
    return zo_error(-ENOMEM, "%s: target_modules: %zu bytes for the paths' cover", file, (size_t)n_layer * nm + 1);
  int err = 0;
  for (size_t j = 0; j < n && !err; j++)
    if (!mark(paths[j], prefix, m, nm, n_layer, covered))
      err = zo_error(-EINVAL, "%s: target_modules \"%s\": no Linear of this %s model's %d blocks is that module or "
                     "ends with it (PEFT's rule); their names are %s<layer>.%s and the like (modules outside the "
                     "blocks, such as lm_head, are not adapted by zoffload)", file, paths[j], zo_model_family_name(f),
                     n_layer, prefix, m[0].path);
  unsigned touched = 0;
  for (size_t k = 0; k < (size_t)n_layer * nm; k++)
    if (covered[k]) touched |= 1u << m[k % nm].target;
  touched &= ~named;
  /* the first block module of a touched target left out, in layer order */
  size_t miss = 0;
  for (size_t k = 0; k < (size_t)n_layer * nm && !err && !miss; k++)
    if ((touched & (1u << m[k % nm].target)) && !covered[k]) miss = k + 1;
  if (!err && miss) {
    char full[128];
    const size_t i = (miss - 1) % nm;
    full_name(full, sizeof full, prefix, (int)((miss - 1) / nm), m[i].path);
    err = zo_error(-ENOTSUP, "%s: target_modules cover \"%s\" in some blocks only: %s is not among them; "
                   "zoffload adapts a module in every block or in none (per-layer targets, PEFT's "
                   "layers_to_transform, are not built): list it in every block, or name the module \"%s\"",
                   file, zo_lora_target_names[m[i].target], full, zo_lora_target_names[m[i].target]);
  }
  free(covered);
  if (!err) *out = touched;
  return err;
}
