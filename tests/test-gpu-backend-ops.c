/* CUDA backend parity: every op of zo_backend_cuda() against the CPU backend
 * (the reference, run on the NULL stream), in F32, BF16 and F16, with
 * fixed-seed random inputs on the cases of tests/zo_op_cases.h (GPT-2-like
 * small shapes and awkward ones: odd T, V not a multiple of 4, padded Vp,
 * head size 24) and, for cast, adamw and sumsq, on two shapes of this file's
 * own; outputs poisoned with NaN on both sides before the call, sentinel
 * bytes around every device output (an out-of-bounds write fails), += outputs
 * pre-filled, and the aliasing the contract allows. BF16/F16 inputs are drawn as floats and
 * rounded on the host with zo_cpu_cast, and the same dt bytes go to both
 * backends. Tolerance: |gpu - cpu| <= rtol * max|cpu| over the tensor, rtol
 * 1e-5 for F32 ops and 1e-2 for BF16/F16 ones (on all their outputs, the fp32
 * ones included); NaN never passes. cast must be bit-exact (both sides round
 * to nearest even), NaN matching NaN. Ops run on a created stream, or on the
 * NULL (legacy default) stream where a case or shape says so. Also: memory
 * errors, copies, memset, stream / event / host-function ordering, the
 * gradient reductions bit-identical from run to run on shapes that take
 * their multi-chunk paths (and the fp32 embedding backward bitwise the
 * CPU's), and a copy from pageable memory queued behind an event that a
 * host function satisfies later reading what the function wrote. Uses
 * only the public backend table. Exits 77 (skipped) with the reason when
 * there is no CUDA backend. */
#include "zo/adamw8bit.h"
#include "zo/backend.h"
#include "zo/cpu.h"
#include "zo/quant4.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zo_op_cases.h"
#include "zo_test.h"

#define GUARD_BYTES 64            /* sentinel bytes on each side of a device tensor */
#define SENTINEL_BITS 0xdeadbeefu /* their bit pattern, repeated */

static zo_backend_t cpu, gpu;
static zo_stream_t gstream; /* where the GPU ops of the current shape run */

/* ---- dtypes -------------------------------------------------------------------- */

static const enum zo_dtype op_dtypes[] = {ZO_F32, ZO_BF16, ZO_F16};
#define N_DTYPES (sizeof op_dtypes / sizeof op_dtypes[0])

static enum zo_dtype op_dt = ZO_F32; /* the dtype of the op under test: sets the tolerance */

static double op_rtol(void) { return op_dt == ZO_F32 ? 1e-5 : 1e-2; }

/* ---- shapes -------------------------------------------------------------------- */

struct shape {
  const char *name;
  int B, T, C;
  bool on_null; /* run the GPU ops on the NULL stream */
};

