/* The scheduler's conductor (see zo/sched.h and, for the files of this
 * folder, internal.h): init and free, synchronize, a micro-batch's forward
 * and backward, the end of a step, eval. One training step is ordered over
 * four streams (five with NVMe, more with data parallelism) with events only.
 * Units are the ranges the scheduler moves: unit 0 = embeddings (wte, wpe),
 * units 1..L = blocks, unit L+1 = ln_f; the NVMe tier moves chunks of at
 * most one block's elements (8-bit tensors split only at quantization block
 * multiples), laid out at aligned aio.block_size multiples. m and v move as
 * their bytes: fp32 or 8-bit codes + absmax, in the canonical layout
 * (zo/sched.h) on the device and cpu tiers, in pieces packed per chunk on
 * the NVMe tier.
 * Ordering hazards worth knowing:
 *  - no host function blocks on an event; the NVMe ones block only on I/O:
 *    a refill (I/O stream) on the writes of the chunk whose buffer or range
 *    it reuses, an update (optimizer stream) on its own reads, issued
 *    buffer_count chunks earlier;
 *  - step_end first waits for the previous step's optimizer, so host-function
 *    arguments, which are double-buffered by step parity, are never
 *    rewritten while queued;
 *  - data parallel: the gradient sum over the ranks is the optimizer
 *    stream's first task of a step, on a communicator of its own (the main
 *    thread reduces losses on the caller's at the same time); nothing
 *    writes the gradients again before this step's updates, which follow it
 *    on the same stream, have read them.
 * It does not checkpoint, load data or log: engine/train/train.c does. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>

#include "zo/topology.h"

/* ---- public API ---------------------------------------------------------- */

struct zo_model *zo_sched_model(struct zo_sched *s) { return s->m; }

const struct zo_placement *zo_sched_placement(const struct zo_sched *s) { return &s->pl; }

int sched_events_create(zo_backend_t be, zo_event_t *ev, int n) {
  for (int i = 0; i < n; i++) {
    int err = be->event_create(&ev[i]);
    if (err) return err;
  }
  return 0;
}

static void events_destroy(zo_backend_t be, zo_event_t *ev, int n) {
  if (!ev) return;
  for (int i = 0; i < n; i++)
    if (ev[i]) be->event_destroy(ev[i]);
}

int sched_no_memory(void) { return zo_error(-ENOMEM, "out of host memory for the scheduler"); }

int sched_stream_create(struct zo_sched *s, zo_stream_t *stream, const char *name) {
  int err = s->be->stream_create(stream);
  if (!err && s->be->stream_set_name) s->be->stream_set_name(*stream, name);
  return err;
}

/* Stage 2 of init: the host pool, allocated once at its plan and carved by
 * the same sched_host_layout, and the canonical state offsets. */
static int init_host(struct zo_sched *s, const struct zo_sched_config *c) {
  struct host_carver plan = {0};
  sched_host_layout(&s->pl, s->t, c->B, c->T, &plan, &s->h);
  int err = zo_host_pool_init(&s->pool, plan.total, c->host_budget, s->pl.pin, c->backend);
  if (err) return err;
  /* The OpenMP workers (and the stream threads created from here on) run on
   * the node that holds the host pool. A refused binding costs speed, not
   * correctness: warn and go on. */
  if (s->pool.numa_node >= 0 && zo_topology_bind_omp(s->pool.numa_node, NULL) != 0)
    fprintf(stderr, "zoffload: warning: %s\n", zo_last_error());
  struct host_carver carver = {.pool = &s->pool, .tags = &s->pool_tags};
  sched_host_layout(&s->pl, s->t, c->B, c->T, &carver, &s->h);
  if (carver.err) return carver.err;
  s->soff = calloc((size_t)s->t->n_tensors, sizeof *s->soff);
  if (!s->soff) return sched_no_memory();
  size_t soff = 0;
  for (int i = 0; i < s->t->n_tensors; i++) {
    const size_t n = s->t->tensors[i].numel;
    s->soff[i] = soff;
    soff += zo_optim_piece_nbytes(&s->pl.opt, zo_optim_is_8bit(&s->pl.opt, n), n);
  }
  return 0;
}

