/* The NVMe tier: the state files (master, m, v), the chunk pipeline that
 * reads chunks ahead into staging buffers on the I/O stream while the
 * optimizer stream updates earlier ones and queues their writes, and the
 * one-chunk-per-file cache the state I/O reads and writes through. Host
 * functions here block only on I/O, never on an event. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>

#include "zo/adamw8bit.h"
#include "zo/cpu.h"

static const char *const nv_class[NV_FILES] = {"master", "exp_avg", "exp_avg_sq"};

/* NVMe pipeline. Chunks are numbered globally across steps (g = step base +
 * chunk index) and chunk g is staged in buffer g % nbuf. Reads run d =
 * min(nbuf, n_chunks) chunks ahead: the refill of chunk g (a host function
 * on the I/O stream) waits, on that stream, for chunk g - d's update and
 * device copy, then for its writes (the same buffer when d = nbuf, the same
 * file range when d = n_chunks), and issues the reads. The optimizer stream
 * only waits for the reads of the chunk it updates, issued long before, and
 * queues that chunk's writes without waiting for them. The first d refills
 * of a step are queued with its first micro-batch, so those reads overlap
 * the forward and backward. */
int sched_nv_wait_all(struct zo_sched *s, struct zo_nvme_req *req) {
  int err = 0;
  for (int f = 0; f < NV_FILES; f++) {
    int e = zo_nvme_wait(s->nv, &req[f]);
    if (e && !err) err = e;
  }
  return err;
}

int sched_nv_drain_writes(struct zo_sched *s, struct nv_buffer *b) {
  if (!b->writing) return 0;
  b->writing = false;
  return sched_nv_wait_all(s, b->wreq);
}

int sched_nv_buffer_drain(struct zo_sched *s, struct nv_buffer *b) {
  int err = sched_nv_drain_writes(s, b);
  if (b->greading) {
    b->greading = false;
    int e = zo_nvme_wait(s->nv, &b->greq);
    if (e && !err) err = e;
  }
  if (b->reading) {
    b->reading = false;
    int e = sched_nv_wait_all(s, b->rreq);
    if (e && !err) err = e;
  }
  return err;
}

int sched_nv_read_async(struct zo_sched *s, int j, struct nv_buffer *b) {
  const struct chunk *c = &s->chunks[j];
  int err = 0;
  for (int f = 0; f < NV_FILES && !err; f++)
    err = sched_nvme_read_async(s, s->file_id[f], nv_off(c, f), b->file[f], nv_nbytes(c, f), &b->rreq[f]);
  b->reading = true;
  return err;
}

int sched_nv_write_async(struct zo_sched *s, int j, struct nv_buffer *b) {
  const struct chunk *c = &s->chunks[j];
  int err = 0;
  for (int f = 0; f < NV_FILES && !err; f++)
    err = sched_nvme_write_async(s, s->file_id[f], nv_off(c, f), b->file[f], nv_nbytes(c, f), &b->wreq[f]);
  b->writing = true;
  return err;
}

/* I/O stream: chunk g - d's writes finished, then chunk g's reads issued. */
static void nv_refill_fn(void *arg) {
  const struct nv_task *a = arg;
  struct zo_sched *s = a->s;
  if (atomic_load(&s->err)) return;
  struct nv_buffer *b = &s->nvb[a->buf];
  int err = a->pred_buf >= 0 ? sched_nv_drain_writes(s, &s->nvb[a->pred_buf]) : 0;
  if (!err) err = sched_nv_drain_writes(s, b);
  if (err) {
    async_fail(s, error_prefixed(err, "NVMe tier: writing the optimizer state"));
    return;
  }
  if ((err = sched_nv_read_async(s, a->chunk, b))) async_fail(s, error_prefixed(err, "NVMe tier: reading the optimizer state"));
}

/* I/O stream, behind the chunk's update: queues its writes. Issued here and
 * not by the update so that the store (FIFO) sees each write followed by the
 * read that waits for it, never several writes ahead of a needed read.
 * param_nvme: a block chunk's rounded working parameters go first, to the
 * parameter file, and are waited for here (the optimizer stream meanwhile
 * updates the next chunk): the block's param_ready is recorded on this
 * stream behind its last chunk's writes, and the next slot load reads the
 * file after it. A skipped step leaves the file as it is. */
