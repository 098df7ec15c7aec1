/* Layouts and plans: the units the scheduler moves, the NVMe chunk plan
 * (chunks of at most one block's elements, laid out at aio.block_size
 * multiples) and the host pool's layout, counted for the planner or carved
 * for a run by the same function, so the plan is what the run allocates. */
#include "internal.h"

#include "zo/state.h"

/* Chunks of at most one block's elements (at least one quantization block),
 * unit by unit in forward order, each a run of tensor pieces; chunks and
 * pieces may be NULL to count. File offsets are left 0. */
/* Appends chunk cur: its regions of the files follow the previous chunk's,
 * each rounded up to aio.block_size. */
static void close_chunk(struct chunk_plan *cp, struct chunk *cur, size_t blk, size_t e, int L, int n_cpu,
                        struct chunk *chunks) {
  if (cp->max_numel < cur->numel) cp->max_numel = cur->numel;
  if (cp->max_sbytes < cur->sbytes) cp->max_sbytes = cur->sbytes;
  cur->mfile_off = cp->mfile;
  cur->sfile_off = cp->sfile;
  cp->mfile += round_up(cur->numel * sizeof(float), blk);
  cp->sfile += round_up(cur->sbytes, blk);
  if (cur->unit >= 1 && cur->unit <= L) { /* blocks: the parameter and gradient files */
    cur->pfile_off = cp->pfile;
    cur->gfile_off = cp->gfile;
    if (cur->unit > n_cpu) cp->pfile += round_up(cur->numel * e, blk); /* not kept in host memory */
    cp->gfile += round_up(cur->numel * sizeof(float), blk);
    if (cur->unit != cp->run_unit) {
      cp->run_unit = cur->unit;
      cp->run_pbytes = cp->run_gbytes = 0;
    }
    cp->run_pbytes += round_up(cur->numel * e, blk);
    cp->run_gbytes += round_up(cur->numel * sizeof(float), blk);
    if (cp->block_pbytes < cp->run_pbytes) cp->block_pbytes = cp->run_pbytes;
    if (cp->block_gbytes < cp->run_gbytes) cp->block_gbytes = cp->run_gbytes;
  }
  if (chunks) chunks[cp->n_chunks] = *cur;
  cp->n_chunks++;
}

struct chunk_plan sched_make_chunks(const struct zo_tensor_table *t, const struct zo_placement *pl,
                                     struct chunk *chunks, struct piece *pieces) {
  const struct zo_optim_format *f = &pl->opt;
  const size_t blk = pl->nvme_block ? pl->nvme_block : 4096, e = zo_dtype_size(pl->dtype);
  size_t cap = pl->nvme_chunk && pl->nvme_chunk < t->layer_numel ? pl->nvme_chunk : t->layer_numel;
  if (f->eightbit && cap < f->block) cap = f->block;
  struct chunk_plan cp = {0};
  struct chunk cur = {0};
  bool open = false, full = false;
  const struct zo_shard sh = zo_placement_shard(pl, t); /* a sharded optimizer: this rank's tensors */
  for (int i = sh.t_lo; i < sh.t_hi; i++) {
    const struct zo_tensor_info *ti = &t->tensors[i];
    const int unit = ti->layer >= 0 ? 1 + ti->layer : ti->offset < t->layer_offset[0] ? 0 : t->n_layer + 1;
    const bool q = zo_optim_is_8bit(f, ti->numel);
    for (size_t a = 0; a < ti->numel;) {
      if (open && (cur.unit != unit || cur.numel == cap || full)) {
        close_chunk(&cp, &cur, blk, e, t->n_layer, cpu_blocks(pl, t), chunks);
        open = false;
      }
      if (!open) {
        cur = (struct chunk){.unit = unit, .off = ti->offset + a, .first = cp.n_pieces};
        open = true;
        full = false;
      }
      size_t take = ti->numel - a < cap - cur.numel ? ti->numel - a : cap - cur.numel;
      if (q && take < ti->numel - a) take = take / f->block * f->block;
      if (take == 0) { /* no whole block fits: the next chunk takes it */
        full = true;
        continue;
      }
      if (pieces) pieces[cp.n_pieces] = (struct piece){i, q, ti->offset + a, take, cur.sbytes};
      cp.n_pieces++;
      cur.n_pieces++;
      cur.numel += take;
      cur.sbytes += zo_optim_piece_nbytes(f, q, take);
      a += take;
    }
  }
  if (open) close_chunk(&cp, &cur, blk, e, t->n_layer, cpu_blocks(pl, t), chunks);
  return cp;
}

