/* The 4-bit parts of a frozen base (QLoRA, issue 48): one per Hugging Face
 * Linear weight of the blocks (q, k, v, gate, up apart, as bitsandbytes
 * quantizes each Linear; GPT-2's Conv1D as its (out, in) transpose), each on
 * rows [row0, row0 + OC) of a table tensor, with the bytes its packed codes
 * and absmax take (zo/quant4.h's layout). Embeddings, norms and the LM head
 * are not parts: they stay in the compute dtype. Read from the
 * architecture's Hugging Face tensor map. Private to the engine. */
#ifndef ZO_ENGINE_Q4_TABLE_H
#define ZO_ENGINE_Q4_TABLE_H

#include <stdbool.h>
#include <stddef.h>

#include "zo/model.h"

struct zo_q4_part {
  char name[ZO_TENSOR_NAME_MAX]; /* the Hugging Face weight */
  int tensor;                    /* table index */
  int row0, OC, C;               /* rows [row0, row0 + OC) of the tensor, C columns */
  size_t packed_nbytes;          /* ceil(OC * C / 2) */
  size_t absmax_nbytes;          /* fp32 per block; nested: a byte per block + fp32 per 256 blocks */
};

struct zo_q4_table {
  int n_parts;
  struct zo_q4_part *parts; /* by table tensor, then row0: a tensor's parts tile its rows */
  int blocksize;
  bool nested;
  size_t nbytes; /* every part's bytes, plus the nested map's 256 floats once when nested */
};

/* The parts of mc's blocks in blocks of blocksize (zo_quant4_blocksize_is_valid),
 * absmax nested or not. Returns 0 or -errno (message set). */
int zo_q4_table_build(const struct zo_model_config *mc, int blocksize, bool nested, struct zo_q4_table *t);
void zo_q4_table_free(struct zo_q4_table *t);

#endif /* ZO_ENGINE_Q4_TABLE_H */
