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
#include "zo/philox.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

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

/* n floats with GUARD sentinel floats on both sides, kept in b. */
static float *galloc(struct zo_test_bufs *b, size_t n) {
  float *mem = zo_test_bufs_alloc(b, (n + 2 * GUARD) * sizeof(float));
  uint32_t bits = SENTINEL_BITS;
  for (size_t i = 0; i < GUARD; i++) {
    memcpy(&mem[i], &bits, sizeof bits);
    memcpy(&mem[GUARD + n + i], &bits, sizeof bits);
  }
  return mem + GUARD;
}

static float *galloc_random(struct zo_test_bufs *b, size_t n, float lo, float hi) {
  float *p = galloc(b, n);
  fill_random(p, n, lo, hi);
  return p;
}

/* An output poisoned with NaN: an element the op does not write fails. */
static float *galloc_nan(struct zo_test_bufs *b, size_t n) {
  float *p = galloc(b, n);
  fill_nan(p, n);
  return p;
}

static double *widen(struct zo_test_bufs *b, const float *x, size_t n) { return zo_test_bufs_widen(b, x, n); }

static double *dalloc(struct zo_test_bufs *b, size_t n) { return zo_test_bufs_alloc(b, n * sizeof(double)); }

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

/* Runs fn on the F32 cases of cases[0, n), each after zo_rng_seed(its seed)
 * with a fresh buffer set that is freed after it; says which failed. */
static int run_cases(const struct zo_op_case *cases, size_t n,
                     int (*fn)(const struct zo_op_case *, struct zo_test_bufs *)) {
  int fail = 0;
  for (size_t i = 0; i < n; i++) {
    const struct zo_op_case *c = &cases[i];
    if (c->flags & ZO_OPC_HALF_ONLY) continue;
    zo_rng_seed(c->seed);
    struct zo_test_bufs b = {0};
    const int f = fn(c, &b);
    zo_test_bufs_free(&b);
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

/* Then with wpe NULL (Llama): out is the token's row, bit for bit (the -0 in
 * each row's first column included). */
static int encoder_forward_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const int B = c->B, T = c->T, C = c->C, V = c->V, maxT = c->maxT;
  const size_t n = (size_t)B * T * C;
  const int32_t *inp = zo_op_case_tokens(b, (size_t)B * T, V);
  float *wte = galloc_random(b, (size_t)V * C, -1, 1), *wpe = galloc_random(b, (size_t)maxT * C, -1, 1);
  float *out = galloc_nan(b, n);
  for (int v = 0; v < V; v++) wte[(size_t)v * C] = -0.0f;
  be->encoder_forward(out, inp, wte, wpe, B, T, C, ZO_F32, NULL);
  double *ref = dalloc(b, n);
  encoder_forward64(ref, inp, widen(b, wte, (size_t)V * C), widen(b, wpe, (size_t)maxT * C), B, T, C);
  int fail = check_output("out", out, ref, n, 0, 1e-7);
  fill_nan(out, n);
  be->encoder_forward(out, inp, wte, NULL, B, T, C, ZO_F32, NULL);
  int bad = guard_broken("out (wpe NULL)", out, n);
  for (int i = 0; i < B * T && !bad; i++)
    if (memcmp(out + (size_t)i * C, wte + (size_t)inp[i] * C, C * sizeof(float))) {
      fprintf(stderr, "  out row %d (wpe NULL) is not wte row %d bit for bit\n", i, inp[i]);
      bad = 1;
    }
  return fail | bad;
}

static int test_encoder_forward(void) { return RUN_CASES(zo_encoder_forward_cases, encoder_forward_case); }

/* dwte[inp[b, t]] += dout[b, t] (unless inp[b, t] is pad) and dwpe[t] +=
 * dout[b, t] into ref_wte and, unless NULL, ref_wpe. */
static void encoder_backward_ref_pad(double *ref_wte, double *ref_wpe, const float *dout, const int32_t *inp,
                                     int B, int T, int C, int pad) {
  for (int bt = 0; bt < B * T; bt++)
    for (int c = 0; c < C; c++) {
      const double d = dout[(size_t)bt * C + c];
      if (inp[bt] != pad) ref_wte[(size_t)inp[bt] * C + c] += d;
      if (ref_wpe) ref_wpe[(size_t)(bt % T) * C + c] += d;
    }
}

static void encoder_backward_ref(double *ref_wte, double *ref_wpe, const float *dout, const int32_t *inp,
                                 int B, int T, int C) {
  encoder_backward_ref_pad(ref_wte, ref_wpe, dout, inp, B, T, C, -1);
}

static int encoder_backward_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const int B = c->B, T = c->T, C = c->C, V = c->V, maxT = c->maxT;
  const int32_t *inp = zo_op_case_tokens(b, (size_t)B * T, V);
  float *dout = galloc_random(b, (size_t)B * T * C, -1, 1);
  float *dwte = galloc_random(b, (size_t)V * C, -1, 1), *dwpe = galloc_random(b, (size_t)maxT * C, -1, 1);
  double *ref_wte = widen(b, dwte, (size_t)V * C), *ref_wpe = widen(b, dwpe, (size_t)maxT * C);
  be->encoder_backward(dwte, dwpe, dout, inp, B, T, C, -1, ZO_F32, NULL);
  encoder_backward_ref(ref_wte, ref_wpe, dout, inp, B, T, C);
  int fail = check_output("dwte", dwte, ref_wte, (size_t)V * C, 1e-6, 1e-6) |
             check_output("dwpe", dwpe, ref_wpe, (size_t)maxT * C, 1e-6, 1e-6);
  /* dwpe NULL (no position embedding): dwte alone, the same sums again. */
  for (size_t i = 0; i < (size_t)V * C; i++) ref_wte[i] = dwte[i];
  encoder_backward_ref(ref_wte, NULL, dout, inp, B, T, C);
  be->encoder_backward(dwte, NULL, dout, inp, B, T, C, -1, ZO_F32, NULL);
  return fail | check_output("dwte (dwpe NULL)", dwte, ref_wte, (size_t)V * C, 1e-6, 1e-6);
}

static int test_encoder_backward(void) { return RUN_CASES(zo_encoder_backward_cases, encoder_backward_case); }

/* A padding index (nn.Embedding's padding_idx, token V / 2, present in the
 * tokens): its row of dwte keeps its pre-filled bits, every other row and
 * dwpe are the float64 loop's; with dwpe NULL too; one thread and two give
 * the same bits. */
static int encoder_backward_padding_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const int B = c->B, T = c->T, C = c->C, V = c->V, maxT = c->maxT, pad = V / 2;
  const size_t nte = (size_t)V * C, npe = (size_t)maxT * C;
  const int32_t *inp = zo_op_case_tokens(b, (size_t)B * T, V);
  int seen = 0;
  for (int i = 0; i < B * T; i++) seen += inp[i] == pad;
  if (!seen) return zo_test_fail("padding token %d absent from the case's %d positions", pad, B * T);
  float *dout = galloc_random(b, (size_t)B * T * C, -1, 1);
  float *dwte = galloc_random(b, nte, -1, 1), *dwpe = galloc_random(b, npe, -1, 1);
  float *pad_row = galloc(b, (size_t)C), *dwte2 = galloc(b, nte), *dwpe2 = galloc(b, npe);
  memcpy(pad_row, dwte + (size_t)pad * C, (size_t)C * sizeof(float));
  memcpy(dwte2, dwte, nte * sizeof(float));
  memcpy(dwpe2, dwpe, npe * sizeof(float));
  double *ref_wte = widen(b, dwte, nte), *ref_wpe = widen(b, dwpe, npe);
  be->encoder_backward(dwte, dwpe, dout, inp, B, T, C, pad, ZO_F32, NULL);
  encoder_backward_ref_pad(ref_wte, ref_wpe, dout, inp, B, T, C, pad);
  int fail = check_output("dwte", dwte, ref_wte, nte, 1e-6, 1e-6) |
             check_output("dwpe", dwpe, ref_wpe, npe, 1e-6, 1e-6);
  if (memcmp(dwte + (size_t)pad * C, pad_row, (size_t)C * sizeof(float)) != 0)
    fail |= zo_test_fail("the padding row of dwte changed (%d of its positions)", seen);
#if !defined(__SANITIZE_THREAD__) /* libgomp is not instrumented: no 2-thread runs under TSan */
  const int threads = omp_get_max_threads();
  be->set_threads(threads == 1 ? 2 : 1);
  be->encoder_backward(dwte2, dwpe2, dout, inp, B, T, C, pad, ZO_F32, NULL);
  be->set_threads(threads);
  if (memcmp(dwte2, dwte, nte * sizeof(float)) || memcmp(dwpe2, dwpe, npe * sizeof(float)))
    fail |= zo_test_fail("encoder_backward with a padding index differs between 1 and 2 threads");
