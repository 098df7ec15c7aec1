/* `zoffload tokenizer train`: byte-level BPE learned from text files, written
 * as a Hugging Face tokenizer.json (see zo_tokenizer_train in zo/tokenizer.h).
 * Words are the split pattern's pieces, counted once per distinct string; a
 * merge rewrites only the words that hold its pair (an index per pair), and
 * the next merge comes from a max-heap of pair counts updated lazily (an entry
 * whose count went down is pushed again with the new count when it surfaces).
 * Deliberately not done: reproducing tokenizers' BpeTrainer merge for merge;
 * what is exact is that the file encodes the same here and there. */
#include "zo/tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo/common.h"
#include "zo/fsutil.h"

#include "tokenizer_util.h"

#define LLAMA3_PATTERN \
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

struct word {
  int32_t *sym;   /* token ids */
  uint32_t n;     /* symbols */
  int64_t count;  /* occurrences in the corpus */
  uint32_t stamp; /* the last merge that visited it */
};

struct pairs {
  struct pslot { uint64_t key; int64_t count; int32_t *words; uint32_t n_words, cap_words; } *s;
  uint32_t mask, n;
};

struct hentry {
  int64_t count;
  int32_t a, b;
};

struct trainer {
  struct word *w;
  size_t n_w;
  struct pairs p;
  struct hentry *heap;
  size_t n_heap, cap_heap;
  char **tok;        /* id -> raw bytes (NUL-terminated copies; bytes may hold NUL, so with len) */
  uint32_t *tok_len;
  size_t n_tok, cap_tok;
  struct zo_tk_map tok_ids;
  int32_t (*merges)[2];
  size_t n_merges, cap_merges;
};

static inline uint64_t pkey(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1; }

static struct pslot *pair_slot(struct pairs *p, int32_t a, int32_t b, bool create) {
  const uint64_t k = pkey(a, b);
  if (create && (!p->s || (size_t)(p->n + 1) * 2 > (size_t)p->mask + 1)) {
    const uint32_t cap = p->s ? 2 * (p->mask + 1) : 1024;
    struct pslot *s = calloc(cap, sizeof(*s));
    if (!s) return NULL;
    for (uint32_t i = 0; p->s && i <= p->mask; i++) {
      if (!p->s[i].key) continue;
      uint32_t j = (uint32_t)((p->s[i].key * 0x9e3779b97f4a7c15ull) >> 32) & (cap - 1);
      while (s[j].key) j = (j + 1) & (cap - 1);
      s[j] = p->s[i];
    }
    free(p->s);
    p->s = s;
    p->mask = cap - 1;
  }
  if (!p->s) return NULL;
  uint32_t i = (uint32_t)((k * 0x9e3779b97f4a7c15ull) >> 32) & p->mask;
  while (p->s[i].key && p->s[i].key != k) i = (i + 1) & p->mask;
  if (!p->s[i].key) {
    if (!create) return NULL;
    p->s[i].key = k;
    p->n++;
  }
  return &p->s[i];
}

static int pair_add_word(struct pslot *s, int32_t w) {
  if (s->n_words && s->words[s->n_words - 1] == w) return 0;
  if (s->n_words == s->cap_words) {
    const uint32_t cap = s->cap_words ? 2 * s->cap_words : 4;
    int32_t *p = realloc(s->words, cap * sizeof(*p));
    if (!p) return -ENOMEM;
    s->words = p;
    s->cap_words = cap;
  }
  s->words[s->n_words++] = w;
  return 0;
}

/* Max-heap by count, then the smaller (a, b). */
static inline bool hbefore(const struct hentry *x, const struct hentry *y) {
  if (x->count != y->count) return x->count > y->count;
  if (x->a != y->a) return x->a < y->a;
  return x->b < y->b;
}

