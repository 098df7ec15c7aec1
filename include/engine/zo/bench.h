/* Benchmarks behind `zoffload bench`: printed figures, never assertions.
 * Timing on the development machines drifts, so every figure that matters is
 * a ratio of two measurements taken side by side in the same run. */
#ifndef ZO_BENCH_H
#define ZO_BENCH_H

#include "zo/comm.h"
#include "zo/config.h"

#ifdef __cplusplus
extern "C" {
#endif

struct zo_bench_adamw {
  size_t n;              /* parameters */
  int threads, reps;
  double adamw_s;        /* median seconds per zo_adamw_update pass */
  double yardstick_s;    /* median seconds per pass of the same-traffic loop */
  double ratio;          /* median of yardstick / AdamW over back-to-back pairs */
  double params_per_s;   /* n / adamw_s */
};

/* zo_adamw_update over n parameters against a loop with the same memory
 * traffic (read p, g, m, v; write p, m, v: 28 bytes per parameter), reps
 * back-to-back pairs at threads OpenMP threads (0: current). Allocates 16n
 * bytes. Returns 0 or -ENOMEM. */
int zo_bench_adamw_run(size_t n, int threads, int reps, struct zo_bench_adamw *out);

/* `zoffload bench adamw --optimizer AdamW8bit`: the 8-bit AdamW update timed
 * side by side with the fp32 one and with a loop of the 8-bit update's memory
 * traffic, in one run. */
struct zo_bench_adamw8bit {
  size_t n;                     /* parameters */
  size_t block;                 /* elements per quantization block */
  int threads, reps;
  double adamw8bit_s;           /* median seconds per zo_adamw8bit_update pass */
  double adamw_s;               /* median seconds per zo_adamw_update pass (fp32 m, v) */
  double yardstick_s;           /* median seconds per pass of a loop with the 8-bit traffic */
  double speedup;               /* median over rounds of adamw_s / adamw8bit_s, same round */
  double yardstick_ratio;       /* median over rounds of yardstick / 8-bit; 1 = bandwidth bound */
  double params_per_s;          /* n / adamw8bit_s */
  double fp32_params_per_s;     /* n / adamw_s */
  double bytes_per_param;       /* 8-bit update traffic: 16 + 16 / block */
  double fp32_bytes_per_param;  /* 28 */
  double state_bytes_per_param; /* m, v at rest (host, NVMe): 2 + 8 / block; fp32: 8 */
};

/* zo_adamw8bit_update (block ZO_ADAMW8BIT_BLOCK) and zo_adamw_update over the
 * same n parameters and gradients, and a loop with the 8-bit update's traffic
 * (read p, g, m and v codes; write p and the codes), at threads OpenMP threads
 * (0: current): reps rounds, each running the three back to back in a
 * rotating order, on buffers first-touched by the kernels' static schedule.
 * Allocates about 18n bytes. Returns 0 or -ENOMEM. */
int zo_bench_adamw8bit_run(size_t n, int threads, int reps, struct zo_bench_adamw8bit *out);

#define ZO_BENCH_MAX_RANKS 64 /* per-rank figures kept by zo_bench_step_run */

struct zo_bench_step {
  char backend[16];      /* "cpu", "cuda": engine.device resolved */
  int steps;             /* timed steps per round */
  int rounds;            /* rounds; every figure below is the median over them */
  double step_s;         /* mean step with the config's placement */
  double device_step_s;  /* mean step with everything on the device */
  double compute_s;      /* compute alone: forward + backward of the step's micro-batches,
                            everything on the device, no optimizer */
  double io_s;           /* I/O alone: zo_sched_time_io (NVMe: the step's state bytes read and
                            written through the store; else the step's H2D/D2H copies) */
  double optimizer_s;    /* optimizer alone: norm + AdamW over host arrays of the model's size */
  double device_ratio;   /* median of per-round step_s / device_step_s */
  double overlap;        /* median of per-round step_s / max(compute_s, io_s, optimizer_s);
                            1 = perfect */
  double tokens_per_s, device_tokens_per_s; /* B * T * grad_accum over step_s, device_step_s
                                               (this rank's tokens) */
  double tflops, device_tflops;             /* zo_model_flops_per_token x tokens over the same */
  /* Data parallel (1 rank: ranks 1, comm_s 0, total = tokens_per_s). */
  int ranks;
  double comm_s;             /* this rank, per configured step: seconds in collectives
                              * (gradient and loss sums, waiting for the slowest rank included) */
  double total_tokens_per_s; /* the ranks' tokens_per_s added up */
  double rank_tokens_per_s[ZO_BENCH_MAX_RANKS]; /* tokens_per_s of rank r (the first
                                                 * ZO_BENCH_MAX_RANKS ranks) */
  double rank_comm_s[ZO_BENCH_MAX_RANKS];       /* comm_s of rank r */
  /* engine.trace.path set (CPU backend): the configured steps timed again
   * with the timeline recording, in every round, the last round's written */
  bool traced;
  double traced_step_s;  /* median traced step */
  double trace_overhead; /* median of per-round traced / untraced step, minus 1 */
  /* Bytes per configured step (the first round's timed steps; the same in
   * every round), as the scheduler issued them (zo_sched_stats). */
  uint64_t h2d_bytes, d2h_bytes, nvme_read_bytes, nvme_write_bytes;
};

/* Builds the config's placement and the all-device one side by side on the
 * config's engine.device (over the ranks of comm, NULL for one process:
 * collective, each rank timing its own steps of B rows, gradients summed
 * over the ranks as in training), then
 * runs BENCH_ROUNDS rounds, each timing `steps` steps of both (2 untimed
 * warm-up steps in the first round) on synthetic tokens and each phase
 * alone, back to back, so that drift of the machine's speed cancels in the
 * per-round ratios. Returns 0 or -errno. */
int zo_bench_step_run(const struct zo_config *cfg, int steps, zo_comm_t comm, struct zo_bench_step *out);

/* Seconds of one step's forward and backward (every micro-batch, no
 * optimizer) of cfg's model with everything on backend be's device: the
 * best of reps steps after one warm-up (the cost model's reference step,
 * engine/cli/calibrate.c). Returns 0 or -errno. */
int zo_bench_compute_run(const struct zo_config *cfg, zo_backend_t be, int reps, double *seconds);

enum zo_bench_memory_status {
  ZO_BENCH_MEMORY_MEASURED,        /* planned, and measured by building the scheduler */
  ZO_BENCH_MEMORY_PLANNED_ONLY,    /* planned; reason says why not measured */
  ZO_BENCH_MEMORY_NOT_IMPLEMENTED, /* the engine cannot run it yet; no figures */
};

struct zo_bench_memory_row {
  const char *name;        /* "fp32, all on device", ... */
  const char *sets;        /* --set options that turn CONFIG into this row ("" none) */
  enum zo_bench_memory_status status;
  char reason[200];        /* for planned only / not implemented */
  size_t device_planned;   /* bytes, the plan's device total */
  size_t device_measured;  /* bytes, the device arenas' peak after zo_sched_init (measured rows) */
  size_t device_free;      /* bytes left in the device arenas (measured rows) */
  size_t host_planned;     /* bytes, the plan's host pool */
  size_t host_measured;    /* bytes, the host pool's peak (measured rows) */
};

#define ZO_BENCH_MEMORY_ROWS 7

/* Proof of savings: device (and host) bytes of CONFIG's model and
 * micro-batch under each memory saver, from the plan and, where the
 * machine's RAM allows (the CPU backend's device arena is host memory; a row
 * is measured when its device + host plan is at most 60% of the available
 * RAM), measured by building the scheduler for the row without running a
 * step and reading zo_sched_memory. Rows: fp32 all on device with the
 * unchunked LM head (plan only: the chunked head is always on), fp32 all on
 * device (chunked head), bf16 (not implemented), + activation checkpointing,
 * + optimizer offload (cpu, stage 2), + parameter offload (cpu, stage 3),
 * all combined (parameter and optimizer offload, checkpointing every block
 * with cpu_checkpointing). Each scheduler is freed before the next is built.
 * Returns 0 or -errno (a row that cannot be planned, or a build that fails). */
int zo_bench_memory_run(const struct zo_config *cfg, struct zo_bench_memory_row rows[ZO_BENCH_MEMORY_ROWS]);

#ifdef __cplusplus
}
#endif
#endif /* ZO_BENCH_H */
