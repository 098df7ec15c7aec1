/* Errors, contract checks, dtype sizes and timing shared by every module.
 * The last-error message is per thread so that stream workers and the main
 * thread never overwrite each other's. */
#include "zo/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char last_error[1024];

size_t zo_dtype_size(enum zo_dtype dtype) {
  switch (dtype) {
  case ZO_F32: return 4;
  case ZO_BF16: return 2;
  case ZO_F16: return 2;
  case ZO_I32: return 4;
  case ZO_U16: return 2;
  case ZO_U8: return 1;
  case ZO_F64: return 8;
  case ZO_I64: return 8;
  case ZO_BOOL: return 1;
  }
  zo_abort(__FILE__, __LINE__, "unknown dtype %d", (int)dtype);
}

const char *zo_dtype_name(enum zo_dtype dtype) {
  switch (dtype) {
  case ZO_F32: return "F32";
  case ZO_BF16: return "BF16";
  case ZO_F16: return "F16";
  case ZO_I32: return "I32";
  case ZO_U16: return "U16";
  case ZO_U8: return "U8";
  case ZO_F64: return "F64";
  case ZO_I64: return "I64";
  case ZO_BOOL: return "BOOL";
  }
  return "?";
}

int zo_error(int err, const char *fmt, ...) {
  /* Format into a scratch buffer first: callers often wrap the previous
   * message ("context: %s", zo_last_error()), which reads last_error. */
  char buf[sizeof last_error];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  memcpy(last_error, buf, sizeof buf);
  return err;
}

const char *zo_last_error(void) { return last_error; }

void zo_abort(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "zoffload: fatal: %s:%d: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  abort();
}

const char *zo_format_bytes(size_t nbytes, char buf[32]) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)nbytes;
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    u++;
  }
  if (u == 0)
    snprintf(buf, 32, "%zu B", nbytes);
  else
    snprintf(buf, 32, "%.2f %s", v, units[u]);
  return buf;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double zo_median(double *x, int n) {
  ZO_ASSERT(n >= 1);
  qsort(x, (size_t)n, sizeof *x, cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

double zo_time_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t zo_meminfo_bytes(const char *key) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  size_t v = 0;
  const size_t n = strlen(key);
  while (fgets(line, sizeof line, f)) {
    unsigned long long kib;
    if (!strncmp(line, key, n) && line[n] == ':' && sscanf(line + n + 1, "%llu", &kib) == 1) {
      v = (size_t)kib * 1024;
      break;
    }
  }
  fclose(f);
  return v;
}
