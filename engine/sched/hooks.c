/* The model's block hooks: before a block runs, its parameters are made
 * resident (parameter slots loaded on the H2D stream), its gradient target
 * bound and zeroed, its checkpointed input loaded back from host memory;
 * after it, slots are released, gradients leave for the host (staged and
 * accumulated when grad_accum > 1) and checkpointed inputs are saved. Only events
 * order them; nothing here blocks the caller. */
#include "internal.h"

#include "zo/cpu.h"

/* ---- parameter slots ----------------------------------------------------- */

/* Ring entry l resident in slot l % K, loading it on the H2D stream if
 * needed: block l, or (l >= L) the LM head's piece l - L, once the tail's
 * update is on the host. */
static void slot_ensure(struct zo_sched *s, int l) {
  const int k = l % s->n_slots;
  if (s->slot_owner[k] == l) return;
  if (l >= s->L) {
    const struct range r = head_piece(s, l - s->L);
    CHECK_Q(s->be->stream_wait_event(s->h2d, s->slot_free[k]));
    CHECK_Q(s->be->stream_wait_event(s->h2d, s->param_ready[s->U - 1]));
    zo_trace_next("load head piece", l - s->L, r.numel * s->m->esize, 0);
    CHECK_Q(sched_copy(s, s->m->param_slots[k], head_src(s, r.off), r.numel * s->m->esize, ZO_COPY_H2D,
                                s->h2d));
    CHECK_Q(s->be->event_record(s->slot_ready[k], s->h2d));
    s->slot_owner[k] = l;
    return;
  }
  if (s->pl.param_nvme) {
    sched_param_slot_load(s, l, k);
    s->slot_owner[k] = l;
    return;
  }
  const struct range r = unit_range(s->t, 1 + l);
  if (s->pshard) {
    /* Gathered from the owners into slot k's buffer (stream block_gather, in the same
     * order on every rank), then copied to the slot. */
    CHECK_Q(s->be->stream_wait_event(s->block_gather, s->block_gather_free[k]));
    CHECK_Q(s->be->stream_wait_event(s->block_gather, s->param_ready[1 + l]));
    zo_trace_next("gather block", l, r.numel * s->m->esize, 0);
    CHECK_Q(s->be->launch_host_func(s->block_gather, sched_block_gather_fn, &s->block_gather_tasks[l]));
    CHECK_Q(s->be->event_record(s->block_gather_ready[k], s->block_gather));
    CHECK_Q(s->be->stream_wait_event(s->h2d, s->block_gather_ready[k]));
  }
  CHECK_Q(s->be->stream_wait_event(s->h2d, s->slot_free[k]));
  CHECK_Q(s->be->stream_wait_event(s->h2d, s->param_ready[1 + l]));
  zo_trace_next("load block", l, r.numel * s->m->esize, 0);
  CHECK_Q(sched_copy(s, s->m->param_slots[k], s->pshard ? block_gather_buf(s, k) : host_params_at(s, r.off),
                              r.numel * s->m->esize, ZO_COPY_H2D, s->h2d));
  CHECK_Q(s->be->event_record(s->slot_ready[k], s->h2d));
  if (s->pshard) CHECK_Q(s->be->event_record(s->block_gather_free[k], s->h2d));
  s->slot_owner[k] = l;
}

/* The ring entry needed at position i of a micro-batch, over N = L + n_hp
 * entries: F0..F(N-1), B(N-1)..B0 (the head's pieces between the blocks'
 * forward and backward). */
static int need_at(int N, int i) { return i < N ? i : 2 * N - 1 - i; }

/* Ring entry l in its slot for phase ph (loading the next K entries ahead);
 * returns the slot's device address once the compute stream waits for it. */
static void *slots_acquire(struct zo_sched *s, int l, enum zo_model_phase ph, zo_stream_t cs) {
  const int N = s->L + s->n_hp, pos = ph == ZO_MODEL_FORWARD ? l : 2 * N - 1 - l;
  for (int i = pos; i < pos + s->n_slots && i < 2 * N; i++) slot_ensure(s, need_at(N, i));
  CHECK_Q(s->be->stream_wait_event(cs, s->slot_ready[l % s->n_slots]));
  return s->m->param_slots[l % s->n_slots];
}

