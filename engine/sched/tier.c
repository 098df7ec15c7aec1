/* The Infinity tier: the blocks' working parameters and gradients on NVMe
 * (param_nvme, grads_nvme), next to the optimizer's master, m and v; the
 * gradients alone also whenever the optimizer is on NVMe at stage >= 2 in
 * one process.
 * Parameters: a file in the working dtype laid out like the optimizer's
 * chunks (each block's chunks consecutive, each at an aio.block_size
 * multiple); slot k's block is read into host ring buffer k on stream
 * param_io, param_slots blocks ahead in forward then backward order, and
 * copied from there into the slot; the chunk update writes the rounded
 * parameters back. Gradients: each block's leave the device into host
 * staging as backward produces them and go to a file laid out alike,
 * read-modify-written for micro-batches after the first; the last one's
 * per-tensor sums of squares are taken there (the norm stays the same sum
 * in table order), and the chunk update reads the chunk's gradients with
 * its master, m and v. The resident ranges' gradients stay in the host
 * pool; an untied embedding's weights in h.emb_params, a streamed LM head's
 * in h.head_params, filled from the chunks as they are written. Extents are always the chunk's: a file
 * block is read with the length it was written with.
 * Over ranks (ZeRO-3, pshard): the chunks, so every file, are this rank's
 * shard's (sched_make_chunks); a slot load reads this rank's part of the block
 * into the ring, then stream block_gather assembles the block in the slot's
 * gather buffer with the owners' parts (sched_exchange_range); each block's
 * micro-batch gradients, and the resident ranges' in pieces, are summed onto
 * their owners on the d2h stream (sched_reduce_to_owners, on reduce_comm) before
 * each owner read-modify-writes its own chunks (or accumulates its part of
 * the host pool's): the blocks' reductions are ZeRO-3's with the
 * parameters on cpu (the resident ranges' too when they fit in one block);
 * the norm takes this rank's tensors' sums. max_in_cpu blocks keep their
 * whole-block host layout, this rank's parts filled. Not over ranks: a
 * stage below 3 (zo_sched_init refuses it). A LoRA run's frozen base uses
 * the parameter file and the slot loads alone (base_nvme.c writes it at
 * load; no chunk update ever does). */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>

#include "zo/adamw.h"

int sched_tier_write_params(struct zo_sched *s, int j, const void *src) {
  const struct chunk *c = &s->chunks[j];
  if (c->unit <= s->n_cpu) { /* kept in host memory (max_in_cpu) */
    memcpy(s->h.pcpu + (c->off - s->t->layer_offset[0]) * s->m->esize, src, c->numel * s->m->esize);
    return 0;
  }
  int err = sched_nvme_write(s, s->pfile_id, c->pfile_off, src, c->numel * s->m->esize);
  return err ? error_prefixed(err, "NVMe tier: writing the parameters") : 0;
}

/* param_io stream: block l's chunks from the parameter file into ring buffer
 * l % n_slots, in the file's layout. */
static void param_read_fn(void *arg) {
  const struct task *a = arg;
  struct zo_sched *s = a->s;
  if (atomic_load(&s->err)) return;
  const int l = a->index, u = 1 + l;
  uint8_t *ring = s->h.pring + (size_t)(l % s->n_slots) * s->block_pbytes;
  const uint64_t base = s->chunks[s->unit_chunk[u]].pfile_off;
  const double t0 = zo_time_s();
  for (int j = s->unit_chunk[u]; j < s->unit_chunk[u + 1]; j++) {
    const struct chunk *c = &s->chunks[j];
    int err = sched_nvme_read(s, s->pfile_id, c->pfile_off, ring + (c->pfile_off - base), c->numel * s->m->esize);
    if (err) {
      char what[96];
      snprintf(what, sizeof what, "NVMe tier: reading the parameters of block %d", l);
      async_fail(s, error_prefixed(err, what));
      return;
    }
  }
  atomic_fetch_add(&s->nv_wait_ns, ns_since(t0));
}