void sched_nv_write_fn(void *arg) {
  const struct nv_task *a = arg;
  struct zo_sched *s = a->s;
  if (atomic_load(&s->err)) return;
  struct nv_buffer *b = &s->nvb[a->buf];
  const struct chunk *c = &s->chunks[a->chunk];
  const bool pwrite = s->pl.param_nvme && c->unit > s->n_cpu && c->unit <= s->L && !s->step[a->parity].skip;
  int err = 0;
  if (pwrite) {
    const void *src = s->pl.dtype != ZO_F32 ? b->work : b->file[NV_MASTER];
    err = sched_nvme_write_async(s, s->pfile_id, c->pfile_off, src, c->numel * s->m->esize, &b->preq);
    if (err) {
      (void)zo_nvme_wait(s->nv, &b->preq);
      async_fail(s, error_prefixed(err, "NVMe tier: writing the parameters"));
      return;
    }
  }
  err = sched_nv_write_async(s, a->chunk, b);
  if (err) async_fail(s, error_prefixed(err, "NVMe tier: writing the optimizer state"));
  if (pwrite) {
    int e = zo_nvme_wait(s->nv, &b->preq);
    if (e && !err) async_fail(s, error_prefixed(e, "NVMe tier: writing the parameters"));
  }
}

/* Optimizer stream: waits for the chunk's reads (CRC checked) and updates it
 * in the staging buffer. */
void sched_nv_update_fn(void *arg) {
  const struct nv_task *a = arg;
  struct zo_sched *s = a->s;
  if (atomic_load(&s->err)) return;
  const struct step_args *sa = &s->step[a->parity];
  struct nv_buffer *b = &s->nvb[a->buf];
  const double t0 = zo_time_s();
  int err = sched_nv_wait_all(s, b->rreq);
  b->reading = false;
  atomic_fetch_add(&s->nv_wait_ns, ns_since(t0));
  if (err) {
    async_fail(s, error_prefixed(err, "NVMe tier: reading the optimizer state"));
    return;
  }
  const struct chunk *c = &s->chunks[a->chunk];
  float *master = b->file[NV_MASTER];
  const bool mixed = s->pl.dtype != ZO_F32, block = c->unit >= 1 && c->unit <= s->L;
  /* A skipped step writes the chunk back unchanged; the device copy of a
   * resident chunk then reads the working values the master rounds to. */
  if (sa->skip) {
    if (s->pl.param_nvme && mixed && !block) zo_cpu_cast(b->work, s->pl.dtype, master, ZO_F32, c->numel);
    return;
  }
  if (s->pl.grads_nvme && block) {
    const double tw = zo_time_s();
    if (b->greading) err = zo_nvme_wait(s->nv, &b->greq);
    else err = sched_nvme_read(s, s->gfile_id, c->gfile_off, b->grad, c->numel * sizeof(float));
    b->greading = false;
    atomic_fetch_add(&s->nv_wait_ns, ns_since(tw));
    /* The next chunk's gradients are read while this one updates: its
     * set's gradient buffer was last read by chunk g + 1 - nbuf's update,
     * which ran before this one. */
    const int jn = a->chunk + 1;
    if (!err && jn < s->n_chunks && s->chunks[jn].unit >= 1 && s->chunks[jn].unit <= s->L) {
      struct nv_buffer *nb = &s->nvb[(a->buf + 1) % s->pl.nvme_buffers];
      err = sched_nvme_read_async(s, s->gfile_id, s->chunks[jn].gfile_off, nb->grad,
                               s->chunks[jn].numel * sizeof(float), &nb->greq);
      nb->greading = true;
    }
    if (err) {
      async_fail(s, error_prefixed(err, "NVMe tier: reading the gradients"));
      return;
    }
  }
  const size_t e = s->m->esize;
  for (int k = c->first; k < c->first + c->n_pieces; k++) {
    const struct piece *pc = &s->pieces[k];
    const float *g = s->pl.grads_nvme && block ? b->grad + (pc->off - c->off) : grads_at(s, pc->off);
    void *work = !mixed ? NULL
                 : s->pl.param_nvme ? (void *)((uint8_t *)b->work + (pc->off - c->off) * e)
                                    : host_params_at(s, pc->off);
    sched_piece_update(s, sa, &s->t->tensors[pc->tensor], pc->q, master + (pc->off - c->off), g,
                       (uint8_t *)b->file[NV_M] + pc->sbyte, (uint8_t *)b->file[NV_V] + pc->sbyte, pc->numel, work);
  }
  if (c->unit == 0 && s->h.emb_params) /* the embedding's rows are gathered on the host */
    memcpy((uint8_t *)s->h.emb_params + c->off * e, mixed ? b->work : (void *)master, c->numel * e);
  if (c->unit == s->U - 1 && s->h.head_params) head_params_store(s, c, mixed ? b->work : (void *)master);
  if (s->pl.param_nvme) {
    /* A block kept in host memory (max_in_cpu) gets its rounded working
     * parameters here; the others go to the parameter file in sched_nv_write_fn. */
    if (block && c->unit <= s->n_cpu && (err = sched_tier_write_params(s, a->chunk, mixed ? b->work : (void *)master))) {
      async_fail(s, err);
      return;
    }
  } else if (s->n_slots && !mixed) {
    memcpy(host_params_at(s, c->off), master, c->numel * sizeof(float));
  }
  atomic_fetch_add(&s->opt_ns, ns_since(t0));
}