static int heap_push(struct trainer *t, struct hentry e) {
  if (t->n_heap == t->cap_heap) {
    const size_t cap = t->cap_heap ? 2 * t->cap_heap : 4096;
    struct hentry *h = realloc(t->heap, cap * sizeof(*h));
    if (!h) return -ENOMEM;
    t->heap = h;
    t->cap_heap = cap;
  }
  size_t i = t->n_heap++;
  while (i && hbefore(&e, &t->heap[(i - 1) / 2])) {
    t->heap[i] = t->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  t->heap[i] = e;
  return 0;
}

static struct hentry heap_pop(struct trainer *t) {
  const struct hentry top = t->heap[0], e = t->heap[--t->n_heap];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= t->n_heap) break;
    if (c + 1 < t->n_heap && hbefore(&t->heap[c + 1], &t->heap[c])) c++;
    if (!hbefore(&t->heap[c], &e)) break;
    t->heap[i] = t->heap[c];
    i = c;
  }
  if (t->n_heap) t->heap[i] = e;
  return top;
}

static int tok_add(struct trainer *t, const char *s, size_t n, int32_t *id) {
  const struct zo_tk_slot *hit = zo_tk_map_find(&t->tok_ids, s, n);
  if (hit) {
    *id = hit->val;
    return 0;
  }
  if (t->n_tok == t->cap_tok) {
    const size_t cap = t->cap_tok ? 2 * t->cap_tok : 1024;
    char **p = realloc(t->tok, cap * sizeof(*p));
    if (!p) return -ENOMEM;
    t->tok = p;
    uint32_t *l = realloc(t->tok_len, cap * sizeof(*l));
    if (!l) return -ENOMEM;
    t->tok_len = l;
    t->cap_tok = cap;
  }
  char *c = malloc(n + 1);
  if (!c) return -ENOMEM;
  memcpy(c, s, n);
  c[n] = '\0';
  if (zo_tk_map_put(&t->tok_ids, s, n, (int32_t)t->n_tok)) {
    free(c);
    return -ENOMEM;
  }
  t->tok[t->n_tok] = c;
  t->tok_len[t->n_tok] = (uint32_t)n;
  *id = (int32_t)t->n_tok++;
  return 0;
}

/* Adds (sign +1) or removes (-1) the pairs of word wi to the counts. */
static int word_pairs(struct trainer *t, size_t wi, int sign, int32_t only_with) {
  const struct word *w = &t->w[wi];
  for (uint32_t i = 0; i + 1 < w->n; i++) {
    struct pslot *s = pair_slot(&t->p, w->sym[i], w->sym[i + 1], sign > 0);
    if (!s) {
      if (sign > 0) return -ENOMEM;
      continue;
    }
    s->count += sign * w->count;
    if (sign > 0 && (only_with < 0 || w->sym[i] == only_with || w->sym[i + 1] == only_with) &&
        pair_add_word(s, (int32_t)wi))
      return -ENOMEM;
  }
  return 0;
}

static void trainer_free(struct trainer *t) {
  for (size_t i = 0; i < t->n_w; i++) free(t->w[i].sym);
  free(t->w);
  for (uint32_t i = 0; t->p.s && i <= t->p.mask; i++) free(t->p.s[i].words);
  free(t->p.s);
  free(t->heap);
  for (size_t i = 0; i < t->n_tok; i++) free(t->tok[i]);
  free(t->tok);
  free(t->tok_len);
  zo_tk_map_free(&t->tok_ids);
  free(t->merges);
}

