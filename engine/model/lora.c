/* LoRA resolved for one model (zo/lora.h): the config's lora section, or a
 * PEFT adapter directory's adapter_config.json, against the module names of
 * the model's family (Phi-3's fused qkv_proj and gate_up_proj where the
 * other Llama-family models have q, k, v and gate, up apart). */
#include "zo/lora.h"

#include "family.h"
#include "lora_paths.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *const zo_lora_target_names[] = {"q_proj",    "k_proj", "v_proj", "o_proj",   "gate_proj",
                                            "up_proj",   "down_proj", "c_attn", "c_proj", "c_fc",
                                            "qkv_proj", "gate_up_proj", "all-linear", NULL};
_Static_assert(sizeof zo_lora_target_names / sizeof zo_lora_target_names[0] == ZO_LORA_N_TARGETS + 1,
               "zo_lora_target_names follows enum zo_lora_target");

#define BIT(t) (1u << (t))
#define LLAMA_ALL                                                                                      \
  (BIT(ZO_LORA_Q_PROJ) | BIT(ZO_LORA_K_PROJ) | BIT(ZO_LORA_V_PROJ) | BIT(ZO_LORA_O_PROJ) |             \
   BIT(ZO_LORA_GATE_PROJ) | BIT(ZO_LORA_UP_PROJ) | BIT(ZO_LORA_DOWN_PROJ))
#define GPT2_ALL (BIT(ZO_LORA_C_ATTN) | BIT(ZO_LORA_C_PROJ) | BIT(ZO_LORA_C_FC))
#define PHI3_ALL \
  (BIT(ZO_LORA_QKV_PROJ) | BIT(ZO_LORA_O_PROJ) | BIT(ZO_LORA_GATE_UP_PROJ) | BIT(ZO_LORA_DOWN_PROJ))

/* Mistral, Qwen2 and Qwen3 have Llama's module names; Phi-3 its fused ones. */
unsigned zo_lora_family_targets(enum zo_model_family f) {
  return f == ZO_FAMILY_GPT2 ? GPT2_ALL : f == ZO_FAMILY_PHI3 ? PHI3_ALL : LLAMA_ALL;
}

/* PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING (0.22): phi3
 * has no row there (PEFT refuses an adapter without target_modules). */
unsigned zo_lora_default_targets(enum zo_model_family f) {
  return f == ZO_FAMILY_GPT2   ? BIT(ZO_LORA_C_ATTN)
         : f == ZO_FAMILY_PHI3 ? 0
                               : BIT(ZO_LORA_Q_PROJ) | BIT(ZO_LORA_V_PROJ);
}

static void fmt_targets(unsigned set, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; i < ZO_LORA_N_TARGETS && n < cap; i++)
    if (set & BIT(i)) n += (size_t)snprintf(buf + n, cap - n, "%s\"%s\"", n ? ", " : "", zo_lora_target_names[i]);
}

/* The set's names checked against the family; all-linear and 0 expanded.
 * A name no module of the model has is refused: PEFT fails when no target
 * matches and adapts the others silently when some do. */
static int family_targets(unsigned set, enum zo_model_family f, const char *src, unsigned *out) {
  const unsigned all = zo_lora_family_targets(f);
  char ok[256];
  fmt_targets(all, ok, sizeof ok);
  if (set == 0) set = zo_lora_default_targets(f);
  if (set == 0)
    return zo_error(-EINVAL, "%s: no target_modules given and PEFT has no default for a %s model (its "
                    "get_peft_model refuses: \"Please specify `target_modules`\"): name them, from %s, or "
                    "\"all-linear\"", src, zo_model_family_name(f), ok);
  if (set & BIT(ZO_LORA_ALL_LINEAR)) set = (set & ~BIT(ZO_LORA_ALL_LINEAR)) | all;
  if (set & ~all) {
    char bad[256];
    fmt_targets(set & ~all, bad, sizeof bad);
    return zo_error(-EINVAL, "%s: target_modules %s: no such module in a %s model%s; its modules are %s or "
                    "\"all-linear\"", src, bad, zo_model_family_name(f),
                    f == ZO_FAMILY_PHI3 ? " (Phi-3 fuses q, k, v as qkv_proj and gate, up as gate_up_proj)" : "",
                    ok);
  }
  *out = set;
  return 0;
}

