/* The chat-template interpreter's evaluator: values, expressions (evaluated
 * while parsed, run false parsing a branch not taken) and the statements
 * (see chat_template_impl.h; the recursion points are listed there). */
#include <ctype.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template_impl.h"

/* ---- values ------------------------------------------------------------- */

struct value zo_ct_str(struct ctx *c, const char *s, size_t n) {
  char *p = zo_ct_alloc(c, n + 1);
  if (p) {
    memcpy(p, s, n);
    p[n] = '\0';
  }
  return (struct value){.k = V_STR, .s = p ? p : "", .len = p ? n : 0};
}

static bool truthy(struct value v) {
  switch (v.k) {
  case V_UNDEF:
  case V_NONE: return false;
  case V_BOOL:
  case V_INT: return v.i != 0;
  case V_STR:
  case V_LIST:
  case V_DICT: return v.len != 0;
  }
  return false;
}

static const char *kind_name(enum vkind k) {
  static const char *const names[] = {"undefined", "none", "boolean", "integer", "string", "list", "dict"};
  return names[k];
}

static struct value dict_get(struct value d, const char *key, size_t n) {
  for (size_t k = 0; k < d.len; k++)
    if (strlen(d.keys[k]) == n && !memcmp(d.keys[k], key, n)) return d.items[k];
  return (struct value){.k = V_UNDEF};
}

static bool equal(struct value a, struct value b) {
  if ((a.k == V_INT || a.k == V_BOOL) && (b.k == V_INT || b.k == V_BOOL)) return a.i == b.i;
  if (a.k != b.k) return false;
  if (a.k == V_STR) return a.len == b.len && !memcmp(a.s, b.s, a.len);
  if (a.k == V_NONE || a.k == V_UNDEF) return true;
  return false;
}

/* Appends v as Jinja prints it. */
static void emit(struct ctx *c, const char *s, size_t n) {
  if (c->failed) return;
  if (n > c->out_limit - c->n) {
    zo_ct_fail(c, "chat template: output beyond the limit of %zu bytes", c->out_limit);
    return;
  }
  if (c->n + n + 1 > c->cap) {
    size_t cap = (c->n + n + 1) * 2;
    char *p = realloc(c->out, cap);
    if (!p) {
      zo_ct_fail(c, "out of host memory");
      return;
    }
    c->out = p;
    c->cap = cap;
  }
  memcpy(c->out + c->n, s, n);
  c->n += n;
  c->out[c->n] = '\0';
}

static struct value to_string(struct ctx *c, struct value v) {
  char buf[32];
  switch (v.k) {
  case V_STR: return v;
  case V_UNDEF: return zo_ct_str(c, "", 0);
  case V_NONE: return zo_ct_str(c, "None", 4);
  case V_BOOL: return v.i ? zo_ct_str(c, "True", 4) : zo_ct_str(c, "False", 5);
  case V_INT: return zo_ct_str(c, buf, (size_t)snprintf(buf, sizeof buf, "%lld", v.i));
  default: zo_ct_fail(c, "cannot print a %s in a chat template (only strings, numbers, booleans, none)", kind_name(v.k));
  }
  return zo_ct_str(c, "", 0);
}

/* ---- expressions (evaluated while parsed: templates are small) ----------- */

static struct value lookup(struct ctx *c, const char *name, size_t n) {
  for (size_t k = c->n_vars; k-- > 0;)
    if (strlen(c->vars[k].name) == n && !memcmp(c->vars[k].name, name, n)) return c->vars[k].v;
  return (struct value){.k = V_UNDEF};
}

void zo_ct_set_var(struct ctx *c, const char *name, size_t n, struct value v) {
  for (size_t k = c->n_vars; k-- > c->scope;)
    if (strlen(c->vars[k].name) == n && !memcmp(c->vars[k].name, name, n)) {
      c->vars[k].v = v;
      return;
    }
  if (c->n_vars == c->cap_vars) {
    size_t cap = c->cap_vars ? 2 * c->cap_vars : 16;
    struct var *p = realloc(c->vars, cap * sizeof *p);
    if (!p) {
      zo_ct_fail(c, "out of host memory");
      return;
    }
    c->vars = p;
    c->cap_vars = cap;
  }
  c->vars[c->n_vars++] = (struct var){zo_ct_str(c, name, n).s, v};
}

