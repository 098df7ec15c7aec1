/* The scheduler's private header: struct zo_sched, the task records handed
 * to host functions, and the helpers the files of engine/sched/ share.
 * Nothing outside engine/sched/ includes it; the public interface is
 * zo/sched.h. The files, one job each:
 *   sched.c       the conductor: init (staged), free, synchronize, a
 *                 micro-batch, the end of a step, eval
 *   placement.c   placement from the config, shards, the optimizer-state format
 *   layout.c      units, NVMe chunk plans, the host layout; the three plans
 *   hooks.c       the model's block hooks: slots, gradients out, checkpoints
 *   step.c        one step's queueing order (sched_queue_optimizer)
 *   update.c      norm and AdamW / AdamW8bit updates, host and device
 *   nvme.c        the NVMe pipeline, the state files and their cache
 *   tier.c        the Infinity tier: the blocks' parameters and gradients on NVMe
 *   base_nvme.c   a frozen base (LoRA) on NVMe: its read-only parameter file
 *   collective.c  every collective across ranks, and init's ranks stage
 *   state.c       state I/O and the rank-0 serving protocol
 *   stats.c       counters, the memory report, the I/O timing
 *   lora_step.c   the trained set of a frozen base: LoRA adapters' step */
#ifndef ZO_ENGINE_SCHED_INTERNAL_H
#define ZO_ENGINE_SCHED_INTERNAL_H

#include "zo/sched.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "zo/host.h"
#include "zo/nvme.h"
#include "zo/trace.h"

enum { NV_MASTER, NV_M, NV_V, NV_FILES };

/* ---- optimizer state format --------------------------------------------- */

static inline size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* ---- units and chunks ---------------------------------------------------- */

struct range {
  size_t off, numel; /* elements of the table */
};

/* param_nvme: the first blocks, whole, that offload_param.max_in_cpu keeps
 * in the host pool. */
static inline int cpu_blocks(const struct zo_placement *pl, const struct zo_tensor_table *t) {
  if (!pl->param_nvme || !t->layer_numel) return 0;
  const size_t n = pl->param_max_in_cpu / t->layer_numel;
  return n < (size_t)t->n_layer ? (int)n : t->n_layer;
}

static inline struct range unit_range(const struct zo_tensor_table *t, int u) {
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
  uint64_t pfile_off; /* bytes into the parameter file (param_nvme, block chunks only) */
  uint64_t gfile_off; /* bytes into the gradient file (grads_nvme, block chunks only) */
};

struct chunk_plan {
  int n_chunks, n_pieces;
  size_t max_numel;  /* elements of the largest chunk */
  size_t max_sbytes; /* state bytes of m of the largest chunk */
  size_t mfile, sfile; /* bytes of the master file and of each state file */
  size_t pfile, gfile; /* bytes of the parameter and gradient files: the blocks' chunks,
                        * working dtype and fp32, each chunk at an aio.block_size multiple */
  size_t block_pbytes, block_gbytes; /* bytes of the largest block region of each (all alike
                                      * in one process; a sharded run's blocks hold its parts) */
  int run_unit;                      /* the block whose region run_pbytes, run_gbytes sum */
  size_t run_pbytes, run_gbytes;
};

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

struct host_bufs {
  void *params;      /* (numel) working parameters (working dtype): with param slots
                      * (== master for fp32 on cpu), and the rounded copy the
                      * device loads in mixed precision with the optimizer offloaded */
  float *master;     /* (numel) fp32 master weights, optimizer on cpu */
  uint8_t *adam_m, *adam_v; /* (zo_optim_state_nbytes) canonical layout, optimizer on cpu */
  float *grads;      /* (numel) accumulated gradients, optimizer offloaded; grads_nvme:
                      * (head + tail) the resident ranges' only, head first */
  float *stage[ZO_SCHED_GRAD_SLOTS]; /* (layer_numel) micro-batch gradients, grads on host, grad_accum > 1 */
  float *stage_res;  /* (head + tail) micro-batch gradients of the resident ranges (not with
                      * grads_nvme: those pass through stage[0] in pieces) */
  uint8_t *nv_buf;   /* (nvme_buffers) sets of NVMe staging: master, m, v of one chunk,
                      * each rounded up to 4096 bytes; grads_nvme: its gradients; param_nvme
                      * in mixed precision: its rounded working parameters */
  uint8_t *pring;    /* (param_slots, block_pbytes) param_nvme: ring of blocks read from
                      * the parameter file, in its layout, one per device slot */
  uint8_t *pcpu;     /* (cpu_blocks, layer_numel) working dtype: param_nvme, the blocks
                      * max_in_cpu keeps in host memory */
  uint8_t *gio;      /* (block_gbytes) grads_nvme: one block's gradients in the file's layout */
  int32_t *in[2], *tg[2]; /* (B*T) double-buffered tokens */
  float *losses;     /* (grad_accum, B*T) */
  uint8_t *act_ckpt; /* (ckpt_blocks, B*T, C) working dtype: inputs of checkpointed blocks,
                      * cpu_checkpointing */
  uint8_t *block_gather;  /* (param_slots, layer_numel) working dtype: blocks gathered from their
                      * owners, ZeRO-3 over ranks */
  void *emb_in;      /* (B*T, C) working dtype: the embedding's rows of a micro-batch,
                      * gathered on the host (m->res_phead == 0) */
  void *emb_params;  /* (Vp, C) working dtype: the embedding's weights when no host working
                      * copy holds them (param_nvme, m->res_phead == 0) */
  void *head_params; /* (Vp, C) working dtype: the streamed LM head's weights when no host
                      * working copy holds them (param_nvme, m->layout.head_stream) */
  void *emb_dout;    /* (B*T, C) working dtype: d(embedding output) of a micro-batch, the
                      * embedding's gradient summed on the host (m->res_ghead == 0) */
  float *emb_stage;  /* (B*T, C) its rows summed per distinct token */
  int32_t *emb_map;  /* (B*T) each position's row of emb_stage */
  int32_t *emb_uniq; /* (B*T) the distinct tokens, in order of first position */
  int32_t *emb_row;  /* (Vp) a token's row of emb_stage, -1 none (kept all -1 between uses) */
  uint8_t *st_stage; /* (st_bytes) state I/O staging: init, resume, saves,
                      * fresh states */
  size_t st_bytes;   /* zo_state_stage_bytes */
};