/* Stage 3: where m and v live (st_m, st_v) for the device and cpu tiers. */
static int init_optimizer(struct zo_sched *s, const struct zo_sched_config *c) {
  if (s->pl.optimizer == ZO_OFFLOAD_CPU) {
    s->st_m = s->h.adam_m;
    s->st_v = s->h.adam_v;
    return 0;
  }
  if (s->pl.optimizer != ZO_OFFLOAD_NONE) return 0;
  if (s->pl.frozen) return sched_lora_attach(s, c); /* the base has no optimizer state */
  /* Optimizer on the device: an arena of the scheduler's own (planned by
   * zo_sched_device_plan) for the per-tensor norm partials and, for 8-bit
   * states, m and v, since the model's arena carves fp32 m, v only. */
  const size_t sb = s->pl.opt.eightbit ? zo_optim_state_nbytes(&s->pl.opt, s->t) : 0;
  const size_t nb = (size_t)s->t->n_tensors * sizeof(double);
  void *pn, *pm = NULL, *pv = NULL;
  int err;
  if ((err = zo_arena_init(&s->opt_arena, c->backend, zo_arena_round(nb) + 2 * zo_arena_round(sb), "device")) ||
      (err = zo_arena_alloc(&s->opt_arena, nb, "gradient norm partials", &pn)) ||
      (sb && ((err = zo_arena_alloc(&s->opt_arena, sb, "AdamW8bit m", &pm)) ||
              (err = zo_arena_alloc(&s->opt_arena, sb, "AdamW8bit v", &pv)))))
    return err;
  s->norm_dev = pn;
  if (!(s->norm_host = calloc((size_t)s->t->n_tensors, sizeof *s->norm_host))) return sched_no_memory();
  s->st_m = sb ? pm : (uint8_t *)s->m->adam_m;
  s->st_v = sb ? pv : (uint8_t *)s->m->adam_v;
  return 0;
}

/* Stage 4: the four streams every placement uses, their events and the
 * host-function arguments. */
