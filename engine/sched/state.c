/* State I/O: parameters (fp32 master), m and v read and written where the
 * placement keeps them, in the canonical byte layout of zo/state.h, for
 * checkpoints, imports and initialisation; the working copies are derived
 * from the master once, in zo_sched_state_done. A sharded run's rank 0
 * reads other shards from their owners, who serve it
 * (zo_sched_state_serve). */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>

#include "zo/adamw8bit.h"
#include "zo/cpu.h"
#include "zo/state.h"

/* ---- state I/O ------------------------------------------------------------
 * Parameters (fp32: the master copy, or the working copy where it is the
 * master), m and v are read and written where the placement keeps them; the
 * working copies (device units, host working copy, slots) are re-derived
 * from the master once, in zo_sched_state_done, so the state is written
 * exactly once. The NVMe files are accessed through a one-chunk cache per
 * file in staging set 0, written back when another chunk is needed. */

static const char *const part_names[ZO_STATE_N_PARTS] = {"parameters", "exp_avg", "exp_avg_sq"};

static size_t part_nbytes(const struct zo_sched *s, enum zo_state_part p) {
  if (s->pl.frozen && p != ZO_STATE_PARAMS) return 0; /* a frozen base has no m, v */
  return p == ZO_STATE_PARAMS ? s->t->numel * sizeof(float) : zo_optim_state_nbytes(&s->pl.opt, s->t);
}

/* Where part p lives: a device (*on_device) or host address, NULL for the
 * NVMe files, holding the part's bytes from *first on (the cpu tier of a
 * sharded optimizer holds the shard only). */
static uint8_t *part_base(struct zo_sched *s, enum zo_state_part p, bool *on_device, size_t *first) {
  *on_device = s->pl.optimizer == ZO_OFFLOAD_NONE;
  *first = p == ZO_STATE_PARAMS ? s->master_off * sizeof(float) : s->st_off;
  if (s->pl.optimizer == ZO_OFFLOAD_NVME) return NULL;
  if (p == ZO_STATE_M) return s->st_m;
  if (p == ZO_STATE_V) return s->st_v;
  if (s->pl.optimizer == ZO_OFFLOAD_CPU) return (uint8_t *)s->h.master;
  return s->m->master ? (uint8_t *)s->m->master : (uint8_t *)s->m->params;
}

/* Bytes [*lo, *hi) of part p in shard sh. */
static void part_span(const struct zo_shard *sh, enum zo_state_part p, size_t *lo, size_t *hi) {
  *lo = p == ZO_STATE_PARAMS ? sh->lo * sizeof(float) : sh->slo;
  *hi = p == ZO_STATE_PARAMS ? sh->hi * sizeof(float) : sh->shi;
}

/* The first state access after training: everything queued finishes first. */
static int state_enter(struct zo_sched *s) {
  if (s->st_active) return 0;
  int err = zo_sched_synchronize(s);
  if (err) return err;
  s->st_active = true;
  s->st_wrote = s->st_params_wrote = false;
  for (int f = 0; f < NV_FILES; f++) {
    s->nv_cached[f] = -1;
    s->nv_dirty[f] = false;
  }
  return 0;
}

/* k fp32 values at buf to or from a frozen base's device working copy at
 * dev, rounded on the way in and widened on the way out. */
int sched_frozen_dev_access(struct zo_sched *s, void *dev, float *buf, size_t k, bool write) {
  const size_t e = s->m->esize;
  void *tmp = malloc(k * e + 1);
  if (!tmp) return sched_no_memory();
  int err = 0;
  if (write) {
    zo_cpu_cast(tmp, s->m->dtype, buf, ZO_F32, k);
    err = sched_copy_sync(s, dev, tmp, k * e, ZO_COPY_H2D);
  } else if (!(err = sched_copy_sync(s, tmp, dev, k * e, ZO_COPY_D2H))) {
    zo_cpu_cast(buf, ZO_F32, tmp, s->m->dtype, k);
  }
  free(tmp);
  return err;
}

/* A frozen base has no fp32 master: its parameters' bytes [off, off + n)
 * of the fp32 state are its one working copy, the host's (streamed through
 * the slots; the device's resident units follow in zo_sched_state_done),
 * the NVMe parameter file's (base_nvme.c) or the device's. */
