/* Every op of the CPU backend, called through zo_backend_cpu() on the NULL
 * stream, against plain-loop float64 references written here: fixed-seed
 * random inputs, awkward shapes (odd sizes, rows longer than one column or
 * attention block), tolerance atol + |ref| * eps, outputs poisoned with NaN so
 * an unwritten element fails, sentinels around every output so an
 * out-of-bounds write fails, and += outputs pre-filled with nonzero values.
 * Each backward op is also checked against central differences of its float64
 * forward on tiny shapes (gradient of a random linear functional of the
 * output). Not a benchmark: shapes are small. */
#include "zo/adamw8bit.h"
#include "zo/backend.h"
#include "zo/cpu.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo_op_cases.h"
#include "zo_ref64.h"
#include "zo_test.h"

#define GUARD 16                   /* sentinel floats on each side of an output */
#define SENTINEL_BITS 0xdeadbeefu  /* their bit pattern */
#define FD_STEP 1e-5               /* central-difference step */
#define FD_ATOL 2e-5               /* float gradient vs float64 differences */
#define FD_RTOL 1e-4

static zo_backend_t be;

/* ---- buffers, random numbers, comparisons ---------------------------------- */

static void fill_random(float *x, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) x[i] = zo_rng_float(lo, hi);
}

static void fill_nan(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = NAN;
}

/* n floats with GUARD sentinel floats on both sides; free with gfree. */
static float *galloc(size_t n) {
  float *mem = zo_test_xmalloc((n + 2 * GUARD) * sizeof(float));
  uint32_t bits = SENTINEL_BITS;
  for (size_t i = 0; i < GUARD; i++) {
    memcpy(&mem[i], &bits, sizeof bits);
    memcpy(&mem[GUARD + n + i], &bits, sizeof bits);
  }
  return mem + GUARD;
}

static void gfree(float *p) {
  if (p) free(p - GUARD);
}

/* Returns 1 (and says where) when a sentinel around p[0, n) was overwritten. */
static int guard_broken(const char *what, const float *p, size_t n) {
  for (size_t i = 0; i < GUARD; i++) {
    uint32_t lo, hi;
    memcpy(&lo, &p[-(ptrdiff_t)GUARD + (ptrdiff_t)i], sizeof lo);
    memcpy(&hi, &p[n + i], sizeof hi);
    if (lo != SENTINEL_BITS) {
      fprintf(stderr, "  %s: write out of bounds, %zu floats before the start\n", what, GUARD - i);
      return 1;
    }
    if (hi != SENTINEL_BITS) {
      fprintf(stderr, "  %s: write out of bounds, %zu floats past the end\n", what, i + 1);
      return 1;
    }
  }
  return 0;
}

static double *widen(const float *x, size_t n) {
  double *d = zo_test_xmalloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}

static int check_output(const char *what, const float *got, const double *ref, size_t n,
                        double atol, double rtol) {
  return guard_broken(what, got, n) | zo_test_close(what, got, ref, n, atol, rtol);
}

static double dot64(const double *a, const double *b, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* Central differences of loss(ctx) with respect to each x[j] (x is read by
 * loss through ctx) against grad[j], the op's float gradient. */
static int check_fd(const char *what, double *x, size_t n, const float *grad,
                    double (*loss)(void *ctx), void *ctx) {
  double *fd = zo_test_xmalloc(n * sizeof(double));
  for (size_t j = 0; j < n; j++) {
    double saved = x[j];
    x[j] = saved + FD_STEP;
    double lp = loss(ctx);
    x[j] = saved - FD_STEP;
    double lm = loss(ctx);
    x[j] = saved;
    fd[j] = (lp - lm) / (2.0 * FD_STEP);
  }
  int fail = zo_test_close(what, grad, fd, n, FD_ATOL, FD_RTOL);
  free(fd);
  return fail;
}

/* ---- the shared op cases (zo_op_cases.h) ------------------------------------ */

static int n_cases_run; /* printed at the end */

/* Runs fn on the F32 cases of cases[0, n), each after zo_rng_seed(its seed);
 * says which failed. */
static int run_cases(const struct zo_op_case *cases, size_t n, int (*fn)(const struct zo_op_case *)) {
  int fail = 0;
  for (size_t i = 0; i < n; i++) {
    const struct zo_op_case *c = &cases[i];
    if (c->flags & ZO_OPC_HALF_ONLY) continue;
    zo_rng_seed(c->seed);
    const int f = fn(c);
    if (f) {
      char d[200];
      fprintf(stderr, "  (case %s)\n", zo_op_case_describe(c, d, sizeof d));
    }
    fail |= f;
    n_cases_run++;
  }
  return fail;
}
#define RUN_CASES(cases, fn) run_cases((cases), ZO_ARRAY_LEN(cases), (fn))

/* ---- encoder -------------------------------------------------------------- */

static int test_encoder_forward(void) {
  enum { B = 2, T = 7, C = 24, V = 13, maxT = 9 };
  zo_rng_seed(1);
  int32_t inp[B * T];
  for (int i = 0; i < B * T; i++) inp[i] = (int32_t)(zo_rng_u32() % V);
  float *wte = galloc(V * C), *wpe = galloc(maxT * C), *out = galloc(B * T * C);
  fill_random(wte, V * C, -1, 1);
  fill_random(wpe, maxT * C, -1, 1);
  fill_nan(out, B * T * C);
  be->encoder_forward(out, inp, wte, wpe, B, T, C, ZO_F32, NULL);
  double *wte64 = widen(wte, V * C), *wpe64 = widen(wpe, maxT * C);
  double *ref = zo_test_xmalloc(B * T * C * sizeof(double));
  encoder_forward64(ref, inp, wte64, wpe64, B, T, C);
  int fail = check_output("out", out, ref, B * T * C, 0, 1e-7);
  free(ref);
  free(wpe64);
  free(wte64);
  gfree(out);
  gfree(wpe);
  gfree(wte);
  return fail;
}

/* wpe NULL (Llama): out is the token's row, bit for bit (-0 included). */
static int test_encoder_forward_no_wpe(void) {
  enum { B = 2, T = 7, C = 37, V = 13 };
  zo_rng_seed(47);
  int32_t inp[B * T];
  for (int i = 0; i < B * T; i++) inp[i] = (int32_t)(zo_rng_u32() % V);
  float *wte = galloc(V * C), *out = galloc(B * T * C);
  fill_random(wte, V * C, -1, 1);
  for (int v = 0; v < V; v++) wte[v * C] = -0.0f;
  fill_nan(out, B * T * C);
  be->encoder_forward(out, inp, wte, NULL, B, T, C, ZO_F32, NULL);
  int fail = guard_broken("out", out, B * T * C);
  for (int i = 0; i < B * T && !fail; i++)
    if (memcmp(out + (size_t)i * C, wte + (size_t)inp[i] * C, C * sizeof(float))) {
      fprintf(stderr, "  out row %d is not wte row %d bit for bit\n", i, inp[i]);
      fail = 1;
    }
  gfree(out);
  gfree(wte);
  return fail;
}

static int test_encoder_backward(void) {
  enum { B = 3, T = 7, C = 37, V = 5, maxT = 9 }; /* V < B*T: tokens repeat */
  zo_rng_seed(2);
  int32_t inp[B * T];
  for (int i = 0; i < B * T; i++) inp[i] = (int32_t)(zo_rng_u32() % V);
  float *dout = galloc(B * T * C), *dwte = galloc(V * C), *dwpe = galloc(maxT * C);
  fill_random(dout, B * T * C, -1, 1);
  fill_random(dwte, V * C, -1, 1);
  fill_random(dwpe, maxT * C, -1, 1);
  double *ref_wte = widen(dwte, V * C), *ref_wpe = widen(dwpe, maxT * C);
  be->encoder_backward(dwte, dwpe, dout, inp, B, T, C, ZO_F32, NULL);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++) {
        double d = dout[((size_t)b * T + t) * C + c];
        ref_wte[(size_t)inp[b * T + t] * C + c] += d;
        ref_wpe[(size_t)t * C + c] += d;
      }
  int fail = check_output("dwte", dwte, ref_wte, V * C, 1e-6, 1e-6) |
             check_output("dwpe", dwpe, ref_wpe, maxT * C, 1e-6, 1e-6);
  /* dwpe NULL (no position embedding): dwte alone, the same sums again. */
  for (size_t i = 0; i < (size_t)V * C; i++) ref_wte[i] = dwte[i];
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++) ref_wte[(size_t)inp[b * T + t] * C + c] += dout[((size_t)b * T + t) * C + c];
  be->encoder_backward(dwte, NULL, dout, inp, B, T, C, ZO_F32, NULL);
  fail |= check_output("dwte (dwpe NULL)", dwte, ref_wte, V * C, 1e-6, 1e-6);
  free(ref_wpe);
  free(ref_wte);
  gfree(dwpe);
  gfree(dwte);
  gfree(dout);
  return fail;
}

