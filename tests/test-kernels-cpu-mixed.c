/* The CPU backend in bf16 and fp16 (mixed precision): every op over dt
 * storage against float64 references (tests/zo_ref64.h) computed from the
 * same dt-representable inputs, and the rounding itself against a reference
 * written independently of the backend's bit tricks (frexp and rint: ties
 * to even, subnormals, overflow to inf). Tolerances follow the contract: a
 * dt output is rounded once from fp32 arithmetic, so it is within the
 * dtype's unit roundoff u (bf16 2^-8, fp16 2^-11) of the exact value plus
 * fp32 accumulation noise; fp32 outputs (parameter gradients, statistics,
 * losses) are within fp32 noise. Where the contract rounds an intermediate
 * (attention's probabilities and their gradient), the test reads the stored
 * dt values and checks that exactly those weighted the next product.
 * Outputs are poisoned with NaN and guarded by sentinel bytes. The ops run
 * on the cases of tests/zo_op_cases.h, whose shapes cross the GEMM tiles
 * (256 x 256 x 512) and the attention row block (64), once per dtype. */
#include "zo/backend.h"
#include "zo/cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo_op_cases.h"
#include "zo_ref64.h"
#include "zo_test.h"

#define GUARD_BYTES 64
#define GUARD_BYTE 0xa5

static zo_backend_t be;

static const char *dt_name(enum zo_dtype dt) { return dt == ZO_BF16 ? "bf16" : "fp16"; }

/* Unit roundoff: half the spacing at 1, the bound of one rounding. */
static double unit_roundoff(enum zo_dtype dt) { return dt == ZO_BF16 ? 0x1p-8 : 0x1p-11; }

/* ---- an independent reference of round-to-nearest-even ------------------- */

/* x rounded to the nearest dt value, ties to even (rint in the default
 * rounding mode), subnormals at the smallest normal exponent's spacing,
 * beyond the largest finite value (after rounding) inf; NaN, inf, zeros kept. */
static double round_ref(double x, enum zo_dtype dt) {
  if (isnan(x) || isinf(x) || x == 0.0) return x;
  const int sig = dt == ZO_BF16 ? 8 : 11;     /* significant bits */
  const int emin = dt == ZO_BF16 ? -126 : -14; /* exponent of the smallest normal */
  const double maxv = dt == ZO_BF16 ? ldexp(2.0 - 0x1p-7, 127) : 65504.0;
  int e;
  frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
  const int ex = e - 1 < emin ? emin : e - 1;
  const double q = ldexp(1.0, ex - (sig - 1)); /* spacing of dt values near x */
  const double r = rint(x / q) * q;
  return fabs(r) > maxv ? copysign(INFINITY, x) : r;
}

/* A dt bit pattern as a double, decoded field by field. */
static double decode_ref(uint16_t h, enum zo_dtype dt) {
  const int mbits = dt == ZO_BF16 ? 7 : 10, ebits = dt == ZO_BF16 ? 8 : 5;
  const int bias = (1 << (ebits - 1)) - 1;
  const double sign = h >> 15 ? -1.0 : 1.0;
  const int ex = (h >> mbits) & ((1 << ebits) - 1);
  const int man = h & ((1 << mbits) - 1);
  if (ex == (1 << ebits) - 1) return man ? NAN : sign * INFINITY;
  if (ex == 0) return sign * ldexp((double)man, 1 - bias - mbits);
  return sign * ldexp((double)((1 << mbits) | man), ex - bias - mbits);
}

static uint16_t to_bits(float x, enum zo_dtype dt) {
  uint16_t h;
  zo_cpu_cast(&h, dt, &x, ZO_F32, 1);
  return h;
}

static int rounding_case(float x, enum zo_dtype dt) {
  const uint16_t h = to_bits(x, dt);
  const double want = round_ref((double)x, dt), got = decode_ref(h, dt);
  float widened;
  zo_cpu_cast(&widened, ZO_F32, &h, dt, 1);
  const bool ok = isnan(want) ? isnan(got) && isnan(widened)
                              : got == want && signbit(got) == signbit(want) && (double)widened == got;
  if (!ok)
    fprintf(stderr, "  %s: %a (%.9g) -> %04x = %a, want %a (widened %a)\n", dt_name(dt), (double)x,
            (double)x, h, got, want, (double)widened);
  return !ok;
}

static int rounding(enum zo_dtype dt) {
  const float edge[] = {0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, NAN, -NAN,
                        1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-9f + 0x1p-20f, /* bf16 ties, near-tie */
                        1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 2049.0f, 2051.0f,          /* fp16 ties */
                        65504.0f, 65519.0f, 65520.0f, 70000.0f, 0x1p-14f, 0x1p-24f, 0x1p-25f,
                        0x1.8p-25f, 0x1p-26f, 3.0f * 0x1p-25f, 0x1p-126f, 0x1p-149f, 0x1p-133f,
                        3.4028235e38f, 3.3961775e38f, 3.3895314e38f, 1e-40f, -1e-45f};
  int fail = 0;
  for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) fail |= rounding_case(edge[i], dt);
  zo_rng_seed(dt == ZO_BF16 ? 101 : 102);
  for (int i = 0; i < 1 << 20 && !fail; i++) {
    uint32_t u = zo_rng_u32();
    if (i & 1) u = (u & 0x80ffffffu) | ((uint32_t)(zo_rng_u32() % 48 + 100) << 23); /* near fp16 range */
    float x;
    memcpy(&x, &u, sizeof x);
    fail |= rounding_case(x, dt);
  }
  /* Every dt pattern widens exactly and narrows back to itself. */
  for (uint32_t h = 0; h < 0x10000 && !fail; h++) {
    float f;
    const uint16_t b = (uint16_t)h;
    zo_cpu_cast(&f, ZO_F32, &b, dt, 1);
    const double d = decode_ref(b, dt);
    if (isnan(d) ? !isnan(f) : (double)f != d || (to_bits(f, dt) != b)) {
      fprintf(stderr, "  %s: pattern %04x widens to %a, want %a\n", dt_name(dt), b, (double)f, d);
      fail = 1;
    }
  }
  return fail;
}

static int test_rounding_bf16(void) { return rounding(ZO_BF16); }
static int test_rounding_fp16(void) { return rounding(ZO_F16); }

/* Casts of long arrays (the parallel chunked path) between every pair,
 * against element-wise rounding; same-dtype casts copy. */