/* ---- task records (host-function arguments) ------------------------------ */

/* One step's optimizer arguments, double-buffered by step parity
 * (s->step[parity]): written by step_end, read by the optimizer stream's
 * host functions of that step. */
struct step_args {
  long t;                     /* AdamW step (1-based, applied steps only) */
  struct zo_adamw_hparams hp; /* learning rate of this step, betas, eps, weight decay */
  double max_norm;            /* gradient clipping threshold; <= 0 none */
  double loss_scale;          /* the gradients are scaled by it (fp16); 1 otherwise */
  bool skip_nonfinite;        /* a non-finite gradient skips the step (fp16) */
  double norm;                /* set by sched_norm_fn: L2 norm of the unscaled gradients */
  float coef;                 /* set by sched_norm_fn: clip coefficient over the loss scale, what scales g */
  bool skip;                  /* set by sched_norm_fn: this step's update is skipped */
};

/* Argument of a per-unit, per-block or per-step host function. */
struct task {
  struct zo_sched *s;
  int index;  /* unit, block or chunk */
  int parity; /* step parity: which struct step_args */
};

/* sched_acc_fn: dst[0, n) += src[0, n) (fp32 gradients, host). */
struct acc_task {
  struct zo_sched *s;
  float *dst;       /* (n) accumulated gradients in h.grads */
  const float *src; /* (n) one micro-batch's gradients, staged */
  size_t n;         /* elements */
};

/* The embedding's gradient of one micro-batch, summed on the host from
 * h.emb_dout and the tokens of buffer b (emb_fn). */
struct emb_task {
  struct zo_sched *s;
  int b;      /* token buffer h.in[b] */
  bool first; /* the step's first micro-batch: the accumulator starts at zero */
};

/* The embedding's rows of one micro-batch gathered on the host
 * (emb_gather_fn) from the tokens of buffer b. */
struct emb_gather_task {
  struct zo_sched *s;
  int b;
};

/* A range of the table's gradients to reduce to its owners (reduce
 * stream): elements [off, off + n), staged at src; runs counts the task's
 * runs (on the reduce thread only), so that the first micro-batch of a
 * step copies where the later ones add. */
struct reduce_task {
  struct zo_sched *s;
  size_t off, n; /* elements of the table */
  float *src;    /* (n) staging buffer */
  long runs;     /* times run so far */
};

/* A run of one state part's bytes (canonical layout) stored contiguously in
 * an NVMe chunk: part bytes [canon, canon + nbytes) at byte koff of chunk
 * `chunk`'s region of the file. */
struct nv_seg {
  size_t canon, nbytes, koff; /* bytes */
  int chunk;                  /* index into s->chunks */
};

/* One NVMe staging set: a chunk's master, m and v. */
struct nv_buffer {
  void *file[NV_FILES];              /* master (chunk floats), m, v (chunk state bytes), 4096-aligned */
  struct zo_nvme_req rreq[NV_FILES]; /* outstanding reads, one per file */
  struct zo_nvme_req wreq[NV_FILES]; /* outstanding writes, one per file */
  bool reading, writing;             /* requests outstanding; ordered by the chunk events */
  float *grad;                       /* (chunk floats) grads_nvme: the chunk's gradients, read by its update */
  struct zo_nvme_req greq;           /* grads_nvme: their read, issued by the previous chunk's update */
  bool greading;                     /* greq outstanding */
  void *work;                        /* (chunk, working dtype) param_nvme, mixed precision: rounded parameters */
  struct zo_nvme_req preq;           /* param_nvme: the chunk's parameter write (sched_nv_write_fn issues and waits) */
};