struct encoder_fd {
  const int32_t *inp;
  double *wte, *wpe, *w, *out;
  int B, T, C;
};

static double encoder_fd_loss(void *p) {
  struct encoder_fd *c = p;
  encoder_forward64(c->out, c->inp, c->wte, c->wpe, c->B, c->T, c->C);
  return dot64(c->w, c->out, (size_t)c->B * c->T * c->C);
}

static int test_encoder_backward_fd(void) {
  enum { B = 2, T = 3, C = 4, V = 3, maxT = 4 };
  zo_rng_seed(3);
  int32_t inp[B * T];
  for (int i = 0; i < B * T; i++) inp[i] = (int32_t)(zo_rng_u32() % V);
  float wte[V * C], wpe[maxT * C], dout[B * T * C], dwte[V * C] = {0}, dwpe[maxT * C] = {0};
  fill_random(wte, V * C, -1, 1);
  fill_random(wpe, maxT * C, -1, 1);
  fill_random(dout, B * T * C, -1, 1);
  be->encoder_backward(dwte, dwpe, dout, inp, B, T, C, ZO_F32, NULL);
  struct encoder_fd c = {inp, widen(wte, V * C), widen(wpe, maxT * C), widen(dout, B * T * C),
                         zo_test_xmalloc(B * T * C * sizeof(double)), B, T, C};
  int fail = check_fd("dwte", c.wte, V * C, dwte, encoder_fd_loss, &c) |
             check_fd("dwpe", c.wpe, maxT * C, dwpe, encoder_fd_loss, &c);
  free(c.out);
  free(c.w);
  free(c.wpe);
  free(c.wte);
  return fail;
}

/* ---- layernorm ------------------------------------------------------------ */

static int layernorm_forward_case(const struct zo_op_case *c) {
  const int N = c->N, C = c->C;
  float *inp = galloc(N * C), *w = galloc(C), *bias = galloc(C);
  float *out = galloc(N * C), *mean = galloc(N), *rstd = galloc(N);
  fill_random(inp, N * C, -2, 3); /* nonzero mean */
  fill_random(w, C, -1, 1);
  fill_random(bias, C, -1, 1);
  fill_nan(out, N * C);
  fill_nan(mean, N);
  fill_nan(rstd, N);
  be->layernorm_forward(out, mean, rstd, inp, w, bias, N, C, ZO_F32, NULL);
  double *inp64 = widen(inp, N * C), *w64 = widen(w, C), *b64 = widen(bias, C);
  double *ref = zo_test_xmalloc(N * C * sizeof(double)), *ref_mean = zo_test_xmalloc(N * sizeof(double));
  double *ref_rstd = zo_test_xmalloc(N * sizeof(double));
  layernorm_forward64(ref, ref_mean, ref_rstd, inp64, w64, b64, N, C);
  int fail = check_output("out", out, ref, N * C, 1e-6, 1e-5) |
             check_output("mean", mean, ref_mean, N, 1e-6, 1e-6) |
             check_output("rstd", rstd, ref_rstd, N, 0, 1e-6);
  free(ref_rstd);
  free(ref_mean);
  free(ref);
  free(b64);
  free(w64);
  free(inp64);
  gfree(rstd);
  gfree(mean);
  gfree(out);
  gfree(bias);
  gfree(w);
  gfree(inp);
  return fail;
}

static int test_layernorm_forward(void) {
  return RUN_CASES(zo_layernorm_forward_cases, layernorm_forward_case);
}

static int layernorm_backward_case(const struct zo_op_case *c) {
  const int N = c->N, C = c->C;
  float *inp = galloc(N * C), *w = galloc(C), *bias = galloc(C), *dout = galloc(N * C);
  float *out = galloc(N * C), *mean = galloc(N), *rstd = galloc(N);
  float *dinp = galloc(N * C), *dw = galloc(C), *db = galloc(C);
  fill_random(inp, N * C, -2, 3);
  fill_random(w, C, -1, 1);
  fill_random(bias, C, -1, 1);
  fill_random(dout, N * C, -1, 1);
  fill_random(dinp, N * C, -1, 1); /* all three accumulate */
  fill_random(dw, C, -1, 1);
  fill_random(db, C, -1, 1);
  be->layernorm_forward(out, mean, rstd, inp, w, bias, N, C, ZO_F32, NULL);
  double *ref_dinp = widen(dinp, N * C), *ref_dw = widen(dw, C), *ref_db = widen(db, C);
  be->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, ZO_F32, NULL);
  double *inp64 = widen(inp, N * C), *w64 = widen(w, C), *dout64 = widen(dout, N * C);
  layernorm_backward64(ref_dinp, ref_dw, ref_db, dout64, inp64, w64, N, C);
  int fail = check_output("dinp", dinp, ref_dinp, N * C, 1e-5, 1e-5) |
             check_output("dweight", dw, ref_dw, C, 1e-5, 1e-5) |
             check_output("dbias", db, ref_db, C, 1e-5, 1e-5);
  free(dout64);
  free(w64);
  free(inp64);
  free(ref_db);
  free(ref_dw);
  free(ref_dinp);
  gfree(db);
  gfree(dw);
  gfree(dinp);
  gfree(rstd);
  gfree(mean);
  gfree(out);
  gfree(dout);
  gfree(bias);
  gfree(w);
  gfree(inp);
  return fail;
}

static int test_layernorm_backward(void) {
  return RUN_CASES(zo_layernorm_backward_cases, layernorm_backward_case);
}

struct layernorm_fd {
  double *inp, *w, *bias, *dout, *out;
  int N, C;
};

static double layernorm_fd_loss(void *p) {
  struct layernorm_fd *c = p;
  layernorm_forward64(c->out, NULL, NULL, c->inp, c->w, c->bias, c->N, c->C);
  return dot64(c->dout, c->out, (size_t)c->N * c->C);
}

static int test_layernorm_backward_fd(void) {
  enum { N = 3, C = 5 };
  zo_rng_seed(6);
  float inp[N * C], w[C], bias[C], dout[N * C], out[N * C], mean[N], rstd[N];
  float dinp[N * C] = {0}, dw[C] = {0}, db[C] = {0};
  fill_random(inp, N * C, -2, 2);
  fill_random(w, C, -1, 1);
  fill_random(bias, C, -1, 1);
  fill_random(dout, N * C, -1, 1);
  be->layernorm_forward(out, mean, rstd, inp, w, bias, N, C, ZO_F32, NULL);
  be->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, ZO_F32, NULL);
  struct layernorm_fd c = {widen(inp, N * C), widen(w, C), widen(bias, C), widen(dout, N * C),
                           zo_test_xmalloc(N * C * sizeof(double)), N, C};
  int fail = check_fd("dinp", c.inp, N * C, dinp, layernorm_fd_loss, &c) |
             check_fd("dweight", c.w, C, dw, layernorm_fd_loss, &c) |
             check_fd("dbias", c.bias, C, db, layernorm_fd_loss, &c);
  free(c.out);
  free(c.dout);
  free(c.bias);
  free(c.w);
  free(c.inp);
  return fail;
}

/* ---- rmsnorm -------------------------------------------------------------- */

static int rmsnorm_forward_case(const struct zo_op_case *c) {
  const int N = c->N, C = c->C;
  const float eps = c->eps;
  float *inp = galloc((size_t)N * C), *w = galloc(C), *out = galloc((size_t)N * C), *rstd = galloc(N);
  fill_random(inp, (size_t)N * C, -2, 3); /* nonzero mean: RMS, not variance */
  for (int j = 0; j < C; j++) inp[(size_t)(N / 2) * C + j] = 0.0f; /* rstd = 1/sqrt(eps), out 0 */
  fill_random(w, C, -1, 1);
  fill_nan(out, (size_t)N * C);
  fill_nan(rstd, N);
  be->rmsnorm_forward(out, rstd, inp, w, eps, N, C, ZO_F32, NULL);
  double *inp64 = widen(inp, (size_t)N * C), *w64 = widen(w, C);
  double *ref = zo_test_xmalloc((size_t)N * C * sizeof(double)), *ref_rstd = zo_test_xmalloc(N * sizeof(double));
  rmsnorm_forward64(ref, ref_rstd, inp64, w64, eps, N, C);
  int fail = check_output("out", out, ref, (size_t)N * C, 1e-6, 1e-5) |
             check_output("rstd", rstd, ref_rstd, N, 0, 1e-6) | guard_broken("inp", inp, (size_t)N * C);
  free(ref_rstd);
  free(ref);
  free(w64);
  free(inp64);
  gfree(rstd);
  gfree(out);
  gfree(w);
  gfree(inp);
  return fail;
}