/* adapter_config.json's target_modules: a list of names and module paths
 * (PEFT 0.22's "all-linear" saves full paths: lora_paths.c), or
 * "all-linear"; another string is a regex in PEFT, not built here. */
static int adapter_targets(const json_t *v, const char *file, const struct zo_model_config *mc, unsigned *out) {
  *out = 0;
  size_t n = json_is_array(v) ? json_array_size(v) : 1, n_paths = 0;
  if (!v || (!json_is_array(v) && !json_is_string(v)))
    return zo_error(-EINVAL, "%s: target_modules must be a list of module names or \"all-linear\"", file);
  const char **paths = calloc(n ? n : 1, sizeof *paths);
  if (!paths) return zo_error(-ENOMEM, "%s: target_modules: %zu entries", file, n);
  int err = 0;
  for (size_t j = 0; j < n && !err; j++) {
    const json_t *e = json_is_array(v) ? json_array_get(v, j) : v;
    const char *s = json_string_value(e);
    int i = -1;
    for (int t = 0; s && t < ZO_LORA_N_TARGETS; t++)
      if (!strcmp(s, zo_lora_target_names[t])) i = t;
    if (i >= 0)
      *out |= BIT(i);
    else if (s && json_is_array(v) && strchr(s, '.'))
      paths[n_paths++] = s;
    else
      err = zo_error(json_is_array(v) ? -EINVAL : -ENOTSUP,
                     "%s: target_modules \"%s\": %s; valid names: q_proj, k_proj, v_proj, o_proj, gate_proj, "
                     "up_proj, down_proj, c_attn, c_proj, c_fc, qkv_proj, gate_up_proj, all-linear, or a module "
                     "path (model.layers.0.self_attn.q_proj)", file, s ? s : "(not a string)",
                     json_is_array(v) ? "not a module name zoffload knows"
                                      : "a regular expression (PEFT's string form) is not supported");
  }
  unsigned from_paths = 0;
  if (!err)
    err = zo_lora_paths_targets(paths, n_paths, zo_family_resolve(mc), mc->n_layer, *out, file, &from_paths);
  free(paths);
  *out |= from_paths;
  return err;
}

/* A PEFT key whose feature is not built here: refused unless it has its
 * neutral value (absent, null, false, empty). */
static int refuse_feature(const json_t *root, const char *key, const char *file) {
  const json_t *v = json_object_get(root, key);
  if (!v || json_is_null(v) || json_is_false(v) || (json_is_object(v) && json_object_size(v) == 0) ||
      (json_is_array(v) && json_array_size(v) == 0))
    return 0;
  return zo_error(-ENOTSUP, "%s: %s is set: zoffload's LoRA does not support PEFT's %s; use an adapter "
                  "without it", file, key, key);
}

/* Every key of PEFT's LoraConfig (and PeftConfig), read with an
 * allow-list like config.json: used here, without effect on the arithmetic
 * (why), or a feature not built (refused unless neutral). A key PEFT does
 * not have is refused naming it. */
static const char *const lora_used[] = {"peft_type", "r", "lora_alpha", "lora_dropout", "target_modules",
                                        "use_rslora", "fan_in_fan_out", "bias", "base_model_name_or_path"};