/* Queues the refill of chunk j (global index g) of the step with parity p. */
void sched_nv_queue_refill(struct zo_sched *s, int j, long g, int p) {
  zo_backend_t be = s->be;
  const int n = s->n_chunks, d = s->nv_depth, nbuf = s->pl.nvme_buffers;
  const int pj = ((j - d) % n + n) % n; /* chunk g - d: this step's or the last */
  CHECK_Q(be->stream_wait_event(s->nvme_io, s->chunk_done[pj]));
  CHECK_Q(be->stream_wait_event(s->nvme_io, s->chunk_h2d[pj]));
  struct nv_task *task = &s->nv_refill[p * n + j];
  *task = (struct nv_task){s, j, p, (int)(g % nbuf), g >= d ? (int)((g - d) % nbuf) : -1};
  zo_trace_next("nvme read chunk", j, s->chunks[j].numel * sizeof(float) + 2 * s->chunks[j].sbytes, 0);
  CHECK_Q(be->launch_host_func(s->nvme_io, nv_refill_fn, task));
  CHECK_Q(be->event_record(s->chunk_issued[j], s->nvme_io));
}

/* Queues the reads of the next step's first d chunks (once per step). */
void sched_nv_prime(struct zo_sched *s, int p) {
  if (s->nv_primed) return;
  for (int j = 0; j < s->nv_depth; j++) sched_nv_queue_refill(s, j, s->nv_base + j, p);
  s->nv_primed = true;
}

/* After a synchronous use of the staging buffers: reads already issued for
 * the next step were overwritten, so issue them again. */
void sched_nv_reprime(struct zo_sched *s) {
  if (!s->nvb || !s->nv_primed) return;
  s->nv_primed = false;
  sched_nv_prime(s, s->parity ^ 1);
}

static int cmp_seg(const void *a, const void *b) {
  const struct nv_seg *x = a, *y = b;
  return (x->canon > y->canon) - (x->canon < y->canon);
}

/* The segment tables of the state I/O: one per chunk for the master file;
 * for m and v one per fp32 piece, two (codes, absmax) per 8-bit piece. */
static int nv_segs_build(struct zo_sched *s) {
  int n = 0;
  for (int k = 0; k < s->n_pieces; k++) n += s->pieces[k].q ? 2 : 1;
  s->nv_segs[0] = calloc((size_t)s->n_chunks, sizeof(struct nv_seg));
  s->nv_segs[1] = calloc((size_t)n, sizeof(struct nv_seg));
  s->nv_valid = calloc(NV_FILES * (size_t)s->n_chunks, sizeof(bool));
  if (!s->nv_segs[0] || !s->nv_segs[1] || !s->nv_valid)
    return zo_error(-ENOMEM, "out of host memory for the NVMe state tables");
  int g = 0;
  for (int j = 0; j < s->n_chunks; j++) {
    const struct chunk *c = &s->chunks[j];
    s->nv_segs[0][j] = (struct nv_seg){c->off * sizeof(float), c->numel * sizeof(float), 0, j};
    for (int k = c->first; k < c->first + c->n_pieces; k++) {
      const struct piece *pc = &s->pieces[k];
      const struct zo_tensor_info *ti = &s->t->tensors[pc->tensor];
      const size_t a = pc->off - ti->offset, rec = s->soff[pc->tensor];
      if (!pc->q) {
        s->nv_segs[1][g++] = (struct nv_seg){rec + a * sizeof(float), pc->numel * sizeof(float), pc->sbyte, j};
        continue;
      }
      const size_t block = s->pl.opt.block;
      s->nv_segs[1][g++] = (struct nv_seg){rec + a, pc->numel, pc->sbyte, j};
      s->nv_segs[1][g++] = (struct nv_seg){rec + round_up(ti->numel, 4) + a / block * sizeof(float),
                                          zo_adamw8bit_n_blocks(pc->numel, block) * sizeof(float),
                                          pc->sbyte + round_up(pc->numel, 4), j};
    }
  }
  qsort(s->nv_segs[1], (size_t)n, sizeof(struct nv_seg), cmp_seg);
  s->nv_n_segs[0] = s->n_chunks;
  s->nv_n_segs[1] = n;
  for (int f = 0; f < NV_FILES; f++) s->nv_cached[f] = -1;
  return 0;
}