static int test_rmsnorm_forward(void) { return RUN_CASES(zo_rmsnorm_forward_cases, rmsnorm_forward_case); }

static int rmsnorm_backward_case(const struct zo_op_case *c) {
  const int N = c->N, C = c->C;
  const float eps = c->eps;
  const size_t n = (size_t)N * C;
  float *inp = galloc(n), *w = galloc(C), *dout = galloc(n), *out = galloc(n), *rstd = galloc(N);
  float *dinp = galloc(n), *dw = galloc(C), *dinp2 = galloc(n), *dw2 = galloc(C);
  fill_random(inp, n, -2, 3);
  fill_random(w, C, -1, 1);
  fill_random(dout, n, -1, 1);
  fill_random(dinp, n, -1, 1); /* both accumulate */
  fill_random(dw, C, -1, 1);
  memcpy(dinp2, dinp, n * sizeof(float));
  memcpy(dw2, dw, C * sizeof(float));
  be->rmsnorm_forward(out, rstd, inp, w, eps, N, C, ZO_F32, NULL);
  double *ref_dinp = widen(dinp, n), *ref_dw = widen(dw, C);
  be->rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C, ZO_F32, NULL);
  double *inp64 = widen(inp, n), *w64 = widen(w, C), *dout64 = widen(dout, n);
  rmsnorm_backward64(ref_dinp, ref_dw, dout64, inp64, w64, eps, N, C);
  int fail = check_output("dinp", dinp, ref_dinp, n, 1e-5, 1e-5) |
             check_output("dweight", dw, ref_dw, C, 1e-5, 1e-5);
#if !defined(__SANITIZE_THREAD__) /* libgomp is not instrumented: no 2-thread runs under TSan */
  /* Deterministic: the same bits with one thread as with two. */
  const int threads = omp_get_max_threads();
  be->set_threads(threads == 1 ? 2 : 1);
  be->rmsnorm_backward(dinp2, dw2, dout, inp, w, rstd, N, C, ZO_F32, NULL);
  be->set_threads(threads);
  if (memcmp(dinp2, dinp, n * sizeof(float)) || memcmp(dw2, dw, C * sizeof(float))) {
    fprintf(stderr, "  rmsnorm_backward differs between 1 and 2 threads\n");
    fail = 1;
  }
#endif
  free(dout64);
  free(w64);
  free(inp64);
  free(ref_dw);
  free(ref_dinp);
  gfree(dw2);
  gfree(dinp2);
  gfree(dw);
  gfree(dinp);
  gfree(rstd);
  gfree(out);
  gfree(dout);
  gfree(w);
  gfree(inp);
  return fail;
}

static int test_rmsnorm_backward(void) { return RUN_CASES(zo_rmsnorm_backward_cases, rmsnorm_backward_case); }

struct rmsnorm_fd {
  double *inp, *w, *dout, *out;
  double eps;
  int N, C;
};

static double rmsnorm_fd_loss(void *p) {
  struct rmsnorm_fd *c = p;
  rmsnorm_forward64(c->out, NULL, c->inp, c->w, c->eps, c->N, c->C);
  return dot64(c->dout, c->out, (size_t)c->N * c->C);
}

static int test_rmsnorm_backward_fd(void) {
  enum { N = 3, C = 5 };
  zo_rng_seed(42);
  float inp[N * C], w[C], dout[N * C], out[N * C], rstd[N], dinp[N * C] = {0}, dw[C] = {0};
  fill_random(inp, N * C, -2, 2);
  fill_random(w, C, -1, 1);
  fill_random(dout, N * C, -1, 1);
  be->rmsnorm_forward(out, rstd, inp, w, 1e-5f, N, C, ZO_F32, NULL);
  be->rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C, ZO_F32, NULL);
  struct rmsnorm_fd c = {widen(inp, N * C), widen(w, C), widen(dout, N * C),
                         zo_test_xmalloc(N * C * sizeof(double)), (double)1e-5f, N, C};
  int fail = check_fd("dinp", c.inp, N * C, dinp, rmsnorm_fd_loss, &c) |
             check_fd("dweight", c.w, C, dw, rmsnorm_fd_loss, &c);
  free(c.out);
  free(c.dout);
  free(c.w);
  free(c.inp);
  return fail;
}

/* ---- matmul --------------------------------------------------------------- */

static int matmul_forward_case(const struct zo_op_case *c) {
  const int N = c->N, C = c->C, OC = c->OC, with_bias = c->flags & ZO_OPC_BIAS;
  float *inp = galloc((size_t)N * C), *w = galloc((size_t)OC * C), *bias = galloc(OC);
  float *out = galloc((size_t)N * OC);
  fill_random(inp, (size_t)N * C, -1, 1);
  fill_random(w, (size_t)OC * C, -1, 1);
  fill_random(bias, OC, -1, 1);
  fill_nan(out, (size_t)N * OC);
  be->matmul_forward(out, inp, w, with_bias ? bias : NULL, N, C, OC, ZO_F32, NULL);
  double *inp64 = widen(inp, (size_t)N * C), *w64 = widen(w, (size_t)OC * C);
  double *b64 = widen(bias, OC);
  double *ref = zo_test_xmalloc((size_t)N * OC * sizeof(double));
  matmul_forward64(ref, inp64, w64, with_bias ? b64 : NULL, N, C, OC);
  int fail =
      check_output(with_bias ? "out" : "out (no bias)", out, ref, (size_t)N * OC, 1e-5, 1e-5);
  free(ref);
  free(b64);
  free(w64);
  free(inp64);
  gfree(out);
  gfree(bias);
  gfree(w);
  gfree(inp);
  return fail;
}

static int test_matmul_forward(void) { return RUN_CASES(zo_matmul_forward_cases, matmul_forward_case); }

/* Flags select which optional outputs are passed (the others are NULL). */
static int matmul_backward_case(const struct zo_op_case *c) {
  const int N = c->N, C = c->C, OC = c->OC;
  const int with_dinp = c->flags & ZO_OPC_DINP, with_dbias = c->flags & ZO_OPC_BIAS;
  float *inp = galloc((size_t)N * C), *w = galloc((size_t)OC * C), *dout = galloc((size_t)N * OC);
  float *dinp = galloc((size_t)N * C), *dw = galloc((size_t)OC * C), *db = galloc(OC);
  fill_random(inp, (size_t)N * C, -1, 1);
  fill_random(w, (size_t)OC * C, -1, 1);
  fill_random(dout, (size_t)N * OC, -1, 1);
  fill_nan(dinp, (size_t)N * C); /* overwritten */
  fill_random(dw, (size_t)OC * C, -1, 1); /* accumulated */
  fill_random(db, OC, -1, 1);
  double *ref_dinp = zo_test_xmalloc((size_t)N * C * sizeof(double));
  double *ref_dw = widen(dw, (size_t)OC * C), *ref_db = widen(db, OC);
  be->matmul_backward(with_dinp ? dinp : NULL, dw, with_dbias ? db : NULL, dout, inp, w, N, C, OC, ZO_F32,
                      NULL);
  double *inp64 = widen(inp, (size_t)N * C), *w64 = widen(w, (size_t)OC * C);
  double *dout64 = widen(dout, (size_t)N * OC);
  matmul_backward64(ref_dinp, ref_dw, with_dbias ? ref_db : NULL, dout64, inp64, w64, N, C, OC);
  /* dweight and dbias are fp32 sums over the N rows: past 16 rows their
   * rounding error grows with N, and so does atol. */
  const double atol_sum = 2e-6 * (N > 16 ? N / 16.0 : 1.0);
  int fail = check_output("dweight", dw, ref_dw, (size_t)OC * C, atol_sum, 1e-5);
  if (with_dinp) fail |= check_output("dinp", dinp, ref_dinp, (size_t)N * C, 1e-5, 1e-5);
  if (with_dbias) fail |= check_output("dbias", db, ref_db, OC, atol_sum, 1e-5);
  free(dout64);
  free(w64);
  free(inp64);
  free(ref_db);
  free(ref_dw);
  free(ref_dinp);
  gfree(db);
  gfree(dw);
  gfree(dinp);
  gfree(dout);
  gfree(w);
  gfree(inp);
  return fail;
}

static int test_matmul_backward(void) { return RUN_CASES(zo_matmul_backward_cases, matmul_backward_case); }

struct matmul_fd {
  double *inp, *w, *bias, *dout, *out;
  int N, C, OC;
};

static double matmul_fd_loss(void *p) {
  struct matmul_fd *c = p;
  matmul_forward64(c->out, c->inp, c->w, c->bias, c->N, c->C, c->OC);
  return dot64(c->dout, c->out, (size_t)c->N * c->OC);
}

