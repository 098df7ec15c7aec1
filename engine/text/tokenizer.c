/* Hugging Face tokenizer.json: encode and the lookups (see zo/tokenizer.h;
 * loading is engine/text/tokenizer_load.c, the added-token tries
 * engine/text/tokenizer_trie.c, decoding engine/text/tokenizer_decode.c).
 * The pipeline is tokenizers 0.15's, stage for stage: added tokens split out
 * of the raw text (non-normalized ones) and of each normalized piece
 * (normalized ones), the normalizer per piece, the pre-tokenizers over the
 * list of pieces, the BPE model per piece (merges by rank, lowest position
 * first among equal ranks, unk and byte fallback as BPE::merge_word does
 * them), then the post-processor's template. Each piece's ids are cached in
 * a per-thread map, so a loaded tokenizer stays immutable and shareable.
 * Invalid UTF-8 input is repaired first as from_utf8_lossy does (each maximal
 * invalid subpart becomes U+FFFD), so encode(bytes) == the reference's
 * encode(bytes.decode("utf-8", "replace")). The supported components are
 * those engine/text/tokenizer_load.c accepts; it refuses every other one. */
#include "zo/tokenizer.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "zo/common.h"

#include "tokenizer_impl.h"
#include "tokenizer_util.h"

/* ---- merges ------------------------------------------------------------- */

static const struct merge_slot *merge_find(const struct zo_tokenizer *tk, int32_t a, int32_t b) {
  if (!tk->merges) return NULL;
  const uint64_t k = pair_key(a, b);
  for (uint32_t i = (uint32_t)pair_hash(k) & tk->merge_mask;; i = (i + 1) & tk->merge_mask) {
    const struct merge_slot *s = &tk->merges[i];
    if (s->key == k) return s;
    if (!s->key) return NULL;
  }
}

/* ---- per-thread state ---------------------------------------------------- */

struct piece {
  size_t off, len;  /* bytes in work.buf */
  int32_t id;       /* >= 0: an added token, already final */
};

struct plist {
  struct piece *p;
  size_t n, cap;
};

#define CACHE_MAX_WORD 256
#define TLS_KEEP_BYTES ((size_t)64 << 20)
#define CACHE_MAX_ENTRIES (1u << 17)

struct symbol {
  int32_t id, prev, next;
  uint32_t len;     /* bytes; 0: merged into its left neighbour */
};

struct match {
  size_t start, end;
};

struct seg {
  size_t start, end;
  bool is_match;
};

struct tls {
  uint64_t gen;                   /* tokenizer the cache belongs to */
  struct zo_tk_map cache;         /* piece -> offset into cache_ids: [n, ids...] */
  int32_t *cache_ids;
  size_t cache_n, cache_cap;
  pcre2_match_data *md;
  pcre2_match_context *mctx;
  pcre2_jit_stack *jit;
  char *buf;                      /* the text's pieces, appended stage by stage */
  size_t buf_n, buf_cap;
  struct plist a, b;
  struct seg *seg;
  size_t seg_cap;
  struct symbol *sym;
  size_t sym_cap;
  uint64_t *heap;
  size_t heap_cap;
};

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static atomic_uint_fast64_t next_gen = 1;

uint64_t zo_tk_new_gen(void) { return atomic_fetch_add(&next_gen, 1); }

static void tls_destroy(void *p) {
  struct tls *t = p;
  if (!t) return;
  zo_tk_map_free(&t->cache);
  free(t->cache_ids);
  pcre2_match_data_free(t->md);
  pcre2_match_context_free(t->mctx);
  pcre2_jit_stack_free(t->jit);
  free(t->buf);
  free(t->a.p);
  free(t->b.p);
  free(t->seg);
  free(t->sym);
  free(t->heap);
  free(t);
}

static void tls_key_init(void) {
  if (pthread_key_create(&tls_key, tls_destroy)) abort();
}

static struct tls *tls_get(const struct zo_tokenizer *tk) {
  pthread_once(&tls_once, tls_key_init);
  struct tls *t = pthread_getspecific(tls_key);
  if (!t) {
    t = calloc(1, sizeof(*t));
    if (!t) return NULL;
    t->md = pcre2_match_data_create(1, NULL);
    t->mctx = pcre2_match_context_create(NULL);
    t->jit = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
    if (!t->md || !t->mctx || !t->jit || pthread_setspecific(tls_key, t)) {
      tls_destroy(t);
      return NULL;
    }
    pcre2_jit_stack_assign(t->mctx, NULL, t->jit);
  }
  if (t->gen != tk->gen) {
    zo_tk_map_clear(&t->cache);
    t->cache_n = 0;
    t->gen = tk->gen;
  }
  return t;
}