#endif
  /* dwpe NULL (Llama): dwte alone, the padding row still untouched. */
  for (size_t i = 0; i < nte; i++) ref_wte[i] = dwte[i];
  encoder_backward_ref_pad(ref_wte, NULL, dout, inp, B, T, C, pad);
  be->encoder_backward(dwte, NULL, dout, inp, B, T, C, pad, ZO_F32, NULL);
  fail |= check_output("dwte (dwpe NULL)", dwte, ref_wte, nte, 1e-6, 1e-6);
  if (memcmp(dwte + (size_t)pad * C, pad_row, (size_t)C * sizeof(float)) != 0)
    fail |= zo_test_fail("the padding row of dwte changed with dwpe NULL");
  return fail;
}

static int test_encoder_backward_padding(void) {
  return RUN_CASES(zo_encoder_backward_cases, encoder_backward_padding_case);
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
  struct zo_test_bufs b = {0};
  const int32_t *inp = zo_op_case_tokens(&b, B * T, V);
  float wte[V * C], wpe[maxT * C], dout[B * T * C], dwte[V * C] = {0}, dwpe[maxT * C] = {0};
  fill_random(wte, V * C, -1, 1);
  fill_random(wpe, maxT * C, -1, 1);
  fill_random(dout, B * T * C, -1, 1);
  be->encoder_backward(dwte, dwpe, dout, inp, B, T, C, -1, ZO_F32, NULL);
  struct encoder_fd c = {inp, widen(&b, wte, V * C), widen(&b, wpe, maxT * C), widen(&b, dout, B * T * C),
                         dalloc(&b, B * T * C), B, T, C};
  int fail = check_fd("dwte", c.wte, V * C, dwte, encoder_fd_loss, &c) |
             check_fd("dwpe", c.wpe, maxT * C, dwpe, encoder_fd_loss, &c);
  zo_test_bufs_free(&b);
  return fail;
}

/* ---- layernorm ------------------------------------------------------------ */

static int layernorm_forward_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const int N = c->N, C = c->C;
  const size_t n = (size_t)N * C;
  float *inp = galloc_random(b, n, -2, 3); /* nonzero mean */
  float *w = galloc_random(b, C, -1, 1), *bias = galloc_random(b, C, -1, 1);
  float *out = galloc_nan(b, n), *mean = galloc_nan(b, N);
  float *rstd = galloc_nan(b, N);
  be->layernorm_forward(out, mean, rstd, inp, w, bias, N, C, ZO_F32, NULL);
  double *ref = dalloc(b, n), *ref_mean = dalloc(b, N), *ref_rstd = dalloc(b, N);
  layernorm_forward64(ref, ref_mean, ref_rstd, widen(b, inp, n), widen(b, w, C), widen(b, bias, C), N, C);
  return check_output("out", out, ref, n, 1e-6, 1e-5) | check_output("mean", mean, ref_mean, N, 1e-6, 1e-6) |
         check_output("rstd", rstd, ref_rstd, N, 0, 1e-6);
}

static int test_layernorm_forward(void) {
  return RUN_CASES(zo_layernorm_forward_cases, layernorm_forward_case);
}

static int layernorm_backward_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const int N = c->N, C = c->C;
  const size_t n = (size_t)N * C;
  float *inp = galloc_random(b, n, -2, 3), *w = galloc_random(b, C, -1, 1), *bias = galloc_random(b, C, -1, 1);
  float *dout = galloc_random(b, n, -1, 1);
  float *out = galloc(b, n), *mean = galloc(b, N), *rstd = galloc(b, N);
  float *dinp = galloc_random(b, n, -1, 1), *dw = galloc_random(b, C, -1, 1); /* all three accumulate */
  float *db = galloc_random(b, C, -1, 1);
  be->layernorm_forward(out, mean, rstd, inp, w, bias, N, C, ZO_F32, NULL);
  double *ref_dinp = widen(b, dinp, n), *ref_dw = widen(b, dw, C), *ref_db = widen(b, db, C);
  float *dinp0 = galloc(b, n), *dw0 = galloc(b, C), *db0 = galloc(b, C);
  memcpy(dinp0, dinp, n * sizeof(float));
  memcpy(dw0, dw, C * sizeof(float));
  memcpy(db0, db, C * sizeof(float));
  be->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, ZO_F32, NULL);
  layernorm_backward64(ref_dinp, ref_dw, ref_db, widen(b, dout, n), widen(b, inp, n), widen(b, w, C), N, C);
  int fail = check_output("dinp", dinp, ref_dinp, n, 1e-5, 1e-5) | check_output("dweight", dw, ref_dw, C, 1e-5, 1e-5) |
             check_output("dbias", db, ref_db, C, 1e-5, 1e-5);
  /* A frozen norm (dweight, dbias NULL; or one of them): dinp the same bits,
   * the gradient given the same bits, the one not given untouched. */
  const struct {
    bool w, bias;
  } frozen[] = {{false, false}, {true, false}, {false, true}};
  for (size_t k = 0; k < ZO_ARRAY_LEN(frozen); k++) {
    float *dinp2 = galloc(b, n), *dw2 = galloc(b, C), *db2 = galloc(b, C);
    memcpy(dinp2, dinp0, n * sizeof(float));
    memcpy(dw2, dw0, C * sizeof(float));
    memcpy(db2, db0, C * sizeof(float));
    be->layernorm_backward(dinp2, frozen[k].w ? dw2 : NULL, frozen[k].bias ? db2 : NULL, dout, inp, w, mean, rstd,
                           N, C, ZO_F32, NULL);
    const bool bad = memcmp(dinp2, dinp, n * sizeof(float)) != 0 ||
                     memcmp(dw2, frozen[k].w ? dw : dw0, C * sizeof(float)) != 0 ||
                     memcmp(db2, frozen[k].bias ? db : db0, C * sizeof(float)) != 0;
    if (bad) {
      fprintf(stderr, "  layernorm_backward with dweight %s, dbias %s: not the full backward's bits\n",
              frozen[k].w ? "given" : "NULL", frozen[k].bias ? "given" : "NULL");
      fail = 1;
    }
    fail |= guard_broken("dinp (frozen)", dinp2, n) | guard_broken("dweight (frozen)", dw2, C) |
            guard_broken("dbias (frozen)", db2, C);
  }
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
  struct zo_test_bufs b = {0};
  struct layernorm_fd c = {widen(&b, inp, N * C), widen(&b, w, C), widen(&b, bias, C), widen(&b, dout, N * C),
                           dalloc(&b, N * C), N, C};
  int fail = check_fd("dinp", c.inp, N * C, dinp, layernorm_fd_loss, &c) |
             check_fd("dweight", c.w, C, dw, layernorm_fd_loss, &c) |
             check_fd("dbias", c.bias, C, db, layernorm_fd_loss, &c);
  zo_test_bufs_free(&b);
  return fail;
}

/* ---- rmsnorm -------------------------------------------------------------- */

static int rmsnorm_forward_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const int N = c->N, C = c->C;
  const float eps = c->eps;
  const size_t n = (size_t)N * C;
  float *inp = galloc_random(b, n, -2, 3); /* nonzero mean: RMS, not variance */
  for (int j = 0; j < C; j++) inp[(size_t)(N / 2) * C + j] = 0.0f; /* rstd = 1/sqrt(eps), out 0 */
  float *w = galloc_random(b, C, -1, 1), *out = galloc_nan(b, n), *rstd = galloc_nan(b, N);
  be->rmsnorm_forward(out, rstd, inp, w, eps, N, C, ZO_F32, NULL);
  double *ref = dalloc(b, n), *ref_rstd = dalloc(b, N);
  rmsnorm_forward64(ref, ref_rstd, widen(b, inp, n), widen(b, w, C), eps, N, C);
  return check_output("out", out, ref, n, 1e-6, 1e-5) | check_output("rstd", rstd, ref_rstd, N, 0, 1e-6) |
         guard_broken("inp", inp, n);
}

static int test_rmsnorm_forward(void) { return RUN_CASES(zo_rmsnorm_forward_cases, rmsnorm_forward_case); }

static int rmsnorm_backward_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const int N = c->N, C = c->C;
  const float eps = c->eps;
  const size_t n = (size_t)N * C;
  float *inp = galloc_random(b, n, -2, 3), *w = galloc_random(b, C, -1, 1), *dout = galloc_random(b, n, -1, 1);
  float *out = galloc(b, n), *rstd = galloc(b, N);
  float *dinp = galloc_random(b, n, -1, 1), *dw = galloc_random(b, C, -1, 1); /* both accumulate */
  float *dinp2 = galloc(b, n), *dw2 = galloc(b, C);
  memcpy(dinp2, dinp, n * sizeof(float));
  memcpy(dw2, dw, C * sizeof(float));
  be->rmsnorm_forward(out, rstd, inp, w, eps, N, C, ZO_F32, NULL);
  double *ref_dinp = widen(b, dinp, n), *ref_dw = widen(b, dw, C);
  be->rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C, ZO_F32, NULL);
  rmsnorm_backward64(ref_dinp, ref_dw, widen(b, dout, n), widen(b, inp, n), widen(b, w, C), eps, N, C);
  int fail = check_output("dinp", dinp, ref_dinp, n, 1e-5, 1e-5) |
             check_output("dweight", dw, ref_dw, C, 1e-5, 1e-5);
  /* A frozen norm (dweight NULL): dinp the same bits as the full backward's. */
  float *dinp3 = galloc(b, n);
  memcpy(dinp3, dinp2, n * sizeof(float));
  be->rmsnorm_backward(dinp3, NULL, dout, inp, w, rstd, N, C, ZO_F32, NULL);
  if (memcmp(dinp3, dinp, n * sizeof(float)) != 0) {
    fprintf(stderr, "  rmsnorm_backward with dweight NULL: dinp is not the full backward's bits\n");
    fail = 1;
  }
  fail |= guard_broken("dinp (frozen)", dinp3, n);
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
  struct zo_test_bufs b = {0};
  struct rmsnorm_fd c = {widen(&b, inp, N * C), widen(&b, w, C), widen(&b, dout, N * C), dalloc(&b, N * C),
                         (double)1e-5f, N, C};
  int fail = check_fd("dinp", c.inp, N * C, dinp, rmsnorm_fd_loss, &c) |
             check_fd("dweight", c.w, C, dw, rmsnorm_fd_loss, &c);
  zo_test_bufs_free(&b);
  return fail;
}

