/* The added-token tries of a Hugging Face tokenizer (see tokenizer_impl.h):
 * built by the loader (engine/text/tokenizer_load.c) from the added tokens,
 * the normalized ones as the normalizer rewrites them, and matched by the
 * encoder (engine/text/tokenizer.c) leftmost-longest. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

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

int zo_tk_trie_add(struct trie *t, const char *s, size_t n, int32_t token) {
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

size_t zo_tk_trie_longest(const struct trie *t, const char *s, size_t n, int32_t *token) {
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
/* The tries of added tokens; normalized ones are matched as the normalizer rewrites them. */
int zo_tk_build_tries(struct zo_tokenizer *tk) {
  int err = 0;
  for (size_t i = 0; i < tk->n_added && !err; i++) {
    const struct added *a = &tk->added[i];
    if (!a->normalized) {
      err = zo_tk_trie_add(&tk->trie_raw, a->content, a->len, (int32_t)i);
      continue;
    }
    char *norm;
    size_t len;
    if ((err = zo_tk_normalize(tk, a->content, a->len, &norm, &len))) break;
    err = zo_tk_trie_add(&tk->trie_norm, norm, len, (int32_t)i);
    free(norm);
  }
  return err;
}
