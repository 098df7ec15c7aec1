/* tokenizer.json and tokenizer_config.json into a struct zo_tokenizer
 * (zo_tokenizer_load, see zo/tokenizer.h). Each component is read by one
 * function that lists the types and keys it supports and refuses anything
 * else naming the file, the JSON path and what is supported; nothing is
 * approximated. Added-token ids are checked against the ids tokenizers 0.15
 * would give them. */
#include "zo/tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo/common.h"

#include "tokenizer_impl.h"
#include "tokenizer_util.h"

/* ---- load ------------------------------------------------------------------ */

struct ld {
  struct zo_tokenizer *tk;
  const char *file;
};

static int refuse(const struct ld *L, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(const struct ld *L, const char *key, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  return zo_error(-ENOTSUP, "%s: %s: %s", L->file, key, msg);
}

/* Every key of obj must be in allowed (NULL-terminated). */
static int check_keys(const struct ld *L, json_t *obj, const char *where, const char *const *allowed) {
  const char *k;
  json_t *v;
  json_object_foreach(obj, k, v) {
    bool ok = false;
    for (const char *const *a = allowed; *a && !ok; a++) ok = !strcmp(*a, k);
    if (!ok) {
      char list[512] = "";
      for (const char *const *a = allowed; *a; a++) {
        strncat(list, *a, sizeof(list) - strlen(list) - 3);
        if (a[1]) strncat(list, ", ", sizeof(list) - strlen(list) - 1);
      }
      return refuse(L, where, "key \"%s\" is not supported (this object may hold: %s)", k, list);
    }
  }
  return 0;
}

static bool is_false_or_absent(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  return !v || json_is_false(v) || json_is_null(v);
}

static int get_bool(const struct ld *L, json_t *o, const char *where, const char *key, bool dflt, bool *out) {
  json_t *v = json_object_get(o, key);
  if (!v || json_is_null(v)) {
    *out = dflt;
    return 0;
  }
  if (!json_is_boolean(v)) return refuse(L, where, "\"%s\" must be true or false", key);
  *out = json_is_true(v);
  return 0;
}

static int get_str(const struct ld *L, json_t *o, const char *where, const char *key, char **out, size_t *len) {
  json_t *v = json_object_get(o, key);
  if (!json_is_string(v)) return refuse(L, where, "\"%s\" must be a string", key);
  *len = json_string_length(v);
  *out = malloc(*len + 1);
  if (!*out) return -ENOMEM;
  memcpy(*out, json_string_value(v), *len + 1);
  return 0;
}

/* A Replace/Split pattern: {"String": s} or {"Regex": r}. */
static int get_pattern(const struct ld *L, json_t *o, const char *where, char **s, size_t *len, bool *regex) {
  json_t *p = json_object_get(o, "pattern");
  json_t *str = json_object_get(p, "String"), *re = json_object_get(p, "Regex");
  if (!json_is_object(p) || json_object_size(p) != 1 || !(json_is_string(str) || json_is_string(re)))
    return refuse(L, where, "\"pattern\" must be {\"String\": ...} or {\"Regex\": ...}");
  *regex = json_is_string(re);
  json_t *v = *regex ? re : str;
  *len = json_string_length(v);
  if (!*len) return refuse(L, where, "an empty pattern is not supported");
  *s = malloc(*len + 1);
  if (!*s) return -ENOMEM;
  memcpy(*s, json_string_value(v), *len + 1);
  return 0;
}

static const char *type_of(json_t *o) {
  const char *t = json_string_value(json_object_get(o, "type"));
  return t ? t : "";
}

static int grow(void **p, size_t *n, size_t size) {
  void *q = realloc(*p, (*n + 1) * size);
  if (!q) return -ENOMEM;
  *p = q;
  memset((char *)q + *n * size, 0, size);
  (*n)++;
  return 0;
}

static int load_normalizer(const struct ld *L, json_t *o, const char *where) {
  struct zo_tokenizer *tk = L->tk;
  if (!o || json_is_null(o)) return 0;
  if (!json_is_object(o)) return refuse(L, where, "must be an object or null");
  const char *t = type_of(o);
  int err;
  if (!strcmp(t, "Sequence")) {
    if ((err = check_keys(L, o, where, (const char *const[]){"type", "normalizers", NULL}))) return err;
    json_t *arr = json_object_get(o, "normalizers");
    if (!json_is_array(arr)) return refuse(L, where, "\"normalizers\" must be an array");
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
      char w[128];
      snprintf(w, sizeof(w), "%s.normalizers[%zu]", where, i);
      if ((err = load_normalizer(L, v, w))) return err;
    }
    return 0;
  }
  static const char *const unicode[] = {"NFC", "NFD", "NFKC", "NFKD"};
  for (int k = 0; k < 4; k++) {
    if (strcmp(t, unicode[k])) continue;
    if ((err = check_keys(L, o, where, (const char *const[]){"type", NULL}))) return err;
    if (grow((void **)&tk->norms, &tk->n_norms, sizeof(*tk->norms))) return -ENOMEM;
    tk->norms[tk->n_norms - 1].kind = (enum norm_kind[]){NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD}[k];
    return 0;
  }
  if (!strcmp(t, "Prepend")) {
    if ((err = check_keys(L, o, where, (const char *const[]){"type", "prepend", NULL}))) return err;
    if (grow((void **)&tk->norms, &tk->n_norms, sizeof(*tk->norms))) return -ENOMEM;
    struct norm *nm = &tk->norms[tk->n_norms - 1];
    nm->kind = NORM_PREPEND;
    return get_str(L, o, where, "prepend", &nm->a, &nm->a_len);
  }
  if (!strcmp(t, "Replace")) {
    if ((err = check_keys(L, o, where, (const char *const[]){"type", "pattern", "content", NULL}))) return err;
    if (grow((void **)&tk->norms, &tk->n_norms, sizeof(*tk->norms))) return -ENOMEM;
    struct norm *nm = &tk->norms[tk->n_norms - 1];
    bool regex;
    if ((err = get_pattern(L, o, where, &nm->a, &nm->a_len, &regex))) return err;
    if ((err = get_str(L, o, where, "content", &nm->b, &nm->b_len))) return err;
    nm->kind = regex ? NORM_REPLACE_REGEX : NORM_REPLACE;
    if (regex && !(nm->re = zo_tk_regex_compile(nm->a, false, where))) return -ENOTSUP;
    return 0;
  }
  return refuse(L, where, "type \"%s\" is not supported (supported: Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD)",
                t);
}

