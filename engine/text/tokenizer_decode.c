/* Hugging Face tokenizer.json: decode (see zo/tokenizer.h). The decoders
 * run as tokenizers 0.15 runs them, over the list of token strings: ByteLevel,
 * Replace, ByteFallback, Fuse, Strip and Metaspace, those that
 * engine/text/tokenizer_load.c accepts. Encoding is engine/text/tokenizer.c. */
#include "zo/tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "zo/common.h"

#include "tokenizer_impl.h"
#include "tokenizer_util.h"

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