static int test_cast_pairs(void) {
  enum { N = 200003 };
  const enum zo_dtype dts[3] = {ZO_F32, ZO_BF16, ZO_F16};
  float *src = zo_test_xmalloc(N * sizeof(float));
  zo_rng_seed(103);
  for (size_t i = 0; i < N; i++) src[i] = zo_rng_float(-70000.0f, 70000.0f) * (i % 3 ? 1e-3f : 1.0f);
  uint8_t *a = zo_test_xmalloc(4 * (size_t)N), *b = zo_test_xmalloc(4 * (size_t)N);
  int fail = 0;
  for (int i = 0; i < 3 && !fail; i++)
    for (int j = 0; j < 3 && !fail; j++) {
      zo_cpu_cast(a, dts[i], src, ZO_F32, N);  /* a: src rounded to dts[i] */
      zo_cpu_cast(b, dts[j], a, dts[i], N);    /* b: that in dts[j] */
      for (size_t k = 0; k < N && !fail; k++) {
        float x;
        zo_cpu_cast(&x, ZO_F32, a + k * zo_dtype_size(dts[i]), dts[i], 1);
        float want = x, got;
        if (dts[j] != ZO_F32) want = (float)round_ref((double)x, dts[j]);
        zo_cpu_cast(&got, ZO_F32, b + k * zo_dtype_size(dts[j]), dts[j], 1);
        if (!(got == want || (isnan(got) && isnan(want)))) {
          fprintf(stderr, "  %s -> %s element %zu: %a, want %a\n", zo_dtype_name(dts[i]), zo_dtype_name(dts[j]), k,
                  (double)got, (double)want);
          fail = 1;
        }
      }
    }
  be->cast(a, ZO_BF16, src, ZO_F32, 0, NULL); /* n = 0 touches nothing */
  free(b);
  free(a);
  free(src);
  return fail;
}

/* ---- dt buffers ------------------------------------------------------------ */

/* n dt elements between guard bytes, kept in b. */
static void *dalloc(struct zo_test_bufs *b, size_t n, enum zo_dtype dt) {
  uint8_t *mem = zo_test_bufs_alloc(b, n * zo_dtype_size(dt) + 2 * GUARD_BYTES);
  memset(mem, GUARD_BYTE, GUARD_BYTES);
  memset(mem + GUARD_BYTES + n * zo_dtype_size(dt), GUARD_BYTE, GUARD_BYTES);
  return mem + GUARD_BYTES;
}

static int dguard(const char *what, const void *p, size_t n, enum zo_dtype dt) {
  const uint8_t *lo = (const uint8_t *)p - GUARD_BYTES, *hi = (const uint8_t *)p + n * zo_dtype_size(dt);
  for (int i = 0; i < GUARD_BYTES; i++)
    if (lo[i] != GUARD_BYTE || hi[i] != GUARD_BYTE) {
      fprintf(stderr, "  %s: write out of bounds (%s)\n", what, lo[i] != GUARD_BYTE ? "before" : "after");
      return 1;
    }
  return 0;
}

/* Random dt values in [lo, hi): x receives them widened (exact), xd their
 * dt storage (either may be NULL). */
static void rand_dt(float *x, void *xd, size_t n, float lo, float hi, enum zo_dtype dt) {
  for (size_t i = 0; i < n; i++) {
    float v = zo_rng_float(lo, hi);
    uint16_t h = to_bits(v, dt);
    if (xd) ((uint16_t *)xd)[i] = h;
    if (x) zo_cpu_cast(&x[i], ZO_F32, &h, dt, 1);
  }
}

/* A guarded dt tensor of n random dt values in [lo, hi), kept in b; *wide,
 * unless wide is NULL, their exact float values (also kept in b). */
static void *dalloc_rand(struct zo_test_bufs *b, size_t n, float lo, float hi, enum zo_dtype dt, float **wide) {
  void *d = dalloc(b, n, dt);
  float *x = wide ? zo_test_bufs_alloc(b, n * sizeof(float)) : NULL;
  rand_dt(x, d, n, lo, hi, dt);
  if (wide) *wide = x;
  return d;
}

static void poison(void *p, size_t n, enum zo_dtype dt) {
  if (dt == ZO_F32) {
    for (size_t i = 0; i < n; i++) ((float *)p)[i] = NAN;
    return;
  }
  const uint16_t nan16 = dt == ZO_BF16 ? 0x7fc0 : 0x7e00;
  for (size_t i = 0; i < n; i++) ((uint16_t *)p)[i] = nan16;
}

/* An output poisoned with NaN: an element the op does not write fails. */
static void *dalloc_nan(struct zo_test_bufs *b, size_t n, enum zo_dtype dt) {
  void *p = dalloc(b, n, dt);
  poison(p, n, dt);
  return p;
}

static double *widen64(struct zo_test_bufs *b, const float *x, size_t n) { return zo_test_bufs_widen(b, x, n); }

static double *d64alloc(struct zo_test_bufs *b, size_t n) { return zo_test_bufs_alloc(b, n * sizeof(double)); }

static float *dt_to_f32(struct zo_test_bufs *b, const void *p, size_t n, enum zo_dtype dt) {
  float *f = zo_test_bufs_alloc(b, n * sizeof(float) + 1);
  zo_cpu_cast(f, ZO_F32, p, dt, n);
  return f;
}

/* A dt output against a float64 reference: within one rounding (u |ref|)
 * plus atol for fp32 cancellation. */
static int check_dt(const char *what, const void *got, size_t n, enum zo_dtype dt, const double *ref,
                    double atol) {
  struct zo_test_bufs b = {0};
  int fail = dguard(what, got, n, dt) |
             zo_test_close(what, dt_to_f32(&b, got, n, dt), ref, n, atol, 1.01 * unit_roundoff(dt) + 1e-6);
  zo_test_bufs_free(&b);
  return fail;
}

/* A guarded fp32 output: floats with GUARD_BYTES around (dalloc F32). */
static int check_f32(const char *what, const float *got, size_t n, const double *ref, double atol, double rtol) {
  return dguard(what, got, n, ZO_F32) | zo_test_close(what, got, ref, n, atol, rtol);
}

static float *falloc_rand(struct zo_test_bufs *b, size_t n, float lo, float hi) {
  float *p = dalloc(b, n, ZO_F32);
  for (size_t i = 0; i < n; i++) p[i] = zo_rng_float(lo, hi);
  return p;
}

/* ---- the shared op cases (zo_op_cases.h) ------------------------------------ */

static const enum zo_dtype half_dtypes[] = {ZO_BF16, ZO_F16};

static int n_cases_run; /* (case, dtype) runs, printed at the end */

/* Runs fn on each case of cases[0, n) but the HALF_ONLY ones (too large for
 * float64 references) once per dtype in half_dtypes, each after
 * zo_rng_seed(its seed) with a fresh buffer set freed after it; says which
 * failed. */
