/* zo_adamw_update throughput against a yardstick loop with exactly the same
 * memory traffic (read p, g, m, v; write p, m, v: 28 bytes per parameter) and
 * trivial arithmetic, timed side by side in one run at the current OpenMP
 * thread count: the machines' timing drifts, so only the ratio means much.
 * Buffers are first-touched by the same static schedule before timing; each
 * repetition runs both loops (order alternating) and the table reports
 * medians. Usage: bench-adamw [n_params (default 64M)] [reps (default 9)]. */
#include "zo/adamw.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BYTES_PER_PARAM 28.0

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *x, int n) {
  qsort(x, (size_t)n, sizeof *x, cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static float *alloc_floats(size_t n) {
  const size_t nbytes = (n * sizeof(float) + 63) / 64 * 64;
  float *x = aligned_alloc(64, nbytes);
  if (x == NULL) {
    char buf[32];
    fprintf(stderr, "bench-adamw: cannot allocate %s for one of 4 buffers; pass a smaller n_params\n",
            zo_format_bytes(nbytes, buf));
    exit(1);
  }
  return x;
}

/* Same traffic as the AdamW step; v stays positive and nothing goes subnormal. */
static void yardstick(float *restrict p, const float *restrict g, float *restrict m, float *restrict v, size_t n,
                      float s) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    const float gi = g[i] * s;
    m[i] = m[i] + gi;
    v[i] = v[i] + gi * gi;
    p[i] = p[i] - gi;
  }
}

int main(int argc, char **argv) {
  const size_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)64 << 20;
  const int reps = argc > 2 ? atoi(argv[2]) : 9;
  if (n == 0 || reps < 1 || reps > 1000) {
    fprintf(stderr, "usage: bench-adamw [n_params > 0] [reps 1..1000]\n");
    return 2;
  }
  float *p = alloc_floats(n), *g = alloc_floats(n), *m = alloc_floats(n), *v = alloc_floats(n);

  /* First touch with the kernels' schedule, so each thread's pages are its own. */
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    const uint32_t h = (uint32_t)(i * 2654435761u);
    const float u = (float)(h >> 8) * 0x1.0p-24f; /* [0, 1) */
    g[i] = (h & 1 ? -1.0f : 1.0f) * (1e-3f + 1e-2f * u);
    p[i] = 0.02f * (u - 0.5f);
    m[i] = 0.1f * g[i];
    v[i] = 1e-3f * g[i] * g[i];
  }

  const struct zo_adamw_hparams hp = {
      .lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f};
  long t = 1;
  /* Warm-up: page tables, OpenMP team, frequency. */
  zo_adamw_update(p, g, m, v, n, &hp, true, t++, 1.0f);
  yardstick(p, g, m, v, n, 1e-3f);

  double *ta = malloc((size_t)reps * sizeof(double)), *ty = malloc((size_t)reps * sizeof(double));
  double *ratio = malloc((size_t)reps * sizeof(double));
  if (ta == NULL || ty == NULL || ratio == NULL) {
    fprintf(stderr, "bench-adamw: out of memory\n");
    return 1;
  }
  for (int r = 0; r < reps; r++) {
    for (int k = 0; k < 2; k++) {
      const bool adamw_now = (k == 0) == (r % 2 == 0);
      const double t0 = zo_time_s();
      if (adamw_now) zo_adamw_update(p, g, m, v, n, &hp, true, t++, 0.5f);
      else yardstick(p, g, m, v, n, 1e-3f);
      const double dt = zo_time_s() - t0;
      *(adamw_now ? &ta[r] : &ty[r]) = dt;
    }
    ratio[r] = ty[r] / ta[r];
  }
  const double med_a = median(ta, reps), med_y = median(ty, reps), med_ratio = median(ratio, reps);

  char buf[32];
  printf("n = %zu params (%s per pass at %.0f B/param), OpenMP threads = %d, median of %d reps\n", n,
         zo_format_bytes((size_t)(BYTES_PER_PARAM * (double)n), buf), BYTES_PER_PARAM, omp_get_max_threads(),
         reps);
  printf("%-17s %10s %12s %8s %13s\n", "loop", "ms/pass", "Mparams/s", "GB/s", "vs yardstick");
  printf("%-17s %10.2f %12.1f %8.2f %13.3f\n", "yardstick", med_y * 1e3, (double)n / med_y * 1e-6,
         BYTES_PER_PARAM * (double)n / med_y * 1e-9, 1.0);
  printf("%-17s %10.2f %12.1f %8.2f %13.3f\n", "zo_adamw_update", med_a * 1e3, (double)n / med_a * 1e-6,
         BYTES_PER_PARAM * (double)n / med_a * 1e-9, med_ratio);
  printf("vs yardstick: median over reps of yardstick time / AdamW time, each pair back to back "
         "(ratio of the medians: %.3f)\n", med_y / med_a);

  free(ratio);
  free(ty);
  free(ta);
  free(v);
  free(m);
  free(g);
  free(p);
  return 0;
}
