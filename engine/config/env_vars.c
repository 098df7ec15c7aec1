/* The user-facing environment variables, validated in one place (see
 * zo/env_vars.h): the GEMM routes of the CPU (kernels/cpu/gemm_onednn.c) and
 * CUDA (kernels/cuda/backend.cu) backends, the CUDA backend's op-by-op
 * synchronization, the CPU streams' test delays (kernels/cpu/stream.c) and
 * OpenMP's thread count. Each check is a pure function of the variable's
 * value; nothing is cached. */
#include "zo/env_vars.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zo/common.h"

static bool one_of(const char *v, const char *const *valid) {
  for (; *valid; valid++)
    if (strcmp(v, *valid) == 0) return true;
  return false;
}

/* A whole number in [lo, hi]; with comma_list, "8,4" is read as its first. */
static bool whole_in(const char *v, long lo, long hi, bool comma_list) {
  char *end;
  errno = 0;
  const long n = strtol(v, &end, 10);
  if (errno || end == v || n < lo || n > hi) return false;
  return *end == '\0' || (comma_list && *end == ',');
}

static int check_word(const char *name, const char *v, const char *const *valid, const char *valid_text) {
  if (one_of(v, valid)) return 0;
  return zo_error(-EINVAL, "%s=%s: valid values are %s (or unset)", name, v, valid_text);
}

static int check_cpu_gemm(const char *v) {
  static const char *const valid[] = {"auto", "onednn", "fallback", NULL};
  return check_word("ZO_CPU_GEMM", v, valid, "auto (default), onednn, fallback");
}

static int check_cuda_gemm(const char *v) {
  static const char *const valid[] = {"auto", "fallback", NULL};
  return check_word("ZO_CUDA_GEMM", v, valid, "auto (default), fallback");
}

static int check_cuda_sync(const char *v) {
  static const char *const valid[] = {"0", "1", NULL};
  return check_word("ZO_CUDA_SYNC", v, valid, "0 (default), 1");
}

static int check_stream_delay(const char *v) {
  if (whole_in(v, 0, 1000000, false)) return 0;
  return zo_error(-EINVAL, "ZO_STREAM_DELAY_US=%s: need a whole number of microseconds from 0 to 1000000 "
                           "(0: no delays)", v);
}

static int check_omp_threads(const char *v) {
  const long hw = sysconf(_SC_NPROCESSORS_ONLN) > 0 ? sysconf(_SC_NPROCESSORS_ONLN) : 1, most = 4 * hw;
  if (whole_in(v, 1, most, true)) return 0;
  return zo_error(-EINVAL, "OMP_NUM_THREADS=%s: need a thread count from 1 to %ld (4x the %ld hardware threads "
                           "here); unset it to use one thread per core", v, most, hw);
}

static const struct {
  const char *name;
  int (*check)(const char *value); /* value set and not empty */
} vars[] = {
    {"ZO_CPU_GEMM", check_cpu_gemm},         {"ZO_CUDA_GEMM", check_cuda_gemm},
    {"ZO_CUDA_SYNC", check_cuda_sync},       {"ZO_STREAM_DELAY_US", check_stream_delay},
    {"OMP_NUM_THREADS", check_omp_threads},
};

int zo_env_var_check(const char *name) {
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    if (strcmp(vars[i].name, name) != 0) continue;
    const char *v = getenv(name);
    return v && *v ? vars[i].check(v) : 0;
  }
  zo_abort(__FILE__, __LINE__, "zo_env_var_check: %s is not a checked variable", name);
}

int zo_env_vars_check(void) {
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const int err = zo_env_var_check(vars[i].name);
    if (err) return err;
  }
  return 0;
}
