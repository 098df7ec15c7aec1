/* The seeded initialisation's speed: every element of a model config's table
 * (configs/llama-1b.json by default, 1.24 B parameters) drawn serially on one
 * thread (zo_model_init_table_range with piece 0: the draw as it was before
 * it went parallel) and in parallel pieces of ZO_MODEL_INIT_PIECE on
 * OpenMP's threads, through one reused staging buffer (as sched/state.c
 * draws it), so that it needs 2 x 256 MiB whatever the model; every staged
 * piece of the two draws is compared bit for bit. Prints seconds and
 * ns/element of each and one line `zoffload init_serial_s=...
 * init_parallel_s=... ratio=... threads=...`. */
#include "zo/config.h"
#include "zo/model.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STAGE_NUMEL ((size_t)64 << 20)

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "configs/llama-1b.json";
  if (argc > 2 || (argc > 1 && argv[1][0] == '-')) {
    fprintf(stderr, "usage: bench-init [CONFIG (default configs/llama-1b.json)]\n");
    return 2;
  }
  struct zo_config cfg;
  if (zo_config_load(&cfg, path, NULL, 0)) {
    fprintf(stderr, "bench-init: %s\n", zo_last_error());
    return 1;
  }
  struct zo_model_config mc = cfg.model.spec;
  zo_config_free(&cfg);
  struct zo_tensor_table t;
  if (zo_model_config_check(&mc) || zo_model_build_table(&mc, &t)) {
    fprintf(stderr, "bench-init: %s: %s\n", path, zo_last_error());
    return 1;
  }
  float *a = malloc(STAGE_NUMEL * sizeof(float)), *b = malloc(STAGE_NUMEL * sizeof(float));
  if (!a || !b) {
    fprintf(stderr, "bench-init: out of host memory for 2 x %zu staging floats\n", STAGE_NUMEL);
    return 1;
  }
  double serial = 0.0, parallel = 0.0;
  int ret = 0;
  for (size_t first = 0; first < t.numel; first += STAGE_NUMEL) {
    const size_t n = t.numel - first < STAGE_NUMEL ? t.numel - first : STAGE_NUMEL;
    double t0 = zo_time_s();
    zo_model_init_table_range(&mc, &t, 1234, first, a, n, 0);
    double t1 = zo_time_s();
    zo_model_init_table_range(&mc, &t, 1234, first, b, n, ZO_MODEL_INIT_PIECE);
    double t2 = zo_time_s();
    serial += t1 - t0;
    parallel += t2 - t1;
    if (memcmp(a, b, n * sizeof(float)) != 0) {
      fprintf(stderr, "bench-init: the parallel draw differs from the serial one in [%zu, %zu)\n", first, first + n);
      ret = 1;
    }
  }
  printf("%s: %zu parameters\n", path, t.numel);
  printf("  serial (one thread):        %8.2f s  %6.2f ns/element\n", serial, serial * 1e9 / (double)t.numel);
  printf("  parallel (%2d threads):      %8.2f s  %6.2f ns/element  (bits %s)\n", omp_get_max_threads(), parallel,
         parallel * 1e9 / (double)t.numel, ret ? "DIFFER" : "identical");
  printf("zoffload init_serial_s=%.3f init_parallel_s=%.3f ratio=%.2f threads=%d identical=%d\n", serial, parallel,
         serial / parallel, omp_get_max_threads(), !ret);
  zo_tensor_table_free(&t);
  free(a), free(b);
  return ret;
}
