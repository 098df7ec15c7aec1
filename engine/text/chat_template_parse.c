/* The chat-template interpreter's front: the lexer over a tag's expression
 * and the template cut into text, {{ }} and {% %} parts, with whitespace
 * control as transformers' Jinja environment applies it (see
 * chat_template_impl.h). */
#include <ctype.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "chat_template_impl.h"

/* ---- lexer over a tag's expression ---------------------------------------- */

void zo_ct_next(struct ctx *c, struct lex *L) {
  while (L->p < L->end && isspace((unsigned char)*L->p)) L->p++;
  L->s = L->p;
  if (L->p >= L->end) {
    L->t = T_END;
    L->n = 0;
    return;
  }
  unsigned char ch = (unsigned char)*L->p;
  if (isalpha(ch) || ch == '_') {
    while (L->p < L->end && (isalnum((unsigned char)*L->p) || *L->p == '_')) L->p++;
    L->t = T_NAME;
  } else if (isdigit(ch)) {
    L->i = 0;
    while (L->p < L->end && isdigit((unsigned char)*L->p)) {
      if (__builtin_mul_overflow(L->i, 10, &L->i) || __builtin_add_overflow(L->i, *L->p++ - '0', &L->i)) {
        zo_ct_fail(c, "chat template: an integer literal beyond 64 bits");
        L->t = T_END;
        return;
      }
    }
    L->t = T_INT;
  } else if (ch == '\'' || ch == '"') {
    const char q = *L->p++;
    char *buf = zo_ct_alloc(c, (size_t)(L->end - L->p) + 1);
    size_t k = 0;
    while (buf && L->p < L->end && *L->p != q) {
      char x = *L->p++;
      if (x == '\\' && L->p < L->end) {
        x = *L->p++;
        switch (x) {
        case 'n': x = '\n'; break;
        case 't': x = '\t'; break;
        case 'r': x = '\r'; break;
        default: break; /* \\ \' \" and the rest as themselves */
        }
      }
      buf[k++] = x;
    }
    if (L->p >= L->end) {
      zo_ct_fail(c, "unterminated string literal in the chat template");
      L->t = T_END;
      return;
    }
    L->p++;
    if (buf) buf[k] = '\0';
    L->sval = buf;
    L->n = k;
    L->t = T_STR;
    return;
  } else {
    static const char *const two[] = {"==", "!=", "<=", ">=", "//", "**"};
    L->t = T_OP;
    for (size_t k = 0; k < sizeof two / sizeof two[0]; k++)
      if (L->end - L->p >= 2 && !memcmp(L->p, two[k], 2)) {
        L->p += 2;
        L->n = 2;
        return;
      }
    L->p++;
  }
  L->n = (size_t)(L->p - L->s);
}

void zo_ct_expect_op(struct ctx *c, struct lex *L, const char *op) {
  if (!is_op(L, op)) zo_ct_fail(c, "chat template: expected '%s' at \"%.20s\"", op, L->s);
  else zo_ct_next(c, L);
}

/* ---- template structure ------------------------------------------------- */

/* Cuts the template into text, {{ }} and {% %} parts, applying whitespace
 * control, trim_blocks and lstrip_blocks as transformers' environment does. */
