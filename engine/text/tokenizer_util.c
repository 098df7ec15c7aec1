/* See tokenizer_util.h. */
#include "tokenizer_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo/common.h"

void zo_tk_map_free(struct zo_tk_map *m) {
  free(m->slots);
  free(m->pool);
  memset(m, 0, sizeof(*m));
}

void zo_tk_map_clear(struct zo_tk_map *m) {
  if (m->slots) memset(m->slots, 0, ((size_t)m->mask + 1) * sizeof(*m->slots));
  m->n = 0;
  m->pool_n = 0;
}

/* Keys live at pool offsets >= 1, so off == 0 marks an empty slot. */
static inline bool slot_empty(const struct zo_tk_slot *s) { return s->off == 0; }

struct zo_tk_slot *zo_tk_map_find(const struct zo_tk_map *m, const char *key, size_t n) {
  if (!m->slots) return NULL;
  const uint64_t h = zo_tk_hash(key, n);
  for (uint32_t i = (uint32_t)h & m->mask;; i = (i + 1) & m->mask) {
    struct zo_tk_slot *s = &m->slots[i];
    if (slot_empty(s)) return NULL;
    if (s->h == h && s->len == n && !memcmp(m->pool + s->off, key, n)) return s;
  }
}

static int map_grow(struct zo_tk_map *m) {
  const uint32_t cap = m->slots ? (m->mask + 1) * 2 : 64;
  struct zo_tk_slot *slots = calloc(cap, sizeof(*slots));
  if (!slots) return -ENOMEM;
  if (m->slots) {
    for (uint32_t i = 0; i <= m->mask; i++) {
      const struct zo_tk_slot *s = &m->slots[i];
      if (slot_empty(s)) continue;
      uint32_t j = (uint32_t)s->h & (cap - 1);
      while (!slot_empty(&slots[j])) j = (j + 1) & (cap - 1);
      slots[j] = *s;
    }
  }
  free(m->slots);
  m->slots = slots;
  m->mask = cap - 1;
  return 0;
}

int zo_tk_map_put(struct zo_tk_map *m, const char *key, size_t n, int32_t val) {
  struct zo_tk_slot *s = zo_tk_map_find(m, key, n);
  if (s) {
    s->val = val;
    return 0;
  }
  if (n > UINT32_MAX / 2) return -ENOMEM;
  if (!m->slots || (size_t)(m->n + 1) * 4 > ((size_t)m->mask + 1) * 3) {
    if (map_grow(m)) return -ENOMEM;
  }
  if (m->pool_n == 0) m->pool_n = 1;
  if (m->pool_n + n + 1 > m->pool_cap) {
    size_t cap = m->pool_cap ? m->pool_cap : 4096;
    while (cap < m->pool_n + n + 1) cap *= 2;
    char *p = realloc(m->pool, cap);
    if (!p) return -ENOMEM;
    m->pool = p;
    m->pool_cap = cap;
  }
  const uint64_t h = zo_tk_hash(key, n);
  uint32_t i = (uint32_t)h & m->mask;
  while (!slot_empty(&m->slots[i])) i = (i + 1) & m->mask;
  memcpy(m->pool + m->pool_n, key, n);
  m->pool[m->pool_n + n] = '\0';
  m->slots[i] = (struct zo_tk_slot){.h = h, .off = (uint32_t)m->pool_n, .len = (uint32_t)n, .val = val};
  m->pool_n += n + 1;
  m->n++;
  return 0;
}

static struct zo_tk_bytelevel bytelevel_table;
static pthread_once_t bytelevel_once = PTHREAD_ONCE_INIT;

static void bytelevel_init(void) {
  struct zo_tk_bytelevel *t = &bytelevel_table;
  for (int i = 0; i < 324; i++) t->cp_to_byte[i] = -1;
  int extra = 0;
  for (int b = 0; b < 256; b++) {
    const bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const int cp = keep ? b : 256 + extra++;
    t->cp_to_byte[cp] = (int16_t)b;
    if (cp < 0x80) {
      t->utf8[b][0] = (char)cp;
      t->len[b] = 1;
    } else {
      t->utf8[b][0] = (char)(0xC0 | (cp >> 6));
      t->utf8[b][1] = (char)(0x80 | (cp & 0x3F));
      t->len[b] = 2;
    }
  }
}

const struct zo_tk_bytelevel *zo_tk_bytelevel(void) {
  pthread_once(&bytelevel_once, bytelevel_init);
  return &bytelevel_table;
}