static struct value expr(struct ctx *c, struct lex *L, bool run);

static struct value str_method(struct ctx *c, struct value s, const char *m, size_t mn, struct value *args,
                               int n_args) {
  const char *b = s.s, *e = s.s + s.len;
#define M(x) (mn == strlen(x) && !memcmp(m, x, mn))
  if (M("strip") || M("trim") || M("lstrip") || M("rstrip")) {
    if (n_args) {
      zo_ct_fail(c, "chat template: %.*s() with arguments is not supported", (int)mn, m);
      return s;
    }
    if (!M("rstrip"))
      while (b < e && isspace((unsigned char)*b)) b++;
    if (!M("lstrip"))
      while (e > b && isspace((unsigned char)e[-1])) e--;
    return zo_ct_str(c, b, (size_t)(e - b));
  }
  if (M("upper") || M("lower") || M("title")) {
    struct value r = zo_ct_str(c, b, s.len);
    char *p = (char *)r.s;
    bool start = true;
    for (size_t k = 0; k < r.len; k++) {
      if (M("upper")) p[k] = (char)toupper((unsigned char)p[k]);
      else if (M("lower")) p[k] = (char)tolower((unsigned char)p[k]);
      else {
        p[k] = (char)(start ? toupper((unsigned char)p[k]) : tolower((unsigned char)p[k]));
        start = !isalnum((unsigned char)p[k]);
      }
    }
    return r;
  }
  if ((M("startswith") || M("endswith")) && n_args == 1 && args[0].k == V_STR) {
    if (args[0].len > s.len) return vbool(false);
    return vbool(!memcmp(M("startswith") ? b : e - args[0].len, args[0].s, args[0].len));
  }
#undef M
  zo_ct_fail(c, "chat template: the string method %.*s() is not supported (supported: strip, lstrip, rstrip, upper, "
          "lower, title, startswith, endswith)",
       (int)mn, m);
  return s;
}

/* Arguments of a call: '(' already consumed. */
static int call_args(struct ctx *c, struct lex *L, bool run, struct value *args, int max) {
  int n = 0;
  while (!c->failed && !is_op(L, ")")) {
    struct value v = expr(c, L, run);
    if (n < max) args[n++] = v;
    if (is_op(L, ",")) zo_ct_next(c, L);
    else break;
  }
  zo_ct_expect_op(c, L, ")");
  return n;
}

