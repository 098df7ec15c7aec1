/* The memory planner: before anything is allocated, the bytes each tier
 * (device, host, NVMe) needs per category (parameters, gradients, master
 * weights, m, v, activations, workspace, buffers) for a config's placement,
 * from the same layout functions that carve the device arena
 * (zo_model_device_plan) and the host pool (zo_sched_host_plan), so the plan
 * and the measured peaks are equal by construction; and whether each tier
 * fits its budget. A config that does not fit is refused with its largest
 * consumers and only those changes that were re-planned and do fit. */
#ifndef ZO_PLAN_H
#define ZO_PLAN_H

#include <stdio.h>

#include "zo/config.h"
#include "zo/sched.h"

#ifdef __cplusplus
extern "C" {
#endif

struct zo_plan {
  struct zo_model_config model;
  struct zo_placement placement;
  int B, T;                                     /* micro-batch */
  size_t bytes[ZO_N_TIERS][ZO_SCHED_MEM_N_CATEGORIES]; /* per tier and category */
  size_t total[ZO_N_TIERS];                     /* bytes per tier */
  size_t budget[ZO_N_TIERS];                    /* bytes; 0 = unknown / unlimited */
  char budget_src[ZO_N_TIERS][64];              /* "engine.gpu_memory_budget", "free", ... */
  bool fits[ZO_N_TIERS];
  zo_backend_t backend;                         /* the one planned with (may be NULL): its per-stream
                                                 * workspace is in the device bytes; variants of the
                                                 * advice are planned with it too */
  /* engine.schedule resolved: the layer-major order (each streamed block
   * loaded once forward and once backward per step, for all K
   * micro-batches), else micro-batch-major (each micro-batch through the
   * whole model in turn); why, in words, for plan's output. */
  bool layer_major;
  char schedule_why[320];
  size_t lora_numel;                            /* LoRA (placement.frozen): the adapters' elements */
};

/* The bytes one optimizer step of a plan moves, as zo_sched_stats counts
 * them (each copy and NVMe request where issued): its prediction of the
 * counters `bench step` measures per step. */
struct zo_plan_traffic {
  uint64_t h2d, d2h, nvme_read, nvme_write; /* bytes per step */
  uint64_t nvme_read_end, nvme_write_end;   /* the parts of nvme_read / nvme_write at the step's end
                                             * (the optimizer's chunk updates); the rest during the
                                             * micro-batches */
  uint64_t nvme_state;                      /* master, m and v: read and written once per step each */
  bool exact; /* equal to the counters by construction: LoRA (the base on the device, the host or
               * NVMe); full fine-tuning in fp32 or bf16 with fp32 AdamW on one rank, all on the
               * device or the optimizer, gradients and parameters on the host; else approximate
               * (NVMe traffic from the files' sizes; host checkpoints, fp16, AdamW8bit, ranks
               * unchecked) */
};

/* Fills tr for plan p in the micro-batch-major order, or (layer_major: the
 * order not built yet, for the cost model's comparison) each streamed block
 * loaded once forward and once backward per step. Returns 0 or -ENOMEM. */
int zo_plan_traffic(const struct zo_plan *p, bool layer_major, struct zo_plan_traffic *tr);

/* "device", "host", "nvme". */
const char *zo_tier_name(enum zo_tier t);

/* Plans cfg for model mc (checked). backend (may be NULL) gives the device's
 * free memory when engine.gpu_memory_budget is 0, and its per-stream op
 * workspace (stream_workspace_bytes, CUDA's cuBLASLt scratch), which the
 * model carves in the device arena: a plan compared with a run must be
 * built with the run's backend (NULL plans a workspace of 0). Returns 0 or -EINVAL /
 * -ENOTSUP for a placement the engine cannot run (message names the key). */
int zo_plan_build(const struct zo_config *cfg, const struct zo_model_config *mc, zo_backend_t backend,
                  struct zo_plan *p);
/* The same for data-parallel rank `rank` of n_ranks: with a sharded
 * optimizer (ZeRO stage >= 1 over ranks) the host and NVMe figures are that
 * rank's shard's. */
int zo_plan_build_rank(const struct zo_config *cfg, const struct zo_model_config *mc, zo_backend_t backend,
                       int rank, int n_ranks, struct zo_plan *p);

/* Whether every tier fits. */
bool zo_plan_fits(const struct zo_plan *p);

/* The table: one row per category, one column per tier, totals, budgets. */
void zo_plan_print(const struct zo_plan *p, FILE *out);

/* The memory report: for each tier (device, host, nvme) and each category
 * the planned bytes and, from mem (zo_sched_memory; NULL before start-up:
 * plan only), the peak and current bytes, the bytes reserved, carved and
 * free in the device arena and the host pool, whether the arena's peak
 * equals the plan, and one line stating that fragmentation cannot happen by
 * construction. */
void zo_plan_report_print(const struct zo_plan *p, const struct zo_sched_mem *mem, FILE *out);

/* 0 when the plan fits; else -ENOMEM with a message naming each tier over
 * budget, its largest consumers with their bytes, and the changes (as --set
 * options) that re-plan to a fit: offloading the optimizer, offloading the
 * parameters, a smaller micro-batch with more accumulation steps. */
int zo_plan_check(const struct zo_config *cfg, const struct zo_plan *p);

/* The placements table (zoffload plan CONFIG --placements): cfg's model,
 * precision, optimizer format, checkpointing and micro-batch under each
 * standard placement (all on the device; optimizer on cpu; on nvme;
 * parameters and optimizer on cpu; parameters on cpu with the optimizer on
 * nvme), with parameter offload at the most slots (<= buffer_count, >= 2)
 * that fit the device budget: device, host and NVMe bytes, whether the
 * device fits and, for each of the n_ram host RAM sizes, whether the host
 * pool does. Returns 0 or -errno when cfg itself cannot be planned. */
int zo_plan_placements_print(const struct zo_config *cfg, const struct zo_model_config *mc, zo_backend_t backend,
                             const size_t *host_ram, int n_ram, FILE *out);

#ifdef __cplusplus
}
#endif
#endif /* ZO_PLAN_H */