/* Stream block_gather, sharded: block l assembled in slot k's gather
 * buffer: this rank's part from its ring buffer (or, max_in_cpu, the host
 * copy), every other part broadcast from its owner (sched_exchange_range, in the
 * same order on every rank). Runs even after an error, so that the others
 * are not left waiting. */
static void tier_gather_fn(void *arg) {
  const struct task *a = arg;
  struct zo_sched *s = a->s;
  const int l = a->index, u = 1 + l, k = l % s->n_slots;
  const struct range r = unit_range(s->t, u);
  const size_t e = s->m->esize;
  uint8_t *buf = block_gather_buf(s, k);
  const double t0 = zo_time_s();
  if (l < s->n_cpu) {
    size_t lo, hi;
    unit_owned(s, u, &lo, &hi);
    if (hi > lo) memcpy(buf + (lo - r.off) * e, s->h.pcpu + (lo - s->t->layer_offset[0]) * e, (hi - lo) * e);
  } else if (s->unit_chunk[u + 1] > s->unit_chunk[u]) {
    const uint8_t *ring = s->h.pring + (size_t)k * s->block_pbytes;
    const uint64_t base = s->chunks[s->unit_chunk[u]].pfile_off;
    for (int j = s->unit_chunk[u]; j < s->unit_chunk[u + 1]; j++) {
      const struct chunk *c = &s->chunks[j];
      memcpy(buf + (c->off - r.off) * e, ring + (c->pfile_off - base), c->numel * e);
    }
  }
  int err = sched_exchange_range(s, s->block_gather_comm, buf, r.off, r.numel, false);
  atomic_fetch_add(&s->comm_ns, ns_since(t0));
  if (err) async_fail(s, error_prefixed(err, "gathering a block's parameters from the ranks"));
}

/* Sharded (ZeRO-3 over ranks): this rank's part of block l read into ring
 * buffer k (param_io), the block gathered into slot k's gather buffer
 * (block_gather), then copied into the slot (h2d). */
static void slot_gather(struct zo_sched *s, int l, int k) {
  zo_backend_t be = s->be;
  const int u = 1 + l;
  const size_t nb = s->t->layer_numel * s->m->esize;
  if (l >= s->n_cpu && s->unit_chunk[u + 1] > s->unit_chunk[u]) {
    CHECK_Q(be->stream_wait_event(s->param_io, s->slot_ready[k]));
    CHECK_Q(be->stream_wait_event(s->param_io, s->param_ready[u]));
    zo_trace_next("nvme read block", l, nb, 0);
    CHECK_Q(be->launch_host_func(s->param_io, param_read_fn, &s->pread_tasks[l]));
    CHECK_Q(be->event_record(s->ring_ready[k], s->param_io));
    CHECK_Q(be->stream_wait_event(s->block_gather, s->ring_ready[k]));
  }
  CHECK_Q(be->stream_wait_event(s->block_gather, s->block_gather_free[k]));
  CHECK_Q(be->stream_wait_event(s->block_gather, s->param_ready[u]));
  zo_trace_next("gather block", l, nb, 0);
  CHECK_Q(be->launch_host_func(s->block_gather, tier_gather_fn, &s->block_gather_tasks[l]));
  CHECK_Q(be->event_record(s->block_gather_ready[k], s->block_gather));
  CHECK_Q(be->stream_wait_event(s->h2d, s->block_gather_ready[k]));
  CHECK_Q(be->stream_wait_event(s->h2d, s->slot_free[k]));
  zo_trace_next("load block", l, nb, 0);
  CHECK_Q(sched_copy(s, s->m->param_slots[k], block_gather_buf(s, k), nb, ZO_COPY_H2D, s->h2d));
  CHECK_Q(be->event_record(s->slot_ready[k], s->h2d));
  CHECK_Q(be->event_record(s->block_gather_free[k], s->h2d));
}