static int init_streams(struct zo_sched *s) {
  zo_backend_t be = s->be;
  const int U = s->U, n_slot_ev = s->n_slots > 0 ? s->n_slots : 1;
  s->param_ready = calloc((size_t)U, sizeof(zo_event_t));
  s->opt_done = calloc((size_t)U, sizeof(zo_event_t));
  s->slot_free = calloc((size_t)n_slot_ev, sizeof(zo_event_t));
  s->slot_ready = calloc((size_t)n_slot_ev, sizeof(zo_event_t));
  s->slot_owner = calloc((size_t)n_slot_ev, sizeof(int));
  s->opt_tasks = calloc(2 * (size_t)U, sizeof *s->opt_tasks);
  s->acc_tasks = calloc((size_t)s->L + 2 + (size_t)s->n_hp, sizeof *s->acc_tasks);
  s->n_valid = calloc((size_t)s->pl.grad_accum, sizeof(int));
  s->loss_sums = calloc(2 * (size_t)s->pl.grad_accum, sizeof(double));
  const int NCK = s->pl.ckpt_cpu ? s->pl.ckpt_blocks : 0;
  s->ck_saved = calloc((size_t)NCK + 1, sizeof(zo_event_t));
  s->n_ck = NCK;
  if (!s->param_ready || !s->opt_done || !s->slot_free || !s->slot_ready || !s->slot_owner ||
      !s->opt_tasks || !s->acc_tasks || !s->n_valid || !s->loss_sums || !s->ck_saved)
    return sched_no_memory();
  int err;
  if ((err = sched_stream_create(s, &s->compute, "compute")) || (err = sched_stream_create(s, &s->h2d, "h2d")) ||
      (err = sched_stream_create(s, &s->d2h, "d2h")) || (err = sched_stream_create(s, &s->optim, "optim")) ||
      (err = sched_events_create(be, s->param_ready, U)) || (err = sched_events_create(be, s->opt_done, U)) ||
      (err = sched_events_create(be, s->slot_free, n_slot_ev)) || (err = sched_events_create(be, s->slot_ready, n_slot_ev)) ||
      (err = sched_events_create(be, s->in_free, 2)) || (err = sched_events_create(be, s->gslot_ready, ZO_SCHED_GRAD_SLOTS)) ||
      (err = sched_events_create(be, s->gslot_free, ZO_SCHED_GRAD_SLOTS)) || (err = be->event_create(&s->res_ready)) ||
      (err = be->event_create(&s->res_free)) || (err = be->event_create(&s->grads_done)) ||
      (err = be->event_create(&s->grads_ready)) || (err = be->event_create(&s->norm_done)) ||
      (err = be->event_create(&s->losses_ready)) || (err = be->event_create(&s->gather_wait)) ||
      (err = be->event_create(&s->gather_done)) || (err = sched_events_create(be, s->ck_saved, NCK)) ||
      (err = be->event_create(&s->ck_out)) || (err = sched_events_create(be, s->ck_free, 2)) ||
      (err = sched_events_create(be, s->ck_ready, 2)) || (err = be->event_create(&s->emb_free)) ||
      (err = be->event_create(&s->emb_ready)))
    return err;
  /* The op streams' scratch (CUDA's cuBLASLt workspaces) is in the device plan. */
  zo_model_stream_workspace(s->m, 0, s->compute);
  zo_model_stream_workspace(s->m, 1, s->optim);
  s->ck_owner[0] = s->ck_owner[1] = -1;
  for (int k = 0; k < n_slot_ev; k++) s->slot_owner[k] = -1;
  for (int p = 0; p < 2; p++) {
    s->norm_tasks[p] = (struct task){s, 0, p};
    for (int u = 0; u < U; u++) s->opt_tasks[p * U + u] = (struct task){s, u, p};
  }
  /* The gradient tasks' buffers, now that the pool is carved. */
  const struct range head = unit_range(s->t, 0), tail = unit_range(s->t, U - 1);
  if (s->overlap) {
    for (int l = 0; l < s->L; l++) s->reduce_tasks[l].src = s->h.stage[l % s->pl.grad_slots];
    s->reduce_tasks[s->L].src = s->h.stage_res;
    s->reduce_tasks[s->L + 1].src = s->h.stage_res + head.numel;
  }
  for (int b = 0; b < 2; b++) {
    s->emb_tasks[b] = (struct emb_task){s, b, false};
    s->emb_gather_tasks[b] = (struct emb_gather_task){s, b};
  }
  if (s->h.emb_row)
    for (int v = 0; v < s->t->tensors[0].shape[0]; v++) s->h.emb_row[v] = -1;
  const bool whole = s->h.grads && !s->overlap && !s->pl.grads_nvme; /* h.grads holds every block's */
  for (int l = 0; l < s->L; l++)
    s->acc_tasks[l] = (struct acc_task){s, whole ? s->h.grads + s->t->layer_offset[l] : NULL,
                                        s->h.stage[l % s->pl.grad_slots], s->t->layer_numel};
  if (s->h.grads && !s->overlap) {
    /* the staging holds the head range only when its gradient comes from the device */
    s->acc_tasks[s->L] = (struct acc_task){s, grads_at(s, head.off), s->m->res_ghead ? s->h.stage_res : NULL, head.numel};
    s->acc_tasks[s->L + 1] = (struct acc_task){
        s, grads_at(s, tail.off), s->h.stage_res ? s->h.stage_res + s->m->res_ghead : NULL, s->m->res_tail};
  }
  /* The streamed LM head's pieces: staged like the blocks (grads_nvme: in stage 0). */
  for (int p = 0; p < s->n_hp; p++) {
    const struct range r = head_piece(s, p);
    s->acc_tasks[s->L + 2 + p] = (struct acc_task){
        s, grads_at(s, r.off), s->h.stage[s->pl.grads_nvme ? 0 : (s->L + p) % s->pl.grad_slots], r.numel};
  }
  return 0;
}

/* Stage 1 (with the ranks' init in collective.c): the model, whose arena is
 * the device plan, and what follows from the placement. */
