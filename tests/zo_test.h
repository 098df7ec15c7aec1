/* Scaffolding shared by the tests/test-*.c executables: the case runner, a
 * seeded splitmix64 generator, a tolerance check that reports the worst
 * element, and a private temp directory. Header-only (static inline), because
 * each test is one translation unit; it uses libc only, so any test can
 * include it whatever module it links. Messages go to stderr, indented under
 * the runner's line for the case; nothing here exits except out of memory. */
#ifndef ZO_TEST_H
#define ZO_TEST_H

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "zo/common.h"

/* The number of elements of array a, a compile-time constant; a pointer
 * instead of an array does not compile (its "length" would be a silent 1). */
#define ZO_ARRAY_LEN(a)          \
  (sizeof(a) / sizeof((a)[0]) + \
   0 * sizeof(char[1 - 2 * __builtin_types_compatible_p(__typeof__(a), __typeof__(&(a)[0]))]))

/* ---- runner ------------------------------------------------------------- */

#define ZO_TEST_SKIP 77 /* a case or a whole test returns this when skipped */

struct zo_test {
  const char *name;
  int (*fn)(void); /* 0 passed, ZO_TEST_SKIP skipped (reason printed), else failed */
};
#define ZO_TEST(name) {"test_" #name, test_##name}

/* Returns 1 from the calling case, printing file:line, the condition and
 * zo_last_error(). */
#define ZO_REQUIRE(cond)                                                            \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "%s:%d: check failed: %s (%s)\n", __FILE__, __LINE__, #cond, \
              zo_last_error());                                                     \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

/* ---- soft checks ---------------------------------------------------------
 * A case that checks many independent things (every key of a config, say)
 * counts each failed ZO_EXPECT and goes on, then returns
 * zo_test_expect_failed_since(the count when it started), or decides from
 * each ZO_EXPECT's value. */

static int zo_test_n_expect_failed; /* failed ZO_EXPECTs in this executable */

static inline bool zo_test_expect(bool ok, const char *what, const char *file, int line) {
  if (!ok) {
    fprintf(stderr, "%s:%d: expected %s (last error: \"%s\")\n", file, line, what, zo_last_error());
    zo_test_n_expect_failed++;
  }
  return ok;
}

/* Counts cond when false, printing file:line, the condition and
 * zo_last_error(); evaluates to cond. */
#define ZO_EXPECT(cond) zo_test_expect((cond), #cond, __FILE__, __LINE__)

/* A case's result: 0, or 1 after saying how many ZO_EXPECTs failed since
 * the count was before. */
static inline int zo_test_expect_failed_since(int before) {
  if (zo_test_n_expect_failed == before) return 0;
  fprintf(stderr, "  %d failed checks\n", zo_test_n_expect_failed - before);
  return 1;
}

struct zo_test_counts {
  int passed, failed, skipped;
};

static inline double zo_test_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The index of name among the comma-separated entries of list, or -1. */
static inline int zo_test_list_index(const char *list, const char *name) {
  const size_t n = strlen(name);
  int i = 0;
  for (const char *p = list; *p; i++) {
    const char *end = strchr(p, ',');
    const size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && strncmp(p, name, n) == 0) return i;
    p += len + (end != NULL);
  }
  return -1;
}

/* Whether name is one of the comma-separated entries of list. */
static inline bool zo_test_in_list(const char *list, const char *name) { return zo_test_list_index(list, name) >= 0; }

/* The entries of ZO_TEST_CASES (the first 64) that named a case run so far. */
static inline uint64_t *zo_test_cases_seen(void) {
  static uint64_t seen;
  return &seen;
}

/* Runs tests[0, n) in order, printing "ok", "FAIL" or "skip", the name and
 * the time of each on stdout, flushed so it stays in order with stderr.
 * ZO_TEST_CASES (comma-separated names as printed, e.g.
 * "test_all_device_reference,test_params_nvme") runs only those; unset or
 * empty runs all. */
static inline struct zo_test_counts zo_test_run(const struct zo_test *tests, size_t n) {
  struct zo_test_counts c = {0, 0, 0};
  const char *only = getenv("ZO_TEST_CASES");
  fflush(stdout);
  for (size_t i = 0; i < n; i++) {
    if (only && only[0]) {
      const int at = zo_test_list_index(only, tests[i].name);
      if (at < 0) continue;
      if (at < 64) *zo_test_cases_seen() |= (uint64_t)1 << at;
    }
    const double t0 = zo_test_now_s();
    const int rc = tests[i].fn();
    const double dt = zo_test_now_s() - t0;
    if (rc == ZO_TEST_SKIP) {
      printf("skip %s\n", tests[i].name);
      c.skipped++;
    } else {
      printf("%s %s (%.2f s)\n", rc ? "FAIL" : "ok  ", tests[i].name, dt);
      if (rc)
        c.failed++;
      else
        c.passed++;
    }
    fflush(stdout);
  }
  return c;
}

