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

#define ZO_ARENA_ALIGN 256 /* bytes; every carve starts on this boundary */

struct zo_arena {
  zo_backend_t backend;
  char *base;      /* device memory */
  size_t capacity; /* bytes */
  size_t used;     /* bytes carved so far */
  size_t peak;     /* high-water mark of used */
  const char *what; /* "device", ... for messages */
};

/* Rounds nbytes up to ZO_ARENA_ALIGN. */
size_t zo_arena_round(size_t nbytes);

/* Allocates capacity bytes of device memory. Returns 0, or -ENOMEM with a
 * message naming the bytes asked, free and total, and the config key. */
int zo_arena_init(struct zo_arena *a, zo_backend_t backend, size_t capacity, const char *what);
/* Frees the memory. Accepts a zeroed arena. */
void zo_arena_free(struct zo_arena *a);
/* Carves nbytes (rounded up to ZO_ARENA_ALIGN) for `purpose`. Returns 0, or
 * -ENOMEM with a message naming purpose, bytes asked and bytes left. */
int zo_arena_alloc(struct zo_arena *a, size_t nbytes, const char *purpose, void **out);
/* Releases everything carved since mark (a previous value of a->used). */
void zo_arena_reset(struct zo_arena *a, size_t mark);

#ifdef __cplusplus
}
#endif
#endif /* ZO_ARENA_H */
