/* Internals shared by engine/text/tokenizer.c (load, encode, decode) and
 * engine/text/tokenizer_train.c (the byte-level BPE trainer): a string -> int32
 * hash map, the GPT-2 byte <-> unicode table, UTF-8 repair as Rust's
 * String::from_utf8_lossy does it, Rust's char::is_numeric, and PCRE2 compilation of a split pattern
 * written for Oniguruma (the regex engine of the tokenizers wheels). */
#ifndef ZO_TOKENIZER_UTIL_H
#define ZO_TOKENIZER_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* GPT-2's pre-tokenizer pattern (ByteLevel with use_regex). */
#define ZO_TK_GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

static inline uint64_t zo_tk_hash(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    __builtin_memcpy(&w, s + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
  h ^= h >> 32;
  h *= 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}

/* Open-addressing map from byte strings (copied into its own pool) to int32. */
struct zo_tk_map {
  struct zo_tk_slot { uint64_t h; uint32_t off, len; int32_t val; } *slots;
  uint32_t mask;   /* capacity - 1, capacity a power of two; 0 while empty */
  uint32_t n;      /* entries */
  char *pool;
  size_t pool_n, pool_cap;
};

void zo_tk_map_free(struct zo_tk_map *m);
void zo_tk_map_clear(struct zo_tk_map *m);
/* The slot of key, NULL when absent. */
struct zo_tk_slot *zo_tk_map_find(const struct zo_tk_map *m, const char *key, size_t n);
/* Inserts or overwrites. Returns 0 or -ENOMEM. */
int zo_tk_map_put(struct zo_tk_map *m, const char *key, size_t n, int32_t val);
static inline const char *zo_tk_map_key(const struct zo_tk_map *m, const struct zo_tk_slot *s) {
  return m->pool + s->off;
}

/* GPT-2's bytes_to_unicode: byte b -> code point, as UTF-8 (1 or 2 bytes). */
struct zo_tk_bytelevel {
  char utf8[256][2];
  uint8_t len[256];
  int16_t cp_to_byte[324]; /* code point -> byte, -1 none */
};
const struct zo_tk_bytelevel *zo_tk_bytelevel(void);

/* Length of the valid UTF-8 prefix of s[0, n). */
size_t zo_tk_utf8_valid_prefix(const char *s, size_t n);
/* Length of the maximal invalid subpart at s[0, n) (n > 0, s[0] starts no
 * valid character): the bytes one U+FFFD replaces in from_utf8_lossy. */
size_t zo_tk_utf8_invalid_len(const char *s, size_t n);
/* Byte length of the UTF-8 character at s (valid input). */
static inline size_t zo_tk_utf8_len(uint8_t c) {
  return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* The code point of the valid UTF-8 character s[0, l) (l = zo_tk_utf8_len(s[0])). */
static inline uint32_t zo_tk_utf8_cp(const char *str, size_t l) {
  const uint8_t *s = (const uint8_t *)str;
  if (l == 1) return s[0];
  if (l == 2) return (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
  if (l == 3) return (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
  return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
}

/* Rust's char::is_numeric (general category Nd, Nl or No) with the Unicode
 * 15.0 tables of the Rust that built tokenizers 0.15.2: the Digits
 * pre-tokenizer's test. Not PCRE2's \p{N} (10.42 has Unicode 14.0, 40 code
 * points fewer). */
bool zo_tk_is_numeric(uint32_t cp);

/* Compiles an Oniguruma-syntax split pattern (or a literal when literal) for
 * PCRE2 with UTF, UCP and JIT. Oniguruma's \s is Unicode White_Space, which
 * PCRE2 10.42's \s exceeds by U+180E, so \s and \S are spelled out as that
 * class. Returns NULL with zo_error naming what (a "where" string) and why. */
pcre2_code *zo_tk_regex_compile(const char *pattern, bool literal, const char *where);
/* PCRE2's match limit for a subject of n bytes: its default (10 million)
 * plus 16 per byte, so that a long run of one class (10 MB of spaces: the
 * pre-tokenizer's \s+(?!\S) and \s*[\r\n]+ walk it a few times) matches
 * as in Hugging Face tokenizers, while a backtracking pattern stays
 * bounded by a multiple of its input. */
static inline void zo_tk_match_limit(pcre2_match_context *m, size_t n) {
  const size_t lim = 10000000u + (n < (SIZE_MAX - 10000000u) / 16 ? 16 * n : SIZE_MAX - 10000000u);
  pcre2_set_match_limit(m, lim > UINT32_MAX ? UINT32_MAX : (uint32_t)lim);
}

#endif /* ZO_TOKENIZER_UTIL_H */
