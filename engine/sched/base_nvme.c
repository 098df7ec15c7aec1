/* A frozen base on NVMe (LoRA, offload_param "nvme" without an offloaded
 * optimizer): the blocks' working parameters in one read-only parameter
 * file laid out as the Infinity tier's (tier.c: chunks at aio.block_size
 * multiples, each block's consecutive), read into the host ring and the
 * device slots by the tier's slot loads. The file is written only by the
 * state I/O (model.init_from, the seeded init, a resume's reload of the
 * base), through a one-block cache in ring buffer 0 (the streams are idle
 * while the state is accessed); a step never writes it, and no master,
 * optimizer or gradient file exists. The blocks max_in_cpu keeps live in
 * the host pool (h.pcpu), the embedding's rows are gathered on the host
 * (h.emb_params) when it is untied, the rest of the resident ranges is on
 * the device. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>

#include "zo/cpu.h"

int sched_base_nvme_open(struct zo_sched *s) {
  ZO_ASSERT(s->n_slots > 0); /* the blocks live in the file and the slots, none on the device */
  struct zo_nvme_config nc = {.dir = s->pl.nvme_path, .block_size = s->pl.nvme_block,
                              .queue_depth = s->pl.nvme_queue_depth};
  s->nv = zo_nvme_init(&nc);
  if (!s->nv) {
    char what[600];
    snprintf(what, sizeof what, "the LoRA run's frozen base on NVMe (zero_optimization.offload_param.nvme_path = %s)",
             s->pl.nvme_path);
    return error_prefixed(-EIO, what);
  }
  const struct chunk_plan cp = sched_make_chunks(s->t, &s->pl, NULL, NULL);
  s->n_chunks = cp.n_chunks;
  s->chunks = calloc((size_t)s->n_chunks, sizeof *s->chunks);
  s->base_valid = calloc((size_t)s->L, sizeof *s->base_valid);
  if (!s->chunks || !s->base_valid) return zo_error(-ENOMEM, "out of host memory for the NVMe chunk tables");
  sched_make_chunks(s->t, &s->pl, s->chunks, NULL);
  s->base_cached = -1;
  int err = sched_tier_open(s);
  if (err) return err;
  if (s->h.pring) { /* registration is an optimization: without it the store uses plain reads */
    const struct zo_nvme_buffer reg = {s->h.pring, (size_t)s->n_slots * cp.block_pbytes};
    (void)zo_nvme_register_buffers(s->nv, &reg, 1);
  }
  s->nvme_planned = zo_sched_nvme_plan(&s->pl, s->t, NULL);
  return 0;
}

/* The cache's block region: ring buffer 0, in the file's layout. */
static uint8_t *cache_at(struct zo_sched *s, const struct chunk *c) {
  return s->h.pring + (c->pfile_off - s->chunks[s->unit_chunk[1 + s->base_cached]].pfile_off);
}

/* Writes the cached block back, chunk by chunk (a file region is read with
 * the length it was written with), if it changed. */
static int cache_flush(struct zo_sched *s) {
  if (s->base_cached < 0 || !s->base_dirty) return 0;
  const int u = 1 + s->base_cached;
  for (int j = s->unit_chunk[u]; j < s->unit_chunk[u + 1]; j++) {
    const struct chunk *c = &s->chunks[j];
    int err = sched_nvme_write(s, s->pfile_id, c->pfile_off, cache_at(s, c), c->numel * s->m->esize);
    if (err) return error_prefixed(err, "the frozen base on NVMe: writing the parameter file");
  }
  s->base_valid[s->base_cached] = true;
  s->base_dirty = false;
  return 0;
}

/* Block l into the cache: read when the file holds it, else zeros. */
static int cache_fetch(struct zo_sched *s, int l) {
  if (s->base_cached == l) return 0;
  int err = cache_flush(s);
  if (err) return err;
  s->base_cached = l;
  const int u = 1 + l;
  for (int j = s->unit_chunk[u]; j < s->unit_chunk[u + 1]; j++) {
    const struct chunk *c = &s->chunks[j];
    if (!s->base_valid[l]) {
      memset(cache_at(s, c), 0, c->numel * s->m->esize);
    } else if ((err = sched_nvme_read(s, s->pfile_id, c->pfile_off, cache_at(s, c), c->numel * s->m->esize))) {
      s->base_cached = -1;
      return error_prefixed(err, "the frozen base on NVMe: reading the parameter file");
    }
  }
  return 0;
}

/* fp32 values [x, x + k) of the table (at buf) to or from working-dtype
 * host memory at p. */
static void host_cast(struct zo_sched *s, void *p, float *buf, size_t k, bool write) {
  if (write) zo_cpu_cast(p, s->m->dtype, buf, ZO_F32, k);
  else zo_cpu_cast(buf, ZO_F32, p, s->m->dtype, k);
}

/* Elements [x, x + k) of block l's file region through the cache. */
static int block_access(struct zo_sched *s, int l, size_t x, float *buf, size_t k, bool write) {
  int err = cache_fetch(s, l);
  if (err) return err;
  const size_t e = s->m->esize;
  for (int j = s->unit_chunk[1 + l]; j < s->unit_chunk[2 + l]; j++) {
    const struct chunk *c = &s->chunks[j];
    const size_t a = x > c->off ? x : c->off, b = x + k < c->off + c->numel ? x + k : c->off + c->numel;
    if (b > a) host_cast(s, cache_at(s, c) + (a - c->off) * e, buf + (a - x), b - a, write);
  }
  s->base_dirty |= write;
  return 0;
}

int sched_base_nvme_access(struct zo_sched *s, size_t off, uint8_t *buf, size_t n, bool write) {
  ZO_ASSERT(off % sizeof(float) == 0 && n % sizeof(float) == 0);
  const size_t e = s->m->esize, first = s->t->layer_offset[0];
  size_t x = off / sizeof(float), k = n / sizeof(float);
  float *b = (float *)(void *)buf;
  int err = 0;
  for (int u = 0; u < s->U && k > 0 && !err; u++) {
    const struct range r = unit_range(s->t, u);
    if (x >= r.off + r.numel) continue;
    const size_t take = r.off + r.numel - x < k ? r.off + r.numel - x : k;
    const int l = u - 1;
    if (u >= 1 && u <= s->L && l < s->n_cpu) { /* kept in host memory (max_in_cpu) */
      host_cast(s, s->h.pcpu + (x - first) * e, b, take, write);
    } else if (u >= 1 && u <= s->L) {
      err = block_access(s, l, x, b, take, write);
    } else if (u == 0 && s->h.emb_params) { /* the embedding's rows are gathered on the host */
      host_cast(s, (uint8_t *)s->h.emb_params + x * e, b, take, write);
    } else {
      uint8_t *dev = dev_unit_params(s, u);
      ZO_ASSERT(dev && x - r.off + take <= dev_unit_numel(s, u));
      err = sched_frozen_dev_access(s, dev + (x - r.off) * e, b, take, write);
    }
    x += take, b += take, k -= take;
  }
  return err;
}

int sched_base_nvme_done(struct zo_sched *s) {
  int err = cache_flush(s);
  s->base_cached = -1; /* ring buffer 0 is the slots' again */
  s->base_dirty = false;
  for (int l = s->n_cpu; l < s->L && !err && s->st_params_wrote; l++)
    if (!s->base_valid[l])
      err = zo_error(-EINVAL, "the frozen base on NVMe is incomplete: block %d's parameters were never written "
                              "(set every parameter before training)", l);
  return err;
}