static struct value primary(struct ctx *c, struct lex *L, bool run) {
  struct value v = {.k = V_UNDEF};
  if (L->t == T_STR) {
    v = (struct value){.k = V_STR, .s = L->sval ? L->sval : "", .len = L->n};
    zo_ct_next(c, L);
  } else if (L->t == T_INT) {
    v = vint(L->i);
    zo_ct_next(c, L);
  } else if (is_op(L, "(")) {
    zo_ct_next(c, L);
    v = expr(c, L, run);
    zo_ct_expect_op(c, L, ")");
  } else if (is_op(L, "[")) {
    zo_ct_next(c, L);
    struct value items[64];
    int n = 0;
    while (!c->failed && !is_op(L, "]")) {
      struct value x = expr(c, L, run);
      if (n == 64) zo_ct_fail(c, "chat template: list literal of more than 64 items");
      else items[n++] = x;
      if (is_op(L, ",")) zo_ct_next(c, L);
      else break;
    }
    zo_ct_expect_op(c, L, "]");
    v = (struct value){.k = V_LIST, .len = (size_t)n, .items = zo_ct_alloc(c, (size_t)n * sizeof *items + 1)};
    if (v.items) memcpy(v.items, items, (size_t)n * sizeof *items);
  } else if (L->t == T_NAME) {
    const char *name = L->s;
    size_t n = L->n;
    zo_ct_next(c, L);
    if ((n == 4 && (!memcmp(name, "true", 4) || !memcmp(name, "True", 4)))) v = vbool(true);
    else if (n == 5 && (!memcmp(name, "false", 5) || !memcmp(name, "False", 5))) v = vbool(false);
    else if (n == 4 && (!memcmp(name, "none", 4) || !memcmp(name, "None", 4))) v = (struct value){.k = V_NONE};
    else if (n == 15 && !memcmp(name, "raise_exception", 15) && is_op(L, "(")) {
      zo_ct_next(c, L);
      struct value args[1];
      int na = call_args(c, L, run, args, 1);
      if (run) zo_ct_fail(c, "the chat template raised an exception: %s", na && args[0].k == V_STR ? args[0].s : "");
    } else if (is_op(L, "(")) {
      zo_ct_fail(c, "chat template: the function %.*s() is not supported (only raise_exception)", (int)n, name);
    } else {
      v = lookup(c, name, n);
    }
  } else {
    zo_ct_fail(c, "chat template: unexpected \"%.20s\" in an expression", L->s);
  }
  /* postfix: .attr, [key], [a:b], .method(args) */
  for (;;) {
    if (c->failed) return v;
    if (is_op(L, ".")) {
      zo_ct_next(c, L);
      if (L->t != T_NAME) {
        zo_ct_fail(c, "chat template: expected a name after '.'");
        return v;
      }
      const char *m = L->s;
      size_t mn = L->n;
      zo_ct_next(c, L);
      if (is_op(L, "(")) {
        zo_ct_next(c, L);
        struct value args[4];
        int na = call_args(c, L, run, args, 4);
        if (!run) continue;
        if (v.k != V_STR) {
          zo_ct_fail(c, "chat template: .%.*s() on a %s (only string methods are supported)", (int)mn, m,
               kind_name(v.k));
          return v;
        }
        v = str_method(c, v, m, mn, args, na);
      } else if (v.k == V_DICT) {
        v = dict_get(v, m, mn);
      } else {
        v = (struct value){.k = V_UNDEF};
      }
    } else if (is_op(L, "[")) {
      zo_ct_next(c, L);
      struct value a = {.k = V_NONE}, b = {.k = V_NONE};
      bool slice = false;
      if (!is_op(L, ":")) a = expr(c, L, run);
      if (is_op(L, ":")) {
        slice = true;
        zo_ct_next(c, L);
        if (!is_op(L, "]")) b = expr(c, L, run);
      }
      zo_ct_expect_op(c, L, "]");
      if (!run) continue;
      if (slice) {
        if (v.k != V_LIST && v.k != V_STR) {
          zo_ct_fail(c, "chat template: slicing a %s", kind_name(v.k));
          return v;
        }
        long long n = (long long)v.len, lo = a.k == V_INT ? a.i : 0, hi = b.k == V_INT ? b.i : n;
        if (lo < 0) lo += n;
        if (hi < 0) hi += n;
        lo = lo < 0 ? 0 : lo > n ? n : lo;
        hi = hi < lo ? lo : hi > n ? n : hi;
        if (v.k == V_STR) v = zo_ct_str(c, v.s + lo, (size_t)(hi - lo));
        else v = (struct value){.k = V_LIST, .items = v.items + lo, .len = (size_t)(hi - lo)};
      } else if (v.k == V_DICT && a.k == V_STR) {
        v = dict_get(v, a.s, a.len);
      } else if ((v.k == V_LIST || v.k == V_STR) && a.k == V_INT) {
        long long i = a.i < 0 ? a.i + (long long)v.len : a.i;
        if (i < 0 || i >= (long long)v.len) v = (struct value){.k = V_UNDEF};
        else if (v.k == V_LIST) v = v.items[i];
        else v = zo_ct_str(c, v.s + i, 1);
      } else {
        v = (struct value){.k = V_UNDEF};
      }
    } else {
      return v;
    }
  }
}