/* Next step: every slot is stale; start loading the first blocks as soon as
 * their updates finish. */
void sched_slots_invalidate(struct zo_sched *s) {
  for (int k = 0; k < s->n_slots; k++) s->slot_owner[k] = -1;
  for (int l = 0; l < s->n_slots; l++) slot_ensure(s, l);
}

/* ---- the embedding on the host -------------------------------------------- */

/* Where the host keeps the embedding's working weights. */
static const void *emb_weights(struct zo_sched *s) {
  return s->h.emb_params ? s->h.emb_params : s->h.params ? host_params_at(s, 0) : (const void *)master_at(s, 0);
}

/* h2d stream: the micro-batch's rows by the CPU backend's own encoder
 * forward (a copy per position, as on the device). */
static void emb_gather_fn(void *arg) {
  const struct emb_gather_task *a = arg;
  struct zo_sched *s = a->s;
  zo_cpu_encoder_forward(s->h.emb_in, s->h.in[a->b], emb_weights(s), NULL, s->B, s->T, s->m->cfg.n_embd,
                         s->m->dtype);
}

/* Before the embedding's forward: its rows into encoded, once encoded's
 * last reader is done and the embedding's update is on the host. */
static void emb_gather(struct zo_sched *s, struct zo_model *m, zo_stream_t cs) {
  zo_backend_t be = s->be;
  const size_t nb = (size_t)s->B * (size_t)s->T * (size_t)m->cfg.n_embd * m->esize;
  CHECK_Q(be->event_record(s->emb_free, cs));
  CHECK_Q(be->stream_wait_event(s->h2d, s->emb_free));
  CHECK_Q(be->stream_wait_event(s->h2d, s->param_ready[0]));
  zo_trace_next("gather embedding", -1, nb, 0);
  CHECK_Q(be->launch_host_func(s->h2d, emb_gather_fn, &s->emb_gather_tasks[s->batch_buf]));
  CHECK_Q(sched_copy(s, m->encoded, s->h.emb_in, nb, ZO_COPY_H2D, s->h2d));
  CHECK_Q(be->event_record(s->emb_ready, s->h2d));
  CHECK_Q(be->stream_wait_event(cs, s->emb_ready));
}

/* ---- gradients ----------------------------------------------------------- */

void sched_acc_fn(void *arg) {
  const struct acc_task *a = arg;
  double t0 = zo_time_s();
  float *restrict d = a->dst;
  const float *restrict x = a->src;
  /* acc += micro: the same single rounding as the device's residual add. */
#pragma omp parallel for simd schedule(static) if (a->n >= ((size_t)1 << 16))
  for (size_t i = 0; i < a->n; i++) d[i] = d[i] + x[i];
  atomic_fetch_add(&a->s->acc_ns, ns_since(t0));
}

/* The embedding's gradient of one micro-batch, from d(embedding output) and
 * the tokens: rows summed per distinct token in emb_stage by the CPU
 * backend's own encoder backward (the same additions in the same order as
 * on the device), then each row added to the accumulator (zeroed first in
 * the step's first micro-batch): the bits of the device's scatter and
 * copy or staged add. The padding index's row gets nothing, as on the
 * device: its staged row is skipped by the op and not added. */