/* ---- rmsnorm_heads (Qwen3's q/k norms) -------------------------------------- */

/* Rows of D elements, H per token, at off + n ld + h D inside (N, ld)
 * buffers: the q or k heads of a fused qkv row, columns around them that
 * the op must leave alone. */
struct heads_case {
  int N, H, D, off_in, ld_in, off_out, ld_out;
};
static const struct heads_case HEADS_CASES[] = {
    {9, 3, 20, 7, 71, 5, 95},     /* odd strides, columns on both sides */
    {33, 4, 128, 0, 512, 128, 1024}, /* k of a qkv row: NH 4 q heads before it, v after */
    {5, 1, 3, 1, 4, 0, 3},        /* one head, tiny */
    {2, 6, 66, 0, 396, 0, 396},   /* contiguous, a head longer than a SIMD block */
};

static size_t head_at(const struct heads_case *h, int ld, int off, size_t r, int d) {
  return (size_t)off + r / (size_t)h->H * (size_t)ld + r % (size_t)h->H * (size_t)h->D + (size_t)d;
}

/* The head rows of x (strided) as (N H, D) doubles. */
static double *gather64(struct zo_test_bufs *b, const struct heads_case *h, const float *x, int ld, int off) {
  const size_t rows = (size_t)h->N * h->H;
  double *g = dalloc(b, rows * h->D);
  for (size_t r = 0; r < rows; r++)
    for (int d = 0; d < h->D; d++) g[r * h->D + d] = x[head_at(h, ld, off, r, d)];
  return g;
}

static float *gather32(struct zo_test_bufs *b, const struct heads_case *h, const float *x, int ld, int off) {
  const size_t rows = (size_t)h->N * h->H;
  float *g = galloc(b, rows * h->D);
  for (size_t r = 0; r < rows; r++)
    for (int d = 0; d < h->D; d++) g[r * h->D + d] = x[head_at(h, ld, off, r, d)];
  return g;
}

/* 1 when an element of x outside the head rows differs from keep's. */
static int outside_changed(const char *what, const struct heads_case *h, const float *x, const float *keep, int ld,
                           int off) {
  const size_t n = (size_t)h->N * ld;
  char *head = zo_test_xmalloc(n);
  memset(head, 0, n);
  for (size_t r = 0; r < (size_t)h->N * h->H; r++)
    for (int d = 0; d < h->D; d++) head[head_at(h, ld, off, r, d)] = 1;
  int bad = 0;
  for (size_t i = 0; i < n && !bad; i++)
    if (!head[i] && memcmp(&x[i], &keep[i], sizeof *x)) bad = zo_test_fail("%s: element %zu outside the heads written", what, i);
  free(head);
  return bad | guard_broken(what, x, n);
}

static int heads_forward_case(const struct heads_case *h, struct zo_test_bufs *b) {
  const size_t ni = (size_t)h->N * h->ld_in, no = (size_t)h->N * h->ld_out, rows = (size_t)h->N * h->H;
  const float eps = 1e-6f;
  float *inp = galloc_random(b, ni, -2, 3), *w = galloc_random(b, h->D, -1, 1);
  float *out = galloc_random(b, no, -9, 9), *keep = galloc(b, no), *rstd = galloc_nan(b, rows);
  memcpy(keep, out, no * sizeof *out);
  be->rmsnorm_heads_forward(out + h->off_out, rstd, inp + h->off_in, w, eps, h->N, h->H, h->D, h->ld_out, h->ld_in,
                            ZO_F32, NULL);
  double *ref = dalloc(b, rows * h->D), *ref_rstd = dalloc(b, rows);
  rmsnorm_forward64(ref, ref_rstd, gather64(b, h, inp, h->ld_in, h->off_in), widen(b, w, h->D), eps, (int)rows, h->D);
  float *got = gather32(b, h, out, h->ld_out, h->off_out);
  int fail = check_output("out", got, ref, rows * h->D, 1e-6, 1e-5) |
             check_output("rstd", rstd, ref_rstd, rows, 0, 1e-6) |
             outside_changed("out", h, out, keep, h->ld_out, h->off_out);
  /* In place (out = inp, one stride): the same bits as out of place. */
  float *io = galloc(b, ni), *io_keep = galloc(b, ni), *rstd2 = galloc_nan(b, rows);
  memcpy(io, inp, ni * sizeof *io);
  memcpy(io_keep, inp, ni * sizeof *io);
  be->rmsnorm_heads_forward(io + h->off_in, rstd2, io + h->off_in, w, eps, h->N, h->H, h->D, h->ld_in, h->ld_in,
                            ZO_F32, NULL);
  if (memcmp(gather32(b, h, io, h->ld_in, h->off_in), got, rows * h->D * sizeof *got) ||
      memcmp(rstd2, rstd, rows * sizeof *rstd))
    fail |= zo_test_fail("rmsnorm_heads_forward in place: not the out-of-place bits");
  return fail | outside_changed("out (in place)", h, io, io_keep, h->ld_in, h->off_in);
}

static int test_rmsnorm_heads_forward(void) {
  int fail = 0;
  for (size_t i = 0; i < ZO_ARRAY_LEN(HEADS_CASES); i++) {
    zo_rng_seed(500 + i);
    struct zo_test_bufs b = {0};
    const int f = heads_forward_case(&HEADS_CASES[i], &b);
    zo_test_bufs_free(&b);
    if (f) fprintf(stderr, "  (heads case %zu)\n", i);
    fail |= f;
  }
  return fail;
}

/* dinp overwritten (rows at ld_out's stride, the dout stride), dweight +=. */
static int heads_backward_case(const struct heads_case *h, struct zo_test_bufs *b) {
  const int ld = h->ld_out, off = h->off_out;
  const size_t ni = (size_t)h->N * h->ld_in, nd = (size_t)h->N * ld, rows = (size_t)h->N * h->H;
  const float eps = 1e-5f;
  float *inp = galloc_random(b, ni, -2, 3), *w = galloc_random(b, h->D, -1, 1);
  float *dout = galloc_random(b, nd, -1, 1), *dinp = galloc_random(b, nd, -9, 9), *keep = galloc(b, nd);
  float *dw = galloc_random(b, h->D, -1, 1), *dw0 = galloc(b, h->D), *out = galloc(b, nd), *rstd = galloc(b, rows);
  memcpy(keep, dinp, nd * sizeof *dinp);
  memcpy(dw0, dw, h->D * sizeof *dw);
  be->rmsnorm_heads_forward(out + off, rstd, inp + h->off_in, w, eps, h->N, h->H, h->D, ld, h->ld_in, ZO_F32, NULL);
  be->rmsnorm_heads_backward(dinp + off, dw, dout + off, inp + h->off_in, w, rstd, h->N, h->H, h->D, ld, h->ld_in,
                             ZO_F32, NULL);
  double *ref_dinp = dalloc(b, rows * h->D), *ref_dw = widen(b, dw0, h->D);
  memset(ref_dinp, 0, rows * h->D * sizeof *ref_dinp);
  rmsnorm_backward64(ref_dinp, ref_dw, gather64(b, h, dout, ld, off), gather64(b, h, inp, h->ld_in, h->off_in),
                     widen(b, w, h->D), eps, (int)rows, h->D);
  float *got = gather32(b, h, dinp, ld, off);
  int fail = check_output("dinp", got, ref_dinp, rows * h->D, 1e-5, 1e-5) |
             check_output("dweight", dw, ref_dw, h->D, 1e-5, 1e-5) | outside_changed("dinp", h, dinp, keep, ld, off);
  /* Frozen (dweight NULL) and in place (dinp = dout): dinp the same bits. */
  float *d2 = galloc(b, nd);
  memcpy(d2, dout, nd * sizeof *d2);
  be->rmsnorm_heads_backward(d2 + off, NULL, d2 + off, inp + h->off_in, w, rstd, h->N, h->H, h->D, ld, h->ld_in,
                             ZO_F32, NULL);
  if (memcmp(gather32(b, h, d2, ld, off), got, rows * h->D * sizeof *got))
    fail |= zo_test_fail("rmsnorm_heads_backward frozen, in place: dinp is not the full backward's bits");
  fail |= outside_changed("dinp (in place)", h, d2, dout, ld, off);
#if !defined(__SANITIZE_THREAD__) /* libgomp is not instrumented: no 2-thread runs under TSan */
  float *d3 = galloc(b, nd), *dw3 = galloc(b, h->D);
  memcpy(dw3, dw0, h->D * sizeof *dw3);
  const int threads = omp_get_max_threads();
  be->set_threads(threads == 1 ? 2 : 1);
  be->rmsnorm_heads_backward(d3 + off, dw3, dout + off, inp + h->off_in, w, rstd, h->N, h->H, h->D, ld, h->ld_in,
                             ZO_F32, NULL);
  be->set_threads(threads);
  if (memcmp(gather32(b, h, d3, ld, off), got, rows * h->D * sizeof *got) || memcmp(dw3, dw, h->D * sizeof *dw))
    fail |= zo_test_fail("rmsnorm_heads_backward differs between 1 and 2 threads");
#endif
  return fail;
}