/* Counts the pattern's pieces of every file into words. */
static int count_words(struct trainer *t, const char *const *files, size_t n_files, const pcre2_code *re) {
  struct zo_tk_map idx = {0};
  int err = 0;
  pcre2_match_data *md = pcre2_match_data_create(1, NULL);
  pcre2_match_context *mctx = pcre2_match_context_create(NULL);
  pcre2_jit_stack *js = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
  if (!md || !mctx || !js) {
    err = -ENOMEM;
    goto out;
  }
  pcre2_jit_stack_assign(mctx, NULL, js);
  size_t cap_w = 0;
  for (size_t f = 0; f < n_files && !err; f++) {
    void *data;
    size_t n;
    if ((err = zo_read_file(files[f], &data, &n, (size_t)1 << 34))) {
      zo_error(err, "tokenizer train: %s: %s", files[f], strerror(-err));
      break;
    }
    /* Repair invalid UTF-8 as encode does. */
    char *text = data;
    if (zo_tk_utf8_valid_prefix(text, n) != n) {
      char *fixed = malloc(3 * n + 1);
      if (!fixed) {
        free(data);
        err = -ENOMEM;
        break;
      }
      size_t i = 0, o = 0;
      while (i < n) {
        const size_t v = zo_tk_utf8_valid_prefix(text + i, n - i);
        memcpy(fixed + o, text + i, v);
        o += v, i += v;
        if (i == n) break;
        i += zo_tk_utf8_invalid_len(text + i, n - i);
        memcpy(fixed + o, "\xEF\xBF\xBD", 3);
        o += 3;
      }
      free(data);
      text = fixed;
      n = o;
    }
    size_t pos = 0;
    zo_tk_match_limit(mctx, n);
    while (pos < n && !err) {
      const int rc = pcre2_match(re, (PCRE2_SPTR)text, n, pos, PCRE2_NO_UTF_CHECK, md, mctx);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        err = zo_error(-EIO, "tokenizer train: %s: regex match failed (PCRE2 error %d)", files[f], rc);
        break;
      }
      const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
      const size_t s = ov[0], e = ov[1];
      pos = e > s ? e : e + zo_tk_utf8_len((uint8_t)text[e]);
      if (e == s) continue;
      const struct zo_tk_slot *hit = zo_tk_map_find(&idx, text + s, e - s);
      if (hit) {
        t->w[hit->val].count++;
        continue;
      }
      if (t->n_w == cap_w) {
        cap_w = cap_w ? 2 * cap_w : 65536;
        struct word *w = realloc(t->w, cap_w * sizeof(*w));
        if (!w) {
          err = -ENOMEM;
          break;
        }
        t->w = w;
      }
      struct word *w = &t->w[t->n_w];
      *w = (struct word){.sym = malloc((e - s) * sizeof(int32_t)), .n = (uint32_t)(e - s), .count = 1};
      if (!w->sym || zo_tk_map_put(&idx, text + s, e - s, (int32_t)t->n_w)) {
        free(w->sym);
        err = -ENOMEM;
        break;
      }
      for (size_t i = s; i < e; i++) w->sym[i - s] = (uint8_t)text[i];
      t->n_w++;
    }
    free(text);
  }
out:
  zo_tk_map_free(&idx);
  pcre2_match_data_free(md);
  pcre2_match_context_free(mctx);
  pcre2_jit_stack_free(js);
  return err;
}