int sched_nvme_open(struct zo_sched *s) {
  struct zo_nvme_config nc = {.dir = s->pl.nvme_path, .block_size = s->pl.nvme_block,
                              .queue_depth = s->pl.nvme_queue_depth};
  s->nv = zo_nvme_init(&nc);
  if (!s->nv) {
    char what[600];
    snprintf(what, sizeof what, "NVMe tier (zero_optimization.offload_optimizer.nvme_path = %s)",
             s->pl.nvme_path);
    return error_prefixed(-EIO, what);
  }
  const struct chunk_plan cp = sched_make_chunks(s->t, &s->pl, NULL, NULL);
  s->n_chunks = cp.n_chunks;
  s->n_pieces = cp.n_pieces;
  s->chunks = calloc((size_t)s->n_chunks, sizeof *s->chunks);
  s->pieces = calloc((size_t)s->n_pieces, sizeof *s->pieces);
  s->nvb = calloc((size_t)s->pl.nvme_buffers, sizeof *s->nvb);
  s->nv_refill = calloc(2 * (size_t)s->n_chunks, sizeof *s->nv_refill);
  s->nv_update = calloc(2 * (size_t)s->n_chunks, sizeof *s->nv_update);
  s->chunk_done = calloc((size_t)s->n_chunks, sizeof *s->chunk_done);
  s->chunk_h2d = calloc((size_t)s->n_chunks, sizeof *s->chunk_h2d);
  s->chunk_issued = calloc((size_t)s->n_chunks, sizeof *s->chunk_issued);
  s->nv_depth = s->pl.nvme_buffers < s->n_chunks ? s->pl.nvme_buffers : s->n_chunks;
  if (!s->chunks || !s->pieces || !s->nvb || !s->nv_refill || !s->nv_update || !s->chunk_done ||
      !s->chunk_h2d || !s->chunk_issued)
    return zo_error(-ENOMEM, "out of host memory for the NVMe chunk tables");
  sched_make_chunks(s->t, &s->pl, s->chunks, s->pieces);
  int err;
  const size_t file_bytes[NV_FILES] = {cp.mfile, cp.sfile, cp.sfile};
  /* A sharded rank owning no tensor has no chunk, and no files (id -1). */
  for (int f = 0; f < NV_FILES; f++) {
    s->file_id[f] = -1;
    if (file_bytes[f] && (err = zo_nvme_file_create(s->nv, nv_class[f], file_bytes[f], &s->file_id[f])))
      return error_prefixed(err, "NVMe tier: creating a state file");
  }
  size_t mper, sper, wper;
  const size_t set = sched_nv_set_bytes(&s->pl, &cp, &mper, &sper, &wper);
  struct zo_nvme_buffer reg[3] = {{s->h.nv_buf, (size_t)s->pl.nvme_buffers * set}};
  int n_reg = 1;
  if (s->h.pring) reg[n_reg++] = (struct zo_nvme_buffer){s->h.pring, (size_t)s->n_slots * cp.block_pbytes};
  if (s->h.gio) reg[n_reg++] = (struct zo_nvme_buffer){s->h.gio, cp.block_gbytes};
  for (int b = 0; b < s->pl.nvme_buffers; b++) {
    uint8_t *base = s->h.nv_buf + (size_t)b * set;
    s->nvb[b].file[NV_MASTER] = base;
    s->nvb[b].file[NV_M] = base + mper;
    s->nvb[b].file[NV_V] = base + mper + sper;
    s->nvb[b].grad = s->pl.grads_nvme ? (float *)(void *)(base + mper + 2 * sper) : NULL;
    s->nvb[b].work = wper ? base + set - wper : NULL;
  }
  if ((err = sched_tier_open(s))) return err;
  /* Registration is an optimization: without it the store uses plain reads. */
  (void)zo_nvme_register_buffers(s->nv, reg, n_reg);
  if ((err = sched_stream_create(s, &s->nvme_io, "nvme_io")) || (err = sched_events_create(s->be, s->chunk_done, s->n_chunks)) ||
      (err = sched_events_create(s->be, s->chunk_h2d, s->n_chunks)) ||
      (err = sched_events_create(s->be, s->chunk_issued, s->n_chunks)))
    return err;
  s->nvme_planned = zo_sched_nvme_plan(&s->pl, s->t, NULL);
  return nv_segs_build(s);
}