/* Block l into slot k: read into ring buffer k once the ring's last copy
 * to the device is done and the block's update written, then copied chunk
 * by chunk into the slot. */
void sched_param_slot_load(struct zo_sched *s, int l, int k) {
  zo_backend_t be = s->be;
  const struct range r = unit_range(s->t, 1 + l);
  const size_t e = s->m->esize;
  if (s->pshard) {
    slot_gather(s, l, k);
    return;
  }
  if (l < s->n_cpu) { /* kept in host memory (max_in_cpu): straight into the slot */
    CHECK_Q(be->stream_wait_event(s->h2d, s->slot_free[k]));
    CHECK_Q(be->stream_wait_event(s->h2d, s->param_ready[1 + l]));
    zo_trace_next("load block", l, r.numel * e, 0);
    CHECK_Q(sched_copy(s, s->m->param_slots[k], s->h.pcpu + (r.off - s->t->layer_offset[0]) * e, r.numel * e,
                             ZO_COPY_H2D, s->h2d));
    CHECK_Q(be->event_record(s->slot_ready[k], s->h2d));
    return;
  }
  CHECK_Q(be->stream_wait_event(s->param_io, s->slot_ready[k]));
  CHECK_Q(be->stream_wait_event(s->param_io, s->param_ready[1 + l]));
  zo_trace_next("nvme read block", l, r.numel * e, 0);
  CHECK_Q(be->launch_host_func(s->param_io, param_read_fn, &s->pread_tasks[l]));
  CHECK_Q(be->event_record(s->ring_ready[k], s->param_io));
  CHECK_Q(be->stream_wait_event(s->h2d, s->ring_ready[k]));
  CHECK_Q(be->stream_wait_event(s->h2d, s->slot_free[k]));
  zo_trace_next("load block", l, r.numel * e, 0);
  const uint8_t *ring = s->h.pring + (size_t)k * s->block_pbytes;
  const uint64_t base = s->chunks[s->unit_chunk[1 + l]].pfile_off;
  for (int j = s->unit_chunk[1 + l]; j < s->unit_chunk[2 + l]; j++) {
    const struct chunk *c = &s->chunks[j];
    CHECK_Q(sched_copy(s, (uint8_t *)s->m->param_slots[k] + (c->off - r.off) * e, ring + (c->pfile_off - base),
                             c->numel * e, ZO_COPY_H2D, s->h2d));
  }
  CHECK_Q(be->event_record(s->slot_ready[k], s->h2d));
}

/* Waits for the gradient-file writes and reads the last grads_nvme_fn left
 * in flight; h.gio is free after it. Runs also after an error: nothing may
 * stay in flight over h.gio. */
static int gio_drain(struct zo_sched *s) {
  int err = 0;
  for (int i = 0; i < s->gio_n_pending; i++) {
    int e = zo_nvme_wait(s->nv, &s->gio_req[i]);
    if (e && !err) err = e;
  }
  s->gio_n_pending = 0;
  return err;
}

/* d2h stream: one block's micro-batch gradients (staged) into the gradient
 * file, added to what it holds after the first micro-batch; the last
 * micro-batch's per-tensor sums of squares for the norm. Pipelined: the
 * previous block's writes are waited for first (h.gio, and the file ranges
 * a read-modify-write reads, are then free), every chunk's read is issued at
 * once, and each chunk's write is issued as soon as it is added, left in
 * flight past the return (the next block's backward runs meanwhile) until
 * the next call or sched_grads_nvme_drain_fn. */