/* grads_nvme_fn: block `block`'s gradients of micro-batch k, staged at stage,
 * into the gradient file (d2h stream). */
struct gio_task {
  struct zo_sched *s;
  int block, k;
  float *stage; /* (layer_numel) */
};

/* Host-function argument of an NVMe refill (I/O stream) or update (optimizer stream). */
struct nv_task {
  struct zo_sched *s;
  int chunk;    /* index into s->chunks */
  int parity;   /* step parity for struct step_args */
  int buf;      /* staging buffer of the chunk */
  int pred_buf; /* refill: buffer of chunk g - d whose writes must finish; -1 none */
};

/* ---- the scheduler ------------------------------------------------------- */

/* Units: 0 = embeddings, 1..L = blocks, U - 1 = L + 1 = final norm (and an
 * untied head). The eight streams (each a worker thread on the CPU backend,
 * a CUDA stream on the GPU; named so on the timeline) and what runs on them:
 *   compute       forward and backward (the model's ops, the hooks' waits)
 *   h2d           host -> device: parameter slots, updated units, checkpointed inputs
 *   d2h           device -> host: gradients (and sched_acc_fn adds), checkpointed inputs
 *   optim         the optimizer: gradient sum over ranks, norm, updates, the exchange
 *   nvme_io       NVMe refills and write-backs (optimizer on NVMe only)
 *   param_io      parameter reads from NVMe into the slot ring (param_nvme only)
 *   reduce        per-block gradient reductions onto their owners (overlap_comm)
 *   block_gather  ZeRO-3 block gathers from their owners (sharded parameters)
 * Streams that a placement does not use are NULL. */