static int buf_reserve(struct tls *t, size_t more) {
  if (t->buf_n + more <= t->buf_cap) return 0;
  size_t cap = t->buf_cap ? t->buf_cap : 4096;
  while (cap < t->buf_n + more) cap *= 2;
  char *p = realloc(t->buf, cap);
  if (!p) return -ENOMEM;
  t->buf = p;
  t->buf_cap = cap;
  return 0;
}

static int plist_push(struct plist *l, size_t off, size_t len, int32_t id) {
  if (l->n == l->cap) {
    const size_t cap = l->cap ? l->cap * 2 : 256;
    struct piece *p = realloc(l->p, cap * sizeof(*p));
    if (!p) return -ENOMEM;
    l->p = p;
    l->cap = cap;
  }
  l->p[l->n++] = (struct piece){off, len, id};
  return 0;
}

static void plist_swap(struct tls *t) {
  struct plist x = t->a;
  t->a = t->b;
  t->b = x;
  t->b.n = 0;
}

static int push_ids(int32_t **ids, size_t *n_ids, size_t *cap, const int32_t *src, size_t n) {
  if (!n) return 0;
  if (*n_ids + n > *cap) {
    size_t c = *cap ? *cap : 256;
    while (c < *n_ids + n) c *= 2;
    int32_t *p = realloc(*ids, c * sizeof(*p));
    if (!p) return -ENOMEM;
    *ids = p;
    *cap = c;
  }
  memcpy(*ids + *n_ids, src, n * sizeof(*src));
  *n_ids += n;
  return 0;
}

/* ---- encode stages -------------------------------------------------------- */