const char *zo_sched_mem_category_name(int category) {
  if (category == ZO_SCHED_MEM_STAGE) return "state staging";
  return zo_mem_category_name((enum zo_mem_category)category);
}

size_t zo_sched_nvme_plan(const struct zo_placement *pl, const struct zo_tensor_table *t,
                          size_t by_category[ZO_SCHED_MEM_N_CATEGORIES]) {
  size_t master = 0, state = 0, params = 0, grads = 0;
  if (pl->optimizer == ZO_OFFLOAD_NVME) {
    const struct chunk_plan cp = sched_make_chunks(t, pl, NULL, NULL);
    master = cp.mfile;
    state = cp.sfile;
    if (pl->param_nvme) params = cp.pfile;
    if (pl->grads_nvme) grads = cp.gfile;
  } else if (pl->param_nvme) { /* a frozen base (LoRA): its parameter file alone */
    params = sched_make_chunks(t, pl, NULL, NULL).pfile;
  }
  if (by_category) {
    memset(by_category, 0, ZO_SCHED_MEM_N_CATEGORIES * sizeof *by_category);
    by_category[ZO_MEM_MASTER] = master;
    by_category[ZO_MEM_ADAM_M] = by_category[ZO_MEM_ADAM_V] = state;
    by_category[ZO_MEM_PARAMS] = params;
    by_category[ZO_MEM_GRADS] = grads;
  }
  return master + 2 * state + params + grads;
}

size_t zo_sched_device_plan(const struct zo_placement *pl, const struct zo_model_config *mc, int B, int T,
                            size_t by_category[ZO_MEM_N_CATEGORIES]) {
  const struct zo_model_layout lo = zo_placement_layout(pl);
  size_t total = zo_model_device_plan(mc, B, T, &lo, by_category);
  if (total == 0 || pl->optimizer != ZO_OFFLOAD_NONE || pl->frozen) return total; /* frozen: no base optimizer */
  struct zo_model_config c = *mc;
  struct zo_tensor_table t;
  if (zo_model_config_check(&c) || zo_model_build_table(&c, &t)) return 0;
  const size_t nb = pl->opt.eightbit ? zo_arena_round(zo_optim_state_nbytes(&pl->opt, &t)) : 0;
  const size_t norm = zo_arena_round((size_t)t.n_tensors * sizeof(double));
  zo_tensor_table_free(&t);
  if (by_category) {
    by_category[ZO_MEM_ADAM_M] += nb;
    by_category[ZO_MEM_ADAM_V] += nb;
    by_category[ZO_MEM_GRADS] += norm;
  }
  return total + 2 * nb + norm;
}

/* Bytes of one NVMe staging set: master (and, grads_nvme, gradients) of
 * mper, m and v of sper, the rounded working parameters (param_nvme, mixed
 * precision) of wper. */
size_t sched_nv_set_bytes(const struct zo_placement *pl, const struct chunk_plan *cp, size_t *mper, size_t *sper,
                          size_t *wper) {
  *mper = round_up(cp->max_numel * sizeof(float), 4096);
  *sper = round_up(cp->max_sbytes, 4096);
  *wper = pl->param_nvme && pl->dtype != ZO_F32 ? round_up(cp->max_numel * zo_dtype_size(pl->dtype), 4096) : 0;
  return *mper * (pl->grads_nvme ? 2 : 1) + 2 * *sper + *wper;
}

static void *hcarve(struct host_carver *c, size_t nbytes, const char *what, int cat) {
  if (c->err || nbytes == 0) return NULL;
  c->total += zo_host_round(nbytes);
  c->by_category[cat] += zo_host_round(nbytes);
  if (!c->pool) return NULL;
  void *p = NULL;
  const size_t before = c->pool->used;
  const int n_before = c->pool->n_carves;
  c->err = zo_host_pool_alloc(c->pool, nbytes, what, &p);
  if (c->err || !c->tags) return p;
  struct host_tags *t = c->tags;
  /* A full carve table merges later carves into "(other)": no category. */
  if (c->pool->n_carves > n_before) t->cat[c->pool->n_carves - 1] = (int8_t)cat;
  else if (c->pool->n_carves > 0) t->cat[c->pool->n_carves - 1] = -1;
  t->live[cat] += c->pool->used - before;
  if (t->live[cat] > t->peak[cat]) t->peak[cat] = t->live[cat];
  return p;
}