static int run_cases(const struct zo_op_case *cases, size_t n,
                     int (*fn)(const struct zo_op_case *, enum zo_dtype, struct zo_test_bufs *)) {
  int fail = 0;
  for (size_t di = 0; di < ZO_ARRAY_LEN(half_dtypes); di++)
    for (size_t i = 0; i < n; i++) {
      const struct zo_op_case *c = &cases[i];
      if (c->flags & ZO_OPC_HALF_ONLY) continue;
      zo_rng_seed(c->seed);
      struct zo_test_bufs b = {0};
      const int f = fn(c, half_dtypes[di], &b);
      zo_test_bufs_free(&b);
      if (f) {
        char d[200];
        fprintf(stderr, "  (case %s; %s)\n", zo_op_case_describe(c, d, sizeof d), dt_name(half_dtypes[di]));
      }
      fail |= f;
      n_cases_run++;
    }
  return fail;
}
#define RUN_CASES(cases, fn) run_cases((cases), ZO_ARRAY_LEN(cases), (fn))

/* ---- encoder ------------------------------------------------------------------ */

/* Then wpe NULL: the token rows, bit for bit. */
static int encoder_forward_case(const struct zo_op_case *c, enum zo_dtype dt, struct zo_test_bufs *b) {
  const int B = c->B, T = c->T, C = c->C, V = c->V, maxT = c->maxT;
  const size_t n = (size_t)B * T * C;
  const int32_t *inp = zo_op_case_tokens(b, (size_t)B * T, V);
  float *wte, *wpe;
  void *wted = dalloc_rand(b, (size_t)V * C, -1, 1, dt, &wte), *wped = dalloc_rand(b, (size_t)maxT * C, -1, 1, dt, &wpe);
  void *out = dalloc_nan(b, n, dt);
  be->encoder_forward(out, inp, wted, wped, B, T, C, dt, NULL);
  double *ref = d64alloc(b, n);
  encoder_forward64(ref, inp, widen64(b, wte, (size_t)V * C), widen64(b, wpe, (size_t)maxT * C), B, T, C);
  int fail = check_dt("out", out, n, dt, ref, 0);
  poison(out, n, dt);
  be->encoder_forward(out, inp, wted, NULL, B, T, C, dt, NULL);
  for (int i = 0; i < B * T; i++)
    if (memcmp((uint16_t *)out + (size_t)i * C, (uint16_t *)wted + (size_t)inp[i] * C, (size_t)C * 2)) {
      fprintf(stderr, "  encoder (wpe NULL): row %d is not wte's row %d\n", i, inp[i]);
      return 1;
    }
  return fail | dguard("out (wpe NULL)", out, n, dt);
}

static int test_encoder_forward(void) { return RUN_CASES(zo_encoder_forward_cases, encoder_forward_case); }

/* fp32 gradients += dt dout; then dwpe NULL: dwte alone. */
static int encoder_backward_case(const struct zo_op_case *c, enum zo_dtype dt, struct zo_test_bufs *b) {
  const int B = c->B, T = c->T, C = c->C, V = c->V, maxT = c->maxT;
  const int32_t *inp = zo_op_case_tokens(b, (size_t)B * T, V);
  float *doutf;
  void *dout = dalloc_rand(b, (size_t)B * T * C, -1, 1, dt, &doutf);
  float *dwte = falloc_rand(b, (size_t)V * C, -1, 1), *dwpe = falloc_rand(b, (size_t)maxT * C, -1, 1);
  double *rw = widen64(b, dwte, (size_t)V * C), *rp = widen64(b, dwpe, (size_t)maxT * C);
  be->encoder_backward(dwte, dwpe, dout, inp, B, T, C, -1, dt, NULL);
  for (int bt = 0; bt < B * T; bt++)
    for (int k = 0; k < C; k++) {
      rw[(size_t)inp[bt] * C + k] += doutf[(size_t)bt * C + k];
      rp[(size_t)(bt % T) * C + k] += doutf[(size_t)bt * C + k];
    }
  int fail = check_f32("dwte", dwte, (size_t)V * C, rw, 1e-6, 1e-6) |
             check_f32("dwpe", dwpe, (size_t)maxT * C, rp, 1e-6, 1e-6);
  for (size_t i = 0; i < (size_t)V * C; i++) rw[i] = dwte[i];
  for (int bt = 0; bt < B * T; bt++)
    for (int k = 0; k < C; k++) rw[(size_t)inp[bt] * C + k] += doutf[(size_t)bt * C + k];
  be->encoder_backward(dwte, NULL, dout, inp, B, T, C, -1, dt, NULL);
  return fail | check_f32("dwte (dwpe NULL)", dwte, (size_t)V * C, rw, 1e-6, 1e-6);
}

static int test_encoder_backward(void) { return RUN_CASES(zo_encoder_backward_cases, encoder_backward_case); }

/* ---- layernorm ------------------------------------------------------------------ */

/* The tensors of a norm case, dt storage and exact floats: x (N, C), w and
 * bias (C); with grads also dout and dinp (N, C, dinp pre-filled: +=). */
struct norm_inputs {
  void *xd, *wd, *bd, *doutd, *dinpd;
  float *x, *w, *bias, *dout, *dinp0;
};

static struct norm_inputs norm_inputs(struct zo_test_bufs *b, int N, int C, bool grads, enum zo_dtype dt) {
  const size_t n = (size_t)N * C;
  struct norm_inputs in = {0};
  in.xd = dalloc_rand(b, n, -2, 3, dt, &in.x);
  in.wd = dalloc_rand(b, (size_t)C, -1, 1, dt, &in.w);
  in.bd = dalloc_rand(b, (size_t)C, -1, 1, dt, &in.bias);
  if (grads) {
    in.doutd = dalloc_rand(b, n, -1, 1, dt, &in.dout);
    in.dinpd = dalloc_rand(b, n, -1, 1, dt, &in.dinp0);
  }
  return in;
}

static int layernorm_forward_case(const struct zo_op_case *c, enum zo_dtype dt, struct zo_test_bufs *b) {
  const int N = c->N, C = c->C;
  const size_t n = (size_t)N * C;
  const struct norm_inputs in = norm_inputs(b, N, C, false, dt);
  void *out = dalloc_nan(b, n, dt);
  float *mean = dalloc_nan(b, N, ZO_F32), *rstd = dalloc_nan(b, N, ZO_F32);
  be->layernorm_forward(out, mean, rstd, in.xd, in.wd, in.bd, N, C, dt, NULL);
  double *ref = d64alloc(b, n), *rm = d64alloc(b, N), *rs = d64alloc(b, N);
  layernorm_forward64(ref, rm, rs, widen64(b, in.x, n), widen64(b, in.w, C), widen64(b, in.bias, C), N, C);
  return check_dt("out", out, n, dt, ref, 1e-5) | check_f32("mean", mean, N, rm, 1e-6, 1e-6) |
         check_f32("rstd", rstd, N, rs, 0, 1e-5);
}

static int test_layernorm_forward(void) { return RUN_CASES(zo_layernorm_forward_cases, layernorm_forward_case); }

