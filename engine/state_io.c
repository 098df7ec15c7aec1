/* The state I/O helpers of zo/state.h: the staging size rule and the
 * implementation over host buffers. */
#include "zo/state.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *const part_names[ZO_STATE_N_PARTS] = {"parameters", "exp_avg", "exp_avg_sq"};

size_t zo_state_stage_bytes(const struct zo_tensor_table *t) {
  size_t n = ZO_STATE_STAGE_MIN;
  for (int i = 0; i < t->n_tensors; i++)
    if (t->tensors[i].hf_transposed && t->tensors[i].numel * sizeof(float) > n)
      n = t->tensors[i].numel * sizeof(float);
  return n;
}

static int mem_range(struct zo_state_mem *m, enum zo_state_part p, size_t off, size_t nbytes) {
  ZO_ASSERT(p >= 0 && p < ZO_STATE_N_PARTS);
  if (!m->parts[p]) return zo_error(-EINVAL, "the state has no %s", part_names[p]);
  ZO_ASSERT(off <= m->nbytes[p] && nbytes <= m->nbytes[p] - off);
  return 0;
}

static int mem_read(void *ctx, enum zo_state_part p, size_t off, void *dst, size_t nbytes) {
  struct zo_state_mem *m = ctx;
  int err = mem_range(m, p, off, nbytes);
  if (!err && nbytes) memcpy(dst, (const char *)m->parts[p] + off, nbytes);
  return err;
}

static int mem_write(void *ctx, enum zo_state_part p, size_t off, const void *src, size_t nbytes) {
  struct zo_state_mem *m = ctx;
  int err = mem_range(m, p, off, nbytes);
  if (!err && nbytes) memcpy((char *)m->parts[p] + off, src, nbytes);
  return err;
}

int zo_state_io_memory(struct zo_state_io *io, struct zo_state_mem *mem, const struct zo_tensor_table *t) {
  const size_t sb = zo_state_stage_bytes(t);
  *io = (struct zo_state_io){.ctx = mem, .read = mem_read, .write = mem_write, .stage = malloc(sb),
                             .stage_bytes = sb};
  if (!io->stage) return zo_error(-ENOMEM, "out of host memory for a %zu-byte state staging buffer", sb);
  return 0;
}

void zo_state_io_memory_free(struct zo_state_io *io) {
  free(io->stage);
  io->stage = NULL;
}
