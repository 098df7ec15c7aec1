/* Private to the chat-template interpreter (see zo/chat_template.h):
 *   engine/text/chat_template.c        zo_chat_render: the arena, errors, the
 *                                      messages bound as variables
 *   engine/text/chat_template_parse.c  the lexer over a tag's expression and
 *                                      the template cut into parts, blocks
 *                                      matched to their ends
 *   engine/text/chat_template_eval.c   values, expressions (evaluated while
 *                                      parsed: templates are small) and the
 *                                      statements (text, {{ }}, if, for, set)
 * Recursion, the places a nesting limit would go (all in _eval.c):
 *   expr -> or_expr -> ... -> unary -> primary -> expr  (parentheses, list
 *     items, call arguments, subscripts and slices); expr's `else` -> expr;
 *     unary's '-' -> unary; not_expr's `not` -> not_expr
 *   zo_ct_render -> zo_ct_render (the if branch taken) and
 *   zo_ct_render -> run_for -> zo_ct_render (each loop body, for's else)
 * Output grows in one place, emit in _eval.c.
 * Limits (a hostile template must fail by name, never crash or exhaust the
 * host): nesting depth over those recursion points, output bytes (also the
 * longest string built), loop iterations in all, arena bytes. */
#ifndef ZO_CHAT_TEMPLATE_IMPL_H
#define ZO_CHAT_TEMPLATE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* Recursion depth over expr, unary '-', not, if and for bodies. Each level
 * of expr is a few KiB of stack: 256 levels stay far below a thread's 8 MiB. */
#define ZO_CT_MAX_DEPTH 256
/* Output (and any one string) beyond this plus twice the messages' bytes. */
#define ZO_CT_MAX_OUTPUT ((size_t)64 << 20)
/* Loop iterations in one render, all loops together. */
#define ZO_CT_MAX_ITERATIONS 1000000
/* Arena bytes a render may allocate beyond its bound messages. */
#define ZO_CT_MAX_ARENA ((size_t)256 << 20)

/* ---- arena and state (chat_template.c) ------------------------------------ */

struct chunk {
  struct chunk *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
};

struct ctx {
  struct chunk *arena;
  char err[400];
  bool failed;
  /* output */
  char *out;
  size_t n, cap;
  /* variables: a stack of (name, value) */
  struct var *vars;
  size_t n_vars, cap_vars;
  size_t scope; /* vars below belong to enclosing scopes: a set inside a loop shadows them */
  /* limits (see ZO_CT_MAX_*) */
  unsigned depth;
  size_t iterations;
  size_t arena_bytes, arena_limit; /* arena_limit 0: none yet (binding the messages) */
  size_t out_limit;
};

/* Enters one nesting level; false (and c failed naming the limit) beyond
 * ZO_CT_MAX_DEPTH. Every true is paired with c->depth--. */
bool zo_ct_enter(struct ctx *c);

/* n bytes (16-aligned) from the render's arena, freed when it ends; NULL
 * (and c failed) when out of host memory. */
void *zo_ct_alloc(struct ctx *c, size_t n);
/* Records the render's first error (later ones are dropped). */
void zo_ct_fail(struct ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- values (chat_template_eval.c) ------------------------------------------ */

enum vkind { V_UNDEF, V_NONE, V_BOOL, V_INT, V_STR, V_LIST, V_DICT };

struct value {
  enum vkind k;
  long long i;         /* V_BOOL, V_INT */
  const char *s;       /* V_STR */
  size_t len;          /* V_STR: bytes; V_LIST, V_DICT: items */
  struct value *items; /* V_LIST: (len,); V_DICT: values */
  const char **keys;   /* V_DICT: (len,) */
};

struct var {
  const char *name;
  struct value v;
};

static inline struct value vint(long long i) { return (struct value){.k = V_INT, .i = i}; }
static inline struct value vbool(bool b) { return (struct value){.k = V_BOOL, .i = b}; }

/* A string value: s[0, n) copied into the arena. */
struct value zo_ct_str(struct ctx *c, const char *s, size_t n);
/* Sets a variable in the innermost scope (a set inside a loop shadows). */
void zo_ct_set_var(struct ctx *c, const char *name, size_t n, struct value v);
/* Renders parts[lo, hi) into c's output. */
struct part;
void zo_ct_render(struct ctx *c, const struct part *parts, size_t lo, size_t hi);

/* ---- lexer over a tag's expression (chat_template_parse.c) ----------------- */

enum tok { T_END, T_NAME, T_STR, T_INT, T_OP };

struct lex {
  const char *p, *end;
  enum tok t;
  const char *s; /* token text */
  size_t n;
  long long i;
  char *sval; /* T_STR, unescaped (arena) */
};

/* Reads the next token into L (T_END at the end of the tag). */
void zo_ct_next(struct ctx *c, struct lex *L);

static inline bool is_op(const struct lex *L, const char *op) {
  return L->t == T_OP && L->n == strlen(op) && !memcmp(L->s, op, L->n);
}

static inline bool is_name(const struct lex *L, const char *name) {
  return L->t == T_NAME && L->n == strlen(name) && !memcmp(L->s, name, L->n);
}

/* Consumes op, or fails naming it. */
void zo_ct_expect_op(struct ctx *c, struct lex *L, const char *op);

/* ---- template structure (chat_template_parse.c) ---------------------------- */

enum part_kind { P_TEXT, P_OUT, P_TAG };

struct part {
  enum part_kind k;
  const char *s; /* text, or the tag's inside */
  size_t n;
};

/* Cuts the template into text, {{ }} and {% %} parts (arena), applying
 * whitespace control, trim_blocks and lstrip_blocks. Returns 0 or -1 (c failed). */
int zo_ct_split_parts(struct ctx *c, const char *t, struct part **out, size_t *n_out);
/* Whether p is a tag whose first word is word. */
bool zo_ct_tag_is(const struct part *p, const char *word);
/* Index of the part that closes the block opened at parts[i], its elif/else in mids. */
size_t zo_ct_block_end(struct ctx *c, const struct part *parts, size_t n, size_t i, const char *open,
                       const char *close, size_t *mids, size_t *n_mids, size_t max_mids);
/* L over p's inside, at its first token after skip_word words. */
void zo_ct_init_lex(struct ctx *c, struct lex *L, const struct part *p, size_t skip_word);
/* Fails unless L is at the tag's end. */
void zo_ct_expect_end(struct ctx *c, struct lex *L);

#endif /* ZO_CHAT_TEMPLATE_IMPL_H */
