/* The planner that chooses (zoffload plan CONFIG --auto): a search over
 * combined changes of a config (micro-batch and accumulation at a constant
 * global batch, activation checkpointing, bf16, optimizer and parameter
 * placement, parameter slots), each candidate a list of "key=value"
 * overrides loaded through the same path as --set, its bytes from the memory
 * planner (zo/plan.h: never a second memory model), its step time from a cost
 * model over rates measured on this machine (zoffload bench calibrate) or
 * documented defaults. Candidates whose placement the engine refuses
 * (-ENOTSUP) are skipped, so placements the engine gains are searched without
 * a change here. Changes that alter the mathematics beyond rounding (8-bit
 * optimizer states, another global batch) are suggested, never chosen.
 * What host memory the machine can give: zo/host_check.h. Also train's
 * automatic choice (zo_autoplan_apply: engine.placement = "auto", "auto"
 * micro-batch). */
#ifndef ZO_AUTOPLAN_H
#define ZO_AUTOPLAN_H

#include <stdio.h>

#include "zo/host_check.h" /* what the machine can give, used with the search */
#include "zo/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- rates (the cost model's inputs) ---------------------------------------- */

#define ZO_COST_N_WIDTHS 3
#define ZO_COST_N_SEQ 3
#define ZO_COST_N_REF 2

struct zo_cost_profile {
  char source[4400];                  /* the profile's path, or "defaults (...)" */
  char machine[128];                  /* hostname, CPU model, cores: the cache key */
  char backend[16];                   /* "cpu" or "cuda" */
  int widths[ZO_COST_N_WIDTHS];       /* n_embd of the measured GEMMs, ascending */
  double gemm_flops[2][ZO_COST_N_WIDTHS]; /* FLOP/s, forward + backward; [0] fp32, [1] bf16/fp16 */
  int seqs[ZO_COST_N_SEQ];            /* sequence lengths of the measured attention, ascending */
  double attn_flops[2][ZO_COST_N_SEQ]; /* FLOP/s of attention forward + backward (fp32, half) at seqs */
  double mem_bw;                      /* bytes/s of elementwise ops (read + write counted) */
  int ref_widths[ZO_COST_N_REF];      /* n_embd of the reference steps, ascending */
  double compute_scale[2][ZO_COST_N_REF]; /* a reference step's measured forward + backward over the
                                          * compute the rates above predict for it, [0] fp32, [1] bf16
                                          * (1: not measured) */
  double op_s;                        /* fixed seconds per op launched (queueing, fork/join) */
  double h2d_bw, d2h_bw;              /* bytes/s of host-device copies */
  double adamw_pps, adamw8_pps;       /* CPU AdamW parameters/s: fp32 states, 8-bit states */
  double dev_adamw_pps;               /* the device's AdamW parameters/s */
  double nvme_read_bw, nvme_write_bw; /* bytes/s through the NVMe store; 0 = not measured */
  bool shared_cores;                  /* CPU backend: compute, copies, optimizer share the cores */
  bool half_ok;                       /* the device runs bf16 */
  bool measured;                      /* false: the defaults */
};

/* Documented defaults for backend "cpu" or "cuda" (docs/offload.md, "Choosing a
 * plan"): a 2-core CPU backend, or a PCIe 4 x16 GPU of about 100 TFLOP/s bf16. */
void zo_cost_profile_defaults(struct zo_cost_profile *p, const char *backend);

/* The profile file of this machine and backend:
 * $XDG_CACHE_HOME (or $HOME/.cache)/zoffload/profile-<key>-<backend>.json, where
 * key is the hostname and a hash of the CPU model and core count. Returns 0
 * or -ENAMETOOLONG / -ENOENT (no home directory). */
int zo_cost_profile_path(const char *backend, char *buf, size_t size);

/* Loads this machine's profile for backend; when there is none (-ENOENT),
 * fills p with the defaults and returns -ENOENT, p->source saying so. Other
 * errors (-EINVAL: a malformed file, named) also leave the defaults. */
int zo_cost_profile_load(struct zo_cost_profile *p, const char *backend);

/* Writes p as JSON to path atomically (zo_write_file_atomic: write, fsync,
 * rename; directories created). Returns 0 or -errno. */
int zo_cost_profile_save(const struct zo_cost_profile *p, const char *path);

/* Measures the rates on backend be (engine/plan/calibrate.c): GEMMs at each of
 * p->widths forward and backward in fp32 and bf16, attention at each of
 * p->seqs (64-wide heads), a reference model's step at each of
 * p->ref_widths (its measured compute over the prediction from the rates:
 * the cache misses, small ops and waits a step has and the kernels alone
 * have not), elementwise
 * and copy bandwidth, CPU AdamW fp32 and 8-bit through offload/adamw.c, and
 * with nvme_path (may be NULL) the NVMe store's read and write GB/s. Takes
 * about a minute on 2 cores. Returns 0 or -errno. */