struct zo_sched {
  struct zo_placement pl;          /* where each state class lives, this rank's */
  zo_backend_t be;
  struct zo_model *m;              /* the model; its arena is the device plan */
  const struct zo_tensor_table *t; /* m's tensor table */
  int L;                           /* blocks (n_layer) */
  int U;                           /* units: L + 2 */
  int n_slots;                     /* parameter slots on the device (pl.param_slots); 0: blocks resident */
  int n_hp;                        /* LM head pieces streamed through the slots (m->layout.head_stream:
                                    * m->head_pieces), else 0; the slot ring's entries are the
                                    * blocks 0..L-1, then the pieces L..L+n_hp-1 */
  size_t head_off;                 /* table element of the LM head's weights (n_hp > 0) */
  int B, T;                        /* micro-batch rows, tokens per row */
  struct zo_model_hooks hooks;     /* sched_hook_begin / sched_hook_end, ctx = this */
  zo_stream_t compute, h2d, d2h, optim; /* see above */
  zo_stream_t nvme_io;             /* NVMe refills and writes (optimizer on NVMe), else NULL */
  struct zo_host_pool pool;        /* the host tier: one allocation, carved by sched_host_layout */
  struct host_tags pool_tags;      /* the pool's carves by category */
  struct host_bufs h;              /* the pool's buffers */
  float *acc;                      /* (numel) device gradient accumulator (gradients on the device) */
  float *micro;                    /* (numel) device micro-batch gradients, grad_accum > 1 (== acc otherwise) */
  uint8_t *st_m, *st_v;            /* m, v in the canonical layout where they live (device, cpu); NULL for NVMe */
  size_t *soff;                    /* (n_tensors) byte offset of each tensor in the canonical layout */
  struct zo_arena opt_arena;       /* device, optimizer on the device: norm partials, 8-bit m, v */
  double *norm_dev;                /* (n_tensors) device: per-tensor sums of squares of the gradients */
  double *norm_host;               /* (n_tensors) their host copy, summed in table order */
  struct zo_lora_device *lora;     /* pl.frozen: the adapters, the trained set (lora_step.c); else NULL */
  size_t lora_numel;               /* their elements */
  double lora_sumsq;               /* their gradients' sum of squares, copied from the device */
  /* events: "recorded when ..." */
  zo_event_t *param_ready;         /* (U) unit's device (or host, for slotted blocks) copy updated */
  zo_event_t *opt_done;            /* (U) unit's update finished (optim) */
  zo_event_t in_free[2];           /* token buffer b read by the forward (compute) */
  zo_event_t *slot_free;           /* (n_slots, at least 1) slot's block done with on compute */
  zo_event_t *slot_ready;          /* (n_slots, at least 1) slot loaded (h2d) */
  int *slot_owner;                 /* (n_slots, at least 1) block in the slot, -1 none or stale */
  zo_event_t gslot_ready[ZO_SCHED_GRAD_SLOTS]; /* gradient slot's block backward done (compute) */
  zo_event_t gslot_free[ZO_SCHED_GRAD_SLOTS];  /* gradient slot copied out (d2h) */
  zo_event_t res_ready;            /* resident ranges' gradients complete (compute) */
  zo_event_t res_free;             /* resident ranges' gradients copied out (d2h) */
  zo_event_t grads_done;           /* stage 1: last micro-batch accumulated on the device (compute) */
  zo_event_t grads_ready;          /* the step's gradients where the optimizer reads them */
  zo_event_t norm_done;            /* norm, clip coefficient and skip decided (optim) */
  zo_event_t losses_ready;         /* the step's per-token losses on the host (compute) */
  zo_event_t *chunk_done;          /* (n_chunks) NVMe: chunk updated (optim) */
  zo_event_t *chunk_h2d;           /* (n_chunks) NVMe: chunk copied to the device (h2d) */
  zo_event_t *chunk_issued;        /* (n_chunks) NVMe: chunk's reads issued (nvme_io) */
  /* cpu_checkpointing: block l's input lives in the model's ckpt_in[l % 2] */
  zo_event_t *ck_saved;            /* (ckpt_blocks) input of block l copied to the host (d2h) */
  zo_event_t ck_out;               /* recorded on compute where a block's input may leave */
  zo_event_t ck_free[2];           /* input buffer read for the last time (compute) */
  zo_event_t ck_ready[2];          /* input buffer loaded (h2d) */
  int ck_owner[2];                 /* block whose input a buffer holds (loaded), -1 none */
  int n_ck;                        /* events in ck_saved */
  /* host function arguments */
  struct task *opt_tasks;          /* (2, U) sched_opt_unit_fn, by parity */
  struct nv_task *nv_refill;       /* (2, n_chunks) nv_refill_fn, by parity */
  struct nv_task *nv_update;       /* (2, n_chunks) sched_nv_update_fn and sched_nv_write_fn, by parity */
  struct task norm_tasks[2];       /* sched_norm_fn, by parity */
  struct acc_task *acc_tasks;      /* (L + 2 + n_hp): blocks, then head, tail, the LM head's pieces */
  struct step_args step[2];        /* by parity */
  double loss_scale;               /* of the micro-batches being queued (zo_sched_set_loss_scale) */
  size_t step_targets;             /* trained targets of the step being queued, 0: all (zo_sched_set_step_targets) */
  int parity;                      /* the current step's parity */
  bool stepped;                    /* an optimizer step has been queued */
  /* micro-batch state */
  int k;                           /* micro-batch of the step being queued, 0 .. grad_accum - 1 */
  int batch_buf;                   /* token buffer the next micro-batch reads, 0 or 1 */
  int *n_valid;                    /* (grad_accum) tokens with a target */
  /* NVMe */
  zo_nvme_t nv;                    /* the store; NULL unless the optimizer is on NVMe */
  int file_id[NV_FILES];           /* master, m, v files */
  struct chunk *chunks;            /* (n_chunks) in forward order */
  int n_chunks;
  struct piece *pieces;            /* (n_pieces) of the chunks, in order */
  int n_pieces;
  int nv_depth;                    /* chunks read ahead: min(nvme_buffers, n_chunks) */
  long nv_base;                    /* global index of the next step's first chunk */
  bool nv_primed;                  /* the next step's first nv_depth refills are queued */
  struct nv_buffer *nvb;           /* (nvme_buffers) staging sets in h.nv_buf */
  size_t nvme_planned;             /* bytes of the files */
  int pfile_id, gfile_id;          /* parameter and gradient files (param_nvme), else -1 */
  int n_cpu;                       /* cpu_blocks(): blocks 0 .. n_cpu - 1 live in h.pcpu */
  int *unit_chunk;                 /* (U + 1) first chunk of each unit; [U] = n_chunks */
  size_t block_pbytes, block_gbytes; /* a block's region of the parameter / gradient file */
  zo_stream_t param_io;            /* param_nvme: parameter reads into the ring, else NULL */
  zo_event_t *ring_ready;          /* (n_slots) param_nvme: ring buffer k filled (param_io) */
  struct task *pread_tasks;        /* (L) param_read_fn of block l (index) */
  struct emb_gather_task emb_gather_tasks[2]; /* (token buffers) emb_gather_fn */
  zo_event_t emb_free, emb_ready;  /* encoded's last reader done (compute); rows copied in (h2d) */
  struct emb_task emb_tasks[2];     /* (token buffers) emb_fn, embedding gradient on the host */
  struct gio_task *gio_tasks;      /* (grad_accum, L) grads_nvme_fn */
  struct zo_nvme_req *gio_req;     /* (2, gio_max) grads_nvme: a block's chunk writes, then its reads */
  int gio_max;                     /* the most chunks of a block */
  int gio_n_pending;               /* writes of gio_req in flight (d2h thread only) */
  struct task norm_res_task;       /* sched_norm_res_fn */
  struct acc_task *res_pieces;     /* (n_res_pieces) grads_nvme: the resident ranges' gradients in
                                    * layer_numel pieces through h.stage[0], head then tail */
  int n_res_pieces;
  struct reduce_task *res_reduce;  /* (n_res_pieces) sharded: their sums onto the owners */
  /* state I/O (zo_sched_state_*): the NVMe files seen through nvb[0] as a
   * one-chunk cache per file */
  bool st_active;                  /* between the first state access and zo_sched_state_done */
  bool st_wrote;                   /* some part was written since st_active */
  bool st_params_wrote;            /* the parameters were: working copies to re-derive */
  struct nv_seg *nv_segs[2];       /* [0] the master file's, [1] m's and v's (one layout), by canon */
  int nv_n_segs[2];                /* entries of nv_segs[0], [1] */
  int nv_cached[NV_FILES];         /* chunk in nvb[0].file[f], -1 none */
  bool nv_dirty[NV_FILES];         /* the cached chunk was written to */
  bool *nv_valid;                  /* (NV_FILES, n_chunks) the chunk's region of the file was written */
  /* a frozen base on NVMe (base_nvme.c): the parameter file seen by the
   * state I/O through a one-block cache in ring buffer 0 */
  bool *base_valid;                /* (L) block l's region of the parameter file was written */
  int base_cached;                 /* block in the cache, -1 none */
  bool base_dirty;                 /* the cached block was written to */
  /* data parallelism (collective.c): comm is the caller's (main thread),
   * grad_comm a duplicate for the optimizer stream; both NULL with one rank */
  zo_comm_t comm, grad_comm;
  int n_ranks;
  double *loss_sums;               /* (2 * grad_accum) per micro-batch loss sums, then token counts */
  /* the optimizer's shard (zo_placement_sharded; otherwise the whole table) */
  bool sharded;                    /* zo_placement_sharded(&pl) */
  struct zo_shard sh;              /* this rank's */
  struct zo_shard *shards;         /* (n_ranks) every rank's, sharded */
  size_t *rs_counts;               /* (n_ranks) elements of each shard: the reduce-scatter's counts */
  size_t master_off;               /* first element of h.master (the cpu tier holds the shard only; else 0) */
  size_t st_off;                   /* first byte of st_m / st_v (likewise) */
  double *norm_parts;              /* (n_tensors) per-tensor sums of squares, this rank's tensors, others 0 */
  zo_event_t gather_wait;          /* this rank's updated parameters written (h2d) */
  zo_event_t gather_done;          /* every rank's updated parameters in (optim) */
  /* ZeRO-3 over ranks (pshard): h.params holds this rank's shard, and a
   * slot loads its block gathered from the owners on stream block_gather */
  bool pshard;
  size_t params_off;               /* first element of h.params */
  zo_stream_t block_gather;        /* block gathers (pshard), else NULL */
  zo_comm_t block_gather_comm;     /* a duplicate of its own for block_gather's thread */
  zo_event_t *block_gather_ready;  /* (n_slots) slot k's gather buffer filled (block_gather) */
  zo_event_t *block_gather_free;   /* (n_slots) slot k's gather buffer copied to the slot (h2d) */
  struct task *block_gather_tasks; /* (L) block l's gather */
  /* gradient sums overlapped with the backward (sharded, gradients on the
   * host, overlap_comm): each block's, and the resident ranges', reduced to
   * their owners on stream reduce as soon as a micro-batch has produced them */
  bool overlap;
  zo_stream_t reduce;              /* the reductions (overlap), else NULL */
  zo_comm_t reduce_comm;           /* a duplicate of its own for reduce's thread */
  zo_event_t *reduce_ready;        /* (L + 1) block l's (L: the resident ranges') gradients staged (d2h) */
  zo_event_t reduce_done;          /* every range reduced (reduce) */
  zo_event_t stage_free[ZO_SCHED_GRAD_SLOTS]; /* staging buffer read by its last reduction (reduce) */
  zo_event_t stage_res_free;       /* resident staging likewise */
  size_t grads_off;                /* first element of h.grads (its shard with overlap) */
  struct reduce_task *reduce_tasks; /* (L + 2): blocks, then head, tail */
  /* first asynchronous error: set by any stream's host function, reported
   * by the next call on the main thread */
  pthread_mutex_t err_mu;
  atomic_int err;                  /* -errno; 0 none */
  char err_msg[512];               /* its message */
  /* time spent, for zo_sched_stats */
  atomic_uint_fast64_t opt_ns;     /* ns in the optimizer's arithmetic */
  atomic_uint_fast64_t acc_ns;     /* ns in host gradient accumulation */
  atomic_uint_fast64_t nv_wait_ns; /* ns the optimizer stream waited for NVMe reads */
  atomic_uint_fast64_t comm_ns;    /* ns in collectives */
  /* bytes issued (zo_sched_stats), counted where each copy or request is
   * queued: sched_copy, sched_nvme_io */
  atomic_uint_fast64_t h2d_bytes, d2h_bytes, nvme_read_bytes, nvme_write_bytes;
};