static int test_rmsnorm_heads_backward(void) {
  int fail = 0;
  for (size_t i = 0; i < ZO_ARRAY_LEN(HEADS_CASES); i++) {
    zo_rng_seed(600 + i);
    struct zo_test_bufs b = {0};
    const int f = heads_backward_case(&HEADS_CASES[i], &b);
    zo_test_bufs_free(&b);
    if (f) fprintf(stderr, "  (heads case %zu)\n", i);
    fail |= f;
  }
  return fail;
}

/* Central differences through the strided layout: the loss reads the head
 * rows gathered, the op's gradient is gathered the same way. */
static int test_rmsnorm_heads_backward_fd(void) {
  const struct heads_case h = {3, 2, 5, 2, 13, 1, 12};
  const size_t rows = (size_t)h.N * h.H, n = rows * h.D;
  zo_rng_seed(43);
  struct zo_test_bufs b = {0};
  float *inp = galloc_random(&b, (size_t)h.N * h.ld_in, -2, 2), *w = galloc_random(&b, h.D, -1, 1);
  float *dout = galloc_random(&b, (size_t)h.N * h.ld_out, -1, 1), *dinp = galloc(&b, (size_t)h.N * h.ld_out);
  float *out = galloc(&b, (size_t)h.N * h.ld_out), *rstd = galloc(&b, rows), dw[5] = {0};
  be->rmsnorm_heads_forward(out + h.off_out, rstd, inp + h.off_in, w, 1e-5f, h.N, h.H, h.D, h.ld_out, h.ld_in, ZO_F32,
                            NULL);
  be->rmsnorm_heads_backward(dinp + h.off_out, dw, dout + h.off_out, inp + h.off_in, w, rstd, h.N, h.H, h.D, h.ld_out,
                             h.ld_in, ZO_F32, NULL);
  struct rmsnorm_fd c = {gather64(&b, &h, inp, h.ld_in, h.off_in), widen(&b, w, h.D),
                         gather64(&b, &h, dout, h.ld_out, h.off_out), dalloc(&b, n), (double)1e-5f, (int)rows, h.D};
  int fail = check_fd("dinp", c.inp, n, gather32(&b, &h, dinp, h.ld_out, h.off_out), rmsnorm_fd_loss, &c) |
             check_fd("dweight", c.w, h.D, dw, rmsnorm_fd_loss, &c);
  zo_test_bufs_free(&b);
  return fail;
}

/* ---- matmul --------------------------------------------------------------- */

static int matmul_forward_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const int N = c->N, C = c->C, OC = c->OC, with_bias = c->flags & ZO_OPC_BIAS;
  const size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
  float *inp = galloc_random(b, ni, -1, 1), *w = galloc_random(b, nw, -1, 1), *bias = galloc_random(b, OC, -1, 1);
  float *out = galloc_nan(b, no);
  be->matmul_forward(out, inp, w, with_bias ? bias : NULL, N, C, OC, ZO_F32, NULL);
  double *ref = dalloc(b, no);
  matmul_forward64(ref, widen(b, inp, ni), widen(b, w, nw), with_bias ? widen(b, bias, OC) : NULL, N, C, OC);
  /* out is an fp32 sum of C products: past 384 (the GPU shapes' largest C)
   * its rounding error grows with C, and so does atol. */
  const double atol_dot = 1e-5 * (C > 384 ? C / 384.0 : 1.0);
  return check_output(with_bias ? "out" : "out (no bias)", out, ref, no, atol_dot, 1e-5);
}

static int test_matmul_forward(void) { return RUN_CASES(zo_matmul_forward_cases, matmul_forward_case); }

/* Flags select which optional outputs are passed (the others are NULL). */
static int matmul_backward_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const int N = c->N, C = c->C, OC = c->OC;
  const int with_dinp = c->flags & ZO_OPC_DINP, with_dbias = c->flags & ZO_OPC_BIAS;
  const size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
  float *inp = galloc_random(b, ni, -1, 1), *w = galloc_random(b, nw, -1, 1), *dout = galloc_random(b, no, -1, 1);
  float *dinp = galloc_nan(b, ni); /* overwritten */
  float *dw = galloc_random(b, nw, -1, 1), *db = galloc_random(b, OC, -1, 1); /* accumulated */
  double *ref_dinp = dalloc(b, ni), *ref_dw = widen(b, dw, nw), *ref_db = widen(b, db, OC);
  be->matmul_backward(with_dinp ? dinp : NULL, dw, with_dbias ? db : NULL, dout, inp, w, N, C, OC, ZO_F32,
                      NULL);
  matmul_backward64(ref_dinp, ref_dw, with_dbias ? ref_db : NULL, widen(b, dout, no), widen(b, inp, ni),
                    widen(b, w, nw), N, C, OC);
  /* dweight and dbias are fp32 sums over the N rows: past 16 rows their
   * rounding error grows with N, and so does atol. */
  const double atol_sum = 2e-6 * (N > 16 ? N / 16.0 : 1.0);
  int fail = check_output("dweight", dw, ref_dw, nw, atol_sum, 1e-5);
  if (with_dinp) fail |= check_output("dinp", dinp, ref_dinp, ni, 1e-5, 1e-5);
  if (with_dbias) fail |= check_output("dbias", db, ref_db, OC, atol_sum, 1e-5);
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
  struct zo_test_bufs b = {0};
  struct matmul_fd c = {widen(&b, inp, N * C), widen(&b, w, OC * C), widen(&b, bias, OC), widen(&b, dout, N * OC),
                        dalloc(&b, N * OC), N, C, OC};
  int fail = check_fd("dinp", c.inp, N * C, dinp, matmul_fd_loss, &c) |
             check_fd("dweight", c.w, OC * C, dw, matmul_fd_loss, &c) |
             check_fd("dbias", c.bias, OC, db, matmul_fd_loss, &c);
  zo_test_bufs_free(&b);
  return fail;
}

/* A frozen weight (dweight NULL): the input and bias gradients bit for bit
 * those of the full backward, fp32 and bf16 (the weight-gradient GEMM is
 * skipped, nothing else changes). */
static int test_matmul_backward_frozen(void) {
  enum { N = 37, C = 24, OC = 40 };
  int fail = 0;
  for (int d = 0; d < 2; d++) {
    const enum zo_dtype dt = d ? ZO_BF16 : ZO_F32;
    const size_t es = d ? 2 : 4;
    float f_inp[N * C], f_w[OC * C], f_dout[N * OC], dw[OC * C] = {0}, db1[OC] = {0}, db2[OC] = {0};
    unsigned char inp[N * C * 4], w[OC * C * 4], dout[N * OC * 4], dinp1[N * C * 4], dinp2[N * C * 4];
    zo_rng_seed(11 + (uint64_t)d);
    fill_random(f_inp, N * C, -1, 1), fill_random(f_w, OC * C, -1, 1), fill_random(f_dout, N * OC, -1, 1);
    const float *src[3] = {f_inp, f_w, f_dout};
    unsigned char *dst[3] = {inp, w, dout};
    const size_t n[3] = {N * C, OC * C, N * OC};
    for (int k = 0; k < 3; k++)
      for (size_t i = 0; i < n[k]; i++) {
        uint32_t bits;
        memcpy(&bits, &src[k][i], 4);
        if (d) {
          const uint16_t h = (uint16_t)(bits >> 16);
          memcpy(dst[k] + 2 * i, &h, 2);
        } else {
          memcpy(dst[k] + 4 * i, &bits, 4);
        }
      }
    be->matmul_backward(dinp1, dw, db1, dout, inp, w, N, C, OC, dt, NULL);
    be->matmul_backward(dinp2, NULL, db2, dout, inp, w, N, C, OC, dt, NULL);
    if (memcmp(dinp1, dinp2, (size_t)N * C * es) || memcmp(db1, db2, sizeof db1))
      fail |= zo_test_fail("%s: the frozen backward's dinp or dbias differs from the full backward's",
                           d ? "bf16" : "fp32");
  }
  return fail;
}

/* ---- attention ------------------------------------------------------------ */

/* Element counts of qkv (B, T, NH + 2 NKV, hs), out (B, T, NH, hs) and att
 * (B, NH, T, T). */
struct attention_sizes {
  size_t qkv, out, att;
};

