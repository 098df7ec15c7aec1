/* A small interpreter for the Jinja subset that Hugging Face chat templates
 * use (tokenizer_config.json's chat_template), rendering as transformers'
 * apply_chat_template does (its Jinja environment: trim_blocks and
 * lstrip_blocks on). Supported: text, {{ expr }}, {% if/elif/else/endif %},
 * {% for x in expr %} ... {% endfor %} with loop.index, index0, first, last,
 * length, {% set name = expr %}, whitespace control ({%- -%}, {{- -}}),
 * comments {# #}; expressions with string, integer, boolean and none
 * literals, list literals, variables, x.attr and x['key'], x[i], slices
 * x[a:b], + - * / // % ~, comparisons, in / not in, and / or / not,
 * `is [not] defined / none / string / number`, inline `a if c else b`, the
 * filters trim, length, upper, lower, string and the methods strip, lstrip,
 * rstrip, upper, lower, title, startswith, endswith; raise_exception(msg).
 * Anything else (macros, blocks, namespace(), other filters and tests) is
 * refused naming the construct. All memory comes from one arena freed at
 * the end of a render. */
#include "zo/chat_template.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo/common.h"

#include "chat_template_impl.h"

/* ---- arena and errors ------------------------------------------------------ */

void *zo_ct_alloc(struct ctx *c, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (c->arena_limit && (n > c->arena_limit || c->arena_bytes > c->arena_limit - n)) {
    zo_ct_fail(c, "chat template: working space beyond the limit of %zu MiB", ZO_CT_MAX_ARENA >> 20);
    return NULL;
  }
  c->arena_bytes += n;
  if (!c->arena || c->arena->cap - c->arena->used < n) {
    size_t cap = n > 65536 ? n : 65536;
    struct chunk *k = malloc(sizeof *k + cap);
    if (!k) {
      c->failed = true;
      snprintf(c->err, sizeof c->err, "out of host memory");
      return NULL;
    }
    k->next = c->arena;
    k->used = 0;
    k->cap = cap;
    c->arena = k;
  }
  void *p = c->arena->data + c->arena->used;
  c->arena->used += n;
  return p;
}

bool zo_ct_enter(struct ctx *c) {
  if (c->failed) return false;
  if (c->depth >= ZO_CT_MAX_DEPTH) {
    zo_ct_fail(c, "chat template: nesting deeper than the limit of %d (parentheses, brackets, not, '-', if, for)",
               ZO_CT_MAX_DEPTH);
    return false;
  }
  c->depth++;
  return true;
}

void zo_ct_fail(struct ctx *c, const char *fmt, ...) {
  if (c->failed) return;
  c->failed = true;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
}

int zo_chat_render(const char *tmpl, const struct zo_chat_message *msgs, size_t n_msgs, bool add_generation_prompt,
                   const char *bos_token, const char *eos_token, char **out, size_t *len) {
  struct ctx c = {0};
  struct part *parts;
  size_t n_parts;
  int err = 0;
  if (zo_ct_split_parts(&c, tmpl, &parts, &n_parts) == 0) {
    static const char *const keys[] = {"role", "content"};
    struct value *list = zo_ct_alloc(&c, (n_msgs + 1) * sizeof *list);
    size_t msg_bytes = 0;
    for (size_t k = 0; list && k < n_msgs; k++) {
      msg_bytes += strlen(msgs[k].role) + strlen(msgs[k].content);
      struct value *vals = zo_ct_alloc(&c, 2 * sizeof *vals);
      if (!vals) break;
      vals[0] = zo_ct_str(&c, msgs[k].role, strlen(msgs[k].role));
      vals[1] = zo_ct_str(&c, msgs[k].content, strlen(msgs[k].content));
      list[k] = (struct value){.k = V_DICT, .len = 2, .items = vals, .keys = (const char **)keys};
    }
    zo_ct_set_var(&c, "messages", 8, (struct value){.k = V_LIST, .len = n_msgs, .items = list});
    zo_ct_set_var(&c, "add_generation_prompt", 21, vbool(add_generation_prompt));
    if (bos_token) zo_ct_set_var(&c, "bos_token", 9, zo_ct_str(&c, bos_token, strlen(bos_token)));
    if (eos_token) zo_ct_set_var(&c, "eos_token", 9, zo_ct_str(&c, eos_token, strlen(eos_token)));
    c.out_limit = ZO_CT_MAX_OUTPUT + 2 * msg_bytes;
    c.arena_limit = c.arena_bytes + ZO_CT_MAX_ARENA;
    if (!c.failed) zo_ct_render(&c, parts, 0, n_parts);
  }
  if (c.failed) {
    err = zo_error(strstr(c.err, "not supported") ? -ENOTSUP : strstr(c.err, "memory") ? -ENOMEM : -EINVAL, "%s",
                   c.err);
    free(c.out);
  } else {
    *out = c.out ? c.out : calloc(1, 1);
    *len = c.n;
    if (!*out) err = zo_error(-ENOMEM, "out of host memory");
  }
  while (c.arena) {
    struct chunk *k = c.arena->next;
    free(c.arena);
    c.arena = k;
  }
  free(c.vars);
  return err;
}
