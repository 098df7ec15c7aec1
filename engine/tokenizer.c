/* Hugging Face tokenizer.json: load, encode, decode (see zo/tokenizer.h).
 * The pipeline is tokenizers 0.15's, stage for stage: added tokens split out
 * of the raw text (non-normalized ones) and of each normalized piece
 * (normalized ones), the normalizer per piece, the pre-tokenizers over the
 * list of pieces, the BPE model per piece (merges by rank, lowest position
 * first among equal ranks, unk and byte fallback as BPE::merge_word does
 * them), then the post-processor's template. Each piece's ids are cached in
 * a per-thread map, so a loaded tokenizer stays immutable and shareable.
 * Invalid UTF-8 input is repaired first as from_utf8_lossy does (each maximal
 * invalid subpart becomes U+FFFD), so encode(bytes) == the reference's
 * encode(bytes.decode("utf-8", "replace")). Supported components are listed
 * in the load functions; any other type, key or option value is refused. */
#include "zo/tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utf8proc.h>

#include "zo/common.h"

#include "tokenizer_util.h"

enum norm_kind { NORM_PREPEND, NORM_REPLACE, NORM_REPLACE_REGEX, NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD };
struct norm {
  enum norm_kind kind;
  char *a, *b;      /* Prepend: a; Replace: pattern a (literal), content b */
  size_t a_len, b_len;
  pcre2_code *re;   /* Replace with a Regex pattern */
};

enum split_behavior { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };
enum pre_kind { PRE_SPLIT, PRE_BYTELEVEL, PRE_METASPACE };
enum prepend_scheme { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };
struct pre {
  enum pre_kind kind;
  char rep[5];      /* Metaspace: the replacement character, UTF-8 */
  size_t rep_len;
  enum prepend_scheme scheme;
  pcre2_code *re;   /* Split's pattern; ByteLevel's GPT-2 pattern when use_regex */
  enum split_behavior behavior;
  bool invert;
  bool add_prefix_space;
};

enum dec_kind { DEC_BYTELEVEL, DEC_REPLACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP, DEC_METASPACE };
struct dec {
  enum dec_kind kind;
  char *a, *b;      /* Replace: pattern, content */
  size_t a_len, b_len;
  char content[5];  /* Strip, Metaspace: the character, UTF-8 */
  size_t content_len, start, stop;
  bool add_prefix_space; /* Metaspace: the first token's replacements vanish */
};

struct added {
  char *content;
  size_t len;
  int32_t id;
  bool special, normalized;
  bool lstrip, rstrip;  /* the match takes the whitespace before / after it */
};

/* Byte trie over added-token contents for leftmost-longest matching. */
struct trie_node {
  int32_t child, sibling;  /* -1 none */
  int32_t token;           /* index into added, -1 when no token ends here */
  uint8_t c;
};
struct trie {
  struct trie_node *nodes; /* nodes[0]: root */
  size_t n, cap;
  uint64_t first[4];       /* bitmap of first bytes */
};

struct merge_slot {
  uint64_t key;            /* (a << 32 | b) + 1; 0 empty */
  uint32_t rank;
  int32_t new_id;
};

struct tmpl_item {
  bool sequence;           /* $A; else ids */
  int32_t *ids;
  size_t n;
};

struct zo_tokenizer {
  uint64_t gen;                   /* unique per load: keys the per-thread caches */
  char *path;
  struct zo_tk_map vocab;         /* model vocab */
  struct merge_slot *merges;
  uint32_t merge_mask;
  int32_t unk_id;                 /* -1 none */
  bool fuse_unk, byte_fallback;
  bool ignore_merges;             /* a piece that is a token is that token (tokenizers >= 0.19; 0.15 ignores the key) */
  int32_t byte_ids[256];          /* "<0xXX>" in vocab, -1 absent */
  char **id_tok;                  /* id -> token (added tokens over the model's), NULL gaps */
  size_t n_ids;
  struct added *added;
  size_t n_added;
  struct zo_tk_map added_map;     /* content -> index into added */
  struct zo_tk_map special_map;   /* contents of special tokens */
  struct trie trie_raw, trie_norm;
  struct norm *norms;
  size_t n_norms;
  struct pre *pres;
  size_t n_pres;
  struct dec *decs;
  size_t n_decs;
  bool has_decoder;
  struct tmpl_item *tmpl;         /* post-processor's single template; NULL: adds nothing */
  size_t n_tmpl;
  int32_t eos_id, bos_id;
  char *chat_template;
};