static const struct {
  const char *key, *why;
} lora_no_effect[] = {
    {"task_type", "the head is the model's own (a task_type with its own head brings modules_to_save, refused)"},
    {"revision", "the hub revision of the base, where it was downloaded from"},
    {"inference_mode", "whether PEFT trains the adapter; eval and sample never do"},
    {"auto_mapping", "PEFT's class mapping for custom models"},
    {"peft_version", "the PEFT version that wrote the file"},
    {"init_lora_weights", "how PEFT initialised the adapter (true, false, \"gaussian\", \"eva\", \"orthogonal\"); the "
                          "methods that also change the base weights are refused"},
    {"eva_config", "an initialisation method; this adapter's weights are read from its file"},
    {"corda_config", "an initialisation method; this adapter's weights are read from its file"},
    {"runtime_config", "PEFT's runtime options (ephemeral GPU offload)"},
    {"megatron_core", "used with megatron_config only (refused when set)"},
    {"layers_pattern", "used with layers_to_transform only (refused when set)"},
    {"qalora_group_size", "used with use_qalora only (refused when set)"},
    {"ensure_weight_tying", "used with modules_to_save / trainable_token_indices only (refused when set)"},
};
static const char *const lora_refused[] = {"use_dora", "rank_pattern", "alpha_pattern", "modules_to_save",
                                           "layers_to_transform", "megatron_config", "loftq_config",
                                           "layer_replication", "lora_bias", "exclude_modules", "target_parameters",
                                           "trainable_token_indices", "use_qalora", "alora_invocation_tokens",
                                           /* PEFT 0.22's */
                                           "arrow_config", "astra_config", "kasa_config", "lora_ga_config",
                                           "monteclora_config", "use_bdlora", "velora_config"};

static bool in_list(const char *const *list, size_t n, const char *key) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(list[i], key)) return true;
  return false;
}

static int refuse_features(const json_t *root, const char *file, enum zo_model_arch arch) {
  const char *key;
  const json_t *value;
  json_object_foreach((json_t *)root, key, value) {
    bool known = in_list(lora_used, sizeof lora_used / sizeof lora_used[0], key);
    for (size_t i = 0; !known && i < sizeof lora_no_effect / sizeof lora_no_effect[0]; i++)
      known = !strcmp(lora_no_effect[i].key, key);
    if (in_list(lora_refused, sizeof lora_refused / sizeof lora_refused[0], key)) {
      int err = refuse_feature(root, key, file);
      if (err) return err;
      known = true;
    }
    if (!known)
      return zo_error(-EINVAL, "%s: \"%s\" is not a key of PEFT's LoraConfig that zoffload knows (a newer PEFT, or "
                      "a mistyped file?): its effect on the adapter's arithmetic is unknown, so the adapter is "
                      "refused; docs/finetune.md lists the keys read", file, key);
  }
  /* PiSSA, OLoRA, CorDA and LoftQ subtract the adapter's start from the
   * base weights: the adapter alone on the original base is another model. */
  const char *init = json_string_value(json_object_get(root, "init_lora_weights"));
  if (init && strcmp(init, "gaussian") && strcmp(init, "eva") && strcmp(init, "orthogonal"))
    return zo_error(-ENOTSUP, "%s: init_lora_weights = \"%s\" changes the base weights when the adapter is made "
                    "(PiSSA, OLoRA, CorDA, LoftQ): on the original base it is another model; convert it with PEFT "
                    "(path_initial_model_for_weight_conversion) into a plain LoRA adapter", file, init);
  const char *task = json_string_value(json_object_get(root, "task_type"));
  if (task && strcmp(task, "CAUSAL_LM"))
    return zo_error(-ENOTSUP, "%s: task_type \"%s\": only \"CAUSAL_LM\" adapters (a language model's own head) are "
                    "supported", file, task);
  const char *type = json_string_value(json_object_get(root, "peft_type"));
  if (type && strcmp(type, "LORA"))
    return zo_error(-ENOTSUP, "%s: peft_type \"%s\": only \"LORA\" adapters are supported", file, type);
  const json_t *bias = json_object_get(root, "bias");
  if (bias && !json_is_null(bias) && (!json_is_string(bias) || strcmp(json_string_value(bias), "none")))
    return zo_error(-ENOTSUP, "%s: bias must be \"none\" (trained biases are not supported)", file);
  const json_t *fifo = json_object_get(root, "fan_in_fan_out");
  /* PEFT sets fan_in_fan_out for GPT-2's Conv1D itself (with a warning), so
   * false is accepted there; true on a Linear model would transpose. */
  if (json_is_true(fifo) && arch != ZO_ARCH_GPT2)
    return zo_error(-EINVAL, "%s: fan_in_fan_out = true is for GPT-2's Conv1D weights (in, out); a %s model's "
                    "projections are Linear (out, in): set it to false", file, zo_model_arch_name(arch));
  return 0;
}