static inline void async_fail(struct zo_sched *s, int err) {
  pthread_mutex_lock(&s->err_mu);
  if (!atomic_load(&s->err)) {
    snprintf(s->err_msg, sizeof s->err_msg, "%s", zo_last_error());
    atomic_store(&s->err, err);
  }
  pthread_mutex_unlock(&s->err_mu);
}

static inline int async_error(struct zo_sched *s) {
  int err = atomic_load(&s->err);
  if (!err) return 0;
  pthread_mutex_lock(&s->err_mu);
  zo_error(err, "%s", s->err_msg);
  pthread_mutex_unlock(&s->err_mu);
  return err;
}

/* Prefixes the calling thread's last error. zo_error formats into the
 * buffer zo_last_error() points at, so the old message is copied first. */
static inline int error_prefixed(int err, const char *prefix) {
  char old[1024];
  snprintf(old, sizeof old, "%s", zo_last_error());
  return zo_error(err, "%s: %s", prefix, old);
}

static inline uint64_t ns_since(double t0) { return (uint64_t)((zo_time_s() - t0) * 1e9); }

#define CHECK_Q(call) ZO_ASSERT((call) == 0) /* queueing on a live stream cannot fail */

/* lora_step.c: the adapters attached to s->m (after init_model), freed with s;
 * the step's norm and AdamW over them, queued instead of the base's. */