static int test_matmul_backward_fd(void) {
  enum { N = 3, C = 4, OC = 5 };
  zo_rng_seed(9);
  float inp[N * C], w[OC * C], bias[OC], dout[N * OC];
  float dinp[N * C], dw[OC * C] = {0}, db[OC] = {0};
  fill_random(inp, N * C, -1, 1);
  fill_random(w, OC * C, -1, 1);
  fill_random(bias, OC, -1, 1);
  fill_random(dout, N * OC, -1, 1);
  be->matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC, ZO_F32, NULL);
  struct matmul_fd c = {widen(inp, N * C), widen(w, OC * C), widen(bias, OC), widen(dout, N * OC),
                        zo_test_xmalloc(N * OC * sizeof(double)), N, C, OC};
  int fail = check_fd("dinp", c.inp, N * C, dinp, matmul_fd_loss, &c) |
             check_fd("dweight", c.w, OC * C, dw, matmul_fd_loss, &c) |
             check_fd("dbias", c.bias, OC, db, matmul_fd_loss, &c);
  free(c.out);
  free(c.dout);
  free(c.bias);
  free(c.w);
  free(c.inp);
  return fail;
}

/* ---- attention ------------------------------------------------------------ */

static int attention_forward_case(const struct zo_op_case *c) {
  const int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, hs = c->hs;
  const size_t ld = (size_t)(NH + 2 * NKV) * hs;
  size_t n_qkv = (size_t)B * T * ld, n_out = (size_t)B * T * NH * hs, n_att = (size_t)B * NH * T * T;
  float *qkv = galloc(n_qkv), *out = galloc(n_out), *att = galloc(n_att);
  fill_random(qkv, n_qkv, -2, 2);
  fill_nan(out, n_out);
  fill_nan(att, n_att);
  float *qkv_in = galloc(n_qkv);
  memcpy(qkv_in, qkv, n_qkv * sizeof(float));
  be->attention_forward(out, att, qkv, B, T, NH, NKV, hs, ZO_F32, NULL);
  double *qkv64 = widen(qkv, n_qkv);
  double *ref = zo_test_xmalloc(n_out * sizeof(double)), *ref_att = zo_test_xmalloc(n_att * sizeof(double));
  attention_forward64(ref, ref_att, qkv64, B, T, NH, NKV, hs);
  int fail = check_output("out", out, ref, n_out, 1e-6, 1e-5) |
             check_output("att", att, ref_att, n_att, 1e-7, 1e-5) | guard_broken("qkv", qkv, n_qkv);
  if (memcmp(qkv, qkv_in, n_qkv * sizeof(float))) {
    fprintf(stderr, "  qkv (read only) was written\n");
    fail = 1;
  }
  /* Above the diagonal: exactly 0, not merely small. */
  for (size_t bh = 0; bh < (size_t)B * NH && !fail; bh++)
    for (int t = 0; t < T && !fail; t++)
      for (int u = t + 1; u < T && !fail; u++)
        if (att[(bh * T + t) * T + u] != 0.0f) {
          fprintf(stderr, "  att above the diagonal: (bh %zu, %d, %d) = %g, want 0\n", bh, t, u,
                  (double)att[(bh * T + t) * T + u]);
          fail = 1;
        }
  free(ref_att);
  free(ref);
  free(qkv64);
  gfree(qkv_in);
  gfree(att);
  gfree(out);
  gfree(qkv);
  return fail;
}

static int test_attention_forward(void) { return RUN_CASES(zo_attention_cases, attention_forward_case); }

static int attention_backward_case(const struct zo_op_case *c) {
  const int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, hs = c->hs;
  const size_t ld = (size_t)(NH + 2 * NKV) * hs;
  size_t n_qkv = (size_t)B * T * ld, n_out = (size_t)B * T * NH * hs, n_att = (size_t)B * NH * T * T;
  float *qkv = galloc(n_qkv), *out = galloc(n_out), *att = galloc(n_att);
  float *dout = galloc(n_out), *dqkv = galloc(n_qkv), *datt = galloc(n_att);
  fill_random(qkv, n_qkv, -2, 2);
  fill_random(dout, n_out, -1, 1);
  fill_nan(dqkv, n_qkv); /* overwritten */
  fill_nan(datt, n_att); /* scratch: NaN must not leak into dqkv */
  be->attention_forward(out, att, qkv, B, T, NH, NKV, hs, ZO_F32, NULL);
  be->attention_backward(dqkv, datt, dout, qkv, att, B, T, NH, NKV, hs, ZO_F32, NULL);
  double *qkv64 = widen(qkv, n_qkv), *dout64 = widen(dout, n_out);
  double *ref = zo_test_xmalloc(n_qkv * sizeof(double));
  attention_backward64(ref, dout64, qkv64, B, T, NH, NKV, hs);
  int fail = check_output("dqkv", dqkv, ref, n_qkv, 2e-6, 2e-5) | guard_broken("datt", datt, n_att);
  free(ref);
  free(dout64);
  free(qkv64);
  gfree(datt);
  gfree(dqkv);
  gfree(dout);
  gfree(att);
  gfree(out);
  gfree(qkv);
  return fail;
}

static int test_attention_backward(void) { return RUN_CASES(zo_attention_cases, attention_backward_case); }

struct attention_fd {
  double *qkv, *dout, *out;
  int B, T, NH, NKV, hs;
};

static double attention_fd_loss(void *p) {
  struct attention_fd *c = p;
  attention_forward64(c->out, NULL, c->qkv, c->B, c->T, c->NH, c->NKV, c->hs);
  return dot64(c->dout, c->out, (size_t)c->B * c->T * c->NH * c->hs);
}

static int attention_fd_case(int B, int T, int NH, int NKV, int hs) {
  const size_t n_qkv = (size_t)B * T * (NH + 2 * NKV) * hs, n_out = (size_t)B * T * NH * hs;
  const size_t n_att = (size_t)B * NH * T * T;
  float *qkv = galloc(n_qkv), *out = galloc(n_out), *att = galloc(n_att), *dout = galloc(n_out);
  float *dqkv = galloc(n_qkv), *datt = galloc(n_att);
  fill_random(qkv, n_qkv, -2, 2);
  fill_random(dout, n_out, -1, 1);
  be->attention_forward(out, att, qkv, B, T, NH, NKV, hs, ZO_F32, NULL);
  be->attention_backward(dqkv, datt, dout, qkv, att, B, T, NH, NKV, hs, ZO_F32, NULL);
  struct attention_fd c = {widen(qkv, n_qkv), widen(dout, n_out),
                           zo_test_xmalloc(n_out * sizeof(double)), B, T, NH, NKV, hs};
  int fail = check_fd("dqkv", c.qkv, n_qkv, dqkv, attention_fd_loss, &c);
  if (fail) fprintf(stderr, "  (B=%d T=%d NH=%d NKV=%d hs=%d)\n", B, T, NH, NKV, hs);
  free(c.out);
  free(c.dout);
  free(c.qkv);
  gfree(datt);
  gfree(dqkv);
  gfree(dout);
  gfree(att);
  gfree(out);
  gfree(qkv);
  return fail;
}

static int test_attention_backward_fd(void) {
  zo_rng_seed(12);
  return attention_fd_case(2, 4, 2, 2, 3) | attention_fd_case(2, 4, 6, 2, 2) |
         attention_fd_case(1, 5, 3, 1, 3);
}

/* ---- rope ----------------------------------------------------------------- */

/* Llama's tables for positions [0, maxT): angle t * 10000^(-2i/hs). */
static void rope_tables(float *cos_t, float *sin_t, int maxT, int hs) {
  const int h2 = hs / 2;
  for (int t = 0; t < maxT; t++)
    for (int i = 0; i < h2; i++) {
      const double a = t * pow(10000.0, -2.0 * i / hs);
      cos_t[(size_t)t * h2 + i] = (float)cos(a);
      sin_t[(size_t)t * h2 + i] = (float)sin(a);
    }
}

/* Returns 1 unless the v part of every row of x equals that of want bitwise. */
static int v_changed(const char *what, const float *x, const float *want, int B, int T, int NH,
                     int NKV, int hs) {
  const size_t ld = (size_t)(NH + 2 * NKV) * hs, v0 = (size_t)(NH + NKV) * hs;
  for (size_t r = 0; r < (size_t)B * T; r++)
    if (memcmp(x + r * ld + v0, want + r * ld + v0, (size_t)NKV * hs * sizeof(float))) {
      fprintf(stderr, "  %s: the v heads of row %zu changed\n", what, r);
      return 1;
    }
  return 0;
}

/* Forward and backward on (B, T, NH, NKV, hs) against the float64 rotation,
 * v untouched, and backward the exact transpose: <R x, y> = <x, R^T y>. */