static int layernorm_backward_case(const struct zo_op_case *c, enum zo_dtype dt, struct zo_test_bufs *b) {
  const int N = c->N, C = c->C;
  const size_t n = (size_t)N * C;
  const struct norm_inputs in = norm_inputs(b, N, C, true, dt);
  void *out = dalloc(b, n, dt);
  float *mean = dalloc(b, N, ZO_F32), *rstd = dalloc(b, N, ZO_F32);
  float *dw = falloc_rand(b, C, -1, 1), *db = falloc_rand(b, C, -1, 1);
  be->layernorm_forward(out, mean, rstd, in.xd, in.wd, in.bd, N, C, dt, NULL);
  double *rdinp = widen64(b, in.dinp0, n), *rdw = widen64(b, dw, C), *rdb = widen64(b, db, C);
  void *dinp2 = dalloc(b, n, dt);
  memcpy(dinp2, in.dinpd, n * zo_dtype_size(dt));
  be->layernorm_backward(in.dinpd, dw, db, in.doutd, in.xd, in.wd, mean, rstd, N, C, dt, NULL);
  layernorm_backward64(rdinp, rdw, rdb, widen64(b, in.dout, n), widen64(b, in.x, n), widen64(b, in.w, C), N, C);
  int fail = check_dt("dinp", in.dinpd, n, dt, rdinp, 1e-5) | check_f32("dweight", dw, C, rdw, 1e-5, 1e-5) |
             check_f32("dbias", db, C, rdb, 1e-5, 1e-5);
  /* A frozen norm (dweight, dbias NULL): dinp the full backward's bits. */
  be->layernorm_backward(dinp2, NULL, NULL, in.doutd, in.xd, in.wd, mean, rstd, N, C, dt, NULL);
  if (memcmp(dinp2, in.dinpd, n * zo_dtype_size(dt)) != 0) {
    fprintf(stderr, "  layernorm_backward with dweight, dbias NULL: dinp is not the full backward's bits\n");
    fail = 1;
  }
  return fail | dguard("dinp (frozen)", dinp2, n, dt);
}

static int test_layernorm_backward(void) { return RUN_CASES(zo_layernorm_backward_cases, layernorm_backward_case); }

/* ---- rmsnorm --------------------------------------------------------------------- */

static int rmsnorm_forward_case(const struct zo_op_case *c, enum zo_dtype dt, struct zo_test_bufs *b) {
  const int N = c->N, C = c->C;
  const size_t n = (size_t)N * C;
  const struct norm_inputs in = norm_inputs(b, N, C, false, dt);
  void *out = dalloc_nan(b, n, dt);
  float *rstd = dalloc_nan(b, N, ZO_F32);
  be->rmsnorm_forward(out, rstd, in.xd, in.wd, c->eps, N, C, dt, NULL);
  double *ref = d64alloc(b, n), *rs = d64alloc(b, N);
  rmsnorm_forward64(ref, rs, widen64(b, in.x, n), widen64(b, in.w, C), c->eps, N, C);
  return check_dt("out", out, n, dt, ref, 1e-5) | check_f32("rstd", rstd, N, rs, 0, 1e-5);
}

static int test_rmsnorm_forward(void) { return RUN_CASES(zo_rmsnorm_forward_cases, rmsnorm_forward_case); }

static int rmsnorm_backward_case(const struct zo_op_case *c, enum zo_dtype dt, struct zo_test_bufs *b) {
  const int N = c->N, C = c->C;
  const size_t n = (size_t)N * C;
  const struct norm_inputs in = norm_inputs(b, N, C, true, dt);
  void *out = dalloc(b, n, dt);
  float *rstd = dalloc(b, N, ZO_F32), *dw = falloc_rand(b, C, -1, 1);
  be->rmsnorm_forward(out, rstd, in.xd, in.wd, c->eps, N, C, dt, NULL);
  double *rdinp = widen64(b, in.dinp0, n), *rdw = widen64(b, dw, C);
  void *dinp2 = dalloc(b, n, dt);
  memcpy(dinp2, in.dinpd, n * zo_dtype_size(dt));
  be->rmsnorm_backward(in.dinpd, dw, in.doutd, in.xd, in.wd, rstd, N, C, dt, NULL);
  rmsnorm_backward64(rdinp, rdw, widen64(b, in.dout, n), widen64(b, in.x, n), widen64(b, in.w, C), c->eps, N, C);
  int fail = check_dt("dinp", in.dinpd, n, dt, rdinp, 1e-5) | check_f32("dweight", dw, C, rdw, 1e-5, 1e-5);
  /* A frozen norm (dweight NULL): dinp the full backward's bits. */
  be->rmsnorm_backward(dinp2, NULL, in.doutd, in.xd, in.wd, rstd, N, C, dt, NULL);
  if (memcmp(dinp2, in.dinpd, n * zo_dtype_size(dt)) != 0) {
    fprintf(stderr, "  rmsnorm_backward with dweight NULL: dinp is not the full backward's bits\n");
    fail = 1;
  }
  return fail | dguard("dinp (frozen)", dinp2, n, dt);
}

static int test_rmsnorm_backward(void) { return RUN_CASES(zo_rmsnorm_backward_cases, rmsnorm_backward_case); }

/* rmsnorm_heads over the rmsnorm cases' (N, C) read as N tokens of H heads of
 * D = C / H (contiguous: the strides are fp32's test, test-kernels-cpu-ops);
 * its reference is rmsnorm's over N H rows of D. The backward overwrites dinp. */
static int heads_of(int C) { return C % 3 == 0 ? 3 : C % 2 == 0 ? 2 : 1; }

static int rmsnorm_heads_forward_case(const struct zo_op_case *c, enum zo_dtype dt, struct zo_test_bufs *b) {
  const int N = c->N, H = heads_of(c->C), D = c->C / H, R = N * H;
  const size_t n = (size_t)R * D;
  const struct norm_inputs in = norm_inputs(b, R, D, false, dt);
  void *out = dalloc_nan(b, n, dt);
  float *rstd = dalloc_nan(b, (size_t)R, ZO_F32);
  be->rmsnorm_heads_forward(out, rstd, in.xd, in.wd, c->eps, N, H, D, H * D, H * D, dt, NULL);
  double *ref = d64alloc(b, n), *rs = d64alloc(b, (size_t)R);
  rmsnorm_forward64(ref, rs, widen64(b, in.x, n), widen64(b, in.w, D), c->eps, R, D);
  return check_dt("out", out, n, dt, ref, 1e-5) | check_f32("rstd", rstd, (size_t)R, rs, 0, 1e-5);
}

static int test_rmsnorm_heads_forward(void) {
  return RUN_CASES(zo_rmsnorm_forward_cases, rmsnorm_heads_forward_case);
}