/* A config value given that differs from the adapter's is refused. */
static int conflict(bool given, bool differs, const char *key, const char *ours, const char *theirs,
                    const char *file) {
  if (!given || !differs) return 0;
  return zo_error(-EINVAL, "lora.%s = %s conflicts with %s's %s: the adapter's values win; remove lora.%s from "
                  "the config or set it to the adapter's value", key, ours, file, theirs, key);
}

static int number(const json_t *root, const char *key, double def, const char *file, double *out) {
  const json_t *v = json_object_get(root, key);
  if (!v || json_is_null(v)) return *out = def, 0;
  if (!json_is_number(v)) return zo_error(-EINVAL, "%s: %s must be a number", file, key);
  *out = json_number_value(v);
  return 0;
}

/* Reads dir/adapter_config.json into *l (r, alpha, dropout, targets, rslora),
 * checking the config's given values against it. */
static int read_adapter(const struct zo_config_lora *c, const struct zo_model_config *mc, struct zo_lora *l) {
  char file[4096], st[4096], a[64], b[64];
  snprintf(file, sizeof file, "%s/adapter_config.json", c->init_from);
  snprintf(st, sizeof st, "%s/adapter_model.safetensors", c->init_from);
  struct stat sb;
  if (stat(st, &sb) != 0)
    return zo_error(-ENOENT, "lora.init_from = \"%s\": no adapter_model.safetensors there (a PEFT adapter "
                    "directory holds adapter_config.json and adapter_model.safetensors)", c->init_from);
  json_error_t jerr;
  json_t *root = json_load_file(file, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) return zo_error(-EINVAL, "lora.init_from: %s: %s (line %d)", file, jerr.text, jerr.line);
  double r = 0;
  int err = json_is_object(root) ? 0 : zo_error(-EINVAL, "%s: not a JSON object", file);
  if (!err) err = refuse_features(root, file, mc->arch);
  if (!err) err = number(root, "r", 8, file, &r);
  if (!err && (r != floor(r) || r < 1 || r > 65536))
    err = zo_error(-EINVAL, "%s: r = %g: must be a whole number in [1, 65536]", file, r);
  if (!err) err = number(root, "lora_alpha", 8, file, &l->alpha);
  if (!err) err = number(root, "lora_dropout", 0, file, &l->dropout);
  if (!err && !(l->alpha > 0)) err = zo_error(-EINVAL, "%s: lora_alpha = %g: must be > 0", file, l->alpha);
  if (!err && !(l->dropout >= 0 && l->dropout < 1))
    err = zo_error(-EINVAL, "%s: lora_dropout = %g: must be in [0, 1)", file, l->dropout);
  unsigned t = 0;
  if (!err) err = adapter_targets(json_object_get(root, "target_modules"), file, mc, &t);
  l->use_rslora = json_is_true(json_object_get(root, "use_rslora"));
  const char *base = json_string_value(json_object_get(root, "base_model_name_or_path"));
  if (base && strlen(base) < sizeof l->base_model) snprintf(l->base_model, sizeof l->base_model, "%s", base);
  json_decref(root);
  if (err) return err;
  l->r = (int)r;
  snprintf(a, sizeof a, "%d", c->r), snprintf(b, sizeof b, "r = %d", l->r);
  if ((err = conflict(c->r_set, c->r != l->r, "r", a, b, file))) return err;
  snprintf(a, sizeof a, "%g", c->alpha), snprintf(b, sizeof b, "lora_alpha = %g", l->alpha);
  if ((err = conflict(c->alpha_set, c->alpha != l->alpha, "alpha", a, b, file))) return err;
  snprintf(a, sizeof a, "%g", c->dropout), snprintf(b, sizeof b, "lora_dropout = %g", l->dropout);
  if ((err = conflict(c->dropout_set, c->dropout != l->dropout, "dropout", a, b, file))) return err;
  snprintf(a, sizeof a, "%s", c->use_rslora ? "true" : "false");
  snprintf(b, sizeof b, "use_rslora = %s", l->use_rslora ? "true" : "false");
  if ((err = conflict(c->use_rslora_set, c->use_rslora != l->use_rslora, "use_rslora", a, b, file))) return err;
  unsigned ours = 0;
  const enum zo_model_family f = zo_family_resolve(mc);
  if ((err = family_targets(t, f, file, &l->targets))) return err;
  if (c->target_modules_set && (err = family_targets(c->target_modules, f, "lora.target_modules", &ours)))
    return err;
  char tb[256];
  fmt_targets(l->targets, tb, sizeof tb);
  if (c->target_modules_set && ours != l->targets)
    return zo_error(-EINVAL, "lora.target_modules conflicts with %s's target_modules (%s): the adapter's "
                    "values win; remove lora.target_modules from the config or set it to the adapter's", file, tb);
  return 0;
}