/* The sizes of the ops outside zo_op_cases.h (cast, adamw, sumsq). */
static const struct shape shapes[] = {
    {"gpt2-small-ish B=2 T=64 C=96", 2, 64, 96, false},
    {"awkward B=3 T=37 C=72", 3, 37, 72, true},
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

/* Broken test setup (allocation, copy) is fatal, not a test failure. */
static void must(int err, const char *what) {
  if (err) {
    fprintf(stderr, "%s failed: %d: %s\n", what, err, zo_last_error());
    exit(1);
  }
}

static void gsync(void) { must(gpu->stream_synchronize(gstream), "stream_synchronize"); }

/* ---- paired buffers: the CPU reference copy and a guarded device copy ---------- */

struct tbuf {
  size_t n;
  enum zo_dtype dt;
  size_t es;          /* bytes per element */
  void *ref;          /* (n) dt elements on the host, what the CPU backend computes on */
  void *dev;          /* (GUARD_BYTES + n * es + GUARD_BYTES) device; the tensor starts at
                         dev + GUARD_BYTES */
  unsigned char *got; /* (GUARD_BYTES + n * es + GUARD_BYTES) host, the device copy read back */
  float *ref32;       /* (n) ref widened, for comparisons */
  float *got32;       /* (n) the device tensor widened */
};

static void *D(const struct tbuf *b) { return (char *)b->dev + GUARD_BYTES; }

static size_t tb_bytes(const struct tbuf *b) { return b->n * b->es + 2 * GUARD_BYTES; }

static struct tbuf tb_new(size_t n, enum zo_dtype dt) {
  struct tbuf b = {n, dt, zo_dtype_size(dt), NULL, NULL, NULL, NULL, NULL};
  b.ref = zo_test_xmalloc(n * b.es);
  b.got = zo_test_xmalloc(tb_bytes(&b));
  b.ref32 = zo_test_xmalloc(n * sizeof(float));
  b.got32 = zo_test_xmalloc(n * sizeof(float));
  must(gpu->mem_alloc(&b.dev, tb_bytes(&b)), "mem_alloc");
  return b;
}

static void tb_free(struct tbuf *b) {
  free(b->ref);
  free(b->got);
  free(b->ref32);
  free(b->got32);
  gpu->mem_free(b->dev);
}

static void fill_sentinels(unsigned char *p) {
  const uint32_t bits = SENTINEL_BITS;
  for (size_t i = 0; i < GUARD_BYTES; i += sizeof bits) memcpy(p + i, &bits, sizeof bits);
}

static bool sentinels_ok(const unsigned char *p) {
  unsigned char want[GUARD_BYTES];
  fill_sentinels(want);
  return memcmp(p, want, GUARD_BYTES) == 0;
}

/* Sets the device copy to ref's current contents, with fresh sentinels. */
static void tb_upload(struct tbuf *b) {
  fill_sentinels(b->got);
  fill_sentinels(b->got + GUARD_BYTES + b->n * b->es);
  memcpy(b->got + GUARD_BYTES, b->ref, b->n * b->es);
  must(gpu->memcpy_async(b->dev, b->got, tb_bytes(b), ZO_COPY_H2D, gstream), "memcpy_async H2D");
  gsync();
}

/* Both copies = x (n floats) rounded to the buffer's dtype. */
static void tb_set(struct tbuf *b, const float *x) {
  zo_cpu_cast(b->ref, b->dt, x, ZO_F32, b->n);
  tb_upload(b);
}

static void tb_random(struct tbuf *b, float lo, float hi) {
  for (size_t i = 0; i < b->n; i++) b->ref32[i] = zo_rng_float(lo, hi);
  tb_set(b, b->ref32);
}

static void tb_poison(struct tbuf *b) {
  for (size_t i = 0; i < b->n; i++) b->ref32[i] = NAN;
  tb_set(b, b->ref32);
}

/* Waits for the GPU stream and reads the device copy back into got, and
 * widened into got32 (ref widened into ref32). Returns 1 (saying where) on a
 * broken sentinel. */
static int tb_read(const char *what, struct tbuf *b) {
  gsync();
  must(gpu->memcpy_async(b->got, b->dev, tb_bytes(b), ZO_COPY_D2H, gstream), "memcpy_async D2H");
  gsync();
  const bool lo = sentinels_ok(b->got), hi = sentinels_ok(b->got + GUARD_BYTES + b->n * b->es);
  if (!lo || !hi) {
    fprintf(stderr, "  %s: write out of bounds (%s the tensor)\n", what, !lo ? "before" : "after");
    return 1;
  }
  zo_cpu_cast(b->got32, ZO_F32, b->got + GUARD_BYTES, b->dt, b->n);
  zo_cpu_cast(b->ref32, ZO_F32, b->ref, b->dt, b->n);
  return 0;
}

/* tb_read, then compares with the reference. Returns 1 (saying where) on a
 * broken sentinel, a NaN, or a difference over op_rtol() * max|ref|. */
static int tb_check(const char *what, struct tbuf *b) {
  if (tb_read(what, b)) return 1;
  double maxref = 0.0;
  for (size_t i = 0; i < b->n; i++) {
    if (isnan(b->ref32[i])) {
      fprintf(stderr, "  %s[%zu]: the CPU reference is NaN\n", what, i);
      return 1;
    }
    if (fabs(b->ref32[i]) > maxref) maxref = fabs(b->ref32[i]);
  }
  double tol = op_rtol() * (maxref > 1e-6 ? maxref : 1e-6);
  if (zo_test_close_f32(what, b->got32, b->ref32, b->n, tol, 0.0)) {
    fprintf(stderr, "  (got: gpu, want: cpu; %s; tol = %g * max|cpu| %.3g)\n", zo_dtype_name(b->dt),
            op_rtol(), maxref);
    return 1;
  }
  return 0;
}

/* tb_read, then every element bit for bit equal to the reference, except
 * that any NaN matches any NaN (the payload of a narrowed NaN is not part of
 * the contract). */
static int tb_check_exact(const char *what, struct tbuf *b) {
  if (tb_read(what, b)) return 1;
  const unsigned char *got = b->got + GUARD_BYTES, *ref = b->ref;
  for (size_t i = 0; i < b->n; i++) {
    if (isnan(b->ref32[i]) && isnan(b->got32[i])) continue;
    if (memcmp(got + i * b->es, ref + i * b->es, b->es) != 0) {
      fprintf(stderr, "  %s[%zu] (%s): got %.9g, want %.9g (bits differ)\n", what, i,
              zo_dtype_name(b->dt), (double)b->got32[i], (double)b->ref32[i]);
      return 1;
    }
  }
  return 0;
}

/* Token ids or targets: a host array and its device copy. */
struct ibuf {
  size_t n;
  int32_t *host;
  int32_t *dev;
};

static struct ibuf ib_new(size_t n, int lo, int hi) {
  struct ibuf b = {n, zo_test_xmalloc(n * sizeof(int32_t)), NULL};
  for (size_t i = 0; i < n; i++) b.host[i] = lo + (int)(zo_rng_u32() % (uint32_t)(hi - lo));
  void *p = NULL;
  must(gpu->mem_alloc(&p, n * sizeof(int32_t)), "mem_alloc");
  b.dev = p;
  must(gpu->memcpy_async(b.dev, b.host, n * sizeof(int32_t), ZO_COPY_H2D, gstream), "memcpy H2D");
  gsync();
  return b;
}

static void ib_free(struct ibuf *b) {
  free(b->host);
  gpu->mem_free(b->dev);
}

static zo_stream_t test_stream; /* created in main, used by shapes that are not on_null */

/* Seeds the generator and picks the stream for shape s. */
static const struct shape *begin_shape(size_t s, uint64_t seed) {
  zo_rng_seed(seed * 131 + s);
  gstream = shapes[s].on_null ? NULL : test_stream;
  return &shapes[s];
}

static int report(int fail, const struct shape *sh) {
  if (fail)
    fprintf(stderr, "  (shape %s, %s stream, %s)\n", sh->name, sh->on_null ? "NULL" : "created",
            zo_dtype_name(op_dt));
  return fail;
}

/* ---- the shared op cases (zo_op_cases.h) ---------------------------------------- */

static int n_cases_run; /* (case, dtype) runs, printed at the end */

/* Runs fn on each case of cases[0, n) once per dtype in op_dtypes (BF16 and
 * F16 only for ZO_OPC_HALF_ONLY), each after zo_rng_seed(its seed), on the
 * NULL or the created stream as the case says; says which failed. */
static int run_cases(const struct zo_op_case *cases, size_t n,
                     int (*fn)(const struct zo_op_case *, enum zo_dtype)) {
  int fail = 0;
  for (size_t di = 0; di < N_DTYPES; di++) {
    const enum zo_dtype dt = op_dt = op_dtypes[di];
    for (size_t i = 0; i < n; i++) {
      const struct zo_op_case *c = &cases[i];
      if (dt == ZO_F32 && (c->flags & ZO_OPC_HALF_ONLY)) continue;
      zo_rng_seed(c->seed);
      gstream = c->flags & ZO_OPC_NULL_STREAM ? NULL : test_stream;
      const int f = fn(c, dt);
      if (f) {
        char d[200];
        fprintf(stderr, "  (case %s; %s, %s stream)\n", zo_op_case_describe(c, d, sizeof d), zo_dtype_name(dt),
                gstream ? "created" : "NULL");
      }
      fail |= f;
      n_cases_run++;
    }
  }
  return fail;
}
#define RUN_CASES(cases, fn) run_cases((cases), ZO_ARRAY_LEN(cases), (fn))

/* ---- ops: each case runs once per dtype in op_dtypes (op_dt) ------------------------ */

/* Then with wpe NULL: the token rows alone, bit for bit. */
static int encoder_forward_case(const struct zo_op_case *c, enum zo_dtype dt) {
  const int B = c->B, T = c->T, C = c->C;
  struct tbuf out = tb_new((size_t)B * T * C, dt), wte = tb_new((size_t)c->V * C, dt),
              wpe = tb_new((size_t)c->maxT * C, dt);
  struct ibuf inp = ib_new((size_t)B * T, 0, c->V);
  tb_random(&wte, -1, 1);
  tb_random(&wpe, -1, 1);
  tb_poison(&out);
  cpu->encoder_forward(out.ref, inp.host, wte.ref, wpe.ref, B, T, C, dt, NULL);
  gpu->encoder_forward(D(&out), inp.dev, D(&wte), D(&wpe), B, T, C, dt, gstream);
  int fail = tb_check("out", &out);
  tb_poison(&out);
  cpu->encoder_forward(out.ref, inp.host, wte.ref, NULL, B, T, C, dt, NULL);
  gpu->encoder_forward(D(&out), inp.dev, D(&wte), NULL, B, T, C, dt, gstream);
  fail |= tb_check_exact("out (wpe NULL)", &out);
  tb_free(&out), tb_free(&wte), tb_free(&wpe), ib_free(&inp);
  return fail;
}

static int test_encoder_forward(void) { return RUN_CASES(zo_encoder_forward_cases, encoder_forward_case); }

/* dwte and dwpe += (pre-filled); then dwpe NULL: dwte accumulates again,
 * dwpe stays as it was; then a padding index (token V / 2), with and
 * without dwpe. */
static int encoder_backward_case(const struct zo_op_case *c, enum zo_dtype dt) {
  const int B = c->B, T = c->T, C = c->C;
  struct tbuf dwte = tb_new((size_t)c->V * C, ZO_F32), dwpe = tb_new((size_t)c->maxT * C, ZO_F32),
              dout = tb_new((size_t)B * T * C, dt);
  struct ibuf inp = ib_new((size_t)B * T, 0, c->V);
  tb_random(&dwte, -1, 1);
  tb_random(&dwpe, -1, 1);
  tb_random(&dout, -1, 1);
  cpu->encoder_backward(dwte.ref, dwpe.ref, dout.ref, inp.host, B, T, C, -1, dt, NULL);
  gpu->encoder_backward(D(&dwte), D(&dwpe), D(&dout), inp.dev, B, T, C, -1, dt, gstream);
  int fail = tb_check("dwte", &dwte) | tb_check("dwpe", &dwpe);
  cpu->encoder_backward(dwte.ref, NULL, dout.ref, inp.host, B, T, C, -1, dt, NULL);
  gpu->encoder_backward(D(&dwte), NULL, D(&dout), inp.dev, B, T, C, -1, dt, gstream);
  fail |= tb_check("dwte (dwpe NULL)", &dwte) | tb_check("dwpe (untouched)", &dwpe);
  const int pad = c->V / 2;
  cpu->encoder_backward(dwte.ref, dwpe.ref, dout.ref, inp.host, B, T, C, pad, dt, NULL);
  gpu->encoder_backward(D(&dwte), D(&dwpe), D(&dout), inp.dev, B, T, C, pad, dt, gstream);
  fail |= tb_check("dwte (padding index)", &dwte) | tb_check("dwpe (padding index)", &dwpe);
  cpu->encoder_backward(dwte.ref, NULL, dout.ref, inp.host, B, T, C, pad, dt, NULL);
  gpu->encoder_backward(D(&dwte), NULL, D(&dout), inp.dev, B, T, C, pad, dt, gstream);
  fail |= tb_check("dwte (padding index, dwpe NULL)", &dwte);
  tb_free(&dwte), tb_free(&dwpe), tb_free(&dout), ib_free(&inp);
  return fail;
}

static int test_encoder_backward(void) { return RUN_CASES(zo_encoder_backward_cases, encoder_backward_case); }

static int layernorm_forward_case(const struct zo_op_case *c, enum zo_dtype dt) {
  const int N = c->N, C = c->C;
  struct tbuf out = tb_new((size_t)N * C, dt), mean = tb_new((size_t)N, ZO_F32),
              rstd = tb_new((size_t)N, ZO_F32), inp = tb_new((size_t)N * C, dt),
              w = tb_new((size_t)C, dt), b = tb_new((size_t)C, dt);
  tb_random(&inp, -2, 3); /* nonzero mean: the centring matters */
  tb_random(&w, 0.5f, 1.5f);
  tb_random(&b, -0.5f, 0.5f);
  tb_poison(&out), tb_poison(&mean), tb_poison(&rstd);
  cpu->layernorm_forward(out.ref, mean.ref, rstd.ref, inp.ref, w.ref, b.ref, N, C, dt, NULL);
  gpu->layernorm_forward(D(&out), D(&mean), D(&rstd), D(&inp), D(&w), D(&b), N, C, dt, gstream);
  int fail = tb_check("out", &out) | tb_check("mean", &mean) | tb_check("rstd", &rstd);
  tb_free(&out), tb_free(&mean), tb_free(&rstd), tb_free(&inp), tb_free(&w), tb_free(&b);
  return fail;
}

static int test_layernorm_forward(void) {
  return RUN_CASES(zo_layernorm_forward_cases, layernorm_forward_case);
}

static int layernorm_backward_case(const struct zo_op_case *c, enum zo_dtype dt) {
  const int N = c->N, C = c->C;
  struct tbuf dinp = tb_new((size_t)N * C, dt), dw = tb_new((size_t)C, ZO_F32),
              db = tb_new((size_t)C, ZO_F32), dout = tb_new((size_t)N * C, dt),
              inp = tb_new((size_t)N * C, dt), w = tb_new((size_t)C, dt), b = tb_new((size_t)C, dt),
              out = tb_new((size_t)N * C, dt), mean = tb_new((size_t)N, ZO_F32),
              rstd = tb_new((size_t)N, ZO_F32);
  tb_random(&inp, -2, 3);
  tb_random(&w, 0.5f, 1.5f);
  tb_random(&b, -0.5f, 0.5f);
  tb_random(&dout, -1, 1);
  /* Saved statistics from the CPU forward, the same on both sides. */
  cpu->layernorm_forward(out.ref, mean.ref, rstd.ref, inp.ref, w.ref, b.ref, N, C, dt, NULL);
  tb_upload(&mean), tb_upload(&rstd);
  tb_random(&dinp, -1, 1), tb_random(&dw, -1, 1), tb_random(&db, -1, 1); /* all += */
  unsigned char *dinp0 = zo_test_xmalloc(dinp.n * dinp.es), *full = zo_test_xmalloc(tb_bytes(&dinp));
  memcpy(dinp0, dinp.ref, dinp.n * dinp.es);
  cpu->layernorm_backward(dinp.ref, dw.ref, db.ref, dout.ref, inp.ref, w.ref, mean.ref, rstd.ref, N,
                          C, dt, NULL);
  gpu->layernorm_backward(D(&dinp), D(&dw), D(&db), D(&dout), D(&inp), D(&w), D(&mean), D(&rstd), N,
                          C, dt, gstream);
  int fail = tb_check("dinp", &dinp) | tb_check("dweight", &dw) | tb_check("dbias", &db);
  /* A frozen norm (dweight, dbias NULL): the GPU's dinp is its full
   * backward's bits; dweight and dbias are not touched. */
  memcpy(full, dinp.got, tb_bytes(&dinp));
  memcpy(dinp.ref, dinp0, dinp.n * dinp.es);
  tb_upload(&dinp);
  cpu->layernorm_backward(dinp.ref, NULL, NULL, dout.ref, inp.ref, w.ref, mean.ref, rstd.ref, N, C, dt, NULL);
  gpu->layernorm_backward(D(&dinp), NULL, NULL, D(&dout), D(&inp), D(&w), D(&mean), D(&rstd), N, C, dt,
                          gstream);
  fail |= tb_check("dinp (frozen)", &dinp) | tb_check("dweight (frozen: untouched)", &dw) |
          tb_check("dbias (frozen: untouched)", &db);
  if (!fail && memcmp(full, dinp.got, tb_bytes(&dinp)) != 0) {
    fprintf(stderr, "  layernorm_backward with dweight, dbias NULL: dinp is not the full backward's bits\n");
    fail = 1;
  }
  /* One of them NULL: the other accumulates as the CPU's, the NULL one untouched. */
  for (int k = 0; k < 2 && !fail; k++) {
    memcpy(dinp.ref, dinp0, dinp.n * dinp.es);
    tb_upload(&dinp);
    float *cw = k == 0 ? dw.ref : NULL, *cb = k == 1 ? db.ref : NULL;
    float *gw = k == 0 ? D(&dw) : NULL, *gb = k == 1 ? D(&db) : NULL;
    cpu->layernorm_backward(dinp.ref, cw, cb, dout.ref, inp.ref, w.ref, mean.ref, rstd.ref, N, C, dt, NULL);
    gpu->layernorm_backward(D(&dinp), gw, gb, D(&dout), D(&inp), D(&w), D(&mean), D(&rstd), N, C, dt, gstream);
    fail |= tb_check(k == 0 ? "dinp (dbias NULL)" : "dinp (dweight NULL)", &dinp) |
            tb_check(k == 0 ? "dweight (dbias NULL)" : "dweight (NULL: untouched)", &dw) |
            tb_check(k == 0 ? "dbias (NULL: untouched)" : "dbias (dweight NULL)", &db);
  }
  free(dinp0), free(full);
  tb_free(&dinp), tb_free(&dw), tb_free(&db), tb_free(&dout), tb_free(&inp), tb_free(&w);
  tb_free(&b), tb_free(&out), tb_free(&mean), tb_free(&rstd);
  return fail;
}

static int test_layernorm_backward(void) {
  return RUN_CASES(zo_layernorm_backward_cases, layernorm_backward_case);
}

static int rmsnorm_forward_case(const struct zo_op_case *c, enum zo_dtype dt) {
  const int N = c->N, C = c->C;
  struct tbuf out = tb_new((size_t)N * C, dt), rstd = tb_new((size_t)N, ZO_F32),
              inp = tb_new((size_t)N * C, dt), w = tb_new((size_t)C, dt);
  tb_random(&inp, -2, 3);
  tb_random(&w, 0.5f, 1.5f);
  tb_poison(&out), tb_poison(&rstd);
  cpu->rmsnorm_forward(out.ref, rstd.ref, inp.ref, w.ref, c->eps, N, C, dt, NULL);
  gpu->rmsnorm_forward(D(&out), D(&rstd), D(&inp), D(&w), c->eps, N, C, dt, gstream);
  int fail = tb_check("rmsnorm out", &out) | tb_check("rmsnorm rstd", &rstd);
  tb_free(&out), tb_free(&rstd), tb_free(&inp), tb_free(&w);
  return fail;
}

static int test_rmsnorm_forward(void) { return RUN_CASES(zo_rmsnorm_forward_cases, rmsnorm_forward_case); }

/* rmsnorm_heads (Qwen3's q/k norms) over the rmsnorm cases' (N, C) read as N
 * tokens of H heads of Dh = C / H, rows strided (ld_in = C + 3, ld_out = C +
 * 7): the columns between are pre-filled alike on both sides and must stay. */
static int heads_of(int C) { return C % 3 == 0 ? 3 : C % 2 == 0 ? 2 : 1; }

static int rmsnorm_heads_forward_case(const struct zo_op_case *c, enum zo_dtype dt) {
  const int N = c->N, H = heads_of(c->C), Dh = c->C / H, li = c->C + 3, lo = c->C + 7;
  struct tbuf out = tb_new((size_t)N * lo, dt), rstd = tb_new((size_t)N * H, ZO_F32),
              inp = tb_new((size_t)N * li, dt), w = tb_new((size_t)Dh, dt);
  tb_random(&inp, -2, 3), tb_random(&w, 0.5f, 1.5f), tb_random(&out, -9, 9), tb_poison(&rstd);
  cpu->rmsnorm_heads_forward(out.ref, rstd.ref, inp.ref, w.ref, c->eps, N, H, Dh, lo, li, dt, NULL);
  gpu->rmsnorm_heads_forward(D(&out), D(&rstd), D(&inp), D(&w), c->eps, N, H, Dh, lo, li, dt, gstream);
  int fail = tb_check("rmsnorm_heads out", &out) | tb_check("rmsnorm_heads rstd", &rstd);
  tb_free(&out), tb_free(&rstd), tb_free(&inp), tb_free(&w);
  return fail;
}

static int test_rmsnorm_heads_forward(void) {
  return RUN_CASES(zo_rmsnorm_forward_cases, rmsnorm_heads_forward_case);
}

/* dinp overwritten in its head rows, dweight += (deterministic: a second run
 * gives the same bits). */
static int rmsnorm_heads_backward_case(const struct zo_op_case *c, enum zo_dtype dt) {
  const int N = c->N, H = heads_of(c->C), Dh = c->C / H, li = c->C + 3, lo = c->C + 7;
  struct tbuf dinp = tb_new((size_t)N * lo, dt), dw = tb_new((size_t)Dh, ZO_F32), dout = tb_new((size_t)N * lo, dt),
              inp = tb_new((size_t)N * li, dt), w = tb_new((size_t)Dh, dt), out = tb_new((size_t)N * lo, dt),
              rstd = tb_new((size_t)N * H, ZO_F32);
  tb_random(&inp, -2, 3), tb_random(&w, 0.5f, 1.5f), tb_random(&dout, -1, 1);
  cpu->rmsnorm_heads_forward(out.ref, rstd.ref, inp.ref, w.ref, c->eps, N, H, Dh, lo, li, dt, NULL);
  tb_upload(&rstd);
  tb_random(&dinp, -9, 9), tb_random(&dw, -1, 1);
  float *dw0 = zo_test_xmalloc((size_t)Dh * sizeof(float));
  memcpy(dw0, dw.ref, (size_t)Dh * sizeof(float));
  cpu->rmsnorm_heads_backward(dinp.ref, dw.ref, dout.ref, inp.ref, w.ref, rstd.ref, N, H, Dh, lo, li, dt, NULL);
  gpu->rmsnorm_heads_backward(D(&dinp), D(&dw), D(&dout), D(&inp), D(&w), D(&rstd), N, H, Dh, lo, li, dt, gstream);
  int fail = tb_check("rmsnorm_heads dinp", &dinp) | tb_check("rmsnorm_heads dweight", &dw);
  unsigned char *first = zo_test_xmalloc(tb_bytes(&dw));
  memcpy(first, dw.got, tb_bytes(&dw));
  memcpy(dw.ref, dw0, (size_t)Dh * sizeof(float));
  tb_upload(&dw);
  gpu->rmsnorm_heads_backward(D(&dinp), D(&dw), D(&dout), D(&inp), D(&w), D(&rstd), N, H, Dh, lo, li, dt, gstream);
  if (!fail && (tb_read("rmsnorm_heads dweight (second run)", &dw) || memcmp(first, dw.got, tb_bytes(&dw)) != 0))
    fail |= zo_test_fail("rmsnorm_heads dweight: a second run from the same inputs gives other bits");
  free(first), free(dw0);
  tb_free(&dinp), tb_free(&dw), tb_free(&dout), tb_free(&inp), tb_free(&w), tb_free(&out), tb_free(&rstd);
  return fail;
}

static int test_rmsnorm_heads_backward(void) {
  return RUN_CASES(zo_rmsnorm_backward_cases, rmsnorm_heads_backward_case);
}

/* dinp and dweight += from pre-filled values; dweight is deterministic: a
 * second run from the same pre-fill gives the same bits. */
static int rmsnorm_backward_case(const struct zo_op_case *c, enum zo_dtype dt) {
  const int N = c->N, C = c->C;
  struct tbuf dinp = tb_new((size_t)N * C, dt), dw = tb_new((size_t)C, ZO_F32),
              dout = tb_new((size_t)N * C, dt), inp = tb_new((size_t)N * C, dt),
              w = tb_new((size_t)C, dt), out = tb_new((size_t)N * C, dt),
              rstd = tb_new((size_t)N, ZO_F32);
  tb_random(&inp, -2, 3);
  tb_random(&w, 0.5f, 1.5f);
  tb_random(&dout, -1, 1);
  cpu->rmsnorm_forward(out.ref, rstd.ref, inp.ref, w.ref, c->eps, N, C, dt, NULL);
  tb_upload(&rstd); /* the same saved statistic on both sides */
  tb_random(&dinp, -1, 1), tb_random(&dw, -1, 1);
  float *dinp0 = zo_test_xmalloc(dinp.n * sizeof(float)); /* the pre-fill, widened (exact) */
  zo_cpu_cast(dinp0, ZO_F32, dinp.ref, dt, dinp.n);
  float *dw0 = zo_test_xmalloc((size_t)C * sizeof(float));
  memcpy(dw0, dw.ref, (size_t)C * sizeof(float));
  cpu->rmsnorm_backward(dinp.ref, dw.ref, dout.ref, inp.ref, w.ref, rstd.ref, N, C, dt, NULL);
  gpu->rmsnorm_backward(D(&dinp), D(&dw), D(&dout), D(&inp), D(&w), D(&rstd), N, C, dt, gstream);
  int fail = tb_check("rmsnorm dinp", &dinp) | tb_check("rmsnorm dweight", &dw);
  unsigned char *first = zo_test_xmalloc(tb_bytes(&dw));
  memcpy(first, dw.got, tb_bytes(&dw));
  memcpy(dw.ref, dw0, (size_t)C * sizeof(float));
  tb_upload(&dw);
  gpu->rmsnorm_backward(D(&dinp), D(&dw), D(&dout), D(&inp), D(&w), D(&rstd), N, C, dt, gstream);
  if (!fail && (tb_read("rmsnorm dweight (second run)", &dw) ||
                memcmp(first, dw.got, tb_bytes(&dw)) != 0)) {
    fprintf(stderr, "  rmsnorm dweight: a second run from the same inputs gives other bits\n");
    fail = 1;
  }
  /* A frozen norm (dweight NULL): from the same pre-fill of dinp, the
   * full backward's dinp bits, and dweight untouched. */
  if (!fail) {
    unsigned char *full = zo_test_xmalloc(tb_bytes(&dinp)), *dw_before = zo_test_xmalloc(tb_bytes(&dw));
    tb_set(&dinp, dinp0);
    gpu->rmsnorm_backward(D(&dinp), D(&dw), D(&dout), D(&inp), D(&w), D(&rstd), N, C, dt, gstream);
    fail |= tb_read("rmsnorm dinp (full, again)", &dinp);
    memcpy(full, dinp.got, tb_bytes(&dinp));
    fail |= tb_read("rmsnorm dweight (after the full run)", &dw);
    memcpy(dw_before, dw.got, tb_bytes(&dw));
    tb_set(&dinp, dinp0);
    gpu->rmsnorm_backward(D(&dinp), NULL, D(&dout), D(&inp), D(&w), D(&rstd), N, C, dt, gstream);
    fail |= tb_read("rmsnorm dinp (frozen)", &dinp) | tb_read("rmsnorm dweight (frozen)", &dw);
    if (!fail && (memcmp(full, dinp.got, tb_bytes(&dinp)) != 0 || memcmp(dw_before, dw.got, tb_bytes(&dw)) != 0)) {
      fprintf(stderr, "  rmsnorm_backward with dweight NULL: dinp not the full backward's bits, or dweight touched\n");
      fail = 1;
    }
    free(full), free(dw_before);
  }
  free(first), free(dw0), free(dinp0);
  tb_free(&dinp), tb_free(&dw), tb_free(&dout), tb_free(&inp), tb_free(&w), tb_free(&out);
  tb_free(&rstd);
  return fail;
}

static int test_rmsnorm_backward(void) { return RUN_CASES(zo_rmsnorm_backward_cases, rmsnorm_backward_case); }

static int matmul_forward_case(const struct zo_op_case *c, enum zo_dtype dt) {
  const int N = c->N, C = c->C, OC = c->OC;
  const bool with_bias = c->flags & ZO_OPC_BIAS;
  struct tbuf out = tb_new((size_t)N * OC, dt), inp = tb_new((size_t)N * C, dt),
              w = tb_new((size_t)OC * C, dt), b = tb_new((size_t)OC, dt);
  tb_random(&inp, -1, 1), tb_random(&w, -1, 1), tb_random(&b, -1, 1);
  tb_poison(&out);
  cpu->matmul_forward(out.ref, inp.ref, w.ref, with_bias ? b.ref : NULL, N, C, OC, dt, NULL);
  gpu->matmul_forward(D(&out), D(&inp), D(&w), with_bias ? D(&b) : NULL, N, C, OC, dt, gstream);
  int fail = tb_check("out", &out);
  tb_free(&out), tb_free(&inp), tb_free(&w), tb_free(&b);
  return fail;
}

/* BF16/F16: the bias is added in fp32 before the one rounding of out. With
 * u the dtype's ulp at 1, every row computes 1 * 1 + 1 * u/4 (exact in fp32)
 * plus a bias of u/2: 1 + 3u/4 rounds to 1 + u, while rounding the product
 * first (to 1) and then adding the bias (a tie, to even) would give 1. Checked
 * bit for bit. */
static int matmul_bias_rounding_case(enum zo_dtype dt) {
  const int N = 16, C = 2, OC = 8;
  const float u = dt == ZO_BF16 ? 0x1p-7f : 0x1p-10f;
  struct tbuf out = tb_new((size_t)N * OC, dt), inp = tb_new((size_t)N * C, dt),
              w = tb_new((size_t)OC * C, dt), b = tb_new((size_t)OC, dt);
  for (size_t i = 0; i < inp.n; i++) inp.ref32[i] = 1.0f;
  for (size_t i = 0; i < w.n; i++) w.ref32[i] = i % 2 ? u / 4 : 1.0f;
  for (size_t i = 0; i < b.n; i++) b.ref32[i] = u / 2;
  tb_set(&inp, inp.ref32), tb_set(&w, w.ref32), tb_set(&b, b.ref32);
  tb_poison(&out);
  cpu->matmul_forward(out.ref, inp.ref, w.ref, b.ref, N, C, OC, dt, NULL);
  gpu->matmul_forward(D(&out), D(&inp), D(&w), D(&b), N, C, OC, dt, gstream);
  int fail = tb_check_exact("out (bias rounding)", &out);
  if (!fail && out.ref32[0] != 1.0f + u) {
    fprintf(stderr, "  the CPU reference gives %.9g, want %.9g\n", (double)out.ref32[0],
            1.0 + (double)u);
    fail = 1;
  }
  tb_free(&out), tb_free(&inp), tb_free(&w), tb_free(&b);
  return fail;
}

static int test_matmul_forward(void) {
  int fail = RUN_CASES(zo_matmul_forward_cases, matmul_forward_case);
  for (size_t di = 1; di < N_DTYPES; di++) { /* BF16, F16 */
    op_dt = op_dtypes[di];
    fail |= report(matmul_bias_rounding_case(op_dt), begin_shape(0, 5));
  }
  return fail;
}

static int matmul_backward_case(const struct zo_op_case *c, enum zo_dtype dt) {
  const int N = c->N, C = c->C, OC = c->OC;
  const bool with_dinp = c->flags & ZO_OPC_DINP, with_dbias = c->flags & ZO_OPC_BIAS;
  struct tbuf dinp = tb_new((size_t)N * C, dt), dw = tb_new((size_t)OC * C, ZO_F32),
              db = tb_new((size_t)OC, ZO_F32), dout = tb_new((size_t)N * OC, dt),
              inp = tb_new((size_t)N * C, dt), w = tb_new((size_t)OC * C, dt);
  tb_random(&dout, -1, 1), tb_random(&inp, -1, 1), tb_random(&w, -1, 1);
  tb_poison(&dinp);                             /* overwritten */
  tb_random(&dw, -1, 1), tb_random(&db, -1, 1); /* += */
  cpu->matmul_backward(with_dinp ? dinp.ref : NULL, dw.ref, with_dbias ? db.ref : NULL, dout.ref,
                       inp.ref, w.ref, N, C, OC, dt, NULL);
  gpu->matmul_backward(with_dinp ? D(&dinp) : NULL, D(&dw), with_dbias ? D(&db) : NULL, D(&dout),
                       D(&inp), D(&w), N, C, OC, dt, gstream);
  /* Skipped outputs stay as they were: NaN for dinp, the pre-fill for dbias. */
  int fail = tb_check("dweight", &dw) | tb_check("dbias", &db);
  if (with_dinp) {
    fail |= tb_check("dinp", &dinp);
  } else if (tb_read("dinp", &dinp)) {
    fail = 1;
  } else {
    for (size_t i = 0; i < dinp.n; i++)
      if (!isnan(dinp.got32[i])) {
        fprintf(stderr, "  dinp[%zu] written although dinp was NULL\n", i);
        fail = 1;
        break;
      }
  }
  tb_free(&dinp), tb_free(&dw), tb_free(&db), tb_free(&dout), tb_free(&inp), tb_free(&w);
  return fail;
}

static int test_matmul_backward(void) { return RUN_CASES(zo_matmul_backward_cases, matmul_backward_case); }

/* A device copy of n bytes at host; freed with gpu->mem_free. */
static void *q4_dev_copy(const void *host, size_t n) {
  void *p = NULL;
  must(gpu->mem_alloc(&p, n), "mem_alloc");
  must(gpu->memcpy_async(p, host, n, ZO_COPY_H2D, gstream), "memcpy_async H2D");
  gsync();
  return p;
}

struct q4_shape {
  int N, C, OC, blocksize;
  enum zo_quant4_type type;
  bool nested, bias;
};

/* matmul_q4_forward and matmul_q4_backward_dx against the CPU backend's
 * (bit for bit matmul_forward / matmul_backward over the dequantized weight,
 * tests/test-kernels-q4-gemm.c); the last shape takes two panels of the
 * CUDA workspace in fp32 for both ops. */
static int matmul_q4_case(const struct q4_shape *q, enum zo_dtype dt) {
  const size_t numel = (size_t)q->OC * q->C, nb = zo_quant4_n_blocks(numel, (size_t)q->blocksize);
  const size_t nb2 = (nb + ZO_QUANT4_NESTED_BLOCK - 1) / ZO_QUANT4_NESTED_BLOCK;
  float *w32 = zo_test_xmalloc(numel * sizeof(float)), *absmax = zo_test_xmalloc(nb * sizeof(float));
  uint8_t *packed = zo_test_xmalloc(zo_quant4_packed_nbytes(numel)), *qabsmax = zo_test_xmalloc(nb);
  float *absmax2 = zo_test_xmalloc(nb2 * sizeof(float));
  for (size_t i = 0; i < numel; i++) w32[i] = zo_rng_float(-0.1f, 0.1f);
  zo_quant4_quantize(packed, absmax, w32, ZO_F32, numel, (size_t)q->blocksize, q->type);
  struct zo_quant4_weight hw = {.packed = packed, .blocksize = q->blocksize, .type = q->type, .OC = q->OC, .C = q->C};
  if (q->nested) {
    struct zo_quant4_nested nq = {.qabsmax = qabsmax, .absmax2 = absmax2};
    zo_quant4_nested_quantize(&nq, absmax, nb, zo_quant4_nested_map());
    hw.qabsmax = qabsmax, hw.absmax2 = absmax2, hw.map = zo_quant4_nested_map(), hw.offset = nq.offset;
  } else {
    hw.absmax = absmax;
  }
  struct zo_quant4_weight dw = hw;
  dw.packed = q4_dev_copy(packed, zo_quant4_packed_nbytes(numel));
  if (q->nested) {
    dw.qabsmax = q4_dev_copy(qabsmax, nb);
    dw.absmax2 = q4_dev_copy(absmax2, nb2 * sizeof(float));
    dw.map = q4_dev_copy(zo_quant4_nested_map(), 256 * sizeof(float));
  } else {
    dw.absmax = q4_dev_copy(absmax, nb * sizeof(float));
  }
  const int N = q->N, C = q->C, OC = q->OC;
  struct tbuf out = tb_new((size_t)N * OC, dt), inp = tb_new((size_t)N * C, dt), b = tb_new((size_t)OC, dt),
              dout = tb_new((size_t)N * OC, dt), dinp = tb_new((size_t)N * C, dt);
  tb_random(&inp, -1, 1), tb_random(&b, -1, 1), tb_random(&dout, -1, 1);
  tb_poison(&out), tb_poison(&dinp);
  cpu->matmul_q4_forward(out.ref, inp.ref, hw, q->bias ? b.ref : NULL, N, dt, NULL);
  gpu->matmul_q4_forward(D(&out), D(&inp), dw, q->bias ? D(&b) : NULL, N, dt, gstream);
  cpu->matmul_q4_backward_dx(dinp.ref, dout.ref, hw, N, dt, NULL);
  gpu->matmul_q4_backward_dx(D(&dinp), D(&dout), dw, N, dt, gstream);
  int fail = tb_check("q4 out", &out) | tb_check("q4 dinp", &dinp);
  if (fail)
    fprintf(stderr, "  (q4 N %d C %d OC %d %s bs %d %s)\n", N, C, OC, zo_quant4_type_name(q->type), q->blocksize,
            q->nested ? "nested" : "plain");
  tb_free(&out), tb_free(&inp), tb_free(&b), tb_free(&dout), tb_free(&dinp);
  gpu->mem_free((void *)dw.packed), gpu->mem_free((void *)dw.absmax), gpu->mem_free((void *)dw.qabsmax);
  gpu->mem_free((void *)dw.absmax2), gpu->mem_free((void *)dw.map);
  free(w32), free(absmax), free(packed), free(qabsmax), free(absmax2);
  return fail;
}

static int test_matmul_q4(void) {
  static const struct q4_shape cases[] = {
      {37, 320, 300, 64, ZO_QUANT4_NF4, true, true},
      {5, 257, 65, 128, ZO_QUANT4_FP4, false, false},
      {8, 4096, 2048, 64, ZO_QUANT4_NF4, true, true}, /* fp32: two panels forward and dx */
  };
  int fail = 0;
  for (size_t di = 0; di < N_DTYPES; di++) {
    op_dt = op_dtypes[di];
    for (size_t i = 0; i < ZO_ARRAY_LEN(cases); i++) {
      zo_rng_seed(4800 + i);
      gstream = i % 2 ? NULL : test_stream;
      fail |= matmul_q4_case(&cases[i], op_dt);
    }
  }
  return fail;
}

static int attention_forward_case(const struct zo_op_case *c, enum zo_dtype dt) {
  const int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, hs = c->hs;
  const size_t nq = (size_t)B * T * (NH + 2 * NKV) * hs, no = (size_t)B * T * NH * hs;
  struct tbuf out = tb_new(no, dt), att = tb_new((size_t)B * NH * T * T, dt), qkv = tb_new(nq, dt);
  tb_random(&qkv, -2, 2);
  tb_poison(&out), tb_poison(&att);
  cpu->attention_forward(out.ref, att.ref, qkv.ref, B, T, NH, NKV, hs, dt, NULL);
  gpu->attention_forward(D(&out), D(&att), D(&qkv), B, T, NH, NKV, hs, dt, gstream);
  int fail = tb_check("out", &out) | tb_check("att", &att);
  tb_free(&out), tb_free(&att), tb_free(&qkv);
  return fail;
}

static int test_attention_forward(void) { return RUN_CASES(zo_attention_cases, attention_forward_case); }

static int attention_backward_case(const struct zo_op_case *c, enum zo_dtype dt) {
  const int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, hs = c->hs;
  const size_t nq = (size_t)B * T * (NH + 2 * NKV) * hs, no = (size_t)B * T * NH * hs;
  const size_t na = (size_t)B * NH * T * T;
  struct tbuf dqkv = tb_new(nq, dt), datt = tb_new(na, dt), dout = tb_new(no, dt),
              qkv = tb_new(nq, dt), att = tb_new(na, dt), out = tb_new(no, dt);
  tb_random(&qkv, -2, 2);
  tb_random(&dout, -1, 1);
  cpu->attention_forward(out.ref, att.ref, qkv.ref, B, T, NH, NKV, hs, dt, NULL);
  tb_upload(&att); /* the same saved probabilities on both sides */
  tb_poison(&dqkv), tb_poison(&datt);
  cpu->attention_backward(dqkv.ref, datt.ref, dout.ref, qkv.ref, att.ref, B, T, NH, NKV, hs, dt,
                          NULL);
  gpu->attention_backward(D(&dqkv), D(&datt), D(&dout), D(&qkv), D(&att), B, T, NH, NKV, hs, dt,
                          gstream);
  int fail = tb_check("dqkv", &dqkv) | tb_check("qkv (read only)", &qkv) |
             tb_check("att (read only)", &att); /* datt is scratch: contents unspecified */
  tb_free(&dqkv), tb_free(&datt), tb_free(&dout), tb_free(&qkv), tb_free(&att), tb_free(&out);
  return fail;
}

static int test_attention_backward(void) { return RUN_CASES(zo_attention_cases, attention_backward_case); }

/* Sliding-window attention: the forward against the CPU's, and the backward
 * of the windowed probabilities (compiled; run only where a GPU is). */
static int attention_window_case(const struct zo_op_case *c, enum zo_dtype dt) {
  const int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, hs = c->hs, W = c->W;
  const size_t nq = (size_t)B * T * (NH + 2 * NKV) * hs, no = (size_t)B * T * NH * hs;
  const size_t na = (size_t)B * NH * T * T;
  struct tbuf out = tb_new(no, dt), att = tb_new(na, dt), qkv = tb_new(nq, dt), dqkv = tb_new(nq, dt),
              datt = tb_new(na, dt), dout = tb_new(no, dt);
  tb_random(&qkv, -2, 2);
  tb_random(&dout, -1, 1);
  tb_poison(&out), tb_poison(&att);
  cpu->attention_window_forward(out.ref, att.ref, qkv.ref, B, T, NH, NKV, hs, W, dt, NULL);
  gpu->attention_window_forward(D(&out), D(&att), D(&qkv), B, T, NH, NKV, hs, W, dt, gstream);
  int fail = tb_check("out", &out) | tb_check("att", &att);
  tb_upload(&att);
  tb_poison(&dqkv), tb_poison(&datt);
  cpu->attention_backward(dqkv.ref, datt.ref, dout.ref, qkv.ref, att.ref, B, T, NH, NKV, hs, dt, NULL);
  gpu->attention_backward(D(&dqkv), D(&datt), D(&dout), D(&qkv), D(&att), B, T, NH, NKV, hs, dt, gstream);
  fail |= tb_check("dqkv", &dqkv);
  tb_free(&out), tb_free(&att), tb_free(&qkv), tb_free(&dqkv), tb_free(&datt), tb_free(&dout);
  return fail;
}

static int test_attention_window(void) { return RUN_CASES(zo_attention_window_cases, attention_window_case); }

/* rope forward and backward in place on qkv (NH, NKV, hs) with Llama's
 * tables (positions [0, T + 5)); the v heads stay as they were on both. */
static int rope_case(const struct zo_op_case *c, enum zo_dtype dt) {
  const int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, hs = c->hs;
  const int maxT = T + 5, h2 = hs / 2;
  struct tbuf x = tb_new((size_t)B * T * (NH + 2 * NKV) * hs, dt),
              cos_t = tb_new((size_t)maxT * h2, ZO_F32), sin_t = tb_new((size_t)maxT * h2, ZO_F32);
  for (int t = 0; t < maxT; t++)
    for (int i = 0; i < h2; i++) {
      const double a = t * pow(10000.0, -2.0 * i / hs);
      cos_t.ref32[(size_t)t * h2 + i] = (float)cos(a);
      sin_t.ref32[(size_t)t * h2 + i] = (float)sin(a);
    }
  tb_set(&cos_t, cos_t.ref32), tb_set(&sin_t, sin_t.ref32);
  tb_random(&x, -2, 2);
  cpu->rope_forward(x.ref, cos_t.ref, sin_t.ref, B, T, NH, NKV, hs, dt, NULL);
  gpu->rope_forward(D(&x), D(&cos_t), D(&sin_t), B, T, NH, NKV, hs, dt, gstream);
  int fail = tb_check("rope_forward qkv", &x);
  tb_random(&x, -2, 2);
  cpu->rope_backward(x.ref, cos_t.ref, sin_t.ref, B, T, NH, NKV, hs, dt, NULL);
  gpu->rope_backward(D(&x), D(&cos_t), D(&sin_t), B, T, NH, NKV, hs, dt, gstream);
  fail |= tb_check("rope_backward dqkv", &x) | tb_check("cos (read only)", &cos_t) |
          tb_check("sin (read only)", &sin_t);
  tb_free(&x), tb_free(&cos_t), tb_free(&sin_t);
  return fail;
}

static int test_rope(void) { return RUN_CASES(zo_rope_cases, rope_case); }

/* The same mask and values bit for bit (one fp32 multiply, one rounding),
 * out of place and in place. */
static int dropout_case(const struct zo_op_case *c, enum zo_dtype dt) {
  const size_t N = (size_t)c->N;
  const uint64_t seed = c->seed * 0x9E3779B97F4A7C15ull, site = c->seed ^ 0xABCDEF12345ull;
  struct tbuf out = tb_new(N, dt), inp = tb_new(N, dt);
  tb_random(&inp, -4, 4);
  tb_poison(&out);
  cpu->dropout(out.ref, inp.ref, N, c->p, seed, site, dt, NULL);
  gpu->dropout(D(&out), D(&inp), N, c->p, seed, site, dt, gstream);
  int fail = tb_check_exact("dropout out", &out);
  cpu->dropout(inp.ref, inp.ref, N, c->p, seed, site, dt, NULL);
  gpu->dropout(D(&inp), D(&inp), N, c->p, seed, site, dt, gstream);
  fail |= tb_check_exact("dropout in place", &inp);
  tb_free(&out), tb_free(&inp);
  return fail;
}

static int test_dropout(void) { return RUN_CASES(zo_dropout_cases, dropout_case); }

/* Forward, backward, and backward with dinp aliasing dout. */
static int gelu_case(const struct zo_op_case *c, enum zo_dtype dt) {
  const size_t N = (size_t)c->N;
  struct tbuf out = tb_new(N, dt), inp = tb_new(N, dt), dinp = tb_new(N, dt), dout = tb_new(N, dt);
  tb_random(&inp, -6, 6);
  tb_random(&dout, -1, 1);
  tb_poison(&out), tb_poison(&dinp);
  cpu->gelu_forward(out.ref, inp.ref, N, dt, NULL);
  gpu->gelu_forward(D(&out), D(&inp), N, dt, gstream);
  int fail = tb_check("gelu out", &out);
  cpu->gelu_backward(dinp.ref, inp.ref, dout.ref, N, dt, NULL);
  gpu->gelu_backward(D(&dinp), D(&inp), D(&dout), N, dt, gstream);
  fail |= tb_check("gelu dinp", &dinp);
  cpu->gelu_backward(dout.ref, inp.ref, dout.ref, N, dt, NULL);
  gpu->gelu_backward(D(&dout), D(&inp), D(&dout), N, dt, gstream);
  fail |= tb_check("gelu dinp aliasing dout", &dout);
  tb_free(&out), tb_free(&inp), tb_free(&dinp), tb_free(&dout);
  return fail;
}

static int test_gelu(void) { return RUN_CASES(zo_gelu_cases, gelu_case); }

static int swiglu_case(const struct zo_op_case *c, enum zo_dtype dt) {
  const size_t N = (size_t)c->N, I = (size_t)c->I;
  struct tbuf out = tb_new(N * I, dt), inp = tb_new(N * 2 * I, dt), dinp = tb_new(N * 2 * I, dt),
              dout = tb_new(N * I, dt);
  tb_random(&inp, -8, 8);
  tb_random(&dout, -1, 1);
  tb_poison(&out), tb_poison(&dinp);
  cpu->swiglu_forward(out.ref, inp.ref, N, c->I, dt, NULL);
  gpu->swiglu_forward(D(&out), D(&inp), N, c->I, dt, gstream);
  int fail = tb_check("swiglu out", &out);
  cpu->swiglu_backward(dinp.ref, inp.ref, dout.ref, N, c->I, dt, NULL);
  gpu->swiglu_backward(D(&dinp), D(&inp), D(&dout), N, c->I, dt, gstream);
  fail |= tb_check("swiglu dinp", &dinp) | tb_check("swiglu inp (read only)", &inp);
  tb_free(&out), tb_free(&inp), tb_free(&dinp), tb_free(&dout);
  return fail;
}

static int test_swiglu(void) { return RUN_CASES(zo_swiglu_cases, swiglu_case); }

/* Forward, out aliasing either input; backward accumulating into both. */
static int residual_case(const struct zo_op_case *c, enum zo_dtype dt) {
  const size_t N = (size_t)c->N;
  struct tbuf out = tb_new(N, dt), a = tb_new(N, dt), b = tb_new(N, dt), d1 = tb_new(N, dt),
              d2 = tb_new(N, dt);
  tb_random(&a, -1, 1), tb_random(&b, -1, 1);
  tb_poison(&out);
  cpu->residual_forward(out.ref, a.ref, b.ref, N, dt, NULL);
  gpu->residual_forward(D(&out), D(&a), D(&b), N, dt, gstream);
  int fail = tb_check("residual out", &out);
  cpu->residual_forward(a.ref, a.ref, b.ref, N, dt, NULL);
  gpu->residual_forward(D(&a), D(&a), D(&b), N, dt, gstream);
  fail |= tb_check("residual out aliasing inp1", &a);
  cpu->residual_forward(b.ref, a.ref, b.ref, N, dt, NULL);
  gpu->residual_forward(D(&b), D(&a), D(&b), N, dt, gstream);
  fail |= tb_check("residual out aliasing inp2", &b);
  tb_random(&d1, -1, 1), tb_random(&d2, -1, 1);
  cpu->residual_backward(d1.ref, d2.ref, out.ref, N, dt, NULL);
  gpu->residual_backward(D(&d1), D(&d2), D(&out), N, dt, gstream);
  fail |= tb_check("residual dinp1", &d1) | tb_check("residual dinp2", &d2);
  tb_free(&out), tb_free(&a), tb_free(&b), tb_free(&d1), tb_free(&d2);
  return fail;
}

static int test_residual(void) { return RUN_CASES(zo_residual_cases, residual_case); }

/* y[:, col0:col0+M] += s * v against the CPU's; then, from fresh y (dy),
 * dv = s * dy[:, col0:col0+M]: one rounding of a product, the same bits. */
static int scaled_add_case(const struct zo_op_case *c, enum zo_dtype dt) {
  const int N = c->N, M = c->M, ld = c->ld, col0 = c->col0;
  struct tbuf y = tb_new((size_t)N * ld, dt), v = tb_new((size_t)N * M, dt), dv = tb_new((size_t)N * M, dt);
  tb_random(&y, -1, 1), tb_random(&v, -1, 1), tb_poison(&dv);
  cpu->scaled_add_forward(y.ref, v.ref, c->scale, N, M, ld, col0, dt, NULL);
  gpu->scaled_add_forward(D(&y), D(&v), c->scale, N, M, ld, col0, dt, gstream);
  int fail = tb_check("scaled_add y", &y);
  tb_random(&y, -1, 1);
  cpu->scaled_add_backward(dv.ref, y.ref, c->scale, N, M, ld, col0, dt, NULL);
  gpu->scaled_add_backward(D(&dv), D(&y), c->scale, N, M, ld, col0, dt, gstream);
  fail |= tb_check_exact("scaled_add dv", &dv) | tb_check_exact("scaled_add dy (untouched)", &y);
  tb_free(&y), tb_free(&v), tb_free(&dv);
  return fail;
}

static int test_scaled_add(void) { return RUN_CASES(zo_scaled_add_cases, scaled_add_case); }

/* mode 0: dlogits separate; 1: dlogits NULL; 2: dlogits aliases logits. */
static int crossentropy_mode(const struct zo_op_case *c, int mode, enum zo_dtype dt) {
  const int N = c->N, V = c->V, Vp = c->Vp;
  struct tbuf losses = tb_new((size_t)N, ZO_F32), logits = tb_new((size_t)N * Vp, dt),
              dlogits = tb_new((size_t)N * Vp, dt);
  for (int n = 0; n < N; n++)
    for (int i = 0; i < Vp; i++) /* Padding is NaN: reading it would poison the row. */
      logits.ref32[(size_t)n * Vp + i] = i < V ? zo_rng_float(c->shift - 4, c->shift + 4) : NAN;
  tb_set(&logits, logits.ref32);
  struct ibuf targets = ib_new((size_t)N, 0, V);
  for (int n = 0; n < N; n += 5) targets.host[n] = -1; /* masked rows */
  targets.host[N - 1] = V - 1;                         /* the last real column */
  must(gpu->memcpy_async(targets.dev, targets.host, (size_t)N * sizeof(int32_t), ZO_COPY_H2D,
                         gstream),
       "memcpy_async H2D");
  gsync();
  tb_poison(&losses), tb_poison(&dlogits);
  const float dloss = 1.0f / (float)N;
  void *cpu_dl = mode == 0 ? dlogits.ref : mode == 2 ? logits.ref : NULL;
  void *gpu_dl = mode == 0 ? D(&dlogits) : mode == 2 ? D(&logits) : NULL;
  cpu->crossentropy_forward(losses.ref, cpu_dl, logits.ref, targets.host, dloss, N, V, Vp, dt,
                            NULL);
  gpu->crossentropy_forward(D(&losses), gpu_dl, D(&logits), targets.dev, dloss, N, V, Vp, dt,
                            gstream);
  int fail = tb_check("losses", &losses);
  if (mode == 0) fail |= tb_check("dlogits", &dlogits);
  if (mode == 2) fail |= tb_check("dlogits (aliasing logits)", &logits);
  if (fail) fprintf(stderr, "  (mode %d)\n", mode);
  tb_free(&losses), tb_free(&logits), tb_free(&dlogits), ib_free(&targets);
  return fail;
}

static int crossentropy_case(const struct zo_op_case *c, enum zo_dtype dt) {
  return crossentropy_mode(c, 0, dt) | crossentropy_mode(c, 1, dt) | crossentropy_mode(c, 2, dt);
}

static int test_crossentropy(void) { return RUN_CASES(zo_crossentropy_cases, crossentropy_case); }

/* tb_read, then NaN where the CPU has NaN, the same infinity where it has
 * one, else within op_rtol of the largest finite CPU value. */
static int tb_check_nonfinite(const char *what, struct tbuf *b) {
  if (tb_read(what, b)) return 1;
  double maxref = 1e-6;
  for (size_t i = 0; i < b->n; i++)
    if (isfinite(b->ref32[i]) && fabs(b->ref32[i]) > maxref) maxref = fabs(b->ref32[i]);
  for (size_t i = 0; i < b->n; i++) {
    const float g = b->got32[i], r = b->ref32[i];
    const bool ok = isnan(r) ? isnan(g) : isinf(r) ? g == r : isfinite(g) && fabs(g - r) <= op_rtol() * maxref;
    if (!ok) {
      fprintf(stderr, "  %s[%zu] (%s): gpu %.9g, cpu %.9g\n", what, i, zo_dtype_name(b->dt), (double)g, (double)r);
      return 1;
    }
  }
  return 0;
}

/* Rows with -inf logits (fp16 overflow; zo_op_ce_inf_rows): the GPU's
 * online softmax gives the CPU's answers, NaN for the all -inf row (not a
 * NaN leaking into finite rows from -inf - -inf in a merge), +inf for a
 * -inf target, finite losses where the row's max is finite. */
static int test_crossentropy_inf_rows(void) {
  enum { N = ZO_CE_INF_ROWS, V = ZO_CE_INF_V, Vp = ZO_CE_INF_VP };
  int fail = 0;
  for (size_t di = 0; di < N_DTYPES; di++) {
    const enum zo_dtype dt = op_dt = op_dtypes[di];
    zo_rng_seed(31);
    gstream = test_stream;
    struct tbuf losses = tb_new(N, ZO_F32), logits = tb_new((size_t)N * Vp, dt), dlogits = tb_new((size_t)N * Vp, dt);
    struct ibuf targets = ib_new(N, 0, V);
    zo_op_ce_inf_rows(logits.ref32, targets.host);
    tb_set(&logits, logits.ref32);
    must(gpu->memcpy_async(targets.dev, targets.host, N * sizeof(int32_t), ZO_COPY_H2D, gstream), "memcpy_async H2D");
    gsync();
    tb_poison(&losses), tb_poison(&dlogits);
    cpu->crossentropy_forward(losses.ref, dlogits.ref, logits.ref, targets.host, 0.25f, N, V, Vp, dt, NULL);
    gpu->crossentropy_forward(D(&losses), D(&dlogits), D(&logits), targets.dev, 0.25f, N, V, Vp, dt, gstream);
    fail |= tb_check_nonfinite("losses", &losses) | tb_check_nonfinite("dlogits", &dlogits);
    tb_free(&losses), tb_free(&logits), tb_free(&dlogits), ib_free(&targets);
  }
  return fail;
}

/* Values for the cast test: zeros, ties and near-ties of both 16-bit formats,
 * fp16's range edges (largest finite, overflow to inf, subnormals, underflow
 * to 0), fp32 subnormals and extremes, inf and NaN; then random magnitudes
 * over 2^-30 .. 2^20 of either sign. */
static void cast_values(float *x, size_t n) {
  static const float special[] = {
      0.0f,          -0.0f,         1.0f,           -1.0f,
      1.00390625f, /* 1 + 2^-8 */
      1.01171875f,   1.0009765625f, 1.00048828125f, 65504.0f,
      65519.0f,      65520.0f,      -70000.0f,      6.103515625e-5f,
      5.9604645e-8f, 2.9802322e-8f, 1e-9f,          1e-40f,
      -1e-42f,       FLT_MIN,       FLT_MAX,        -FLT_MAX,
      3.3895314e38f, INFINITY,      -INFINITY,      NAN,
      0.1f,          -0.3333333f,   1234.5678f,     3.1415927f,
      -2.7182817f,
  };
  const size_t n_special = sizeof special / sizeof special[0];
  for (size_t i = 0; i < n; i++) {
    if (i < n_special) {
      x[i] = special[i];
      continue;
    }
    const float m = zo_rng_float(1.0f, 2.0f);
    const int e = (int)(zo_rng_u32() % 51u) - 30;
    x[i] = ldexpf(zo_rng_u32() & 1u ? -m : m, e);
  }
}

static int test_cast(void) {
  int fail = 0;
  const size_t n = 10007;
  for (size_t si = 0; si < N_SHAPES; si++) {
    begin_shape(si, 12);
    for (size_t a = 0; a < N_DTYPES; a++) {
      for (size_t b = 0; b < N_DTYPES; b++) {
        const enum zo_dtype src_dt = op_dtypes[a], dst_dt = op_dtypes[b];
        struct tbuf src = tb_new(n, src_dt), dst = tb_new(n, dst_dt);
        cast_values(src.ref32, n);
        tb_set(&src, src.ref32);
        tb_poison(&dst);
        cpu->cast(dst.ref, dst_dt, src.ref, src_dt, n, NULL);
        gpu->cast(D(&dst), dst_dt, D(&src), src_dt, n, gstream);
        int f = tb_check_exact("cast dst", &dst) | tb_check_exact("cast src (read only)", &src);
        if (src_dt == dst_dt) { /* in place: nothing changes */
          gpu->cast(D(&src), src_dt, D(&src), src_dt, n, gstream);
          f |= tb_check_exact("cast in place", &src);
        }
        if (f)
          fprintf(stderr, "  (cast %s -> %s, %s stream)\n", zo_dtype_name(src_dt),
                  zo_dtype_name(dst_dt), gstream ? "created" : "NULL");
        fail |= f;
        tb_free(&src), tb_free(&dst);
      }
    }
  }
  return fail;
}

/* ---- memory, copies, streams ----------------------------------------------------------- */

/* Largest distance in ulps between the device copy read back by tb_check and
 * the reference (same sign assumed away: bit patterns as ordered integers). */
static uint64_t tb_max_ulp(const struct tbuf *b) {
  uint64_t worst = 0;
  for (size_t i = 0; i < b->n; i++) {
    int32_t x, y;
    memcpy(&x, b->got + GUARD_BYTES + i * sizeof x, sizeof x);
    memcpy(&y, (const unsigned char *)b->ref + i * sizeof y, sizeof y);
    int64_t a = x < 0 ? (int64_t)INT32_MIN - x : x, c = y < 0 ? (int64_t)INT32_MIN - y : y;
    uint64_t d = (uint64_t)(a > c ? a - c : c - a);
    if (d > worst) worst = d;
  }
  return worst;
}

/* adamw_update: the CUDA kernel uses only IEEE round-to-nearest intrinsics in
 * the CPU's order, so it is expected bit-identical; the test allows 1 ulp on
 * p, m, v and prints the largest difference seen. */
static int test_adamw_update(void) {
  int fail = 0;
  op_dt = ZO_F32;
  for (size_t si = 0; si < N_SHAPES; si++) {
    const struct shape *sh = begin_shape(si, 14);
    const size_t N = (size_t)sh->B * sh->T * sh->C * 3 + 5;
    struct tbuf p = tb_new(N, ZO_F32), g = tb_new(N, ZO_F32), m = tb_new(N, ZO_F32),
                v = tb_new(N, ZO_F32);
    for (int decay = 0; decay < 2; decay++) {
      const long t = 1 + 9 * decay;
      tb_random(&p, -1, 1), tb_random(&g, -2, 2), tb_random(&m, -0.1f, 0.1f),
          tb_random(&v, 0, 0.01f);
      cpu->adamw_update(p.ref, g.ref, m.ref, v.ref, N, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, decay, t,
                        0.42f, NULL);
      gpu->adamw_update(D(&p), D(&g), D(&m), D(&v), N, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, decay, t,
                        0.42f, gstream);
      struct tbuf *outs[] = {&p, &m, &v, &g};
      static const char *names[] = {"adamw p", "adamw m", "adamw v", "adamw g (read only)"};
      for (int k = 0; k < 4; k++) {
        int f = tb_check(names[k], outs[k]);
        const uint64_t ulp = tb_max_ulp(outs[k]);
        if (ulp > 1) {
          fprintf(stderr, "  %s (decay %d, t %ld): %llu ulp from the CPU\n", names[k], decay, t,
                  (unsigned long long)ulp);
          f = 1;
        }
        if (k == 0)
          printf("  adamw p, decay %d: max %llu ulp from the CPU backend\n", decay,
                 (unsigned long long)ulp);
        fail |= report(f, sh);
      }
    }
    tb_free(&p), tb_free(&g), tb_free(&m), tb_free(&v);
  }
  return fail;
}

/* A host array's device copy (no guards: the byte-exact comparison of the
 * whole allocation reads back past the tensor's end too). */
static void *dev_copy(const void *host, size_t nbytes, size_t slack) {
  void *d = NULL;
  must(gpu->mem_alloc(&d, nbytes + slack), "mem_alloc");
  must(gpu->memset_async(d, 0x5a, nbytes + slack, gstream), "memset_async");
  must(gpu->memcpy_async(d, host, nbytes, ZO_COPY_H2D, gstream), "memcpy_async H2D");
  gsync();
  return d;
}

/* adamw8bit_update: p, the codes and the absmax bit for bit the CPU's
 * portable kernel (zo_adamw8bit_update's IEEE formula; the AVX-512 kernel's
 * p is within ulps of it, test-offload-adamw8bit), block sizes 256 and 100
 * (partial last block), two steps, with a block of all-zero states and one
 * whose tiny m takes the division path; nothing past the tensors written. */
static int test_adamw8bit_update(void) {
  int fail = 0;
  const size_t blocks[] = {256, 100};
  for (size_t bi = 0; bi < 2; bi++) {
    const size_t N = 70000 + 37, B = blocks[bi], nb = (N + B - 1) / B, slack = 256;
    zo_rng_seed(40 + bi);
    float *p = zo_test_xmalloc(N * 4), *g = zo_test_xmalloc(N * 4), *x = zo_test_xmalloc(N * 4);
    uint8_t *mc = zo_test_xmalloc(N), *vc = zo_test_xmalloc(N);
    float *ma = zo_test_xmalloc(nb * 4), *va = zo_test_xmalloc(nb * 4);
    for (size_t i = 0; i < N; i++) p[i] = zo_rng_float(-1, 1), g[i] = zo_rng_float(-2, 2);
    for (size_t i = 0; i < N; i++) x[i] = zo_rng_float(-0.1f, 0.1f);
    for (size_t i = 0; i < B; i++) x[i] = 0.0f;            /* block 0: zero m */
    for (size_t i = B; i < 2 * B; i++) x[i] *= 1e-38f;    /* block 1: subnormal m */
    zo_adamw8bit_quantize(mc, ma, x, N, B, ZO_QMAP_SIGNED);
    for (size_t i = 0; i < N; i++) x[i] = zo_rng_float(0, 0.01f);
    zo_adamw8bit_quantize(vc, va, x, N, B, ZO_QMAP_UNSIGNED);
    for (size_t i = B; i < 2 * B; i++) g[i] *= 1e-30f;     /* keeps block 1's new m subnormal */
    void *dp = dev_copy(p, N * 4, slack), *dg = dev_copy(g, N * 4, slack), *dmc = dev_copy(mc, N, slack),
         *dvc = dev_copy(vc, N, slack), *dma = dev_copy(ma, nb * 4, slack), *dva = dev_copy(va, nb * 4, slack);
    for (long t = 1; t <= 2; t++) {
      const struct zo_adamw_hparams hp = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                          .weight_decay = 0.1f};
      zo_adamw8bit_force_portable(true);
      zo_adamw8bit_update(p, g, mc, ma, vc, va, N, B, &hp, true, t, 0.42f);
      zo_adamw8bit_force_portable(false);
      gpu->adamw8bit_update(dp, dg, dmc, dma, dvc, dva, N, B, hp.lr, hp.beta1, hp.beta2, hp.eps,
                            hp.weight_decay, true, t, 0.42f, gstream);
    }
    gsync();
    const struct { const char *what; void *dev; const void *host; size_t nbytes; } outs[] = {
        {"p", dp, p, N * 4}, {"m codes", dmc, mc, N}, {"v codes", dvc, vc, N},
        {"m absmax", dma, ma, nb * 4}, {"v absmax", dva, va, nb * 4}};
    for (size_t k = 0; k < 5; k++) {
      unsigned char *back = zo_test_xmalloc(outs[k].nbytes + slack);
      must(gpu->memcpy_async(back, outs[k].dev, outs[k].nbytes + slack, ZO_COPY_D2H, gstream), "memcpy_async D2H");
      gsync();
      size_t i = 0;
      while (i < outs[k].nbytes && back[i] == ((const unsigned char *)outs[k].host)[i]) i++;
      bool tail_ok = true;
      for (size_t j = 0; j < slack; j++) tail_ok &= back[outs[k].nbytes + j] == 0x5a;
      if (i < outs[k].nbytes || !tail_ok) {
        fprintf(stderr, "  adamw8bit %s (block %zu): %s at byte %zu of %zu\n", outs[k].what, B,
                tail_ok ? "differs from the CPU" : "written past its end", i, outs[k].nbytes);
        fail = 1;
      }
      free(back);
    }
    void *devs[] = {dp, dg, dmc, dvc, dma, dva};
    for (int k = 0; k < 6; k++) gpu->mem_free(devs[k]);
    free(p), free(g), free(x), free(mc), free(vc), free(ma), free(va);
  }
  printf("  adamw8bit_update: %s\n", fail ? "differs" : "bit-identical to the CPU backend");
  return fail;
}