static int rmsnorm_heads_backward_case(const struct zo_op_case *c, enum zo_dtype dt, struct zo_test_bufs *b) {
  const int N = c->N, H = heads_of(c->C), D = c->C / H, R = N * H, ld = H * D;
  const size_t n = (size_t)R * D;
  const struct norm_inputs in = norm_inputs(b, R, D, true, dt);
  void *out = dalloc(b, n, dt);
  float *rstd = dalloc(b, (size_t)R, ZO_F32), *dw = falloc_rand(b, (size_t)D, -1, 1);
  be->rmsnorm_heads_forward(out, rstd, in.xd, in.wd, c->eps, N, H, D, ld, ld, dt, NULL);
  double *rdinp = d64alloc(b, n), *rdw = widen64(b, dw, (size_t)D);
  memset(rdinp, 0, n * sizeof *rdinp);
  be->rmsnorm_heads_backward(in.dinpd, dw, in.doutd, in.xd, in.wd, rstd, N, H, D, ld, ld, dt, NULL);
  rmsnorm_backward64(rdinp, rdw, widen64(b, in.dout, n), widen64(b, in.x, n), widen64(b, in.w, D), c->eps, R, D);
  int fail = check_dt("dinp", in.dinpd, n, dt, rdinp, 1e-5) | check_f32("dweight", dw, (size_t)D, rdw, 1e-5, 1e-5);
  /* Frozen and in place (dinp = dout): the full backward's dinp bits. */
  be->rmsnorm_heads_backward(in.doutd, NULL, in.doutd, in.xd, in.wd, rstd, N, H, D, ld, ld, dt, NULL);
  if (memcmp(in.doutd, in.dinpd, n * zo_dtype_size(dt)) != 0)
    fail |= zo_test_fail("rmsnorm_heads_backward frozen, in place: dinp is not the full backward's bits");
  return fail | dguard("dinp (frozen)", in.doutd, n, dt);
}

static int test_rmsnorm_heads_backward(void) {
  return RUN_CASES(zo_rmsnorm_backward_cases, rmsnorm_heads_backward_case);
}

/* ---- matmul ------------------------------------------------------------------------- */

/* atol: fp32 rounding of a K-term dot product of terms below 1, 1e-6 K. */
static int matmul_forward_case(const struct zo_op_case *c, enum zo_dtype dt, struct zo_test_bufs *b) {
  const int N = c->N, C = c->C, OC = c->OC;
  const bool with_bias = c->flags & ZO_OPC_BIAS;
  const size_t nI = (size_t)N * C, nW = (size_t)OC * C, nO = (size_t)N * OC;
  float *inp, *w, *bias;
  void *ind = dalloc_rand(b, nI, -1, 1, dt, &inp), *wd = dalloc_rand(b, nW, -1, 1, dt, &w);
  void *bd = dalloc_rand(b, (size_t)OC, -1, 1, dt, &bias), *out = dalloc_nan(b, nO, dt);
  be->matmul_forward(out, ind, wd, with_bias ? bd : NULL, N, C, OC, dt, NULL);
  double *ref = d64alloc(b, nO);
  matmul_forward64(ref, widen64(b, inp, nI), widen64(b, w, nW), with_bias ? widen64(b, bias, (size_t)OC) : NULL,
                   N, C, OC);
  return check_dt(with_bias ? "out" : "out (no bias)", out, nO, dt, ref, 1e-6 * C);
}

static int test_matmul_forward(void) { return RUN_CASES(zo_matmul_forward_cases, matmul_forward_case); }

/* dinp (dt, overwritten) and dbias (fp32, +=) where the case flags them; a
 * NULL dinp stays poisoned. */
static int matmul_backward_case(const struct zo_op_case *c, enum zo_dtype dt, struct zo_test_bufs *b) {
  const int N = c->N, C = c->C, OC = c->OC;
  const bool with_dinp = c->flags & ZO_OPC_DINP, with_dbias = c->flags & ZO_OPC_BIAS;
  const size_t nI = (size_t)N * C, nW = (size_t)OC * C, nO = (size_t)N * OC;
  float *inp, *w, *doutf;
  void *ind = dalloc_rand(b, nI, -1, 1, dt, &inp), *wd = dalloc_rand(b, nW, -1, 1, dt, &w);
  void *dout = dalloc_rand(b, nO, -1, 1, dt, &doutf), *dinp = dalloc_nan(b, nI, dt);
  float *dw = falloc_rand(b, nW, -1, 1), *db = falloc_rand(b, (size_t)OC, -1, 1);
  double *rdw = widen64(b, dw, nW), *rdb = widen64(b, db, (size_t)OC), *rdinp = d64alloc(b, nI);
  be->matmul_backward(with_dinp ? dinp : NULL, dw, with_dbias ? db : NULL, dout, ind, wd, N, C, OC, dt, NULL);
  matmul_backward64(rdinp, rdw, rdb, widen64(b, doutf, nO), widen64(b, inp, nI), widen64(b, w, nW), N, C, OC);
  int fail = check_f32("dweight", dw, nW, rdw, 1e-6 * N, 1e-6);
  if (with_dbias) fail |= check_f32("dbias", db, (size_t)OC, rdb, 1e-6 * N, 1e-6);
  if (with_dinp)
    fail |= check_dt("dinp", dinp, nI, dt, rdinp, 1e-6 * OC);
  else
    fail |= dguard("dinp (NULL: untouched)", dinp, nI, dt) ||
            ((uint16_t *)dinp)[0] != (dt == ZO_BF16 ? 0x7fc0 : 0x7e00);
  return fail;
}

static int test_matmul_backward(void) { return RUN_CASES(zo_matmul_backward_cases, matmul_backward_case); }

/* The tiled GEMM gives the same bits whatever the thread count. */
static int test_matmul_threads_bitwise(void) {
#if defined(__SANITIZE_THREAD__)
  /* libgomp is not instrumented: TSan would report its own barriers. */
  printf("SKIP: needs 2 OpenMP threads, which ThreadSanitizer builds do not run\n");
  return ZO_TEST_SKIP;
#endif
  enum { N = 300, C = 600, OC = 290 };
  zo_rng_seed(204);
  struct zo_test_bufs b = {0};
  void *in = dalloc_rand(&b, N * C, -1, 1, ZO_BF16, NULL), *w = dalloc_rand(&b, OC * C, -1, 1, ZO_BF16, NULL);
  void *o1 = dalloc(&b, N * OC, ZO_BF16), *o2 = dalloc(&b, N * OC, ZO_BF16);
  be->set_threads(1);
  be->matmul_forward(o1, in, w, NULL, N, C, OC, ZO_BF16, NULL);
  be->set_threads(2);
  be->matmul_forward(o2, in, w, NULL, N, C, OC, ZO_BF16, NULL);
  int fail = memcmp(o1, o2, (size_t)N * OC * 2) != 0;
  if (fail) fprintf(stderr, "  1 and 2 threads differ\n");
  zo_test_bufs_free(&b);
  return fail;
}

