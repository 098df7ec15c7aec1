/* The offload scheduler (see zo/sched.h): placement, host and NVMe layouts,
 * and one training step ordered over four streams (five with NVMe) with
 * events only. Units are the ranges the scheduler moves: unit 0 =
 * embeddings (wte, wpe), units 1..L = blocks, unit L+1 = ln_f; the NVMe tier
 * moves chunks of at most one block's elements (8-bit tensors split only at
 * quantization block multiples), laid out at aligned aio.block_size
 * multiples. m and v move as their bytes: fp32 or 8-bit codes + absmax, in
 * the canonical layout (zo/sched.h) on the device and cpu tiers, in pieces
 * packed per chunk on the NVMe tier.
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
 * It does not checkpoint, load data or log: engine/train.c does. */
#include "zo/sched.h"
#include "zo/state.h"
#include "zo/topology.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "zo/adamw8bit.h"
#include "zo/host.h"
#include "zo/nvme.h"

enum { NV_MASTER, NV_M, NV_V, NV_FILES };
static const char *const nv_class[NV_FILES] = {"master", "exp_avg", "exp_avg_sq"};

/* ---- optimizer state format --------------------------------------------- */

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

struct zo_optim_format zo_optim_format_from_config(const struct zo_config *cfg) {
  return (struct zo_optim_format){.eightbit = cfg->optimizer.type == ZO_OPTIMIZER_ADAMW8BIT,
                                  .block = (size_t)cfg->optimizer.block_size,
                                  .min_numel = (size_t)cfg->optimizer.min_8bit_size};
}

bool zo_optim_is_8bit(const struct zo_optim_format *f, size_t numel) {
  return f->eightbit && numel >= f->min_numel && numel > 0;
}

size_t zo_optim_piece_nbytes(const struct zo_optim_format *f, bool q, size_t n) {
  if (!q) return n * sizeof(float);
  return round_up(n, 4) + sizeof(float) * zo_adamw8bit_n_blocks(n, f->block);
}

size_t zo_optim_tensor_offset(const struct zo_optim_format *f, const struct zo_tensor_table *t, int i) {
  size_t off = 0;
  for (int k = 0; k < i; k++)
    off += zo_optim_piece_nbytes(f, zo_optim_is_8bit(f, t->tensors[k].numel), t->tensors[k].numel);
  return off;
}

size_t zo_optim_state_nbytes(const struct zo_optim_format *f, const struct zo_tensor_table *t) {
  return zo_optim_tensor_offset(f, t, t->n_tensors);
}

size_t zo_optim_numel_8bit(const struct zo_optim_format *f, const struct zo_tensor_table *t) {
  size_t n = 0;
  for (int i = 0; i < t->n_tensors; i++)
    if (zo_optim_is_8bit(f, t->tensors[i].numel)) n += t->tensors[i].numel;
  return n;
}

void zo_optim_state_fresh(const struct zo_optim_format *f, const struct zo_tensor_table *t, void *adam_m,
                          void *adam_v) {
  const size_t nb = zo_optim_state_nbytes(f, t);
  if (adam_m) memset(adam_m, 0, nb);
  if (adam_v) memset(adam_v, 0, nb); /* v's code of 0.0 is 0 */
  if (!adam_m || !f->eightbit) return;
  size_t off = 0;
  for (int i = 0; i < t->n_tensors; i++) {
    const size_t n = t->tensors[i].numel;
    const bool q = zo_optim_is_8bit(f, n);
    if (q) memset((uint8_t *)adam_m + off, ZO_ADAMW8BIT_M_ZERO_CODE, n);
    off += zo_optim_piece_nbytes(f, q, n);
  }
}

/* ---- placement ----------------------------------------------------------- */

void zo_placement_set_ranks(struct zo_placement *pl, int rank, int n_ranks) {
  ZO_ASSERT(n_ranks >= 1 && rank >= 0 && rank < n_ranks);
  pl->dp_rank = rank;
  pl->dp_ranks = n_ranks;
}

bool zo_placement_sharded(const struct zo_placement *pl) { return pl->dp_ranks > 1 && pl->zero_stage >= 1; }

/* First tensor of rank r's shard: the first whose middle lies at or beyond
 * r's even share of the elements. */
static int shard_first_tensor(const struct zo_tensor_table *t, int r, int n_ranks) {
  if (r <= 0) return 0;
  if (r >= n_ranks) return t->n_tensors;
  const double cut = (double)t->numel * r / n_ranks;
  int i = 0;
  while (i < t->n_tensors && (double)t->tensors[i].offset + 0.5 * (double)t->tensors[i].numel < cut) i++;
  return i;
}

struct zo_shard zo_shard_of(const struct zo_optim_format *f, const struct zo_tensor_table *t, int rank,
                            int n_ranks) {
  struct zo_shard sh = {.t_lo = shard_first_tensor(t, rank, n_ranks),
                        .t_hi = shard_first_tensor(t, rank + 1, n_ranks)};
  /* Element ranges cover the table: gaps between tensors go with the tensor
   * after them, the tail with the last rank. */
  sh.lo = rank == 0 ? 0 : sh.t_lo < t->n_tensors ? t->tensors[sh.t_lo].offset : t->numel;
  sh.hi = rank == n_ranks - 1 ? t->numel : sh.t_hi < t->n_tensors ? t->tensors[sh.t_hi].offset : t->numel;
  sh.slo = zo_optim_tensor_offset(f, t, sh.t_lo);
  sh.shi = sh.slo;
  for (int i = sh.t_lo; i < sh.t_hi; i++)
    sh.shi += zo_optim_piece_nbytes(f, zo_optim_is_8bit(f, t->tensors[i].numel), t->tensors[i].numel);
  return sh;
}

struct zo_shard zo_placement_shard(const struct zo_placement *pl, const struct zo_tensor_table *t) {
  return zo_placement_sharded(pl) ? zo_shard_of(&pl->opt, t, pl->dp_rank, pl->dp_ranks)
                                  : zo_shard_of(&pl->opt, t, 0, 1);
}

int zo_placement_from_config(const struct zo_config *cfg, int n_layer, struct zo_placement *pl) {
  const struct zo_config_zero *z = &cfg->zero;
  memset(pl, 0, sizeof *pl);
  pl->optimizer = z->offload_optimizer.device;
  pl->grad_accum = cfg->grad_accum;
  pl->nvme_buffers = z->offload_optimizer.buffer_count;
  pl->nvme_chunk = (size_t)z->sub_group_size;
  pl->nvme_block = cfg->aio.block_size;
  pl->nvme_queue_depth = cfg->aio.queue_depth;
  pl->nvme_path = z->offload_optimizer.nvme_path;
  pl->pin = z->offload_optimizer.pin_memory;
  pl->opt = zo_optim_format_from_config(cfg);
  pl->dtype = cfg->bf16 ? ZO_BF16 : cfg->fp16.enabled ? ZO_F16 : ZO_F32;
  if (pl->opt.eightbit && (pl->opt.block < 1 || pl->opt.block > ZO_ADAMW8BIT_BLOCK_MAX))
    return zo_error(-EINVAL, "optimizer.params.block_size = %zu: need 1..%d", pl->opt.block,
                    ZO_ADAMW8BIT_BLOCK_MAX);
  if (z->offload_param.device == ZO_OFFLOAD_NVME)
    return zo_error(-ENOTSUP, "zero_optimization.offload_param.device = \"nvme\" is not "
                              "implemented; use \"cpu\" (parameters in host memory)");
  if (z->offload_param.device == ZO_OFFLOAD_CPU) {
    if (pl->optimizer == ZO_OFFLOAD_NONE)
      return zo_error(-ENOTSUP, "zero_optimization.offload_param.device = \"cpu\" needs the "
                                "optimizer offloaded too: set zero_optimization.offload_optimizer."
                                "device to \"cpu\" or \"nvme\"");
    if (z->offload_param.buffer_count < 1)
      return zo_error(-EINVAL, "zero_optimization.offload_param.buffer_count = %d: need >= 1",
                      z->offload_param.buffer_count);
    pl->param_slots = z->offload_param.buffer_count < n_layer ? z->offload_param.buffer_count
                                                              : n_layer;
    pl->pin = pl->pin || z->offload_param.pin_memory;
  }
  const struct zo_config_checkpointing *ac = &cfg->activation_checkpointing;
  if (ac->enabled) {
    if (ac->number_checkpoints < 0 || ac->number_checkpoints > n_layer)
      return zo_error(-EINVAL, "activation_checkpointing.number_checkpoints = %d: need 0 (every "
                               "block) .. model.n_layer = %d", ac->number_checkpoints, n_layer);
    pl->ckpt_blocks = ac->number_checkpoints ? ac->number_checkpoints : n_layer;
    pl->ckpt_cpu = ac->cpu_checkpointing;
  }
  pl->grads_on_host = pl->optimizer != ZO_OFFLOAD_NONE && z->stage >= 2;
  pl->zero_stage = z->stage;
  pl->overlap_comm = z->overlap_comm;
  pl->dp_ranks = 1;
  if (pl->optimizer == ZO_OFFLOAD_NVME) {
    if (pl->nvme_buffers < 2)
      return zo_error(-EINVAL, "zero_optimization.offload_optimizer.buffer_count = %d: the NVMe "
                               "tier needs >= 2 (one updating while the next is read)",
                      pl->nvme_buffers);
    if (!pl->nvme_path || !pl->nvme_path[0])
      return zo_error(-EINVAL, "zero_optimization.offload_optimizer.nvme_path: needed for "
                               "device \"nvme\"");
  }
  return 0;
}

const char *zo_placement_describe(const struct zo_placement *pl, char *buf, size_t size) {
  static const char *const dev[] = {"device", "cpu", "nvme"};
  char slots[64] = "device";
  if (pl->param_slots) snprintf(slots, sizeof slots, "host (%d device slots)", pl->param_slots);
  char fmt[96] = "";
  if (pl->opt.eightbit)
    snprintf(fmt, sizeof fmt, " (AdamW8bit: block %zu, tensors >= %zu elements)", pl->opt.block,
             pl->opt.min_numel);
  char ck[96] = "";
  if (pl->ckpt_blocks)
    snprintf(ck, sizeof ck, ", activation checkpointing of %d blocks (inputs on %s)", pl->ckpt_blocks,
             pl->ckpt_cpu ? "host" : "device");
  const char *prec = pl->dtype == ZO_BF16 ? ", bf16 mixed precision"
                     : pl->dtype == ZO_F16  ? ", fp16 mixed precision (dynamic loss scaling)"
                                            : "";
  char dp[160] = "";
  if (zo_placement_sharded(pl)) {
    const bool p3 = pl->param_slots > 0; /* the working parameters sharded too */
    const int z = p3 ? 3 : pl->zero_stage < 2 ? 1 : 2;
    snprintf(dp, sizeof dp, ", ZeRO-%d: optimizer%s sharded over %d ranks%s", z, p3 ? " and parameters" : "",
             pl->dp_ranks,
             z < 2                                   ? ""
             : pl->grads_on_host && pl->overlap_comm ? " (gradients reduce-scattered block by block during the backward)"
                                                     : " (gradients reduce-scattered)");
  }
  snprintf(buf, size, "optimizer states on %s, gradients on %s, parameters on %s%s%s%s%s",
           dev[pl->optimizer], pl->grads_on_host ? "host" : "device", slots, fmt, ck, prec, dp);
  return buf;
}

struct zo_model_layout zo_placement_layout(const struct zo_placement *pl) {
  return (struct zo_model_layout){
      .dtype = pl->dtype,
      .master = pl->dtype != ZO_F32 && pl->optimizer == ZO_OFFLOAD_NONE,
      .training = true,
      .param_slots = pl->param_slots,
      .grad_slots = pl->grads_on_host ? ZO_SCHED_GRAD_SLOTS : 0,
      .grad_accum = !pl->grads_on_host && pl->grad_accum > 1,
      .optimizer = pl->optimizer == ZO_OFFLOAD_NONE && !pl->opt.eightbit,
      .ckpt_blocks = pl->ckpt_blocks,
      .ckpt_on_host = pl->ckpt_cpu,
  };
}

/* ---- units and chunks ---------------------------------------------------- */

struct range {
  size_t off, numel; /* elements of the table */
};

static struct range unit_range(const struct zo_tensor_table *t, int u) {
  const int L = t->n_layer;
  if (u == 0) return (struct range){0, t->layer_offset[0]};
  if (u <= L) return (struct range){t->layer_offset[u - 1], t->layer_numel};
  size_t end = t->layer_offset[L - 1] + t->layer_numel;
  return (struct range){end, t->numel - end};
}

/* One piece of a tensor inside an NVMe chunk: table elements [off, off +
 * numel) of tensor `tensor`, whose m (v) state lies at byte sbyte of the
 * chunk's state region. An 8-bit tensor is cut only at block multiples from
 * its first element. */
struct piece {
  int tensor;
  bool q;        /* 8-bit states */
  size_t off, numel;
  size_t sbyte;
};

struct chunk {
  int unit;
  size_t off, numel;  /* elements of the table */
  int first, n_pieces; /* into the piece table */
  size_t sbytes;      /* bytes of m (v alike) */
  uint64_t mfile_off; /* bytes into the master file */
  uint64_t sfile_off; /* bytes into each state file */
};

