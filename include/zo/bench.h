/* Benchmarks behind `zoffload bench`: printed figures, never assertions.
 * Timing on the development machines drifts, so every figure that matters is
 * a ratio of two measurements taken side by side in the same run. */
#ifndef ZO_BENCH_H
#define ZO_BENCH_H

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

struct zo_bench_step {
  int steps;
  double step_s;         /* mean step with the config's placement */
  double device_step_s;  /* mean step with everything on the device */
  double compute_s;      /* forward + backward of the step's micro-batches alone */
  double io_s;           /* the step's tier traffic alone (zo_sched_time_io) */
  double optimizer_s;    /* the optimizer's host functions alone, less NVMe waits */
  double overlap;        /* step_s / max(compute_s, io_s, optimizer_s); 1 = perfect */
};

/* Trains `steps` steps (after 2 warm-up steps) of cfg's model on synthetic
 * tokens with cfg's placement and again all on the device, and times each
 * phase alone. Returns 0 or -errno. */
int zo_bench_step_run(const struct zo_config *cfg, int steps, struct zo_bench_step *out);

#ifdef __cplusplus
}
#endif
#endif /* ZO_BENCH_H */