static void emb_fn(void *arg) {
  const struct emb_task *a = arg;
  struct zo_sched *s = a->s;
  const double t0 = zo_time_s();
  const size_t C = (size_t)s->m->cfg.n_embd, BT = (size_t)s->B * (size_t)s->T, nh = s->m->head_numel;
  const int32_t *tok = s->h.in[a->b];
  float *acc = grads_at(s, 0);
  if (a->first) {
    const size_t piece = (size_t)1 << 20;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < nh; i += piece) memset(acc + i, 0, (nh - i < piece ? nh - i : piece) * sizeof(float));
  }
  int32_t n = 0;
  for (size_t i = 0; i < BT; i++) {
    const int32_t v = tok[i];
    ZO_ASSERT(v >= 0 && (size_t)v * C < nh);
    if (s->h.emb_row[v] < 0) {
      s->h.emb_row[v] = n;
      s->h.emb_uniq[n++] = v;
    }
    s->h.emb_map[i] = s->h.emb_row[v];
  }
  const int pad = zo_model_padding_idx(&s->m->cfg), pad_row = pad >= 0 ? s->h.emb_row[pad] : -1;
  memset(s->h.emb_stage, 0, (size_t)n * C * sizeof(float));
  zo_cpu_encoder_backward(s->h.emb_stage, NULL, s->h.emb_dout, s->h.emb_map, s->B, s->T, (int)C, pad_row,
                          s->m->dtype);
#pragma omp parallel for schedule(static)
  for (int32_t j = 0; j < n; j++) {
    if (j == pad_row) continue;
    float *restrict d = acc + (size_t)s->h.emb_uniq[j] * C;
    const float *restrict x = s->h.emb_stage + (size_t)j * C;
#pragma omp simd
    for (size_t c = 0; c < C; c++) d[c] = d[c] + x[c];
  }
  for (int32_t j = 0; j < n; j++) s->h.emb_row[s->h.emb_uniq[j]] = -1;
  atomic_fetch_add(&s->acc_ns, ns_since(t0));
}

/* d(embedding output) to the host and its sum there (d2h stream, after the
 * waits of the resident ranges); the token buffer is free after it. */
static void emb_grads_out(struct zo_sched *s, struct zo_model *m) {
  const size_t nb = (size_t)s->B * (size_t)s->T * (size_t)m->cfg.n_embd * m->esize;
  struct emb_task *a = &s->emb_tasks[s->batch_buf];
  a->first = s->k == 0;
  zo_trace_next("grads out", s->L, nb, 0);
  CHECK_Q(sched_copy(s, s->h.emb_dout, m->embed_dout, nb, ZO_COPY_D2H, s->d2h));
  zo_trace_next("embedding grads", s->L, m->head_numel * sizeof(float), m->head_numel);
  CHECK_Q(s->be->launch_host_func(s->d2h, emb_fn, a));
  CHECK_Q(s->be->event_record(s->in_free[s->batch_buf], s->d2h));
}

/* Copies device gradients [src, +n) of host range off to the host: straight
 * into the accumulator for the first micro-batch, else to staging + add. */
static void grads_out(struct zo_sched *s, const float *src, size_t off, size_t n, float *stage,
                      struct acc_task *task) {
  const int index = (int)(task - s->acc_tasks); /* block, or L (head), L + 1 (tail) */
  zo_trace_next("grads out", index, n * sizeof(float), 0);
  if (s->k == 0) {
    CHECK_Q(sched_copy(s, grads_at(s, off), src, n * sizeof(float), ZO_COPY_D2H, s->d2h));
    return;
  }
  CHECK_Q(sched_copy(s, stage, src, n * sizeof(float), ZO_COPY_D2H, s->d2h));
  zo_trace_next("accumulate grads", index, n * sizeof(float), n);
  CHECK_Q(s->be->launch_host_func(s->d2h, sched_acc_fn, task));
}

/* ---- activation checkpoints in host memory -------------------------------- */

static bool ck_on_host(const struct zo_sched *s, int l) {
  return s->pl.ckpt_cpu && l >= 0 && l < s->pl.ckpt_blocks;
}

static size_t ck_nbytes(const struct zo_sched *s) {
  return (size_t)s->B * (size_t)s->T * (size_t)s->m->cfg.n_embd * s->m->esize;
}

static void *ck_host(struct zo_sched *s, int l) { return s->h.act_ckpt + (size_t)l * ck_nbytes(s); }

