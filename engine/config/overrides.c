/* The --set overrides: each "a.b.c=value" merged into the config's JSON
 * tree before it is checked, and who gave a value (--set or the file) for
 * messages. */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

/* Who gave the value at path: the last --set at or above it, else the file. */
const char *zo_config_source(const struct load_ctx *ctx, const char *path) {
  for (int i = ctx->n_sets - 1; i >= 0; i--) {
    size_t n = strcspn(ctx->sets[i], "=");
    if (strncmp(ctx->sets[i], path, n) == 0 && (path[n] == '\0' || path[n] == '.')) return "--set";
  }
  return ctx->file;
}

/* The source to name for a rule between two keys: --set when either came from one. */
const char *zo_config_source2(const struct load_ctx *ctx, const char *a, const char *b) {
  const char *src = zo_config_source(ctx, a);
  return src != ctx->file ? src : zo_config_source(ctx, b);
}

/* Merges one "a.b.c=value" into root. */
int zo_config_apply_set(json_t *root, const char *set) {
  const char *eq = strchr(set, '=');
  if (!eq)
    return zo_error(-EINVAL, "--set \"%s\": expected key.path=value, e.g. "
                    "--set optimizer.params.lr=3e-4", set);
  size_t klen = (size_t)(eq - set);
  char path[PATH_MAX_LEN];
  if (klen == 0 || klen >= sizeof path)
    return zo_error(-EINVAL, "--set \"%s\": expected key.path=value with a key before '='", set);
  memcpy(path, set, klen);
  path[klen] = '\0';
  for (size_t i = 0; i < klen; i++) {
    bool edge = i == 0 || i + 1 == klen || path[i + 1] == '.';
    if (!(isalnum((unsigned char)path[i]) || path[i] == '_' || (path[i] == '.' && !edge)))
      return zo_error(-EINVAL, "--set \"%s\": \"%s\" is not a key path like "
                      "optimizer.params.lr", set, path);
  }
  if (!strcmp(path, "gradient_checkpointing")) {
    snprintf(path, sizeof path, "activation_checkpointing.enabled");
  }
  const struct zo_config_key *k = zo_config_key_find(path);
  if (!k) return zo_config_unknown_key("--set", path);

  const char *text = eq + 1;
  json_error_t jerr;
  json_t *value = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
  bool stringy = k->type == KEY_STRING || k->type == KEY_ENUM || k->type == KEY_BYTES;
  bool keep = value && (!stringy || json_is_string(value) || json_is_null(value) ||
                        (k->type == KEY_BYTES && json_is_number(value)));
  if (!keep) {
    json_decref(value);
    value = json_string(text);
    if (!value) return zo_error(-EINVAL, "--set \"%s\": the value is not valid UTF-8", set);
  }

  json_t *node = root;
  char *comp = path;
  for (char *dot; (dot = strchr(comp, '.')) != NULL; comp = dot + 1) {
    *dot = '\0';
    json_t *child = json_object_get(node, comp);
    if (!json_is_object(child)) {
      child = json_object();
      if (!child || json_object_set_new(node, comp, child) != 0) goto out_nomem;
    }
    node = child;
  }
  if (json_object_set_new(node, comp, value) != 0) return zo_error(-ENOMEM, "--set: out of memory");
  return 0;

out_nomem:
  json_decref(value);
  return zo_error(-ENOMEM, "--set: out of memory");
}
