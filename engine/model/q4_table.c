/* The 4-bit parts of a frozen base (engine/model/q4_table.h): the 2-D
 * tensors of the blocks in the architecture's Hugging Face tensor map. */
#include "q4_table.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "zo/quant4.h"

static size_t part_absmax_nbytes(size_t numel, int blocksize, bool nested) {
  const size_t nb = zo_quant4_n_blocks(numel, (size_t)blocksize);
  if (!nested) return nb * sizeof(float);
  return nb + (nb + ZO_QUANT4_NESTED_BLOCK - 1) / ZO_QUANT4_NESTED_BLOCK * sizeof(float);
}

static size_t align_up(size_t n) { return (n + ZO_Q4_ALIGN - 1) / ZO_Q4_ALIGN * ZO_Q4_ALIGN; }

/* Part p's place in the arena from byte *end on; *end moves past it. */
static void place(struct zo_q4_part *p, int blocksize, bool nested, size_t *end) {
  const size_t nb = zo_quant4_n_blocks((size_t)p->OC * (size_t)p->C, (size_t)blocksize);
  p->off_packed = *end;
  p->off_absmax = align_up(p->off_packed + p->packed_nbytes);
  if (nested) {
    p->off_absmax2 = align_up(p->off_absmax + nb);
    *end = align_up(p->off_absmax2 + (p->absmax_nbytes - nb));
  } else {
    p->off_absmax2 = 0;
    *end = align_up(p->off_absmax + p->absmax_nbytes);
  }
}

/* Map entry h as a part when it is a block's 2-D weight. */
static bool is_part(const struct zo_tensor_table *tt, const struct zo_hf_tensor *h) {
  return h->ndim == 2 && tt->tensors[h->tensor].layer >= 0;
}

static int by_tensor_row(const void *a, const void *b) {
  const struct zo_q4_part *p = a, *q = b;
  if (p->tensor != q->tensor) return p->tensor < q->tensor ? -1 : 1;
  return (p->row0 > q->row0) - (p->row0 < q->row0);
}

/* Every tensor's parts tile its rows [0, shape[0]), C its columns. */
static int check_tiling(const struct zo_tensor_table *tt, const struct zo_q4_table *t) {
  for (int i = 0; i < t->n_parts;) {
    const int tensor = t->parts[i].tensor;
    int row = 0;
    for (; i < t->n_parts && t->parts[i].tensor == tensor; i++) {
      const struct zo_q4_part *p = &t->parts[i];
      if (p->row0 != row || p->C != tt->tensors[tensor].shape[1])
        return zo_error(-EINVAL, "quantization: %s (rows %d..%d, %d columns) does not tile %s (%d x %d)", p->name,
                        p->row0, p->row0 + p->OC, p->C, tt->tensors[tensor].name, tt->tensors[tensor].shape[0],
                        tt->tensors[tensor].shape[1]);
      row += p->OC;
    }
    if (row != tt->tensors[tensor].shape[0])
      return zo_error(-EINVAL, "quantization: the parts of %s cover %d of its %d rows", tt->tensors[tensor].name,
                      row, tt->tensors[tensor].shape[0]);
  }
  return 0;
}

int zo_q4_table_build(const struct zo_model_config *mc, int blocksize, enum zo_quant4_type type, bool nested,
                      struct zo_q4_table *t) {
  memset(t, 0, sizeof *t);
  if (!zo_quant4_blocksize_is_valid((size_t)blocksize))
    return zo_error(-EINVAL, "quantization: blocksize %d is not one of bitsandbytes' (32 to 4096, a power of 2)",
                    blocksize);
  struct zo_tensor_table table;
  struct zo_hf_tensor *map;
  int n, err = zo_arch_hf_map(mc, &map, &n, &table);
  if (err) return err;
  t->parts = calloc((size_t)n + 1, sizeof *t->parts);
  if (!t->parts) {
    err = zo_error(-ENOMEM, "quantization: out of memory for %d parts", n);
    goto out_free;
  }
  t->blocksize = blocksize, t->quant_type = type, t->nested = nested;
  for (int i = 0; i < n; i++) {
    const struct zo_hf_tensor *h = &map[i];
    if (!is_part(&table, h)) continue;
    struct zo_q4_part *p = &t->parts[t->n_parts++];
    snprintf(p->name, sizeof p->name, "%s", h->name);
    p->tensor = h->tensor, p->row0 = h->row0, p->OC = h->rows;
    p->C = (int)(h->transpose ? h->shape[0] : h->shape[1]);
    const size_t numel = (size_t)p->OC * (size_t)p->C;
    p->packed_nbytes = zo_quant4_packed_nbytes(numel);
    p->absmax_nbytes = part_absmax_nbytes(numel, blocksize, nested);
  }
  qsort(t->parts, (size_t)t->n_parts, sizeof *t->parts, by_tensor_row);
  err = check_tiling(&table, t);
  for (int i = 0; i < t->n_parts; i++) place(&t->parts[i], blocksize, nested, &t->nbytes);
  if (nested) t->off_map = t->nbytes, t->nbytes += align_up(256 * sizeof(float));
out_free:
  free(map);
  zo_tensor_table_free(&table);
  if (err) zo_q4_table_free(t);
  return err;
}

void zo_q4_table_free(struct zo_q4_table *t) {
  free(t->parts);
  memset(t, 0, sizeof *t);
}

int zo_q4_part_quantize(const struct zo_q4_table *t, struct zo_q4_part *p, void *arena, const void *rows,
                        enum zo_dtype dtype) {
  char *a = arena;
  const size_t numel = (size_t)p->OC * (size_t)p->C, nb = zo_quant4_n_blocks(numel, (size_t)t->blocksize);
  float *absmax = t->nested ? malloc(nb * sizeof *absmax) : (float *)(void *)(a + p->off_absmax);
  if (!absmax) return zo_error(-ENOMEM, "quantization: out of memory for %zu absmax of %s", nb, p->name);
  zo_quant4_quantize((uint8_t *)a + p->off_packed, absmax, rows, dtype, numel, (size_t)t->blocksize,
                     t->quant_type);
  if (t->nested) {
    struct zo_quant4_nested nq = {.qabsmax = (uint8_t *)a + p->off_absmax,
                                  .absmax2 = (float *)(void *)(a + p->off_absmax2)};
    zo_quant4_nested_quantize(&nq, absmax, nb, zo_quant4_nested_map());
    p->offset = nq.offset;
    memcpy(a + t->off_map, zo_quant4_nested_map(), 256 * sizeof(float));
    free(absmax);
  }
  return 0;
}

struct zo_quant4_weight zo_q4_part_weight(const struct zo_q4_table *t, const struct zo_q4_part *p,
                                          const void *arena) {
  const char *a = arena;
  struct zo_quant4_weight w = {.packed = (const uint8_t *)a + p->off_packed, .blocksize = t->blocksize,
                               .type = t->quant_type, .OC = p->OC, .C = p->C};
  if (t->nested) {
    w.qabsmax = (const uint8_t *)a + p->off_absmax;
    w.absmax2 = (const float *)(const void *)(a + p->off_absmax2);
    w.map = (const float *)(const void *)(a + t->off_map);
    w.offset = p->offset;
  } else {
    w.absmax = (const float *)(const void *)(a + p->off_absmax);
  }
  return w;
}