static int learn(struct trainer *t, size_t n_target, int64_t min_freq) {
  for (size_t i = 0; i < t->n_w; i++)
    if (word_pairs(t, i, +1, -1)) return -ENOMEM;
  /* A corpus of one-byte words has no pair at all: no table, no merge. */
  for (uint32_t i = 0; t->p.s && i <= t->p.mask; i++) {
    const struct pslot *s = &t->p.s[i];
    if (s->key && s->count > 0 &&
        heap_push(t, (struct hentry){s->count, (int32_t)((s->key - 1) >> 32), (int32_t)(uint32_t)(s->key - 1)}))
      return -ENOMEM;
  }
  uint32_t stamp = 0;
  int32_t *touched = NULL;
  size_t n_touched = 0, cap_touched = 0;
  int err = 0;
  char *joined = NULL;
  while (t->n_tok < n_target && t->n_heap && !err) {
    const struct hentry top = heap_pop(t);
    struct pslot *s = pair_slot(&t->p, top.a, top.b, false);
    const int64_t now = s ? s->count : 0;
    if (now != top.count) {
      if (now > 0 && (err = heap_push(t, (struct hentry){now, top.a, top.b}))) break;
      continue;
    }
    if (now < min_freq) break;
    const size_t la = t->tok_len[top.a], lb = t->tok_len[top.b];
    char *j = realloc(joined, la + lb);
    if (!j) {
      err = -ENOMEM;
      break;
    }
    joined = j;
    memcpy(joined, t->tok[top.a], la);
    memcpy(joined + la, t->tok[top.b], lb);
    int32_t c;
    if ((err = tok_add(t, joined, la + lb, &c))) break;
    if (t->n_merges == t->cap_merges) {
      t->cap_merges = t->cap_merges ? 2 * t->cap_merges : 1024;
      int32_t(*m)[2] = realloc(t->merges, t->cap_merges * sizeof(*m));
      if (!m) {
        err = -ENOMEM;
        break;
      }
      t->merges = m;
    }
    t->merges[t->n_merges][0] = top.a;
    t->merges[t->n_merges][1] = top.b;
    t->n_merges++;
    stamp++;
    /* The pair's word list may grow while we walk it (a word holding the new
     * pair next to itself), so walk a copy of its length. */
    const uint32_t n_words = s->n_words;
    for (uint32_t k = 0; k < n_words && !err; k++) {
      s = pair_slot(&t->p, top.a, top.b, false);
      const int32_t wi = s->words[k];
      struct word *w = &t->w[wi];
      if (w->stamp == stamp) continue;
      w->stamp = stamp;
      bool has = false;
      for (uint32_t i = 0; i + 1 < w->n && !has; i++) has = w->sym[i] == top.a && w->sym[i + 1] == top.b;
      if (!has) continue;
      word_pairs(t, (size_t)wi, -1, -1);
      uint32_t o = 0;
      for (uint32_t i = 0; i < w->n;) {
        if (i + 1 < w->n && w->sym[i] == top.a && w->sym[i + 1] == top.b) {
          w->sym[o++] = c;
          i += 2;
        } else {
          w->sym[o++] = w->sym[i++];
        }
      }
      w->n = o;
      if ((err = word_pairs(t, (size_t)wi, +1, c))) break;
      if (n_touched == cap_touched) {
        cap_touched = cap_touched ? 2 * cap_touched : 1024;
        int32_t *p = realloc(touched, cap_touched * sizeof(*p));
        if (!p) {
          err = -ENOMEM;
          break;
        }
        touched = p;
      }
      touched[n_touched++] = wi;
    }
    /* Push the pairs holding the new token once each, with their final counts. */
    for (size_t k = 0; k < n_touched && !err; k++) {
      const struct word *w = &t->w[touched[k]];
      for (uint32_t i = 0; i + 1 < w->n && !err; i++) {
        if (w->sym[i] != c && w->sym[i + 1] != c) continue;
        const struct pslot *ps = pair_slot(&t->p, w->sym[i], w->sym[i + 1], false);
        if (ps && ps->count > 0) err = heap_push(t, (struct hentry){ps->count, w->sym[i], w->sym[i + 1]});
      }
    }
    n_touched = 0;
  }
  free(joined);
  free(touched);
  return err;
}

/* A token's bytes in GPT-2's byte-to-unicode spelling. */
static char *bytelevel_str(const char *s, size_t n) {
  const struct zo_tk_bytelevel *bl = zo_tk_bytelevel();
  char *o = malloc(2 * n + 1), *p = o;
  if (!o) return NULL;
  for (size_t i = 0; i < n; i++) {
    const uint8_t c = (uint8_t)s[i];
    memcpy(p, bl->utf8[c], bl->len[c]);
    p += bl->len[c];
  }
  *p = '\0';
  return o;
}

static json_t *added_token(int32_t id, const char *content) {
  return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content, "single_word", 0, "lstrip", 0,
                   "rstrip", 0, "normalized", 0, "special", 1);
}