/* sumsq: deterministic (two runs bitwise equal) and within 1e-12 relative of
 * the CPU's zo_sumsq (different association inside each chunk); n = 0 gives 0. */
static int test_sumsq(void) {
  int fail = 0;
  op_dt = ZO_F32;
  for (size_t si = 0; si < N_SHAPES; si++) {
    const struct shape *sh = begin_shape(si, 15);
    const size_t sizes[] = {0, 5, (size_t)sh->B * sh->T * sh->C * 40 + 3};
    for (size_t k = 0; k < 3; k++) {
      const size_t N = sizes[k];
      struct tbuf x = tb_new(N + 1, ZO_F32);
      tb_random(&x, -3, 3);
      void *pd = NULL;
      must(gpu->mem_alloc(&pd, 2 * sizeof(double)), "mem_alloc");
      double *d = pd, want = NAN, got[2] = {NAN, NAN};
      must(gpu->memset_async(d, 0xff, 2 * sizeof(double), gstream), "memset_async");
      cpu->sumsq(&want, x.ref, N, NULL);
      gpu->sumsq(&d[0], D(&x), N, gstream);
      gpu->sumsq(&d[1], D(&x), N, gstream);
      must(gpu->memcpy_async(got, d, sizeof got, ZO_COPY_D2H, gstream), "memcpy_async D2H");
      gsync();
      if (memcmp(&got[0], &got[1], sizeof got[0]) || !(fabs(got[0] - want) <= 1e-12 * want) ||
          (N == 0 && got[0] != 0.0)) {
        fprintf(stderr, "  sumsq n=%zu: gpu %.17g then %.17g, cpu %.17g\n", N, got[0], got[1],
                want);
        fail |= report(1, sh);
      }
      gpu->mem_free(pd);
      tb_free(&x);
    }
  }
  return fail;
}

