/* The offload scheduler: places parameters, gradients, fp32 master weights and
 * AdamW m, v on the device, the host pool or the NVMe store as the config says,
 * and orders one training step over backend streams with events only: four
 * that every placement uses (compute, h2d, d2h, optim), one for NVMe I/O
 * with the optimizer on NVMe (nvme_io), one for parameter reads with the
 * parameters on NVMe (param_io), and, over ranks, one for the overlapped
 * gradient reductions (reduce, overlap_comm) and one for ZeRO-3 block
 * gathers (block_gather): eight in all (engine/sched/internal.h).
 * Parameters stream into param_slots device slots ahead of the
 * block that needs them, each block's gradients leave for the host as soon
 * as backward produces them and are accumulated there, and after the last
 * micro-batch the CPU AdamW runs block by block in forward order, the NVMe
 * tier reading buffer_count chunks ahead on its I/O stream (the first ones
 * during the step's compute) and writing behind, while the next step's
 * forward of block l waits only for block l's update.
 * With cpu_checkpointing the inputs of the checkpointed blocks leave for the
 * host pool on the D2H stream after each block's forward and come back on
 * the H2D stream, one block ahead, before each block's recompute.
 * Invariant: every placement computes bit-identical fp32 results to the
 * all-on-device run: each micro-batch's gradients go into zeroed buffers and
 * are accumulated by a separate elementwise add (acc = micro for the first),
 * the gradient norm is a sum of per-tensor zo_sumsq in table order, and the
 * update is zo_adamw_update per tensor (elementwise, so chunking is exact)
 * or, for AdamW8bit, zo_adamw8bit_update per tensor, split only at multiples
 * of the quantization block from the tensor's first element (blocks are
 * independent, so that chunking is exact too).
 * With the optimizer on the device (no offload) the per-tensor sums are the
 * backend's sumsq (on the CPU backend the same code as zo_sumsq), copied to
 * the host and added there in table order, and the fp32 update is the
 * backend's adamw_update or adamw8bit_update (on the CPU backend
 * zo_adamw_update's and zo_adamw8bit_update's code), queued once the norm is
 * known: nothing touches device memory from the host.
 * Mixed precision (placement dtype BF16 or F16): the working parameters,
 * slots and activations are in that dtype, gradients and the optimizer's
 * master weights, m, v stay fp32; each update rounds the master into the
 * working copy (device: backend cast; host: into a host working copy the
 * device loads). With fp16 the micro-batches' dloss carries the loss scale
 * (zo_sched_set_loss_scale), the norm and clip are taken on unscaled
 * values, and a non-finite gradient skips the step's update everywhere.
 * Placements stay bit-identical to all-on-device in every dtype.
 * Data parallelism (zo_sched_config.comm over N > 1 ranks, CPU backend
 * only): each rank computes its own rows of the global micro-batch with
 * dloss = 1 / (B*T*grad_accum*N). At ZeRO stage 0 every rank holds the
 * whole state, replicated, and the optimizer stream first sums the
 * gradients over the ranks in place (allreduce), so every rank runs the
 * same norm, clip, fp16 skip and update. At stage >= 1 the optimizer state
 * is sharded (zo_shard_of: runs of whole tensors): each rank updates only
 * its shard, the norm is the sum of per-tensor sums from their owners, and
 * the ranks exchange the updated working parameters; stage 2 reduce-scatters
 * the gradients (with the optimizer offloaded and overlap_comm, block by
 * block during the backward), and stage 3 with parameter slots shards the
 * host working parameters too, each block gathered from its owners as a
 * slot loads it. Losses and validation losses are the global means (sums
 * and token counts reduced on comm by the calling thread). With one rank
 * nothing changes, bit for bit. The implementation is engine/sched/ (its
 * internal.h maps the files). */
#ifndef ZO_SCHED_H
#define ZO_SCHED_H

