/* DeepSpeed and Hugging Face compatibility: the shorthands (bf16: true,
 * gradient_checkpointing), "auto" values, train_batch_size, and the warning
 * for the keys accepted without effect (the schema marks them "ignored"). */
#include "internal.h"

#include "zo/launcher.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* "auto" in a Hugging Face DeepSpeed config: the key's default here (or
 * auto_def), except for the names where "auto" is itself a value. */
static bool is_auto(const struct zo_config_key *k, const json_t *v) {
  if (!json_is_string(v) || strcasecmp(json_string_value(v), "auto") != 0) return false;
  return k->type != KEY_STRING && !(k->type == KEY_ENUM && zo_config_enum_index(k->names, "auto") >= 0);
}

int zo_config_auto(struct load_ctx *ctx, struct zo_config *cfg, const struct zo_config_key *k, json_t **v) {
  if (!is_auto(k, *v)) return 0;
  ctx->any_auto = true;
  ctx->is_auto[key_index(k)] = true;
  /* train chooses these two with the planner (zo/autoplan.h) */
  if (!strcmp(k->path, "train_micro_batch_size_per_gpu")) cfg->micro_batch_auto = true;
  if (!strcmp(k->path, "gradient_accumulation_steps")) cfg->grad_accum_auto = true;
  if (k->auto_def) {
    int err = zo_config_set_default(ctx, cfg, k, k->auto_def);
    return err ? err : 1;
  }
  *v = NULL;
  return 0;
}

/* DeepSpeed's train_batch_size = micro-batch x accumulation x ranks: derives
 * whichever of the first two the config left out, and checks the product. */
int zo_config_batch_rule(const struct load_ctx *ctx, struct zo_config *cfg) {
  const long tbs = cfg->train_batch_size;
  if (tbs == 0) return 0;
  const char *src = zo_config_source(ctx, "train_batch_size");
  int rank, size;
  if (zo_launcher_rank_env(&rank, &size) < 0)
    return zo_error(-EINVAL, "%s: train_batch_size = %ld counts the ranks: %s", src, tbs, zo_last_error());
  const long N = size > 1 ? size : 1; /* 0: the launcher gave no size */
  const bool has_mb = zo_config_given(ctx, "train_micro_batch_size_per_gpu"),
             has_ga = zo_config_given(ctx, "gradient_accumulation_steps");
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
void zo_config_warn_ignored(const struct load_ctx *ctx, const struct zo_config *cfg, json_t *root) {
  char list[900];
  size_t used = 0;
  int n = 0, n_unlisted = 0;
  const struct zo_config_key *only = NULL;
  for (size_t i = 0; i < zo_config_n_keys; i++) {
    const struct zo_config_key *k = &zo_config_schema[i];
    const json_t *v = unused_here(cfg, k) ? zo_config_tree_get(root, k->path) : NULL;
    if (!v || k->type == KEY_SECTION) continue;
    char val[64], item[PATH_MAX_LEN + 96];
    zo_config_fmt_json(v, val, sizeof val);
    const char *src = zo_config_source(ctx, k->path);
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
    zo_config_fmt_json(zo_config_tree_get(root, only->path), val, sizeof val);
    fprintf(stderr, "zoffload: warning: %s: %s = %s is accepted for DeepSpeed compatibility and has no effect: "
                    "%s\n", zo_config_source(ctx, only->path), only->path, val, unused_here(cfg, only));
    return;
  }
  fprintf(stderr, "zoffload: warning: %s: %d DeepSpeed keys are accepted and have no effect here: %s%s%.0d%s "
                  "(docs/config.md says why for each)\n",
          ctx->file, n, list, n_unlisted ? " and " : "", n_unlisted, n_unlisted ? " more" : "");
}

/* One line on stderr naming what each "auto" became (the Hugging Face
 * Trainer's defaults; the batch split is train's to choose). */
void zo_config_note_auto(const struct load_ctx *ctx, const struct zo_config *cfg) {
  if (!ctx->any_auto) return;
  char list[1400];
  size_t used = 0;
  int n = 0;
  for (size_t i = 0; i < zo_config_n_keys; i++) {
    const struct zo_config_key *k = &zo_config_schema[i];
    if (!ctx->is_auto[i]) continue;
    char val[96], item[PATH_MAX_LEN + 112];
    zo_config_fmt_value(cfg, k, val, sizeof val);
    if (!strcmp(k->path, "train_batch_size") && !strcmp(val, "0")) snprintf(val, sizeof val, "micro-batch x accumulation");
    snprintf(item, sizeof item, "%s%s = %s", n++ ? ", " : "", k->path, val);
    if (used + strlen(item) + 8 < sizeof list) {
      memcpy(list + used, item, strlen(item) + 1);
      used += strlen(item);
    } else if (used + 8 < sizeof list) {
      memcpy(list + used, ", ...", 6);
      used += 5;
    }
  }
  const bool split = cfg->micro_batch_auto || cfg->grad_accum_auto;
  fprintf(stderr, "zoffload: note: %s: \"auto\" as the Hugging Face Trainer's defaults: %s%s\n", ctx->file, list,
          split ? " (train chooses the split of micro-batch x accumulation)" : "");
}

/* Hugging Face's and DeepSpeed's shorthands: "bf16": true and "fp16": true
 * (also "auto") for their .enabled, "gradient_checkpointing" for
 * activation_checkpointing.enabled. */
int zo_config_apply_aliases(const struct load_ctx *ctx, json_t *root) {
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
                    zo_config_source2(ctx, "gradient_checkpointing", "activation_checkpointing.enabled"));
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