/* Writes the cached chunk of file f back if it changed. */
int sched_nv_flush(struct zo_sched *s, int f) {
  const int j = s->nv_cached[f];
  if (j < 0 || !s->nv_dirty[f]) return 0;
  const struct chunk *c = &s->chunks[j];
  int err = sched_nvme_write(s, s->file_id[f], nv_off(c, f), s->nvb[0].file[f], nv_nbytes(c, f));
  if (err) return error_prefixed(err, "NVMe tier: writing the state");
  s->nv_valid[(size_t)f * (size_t)s->n_chunks + (size_t)j] = true;
  s->nv_dirty[f] = false;
  return 0;
}

/* Chunk j of file f into the cache. A chunk never written reads as zeros;
 * one about to be overwritten whole (whole) is not read at all. */
int sched_nv_fetch(struct zo_sched *s, int f, int j, bool whole) {
  if (s->nv_cached[f] == j) return 0;
  int err = sched_nv_flush(s, f);
  if (err) return err;
  s->nv_cached[f] = -1;
  const struct chunk *c = &s->chunks[j];
  void *buf = s->nvb[0].file[f];
  if (!whole && s->nv_valid[(size_t)f * (size_t)s->n_chunks + (size_t)j]) {
    if ((err = sched_nvme_read(s, s->file_id[f], nv_off(c, f), buf, nv_nbytes(c, f))))
      return error_prefixed(err, "NVMe tier: reading the state");
  } else if (!whole) {
    memset(buf, 0, nv_nbytes(c, f));
  }
  s->nv_cached[f] = j;
  return 0;
}

/* Bytes [off, off + n) of file f's part through the cache; bytes no segment
 * holds (the padding after 8-bit codes) read as zero and are not stored. */
int sched_nv_access(struct zo_sched *s, int f, size_t off, uint8_t *buf, size_t n, bool write) {
  const struct nv_seg *seg = s->nv_segs[f == NV_MASTER ? 0 : 1];
  const int ns = s->nv_n_segs[f == NV_MASTER ? 0 : 1];
  int lo = 0, hi = ns; /* first segment ending after off */
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (seg[mid].canon + seg[mid].nbytes <= off) lo = mid + 1;
    else hi = mid;
  }
  for (int i = lo; n > 0;) {
    if (i == ns || seg[i].canon > off) { /* a gap up to the next segment */
      const size_t g = i == ns ? n : seg[i].canon - off < n ? seg[i].canon - off : n;
      if (!write) memset(buf, 0, g);
      buf += g, off += g, n -= g;
      continue;
    }
    const struct nv_seg *sg = &seg[i];
    const size_t a = off - sg->canon, take = sg->nbytes - a < n ? sg->nbytes - a : n;
    /* A master chunk is one segment: writing all of it needs no read. */
    const bool whole = write && f == NV_MASTER && a == 0 && take == sg->nbytes;
    int err = sched_nv_fetch(s, f, sg->chunk, whole);
    if (err) return err;
    uint8_t *k = (uint8_t *)s->nvb[0].file[f] + sg->koff + a;
    if (write) {
      memcpy(k, buf, take);
      s->nv_dirty[f] = true;
    } else {
      memcpy(buf, k, take);
    }
    buf += take, off += take, n -= take;
    i++;
  }
  return 0;
}