static int rope_case(const struct zo_op_case *c) {
  const int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, hs = c->hs;
  const int maxT = T + 3, h2 = hs / 2;
  const size_t n = (size_t)B * T * (NH + 2 * NKV) * hs, nt = (size_t)maxT * h2;
  float *x = galloc(n), *x0 = galloc(n), *y = galloc(n), *y0 = galloc(n);
  float *cos_t = galloc(nt), *sin_t = galloc(nt);
  rope_tables(cos_t, sin_t, maxT, hs);
  fill_random(x0, n, -2, 2);
  fill_random(y0, n, -1, 1);
  memcpy(x, x0, n * sizeof(float));
  memcpy(y, y0, n * sizeof(float));
  be->rope_forward(x, cos_t, sin_t, B, T, NH, NKV, hs, ZO_F32, NULL);
  be->rope_backward(y, cos_t, sin_t, B, T, NH, NKV, hs, ZO_F32, NULL);
  double *c64 = widen(cos_t, nt), *s64 = widen(sin_t, nt);
  double *rx = widen(x0, n), *ry = widen(y0, n);
  rope64(rx, c64, s64, 1.0, B, T, NH, NKV, hs);
  rope64(ry, c64, s64, -1.0, B, T, NH, NKV, hs);
  int fail = check_output("rope_forward", x, rx, n, 1e-6, 1e-6) |
             check_output("rope_backward", y, ry, n, 1e-6, 1e-6) |
             v_changed("rope_forward", x, x0, B, T, NH, NKV, hs) |
             v_changed("rope_backward", y, y0, B, T, NH, NKV, hs) | guard_broken("cos", cos_t, nt) |
             guard_broken("sin", sin_t, nt);
  double lhs = 0.0, rhs = 0.0, mag = 0.0; /* <R x0, y0> and <x0, R^T y0> */
  for (size_t i = 0; i < n; i++) {
    lhs += (double)x[i] * y0[i];
    rhs += (double)x0[i] * y[i];
    mag += fabs((double)x0[i] * y0[i]);
  }
  if (!(fabs(lhs - rhs) <= 1e-6 * mag)) {
    fprintf(stderr, "  <R x, y> = %.12g but <x, R^T y> = %.12g\n", lhs, rhs);
    fail = 1;
  }
  free(ry);
  free(rx);
  free(s64);
  free(c64);
  gfree(sin_t);
  gfree(cos_t);
  gfree(y0);
  gfree(y);
  gfree(x0);
  gfree(x);
  return fail;
}

static int test_rope(void) { return RUN_CASES(zo_rope_cases, rope_case); }

struct rope_fd {
  double *qkv, *cos_t, *sin_t, *dout, *out;
  int B, T, NH, NKV, hs;
};

static double rope_fd_loss(void *p) {
  struct rope_fd *c = p;
  const size_t n = (size_t)c->B * c->T * (c->NH + 2 * c->NKV) * c->hs;
  memcpy(c->out, c->qkv, n * sizeof(double));
  rope64(c->out, c->cos_t, c->sin_t, 1.0, c->B, c->T, c->NH, c->NKV, c->hs);
  return dot64(c->dout, c->out, n);
}

/* The gradient of <dout, rope(qkv)> is rope_backward(dout), v's part dout's. */
static int test_rope_backward_fd(void) {
  enum { B = 2, T = 3, NH = 4, NKV = 2, hs = 4, n = B * T * (NH + 2 * NKV) * hs };
  zo_rng_seed(44);
  float cos_t[T * hs / 2], sin_t[T * hs / 2], dout[n], grad[n];
  rope_tables(cos_t, sin_t, T, hs);
  for (int i = 0; i < T * hs / 2; i++) { /* angles of order 1 at every position */
    const double a = zo_rng_uniform() * 6.0;
    cos_t[i] = (float)cos(a), sin_t[i] = (float)sin(a);
  }
  float qkv[n];
  fill_random(qkv, n, -2, 2);
  fill_random(dout, n, -1, 1);
  memcpy(grad, dout, sizeof grad);
  be->rope_backward(grad, cos_t, sin_t, B, T, NH, NKV, hs, ZO_F32, NULL);
  struct rope_fd c = {widen(qkv, n), widen(cos_t, T * hs / 2), widen(sin_t, T * hs / 2), widen(dout, n),
                      zo_test_xmalloc(n * sizeof(double)), B, T, NH, NKV, hs};
  int fail = check_fd("dqkv", c.qkv, n, grad, rope_fd_loss, &c);
  free(c.out);
  free(c.dout);
  free(c.sin_t);
  free(c.cos_t);
  free(c.qkv);
  return fail;
}

/* ---- gelu and residual ---------------------------------------------------- */

static int test_gelu_forward(void) {
  enum { N = 1001 };
  zo_rng_seed(13);
  float *inp = galloc(N), *out = galloc(N);
  fill_random(inp, N, -8, 8);
  inp[0] = 0.0f;
  inp[1] = -30.0f;
  inp[2] = 30.0f;
  fill_nan(out, N);
  be->gelu_forward(out, inp, N, ZO_F32, NULL);
  double *ref = zo_test_xmalloc(N * sizeof(double));
  for (int i = 0; i < N; i++) ref[i] = gelu64(inp[i]);
  int fail = check_output("out", out, ref, N, 1e-7, 1e-6);
  free(ref);
  gfree(out);
  gfree(inp);
  return fail;
}

static int test_gelu_backward(void) {
  enum { N = 1001 };
  zo_rng_seed(14);
  float *inp = galloc(N), *dout = galloc(N), *dinp = galloc(N);
  fill_random(inp, N, -8, 8);
  inp[0] = 0.0f;
  fill_random(dout, N, -1, 1);
  fill_nan(dinp, N);
  double *ref = zo_test_xmalloc(N * sizeof(double));
  for (int i = 0; i < N; i++) ref[i] = gelu_grad64(inp[i]) * dout[i];
  be->gelu_backward(dinp, inp, dout, N, ZO_F32, NULL);
  int fail = check_output("dinp", dinp, ref, N, 1e-6, 1e-5);
  /* dinp may alias dout. */
  be->gelu_backward(dout, inp, dout, N, ZO_F32, NULL);
  fail |= check_output("dinp (aliasing dout)", dout, ref, N, 1e-6, 1e-5);
  free(ref);
  gfree(dinp);
  gfree(dout);
  gfree(inp);
  return fail;
}

struct gelu_fd {
  double *inp, *dout;
  int N;
};

static double gelu_fd_loss(void *p) {
  struct gelu_fd *c = p;
  double s = 0.0;
  for (int i = 0; i < c->N; i++) s += c->dout[i] * gelu64(c->inp[i]);
  return s;
}

static int test_gelu_backward_fd(void) {
  enum { N = 17 };
  zo_rng_seed(15);
  float inp[N], dout[N], dinp[N];
  fill_random(inp, N, -5, 5);
  fill_random(dout, N, -1, 1);
  be->gelu_backward(dinp, inp, dout, N, ZO_F32, NULL);
  struct gelu_fd c = {widen(inp, N), widen(dout, N), N};
  int fail = check_fd("dinp", c.inp, N, dinp, gelu_fd_loss, &c);
  free(c.dout);
  free(c.inp);
  return fail;
}

/* ---- swiglu --------------------------------------------------------------- */

/* Gates over [-8, 8] with 0 and +-30, -100 (sigmoid saturating) in row 0. */
static void swiglu_inputs(float *inp, size_t N, int I) {
  fill_random(inp, N * 2 * (size_t)I, -8, 8);
  const float edge[] = {0.0f, 30.0f, -30.0f, -100.0f};
  for (int i = 0; i < 4 && i < I; i++) inp[i] = edge[i];
}

static int swiglu_case(size_t N, int I) {
  const size_t ni = N * 2 * (size_t)I, no = N * (size_t)I;
  float *inp = galloc(ni), *out = galloc(no), *dout = galloc(no), *dinp = galloc(ni);
  swiglu_inputs(inp, N, I);
  fill_random(dout, no, -1, 1);
  fill_nan(out, no);
  fill_nan(dinp, ni);
  be->swiglu_forward(out, inp, N, I, ZO_F32, NULL);
  be->swiglu_backward(dinp, inp, dout, N, I, ZO_F32, NULL);
  double *inp64 = widen(inp, ni), *dout64 = widen(dout, no);
  double *ref = zo_test_xmalloc(no * sizeof(double)), *ref_d = zo_test_xmalloc(ni * sizeof(double));
  swiglu_forward64(ref, inp64, N, I);
  swiglu_backward64(ref_d, inp64, dout64, N, I);
  int fail = check_output("out", out, ref, no, 1e-7, 1e-6) |
             check_output("dinp", dinp, ref_d, ni, 1e-7, 1e-5) | guard_broken("inp", inp, ni) |
             guard_broken("dout", dout, no);
  if (fail) fprintf(stderr, "  (N=%zu I=%d)\n", N, I);
  free(ref_d);
  free(ref);
  free(dout64);
  free(inp64);
  gfree(dinp);
  gfree(dout);
  gfree(out);
  gfree(inp);
  return fail;
}