static void grads_nvme_fn(void *arg) {
  const struct gio_task *a = arg;
  struct zo_sched *s = a->s;
  const int u = 1 + a->block, j0 = s->unit_chunk[u], nj = s->unit_chunk[u + 1] - j0;
  const struct range r = unit_range(s->t, u);
  float *st = a->stage;
  if (s->sharded) {
    /* Summed onto the owners first, even after an error (see collective.c). */
    const double tc = zo_time_s();
    int err = sched_reduce_to_owners(s, s->reduce_comm, st, r.off, r.numel);
    atomic_fetch_add(&s->comm_ns, ns_since(tc));
    if (err) {
      async_fail(s, error_prefixed(err, "summing the gradients over the ranks"));
      return;
    }
  }
  if (atomic_load(&s->err)) return;
  const double t0 = zo_time_s();
  const uint64_t base = nj ? s->chunks[j0].gfile_off : 0; /* sharded: this rank's chunks, maybe none */
  struct zo_nvme_req *rreq = s->gio_req + s->gio_max, *wreq = s->gio_req;
  int err = gio_drain(s), nr = 0, waited = 0;
  for (int i = 0; i < nj && !err && a->k > 0; i++, nr++) {
    const struct chunk *c = &s->chunks[j0 + i];
    err = sched_nvme_read_async(s, s->gfile_id, c->gfile_off, s->h.gio + (c->gfile_off - base), c->numel * sizeof(float),
                             &rreq[i]);
  }
  for (int i = 0; i < nj && !err; i++) {
    const struct chunk *c = &s->chunks[j0 + i];
    float *io = (float *)(void *)(s->h.gio + (c->gfile_off - base));
    float *restrict x = st + (c->off - r.off);
    const size_t n = c->numel;
    if (a->k > 0) {
      err = zo_nvme_wait(s->nv, &rreq[i]);
      waited = i + 1;
      if (err) break;
      const float *restrict d = io;
      /* acc + micro: the one rounding every placement's accumulation makes. */
#pragma omp parallel for simd schedule(static) if (n >= ((size_t)1 << 16))
      for (size_t e = 0; e < n; e++) x[e] = d[e] + x[e];
    }
    memcpy(io, x, n * sizeof(float));
    err = sched_nvme_write_async(s, s->gfile_id, c->gfile_off, io, n * sizeof(float), &wreq[i]);
    s->gio_n_pending = i + 1;
  }
  for (int i = waited; i < nr; i++) (void)zo_nvme_wait(s->nv, &rreq[i]); /* after an error: reads over h.gio */
  if (err) {
    (void)gio_drain(s);
    char what[96];
    snprintf(what, sizeof what, "NVMe tier: accumulating the gradients of block %d", a->block);
    async_fail(s, error_prefixed(err, what));
    return;
  }
  if (a->k == s->pl.grad_accum - 1)
    for (int i = s->sh.t_lo; i < s->sh.t_hi; i++) { /* sharded: this rank's tensors, summed */
      const struct zo_tensor_info *ti = &s->t->tensors[i];
      if (ti->layer == a->block) s->norm_host[i] = zo_sumsq(st + (ti->offset - r.off), ti->numel);
    }
  atomic_fetch_add(&s->acc_ns, ns_since(t0));
}

/* d2h stream, after a micro-batch's last block: its gradient writes
 * finished before the optimizer (or the next micro-batch) reads the file. */
void sched_grads_nvme_drain_fn(void *arg) {
  struct zo_sched *s = arg;
  const double t0 = zo_time_s();
  int err = gio_drain(s);
  atomic_fetch_add(&s->acc_ns, ns_since(t0));
  if (err && !atomic_load(&s->err)) async_fail(s, error_prefixed(err, "NVMe tier: writing the gradients"));
}

void sched_grads_out_nvme(struct zo_sched *s, int l, int g) {
  zo_backend_t be = s->be;
  const size_t nb = s->t->layer_numel * sizeof(float);
  zo_trace_next("grads out", l, nb, 0);
  CHECK_Q(sched_copy(s, s->h.stage[0], s->m->grad_slots[g], nb, ZO_COPY_D2H, s->d2h));
  CHECK_Q(be->event_record(s->gslot_free[g], s->d2h));
  zo_trace_next("nvme grads", l, nb, 0);
  CHECK_Q(be->launch_host_func(s->d2h, grads_nvme_fn, &s->gio_tasks[(size_t)s->k * (size_t)s->L + (size_t)l]));
}