static int test_memory(void) {
  int fail = 0;
  op_dt = ZO_F32;
  size_t free_bytes = 0, total_bytes = 0;
  if (gpu->mem_info(&free_bytes, &total_bytes) != 0 || total_bytes == 0 ||
      free_bytes > total_bytes) {
    fprintf(stderr, "  mem_info: free %zu total %zu (%s)\n", free_bytes, total_bytes,
            zo_last_error());
    fail = 1;
  }
  void *p = (void *)1;
  int err = gpu->mem_alloc(&p, (size_t)1 << 52); /* 4 PiB */
  if (err != -ENOMEM || p != NULL || !strstr(zo_last_error(), "gpu_memory_budget")) {
    fprintf(stderr, "  mem_alloc(4 PiB): err %d, ptr %p, message '%s'\n", err, p, zo_last_error());
    fail = 1;
  }
  /* The failed allocation must not leave an error behind for the next op. */
  struct tbuf x = tb_new(1000, ZO_F32), y = tb_new(1000, ZO_F32);
  gstream = NULL;
  tb_random(&x, -1, 1);
  tb_poison(&y);
  memcpy(y.ref, x.ref, 1000 * sizeof(float));
  gpu->residual_forward(D(&y), D(&x), D(&x), 0, ZO_F32, gstream); /* N = 0: a no-op */
  must(gpu->memcpy_async(D(&y), D(&x), 1000 * sizeof(float), ZO_COPY_D2D, gstream), "D2D");
  fail |= tb_check("D2D copy", &y);
  /* memset: bytes 0x00 give 0.0f. */
  must(gpu->memset_async(D(&y), 0, 1000 * sizeof(float), gstream), "memset_async");
  memset(y.ref, 0, 1000 * sizeof(float));
  fail |= tb_check("memset", &y);
  /* memcpy2d D2D: 20 rows of 7 floats, source rows 40 floats apart, destination
   * rows 50 apart; the floats between rows keep their zeros. */
  must(gpu->memcpy2d_async(D(&y), 50 * sizeof(float), D(&x), 40 * sizeof(float), 7 * sizeof(float), 20, gstream),
       "memcpy2d_async");
  for (size_t r = 0; r < 20; r++) memcpy((float *)y.ref + r * 50, (const float *)x.ref + r * 40, 7 * sizeof(float));
  fail |= tb_check_exact("memcpy2d", &y);
  /* H2H through the backend. */
  float h1[8] = {1, 2, 3, 4, 5, 6, 7, 8}, h2[8] = {0};
  must(gpu->memcpy_async(h2, h1, sizeof h1, ZO_COPY_H2H, NULL), "H2H");
  must(gpu->stream_synchronize(NULL), "stream_synchronize");
  if (memcmp(h1, h2, sizeof h1)) {
    fprintf(stderr, "  H2H copy differs\n");
    fail = 1;
  }
  tb_free(&x), tb_free(&y);
  return fail;
}