int sched_lora_attach(struct zo_sched *s, const struct zo_sched_config *c);
void sched_lora_free(struct zo_sched *s);
int sched_lora_queue_optimizer(struct zo_sched *s);

/* be->memcpy_async, counting host <-> device bytes as they are queued. */
static inline int sched_copy(struct zo_sched *s, void *dst, const void *src, size_t nbytes, enum zo_copy_kind k,
                             zo_stream_t stream) {
  if (k == ZO_COPY_H2D) atomic_fetch_add_explicit(&s->h2d_bytes, nbytes, memory_order_relaxed);
  if (k == ZO_COPY_D2H) atomic_fetch_add_explicit(&s->d2h_bytes, nbytes, memory_order_relaxed);
  return s->be->memcpy_async(dst, src, nbytes, k, stream);
}

/* The NVMe store's requests (zo/nvme.h) on s->nv, counting their bytes as
 * they are issued. */
static inline int sched_nvme_read_async(struct zo_sched *s, int file, uint64_t off, void *buf, size_t nbytes,
                                        struct zo_nvme_req *req) {
  atomic_fetch_add_explicit(&s->nvme_read_bytes, nbytes, memory_order_relaxed);
  return zo_nvme_read_async(s->nv, file, off, buf, nbytes, req);
}
static inline int sched_nvme_write_async(struct zo_sched *s, int file, uint64_t off, const void *buf, size_t nbytes,
                                         struct zo_nvme_req *req) {
  atomic_fetch_add_explicit(&s->nvme_write_bytes, nbytes, memory_order_relaxed);
  return zo_nvme_write_async(s->nv, file, off, buf, nbytes, req);
}
static inline int sched_nvme_read(struct zo_sched *s, int file, uint64_t off, void *buf, size_t nbytes) {
  atomic_fetch_add_explicit(&s->nvme_read_bytes, nbytes, memory_order_relaxed);
  return zo_nvme_read(s->nv, file, off, buf, nbytes);
}
static inline int sched_nvme_write(struct zo_sched *s, int file, uint64_t off, const void *buf, size_t nbytes) {
  atomic_fetch_add_explicit(&s->nvme_write_bytes, nbytes, memory_order_relaxed);
  return zo_nvme_write(s->nv, file, off, buf, nbytes);
}

/* Device address of unit u's parameters, working dtype (NULL: a block
 * living in slots). */
static inline void *dev_unit_params(struct zo_sched *s, int u) {
  if (!s->n_slots) return zo_model_at(s->m, s->m->params, unit_range(s->t, u).off);
  if (u == 0) return s->m->res_phead ? s->m->params : NULL; /* NULL: the embedding on the host */
  if (u == s->U - 1) return zo_model_at(s->m, s->m->params, s->m->res_phead);
  return NULL;
}

/* Elements of unit u's device copy from its first element: the unit's, the
 * tail's without a streamed LM head. */
static inline size_t dev_unit_numel(const struct zo_sched *s, int u) {
  return u == s->U - 1 ? s->m->res_tail : unit_range(s->t, u).numel;
}

/* Elements of [at, at + n) (counted from unit u's first element) that unit
 * u's device copy holds: all but a streamed LM head's. */
static inline size_t dev_unit_part(const struct zo_sched *s, int u, size_t at, size_t n) {
  const size_t dn = dev_unit_numel(s, u);
  return at >= dn ? 0 : dn - at < n ? dn - at : n;
}

/* Table elements of streamed LM head piece p. */
static inline struct range head_piece(const struct zo_sched *s, int p) {
  const size_t C = (size_t)s->m->cfg.n_embd, r0 = (size_t)p * (size_t)s->m->head_piece_rows;
  return (struct range){s->head_off + r0 * C, (size_t)zo_model_piece_rows(s->m, p) * C};
}