void sched_host_layout(const struct zo_placement *pl, const struct zo_tensor_table *t, int B,
                        int T, struct host_carver *c, struct host_bufs *h) {
  const size_t f = sizeof(float), e = zo_dtype_size(pl->dtype), n = t->numel, BT = (size_t)B * (size_t)T;
  const size_t Vp = (size_t)t->tensors[0].shape[0], C = (size_t)t->tensors[0].shape[1]; /* the embedding (Vp, C) */
  const size_t resident = n - (size_t)t->n_layer * t->layer_numel;
  const bool offloaded = pl->optimizer != ZO_OFFLOAD_NONE, mixed = pl->dtype != ZO_F32;
  /* A sharded optimizer keeps this rank's shard of master, m and v. */
  const struct zo_shard sh = zo_placement_shard(pl, t);
  const bool sharded = zo_placement_sharded(pl);
  memset(h, 0, sizeof *h);
  if (pl->optimizer == ZO_OFFLOAD_CPU) {
    h->master = hcarve(c, (sh.hi - sh.lo) * f, "master weights", ZO_MEM_MASTER);
    h->adam_m = hcarve(c, sh.shi - sh.slo, "AdamW m", ZO_MEM_ADAM_M);
    h->adam_v = hcarve(c, sh.shi - sh.slo, "AdamW v", ZO_MEM_ADAM_V);
    /* fp32: the master copy is the working copy (sharded with slots: both
     * hold the shard) */
    if (pl->param_slots && !mixed) h->params = h->master;
  }
  /* A separate working copy: the rounded one in mixed precision, or the
   * slots' source next to NVMe-resident master weights. Sharded with slots
   * (ZeRO-3 over ranks) it holds the shard, and each block is gathered from
   * its owners into a slot's gather buffer before it goes to the device. */
  const bool pshard = sharded && pl->param_slots;
  const struct chunk_plan cp = pl->optimizer == ZO_OFFLOAD_NVME || pl->param_nvme ? sched_make_chunks(t, pl, NULL, NULL)
                                                                                  : (struct chunk_plan){0};
  if (pl->param_nvme) { /* the blocks stream from NVMe through a ring, one buffer per slot */
    const int n_cpu = cpu_blocks(pl, t);
    if (n_cpu < t->n_layer)
      h->pring = hcarve(c, (size_t)pl->param_slots * cp.block_pbytes, "parameter ring", ZO_MEM_PARAMS);
    h->pcpu = hcarve(c, (size_t)n_cpu * t->layer_numel * e, "parameters (max_in_cpu)", ZO_MEM_PARAMS);
  }
  else if ((offloaded && (mixed || (pl->param_slots && pl->optimizer == ZO_OFFLOAD_NVME))) ||
           (pl->frozen && pl->param_slots)) /* a frozen base's one copy: the slots' source */
    h->params = hcarve(c, (pshard ? sh.hi - sh.lo : n) * e, "parameters", ZO_MEM_PARAMS);
  if (pshard)
    h->block_gather = hcarve(c, (size_t)pl->param_slots * t->layer_numel * e, "parameter gather", ZO_MEM_BUFFERS);
  /* ZeRO-2/3 over ranks with overlap_comm: each block's gradients are
   * summed onto their owners every micro-batch, each rank accumulating its
   * shard only, through the staging buffers. */
  const bool gshard = sharded && pl->grads_on_host && pl->overlap_comm;
  /* grads_nvme: the host keeps the resident ranges' gradients; the blocks'
   * pass through the staging and one block of file I/O buffer. */
  if (offloaded)
    h->grads = hcarve(c, (pl->grads_nvme ? resident : gshard ? sh.hi - sh.lo : n) * f, "gradients", ZO_MEM_GRADS);
  /* grads_nvme: one buffer, each block's file I/O runs before the next copy
   * on the same stream. */
  if (pl->grads_on_host && (pl->grad_accum > 1 || gshard || pl->grads_nvme))
    for (int g = 0; g < (pl->grads_nvme ? 1 : pl->grad_slots); g++)
      h->stage[g] = hcarve(c, t->layer_numel * f, "gradient staging", ZO_MEM_BUFFERS);
  const struct zo_model_layout lo = zo_placement_layout(pl);
  if (pl->grads_on_host && (pl->grad_accum > 1 || gshard) && !pl->grads_nvme) {
    /* without the embedding when its gradient is summed on the host, without a
     * streamed LM head (its pieces pass through the blocks' staging) */
    const size_t res_g = resident - (zo_model_embed_grads_host(t, &lo) ? t->layer_offset[0] : 0) -
                         zo_model_streamed_head_numel(t, &lo);
    h->stage_res = hcarve(c, res_g * f, "gradient staging (resident)", ZO_MEM_BUFFERS);
  }
  if (pl->grads_nvme) h->gio = hcarve(c, cp.block_gbytes, "gradient I/O", ZO_MEM_BUFFERS);
  if (pl->optimizer == ZO_OFFLOAD_NVME) {
    size_t mper, sper, wper;
    const size_t set = sched_nv_set_bytes(pl, &cp, &mper, &sper, &wper);
    h->nv_buf = hcarve(c, (size_t)pl->nvme_buffers * set, "NVMe staging", ZO_MEM_BUFFERS);
  }
  for (int b = 0; b < 2; b++) {
    h->in[b] = hcarve(c, BT * sizeof(int32_t), "input tokens", ZO_MEM_ACTIVATIONS);
    h->tg[b] = hcarve(c, BT * sizeof(int32_t), "target tokens", ZO_MEM_ACTIVATIONS);
  }
  h->losses = hcarve(c, (size_t)pl->grad_accum * BT * f, "losses", ZO_MEM_ACTIVATIONS);
  if (zo_model_embed_params_host(t, &lo)) { /* the embedding's rows gathered here */
    h->emb_in = hcarve(c, BT * C * e, "embedding rows", ZO_MEM_BUFFERS);
    if (pl->param_nvme) h->emb_params = hcarve(c, Vp * C * e, "parameters (embedding)", ZO_MEM_PARAMS);
  }
  if (pl->param_nvme && zo_model_head_streamed(t, &lo)) /* the LM head's pieces load from here */
    h->head_params = hcarve(c, zo_model_streamed_head_numel(t, &lo) * e, "parameters (LM head)", ZO_MEM_PARAMS);
  if (zo_model_embed_grads_host(t, &lo)) { /* the embedding's gradient summed here */
    h->emb_dout = hcarve(c, BT * C * e, "embedding gradient (d output)", ZO_MEM_BUFFERS);
    h->emb_stage = hcarve(c, BT * C * f, "embedding gradient (rows)", ZO_MEM_BUFFERS);
    h->emb_map = hcarve(c, BT * sizeof(int32_t), "embedding gradient (map)", ZO_MEM_BUFFERS);
    h->emb_uniq = hcarve(c, BT * sizeof(int32_t), "embedding gradient (tokens)", ZO_MEM_BUFFERS);
    h->emb_row = hcarve(c, Vp * sizeof(int32_t), "embedding gradient (rows of tokens)", ZO_MEM_BUFFERS);
  }
  if (pl->ckpt_blocks && pl->ckpt_cpu) {
    h->act_ckpt = hcarve(c, (size_t)pl->ckpt_blocks * BT * C * e, "activation checkpoints",
                         ZO_MEM_ACTIVATIONS);
  }
  /* Checkpoints, imports and initialisation stream through the state I/O
   * (zo_sched_state_read / _write), never through a full host copy. */
  h->st_bytes = zo_state_stage_bytes(t);
  h->st_stage = hcarve(c, h->st_bytes, "state staging", ZO_SCHED_MEM_STAGE);
}

size_t zo_sched_host_plan(const struct zo_placement *pl, const struct zo_tensor_table *t, int B,
                          int T, size_t by_category[ZO_SCHED_MEM_N_CATEGORIES]) {
  struct host_carver c = {0};
  struct host_bufs h;
  sched_host_layout(pl, t, B, T, &c, &h);
  if (by_category) memcpy(by_category, c.by_category, sizeof c.by_category);
  return c.total;
}
