/* Data parallelism: every collective the scheduler runs across ranks.
 * The gradient sum (allreduce, or reduce-scatter at stage 2) at the start
 * of the optimizer stream; each block's gradients reduced onto their owners
 * during the backward (overlap_comm); the updated working parameters
 * exchanged after a sharded update; ZeRO-3 block gathers into the slots'
 * buffers; the loss sums. Each runs on a communicator duplicated for the
 * thread that calls it, in the same order on every rank, and runs even
 * after a local error so that no rank is left waiting. */
#include "internal.h"

#include <stdlib.h>

/* Each owner's part of elements [off, off + n) broadcast from it into buf
 * (working dtype; with copy_own the owner copies its part from the host
 * working copy first, else it is in buf already), on comm, every rank in
 * the same order. Returns 0 or -errno. */
int sched_exchange_range(struct zo_sched *s, zo_comm_t comm, uint8_t *buf, size_t off, size_t n, bool copy_own) {
  const size_t e = s->m->esize;
  const int me = zo_comm_rank(comm);
  int err = 0;
  for (int r = 0; r < s->n_ranks && !err; r++) {
    size_t a, b;
    if (!shard_cut(s, r, off, n, &a, &b)) continue;
    if (r == me && copy_own) memcpy(buf + (a - off) * e, host_params_at(s, a), (b - a) * e);
    err = zo_comm_broadcast(comm, buf + (a - off) * e, (b - a) * e, r);
  }
  return err;
}

/* Stream block_gather: block l gathered into its slot's buffer. Runs even after an
 * error, so that the others are not left waiting. */
void sched_block_gather_fn(void *arg) {
  const struct task *a = arg;
  struct zo_sched *s = a->s;
  const struct range r = unit_range(s->t, 1 + a->index);
  const double t0 = zo_time_s();
  int err = sched_exchange_range(s, s->block_gather_comm, block_gather_buf(s, a->index % s->n_slots), r.off, r.numel, true);
  atomic_fetch_add(&s->comm_ns, ns_since(t0));
  if (err) async_fail(s, error_prefixed(err, "gathering a block's parameters from the ranks"));
}

/* Each rank's part of the n gradients at buf (table elements [off, off +
 * n)) summed over the ranks onto that rank, in place (the ranks' parts of a
 * reduce-scatter, in the same order on every rank); the other parts of buf
 * are left as they are. Returns 0 or -errno. */
int sched_reduce_to_owners(struct zo_sched *s, zo_comm_t comm, float *buf, size_t off, size_t n) {
  int err = 0;
  for (int r = 0; r < s->n_ranks && !err; r++) {
    size_t lo, hi;
    if (shard_cut(s, r, off, n, &lo, &hi)) err = zo_comm_reduce(comm, buf + (lo - off), hi - lo, ZO_F32, ZO_COMM_SUM, r);
  }
  return err;
}

/* Stream reduce (the NVMe tier: d2h): one micro-batch's gradients of a
 * range, staged, summed onto their owners (sched_reduce_to_owners); this rank
 * accumulates its part into its shard of h.grads. Runs even after an
 * error, so that the others are not left waiting. */
void sched_reduce_acc_fn(void *arg) {
  struct reduce_task *a = arg;
  struct zo_sched *s = a->s;
  const bool first = a->runs++ % s->pl.grad_accum == 0;
  const double t0 = zo_time_s();
  int err = sched_reduce_to_owners(s, s->reduce_comm, a->src, a->off, a->n);
  size_t lo, hi;
  if (!err && shard_cut(s, s->pl.dp_rank, a->off, a->n, &lo, &hi)) {
    const float *part = a->src + (lo - a->off);
    float *dst = grads_at(s, lo);
    if (first) {
      memcpy(dst, part, (hi - lo) * sizeof(float));
    } else {
      for (size_t i = 0; i < hi - lo; i++) dst[i] += part[i];
    }
  }
  atomic_fetch_add(&s->comm_ns, ns_since(t0));
  if (err) async_fail(s, error_prefixed(err, "summing the gradients over the ranks"));
}

/* Sharded gradients: n gradients at device src to the staging buffer of
 * the task (free: the event the last reduction from it recorded), then
 * their reduction on stream reduce (ready event i), which frees it again. */
void sched_grads_out_shard(struct zo_sched *s, const float *src, size_t n, zo_event_t free_ev, int i,
                            struct reduce_task *task) {
  CHECK_Q(s->be->stream_wait_event(s->d2h, free_ev));
  zo_trace_next("grads out", i, n * sizeof(float), 0);
  CHECK_Q(sched_copy(s, task->src, src, n * sizeof(float), ZO_COPY_D2H, s->d2h));
  CHECK_Q(s->be->event_record(s->reduce_ready[i], s->d2h));
  CHECK_Q(s->be->stream_wait_event(s->reduce, s->reduce_ready[i]));
  zo_trace_next("reduce grads", i, n * sizeof(float), 0);
  CHECK_Q(s->be->launch_host_func(s->reduce, sched_reduce_acc_fn, task));
}