static atomic_int host_func_ran;

static void host_func(void *arg) { atomic_store(&host_func_ran, *(int *)arg); }

/* Work on s1 (slow: a long chain of adds on a large buffer), an event, a wait
 * on s2, then s2 reads the result: a missing or broken wait shows as a value
 * from the middle of the chain. Also: events never recorded are complete,
 * host functions run in stream order, destroy waits for queued work. */
static int test_streams_events(void) {
  int fail = 0;
  const size_t n = (size_t)16 << 20; /* floats: 64 MiB */
  const int steps = 40;
  zo_stream_t s1, s2, s3;
  zo_event_t ev, never;
  must(gpu->stream_create(&s1), "stream_create");
  must(gpu->stream_create(&s2), "stream_create");
  must(gpu->event_create(&ev), "event_create");
  must(gpu->event_create(&never), "event_create");
  float *acc, *one, *res;
  void *p;
  must(gpu->mem_alloc(&p, n * sizeof(float)), "mem_alloc");
  acc = p;
  must(gpu->mem_alloc(&p, n * sizeof(float)), "mem_alloc");
  one = p;
  must(gpu->mem_alloc(&p, n * sizeof(float)), "mem_alloc");
  res = p;
  float *host = zo_test_xmalloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) host[i] = 1.0f;
  must(gpu->memcpy_async(one, host, n * sizeof(float), ZO_COPY_H2D, s1), "H2D");
  must(gpu->memset_async(acc, 0, n * sizeof(float), s1), "memset");
  for (int k = 0; k < steps; k++) gpu->residual_forward(acc, acc, one, n, ZO_F32, s1);
  must(gpu->event_record(ev, s1), "event_record");
  must(gpu->stream_wait_event(s2, ev), "stream_wait_event");
  gpu->residual_forward(res, acc, acc, n, ZO_F32, s2);
  must(gpu->memcpy_async(host, res, n * sizeof(float), ZO_COPY_D2H, s2), "D2H");
  must(gpu->stream_synchronize(s2), "stream_synchronize");
  for (size_t i = 0; i < n; i += 4099)
    if (host[i] != 2.0f * steps) {
      fprintf(stderr, "  s2 read %g at %zu, want %g: the event wait did not order s2 after s1\n",
              (double)host[i], i, 2.0 * steps);
      fail = 1;
      break;
    }
  if (gpu->event_synchronize(ev) != 0) fail = 1;
  /* A never-recorded event is complete. */
  if (gpu->stream_wait_event(s2, never) != 0 || gpu->event_synchronize(never) != 0 ||
      gpu->stream_synchronize(s2) != 0) {
    fprintf(stderr, "  never-recorded event: %s\n", zo_last_error());
    fail = 1;
  }
  /* Host function after queued work; the stream waits for it. */
  static int token = 7;
  atomic_store(&host_func_ran, 0);
  for (int k = 0; k < steps; k++) gpu->residual_forward(acc, acc, one, n, ZO_F32, s1);
  must(gpu->launch_host_func(s1, host_func, &token), "launch_host_func");
  must(gpu->stream_synchronize(s1), "stream_synchronize");
  if (atomic_load(&host_func_ran) != 7) {
    fprintf(stderr, "  launch_host_func: fn had not run when stream_synchronize returned\n");
    fail = 1;
  }
  /* stream_destroy waits for queued work. */
  must(gpu->stream_create(&s3), "stream_create");
  must(gpu->memset_async(acc, 0, n * sizeof(float), s3), "memset");
  for (int k = 0; k < steps; k++) gpu->residual_forward(acc, acc, one, n, ZO_F32, s3);
  gpu->stream_destroy(s3);
  must(gpu->memcpy_async(host, acc, n * sizeof(float), ZO_COPY_D2H, s2), "D2H");
  must(gpu->stream_synchronize(s2), "stream_synchronize");
  for (size_t i = 0; i < n; i += 4099)
    if (host[i] != (float)steps) {
      fprintf(stderr, "  after stream_destroy read %g, want %d\n", (double)host[i], steps);
      fail = 1;
      break;
    }
  free(host);
  gpu->mem_free(acc), gpu->mem_free(one), gpu->mem_free(res);
  gpu->event_destroy(ev), gpu->event_destroy(never);
  gpu->stream_destroy(s1), gpu->stream_destroy(s2);
  gpu->stream_destroy(NULL);
  gpu->event_destroy(NULL);
  return fail;
}

