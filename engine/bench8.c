/* `zoffload bench adamw --optimizer AdamW8bit` measurements. The 8-bit update,
 * the fp32 update and a loop with the 8-bit update's traffic run back to back
 * in each round, in a rotating order, over the same parameters and gradients;
 * the medians and the per-round ratios are reported: only ratios compare
 * across runs. The 8-bit update needs no fp32 m, v, but they are allocated
 * here for the side-by-side fp32 figure. */
#include "zo/bench8.h"

#include <errno.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#include "zo/adamw.h"
#include "zo/adamw8bit.h"

/* The 8-bit update's traffic (p r/w, g, both codes r/w; the absmax, 1/16 of a
 * byte per parameter, is left out) with trivial arithmetic; parallel over the
 * same blocks as the update. */
static void yardstick8(float *restrict p, const float *restrict g, uint8_t *restrict mc, uint8_t *restrict vc,
                       size_t n, size_t block, float s) {
  const size_t nb = zo_adamw8bit_n_blocks(n, block);
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < nb; b++) {
    const size_t lo = b * block, hi = lo + block < n ? lo + block : n;
#pragma omp simd
    for (size_t i = lo; i < hi; i++) {
      p[i] = p[i] - g[i] * s;
      mc[i] = (uint8_t)(mc[i] + 1);
      vc[i] = (uint8_t)(vc[i] ^ 1);
    }
  }
}

static void *alloc64(size_t nbytes) { return aligned_alloc(64, (nbytes + 63) / 64 * 64); }

int zo_bench_adamw8bit_run(size_t n, int threads, int reps, struct zo_bench_adamw8bit *out) {
  if (threads > 0) omp_set_num_threads(threads);
  if (reps < 1) reps = 1;
  const size_t block = ZO_ADAMW8BIT_BLOCK, nb = zo_adamw8bit_n_blocks(n, block);
  float *p = alloc64(n * sizeof(float)), *g = alloc64(n * sizeof(float));
  float *m = alloc64(n * sizeof(float)), *v = alloc64(n * sizeof(float));
  uint8_t *mc = alloc64(n), *vc = alloc64(n);
  float *ma = alloc64(nb * sizeof(float)), *va = alloc64(nb * sizeof(float));
  double *t8 = malloc((size_t)reps * sizeof(double)), *t32 = malloc((size_t)reps * sizeof(double));
  double *ty = malloc((size_t)reps * sizeof(double)), *sp = malloc((size_t)reps * sizeof(double));
  double *yr = malloc((size_t)reps * sizeof(double));
  int err = 0;
  if (!p || !g || !m || !v || !mc || !vc || !ma || !va || !t8 || !t32 || !ty || !sp || !yr) {
    char b[32];
    err = zo_error(-ENOMEM, "bench adamw AdamW8bit: cannot allocate %s (18 bytes per parameter): pass a smaller --params",
                   zo_format_bytes(18 * n, b));
    goto out;
  }
  /* First touch block by block with the kernels' static schedule, so that each
   * thread's pages are its own; gradients as in zo_bench_adamw_run. */
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < nb; b++) {
    const size_t lo = b * block, hi = lo + block < n ? lo + block : n;
    for (size_t i = lo; i < hi; i++) {
      const uint32_t h = (uint32_t)(i * 2654435761u);
      const float u = (float)(h >> 8) * 0x1.0p-24f;
      g[i] = (h & 1 ? -1.0f : 1.0f) * (1e-3f + 1e-2f * u);
      p[i] = 0.02f * (u - 0.5f);
      m[i] = 0.1f * g[i];
      v[i] = 1e-3f * g[i] * g[i];
    }
    zo_adamw8bit_quantize(mc + lo, ma + b, m + lo, hi - lo, block, ZO_QMAP_SIGNED);
    zo_adamw8bit_quantize(vc + lo, va + b, v + lo, hi - lo, block, ZO_QMAP_UNSIGNED);
  }
  const struct zo_adamw_hparams hp = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                      .weight_decay = 0.1f};
  long t8_step = 10, t32_step = 10;
  zo_adamw8bit_update(p, g, mc, ma, vc, va, n, block, &hp, true, t8_step++, 1.0f);
  zo_adamw_update(p, g, m, v, n, &hp, true, t32_step++, 1.0f);
  yardstick8(p, g, mc, vc, n, block, 1e-3f);
  for (int r = 0; r < reps; r++) {
    for (int k = 0; k < 3; k++) {
      const int which = (k + r) % 3;
      const double t0 = zo_time_s();
      if (which == 0)
        zo_adamw8bit_update(p, g, mc, ma, vc, va, n, block, &hp, true, t8_step++, 0.5f);
      else if (which == 1)
        zo_adamw_update(p, g, m, v, n, &hp, true, t32_step++, 0.5f);
      else
        yardstick8(p, g, mc, vc, n, block, 1e-3f);
      const double dt = zo_time_s() - t0;
      *(which == 0 ? &t8[r] : which == 1 ? &t32[r] : &ty[r]) = dt;
    }
    sp[r] = t32[r] / t8[r];
    yr[r] = ty[r] / t8[r];
  }
  out->n = n;
  out->block = block;
  out->threads = omp_get_max_threads();
  out->reps = reps;
  out->adamw8bit_s = zo_median(t8, reps);
  out->adamw_s = zo_median(t32, reps);
  out->yardstick_s = zo_median(ty, reps);
  out->speedup = zo_median(sp, reps);
  out->yardstick_ratio = zo_median(yr, reps);
  out->params_per_s = (double)n / out->adamw8bit_s;
  out->fp32_params_per_s = (double)n / out->adamw_s;
  out->bytes_per_param = 16.0 + 16.0 / (double)block;
  out->fp32_bytes_per_param = 28.0;
  out->state_bytes_per_param = 2.0 + 8.0 / (double)block;
out:
  free(p);
  free(g);
  free(m);
  free(v);
  free(mc);
  free(vc);
  free(ma);
  free(va);
  free(t8);
  free(t32);
  free(ty);
  free(sp);
  free(yr);
  return err;
}