/* A tail chunk's part of the streamed LM head (elements [c->off, +numel) of
 * the table, working dtype at work) into h.head_params. */
static inline void head_params_store(struct zo_sched *s, const struct chunk *c, const void *work) {
  const size_t e = s->m->esize, a = c->off > s->head_off ? c->off : s->head_off, b = c->off + c->numel;
  if (b > a) memcpy((uint8_t *)s->h.head_params + (a - s->head_off) * e, (const uint8_t *)work + (a - c->off) * e, (b - a) * e);
}

/* Host working parameters (working dtype) from table element off. */
static inline void *host_params_at(struct zo_sched *s, size_t off) {
  ZO_ASSERT(off >= s->params_off);
  return (uint8_t *)s->h.params + (off - s->params_off) * s->m->esize;
}

/* The host master (cpu tier) at table element off, inside this rank's shard. */
static inline float *master_at(const struct zo_sched *s, size_t off) {
  ZO_ASSERT(off >= s->sh.lo && off <= s->sh.hi);
  return s->h.master + (off - s->master_off);
}

/* The gradients the optimizer reads (device accumulator, or host) at table
 * element off: with sharded gradients h.grads holds this rank's shard. */
static inline float *grads_at(const struct zo_sched *s, size_t off) {
  if (s->pl.grads_nvme) { /* the resident ranges only */
    const struct range head = unit_range(s->t, 0), tail = unit_range(s->t, s->U - 1);
    if (off < head.numel) return s->h.grads + off;
    ZO_ASSERT(off >= tail.off);
    return s->h.grads + head.numel + (off - tail.off);
  }
  ZO_ASSERT(off >= s->grads_off);
  return (s->pl.optimizer == ZO_OFFLOAD_NONE ? s->acc : s->h.grads) + (off - s->grads_off);
}

/* Where the host keeps the streamed LM head's working weights, from table element off. */
static inline const void *head_src(struct zo_sched *s, size_t off) {
  if (s->h.head_params) return (const uint8_t *)s->h.head_params + (off - s->head_off) * s->m->esize;
  return s->h.params ? host_params_at(s, off) : (const void *)master_at(s, off);
}

/* Tensor i's m (v) record in the state at base (st_m or st_v). */
static inline uint8_t *state_at(const struct zo_sched *s, uint8_t *base, int i) { return base + (s->soff[i] - s->st_off); }

/* Unit u's elements inside this rank's shard: [*a, *b), maybe empty. */
static inline void unit_owned(const struct zo_sched *s, int u, size_t *a, size_t *b) {
  const struct range r = unit_range(s->t, u);
  *a = r.off > s->sh.lo ? r.off : s->sh.lo;
  *b = r.off + r.numel < s->sh.hi ? r.off + r.numel : s->sh.hi;
  if (*b < *a) *b = *a;
}

/* Where the sharded ranks exchange their updated working parameters: the
 * host working copy when there is one (slots load from it, the device units
 * are copied from it afterwards), else the device parameters (host memory on
 * the CPU backend, the only one data parallelism runs on). */
static inline void *gather_buf(struct zo_sched *s) { return s->h.params ? s->h.params : s->m->params; }

/* Slot k's gather buffer (pshard). */
static inline uint8_t *block_gather_buf(struct zo_sched *s, int k) {
  return s->h.block_gather + (size_t)k * s->t->layer_numel * s->m->esize;
}

/* Rank r's part [*a, *b) of table elements [off, off + n); false when empty. */
static inline bool shard_cut(const struct zo_sched *s, int r, size_t off, size_t n, size_t *a, size_t *b) {
  *a = s->shards[r].lo > off ? s->shards[r].lo : off;
  *b = s->shards[r].hi < off + n ? s->shards[r].hi : off + n;
  return *b > *a;
}

static inline const float *opt_grads(const struct zo_sched *s) {
  return s->pl.optimizer == ZO_OFFLOAD_NONE ? s->acc : s->h.grads;
}

/* File offset and bytes of chunk c in file f. */
static inline uint64_t nv_off(const struct chunk *c, int f) { return f == NV_MASTER ? c->mfile_off : c->sfile_off; }

static inline size_t nv_nbytes(const struct chunk *c, int f) { return f == NV_MASTER ? c->numel * sizeof(float) : c->sbytes; }


/* sched.c: the conductor */
/* Reports that host memory for the scheduler's tables ran out; returns -ENOMEM. */
int sched_no_memory(void);
/* Creates a stream named name on the timeline (zo/trace.h). Returns 0 or -errno. */
int sched_stream_create(struct zo_sched *s, zo_stream_t *stream, const char *name);
int sched_events_create(zo_backend_t be, zo_event_t *ev, int n);
int sched_copy_sync(struct zo_sched *s, void *dst, const void *src, size_t nbytes, enum zo_copy_kind k);

/* layout.c: units, NVMe chunks, the host layout */
struct chunk_plan sched_make_chunks(const struct zo_tensor_table *t, const struct zo_placement *pl,
                                     struct chunk *chunks, struct piece *pieces);
