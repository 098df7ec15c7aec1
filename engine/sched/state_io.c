/* The state I/O helpers of zo/state.h: the staging size rule and the
 * implementation over host buffers. */
#include "zo/state.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "zo/cpu.h"
#include "zo/model.h"

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

void zo_state_io_free(struct zo_state_io *io) {
  /* A model io's stage lives inside its context's allocation. */
  free(io->read == mem_read ? io->stage : io->ctx);
  io->stage = io->ctx = NULL;
}

/* The model io's context: the model and a cast buffer of its own (the
 * io's stage belongs to the callers, whose data a write may come from). */
#define MODEL_CAST_NUMEL ((size_t)1 << 20)
struct model_io {
  struct zo_model *m;
  void *cast; /* (MODEL_CAST_NUMEL) working-dtype elements */
};

static int model_access(struct model_io *x, enum zo_state_part p, size_t off, uint8_t *buf, size_t nbytes,
                        bool write) {
  struct zo_model *m = x->m;
  if (p != ZO_STATE_PARAMS) return zo_error(-EINVAL, "a forward-only model has no %s", part_names[p]);
  ZO_ASSERT(off % sizeof(float) == 0 && nbytes % sizeof(float) == 0);
  ZO_ASSERT(off / sizeof(float) + nbytes / sizeof(float) <= m->table.numel);
  zo_backend_t be = m->backend;
  const size_t e0 = off / sizeof(float), n = nbytes / sizeof(float);
  int err = 0;
  if (m->dtype == ZO_F32) {
    void *dev = zo_model_at(m, m->params, e0);
    err = write ? be->memcpy_async(dev, buf, nbytes, ZO_COPY_H2D, NULL) : be->memcpy_async(buf, dev, nbytes, ZO_COPY_D2H, NULL);
    return err ? err : be->stream_synchronize(NULL);
  }
  for (size_t i = 0; i < n && !err; i += MODEL_CAST_NUMEL) {
    const size_t k = n - i < MODEL_CAST_NUMEL ? n - i : MODEL_CAST_NUMEL;
    void *dev = zo_model_at(m, m->params, e0 + i);
    float *host = (float *)(void *)(buf + i * sizeof(float));
    if (write) {
      zo_cpu_cast(x->cast, m->dtype, host, ZO_F32, k);
      err = be->memcpy_async(dev, x->cast, k * m->esize, ZO_COPY_H2D, NULL);
      if (!err) err = be->stream_synchronize(NULL); /* before the cast buffer is rewritten */
    } else {
      err = be->memcpy_async(x->cast, dev, k * m->esize, ZO_COPY_D2H, NULL);
      if (!err) err = be->stream_synchronize(NULL);
      if (!err) zo_cpu_cast(host, ZO_F32, x->cast, m->dtype, k);
    }
  }
  return err;
}

static int model_read(void *ctx, enum zo_state_part p, size_t off, void *dst, size_t nbytes) {
  return model_access(ctx, p, off, dst, nbytes, false);
}

static int model_write(void *ctx, enum zo_state_part p, size_t off, const void *src, size_t nbytes) {
  return model_access(ctx, p, off, (uint8_t *)(uintptr_t)src, nbytes, true);
}

int zo_state_io_model(struct zo_state_io *io, struct zo_model *m) {
  ZO_ASSERT(!m->master && m->layout.param_slots == 0);
  const size_t sb = zo_state_stage_bytes(&m->table);
  /* One allocation: the context, then the caller's stage, then the cast buffer. */
  const size_t head = (sizeof(struct model_io) + 63) / 64 * 64;
  uint8_t *mem = malloc(head + sb + MODEL_CAST_NUMEL * m->esize);
  *io = (struct zo_state_io){0};
  if (!mem) return zo_error(-ENOMEM, "out of host memory for the parameter upload's staging (%zu bytes)", sb);
  struct model_io *x = (struct model_io *)(void *)mem;
  *x = (struct model_io){m, mem + head + sb};
  *io = (struct zo_state_io){.ctx = x, .read = model_read, .write = model_write, .stage = mem + head,
                             .stage_bytes = sb};
  return 0;
}