static struct attention_sizes attention_sizes(int B, int T, int NH, int NKV, int hs) {
  return (struct attention_sizes){(size_t)B * T * (NH + 2 * NKV) * hs, (size_t)B * T * NH * hs,
                                  (size_t)B * NH * T * T};
}

static int attention_forward_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, hs = c->hs;
  const struct attention_sizes n = attention_sizes(B, T, NH, NKV, hs);
  float *qkv = galloc_random(b, n.qkv, -2, 2), *out = galloc_nan(b, n.out);
  float *att = galloc_nan(b, n.att), *qkv_in = galloc(b, n.qkv);
  memcpy(qkv_in, qkv, n.qkv * sizeof(float));
  be->attention_forward(out, att, qkv, B, T, NH, NKV, hs, ZO_F32, NULL);
  double *ref = dalloc(b, n.out), *ref_att = dalloc(b, n.att);
  attention_forward64(ref, ref_att, widen(b, qkv, n.qkv), B, T, NH, NKV, hs);
  int fail = check_output("out", out, ref, n.out, 1e-6, 1e-5) |
             check_output("att", att, ref_att, n.att, 1e-7, 1e-5) | guard_broken("qkv", qkv, n.qkv);
  if (memcmp(qkv, qkv_in, n.qkv * sizeof(float))) {
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
  return fail;
}

static int test_attention_forward(void) { return RUN_CASES(zo_attention_cases, attention_forward_case); }

static int attention_backward_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, hs = c->hs;
  const struct attention_sizes n = attention_sizes(B, T, NH, NKV, hs);
  float *qkv = galloc_random(b, n.qkv, -2, 2), *out = galloc(b, n.out), *att = galloc(b, n.att);
  float *dout = galloc_random(b, n.out, -1, 1);
  float *dqkv = galloc_nan(b, n.qkv); /* overwritten */
  float *datt = galloc_nan(b, n.att); /* scratch: NaN must not leak into dqkv */
  be->attention_forward(out, att, qkv, B, T, NH, NKV, hs, ZO_F32, NULL);
  be->attention_backward(dqkv, datt, dout, qkv, att, B, T, NH, NKV, hs, ZO_F32, NULL);
  double *ref = dalloc(b, n.qkv);
  attention_backward64(ref, widen(b, dout, n.out), widen(b, qkv, n.qkv), B, T, NH, NKV, hs);
  return check_output("dqkv", dqkv, ref, n.qkv, 2e-6, 2e-5) | guard_broken("datt", datt, n.att);
}

static int test_attention_backward(void) { return RUN_CASES(zo_attention_cases, attention_backward_case); }

/* Sliding window: out and att against the float64 windowed forward, att
 * exactly 0 outside (t - W, t]; the backward (attention_backward on the
 * windowed probabilities) against the float64 windowed backward. */
static int attention_window_forward_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, hs = c->hs, W = c->W;
  const struct attention_sizes n = attention_sizes(B, T, NH, NKV, hs);
  float *qkv = galloc_random(b, n.qkv, -2, 2), *out = galloc_nan(b, n.out), *att = galloc_nan(b, n.att);
  be->attention_window_forward(out, att, qkv, B, T, NH, NKV, hs, W, ZO_F32, NULL);
  double *ref = dalloc(b, n.out), *ref_att = dalloc(b, n.att);
  attention_window_forward64(ref, ref_att, widen(b, qkv, n.qkv), B, T, NH, NKV, hs, W);
  int fail = check_output("out", out, ref, n.out, 1e-6, 1e-5) | check_output("att", att, ref_att, n.att, 1e-7, 1e-5);
  for (size_t bh = 0; bh < (size_t)B * NH && !fail; bh++)
    for (int t = 0; t < T && !fail; t++)
      for (int u = 0; u < T && !fail; u++)
        if ((u > t || u <= t - W) && att[(bh * T + t) * T + u] != 0.0f) {
          fprintf(stderr, "  att outside the window: (bh %zu, %d, %d) = %g, want 0\n", bh, t, u,
                  (double)att[(bh * T + t) * T + u]);
          fail = 1;
        }
  return fail;
}

static int test_attention_window_forward(void) {
  return RUN_CASES(zo_attention_window_cases, attention_window_forward_case);
}

static int attention_window_backward_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, hs = c->hs, W = c->W;
  const struct attention_sizes n = attention_sizes(B, T, NH, NKV, hs);
  float *qkv = galloc_random(b, n.qkv, -2, 2), *out = galloc(b, n.out), *att = galloc(b, n.att);
  float *dout = galloc_random(b, n.out, -1, 1), *dqkv = galloc_nan(b, n.qkv), *datt = galloc_nan(b, n.att);
  be->attention_window_forward(out, att, qkv, B, T, NH, NKV, hs, W, ZO_F32, NULL);
  be->attention_backward(dqkv, datt, dout, qkv, att, B, T, NH, NKV, hs, ZO_F32, NULL);
  double *ref = dalloc(b, n.qkv);
  attention_window_backward64(ref, widen(b, dout, n.out), widen(b, qkv, n.qkv), B, T, NH, NKV, hs, W);
  return check_output("dqkv", dqkv, ref, n.qkv, 2e-6, 2e-5);
}

static int test_attention_window_backward(void) {
  return RUN_CASES(zo_attention_window_cases, attention_window_backward_case);
}

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
  const struct attention_sizes n = attention_sizes(B, T, NH, NKV, hs);
  struct zo_test_bufs b = {0};
  float *qkv = galloc_random(&b, n.qkv, -2, 2), *out = galloc(&b, n.out), *att = galloc(&b, n.att);
  float *dout = galloc_random(&b, n.out, -1, 1), *dqkv = galloc(&b, n.qkv), *datt = galloc(&b, n.att);
  be->attention_forward(out, att, qkv, B, T, NH, NKV, hs, ZO_F32, NULL);
  be->attention_backward(dqkv, datt, dout, qkv, att, B, T, NH, NKV, hs, ZO_F32, NULL);
  struct attention_fd c = {widen(&b, qkv, n.qkv), widen(&b, dout, n.out), dalloc(&b, n.out), B, T, NH, NKV, hs};
  int fail = check_fd("dqkv", c.qkv, n.qkv, dqkv, attention_fd_loss, &c);
  if (fail) fprintf(stderr, "  (B=%d T=%d NH=%d NKV=%d hs=%d)\n", B, T, NH, NKV, hs);
  zo_test_bufs_free(&b);
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
static int rope_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, hs = c->hs;
  const int maxT = T + 3, h2 = hs / 2;
  const size_t n = attention_sizes(B, T, NH, NKV, hs).qkv, nt = (size_t)maxT * h2;
  float *x0 = galloc_random(b, n, -2, 2), *y0 = galloc_random(b, n, -1, 1), *x = galloc(b, n), *y = galloc(b, n);
  float *cos_t = galloc(b, nt), *sin_t = galloc(b, nt);
  rope_tables(cos_t, sin_t, maxT, hs);
  memcpy(x, x0, n * sizeof(float));
  memcpy(y, y0, n * sizeof(float));
  be->rope_forward(x, cos_t, sin_t, B, T, NH, NKV, hs, ZO_F32, NULL);
  be->rope_backward(y, cos_t, sin_t, B, T, NH, NKV, hs, ZO_F32, NULL);
  double *c64 = widen(b, cos_t, nt), *s64 = widen(b, sin_t, nt);
  double *rx = widen(b, x0, n), *ry = widen(b, y0, n);
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
  struct zo_test_bufs b = {0};
  struct rope_fd c = {widen(&b, qkv, n), widen(&b, cos_t, T * hs / 2), widen(&b, sin_t, T * hs / 2),
                      widen(&b, dout, n), dalloc(&b, n), B, T, NH, NKV, hs};
  int fail = check_fd("dqkv", c.qkv, n, grad, rope_fd_loss, &c);
  zo_test_bufs_free(&b);
  return fail;
}

/* ---- dropout ---------------------------------------------------------------- */

/* Against float64 with the mask drawn element by element
 * (zo_philox_dropout_keep): kept elements are inp / (1 - p) in fp32, dropped
 * ones 0; the kept fraction is within 5 standard deviations of 1 - p; p = 0
 * is bit-identical to the input; in place (out aliasing inp) gives the same;
 * the same (seed, site) draws the same mask, another site another. */