struct chunk_plan {
  int n_chunks, n_pieces;
  size_t max_numel;  /* elements of the largest chunk */
  size_t max_sbytes; /* state bytes of m of the largest chunk */
  size_t mfile, sfile; /* bytes of the master file and of each state file */
};

/* Chunks of at most one block's elements (at least one quantization block),
 * unit by unit in forward order, each a run of tensor pieces; chunks and
 * pieces may be NULL to count. File offsets are left 0. */
/* Appends chunk cur: its regions of the files follow the previous chunk's,
 * each rounded up to aio.block_size. */
static void close_chunk(struct chunk_plan *cp, struct chunk *cur, size_t blk, struct chunk *chunks) {
  if (cp->max_numel < cur->numel) cp->max_numel = cur->numel;
  if (cp->max_sbytes < cur->sbytes) cp->max_sbytes = cur->sbytes;
  cur->mfile_off = cp->mfile;
  cur->sfile_off = cp->sfile;
  cp->mfile += round_up(cur->numel * sizeof(float), blk);
  cp->sfile += round_up(cur->sbytes, blk);
  if (chunks) chunks[cp->n_chunks] = *cur;
  cp->n_chunks++;
}

static struct chunk_plan make_chunks(const struct zo_tensor_table *t, const struct zo_placement *pl,
                                     struct chunk *chunks, struct piece *pieces) {
  const struct zo_optim_format *f = &pl->opt;
  const size_t blk = pl->nvme_block ? pl->nvme_block : 4096;
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
        close_chunk(&cp, &cur, blk, chunks);
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
  if (open) close_chunk(&cp, &cur, blk, chunks);
  return cp;
}

const char *zo_sched_mem_category_name(int category) {
  if (category == ZO_SCHED_MEM_STAGE) return "state staging";
  return zo_mem_category_name((enum zo_mem_category)category);
}

size_t zo_sched_nvme_plan(const struct zo_placement *pl, const struct zo_tensor_table *t,
                          size_t by_category[ZO_SCHED_MEM_N_CATEGORIES]) {
  size_t master = 0, state = 0;
  if (pl->optimizer == ZO_OFFLOAD_NVME) {
    const struct chunk_plan cp = make_chunks(t, pl, NULL, NULL);
    master = cp.mfile;
    state = cp.sfile;
  }
  if (by_category) {
    memset(by_category, 0, ZO_SCHED_MEM_N_CATEGORIES * sizeof *by_category);
    by_category[ZO_MEM_MASTER] = master;
    by_category[ZO_MEM_ADAM_M] = by_category[ZO_MEM_ADAM_V] = state;
  }
  return master + 2 * state;
}