static int init_model(struct zo_sched *s, const struct zo_sched_config *c) {
  s->loss_scale = 1.0;
  s->pl = c->placement;
  zo_placement_set_ranks(&s->pl, c->comm ? zo_comm_rank(c->comm) : 0, s->n_ranks);
  s->sharded = zo_placement_sharded(&s->pl);
  s->be = c->backend;
  s->B = c->B;
  s->T = c->T;
  const struct zo_model_layout lo = zo_placement_layout(&s->pl);
  s->m = zo_model_init_layout(&c->model, c->backend, c->B, c->T, &lo);
  if (!s->m) return -ENOMEM; /* the message is the model's */
  s->t = &s->m->table;
  s->L = s->m->cfg.n_layer;
  s->U = s->L + 2;
  s->n_slots = s->pl.param_slots;
  s->n_hp = s->m->layout.head_stream ? s->m->head_pieces : 0;
  s->head_off = s->n_hp ? s->t->tensors[s->t->n_tensors - 1].offset : 0;
  s->acc = lo.grad_accum ? s->m->grads_acc : s->m->grads;
  s->micro = s->m->grads;
  s->sh = zo_placement_shard(&s->pl, s->t);
  if (s->pl.optimizer == ZO_OFFLOAD_CPU) {
    s->master_off = s->sh.lo;
    s->st_off = s->sh.slo;
  }
  return 0;
}

struct zo_sched *zo_sched_init(const struct zo_sched_config *c) {
  const int n_ranks = c->comm ? zo_comm_size(c->comm) : 1;
  if (n_ranks > 1 && c->backend != zo_backend_cpu()) {
    zo_error(-ENOTSUP, "data parallelism over %d ranks runs on the CPU backend only: the gradients are summed "
                       "by MPI in host memory, and on the %s backend the collectives need NCCL, which is not "
                       "wired yet; set engine.device = \"cpu\" or run one process",
             n_ranks, c->backend->name);
    return NULL;
  }
  /* Every rank has the same placement, so every rank returns here. */
  if (n_ranks > 1 && c->placement.param_nvme && c->placement.zero_stage < 3) {
    zo_error(-ENOTSUP, "zero_optimization.offload_param.device = \"nvme\" over %d ranks needs "
                       "zero_optimization.stage = 3 (it is %d): each rank's NVMe files hold its shard only; "
                       "set the stage to 3 or run one process", n_ranks, c->placement.zero_stage);
    return NULL;
  }
  if (c->placement.frozen != (c->lora != NULL)) {
    zo_error(-EINVAL, "zo_sched_init: placement.frozen and the LoRA table go together");
    return NULL;
  }
  /* The duplicate first: it is collective, and every rank reaches it. */
  zo_comm_t grad_comm = NULL;
  if (n_ranks > 1 && zo_comm_dup(c->comm, &grad_comm)) return NULL;
  struct zo_sched *s = calloc(1, sizeof *s);
  if (!s) {
    zo_comm_free(grad_comm);
    sched_no_memory();
    return NULL;
  }
  pthread_mutex_init(&s->err_mu, NULL);
  s->n_ranks = n_ranks;
  s->pfile_id = s->gfile_id = -1;
  for (int f = 0; f < NV_FILES; f++) s->file_id[f] = -1;
  if (n_ranks > 1) {
    s->comm = c->comm;
    s->grad_comm = grad_comm;
  }
  if (init_model(s, c) || (s->sharded && sched_init_ranks(s, c->comm)) || init_host(s, c) || init_optimizer(s, c) ||
      init_streams(s) || (s->pl.optimizer == ZO_OFFLOAD_NVME && sched_nvme_open(s)) ||
      (s->pl.frozen && s->pl.param_nvme && sched_base_nvme_open(s))) {
    zo_sched_free(s);
    return NULL;
  }
  s->hooks = (struct zo_model_hooks){.ctx = s, .block_begin = sched_hook_begin, .block_end = sched_hook_end,
                                      .head_begin = s->n_hp ? sched_head_hook_begin : NULL,
                                      .head_end = s->n_hp ? sched_head_hook_end : NULL};
  s->m->hooks = &s->hooks;
  return s;
}