/* Bytes of the character starting at s[0, n), 0 when it is invalid. */
static size_t utf8_char_ok(const uint8_t *s, size_t n) {
  const uint8_t c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c == 0xE0) len = 3, lo = 0xA0;
  else if (c == 0xED) len = 3, hi = 0x9F;
  else if (c >= 0xE1 && c <= 0xEF) len = 3;
  else if (c == 0xF0) len = 4, lo = 0x90;
  else if (c == 0xF4) len = 4, hi = 0x8F;
  else if (c >= 0xF1 && c <= 0xF3) len = 4;
  else return 0;
  if (n < len) return 0;
  if (s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if ((s[i] & 0xC0) != 0x80) return 0;
  return len;
}

size_t zo_tk_utf8_valid_prefix(const char *str, size_t n) {
  const uint8_t *s = (const uint8_t *)str;
  size_t i = 0;
  while (i < n) {
    if (s[i] < 0x80) {
      i++;
      continue;
    }
    const size_t l = utf8_char_ok(s + i, n - i);
    if (!l) break;
    i += l;
  }
  return i;
}

size_t zo_tk_utf8_invalid_len(const char *str, size_t n) {
  const uint8_t *s = (const uint8_t *)str;
  const uint8_t c = s[0];
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c == 0xE0) len = 3, lo = 0xA0;
  else if (c == 0xED) len = 3, hi = 0x9F;
  else if (c >= 0xE1 && c <= 0xEF) len = 3;
  else if (c == 0xF0) len = 4, lo = 0x90;
  else if (c == 0xF4) len = 4, hi = 0x8F;
  else if (c >= 0xF1 && c <= 0xF3) len = 4;
  else return 1;
  /* The lead byte and as many continuation bytes as could still start a valid sequence. */
  size_t i = 1;
  if (i < n && i < len && s[i] >= lo && s[i] <= hi) {
    i++;
    while (i < n && i < len && (s[i] & 0xC0) == 0x80) i++;
  }
  return i;
}

/* Oniguruma's \s for Unicode strings: the White_Space property. */
#define ONIG_SPACE "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

pcre2_code *zo_tk_regex_compile(const char *pattern, bool literal, const char *where) {
  char *rewritten = NULL;
  const char *pat = pattern;
  if (!literal) {
    const size_t n = strlen(pattern);
    rewritten = malloc(n * (sizeof(ONIG_SPACE) + 4) + 1);
    if (!rewritten) {
      zo_error(-ENOMEM, "%s: out of memory compiling the pattern", where);
      return NULL;
    }
    size_t o = 0;
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
      const char c = pattern[i];
      if (c == '\\' && i + 1 < n) {
        const char e = pattern[i + 1];
        if (e == 's' || e == 'S') {
          if (in_class && e == 'S') {
            free(rewritten);
            zo_error(-ENOTSUP, "%s: \\S inside a character class is not supported (pattern %s)", where, pattern);
            return NULL;
          }
          const char *open = in_class ? "" : e == 's' ? "[" : "[^";
          const char *close = in_class ? "" : "]";
          o += (size_t)sprintf(rewritten + o, "%s%s%s", open, ONIG_SPACE, close);
        } else {
          rewritten[o++] = c;
          rewritten[o++] = e;
        }
        i++;
        continue;
      }
      if (c == '[') {
        if (in_class) {
          free(rewritten);
          zo_error(-ENOTSUP, "%s: nested character classes are not supported (pattern %s)", where, pattern);
          return NULL;
        }
        in_class = 1;
        rewritten[o++] = c;
        /* A ']' (after an optional '^') first in a class is a literal. */
        if (i + 1 < n && pattern[i + 1] == '^') rewritten[o++] = pattern[++i];
        if (i + 1 < n && pattern[i + 1] == ']') rewritten[o++] = pattern[++i];
        continue;
      }
      if (c == ']' && in_class) in_class = 0;
      rewritten[o++] = c;
    }
    rewritten[o] = '\0';
    pat = rewritten;
  }
  int errcode;
  PCRE2_SIZE erroff;
  /* PCRE2_LITERAL allows no UCP (nor needs it). */
  const uint32_t opts = PCRE2_UTF | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &errcode, &erroff, NULL);
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(errcode, msg, sizeof(msg));
    zo_error(-ENOTSUP, "%s: PCRE2 cannot compile the pattern %s: %s at offset %zu", where, pattern, (char *)msg,
             (size_t)erroff);
    free(rewritten);
    return NULL;
  }
  free(rewritten);
  const int jr = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
  (void)jr; /* without JIT (not built for this CPU) pcre2_match interprets: same matches, slower */
  return re;
}