size_t zo_sched_device_plan(const struct zo_placement *pl, const struct zo_model_config *mc, int B, int T,
                            size_t by_category[ZO_MEM_N_CATEGORIES]) {
  const struct zo_model_layout lo = zo_placement_layout(pl);
  size_t total = zo_model_device_plan(mc, B, T, &lo, by_category);
  if (total == 0 || pl->optimizer != ZO_OFFLOAD_NONE) return total;
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

/* ---- host layout (counted or carved, like the device arena) -------------- */

/* The pool's carves by category, as carved (for zo_sched_memory). */
struct host_tags {
  int8_t cat[ZO_HOST_MAX_CARVES];            /* category of pool->carves[i]; -1 none */
  size_t live[ZO_SCHED_MEM_N_CATEGORIES];    /* bytes the pool handed out */
  size_t peak[ZO_SCHED_MEM_N_CATEGORIES];    /* high-water mark of live */
};

struct host_carver {
  struct zo_host_pool *pool; /* NULL: count only */
  struct host_tags *tags;    /* NULL: not recorded */
  size_t total;
  size_t by_category[ZO_SCHED_MEM_N_CATEGORIES];
  int err;
};

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

struct host_bufs {
  void *params;      /* (numel) working parameters (working dtype): with param slots
                      * (== master for fp32 on cpu), and the rounded copy the
                      * device loads in mixed precision with the optimizer offloaded */
  float *master;     /* (numel) fp32 master weights, optimizer on cpu */
  uint8_t *adam_m, *adam_v; /* (zo_optim_state_nbytes) canonical layout, optimizer on cpu */
  float *grads;      /* (numel) accumulated gradients, optimizer offloaded */
  float *stage[ZO_SCHED_GRAD_SLOTS]; /* (layer_numel) micro-batch gradients, grads on host, K > 1 */
  float *stage_res;  /* (head + tail) micro-batch gradients of the resident ranges */
  uint8_t *nv_buf;   /* (nvme_buffers) sets of NVMe staging: master, m, v of one chunk,
                      * each rounded up to 4096 bytes */
  int32_t *in[2], *tg[2]; /* (B*T) double-buffered tokens */
  float *losses;     /* (grad_accum, B*T) */
  uint8_t *act_ckpt; /* (ckpt_blocks, B*T, C) working dtype: inputs of checkpointed blocks,
                      * cpu_checkpointing */
  uint8_t *pgather;  /* (param_slots, layer_numel) working dtype: blocks gathered from their
                      * owners, ZeRO-3 over ranks */
  uint8_t *st_stage; /* (st_bytes) state I/O staging: init, resume, saves,
                      * fresh states */
  size_t st_bytes;   /* zo_state_stage_bytes */
};

static void host_layout(const struct zo_placement *pl, const struct zo_tensor_table *t, int B,
                        int T, struct host_carver *c, struct host_bufs *h) {
  const size_t f = sizeof(float), e = zo_dtype_size(pl->dtype), n = t->numel, BT = (size_t)B * (size_t)T;
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
  if (offloaded && (mixed || (pl->param_slots && pl->optimizer == ZO_OFFLOAD_NVME)))
    h->params = hcarve(c, (pshard ? sh.hi - sh.lo : n) * e, "parameters", ZO_MEM_PARAMS);
  if (pshard)
    h->pgather = hcarve(c, (size_t)pl->param_slots * t->layer_numel * e, "parameter gather", ZO_MEM_BUFFERS);
  /* ZeRO-2/3 over ranks with overlap_comm: each block's gradients are
   * summed onto their owners every micro-batch, each rank accumulating its
   * shard only, through the staging buffers. */
  const bool gshard = sharded && pl->grads_on_host && pl->overlap_comm;
  if (offloaded) h->grads = hcarve(c, (gshard ? sh.hi - sh.lo : n) * f, "gradients", ZO_MEM_GRADS);
  if (pl->grads_on_host && (pl->grad_accum > 1 || gshard)) {
    for (int g = 0; g < ZO_SCHED_GRAD_SLOTS; g++)
      h->stage[g] = hcarve(c, t->layer_numel * f, "gradient staging", ZO_MEM_BUFFERS);
    h->stage_res = hcarve(c, resident * f, "gradient staging (resident)", ZO_MEM_BUFFERS);
  }
  if (pl->optimizer == ZO_OFFLOAD_NVME) {
    const struct chunk_plan cp = make_chunks(t, pl, NULL, NULL);
    const size_t set = round_up(cp.max_numel * f, 4096) + 2 * round_up(cp.max_sbytes, 4096);
    h->nv_buf = hcarve(c, (size_t)pl->nvme_buffers * set, "NVMe staging", ZO_MEM_BUFFERS);
  }
  for (int b = 0; b < 2; b++) {
    h->in[b] = hcarve(c, BT * sizeof(int32_t), "input tokens", ZO_MEM_ACTIVATIONS);
    h->tg[b] = hcarve(c, BT * sizeof(int32_t), "target tokens", ZO_MEM_ACTIVATIONS);
  }
  h->losses = hcarve(c, (size_t)pl->grad_accum * BT * f, "losses", ZO_MEM_ACTIVATIONS);
  if (pl->ckpt_blocks && pl->ckpt_cpu) {
    const size_t C = (size_t)t->tensors[0].shape[1]; /* wte (Vp, C) */
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
  host_layout(pl, t, B, T, &c, &h);
  if (by_category) memcpy(by_category, c.by_category, sizeof c.by_category);
  return c.total;
}

/* ---- the scheduler ------------------------------------------------------- */

struct step_args {
  long t;
  struct zo_adamw_hparams hp;
  double max_norm;
  double loss_scale;  /* the gradients are scaled by it (fp16); 1 otherwise */
  bool skip_nonfinite; /* a non-finite gradient skips the step (fp16) */
  double norm;        /* of the unscaled gradients */
  float coef;         /* clip coefficient over the loss scale: what scales g */
  bool skip;          /* set with norm: this step's update is skipped */
};

struct task {
  struct zo_sched *s;
  int index;  /* unit, block or chunk */
  int parity; /* step parity for struct step_args */
};

struct acc_task {
  struct zo_sched *s;
  float *dst;
  const float *src;
  size_t n;
};

/* A range of the table's gradients to reduce to its owners (rs stream):
 * elements [off, off + n), staged at src; runs counts the task's runs (on
 * the rs thread only), so that the first micro-batch of a step copies
 * where the later ones add. */
struct rs_task {
  struct zo_sched *s;
  size_t off, n;
  float *src;
  long runs;
};

/* A run of one state part's bytes (canonical layout) stored contiguously in
 * an NVMe chunk: part bytes [canon, canon + nbytes) at byte koff of chunk
 * `chunk`'s region of the file. */
struct nv_seg {
  size_t canon, nbytes, koff;
  int chunk;
};

struct nv_buffer {
  void *file[NV_FILES];             /* master (chunk floats), m, v (chunk state bytes), 4096-aligned */
  struct zo_nvme_req rreq[NV_FILES];
  struct zo_nvme_req wreq[NV_FILES];
  bool reading, writing;            /* requests outstanding; ordered by the chunk events */
};

/* Host-function argument of an NVMe refill (I/O stream) or update (optimizer stream). */
struct nv_task {
  struct zo_sched *s;
  int chunk;    /* index into s->chunks */
  int parity;   /* step parity for struct step_args */
  int buf;      /* staging buffer of the chunk */
  int pred_buf; /* refill: buffer of chunk g - d whose writes must finish; -1 none */
};

struct zo_sched {
  struct zo_placement pl;
  zo_backend_t be;
  struct zo_model *m;
  const struct zo_tensor_table *t;
  int L, U, K, B, T;
  struct zo_model_hooks hooks;
  zo_stream_t cs, h2d, d2h, os; /* compute, copies in, copies out, optimizer */
  zo_stream_t io;               /* NVMe refills (only with the optimizer on NVMe) */
  struct zo_host_pool pool;
  struct host_tags pool_tags;   /* the pool's carves by category */
  struct host_bufs h;
  float *acc, *micro;           /* device gradient accumulator and micro-batch buffer (full mode) */
  uint8_t *st_m, *st_v;         /* m, v in the canonical layout where they live (device, cpu); NULL for NVMe */
  size_t *soff;                 /* (n_tensors) byte offset of each tensor in the canonical layout */
  struct zo_arena opt_arena;    /* device, optimizer on the device: norm partials, 8-bit m, v */
  double *norm_dev;             /* (n_tensors) device: per-tensor sums of squares of the gradients */
  double *norm_host;            /* (n_tensors) their host copy, summed in table order */
  /* events */
  zo_event_t *param_ready;      /* (U) unit's device (or host, for slotted blocks) copy updated */
  zo_event_t *opt_done;         /* (U) unit's update finished */
  zo_event_t in_free[2];
  zo_event_t *slot_free, *slot_ready; /* (K) */
  int *slot_owner;              /* (K) block in the slot, -1 none or stale */
  zo_event_t gslot_ready[ZO_SCHED_GRAD_SLOTS], gslot_free[ZO_SCHED_GRAD_SLOTS];
  zo_event_t res_ready, res_free, grads_done, grads_ready, norm_done, losses_ready;
  zo_event_t *chunk_done, *chunk_h2d; /* (n_chunks) NVMe: chunk updated, copied to the device */
  zo_event_t *chunk_issued;     /* (n_chunks) NVMe: chunk's reads issued */
  /* cpu_checkpointing: block l's input lives in the model's ckpt_in[l % 2] */
  zo_event_t *ck_saved;         /* (ckpt_blocks) input of block l copied to the host */
  zo_event_t ck_out;            /* recorded on cs where a block's input may leave */
  zo_event_t ck_free[2], ck_ready[2]; /* input buffer read for the last time, loaded */
  int ck_owner[2];              /* block whose input a buffer holds (loaded), -1 none */
  int n_ck;                     /* events in ck_saved */
  /* host function arguments */
  struct task *opt_tasks;       /* (2, U) */
  struct nv_task *nv_refill, *nv_update; /* (2, n_chunks) */
  struct task norm_tasks[2];
  struct acc_task *acc_tasks;   /* (L + 2): blocks, then head, tail */
  struct step_args step[2];
  double loss_scale;            /* of the micro-batches being queued (zo_sched_set_loss_scale) */
  int parity;
  bool stepped;                 /* an optimizer step has been queued */
  /* micro-batch state */
  int k, batch_buf;
  int *n_valid;                 /* (grad_accum) tokens with a target */
  /* NVMe */
  zo_nvme_t nv;
  int file_id[NV_FILES];
  struct chunk *chunks;
  int n_chunks;
  struct piece *pieces;         /* (n_pieces) of the chunks, in order */
  int n_pieces;
  int nv_depth;                 /* chunks read ahead: min(nvme_buffers, n_chunks) */
  long nv_base;                 /* global index of the next step's first chunk */
  bool nv_primed;               /* the next step's first nv_depth refills are queued */
  struct nv_buffer *nvb;        /* (nvme_buffers) */
  size_t nvme_planned;
  /* state I/O (zo_sched_state_*): the NVMe files seen through nvb[0] as a
   * one-chunk cache per file */
  bool st_active;               /* between the first state access and zo_sched_state_done */
  bool st_wrote, st_params_wrote;
  struct nv_seg *nv_segs[2];    /* [0] the master file's, [1] m's and v's (one layout), by canon */
  int nv_n_segs[2];
  int nv_cached[NV_FILES];      /* chunk in nvb[0].file[f], -1 none */
  bool nv_dirty[NV_FILES];
  bool *nv_valid;               /* (NV_FILES, n_chunks) the chunk's region of the file was written */
  /* data parallelism: comm is the caller's (main thread), grad_comm a
   * duplicate for the optimizer stream; both NULL with one rank */
  zo_comm_t comm, grad_comm;
  int n_ranks;
  double *loss_sums;            /* (2 * grad_accum) per micro-batch loss sums, then token counts */
  /* the optimizer's shard (zo_placement_sharded; otherwise the whole table) */
  bool sharded;
  struct zo_shard sh;           /* this rank's */
  struct zo_shard *shards;      /* (n_ranks) every rank's, sharded */
  size_t *rs_counts;            /* (n_ranks) elements of each shard: the reduce-scatter */
  size_t master_off, st_off;    /* first element of h.master, first byte of st_m / st_v (the cpu
                                 * tier holds the shard only; 0 elsewhere) */
  double *norm_parts;           /* (n_tensors) per-tensor sums of squares, this rank's tensors, others 0 */
  zo_event_t gather_wait, gather_done; /* this rank's updated parameters written / every rank's in */
  /* gradient sums overlapped with the backward (sharded, gradients on the
   * host): each block's, and the resident ranges', reduced to their owners
   * on stream rs as soon as the last micro-batch has accumulated them */
  bool pshard;                  /* ZeRO-3 over ranks: h.params holds the shard, slots load gathered blocks */
  size_t params_off;            /* first element of h.params */
  zo_stream_t pg;               /* block gathers (pshard) */
  zo_comm_t pg_comm;            /* its duplicate */
  zo_event_t *pg_ready, *pg_free; /* (K) slot k's gather buffer filled / copied to the slot */
  struct task *pg_tasks;        /* (L) block l's gather */
  bool overlap;
  zo_stream_t rs;
  zo_comm_t rs_comm;            /* a duplicate of its own for rs's thread */
  zo_event_t *rs_ready;         /* (L + 1) block l's (L: the resident ranges') gradients in h.grads */
  zo_event_t rs_done;           /* every range reduced */
  zo_event_t stage_free[ZO_SCHED_GRAD_SLOTS], stage_res_free; /* staging read by its last reduction */
  size_t grads_off;             /* first element of h.grads (its shard with overlap) */
  struct rs_task *rs_tasks;     /* (L + 2): blocks, then head, tail */
  /* first asynchronous error */
  pthread_mutex_t err_mu;
  atomic_int err;
  char err_msg[512];
  atomic_uint_fast64_t opt_ns, acc_ns, nv_wait_ns, comm_ns;
};

static void async_fail(struct zo_sched *s, int err) {
  pthread_mutex_lock(&s->err_mu);
  if (!atomic_load(&s->err)) {
    snprintf(s->err_msg, sizeof s->err_msg, "%s", zo_last_error());
    atomic_store(&s->err, err);
  }
  pthread_mutex_unlock(&s->err_mu);
}

static int async_error(struct zo_sched *s) {
  int err = atomic_load(&s->err);
  if (!err) return 0;
  pthread_mutex_lock(&s->err_mu);
  zo_error(err, "%s", s->err_msg);
  pthread_mutex_unlock(&s->err_mu);
  return err;
}

/* Prefixes the calling thread's last error. zo_error formats into the
 * buffer zo_last_error() points at, so the old message is copied first. */
static int error_prefixed(int err, const char *prefix) {
  char old[1024];
  snprintf(old, sizeof old, "%s", zo_last_error());
  return zo_error(err, "%s: %s", prefix, old);
}

static uint64_t ns_since(double t0) { return (uint64_t)((zo_time_s() - t0) * 1e9); }

#define CHECK_Q(call) ZO_ASSERT((call) == 0) /* queueing on a live stream cannot fail */

/* Device address of unit u's parameters, working dtype (NULL: a block
 * living in slots). */
static void *dev_unit_params(struct zo_sched *s, int u) {
  if (!s->K) return zo_model_at(s->m, s->m->params, unit_range(s->t, u).off);
  if (u == 0) return s->m->params;
  if (u == s->U - 1) return zo_model_at(s->m, s->m->params, s->m->head_numel);
  return NULL;
}

/* Host working parameters (working dtype) from table element off. */
static void *host_params_at(struct zo_sched *s, size_t off) {
  ZO_ASSERT(off >= s->params_off);
  return (uint8_t *)s->h.params + (off - s->params_off) * s->m->esize;
}

/* The host master (cpu tier) at table element off, inside this rank's shard. */
static float *master_at(const struct zo_sched *s, size_t off) {
  ZO_ASSERT(off >= s->sh.lo && off <= s->sh.hi);
  return s->h.master + (off - s->master_off);
}

/* The gradients the optimizer reads (device accumulator, or host) at table
 * element off: with sharded gradients h.grads holds this rank's shard. */
static float *grads_at(const struct zo_sched *s, size_t off) {
  ZO_ASSERT(off >= s->grads_off);
  return (s->pl.optimizer == ZO_OFFLOAD_NONE ? s->acc : s->h.grads) + (off - s->grads_off);
}

/* Tensor i's m (v) record in the state at base (st_m or st_v). */
static uint8_t *state_at(const struct zo_sched *s, uint8_t *base, int i) { return base + (s->soff[i] - s->st_off); }

/* Unit u's elements inside this rank's shard: [*a, *b), maybe empty. */
static void unit_owned(const struct zo_sched *s, int u, size_t *a, size_t *b) {
  const struct range r = unit_range(s->t, u);
  *a = r.off > s->sh.lo ? r.off : s->sh.lo;
  *b = r.off + r.numel < s->sh.hi ? r.off + r.numel : s->sh.hi;
  if (*b < *a) *b = *a;
}

/* Where the sharded ranks exchange their updated working parameters: the
 * host working copy when there is one (slots load from it, the device units
 * are copied from it afterwards), else the device parameters (host memory on
 * the CPU backend, the only one data parallelism runs on). */
static void *gather_buf(struct zo_sched *s) { return s->h.params ? s->h.params : s->m->params; }

/* ---- parameter slots ----------------------------------------------------- */

static void async_fail(struct zo_sched *s, int err);
static int error_prefixed(int err, const char *prefix);

/* Slot k's gather buffer (pshard). */
static uint8_t *pg_buf(struct zo_sched *s, int k) {
  return s->h.pgather + (size_t)k * s->t->layer_numel * s->m->esize;
}

/* Rank r's part [*a, *b) of table elements [off, off + n); false when empty. */
static bool shard_cut(const struct zo_sched *s, int r, size_t off, size_t n, size_t *a, size_t *b) {
  *a = s->shards[r].lo > off ? s->shards[r].lo : off;
  *b = s->shards[r].hi < off + n ? s->shards[r].hi : off + n;
  return *b > *a;
}

/* Each owner's part of elements [off, off + n) broadcast from it into buf
 * (working dtype; with copy_own the owner copies its part from the host
 * working copy first, else it is in buf already), on comm, every rank in
 * the same order. Returns 0 or -errno. */
static int exchange_range(struct zo_sched *s, zo_comm_t comm, uint8_t *buf, size_t off, size_t n, bool copy_own) {
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

/* Stream pg: block l gathered into its slot's buffer. Runs even after an
 * error, so that the others are not left waiting. */
static void pg_gather_fn(void *arg) {
  const struct task *a = arg;
  struct zo_sched *s = a->s;
  const struct range r = unit_range(s->t, 1 + a->index);
  const double t0 = zo_time_s();
  int err = exchange_range(s, s->pg_comm, pg_buf(s, a->index % s->K), r.off, r.numel, true);
  atomic_fetch_add(&s->comm_ns, ns_since(t0));
  if (err) async_fail(s, error_prefixed(err, "gathering a block's parameters from the ranks"));
}

/* Block l resident in slot l % K, loading it on the H2D stream if needed. */
static void slot_ensure(struct zo_sched *s, int l) {
  const int k = l % s->K;
  if (s->slot_owner[k] == l) return;
  const struct range r = unit_range(s->t, 1 + l);
  if (s->pshard) {
    /* Gathered from the owners into slot k's buffer (stream pg, in the same
     * order on every rank), then copied to the slot. */
    CHECK_Q(s->be->stream_wait_event(s->pg, s->pg_free[k]));
    CHECK_Q(s->be->stream_wait_event(s->pg, s->param_ready[1 + l]));
    CHECK_Q(s->be->launch_host_func(s->pg, pg_gather_fn, &s->pg_tasks[l]));
    CHECK_Q(s->be->event_record(s->pg_ready[k], s->pg));
    CHECK_Q(s->be->stream_wait_event(s->h2d, s->pg_ready[k]));
  }
  CHECK_Q(s->be->stream_wait_event(s->h2d, s->slot_free[k]));
  CHECK_Q(s->be->stream_wait_event(s->h2d, s->param_ready[1 + l]));
  CHECK_Q(s->be->memcpy_async(s->m->param_slots[k], s->pshard ? pg_buf(s, k) : host_params_at(s, r.off),
                              r.numel * s->m->esize, ZO_COPY_H2D, s->h2d));
  CHECK_Q(s->be->event_record(s->slot_ready[k], s->h2d));
  if (s->pshard) CHECK_Q(s->be->event_record(s->pg_free[k], s->h2d));
  s->slot_owner[k] = l;
}

/* The block needed at position i of a micro-batch: F0..F(L-1), B(L-1)..B0. */
static int need_at(int L, int i) { return i < L ? i : 2 * L - 1 - i; }

static void slots_acquire(struct zo_sched *s, struct zo_model *m, int l, enum zo_model_phase ph,
                          zo_stream_t cs) {
  const int L = s->L, pos = ph == ZO_MODEL_FORWARD ? l : 2 * L - 1 - l;
  for (int i = pos; i < pos + s->K && i < 2 * L; i++) slot_ensure(s, need_at(L, i));
  CHECK_Q(s->be->stream_wait_event(cs, s->slot_ready[l % s->K]));
  zo_model_bind_block(m, l, m->param_slots[l % s->K], NULL);
}

/* Next step: every slot is stale; start loading the first blocks as soon as
 * their updates finish. */
static void slots_invalidate(struct zo_sched *s) {
  for (int k = 0; k < s->K; k++) s->slot_owner[k] = -1;
  for (int l = 0; l < s->K; l++) slot_ensure(s, l);
}

/* ---- gradients ----------------------------------------------------------- */

static void acc_fn(void *arg) {
  const struct acc_task *a = arg;
  double t0 = zo_time_s();
  float *restrict d = a->dst;
  const float *restrict x = a->src;
  /* acc += micro: the same single rounding as the device's residual add. */
#pragma omp parallel for simd schedule(static) if (a->n >= ((size_t)1 << 16))
  for (size_t i = 0; i < a->n; i++) d[i] = d[i] + x[i];
  atomic_fetch_add(&a->s->acc_ns, ns_since(t0));
}

/* Copies device gradients [src, +n) of host range off to the host: straight
 * into the accumulator for the first micro-batch, else to staging + add. */
static void grads_out(struct zo_sched *s, const float *src, size_t off, size_t n, float *stage,
                      struct acc_task *task) {
  if (s->k == 0) {
    CHECK_Q(s->be->memcpy_async(s->h.grads + off, src, n * sizeof(float), ZO_COPY_D2H, s->d2h));
    return;
  }
  CHECK_Q(s->be->memcpy_async(stage, src, n * sizeof(float), ZO_COPY_D2H, s->d2h));
  CHECK_Q(s->be->launch_host_func(s->d2h, acc_fn, task));
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
  CHECK_Q(be->memcpy_async(ck_host(s, l), m->ckpt_in[l % 2], ck_nbytes(s), ZO_COPY_D2H, s->d2h));
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
  CHECK_Q(be->memcpy_async(m->ckpt_in[b], ck_host(s, l), ck_nbytes(s), ZO_COPY_H2D, s->h2d));
  CHECK_Q(be->event_record(s->ck_ready[b], s->h2d));
  s->ck_owner[b] = l;
}

static void hook_begin(void *ctx, struct zo_model *m, int l, enum zo_model_phase ph, zo_stream_t cs) {
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
      CHECK_Q(be->stream_wait_event(cs, s->param_ready[0]));
    } else if (l == L) {
      CHECK_Q(be->stream_wait_event(cs, s->param_ready[s->U - 1]));
    } else if (s->K) {
      slots_acquire(s, m, l, ph, cs);
    } else {
      CHECK_Q(be->stream_wait_event(cs, s->param_ready[1 + l]));
    }
    return;
  }
  /* Backward: each micro-batch's gradients go into zeroed buffers. */
  if (l == L) {
    if (s->pl.grads_on_host) {
      CHECK_Q(be->stream_wait_event(cs, s->res_free));
      CHECK_Q(be->memset_async(m->grads, 0, (m->head_numel + m->tail_numel) * sizeof(float), cs));
    } else {
      float *target = s->k == 0 ? s->acc : s->micro;
      zo_model_bind_resident_grads(m, target, target + unit_range(s->t, s->U - 1).off);
      CHECK_Q(be->memset_async(target, 0, s->t->numel * sizeof(float), cs));
    }
    return;
  }
  if (l == ZO_MODEL_EMBED) return;
  if (s->K) slots_acquire(s, m, l, ph, cs);
  if (ck_on_host(s, l)) {
    /* The recompute reads the input first; the next block's input is
     * fetched meanwhile into the other buffer. */
    ck_load(s, m, l);
    CHECK_Q(be->stream_wait_event(cs, s->ck_ready[l % 2]));
    if (l > 0) ck_load(s, m, l - 1);
  }
  if (s->pl.grads_on_host) {
    const int g = l % ZO_SCHED_GRAD_SLOTS;
    CHECK_Q(be->stream_wait_event(cs, s->gslot_free[g]));
    CHECK_Q(be->memset_async(m->grad_slots[g], 0, s->t->layer_numel * sizeof(float), cs));
    zo_model_bind_block(m, l, NULL, m->grad_slots[g]);
  } else {
    float *target = s->k == 0 ? s->acc : s->micro;
    zo_model_bind_block(m, l, NULL, target + s->t->layer_offset[l]);
  }
}

/* Stream rs: one micro-batch's gradients of a range, staged, summed over
 * the ranks onto the owner of each shard they meet (the ranks' parts of a
 * reduce-scatter, range by range in the same order on every rank); each
 * owner accumulates its part into its shard of h.grads. Runs even after an
 * error, so that the others are not left waiting. */
static void rs_acc_fn(void *arg) {
  struct rs_task *a = arg;
  struct zo_sched *s = a->s;
  const bool first = a->runs++ % s->pl.grad_accum == 0;
  const int me = s->pl.dp_rank;
  const double t0 = zo_time_s();
  int err = 0;
  for (int r = 0; r < s->n_ranks && !err; r++) {
    size_t lo, hi;
    if (!shard_cut(s, r, a->off, a->n, &lo, &hi)) continue;
    float *part = a->src + (lo - a->off);
    err = zo_comm_reduce(s->rs_comm, part, hi - lo, ZO_F32, ZO_COMM_SUM, r);
    if (err || r != me) continue;
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
 * their reduction on stream rs (ready event i), which frees it again. */
static void grads_out_shard(struct zo_sched *s, const float *src, size_t n, zo_event_t free_ev, int i,
                            struct rs_task *task) {
  CHECK_Q(s->be->stream_wait_event(s->d2h, free_ev));
  CHECK_Q(s->be->memcpy_async(task->src, src, n * sizeof(float), ZO_COPY_D2H, s->d2h));
  CHECK_Q(s->be->event_record(s->rs_ready[i], s->d2h));
  CHECK_Q(s->be->stream_wait_event(s->rs, s->rs_ready[i]));
  CHECK_Q(s->be->launch_host_func(s->rs, rs_acc_fn, task));
}

static void hook_end(void *ctx, struct zo_model *m, int l, enum zo_model_phase ph, zo_stream_t cs) {
  struct zo_sched *s = ctx;
  zo_backend_t be = s->be;
  const int L = s->L;
  if (l >= 0 && l < L && s->K) CHECK_Q(be->event_record(s->slot_free[l % s->K], cs));
  if (ck_on_host(s, l)) {
    if (ph == ZO_MODEL_FORWARD) ck_save(s, m, l, cs);
    else CHECK_Q(be->event_record(s->ck_free[l % 2], cs));
  }
  if (ph == ZO_MODEL_FORWARD) return;
  const bool last = s->k == s->pl.grad_accum - 1;
  if (l >= 0 && l < L && s->pl.grads_on_host) {
    const int g = l % ZO_SCHED_GRAD_SLOTS;
    CHECK_Q(be->event_record(s->gslot_ready[g], cs));
    CHECK_Q(be->stream_wait_event(s->d2h, s->gslot_ready[g]));
    if (s->k == 0) CHECK_Q(be->stream_wait_event(s->d2h, s->opt_done[1 + l]));
    if (s->overlap) {
      grads_out_shard(s, m->grad_slots[g], s->t->layer_numel, s->stage_free[g], l, &s->rs_tasks[l]);
      CHECK_Q(be->event_record(s->gslot_free[g], s->d2h));
      CHECK_Q(be->event_record(s->stage_free[g], s->rs));
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
      grads_out_shard(s, m->grads, head.numel, s->stage_res_free, L, &s->rs_tasks[L]);
      grads_out_shard(s, m->grads + head.numel, tail.numel, s->stage_res_free, L, &s->rs_tasks[L + 1]);
      CHECK_Q(be->event_record(s->res_free, s->d2h));
      CHECK_Q(be->event_record(s->stage_res_free, s->rs));
      /* The optimizer starts when every range is reduced (queue_optimizer). */
      if (last) CHECK_Q(be->event_record(s->rs_done, s->rs));
      if (last) CHECK_Q(be->event_record(s->grads_ready, s->d2h));
      return;
    }
    grads_out(s, m->grads, head.off, head.numel, s->h.stage_res, &s->acc_tasks[L]);
    grads_out(s, m->grads + head.numel, tail.off, tail.numel,
              s->h.stage_res ? s->h.stage_res + head.numel : NULL, &s->acc_tasks[L + 1]);
    CHECK_Q(be->event_record(s->res_free, s->d2h));
    if (last) CHECK_Q(be->event_record(s->grads_ready, s->d2h));
    return;
  }
  if (s->k > 0) be->residual_forward(s->acc, s->acc, s->micro, s->t->numel, ZO_F32, cs);
  if (!last) return;
  if (s->pl.optimizer == ZO_OFFLOAD_NONE) {
    CHECK_Q(be->event_record(s->grads_ready, cs));
    return;
  }
  /* Stage 1: the accumulated gradients leave once, after the last micro-batch. */
  CHECK_Q(be->event_record(s->grads_done, cs));
  CHECK_Q(be->stream_wait_event(s->d2h, s->grads_done));
  CHECK_Q(be->stream_wait_event(s->d2h, s->opt_done[s->U - 1]));
  CHECK_Q(be->memcpy_async(s->h.grads, s->acc, s->t->numel * sizeof(float), ZO_COPY_D2H, s->d2h));
  CHECK_Q(be->event_record(s->grads_ready, s->d2h));
}

/* ---- optimizer ----------------------------------------------------------- */

/* Per-tensor sums of squares in table order: the association every placement shares. */
static double grad_sumsq(const struct zo_tensor_table *t, const float *grads) {
  double sum = 0.0;
  for (int i = 0; i < t->n_tensors; i++)
    sum += zo_sumsq(grads + t->tensors[i].offset, t->tensors[i].numel);
  return sum;
}

static const float *opt_grads(const struct zo_sched *s) {
  return s->pl.optimizer == ZO_OFFLOAD_NONE ? s->acc : s->h.grads;
}

/* Optimizer stream, the step's first task: the accumulated gradients, where
 * the optimizer reads them, summed over the ranks in place. Each rank's
 * dloss carries 1/ranks, so the sum is the global-batch mean and every rank
 * runs the same norm, clip, skip and update on it. On the CPU backend the
 * device accumulator is host memory. The sum runs even after an error on
 * this rank, so that the others are not left waiting before the job ends. */
static void grads_allreduce_fn(void *arg) {
  struct zo_sched *s = arg;
  const double t0 = zo_time_s();
  float *g = (float *)(uintptr_t)opt_grads(s);
  /* ZeRO stage 2 over ranks: each shard's sum on its owner only. */
  int err = s->sharded && s->pl.zero_stage >= 2 ? zo_comm_reduce_scatter(s->grad_comm, g, s->rs_counts, ZO_F32)
                                                : zo_comm_allreduce(s->grad_comm, g, s->t->numel, ZO_F32, ZO_COMM_SUM);
  atomic_fetch_add(&s->comm_ns, ns_since(t0));
  if (err) async_fail(s, error_prefixed(err, "summing the gradients over the ranks"));
}

/* Optimizer stream. With the optimizer on the device the per-tensor sums
 * were computed there (backend sumsq) and copied to norm_host before this
 * runs; the host only adds them, in the same table order. */
static void norm_fn(void *arg) {
  const struct task *a = arg;
  struct zo_sched *s = a->s;
  struct step_args *sa = &s->step[a->parity];
  double t0 = zo_time_s();
  double sum = 0.0;
  if (s->sharded) {
    /* Each rank's tensors' sums, zeros elsewhere, summed over the ranks and
     * then added in table order: x + 0 is x, so the norm is the bits one
     * process computes from the same gradients, whatever the rank count. */
    for (int i = 0; i < s->t->n_tensors; i++) {
      const struct zo_tensor_info *ti = &s->t->tensors[i];
      s->norm_parts[i] = i < s->sh.t_lo || i >= s->sh.t_hi ? 0.0
                         : s->norm_host                    ? s->norm_host[i]
                                                           : zo_sumsq(grads_at(s, ti->offset), ti->numel);
    }
    const double tc = zo_time_s();
    int err = zo_comm_allreduce(s->grad_comm, s->norm_parts, (size_t)s->t->n_tensors, ZO_F64, ZO_COMM_SUM);
    atomic_fetch_add(&s->comm_ns, ns_since(tc));
    if (err) async_fail(s, error_prefixed(err, "summing the gradient norm over the ranks"));
    for (int i = 0; i < s->t->n_tensors; i++) sum += s->norm_parts[i];
  } else if (s->norm_host) {
    for (int i = 0; i < s->t->n_tensors; i++) sum += s->norm_host[i];
  } else {
    sum = grad_sumsq(s->t, opt_grads(s));
  }
  /* The gradients carry the loss scale: the norm, the clip and the skip
   * are decided on the unscaled values, and the update's grad_scale takes
   * the scale out again. The sum of squares is a double: finite floats
   * never overflow it, so it is finite exactly when every gradient is. */
  sa->norm = sqrt(sum) / sa->loss_scale;
  sa->skip = sa->skip_nonfinite && !isfinite(sa->norm);
  sa->coef = (float)((double)zo_clip_coef(sa->norm, sa->max_norm) / sa->loss_scale);
  atomic_fetch_add(&s->opt_ns, ns_since(t0));
}

/* Elements of one update-then-round pass in mixed precision: the rounding
 * reads the master weights while they are still in cache, and the pass is
 * large enough for the update's own parallel loop. A multiple of every
 * quantization block size (ZO_ADAMW8BIT_BLOCK_MAX divides it). */
#define ZO_SCHED_CAST_SPAN ((size_t)1 << 18)

/* AdamW on one piece of tensor ti: n elements at p (fp32 master), g; its m,
 * v state at ms, vs (fp32, or codes then absmax when q). With work (mixed
 * precision) the updated p is rounded into work (n elements of the working
 * dtype) span by span; spans split 8-bit states at block multiples from the
 * piece's first element, which is exact (blocks are independent). */
static void piece_update(const struct zo_sched *s, const struct step_args *sa, const struct zo_tensor_info *ti,
                         bool q, float *p, const float *g, uint8_t *ms, uint8_t *vs, size_t n, void *work) {
  const size_t span = work ? ZO_SCHED_CAST_SPAN : n, cb = round_up(n, 4), blk = s->pl.opt.block;
  const size_t e = zo_dtype_size(s->pl.dtype);
  for (size_t a = 0; a < n; a += span) {
    const size_t k = n - a < span ? n - a : span;
    if (!q)
      zo_adamw_update(p + a, g + a, (float *)ms + a, (float *)vs + a, k, &sa->hp, ti->decay, sa->t, sa->coef);
    else
      zo_adamw8bit_update(p + a, g + a, ms + a, (float *)(ms + cb) + a / blk, vs + a, (float *)(vs + cb) + a / blk,
                          k, blk, &sa->hp, ti->decay, sa->t, sa->coef);
    if (work) zo_cpu_cast((uint8_t *)work + a * e, s->pl.dtype, p + a, ZO_F32, k);
  }
}

/* Optimizer on the cpu tier: unit u's tensors, whole, with states in the
 * canonical layout. */
static void opt_unit_fn(void *arg) {
  const struct task *a = arg;
  struct zo_sched *s = a->s;
  if (atomic_load(&s->err)) return;
  const struct step_args *sa = &s->step[a->parity];
  if (sa->skip) return;
  const struct range r = unit_range(s->t, a->index);
  double t0 = zo_time_s();
  /* The host master; in mixed precision rounded into the host working copy
   * (fp32 with slots: the master is the slots' source). This rank's tensors
   * only. */
  uint8_t *work = s->pl.dtype != ZO_F32 ? s->h.params : NULL;
  for (int i = s->sh.t_lo; i < s->sh.t_hi; i++) {
    const struct zo_tensor_info *ti = &s->t->tensors[i];
    if (ti->offset < r.off || ti->offset >= r.off + r.numel) continue;
    float *p = master_at(s, ti->offset);
    piece_update(s, sa, ti, zo_optim_is_8bit(&s->pl.opt, ti->numel), p, grads_at(s, ti->offset), state_at(s, s->st_m, i),
                 state_at(s, s->st_v, i), ti->numel, work ? host_params_at(s, ti->offset) : NULL);
  }
  atomic_fetch_add(&s->opt_ns, ns_since(t0));
}

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
static int nv_wait_all(struct zo_sched *s, struct zo_nvme_req *req) {
  int err = 0;
  for (int f = 0; f < NV_FILES; f++) {
    int e = zo_nvme_wait(s->nv, &req[f]);
    if (e && !err) err = e;
  }
  return err;
}

static int nv_drain_writes(struct zo_sched *s, struct nv_buffer *b) {
  if (!b->writing) return 0;
  b->writing = false;
  return nv_wait_all(s, b->wreq);
}

static int nv_buffer_drain(struct zo_sched *s, struct nv_buffer *b) {
  int err = nv_drain_writes(s, b);
  if (b->reading) {
    b->reading = false;
    int e = nv_wait_all(s, b->rreq);
    if (e && !err) err = e;
  }
  return err;
}

/* File offset and bytes of chunk c in file f. */
static uint64_t nv_off(const struct chunk *c, int f) { return f == NV_MASTER ? c->mfile_off : c->sfile_off; }
static size_t nv_nbytes(const struct chunk *c, int f) { return f == NV_MASTER ? c->numel * sizeof(float) : c->sbytes; }

static int nv_read_async(struct zo_sched *s, int j, struct nv_buffer *b) {
  const struct chunk *c = &s->chunks[j];
  int err = 0;
  for (int f = 0; f < NV_FILES && !err; f++)
    err = zo_nvme_read_async(s->nv, s->file_id[f], nv_off(c, f), b->file[f], nv_nbytes(c, f), &b->rreq[f]);
  b->reading = true;
  return err;
}

static int nv_write_async(struct zo_sched *s, int j, struct nv_buffer *b) {
  const struct chunk *c = &s->chunks[j];
  int err = 0;
  for (int f = 0; f < NV_FILES && !err; f++)
    err = zo_nvme_write_async(s->nv, s->file_id[f], nv_off(c, f), b->file[f], nv_nbytes(c, f), &b->wreq[f]);
  b->writing = true;
  return err;
}

/* I/O stream: chunk g - d's writes finished, then chunk g's reads issued. */
static void nv_refill_fn(void *arg) {
  const struct nv_task *a = arg;
  struct zo_sched *s = a->s;
  if (atomic_load(&s->err)) return;
  struct nv_buffer *b = &s->nvb[a->buf];
  int err = a->pred_buf >= 0 ? nv_drain_writes(s, &s->nvb[a->pred_buf]) : 0;
  if (!err) err = nv_drain_writes(s, b);
  if (err) {
    async_fail(s, error_prefixed(err, "NVMe tier: writing the optimizer state"));
    return;
  }
  if ((err = nv_read_async(s, a->chunk, b))) async_fail(s, error_prefixed(err, "NVMe tier: reading the optimizer state"));
}

/* I/O stream, behind the chunk's update: queues its writes. Issued here and
 * not by the update so that the store (FIFO) sees each write followed by the
 * read that waits for it, never several writes ahead of a needed read. */
static void nv_write_fn(void *arg) {
  const struct nv_task *a = arg;
  struct zo_sched *s = a->s;
  if (atomic_load(&s->err)) return;
  int err = nv_write_async(s, a->chunk, &s->nvb[a->buf]);
  if (err) async_fail(s, error_prefixed(err, "NVMe tier: writing the optimizer state"));
}

/* Optimizer stream: waits for the chunk's reads (CRC checked) and updates it
 * in the staging buffer. */
static void nv_update_fn(void *arg) {
  const struct nv_task *a = arg;
  struct zo_sched *s = a->s;
  if (atomic_load(&s->err)) return;
  const struct step_args *sa = &s->step[a->parity];
  struct nv_buffer *b = &s->nvb[a->buf];
  const double t0 = zo_time_s();
  int err = nv_wait_all(s, b->rreq);
  b->reading = false;
  atomic_fetch_add(&s->nv_wait_ns, ns_since(t0));
  if (err) {
    async_fail(s, error_prefixed(err, "NVMe tier: reading the optimizer state"));
    return;
  }
  /* A skipped step writes the chunk back unchanged. */
  if (sa->skip) return;
  const struct chunk *c = &s->chunks[a->chunk];
  float *master = b->file[NV_MASTER];
  const bool mixed = s->pl.dtype != ZO_F32;
  for (int k = c->first; k < c->first + c->n_pieces; k++) {
    const struct piece *pc = &s->pieces[k];
    piece_update(s, sa, &s->t->tensors[pc->tensor], pc->q, master + (pc->off - c->off), grads_at(s, pc->off),
                 (uint8_t *)b->file[NV_M] + pc->sbyte, (uint8_t *)b->file[NV_V] + pc->sbyte, pc->numel,
                 mixed ? host_params_at(s, pc->off) : NULL);
  }
  if (s->K && !mixed) memcpy(host_params_at(s, c->off), master, c->numel * sizeof(float));
  atomic_fetch_add(&s->opt_ns, ns_since(t0));
}

/* Queues the refill of chunk j (global index g) of the step with parity p. */
static void nv_queue_refill(struct zo_sched *s, int j, long g, int p) {
  zo_backend_t be = s->be;
  const int n = s->n_chunks, d = s->nv_depth, nbuf = s->pl.nvme_buffers;
  const int pj = ((j - d) % n + n) % n; /* chunk g - d: this step's or the last */
  CHECK_Q(be->stream_wait_event(s->io, s->chunk_done[pj]));
  CHECK_Q(be->stream_wait_event(s->io, s->chunk_h2d[pj]));
  struct nv_task *task = &s->nv_refill[p * n + j];
  *task = (struct nv_task){s, j, p, (int)(g % nbuf), g >= d ? (int)((g - d) % nbuf) : -1};
  CHECK_Q(be->launch_host_func(s->io, nv_refill_fn, task));
  CHECK_Q(be->event_record(s->chunk_issued[j], s->io));
}

/* Queues the reads of the next step's first d chunks (once per step). */
static void nv_prime(struct zo_sched *s, int p) {
  if (s->nv_primed) return;
  for (int j = 0; j < s->nv_depth; j++) nv_queue_refill(s, j, s->nv_base + j, p);
  s->nv_primed = true;
}

/* After a synchronous use of the staging buffers: reads already issued for
 * the next step were overwritten, so issue them again. */
static void nv_reprime(struct zo_sched *s) {
  if (!s->nv || !s->nv_primed) return;
  s->nv_primed = false;
  nv_prime(s, s->parity ^ 1);
}

/* Optimizer on the device: unit u's tensors updated by the backend's AdamW
 * or AdamW8bit on the optimizer stream, states in the canonical layout,
 * never touched by the host; in mixed precision the fp32 master is updated
 * and rounded into the working copy by the backend's cast. */
static void queue_device_update(struct zo_sched *s, const struct step_args *sa, int u) {
  const struct range r = unit_range(s->t, u);
  float *p = s->m->master ? s->m->master : (float *)s->m->params;
  const struct zo_adamw_hparams *hp = &sa->hp;
  for (int i = s->sh.t_lo; i < s->sh.t_hi; i++) {
    const struct zo_tensor_info *ti = &s->t->tensors[i];
    if (ti->offset < r.off || ti->offset >= r.off + r.numel) continue;
    const size_t o = ti->offset, n = ti->numel;
    uint8_t *ms = state_at(s, s->st_m, i), *vs = state_at(s, s->st_v, i);
    if (zo_optim_is_8bit(&s->pl.opt, n)) {
      const size_t cb = round_up(n, 4);
      s->be->adamw8bit_update(p + o, s->acc + o, ms, (float *)(ms + cb), vs, (float *)(vs + cb), n, s->pl.opt.block,
                              hp->lr, hp->beta1, hp->beta2, hp->eps, hp->weight_decay, ti->decay, sa->t, sa->coef,
                              s->os);
    } else {
      s->be->adamw_update(p + o, s->acc + o, (float *)ms, (float *)vs, n, hp->lr, hp->beta1, hp->beta2, hp->eps,
                          hp->weight_decay, ti->decay, sa->t, sa->coef, s->os);
    }
    if (s->m->master) s->be->cast(zo_model_at(s->m, s->m->params, o), s->m->dtype, p + o, ZO_F32, n, s->os);
  }
}

/* Optimizer stream, behind this rank's updates and their device copies:
 * every rank's updated working parameters to every rank. Runs even after an
 * error, like the gradient sum. */
static void gather_fn(void *arg) {
  struct zo_sched *s = arg;
  const double t0 = zo_time_s();
  int err = exchange_range(s, s->grad_comm, gather_buf(s), 0, s->t->numel, false);
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
    err = exchange_range(s, s->grad_comm, dev_unit_params(s, units[i]), r.off, r.numel, false);
  }
  atomic_fetch_add(&s->comm_ns, ns_since(t0));
  if (err) async_fail(s, error_prefixed(err, "exchanging the resident parameters over the ranks"));
}

static void queue_gather(struct zo_sched *s) {
  zo_backend_t be = s->be;
  if (s->pshard) {
    /* Blocks are gathered when their slots load them; the resident units
     * (embeddings, final norm) are exchanged here. */
    const int units[2] = {0, s->U - 1};
    for (int i = 0; i < 2; i++) {
      size_t a, b;
      unit_owned(s, units[i], &a, &b);
      if (b <= a) continue;
      const struct range r = unit_range(s->t, units[i]);
      CHECK_Q(be->stream_wait_event(s->h2d, s->opt_done[units[i]]));
      CHECK_Q(be->memcpy_async((uint8_t *)dev_unit_params(s, units[i]) + (a - r.off) * s->m->esize,
                               host_params_at(s, a), (b - a) * s->m->esize, ZO_COPY_H2D, s->h2d));
    }
    CHECK_Q(be->event_record(s->gather_wait, s->h2d));
    CHECK_Q(be->stream_wait_event(s->os, s->gather_wait));
    CHECK_Q(be->launch_host_func(s->os, resident_exchange_fn, s));
    for (int u = 0; u < s->U; u++) CHECK_Q(be->event_record(s->param_ready[u], s->os));
    return;
  }
  CHECK_Q(be->event_record(s->gather_wait, s->h2d));
  CHECK_Q(be->stream_wait_event(s->os, s->gather_wait));
  CHECK_Q(be->launch_host_func(s->os, gather_fn, s));
  CHECK_Q(be->event_record(s->gather_done, s->os));
  for (int u = 0; u < s->U; u++) {
    void *dev = dev_unit_params(s, u);
    if (dev && s->h.params) {
      const struct range r = unit_range(s->t, u);
      CHECK_Q(be->stream_wait_event(s->h2d, s->gather_done));
      CHECK_Q(be->memcpy_async(dev, host_params_at(s, r.off), r.numel * s->m->esize, ZO_COPY_H2D, s->h2d));
      CHECK_Q(be->event_record(s->param_ready[u], s->h2d));
    } else {
      CHECK_Q(be->event_record(s->param_ready[u], s->os));
    }
  }
}

/* Queues the optimizer of one step on the optimizer stream, unit by unit in
 * forward order, each unit's new parameters copied to the device behind it.
 * With the optimizer on the device the gradient norm is per-tensor backend
 * sumsq, copied to the host and added there; the fp32 update then needs the
 * clip coefficient as an argument, so this waits for the norm (the host
 * stalls until the last backward has run, as llm.c does) and returns 0 or
 * -errno. */
static int queue_optimizer(struct zo_sched *s) {
  zo_backend_t be = s->be;
  const int p = s->parity;
  const bool on_device = s->pl.optimizer == ZO_OFFLOAD_NONE;
  CHECK_Q(be->stream_wait_event(s->os, s->grads_ready));
  if (s->overlap) CHECK_Q(be->stream_wait_event(s->os, s->rs_done));
  else if (s->grad_comm) CHECK_Q(be->launch_host_func(s->os, grads_allreduce_fn, s));
  if (on_device) {
    for (int i = s->sh.t_lo; i < s->sh.t_hi; i++)
      be->sumsq(s->norm_dev + i, s->acc + s->t->tensors[i].offset, s->t->tensors[i].numel, s->os);
    CHECK_Q(be->memcpy_async(s->norm_host, s->norm_dev, (size_t)s->t->n_tensors * sizeof(double),
                             ZO_COPY_D2H, s->os));
  }
  CHECK_Q(be->launch_host_func(s->os, norm_fn, &s->norm_tasks[p]));
  CHECK_Q(be->event_record(s->norm_done, s->os));
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
  if (s->nv) nv_prime(s, p);
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
        CHECK_Q(be->stream_wait_event(s->os, s->chunk_issued[j]));
        CHECK_Q(be->launch_host_func(s->os, nv_update_fn, task));
        CHECK_Q(be->event_record(s->chunk_done[j], s->os));
        if (dev && !(s->sharded && s->h.params)) {
          /* Device copy straight from the staging buffer, which the refill of
           * chunk g + d does not reuse before chunk_h2d[j] completes (sharded
           * with a host working copy: after the exchange instead). */
          CHECK_Q(be->stream_wait_event(s->h2d, s->chunk_done[j]));
          CHECK_Q(be->memcpy_async((uint8_t *)dev + (c->off - r.off) * e,
                                   s->h.params ? host_params_at(s, c->off) : s->nvb[task->buf].file[NV_MASTER],
                                   c->numel * e, ZO_COPY_H2D, s->h2d));
          CHECK_Q(be->event_record(s->chunk_h2d[j], s->h2d));
        }
        CHECK_Q(be->stream_wait_event(s->io, s->chunk_done[j]));
        CHECK_Q(be->launch_host_func(s->io, nv_write_fn, task));
        if (j + s->nv_depth < s->n_chunks) nv_queue_refill(s, j + s->nv_depth, g + s->nv_depth, p);
      }
    } else if (dev_update) {
      if (!dev_skip) queue_device_update(s, &s->step[p], u);
    } else {
      CHECK_Q(be->launch_host_func(s->os, opt_unit_fn, &s->opt_tasks[p * s->U + u]));
    }
    CHECK_Q(be->event_record(s->opt_done[u], s->os));
    if (s->sharded) {
      /* Without a host working copy this rank's part of the unit goes to
       * the device now (cpu tier; NVMe chunks did above); param_ready after
       * the exchange. */
      size_t a, b;
      unit_owned(s, u, &a, &b);
      if (dev && !s->h.params && s->pl.optimizer == ZO_OFFLOAD_CPU && b > a) {
        CHECK_Q(be->stream_wait_event(s->h2d, s->opt_done[u]));
        CHECK_Q(be->memcpy_async((uint8_t *)dev + (a - r.off) * e, master_at(s, a), (b - a) * e, ZO_COPY_H2D,
                                 s->h2d));
      }
      continue;
    }
    if (!dev || s->pl.optimizer == ZO_OFFLOAD_NONE) {
      /* Updated in place where the compute (or the slot loads) read it. */
      CHECK_Q(be->event_record(s->param_ready[u], s->os));
    } else if (s->pl.optimizer == ZO_OFFLOAD_NVME) {
      CHECK_Q(be->event_record(s->param_ready[u], s->h2d));
    } else {
      CHECK_Q(be->stream_wait_event(s->h2d, s->opt_done[u]));
      CHECK_Q(be->memcpy_async(dev, s->h.params ? host_params_at(s, r.off) : (void *)(s->h.master + r.off),
                               r.numel * e, ZO_COPY_H2D, s->h2d));
      CHECK_Q(be->event_record(s->param_ready[u], s->h2d));
    }
  }
  if (s->sharded) queue_gather(s);
  if (s->nv) {
    s->nv_base += s->n_chunks;
    s->nv_primed = false;
  }
  return 0;
}