/* The bf16 GEMM kernel follows ZO_CPU_GEMM and the CPU: forced to the
 * fallback (ctest's test-kernels-cpu-mixed-fallback runs this binary so),
 * otherwise oneDNN wherever the CPU has AVX512_BF16 or AMX-BF16. */
static int test_gemm_kernel_choice(void) {
  const char *mode = getenv("ZO_CPU_GEMM"), *name = zo_cpu_gemm_kernel();
  __builtin_cpu_init();
  const bool forced_fallback = mode && strcmp(mode, "fallback") == 0;
  const bool bf16_cpu = __builtin_cpu_supports("avx512bf16");
  const char *want = forced_fallback || (!bf16_cpu && !(mode && strcmp(mode, "onednn") == 0)) ? "fallback" : "oneDNN";
  printf("  bf16 GEMM kernel: %s (ZO_CPU_GEMM=%s)\n", name, mode ? mode : "unset");
  if (strncmp(name, want, strlen(want)) != 0) {
    fprintf(stderr, "  expected a %s kernel, got '%s'\n", want, name);
    return 1;
  }
  return 0;
}

/* ---- attention -------------------------------------------------------------------- */

/* Forward and backward. */
static int attention_case(const struct zo_op_case *c, enum zo_dtype dt, struct zo_test_bufs *b) {
  const int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, hs = c->hs, G = NH / NKV;
  const size_t ld = (size_t)(NH + 2 * NKV) * hs, ldo = (size_t)NH * hs;
  const size_t nq = (size_t)B * T * ld, no = (size_t)B * T * ldo, na = (size_t)B * NH * T * T;
  float *qkv, *doutf;
  void *qkvd = dalloc_rand(b, nq, -2, 2, dt, &qkv), *dout = dalloc_rand(b, no, -1, 1, dt, &doutf);
  void *out = dalloc_nan(b, no, dt), *att = dalloc_nan(b, na, dt), *dqkv = dalloc_nan(b, nq, dt);
  void *datt = dalloc_nan(b, na, dt);
  be->attention_forward(out, att, qkvd, B, T, NH, NKV, hs, dt, NULL);
  double *q64 = widen64(b, qkv, nq), *ref_out = d64alloc(b, no), *ref_att = d64alloc(b, na);
  attention_forward64(ref_out, ref_att, q64, B, T, NH, NKV, hs);
  /* Element offsets: query head h's q, kv head g's k and v, at row (b, t). */
#define QO(b, t, h) (((size_t)(b) * T + (t)) * ld + (size_t)(h) * hs)
#define KO(b, t, g) (((size_t)(b) * T + (t)) * ld + (size_t)(NH + (g)) * hs)
#define VO(b, t, g) (((size_t)(b) * T + (t)) * ld + (size_t)(NH + NKV + (g)) * hs)
#define OO(b, t, h) (((size_t)(b) * T + (t)) * ldo + (size_t)(h) * hs)
#define AO(b, h, t, u) ((((size_t)(b) * NH + (h)) * T + (t)) * T + (u))
  /* The stored probabilities are the softmax rounded once (atol: the fp32
   * scores). */
  int fail = check_dt("att", att, na, dt, ref_att, 1e-6);
  /* out is exactly the stored probabilities weighting v, rounded once. */
  float *a32 = dt_to_f32(b, att, na, dt);
  double *want = d64alloc(b, no);
  for (int bi = 0; bi < B; bi++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++)
        for (int i = 0; i < hs; i++) {
          double s = 0.0;
          for (int u = 0; u < T; u++) s += (double)a32[AO(bi, h, t, u)] * qkv[VO(bi, u, h / G) + i];
          want[OO(bi, t, h) + i] = s;
        }
  fail |= check_dt("out = att_stored @ v", out, no, dt, want, 1e-6);
  /* ... and close to the exact attention: the rounded probabilities each
   * err by u, so a sum over T keys errs by about u times its largest value. */
  float *o32 = dt_to_f32(b, out, no, dt);
  double big_out = 0.0;
  for (size_t i = 0; i < no; i++) big_out = fmax(big_out, fabs(ref_out[i]));
  fail |= zo_test_close("out vs exact", o32, ref_out, no, 2 * unit_roundoff(dt) * big_out, 4 * unit_roundoff(dt));

  be->attention_backward(dqkv, datt, dout, qkvd, att, B, T, NH, NKV, hs, dt, NULL);
  /* datt: the softmax backward of the stored probabilities, rounded once. */
  double *rdatt = d64alloc(b, na), *raw = d64alloc(b, (size_t)T);
  const double scale = 1.0 / sqrt((double)hs);
  for (int bi = 0; bi < B; bi++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const float *a = a32 + AO(bi, h, t, 0);
        double dot = 0.0;
        for (int u = 0; u < T; u++) {
          double s = 0.0;
          for (int i = 0; i < hs; i++) s += (double)doutf[OO(bi, t, h) + i] * qkv[VO(bi, u, h / G) + i];
          raw[u] = u <= t ? s : 0.0;
          dot += a[u] * raw[u];
        }
        for (int u = 0; u < T; u++) rdatt[AO(bi, h, t, u)] = u <= t ? scale * a[u] * (raw[u] - dot) : 0.0;
      }
  fail |= check_dt("datt", datt, na, dt, rdatt, 1e-6);
  /* dq, dk, dv: products of the stored datt and att, rounded once; dk and dv
   * summed over the group's query heads first. */
  float *d32 = dt_to_f32(b, datt, na, dt);
  double *rdq = d64alloc(b, nq);
  memset(rdq, 0, nq * 8);
  for (int bi = 0; bi < B; bi++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++)
        for (int u = 0; u < T; u++) {
          const double da = d32[AO(bi, h, t, u)], a = a32[AO(bi, h, t, u)];
          const size_t qo = QO(bi, t, h), ko = KO(bi, u, h / G), vo = VO(bi, u, h / G);
          for (int i = 0; i < hs; i++) {
            rdq[qo + i] += da * qkv[ko + i];               /* dq[t] += datt[t,u] k[u] */
            rdq[ko + i] += da * qkv[qo + i];               /* dk[u] += datt[t,u] q[t] */
            rdq[vo + i] += a * doutf[OO(bi, t, h) + i];     /* dv[u] += att[t,u] dout[t] */
          }
        }
#undef QO
#undef KO
#undef VO
#undef OO
#undef AO
  fail |= check_dt("dqkv", dqkv, nq, dt, rdq, 1e-5);
  /* ... and close to the exact gradient. */
  double *exact = d64alloc(b, nq), *d64 = widen64(b, doutf, no);
  attention_backward64(exact, d64, q64, B, T, NH, NKV, hs);
  float *g = dt_to_f32(b, dqkv, nq, dt);
  double big = 0.0;
  for (size_t i = 0; i < nq; i++) big = fmax(big, fabs(exact[i]));
  fail |= zo_test_close("dqkv vs exact", g, exact, nq, 2 * unit_roundoff(dt) * big, 8 * unit_roundoff(dt));
  return fail;
}