static int load_pre_tokenizer(const struct ld *L, json_t *o, const char *where) {
  struct zo_tokenizer *tk = L->tk;
  if (!o || json_is_null(o)) return 0;
  if (!json_is_object(o)) return refuse(L, where, "must be an object or null");
  const char *t = type_of(o);
  int err;
  if (!strcmp(t, "Sequence")) {
    if ((err = check_keys(L, o, where, (const char *const[]){"type", "pretokenizers", NULL}))) return err;
    json_t *arr = json_object_get(o, "pretokenizers");
    if (!json_is_array(arr)) return refuse(L, where, "\"pretokenizers\" must be an array");
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
      char w[128];
      snprintf(w, sizeof(w), "%s.pretokenizers[%zu]", where, i);
      if ((err = load_pre_tokenizer(L, v, w))) return err;
    }
    return 0;
  }
  if (!strcmp(t, "ByteLevel")) {
    if ((err = check_keys(L, o, where, (const char *const[]){"type", "add_prefix_space", "trim_offsets", "use_regex", NULL})))
      return err;
    if (grow((void **)&tk->pres, &tk->n_pres, sizeof(*tk->pres))) return -ENOMEM;
    struct pre *p = &tk->pres[tk->n_pres - 1];
    p->kind = PRE_BYTELEVEL;
    p->behavior = SPLIT_ISOLATED;
    bool use_regex = true;
    if ((err = get_bool(L, o, where, "add_prefix_space", true, &p->add_prefix_space)) ||
        (err = get_bool(L, o, where, "use_regex", true, &use_regex)))
      return err;
    if (use_regex && !(p->re = zo_tk_regex_compile(ZO_TK_GPT2_PATTERN, false, where))) return -ENOTSUP;
    return 0;
  }
  if (!strcmp(t, "Split")) {
    if ((err = check_keys(L, o, where, (const char *const[]){"type", "pattern", "behavior", "invert", NULL}))) return err;
    if (grow((void **)&tk->pres, &tk->n_pres, sizeof(*tk->pres))) return -ENOMEM;
    struct pre *p = &tk->pres[tk->n_pres - 1];
    p->kind = PRE_SPLIT;
    char *pat;
    size_t len;
    bool regex;
    if ((err = get_pattern(L, o, where, &pat, &len, &regex))) return err;
    p->re = zo_tk_regex_compile(pat, !regex, where);
    free(pat);
    if (!p->re) return -ENOTSUP;
    const char *b = json_string_value(json_object_get(o, "behavior"));
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    int k = 0;
    while (k < 5 && (!b || strcmp(b, names[k]))) k++;
    if (k == 5)
      return refuse(L, where, "\"behavior\" must be one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
    p->behavior = (enum split_behavior[]){SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT,
                                          SPLIT_CONTIGUOUS}[k];
    return get_bool(L, o, where, "invert", false, &p->invert);
  }
  if (!strcmp(t, "Metaspace")) {
    if ((err = check_keys(L, o, where, (const char *const[]){"type", "replacement", "add_prefix_space", "prepend_scheme", NULL})))
      return err;
    if (grow((void **)&tk->pres, &tk->n_pres, sizeof(*tk->pres))) return -ENOMEM;
    struct pre *p = &tk->pres[tk->n_pres - 1];
    p->kind = PRE_METASPACE;
    p->behavior = SPLIT_MERGED_NEXT;
    const char *r = json_string_value(json_object_get(o, "replacement"));
    if (!r || !*r || strlen(r) != zo_tk_utf8_len((uint8_t)r[0]) || zo_tk_utf8_valid_prefix(r, strlen(r)) != strlen(r))
      return refuse(L, where, "\"replacement\" must be one character");
    p->rep_len = strlen(r);
    memcpy(p->rep, r, p->rep_len);
    if ((err = get_bool(L, o, where, "add_prefix_space", true, &p->add_prefix_space))) return err;
    json_t *sch = json_object_get(o, "prepend_scheme");
    const char *sc = sch && !json_is_null(sch) ? json_string_value(sch) : "always";
    if (!sc || (strcmp(sc, "always") && strcmp(sc, "first") && strcmp(sc, "never")))
      return refuse(L, where, "\"prepend_scheme\" must be \"always\", \"first\" or \"never\"");
    p->scheme = !strcmp(sc, "always") ? PREPEND_ALWAYS : !strcmp(sc, "first") ? PREPEND_FIRST : PREPEND_NEVER;
    if (!(p->re = zo_tk_regex_compile(p->rep, true, where))) return -ENOTSUP;
    return 0;
  }
  if (!strcmp(t, "Digits")) {
    /* tokenizers 0.15 needs individual_digits (no default) and ignores other keys; we refuse them. */
    if ((err = check_keys(L, o, where, (const char *const[]){"type", "individual_digits", NULL}))) return err;
    json_t *ind = json_object_get(o, "individual_digits");
    if (!json_is_boolean(ind)) {
      char *v = ind ? json_dumps(ind, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
      err = refuse(L, where, "\"individual_digits\" is %.40s; it must be true or false (tokenizers has no default for it)",
                   !ind ? "missing" : v ? v : "not a boolean");
      free(v);
      return err;
    }
    if (grow((void **)&tk->pres, &tk->n_pres, sizeof(*tk->pres))) return -ENOMEM;
    struct pre *p = &tk->pres[tk->n_pres - 1];
    p->kind = PRE_DIGITS;
    p->behavior = json_is_true(ind) ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS;
    return 0;
  }
  return refuse(L, where, "type \"%s\" is not supported (supported: Sequence, ByteLevel, Split, Metaspace, Digits)", t);
}

static int load_decoder(const struct ld *L, json_t *o, const char *where) {
  struct zo_tokenizer *tk = L->tk;
  if (!o || json_is_null(o)) return 0;
  if (!json_is_object(o)) return refuse(L, where, "must be an object or null");
  tk->has_decoder = true;
  const char *t = type_of(o);
  int err;
  if (!strcmp(t, "Sequence")) {
    if ((err = check_keys(L, o, where, (const char *const[]){"type", "decoders", NULL}))) return err;
    json_t *arr = json_object_get(o, "decoders");
    if (!json_is_array(arr)) return refuse(L, where, "\"decoders\" must be an array");
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
      char w[128];
      snprintf(w, sizeof(w), "%s.decoders[%zu]", where, i);
      if ((err = load_decoder(L, v, w))) return err;
    }
    return 0;
  }
  if (grow((void **)&tk->decs, &tk->n_decs, sizeof(*tk->decs))) return -ENOMEM;
  struct dec *dc = &tk->decs[tk->n_decs - 1];
  if (!strcmp(t, "ByteLevel")) {
    dc->kind = DEC_BYTELEVEL;
    return check_keys(L, o, where, (const char *const[]){"type", "add_prefix_space", "trim_offsets", "use_regex", NULL});
  }
  if (!strcmp(t, "ByteFallback") || !strcmp(t, "Fuse")) {
    dc->kind = !strcmp(t, "Fuse") ? DEC_FUSE : DEC_BYTEFALLBACK;
    return check_keys(L, o, where, (const char *const[]){"type", NULL});
  }
  if (!strcmp(t, "Replace")) {
    dc->kind = DEC_REPLACE;
    bool regex;
    if ((err = check_keys(L, o, where, (const char *const[]){"type", "pattern", "content", NULL})) ||
        (err = get_pattern(L, o, where, &dc->a, &dc->a_len, &regex)))
      return err;
    if (regex) return refuse(L, where, "a Regex pattern is not supported in the Replace decoder (String only)");
    return get_str(L, o, where, "content", &dc->b, &dc->b_len);
  }
  if (!strcmp(t, "Strip")) {
    dc->kind = DEC_STRIP;
    if ((err = check_keys(L, o, where, (const char *const[]){"type", "content", "start", "stop", NULL}))) return err;
    const char *c = json_string_value(json_object_get(o, "content"));
    json_t *st = json_object_get(o, "start"), *sp = json_object_get(o, "stop");
    if (!c || !*c || strlen(c) != zo_tk_utf8_len((uint8_t)c[0]) || !json_is_integer(st) || !json_is_integer(sp) ||
        json_integer_value(st) < 0 || json_integer_value(sp) < 0)
      return refuse(L, where, "Strip needs \"content\" (one character) and \"start\", \"stop\" (counts >= 0)");
    dc->content_len = strlen(c);
    memcpy(dc->content, c, dc->content_len);
    dc->start = (size_t)json_integer_value(st);
    dc->stop = (size_t)json_integer_value(sp);
    return 0;
  }
  if (!strcmp(t, "Metaspace")) {
    dc->kind = DEC_METASPACE;
    if ((err = check_keys(L, o, where, (const char *const[]){"type", "replacement", "add_prefix_space", "prepend_scheme", NULL})))
      return err;
    const char *r = json_string_value(json_object_get(o, "replacement"));
    if (!r || !*r || strlen(r) != zo_tk_utf8_len((uint8_t)r[0]) || zo_tk_utf8_valid_prefix(r, strlen(r)) != strlen(r))
      return refuse(L, where, "\"replacement\" must be one character");
    dc->content_len = strlen(r);
    memcpy(dc->content, r, dc->content_len);
    json_t *sch = json_object_get(o, "prepend_scheme");
    if (sch && !json_is_null(sch) && (!json_is_string(sch) || strcmp(json_string_value(sch), "always")))
      return refuse(L, where, "\"prepend_scheme\" other than \"always\" is not supported in the Metaspace decoder");
    return get_bool(L, o, where, "add_prefix_space", true, &dc->add_prefix_space);
  }
  return refuse(L, where, "type \"%s\" is not supported (supported: Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace)",
                t);
}