/* ---- merges ------------------------------------------------------------- */

static inline uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1; }
static inline uint64_t pair_hash(uint64_t k) {
  k *= 0x9e3779b97f4a7c15ull;
  return k ^ (k >> 31);
}

static const struct merge_slot *merge_find(const struct zo_tokenizer *tk, int32_t a, int32_t b) {
  if (!tk->merges) return NULL;
  const uint64_t k = pair_key(a, b);
  for (uint32_t i = (uint32_t)pair_hash(k) & tk->merge_mask;; i = (i + 1) & tk->merge_mask) {
    const struct merge_slot *s = &tk->merges[i];
    if (s->key == k) return s;
    if (!s->key) return NULL;
  }
}

/* ---- trie --------------------------------------------------------------- */

static int trie_node_new(struct trie *t, uint8_t c) {
  if (t->n == t->cap) {
    const size_t cap = t->cap ? t->cap * 2 : 64;
    struct trie_node *p = realloc(t->nodes, cap * sizeof(*p));
    if (!p) return -ENOMEM;
    t->nodes = p;
    t->cap = cap;
  }
  t->nodes[t->n] = (struct trie_node){.child = -1, .sibling = -1, .token = -1, .c = c};
  return (int)t->n++;
}

static int trie_add(struct trie *t, const char *s, size_t n, int32_t token) {
  if (!t->n && trie_node_new(t, 0) < 0) return -ENOMEM;
  if (!n) return 0; /* an empty token never matches */
  t->first[(uint8_t)s[0] >> 6] |= 1ull << ((uint8_t)s[0] & 63);
  int32_t node = 0;
  for (size_t i = 0; i < n; i++) {
    const uint8_t c = (uint8_t)s[i];
    int32_t ch = t->nodes[node].child;
    while (ch >= 0 && t->nodes[ch].c != c) ch = t->nodes[ch].sibling;
    if (ch < 0) {
      const int nn = trie_node_new(t, c);
      if (nn < 0) return -ENOMEM;
      t->nodes[nn].sibling = t->nodes[node].child;
      t->nodes[node].child = nn;
      ch = nn;
    }
    node = ch;
  }
  t->nodes[node].token = token;
  return 0;
}