static int test_swiglu(void) {
  zo_rng_seed(45);
  /* Odd I; a row longer than one 16384-column task; one column. */
  return swiglu_case(13, 37) | swiglu_case(3, 20001) | swiglu_case(5, 1);
}

struct swiglu_fd {
  double *inp, *dout, *out;
  size_t N;
  int I;
};

static double swiglu_fd_loss(void *p) {
  struct swiglu_fd *c = p;
  swiglu_forward64(c->out, c->inp, c->N, c->I);
  return dot64(c->dout, c->out, c->N * c->I);
}

static int test_swiglu_backward_fd(void) {
  enum { N = 3, I = 5 };
  zo_rng_seed(46);
  float inp[N * 2 * I], dout[N * I], dinp[N * 2 * I];
  fill_random(inp, N * 2 * I, -4, 4);
  fill_random(dout, N * I, -1, 1);
  be->swiglu_backward(dinp, inp, dout, N, I, ZO_F32, NULL);
  struct swiglu_fd c = {widen(inp, N * 2 * I), widen(dout, N * I), zo_test_xmalloc(N * I * sizeof(double)), N, I};
  int fail = check_fd("dinp", c.inp, N * 2 * I, dinp, swiglu_fd_loss, &c);
  free(c.out);
  free(c.dout);
  free(c.inp);
  return fail;
}

static int test_residual_forward(void) {
  enum { N = 1001 };
  zo_rng_seed(16);
  float *a = galloc(N), *b = galloc(N), *out = galloc(N);
  fill_random(a, N, -1, 1);
  fill_random(b, N, -1, 1);
  fill_nan(out, N);
  double *ref = zo_test_xmalloc(N * sizeof(double));
  for (int i = 0; i < N; i++) ref[i] = (double)a[i] + b[i];
  be->residual_forward(out, a, b, N, ZO_F32, NULL);
  int fail = check_output("out", out, ref, N, 0, 1e-7);
  /* out may alias either input. */
  be->residual_forward(a, a, b, N, ZO_F32, NULL);
  fail |= check_output("out (aliasing inp1)", a, ref, N, 0, 1e-7);
  fill_random(a, N, -1, 1);
  for (int i = 0; i < N; i++) ref[i] = (double)a[i] + b[i];
  be->residual_forward(b, a, b, N, ZO_F32, NULL);
  fail |= check_output("out (aliasing inp2)", b, ref, N, 0, 1e-7);
  free(ref);
  gfree(out);
  gfree(b);
  gfree(a);
  return fail;
}

static int test_residual_backward(void) {
  enum { N = 1001 };
  zo_rng_seed(17);
  float *dout = galloc(N), *d1 = galloc(N), *d2 = galloc(N);
  fill_random(dout, N, -1, 1);
  fill_random(d1, N, -1, 1); /* both accumulate */
  fill_random(d2, N, -1, 1);
  double *ref1 = widen(d1, N), *ref2 = widen(d2, N);
  for (int i = 0; i < N; i++) {
    ref1[i] += dout[i];
    ref2[i] += dout[i];
  }
  be->residual_backward(d1, d2, dout, N, ZO_F32, NULL);
  int fail = check_output("dinp1", d1, ref1, N, 0, 1e-7) |
             check_output("dinp2", d2, ref2, N, 0, 1e-7);
  free(ref2);
  free(ref1);
  gfree(d2);
  gfree(d1);
  gfree(dout);
  return fail;
}

struct residual_fd {
  double *a, *b, *dout;
  int N;
};

static double residual_fd_loss(void *p) {
  struct residual_fd *c = p;
  double s = 0.0;
  for (int i = 0; i < c->N; i++) s += c->dout[i] * (c->a[i] + c->b[i]);
  return s;
}

static int test_residual_backward_fd(void) {
  enum { N = 9 };
  zo_rng_seed(18);
  float a[N], b[N], dout[N], d1[N] = {0}, d2[N] = {0};
  fill_random(a, N, -1, 1);
  fill_random(b, N, -1, 1);
  fill_random(dout, N, -1, 1);
  be->residual_backward(d1, d2, dout, N, ZO_F32, NULL);
  struct residual_fd c = {widen(a, N), widen(b, N), widen(dout, N), N};
  int fail = check_fd("dinp1", c.a, N, d1, residual_fd_loss, &c) |
             check_fd("dinp2", c.b, N, d2, residual_fd_loss, &c);
  free(c.dout);
  free(c.b);
  free(c.a);
  return fail;
}

/* ---- cross-entropy -------------------------------------------------------- */

/* Returns 1 unless the padded columns [V, Vp) of dlogits (N,Vp) are exactly 0. */
static int padding_nonzero(const char *what, const float *dlogits, int N, int V, int Vp) {
  for (int n = 0; n < N; n++)
    for (int i = V; i < Vp; i++)
      if (dlogits[(size_t)n * Vp + i] != 0.0f) {
        fprintf(stderr, "  %s[%d, %d] (padding) = %g, want 0\n", what, n, i,
                (double)dlogits[(size_t)n * Vp + i]);
        return 1;
      }
  return 0;
}

/* N=13 rows of V=101 real and Vp-V padded columns; padding holds NaN, so
 * reading it anywhere poisons the row. offset shifts every logit (max
 * subtraction must keep exp in range). Targets include -1. */
static void crossentropy_inputs(float *logits, int32_t *targets, int N, int V, int Vp,
                                float offset) {
  for (int n = 0; n < N; n++) {
    fill_random(logits + (size_t)n * Vp, V, offset - 8, offset + 8);
    fill_nan(logits + (size_t)n * Vp + V, Vp - V);
    targets[n] = (int32_t)(zo_rng_u32() % V);
  }
  targets[2] = -1;
  targets[N - 1] = -1;
  targets[0] = V - 1; /* the last real column */
}

static int crossentropy_case(float offset) {
  enum { N = 13, V = 101, Vp = 128 };
  const float dloss = 1.0f / 11.0f; /* mean over the valid rows */
  size_t n_logits = (size_t)N * Vp;
  int32_t targets[N];
  float *logits = galloc(n_logits), *losses = galloc(N), *dlogits = galloc(n_logits);
  crossentropy_inputs(logits, targets, N, V, Vp, offset);
  fill_nan(losses, N);
  fill_nan(dlogits, n_logits);
  be->crossentropy_forward(losses, dlogits, logits, targets, dloss, N, V, Vp, ZO_F32, NULL);
  double *logits64 = widen(logits, n_logits);
  double *ref = zo_test_xmalloc(N * sizeof(double)), *ref_d = zo_test_xmalloc(n_logits * sizeof(double));
  crossentropy_forward64(ref, ref_d, logits64, targets, dloss, N, V, Vp);
  /* Loss to ~1e-6 relative (PyTorch parity); padded columns exactly 0. */
  int fail = check_output("losses", losses, ref, N, 1e-6, 1e-6) |
             check_output("dlogits", dlogits, ref_d, n_logits, 1e-8, 1e-5) |
             padding_nonzero("dlogits", dlogits, N, V, Vp);

  /* Without dlogits: the same losses, nothing else written. */
  float *losses2 = galloc(N);
  fill_nan(losses2, N);
  be->crossentropy_forward(losses2, NULL, logits, targets, dloss, N, V, Vp, ZO_F32, NULL);
  fail |= check_output("losses (dlogits NULL)", losses2, ref, N, 1e-6, 1e-6);

  /* dlogits aliasing logits. */
  fill_nan(losses2, N);
  be->crossentropy_forward(losses2, logits, logits, targets, dloss, N, V, Vp, ZO_F32, NULL);
  fail |= check_output("losses (in place)", losses2, ref, N, 1e-6, 1e-6) |
          check_output("dlogits (in place)", logits, ref_d, n_logits, 1e-8, 1e-5) |
          padding_nonzero("dlogits (in place)", logits, N, V, Vp);
  gfree(losses2);
  free(ref_d);
  free(ref);
  free(logits64);
  gfree(dlogits);
  gfree(losses);
  gfree(logits);
  return fail;
}

static int test_crossentropy_forward(void) {
  zo_rng_seed(19);
  return crossentropy_case(0.0f) | crossentropy_case(300.0f) | crossentropy_case(-300.0f);
}