static int test_attention(void) { return RUN_CASES(zo_attention_cases, attention_case); }

/* ---- rope -------------------------------------------------------------------------- */

/* In place on dt q and k heads, fp32 tables: each element rounded once from
 * the fp32 rotation; the v heads keep their bits. Forward, then backward
 * (the transpose) on fresh values. */
static int rope_case(const struct zo_op_case *c, enum zo_dtype dt, struct zo_test_bufs *b) {
  const int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, hs = c->hs, maxT = T + 3, h2 = hs / 2;
  const size_t ld = (size_t)(NH + 2 * NKV) * hs, n = (size_t)B * T * ld, nt = (size_t)maxT * h2;
  float *cos_t = dalloc(b, nt, ZO_F32), *sin_t = dalloc(b, nt, ZO_F32);
  for (int t = 0; t < maxT; t++)
    for (int i = 0; i < h2; i++) {
      const double a = t * pow(10000.0, -2.0 * i / hs);
      cos_t[t * h2 + i] = (float)cos(a), sin_t[t * h2 + i] = (float)sin(a);
    }
  double *c64 = widen64(b, cos_t, nt), *s64 = widen64(b, sin_t, nt);
  float *x = zo_test_bufs_alloc(b, n * 4);
  void *xd = dalloc(b, n, dt), *x0 = zo_test_bufs_alloc(b, n * 2);
  int fail = 0;
  for (int pass = 0; pass < 2; pass++) {
    const char *what = pass == 0 ? "rope_forward" : "rope_backward";
    rand_dt(x, xd, n, -2, 2, dt);
    memcpy(x0, xd, n * 2);
    if (pass == 0)
      be->rope_forward(xd, cos_t, sin_t, B, T, NH, NKV, hs, dt, NULL);
    else
      be->rope_backward(xd, cos_t, sin_t, B, T, NH, NKV, hs, dt, NULL);
    double *ref = widen64(b, x, n);
    rope64(ref, c64, s64, pass == 0 ? 1.0 : -1.0, B, T, NH, NKV, hs);
    fail |= check_dt(what, xd, n, dt, ref, 1e-6);
    for (size_t r = 0; r < (size_t)B * T; r++)
      if (memcmp((uint16_t *)xd + r * ld + (NH + NKV) * hs, (uint16_t *)x0 + r * ld + (NH + NKV) * hs,
                 (size_t)NKV * hs * 2)) {
        fprintf(stderr, "  %s: v heads of row %zu changed\n", what, r);
        fail = 1;
        break;
      }
  }
  return fail | dguard("cos", cos_t, nt, ZO_F32) | dguard("sin", sin_t, nt, ZO_F32);
}

static int test_rope(void) { return RUN_CASES(zo_rope_cases, rope_case); }

/* ---- elementwise ----------------------------------------------------------------- */

/* Forward, backward, backward with dinp aliasing dout: each rounded once. */
static int gelu_case(const struct zo_op_case *c, enum zo_dtype dt, struct zo_test_bufs *b) {
  const size_t N = (size_t)c->N;
  float *x, *d;
  void *xd = dalloc_rand(b, N, -4, 4, dt, &x), *dd = dalloc_rand(b, N, -1, 1, dt, &d), *out = dalloc_nan(b, N, dt);
  double *ref = d64alloc(b, N);
  be->gelu_forward(out, xd, N, dt, NULL);
  for (size_t i = 0; i < N; i++) ref[i] = gelu64(x[i]);
  int fail = check_dt("gelu", out, N, dt, ref, 1e-6);
  poison(out, N, dt);
  be->gelu_backward(out, xd, dd, N, dt, NULL);
  for (size_t i = 0; i < N; i++) ref[i] = gelu_grad64(x[i]) * d[i];
  fail |= check_dt("gelu backward", out, N, dt, ref, 1e-6);
  be->gelu_backward(dd, xd, dd, N, dt, NULL);
  return fail | check_dt("gelu backward in place", dd, N, dt, ref, 1e-6);
}

static int test_gelu(void) { return RUN_CASES(zo_gelu_cases, gelu_case); }

/* Forward (also in place: out aliasing an input), then backward: both
 * inputs accumulate the same dout, each sum rounded once. */
static int residual_case(const struct zo_op_case *c, enum zo_dtype dt, struct zo_test_bufs *b) {
  const size_t N = (size_t)c->N;
  float *x, *y, *d;
  void *xd = dalloc_rand(b, N, -4, 4, dt, &x), *yd = dalloc_rand(b, N, -4, 4, dt, &y), *out = dalloc_nan(b, N, dt);
  double *ref = d64alloc(b, N), *ref2 = d64alloc(b, N);
  be->residual_forward(out, xd, yd, N, dt, NULL);
  for (size_t i = 0; i < N; i++) ref[i] = (double)x[i] + y[i];
  int fail = check_dt("residual", out, N, dt, ref, 0);
  be->residual_forward(xd, xd, yd, N, dt, NULL);
  fail |= check_dt("residual in place", xd, N, dt, ref, 0);
  void *dd = dalloc_rand(b, N, -1, 1, dt, &d);
  rand_dt(x, xd, N, -4, 4, dt);
  rand_dt(y, yd, N, -4, 4, dt);
  for (size_t i = 0; i < N; i++) {
    ref[i] = (double)x[i] + d[i];
    ref2[i] = (double)y[i] + d[i];
  }
  be->residual_backward(xd, yd, dd, N, dt, NULL);
  return fail | check_dt("residual backward 1", xd, N, dt, ref, 0) | check_dt("residual backward 2", yd, N, dt, ref2, 0);
}

static int test_residual(void) { return RUN_CASES(zo_residual_cases, residual_case); }

/* y[:, col0:col0+M] += s * v, each element rounded once, the other
 * columns the same bits; then dv = s * dy[:, col0:col0+M] rounded once. */