/* Longest token starting at s[0, n): its length (0 none) and index in *token. */
static size_t trie_longest(const struct trie *t, const char *s, size_t n, int32_t *token) {
  size_t best = 0;
  int32_t node = 0;
  for (size_t i = 0; i < n; i++) {
    int32_t ch = t->nodes[node].child;
    while (ch >= 0 && t->nodes[ch].c != (uint8_t)s[i]) ch = t->nodes[ch].sibling;
    if (ch < 0) break;
    node = ch;
    if (t->nodes[node].token >= 0) {
      best = i + 1;
      *token = t->nodes[node].token;
    }
  }
  return best;
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
      if (!(tr->first[c >> 6] >> (c & 63) & 1) || !(m = trie_longest(tr, s + i, pc.len - i, &token))) {
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

/* Split with a behaviour, as NormalizedString::split; empty pieces dropped. */
static int split_piece(struct tls *t, const struct pre *p, struct piece pc, struct match **m, size_t *mcap) {
  size_t nm;
  const int err = find_matches(t, p->re, pc.off, pc.len, m, &nm, mcap);
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
      if (p->re) {
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

/* ---- decode --------------------------------------------------------------- */

struct span {
  size_t off, len;
};
struct dbuf {
  char *p;
  size_t n, cap;
  struct span *a, *b;
  size_t na, nb, cap_s;
};

static int dbuf_reserve(struct dbuf *d, size_t more) {
  if (d->n + more <= d->cap) return 0;
  size_t cap = d->cap ? d->cap : 256;
  while (cap < d->n + more) cap *= 2;
  char *p = realloc(d->p, cap);
  if (!p) return -ENOMEM;
  d->p = p;
  d->cap = cap;
  return 0;
}

static int dbuf_put(struct dbuf *d, const char *s, size_t n) {
  if (dbuf_reserve(d, n)) return -ENOMEM;
  memcpy(d->p + d->n, s, n);
  d->n += n;
  return 0;
}

static int span_push(struct dbuf *d, struct span sp) {
  if (d->nb == d->cap_s) {
    const size_t cap = d->cap_s * 2;
    struct span *a = realloc(d->a, cap * sizeof(*a));
    if (!a) return -ENOMEM;
    d->a = a;
    struct span *b = realloc(d->b, cap * sizeof(*b));
    if (!b) return -ENOMEM;
    d->b = b;
    d->cap_s = cap;
  }
  d->b[d->nb++] = sp;
  return 0;
}

/* Closes the output span that began at start (the end of the buffer then). */
static int dbuf_end(struct dbuf *d, size_t start) { return span_push(d, (struct span){start, d->n - start}); }

static void dbuf_swap(struct dbuf *d) {
  struct span *x = d->a;
  d->a = d->b;
  d->b = x;
  d->na = d->nb;
  d->nb = 0;
}

/* from_utf8_lossy of bytes d->p[off, off + n), appended. */
static int dbuf_put_lossy(struct dbuf *d, size_t off, size_t n) {
  if (dbuf_reserve(d, 3 * n)) return -ENOMEM;
  size_t i = 0;
  while (i < n) {
    const size_t v = zo_tk_utf8_valid_prefix(d->p + off + i, n - i);
    memmove(d->p + d->n, d->p + off + i, v);
    d->n += v;
    i += v;
    if (i == n) break;
    i += zo_tk_utf8_invalid_len(d->p + off + i, n - i);
    memcpy(d->p + d->n, "\xEF\xBF\xBD", 3);
    d->n += 3;
  }
  return 0;
}

/* The code point of the UTF-8 character at s (valid). */
static uint32_t utf8_cp(const uint8_t *s, size_t l) {
  if (l == 1) return s[0];
  if (l == 2) return (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
  if (l == 3) return (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
  return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
}

static int byte_of_fallback(const char *s, size_t n) {
  if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; i++) {
    const char c = s[i];
    const int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (x < 0) return -1;
    v = v * 16 + x;
  }
  return v;
}

static int decode_step(const struct dec *dc, struct dbuf *d) {
  const struct zo_tk_bytelevel *bl = zo_tk_bytelevel();
  int err = 0;
  switch (dc->kind) {
  case DEC_BYTELEVEL: {
    const size_t raw = d->n;
    for (size_t k = 0; k < d->na && !err; k++) {
      const struct span sp = d->a[k];
      bool all = true;
      for (size_t i = 0; i < sp.len && all;) {
        const size_t l = zo_tk_utf8_len((uint8_t)d->p[sp.off + i]);
        const uint32_t cp = utf8_cp((const uint8_t *)d->p + sp.off + i, l);
        all = cp < 324 && bl->cp_to_byte[cp] >= 0;
        i += l;
      }
      if ((err = dbuf_reserve(d, sp.len))) break;
      if (!all) {
        memcpy(d->p + d->n, d->p + sp.off, sp.len);
        d->n += sp.len;
        continue;
      }
      for (size_t i = 0; i < sp.len;) {
        const size_t l = zo_tk_utf8_len((uint8_t)d->p[sp.off + i]);
        d->p[d->n++] = (char)bl->cp_to_byte[utf8_cp((const uint8_t *)d->p + sp.off + i, l)];
        i += l;
      }
    }
    if (err) return err;
    const size_t start = d->n;
    if ((err = dbuf_put_lossy(d, raw, start - raw))) return err;
    return dbuf_end(d, start);
  }
  case DEC_REPLACE:
    for (size_t k = 0; k < d->na; k++) {
      const struct span sp = d->a[k];
      const size_t start = d->n;
      for (size_t i = 0; i < sp.len;) {
        if (i + dc->a_len <= sp.len && !memcmp(d->p + sp.off + i, dc->a, dc->a_len)) {
          if ((err = dbuf_put(d, dc->b, dc->b_len))) return err;
          i += dc->a_len;
        } else {
          if ((err = dbuf_reserve(d, 1))) return err;
          d->p[d->n++] = d->p[sp.off + i++];
        }
      }
      if ((err = dbuf_end(d, start))) return err;
    }
    return 0;
  case DEC_BYTEFALLBACK: {
    size_t k = 0;
    while (k < d->na) {
      int b = byte_of_fallback(d->p + d->a[k].off, d->a[k].len);
      if (b < 0) {
        const size_t start = d->n;
        if ((err = dbuf_reserve(d, d->a[k].len))) return err;
        memcpy(d->p + d->n, d->p + d->a[k].off, d->a[k].len);
        d->n += d->a[k].len;
        if ((err = dbuf_end(d, start))) return err;
        k++;
        continue;
      }
      const size_t start = d->n;
      size_t nb = 0;
      for (; k < d->na && (b = byte_of_fallback(d->p + d->a[k].off, d->a[k].len)) >= 0; k++, nb++) {
        if ((err = dbuf_reserve(d, 1))) return err;
        d->p[d->n++] = (char)b;
      }
      if (zo_tk_utf8_valid_prefix(d->p + start, nb) == nb) {
        if ((err = dbuf_end(d, start))) return err;
        continue;
      }
      d->n = start;
      for (size_t i = 0; i < nb; i++) {
        const size_t s = d->n;
        if ((err = dbuf_put(d, "\xEF\xBF\xBD", 3)) || (err = dbuf_end(d, s))) return err;
      }
    }
    return 0;
  }
  case DEC_METASPACE:
    for (size_t k = 0; k < d->na; k++) {
      const struct span sp = d->a[k];
      const size_t start = d->n;
      for (size_t i = 0; i < sp.len;) {
        if (i + dc->content_len <= sp.len && !memcmp(d->p + sp.off + i, dc->content, dc->content_len)) {
          if (!(k == 0 && dc->add_prefix_space) && (err = dbuf_put(d, " ", 1))) return err;
          i += dc->content_len;
        } else {
          if ((err = dbuf_reserve(d, 1))) return err;
          d->p[d->n++] = d->p[sp.off + i++];
        }
      }
      if ((err = dbuf_end(d, start))) return err;
    }
    return 0;
  case DEC_FUSE: {
    const size_t start = d->n;
    for (size_t k = 0; k < d->na; k++) {
      if ((err = dbuf_reserve(d, d->a[k].len))) return err;
      memcpy(d->p + d->n, d->p + d->a[k].off, d->a[k].len);
      d->n += d->a[k].len;
    }
    return dbuf_end(d, start);
  }
  case DEC_STRIP:
    for (size_t k = 0; k < d->na; k++) {
      struct span sp = d->a[k];
      for (size_t i = 0; i < dc->start && sp.len >= dc->content_len &&
                         !memcmp(d->p + sp.off, dc->content, dc->content_len); i++)
        sp.off += dc->content_len, sp.len -= dc->content_len;
      for (size_t i = 0; i < dc->stop && sp.len >= dc->content_len &&
                         !memcmp(d->p + sp.off + sp.len - dc->content_len, dc->content, dc->content_len); i++)
        sp.len -= dc->content_len;
      if ((err = span_push(d, sp))) return err;
    }
    return 0;
  }
  return 0;
}

int zo_tokenizer_decode(const struct zo_tokenizer *tk, const int32_t *ids, size_t n, bool skip_special,
                        char **out, size_t *len) {
  *out = NULL;
  *len = 0;
  struct dbuf d = {0};
  int err = -ENOMEM;
  d.cap_s = n + 4;
  d.a = malloc(d.cap_s * sizeof(*d.a));
  d.b = malloc(d.cap_s * sizeof(*d.b));
  if (!d.a || !d.b) goto out;
  for (size_t i = 0; i < n; i++) {
    const char *tok = zo_tokenizer_id_to_token(tk, ids[i]);
    if (!tok) continue;
    const size_t l = strlen(tok);
    if (skip_special && zo_tk_map_find(&tk->special_map, tok, l)) continue;
    const size_t start = d.n;
    if (dbuf_put(&d, tok, l) || dbuf_end(&d, start)) goto out;
  }
  dbuf_swap(&d);
  for (size_t k = 0; k < tk->n_decs; k++) {
    if ((err = decode_step(&tk->decs[k], &d))) goto out;
    dbuf_swap(&d);
  }
  err = -ENOMEM;
  /* The decoder's strings joined ("" between them), or the tokens joined with " " without one. */
  const size_t start = d.n;
  for (size_t k = 0; k < d.na; k++) {
    if (k && !tk->has_decoder && dbuf_put(&d, " ", 1)) goto out;
    if (dbuf_reserve(&d, d.a[k].len + 1)) goto out;
    memcpy(d.p + d.n, d.p + d.a[k].off, d.a[k].len);
    d.n += d.a[k].len;
  }
  if (dbuf_reserve(&d, 1)) goto out;
  *len = d.n - start;
  *out = malloc(*len + 1);
  if (!*out) goto out;
  memcpy(*out, d.p + start, *len);
  (*out)[*len] = '\0';
  err = 0;
out:
  free(d.p);
  free(d.a);
  free(d.b);
  if (err == -ENOMEM) {
    *len = 0;
    zo_error(err, "tokenizer: out of memory decoding %zu ids", n);
  }
  return err;
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
  return refuse(L, where, "type \"%s\" is not supported (supported: Sequence, ByteLevel, Split, Metaspace)", t);
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
    if (!sa || !sb || !sn) {
      free(joined);
      return refuse(L, "model.merges", "entry %zu: \"%.*s\" is not in model.vocab", r,
                    (int)(!sa ? la : !sb ? lb : la + lb), !sa ? a : !sb ? b : "(the merged token)");
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

/* The tries of added tokens; normalized ones are matched as the normalizer rewrites them. */
static int build_tries(struct zo_tokenizer *tk) {
  struct tls *t = tls_get(tk);
  if (!t) return -ENOMEM;
  struct match *m = NULL;
  size_t mcap = 0;
  int err = 0;
  for (size_t i = 0; i < tk->n_added && !err; i++) {
    const struct added *a = &tk->added[i];
    if (!a->normalized) {
      err = trie_add(&tk->trie_raw, a->content, a->len, (int32_t)i);
      continue;
    }
    t->buf_n = 0;
    if ((err = append_lossy(t, a->content, a->len))) break;
    size_t off = 0, len = t->buf_n;
    if ((err = normalize_piece(tk, t, &off, &len, &m, &mcap))) break;
    char *copy = malloc(len + 1);
    if (!copy) {
      err = -ENOMEM;
      break;
    }
    memcpy(copy, t->buf + off, len);
    err = trie_add(&tk->trie_norm, copy, len, (int32_t)i);
    free(copy);
  }
  free(m);
  return err;
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
      if (!cfg) return zo_error(-EINVAL, "%s:%d: %s", p, je.line, je.text);
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
    return zo_error(e, "%s:%d:%d: %s", file, je.line, je.column, je.text);
  }
  struct zo_tokenizer *tk = calloc(1, sizeof(*tk));
  int err = -ENOMEM;
  if (!tk) goto out;
  tk->gen = atomic_fetch_add(&next_gen, 1);
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
      (err = build_tries(tk)) || (err = load_config(tk, is_dir ? path : NULL)))
    goto out;
  *out = tk;
  tk = NULL;
out:
  if (err == -ENOMEM) zo_error(err, "%s: out of memory loading the tokenizer", file);
  zo_tokenizer_free(tk);
  json_decref(root);
  return err;
}