struct crossentropy_fd {
  double *logits, *losses;
  const int32_t *targets;
  double dloss;
  int N, V, Vp;
};

static double crossentropy_fd_loss(void *p) {
  struct crossentropy_fd *c = p;
  crossentropy_forward64(c->losses, NULL, c->logits, c->targets, c->dloss, c->N, c->V, c->Vp);
  double s = 0.0;
  for (int n = 0; n < c->N; n++) s += c->dloss * c->losses[n];
  return s;
}

static int test_crossentropy_fd(void) {
  enum { N = 4, V = 7, Vp = 8 };
  zo_rng_seed(20);
  float logits[N * Vp], losses[N], dlogits[N * Vp];
  int32_t targets[N] = {3, -1, 0, V - 1};
  fill_random(logits, N * Vp, -3, 3);
  for (int n = 0; n < N; n++) logits[n * Vp + V] = 1e30f; /* padding: must not matter */
  be->crossentropy_forward(losses, dlogits, logits, targets, 0.7f, N, V, Vp, ZO_F32, NULL);
  struct crossentropy_fd c = {widen(logits, N * Vp), zo_test_xmalloc(N * sizeof(double)), targets, 0.7,
                              N, V, Vp};
  /* The float64 forward never reads padding either, so its differences there
   * are 0: the op's padded gradient must be 0 too. */
  int fail = check_fd("dlogits", c.logits, N * Vp, dlogits, crossentropy_fd_loss, &c) |
             padding_nonzero("dlogits", dlogits, N, V, Vp);
  free(c.losses);
  free(c.logits);
  return fail;
}

/* ---- the table, memory, streams ------------------------------------------- */

static int test_backend_table(void) {
  int fail = strcmp(be->name, "cpu") != 0;
  const void *fields[] = {
      (const void *)be->mem_alloc,        (const void *)be->mem_free,
      (const void *)be->mem_info,         (const void *)be->set_threads,
      (const void *)be->stream_create,    (const void *)be->stream_destroy,
      (const void *)be->stream_synchronize, (const void *)be->event_create,
      (const void *)be->event_destroy,    (const void *)be->event_record,
      (const void *)be->stream_wait_event, (const void *)be->event_synchronize,
      (const void *)be->memcpy_async,     (const void *)be->memset_async,
      (const void *)be->encoder_forward,  (const void *)be->encoder_backward,
      (const void *)be->layernorm_forward, (const void *)be->layernorm_backward,
      (const void *)be->rmsnorm_forward,  (const void *)be->rmsnorm_backward,
      (const void *)be->rope_forward,     (const void *)be->rope_backward,
      (const void *)be->swiglu_forward,   (const void *)be->swiglu_backward,
      (const void *)be->matmul_forward,   (const void *)be->matmul_backward,
      (const void *)be->attention_forward, (const void *)be->attention_backward,
      (const void *)be->gelu_forward,     (const void *)be->gelu_backward,
      (const void *)be->residual_forward, (const void *)be->residual_backward,
      (const void *)be->crossentropy_forward, (const void *)be->adamw_update, (const void *)be->adamw8bit_update, (const void *)be->cast,
      (const void *)be->sumsq,
  };
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
    if (!fields[i]) {
      fprintf(stderr, "  table field %zu is NULL\n", i);
      fail = 1;
    }
  return fail;
}

static int test_memory(void) {
  int fail = 0;
  size_t free_bytes = 0, total_bytes = 0;
  int err = be->mem_info(&free_bytes, &total_bytes);
  if (err || total_bytes == 0 || free_bytes > total_bytes) {
    fprintf(stderr, "  mem_info: %d, free %zu, total %zu (%s)\n", err, free_bytes, total_bytes,
            zo_last_error());
    fail = 1;
  }
  void *p = NULL;
  err = be->mem_alloc(&p, 10000);
  if (err || !p || (uintptr_t)p % 4096 != 0) {
    fprintf(stderr, "  mem_alloc(10000): %d, %p\n", err, p);
    return 1;
  }
  unsigned char src[10000];
  for (size_t i = 0; i < sizeof src; i++) src[i] = (unsigned char)(i * 7);
  be->memset_async(p, 0xab, 10000, NULL);
  fail |= ((unsigned char *)p)[9999] != 0xab;
  be->memcpy_async(p, src, sizeof src, ZO_COPY_H2D, NULL);
  fail |= memcmp(p, src, sizeof src) != 0;
  zo_stream_t stream = NULL;
  err = be->stream_create(&stream);
  if (err) {
    fprintf(stderr, "  stream_create: %d (%s)\n", err, zo_last_error());
    be->mem_free(p);
    return 1;
  }
  be->memset_async(p, 0, 10000, stream);
  be->memcpy_async(p, src, 5000, ZO_COPY_H2D, stream);
  be->stream_synchronize(stream);
  fail |= memcmp(p, src, 5000) != 0 || ((unsigned char *)p)[5000] != 0;
  be->stream_destroy(stream);
  be->mem_free(p);
  if (fail) fprintf(stderr, "  memset_async/memcpy_async: wrong bytes\n");

  void *huge = NULL;
  err = be->mem_alloc(&huge, SIZE_MAX / 2);
  if (err != -ENOMEM || huge || !strstr(zo_last_error(), "bytes")) {
    fprintf(stderr, "  mem_alloc(SIZE_MAX/2): %d, %p, '%s'; want -ENOMEM and a message\n", err,
            huge, zo_last_error());
    be->mem_free(huge);
    fail = 1;
  }
  return fail;
}

/* An op queued on a real stream computes what it computes on the NULL stream
 * (the wrapper copies its arguments at enqueue time). */
static int test_op_on_stream(void) {
  enum { N = 13, C = 37, OC = 150 };
  zo_rng_seed(21);
  float *inp = galloc(N * C), *w = galloc(OC * C), *bias = galloc(OC);
  float *want = galloc(N * OC), *got = galloc(N * OC);
  fill_random(inp, N * C, -1, 1);
  fill_random(w, OC * C, -1, 1);
  fill_random(bias, OC, -1, 1);
  fill_nan(got, N * OC);
  be->matmul_forward(want, inp, w, bias, N, C, OC, ZO_F32, NULL);
  zo_stream_t stream = NULL;
  int fail = be->stream_create(&stream) != 0;
  if (!fail) {
    be->matmul_forward(got, inp, w, bias, N, C, OC, ZO_F32, stream);
    fail |= be->stream_synchronize(stream) != 0;
    be->stream_destroy(stream);
    fail |= memcmp(got, want, sizeof(float) * N * OC) != 0;
    if (fail) fprintf(stderr, "  matmul_forward on a stream differs from the NULL stream\n");
  }
  gfree(got);
  gfree(want);
  gfree(bias);
  gfree(w);
  gfree(inp);
  return fail;
}

/* adamw_update through the table, on the NULL stream and on a created one,
 * is bitwise zo_cpu_adamw_update (which offload/adamw.c's zo_adamw_update is,
 * and test-offload-adamw checks against torch); both decay settings, a
 * clipping scale, t > 1, an odd n above the parallel threshold. Also within
 * 4 ulp of a float64 evaluation of the same formula. */
