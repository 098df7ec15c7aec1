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

/* The code points whose Rust char::is_numeric is true in tokenizers 0.15.2,
 * as closed ranges. Read off that library itself (every code point between
 * two letters through pre_tokenizers.Digits(individual_digits=True): those
 * that come out alone); hf-tokenizer-exact checks every code point again. */
static const uint32_t numeric_ranges[][2] = {
    {0x30, 0x39}, {0xB2, 0xB3}, {0xB9, 0xB9}, {0xBC, 0xBE}, {0x660, 0x669}, {0x6F0, 0x6F9}, {0x7C0, 0x7C9},
    {0x966, 0x96F}, {0x9E6, 0x9EF}, {0x9F4, 0x9F9}, {0xA66, 0xA6F}, {0xAE6, 0xAEF}, {0xB66, 0xB6F}, {0xB72, 0xB77},
    {0xBE6, 0xBF2}, {0xC66, 0xC6F}, {0xC78, 0xC7E}, {0xCE6, 0xCEF}, {0xD58, 0xD5E}, {0xD66, 0xD78}, {0xDE6, 0xDEF},
    {0xE50, 0xE59}, {0xED0, 0xED9}, {0xF20, 0xF33}, {0x1040, 0x1049}, {0x1090, 0x1099}, {0x1369, 0x137C},
    {0x16EE, 0x16F0}, {0x17E0, 0x17E9}, {0x17F0, 0x17F9}, {0x1810, 0x1819}, {0x1946, 0x194F}, {0x19D0, 0x19DA},
    {0x1A80, 0x1A89}, {0x1A90, 0x1A99}, {0x1B50, 0x1B59}, {0x1BB0, 0x1BB9}, {0x1C40, 0x1C49}, {0x1C50, 0x1C59},
    {0x2070, 0x2070}, {0x2074, 0x2079}, {0x2080, 0x2089}, {0x2150, 0x2182}, {0x2185, 0x2189}, {0x2460, 0x249B},
    {0x24EA, 0x24FF}, {0x2776, 0x2793}, {0x2CFD, 0x2CFD}, {0x3007, 0x3007}, {0x3021, 0x3029}, {0x3038, 0x303A},
    {0x3192, 0x3195}, {0x3220, 0x3229}, {0x3248, 0x324F}, {0x3251, 0x325F}, {0x3280, 0x3289}, {0x32B1, 0x32BF},
    {0xA620, 0xA629}, {0xA6E6, 0xA6EF}, {0xA830, 0xA835}, {0xA8D0, 0xA8D9}, {0xA900, 0xA909}, {0xA9D0, 0xA9D9},
    {0xA9F0, 0xA9F9}, {0xAA50, 0xAA59}, {0xABF0, 0xABF9}, {0xFF10, 0xFF19}, {0x10107, 0x10133}, {0x10140, 0x10178},
    {0x1018A, 0x1018B}, {0x102E1, 0x102FB}, {0x10320, 0x10323}, {0x10341, 0x10341}, {0x1034A, 0x1034A},
    {0x103D1, 0x103D5}, {0x104A0, 0x104A9}, {0x10858, 0x1085F}, {0x10879, 0x1087F}, {0x108A7, 0x108AF},
    {0x108FB, 0x108FF}, {0x10916, 0x1091B}, {0x109BC, 0x109BD}, {0x109C0, 0x109CF}, {0x109D2, 0x109FF},
    {0x10A40, 0x10A48}, {0x10A7D, 0x10A7E}, {0x10A9D, 0x10A9F}, {0x10AEB, 0x10AEF}, {0x10B58, 0x10B5F},
    {0x10B78, 0x10B7F}, {0x10BA9, 0x10BAF}, {0x10CFA, 0x10CFF}, {0x10D30, 0x10D39}, {0x10E60, 0x10E7E},
    {0x10F1D, 0x10F26}, {0x10F51, 0x10F54}, {0x10FC5, 0x10FCB}, {0x11052, 0x1106F}, {0x110F0, 0x110F9},
    {0x11136, 0x1113F}, {0x111D0, 0x111D9}, {0x111E1, 0x111F4}, {0x112F0, 0x112F9}, {0x11450, 0x11459},
    {0x114D0, 0x114D9}, {0x11650, 0x11659}, {0x116C0, 0x116C9}, {0x11730, 0x1173B}, {0x118E0, 0x118F2},
    {0x11950, 0x11959}, {0x11C50, 0x11C6C}, {0x11D50, 0x11D59}, {0x11DA0, 0x11DA9}, {0x11F50, 0x11F59},
    {0x11FC0, 0x11FD4}, {0x12400, 0x1246E}, {0x16A60, 0x16A69}, {0x16AC0, 0x16AC9}, {0x16B50, 0x16B59},
    {0x16B5B, 0x16B61}, {0x16E80, 0x16E96}, {0x1D2C0, 0x1D2D3}, {0x1D2E0, 0x1D2F3}, {0x1D360, 0x1D378},
    {0x1D7CE, 0x1D7FF}, {0x1E140, 0x1E149}, {0x1E2F0, 0x1E2F9}, {0x1E4F0, 0x1E4F9}, {0x1E8C7, 0x1E8CF},
    {0x1E950, 0x1E959}, {0x1EC71, 0x1ECAB}, {0x1ECAD, 0x1ECAF}, {0x1ECB1, 0x1ECB4}, {0x1ED01, 0x1ED2D},
    {0x1ED2F, 0x1ED3D}, {0x1F100, 0x1F10C}, {0x1FBF0, 0x1FBF9}
};

bool zo_tk_is_numeric(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  size_t lo = 0, hi = sizeof(numeric_ranges) / sizeof(numeric_ranges[0]);
  while (lo < hi) { /* the first range whose end is >= cp */
    const size_t mid = lo + (hi - lo) / 2;
    if (numeric_ranges[mid][1] < cp) lo = mid + 1;
    else hi = mid;
  }
  return lo < sizeof(numeric_ranges) / sizeof(numeric_ranges[0]) && numeric_ranges[lo][0] <= cp;
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