static int frozen_access(struct zo_sched *s, size_t off, uint8_t *buf, size_t n, bool write) {
  ZO_ASSERT(off % sizeof(float) == 0 && n % sizeof(float) == 0);
  const size_t k = n / sizeof(float);
  if (s->pl.param_nvme) return sched_base_nvme_access(s, off, buf, n, write);
  if (s->h.params) {
    void *host = host_params_at(s, off / sizeof(float));
    if (write) zo_cpu_cast(host, s->m->dtype, buf, ZO_F32, k);
    else zo_cpu_cast(buf, ZO_F32, host, s->m->dtype, k);
    return 0;
  }
  return sched_frozen_dev_access(s, zo_model_at(s->m, s->m->params, off / sizeof(float)), (float *)(void *)buf, k,
                                 write);
}

/* Bytes of this rank's shard, where they live. */
static int local_access(struct zo_sched *s, enum zo_state_part p, size_t off, uint8_t *buf, size_t n, bool write) {
  bool dev;
  size_t first;
  uint8_t *base = part_base(s, p, &dev, &first);
  int err = 0;
  if (s->pl.frozen && (s->pl.dtype != ZO_F32 || s->h.params || s->pl.param_nvme)) {
    err = frozen_access(s, off, buf, n, write);
  } else if (!base) {
    err = sched_nv_access(s, p == ZO_STATE_PARAMS ? NV_MASTER : p == ZO_STATE_M ? NV_M : NV_V, off, buf, n, write);
  } else {
    ZO_ASSERT(off >= first);
    base += off - first;
    if (dev) err = write ? sched_copy_sync(s, base, buf, n, ZO_COPY_H2D) : sched_copy_sync(s, buf, base, n, ZO_COPY_D2H);
    else if (write) memcpy(base, buf, n);
    else memcpy(buf, base, n);
  }
  if (err) return error_prefixed(err, write ? "writing the training state" : "reading the training state");
  return 0;
}

/* Rank 0 asks the owner of another shard for its bytes (zo_sched_state_serve). */
#define ST_TAG 71

struct st_request {
  int32_t part, stop;
  uint64_t off, nbytes;
};

struct st_reply {
  int32_t err;
  char msg[252];
};

static int remote_read(struct zo_sched *s, int q, enum zo_state_part p, size_t off, uint8_t *buf, size_t n) {
  for (size_t a = 0; a < n;) {
    const size_t k = n - a < s->h.st_bytes ? n - a : s->h.st_bytes;
    const struct st_request rq = {.part = (int32_t)p, .off = off + a, .nbytes = k};
    struct st_reply rp;
    int err = zo_comm_send(s->comm, &rq, sizeof rq, q, ST_TAG);
    if (!err) err = zo_comm_recv(s->comm, &rp, sizeof rp, q, ST_TAG);
    if (err) return error_prefixed(err, "reading the training state of another rank");
    if (rp.err) return zo_error(rp.err, "rank %d: %s", q, rp.msg);
    if ((err = zo_comm_recv(s->comm, buf + a, k, q, ST_TAG)))
      return error_prefixed(err, "reading the training state of another rank");
    a += k;
  }
  return 0;
}

static int state_access(struct zo_sched *s, enum zo_state_part p, size_t off, uint8_t *buf, size_t n,
                        bool write) {
  ZO_ASSERT(p >= 0 && p < ZO_STATE_N_PARTS);
  ZO_ASSERT(off <= part_nbytes(s, p) && n <= part_nbytes(s, p) - off);
  int err = state_enter(s);
  if (err || n == 0) return err;
  if (write) {
    s->st_wrote = true;
    s->st_params_wrote |= p == ZO_STATE_PARAMS;
  }
  size_t lo, hi;
  part_span(&s->sh, p, &lo, &hi);
  const size_t end = off + n;
  if (write) { /* this shard's bytes; the owners keep the rest */
    const size_t a = off > lo ? off : lo, b = end < hi ? end : hi;
    return b > a ? local_access(s, p, a, buf + (a - off), b - a, true) : 0;
  }
  if (off >= lo && end <= hi) return local_access(s, p, off, buf, n, false);
  const int rank = zo_comm_rank(s->comm);
  if (rank != 0)
    return zo_error(-EINVAL, "rank %d reads %s bytes [%zu, %zu) outside its shard [%zu, %zu): only rank 0 reads "
                             "other shards (zo_sched_state_serve)",
                    rank, part_names[p], off, end, lo, hi);
  for (int q = 0; q < s->n_ranks && !err; q++) {
    size_t ql, qh;
    part_span(&s->shards[q], p, &ql, &qh);
    const size_t a = off > ql ? off : ql, b = end < qh ? end : qh;
    if (b <= a) continue;
    err = q == 0 ? local_access(s, p, a, buf + (a - off), b - a, false)
                 : remote_read(s, q, p, a, buf + (a - off), b - a);
  }
  return err;
}