/* ---- public API ---------------------------------------------------------- */

struct zo_model *zo_sched_model(struct zo_sched *s) { return s->m; }

const struct zo_placement *zo_sched_placement(const struct zo_sched *s) { return &s->pl; }

static int events_create(zo_backend_t be, zo_event_t *ev, int n) {
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

static int nvme_open(struct zo_sched *s) {
  struct zo_nvme_config nc = {.dir = s->pl.nvme_path, .block_size = s->pl.nvme_block,
                              .queue_depth = s->pl.nvme_queue_depth};
  s->nv = zo_nvme_init(&nc);
  if (!s->nv) {
    char what[600];
    snprintf(what, sizeof what, "NVMe tier (zero_optimization.offload_optimizer.nvme_path = %s)",
             s->pl.nvme_path);
    return error_prefixed(-EIO, what);
  }
  const struct chunk_plan cp = make_chunks(s->t, &s->pl, NULL, NULL);
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
  make_chunks(s->t, &s->pl, s->chunks, s->pieces);
  int err;
  const size_t file_bytes[NV_FILES] = {cp.mfile, cp.sfile, cp.sfile};
  for (int f = 0; f < NV_FILES; f++)
    if ((err = zo_nvme_file_create(s->nv, nv_class[f], file_bytes[f], &s->file_id[f])))
      return error_prefixed(err, "NVMe tier: creating a state file");
  const size_t mper = round_up(cp.max_numel * sizeof(float), 4096), sper = round_up(cp.max_sbytes, 4096);
  const size_t set = mper + 2 * sper;
  struct zo_nvme_buffer reg = {s->h.nv_buf, (size_t)s->pl.nvme_buffers * set};
  for (int b = 0; b < s->pl.nvme_buffers; b++) {
    uint8_t *base = s->h.nv_buf + (size_t)b * set;
    s->nvb[b].file[NV_MASTER] = base;
    s->nvb[b].file[NV_M] = base + mper;
    s->nvb[b].file[NV_V] = base + mper + sper;
  }
  /* Registration is an optimization: without it the store uses plain reads. */
  (void)zo_nvme_register_buffers(s->nv, &reg, 1);
  if ((err = s->be->stream_create(&s->io)) || (err = events_create(s->be, s->chunk_done, s->n_chunks)) ||
      (err = events_create(s->be, s->chunk_h2d, s->n_chunks)) ||
      (err = events_create(s->be, s->chunk_issued, s->n_chunks)))
    return err;
  s->nvme_planned = file_bytes[NV_MASTER] + file_bytes[NV_M] + file_bytes[NV_V];
  return nv_segs_build(s);
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
  /* The duplicate first: it is collective, and every rank reaches it. */
  zo_comm_t grad_comm = NULL;
  if (n_ranks > 1 && zo_comm_dup(c->comm, &grad_comm)) return NULL;
  struct zo_sched *s = calloc(1, sizeof *s);
  if (!s) {
    zo_comm_free(grad_comm);
    zo_error(-ENOMEM, "out of host memory for the scheduler");
    return NULL;
  }
  pthread_mutex_init(&s->err_mu, NULL);
  s->n_ranks = n_ranks;
  if (n_ranks > 1) {
    s->comm = c->comm;
    s->grad_comm = grad_comm;
  }
  s->loss_scale = 1.0;
  s->pl = c->placement;
  zo_placement_set_ranks(&s->pl, c->comm ? zo_comm_rank(c->comm) : 0, n_ranks);
  s->sharded = zo_placement_sharded(&s->pl);
  s->be = c->backend;
  s->B = c->B;
  s->T = c->T;
  const struct zo_model_layout lo = zo_placement_layout(&s->pl);
  s->m = zo_model_init_layout(&c->model, c->backend, c->B, c->T, &lo);
  if (!s->m) goto out_free;
  s->t = &s->m->table;
  s->L = s->m->cfg.n_layer;
  s->U = s->L + 2;
  s->K = s->pl.param_slots;
  s->acc = lo.grad_accum ? s->m->grads_acc : s->m->grads;
  s->micro = s->m->grads;
  s->sh = zo_placement_shard(&s->pl, s->t);
  if (s->pl.optimizer == ZO_OFFLOAD_CPU) {
    s->master_off = s->sh.lo;
    s->st_off = s->sh.slo;
  }
  if (s->sharded) {
    s->shards = calloc((size_t)n_ranks, sizeof *s->shards);
    s->rs_counts = calloc((size_t)n_ranks, sizeof *s->rs_counts);
    s->norm_parts = calloc((size_t)s->t->n_tensors, sizeof *s->norm_parts);
    if (!s->shards || !s->rs_counts || !s->norm_parts) {
      zo_error(-ENOMEM, "out of host memory for the scheduler");
      goto out_free;
    }
    for (int r = 0; r < n_ranks; r++) {
      s->shards[r] = zo_shard_of(&s->pl.opt, s->t, r, n_ranks);
      s->rs_counts[r] = s->shards[r].hi - s->shards[r].lo;
    }
    /* Every rank decides alike (the same placement), so the duplicates,
     * which are collective, are made by all or none. */
    s->pshard = s->K > 0;
    if (s->pshard) {
      s->params_off = s->sh.lo;
      if (zo_comm_dup(c->comm, &s->pg_comm)) goto out_free;
      s->pg_ready = calloc((size_t)s->K, sizeof *s->pg_ready);
      s->pg_free = calloc((size_t)s->K, sizeof *s->pg_free);
      s->pg_tasks = calloc((size_t)s->L, sizeof *s->pg_tasks);
      if (!s->pg_ready || !s->pg_free || !s->pg_tasks) {
        zo_error(-ENOMEM, "out of host memory for the scheduler");
        goto out_free;
      }
      for (int l = 0; l < s->L; l++) s->pg_tasks[l] = (struct task){s, l, 0};
      if (s->be->stream_create(&s->pg) || events_create(s->be, s->pg_ready, s->K) ||
          events_create(s->be, s->pg_free, s->K))
        goto out_free;
    }
    s->overlap = s->pl.grads_on_host && s->pl.overlap_comm;
    if (s->overlap) {
      const struct range head = unit_range(s->t, 0), tail = unit_range(s->t, s->L + 1);
      if (zo_comm_dup(c->comm, &s->rs_comm)) goto out_free;
      s->rs_ready = calloc((size_t)s->L + 1, sizeof *s->rs_ready);
      s->rs_tasks = calloc((size_t)s->L + 2, sizeof *s->rs_tasks);
      if (!s->rs_ready || !s->rs_tasks) {
        zo_error(-ENOMEM, "out of host memory for the scheduler");
        goto out_free;
      }
      s->grads_off = s->sh.lo;
      /* staging pointers once the pool is carved (below) */
      for (int l = 0; l < s->L; l++) s->rs_tasks[l] = (struct rs_task){s, s->t->layer_offset[l], s->t->layer_numel, NULL, 0};
      s->rs_tasks[s->L] = (struct rs_task){s, head.off, head.numel, NULL, 0};
      s->rs_tasks[s->L + 1] = (struct rs_task){s, tail.off, tail.numel, NULL, 0};
      if (s->be->stream_create(&s->rs) || events_create(s->be, s->rs_ready, s->L + 1) ||
          s->be->event_create(&s->rs_done) || events_create(s->be, s->stage_free, ZO_SCHED_GRAD_SLOTS) ||
          s->be->event_create(&s->stage_res_free))
        goto out_free;
    }
  }

  struct host_carver plan = {0};
  host_layout(&s->pl, s->t, c->B, c->T, &plan, &s->h);
  if (zo_host_pool_init(&s->pool, plan.total, c->host_budget, s->pl.pin, c->backend)) goto out_free;
  /* The OpenMP workers (and the stream threads created from here on) run on
   * the node that holds the host pool. A refused binding costs speed, not
   * correctness: warn and go on. */
  if (s->pool.numa_node >= 0 && zo_topology_bind_omp(s->pool.numa_node, NULL) != 0)
    fprintf(stderr, "zoffload: warning: %s\n", zo_last_error());
  struct host_carver carver = {.pool = &s->pool, .tags = &s->pool_tags};
  host_layout(&s->pl, s->t, c->B, c->T, &carver, &s->h);
  if (carver.err) goto out_free;
  s->soff = calloc((size_t)s->t->n_tensors, sizeof *s->soff);
  if (!s->soff) {
    zo_error(-ENOMEM, "out of host memory for the scheduler");
    goto out_free;
  }
  size_t soff = 0;
  for (int i = 0; i < s->t->n_tensors; i++) {
    const size_t n = s->t->tensors[i].numel;
    s->soff[i] = soff;
    soff += zo_optim_piece_nbytes(&s->pl.opt, zo_optim_is_8bit(&s->pl.opt, n), n);
  }
  if (s->pl.optimizer == ZO_OFFLOAD_CPU) {
    s->st_m = s->h.adam_m;
    s->st_v = s->h.adam_v;
  } else if (s->pl.optimizer == ZO_OFFLOAD_NONE) {
    /* Optimizer on the device: an arena of the scheduler's own (planned by
     * zo_sched_device_plan) for the per-tensor norm partials and, for 8-bit
     * states, m and v, since the model's arena carves fp32 m, v only. */
    const size_t sb = s->pl.opt.eightbit ? zo_optim_state_nbytes(&s->pl.opt, s->t) : 0;
    const size_t nb = (size_t)s->t->n_tensors * sizeof(double);
    void *pn, *pm = NULL, *pv = NULL;
    if (zo_arena_init(&s->opt_arena, c->backend, zo_arena_round(nb) + 2 * zo_arena_round(sb), "device") ||
        zo_arena_alloc(&s->opt_arena, nb, "gradient norm partials", &pn) ||
        (sb && (zo_arena_alloc(&s->opt_arena, sb, "AdamW8bit m", &pm) ||
                zo_arena_alloc(&s->opt_arena, sb, "AdamW8bit v", &pv))))
      goto out_free;
    s->norm_dev = pn;
    if (!(s->norm_host = calloc((size_t)s->t->n_tensors, sizeof *s->norm_host))) {
      zo_error(-ENOMEM, "out of host memory for the scheduler");
      goto out_free;
    }
    s->st_m = sb ? pm : (uint8_t *)s->m->adam_m;
    s->st_v = sb ? pv : (uint8_t *)s->m->adam_v;
  }

  zo_backend_t be = s->be;
  const int U = s->U, K = s->K > 0 ? s->K : 1;
  s->param_ready = calloc((size_t)U, sizeof(zo_event_t));
  s->opt_done = calloc((size_t)U, sizeof(zo_event_t));
  s->slot_free = calloc((size_t)K, sizeof(zo_event_t));
  s->slot_ready = calloc((size_t)K, sizeof(zo_event_t));
  s->slot_owner = calloc((size_t)K, sizeof(int));
  s->opt_tasks = calloc(2 * (size_t)U, sizeof *s->opt_tasks);
  s->acc_tasks = calloc((size_t)s->L + 2, sizeof *s->acc_tasks);
  s->n_valid = calloc((size_t)s->pl.grad_accum, sizeof(int));
  s->loss_sums = calloc(2 * (size_t)s->pl.grad_accum, sizeof(double));
  const int NCK = s->pl.ckpt_cpu ? s->pl.ckpt_blocks : 0;
  s->ck_saved = calloc((size_t)NCK + 1, sizeof(zo_event_t));
  s->n_ck = NCK;
  if (!s->param_ready || !s->opt_done || !s->slot_free || !s->slot_ready || !s->slot_owner ||
      !s->opt_tasks || !s->acc_tasks || !s->n_valid || !s->loss_sums || !s->ck_saved) {
    zo_error(-ENOMEM, "out of host memory for the scheduler");
    goto out_free;
  }
  if (be->stream_create(&s->cs) || be->stream_create(&s->h2d) || be->stream_create(&s->d2h) ||
      be->stream_create(&s->os) || events_create(be, s->param_ready, U) ||
      events_create(be, s->opt_done, U) || events_create(be, s->slot_free, K) ||
      events_create(be, s->slot_ready, K) || events_create(be, s->in_free, 2) ||
      events_create(be, s->gslot_ready, ZO_SCHED_GRAD_SLOTS) ||
      events_create(be, s->gslot_free, ZO_SCHED_GRAD_SLOTS) || be->event_create(&s->res_ready) ||
      be->event_create(&s->res_free) || be->event_create(&s->grads_done) ||
      be->event_create(&s->grads_ready) || be->event_create(&s->norm_done) ||
      be->event_create(&s->losses_ready) || be->event_create(&s->gather_wait) ||
      be->event_create(&s->gather_done) || events_create(be, s->ck_saved, NCK) ||
      be->event_create(&s->ck_out) || events_create(be, s->ck_free, 2) ||
      events_create(be, s->ck_ready, 2))
    goto out_free;
  s->ck_owner[0] = s->ck_owner[1] = -1;
  for (int k = 0; k < K; k++) s->slot_owner[k] = -1;
  for (int p = 0; p < 2; p++) {
    s->norm_tasks[p] = (struct task){s, 0, p};
    for (int u = 0; u < U; u++) s->opt_tasks[p * U + u] = (struct task){s, u, p};
  }
  const struct range head = unit_range(s->t, 0), tail = unit_range(s->t, U - 1);
  if (s->overlap) {
    for (int l = 0; l < s->L; l++) s->rs_tasks[l].src = s->h.stage[l % ZO_SCHED_GRAD_SLOTS];
    s->rs_tasks[s->L].src = s->h.stage_res;
    s->rs_tasks[s->L + 1].src = s->h.stage_res + head.numel;
  }
  for (int l = 0; l < s->L; l++)
    s->acc_tasks[l] = (struct acc_task){s, s->h.grads && !s->overlap ? s->h.grads + s->t->layer_offset[l] : NULL,
                                        s->h.stage[l % ZO_SCHED_GRAD_SLOTS], s->t->layer_numel};
  if (s->h.grads && !s->overlap) {
    s->acc_tasks[s->L] = (struct acc_task){s, s->h.grads + head.off, s->h.stage_res, head.numel};
    s->acc_tasks[s->L + 1] = (struct acc_task){
        s, s->h.grads + tail.off, s->h.stage_res ? s->h.stage_res + head.numel : NULL, tail.numel};
  }
  if (s->pl.optimizer == ZO_OFFLOAD_NVME && nvme_open(s)) goto out_free;
  s->hooks = (struct zo_model_hooks){.ctx = s, .block_begin = hook_begin, .block_end = hook_end};
  s->m->hooks = &s->hooks;
  return s;

out_free:
  zo_sched_free(s);
  return NULL;
}

int zo_sched_synchronize(struct zo_sched *s) {
  zo_backend_t be = s->be;
  int err = 0;
  zo_stream_t streams[7] = {s->cs, s->d2h, s->rs, s->os, s->pg, s->h2d, s->io};
  for (int i = 0; i < 7; i++)
    if (streams[i] && !err) err = be->stream_synchronize(streams[i]);
  if (err) return err;
  if (s->nv && !atomic_load(&s->err))
    for (int b = 0; b < s->pl.nvme_buffers && !err; b++) err = nv_buffer_drain(s, &s->nvb[b]);
  if (err) async_fail(s, err);
  return async_error(s);
}

void zo_sched_free(struct zo_sched *s) {
  if (!s) return;
  zo_backend_t be = s->be;
  if (s->cs) zo_sched_synchronize(s);
  if (be) {
    be->stream_destroy(s->cs);
    be->stream_destroy(s->h2d);
    be->stream_destroy(s->d2h);
    be->stream_destroy(s->os);
    be->stream_destroy(s->io);
    be->stream_destroy(s->rs);
    be->stream_destroy(s->pg);
    events_destroy(be, s->rs_ready, s->L + 1);
    events_destroy(be, s->stage_free, ZO_SCHED_GRAD_SLOTS);
    events_destroy(be, s->pg_ready, s->K);
    events_destroy(be, s->pg_free, s->K);
    const int U = s->U, K = s->K > 0 ? s->K : 1;
    events_destroy(be, s->param_ready, U);
    events_destroy(be, s->opt_done, U);
    events_destroy(be, s->slot_free, K);
    events_destroy(be, s->slot_ready, K);
    events_destroy(be, s->in_free, 2);
    events_destroy(be, s->gslot_ready, ZO_SCHED_GRAD_SLOTS);
    events_destroy(be, s->gslot_free, ZO_SCHED_GRAD_SLOTS);
    zo_event_t single[] = {s->res_ready, s->res_free, s->grads_done, s->grads_ready, s->norm_done,
                           s->losses_ready, s->gather_wait, s->gather_done, s->rs_done, s->stage_res_free};
    events_destroy(be, single, (int)(sizeof single / sizeof single[0]));
    events_destroy(be, s->chunk_done, s->n_chunks);
    events_destroy(be, s->chunk_h2d, s->n_chunks);
    events_destroy(be, s->chunk_issued, s->n_chunks);
    events_destroy(be, s->ck_saved, s->n_ck);
    zo_event_t ck[] = {s->ck_out, s->ck_free[0], s->ck_free[1], s->ck_ready[0], s->ck_ready[1]};
    events_destroy(be, ck, 5);
  }
  zo_nvme_free(s->nv);
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
  free(s->rs_ready);
  free(s->rs_tasks);
  free(s->pg_ready);
  free(s->pg_free);
  free(s->pg_tasks);
  zo_comm_free(s->pg_comm);
  zo_comm_free(s->rs_comm);
  zo_comm_free(s->grad_comm);
  free(s->chunks);
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
  pthread_mutex_destroy(&s->err_mu);
  free(s);
}

/* Synchronous copies of whole units between host buffers and where they live. */
static int copy_sync(struct zo_sched *s, void *dst, const void *src, size_t nbytes, enum zo_copy_kind k) {
  int err = s->be->memcpy_async(dst, src, nbytes, k, s->cs);
  return err ? err : s->be->stream_synchronize(s->cs);
}

/* ---- state I/O ------------------------------------------------------------
 * Parameters (fp32: the master copy, or the working copy where it is the
 * master), m and v are read and written where the placement keeps them; the
 * working copies (device units, host working copy, slots) are re-derived
 * from the master once, in zo_sched_state_done, so the state is written
 * exactly once. The NVMe files are accessed through a one-chunk cache per
 * file in staging set 0, written back when another chunk is needed. */

static const char *const part_names[ZO_STATE_N_PARTS] = {"parameters", "exp_avg", "exp_avg_sq"};

static size_t part_nbytes(const struct zo_sched *s, enum zo_state_part p) {
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

/* Writes the cached chunk of file f back if it changed. */
static int nv_flush(struct zo_sched *s, int f) {
  const int j = s->nv_cached[f];
  if (j < 0 || !s->nv_dirty[f]) return 0;
  const struct chunk *c = &s->chunks[j];
  int err = zo_nvme_write(s->nv, s->file_id[f], nv_off(c, f), s->nvb[0].file[f], nv_nbytes(c, f));
  if (err) return error_prefixed(err, "NVMe tier: writing the state");
  s->nv_valid[(size_t)f * (size_t)s->n_chunks + (size_t)j] = true;
  s->nv_dirty[f] = false;
  return 0;
}

/* Chunk j of file f into the cache. A chunk never written reads as zeros;
 * one about to be overwritten whole (whole) is not read at all. */
static int nv_fetch(struct zo_sched *s, int f, int j, bool whole) {
  if (s->nv_cached[f] == j) return 0;
  int err = nv_flush(s, f);
  if (err) return err;
  s->nv_cached[f] = -1;
  const struct chunk *c = &s->chunks[j];
  void *buf = s->nvb[0].file[f];
  if (!whole && s->nv_valid[(size_t)f * (size_t)s->n_chunks + (size_t)j]) {
    if ((err = zo_nvme_read(s->nv, s->file_id[f], nv_off(c, f), buf, nv_nbytes(c, f))))
      return error_prefixed(err, "NVMe tier: reading the state");
  } else if (!whole) {
    memset(buf, 0, nv_nbytes(c, f));
  }
  s->nv_cached[f] = j;
  return 0;
}

/* Bytes [off, off + n) of file f's part through the cache; bytes no segment
 * holds (the padding after 8-bit codes) read as zero and are not stored. */
static int nv_access(struct zo_sched *s, int f, size_t off, uint8_t *buf, size_t n, bool write) {
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
    int err = nv_fetch(s, f, sg->chunk, whole);
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

/* Bytes of this rank's shard, where they live. */
static int local_access(struct zo_sched *s, enum zo_state_part p, size_t off, uint8_t *buf, size_t n, bool write) {
  bool dev;
  size_t first;
  uint8_t *base = part_base(s, p, &dev, &first);
  int err = 0;
  if (!base) {
    err = nv_access(s, p == ZO_STATE_PARAMS ? NV_MASTER : p == ZO_STATE_M ? NV_M : NV_V, off, buf, n, write);
  } else {
    ZO_ASSERT(off >= first);
    base += off - first;
    if (dev) err = write ? copy_sync(s, base, buf, n, ZO_COPY_H2D) : copy_sync(s, buf, base, n, ZO_COPY_D2H);
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
  if (s->pl.optimizer == ZO_OFFLOAD_NONE) {
    if (mixed && hi > lo)
      s->be->cast(zo_model_at(s->m, s->m->params, lo), s->m->dtype, s->m->master + lo, ZO_F32, hi - lo, s->cs);
    err = s->be->stream_synchronize(s->cs);
  } else if (s->pl.optimizer == ZO_OFFLOAD_CPU) {
    if (mixed) zo_cpu_cast(host_params_at(s, lo), s->pl.dtype, master_at(s, lo), ZO_F32, hi - lo);
    else if (s->h.params && s->h.params != s->h.master)
      memcpy(host_params_at(s, lo), master_at(s, lo), (hi - lo) * sizeof(float));
    for (int u = 0; u < s->U && !err && !after; u++) {
      void *dev = dev_unit_params(s, u);
      size_t a, b;
      unit_owned(s, u, &a, &b);
      if (dev && b > a)
        err = copy_sync(s, (uint8_t *)dev + (a - unit_range(s->t, u).off) * e,
                        s->h.params ? host_params_at(s, a) : (void *)master_at(s, a), (b - a) * e, ZO_COPY_H2D);
    }
  } else {
    /* NVMe: chunk by chunk (a chunk lies inside one unit). */
    ZO_ASSERT(s->h.params || !mixed);
    for (int j = 0; j < s->n_chunks && !err; j++) {
      const struct chunk *c = &s->chunks[j];
      if ((err = nv_fetch(s, NV_MASTER, j, false))) break;
      const float *master = s->nvb[0].file[NV_MASTER];
      if (s->h.params) zo_cpu_cast(host_params_at(s, c->off), s->pl.dtype, master, ZO_F32, c->numel);
      uint8_t *dev = dev_unit_params(s, c->unit);
      if (dev && !after)
        err = copy_sync(s, dev + (c->off - unit_range(s->t, c->unit).off) * e,
                        s->h.params ? host_params_at(s, c->off) : (const void *)master, c->numel * e, ZO_COPY_H2D);
    }
  }
  if (!s->sharded) return err;
  if (s->pshard) {
    /* Blocks are gathered as slots load them; the resident units' owned
     * parts are on the device (above): every owner's part to every rank. */
    const int units[2] = {0, s->U - 1};
    for (int i = 0; i < 2; i++) { /* collective: even after a failure */
      const struct range r = unit_range(s->t, units[i]);
      const int x = exchange_range(s, s->comm, dev_unit_params(s, units[i]), r.off, r.numel, false);
      if (!err) err = x;
    }
    return err;
  }
  /* Collective: runs even after a local failure, so that nobody waits. */
  const int ge = exchange_range(s, s->comm, gather_buf(s), 0, s->t->numel, false);
  if (!err) err = ge;
  for (int u = 0; u < s->U && !err && after; u++) {
    void *dev = dev_unit_params(s, u);
    const struct range r = unit_range(s->t, u);
    if (dev) err = copy_sync(s, dev, host_params_at(s, r.off), r.numel * e, ZO_COPY_H2D);
  }
  return err;
}

int zo_sched_state_done(struct zo_sched *s) {
  if (!s->st_active) return 0;
  int err = 0;
  if (s->nv) {
    for (int f = 0; f < NV_FILES && !err; f++) err = nv_flush(s, f);
    for (size_t i = 0; s->st_wrote && !err && i < NV_FILES * (size_t)s->n_chunks; i++)
      if (!s->nv_valid[i])
        err = zo_error(-EINVAL, "the training state on NVMe is incomplete: the %s of chunk %zu were never "
                                "written (set the whole state before training)",
                       part_names[i / (size_t)s->n_chunks], i % (size_t)s->n_chunks);
  }
  if (!err && s->st_params_wrote) err = working_copies_sync(s);
  if (s->nv) {
    for (int f = 0; f < NV_FILES; f++) s->nv_cached[f] = -1;
    nv_reprime(s);
  }
  for (int k = 0; k < s->K; k++) s->slot_owner[k] = -1;
  s->st_active = false;
  if (err) return error_prefixed(err, "committing the training state");
  return s->be->stream_synchronize(s->cs);
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
  if (s->nv && k == 0) nv_prime(s, s->parity ^ 1);
  /* The LM head's backward runs chunk by chunk inside the forward. The loss
   * scale is a power of two, so scaling dloss is exact. Over N ranks the
   * denominator is the global micro-batch's tokens, the same float as one
   * process with N times the rows computes. */
  const float dloss = (float)s->loss_scale / ((float)(BT * (size_t)s->n_ranks) * (float)K);
  zo_model_forward_train(s->m, s->h.in[b], s->h.tg[b], s->B, s->T, dloss, s->cs);
  CHECK_Q(s->be->event_record(s->in_free[b], s->cs));
  CHECK_Q(s->be->memcpy_async(s->h.losses + (size_t)k * BT, s->m->losses, BT * sizeof(float),
                              ZO_COPY_D2H, s->cs));
  zo_model_backward(s->m, s->B, s->T, dloss, s->cs);
  s->batch_buf ^= 1;
  if (k == K - 1) CHECK_Q(s->be->event_record(s->losses_ready, s->cs));
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

/* sums[0, n) (loss sums) and sums[n, 2n) (token counts) added over the
 * ranks, on the caller's communicator. */
static int ranks_sum(struct zo_sched *s, double *sums, int n) {
  const double t0 = zo_time_s();
  int err = zo_comm_allreduce(s->comm, sums, 2 * (size_t)n, ZO_F64, ZO_COMM_SUM);
  atomic_fetch_add(&s->comm_ns, ns_since(t0));
  return err ? error_prefixed(err, "summing the losses over the ranks") : 0;
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
  if (s->nv && s->n_chunks && (err = be->event_synchronize(s->chunk_h2d[s->n_chunks - 1]))) return err;
  if ((err = async_error(s))) return err;
  s->parity ^= 1;
  struct step_args *sa = &s->step[s->parity];
  sa->t = t;
  sa->hp = *hp;
  sa->max_norm = max_norm;
  sa->loss_scale = s->loss_scale;
  sa->skip_nonfinite = s->pl.dtype == ZO_F16;
  sa->skip = false;
  err = queue_optimizer(s);
  s->stepped = true; /* work was queued even on failure */
  if (err) return err;
  if (s->K) slots_invalidate(s);
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
    if ((err = ranks_sum(s, ls, K))) return err;
    for (int k = 0; k < K; k++) sum += (ls[K + k] > 0 ? ls[k] / ls[K + k] : 0.0) / K;
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

void zo_sched_set_loss_scale(struct zo_sched *s, double scale) {
  ZO_ASSERT(scale > 0.0);
  s->loss_scale = scale;
}

zo_stream_t zo_sched_stream(struct zo_sched *s) { return s->cs; }

int zo_sched_eval(struct zo_sched *s, double *loss) {
  const size_t BT = (size_t)s->B * (size_t)s->T;
  int32_t *in = s->h.in[s->batch_buf], *tg = s->h.tg[s->batch_buf];
  int n = 0;
  for (size_t i = 0; i < BT; i++) n += tg[i] >= 0;
  zo_model_forward(s->m, in, tg, s->B, s->T, s->cs);
  CHECK_Q(s->be->event_record(s->in_free[s->batch_buf], s->cs));
  s->batch_buf ^= 1;
  float *out = s->h.losses; /* free: the last step's losses were summed */
  int err = s->be->memcpy_async(out, s->m->losses, BT * sizeof(float), ZO_COPY_D2H, s->cs);
  if (!err) err = s->be->stream_synchronize(s->cs);
  if (err) return err;
  if (s->comm) {
    double ls[2] = {loss_sum(out, BT), n};
    if ((err = ranks_sum(s, ls, 1))) return err;
    *loss = ls[1] > 0 ? ls[0] / ls[1] : 0.0;
  } else {
    *loss = mean_loss(out, BT, n);
  }
  return async_error(s);
}

void zo_sched_stats(const struct zo_sched *s, struct zo_sched_stats *out) {
  memset(out, 0, sizeof *out);
  out->device_planned = s->m->arena.capacity + s->opt_arena.capacity;
  out->device_peak = s->m->arena.peak + s->opt_arena.peak;
  out->host_planned = s->pool.capacity;
  out->host_peak = s->pool.peak;
  out->nvme_planned = s->nvme_planned;
  out->optimizer_s = (double)atomic_load(&s->opt_ns) * 1e-9;
  out->accumulate_s = (double)atomic_load(&s->acc_ns) * 1e-9;
  out->nvme_wait_s = (double)atomic_load(&s->nv_wait_ns) * 1e-9;
  out->comm_s = (double)atomic_load(&s->comm_ns) * 1e-9;
  out->pinned = s->pool.pinned;
}

int zo_sched_device_category(const char *group) {
  static const struct {
    const char *prefix;
    int cat;
  } map[] = {
      {"parameter slot", ZO_MEM_BUFFERS}, {"gradient slot", ZO_MEM_BUFFERS},
      {"parameters", ZO_MEM_PARAMS},      {"gradient", ZO_MEM_GRADS}, /* "gradients", "... accumulator" */
      {"AdamW m", ZO_MEM_ADAM_M},         {"AdamW8bit m", ZO_MEM_ADAM_M},
      {"AdamW v", ZO_MEM_ADAM_V},         {"AdamW8bit v", ZO_MEM_ADAM_V},
      {"master weights", ZO_MEM_MASTER},  {"activations", ZO_MEM_ACTIVATIONS},
      {"input tokens", ZO_MEM_ACTIVATIONS}, {"target tokens", ZO_MEM_ACTIVATIONS},
      {"logits", ZO_MEM_ACTIVATIONS},     {"losses", ZO_MEM_ACTIVATIONS},
      {"checkpoint input buffer", ZO_MEM_ACTIVATIONS}, {"backward scratch", ZO_MEM_WORKSPACE},
      {"workspace", ZO_MEM_WORKSPACE}, /* an architecture's constant tables (Llama's rotary cos, sin) */
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strncmp(group, map[i].prefix, strlen(map[i].prefix)) == 0) return map[i].cat;
  return -1;
}

static void device_memory(const struct zo_arena *a, struct zo_sched_mem *out) {
  const int D = ZO_TIER_DEVICE;
  for (int g = 0; g < a->n_groups; g++) {
    const int cat = zo_sched_device_category(a->groups[g].name);
    if (cat < 0) {
      out->unclassified[D] += a->groups[g].peak;
      continue;
    }
    out->current[D][cat] += a->groups[g].used;
    out->peak[D][cat] += a->groups[g].peak;
  }
  out->capacity[D] += a->capacity;
  out->used[D] += a->used;
  out->peak_total[D] += a->peak;
  out->n_device_carves += a->n_carves;
}

int zo_sched_memory(const struct zo_sched *s, struct zo_sched_mem *out) {
  memset(out, 0, sizeof *out);
  /* Each group's peak is its own high-water mark; summed per category they
   * are the category's peak because the arenas are carved once and never
   * reset while the scheduler lives. */
  device_memory(&s->m->arena, out);
  device_memory(&s->opt_arena, out);

  const int H = ZO_TIER_HOST;
  for (int i = 0; i < s->pool.n_carves; i++) {
    const int cat = s->pool_tags.cat[i];
    if (cat < 0)
      out->unclassified[H] += s->pool.carves[i].nbytes;
    else
      out->current[H][cat] += s->pool.carves[i].nbytes;
  }
  memcpy(out->peak[H], s->pool_tags.peak, sizeof out->peak[H]);
  out->capacity[H] = s->pool.capacity;
  out->used[H] = s->pool.used;
  out->peak_total[H] = s->pool.peak;

  if (!s->nv) return 0;
  const int N = ZO_TIER_NVME;
  static const int nv_cat[NV_FILES] = {ZO_MEM_MASTER, ZO_MEM_ADAM_M, ZO_MEM_ADAM_V};
  for (int f = 0; f < NV_FILES; f++) {
    struct stat st;
    const char *path = zo_nvme_file_path(s->nv, s->file_id[f]);
    if (stat(path, &st) != 0)
      return zo_error(-errno, "memory report: cannot stat NVMe state file %s: %s", path, strerror(errno));
    out->current[N][nv_cat[f]] += (size_t)st.st_size;
    out->peak[N][nv_cat[f]] += (size_t)st.st_size;
    out->used[N] += (size_t)st.st_size;
  }
  out->capacity[N] = out->peak_total[N] = out->used[N];
  return 0;
}

int zo_sched_time_io(struct zo_sched *s, double *seconds) {
  int err = zo_sched_synchronize(s);
  if (err) return err;
  const double t0 = zo_time_s();
  if (s->nv) {
    /* The step's pipeline without the update: d chunks read ahead, each
     * chunk written back as soon as read, its buffer refilled once the
     * write is done. */
    const int n = s->n_chunks, d = s->nv_depth, nbuf = s->pl.nvme_buffers;
    for (int j = 0; j < d && !err; j++) err = nv_read_async(s, j, &s->nvb[j % nbuf]);
    for (int j = 0; j < n && !err; j++) {
      struct nv_buffer *b = &s->nvb[j % nbuf];
      err = nv_wait_all(s, b->rreq);
      b->reading = false;
      if (!err) err = nv_write_async(s, j, b);
      if (!err && j + d < n) {
        struct nv_buffer *nb = &s->nvb[(j + d) % nbuf];
        if (!(err = nv_drain_writes(s, b)) && !(err = nv_drain_writes(s, nb))) err = nv_read_async(s, j + d, nb);
      }
    }
    for (int b = 0; b < nbuf; b++) {
      int e = nv_buffer_drain(s, &s->nvb[b]);
      if (e && !err) err = e;
    }
  } else if (s->pl.optimizer != ZO_OFFLOAD_NONE) {
    /* Gradients out, parameters in (slot loads: forward and backward of
     * every micro-batch), each on its own stream as in a step. */
    const size_t nb = s->t->numel * sizeof(float), e = s->m->esize;
    CHECK_Q(s->be->memcpy_async(s->overlap ? s->h.stage_res : s->h.grads, s->acc ? s->acc : s->m->grads,
                                s->pl.grads_on_host ? (s->m->head_numel + s->m->tail_numel) * sizeof(float) : nb,
                                ZO_COPY_D2H, s->d2h));
    for (int u = 0; u < s->U; u++) {
      const struct range r = unit_range(s->t, u);
      void *dev = dev_unit_params(s, u);
      size_t a = r.off, b = r.off + r.numel;
      /* a sharded master or working copy: this rank's part */
      if (!s->h.params || s->pshard) unit_owned(s, u, &a, &b);
      if (dev && b > a)
        CHECK_Q(s->be->memcpy_async((uint8_t *)dev + (a - r.off) * e,
                                    s->h.params ? host_params_at(s, a) : (void *)master_at(s, a), (b - a) * e,
                                    ZO_COPY_H2D, s->h2d));
      if (s->pl.grads_on_host && u > 0 && u < s->U - 1)
        for (int k = 0; k < s->pl.grad_accum; k++)
          CHECK_Q(s->be->memcpy_async(s->h.stage[0] ? s->h.stage[0] : s->h.grads + r.off, s->m->grad_slots[0],
                                      r.numel * sizeof(float), ZO_COPY_D2H, s->d2h));
      if (!dev)
        for (int k = 0; k < 2 * s->pl.grad_accum; k++)
          CHECK_Q(s->be->memcpy_async(s->m->param_slots[0], s->pshard ? pg_buf(s, 0) : host_params_at(s, r.off),
                                      r.numel * e, ZO_COPY_H2D, s->h2d));
    }
    if (!err) err = s->be->stream_synchronize(s->h2d);
    if (!err) err = s->be->stream_synchronize(s->d2h);
  }
  *seconds = zo_time_s() - t0;
  for (int k = 0; k < s->K; k++) s->slot_owner[k] = -1; /* slot 0 was overwritten */
  nv_reprime(s);
  return err;
}