static struct value unary(struct ctx *c, struct lex *L, bool run) {
  if (is_op(L, "-")) {
    zo_ct_next(c, L);
    if (!zo_ct_enter(c)) return (struct value){.k = V_UNDEF};
    struct value v = unary(c, L, run);
    c->depth--;
    if (run && v.k == V_INT && v.i == LLONG_MIN) zo_ct_fail(c, "chat template: integer overflow in '-'");
    return run && v.k == V_INT && v.i != LLONG_MIN ? vint(-v.i) : v;
  }
  struct value v = primary(c, L, run);
  while (!c->failed && is_op(L, "|")) {
    zo_ct_next(c, L);
    const char *f = L->s;
    size_t n = L->n;
    zo_ct_next(c, L);
    if (!run) continue;
#define F(x) (n == strlen(x) && !memcmp(f, x, n))
    if (F("trim") || F("upper") || F("lower")) {
      if (v.k != V_STR) v = to_string(c, v);
      v = str_method(c, v, f, n, NULL, 0);
    } else if (F("length") || F("count")) {
      v = vint((long long)(v.k == V_STR || v.k == V_LIST || v.k == V_DICT ? v.len : 0));
    } else if (F("string")) {
      v = to_string(c, v);
    } else {
      zo_ct_fail(c, "chat template: the filter |%.*s is not supported (supported: trim, length, upper, lower, string)",
           (int)n, f);
    }
#undef F
  }
  return v;
}

static struct value mul(struct ctx *c, struct lex *L, bool run) {
  struct value a = unary(c, L, run);
  while (!c->failed && (is_op(L, "*") || is_op(L, "/") || is_op(L, "//") || is_op(L, "%"))) {
    char op[3] = {0};
    memcpy(op, L->s, L->n);
    zo_ct_next(c, L);
    struct value b = unary(c, L, run);
    if (!run) continue;
    if (a.k != V_INT || b.k != V_INT) {
      zo_ct_fail(c, "chat template: '%s' needs integers, got %s and %s", op, kind_name(a.k), kind_name(b.k));
      break;
    }
    long long r;
    if (op[0] == '*') {
      if (__builtin_mul_overflow(a.i, b.i, &r)) zo_ct_fail(c, "chat template: integer overflow in '*'");
      else a = vint(r);
    } else if (op[0] == '/' && !op[1]) {
      zo_ct_fail(c, "chat template: '/' (true division) is not supported; use '//'");
    } else if (b.i == 0) {
      zo_ct_fail(c, "chat template: division by zero");
    } else if (b.i == -1 && a.i == LLONG_MIN) {
      zo_ct_fail(c, "chat template: integer overflow in '%s'", op);
    } else {
      /* Python's floor division and modulo: the remainder takes the divisor's sign. */
      const long long q = a.i / b.i, m = a.i % b.i;
      const bool adjust = m != 0 && (m < 0) != (b.i < 0);
      a = vint(op[0] == '%' ? (adjust ? m + b.i : m) : (adjust ? q - 1 : q));
    }
  }
  return a;
}

static struct value add(struct ctx *c, struct lex *L, bool run) {
  struct value a = mul(c, L, run);
  while (!c->failed && (is_op(L, "+") || is_op(L, "-") || is_op(L, "~"))) {
    const char op = *L->s;
    zo_ct_next(c, L);
    struct value b = mul(c, L, run);
    if (!run) continue;
    if (op == '~' || (op == '+' && a.k == V_STR && b.k == V_STR)) {
      struct value sa = to_string(c, a), sb = to_string(c, b);
      if (sa.len + sb.len > c->out_limit) {
        zo_ct_fail(c, "chat template: a string beyond the output limit of %zu bytes", c->out_limit);
        break;
      }
      char *p = zo_ct_alloc(c, sa.len + sb.len + 1);
      if (!p) break;
      memcpy(p, sa.s, sa.len);
      memcpy(p + sa.len, sb.s, sb.len);
      p[sa.len + sb.len] = '\0';
      a = (struct value){.k = V_STR, .s = p, .len = sa.len + sb.len};
    } else if (a.k == V_INT && b.k == V_INT) {
      long long r;
      if (op == '+' ? __builtin_add_overflow(a.i, b.i, &r) : __builtin_sub_overflow(a.i, b.i, &r))
        zo_ct_fail(c, "chat template: integer overflow in '%c'", op);
      else
        a = vint(r);
    } else {
      zo_ct_fail(c, "chat template: '%c' between a %s and a %s", op, kind_name(a.k), kind_name(b.k));
    }
  }
  return a;
}