#include "zo/adamw.h"
#include "zo/arena.h"
#include "zo/comm.h"
#include "zo/config.h"
#include "zo/lora.h"
#include "zo/model.h"
#include "zo/optim_format.h"
#include "zo/state.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_SCHED_GRAD_SLOTS 2 /* device gradient slots when gradients go to the host, at most
                               * (engine.grad_slots: 1 saves a block's fp32 gradients of device
                               * memory; each block's backward then waits for the previous
                               * block's gradients to be copied out) */

/* The memory tiers: the device arena(s), the host pool, the NVMe files. */
enum zo_tier { ZO_TIER_DEVICE, ZO_TIER_HOST, ZO_TIER_NVME, ZO_N_TIERS };

/* Host-only categories after enum zo_mem_category: the staging buffer that
 * init, resume and checkpoint saves stream the state through (the state
 * I/O below), carved from the host pool like the rest. */
enum { ZO_SCHED_MEM_STAGE = ZO_MEM_N_CATEGORIES, ZO_SCHED_MEM_N_CATEGORIES };
/* zo_mem_category_name, extended with "state staging". */
const char *zo_sched_mem_category_name(int category);

/* The format of cfg's optimizer section (zo/optim_format.h). */
struct zo_optim_format zo_optim_format_from_config(const struct zo_config *cfg);

/* Where each state class lives, derived from the config. */
struct zo_placement {
  struct zo_optim_format opt; /* fp32 or 8-bit m, v */
  enum zo_dtype dtype;  /* working parameters and activations: F32, or BF16 / F16
                         * (bf16.enabled / fp16.enabled) with fp32 master weights */
  enum zo_offload_device optimizer; /* master weights, m, v: device, host or NVMe */
  bool grads_on_host;   /* gradients accumulated on the host (stage >= 2 with offload) */
  int param_slots;      /* 0: parameters on the device; K: on the host, K device slots */
  bool param_nvme;      /* the blocks' working parameters on NVMe (offload_param.device
                         * "nvme", optimizer on NVMe, or a LoRA run's frozen base alone): a
                         * file laid out like the optimizer's chunks, read param_slots blocks
                         * ahead into as many host ring buffers (one per slot) on an I/O
                         * stream of its own; a frozen base's is written only at load */
  size_t param_max_in_cpu; /* param_nvme: elements of whole blocks kept in the host pool
                            * instead (offload_param.max_in_cpu), the first blocks */
  bool grads_nvme;      /* the blocks' gradients accumulated in an NVMe file (optimizer on
                         * NVMe and gradients on the host, one rank; always with param_nvme
                         * but a frozen base's, which has no gradients):
                         * read-modify-written per micro-batch through one block of host
                         * staging, read by the optimizer's chunk pipeline */
  int grad_slots;       /* device gradient slots when grads_on_host, 1 .. ZO_SCHED_GRAD_SLOTS (always
                         * set by zo_placement_from_config; block l uses slot l % grad_slots)
                         * (engine.grad_slots) */
  int grad_accum;       /* micro-batches per step (gradient_accumulation_steps) */
  int nvme_buffers;     /* staging buffer sets of the NVMe tier (>= 2) */
  size_t nvme_chunk;    /* elements per NVMe chunk at most (sub_group_size; chunks
                         * never span units and hold at least one 8-bit block) */
  size_t nvme_block;    /* bytes, aio.block_size */
  int nvme_queue_depth; /* aio.queue_depth */
  const char *nvme_path; /* borrowed from the config */
  bool pin;             /* pinned host pool */
  int ckpt_blocks;      /* activation checkpointing: blocks 0..n-1 keep only their
                         * input (number_checkpoints, 0 = every block); 0 off */
  bool ckpt_cpu;        /* cpu_checkpointing: those inputs in the host pool */
  int zero_stage;       /* zero_optimization.stage */
  bool overlap_comm;    /* zero_optimization.overlap_comm */
  int dp_rank, dp_ranks; /* data-parallel rank of this process and ranks (1: one
                          * process); set by zo_placement_set_ranks */
  bool skip_nonfinite;  /* a non-finite gradient norm skips the update in fp32 and bf16 too
                         * (engine.on_nonfinite "skip"; fp16 always skips) */
  bool frozen;          /* LoRA: the base is frozen (no gradients, master or optimizer state;
                         * the model's layout.frozen) and the adapters are the trained set,
                         * on the device (zo_placement_check_lora) */
  size_t stream_workspace; /* bytes of device scratch per op stream the backend
                            * needs (zo_backend.stream_workspace_bytes; 0 on
                            * the CPU); set by the planner (zo_plan_build) */
};

/* Data parallelism with ZeRO stage >= 1 over several ranks shards the
 * optimizer: each rank keeps master weights, m and v only for its shard, a
 * run of whole tensors in table order (the ranks' shards are consecutive and
 * cover the table), on the tier the placement names; it updates only those
 * and the ranks exchange the updated working parameters. Stage 1 sums the
 * gradients on every rank (allreduce), stage 2 on their owner only
 * (reduce-scatter). */
struct zo_shard {
  int t_lo, t_hi;   /* tensors [t_lo, t_hi) (may be empty) */
  size_t lo, hi;    /* table elements [lo, hi) */
  size_t slo, shi;  /* bytes [slo, shi) of m (v alike) in the canonical layout */
};
/* The shard of rank of n_ranks: tensors balanced by elements (a tensor goes
 * to the rank whose even share holds its middle). One rank: the table. */
struct zo_shard zo_shard_of(const struct zo_optim_format *f, const struct zo_tensor_table *t, int rank,
                            int n_ranks);
/* Records the data-parallel rank and ranks in pl (the planner's per-rank
 * figures and zo_sched_init need them; zo_sched_init checks them against its
 * communicator). */
void zo_placement_set_ranks(struct zo_placement *pl, int rank, int n_ranks);
/* Whether pl shards the optimizer over ranks (ranks > 1 and stage >= 1). */
bool zo_placement_sharded(const struct zo_placement *pl);
/* The shard of pl's rank (the table when not sharded). */
struct zo_shard zo_placement_shard(const struct zo_placement *pl, const struct zo_tensor_table *t);

/* Derives the placement. Returns 0, or -ENOTSUP / -EINVAL with a message
 * naming the key (offload_param.device "nvme" without the optimizer on NVMe
 * or with another nvme_path, offload_param without an offloaded optimizer,
 * nvme without nvme_path). */
int zo_placement_from_config(const struct zo_config *cfg, int n_layer, struct zo_placement *pl);
/* 0 when pl can train LoRA adapters over a frozen base (pl->frozen): the
 * base and the adapters' optimizer on the device, one rank, fp32 AdamW,
 * fp32 or bf16, activation checkpointing on the device only; else -ENOTSUP
 * naming the key that is not built with LoRA yet. */
int zo_placement_check_lora(const struct zo_placement *pl);
/* One line such as "optimizer on cpu, gradients on host, parameters on host
 * (4 device slots)" into buf; returns buf. */
const char *zo_placement_describe(const struct zo_placement *pl, char *buf, size_t size);
/* The device layout the placement needs. */
struct zo_model_layout zo_placement_layout(const struct zo_placement *pl);

/* Host pool bytes of the placement for the model table at micro-batch (B, T),
 * exactly what zo_sched_init carves; by_category may be NULL. */
size_t zo_sched_host_plan(const struct zo_placement *pl, const struct zo_tensor_table *t, int B,
                          int T, size_t by_category[ZO_SCHED_MEM_N_CATEGORIES]);
/* Device bytes of the placement: zo_model_device_plan of zo_placement_layout
 * plus, for 8-bit states on the device, the scheduler's own state arena (m
 * and v in the canonical layout), counted as AdamW m and v. by_category may
 * be NULL. 0 when mc is invalid. */
size_t zo_sched_device_plan(const struct zo_placement *pl, const struct zo_model_config *mc, int B, int T,
                            size_t by_category[ZO_MEM_N_CATEGORIES]);
/* NVMe bytes of the placement (0 unless the optimizer is on NVMe): master,
 * m, v and, with param_nvme, the working parameters and gradients of the
 * blocks; by_category may be NULL. */
size_t zo_sched_nvme_plan(const struct zo_placement *pl, const struct zo_tensor_table *t,
                          size_t by_category[ZO_SCHED_MEM_N_CATEGORIES]);

struct zo_sched_config {
  struct zo_model_config model; /* checked */
  int B, T;                    /* micro-batch */
  struct zo_placement placement;
  zo_backend_t backend;
  size_t host_budget;          /* engine.host_memory_budget, 0 = unlimited */
  zo_comm_t comm;              /* data-parallel ranks, borrowed; NULL (or one rank): one process */
  /* placement.frozen (LoRA): the adapters trained over the frozen base and
   * their first values (lora->numel fp32, host), both borrowed for init */
  const struct zo_lora_table *lora;
  const float *lora_params;
};

struct zo_sched;

/* Creates the model (device arena sized by the plan), the host pool (sized
 * by zo_sched_host_plan), the NVMe store, streams and events. Returns NULL
 * with zo_last_error() set (-ENOTSUP for several ranks on a backend other
 * than the CPU's). Single-threaded: every zo_sched_* call belongs to
 * the thread that created it. With several ranks zo_sched_init,
 * zo_sched_step_end, zo_sched_eval and zo_sched_free are collective: every
 * rank calls them in the same order. */
struct zo_sched *zo_sched_init(const struct zo_sched_config *c);
/* Synchronizes every stream and frees everything. Accepts NULL. */
void zo_sched_free(struct zo_sched *s);

/* The model (activations, device views); owned by s. */
struct zo_model *zo_sched_model(struct zo_sched *s);
/* The placement s runs. */
const struct zo_placement *zo_sched_placement(const struct zo_sched *s);

/* State I/O: random access to the training state where the placement keeps
 * it (zo/state.h: fp32 parameters in table order, m and v in the canonical
 * layout of the placement's format), in bytes, synchronous. The first access
 * waits for everything queued; writes go to the master copy only, and
 * zo_sched_state_done, which must follow before the next micro-batch or
 * eval, re-derives every working copy from it (rounding in mixed
 * precision), writes back the NVMe cache and restarts the pipeline. Staging
 * is one zo_state_stage_bytes buffer of the host pool. Return 0 or -errno
 * (an NVMe read failing its CRC, ...) with a message. */
int zo_sched_state_read(struct zo_sched *s, enum zo_state_part part, size_t off, void *dst, size_t nbytes);
int zo_sched_state_write(struct zo_sched *s, enum zo_state_part part, size_t off, const void *src,
                         size_t nbytes);
/* A fresh m or v (m = v = 0 in the format: fp32 zeros, 8-bit codes of 0). */
int zo_sched_state_fresh(struct zo_sched *s, enum zo_state_part part);
/* The parameters of zo_model_init_params(seed), generated piece by piece. */
int zo_sched_state_init(struct zo_sched *s, uint64_t seed);
int zo_sched_state_done(struct zo_sched *s);
/* Sharded optimizer (zo_placement_sharded): each rank holds only its shard
 * of master weights, m and v. Writes keep the bytes of this rank's shard
 * and drop the rest, so every rank writes the whole state (a load, an
 * import, an init) and zo_sched_state_done, then collective, exchanges the
 * working parameters. Reads of other ranks' bytes are served by their
 * owners: rank 0 reads anything while every other rank runs
 * zo_sched_state_serve, which answers until rank 0 calls
 * zo_sched_state_serve_end (also after a failure, so nobody waits
 * forever). A read of another shard on a rank other than 0 is refused.
 * Without sharding serve and serve_end return 0 at once. */
int zo_sched_state_serve(struct zo_sched *s);
int zo_sched_state_serve_end(struct zo_sched *s);
/* The state I/O as a zo_state_io (its stage is the scheduler's), for the
 * checkpoint functions. Valid until zo_sched_free. */
void zo_sched_state_io(struct zo_sched *s, struct zo_state_io *io);

/* Whole-state shorthands over the state I/O, then zo_sched_state_done:
 * set_state writes parameters (numel floats, table order) and m, v (each in
 * the canonical layout, zo_optim_state_nbytes bytes; NULL: fresh) from host
 * buffers; get_state reads them (each may be NULL). With a sharded
 * optimizer both are collective and get_state gives every rank the whole
 * state. Return 0 or -errno. */
int zo_sched_set_state(struct zo_sched *s, const float *params, const void *adam_m,
                       const void *adam_v);
int zo_sched_get_state(struct zo_sched *s, float *params, void *adam_m, void *adam_v);

/* LoRA (placement.frozen): the adapters' fp32 parameters (the master), m
 * and v (lora->numel floats each, host; any may be NULL), read or written
 * synchronously after everything queued; a write rounds the working copy
 * in mixed precision. Return 0 or -errno. */
int zo_sched_lora_read(struct zo_sched *s, float *params, float *adam_m, float *adam_v);
int zo_sched_lora_write(struct zo_sched *s, const float *params, const float *adam_m, const float *adam_v);

/* Host buffers for the next micro-batch's tokens (B, T each), blocking until
 * the forward that last read them has copied them (double-buffered). */
void zo_sched_batch(struct zo_sched *s, int32_t **inputs, int32_t **targets);
/* Queues forward and backward of micro-batch k (0..grad_accum-1) on the
 * tokens of the last zo_sched_batch, with dloss = 1 / (B*T*grad_accum*ranks). */
void zo_sched_micro_batch(struct zo_sched *s, int k);
/* After the last micro-batch: queues the gradient norm, clipping at max_norm
 * (0: off) and AdamW step t with hp, then waits for the step's losses only and
 * writes their mean (over every rank's tokens). Returns 0 or the first
 * asynchronous error. */
int zo_sched_step_end(struct zo_sched *s, long t, const struct zo_adamw_hparams *hp,
                      double max_norm, double *loss);
/* Waits for the last step's gradient norm (of the unscaled gradients) and
 * whether its update was skipped: with fp16 a non-finite gradient skips the
 * step, leaving parameters, master weights and m, v untouched. skipped may
 * be NULL. Returns 0 or -errno. */
int zo_sched_norm(struct zo_sched *s, double *norm, bool *skipped);
/* The loss scale (> 0, a power of two for exact scaling) of the micro-batches
 * queued from now on: dloss is multiplied by it and the optimizer divides
 * the gradients by it again. 1 unless fp16's loss scaler sets it. */
void zo_sched_set_loss_scale(struct zo_sched *s, double scale);
/* Targets trained in the step being queued, over all its micro-batches and
 * ranks (zo_data_count_targets; masked targets are -1). 0, the default: every
 * target, dloss = 1 / (ranks B T K) as without a mask. n > 0: dloss = 1 / n
 * and the step's loss is the sum of the losses over n, so loss and gradient
 * are the mean over the trained targets (PyTorch's ignore_index), the same
 * in every placement and at every rank count. Set before the step's first
 * zo_sched_micro_batch. */
void zo_sched_set_step_targets(struct zo_sched *s, size_t n);
/* Forward only (validation) on the tokens of the last zo_sched_batch,
 * synchronous: mean loss over the tokens whose target is not -1 (of every
 * rank's rows).
 * Returns 0 or -errno. */
int zo_sched_eval(struct zo_sched *s, double *loss);
/* Records each tier's bytes in use as timeline counters (zo/trace.h). */
void zo_sched_trace_counters(const struct zo_sched *s);

/* The compute stream, for forward-only use of the model (sampling). */
zo_stream_t zo_sched_stream(struct zo_sched *s);
/* Waits for everything queued. Returns 0 or the first asynchronous error
 * (an NVMe read that failed its CRC, ...) with its message. */
int zo_sched_synchronize(struct zo_sched *s);

/* Benchmark helper: the time of one step's tier traffic alone, with nothing
 * else running: for the NVMe tier, exactly the step's state bytes (master, m
 * and v of every chunk) read and written back through the store with the
 * step's pipeline (the same staging sets, min(buffer_count, chunks) read
 * ahead); otherwise the step's H2D parameter and D2H gradient copies.
 * Leaves the state unchanged. Synchronous. Returns 0 or -errno. */
int zo_sched_time_io(struct zo_sched *s, double *seconds);

struct zo_sched_stats {
  size_t device_planned, device_peak; /* bytes of the device arena */
  size_t host_planned, host_peak;     /* bytes of the host pool */
  size_t nvme_planned;                /* bytes of the NVMe files */
  double optimizer_s;                 /* seconds in optimizer host functions */
  double accumulate_s;                /* seconds in gradient accumulation on the host */
  double nvme_wait_s;                 /* seconds the optimizer waited for NVMe reads */
  double comm_s;                      /* seconds in collectives across ranks (gradient
                                       * sums, loss sums), waiting for the slowest included */
  bool pinned;                        /* host pool page-locked */
  /* Bytes issued since zo_sched_init, counted where each copy or NVMe
   * request is queued: host -> device (parameter slots, updated units,
   * checkpointed inputs, tokens), device -> host (gradients, checkpointed
   * inputs, losses), the NVMe store's reads and writes (state, parameter
   * and gradient files). */
  uint64_t h2d_bytes, d2h_bytes, nvme_read_bytes, nvme_write_bytes;
};
void zo_sched_stats(const struct zo_sched *s, struct zo_sched_stats *out);

/* Bytes per tier and category as the allocators hold them, for the memory
 * report: device from the arenas' purpose groups (the model's arena and the
 * 8-bit state arena), host from the pool's carves (each tagged with its
 * category when carved), NVMe from the state files' sizes on disk. Peaks
 * per category are each category's own high-water mark. */
struct zo_sched_mem {
  size_t current[ZO_N_TIERS][ZO_SCHED_MEM_N_CATEGORIES]; /* bytes held now */
  size_t peak[ZO_N_TIERS][ZO_SCHED_MEM_N_CATEGORIES];    /* bytes, high-water mark */
  size_t unclassified[ZO_N_TIERS]; /* bytes of carves no category claims (a bug: 0) */
  size_t capacity[ZO_N_TIERS];     /* arena / pool bytes reserved; NVMe: file bytes */
  size_t used[ZO_N_TIERS];         /* bytes carved now */
  size_t peak_total[ZO_N_TIERS];   /* the allocator's own high-water mark */
  int n_device_carves;             /* carves in the device arenas */
};
/* Fills out from the allocators (stat()s the NVMe files). Returns 0 or
 * -errno when a state file cannot be stat()ed. */
int zo_sched_memory(const struct zo_sched *s, struct zo_sched_mem *out);
/* The category of a device arena group ("activations", "parameter slot",
 * ...), or -1 when none claims it. */
int zo_sched_device_category(const char *group);

#ifdef __cplusplus
}
#endif
#endif /* ZO_SCHED_H */