/* After block l's forward: its input leaves on the D2H stream. */
static void ck_save(struct zo_sched *s, struct zo_model *m, int l, zo_stream_t cs) {
  zo_backend_t be = s->be;
  CHECK_Q(be->event_record(s->ck_out, cs));
  CHECK_Q(be->event_record(s->ck_free[l % 2], cs));
  CHECK_Q(be->stream_wait_event(s->d2h, s->ck_out));
  zo_trace_next("save input", l, ck_nbytes(s), 0);
  CHECK_Q(sched_copy(s, ck_host(s, l), m->ckpt_in[l % 2], ck_nbytes(s), ZO_COPY_D2H, s->d2h));
  CHECK_Q(be->event_record(s->ck_saved[l], s->d2h));
}

/* Block l's input back into its buffer on the H2D stream, once the buffer's
 * last reader is done and the host copy is complete. */
static void ck_load(struct zo_sched *s, struct zo_model *m, int l) {
  zo_backend_t be = s->be;
  const int b = l % 2;
  if (s->ck_owner[b] == l) return;
  CHECK_Q(be->stream_wait_event(s->h2d, s->ck_free[b]));
  CHECK_Q(be->stream_wait_event(s->h2d, s->ck_saved[l]));
  zo_trace_next("load input", l, ck_nbytes(s), 0);
  CHECK_Q(sched_copy(s, m->ckpt_in[b], ck_host(s, l), ck_nbytes(s), ZO_COPY_H2D, s->h2d));
  CHECK_Q(be->event_record(s->ck_ready[b], s->h2d));
  s->ck_owner[b] = l;
}

void sched_hook_begin(void *ctx, struct zo_model *m, int l, enum zo_model_phase ph, zo_stream_t cs) {
  struct zo_sched *s = ctx;
  zo_backend_t be = s->be;
  const int L = s->L;
  if (ph == ZO_MODEL_FORWARD && s->pl.ckpt_cpu) {
    /* The embedding and block l write the input buffers: the copies out of
     * their previous contents must be done (the last save covers all, the
     * D2H stream being in order), and the loaded inputs are stale. */
    if (l == ZO_MODEL_EMBED) {
      CHECK_Q(be->stream_wait_event(cs, s->ck_saved[s->pl.ckpt_blocks - 1]));
      s->ck_owner[0] = s->ck_owner[1] = -1;
    } else if (l >= 1 && l < s->pl.ckpt_blocks - 1) {
      CHECK_Q(be->stream_wait_event(cs, s->ck_saved[l - 1]));
    }
  }
  if (ph == ZO_MODEL_FORWARD) {
    if (l == ZO_MODEL_EMBED) {
      if (m->res_phead) CHECK_Q(be->stream_wait_event(cs, s->param_ready[0]));
      else emb_gather(s, m, cs);
    } else if (l == L) {
      CHECK_Q(be->stream_wait_event(cs, s->param_ready[s->U - 1]));
    } else if (s->n_slots) {
      zo_model_bind_block(m, l, slots_acquire(s, l, ph, cs), NULL);
    } else {
      CHECK_Q(be->stream_wait_event(cs, s->param_ready[1 + l]));
    }
    return;
  }
  /* Backward: each micro-batch's gradients go into zeroed buffers. A frozen
   * base has none (the adapters' accumulate where lora.c zeroes them). */
  if (l == L) {
    if (s->pl.frozen) return;
    if (s->pl.grads_on_host) {
      CHECK_Q(be->stream_wait_event(cs, s->res_free));
      CHECK_Q(be->memset_async(m->grads, 0, zo_model_grads_numel(m) * sizeof(float), cs));
    } else {
      float *target = s->k == 0 ? s->acc : s->micro;
      zo_model_bind_resident_grads(m, target, target + unit_range(s->t, s->U - 1).off);
      CHECK_Q(be->memset_async(target, 0, s->t->numel * sizeof(float), cs));
    }
    return;
  }
  if (l == ZO_MODEL_EMBED) return;
  if (s->n_slots) zo_model_bind_block(m, l, slots_acquire(s, l, ph, cs), NULL);
  if (ck_on_host(s, l)) {
    /* The recompute reads the input first; the next block's input is
     * fetched meanwhile into the other buffer. */
    ck_load(s, m, l);
    CHECK_Q(be->stream_wait_event(cs, s->ck_ready[l % 2]));
    if (l > 0) ck_load(s, m, l - 1);
  }
  if (s->pl.frozen) return;
  if (s->pl.grads_on_host) {
    const int g = l % s->pl.grad_slots;
    CHECK_Q(be->stream_wait_event(cs, s->gslot_free[g]));
    CHECK_Q(be->memset_async(m->grad_slots[g], 0, s->t->layer_numel * sizeof(float), cs));
    zo_model_bind_block(m, l, NULL, m->grad_slots[g]);
  } else {
    float *target = s->k == 0 ? s->acc : s->micro;
    zo_model_bind_block(m, l, NULL, target + s->t->layer_offset[l]);
  }
}