static struct value compare(struct ctx *c, struct lex *L, bool run) {
  struct value a = add(c, L, run);
  for (;;) {
    if (c->failed) return a;
    if (is_op(L, "==") || is_op(L, "!=") || is_op(L, "<") || is_op(L, ">") || is_op(L, "<=") || is_op(L, ">=")) {
      char op[3] = {0};
      memcpy(op, L->s, L->n);
      zo_ct_next(c, L);
      struct value b = add(c, L, run);
      if (!run) continue;
      if (op[0] == '=' || op[0] == '!') {
        a = vbool(equal(a, b) == (op[0] == '='));
      } else if (a.k == V_INT && b.k == V_INT) {
        bool r = op[0] == '<' ? (op[1] ? a.i <= b.i : a.i < b.i) : (op[1] ? a.i >= b.i : a.i > b.i);
        a = vbool(r);
      } else {
        zo_ct_fail(c, "chat template: '%s' between a %s and a %s", op, kind_name(a.k), kind_name(b.k));
      }
    } else if (is_name(L, "in") || (is_name(L, "not") && L->p < L->end)) {
      bool negate = false;
      if (is_name(L, "not")) {
        struct lex save = *L;
        zo_ct_next(c, L);
        if (!is_name(L, "in")) {
          *L = save;
          return a;
        }
        negate = true;
      }
      zo_ct_next(c, L);
      struct value b = add(c, L, run);
      if (!run) continue;
      bool found = false;
      if (b.k == V_STR && a.k == V_STR) found = a.len == 0 || memmem(b.s, b.len, a.s, a.len) != NULL;
      else if (b.k == V_LIST)
        for (size_t k = 0; k < b.len && !found; k++) found = equal(a, b.items[k]);
      else if (b.k == V_DICT && a.k == V_STR) found = dict_get(b, a.s, a.len).k != V_UNDEF;
      a = vbool(found != negate);
    } else if (is_name(L, "is")) {
      zo_ct_next(c, L);
      bool negate = false;
      if (is_name(L, "not")) {
        negate = true;
        zo_ct_next(c, L);
      }
      bool r = false;
      if (is_name(L, "defined")) r = a.k != V_UNDEF;
      else if (is_name(L, "undefined")) r = a.k == V_UNDEF;
      else if (is_name(L, "none")) r = a.k == V_NONE;
      else if (is_name(L, "string")) r = a.k == V_STR;
      else if (is_name(L, "number") || is_name(L, "integer")) r = a.k == V_INT;
      else if (is_name(L, "mapping")) r = a.k == V_DICT;
      else if (is_name(L, "sequence") || is_name(L, "iterable")) r = a.k == V_LIST || a.k == V_STR;
      else {
        zo_ct_fail(c, "chat template: the test 'is %.*s' is not supported (supported: defined, undefined, none, "
                "string, number, integer, mapping, sequence, iterable)",
             (int)L->n, L->s);
        return a;
      }
      zo_ct_next(c, L);
      if (run) a = vbool(r != negate);
    } else {
      return a;
    }
  }
}

static struct value not_expr(struct ctx *c, struct lex *L, bool run) {
  if (is_name(L, "not")) {
    zo_ct_next(c, L);
    if (!zo_ct_enter(c)) return (struct value){.k = V_UNDEF};
    struct value v = not_expr(c, L, run);
    c->depth--;
    return vbool(!truthy(v));
  }
  return compare(c, L, run);
}

static struct value and_expr(struct ctx *c, struct lex *L, bool run) {
  struct value a = not_expr(c, L, run);
  while (!c->failed && is_name(L, "and")) {
    zo_ct_next(c, L);
    const bool go = run && truthy(a);
    struct value b = not_expr(c, L, go);
    if (run) a = go ? b : a;
  }
  return a;
}