static int write_json(json_t *j, const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  char *text = json_dumps(j, JSON_INDENT(1));
  if (!text) return zo_error(-ENOMEM, "tokenizer train: out of memory writing %s", path);
  const int err = zo_write_file_atomic(path, text, strlen(text));
  free(text);
  if (err) return zo_error(err, "tokenizer train: writing %s: %s", path, strerror(-err));
  return 0;
}

/* The special tokens: each non-empty, valid UTF-8 (tokenizer.json is JSON
 * text) and different from "<|endoftext|>" and from each other (two ids of
 * one string: the file's own encode would refuse it). */
static int check_specials(const struct zo_tokenizer_train_opts *opts) {
  for (size_t i = 0; i < opts->n_specials; i++) {
    const char *sp = opts->specials[i];
    const size_t n = strlen(sp);
    if (!n) return zo_error(-EINVAL, "tokenizer train: --special %zu is empty (a special token is a non-empty string)",
                            i + 1);
    const size_t v = zo_tk_utf8_valid_prefix(sp, n);
    if (v != n)
      return zo_error(-EINVAL, "tokenizer train: --special %zu (\"%.*s...\") is not valid UTF-8 (byte %zu, 0x%02x): "
                               "tokenizer.json holds text; give the token in UTF-8",
                      i + 1, (int)v, sp, v, (unsigned)(uint8_t)sp[v]);
    if (!strcmp(sp, "<|endoftext|>"))
      return zo_error(-EINVAL, "tokenizer train: --special \"%s\" is the end-of-text token every trained tokenizer "
                               "already has", sp);
    for (size_t j = 0; j < i; j++)
      if (!strcmp(sp, opts->specials[j]))
        return zo_error(-EINVAL, "tokenizer train: --special \"%s\" is given twice (%zu and %zu); each special token "
                                 "once", sp, j + 1, i + 1);
  }
  return 0;
}