/* Micro-batches after the first: the resident ranges' gradients leave in
 * block-sized pieces through the one staging buffer, each added to the
 * host accumulator (elementwise, so the pieces add the same bits). */
void sched_grads_out_resident_pieces(struct zo_sched *s) {
  const size_t head = unit_range(s->t, 0).numel;
  for (int i = 0; i < s->n_res_pieces; i++) {
    struct acc_task *a = &s->res_pieces[i];
    const size_t off = (size_t)(a->dst - s->h.grads); /* into the resident layout: head, then tail */
    ZO_ASSERT(off + a->n <= head + s->m->res_tail && off + s->m->res_ghead >= head);
    zo_trace_next("grads out", s->L, a->n * sizeof(float), 0);
    /* on the device without the head range when the embedding's gradient is summed on the host */
    CHECK_Q(sched_copy(s, s->h.stage[0], s->m->grads + (off + s->m->res_ghead - head), a->n * sizeof(float),
                                ZO_COPY_D2H, s->d2h));
    if (s->sharded) { /* every micro-batch: summed onto the owners, who accumulate */
      zo_trace_next("reduce grads", s->L, a->n * sizeof(float), 0);
      CHECK_Q(s->be->launch_host_func(s->d2h, sched_reduce_acc_fn, &s->res_reduce[i]));
      continue;
    }
    zo_trace_next("accumulate grads", s->L, a->n * sizeof(float), a->n);
    CHECK_Q(s->be->launch_host_func(s->d2h, sched_acc_fn, a));
  }
}

/* d2h stream, after the last micro-batch's resident gradients: their
 * per-tensor sums of squares. */
void sched_norm_res_fn(void *arg) {
  const struct task *a = arg;
  struct zo_sched *s = a->s;
  if (atomic_load(&s->err)) return;
  for (int i = s->sh.t_lo; i < s->sh.t_hi; i++) { /* sharded: this rank's tensors */
    const struct zo_tensor_info *ti = &s->t->tensors[i];
    if (ti->layer < 0) s->norm_host[i] = zo_sumsq(grads_at(s, ti->offset), ti->numel);
  }
}