int zo_sched_synchronize(struct zo_sched *s) {
  zo_backend_t be = s->be;
  int err = 0;
  zo_stream_t streams[8] = {s->compute, s->d2h, s->reduce, s->optim, s->block_gather, s->h2d, s->nvme_io, s->param_io};
  for (int i = 0; i < 8; i++)
    if (streams[i] && !err) err = be->stream_synchronize(streams[i]);
  if (err) return err;
  if (s->nvb && !atomic_load(&s->err)) /* the optimizer's pipeline (not a frozen base's file alone) */
    for (int b = 0; b < s->pl.nvme_buffers && !err; b++) err = sched_nv_buffer_drain(s, &s->nvb[b]);
  if (err) async_fail(s, err);
  return async_error(s);
}

void zo_sched_free(struct zo_sched *s) {
  if (!s) return;
  zo_backend_t be = s->be;
  if (s->compute) zo_sched_synchronize(s);
  if (be) {
    be->stream_destroy(s->compute);
    be->stream_destroy(s->h2d);
    be->stream_destroy(s->d2h);
    be->stream_destroy(s->optim);
    be->stream_destroy(s->nvme_io);
    be->stream_destroy(s->reduce);
    be->stream_destroy(s->block_gather);
    be->stream_destroy(s->param_io);
    events_destroy(be, s->ring_ready, s->n_slots);
    events_destroy(be, s->reduce_ready, s->L + 1);
    events_destroy(be, s->stage_free, ZO_SCHED_GRAD_SLOTS);
    events_destroy(be, s->block_gather_ready, s->n_slots);
    events_destroy(be, s->block_gather_free, s->n_slots);
    const int U = s->U, n_slot_ev = s->n_slots > 0 ? s->n_slots : 1;
    events_destroy(be, s->param_ready, U);
    events_destroy(be, s->opt_done, U);
    events_destroy(be, s->slot_free, n_slot_ev);
    events_destroy(be, s->slot_ready, n_slot_ev);
    events_destroy(be, s->in_free, 2);
    events_destroy(be, s->gslot_ready, ZO_SCHED_GRAD_SLOTS);
    events_destroy(be, s->gslot_free, ZO_SCHED_GRAD_SLOTS);
    zo_event_t single[] = {s->res_ready,   s->res_free,    s->grads_done,  s->grads_ready,    s->norm_done,
                           s->losses_ready, s->gather_wait, s->gather_done, s->reduce_done,    s->stage_res_free,
                           s->emb_free,     s->emb_ready};
    events_destroy(be, single, (int)(sizeof single / sizeof single[0]));
    events_destroy(be, s->chunk_done, s->n_chunks);
    events_destroy(be, s->chunk_h2d, s->n_chunks);
    events_destroy(be, s->chunk_issued, s->n_chunks);
    events_destroy(be, s->ck_saved, s->n_ck);
    zo_event_t ck[] = {s->ck_out, s->ck_free[0], s->ck_free[1], s->ck_ready[0], s->ck_ready[1]};
    events_destroy(be, ck, 5);
  }
  zo_nvme_free(s->nv);
  sched_lora_free(s);
  zo_host_pool_free(&s->pool);
  zo_arena_free(&s->opt_arena);
  zo_model_free(s->m);
  free(s->soff);
  free(s->norm_host);
  free(s->pieces);
  free(s->param_ready);
  free(s->opt_done);
  free(s->slot_free);
  free(s->slot_ready);
  free(s->slot_owner);
  free(s->opt_tasks);
  free(s->acc_tasks);
  free(s->n_valid);
  free(s->loss_sums);
  free(s->shards);
  free(s->rs_counts);
  free(s->norm_parts);
  free(s->reduce_ready);
  free(s->reduce_tasks);
  free(s->block_gather_ready);
  free(s->block_gather_free);
  free(s->block_gather_tasks);
  zo_comm_free(s->block_gather_comm);
  zo_comm_free(s->reduce_comm);
  zo_comm_free(s->grad_comm);
  free(s->chunks);
  free(s->unit_chunk);
  free(s->ring_ready);
  free(s->pread_tasks);
  free(s->gio_tasks);
  free(s->gio_req);
  free(s->res_pieces);
  free(s->res_reduce);
  free(s->nvb);
  free(s->nv_refill);
  free(s->nv_update);
  free(s->chunk_done);
  free(s->chunk_h2d);
  free(s->chunk_issued);
  free(s->ck_saved);
  free(s->nv_segs[0]);
  free(s->nv_segs[1]);
  free(s->nv_valid);
  free(s->base_valid);
  pthread_mutex_destroy(&s->err_mu);
  free(s);
}