/* Rust's char::is_whitespace (Unicode White_Space) for the character s[0, l). */
static bool is_white_space(const char *s, size_t l) {
  const uint8_t *u = (const uint8_t *)s;
  uint32_t c = u[0];
  if (l == 2) c = (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
  else if (l == 3) c = (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
  else if (l == 4) return false;
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Splits each non-token piece of t->a around the trie's tokens into t->b. */
static int split_added(const struct zo_tokenizer *tk, const struct trie *tr, struct tls *t) {
  for (size_t k = 0; k < t->a.n; k++) {
    const struct piece pc = t->a.p[k];
    if (pc.id >= 0 || !tr->n || !pc.len) {
      if ((pc.len || pc.id >= 0) && plist_push(&t->b, pc.off, pc.len, pc.id)) return -ENOMEM;
      continue;
    }
    const char *s = t->buf + pc.off;
    size_t start = 0;
    for (size_t i = 0; i < pc.len;) {
      const uint8_t c = (uint8_t)s[i];
      int32_t token;
      size_t m;
      if (!(tr->first[c >> 6] >> (c & 63) & 1) || !(m = zo_tk_trie_longest(tr, s + i, pc.len - i, &token))) {
        i++;
        continue;
      }
      /* lstrip and rstrip widen the match over Unicode whitespace, lstrip not
       * back past the previous match; the search goes on after the match
       * itself, as tokenizers' find_matches does. */
      const struct added *ad = &tk->added[token];
      size_t ms = i, me = i + m;
      if (ad->lstrip) {
        while (ms > start) {
          size_t b = ms - 1;
          while (b > start && ((uint8_t)s[b] & 0xC0) == 0x80) b--;
          if (!is_white_space(s + b, ms - b)) break;
          ms = b;
        }
      }
      if (ad->rstrip) {
        while (me < pc.len) {
          const size_t l = zo_tk_utf8_len((uint8_t)s[me]);
          if (!is_white_space(s + me, l)) break;
          me += l;
        }
      }
      if (ms > start && plist_push(&t->b, pc.off + start, ms - start, -1)) return -ENOMEM;
      if (plist_push(&t->b, pc.off + ms, me - ms, ad->id)) return -ENOMEM;
      i += m;
      start = me;
    }
    if (pc.len > start && plist_push(&t->b, pc.off + start, pc.len - start, -1)) return -ENOMEM;
  }
  plist_swap(t);
  return 0;
}

/* Appends s[0, n) with every occurrence of the literal a replaced by b. */
static int replace_literal(struct tls *t, size_t off, size_t n, const char *a, size_t a_len, const char *b,
                           size_t b_len) {
  size_t count = 0;
  for (size_t i = 0; i + a_len <= n;) {
    if (!memcmp(t->buf + off + i, a, a_len)) count++, i += a_len;
    else i++;
  }
  if (buf_reserve(t, n + count * b_len)) return -ENOMEM;
  const char *s = t->buf + off;
  char *o = t->buf + t->buf_n;
  size_t i = 0;
  while (i < n) {
    if (i + a_len <= n && !memcmp(s + i, a, a_len)) {
      memcpy(o, b, b_len);
      o += b_len;
      i += a_len;
    } else {
      *o++ = s[i++];
    }
  }
  t->buf_n = (size_t)(o - t->buf);
  return 0;
}

/* All matches of re in buf[off, off + n) as (start, end) pairs, like Rust's
 * find_iter (an empty match advances by one character). Returns 0 or -errno. */
static int find_matches(struct tls *t, const pcre2_code *re, size_t off, size_t n, struct match **m, size_t *nm,
                        size_t *cap) {
  *nm = 0;
  size_t pos = 0;
  zo_tk_match_limit(t->mctx, n);
  while (pos <= n) {
    const int rc = pcre2_match(re, (PCRE2_SPTR)(t->buf + off), n, pos, PCRE2_NO_UTF_CHECK, t->md, t->mctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      return zo_error(-EIO, "tokenizer: regex match failed on a %zu-byte piece: %s", n, (char *)msg);
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
    if (*nm == *cap) {
      const size_t c = *cap ? *cap * 2 : 64;
      struct match *p = realloc(*m, c * sizeof(*p));
      if (!p) return -ENOMEM;
      *m = p;
      *cap = c;
    }
    (*m)[(*nm)++] = (struct match){ov[0], ov[1]};
    if (ov[1] > ov[0]) pos = ov[1];
    else if (ov[1] < n) pos = ov[1] + zo_tk_utf8_len((uint8_t)t->buf[off + ov[1]]);
    else break;
  }
  return 0;
}

static int normalize_piece(const struct zo_tokenizer *tk, struct tls *t, size_t *off, size_t *len,
                           struct match **m, size_t *mcap) {
  for (size_t k = 0; k < tk->n_norms; k++) {
    const struct norm *nm = &tk->norms[k];
    const size_t start = t->buf_n;
    switch (nm->kind) {
    case NORM_PREPEND:
      if (!*len) continue;
      if (buf_reserve(t, nm->a_len + *len)) return -ENOMEM;
      memcpy(t->buf + t->buf_n, nm->a, nm->a_len);
      memcpy(t->buf + t->buf_n + nm->a_len, t->buf + *off, *len);
      t->buf_n += nm->a_len + *len;
      break;
    case NORM_REPLACE:
      if (replace_literal(t, *off, *len, nm->a, nm->a_len, nm->b, nm->b_len)) return -ENOMEM;
      break;
    case NORM_REPLACE_REGEX: {
      size_t n_m;
      const int err = find_matches(t, nm->re, *off, *len, m, &n_m, mcap);
      if (err) return err;
      size_t prev = 0;
      for (size_t i = 0; i <= n_m; i++) {
        const size_t s = i < n_m ? (*m)[i].start : *len, e = i < n_m ? (*m)[i].end : *len;
        if (buf_reserve(t, (s - prev) + (i < n_m ? nm->b_len : 0))) return -ENOMEM;
        memcpy(t->buf + t->buf_n, t->buf + *off + prev, s - prev);
        t->buf_n += s - prev;
        if (i < n_m) {
          memcpy(t->buf + t->buf_n, nm->b, nm->b_len);
          t->buf_n += nm->b_len;
        }
        prev = e;
      }
      break;
    }
    default: {
      utf8proc_option_t opt = UTF8PROC_STABLE;
      if (nm->kind == NORM_NFC) opt |= UTF8PROC_COMPOSE;
      if (nm->kind == NORM_NFD) opt |= UTF8PROC_DECOMPOSE;
      if (nm->kind == NORM_NFKC) opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      if (nm->kind == NORM_NFKD) opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      utf8proc_uint8_t *r = NULL;
      const utf8proc_ssize_t rn = utf8proc_map((const utf8proc_uint8_t *)t->buf + *off, (utf8proc_ssize_t)*len, &r, opt);
      if (rn < 0) return zo_error(-EIO, "tokenizer: normalizing a piece failed: %s", utf8proc_errmsg(rn));
      if (buf_reserve(t, (size_t)rn)) {
        free(r);
        return -ENOMEM;
      }
      memcpy(t->buf + t->buf_n, r, (size_t)rn);
      t->buf_n += (size_t)rn;
      free(r);
      break;
    }
    }
    *off = start;
    *len = t->buf_n - start;
  }
  return 0;
}

/* Each numeric character of buf[off, off + n) as a match of its own, as
 * tokenizers' Pattern for a char predicate (Digits: char::is_numeric). */
static int numeric_matches(const struct tls *t, size_t off, size_t n, struct match **m, size_t *nm, size_t *cap) {
  *nm = 0;
  for (size_t i = 0; i < n;) {
    const size_t l = zo_tk_utf8_len((uint8_t)t->buf[off + i]);
    if (zo_tk_is_numeric(zo_tk_utf8_cp(t->buf + off + i, l))) {
      if (*nm == *cap) {
        const size_t c = *cap ? *cap * 2 : 64;
        struct match *p = realloc(*m, c * sizeof(*p));
        if (!p) return -ENOMEM;
        *m = p;
        *cap = c;
      }
      (*m)[(*nm)++] = (struct match){i, i + l};
    }
    i += l;
  }
  return 0;
}

/* Split with a behaviour, as NormalizedString::split; empty pieces dropped.
 * The matches are p's pattern's, or for Digits its numeric characters. */
static int split_piece(struct tls *t, const struct pre *p, struct piece pc, struct match **m, size_t *mcap) {
  size_t nm;
  const int err = p->kind == PRE_DIGITS ? numeric_matches(t, pc.off, pc.len, m, &nm, mcap)
                                        : find_matches(t, p->re, pc.off, pc.len, m, &nm, mcap);
  if (err) return err;
  if (t->seg_cap < 2 * nm + 1) {
    struct seg *sg = realloc(t->seg, (2 * nm + 1) * sizeof(*sg));
    if (!sg) return -ENOMEM;
    t->seg = sg;
    t->seg_cap = 2 * nm + 1;
  }
  struct seg *sg = t->seg;
  size_t ns = 0, prev = 0;
  for (size_t i = 0; i < nm; i++) {
    if (prev != (*m)[i].start) sg[ns++] = (struct seg){prev, (*m)[i].start, p->invert};
    sg[ns++] = (struct seg){(*m)[i].start, (*m)[i].end, !p->invert};
    prev = (*m)[i].end;
  }
  if (prev != pc.len) sg[ns++] = (struct seg){prev, pc.len, p->invert};
  size_t first = 0, last = ns; /* the output: sg[first, last) */
  bool pm = false;
  switch (p->behavior) {
  case SPLIT_ISOLATED:
    break;
  case SPLIT_REMOVED: {
    size_t o = 0;
    for (size_t i = 0; i < ns; i++)
      if (!sg[i].is_match) sg[o++] = sg[i];
    last = o;
    break;
  }
  case SPLIT_CONTIGUOUS:
  case SPLIT_MERGED_PREV: {
    size_t o = 0;
    for (size_t i = 0; i < ns; i++) {
      const bool merge = p->behavior == SPLIT_CONTIGUOUS ? sg[i].is_match == pm : sg[i].is_match && !pm;
      if (merge && o) sg[o - 1].end = sg[i].end;
      else sg[o++] = sg[i];
      pm = sg[i].is_match;
    }
    last = o;
    break;
  }
  case SPLIT_MERGED_NEXT: {
    /* tokenizers folds right to left: a match joins the split to its right
     * unless that one began with a match. */
    size_t o = ns;
    for (size_t i = ns; i-- > 0;) {
      const bool im = sg[i].is_match;
      if (im && !pm && o < ns) sg[o].start = sg[i].start;
      else sg[--o] = sg[i];
      pm = im;
    }
    first = o;
    break;
  }
  }
  for (size_t i = first; i < last; i++)
    if (sg[i].end > sg[i].start &&
        plist_push(&t->b, pc.off + sg[i].start, sg[i].end - sg[i].start, -1))
      return -ENOMEM;
  return 0;
}

static int pre_tokenize(const struct zo_tokenizer *tk, struct tls *t, struct match **m, size_t *mcap) {
  const struct zo_tk_bytelevel *bl = zo_tk_bytelevel();
  for (size_t k = 0; k < tk->n_pres; k++) {
    const struct pre *p = &tk->pres[k];
    bool first = true; /* Metaspace "first": the first piece this pre-tokenizer sees that is not a token */
    for (size_t i = 0; i < t->a.n; i++) {
      struct piece pc = t->a.p[i];
      if (pc.id >= 0) {
        if (plist_push(&t->b, pc.off, pc.len, pc.id)) return -ENOMEM;
        continue;
      }
      if (p->kind == PRE_METASPACE) {
        /* ' ' becomes the replacement; the prefix; then split before each replacement. */
        const size_t start = t->buf_n;
        if (replace_literal(t, pc.off, pc.len, " ", 1, p->rep, p->rep_len)) return -ENOMEM;
        pc.off = start;
        pc.len = t->buf_n - start;
        const bool starts = pc.len >= p->rep_len && !memcmp(t->buf + pc.off, p->rep, p->rep_len);
        if (p->add_prefix_space && !starts && (p->scheme == PREPEND_ALWAYS || (p->scheme == PREPEND_FIRST && first))) {
          if (buf_reserve(t, p->rep_len + pc.len)) return -ENOMEM;
          memcpy(t->buf + t->buf_n, p->rep, p->rep_len);
          memcpy(t->buf + t->buf_n + p->rep_len, t->buf + pc.off, pc.len);
          pc.off = t->buf_n;
          pc.len += p->rep_len;
          t->buf_n += pc.len;
        }
        first = false;
      }
      if (p->kind == PRE_BYTELEVEL && p->add_prefix_space && (!pc.len || t->buf[pc.off] != ' ')) {
        if (buf_reserve(t, pc.len + 1)) return -ENOMEM;
        t->buf[t->buf_n] = ' ';
        memcpy(t->buf + t->buf_n + 1, t->buf + pc.off, pc.len);
        pc.off = t->buf_n;
        pc.len++;
        t->buf_n += pc.len;
      }
      if (p->re || p->kind == PRE_DIGITS) {
        const int err = split_piece(t, p, pc, m, mcap);
        if (err) return err;
      } else if (pc.len && plist_push(&t->b, pc.off, pc.len, -1)) {
        return -ENOMEM;
      }
    }
    plist_swap(t);
    if (p->kind != PRE_BYTELEVEL) continue;
    for (size_t i = 0; i < t->a.n; i++) {
      struct piece *pc = &t->a.p[i];
      if (pc->id >= 0) continue;
      if (buf_reserve(t, 2 * pc->len)) return -ENOMEM;
      const uint8_t *s = (const uint8_t *)t->buf + pc->off;
      char *o = t->buf + t->buf_n;
      for (size_t j = 0; j < pc->len; j++) {
        const uint8_t c = s[j];
        o[0] = bl->utf8[c][0];
        if (bl->len[c] == 2) o[1] = bl->utf8[c][1];
        o += bl->len[c];
      }
      pc->off = t->buf_n;
      pc->len = (size_t)(o - (t->buf + t->buf_n));
      t->buf_n += pc->len;
    }
  }
  return 0;
}

static int sym_reserve(struct tls *t, size_t n) {
  if (n <= t->sym_cap) return 0;
  size_t c = t->sym_cap ? t->sym_cap : 64;
  while (c < n) c *= 2;
  struct symbol *s = realloc(t->sym, c * sizeof(*s));
  if (!s) return -ENOMEM;
  t->sym = s;
  t->sym_cap = c;
  return 0;
}

/* Stale entries stay in the heap until they surface, so it may outgrow the symbols. */
static int heap_push(struct tls *t, size_t *n, uint64_t v) {
  if (*n == t->heap_cap) {
    const size_t c = t->heap_cap ? 2 * t->heap_cap : 64;
    uint64_t *p = realloc(t->heap, c * sizeof(*p));
    if (!p) return -ENOMEM;
    t->heap = p;
    t->heap_cap = c;
  }
  uint64_t *h = t->heap;
  size_t i = (*n)++;
  while (i) {
    const size_t p = (i - 1) / 2;
    if (h[p] <= v) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = v;
  return 0;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
  const uint64_t top = h[0], v = h[--*n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && h[c + 1] < h[c]) c++;
    if (v <= h[c]) break;
    h[i] = h[c];
    i = c;
  }
  if (*n) h[i] = v;
  return top;
}

/* BPE::merge_word + Word::merge_all on s[0, n); the ids into *out. */
static int bpe_word(const struct zo_tokenizer *tk, struct tls *t, const char *s, size_t n, int32_t **ids,
                    size_t *n_ids, size_t *cap) {
  if (tk->ignore_merges) {
    const struct zo_tk_slot *whole = zo_tk_map_find(&tk->vocab, s, n);
    if (whole) return push_ids(ids, n_ids, cap, &whole->val, 1);
  }
  if (sym_reserve(t, n + 1)) return -ENOMEM; /* a symbol holds one byte at least */
  struct symbol *sym = t->sym;
  size_t ns = 0;
  int32_t unk = -1;
  uint32_t unk_len = 0;
#define ADD_SYM(ID, LEN)                                                               \
  do {                                                                                 \
    sym[ns] = (struct symbol){.id = (ID), .prev = (int32_t)ns - 1, .next = -1, .len = (LEN)}; \
    if (ns) sym[ns - 1].next = (int32_t)ns;                                           \
    ns++;                                                                              \
  } while (0)
  for (size_t i = 0; i < n;) {
    const size_t l = zo_tk_utf8_len((uint8_t)s[i]);
    const struct zo_tk_slot *v = zo_tk_map_find(&tk->vocab, s + i, l);
    if (v) {
      if (unk >= 0) {
        ADD_SYM(unk, unk_len);
        unk = -1;
      }
      ADD_SYM(v->val, (uint32_t)l);
      i += l;
      continue;
    }
    if (tk->byte_fallback) {
      bool all = true;
      for (size_t j = 0; j < l; j++) all = all && tk->byte_ids[(uint8_t)s[i + j]] >= 0;
      if (all) {
        for (size_t j = 0; j < l; j++) ADD_SYM(tk->byte_ids[(uint8_t)s[i + j]], 1);
        i += l;
        continue;
      }
    }
    if (tk->unk_id >= 0) {
      if (unk >= 0 && tk->fuse_unk) {
        unk_len += (uint32_t)l;
      } else {
        if (unk >= 0) ADD_SYM(unk, unk_len);
        unk = tk->unk_id;
        unk_len = (uint32_t)l;
      }
    }
    i += l;
  }
  if (unk >= 0) ADD_SYM(unk, unk_len);
#undef ADD_SYM
  size_t nh = 0;
  for (size_t i = 0; i + 1 < ns; i++) {
    const struct merge_slot *mg = merge_find(tk, sym[i].id, sym[i + 1].id);
    if (mg && heap_push(t, &nh, (uint64_t)mg->rank << 32 | i)) return -ENOMEM;
  }
  while (nh) {
    const uint64_t top = heap_pop(t->heap, &nh);
    const uint32_t rank = (uint32_t)(top >> 32), pos = (uint32_t)top;
    struct symbol *cur = &sym[pos];
    if (!cur->len || cur->next < 0) continue;
    struct symbol *right = &sym[cur->next];
    const struct merge_slot *mg = merge_find(tk, cur->id, right->id);
    if (!mg || mg->rank != rank) continue;
    cur->id = mg->new_id;
    cur->len += right->len;
    right->len = 0;
    cur->next = right->next;
    if (right->next >= 0) sym[right->next].prev = (int32_t)pos;
    if (cur->prev >= 0) {
      const struct merge_slot *pm = merge_find(tk, sym[cur->prev].id, cur->id);
      if (pm && heap_push(t, &nh, (uint64_t)pm->rank << 32 | (uint32_t)cur->prev)) return -ENOMEM;
    }
    if (cur->next >= 0) {
      const struct merge_slot *nmg = merge_find(tk, cur->id, sym[cur->next].id);
      if (nmg && heap_push(t, &nh, (uint64_t)nmg->rank << 32 | pos)) return -ENOMEM;
    }
  }
  for (size_t i = 0; i < ns; i++)
    if (sym[i].len && push_ids(ids, n_ids, cap, &sym[i].id, 1)) return -ENOMEM;
  return 0;
}

static int model_piece(const struct zo_tokenizer *tk, struct tls *t, const char *s, size_t n, int32_t **ids,
                       size_t *n_ids, size_t *cap) {
  if (n > CACHE_MAX_WORD) return bpe_word(tk, t, s, n, ids, n_ids, cap);
  const struct zo_tk_slot *hit = zo_tk_map_find(&t->cache, s, n);
  if (hit) return push_ids(ids, n_ids, cap, t->cache_ids + hit->val + 1, (size_t)t->cache_ids[hit->val]);
  const size_t first = *n_ids;
  const int err = bpe_word(tk, t, s, n, ids, n_ids, cap);
  if (err) return err;
  const size_t cnt = *n_ids - first;
  if (t->cache.n >= CACHE_MAX_ENTRIES || t->cache_n + cnt + 1 > (size_t)INT32_MAX) {
    zo_tk_map_clear(&t->cache);
    t->cache_n = 0;
  }
  if (t->cache_n + cnt + 1 > t->cache_cap) {
    size_t c = t->cache_cap ? t->cache_cap * 2 : 65536;
    while (c < t->cache_n + cnt + 1) c *= 2;
    int32_t *p = realloc(t->cache_ids, c * sizeof(*p));
    if (!p) return 0; /* the cache is an optimisation: no room, no entry */
    t->cache_ids = p;
    t->cache_cap = c;
  }
  if (zo_tk_map_put(&t->cache, s, n, (int32_t)t->cache_n)) return 0;
  t->cache_ids[t->cache_n] = (int32_t)cnt;
  if (cnt) memcpy(t->cache_ids + t->cache_n + 1, *ids + first, cnt * sizeof(int32_t));
  t->cache_n += cnt + 1;
  return 0;
}

/* Appends text[0, n) to t->buf, each maximal invalid UTF-8 subpart as U+FFFD. */
static int append_lossy(struct tls *t, const char *text, size_t n) {
  if (buf_reserve(t, n + 1)) return -ENOMEM;
  size_t i = 0;
  while (i < n) {
    const size_t v = zo_tk_utf8_valid_prefix(text + i, n - i);
    memcpy(t->buf + t->buf_n, text + i, v);
    t->buf_n += v;
    i += v;
    if (i == n) break;
    i += zo_tk_utf8_invalid_len(text + i, n - i);
    if (buf_reserve(t, (n - i) + 3 + 1)) return -ENOMEM;
    memcpy(t->buf + t->buf_n, "\xEF\xBF\xBD", 3);
    t->buf_n += 3;
  }
  return 0;
}

static int emit_pieces(const struct zo_tokenizer *tk, struct tls *t, int32_t **ids, size_t *n_ids, size_t *cap) {
  for (size_t i = 0; i < t->a.n; i++) {
    const struct piece pc = t->a.p[i];
    const int err = pc.id >= 0 ? push_ids(ids, n_ids, cap, &pc.id, 1)
                               : model_piece(tk, t, t->buf + pc.off, pc.len, ids, n_ids, cap);
    if (err) return err;
  }
  return 0;
}

int zo_tokenizer_encode(const struct zo_tokenizer *tk, const char *text, size_t n, bool add_special,
                        int32_t **ids, size_t *n_ids, size_t *cap) {
  struct tls *t = tls_get(tk);
  if (!t) return zo_error(-ENOMEM, "tokenizer: out of memory for the per-thread encoder state");
  t->buf_n = 0;
  t->a.n = t->b.n = 0;
  struct match *m = NULL;
  size_t mcap = 0;
  int err = append_lossy(t, text, n);
  if (err) goto out;
  if (t->buf_n && (err = plist_push(&t->a, 0, t->buf_n, -1))) goto out;
  if ((err = split_added(tk, &tk->trie_raw, t))) goto out;
  for (size_t i = 0; i < t->a.n; i++) {
    struct piece *pc = &t->a.p[i];
    if (pc->id < 0 && (err = normalize_piece(tk, t, &pc->off, &pc->len, &m, &mcap))) goto out;
  }
  if ((err = split_added(tk, &tk->trie_norm, t))) goto out;
  if ((err = pre_tokenize(tk, t, &m, &mcap))) goto out;
  if (!add_special || !tk->tmpl) {
    err = emit_pieces(tk, t, ids, n_ids, cap);
    goto out;
  }
  for (size_t k = 0; k < tk->n_tmpl && !err; k++) {
    if (tk->tmpl[k].sequence) err = emit_pieces(tk, t, ids, n_ids, cap);
    else err = push_ids(ids, n_ids, cap, tk->tmpl[k].ids, tk->tmpl[k].n);
  }
out:
  free(m);
  /* A thread keeps its buffers for the next text, unless this one made them huge. */
  if (t->buf_cap > TLS_KEEP_BYTES) {
    free(t->buf);
    t->buf = NULL;
    t->buf_cap = t->buf_n = 0;
  }
  struct plist *lists[2] = {&t->a, &t->b};
  for (int k = 0; k < 2; k++) {
    struct plist *l = lists[k];
    if (l->cap * sizeof(*l->p) > TLS_KEEP_BYTES) {
      free(l->p);
      l->p = NULL;
      l->cap = l->n = 0;
    }
  }
  if (t->sym_cap * sizeof(*t->sym) > TLS_KEEP_BYTES) {
    free(t->sym);
    t->sym = NULL;
    t->sym_cap = 0;
  }
  if (t->heap_cap * sizeof(*t->heap) > TLS_KEEP_BYTES) {
    free(t->heap);
    t->heap = NULL;
    t->heap_cap = 0;
  }
  if (err == -ENOMEM) zo_error(err, "tokenizer: out of memory encoding %zu bytes", n);
  return err;
}

/* ---- normalization alone (the loader's added-token tries) ----------------- */

int zo_tk_normalize(const struct zo_tokenizer *tk, const char *s, size_t n, char **out, size_t *out_len) {
  struct tls *t = tls_get(tk);
  if (!t) return -ENOMEM;
  struct match *m = NULL;
  size_t mcap = 0;
  t->buf_n = 0;
  int err = append_lossy(t, s, n);
  size_t off = 0, len = t->buf_n;
  if (!err) err = normalize_piece(tk, t, &off, &len, &m, &mcap);
  free(m);
  if (err) return err;
  char *copy = malloc(len + 1);
  if (!copy) return -ENOMEM;
  memcpy(copy, t->buf + off, len);
  *out = copy;
  *out_len = len;
  return 0;
}

/* ---- lookups --------------------------------------------------------------- */

size_t zo_tokenizer_vocab_size(const struct zo_tokenizer *tk) { return tk->n_ids; }

int32_t zo_tokenizer_token_to_id(const struct zo_tokenizer *tk, const char *token) {
  const size_t n = strlen(token);
  const struct zo_tk_slot *s = zo_tk_map_find(&tk->added_map, token, n);
  if (s) return tk->added[s->val].id;
  s = zo_tk_map_find(&tk->vocab, token, n);
  return s ? s->val : -1;
}

const char *zo_tokenizer_id_to_token(const struct zo_tokenizer *tk, int32_t id) {
  if (id < 0 || (size_t)id >= tk->n_ids) return NULL;
  return tk->id_tok[id];
}

int32_t zo_tokenizer_eos_id(const struct zo_tokenizer *tk) { return tk->eos_id; }
int32_t zo_tokenizer_bos_id(const struct zo_tokenizer *tk) { return tk->bos_id; }
const char *zo_tokenizer_chat_template(const struct zo_tokenizer *tk) { return tk->chat_template; }

void zo_tokenizer_free(struct zo_tokenizer *tk) {
  if (!tk) return;
  free(tk->path);
  zo_tk_map_free(&tk->vocab);
  free(tk->merges);
  free(tk->id_tok);
  for (size_t i = 0; i < tk->n_added; i++) free(tk->added[i].content);
  free(tk->added);
  zo_tk_map_free(&tk->added_map);
  zo_tk_map_free(&tk->special_map);
  free(tk->trie_raw.nodes);
  free(tk->trie_norm.nodes);
  for (size_t i = 0; i < tk->n_norms; i++) {
    free(tk->norms[i].a);
    free(tk->norms[i].b);
    pcre2_code_free(tk->norms[i].re);
  }
  free(tk->norms);
  for (size_t i = 0; i < tk->n_pres; i++) pcre2_code_free(tk->pres[i].re);
  free(tk->pres);
  for (size_t i = 0; i < tk->n_decs; i++) {
    free(tk->decs[i].a);
    free(tk->decs[i].b);
  }
  free(tk->decs);
  for (size_t i = 0; i < tk->n_tmpl; i++) free(tk->tmpl[i].ids);
  free(tk->tmpl);
  free(tk->chat_template);
  free(tk);
}