int zo_calibrate_run(zo_backend_t be, const char *nvme_path, struct zo_cost_profile *p);

/* ---- the cost of one step ---------------------------------------------------- */

enum zo_bottleneck {
  ZO_BOTTLENECK_COMPUTE,   /* the device's arithmetic */
  ZO_BOTTLENECK_PCIE,      /* host-device copies */
  ZO_BOTTLENECK_OPTIMIZER, /* the CPU (or device) optimizer */
  ZO_BOTTLENECK_NVME,      /* NVMe reads and writes */
};

/* "GPU compute" (or "compute" on the CPU backend), "PCIe", "CPU optimizer", "NVMe". */
const char *zo_bottleneck_name(enum zo_bottleneck b, bool cpu_backend);

struct zo_cost {
  double compute_s;   /* forward, backward and recomputation of the step's micro-batches */
  double h2d_s;       /* host-to-device copies */
  double d2h_s;       /* device-to-host copies */
  double optimizer_s; /* the optimizer (CPU or device) */
  double nvme_s;      /* NVMe reads + writes */
  double step_s;      /* predicted step, with the overlap the scheduler achieves */
  enum zo_bottleneck bottleneck;
  double nvme_state_s; /* the part of nvme_s that reads and writes the optimizer state
                        * (master, m, v), once per step in either order */
  /* The same step in the layer-major order where the plan streams
   * parameters with K > 1 micro-batches and runs micro-batch-major; 0
   * otherwise. Every block checkpointed, K inputs each. */
  double layer_major_s;
  size_t layer_major_ckpt_extra; /* bytes of block inputs it keeps beyond the plan's checkpoints
                                  * (K per block, on tier layer_major_ckpt_tier) */
  int layer_major_ckpt_tier;     /* ZO_TIER_HOST with cpu_checkpointing, else ZO_TIER_DEVICE */
};

/* Predicts one optimizer step of plan p (its placement, model, B, T and
 * grad_accum) on a machine with rates r. Pure. */
void zo_cost_step(const struct zo_cost_profile *r, const struct zo_plan *p, struct zo_cost *c);

/* ---- the search ------------------------------------------------------------- */

#define ZO_AUTOPLAN_MAX_SETS 14
#define ZO_AUTOPLAN_SET_LEN 600 /* one "key=value", an nvme_path included */

/* What plan --auto leaves out of a CUDA device budget given as
 * engine.gpu_memory_budget (a card's size) for the CUDA context, cuBLASLt's
 * handle and the kernels' modules: a documented margin, not yet measured on
 * a GPU (a budget read from the device's free memory has the context out
 * already). */
#define ZO_CUDA_CONTEXT_MARGIN ((size_t)512 << 20)

struct zo_autoplan_opts {
  const char *config_path;        /* the config file */
  const char *const *sets;        /* the user's --set overrides, applied first */
  int n_sets;
  const char *nvme_path;          /* --nvme-path; NULL: the config's, else the working directory;
                                   * "none": no NVMe placements */
  zo_backend_t backend;           /* device budget when engine.gpu_memory_budget is 0; may be NULL */
  const struct zo_cost_profile *profile;
  size_t host_limit;              /* bytes the machine gives when engine.host_memory_budget is 0 */
  bool cpu_backend;               /* device memory is host memory */
  size_t memlock;                 /* RLIMIT_MEMLOCK bytes (SIZE_MAX unlimited, 0 unknown): printed */
  size_t nvme_free;               /* bytes free for the NVMe files; 0: statvfs of the directory
                                   * (tests give a drive's size, so no answer depends on the disk;
                                   * plan --auto --nvme-free: another machine's); given, the directory
                                   * need not exist here */
  bool host_given;                /* host_limit is another machine's (plan --auto --host-ram) */
  bool split_only;                /* only the split of the global batch (micro-batch x accumulation),
                                   * with the config's placement, precision and checkpointing: what
                                   * DeepSpeed's "auto" batch keys let train choose */
};

struct zo_autoplan_candidate {
  char sets[ZO_AUTOPLAN_MAX_SETS][ZO_AUTOPLAN_SET_LEN]; /* "key=value" differing from the config */
  int n_sets;
  size_t bytes[ZO_N_TIERS];
  size_t short_by[ZO_N_TIERS];    /* bytes over each tier's budget (0 = fits) */
  struct zo_cost cost;
  struct zo_plan_traffic traffic; /* the bytes per step its cost moves (zo_plan_traffic) */
  double tokens_per_s;
  char what[160];                 /* "bf16, ckpt, optimizer cpu, micro-batch 4 x 4" */
  char note[200];                 /* a suggestion's change to the mathematics */
};

