/* The optimizer state format and its canonical layout: what the scheduler
 * keeps on every tier, checkpoints save and the state I/O (zo/state.h)
 * addresses. Sizes and offsets only; the scheduler implements them
 * (engine/sched/), its config reader zo_optim_format_from_config is in
 * zo/sched.h. */
#ifndef ZO_OPTIM_FORMAT_H
#define ZO_OPTIM_FORMAT_H

#include "zo/common.h"
#include "zo/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The optimizer state format (optimizer.type and optimizer.params). AdamW:
 * fp32 m, v. AdamW8bit: a tensor of >= min_numel elements keeps m and v as
 * uint8 codes plus one fp32 absmax per block of `block` elements (see
 * zo/adamw8bit.h), a smaller one fp32 m, v.
 * Canonical layout of m (v alike: two separate buffers), what the device and
 * cpu tiers hold and checkpoints stage: one record per tensor in table order,
 * an fp32 tensor as numel floats, an 8-bit one as its codes padded to a
 * multiple of 4 bytes followed by its ceil(numel / block) absmax floats. For
 * AdamW this is exactly a flat fp32 array in table order. */
struct zo_optim_format {
  bool eightbit;    /* optimizer.type "AdamW8bit" */
  size_t block;     /* optimizer.params.block_size: elements per quantization block */
  size_t min_numel; /* optimizer.params.min_8bit_size: smaller tensors keep fp32 m, v */
};

/* Whether a tensor of numel elements has 8-bit states. */
bool zo_optim_is_8bit(const struct zo_optim_format *f, size_t numel);
/* Bytes of one piece of m (or v) of n elements: 4n for fp32 states (q false),
 * else round_up(n, 4) + 4 ceil(n / block). */
size_t zo_optim_piece_nbytes(const struct zo_optim_format *f, bool q, size_t n);
/* Bytes of m (v: the same) in the canonical layout for table t. */
size_t zo_optim_state_nbytes(const struct zo_optim_format *f, const struct zo_tensor_table *t);
/* Byte offset of tensor i's record in the canonical layout. */
size_t zo_optim_tensor_offset(const struct zo_optim_format *f, const struct zo_tensor_table *t, int i);
/* Parameters of t whose tensors have 8-bit states. */
size_t zo_optim_numel_8bit(const struct zo_optim_format *f, const struct zo_tensor_table *t);
/* Fresh state (m = v = 0) in the canonical layout: fp32 zeros, 8-bit codes of
 * zero (zo_adamw8bit_init), zero padding. Either pointer may be NULL. */
void zo_optim_state_fresh(const struct zo_optim_format *f, const struct zo_tensor_table *t, void *adam_m,
                          void *adam_v);

#ifdef __cplusplus
}
#endif
#endif /* ZO_OPTIM_FORMAT_H */
