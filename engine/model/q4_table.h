/* The 4-bit parts of a frozen base (QLoRA, issue 48): one per Hugging Face
 * Linear weight of the blocks (q, k, v, gate, up apart, as bitsandbytes
 * quantizes each Linear; GPT-2's Conv1D as its (out, in) transpose), each on
 * rows [row0, row0 + OC) of a table tensor, with the bytes its packed codes
 * and absmax take (zo/quant4.h's layout). Embeddings, norms and the LM head
 * are not parts: they stay in the compute dtype. Read from the
 * architecture's Hugging Face tensor map; the table is also the layout of the
 * 4-bit arena the parts live in. Private to the engine. */
#ifndef ZO_ENGINE_Q4_TABLE_H
#define ZO_ENGINE_Q4_TABLE_H

#include <stdbool.h>
#include <stddef.h>

#include "zo/model.h"
#include "zo/quant4.h"

struct zo_q4_part {
  char name[ZO_TENSOR_NAME_MAX]; /* the Hugging Face weight */
  int tensor;                    /* table index */
  int row0, OC, C;               /* rows [row0, row0 + OC) of the tensor, C columns */
  size_t packed_nbytes;          /* ceil(OC * C / 2) */
  size_t absmax_nbytes;          /* fp32 per block; nested: a byte per block + fp32 per 256 blocks */
  /* The part in the 4-bit arena (bytes from its start, each ZO_Q4_ALIGN
   * aligned): its codes, then its absmax (fp32) or, nested, its 8-bit
   * absmax codes and their fp32 scales. */
  size_t off_packed, off_absmax, off_absmax2;
  float offset; /* nested: the absmax offset, set by zo_q4_part_quantize */
};

#define ZO_Q4_ALIGN 256

struct zo_q4_table {
  int n_parts;
  struct zo_q4_part *parts; /* by table tensor, then row0: a tensor's parts tile its rows */
  int blocksize;
  enum zo_quant4_type quant_type;
  bool nested;
  size_t nbytes;  /* the arena: every part's bytes, plus the nested map's 256 floats once when nested, aligned */
  size_t off_map; /* nested: the map's 256 floats in the arena */
};

/* The parts of mc's blocks in blocks of blocksize (zo_quant4_blocksize_is_valid)
 * of type, absmax nested or not, and their arena layout. Returns 0 or
 * -errno (message set). */
int zo_q4_table_build(const struct zo_model_config *mc, int blocksize, enum zo_quant4_type type, bool nested,
                      struct zo_q4_table *t);
void zo_q4_table_free(struct zo_q4_table *t);

/* Part p quantized from its dense rows (p->OC x p->C of dtype, ZO_F32,
 * ZO_BF16 or ZO_F16) into arena (t->nbytes host bytes) at its offsets, as
 * bitsandbytes quantizes one Linear (zo/quant4.h; nested: the map written
 * too, p->offset set). Returns 0 or -ENOMEM. */
int zo_q4_part_quantize(const struct zo_q4_table *t, struct zo_q4_part *p, void *arena, const void *rows,
                        enum zo_dtype dtype);
/* Part p's weight descriptor over arena (the host copy or the device one). */
struct zo_quant4_weight zo_q4_part_weight(const struct zo_q4_table *t, const struct zo_q4_part *p,
                                          const void *arena);

#endif /* ZO_ENGINE_Q4_TABLE_H */