int zo_tokenizer_train(const char *const *files, size_t n_files, const struct zo_tokenizer_train_opts *opts,
                       const char *out_dir, size_t *n_vocab) {
  const char *pname = opts->pattern ? opts->pattern : "llama3";
  const bool gpt2 = !strcmp(pname, "gpt2");
  if (!gpt2 && strcmp(pname, "llama3"))
    return zo_error(-EINVAL, "tokenizer train: pattern \"%s\" is not one of llama3, gpt2", pname);
  const size_t n_special = 1 + opts->n_specials;
  if (opts->vocab_size < 256 + n_special || opts->vocab_size > (size_t)INT32_MAX)
    return zo_error(-EINVAL, "tokenizer train: vocab size %zu must be at least 256 bytes + %zu special tokens",
                    opts->vocab_size, n_special);
  int err = check_specials(opts);
  if (err) return err;
  pcre2_code *re = zo_tk_regex_compile(gpt2 ? ZO_TK_GPT2_PATTERN : LLAMA3_PATTERN, false, "tokenizer train");
  if (!re) return -ENOTSUP;
  struct trainer t = {0};
  json_t *root = NULL, *cfg = NULL;
  for (int b = 0; b < 256 && !err; b++) {
    const char c = (char)b;
    int32_t id;
    err = tok_add(&t, &c, 1, &id);
  }
  if (!err) err = count_words(&t, files, n_files, re);
  if (!err && t.n_w == 0)
    err = zo_error(-EINVAL, "tokenizer train: the %zu input file(s) (%s%s) hold no text to learn from", n_files,
                   files[0], n_files > 1 ? ", ..." : "");
  if (!err) err = learn(&t, opts->vocab_size - n_special, opts->min_frequency ? (int64_t)opts->min_frequency : 2);
  if (err) goto out;
  err = -ENOMEM;
  json_t *vocab = json_object(), *merges = json_array(), *added = json_array();
  root = json_object();
  if (!vocab || !merges || !added || !root) {
    json_decref(vocab), json_decref(merges), json_decref(added);
    goto out;
  }
  for (size_t i = 0; i < t.n_tok; i++) {
    char *s = bytelevel_str(t.tok[i], t.tok_len[i]);
    if (!s || json_object_set_new(vocab, s, json_integer((json_int_t)i))) {
      free(s);
      goto out_parts;
    }
    free(s);
  }
  for (size_t i = 0; i < t.n_merges; i++) {
    char *a = bytelevel_str(t.tok[t.merges[i][0]], t.tok_len[t.merges[i][0]]);
    char *b = bytelevel_str(t.tok[t.merges[i][1]], t.tok_len[t.merges[i][1]]);
    char *m = a && b ? malloc(strlen(a) + strlen(b) + 2) : NULL;
    if (m) sprintf(m, "%s %s", a, b);
    const int bad = !m || json_array_append_new(merges, json_string(m));
    free(a), free(b), free(m);
    if (bad) goto out_parts;
  }
  for (size_t i = 0; i < n_special; i++) {
    const char *sp = i ? opts->specials[i - 1] : "<|endoftext|>";
    const json_int_t id = (json_int_t)(t.n_tok + i);
    if (zo_tk_map_find(&t.tok_ids, sp, strlen(sp))) { /* a learned token may spell it */
      err = zo_error(-EINVAL, "tokenizer train: special token \"%s\" is also a learned token", sp);
      goto out_parts;
    }
    if (json_object_set_new(vocab, sp, json_integer(id)) || json_array_append_new(added, added_token((int32_t)id, sp)))
      goto out_parts;
  }
  json_t *bytelevel = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1,
                                "use_regex", gpt2);
  json_t *pre = gpt2 ? json_incref(bytelevel)
                     : json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, O]}", "type", "Sequence", "pretokenizers", "type",
                                 "Split", "pattern", "Regex", LLAMA3_PATTERN, "behavior", "Isolated", "invert", 0,
                                 bytelevel);
  json_t *model = json_pack("{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:o, s:o}", "type", "BPE", "dropout", "unk_token",
                            "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0,
                            "vocab", vocab, "merges", merges);
  vocab = merges = NULL;
  if (!bytelevel || !pre || !model ||
      json_object_set_new(root, "version", json_string("1.0")) || json_object_set_new(root, "truncation", json_null()) ||
      json_object_set_new(root, "padding", json_null()) || json_object_set_new(root, "added_tokens", added) ||
      json_object_set_new(root, "normalizer", json_null()) || json_object_set_new(root, "pre_tokenizer", pre) ||
      json_object_set_new(root, "post_processor", json_incref(bytelevel)) ||
      json_object_set_new(root, "decoder", json_incref(bytelevel)) || json_object_set_new(root, "model", model)) {
    json_decref(bytelevel);
    added = NULL;
    goto out_parts;
  }
  added = NULL;
  json_decref(bytelevel);
  cfg = json_pack("{s:s, s:s, s:s, s:b, s:b, s:I}", "tokenizer_class", "PreTrainedTokenizerFast", "bos_token",
                  "<|endoftext|>", "eos_token", "<|endoftext|>", "clean_up_tokenization_spaces", 0, "add_prefix_space",
                  0, "model_max_length", (json_int_t)1 << 40);
  if (!cfg) goto out_parts;
  if ((err = zo_mkdir_p(out_dir, 0755))) {
    zo_error(err, "tokenizer train: cannot create %s: %s", out_dir, strerror(-err));
    goto out_parts;
  }
  if ((err = write_json(root, out_dir, "tokenizer.json")) || (err = write_json(cfg, out_dir, "tokenizer_config.json")))
    goto out_parts;
  if (n_vocab) *n_vocab = t.n_tok + n_special;
  err = 0;
out_parts:
  json_decref(vocab);
  json_decref(merges);
  json_decref(added);
out:
  if (err == -ENOMEM) zo_error(err, "tokenizer train: out of memory");
  json_decref(root);
  json_decref(cfg);
  pcre2_code_free(re);
  trainer_free(&t);
  return err;
}