/* Optimizer stream, the step's first task: the accumulated gradients, where
 * the optimizer reads them, summed over the ranks in place. Each rank's
 * dloss carries 1/ranks, so the sum is the global-batch mean and every rank
 * runs the same norm, clip, skip and update on it. On the CPU backend the
 * device accumulator is host memory. The sum runs even after an error on
 * this rank, so that the others are not left waiting before the job ends. */
void sched_grads_allreduce_fn(void *arg) {
  struct zo_sched *s = arg;
  const double t0 = zo_time_s();
  float *g = (float *)(uintptr_t)opt_grads(s);
  /* ZeRO stage 2 over ranks: each shard's sum on its owner only. */
  int err = s->sharded && s->pl.zero_stage >= 2 ? zo_comm_reduce_scatter(s->grad_comm, g, s->rs_counts, ZO_F32)
                                                : zo_comm_allreduce(s->grad_comm, g, s->t->numel, ZO_F32, ZO_COMM_SUM);
  atomic_fetch_add(&s->comm_ns, ns_since(t0));
  if (err) async_fail(s, error_prefixed(err, "summing the gradients over the ranks"));
}

/* Optimizer stream, behind this rank's updates and their device copies:
 * every rank's updated working parameters to every rank. Runs even after an
 * error, like the gradient sum. */
static void gather_fn(void *arg) {
  struct zo_sched *s = arg;
  const double t0 = zo_time_s();
  int err = sched_exchange_range(s, s->grad_comm, gather_buf(s), 0, s->t->numel, false);
  atomic_fetch_add(&s->comm_ns, ns_since(t0));
  if (err) async_fail(s, error_prefixed(err, "exchanging the updated parameters over the ranks"));
}

/* Sharded: the exchange, then each unit's parameters ready (copied to the
 * device from the host working copy first, when there is one). */
/* pshard, optimizer stream: the resident units' owned parts are on the
 * device (copied from the host shard); each owner's part broadcast into
 * every rank's device copy (host memory on the CPU backend). */
static void resident_exchange_fn(void *arg) {
  struct zo_sched *s = arg;
  const double t0 = zo_time_s();
  int err = 0;
  const int units[2] = {0, s->U - 1};
  for (int i = 0; i < 2 && !err; i++) {
    const struct range r = unit_range(s->t, units[i]);
    err = sched_exchange_range(s, s->grad_comm, dev_unit_params(s, units[i]), r.off, r.numel, false);
  }
  atomic_fetch_add(&s->comm_ns, ns_since(t0));
  if (err) async_fail(s, error_prefixed(err, "exchanging the resident parameters over the ranks"));
}

void sched_queue_gather(struct zo_sched *s) {
  zo_backend_t be = s->be;
  if (s->pshard) {
    /* Blocks are gathered when their slots load them; the resident units
     * (embeddings, final norm) are exchanged here. */
    const int units[2] = {0, s->U - 1};
    for (int i = 0; i < 2; i++) {
      size_t a, b;
      unit_owned(s, units[i], &a, &b);
      if (b <= a || !s->h.params) continue; /* param_nvme: the chunks were copied (sched_queue_optimizer) */
      const struct range r = unit_range(s->t, units[i]);
      CHECK_Q(be->stream_wait_event(s->h2d, s->opt_done[units[i]]));
      CHECK_Q(sched_copy(s, (uint8_t *)dev_unit_params(s, units[i]) + (a - r.off) * s->m->esize,
                               host_params_at(s, a), (b - a) * s->m->esize, ZO_COPY_H2D, s->h2d));
    }
    CHECK_Q(be->event_record(s->gather_wait, s->h2d));
    CHECK_Q(be->stream_wait_event(s->optim, s->gather_wait));
    zo_trace_next("exchange resident params", -1, 0, 0);
    CHECK_Q(be->launch_host_func(s->optim, resident_exchange_fn, s));
    for (int u = 0; u < s->U; u++)
      if (!s->pl.param_nvme || u == 0 || u == s->U - 1) /* param_nvme: the blocks' behind their writes */
        CHECK_Q(be->event_record(s->param_ready[u], s->optim));
    return;
  }
  CHECK_Q(be->event_record(s->gather_wait, s->h2d));
  CHECK_Q(be->stream_wait_event(s->optim, s->gather_wait));
  zo_trace_next("exchange params", -1, s->t->numel * s->m->esize, 0);
  CHECK_Q(be->launch_host_func(s->optim, gather_fn, s));
  CHECK_Q(be->event_record(s->gather_done, s->optim));
  for (int u = 0; u < s->U; u++) {
    void *dev = dev_unit_params(s, u);
    if (dev && s->h.params) {
      const struct range r = unit_range(s->t, u);
      CHECK_Q(be->stream_wait_event(s->h2d, s->gather_done));
      zo_trace_next("load unit", u, r.numel * s->m->esize, 0);
      CHECK_Q(sched_copy(s, dev, host_params_at(s, r.off), r.numel * s->m->esize, ZO_COPY_H2D, s->h2d));
      CHECK_Q(be->event_record(s->param_ready[u], s->h2d));
    } else {
      CHECK_Q(be->event_record(s->param_ready[u], s->optim));
    }
  }
}

