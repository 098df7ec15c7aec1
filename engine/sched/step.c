/* One step's queueing order: after the last micro-batch's backward, the
 * gradient sum over ranks, the norm, then unit by unit in forward order each
 * unit's update (device, cpu or NVMe chunks) followed by its copy to the
 * device, and the exchange of a sharded update. Events only: the caller
 * blocks solely where the device update needs the clip coefficient. */
#include "internal.h"

/* Queues the optimizer of one step on the optimizer stream, unit by unit in
 * forward order, each unit's new parameters copied to the device behind it.
 * With the optimizer on the device the gradient norm is per-tensor backend
 * sumsq, copied to the host and added there; the fp32 update then needs the
 * clip coefficient as an argument, so this waits for the norm (the host
 * stalls until the last backward has run, as llm.c does) and returns 0 or
 * -errno. */
int sched_queue_optimizer(struct zo_sched *s) {
  zo_backend_t be = s->be;
  const int p = s->parity;
  const bool on_device = s->pl.optimizer == ZO_OFFLOAD_NONE;
  if (s->pl.frozen) return sched_lora_queue_optimizer(s);
  CHECK_Q(be->stream_wait_event(s->optim, s->grads_ready));
  /* Overlapped, or on the NVMe tier, each range was summed onto its owners
   * as the backward produced it. */
  if (s->overlap) CHECK_Q(be->stream_wait_event(s->optim, s->reduce_done));
  else if (s->grad_comm && !s->pl.grads_nvme) {
    zo_trace_next("allreduce grads", -1, s->t->numel * sizeof(float), 0);
    CHECK_Q(be->launch_host_func(s->optim, sched_grads_allreduce_fn, s));
  }
  if (on_device) {
    for (int i = s->sh.t_lo; i < s->sh.t_hi; i++)
      be->sumsq(s->norm_dev + i, s->acc + s->t->tensors[i].offset, s->t->tensors[i].numel, s->optim);
    CHECK_Q(sched_copy(s, s->norm_host, s->norm_dev, (size_t)s->t->n_tensors * sizeof(double),
                             ZO_COPY_D2H, s->optim));
  }
  zo_trace_next("norm", -1, 0, 0);
  CHECK_Q(be->launch_host_func(s->optim, sched_norm_fn, &s->norm_tasks[p]));
  CHECK_Q(be->event_record(s->norm_done, s->optim));
  const bool dev_update = on_device;
  if (dev_update) {
    int err = be->event_synchronize(s->norm_done);
    /* Gradients not summed over the ranks must not update this replica. */
    if (!err && s->grad_comm) err = async_error(s);
    if (err) return err;
  }
  /* A step skipped for a non-finite gradient queues no device update (the
   * host functions check the flag themselves). */
  const bool dev_skip = dev_update && s->step[p].skip;
  if (s->nv) sched_nv_prime(s, p);
  int j = 0;
  for (int u = 0; u < s->U; u++) {
    const struct range r = unit_range(s->t, u);
    void *dev = dev_unit_params(s, u);
    const size_t e = s->m->esize;
    if (s->pl.optimizer == ZO_OFFLOAD_NVME) {
      for (; j < s->n_chunks && s->chunks[j].unit == u; j++) {
        const struct chunk *c = &s->chunks[j];
        const long g = s->nv_base + j;
        struct nv_task *task = &s->nv_update[p * s->n_chunks + j];
        *task = (struct nv_task){s, j, p, (int)(g % s->pl.nvme_buffers), -1};
        CHECK_Q(be->stream_wait_event(s->optim, s->chunk_issued[j]));
        zo_trace_next("adamw chunk", j, 0, 0);
        CHECK_Q(be->launch_host_func(s->optim, sched_nv_update_fn, task));
        CHECK_Q(be->event_record(s->chunk_done[j], s->optim));
        if (dev && !(s->sharded && s->h.params)) {
          /* Device copy straight from the staging buffer, which the refill of
           * chunk g + d does not reuse before chunk_h2d[j] completes (sharded
           * with a host working copy: after the exchange instead). */
          /* the part on the device: none of a streamed LM head */
          const size_t at = c->off - r.off, n = dev_unit_part(s, u, at, c->numel);
          CHECK_Q(be->stream_wait_event(s->h2d, s->chunk_done[j]));
          if (n) {
            zo_trace_next("load chunk", j, n * e, 0);
            CHECK_Q(sched_copy(s, (uint8_t *)dev + at * e,
                                     s->h.params              ? host_params_at(s, c->off)
                                     : s->nvb[task->buf].work ? s->nvb[task->buf].work
                                                              : s->nvb[task->buf].file[NV_MASTER],
                                     n * e, ZO_COPY_H2D, s->h2d));
          }
          CHECK_Q(be->event_record(s->chunk_h2d[j], s->h2d));
        }
        CHECK_Q(be->stream_wait_event(s->nvme_io, s->chunk_done[j]));
        zo_trace_next("nvme write chunk", j, c->numel * sizeof(float) + 2 * c->sbytes, 0);
        CHECK_Q(be->launch_host_func(s->nvme_io, sched_nv_write_fn, task));
        if (j + s->nv_depth < s->n_chunks) sched_nv_queue_refill(s, j + s->nv_depth, g + s->nv_depth, p);
      }
    } else if (dev_update) {
      if (!dev_skip) {
        zo_trace_scope(u); /* the unit the update ops carry on the timeline */
        sched_queue_device_update(s, &s->step[p], u);
        zo_trace_scope(-1);
      }
    } else {
      zo_trace_next("adamw unit", u, 0, 0);
      CHECK_Q(be->launch_host_func(s->optim, sched_opt_unit_fn, &s->opt_tasks[p * s->U + u]));
    }
    CHECK_Q(be->event_record(s->opt_done[u], s->optim));
    if (s->pl.param_nvme && u >= 1 && u <= s->L) {
      /* Behind the block's parameter-file writes (sched_nv_write_fn); sharded,
       * this rank's part's. */
      CHECK_Q(be->event_record(s->param_ready[u], s->nvme_io));
      continue;
    }
    if (s->sharded) {
      /* Without a host working copy this rank's part of the unit goes to
       * the device now (cpu tier; NVMe chunks did above); param_ready after
       * the exchange. */
      size_t a, b;
      unit_owned(s, u, &a, &b);
      if (dev && !s->h.params && s->pl.optimizer == ZO_OFFLOAD_CPU && b > a) {
        CHECK_Q(be->stream_wait_event(s->h2d, s->opt_done[u]));
        zo_trace_next("load unit", u, (b - a) * e, 0);
        CHECK_Q(sched_copy(s, (uint8_t *)dev + (a - r.off) * e, master_at(s, a), (b - a) * e, ZO_COPY_H2D,
                                 s->h2d));
      }
      continue;
    }
    if (!dev || s->pl.optimizer == ZO_OFFLOAD_NONE) {
      /* Updated in place where the compute (or the slot loads) read it. */
      CHECK_Q(be->event_record(s->param_ready[u], s->optim));
    } else if (s->pl.optimizer == ZO_OFFLOAD_NVME) {
      CHECK_Q(be->event_record(s->param_ready[u], s->h2d));
    } else {
      CHECK_Q(be->stream_wait_event(s->h2d, s->opt_done[u]));
      zo_trace_next("load unit", u, dev_unit_numel(s, u) * e, 0);
      CHECK_Q(sched_copy(s, dev, s->h.params ? host_params_at(s, r.off) : (void *)(s->h.master + r.off),
                               dev_unit_numel(s, u) * e, ZO_COPY_H2D, s->h2d));
      CHECK_Q(be->event_record(s->param_ready[u], s->h2d));
    }
  }
  if (s->sharded) sched_queue_gather(s);
  if (s->nv) {
    s->nv_base += s->n_chunks;
    s->nv_primed = false;
  }
  return 0;
}