static struct value or_expr(struct ctx *c, struct lex *L, bool run) {
  struct value a = and_expr(c, L, run);
  while (!c->failed && is_name(L, "or")) {
    zo_ct_next(c, L);
    const bool go = run && !truthy(a);
    struct value b = and_expr(c, L, go);
    if (run) a = go ? b : a;
  }
  return a;
}

/* run false: parse only (the branch not taken), no effect and no error
 * from values. */
static struct value expr(struct ctx *c, struct lex *L, bool run) {
  if (!zo_ct_enter(c)) return (struct value){.k = V_UNDEF};
  struct value a = or_expr(c, L, run);
  if (!c->failed && is_name(L, "if")) {
    zo_ct_next(c, L);
    struct value cond = or_expr(c, L, run);
    struct value b = {.k = V_UNDEF};
    const bool t = run && truthy(cond);
    if (is_name(L, "else")) {
      zo_ct_next(c, L);
      b = expr(c, L, run && !t);
    }
    if (run) a = t ? a : b;
  }
  c->depth--;
  return a;
}

/* ---- statements ----------------------------------------------------------- */

static void run_for(struct ctx *c, const struct part *parts, size_t i, size_t end, size_t else_at) {
  struct lex L;
  zo_ct_init_lex(c, &L, &parts[i], 1);
  if (L.t != T_NAME) {
    zo_ct_fail(c, "chat template: {%% for %%} needs a loop variable");
    return;
  }
  const char *name = L.s;
  size_t nn = L.n;
  zo_ct_next(c, &L);
  if (is_op(&L, ",")) {
    zo_ct_fail(c, "chat template: {%% for a, b in ... %%} (unpacking) is not supported");
    return;
  }
  if (!is_name(&L, "in")) {
    zo_ct_fail(c, "chat template: {%% for %.*s ... %%} needs 'in'", (int)nn, name);
    return;
  }
  zo_ct_next(c, &L);
  struct value seq = expr(c, &L, true);
  if (is_name(&L, "if") || is_name(&L, "recursive")) {
    zo_ct_fail(c, "chat template: a filtered or recursive for loop is not supported");
    return;
  }
  zo_ct_expect_end(c, &L);
  if (c->failed) return;
  if (seq.k != V_LIST) {
    if (seq.k == V_UNDEF || seq.k == V_NONE) seq.len = 0;
    else {
      zo_ct_fail(c, "chat template: for loop over a %s (only lists)", kind_name(seq.k));
      return;
    }
  }
  const size_t body_end = else_at ? else_at : end;
  const size_t saved = c->n_vars, saved_scope = c->scope;
  c->scope = saved;
  static const char *const loop_keys[] = {"index", "index0", "first", "last", "length", "revindex", "revindex0"};
  /* One loop object, updated in place (as Jinja's LoopContext is): an
   * iteration allocates nothing. */
  struct value *vals = seq.len ? zo_ct_alloc(c, 7 * sizeof *vals) : NULL;
  if (seq.len && !vals) return;
  for (size_t k = 0; k < seq.len && !c->failed; k++) {
    if (++c->iterations > ZO_CT_MAX_ITERATIONS) {
      zo_ct_fail(c, "chat template: more loop iterations than the limit of %d (all loops together)",
                 ZO_CT_MAX_ITERATIONS);
      break;
    }
    const long long n = (long long)seq.len, j = (long long)k;
    vals[0] = vint(j + 1);
    vals[1] = vint(j);
    vals[2] = vbool(k == 0);
    vals[3] = vbool(k + 1 == seq.len);
    vals[4] = vint(n);
    vals[5] = vint(n - j);
    vals[6] = vint(n - j - 1);
    struct value loop = {.k = V_DICT, .len = 7, .items = vals, .keys = (const char **)loop_keys};
    c->n_vars = saved; /* each iteration starts a fresh scope */
    zo_ct_set_var(c, "loop", 4, loop);
    zo_ct_set_var(c, name, nn, seq.items[k]);
    zo_ct_render(c, parts, i + 1, body_end);
  }
  if (seq.len == 0 && else_at) zo_ct_render(c, parts, else_at + 1, end);
  /* Jinja scoping: variables set inside the loop do not leak out. */
  c->n_vars = saved;
  c->scope = saved_scope;
}

