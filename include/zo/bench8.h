/* `zoffload bench adamw --optimizer AdamW8bit`: the 8-bit AdamW update timed
 * side by side with the fp32 one and with a loop of the 8-bit update's memory
 * traffic, in one run. Printed figures, never assertions: only the ratios
 * compare across runs (timing on the development machines drifts). */
#ifndef ZO_BENCH8_H
#define ZO_BENCH8_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif /* ZO_BENCH8_H */