struct zo_autoplan {
  struct zo_autoplan_candidate *fit;     /* the candidates that fit, fastest first */
  int n_fit;
  struct zo_autoplan_candidate *suggest; /* changes the mathematics: suggested only, fastest first */
  int n_suggest;
  struct zo_autoplan_candidate closest;  /* with n_fit == 0: the smallest total shortfall */
  bool have_closest;
  int n_tried, n_refused;                /* candidates planned; skipped (-ENOTSUP, -EINVAL) */
  size_t budget[ZO_N_TIERS];
  char budget_src[ZO_N_TIERS][600];
  char nvme_dir[512];                           /* "" when NVMe placements were not considered */
  char nvme_why[600];                   /* why not, or where */
  int global_batch;                      /* micro-batch x accumulation held constant */
  size_t memlock;                        /* from the options */
  struct zo_model_config model;
  int T;
  long steps;                            /* the config's steps (0: data.epochs sets them at start-up) */
};

/* Searches the candidates of o's config. Returns 0 (a->n_fit may be 0) or
 * -errno when the config itself cannot be loaded. Free with zo_autoplan_free. */
int zo_autoplan_search(const struct zo_autoplan_opts *o, struct zo_autoplan *a);

void zo_autoplan_free(struct zo_autoplan *a);

/* The ranked table (at most top rows, 0 = all) with each candidate's tiers'
 * bytes, predicted step, tokens/s, bottleneck and --set lines; the
 * suggestions; when nothing fits, which tier is short and by how much. */
void zo_autoplan_print(const struct zo_autoplan *a, const struct zo_cost_profile *r, int top, FILE *out);

/* One line: a JSON list of the fitting candidates, best first, each with
 * "sets", "predicted_step_ms", "tokens_per_s", "bottleneck", "device_bytes",
 * "host_bytes", "nvme_bytes". */
void zo_autoplan_print_json(const struct zo_autoplan *a, bool cpu_backend, FILE *out);

/* ---- train's automatic choice (engine/plan/auto_config.c) -------------------- */

struct zo_autoplan_apply_opts {
  const char *config_path;  /* the config file cfg was loaded from */
  const char *const *sets;  /* the --set overrides cfg was loaded with */
  int n_sets;
  FILE *out;                /* the choice, its --set lines and the effective config (rank 0 only) */
  FILE *err;                /* the candidates, when none fits */
};

/* After a plan of cfg (loaded from o's file and --set lines) that does not
 * fit: the search zo_autoplan_apply would run (every placement), as one
 * sentence into buf: how many combinations fit and the fastest predicted
 * with its --set lines, or that none fits (raise the budget or use a
 * smaller model). Returns 0 or -errno (buf then says nothing). */
int zo_autoplan_advice(const struct zo_config *cfg, const struct zo_autoplan_apply_opts *o, char *buf, size_t size);

struct zo_autoplan_applied {
  bool chosen;        /* cfg is now the planner's choice (false: nothing was "auto") */
  bool reload_failed; /* the error came from loading the config with the chosen --set lines */
};

/* What train does before training when cfg (loaded from o's file and --set
 * lines) has engine.placement = "auto" or DeepSpeed's "auto" micro-batch or
 * accumulation: searches as zo_autoplan_search (on the config's backend,
 * with this machine's host limit and profile; under an MPI launcher with
 * neither the device's free memory nor the host limit, so that every rank
 * chooses alike) and replaces cfg by the config reloaded quietly with o's
 * --set lines, the best candidate's after them and, for engine.placement =
 * "auto", engine.placement=config. With only an "auto" batch, only a
 * candidate that changes nothing but micro-batch and accumulation is taken.
 * micro_batch_auto and grad_accum_auto are then false. Rank 0 prints the
 * choice, its --set lines and the effective config on o->out and writes it
 * to checkpoint.dir/auto-config.json (a warning on stderr when it cannot).
 * Returns 0 (cfg untouched when nothing is "auto"); the search's error,
 * prefixed 'engine.placement = "auto": '; -ENOSPC when no candidate fits (the
 * closest ones printed on o->err); or zo_config_load's error with
 * res->reload_failed (cfg then holds no allocations). */
int zo_autoplan_apply(struct zo_config *cfg, const struct zo_autoplan_apply_opts *o,
                      struct zo_autoplan_applied *res);

#ifdef __cplusplus
}
#endif
#endif /* ZO_AUTOPLAN_H */