static int dropout_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const size_t N = (size_t)c->N;
  const float p = c->p;
  const uint64_t seed = c->seed * 0x9E3779B97F4A7C15ull, site = c->seed ^ 0xABCDEF12345ull;
  float *inp = galloc_random(b, N, -4, 4), *out = galloc_nan(b, N), *out2 = galloc_nan(b, N);
  be->dropout(out, inp, N, p, seed, site, ZO_F32, NULL);
  const uint32_t thr = zo_philox_dropout_threshold(p);
  const double scale = (double)(float)(1.0 / (1.0 - (double)p));
  double *ref = dalloc(b, N);
  size_t kept = 0;
  for (size_t i = 0; i < N; i++) {
    const bool keep = zo_philox_dropout_keep(seed, site, i, thr);
    kept += keep;
    ref[i] = keep ? (double)inp[i] * scale : 0.0;
  }
  int fail = check_output("out", out, ref, N, 0.0, 1e-7);
  for (size_t i = 0; i < N && !fail; i++)
    if ((out[i] == 0.0f) != (ref[i] == 0.0)) {
      fprintf(stderr, "  element %zu: mask differs from the reference's\n", i);
      fail = 1;
    }
  const double q = 1.0 - p, frac = (double)kept / (double)N, sd = sqrt(p * q / (double)N);
  if (fabs(frac - q) > 5.0 * sd + 1e-12) {
    fprintf(stderr, "  p = %g: kept %zu of %zu (%.5f), want %.5f +- %.5f\n", p, kept, N, frac, q, 5 * sd);
    fail = 1;
  }
  if (p == 0.0f && memcmp(out, inp, N * sizeof(float)) != 0) {
    fprintf(stderr, "  p = 0 is not bit-identical to the input\n");
    fail = 1;
  }
  memcpy(out2, inp, N * sizeof(float));
  be->dropout(out2, out2, N, p, seed, site, ZO_F32, NULL);
  if (memcmp(out2, out, N * sizeof(float)) != 0) {
    fprintf(stderr, "  in place differs from out of place\n");
    fail = 1;
  }
  if (p > 0.0f) {
    be->dropout(out2, inp, N, p, seed, site + 1, ZO_F32, NULL);
    size_t same = 0;
    for (size_t i = 0; i < N; i++) same += (out2[i] == 0.0f) == (out[i] == 0.0f);
    if (same == N) {
      fprintf(stderr, "  another site draws the same mask\n");
      fail = 1;
    }
  }
  return fail;
}

static int test_dropout(void) { return RUN_CASES(zo_dropout_cases, dropout_case); }

/* Philox4x32-10 against Random123's known-answer vectors (kat_vectors). */
static int test_philox_kat(void) {
  static const uint32_t kat[3][7] = {
      {0, 0, 0, 0, 0, 0, 0},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0},
  };
  static const uint32_t want[3][4] = {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
                                      {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
                                      {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}};
  int fail = 0;
  for (int k = 0; k < 3; k++) {
    uint32_t c[4] = {kat[k][0], kat[k][1], kat[k][2], kat[k][3]};
    zo_philox4x32_10(c, kat[k][4], kat[k][5]);
    if (memcmp(c, want[k], sizeof c) != 0) {
      fprintf(stderr, "  vector %d: %08x %08x %08x %08x\n", k, c[0], c[1], c[2], c[3]);
      fail = 1;
    }
  }
  return fail;
}

/* ---- gelu and residual ---------------------------------------------------- */

static int gelu_forward_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const size_t N = (size_t)c->N;
  float *inp = galloc_random(b, N, -8, 8), *out = galloc_nan(b, N);
  inp[0] = 0.0f;
  inp[1] = -30.0f;
  inp[2] = 30.0f;
  be->gelu_forward(out, inp, N, ZO_F32, NULL);
  double *ref = dalloc(b, N);
  for (size_t i = 0; i < N; i++) ref[i] = gelu64(inp[i]);
  return check_output("out", out, ref, N, 1e-7, 1e-6);
}

static int test_gelu_forward(void) { return RUN_CASES(zo_gelu_cases, gelu_forward_case); }

static int gelu_backward_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const size_t N = (size_t)c->N;
  float *inp = galloc_random(b, N, -8, 8), *dout = galloc_random(b, N, -1, 1);
  float *dinp = galloc_nan(b, N);
  inp[0] = 0.0f;
  double *ref = dalloc(b, N);
  for (size_t i = 0; i < N; i++) ref[i] = gelu_grad64(inp[i]) * dout[i];
  be->gelu_backward(dinp, inp, dout, N, ZO_F32, NULL);
  int fail = check_output("dinp", dinp, ref, N, 1e-6, 1e-5);
  /* dinp may alias dout. */
  be->gelu_backward(dout, inp, dout, N, ZO_F32, NULL);
  return fail | check_output("dinp (aliasing dout)", dout, ref, N, 1e-6, 1e-5);
}

static int test_gelu_backward(void) { return RUN_CASES(zo_gelu_cases, gelu_backward_case); }

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
  struct zo_test_bufs b = {0};
  struct gelu_fd c = {widen(&b, inp, N), widen(&b, dout, N), N};
  int fail = check_fd("dinp", c.inp, N, dinp, gelu_fd_loss, &c);
  zo_test_bufs_free(&b);
  return fail;
}

/* ---- swiglu --------------------------------------------------------------- */

/* Gates over [-8, 8] with 0 and +-30, -100 (sigmoid saturating) in row 0. */
static void swiglu_inputs(float *inp, size_t N, int I) {
  fill_random(inp, N * 2 * (size_t)I, -8, 8);
  const float edge[] = {0.0f, 30.0f, -30.0f, -100.0f};
  for (int i = 0; i < 4 && i < I; i++) inp[i] = edge[i];
}

static int swiglu_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const size_t N = (size_t)c->N;
  const int I = c->I;
  const size_t ni = N * 2 * (size_t)I, no = N * (size_t)I;
  float *inp = galloc(b, ni), *out = galloc_nan(b, no), *dinp = galloc_nan(b, ni);
  swiglu_inputs(inp, N, I);
  float *dout = galloc_random(b, no, -1, 1);
  be->swiglu_forward(out, inp, N, I, ZO_F32, NULL);
  be->swiglu_backward(dinp, inp, dout, N, I, ZO_F32, NULL);
  double *inp64 = widen(b, inp, ni), *ref = dalloc(b, no), *ref_d = dalloc(b, ni);
  swiglu_forward64(ref, inp64, N, I);
  swiglu_backward64(ref_d, inp64, widen(b, dout, no), N, I);
  return check_output("out", out, ref, no, 1e-7, 1e-6) | check_output("dinp", dinp, ref_d, ni, 1e-7, 1e-5) |
         guard_broken("inp", inp, ni) | guard_broken("dout", dout, no);
}

static int test_swiglu(void) { return RUN_CASES(zo_swiglu_cases, swiglu_case); }

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
  struct zo_test_bufs b = {0};
  struct swiglu_fd c = {widen(&b, inp, N * 2 * I), widen(&b, dout, N * I), dalloc(&b, N * I), N, I};
  int fail = check_fd("dinp", c.inp, N * 2 * I, dinp, swiglu_fd_loss, &c);
  zo_test_bufs_free(&b);
  return fail;
}

static int residual_forward_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const size_t N = (size_t)c->N;
  float *a = galloc_random(b, N, -1, 1), *bb = galloc_random(b, N, -1, 1), *out = galloc_nan(b, N);
  double *ref = dalloc(b, N);
  for (size_t i = 0; i < N; i++) ref[i] = (double)a[i] + bb[i];
  be->residual_forward(out, a, bb, N, ZO_F32, NULL);
  int fail = check_output("out", out, ref, N, 0, 1e-7);
  /* out may alias either input. */
  be->residual_forward(a, a, bb, N, ZO_F32, NULL);
  fail |= check_output("out (aliasing inp1)", a, ref, N, 0, 1e-7);
  fill_random(a, N, -1, 1);
  for (size_t i = 0; i < N; i++) ref[i] = (double)a[i] + bb[i];
  be->residual_forward(bb, a, bb, N, ZO_F32, NULL);
  return fail | check_output("out (aliasing inp2)", bb, ref, N, 0, 1e-7);
}

static int test_residual_forward(void) { return RUN_CASES(zo_residual_cases, residual_forward_case); }

static int residual_backward_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const size_t N = (size_t)c->N;
  float *dout = galloc_random(b, N, -1, 1);
  float *d1 = galloc_random(b, N, -1, 1), *d2 = galloc_random(b, N, -1, 1); /* both accumulate */
  double *ref1 = widen(b, d1, N), *ref2 = widen(b, d2, N);
  for (size_t i = 0; i < N; i++) {
    ref1[i] += dout[i];
    ref2[i] += dout[i];
  }
  be->residual_backward(d1, d2, dout, N, ZO_F32, NULL);
  return check_output("dinp1", d1, ref1, N, 0, 1e-7) | check_output("dinp2", d2, ref2, N, 0, 1e-7);
}

static int test_residual_backward(void) { return RUN_CASES(zo_residual_cases, residual_backward_case); }

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
  float a[N], bb[N], dout[N], d1[N] = {0}, d2[N] = {0};
  fill_random(a, N, -1, 1);
  fill_random(bb, N, -1, 1);
  fill_random(dout, N, -1, 1);
  be->residual_backward(d1, d2, dout, N, ZO_F32, NULL);
  struct zo_test_bufs b = {0};
  struct residual_fd c = {widen(&b, a, N), widen(&b, bb, N), widen(&b, dout, N), N};
  int fail = check_fd("dinp1", c.a, N, d1, residual_fd_loss, &c) |
             check_fd("dinp2", c.b, N, d2, residual_fd_loss, &c);
  zo_test_bufs_free(&b);
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

