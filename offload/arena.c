/* Device arena: one backend allocation carved by a bump pointer. Everything
 * placed on the device comes from an arena sized by the plan at start-up, so
 * the engine never allocates on the device inside a step and cannot fragment.
 * Carves are ZO_ARENA_ALIGN-aligned; reset returns to a mark (LIFO only).
 * Each carve is also counted under its purpose group (used and peak bytes)
 * so the memory report measures the arena itself, not the plan. */
#include "zo/arena.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t zo_arena_round(size_t nbytes) {
  return (nbytes + ZO_ARENA_ALIGN - 1) / ZO_ARENA_ALIGN * ZO_ARENA_ALIGN;
}

int zo_arena_init(struct zo_arena *a, zo_backend_t backend, size_t capacity, const char *what) {
  memset(a, 0, sizeof *a);
  a->backend = backend;
  a->what = what;
  capacity = zo_arena_round(capacity);
  void *base = NULL;
  int err = backend->mem_alloc(&base, capacity);
  if (err) {
    size_t free_b = 0, total_b = 0;
    char asked[32], fr[32], tot[32];
    backend->mem_info(&free_b, &total_b);
    return zo_error(err,
                    "%s arena: could not allocate %s (%zu bytes) on the %s backend: %s free of %s "
                    "total. Lower engine.gpu_memory_budget, the micro-batch size "
                    "(train_micro_batch_size_per_gpu) or data.seq_len, or offload more "
                    "(zero_optimization.offload_*)",
                    what, zo_format_bytes(capacity, asked), capacity, backend->name,
                    zo_format_bytes(free_b, fr), zo_format_bytes(total_b, tot));
  }
  a->base = base;
  a->capacity = capacity;
  return 0;
}

void zo_arena_free(struct zo_arena *a) {
  if (a->base) a->backend->mem_free(a->base);
  free(a->carves);
  a->base = NULL;
  a->carves = NULL;
  a->capacity = a->used = 0;
  a->n_carves = a->cap_carves = 0;
}

/* The group of purpose (its text up to " ("), created on first use. */
static int arena_group(struct zo_arena *a, const char *purpose) {
  const char *paren = strstr(purpose, " (");
  size_t len = paren ? (size_t)(paren - purpose) : strlen(purpose);
  if (len >= sizeof a->groups[0].name) len = sizeof a->groups[0].name - 1;
  for (int g = 0; g < a->n_groups; g++)
    if (strncmp(a->groups[g].name, purpose, len) == 0 && a->groups[g].name[len] == '\0') return g;
  if (a->n_groups == ZO_ARENA_MAX_GROUPS) {
    snprintf(a->groups[ZO_ARENA_MAX_GROUPS - 1].name, sizeof a->groups[0].name, "(other)");
    return ZO_ARENA_MAX_GROUPS - 1;
  }
  struct zo_arena_group *g = &a->groups[a->n_groups];
  memcpy(g->name, purpose, len);
  g->name[len] = '\0';
  return a->n_groups++;
}

int zo_arena_alloc(struct zo_arena *a, size_t nbytes, const char *purpose, void **out) {
  size_t need = zo_arena_round(nbytes);
  if (need > a->capacity - a->used) {
    char asked[32], left[32], cap[32];
    *out = NULL;
    return zo_error(-ENOMEM,
                    "%s arena: %s needs %s (%zu bytes) but only %s of %s are left: the plan "
                    "under-sized the arena (a bug) or engine.gpu_memory_budget is too small",
                    a->what, purpose, zo_format_bytes(need, asked), need,
                    zo_format_bytes(a->capacity - a->used, left), zo_format_bytes(a->capacity, cap));
  }
  if (a->n_carves == a->cap_carves) {
    const int cap = a->cap_carves ? 2 * a->cap_carves : 64;
    struct zo_arena_carve *c = realloc(a->carves, (size_t)cap * sizeof *c);
    if (!c) {
      *out = NULL;
      return zo_error(-ENOMEM, "%s arena: out of host memory for the list of carves (%s)", a->what, purpose);
    }
    a->carves = c;
    a->cap_carves = cap;
  }
  const int g = arena_group(a, purpose);
  a->carves[a->n_carves++] = (struct zo_arena_carve){.offset = a->used, .nbytes = need, .group = g};
  a->groups[g].used += need;
  if (a->groups[g].used > a->groups[g].peak) a->groups[g].peak = a->groups[g].used;
  *out = a->base + a->used;
  a->used += need;
  if (a->used > a->peak) a->peak = a->used;
  return 0;
}

void zo_arena_reset(struct zo_arena *a, size_t mark) {
  ZO_ASSERT(mark <= a->used);
  while (a->n_carves > 0 && a->carves[a->n_carves - 1].offset >= mark) {
    const struct zo_arena_carve *c = &a->carves[--a->n_carves];
    a->groups[c->group].used -= c->nbytes;
  }
  a->used = mark;
}

size_t zo_arena_free_bytes(const struct zo_arena *a) { return a->capacity - a->used; }