static int scaled_add_case(const struct zo_op_case *c, enum zo_dtype dt, struct zo_test_bufs *b) {
  const int N = c->N, M = c->M, ld = c->ld, col0 = c->col0;
  const size_t ny = (size_t)N * ld, nv = (size_t)N * M, es = zo_dtype_size(dt);
  float *y, *v;
  void *yd = dalloc_rand(b, ny, -1, 1, dt, &y), *vd = dalloc_rand(b, nv, -1, 1, dt, &v), *y0 = dalloc(b, ny, dt);
  memcpy(y0, yd, ny * es);
  double *ref = widen64(b, y, ny), *rdv = d64alloc(b, nv);
  for (int n = 0; n < N; n++)
    for (int j = 0; j < M; j++) ref[(size_t)n * ld + col0 + j] += (double)c->scale * v[(size_t)n * M + j];
  be->scaled_add_forward(yd, vd, c->scale, N, M, ld, col0, dt, NULL);
  int fail = check_dt("scaled_add y", yd, ny, dt, ref, 1e-6);
  for (int n = 0; n < N && !fail; n++)
    for (int j = 0; j < ld; j++) {
      const size_t i = (size_t)n * ld + j;
      if ((j < col0 || j >= col0 + M) && memcmp((uint8_t *)yd + i * es, (uint8_t *)y0 + i * es, es)) {
        fprintf(stderr, "  y[%d, %d], outside columns [%d, %d), changed\n", n, j, col0, col0 + M);
        fail = 1;
        break;
      }
    }
  void *dv = dalloc_nan(b, nv, dt); /* dy: y's storage, now random again */
  rand_dt(y, yd, ny, -1, 1, dt);
  for (int n = 0; n < N; n++)
    for (int j = 0; j < M; j++) rdv[(size_t)n * M + j] = (double)c->scale * y[(size_t)n * ld + col0 + j];
  be->scaled_add_backward(dv, yd, c->scale, N, M, ld, col0, dt, NULL);
  /* atol: half of fp16's subnormal spacing 2^-24 (small products round there). */
  return fail | check_dt("scaled_add dv", dv, nv, dt, rdv, 0x1p-25) | dguard("dy", yd, ny, dt);
}

static int test_scaled_add(void) { return RUN_CASES(zo_scaled_add_cases, scaled_add_case); }

/* SwiGLU on dt rows [gate | up]: out and dinp each rounded once. */
static int swiglu_case(const struct zo_op_case *c, enum zo_dtype dt, struct zo_test_bufs *b) {
  const size_t N = (size_t)c->N;
  const int I = c->I;
  const size_t ni = N * 2 * (size_t)I, no = N * (size_t)I;
  float *x, *d;
  void *xd = dalloc_rand(b, ni, -8, 8, dt, &x), *dd = dalloc_rand(b, no, -1, 1, dt, &d);
  void *out = dalloc_nan(b, no, dt), *dinp = dalloc_nan(b, ni, dt);
  be->swiglu_forward(out, xd, N, I, dt, NULL);
  be->swiglu_backward(dinp, xd, dd, N, I, dt, NULL);
  double *x64 = widen64(b, x, ni), *ref = d64alloc(b, no), *rd = d64alloc(b, ni);
  swiglu_forward64(ref, x64, N, I);
  swiglu_backward64(rd, x64, widen64(b, d, no), N, I);
  return check_dt("swiglu out", out, no, dt, ref, 1e-6) | check_dt("swiglu dinp", dinp, ni, dt, rd, 1e-6);
}

static int test_swiglu(void) { return RUN_CASES(zo_swiglu_cases, swiglu_case); }

/* ---- cross-entropy ----------------------------------------------------------------- */

/* fp32 losses, dt dlogits rounded once; without dlogits the same losses, in
 * place (dlogits aliasing logits) the same bits. Every fifth row from the
 * fifth has no target (-1). */
static int crossentropy_case(const struct zo_op_case *c, enum zo_dtype dt, struct zo_test_bufs *b) {
  const int N = c->N, V = c->V, Vp = c->Vp;
  const size_t n = (size_t)N * Vp;
  float *x;
  void *xd = dalloc_rand(b, n, c->shift - 6, c->shift + 6, dt, &x), *dl = dalloc_nan(b, n, dt);
  int32_t *targets = zo_op_case_tokens(b, (size_t)N, V);
  for (int i = 4; i < N; i += 5) targets[i] = -1;
  const float dloss = 0.37f;
  float *losses = dalloc_nan(b, N, ZO_F32), *l2 = dalloc(b, N, ZO_F32);
  be->crossentropy_forward(losses, dl, xd, targets, dloss, N, V, Vp, dt, NULL);
  double *rl = d64alloc(b, N), *rd = d64alloc(b, n);
  crossentropy_forward64(rl, rd, widen64(b, x, n), targets, dloss, N, V, Vp);
  int fail = check_f32("losses", losses, N, rl, 1e-6, 1e-6) | check_dt("dlogits", dl, n, dt, rd, 1e-7);
  be->crossentropy_forward(l2, NULL, xd, targets, dloss, N, V, Vp, dt, NULL);
  int differ = memcmp(l2, losses, (size_t)N * 4) != 0;
  be->crossentropy_forward(l2, xd, xd, targets, dloss, N, V, Vp, dt, NULL);
  differ |= memcmp(l2, losses, (size_t)N * 4) != 0 || memcmp(xd, dl, n * 2) != 0;
  if (differ) fprintf(stderr, "  cross-entropy: variants (no dlogits, in place) differ\n");
  return fail | differ;
}

static int test_crossentropy(void) { return RUN_CASES(zo_crossentropy_cases, crossentropy_case); }

/* fp16's range: large activations become inf, never garbage. */
static int test_fp16_overflow_is_inf(void) {
  enum { N = 4, C = 8, OC = 2 };
  struct zo_test_bufs b = {0};
  void *in = dalloc(&b, N * C, ZO_F16), *w = dalloc(&b, OC * C, ZO_F16), *out = dalloc(&b, N * OC, ZO_F16);
  float one = 60000.0f, two = 2.0f;
  for (int i = 0; i < N * C; i++) ((uint16_t *)in)[i] = to_bits(one, ZO_F16);
  for (int i = 0; i < OC * C; i++) ((uint16_t *)w)[i] = to_bits(two, ZO_F16);
  be->matmul_forward(out, in, w, NULL, N, C, OC, ZO_F16, NULL);
  float *o = dt_to_f32(&b, out, N * OC, ZO_F16);
  int fail = 0;
  for (int i = 0; i < N * OC; i++) fail |= !(isinf(o[i]) && o[i] > 0);
  if (fail) fprintf(stderr, "  60000 * 2 * 8 in fp16 should be +inf, got %g\n", (double)o[0]);
  zo_test_bufs_free(&b);
  return fail;
}

int main(void) {
  be = zo_backend_cpu();
  static const struct zo_test tests[] = {
      ZO_TEST(rounding_bf16),
      ZO_TEST(rounding_fp16),
      ZO_TEST(cast_pairs),
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
      ZO_TEST(matmul_threads_bitwise),
      ZO_TEST(gemm_kernel_choice),
      ZO_TEST(attention),
      ZO_TEST(rope),
      ZO_TEST(gelu),
      ZO_TEST(residual),
      ZO_TEST(scaled_add),
      ZO_TEST(swiglu),
      ZO_TEST(crossentropy),
      ZO_TEST(fp16_overflow_is_inf),
  };
  const struct zo_test_counts counts = zo_test_run(tests, ZO_ARRAY_LEN(tests));
  printf("%d op case runs of zo_op_cases.h (case x dtype, BF16 and F16 against float64)\n", n_cases_run);
  return zo_test_report(counts);
}