/* N rows of V real and Vp-V padded columns; padding holds NaN, so reading it
 * anywhere poisons the row. shift moves every logit (max subtraction must
 * keep exp in range). Targets include -1 (rows 2 and N - 1) and V - 1 (row
 * 0). Returns how many rows have a target. */
static int crossentropy_inputs(float *logits, int32_t *targets, int N, int V, int Vp, float shift) {
  for (int n = 0; n < N; n++) {
    fill_random(logits + (size_t)n * Vp, V, shift - 8, shift + 8);
    fill_nan(logits + (size_t)n * Vp + V, Vp - V);
    targets[n] = (int32_t)(zo_rng_u32() % V);
  }
  targets[2] = -1;
  targets[N - 1] = -1;
  targets[0] = V - 1; /* the last real column */
  int valid = 0;
  for (int n = 0; n < N; n++) valid += targets[n] >= 0;
  return valid;
}

static int crossentropy_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const int N = c->N, V = c->V, Vp = c->Vp;
  const size_t n_logits = (size_t)N * Vp;
  int32_t *targets = zo_test_bufs_alloc(b, (size_t)N * sizeof(int32_t));
  float *logits = galloc(b, n_logits), *losses = galloc_nan(b, N);
  float *dlogits = galloc_nan(b, n_logits);
  const float dloss = 1.0f / (float)crossentropy_inputs(logits, targets, N, V, Vp, c->shift); /* the mean */
  be->crossentropy_forward(losses, dlogits, logits, targets, dloss, N, V, Vp, ZO_F32, NULL);
  double *ref = dalloc(b, N), *ref_d = dalloc(b, n_logits);
  crossentropy_forward64(ref, ref_d, widen(b, logits, n_logits), targets, dloss, N, V, Vp);
  /* Loss to ~1e-6 relative (PyTorch parity); padded columns exactly 0. */
  int fail = check_output("losses", losses, ref, N, 1e-6, 1e-6) |
             check_output("dlogits", dlogits, ref_d, n_logits, 1e-8, 1e-5) |
             padding_nonzero("dlogits", dlogits, N, V, Vp);

  /* Without dlogits: the same losses, nothing else written. */
  float *losses2 = galloc_nan(b, N);
  be->crossentropy_forward(losses2, NULL, logits, targets, dloss, N, V, Vp, ZO_F32, NULL);
  fail |= check_output("losses (dlogits NULL)", losses2, ref, N, 1e-6, 1e-6);

  /* dlogits aliasing logits. */
  fill_nan(losses2, N);
  be->crossentropy_forward(losses2, logits, logits, targets, dloss, N, V, Vp, ZO_F32, NULL);
  return fail | check_output("losses (in place)", losses2, ref, N, 1e-6, 1e-6) |
         check_output("dlogits (in place)", logits, ref_d, n_logits, 1e-8, 1e-5) |
         padding_nonzero("dlogits (in place)", logits, N, V, Vp);
}

static int test_crossentropy_forward(void) { return RUN_CASES(zo_crossentropy_cases, crossentropy_case); }

/* got against the float64 reference where either may be non-finite: NaN
 * where the reference is NaN, the same infinity, else within the tolerance. */
static int check_nonfinite(const char *what, const float *got, const double *ref, size_t n, int row_len,
                           double rtol, double atol) {
  for (size_t i = 0; i < n; i++) {
    const double g = got[i], r = ref[i];
    const bool ok = isnan(r) ? isnan(g) : isinf(r) ? g == r : !isnan(g) && fabs(g - r) <= atol + rtol * fabs(r);
    if (!ok) {
      fprintf(stderr, "  %s[%zu, %zu] = %.9g, want %.9g\n", what, i / (size_t)row_len, i % (size_t)row_len, g, r);
      return 1;
    }
  }
  return 0;
}

/* Rows with -inf logits (zo_op_ce_inf_rows, zo/backend.h): the float64
 * formula's answers, NaN for the all -inf row, +inf for a -inf target,
 * finite with zero gradient at -inf columns for a finite max. */
static int test_crossentropy_inf_rows(void) {
  enum { N = ZO_CE_INF_ROWS, V = ZO_CE_INF_V, Vp = ZO_CE_INF_VP };
  struct zo_test_bufs b = {0};
  zo_rng_seed(31);
  float *logits = galloc(&b, (size_t)N * Vp), *losses = galloc_nan(&b, N), *dlogits = galloc_nan(&b, (size_t)N * Vp);
  int32_t targets[N];
  zo_op_ce_inf_rows(logits, targets);
  const float dloss = 0.25f;
  be->crossentropy_forward(losses, dlogits, logits, targets, dloss, N, V, Vp, ZO_F32, NULL);
  double *ref = dalloc(&b, N), *ref_d = dalloc(&b, (size_t)N * Vp);
  crossentropy_forward64(ref, ref_d, widen(&b, logits, (size_t)N * Vp), targets, dloss, N, V, Vp);
  int fail = check_nonfinite("losses", losses, ref, N, 1, 1e-6, 1e-6) |
             check_nonfinite("dlogits", dlogits, ref_d, (size_t)N * Vp, Vp, 1e-5, 1e-8) |
             padding_nonzero("dlogits", dlogits, N, V, Vp);
  /* The semantics the CUDA kernel must match, spelled out. */
  fail |= !isnan(losses[0]) || !isnan(dlogits[0]) || !isnan(dlogits[3]);
  fail |= !isfinite(losses[1]) || dlogits[(size_t)Vp + 299] != 0.0f || !isfinite(losses[2]);
  fail |= losses[3] != INFINITY || dlogits[3 * (size_t)Vp + 7] != -dloss;
  fail |= losses[4] != 0.0f || dlogits[4 * (size_t)Vp] != 0.0f || !isfinite(losses[5]);
  if (fail) fprintf(stderr, "  losses %g %g %g %g %g %g\n", losses[0], losses[1], losses[2], losses[3], losses[4], losses[5]);
  zo_test_bufs_free(&b);
  return fail;
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
  struct zo_test_bufs b = {0};
  struct crossentropy_fd c = {widen(&b, logits, N * Vp), dalloc(&b, N), targets, 0.7, N, V, Vp};
  /* The float64 forward never reads padding either, so its differences there
   * are 0: the op's padded gradient must be 0 too. */
  int fail = check_fd("dlogits", c.logits, N * Vp, dlogits, crossentropy_fd_loss, &c) |
             padding_nonzero("dlogits", dlogits, N, V, Vp);
  zo_test_bufs_free(&b);
  return fail;
}

/* ---- scaled_add ------------------------------------------------------------ */

/* y[:, col0:col0+M] += s * v: each element y + s * v rounded once; the
 * other columns of y the same bits. */
static int scaled_add_forward_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const int N = c->N, M = c->M, ld = c->ld, col0 = c->col0;
  const size_t ny = (size_t)N * ld, nv = (size_t)N * M;
  float *y = galloc_random(b, ny, -1, 1), *v = galloc_random(b, nv, -1, 1), *y0 = galloc(b, ny);
  memcpy(y0, y, ny * sizeof(float));
  double *ref = widen(b, y, ny);
  for (int n = 0; n < N; n++)
    for (int j = 0; j < M; j++) ref[(size_t)n * ld + col0 + j] += (double)c->scale * v[(size_t)n * M + j];
  be->scaled_add_forward(y, v, c->scale, N, M, ld, col0, ZO_F32, NULL);
  int fail = check_output("y", y, ref, ny, 1e-6, 1e-6) | guard_broken("v", v, nv);
  for (int n = 0; n < N && !fail; n++)
    for (int j = 0; j < ld; j++) {
      const size_t i = (size_t)n * ld + j;
      if ((j < col0 || j >= col0 + M) && memcmp(&y[i], &y0[i], sizeof(float))) {
        fprintf(stderr, "  y[%d, %d], outside columns [%d, %d), changed\n", n, j, col0, col0 + M);
        fail = 1;
        break;
      }
    }
  return fail;
}

static int test_scaled_add_forward(void) { return RUN_CASES(zo_scaled_add_cases, scaled_add_forward_case); }

/* dv = s * dy[:, col0:col0+M], overwritten (dv poisoned with NaN). */
static int scaled_add_backward_case(const struct zo_op_case *c, struct zo_test_bufs *b) {
  const int N = c->N, M = c->M, ld = c->ld, col0 = c->col0;
  const size_t ny = (size_t)N * ld, nv = (size_t)N * M;
  float *dy = galloc_random(b, ny, -1, 1), *dv = galloc_nan(b, nv);
  double *ref = dalloc(b, nv);
  for (int n = 0; n < N; n++)
    for (int j = 0; j < M; j++) ref[(size_t)n * M + j] = (double)c->scale * dy[(size_t)n * ld + col0 + j];
  be->scaled_add_backward(dv, dy, c->scale, N, M, ld, col0, ZO_F32, NULL);
  return check_output("dv", dv, ref, nv, 0, 1e-7) | guard_broken("dy", dy, ny);
}

static int test_scaled_add_backward(void) { return RUN_CASES(zo_scaled_add_cases, scaled_add_backward_case); }

struct scaled_add_fd {
  double *y, *v, *g, *out;
  double s;
  int N, M, ld, col0;
};