static int tmpl_add(struct zo_tokenizer *tk, bool sequence, const int32_t *ids, size_t n) {
  if (grow((void **)&tk->tmpl, &tk->n_tmpl, sizeof(*tk->tmpl))) return -ENOMEM;
  struct tmpl_item *it = &tk->tmpl[tk->n_tmpl - 1];
  it->sequence = sequence;
  if (!n) return 0;
  it->ids = malloc(n * sizeof(*ids));
  if (!it->ids) return -ENOMEM;
  memcpy(it->ids, ids, n * sizeof(*ids));
  it->n = n;
  return 0;
}

static int load_post_processor(const struct ld *L, json_t *o, const char *where) {
  struct zo_tokenizer *tk = L->tk;
  if (!o || json_is_null(o)) return 0;
  if (!json_is_object(o)) return refuse(L, where, "must be an object or null");
  const char *t = type_of(o);
  int err;
  if (!strcmp(t, "Sequence")) {
    if ((err = check_keys(L, o, where, (const char *const[]){"type", "processors", NULL}))) return err;
    json_t *arr = json_object_get(o, "processors");
    if (!json_is_array(arr)) return refuse(L, where, "\"processors\" must be an array");
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
      char w[128];
      snprintf(w, sizeof(w), "%s.processors[%zu]", where, i);
      if ((err = load_post_processor(L, v, w))) return err;
    }
    return 0;
  }
  if (!strcmp(t, "ByteLevel")) /* offsets only */
    return check_keys(L, o, where, (const char *const[]){"type", "add_prefix_space", "trim_offsets", "use_regex", NULL});
  if (tk->tmpl) return refuse(L, where, "a second template-adding post-processor is not supported");
  if (!strcmp(t, "RobertaProcessing") || !strcmp(t, "BertProcessing")) {
    if ((err = check_keys(L, o, where, (const char *const[]){"type", "sep", "cls", "trim_offsets", "add_prefix_space", NULL})))
      return err;
    int32_t id[2];
    for (int k = 0; k < 2; k++) {
      json_t *p = json_object_get(o, k ? "sep" : "cls");
      json_t *v = json_array_get(p, 1);
      if (json_array_size(p) != 2 || !json_is_integer(v)) return refuse(L, where, "\"cls\" and \"sep\" must be [token, id]");
      id[k] = (int32_t)json_integer_value(v);
    }
    if ((err = tmpl_add(tk, false, &id[0], 1)) || (err = tmpl_add(tk, true, NULL, 0)) ||
        (err = tmpl_add(tk, false, &id[1], 1)))
      return err;
    return 0;
  }
  if (!strcmp(t, "TemplateProcessing")) {
    if ((err = check_keys(L, o, where, (const char *const[]){"type", "single", "pair", "special_tokens", NULL}))) return err;
    json_t *single = json_object_get(o, "single"), *specials = json_object_get(o, "special_tokens");
    if (!json_is_array(single) || !json_is_object(specials))
      return refuse(L, where, "\"single\" must be an array and \"special_tokens\" an object");
    size_t i;
    json_t *v;
    bool have_seq = false;
    json_array_foreach(single, i, v) {
      json_t *sp = json_object_get(v, "SpecialToken"), *sq = json_object_get(v, "Sequence");
      if (sq) {
        const char *sid = json_string_value(json_object_get(sq, "id"));
        if (!sid || strcmp(sid, "A") || have_seq)
          return refuse(L, where, "single[%zu]: only one Sequence, with id \"A\", is supported", i);
        have_seq = true;
        if ((err = tmpl_add(tk, true, NULL, 0))) return err;
        continue;
      }
      const char *name = json_string_value(json_object_get(sp, "id"));
      json_t *tok = name ? json_object_get(specials, name) : NULL;
      json_t *ids = json_object_get(tok, "ids");
      if (!json_is_array(ids))
        return refuse(L, where, "single[%zu]: a SpecialToken whose id names an entry of \"special_tokens\" with \"ids\"", i);
      int32_t buf[64];
      const size_t n = json_array_size(ids);
      if (n > 64) return refuse(L, where, "special_tokens.%s: more than 64 ids", name);
      for (size_t k = 0; k < n; k++) {
        json_t *x = json_array_get(ids, k);
        if (!json_is_integer(x)) return refuse(L, where, "special_tokens.%s.ids must be integers", name);
        buf[k] = (int32_t)json_integer_value(x);
      }
      if ((err = tmpl_add(tk, false, buf, n))) return err;
    }
    if (!have_seq) return refuse(L, where, "\"single\" has no Sequence A");
    return 0;
  }
  return refuse(L, where,
                "type \"%s\" is not supported (supported: Sequence, ByteLevel, TemplateProcessing, RobertaProcessing, BertProcessing)",
                t);
}