/* The gradient file and its tables (grads_nvme). */
static int tier_grads_open(struct zo_sched *s, const struct chunk_plan *cp) {
  s->gio_tasks = calloc((size_t)s->pl.grad_accum * (size_t)s->L, sizeof *s->gio_tasks);
  if (!s->norm_host) s->norm_host = calloc((size_t)s->t->n_tensors, sizeof *s->norm_host);
  if (!s->gio_tasks || !s->norm_host) return zo_error(-ENOMEM, "out of host memory for the NVMe tier's tables");
  /* The most chunks of a block: each has a read and a write request. */
  for (int u = 1; u <= s->L; u++)
    if (s->unit_chunk[u + 1] - s->unit_chunk[u] > s->gio_max) s->gio_max = s->unit_chunk[u + 1] - s->unit_chunk[u];
  s->gio_req = calloc(2 * (size_t)(s->gio_max > 0 ? s->gio_max : 1), sizeof *s->gio_req);
  if (!s->gio_req) return zo_error(-ENOMEM, "out of host memory for the NVMe tier's tables");
  for (int l = 0; l < s->L; l++)
    for (int k = 0; k < s->pl.grad_accum; k++)
      s->gio_tasks[(size_t)k * (size_t)s->L + (size_t)l] = (struct gio_task){s, l, k, s->h.stage[0]};
  s->norm_res_task = (struct task){s, 0, 0};
  /* The resident ranges in pieces of at most a block (never across the
   * head / tail boundary); the tail's on the device (a streamed LM head's
   * pieces leave like blocks). */
  const size_t LN = s->t->layer_numel, head = unit_range(s->t, 0).numel, tail = s->m->res_tail;
  s->n_res_pieces = (int)((head + LN - 1) / LN + (tail + LN - 1) / LN);
  s->res_pieces = calloc((size_t)s->n_res_pieces, sizeof *s->res_pieces);
  if (!s->res_pieces) return zo_error(-ENOMEM, "out of host memory for the NVMe tier's tables");
  int np = 0;
  for (int r = s->m->res_ghead ? 0 : 1; r < 2; r++) { /* no head range: the embedding's gradient on the host */
    const size_t base = r ? head : 0, n = r ? tail : head;
    for (size_t a = 0; a < n; a += LN)
      s->res_pieces[np++] = (struct acc_task){s, s->h.grads + base + a, s->h.stage[0], n - a < LN ? n - a : LN};
  }
  s->n_res_pieces = np;
  if (s->sharded) { /* the same pieces' sums onto their owners (sched_reduce_acc_fn) */
    s->res_reduce = calloc((size_t)np, sizeof *s->res_reduce);
    if (!s->res_reduce) return zo_error(-ENOMEM, "out of host memory for the NVMe tier's tables");
    for (int i = 0; i < np; i++) {
      const size_t off = (size_t)(s->res_pieces[i].dst - s->h.grads); /* head, then tail */
      s->res_reduce[i] = (struct reduce_task){s, off < head ? off : unit_range(s->t, s->U - 1).off + (off - head),
                                              s->res_pieces[i].n, s->h.stage[0], 0};
    }
  }
  int err;
  /* Sharded, a rank may own no part of any block: no file then. */
  if (cp->gfile && (err = zo_nvme_file_create(s->nv, "grads", cp->gfile, &s->gfile_id)))
    return error_prefixed(err, "NVMe tier: creating the gradient file");
  return 0;
}

/* From sched_nvme_open (or sched_base_nvme_open, a frozen base's parameter
 * file alone), once the chunks are made: the gradient and parameter files
 * (fallocated: a disk too small fails here, before step 1), the tables,
 * the stream and the events. */
int sched_tier_open(struct zo_sched *s) {
  const bool params = s->pl.param_nvme, grads = s->pl.grads_nvme;
  if (!grads && !params) return 0;
  const struct chunk_plan cp = sched_make_chunks(s->t, &s->pl, NULL, NULL);
  s->n_cpu = cpu_blocks(&s->pl, s->t);
  s->block_pbytes = cp.block_pbytes;
  s->block_gbytes = cp.block_gbytes;
  s->unit_chunk = calloc((size_t)s->U + 1, sizeof *s->unit_chunk);
  if (params) {
    s->ring_ready = calloc((size_t)s->n_slots, sizeof *s->ring_ready);
    s->pread_tasks = calloc((size_t)s->L, sizeof *s->pread_tasks);
  }
  if (!s->unit_chunk || (params && (!s->ring_ready || !s->pread_tasks)))
    return zo_error(-ENOMEM, "out of host memory for the NVMe tier's tables");
  for (int u = s->U, j = s->n_chunks; u >= 0; u--) {
    while (j > 0 && s->chunks[j - 1].unit >= u) j--;
    s->unit_chunk[u] = u == s->U ? s->n_chunks : j;
  }
  for (int l = 0; l < s->L && params; l++) s->pread_tasks[l] = (struct task){s, l, 0};
  int err;
  if (grads && (err = tier_grads_open(s, &cp))) return err;
  if (!params) return 0;
  if (cp.pfile && (err = zo_nvme_file_create(s->nv, "params", cp.pfile, &s->pfile_id)))
    return error_prefixed(err, "NVMe tier (zero_optimization.offload_param.device = \"nvme\"): creating the "
                               "parameter file");
  if ((err = sched_stream_create(s, &s->param_io, "param_io")) || (err = sched_events_create(s->be, s->ring_ready, s->n_slots)))
    return err;
  return 0;
}
