/* Offset tables: every state class (parameters, gradients, master weights,
 * AdamW m and v) lives in one contiguous buffer per tier, described by one
 * table of {name, offset, numel, shape} built once from the model config.
 * The table is built by the model's architecture (engine/model/arch.h).
 * Offsets and sizes are in elements, so the same table serves an fp32 master
 * copy and a bf16 working copy (byte offset = offset * dtype size). A layer is
 * the contiguous range [layer_offset[l], layer_offset[l] + layer_numel): the
 * scheduler moves ranges, not objects. */
#ifndef ZO_TENSOR_H
#define ZO_TENSOR_H

#include "zo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_TENSOR_NAME_MAX 64

struct zo_tensor_info {
  char name[ZO_TENSOR_NAME_MAX]; /* Hugging Face name, e.g. "transformer.h.3.attn.c_attn.weight" */
  size_t offset;                 /* elements from the start of the buffer */
  size_t numel;                  /* elements */
  int ndim;                      /* 1 or 2 */
  int shape[2];                  /* our layout: Linear weights are (out, in) */
  int layer;                     /* transformer block index, -1 outside blocks */
  bool decay;                    /* AdamW weight decay applies (ndim >= 2) */
  bool hf_transposed;            /* stored transposed in Hugging Face checkpoints
                                  * (GPT-2's Conv1D): saving it needs the whole
                                  * tensor at once (zo_state_stage_bytes) */
};

struct zo_tensor_table {
  int n_tensors;
  struct zo_tensor_info *tensors; /* (n_tensors), in buffer order */
  size_t numel;                   /* total elements */
  int n_layer;
  size_t *layer_offset;           /* (n_layer) first element of block l */
  size_t layer_numel;             /* elements of one block (all blocks equal) */
  int head_tensors;               /* tensors before block 0 (the embeddings) */
  bool embed_alone;               /* the head range is the token embedding alone and only the
                                   * lookup reads it (untied LM head): its gradient is a sum of
                                   * rows of d(embedding output), which can be taken anywhere */
  int block_tensors;              /* tensors per block: block l's are
                                   * head_tensors + l * block_tensors + [0, block_tensors) */
};

/* Finds a tensor by name; NULL when absent. */
const struct zo_tensor_info *zo_tensor_table_find(const struct zo_tensor_table *t,
                                                  const char *name);
/* Frees the table's arrays (not the struct). Accepts a zeroed table. */
void zo_tensor_table_free(struct zo_tensor_table *t);

#ifdef __cplusplus
}
#endif
#endif /* ZO_TENSOR_H */