/* Prints "N passed, M failed[, K skipped]" and returns the exit code: 1 when
 * any failed or an entry of ZO_TEST_CASES named no case (a typo must not
 * pass by running nothing), ZO_TEST_SKIP when every case skipped, else 0. */
static inline int zo_test_report(struct zo_test_counts c) {
  const char *only = getenv("ZO_TEST_CASES");
  int unmatched = 0;
  int i = 0;
  for (const char *p = only && only[0] ? only : ""; *p && i < 64; i++) {
    const char *end = strchr(p, ',');
    const int len = (int)(end ? end - p : (ptrdiff_t)strlen(p));
    if (!(*zo_test_cases_seen() >> i & 1)) {
      printf("ZO_TEST_CASES entry '%.*s' names no case of this test\n", len, p);
      unmatched = 1;
    }
    p += len + (end != NULL);
  }
  if (c.skipped)
    printf("%d passed, %d failed, %d skipped\n", c.passed, c.failed, c.skipped);
  else
    printf("%d passed, %d failed\n", c.passed, c.failed);
  fflush(stdout);
  if (c.failed || unmatched) return 1;
  return c.skipped && !c.passed ? ZO_TEST_SKIP : 0;
}

/* Adds the counts c (one zo_test_run) to *sum. */
static inline void zo_test_counts_add(struct zo_test_counts *sum, struct zo_test_counts c) {
  sum->passed += c.passed;
  sum->failed += c.failed;
  sum->skipped += c.skipped;
}

#define ZO_TEST_MAIN(tests) zo_test_report(zo_test_run((tests), ZO_ARRAY_LEN(tests)))