int zo_sched_state_serve(struct zo_sched *s) {
  if (!s->sharded || zo_comm_rank(s->comm) == 0) return 0;
  int err = 0;
  for (;;) {
    struct st_request rq;
    if ((err = zo_comm_recv(s->comm, &rq, sizeof rq, 0, ST_TAG))) break;
    if (rq.stop) break;
    struct st_reply rp = {0};
    if (rq.part < 0 || rq.part >= ZO_STATE_N_PARTS || rq.nbytes > s->h.st_bytes ||
        rq.off > part_nbytes(s, (enum zo_state_part)rq.part) ||
        rq.nbytes > part_nbytes(s, (enum zo_state_part)rq.part) - rq.off)
      rp.err = zo_error(-EINVAL, "a request for %llu bytes at %llu of part %d is out of range",
                        (unsigned long long)rq.nbytes, (unsigned long long)rq.off, (int)rq.part);
    else
      rp.err = state_access(s, (enum zo_state_part)rq.part, rq.off, s->h.st_stage, rq.nbytes, false);
    if (rp.err) snprintf(rp.msg, sizeof rp.msg, "%s", zo_last_error());
    if ((err = zo_comm_send(s->comm, &rp, sizeof rp, 0, ST_TAG))) break;
    if (!rp.err && (err = zo_comm_send(s->comm, s->h.st_stage, rq.nbytes, 0, ST_TAG))) break;
  }
  const int done = zo_sched_state_done(s);
  if (err) return error_prefixed(err, "serving the training state to rank 0");
  return done;
}

int zo_sched_state_serve_end(struct zo_sched *s) {
  if (!s->sharded || zo_comm_rank(s->comm) != 0) return 0;
  int err = 0;
  const struct st_request stop = {.stop = 1};
  for (int q = 1; q < s->n_ranks; q++) {
    const int e = zo_comm_send(s->comm, &stop, sizeof stop, q, ST_TAG);
    if (e && !err) err = e;
  }
  return err;
}

int zo_sched_state_read(struct zo_sched *s, enum zo_state_part part, size_t off, void *dst, size_t nbytes) {
  return state_access(s, part, off, dst, nbytes, false);
}

int zo_sched_state_write(struct zo_sched *s, enum zo_state_part part, size_t off, const void *src,
                         size_t nbytes) {
  return state_access(s, part, off, (uint8_t *)(uintptr_t)src, nbytes, true);
}

int zo_sched_state_fresh(struct zo_sched *s, enum zo_state_part part) {
  ZO_ASSERT(part == ZO_STATE_M || part == ZO_STATE_V);
  const struct zo_optim_format *f = &s->pl.opt;
  const size_t sb = s->h.st_bytes;
  int err = 0;
  /* Zeros everywhere but m's 8-bit codes (v's code of 0.0 is 0). */
  memset(s->h.st_stage, 0, sb);
  if (part == ZO_STATE_V || !f->eightbit) {
    const size_t n = part_nbytes(s, part);
    for (size_t o = 0; o < n && !err; o += sb) err = zo_sched_state_write(s, part, o, s->h.st_stage, n - o < sb ? n - o : sb);
    return err;
  }
  uint8_t *zero_codes = s->h.st_stage + sb / 2; /* second half: codes of 0.0; first half: zeros */
  memset(zero_codes, ZO_ADAMW8BIT_M_ZERO_CODE, sb / 2);
  for (int i = 0; i < s->t->n_tensors && !err; i++) {
    const size_t n = s->t->tensors[i].numel, rec = s->soff[i];
    const bool q = zo_optim_is_8bit(f, n);
    const size_t codes = q ? n : 0, total = zo_optim_piece_nbytes(f, q, n);
    for (size_t o = 0; o < total && !err;) {
      const bool in_codes = o < codes;
      const size_t end = in_codes ? codes : total, take = end - o < sb / 2 ? end - o : sb / 2;
      err = zo_sched_state_write(s, part, rec + o, in_codes ? zero_codes : s->h.st_stage, take);
      o += take;
    }
  }
  return err;
}

/* After parameter writes: the working copies, rounded from the master. */
/* After parameter writes: the working copies, rounded from the master of
 * this rank's shard (the whole table unsharded); sharded, the ranks then
 * exchange them, and device units are copied from the host working copy
 * when there is one. */