static double scaled_add_fd_loss(void *p) {
  struct scaled_add_fd *c = p;
  const size_t ny = (size_t)c->N * c->ld;
  memcpy(c->out, c->y, ny * sizeof(double));
  for (int n = 0; n < c->N; n++)
    for (int j = 0; j < c->M; j++) c->out[(size_t)n * c->ld + c->col0 + j] += c->s * c->v[(size_t)n * c->M + j];
  return dot64(c->g, c->out, ny);
}

static int test_scaled_add_backward_fd(void) {
  enum { N = 3, M = 2, LD = 7, COL0 = 3 };
  const float s = 0.75f;
  zo_rng_seed(59);
  float y[N * LD], v[N * M], g[N * LD], dv[N * M];
  fill_random(y, N * LD, -1, 1);
  fill_random(v, N * M, -1, 1);
  fill_random(g, N * LD, -1, 1);
  be->scaled_add_backward(dv, g, s, N, M, LD, COL0, ZO_F32, NULL);
  struct zo_test_bufs b = {0};
  struct scaled_add_fd c = {widen(&b, y, N * LD), widen(&b, v, N * M), widen(&b, g, N * LD), dalloc(&b, N * LD),
                            s, N, M, LD, COL0};
  int fail = check_fd("dv", c.v, N * M, dv, scaled_add_fd_loss, &c);
  zo_test_bufs_free(&b);
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
      (const void *)be->memcpy2d_async,   (const void *)be->encoder_forward,  (const void *)be->encoder_backward,
      (const void *)be->layernorm_forward, (const void *)be->layernorm_backward,
      (const void *)be->rmsnorm_forward,  (const void *)be->rmsnorm_backward,
      (const void *)be->rmsnorm_heads_forward, (const void *)be->rmsnorm_heads_backward,
      (const void *)be->rope_forward,     (const void *)be->rope_backward,
      (const void *)be->swiglu_forward,   (const void *)be->swiglu_backward,
      (const void *)be->matmul_forward,   (const void *)be->matmul_backward,
      (const void *)be->attention_forward, (const void *)be->attention_backward,
      (const void *)be->attention_window_forward,
      (const void *)be->gelu_forward,     (const void *)be->gelu_backward,
      (const void *)be->residual_forward, (const void *)be->residual_backward,
      (const void *)be->scaled_add_forward, (const void *)be->scaled_add_backward,
      (const void *)be->crossentropy_forward, (const void *)be->adamw_update, (const void *)be->adamw8bit_update, (const void *)be->cast,
      (const void *)be->sumsq,            (const void *)be->dropout,
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
  /* The one /proc/meminfo reader against the kernel's own figure: MemTotal
   * is sysinfo's totalram, in kB; a missing key reads 0. */
  struct sysinfo si;
  const size_t sys_total = sysinfo(&si) == 0 ? (size_t)si.totalram * si.mem_unit : 0;
  if (zo_meminfo_bytes("MemTotal") != sys_total / 1024 * 1024 || total_bytes != zo_meminfo_bytes("MemTotal") ||
      zo_meminfo_bytes("NoSuchKey") != 0 || zo_meminfo_bytes("MemTota") != 0) {
    fprintf(stderr, "  zo_meminfo_bytes: MemTotal %zu, sysinfo %zu, NoSuchKey %zu, MemTota %zu\n",
            zo_meminfo_bytes("MemTotal"), sys_total, zo_meminfo_bytes("NoSuchKey"), zo_meminfo_bytes("MemTota"));
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
  if (fail) fprintf(stderr, "  memset_async/memcpy_async: wrong bytes\n");
  /* 7 rows of 13 bytes, source rows 29 bytes apart, destination rows 40 apart:
   * each row lands at its pitch, the 27 bytes between rows keep what was there. */
  be->memset_async(p, 0x5a, 10000, stream);
  err = be->memcpy2d_async(p, 40, src + 3, 29, 13, 7, stream);
  be->stream_synchronize(stream);
  int bad2d = err != 0;
  for (size_t i = 0; i < 7 * 40 + 16; i++) {
    size_t r = i / 40, c = i % 40;
    unsigned char want = r < 7 && c < 13 ? src[3 + r * 29 + c] : 0x5a;
    bad2d |= ((unsigned char *)p)[i] != want;
  }
  if (bad2d) fprintf(stderr, "  memcpy2d_async: wrong bytes (rc %d)\n", err);
  fail |= bad2d;
  be->stream_destroy(stream);
  be->mem_free(p);

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
  struct zo_test_bufs b = {0};
  float *inp = galloc_random(&b, N * C, -1, 1), *w = galloc_random(&b, OC * C, -1, 1);
  float *bias = galloc_random(&b, OC, -1, 1), *want = galloc(&b, N * OC), *got = galloc_nan(&b, N * OC);
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
  zo_test_bufs_free(&b);
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
  struct zo_test_bufs b = {0};
  float *p0 = galloc_random(&b, N, -1, 1), *g = galloc_random(&b, N, -2, 2);
  float *m0 = galloc_random(&b, N, -0.1f, 0.1f), *v0 = galloc_random(&b, N, 0, 0.01f);
  float *p[3], *m[3], *v[3];
  for (int k = 0; k < 3; k++) {
    p[k] = galloc(&b, N), m[k] = galloc(&b, N), v[k] = galloc(&b, N);
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
  zo_test_bufs_free(&b);
  return fail;
}

/* adamw8bit_update through the table (NULL and created stream) writes
 * zo_adamw8bit_update's bits, with a block size that leaves a partial block;
 * the arithmetic itself is checked against float64 in test-offload-adamw8bit. */
static int test_adamw8bit_update(void) {
  enum { N = (1 << 15) + 77, BLOCK = 256 };
  const size_t nb = (N + BLOCK - 1) / BLOCK;
  zo_rng_seed(33);
  struct zo_test_bufs b = {0};
  float *p0 = galloc_random(&b, N, -1, 1), *g = galloc_random(&b, N, -2, 2);
  float *m0 = galloc_random(&b, N, -0.1f, 0.1f), *v0 = galloc_random(&b, N, 0, 0.01f);
  uint8_t *mc0 = zo_test_bufs_alloc(&b, N), *vc0 = zo_test_bufs_alloc(&b, N), *mc[3], *vc[3];
  float *ma0 = zo_test_bufs_alloc(&b, nb * 4), *va0 = zo_test_bufs_alloc(&b, nb * 4), *p[3], *ma[3], *va[3];
  zo_adamw8bit_quantize(mc0, ma0, m0, N, BLOCK, ZO_QMAP_SIGNED);
  zo_adamw8bit_quantize(vc0, va0, v0, N, BLOCK, ZO_QMAP_UNSIGNED);
  for (int k = 0; k < 3; k++) {
    p[k] = galloc(&b, N), mc[k] = zo_test_bufs_alloc(&b, N), vc[k] = zo_test_bufs_alloc(&b, N);
    ma[k] = zo_test_bufs_alloc(&b, nb * 4), va[k] = zo_test_bufs_alloc(&b, nb * 4);
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
  zo_test_bufs_free(&b);
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
    struct zo_test_bufs b = {0};
    float *x = galloc(&b, n + 1);
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
    zo_test_bufs_free(&b);
  }
  be->stream_destroy(stream);
  return fail;
}

int main(void) {
  static const struct zo_test tests[] = {
      ZO_TEST(backend_table),
      ZO_TEST(memory),
      ZO_TEST(encoder_forward),
      ZO_TEST(encoder_backward),
      ZO_TEST(encoder_backward_padding),
      ZO_TEST(encoder_backward_fd),
      ZO_TEST(layernorm_forward),
      ZO_TEST(layernorm_backward),
      ZO_TEST(layernorm_backward_fd),
      ZO_TEST(rmsnorm_forward),
      ZO_TEST(rmsnorm_backward),
      ZO_TEST(rmsnorm_backward_fd),
      ZO_TEST(rmsnorm_heads_forward),
      ZO_TEST(rmsnorm_heads_backward),
      ZO_TEST(rmsnorm_heads_backward_fd),
      ZO_TEST(matmul_forward),
      ZO_TEST(matmul_backward),
      ZO_TEST(matmul_backward_fd),
      ZO_TEST(matmul_backward_frozen),
      ZO_TEST(attention_forward),
      ZO_TEST(attention_window_forward),
      ZO_TEST(attention_window_backward),
      ZO_TEST(attention_backward),
      ZO_TEST(attention_backward_fd),
      ZO_TEST(rope),
      ZO_TEST(rope_backward_fd),
      ZO_TEST(philox_kat),
      ZO_TEST(dropout),
      ZO_TEST(gelu_forward),
      ZO_TEST(gelu_backward),
      ZO_TEST(gelu_backward_fd),
      ZO_TEST(swiglu),
      ZO_TEST(swiglu_backward_fd),
      ZO_TEST(residual_forward),
      ZO_TEST(residual_backward),
      ZO_TEST(residual_backward_fd),
      ZO_TEST(scaled_add_forward),
      ZO_TEST(scaled_add_backward),
      ZO_TEST(scaled_add_backward_fd),
      ZO_TEST(crossentropy_forward),
      ZO_TEST(crossentropy_inf_rows),
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