static int load_model(const struct ld *L, json_t *o) {
  struct zo_tokenizer *tk = L->tk;
  const char *where = "model";
  if (!json_is_object(o)) return refuse(L, where, "missing or not an object");
  int err;
  if ((err = check_keys(L, o, where,
                        (const char *const[]){"type", "dropout", "unk_token", "continuing_subword_prefix",
                                              "end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges",
                                              "vocab", "merges", NULL})))
    return err;
  json_t *type = json_object_get(o, "type");
  if (type && (!json_is_string(type) || strcmp(json_string_value(type), "BPE")))
    return refuse(L, "model.type", "\"%s\" is not supported (BPE only)", json_is_string(type) ? json_string_value(type) : "?");
  if (!json_is_null(json_object_get(o, "dropout")) && json_object_get(o, "dropout"))
    return refuse(L, "model.dropout", "BPE dropout is not supported (null only)");
  for (int k = 0; k < 2; k++) {
    const char *key = k ? "end_of_word_suffix" : "continuing_subword_prefix";
    json_t *v = json_object_get(o, key);
    /* "" (GPT-2's and Qwen's files) changes nothing, like null. */
    if (v && !json_is_null(v) && !(json_is_string(v) && !json_string_length(v)))
      return refuse(L, where, "\"%s\" is not supported (null or \"\" only)", key);
  }
  if ((err = get_bool(L, o, where, "ignore_merges", false, &tk->ignore_merges)) ||
      (err = get_bool(L, o, where, "fuse_unk", false, &tk->fuse_unk)) ||
      (err = get_bool(L, o, where, "byte_fallback", false, &tk->byte_fallback)))
    return err;
  json_t *vocab = json_object_get(o, "vocab"), *merges = json_object_get(o, "merges");
  if (!json_is_object(vocab)) return refuse(L, "model.vocab", "must be an object {token: id}");
  if (!json_is_array(merges)) return refuse(L, "model.merges", "must be an array");
  const char *k;
  json_t *v;
  json_object_foreach(vocab, k, v) {
    const json_int_t id = json_integer_value(v);
    if (!json_is_integer(v) || id < 0 || id > INT32_MAX - 1)
      return refuse(L, "model.vocab", "the id of \"%s\" must be an integer in [0, 2^31 - 1)", k);
    if (zo_tk_map_put(&tk->vocab, k, strlen(k), (int32_t)id)) return -ENOMEM;
  }
  tk->unk_id = -1;
  json_t *unk = json_object_get(o, "unk_token");
  if (unk && !json_is_null(unk)) {
    const struct zo_tk_slot *s = json_is_string(unk) ? zo_tk_map_find(&tk->vocab, json_string_value(unk), json_string_length(unk)) : NULL;
    if (!s) return refuse(L, "model.unk_token", "must be null or a token of model.vocab");
    tk->unk_id = s->val;
  }
  for (int b = 0; b < 256; b++) {
    char name[8];
    snprintf(name, sizeof(name), "<0x%02X>", b);
    const struct zo_tk_slot *s = zo_tk_map_find(&tk->vocab, name, 6);
    tk->byte_ids[b] = s ? s->val : -1;
  }
  const size_t nm = json_array_size(merges);
  uint32_t cap = 64;
  while ((size_t)cap < 2 * nm + 2) cap *= 2;
  tk->merges = calloc(cap, sizeof(*tk->merges));
  if (!tk->merges) return -ENOMEM;
  tk->merge_mask = cap - 1;
  char *joined = NULL;
  size_t jcap = 0;
  for (size_t r = 0; r < nm; r++) {
    json_t *m = json_array_get(merges, r);
    const char *a, *b;
    size_t la, lb;
    if (json_is_string(m)) {
      a = json_string_value(m);
      const char *sp = strchr(a, ' ');
      if (!sp || strchr(sp + 1, ' ')) {
        free(joined);
        return refuse(L, "model.merges", "entry %zu (\"%s\") must be two tokens separated by one space", r, a);
      }
      la = (size_t)(sp - a), b = sp + 1, lb = strlen(b);
    } else if (json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
      a = json_string_value(json_array_get(m, 0)), la = strlen(a);
      b = json_string_value(json_array_get(m, 1)), lb = strlen(b);
    } else {
      free(joined);
      return refuse(L, "model.merges", "entry %zu must be \"a b\" or [\"a\", \"b\"]", r);
    }
    if (la + lb + 1 > jcap) {
      jcap = 2 * (la + lb + 1);
      char *p = realloc(joined, jcap);
      if (!p) {
        free(joined);
        return -ENOMEM;
      }
      joined = p;
    }
    memcpy(joined, a, la);
    memcpy(joined + la, b, lb);
    const struct zo_tk_slot *sa = zo_tk_map_find(&tk->vocab, a, la), *sb = zo_tk_map_find(&tk->vocab, b, lb),
                            *sn = zo_tk_map_find(&tk->vocab, joined, la + lb);
    if (!sa || !sb) {
      free(joined);
      return refuse(L, "model.merges", "entry %zu: \"%.*s\" is not in model.vocab", r, (int)(!sa ? la : lb),
                    !sa ? a : b);
    }
    if (!sn) {
      err = refuse(L, "model.merges", "entry %zu (\"%.*s\" + \"%.*s\"): the merged token \"%.*s\" is not in "
                   "model.vocab", r, (int)la, a, (int)lb, b, (int)(la + lb), joined);
      free(joined);
      return err;
    }
    /* A repeated pair keeps its last rank, as tokenizers' HashMap collect does. */
    const uint64_t key = pair_key(sa->val, sb->val);
    uint32_t i = (uint32_t)pair_hash(key) & tk->merge_mask;
    while (tk->merges[i].key && tk->merges[i].key != key) i = (i + 1) & tk->merge_mask;
    tk->merges[i] = (struct merge_slot){.key = key, .rank = (uint32_t)r, .new_id = sn->val};
  }
  free(joined);
  return 0;
}