static int test_adamw_update(void) {
  enum { N = (1 << 15) + 77 };
  zo_rng_seed(31);
  float *p0 = galloc(N), *g = galloc(N), *m0 = galloc(N), *v0 = galloc(N);
  fill_random(p0, N, -1, 1);
  fill_random(g, N, -2, 2);
  fill_random(m0, N, -0.1f, 0.1f);
  fill_random(v0, N, 0, 0.01f);
  float *p[3], *m[3], *v[3];
  for (int k = 0; k < 3; k++) {
    p[k] = galloc(N), m[k] = galloc(N), v[k] = galloc(N);
  }
  zo_stream_t stream = NULL;
  int fail = be->stream_create(&stream) != 0;
  const float lr = 3e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f, scale = 0.37f;
  for (int decay = 0; decay < 2 && !fail; decay++) {
    for (long t = 1; t <= 7; t += 6) {
      for (int k = 0; k < 3; k++) {
        memcpy(p[k], p0, sizeof(float) * N), memcpy(m[k], m0, sizeof(float) * N);
        memcpy(v[k], v0, sizeof(float) * N);
      }
      zo_cpu_adamw_update(p[0], g, m[0], v[0], N, lr, b1, b2, eps, wd, decay, t, scale);
      be->adamw_update(p[1], g, m[1], v[1], N, lr, b1, b2, eps, wd, decay, t, scale, NULL);
      be->adamw_update(p[2], g, m[2], v[2], N, lr, b1, b2, eps, wd, decay, t, scale, stream);
      fail |= be->stream_synchronize(stream) != 0;
      for (int k = 1; k < 3; k++)
        if (memcmp(p[k], p[0], sizeof(float) * N) || memcmp(m[k], m[0], sizeof(float) * N) ||
            memcmp(v[k], v[0], sizeof(float) * N)) {
          fprintf(stderr, "  adamw_update (%s stream, decay %d, t %ld) differs bitwise\n",
                  k == 1 ? "NULL" : "created", decay, t);
          fail = 1;
        }
      for (size_t i = 0; i < N; i++) {
        const double gi = (double)g[i] * scale;
        const double mi = b1 * (double)m0[i] + (1.0 - b1) * gi;
        const double vi = b2 * (double)v0[i] + (1.0 - b2) * gi * gi;
        const double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
        double pi = (double)p0[i] * (decay ? 1.0 - (double)lr * wd : 1.0);
        pi -= (double)lr / bc1 * mi / (sqrt(vi) / sqrt(bc2) + eps);
        const double tol = 4.0 * FLT_EPSILON * (fabs(pi) + fabs((double)lr / bc1 * mi / (sqrt(vi) / sqrt(bc2) + eps)));
        if (!(fabs(p[0][i] - pi) <= tol) || !(fabs(m[0][i] - mi) <= 4.0 * FLT_EPSILON * (b1 * fabs((double)m0[i]) + fabs(gi)))) {
          fprintf(stderr, "  adamw_update[%zu] (decay %d, t %ld): p %.9g want %.9g, m %.9g want %.9g\n", i,
                  decay, t, p[0][i], pi, m[0][i], mi);
          fail = 1;
          break;
        }
      }
    }
  }
  be->stream_destroy(stream);
  for (int k = 0; k < 3; k++) gfree(p[k]), gfree(m[k]), gfree(v[k]);
  gfree(p0), gfree(g), gfree(m0), gfree(v0);
  return fail;
}

/* adamw8bit_update through the table (NULL and created stream) writes
 * zo_adamw8bit_update's bits, with a block size that leaves a partial block;
 * the arithmetic itself is checked against float64 in test-offload-adamw8bit. */
static int test_adamw8bit_update(void) {
  enum { N = (1 << 15) + 77, BLOCK = 256 };
  const size_t nb = (N + BLOCK - 1) / BLOCK;
  zo_rng_seed(33);
  float *p0 = galloc(N), *g = galloc(N), *m0 = galloc(N), *v0 = galloc(N);
  fill_random(p0, N, -1, 1);
  fill_random(g, N, -2, 2);
  fill_random(m0, N, -0.1f, 0.1f);
  fill_random(v0, N, 0, 0.01f);
  uint8_t *mc0 = malloc(N), *vc0 = malloc(N), *mc[3], *vc[3];
  float *ma0 = malloc(nb * 4), *va0 = malloc(nb * 4), *p[3], *ma[3], *va[3];
  zo_adamw8bit_quantize(mc0, ma0, m0, N, BLOCK, ZO_QMAP_SIGNED);
  zo_adamw8bit_quantize(vc0, va0, v0, N, BLOCK, ZO_QMAP_UNSIGNED);
  for (int k = 0; k < 3; k++) {
    p[k] = galloc(N), mc[k] = malloc(N), vc[k] = malloc(N), ma[k] = malloc(nb * 4), va[k] = malloc(nb * 4);
    memcpy(p[k], p0, N * 4), memcpy(mc[k], mc0, N), memcpy(vc[k], vc0, N);
    memcpy(ma[k], ma0, nb * 4), memcpy(va[k], va0, nb * 4);
  }
  zo_stream_t stream = NULL;
  int fail = be->stream_create(&stream) != 0;
  const struct zo_adamw_hparams hp = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f};
  for (long t = 1; t <= 3 && !fail; t++) {
    zo_adamw8bit_update(p[0], g, mc[0], ma[0], vc[0], va[0], N, BLOCK, &hp, true, t, 0.37f);
    be->adamw8bit_update(p[1], g, mc[1], ma[1], vc[1], va[1], N, BLOCK, hp.lr, hp.beta1, hp.beta2, hp.eps,
                         hp.weight_decay, true, t, 0.37f, NULL);
    be->adamw8bit_update(p[2], g, mc[2], ma[2], vc[2], va[2], N, BLOCK, hp.lr, hp.beta1, hp.beta2, hp.eps,
                         hp.weight_decay, true, t, 0.37f, stream);
    fail |= be->stream_synchronize(stream) != 0;
    for (int k = 1; k < 3; k++)
      if (memcmp(p[k], p[0], N * 4) || memcmp(mc[k], mc[0], N) || memcmp(vc[k], vc[0], N) ||
          memcmp(ma[k], ma[0], nb * 4) || memcmp(va[k], va[0], nb * 4)) {
        fprintf(stderr, "  adamw8bit_update (%s stream, t %ld) differs bitwise\n", k == 1 ? "NULL" : "created", t);
        fail = 1;
      }
  }
  fail |= memcmp(p[0], p0, N * 4) == 0; /* it did update */
  be->stream_destroy(stream);
  for (int k = 0; k < 3; k++) gfree(p[k]), free(mc[k]), free(vc[k]), free(ma[k]), free(va[k]);
  gfree(p0), gfree(g), gfree(m0), gfree(v0);
  free(mc0), free(vc0), free(ma0), free(va0);
  return fail;
}

/* sumsq through the table writes zo_cpu_sumsq's double (zo_sumsq's code)
 * bitwise, on both streams, for n = 0, n below ZO_SUMSQ_CHUNKS, and n above
 * the parallel threshold; and is within 1e-12 relative of a long double sum. */
static int test_sumsq(void) {
  static const size_t ns[] = {0, 1, 63, 1000, (1 << 15) + 77, (1 << 20) + 3};
  zo_rng_seed(32);
  zo_stream_t stream = NULL;
  int fail = be->stream_create(&stream) != 0;
  for (size_t k = 0; k < sizeof ns / sizeof ns[0] && !fail; k++) {
    const size_t n = ns[k];
    float *x = galloc(n + 1);
    fill_random(x, n, -3, 3);
    double got[2] = {NAN, NAN};
    be->sumsq(&got[0], x, n, NULL);
    be->sumsq(&got[1], x, n, stream);
    fail |= be->stream_synchronize(stream) != 0;
    const double want = zo_cpu_sumsq(x, n);
    long double ref = 0.0L;
    for (size_t i = 0; i < n; i++) ref += (long double)x[i] * x[i];
    if (memcmp(&got[0], &want, sizeof want) || memcmp(&got[1], &want, sizeof want) ||
        !(fabsl((long double)want - ref) <= 1e-12L * ref)) {
      fprintf(stderr, "  sumsq n=%zu: NULL %.17g, stream %.17g, zo_cpu_sumsq %.17g, long double %.17Lg\n", n,
              got[0], got[1], want, ref);
      fail = 1;
    }
    gfree(x);
  }
  be->stream_destroy(stream);
  return fail;
}

int main(void) {
  static const struct zo_test tests[] = {
      ZO_TEST(backend_table),
      ZO_TEST(memory),
      ZO_TEST(encoder_forward),
      ZO_TEST(encoder_forward_no_wpe),
      ZO_TEST(encoder_backward),
      ZO_TEST(encoder_backward_fd),
      ZO_TEST(layernorm_forward),
      ZO_TEST(layernorm_backward),
      ZO_TEST(layernorm_backward_fd),
      ZO_TEST(rmsnorm_forward),
      ZO_TEST(rmsnorm_backward),
      ZO_TEST(rmsnorm_backward_fd),
      ZO_TEST(matmul_forward),
      ZO_TEST(matmul_backward),
      ZO_TEST(matmul_backward_fd),
      ZO_TEST(attention_forward),
      ZO_TEST(attention_backward),
      ZO_TEST(attention_backward_fd),
      ZO_TEST(rope),
      ZO_TEST(rope_backward_fd),
      ZO_TEST(gelu_forward),
      ZO_TEST(gelu_backward),
      ZO_TEST(gelu_backward_fd),
      ZO_TEST(swiglu),
      ZO_TEST(swiglu_backward_fd),
      ZO_TEST(residual_forward),
      ZO_TEST(residual_backward),
      ZO_TEST(residual_backward_fd),
      ZO_TEST(crossentropy_forward),
      ZO_TEST(crossentropy_fd),
      ZO_TEST(op_on_stream),
      ZO_TEST(adamw_update),
      ZO_TEST(adamw8bit_update),
      ZO_TEST(sumsq),
  };
  be = zo_backend_cpu();
  const struct zo_test_counts counts = zo_test_run(tests, ZO_ARRAY_LEN(tests));
  printf("%d op cases of zo_op_cases.h run (F32 against float64)\n", n_cases_run);
  return zo_test_report(counts);
}