/* ---- determinism ------------------------------------------------------------------ */

/* Runs op twice on the device from out's current contents (ref, left as it
 * is) and says whether the two results are the same bytes. */
static int twice_same(const char *what, struct tbuf *out, void (*op)(void *ctx), void *ctx) {
  tb_upload(out);
  op(ctx);
  if (tb_read(what, out)) return 1;
  unsigned char *first = zo_test_xmalloc(tb_bytes(out));
  memcpy(first, out->got, tb_bytes(out));
  tb_upload(out);
  op(ctx);
  int fail = tb_read(what, out);
  if (!fail && memcmp(first, out->got, tb_bytes(out)) != 0) {
    fprintf(stderr, "  %s: two runs on the same inputs differ (a nondeterministic reduction)\n", what);
    fail = 1;
  }
  free(first);
  return fail;
}

struct det_enc {
  struct tbuf dwte, dwpe, dout;
  struct ibuf inp;
  int B, T, C;
};
static void det_enc_run(void *p) {
  struct det_enc *e = p;
  gpu->encoder_backward(D(&e->dwte), D(&e->dwpe), D(&e->dout), e->inp.dev, e->B, e->T, e->C, -1,
                        e->dout.dt, gstream);
}

struct det_ln {
  struct tbuf dinp, dw, db, dout, inp, w, mean, rstd;
  int N, C;
};
static void det_ln_run(void *p) {
  struct det_ln *l = p;
  gpu->layernorm_backward(D(&l->dinp), D(&l->dw), D(&l->db), D(&l->dout), D(&l->inp), D(&l->w),
                          D(&l->mean), D(&l->rstd), l->N, l->C, l->dout.dt, gstream);
}