static void render_parts(struct ctx *c, const struct part *parts, size_t lo, size_t hi);

void zo_ct_render(struct ctx *c, const struct part *parts, size_t lo, size_t hi) {
  if (!zo_ct_enter(c)) return;
  render_parts(c, parts, lo, hi);
  c->depth--;
}

static void render_parts(struct ctx *c, const struct part *parts, size_t lo, size_t hi) {
  for (size_t i = lo; i < hi && !c->failed; i++) {
    const struct part *p = &parts[i];
    if (p->k == P_TEXT) {
      emit(c, p->s, p->n);
    } else if (p->k == P_OUT) {
      struct lex L;
      zo_ct_init_lex(c, &L, p, 0);
      struct value v = expr(c, &L, true);
      zo_ct_expect_end(c, &L);
      v = to_string(c, v);
      emit(c, v.s, v.len);
    } else if (zo_ct_tag_is(p, "if")) {
      size_t mids[32], n_mids;
      const size_t end = zo_ct_block_end(c, parts, hi, i, "if", "endif", mids, &n_mids, 32);
      if (c->failed) return;
      size_t starts[33];
      starts[0] = i;
      for (size_t k = 0; k < n_mids; k++) starts[k + 1] = mids[k];
      for (size_t k = 0; k <= n_mids && !c->failed; k++) {
        const size_t next_at = k < n_mids ? mids[k] : end;
        bool take;
        if (zo_ct_tag_is(&parts[starts[k]], "else")) {
          take = true;
        } else {
          struct lex L;
          zo_ct_init_lex(c, &L, &parts[starts[k]], 1);
          take = truthy(expr(c, &L, true));
          zo_ct_expect_end(c, &L);
        }
        if (take) {
          zo_ct_render(c, parts, starts[k] + 1, next_at);
          break;
        }
      }
      i = end;
    } else if (zo_ct_tag_is(p, "for")) {
      size_t mids[1], n_mids;
      const size_t end = zo_ct_block_end(c, parts, hi, i, "for", "endfor", mids, &n_mids, 1);
      if (c->failed) return;
      run_for(c, parts, i, end, n_mids ? mids[0] : 0);
      i = end;
    } else if (zo_ct_tag_is(p, "set")) {
      struct lex L;
      zo_ct_init_lex(c, &L, p, 1);
      if (L.t != T_NAME) {
        zo_ct_fail(c, "chat template: {%% set %%} needs a name");
        return;
      }
      const char *name = L.s;
      size_t n = L.n;
      zo_ct_next(c, &L);
      if (!is_op(&L, "=")) {
        zo_ct_fail(c, "chat template: {%% set %.*s %%} blocks and attribute sets are not supported", (int)n, name);
        return;
      }
      zo_ct_next(c, &L);
      struct value v = expr(c, &L, true);
      zo_ct_expect_end(c, &L);
      zo_ct_set_var(c, name, n, v);
    } else if (zo_ct_tag_is(p, "endfor") || zo_ct_tag_is(p, "endif") || zo_ct_tag_is(p, "elif") ||
               zo_ct_tag_is(p, "else")) {
      /* A block's end or branch met outside its block. */
      const bool in_for = zo_ct_tag_is(p, "endfor");
      zo_ct_fail(c, "chat template: {%% %s %%} without its {%% %s %%} before it", in_for ? "endfor"
                 : zo_ct_tag_is(p, "endif") ? "endif" : zo_ct_tag_is(p, "elif") ? "elif" : "else",
                 in_for ? "for" : "if");
    } else {
      const char *s = p->s;
      while (s < p->s + p->n && isspace((unsigned char)*s)) s++;
      size_t w = 0;
      while (s + w < p->s + p->n && (isalnum((unsigned char)s[w]) || s[w] == '_')) w++;
      zo_ct_fail(c, "chat template: the tag {%% %.*s %%} is not supported (supported: if, elif, else, endif, for, "
              "endfor, set)",
           (int)w, s);
    }
  }
}