int zo_ct_split_parts(struct ctx *c, const char *t, struct part **out, size_t *n_out) {
  size_t n = strlen(t), cap = 64, np = 0;
  struct part *p = zo_ct_alloc(c, cap * sizeof *p);
  if (!p) return -1;
  size_t i = 0;
  bool trim_next = false, trim_nl = false;
  while (i < n) {
    const char *open = NULL;
    for (size_t k = i; k + 1 < n; k++)
      if (t[k] == '{' && (t[k + 1] == '{' || t[k + 1] == '%' || t[k + 1] == '#')) {
        open = t + k;
        break;
      }
    size_t a = i, b = open ? (size_t)(open - t) : n;
    if (trim_next)
      while (a < b && isspace((unsigned char)t[a])) a++;
    else if (trim_nl && a < b && t[a] == '\n')
      a++;
    else if (trim_nl && a + 1 < b && t[a] == '\r' && t[a + 1] == '\n')
      a += 2;
    trim_next = trim_nl = false;
    if (open) {
      const char kind = open[1];
      const bool minus = b + 2 < n && t[b + 2] == '-';
      const bool plus = b + 2 < n && t[b + 2] == '+';
      if (minus)
        while (b > a && isspace((unsigned char)t[b - 1])) b--;
      else if ((kind == '%' || kind == '#') && !plus) {
        /* lstrip_blocks: spaces and tabs between the line's start (in the
         * source) and the tag go. */
        size_t k = b;
        while (k > 0 && (t[k - 1] == ' ' || t[k - 1] == '\t')) k--;
        if (k == 0 || t[k - 1] == '\n') b = k < a ? a : k;
      }
    }
    if (b > a) {
      if (np == cap) {
        struct part *q = zo_ct_alloc(c, 2 * cap * sizeof *q);
        if (!q) return -1;
        memcpy(q, p, np * sizeof *p);
        p = q;
        cap *= 2;
      }
      p[np++] = (struct part){P_TEXT, t + a, b - a};
    }
    if (!open) break;
    const char kind = open[1];
    const char *close_s = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const char *body = open + 2;
    const char *close = strstr(body, close_s);
    if (!close) {
      zo_ct_fail(c, "chat template: '%.2s' at offset %zu is never closed", open, (size_t)(open - t));
      return -1;
    }
    const char *bs = body, *be = close;
    if (bs < be && (*bs == '-' || *bs == '+')) bs++;
    if (be > bs && be[-1] == '-') {
      be--;
      trim_next = true;
    } else if (kind != '{') {
      trim_nl = true; /* trim_blocks */
    }
    if (kind != '#') {
      if (np == cap) {
        struct part *q = zo_ct_alloc(c, 2 * cap * sizeof *q);
        if (!q) return -1;
        memcpy(q, p, np * sizeof *p);
        p = q;
        cap *= 2;
      }
      p[np++] = (struct part){kind == '{' ? P_OUT : P_TAG, bs, (size_t)(be - bs)};
    }
    i = (size_t)(close - t) + 2;
  }
  *out = p;
  *n_out = np;
  return 0;
}

/* The tag's first word. */
bool zo_ct_tag_is(const struct part *p, const char *word) {
  const char *s = p->s, *e = p->s + p->n;
  while (s < e && isspace((unsigned char)*s)) s++;
  const size_t n = strlen(word);
  return p->k == P_TAG && (size_t)(e - s) >= n && !memcmp(s, word, n) &&
         (s + n == e || !(isalnum((unsigned char)s[n]) || s[n] == '_'));
}

/* Index of the part that closes the block opened at parts[i] (endif/endfor
 * at the same depth), with the positions of its elif/else in mids. */
size_t zo_ct_block_end(struct ctx *c, const struct part *parts, size_t n, size_t i, const char *open,
                        const char *close, size_t *mids, size_t *n_mids, size_t max_mids) {
  /* Every block nests (if and for); elif and else at depth 0 are this one's. */
  int depth = 0;
  *n_mids = 0;
  for (size_t k = i + 1; k < n; k++) {
    if (zo_ct_tag_is(&parts[k], "if") || zo_ct_tag_is(&parts[k], "for")) depth++;
    else if (depth == 0 && zo_ct_tag_is(&parts[k], close)) return k;
    else if (zo_ct_tag_is(&parts[k], "endif") || zo_ct_tag_is(&parts[k], "endfor")) depth--;
    else if (depth == 0 && (zo_ct_tag_is(&parts[k], "elif") || zo_ct_tag_is(&parts[k], "else"))) {
      if (*n_mids < max_mids) mids[(*n_mids)++] = k;
      else zo_ct_fail(c, "chat template: more than %zu elif branches", max_mids);
    }
  }
  zo_ct_fail(c, "chat template: {%% %s %%} without its {%% %s %%}", open, close);
  return n;
}

void zo_ct_init_lex(struct ctx *c, struct lex *L, const struct part *p, size_t skip_word) {
  L->p = p->s;
  L->end = p->s + p->n;
  zo_ct_next(c, L);
  for (size_t k = 0; k < skip_word; k++) zo_ct_next(c, L);
}

void zo_ct_expect_end(struct ctx *c, struct lex *L) {
  if (!c->failed && L->t != T_END) zo_ct_fail(c, "chat template: unexpected \"%.*s\"", (int)(L->end - L->s), L->s);
}