int zo_lora_resolve(const struct zo_config_lora *c, const struct zo_model_config *mc, struct zo_lora *out) {
  memset(out, 0, sizeof *out);
  const bool from = c->init_from && c->init_from[0];
  if (!from && c->r == 0) return 0;
  int err;
  if (from) {
    if ((err = read_adapter(c, mc, out))) return err;
    out->from_adapter = true;
  } else {
    out->r = c->r, out->alpha = c->alpha, out->dropout = c->dropout, out->use_rslora = c->use_rslora;
    if ((err = family_targets(c->target_modules, zo_family_resolve(mc), "lora.target_modules", &out->targets)))
      return err;
  }
  out->scale = out->use_rslora ? out->alpha / sqrt((double)out->r) : out->alpha / out->r;
  return 1;
}

/* The last path component of s, trailing slashes ignored: its start in *at,
 * its length returned. */
static size_t last_component(const char *s, const char **at) {
  size_t n = strlen(s);
  while (n > 1 && s[n - 1] == '/') n--;
  size_t i = n;
  while (i > 0 && s[i - 1] != '/') i--;
  *at = s + i;
  return n - i;
}

static bool same_model(const char *a, const char *b) {
  const char *x, *y;
  const size_t nx = last_component(a, &x), ny = last_component(b, &y);
  return !strcmp(a, b) || (nx > 0 && nx == ny && !strncmp(x, y, nx));
}

int zo_lora_check_base(const struct zo_lora *l, const char *adapter_dir, const char *weights) {
  if (!l->base_model[0] || !weights || !weights[0] || same_model(l->base_model, weights)) return 0;
  char file[4096], name[512] = "";
  snprintf(file, sizeof file, "%s/config.json", weights);
  json_t *root = json_load_file(file, 0, NULL); /* absent or unreadable: no second name */
  const char *s = json_string_value(json_object_get(root, "_name_or_path"));
  if (s) snprintf(name, sizeof name, "%s", s);
  json_decref(root);
  if (name[0] && same_model(l->base_model, name)) return 0;
  return zo_error(-EINVAL, "%s/adapter_config.json: base_model_name_or_path = \"%s\" is not the model being run "
                  "(%s%s%s%s): an adapter applies to the base it was trained from; load that base, or set "
                  "base_model_name_or_path to null there if this is the same model under another name",
                  adapter_dir, l->base_model, weights, name[0] ? ", whose config.json names \"" : "", name,
                  name[0] ? "\"" : "");
}