/* Prints "  <message>" on stderr; returns 1, for `return zo_test_fail(...)`. */
static inline int zo_test_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int zo_test_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("  ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

/* malloc that never returns NULL: a test that cannot allocate exits. */
static inline void *zo_test_xmalloc(size_t nbytes) {
  void *p = malloc(nbytes ? nbytes : 1);
  if (!p) {
    fprintf(stderr, "out of host memory (%zu bytes)\n", nbytes);
    exit(1);
  }
  return p;
}

/* The heap blocks of one case, freed together: a case keeps each block it
 * allocates here and frees them all with zo_test_bufs_free at its end, so
 * its cleanup is one line whatever it allocated. */
#define ZO_TEST_BUFS_MAX 48
struct zo_test_bufs {
  void *mem[ZO_TEST_BUFS_MAX]; /* the blocks as malloc returned them */
  int n;
};

/* Keeps mem (a malloc'ed block) for zo_test_bufs_free; returns it. */
static inline void *zo_test_bufs_keep(struct zo_test_bufs *b, void *mem) {
  if (b->n == ZO_TEST_BUFS_MAX) {
    fprintf(stderr, "more than %d blocks in one zo_test_bufs\n", ZO_TEST_BUFS_MAX);
    exit(1);
  }
  b->mem[b->n++] = mem;
  return mem;
}

static inline void *zo_test_bufs_alloc(struct zo_test_bufs *b, size_t nbytes) {
  return zo_test_bufs_keep(b, zo_test_xmalloc(nbytes));
}

/* float64 copy of x[0, n), kept in b. */
static inline double *zo_test_bufs_widen(struct zo_test_bufs *b, const float *x, size_t n) {
  double *d = zo_test_bufs_alloc(b, n * sizeof(double));
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}

/* Frees every block kept in b, last first; b is empty again. */
static inline void zo_test_bufs_free(struct zo_test_bufs *b) {
  while (b->n > 0) free(b->mem[--b->n]);
}

/* ---- random numbers: splitmix64 ----------------------------------------- */

/* The next value of the stream whose state is *s (any seed is fine). */
static inline uint64_t zo_splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* One stream per test executable, reseeded by each case that draws from it. */
static uint64_t zo_rng_state = 0x9e3779b97f4a7c15ull;

static inline void zo_rng_seed(uint64_t seed) { zo_rng_state = seed * 0x9e3779b97f4a7c15ull + 1; }
static inline uint64_t zo_rng_u64(void) { return zo_splitmix64(&zo_rng_state); }
static inline uint32_t zo_rng_u32(void) { return (uint32_t)(zo_rng_u64() >> 32); }

/* Uniform in [0, 1), 53 random bits. */
static inline double zo_rng_uniform(void) { return (double)(zo_rng_u64() >> 11) * 0x1.0p-53; }

/* Uniform float in [lo, hi), 24 random bits. */
static inline float zo_rng_float(float lo, float hi) {
  return lo + (hi - lo) * (float)(zo_rng_u32() >> 8) * (1.0f / 16777216.0f);
}

/* Standard normal (Box-Muller; u1 > 0 so the log is finite). */
static inline double zo_rng_normal(void) {
  const double u1 = zo_rng_uniform() + 0x1.0p-54, u2 = zo_rng_uniform();
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* ---- tolerance ---------------------------------------------------------- */

/* Shared body of zo_test_close and zo_test_close_f32: exactly one of ref64
 * and ref32 is non-NULL. */
static inline int zo_test_close_impl(const char *what, const float *got, const double *ref64,
                                     const float *ref32, size_t n, double atol, double rtol) {
  size_t n_bad = 0, worst = 0;
  double worst_score = 0.0;
  for (size_t i = 0; i < n; i++) {
    const double ref = ref64 ? ref64[i] : (double)ref32[i];
    const double diff = fabs((double)got[i] - ref), tol = atol + fabs(ref) * rtol;
    if (diff <= tol) continue;
    const double score = isnan(diff) || !(tol > 0.0) ? INFINITY : diff / tol;
    if (n_bad++ == 0 || score > worst_score) {
      worst_score = score;
      worst = i;
    }
  }
  if (n_bad == 0) return 0;
  const double ref = ref64 ? ref64[worst] : (double)ref32[worst];
  const double diff = fabs((double)got[worst] - ref);
  fprintf(stderr,
          "  %s: %zu of %zu over tolerance; worst [%zu]: got %.9g, want %.9g "
          "(|diff| %.3g > tol %.3g = %g + %g * |want|)\n",
          what, n_bad, n, worst, (double)got[worst], ref, diff, atol + fabs(ref) * rtol, atol, rtol);
  return 1;
}

/* Returns 0 when |got[i] - ref[i]| <= atol + rtol * |ref[i]| for every i in
 * [0, n), NaN never passing; else 1, after printing under `what` how many
 * elements failed and the worst one (largest |diff| / tol). */
static inline int zo_test_close(const char *what, const float *got, const double *ref, size_t n,
                                double atol, double rtol) {
  return zo_test_close_impl(what, got, ref, NULL, n, atol, rtol);
}

/* zo_test_close against a float reference. */
static inline int zo_test_close_f32(const char *what, const float *got, const float *ref, size_t n,
                                    double atol, double rtol) {
  return zo_test_close_impl(what, got, NULL, ref, n, atol, rtol);
}

/* ---- temp directory ----------------------------------------------------- */

/* Creates $TMPDIR/zo-test-<tag>-XXXXXX (TMPDIR defaults to /tmp) mode 0700,
 * its name in dir[0, cap). Returns 0, or -1 after saying why on stderr. */
static inline int zo_test_mkdtemp(char *dir, size_t cap, const char *tag) {
  const char *base = getenv("TMPDIR");
  const int len = snprintf(dir, cap, "%s/zo-test-%s-XXXXXX", base && *base ? base : "/tmp", tag);
  if (len < 0 || (size_t)len >= cap) {
    fprintf(stderr, "temp directory name too long for %zu bytes: %s\n", cap, dir);
    return -1;
  }
  if (!mkdtemp(dir)) {
    fprintf(stderr, "mkdtemp %s: %s (set TMPDIR to a writable directory)\n", dir, strerror(errno));
    return -1;
  }
  return 0;
}

/* Writes the string text to path (created or truncated). Returns 0, or -1
 * after saying why on stderr. */
static inline int zo_test_write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "  cannot create %s: %s\n", path, strerror(errno));
    return -1;
  }
  const bool written = fputs(text, f) >= 0;
  if (fclose(f) != 0 || !written) {
    fprintf(stderr, "  cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

/* dir/name in one of 32 static buffers, reused in turn: valid for the next
 * 31 calls. */
static inline const char *zo_test_path(const char *dir, const char *name) {
  static char buf[32][512];
  static int next;
  char *p = buf[next++ % 32];
  snprintf(p, sizeof buf[0], "%s/%s", dir, name);
  return p;
}

static inline int zo_test_rmtree_entry(const char *path, const struct stat *st, int type,
                                       struct FTW *ftw) {
  (void)st;
  (void)ftw;
  if ((type == FTW_DP ? rmdir(path) : unlink(path)) != 0)
    fprintf(stderr, "  cannot remove %s: %s\n", path, strerror(errno));
  return 0;
}

/* Removes dir and all below it, not following links; says on stderr what
 * could not be removed. Returns 0, or -1 when dir is still there. */
static inline int zo_test_rmtree(const char *dir) {
  nftw(dir, zo_test_rmtree_entry, 16, FTW_DEPTH | FTW_PHYS);
  return access(dir, F_OK) == 0 ? -1 : 0;
}

#endif /* ZO_TEST_H */