/* Synchronous copies of whole units between host buffers and where they live. */
int sched_copy_sync(struct zo_sched *s, void *dst, const void *src, size_t nbytes, enum zo_copy_kind k) {
  int err = sched_copy(s, dst, src, nbytes, k, s->compute);
  return err ? err : s->be->stream_synchronize(s->compute);
}

void zo_sched_batch(struct zo_sched *s, int32_t **inputs, int32_t **targets) {
  const int b = s->batch_buf;
  ZO_ASSERT(s->be->event_synchronize(s->in_free[b]) == 0);
  *inputs = s->h.in[b];
  *targets = s->h.tg[b];
}

void zo_sched_micro_batch(struct zo_sched *s, int k) {
  ZO_ASSERT(k >= 0 && k < s->pl.grad_accum);
  ZO_ASSERT(!s->st_active); /* zo_sched_state_done first */
  const int b = s->batch_buf, K = s->pl.grad_accum;
  const size_t BT = (size_t)s->B * (size_t)s->T;
  int n = 0;
  for (size_t i = 0; i < BT; i++) n += s->h.tg[b][i] >= 0;
  s->n_valid[k] = n;
  s->k = k;
  /* The step's first state reads overlap its forward and backward. */
  if (s->nvb && k == 0) sched_nv_prime(s, s->parity ^ 1);
  /* The LM head's backward runs chunk by chunk inside the forward. The loss
   * scale is a power of two, so scaling dloss is exact. Over N ranks the
   * denominator is the global micro-batch's tokens, the same float as one
   * process with N times the rows computes. */
  const float dloss = s->step_targets
                          ? (float)s->loss_scale / (float)s->step_targets
                          : (float)s->loss_scale / ((float)(BT * (size_t)s->n_ranks) * (float)K);
  /* The model copies the tokens and targets in (H2D, counted here). */
  atomic_fetch_add_explicit(&s->h2d_bytes, 2 * BT * sizeof(int32_t), memory_order_relaxed);
  zo_model_forward_train(s->m, s->h.in[b], s->h.tg[b], s->B, s->T, dloss, s->compute);
  /* The embedding's gradient summed on the host reads the tokens after the
   * backward: the hooks record in_free then (emb_grads_out). */
  if (s->m->res_ghead) CHECK_Q(s->be->event_record(s->in_free[b], s->compute));
  CHECK_Q(sched_copy(s, s->h.losses + (size_t)k * BT, s->m->losses, BT * sizeof(float),
                              ZO_COPY_D2H, s->compute));
  zo_model_backward(s->m, s->B, s->T, dloss, s->compute);
  s->batch_buf ^= 1;
  if (k == K - 1) CHECK_Q(s->be->event_record(s->losses_ready, s->compute));
}

/* Sum over tokens: invalid tokens (no target) have loss exactly 0, so
 * summing every entry gives the same double as skipping them. */
static double loss_sum(const float *losses, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) sum += losses[i];
  return sum;
}

/* Mean over tokens with a target. */
static double mean_loss(const float *losses, size_t n, int n_valid) {
  const double sum = loss_sum(losses, n);
  return n_valid ? sum / n_valid : 0.0;
}