static int working_copies_sync(struct zo_sched *s) {
  const size_t e = s->m->esize, lo = s->sh.lo, hi = s->sh.hi;
  const bool mixed = s->pl.dtype != ZO_F32, after = s->sharded && s->h.params && !s->pshard;
  int err = 0;
  if (s->pl.frozen && s->h.params) {
    /* A frozen base streamed from the host: its resident units to the device. */
    for (int u = 0; u < s->U && !err; u++) {
      void *dev = dev_unit_params(s, u);
      const struct range r = unit_range(s->t, u);
      if (dev) err = sched_copy_sync(s, dev, host_params_at(s, r.off), dev_unit_numel(s, u) * e, ZO_COPY_H2D);
    }
  } else if (s->pl.optimizer == ZO_OFFLOAD_NONE) {
    if (mixed && hi > lo && !s->pl.frozen) /* frozen: written rounded (frozen_access) */
      s->be->cast(zo_model_at(s->m, s->m->params, lo), s->m->dtype, s->m->master + lo, ZO_F32, hi - lo, s->compute);
    err = s->be->stream_synchronize(s->compute);
  } else if (s->pl.optimizer == ZO_OFFLOAD_CPU) {
    if (mixed) zo_cpu_cast(host_params_at(s, lo), s->pl.dtype, master_at(s, lo), ZO_F32, hi - lo);
    else if (s->h.params && s->h.params != s->h.master)
      memcpy(host_params_at(s, lo), master_at(s, lo), (hi - lo) * sizeof(float));
    for (int u = 0; u < s->U && !err && !after; u++) {
      void *dev = dev_unit_params(s, u);
      size_t a, b;
      unit_owned(s, u, &a, &b);
      if (b > a) b = a + dev_unit_part(s, u, a - unit_range(s->t, u).off, b - a); /* not a streamed LM head */
      if (dev && b > a)
        err = sched_copy_sync(s, (uint8_t *)dev + (a - unit_range(s->t, u).off) * e,
                              s->h.params ? host_params_at(s, a) : (void *)master_at(s, a), (b - a) * e, ZO_COPY_H2D);
    }
  } else {
    /* NVMe: chunk by chunk (a chunk lies inside one unit). */
    ZO_ASSERT(s->h.params || !mixed || s->pl.param_nvme);
    for (int j = 0; j < s->n_chunks && !err; j++) {
      const struct chunk *c = &s->chunks[j];
      if ((err = sched_nv_fetch(s, NV_MASTER, j, false))) break;
      const float *master = s->nvb[0].file[NV_MASTER];
      /* param_nvme: rounded into set 0's working buffer; the blocks' into
       * the parameter file. */
      const void *work = master;
      if (s->h.params) {
        zo_cpu_cast(host_params_at(s, c->off), s->pl.dtype, master, ZO_F32, c->numel);
        work = host_params_at(s, c->off);
      } else if (s->nvb[0].work) {
        zo_cpu_cast(s->nvb[0].work, s->pl.dtype, master, ZO_F32, c->numel);
        work = s->nvb[0].work;
      }
      uint8_t *dev = dev_unit_params(s, c->unit);
      if (c->unit == 0 && s->h.emb_params) /* the embedding on the host, no working copy there */
        memcpy((uint8_t *)s->h.emb_params + c->off * e, work, c->numel * e);
      else if (s->pl.param_nvme && !dev) err = sched_tier_write_params(s, j, work);
      else if (dev && !after) {
        if (c->unit == s->U - 1 && s->h.head_params) head_params_store(s, c, work);
        /* the part on the device: none of a streamed LM head */
        const size_t at = c->off - unit_range(s->t, c->unit).off, n = dev_unit_part(s, c->unit, at, c->numel);
        if (n) err = sched_copy_sync(s, dev + at * e, work, n * e, ZO_COPY_H2D);
      }
    }
  }
  if (!s->sharded) return err;
  if (s->pshard) {
    /* Blocks are gathered as slots load them; the resident units' owned
     * parts are on the device (above): every owner's part to every rank. */
    const int units[2] = {0, s->U - 1};
    for (int i = 0; i < 2; i++) { /* collective: even after a failure */
      const struct range r = unit_range(s->t, units[i]);
      const int x = sched_exchange_range(s, s->comm, dev_unit_params(s, units[i]), r.off, r.numel, false);
      if (!err) err = x;
    }
    return err;
  }
  /* Collective: runs even after a local failure, so that nobody waits. */
  const int ge = sched_exchange_range(s, s->comm, gather_buf(s), 0, s->t->numel, false);
  if (!err) err = ge;
  for (int u = 0; u < s->U && !err && after; u++) {
    void *dev = dev_unit_params(s, u);
    const struct range r = unit_range(s->t, u);
    if (dev) err = sched_copy_sync(s, dev, host_params_at(s, r.off), r.numel * e, ZO_COPY_H2D);
  }
  return err;
}

