/* The config module's private header: the schema's key records, the load
 * context, and the helpers the files of engine/config/ share. Nothing outside
 * engine/config/ includes it; the public interface is zo/config.h. The files,
 * one job each:
 *   config.c     the schema table and its loader (three passes over one JSON
 *                tree: keys, values, rules), zo_config_free
 *   suggest.c    unknown keys: the nearest valid key, the one error for all
 *   overrides.c  --set: merged into the tree; who gave a value
 *   ds_compat.c  DeepSpeed / Hugging Face: shorthands, "auto",
 *                train_batch_size, the keys without effect
 *   rules.c      rules across keys, derived fields (lr_schedule), epochs
 *   dump.c       zo_config_dump; values as text in messages
 *   size.c       byte sizes parsed ("10GiB") and written */
#ifndef ZO_ENGINE_CONFIG_INTERNAL_H
#define ZO_ENGINE_CONFIG_INTERNAL_H

#include "zo/config.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

enum key_type {
  KEY_SECTION, /* JSON object */
  KEY_INT,     /* int or long or uint64_t (by field size) */
  KEY_REAL,    /* double */
  KEY_BOOL,    /* bool */
  KEY_STRING,  /* char *, owned */
  KEY_ENUM,    /* an enum, matched by name (case-insensitive) */
  KEY_BYTES,   /* size_t, "10GiB" or a whole number */
  KEY_PAIR,    /* double[2] */
  KEY_ANY,     /* no field: a DeepSpeed key without effect here, any value */
  KEY_NAMESET, /* unsigned: bit (1 << i) per name of names given, as a JSON list of names or
                * one name as a string; [] = 0 */
};

enum {
  HAS_MIN = 1 << 0,
  HAS_MAX = 1 << 1,
  MIN_OPEN = 1 << 2, /* min excluded */
  MAX_OPEN = 1 << 3, /* max excluded */
};

struct zo_config_key {
  const char *path;         /* "optimizer.params.lr" */
  enum key_type type;
  size_t offset, size;      /* field in struct zo_config */
  double min, max;          /* range, per flags; KEY_PAIR: of each element */
  unsigned flags;
  const char *const *names; /* KEY_ENUM: names in enum order, NULL-terminated */
  const char *def;          /* default as JSON text */
  const char *def_from;     /* or: the default is this (earlier) key's value */
  const char *auto_def;     /* what "auto" means when not the default, as JSON text */
  unsigned sched;           /* scheduler.params.*: bit (1 << type) per scheduler that takes it */
  const char *ignored;      /* accepted for DeepSpeed compatibility without effect: why (the
                             * warning when a config sets it); NULL for the keys in use */
};

/* The schema, in dump order (config.c). */
extern const struct zo_config_key zo_config_schema[];
extern const size_t zo_config_n_keys;
#define ZO_CONFIG_MAX_KEYS 512 /* at least zo_config_n_keys (checked in config.c) */
#define PATH_MAX_LEN 256

extern const char *const zo_config_scheduler_names[];
extern const char *const zo_config_warmup_names[];
extern const char *const zo_config_offload_names[];

struct load_ctx {
  const char *file;        /* name for messages */
  const char *const *sets; /* the --set arguments that parsed */
  int n_sets;
  bool given[ZO_CONFIG_MAX_KEYS];     /* the tree set the key (not null, not "auto") */
  bool any_auto;           /* some key said "auto" */
  bool is_auto[ZO_CONFIG_MAX_KEYS];   /* the tree said "auto" for the key */
  /* unknown keys, reported together */
  int n_unknown;
  char unknown_src[PATH_MAX_LEN];
  char unknown_first[PATH_MAX_LEN];
  const char *unknown_first_near;
  char unknown_list[720];  /* "\"a\" (did you mean \"b\"?), \"c\"" */
  int n_unlisted;          /* unknown keys that did not fit the list */
};

static inline size_t key_index(const struct zo_config_key *k) {
  return (size_t)(k - zo_config_schema);
}

/* ---- config.c ------------------------------------------------------------ */

const struct zo_config_key *zo_config_key_find(const char *path);
/* The last component of a dotted path, and the length of what precedes its dot. */
const char *zo_config_key_leaf(const char *path);
size_t zo_config_key_parent_len(const char *path);
/* The index of s in a NULL-terminated list of names (case-insensitive), or -1. */
int zo_config_enum_index(const char *const *names, const char *s);
/* The value at a dotted path of the tree; NULL when absent or null. */
json_t *zo_config_tree_get(json_t *root, const char *path);
/* Sets k from JSON text (a default). */
int zo_config_set_default(const struct load_ctx *ctx, struct zo_config *cfg, const struct zo_config_key *k,
                          const char *text);
/* Whether the tree set the key at path (not null, not "auto"). */
bool zo_config_given(const struct load_ctx *ctx, const char *path);

/* ---- suggest.c ------------------------------------------------------------ */

int zo_config_edit_distance(const char *a, const char *b);
/* The error for one unknown key (--set): names the nearest valid key. */
int zo_config_unknown_key(const char *src, const char *path);
/* Collects an unknown key of the tree; zo_config_unknown_report makes the one error. */
void zo_config_unknown_add(struct load_ctx *ctx, const char *src, const char *path);
int zo_config_unknown_report(const struct load_ctx *ctx);

/* ---- overrides.c ---------------------------------------------------------- */

/* "--set" or the file's name: who gave the value at path (or at a or b). */
const char *zo_config_source(const struct load_ctx *ctx, const char *path);
const char *zo_config_source2(const struct load_ctx *ctx, const char *a, const char *b);
int zo_config_apply_set(json_t *root, const char *set);

/* ---- ds_compat.c ---------------------------------------------------------- */

int zo_config_apply_aliases(const struct load_ctx *ctx, json_t *root);
/* "auto" as k's value *v: records it (micro_batch_auto, grad_accum_auto),
 * then sets k's auto_def and returns 1 (k is done), or sets *v to NULL for
 * k's default and returns 0; also 0 when *v is not "auto"; <0 on error. */
int zo_config_auto(struct load_ctx *ctx, struct zo_config *cfg, const struct zo_config_key *k, json_t **v);
int zo_config_batch_rule(const struct load_ctx *ctx, struct zo_config *cfg);
void zo_config_warn_ignored(const struct load_ctx *ctx, const struct zo_config *cfg, json_t *root);
void zo_config_note_auto(const struct load_ctx *ctx, const struct zo_config *cfg);

/* ---- rules.c -------------------------------------------------------------- */

int zo_config_check_cross(const struct load_ctx *ctx, struct zo_config *cfg);
void zo_config_warn_total_steps(const struct zo_config *cfg, const char *src);

/* ---- dump.c, size.c ------------------------------------------------------- */

void zo_config_fmt_real(double x, char *buf, size_t cap);
void zo_config_fmt_json(const json_t *v, char *buf, size_t cap);
/* Key k's value in cfg as zo_config_dump writes it. */
void zo_config_fmt_value(const struct zo_config *cfg, const struct zo_config_key *k, char *buf, size_t cap);
void zo_config_fmt_bytes(size_t n, char *buf, size_t cap, bool quote);

#endif /* ZO_ENGINE_CONFIG_INTERNAL_H */
