/* struct zo_tokenizer, shared by engine/text/tokenizer.c (encode),
 * engine/text/tokenizer_decode.c (decode), engine/text/tokenizer_trie.c (the
 * added-token tries) and engine/text/tokenizer_load.c (the loader that fills
 * it). Immutable once loaded. */
#ifndef ZO_TOKENIZER_IMPL_H
#define ZO_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer_util.h"

enum norm_kind { NORM_PREPEND, NORM_REPLACE, NORM_REPLACE_REGEX, NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD };
struct norm {
  enum norm_kind kind;
  char *a, *b;      /* Prepend: a; Replace: pattern a (literal), content b */
  size_t a_len, b_len;
  pcre2_code *re;   /* Replace with a Regex pattern */
};

enum split_behavior { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };
enum pre_kind { PRE_SPLIT, PRE_BYTELEVEL, PRE_METASPACE, PRE_DIGITS };
enum prepend_scheme { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };
struct pre {
  enum pre_kind kind;
  char rep[5];      /* Metaspace: the replacement character, UTF-8 */
  size_t rep_len;
  enum prepend_scheme scheme;
  pcre2_code *re;   /* Split's pattern; ByteLevel's GPT-2 pattern when use_regex */
  enum split_behavior behavior; /* Digits: Isolated (individual_digits) or Contiguous */
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

static inline uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1; }
static inline uint64_t pair_hash(uint64_t k) {
  k *= 0x9e3779b97f4a7c15ull;
  return k ^ (k >> 31);
}

/* engine/text/tokenizer_trie.c */
/* Adds token (an index into tk->added) under s[0, n) to a trie. Returns 0 or -ENOMEM. */
int zo_tk_trie_add(struct trie *t, const char *s, size_t n, int32_t token);
/* Longest token starting at s[0, n): its length (0 none) and index in *token. */
size_t zo_tk_trie_longest(const struct trie *t, const char *s, size_t n, int32_t *token);
/* Builds tk->trie_raw and tk->trie_norm from tk->added (the normalized ones
 * as the normalizer rewrites them). Returns 0 or -errno. */
int zo_tk_build_tries(struct zo_tokenizer *tk);

/* engine/text/tokenizer.c */
/* A number no other load got: keys the per-thread encoder caches. */
uint64_t zo_tk_new_gen(void);
/* s[0, n) as the encoder normalizes a piece (invalid UTF-8 repaired, then
 * tk's normalizers), in *out (malloc'd, *out_len bytes, not terminated).
 * Returns 0, -ENOMEM or the normalizer's -errno. */
int zo_tk_normalize(const struct zo_tokenizer *tk, const char *s, size_t n, char **out, size_t *out_len);

#endif /* ZO_TOKENIZER_IMPL_H */