int zo_sched_state_done(struct zo_sched *s) {
  if (!s->st_active) return 0;
  int err = 0;
  if (s->nv && !s->nvb) { /* a frozen base's parameter file alone */
    err = sched_base_nvme_done(s);
  } else if (s->nv) {
    for (int f = 0; f < NV_FILES && !err; f++) err = sched_nv_flush(s, f);
    for (size_t i = 0; s->st_wrote && !err && i < NV_FILES * (size_t)s->n_chunks; i++)
      if (!s->nv_valid[i])
        err = zo_error(-EINVAL, "the training state on NVMe is incomplete: the %s of chunk %zu were never "
                                "written (set the whole state before training)",
                       part_names[i / (size_t)s->n_chunks], i % (size_t)s->n_chunks);
  }
  if (!err && s->st_params_wrote) err = working_copies_sync(s);
  if (s->nvb) {
    for (int f = 0; f < NV_FILES; f++) s->nv_cached[f] = -1;
    sched_nv_reprime(s);
  }
  for (int k = 0; k < s->n_slots; k++) s->slot_owner[k] = -1;
  s->st_active = false;
  if (err) return error_prefixed(err, "committing the training state");
  return s->be->stream_synchronize(s->compute);
}

static int io_read(void *ctx, enum zo_state_part p, size_t off, void *dst, size_t n) {
  return zo_sched_state_read(ctx, p, off, dst, n);
}

static int io_write(void *ctx, enum zo_state_part p, size_t off, const void *src, size_t n) {
  return zo_sched_state_write(ctx, p, off, src, n);
}

void zo_sched_state_io(struct zo_sched *s, struct zo_state_io *io) {
  *io = (struct zo_state_io){.ctx = s, .read = io_read, .write = io_write, .stage = s->h.st_stage,
                             .stage_bytes = s->h.st_bytes};
}

int zo_sched_state_init(struct zo_sched *s, uint64_t seed) {
  const size_t n = s->t->numel, per = s->h.st_bytes / sizeof(float);
  float *stage = (float *)(void *)s->h.st_stage;
  int err = 0;
  for (size_t i = 0; i < n && !err; i += per) {
    const size_t k = n - i < per ? n - i : per;
    zo_model_init_range(s->m, seed, i, stage, k);
    err = zo_sched_state_write(s, ZO_STATE_PARAMS, i * sizeof(float), stage, k * sizeof(float));
  }
  return err;
}

int zo_sched_set_state(struct zo_sched *s, const float *params, const void *adam_m, const void *adam_v) {
  int err = zo_sched_state_write(s, ZO_STATE_PARAMS, 0, params, part_nbytes(s, ZO_STATE_PARAMS));
  if (!err) err = adam_m ? zo_sched_state_write(s, ZO_STATE_M, 0, adam_m, part_nbytes(s, ZO_STATE_M))
                         : zo_sched_state_fresh(s, ZO_STATE_M);
  if (!err) err = adam_v ? zo_sched_state_write(s, ZO_STATE_V, 0, adam_v, part_nbytes(s, ZO_STATE_V))
                         : zo_sched_state_fresh(s, ZO_STATE_V);
  const int done = zo_sched_state_done(s);
  return err ? err : done;
}

int zo_sched_get_state(struct zo_sched *s, float *params, void *adam_m, void *adam_v) {
  void *dst[ZO_STATE_N_PARTS] = {params, adam_m, adam_v};
  int err = 0;
  for (int p = 0; p < ZO_STATE_N_PARTS && !err; p++) {
    if (!dst[p]) continue;
    if (!s->sharded) {
      err = zo_sched_state_read(s, (enum zo_state_part)p, 0, dst[p], part_nbytes(s, (enum zo_state_part)p));
      continue;
    }
    /* Each rank its shard, then every shard to every rank. */
    size_t lo, hi, *nb = calloc((size_t)s->n_ranks, sizeof *nb);
    if (!nb) {
      err = zo_error(-ENOMEM, "out of host memory");
      break;
    }
    for (int q = 0; q < s->n_ranks; q++) {
      part_span(&s->shards[q], (enum zo_state_part)p, &lo, &hi);
      nb[q] = hi - lo;
    }
    part_span(&s->sh, (enum zo_state_part)p, &lo, &hi);
    err = zo_sched_state_read(s, (enum zo_state_part)p, lo, (uint8_t *)dst[p] + lo, hi - lo);
    /* The exchange runs even after a local failure, so that nobody waits. */
    const int e = zo_comm_allgatherv(s->comm, dst[p], nb);
    if (!err) err = e;
    free(nb);
  }
  const int done = zo_sched_state_done(s);
  return err ? err : done;
}