/* sums[0, n) (loss sums) and sums[n, 2n) (token counts) added over the
 * ranks, on the caller's communicator. */
int sched_ranks_sum(struct zo_sched *s, double *sums, int n) {
  const double t0 = zo_time_s();
  int err = zo_comm_allreduce(s->comm, sums, 2 * (size_t)n, ZO_F64, ZO_COMM_SUM);
  atomic_fetch_add(&s->comm_ns, ns_since(t0));
  return err ? error_prefixed(err, "summing the losses over the ranks") : 0;
}

/* zo_sched_init's data-parallel stage (sharded placements): every rank's
 * shard, and the streams and communicators of ZeRO-3 block gathers and
 * overlapped gradient reductions. Every rank decides alike (the same
 * placement), so the duplicates, which are collective, are made by all or
 * none. Returns 0 or -errno. */
int sched_init_ranks(struct zo_sched *s, zo_comm_t comm) {
  const int n_ranks = s->n_ranks;
  s->shards = calloc((size_t)n_ranks, sizeof *s->shards);
  s->rs_counts = calloc((size_t)n_ranks, sizeof *s->rs_counts);
  s->norm_parts = calloc((size_t)s->t->n_tensors, sizeof *s->norm_parts);
  if (!s->shards || !s->rs_counts || !s->norm_parts) return sched_no_memory();
  for (int r = 0; r < n_ranks; r++) {
    s->shards[r] = zo_shard_of(&s->pl.opt, s->t, r, n_ranks);
    s->rs_counts[r] = s->shards[r].hi - s->shards[r].lo;
  }
  int err;
  s->pshard = s->n_slots > 0;
  if (s->pshard) {
    s->params_off = s->sh.lo;
    if ((err = zo_comm_dup(comm, &s->block_gather_comm))) return err;
    s->block_gather_ready = calloc((size_t)s->n_slots, sizeof *s->block_gather_ready);
    s->block_gather_free = calloc((size_t)s->n_slots, sizeof *s->block_gather_free);
    s->block_gather_tasks = calloc((size_t)s->L, sizeof *s->block_gather_tasks);
    if (!s->block_gather_ready || !s->block_gather_free || !s->block_gather_tasks) return sched_no_memory();
    for (int l = 0; l < s->L; l++) s->block_gather_tasks[l] = (struct task){s, l, 0};
    if ((err = sched_stream_create(s, &s->block_gather, "block_gather")) ||
        (err = sched_events_create(s->be, s->block_gather_ready, s->n_slots)) ||
        (err = sched_events_create(s->be, s->block_gather_free, s->n_slots)))
      return err;
  }
  /* The NVMe tier sums each block's gradients onto their owners on the d2h
   * stream, on a communicator of its own, before its file I/O. */
  if (s->pl.grads_nvme) return zo_comm_dup(comm, &s->reduce_comm);
  s->overlap = s->pl.grads_on_host && s->pl.overlap_comm;
  if (!s->overlap) return 0;
  const struct range head = unit_range(s->t, 0), tail = unit_range(s->t, s->L + 1);
  if ((err = zo_comm_dup(comm, &s->reduce_comm))) return err;
  s->reduce_ready = calloc((size_t)s->L + 1, sizeof *s->reduce_ready);
  s->reduce_tasks = calloc((size_t)s->L + 2, sizeof *s->reduce_tasks);
  if (!s->reduce_ready || !s->reduce_tasks) return sched_no_memory();
  s->grads_off = s->sh.lo;
  /* staging pointers once the pool is carved (init_streams) */
  for (int l = 0; l < s->L; l++)
    s->reduce_tasks[l] = (struct reduce_task){s, s->t->layer_offset[l], s->t->layer_numel, NULL, 0};
  s->reduce_tasks[s->L] = (struct reduce_task){s, head.off, head.numel, NULL, 0};
  s->reduce_tasks[s->L + 1] = (struct reduce_task){s, tail.off, tail.numel, NULL, 0};
  if ((err = sched_stream_create(s, &s->reduce, "reduce")) || (err = sched_events_create(s->be, s->reduce_ready, s->L + 1)) ||
      (err = s->be->event_create(&s->reduce_done)) ||
      (err = sched_events_create(s->be, s->stage_free, ZO_SCHED_GRAD_SLOTS)) ||
      (err = s->be->event_create(&s->stage_res_free)))
    return err;
  return 0;
}
