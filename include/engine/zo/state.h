/* Random access to a model's training state, wherever it lives: the fp32
 * parameters (numel floats in table order) and AdamW's m and v (the
 * canonical layout of the run's optimizer format, zo/optim_format.h), addressed in
 * bytes. Checkpoint saves read through it and loads, Hugging Face imports and
 * random initialisation write through it, piece by piece, so no full host
 * copy of the state is ever made: the scheduler's implementation
 * (zo_sched_state_io) reads and writes the device, the host pool or the NVMe
 * files directly, with one small staging buffer. A memory implementation
 * over host buffers serves tests and tools. */
#ifndef ZO_STATE_H
#define ZO_STATE_H

#include "zo/common.h"
#include "zo/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum zo_state_part { ZO_STATE_PARAMS, ZO_STATE_M, ZO_STATE_V, ZO_STATE_N_PARTS };

/* Minimum bytes of a staging buffer; checkpoint I/O converts through it. */
#define ZO_STATE_STAGE_MIN ((size_t)8 << 20)

struct zo_state_io {
  void *ctx;
  /* Bytes [off, off + nbytes) of part into dst / from src (host memory).
   * Ranges must lie inside the part. Return 0 or -errno with a message. */
  int (*read)(void *ctx, enum zo_state_part part, size_t off, void *dst, size_t nbytes);
  int (*write)(void *ctx, enum zo_state_part part, size_t off, const void *src, size_t nbytes);
  void *stage;        /* host scratch of stage_bytes the callers may use between calls */
  size_t stage_bytes; /* >= zo_state_stage_bytes of the table */
};

/* Staging bytes checkpoint I/O needs for table t: ZO_STATE_STAGE_MIN, or
 * more when a tensor stored transposed (hf_transposed) is larger, since
 * transposing it needs the whole tensor at once. */
size_t zo_state_stage_bytes(const struct zo_tensor_table *t);

/* Host buffers as a state: parts[p] of nbytes[p] bytes (NULL: the part is
 * absent, reads and writes of it fail with -EINVAL), with a staging buffer
 * of zo_state_stage_bytes(t) allocated here. */
struct zo_state_mem {
  void *parts[ZO_STATE_N_PARTS];
  size_t nbytes[ZO_STATE_N_PARTS];
};
/* Fills io over mem (which must outlive io). Returns 0 or -ENOMEM. */
int zo_state_io_memory(struct zo_state_io *io, struct zo_state_mem *mem, const struct zo_tensor_table *t);
/* Frees what zo_state_io_memory or zo_state_io_model allocated. Accepts a
 * zeroed io. */
void zo_state_io_free(struct zo_state_io *io);

struct zo_model;
/* The parameters of a model without offload or master copy (eval, sample)
 * as a state: writes round fp32 values into the device's working dtype
 * through a cast buffer of its own (it and the stage allocated here,
 * zo_state_io_free frees them), reads widen them back; offsets and sizes are multiples of 4 bytes.
 * m and v are absent. Copies are synchronous on the NULL stream. Returns 0
 * or -ENOMEM. */
int zo_state_io_model(struct zo_state_io *io, struct zo_model *m);

#ifdef __cplusplus
}
#endif
#endif /* ZO_STATE_H */