static int load_added(const struct ld *L, json_t *arr) {
  struct zo_tokenizer *tk = L->tk;
  if (!arr || json_is_null(arr)) return 0;
  if (!json_is_array(arr)) return refuse(L, "added_tokens", "must be an array");
  const size_t vsize = tk->vocab.n;
  int64_t max_id = -1;
  size_t i;
  json_t *o;
  json_array_foreach(arr, i, o) {
    char where[64];
    snprintf(where, sizeof(where), "added_tokens[%zu]", i);
    int err;
    if ((err = check_keys(L, o, where,
                          (const char *const[]){"id", "content", "single_word", "lstrip", "rstrip", "normalized",
                                                "special", NULL})))
      return err;
    if (!is_false_or_absent(o, "single_word")) return refuse(L, where, "\"single_word\": true is not supported");
    json_t *c = json_object_get(o, "content"), *id = json_object_get(o, "id");
    if (!json_is_string(c) || !json_is_integer(id)) return refuse(L, where, "needs \"content\" (string) and \"id\" (integer)");
    if (zo_tk_map_find(&tk->added_map, json_string_value(c), json_string_length(c))) continue;
    /* The id tokenizers gives it: the model's, else the next after the vocabulary and the added tokens so far. */
    const struct zo_tk_slot *in_vocab = zo_tk_map_find(&tk->vocab, json_string_value(c), json_string_length(c));
    const int64_t expect = in_vocab ? in_vocab->val : max_id >= (int64_t)vsize ? max_id + 1 : (int64_t)vsize;
    if (json_integer_value(id) != expect)
      return refuse(L, where, "\"%s\" has id %lld but tokenizers 0.15 would give it %lld (an added token is the model's id "
                    "or the next after the vocabulary, in order)", json_string_value(c), (long long)json_integer_value(id),
                    (long long)expect);
    if (expect > max_id) max_id = expect;
    if (grow((void **)&tk->added, &tk->n_added, sizeof(*tk->added))) return -ENOMEM;
    struct added *a = &tk->added[tk->n_added - 1];
    a->id = (int32_t)expect;
    if ((err = get_str(L, o, where, "content", &a->content, &a->len))) return err;
    if ((err = get_bool(L, o, where, "special", false, &a->special)) ||
        (err = get_bool(L, o, where, "lstrip", false, &a->lstrip)) ||
        (err = get_bool(L, o, where, "rstrip", false, &a->rstrip)) ||
        (err = get_bool(L, o, where, "normalized", true, &a->normalized)))
      return err;
    if (zo_tk_map_put(&tk->added_map, a->content, a->len, (int32_t)(tk->n_added - 1))) return -ENOMEM;
    if (a->special && zo_tk_map_put(&tk->special_map, a->content, a->len, 1)) return -ENOMEM;
  }
  return 0;
}

