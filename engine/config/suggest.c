/* Unknown keys: the nearest valid key to a typo, and the one error that
 * lists every unknown key of a config. */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

/* Case-insensitive Levenshtein distance; strings past 127 bytes are cut. */
int zo_config_edit_distance(const char *a, const char *b) {
  enum { N = 128 };
  int prev[N + 1], cur[N + 1];
  size_t na = strlen(a), nb = strlen(b);
  if (na > N) na = N;
  if (nb > N) nb = N;
  for (size_t j = 0; j <= nb; j++) prev[j] = (int)j;
  for (size_t i = 1; i <= na; i++) {
    cur[0] = (int)i;
    for (size_t j = 1; j <= nb; j++) {
      bool same = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]);
      int sub = prev[j - 1] + !same;
      int del = prev[j] + 1, ins = cur[j - 1] + 1;
      cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
    memcpy(prev, cur, sizeof(int) * (nb + 1));
  }
  return prev[nb];
}

/* A distance d between a typed name of n characters and a valid one is a
 * typo worth suggesting when it is small relative to the name: 1 edit in
 * 1-4 characters, 2 in 5-7, 3 in 8-10, ... */
static bool is_close(int d, size_t n) {
  return 3 * (size_t)d <= n + 2;
}

/* The length of path's parent when the schema has it as a section (the
 * "lora" of "lora.path"), else 0. */
static size_t section_len(const char *path) {
  const size_t plen = zo_config_key_parent_len(path);
  for (size_t i = 0; plen && i < zo_config_n_keys; i++) {
    const char *cand = zo_config_schema[i].path;
    if (zo_config_schema[i].type == KEY_SECTION && strlen(cand) == plen && !strncmp(cand, path, plen)) return plen;
  }
  return 0;
}

/* The message's end for a key without a close valid one: the keys of its
 * section when it names one, else where the keys are listed. */
static const char *no_near(const char *path, char *buf, size_t size) {
  const size_t plen = section_len(path);
  if (!plen) return " (no valid key is close to it; docs/config.md lists them)";
  int n = snprintf(buf, size, " (no key of %.*s is close to it; its keys:", (int)plen, path);
  bool first = true;
  for (size_t i = 0; i < zo_config_n_keys && n > 0 && (size_t)n < size; i++) {
    const char *cand = zo_config_schema[i].path;
    if (zo_config_key_parent_len(cand) != plen || strncmp(cand, path, plen) || cand[plen] != '.') continue;
    n += snprintf(buf + n, size - (size_t)n, "%s%s", first ? " " : ", ", cand + plen + 1);
    first = false;
  }
  if (n > 0 && (size_t)n < size) snprintf(buf + n, size - (size_t)n, "; docs/config.md)");
  return buf;
}

/* Nearest schema path to an unknown one: by the whole path, or by the last
 * component alone (a key put in the wrong section), siblings first on ties;
 * only in its own section when the path names one ("lora.path" is not
 * "engine.trace.path").
 * NULL when even the nearest is not close (is_close on the last component,
 * or on the part of the path after what both share); a valid leaf the path
 * continues ("optimizer.params.lr.x") is always close. */
static const char *nearest_key(const char *path) {
  const char *best = NULL;
  int best_score = INT_MAX;
  bool best_close = false;
  const char *leaf = zo_config_key_leaf(path);
  size_t plen = zo_config_key_parent_len(path), n = strlen(path);
  const size_t section = section_len(path);
  for (size_t i = 0; i < zo_config_n_keys; i++) {
    const char *cand = zo_config_schema[i].path;
    if (section && (strncmp(cand, path, section) || cand[section] != '.')) continue;
    size_t clen = strlen(cand), common = 0;
    while (common < n && common < clen && tolower((unsigned char)path[common]) ==
                                              tolower((unsigned char)cand[common]))
      common++;
    bool sibling = zo_config_key_parent_len(cand) == plen && strncmp(cand, path, plen) == 0;
    bool below = common == clen && path[clen] == '.' && zo_config_schema[i].type != KEY_SECTION;
    int by_path = zo_config_edit_distance(path, cand);
    int by_leaf = zo_config_edit_distance(leaf, zo_config_key_leaf(cand));
    int score = below ? 0 : 2 * (by_path < by_leaf ? by_path : by_leaf) + (sibling ? 0 : 1);
    if (score < best_score) {
      best_score = score, best = cand;
      best_close = below || is_close(by_leaf, strlen(leaf)) ||
                   is_close(by_path, (n > clen ? n : clen) - common);
    }
  }
  return best_close ? best : NULL;
}

int zo_config_unknown_key(const char *src, const char *path) {
  const char *near = nearest_key(path);
  char keys[1024];
  if (!near) return zo_error(-EINVAL, "%s: unknown key \"%s\"%s", src, path, no_near(path, keys, sizeof keys));
  return zo_error(-EINVAL, "%s: unknown key \"%s\"; did you mean \"%s\"?", src, path, near);
}

void zo_config_unknown_add(struct load_ctx *ctx, const char *src, const char *path) {
  const char *near = nearest_key(path);
  if (ctx->n_unknown++ == 0) {
    snprintf(ctx->unknown_src, sizeof ctx->unknown_src, "%s", src);
    snprintf(ctx->unknown_first, sizeof ctx->unknown_first, "%s", path);
    ctx->unknown_first_near = near;
  }
  char item[2 * PATH_MAX_LEN + 40];
  if (near)
    snprintf(item, sizeof item, "%s\"%s\" (did you mean \"%s\"?)", ctx->n_unknown > 1 ? ", " : "", path,
             near);
  else
    snprintf(item, sizeof item, "%s\"%s\"", ctx->n_unknown > 1 ? ", " : "", path);
  size_t used = strlen(ctx->unknown_list);
  if (ctx->n_unlisted == 0 && used + strlen(item) < sizeof ctx->unknown_list)
    memcpy(ctx->unknown_list + used, item, strlen(item) + 1);
  else
    ctx->n_unlisted++;
}

/* The one error for every unknown key check_keys found. */
int zo_config_unknown_report(const struct load_ctx *ctx) {
  if (ctx->n_unknown == 1) {
    char keys[1024];
    if (!ctx->unknown_first_near)
      return zo_error(-EINVAL, "%s: unknown key \"%s\"%s", ctx->unknown_src, ctx->unknown_first,
                      no_near(ctx->unknown_first, keys, sizeof keys));
    return zo_error(-EINVAL, "%s: unknown key \"%s\"; did you mean \"%s\"?", ctx->unknown_src,
                    ctx->unknown_first, ctx->unknown_first_near);
  }
  char more[48] = "";
  if (ctx->n_unlisted) snprintf(more, sizeof more, " and %d more", ctx->n_unlisted);
  return zo_error(-EINVAL, "%s: %d unknown keys: %s%s. Fix them all before rerunning (docs/config.md lists "
                  "the valid keys)", ctx->unknown_src, ctx->n_unknown, ctx->unknown_list, more);
}