void sched_host_layout(const struct zo_placement *pl, const struct zo_tensor_table *t, int B,
                        int T, struct host_carver *c, struct host_bufs *h);

/* hooks.c: the model's block hooks */
void sched_slots_invalidate(struct zo_sched *s);
void sched_acc_fn(void *arg);
void sched_hook_begin(void *ctx, struct zo_model *m, int l, enum zo_model_phase ph, zo_stream_t cs);
void sched_hook_end(void *ctx, struct zo_model *m, int l, enum zo_model_phase ph, zo_stream_t cs);
void sched_head_hook_begin(void *ctx, struct zo_model *m, int p, enum zo_model_phase ph, zo_stream_t cs);
void sched_head_hook_end(void *ctx, struct zo_model *m, int p, enum zo_model_phase ph, zo_stream_t cs);

/* collective.c: data-parallel collectives */
int sched_init_ranks(struct zo_sched *s, zo_comm_t comm);
int sched_exchange_range(struct zo_sched *s, zo_comm_t comm, uint8_t *buf, size_t off, size_t n, bool copy_own);
int sched_reduce_to_owners(struct zo_sched *s, zo_comm_t comm, float *buf, size_t off, size_t n);
void sched_reduce_acc_fn(void *arg);
void sched_block_gather_fn(void *arg);
void sched_grads_out_shard(struct zo_sched *s, const float *src, size_t n, zo_event_t free_ev, int i,
                            struct reduce_task *task);
void sched_grads_allreduce_fn(void *arg);
void sched_queue_gather(struct zo_sched *s);
int sched_ranks_sum(struct zo_sched *s, double *sums, int n);

/* update.c: norm and optimizer updates */
void sched_norm_fn(void *arg);
void sched_piece_update(const struct zo_sched *s, const struct step_args *sa, const struct zo_tensor_info *ti,
                         bool q, float *p, const float *g, uint8_t *ms, uint8_t *vs, size_t n, void *work);
void sched_opt_unit_fn(void *arg);
void sched_queue_device_update(struct zo_sched *s, const struct step_args *sa, int u);

/* nvme.c: the NVMe pipeline and the state cache */
int sched_nv_wait_all(struct zo_sched *s, struct zo_nvme_req *req);
int sched_nv_drain_writes(struct zo_sched *s, struct nv_buffer *b);
int sched_nv_buffer_drain(struct zo_sched *s, struct nv_buffer *b);
int sched_nv_read_async(struct zo_sched *s, int j, struct nv_buffer *b);
int sched_nv_write_async(struct zo_sched *s, int j, struct nv_buffer *b);
void sched_nv_write_fn(void *arg);
void sched_nv_update_fn(void *arg);
void sched_nv_queue_refill(struct zo_sched *s, int j, long g, int p);
void sched_nv_prime(struct zo_sched *s, int p);
void sched_nv_reprime(struct zo_sched *s);
int sched_nvme_open(struct zo_sched *s);
int sched_nv_flush(struct zo_sched *s, int f);
int sched_nv_fetch(struct zo_sched *s, int f, int j, bool whole);
int sched_nv_access(struct zo_sched *s, int f, size_t off, uint8_t *buf, size_t n, bool write);

/* tier.c: parameters and gradients on NVMe */
void sched_param_slot_load(struct zo_sched *s, int l, int k);
void sched_grads_out_nvme(struct zo_sched *s, int l, int g);
void sched_grads_nvme_drain_fn(void *arg);
void sched_norm_res_fn(void *arg);
void sched_grads_out_resident_pieces(struct zo_sched *s);
int sched_tier_open(struct zo_sched *s);
int sched_tier_write_params(struct zo_sched *s, int j, const void *src);
size_t sched_nv_set_bytes(const struct zo_placement *pl, const struct chunk_plan *cp, size_t *mper, size_t *sper,
                          size_t *wper);

/* base_nvme.c: a frozen base's parameter file (LoRA, param_nvme, no optimizer on NVMe) */
/* Opens the store under pl.nvme_path, the chunks, the parameter file, the
 * param_io stream (sched_tier_open). Returns 0 or -errno. */
int sched_base_nvme_open(struct zo_sched *s);
/* State bytes [off, off + n) of the fp32 parameters (a frozen base: its
 * working copies, wherever each unit lives). Main thread, streams idle. */
int sched_base_nvme_access(struct zo_sched *s, size_t off, uint8_t *buf, size_t n, bool write);
/* From zo_sched_state_done: the cached block written back, every file
 * block written if the parameters were. Returns 0 or -errno. */
int sched_base_nvme_done(struct zo_sched *s);

/* state.c: k fp32 values at buf to or from a frozen base's device copy at dev. */
int sched_frozen_dev_access(struct zo_sched *s, void *dev, float *buf, size_t k, bool write);

/* step.c: one step's queueing order */
int sched_queue_optimizer(struct zo_sched *s);

#endif