static int build_id_table(const struct ld *L) {
  struct zo_tokenizer *tk = L->tk;
  int64_t max_id = -1;
  for (uint32_t i = 0; tk->vocab.slots && i <= tk->vocab.mask; i++)
    if (tk->vocab.slots[i].off && tk->vocab.slots[i].val > max_id) max_id = tk->vocab.slots[i].val;
  for (size_t i = 0; i < tk->n_added; i++)
    if (tk->added[i].id > max_id) max_id = tk->added[i].id;
  tk->n_ids = (size_t)(max_id + 1);
  tk->id_tok = calloc(tk->n_ids ? tk->n_ids : 1, sizeof(*tk->id_tok));
  if (!tk->id_tok) return -ENOMEM;
  for (uint32_t i = 0; tk->vocab.slots && i <= tk->vocab.mask; i++) {
    const struct zo_tk_slot *s = &tk->vocab.slots[i];
    if (s->off) tk->id_tok[s->val] = tk->vocab.pool + s->off;
  }
  for (size_t i = 0; i < tk->n_added; i++) tk->id_tok[tk->added[i].id] = tk->added[i].content;
  return 0;
}

static int32_t config_token(const struct zo_tokenizer *tk, json_t *cfg, const char *key) {
  json_t *v = json_object_get(cfg, key);
  if (json_is_object(v)) v = json_object_get(v, "content");
  return json_is_string(v) ? zo_tokenizer_token_to_id(tk, json_string_value(v)) : -1;
}