struct det_mm {
  struct tbuf dw, db, dout, inp, w;
  int N, C, OC;
};
static void det_mm_run(void *p) {
  struct det_mm *m = p;
  gpu->matmul_backward(NULL, D(&m->dw), D(&m->db), D(&m->dout), D(&m->inp), D(&m->w), m->N, m->C,
                       m->OC, m->dout.dt, gstream);
}

/* Shapes large enough for the multi-chunk column sums (N rows over many
 * blocks) and an embedding backward where 7 tokens fill 2048 positions. */
static int test_reductions_deterministic(void) {
  int fail = 0;
  gstream = test_stream;
  zo_rng_seed(1919);
  const enum zo_dtype dts[] = {ZO_F32, ZO_BF16};
  for (size_t k = 0; k < ZO_ARRAY_LEN(dts); k++) {
    const enum zo_dtype dt = dts[k];
    op_dt = dt;
    struct det_enc e = {.B = 8, .T = 256, .C = 96};
    e.dwte = tb_new((size_t)7 * e.C, ZO_F32);
    e.dwpe = tb_new((size_t)e.T * e.C, ZO_F32);
    e.dout = tb_new((size_t)e.B * e.T * e.C, dt);
    e.inp = ib_new((size_t)e.B * e.T, 0, 7);
    tb_random(&e.dwte, -1, 1), tb_random(&e.dwpe, -1, 1), tb_random(&e.dout, -1, 1);
    fail |= twice_same("encoder_backward dwte", &e.dwte, det_enc_run, &e);
    if (dt == ZO_F32) { /* the CPU's order: bitwise equal */
      tb_upload(&e.dwte), tb_upload(&e.dwpe);
      det_enc_run(&e);
      cpu->encoder_backward(e.dwte.ref, e.dwpe.ref, e.dout.ref, e.inp.host, e.B, e.T, e.C, -1, dt, NULL);
      fail |= tb_check_exact("encoder_backward dwte vs cpu", &e.dwte) |
              tb_check_exact("encoder_backward dwpe vs cpu", &e.dwpe);
    }
    tb_free(&e.dwte), tb_free(&e.dwpe), tb_free(&e.dout), ib_free(&e.inp);

    struct det_ln l = {.N = 8192, .C = 96};
    const size_t NC = (size_t)l.N * l.C;
    l.dinp = tb_new(NC, dt), l.dout = tb_new(NC, dt), l.inp = tb_new(NC, dt);
    l.dw = tb_new((size_t)l.C, ZO_F32), l.db = tb_new((size_t)l.C, ZO_F32), l.w = tb_new((size_t)l.C, dt);
    l.mean = tb_new((size_t)l.N, ZO_F32), l.rstd = tb_new((size_t)l.N, ZO_F32);
    tb_random(&l.dinp, -1, 1), tb_random(&l.dout, -1, 1), tb_random(&l.inp, -1, 1);
    tb_random(&l.dw, -1, 1), tb_random(&l.db, -1, 1), tb_random(&l.w, 0.5f, 1.5f);
    tb_random(&l.mean, -0.1f, 0.1f), tb_random(&l.rstd, 0.5f, 2.0f);
    fail |= twice_same("layernorm_backward dweight", &l.dw, det_ln_run, &l);
    tb_upload(&l.dinp);
    fail |= twice_same("layernorm_backward dbias", &l.db, det_ln_run, &l);
    tb_free(&l.dinp), tb_free(&l.dout), tb_free(&l.inp), tb_free(&l.dw), tb_free(&l.db);
    tb_free(&l.w), tb_free(&l.mean), tb_free(&l.rstd);

    struct det_mm m = {.N = 8192, .C = 64, .OC = 96};
    m.dw = tb_new((size_t)m.OC * m.C, ZO_F32), m.db = tb_new((size_t)m.OC, ZO_F32);
    m.dout = tb_new((size_t)m.N * m.OC, dt), m.inp = tb_new((size_t)m.N * m.C, dt);
    m.w = tb_new((size_t)m.OC * m.C, dt);
    tb_random(&m.dw, -1, 1), tb_random(&m.db, -1, 1), tb_random(&m.dout, -1, 1);
    tb_random(&m.inp, -1, 1), tb_random(&m.w, -1, 1);
    fail |= twice_same("matmul_backward dbias", &m.db, det_mm_run, &m);
    tb_free(&m.dw), tb_free(&m.db), tb_free(&m.dout), tb_free(&m.inp), tb_free(&m.w);
    if (fail) fprintf(stderr, "  (%s)\n", zo_dtype_name(dt));
  }
  return fail;
}