void sched_hook_end(void *ctx, struct zo_model *m, int l, enum zo_model_phase ph, zo_stream_t cs) {
  struct zo_sched *s = ctx;
  zo_backend_t be = s->be;
  const int L = s->L;
  if (l >= 0 && l < L && s->n_slots) CHECK_Q(be->event_record(s->slot_free[l % s->n_slots], cs));
  if (ck_on_host(s, l)) {
    if (ph == ZO_MODEL_FORWARD) ck_save(s, m, l, cs);
    else CHECK_Q(be->event_record(s->ck_free[l % 2], cs));
  }
  if (ph == ZO_MODEL_FORWARD) return;
  const bool last = s->k == s->pl.grad_accum - 1;
  if (l >= 0 && l < L && s->pl.grads_on_host) {
    const int g = l % s->pl.grad_slots;
    CHECK_Q(be->event_record(s->gslot_ready[g], cs));
    CHECK_Q(be->stream_wait_event(s->d2h, s->gslot_ready[g]));
    if (s->k == 0) CHECK_Q(be->stream_wait_event(s->d2h, s->opt_done[1 + l]));
    if (s->pl.grads_nvme) {
      sched_grads_out_nvme(s, l, g);
      return;
    }
    if (s->overlap) {
      sched_grads_out_shard(s, m->grad_slots[g], s->t->layer_numel, s->stage_free[g], l, &s->reduce_tasks[l]);
      CHECK_Q(be->event_record(s->gslot_free[g], s->d2h));
      CHECK_Q(be->event_record(s->stage_free[g], s->reduce));
      return;
    }
    grads_out(s, m->grad_slots[g], s->t->layer_offset[l], s->t->layer_numel, s->h.stage[g],
              &s->acc_tasks[l]);
    CHECK_Q(be->event_record(s->gslot_free[g], s->d2h));
    return;
  }
  if (l != ZO_MODEL_EMBED) return;
  if (s->pl.grads_on_host) {
    const struct range head = unit_range(s->t, 0), tail = unit_range(s->t, s->U - 1);
    CHECK_Q(be->event_record(s->res_ready, cs));
    CHECK_Q(be->stream_wait_event(s->d2h, s->res_ready));
    if (s->k == 0) {
      CHECK_Q(be->stream_wait_event(s->d2h, s->opt_done[0]));
      CHECK_Q(be->stream_wait_event(s->d2h, s->opt_done[s->U - 1]));
    }
    if (s->overlap) {
      ZO_ASSERT(m->res_ghead == head.numel); /* over ranks the embedding's gradient is reduced whole */
      sched_grads_out_shard(s, m->grads, head.numel, s->stage_res_free, L, &s->reduce_tasks[L]);
      sched_grads_out_shard(s, m->grads + head.numel, tail.numel, s->stage_res_free, L, &s->reduce_tasks[L + 1]);
      CHECK_Q(be->event_record(s->res_free, s->d2h));
      CHECK_Q(be->event_record(s->stage_res_free, s->reduce));
      /* The optimizer starts when every range is reduced (sched_queue_optimizer). */
      if (last) CHECK_Q(be->event_record(s->reduce_done, s->reduce));
      if (last) CHECK_Q(be->event_record(s->grads_ready, s->d2h));
      return;
    }
    if (m->res_ghead == 0) emb_grads_out(s, m);
    if (s->pl.grads_nvme && (s->k > 0 || s->sharded)) {
      sched_grads_out_resident_pieces(s);
    } else {
      if (m->res_ghead) grads_out(s, m->grads, head.off, head.numel, s->h.stage_res, &s->acc_tasks[L]);
      grads_out(s, m->grads + m->res_ghead, tail.off, m->res_tail,
                s->h.stage_res ? s->h.stage_res + m->res_ghead : NULL, &s->acc_tasks[L + 1]);
    }
    CHECK_Q(be->event_record(s->res_free, s->d2h));
    if (s->pl.grads_nvme) CHECK_Q(be->launch_host_func(s->d2h, sched_grads_nvme_drain_fn, s));
    if (last && s->pl.grads_nvme) CHECK_Q(be->launch_host_func(s->d2h, sched_norm_res_fn, &s->norm_res_task));
    if (last) CHECK_Q(be->event_record(s->grads_ready, s->d2h));
    return;
  }
  if (s->k > 0 && !s->pl.frozen) be->residual_forward(s->acc, s->acc, s->micro, s->t->numel, ZO_F32, cs);
  if (!last) return;
  if (s->pl.optimizer == ZO_OFFLOAD_NONE) {
    CHECK_Q(be->event_record(s->grads_ready, cs));
    return;
  }
  /* Stage 1: the accumulated gradients leave once, after the last micro-batch. */
  CHECK_Q(be->event_record(s->grads_done, cs));
  CHECK_Q(be->stream_wait_event(s->d2h, s->grads_done));
  CHECK_Q(be->stream_wait_event(s->d2h, s->opt_done[s->U - 1]));
  zo_trace_next("grads out", -1, s->t->numel * sizeof(float), 0);
  CHECK_Q(sched_copy(s, s->h.grads, s->acc, s->t->numel * sizeof(float), ZO_COPY_D2H, s->d2h));
  CHECK_Q(be->event_record(s->grads_ready, s->d2h));
}