static int load_config(struct zo_tokenizer *tk, const char *dir) {
  static const char *const eos_names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>"};
  static const char *const bos_names[] = {"<|begin_of_text|>", "<s>"};
  tk->eos_id = tk->bos_id = -1;
  json_t *cfg = NULL;
  if (dir) {
    char p[4096];
    snprintf(p, sizeof(p), "%s/tokenizer_config.json", dir);
    struct stat st;
    if (!stat(p, &st)) {
      json_error_t je;
      cfg = json_load_file(p, 0, &je);
      if (!cfg) return je.line < 0 ? zo_error(-EINVAL, "%s", je.text) : zo_error(-EINVAL, "%s:%d: %s", p, je.line, je.text);
      tk->eos_id = config_token(tk, cfg, "eos_token");
      tk->bos_id = config_token(tk, cfg, "bos_token");
      json_t *ct = json_object_get(cfg, "chat_template");
      if (json_is_array(ct)) { /* [{name, template}]: the one named "default" */
        size_t i;
        json_t *e, *found = NULL;
        json_array_foreach(ct, i, e) {
          const char *nm = json_string_value(json_object_get(e, "name"));
          if (nm && !strcmp(nm, "default")) found = json_object_get(e, "template");
        }
        ct = found;
      }
      if (json_is_string(ct) && !(tk->chat_template = strdup(json_string_value(ct)))) {
        json_decref(cfg);
        return -ENOMEM;
      }
      json_decref(cfg);
    }
  }
  for (size_t i = 0; i < 3 && tk->eos_id < 0; i++) tk->eos_id = zo_tokenizer_token_to_id(tk, eos_names[i]);
  for (size_t i = 0; i < 2 && tk->bos_id < 0; i++) tk->bos_id = zo_tokenizer_token_to_id(tk, bos_names[i]);
  return 0;
}