/* ---- pageable copies behind host functions ---------------------------------------- */

#define PAGEABLE_N 4096

/* Sleeps, then writes the buffer: a copy that read it when it was queued
 * would see the old values. */
static void slow_writer(void *arg) {
  struct timespec ts = {0, 200 * 1000 * 1000};
  nanosleep(&ts, NULL);
  float *x = arg;
  for (int i = 0; i < PAGEABLE_N; i++) x[i] = 42.0f;
}

static int test_pageable_copy_after_host_func(void) {
  float *src = zo_test_xmalloc(PAGEABLE_N * sizeof(float)); /* malloc: pageable */
  float *back = zo_test_xmalloc(PAGEABLE_N * sizeof(float));
  for (int i = 0; i < PAGEABLE_N; i++) src[i] = 1.0f, back[i] = 0.0f;
  zo_stream_t s1, s2;
  zo_event_t ev;
  void *d;
  must(gpu->stream_create(&s1), "stream_create");
  must(gpu->stream_create(&s2), "stream_create");
  must(gpu->event_create(&ev), "event_create");
  must(gpu->mem_alloc(&d, PAGEABLE_N * sizeof(float)), "mem_alloc");
  must(gpu->launch_host_func(s1, slow_writer, src), "launch_host_func");
  must(gpu->event_record(ev, s1), "event_record");
  must(gpu->stream_wait_event(s2, ev), "stream_wait_event");
  must(gpu->memcpy_async(d, src, PAGEABLE_N * sizeof(float), ZO_COPY_H2D, s2), "H2D");
  must(gpu->memcpy_async(back, d, PAGEABLE_N * sizeof(float), ZO_COPY_D2H, s2), "D2H");
  must(gpu->stream_synchronize(s2), "stream_synchronize");
  int fail = 0;
  for (int i = 0; i < PAGEABLE_N; i++)
    if (back[i] != 42.0f) {
      fprintf(stderr, "  element %d: %g, want 42: the pageable copy ran before the host function "
                      "that its stream waited for\n", i, (double)back[i]);
      fail = 1;
      break;
    }
  gpu->mem_free(d);
  gpu->event_destroy(ev);
  gpu->stream_destroy(s1), gpu->stream_destroy(s2);
  free(src), free(back);
  return fail;
}

int main(void) {
  static const struct zo_test tests[] = {
      ZO_TEST(memory),
      ZO_TEST(encoder_forward),
      ZO_TEST(encoder_backward),
      ZO_TEST(layernorm_forward),
      ZO_TEST(layernorm_backward),
      ZO_TEST(rmsnorm_forward),
      ZO_TEST(rmsnorm_backward),
      ZO_TEST(rmsnorm_heads_forward),
      ZO_TEST(rmsnorm_heads_backward),
      ZO_TEST(matmul_forward),
      ZO_TEST(matmul_backward),
      ZO_TEST(matmul_q4),
      ZO_TEST(attention_forward),
      ZO_TEST(attention_window),
      ZO_TEST(attention_backward),
      ZO_TEST(rope),
      ZO_TEST(dropout),
      ZO_TEST(gelu),
      ZO_TEST(swiglu),
      ZO_TEST(residual),
      ZO_TEST(scaled_add),
      ZO_TEST(crossentropy),
      ZO_TEST(crossentropy_inf_rows),
      ZO_TEST(cast),
      ZO_TEST(adamw_update),
      ZO_TEST(adamw8bit_update),
      ZO_TEST(sumsq),
      ZO_TEST(streams_events),
      ZO_TEST(reductions_deterministic),
      ZO_TEST(pageable_copy_after_host_func),
  };
  gpu = zo_backend_cuda();
  if (!gpu) {
    printf("SKIP: %s\n", zo_last_error());
    return 77;
  }
  cpu = zo_backend_cpu();
  must(gpu->stream_create(&test_stream), "stream_create");
  struct zo_test_counts counts = zo_test_run(tests, ZO_ARRAY_LEN(tests));
  printf("%d op case runs of zo_op_cases.h (case x dtype, CUDA against the CPU backend)\n", n_cases_run);
  gpu->stream_destroy(test_stream);
  return zo_test_report(counts);
}