/* ---- the LM head streamed in pieces (m->layout.head_stream) --------------- */

/* Piece p's weights in its slot (ring entry L + p); in backward its
 * gradient into a zeroed gradient slot, like a block's. */
void sched_head_hook_begin(void *ctx, struct zo_model *m, int p, enum zo_model_phase ph, zo_stream_t cs) {
  struct zo_sched *s = ctx;
  const int l = s->L + p;
  m->head_w = slots_acquire(s, l, ph, cs);
  if (ph == ZO_MODEL_FORWARD) return;
  const int g = l % s->pl.grad_slots;
  CHECK_Q(s->be->stream_wait_event(cs, s->gslot_free[g]));
  CHECK_Q(s->be->memset_async(m->grad_slots[g], 0, head_piece(s, p).numel * sizeof(float), cs));
  m->head_g = m->grad_slots[g];
}

/* The slot is free; in backward the piece's gradient leaves for the host
 * (into the accumulator, staged and added after the first micro-batch). */
void sched_head_hook_end(void *ctx, struct zo_model *m, int p, enum zo_model_phase ph, zo_stream_t cs) {
  struct zo_sched *s = ctx;
  zo_backend_t be = s->be;
  const int l = s->L + p;
  CHECK_Q(be->event_record(s->slot_free[l % s->n_slots], cs));
  if (ph == ZO_MODEL_FORWARD) return;
  const int g = l % s->pl.grad_slots;
  const struct range r = head_piece(s, p);
  CHECK_Q(be->event_record(s->gslot_ready[g], cs));
  CHECK_Q(be->stream_wait_event(s->d2h, s->gslot_ready[g]));
  if (s->k == 0) CHECK_Q(be->stream_wait_event(s->d2h, s->opt_done[s->U - 1]));
  struct acc_task *task = &s->acc_tasks[s->L + 2 + p];
  grads_out(s, m->grad_slots[g], r.off, r.numel, s->h.stage[s->pl.grads_nvme ? 0 : g], task);
  CHECK_Q(be->event_record(s->gslot_free[g], s->d2h));
}