int zo_tokenizer_load(const char *path, struct zo_tokenizer **out) {
  *out = NULL;
  struct stat st;
  if (stat(path, &st)) return zo_error(-errno, "tokenizer %s: %s", path, strerror(errno));
  const bool is_dir = S_ISDIR(st.st_mode);
  char file[4096];
  if ((size_t)snprintf(file, sizeof(file), is_dir ? "%s/tokenizer.json" : "%s", path) >= sizeof(file))
    return zo_error(-ENAMETOOLONG, "tokenizer path too long: %s", path);
  json_error_t je;
  json_t *root = json_load_file(file, 0, &je);
  if (!root) {
    const int e = access(file, R_OK) ? -errno : -EINVAL;
    /* jansson's line -1: the file could not be read (its text names it). */
    if (je.line < 0) return zo_error(e, "tokenizer %s: %s", path, je.text);
    return zo_error(e, "%s:%d:%d: %s", file, je.line, je.column, je.text);
  }
  struct zo_tokenizer *tk = calloc(1, sizeof(*tk));
  int err = -ENOMEM;
  if (!tk) goto out;
  tk->gen = zo_tk_new_gen();
  struct ld L = {tk, file};
  if (!json_is_object(root)) {
    err = refuse(&L, "(top level)", "must be an object");
    goto out;
  }
  if ((err = check_keys(&L, root, "(top level)",
                        (const char *const[]){"version", "truncation", "padding", "added_tokens", "normalizer",
                                              "pre_tokenizer", "post_processor", "decoder", "model", NULL})))
    goto out;
  for (int k = 0; k < 2; k++) {
    const char *key = k ? "padding" : "truncation";
    json_t *v = json_object_get(root, key);
    if (v && !json_is_null(v)) {
      err = refuse(&L, key, "must be null: encode would %s, which is not supported", k ? "pad" : "truncate");
      goto out;
    }
  }
  if ((err = load_model(&L, json_object_get(root, "model"))) ||
      (err = load_normalizer(&L, json_object_get(root, "normalizer"), "normalizer")) ||
      (err = load_pre_tokenizer(&L, json_object_get(root, "pre_tokenizer"), "pre_tokenizer")) ||
      (err = load_post_processor(&L, json_object_get(root, "post_processor"), "post_processor")) ||
      (err = load_decoder(&L, json_object_get(root, "decoder"), "decoder")) ||
      (err = load_added(&L, json_object_get(root, "added_tokens"))) || (err = build_id_table(&L)) ||
      (err = zo_tk_build_tries(tk)) || (err = load_config(tk, is_dir ? path : NULL)))
    goto out;
  *out = tk;
  tk = NULL;
out:
  if (err == -ENOMEM) zo_error(err, "%s: out of memory loading the tokenizer", file);
  zo_tokenizer_free(tk);
  json_decref(root);
  return err;
}