int zo_sched_step_end(struct zo_sched *s, long t, const struct zo_adamw_hparams *hp,
                      double max_norm, double *loss) {
  zo_backend_t be = s->be;
  int err;
  /* The previous step's optimizer and device copies must be finished before
   * their events and arguments are reused (see the file comment). */
  if (s->stepped && ((err = be->event_synchronize(s->opt_done[s->U - 1])) ||
                     (err = be->event_synchronize(s->param_ready[s->U - 1]))))
    return err;
  if (s->nvb && s->n_chunks && (err = be->event_synchronize(s->chunk_h2d[s->n_chunks - 1]))) return err;
  if ((err = async_error(s))) return err;
  s->parity ^= 1;
  struct step_args *sa = &s->step[s->parity];
  sa->t = t;
  sa->hp = *hp;
  sa->max_norm = max_norm;
  sa->loss_scale = s->loss_scale;
  sa->skip_nonfinite = s->pl.dtype == ZO_F16 || s->pl.skip_nonfinite;
  sa->skip = false;
  err = sched_queue_optimizer(s);
  s->stepped = true; /* work was queued even on failure */
  if (err) return err;
  if (s->n_slots) sched_slots_invalidate(s);
  if ((err = be->event_synchronize(s->losses_ready))) return err;
  const size_t BT = (size_t)s->B * (size_t)s->T;
  const int K = s->pl.grad_accum;
  double sum = 0.0;
  if (s->comm) {
    /* Each micro-batch's mean over the global micro-batch's tokens. */
    double *ls = s->loss_sums;
    for (int k = 0; k < K; k++) {
      ls[k] = loss_sum(s->h.losses + (size_t)k * BT, BT);
      ls[K + k] = s->n_valid[k];
    }
    if ((err = sched_ranks_sum(s, ls, K))) return err;
    if (s->step_targets) {
      for (int k = 0; k < K; k++) sum += ls[k];
      sum /= (double)s->step_targets;
    } else {
      for (int k = 0; k < K; k++) sum += (ls[K + k] > 0 ? ls[k] / ls[K + k] : 0.0) / K;
    }
  } else if (s->step_targets) {
    /* The mean over the step's trained targets, as its gradient. */
    for (int k = 0; k < K; k++) sum += loss_sum(s->h.losses + (size_t)k * BT, BT);
    sum /= (double)s->step_targets;
  } else {
    for (int k = 0; k < K; k++) sum += mean_loss(s->h.losses + (size_t)k * BT, BT, s->n_valid[k]) / K;
  }
  *loss = sum;
  return async_error(s);
}

int zo_sched_norm(struct zo_sched *s, double *norm, bool *skipped) {
  int err = s->be->event_synchronize(s->norm_done);
  if (err) return err;
  *norm = s->step[s->parity].norm;
  if (skipped) *skipped = s->step[s->parity].skip;
  return 0;
}

void zo_sched_set_step_targets(struct zo_sched *s, size_t n) { s->step_targets = n; }

void zo_sched_set_loss_scale(struct zo_sched *s, double scale) {
  ZO_ASSERT(scale > 0.0);
  s->loss_scale = scale;
}

zo_stream_t zo_sched_stream(struct zo_sched *s) { return s->compute; }

int zo_sched_eval(struct zo_sched *s, double *loss) {
  const size_t BT = (size_t)s->B * (size_t)s->T;
  int32_t *in = s->h.in[s->batch_buf], *tg = s->h.tg[s->batch_buf];
  int n = 0;
  for (size_t i = 0; i < BT; i++) n += tg[i] >= 0;
  zo_model_forward(s->m, in, tg, s->B, s->T, s->compute);
  CHECK_Q(s->be->event_record(s->in_free[s->batch_buf], s->compute));
  s->batch_buf ^= 1;
  float *out = s->h.losses; /* free: the last step's losses were summed */
  int err = sched_copy(s, out, s->m->losses, BT * sizeof(float), ZO_COPY_D2H, s->compute);
  if (!err) err = s->be->stream_synchronize(s->compute);
  if (err) return err;
  if (s->comm) {
    double ls[2] = {loss_sum(out, BT), n};
    if ((err = sched_ranks_sum(s, ls, 1))) return err;
    *loss = ls[1] > 0 ? ls[0] / ls[1] : 0.0;
  } else {
    *loss = mean_loss(out, BT, n);
  }
  return async_error(s);
}
