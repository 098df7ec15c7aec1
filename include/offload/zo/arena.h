/* Device arena: one allocation from the backend, sized at start-up by a plan,
 * carved by a bump pointer. Nothing on the device is allocated outside an
 * arena, so fragmentation cannot happen by construction: an allocation either
 * fits the plan or fails with the bytes asked and the bytes left. */
#ifndef ZO_ARENA_H
#define ZO_ARENA_H

#include "zo/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_ARENA_ALIGN 256     /* bytes; every carve starts on this boundary */
#define ZO_ARENA_MAX_GROUPS 32 /* purpose groups counted by name; later ones share the last */

/* Bytes by purpose for the memory report. A carve's group is its purpose up
 * to the first " (": "activations (ln_1)" and "activations (qkv)" are both
 * "activations". */
struct zo_arena_group {
  char name[40]; /* truncated to fit */
  size_t used;   /* bytes carved now */
  size_t peak;   /* high-water mark of used */
};

/* One carve, for reset: which group gets its bytes back. */
struct zo_arena_carve {
  size_t offset; /* bytes from base */
  size_t nbytes; /* bytes, a multiple of ZO_ARENA_ALIGN */
  int group;     /* index into groups[] */
};

struct zo_arena {
  zo_backend_t backend;
  char *base;      /* device memory */
  size_t capacity; /* bytes */
  size_t used;     /* bytes carved so far */
  size_t peak;     /* high-water mark of used */
  const char *what; /* "device", ... for messages */
  int n_groups;    /* rows of groups[] in use, in order of first carve */
  struct zo_arena_group groups[ZO_ARENA_MAX_GROUPS];
  struct zo_arena_carve *carves; /* (n_carves) host memory, in offset order */
  int n_carves, cap_carves;
};

/* Rounds nbytes up to ZO_ARENA_ALIGN. */
size_t zo_arena_round(size_t nbytes);

/* Allocates capacity bytes of device memory. Returns 0, or -ENOMEM with a
 * message naming the bytes asked, free and total, and the config key. */
int zo_arena_init(struct zo_arena *a, zo_backend_t backend, size_t capacity, const char *what);
/* Frees the memory. Accepts a zeroed arena. */
void zo_arena_free(struct zo_arena *a);
/* Carves nbytes (rounded up to ZO_ARENA_ALIGN) for `purpose`, counted in
 * the purpose's group. Returns 0, or -ENOMEM with a message naming purpose,
 * bytes asked and bytes left (or the host memory the carve list needs). */
int zo_arena_alloc(struct zo_arena *a, size_t nbytes, const char *purpose, void **out);
/* Releases everything carved since mark (a previous value of a->used); the
 * groups' used bytes drop with it, their peaks stay. */
void zo_arena_reset(struct zo_arena *a, size_t mark);
/* Bytes not carved: capacity - used. */
size_t zo_arena_free_bytes(const struct zo_arena *a);

#ifdef __cplusplus
}
#endif
#endif /* ZO_ARENA_H */
