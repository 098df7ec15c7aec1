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
 * Outputs are poisoned with NaN and guarded by sentinel bytes. Shapes cross
 * the GEMM tiles (256 x 256 x 512) and the attention row block (64). */
#include "zo/backend.h"
#include "zo/cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* n dt elements between guard bytes; free with dfree. */
static void *dalloc(size_t n, enum zo_dtype dt) {
  uint8_t *mem = zo_test_xmalloc(n * zo_dtype_size(dt) + 2 * GUARD_BYTES);
  memset(mem, GUARD_BYTE, GUARD_BYTES);
  memset(mem + GUARD_BYTES + n * zo_dtype_size(dt), GUARD_BYTE, GUARD_BYTES);
  return mem + GUARD_BYTES;
}

static void dfree(void *p) {
  if (p) free((uint8_t *)p - GUARD_BYTES);
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

static void poison(void *p, size_t n, enum zo_dtype dt) {
  const uint16_t nan16 = dt == ZO_BF16 ? 0x7fc0 : 0x7e00;
  for (size_t i = 0; i < n; i++) ((uint16_t *)p)[i] = nan16;
}

static double *widen64(const float *x, size_t n) {
  double *d = zo_test_xmalloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}

static float *dt_to_f32(const void *p, size_t n, enum zo_dtype dt) {
  float *f = zo_test_xmalloc(n * sizeof(float) + 1);
  zo_cpu_cast(f, ZO_F32, p, dt, n);
  return f;
}

/* A dt output against a float64 reference: within one rounding (u |ref|)
 * plus atol for fp32 cancellation. */
static int check_dt(const char *what, const void *got, size_t n, enum zo_dtype dt, const double *ref,
                    double atol) {
  float *g = dt_to_f32(got, n, dt);
  int fail = dguard(what, got, n, dt) | zo_test_close(what, g, ref, n, atol, 1.01 * unit_roundoff(dt) + 1e-6);
  free(g);
  return fail;
}

/* A guarded fp32 output: floats with GUARD_BYTES around (dalloc F32). */
static int check_f32(const char *what, const float *got, size_t n, const double *ref, double atol, double rtol) {
  return dguard(what, got, n, ZO_F32) | zo_test_close(what, got, ref, n, atol, rtol);
}

static float *falloc_rand(size_t n, float lo, float hi) {
  float *p = dalloc(n, ZO_F32);
  for (size_t i = 0; i < n; i++) p[i] = zo_rng_float(lo, hi);
  return p;
}

/* ---- encoder ------------------------------------------------------------------ */

static int encoder(enum zo_dtype dt) {
  enum { B = 2, T = 9, C = 40, V = 7, maxT = 11 };
  zo_rng_seed(201);
  int32_t inp[B * T];
  for (int i = 0; i < B * T; i++) inp[i] = (int32_t)(zo_rng_u32() % V);
  float wte[V * C], wpe[maxT * C];
  void *wted = dalloc(V * C, dt), *wped = dalloc(maxT * C, dt), *out = dalloc(B * T * C, dt);
  rand_dt(wte, wted, V * C, -1, 1, dt);
  rand_dt(wpe, wped, maxT * C, -1, 1, dt);
  poison(out, B * T * C, dt);
  be->encoder_forward(out, inp, wted, wped, B, T, C, dt, NULL);
  double *w64 = widen64(wte, V * C), *p64 = widen64(wpe, maxT * C), *ref = zo_test_xmalloc(B * T * C * sizeof(double));
  encoder_forward64(ref, inp, w64, p64, B, T, C);
  int fail = check_dt("out", out, B * T * C, dt, ref, 0);
  /* wpe NULL: the token rows, bit for bit */
  poison(out, B * T * C, dt);
  be->encoder_forward(out, inp, wted, NULL, B, T, C, dt, NULL);
  for (int i = 0; i < B * T; i++)
    if (memcmp((uint16_t *)out + (size_t)i * C, (uint16_t *)wted + (size_t)inp[i] * C, C * 2)) {
      fprintf(stderr, "  %s encoder (wpe NULL): row %d is not wte's row %d\n", dt_name(dt), i, inp[i]);
      fail = 1;
      break;
    }
  /* backward: fp32 gradients += dt dout */
  void *dout = dalloc(B * T * C, dt);
  float doutf[B * T * C];
  rand_dt(doutf, dout, B * T * C, -1, 1, dt);
  float *dwte = falloc_rand(V * C, -1, 1), *dwpe = falloc_rand(maxT * C, -1, 1);
  double *rw = widen64(dwte, V * C), *rp = widen64(dwpe, maxT * C);
  be->encoder_backward(dwte, dwpe, dout, inp, B, T, C, dt, NULL);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++) {
        rw[(size_t)inp[b * T + t] * C + c] += doutf[(b * T + t) * C + c];
        rp[(size_t)t * C + c] += doutf[(b * T + t) * C + c];
      }
  fail |= check_f32("dwte", dwte, V * C, rw, 1e-6, 1e-6) | check_f32("dwpe", dwpe, maxT * C, rp, 1e-6, 1e-6);
  /* dwpe NULL: dwte alone */
  for (size_t i = 0; i < (size_t)V * C; i++) rw[i] = dwte[i];
  for (int i = 0; i < B * T; i++)
    for (int c = 0; c < C; c++) rw[(size_t)inp[i] * C + c] += doutf[(size_t)i * C + c];
  be->encoder_backward(dwte, NULL, dout, inp, B, T, C, dt, NULL);
  fail |= check_f32("dwte (dwpe NULL)", dwte, V * C, rw, 1e-6, 1e-6);
  free(rp);
  free(rw);
  dfree(dwpe);
  dfree(dwte);
  dfree(dout);
  free(ref);
  free(p64);
  free(w64);
  dfree(out);
  dfree(wped);
  dfree(wted);
  return fail;
}

static int test_encoder_bf16(void) { return encoder(ZO_BF16); }
static int test_encoder_fp16(void) { return encoder(ZO_F16); }

/* ---- layernorm ------------------------------------------------------------------ */

static int layernorm(enum zo_dtype dt) {
  enum { N = 11, C = 200 };
  zo_rng_seed(202);
  float *x = zo_test_xmalloc(N * C * sizeof(float)), w[C], bias[C];
  float *doutf = zo_test_xmalloc(N * C * sizeof(float)), *dinp0 = zo_test_xmalloc(N * C * sizeof(float));
  void *xd = dalloc(N * C, dt), *wd = dalloc(C, dt), *bd = dalloc(C, dt), *out = dalloc(N * C, dt);
  void *dout = dalloc(N * C, dt), *dinp = dalloc(N * C, dt);
  rand_dt(x, xd, N * C, -2, 3, dt);
  rand_dt(w, wd, C, -1, 1, dt);
  rand_dt(bias, bd, C, -1, 1, dt);
  rand_dt(doutf, dout, N * C, -1, 1, dt);
  rand_dt(dinp0, dinp, N * C, -1, 1, dt);
  float *mean = dalloc(N, ZO_F32), *rstd = dalloc(N, ZO_F32);
  poison(out, N * C, dt);
  be->layernorm_forward(out, mean, rstd, xd, wd, bd, N, C, dt, NULL);
  double *x64 = widen64(x, N * C), *w64 = widen64(w, C), *b64 = widen64(bias, C);
  double *ref = zo_test_xmalloc(N * C * sizeof(double)), rm[N], rs[N];
  layernorm_forward64(ref, rm, rs, x64, w64, b64, N, C);
  int fail = check_dt("out", out, N * C, dt, ref, 1e-5) | check_f32("mean", mean, N, rm, 1e-6, 1e-6) |
             check_f32("rstd", rstd, N, rs, 0, 1e-5);
  float *dw = falloc_rand(C, -1, 1), *db = falloc_rand(C, -1, 1);
  double *rdinp = widen64(dinp0, N * C), *rdw = widen64(dw, C), *rdb = widen64(db, C);
  double *d64 = widen64(doutf, N * C);
  be->layernorm_backward(dinp, dw, db, dout, xd, wd, mean, rstd, N, C, dt, NULL);
  layernorm_backward64(rdinp, rdw, rdb, d64, x64, w64, N, C);
  fail |= check_dt("dinp", dinp, N * C, dt, rdinp, 1e-5) | check_f32("dweight", dw, C, rdw, 1e-5, 1e-5) |
          check_f32("dbias", db, C, rdb, 1e-5, 1e-5);
  free(d64);
  free(rdb);
  free(rdw);
  free(rdinp);
  dfree(db);
  dfree(dw);
  free(ref);
  free(b64);
  free(w64);
  free(x64);
  dfree(rstd);
  dfree(mean);
  dfree(dinp);
  dfree(dout);
  dfree(out);
  dfree(bd);
  dfree(wd);
  dfree(xd);
  free(dinp0);
  free(doutf);
  free(x);
  return fail;
}

static int test_layernorm_bf16(void) { return layernorm(ZO_BF16); }
static int test_layernorm_fp16(void) { return layernorm(ZO_F16); }

/* ---- rmsnorm --------------------------------------------------------------------- */

static int rmsnorm(enum zo_dtype dt) {
  enum { N = 11, C = 201 };
  const float eps = 1e-6f;
  zo_rng_seed(208);
  float *x = zo_test_xmalloc(N * C * sizeof(float)), w[C];
  float *doutf = zo_test_xmalloc(N * C * sizeof(float)), *dinp0 = zo_test_xmalloc(N * C * sizeof(float));
  void *xd = dalloc(N * C, dt), *wd = dalloc(C, dt), *out = dalloc(N * C, dt);
  void *dout = dalloc(N * C, dt), *dinp = dalloc(N * C, dt);
  rand_dt(x, xd, N * C, -2, 3, dt);
  rand_dt(w, wd, C, -1, 1, dt);
  rand_dt(doutf, dout, N * C, -1, 1, dt);
  rand_dt(dinp0, dinp, N * C, -1, 1, dt);
  float *rstd = dalloc(N, ZO_F32);
  for (int n = 0; n < N; n++) rstd[n] = NAN;
  poison(out, N * C, dt);
  be->rmsnorm_forward(out, rstd, xd, wd, eps, N, C, dt, NULL);
  double *x64 = widen64(x, N * C), *w64 = widen64(w, C);
  double *ref = zo_test_xmalloc(N * C * sizeof(double)), rs[N];
  rmsnorm_forward64(ref, rs, x64, w64, eps, N, C);
  int fail = check_dt("out", out, N * C, dt, ref, 1e-5) | check_f32("rstd", rstd, N, rs, 0, 1e-5);
  float *dw = falloc_rand(C, -1, 1);
  double *rdinp = widen64(dinp0, N * C), *rdw = widen64(dw, C), *d64 = widen64(doutf, N * C);
  be->rmsnorm_backward(dinp, dw, dout, xd, wd, rstd, N, C, dt, NULL);
  rmsnorm_backward64(rdinp, rdw, d64, x64, w64, eps, N, C);
  fail |= check_dt("dinp", dinp, N * C, dt, rdinp, 1e-5) | check_f32("dweight", dw, C, rdw, 1e-5, 1e-5);
  if (fail) fprintf(stderr, "  (%s rmsnorm)\n", dt_name(dt));
  free(d64);
  free(rdw);
  free(rdinp);
  dfree(dw);
  free(ref);
  free(w64);
  free(x64);
  dfree(rstd);
  dfree(dinp);
  dfree(dout);
  dfree(out);
  dfree(wd);
  dfree(xd);
  free(dinp0);
  free(doutf);
  free(x);
  return fail;
}

static int test_rmsnorm_bf16(void) { return rmsnorm(ZO_BF16); }
static int test_rmsnorm_fp16(void) { return rmsnorm(ZO_F16); }

/* ---- matmul ------------------------------------------------------------------------- */

static int matmul_case(int N, int C, int OC, bool bias_on, bool dinp_on, enum zo_dtype dt) {
  const size_t nI = (size_t)N * C, nW = (size_t)OC * C, nO = (size_t)N * OC;
  float *inp = zo_test_xmalloc(nI * 4), *w = zo_test_xmalloc(nW * 4), *bias = zo_test_xmalloc((size_t)OC * 4);
  float *doutf = zo_test_xmalloc(nO * 4);
  void *ind = dalloc(nI, dt), *wd = dalloc(nW, dt), *bd = dalloc((size_t)OC, dt), *out = dalloc(nO, dt);
  void *dout = dalloc(nO, dt), *dinp = dalloc(nI, dt);
  rand_dt(inp, ind, nI, -1, 1, dt);
  rand_dt(w, wd, nW, -1, 1, dt);
  rand_dt(bias, bd, (size_t)OC, -1, 1, dt);
  rand_dt(doutf, dout, nO, -1, 1, dt);
  poison(out, nO, dt);
  poison(dinp, nI, dt);
  be->matmul_forward(out, ind, wd, bias_on ? bd : NULL, N, C, OC, dt, NULL);
  double *i64 = widen64(inp, nI), *w64 = widen64(w, nW), *b64 = widen64(bias, (size_t)OC);
  double *ref = zo_test_xmalloc(nO * sizeof(double));
  matmul_forward64(ref, i64, w64, bias_on ? b64 : NULL, N, C, OC);
  /* atol: fp32 rounding of a K-term dot product of terms below 1. */
  const double atol = 1e-6 * C;
  char what[96];
  snprintf(what, sizeof what, "out (%d,%d,%d)", N, C, OC);
  int fail = check_dt(what, out, nO, dt, ref, atol);
  float *dw = falloc_rand(nW, -1, 1), *db = falloc_rand((size_t)OC, -1, 1);
  double *rdw = widen64(dw, nW), *rdb = widen64(db, (size_t)OC), *rdinp = zo_test_xmalloc(nI * sizeof(double));
  double *d64 = widen64(doutf, nO);
  be->matmul_backward(dinp_on ? dinp : NULL, dw, db, dout, ind, wd, N, C, OC, dt, NULL);
  matmul_backward64(rdinp, rdw, rdb, d64, i64, w64, N, C, OC);
  snprintf(what, sizeof what, "dweight (%d,%d,%d)", N, C, OC);
  fail |= check_f32(what, dw, nW, rdw, 1e-6 * N, 1e-6);
  fail |= check_f32("dbias", db, (size_t)OC, rdb, 1e-6 * N, 1e-6);
  if (dinp_on) fail |= check_dt("dinp", dinp, nI, dt, rdinp, 1e-6 * OC);
  else fail |= dguard("dinp (NULL: untouched)", dinp, nI, dt) || ((uint16_t *)dinp)[0] != (dt == ZO_BF16 ? 0x7fc0 : 0x7e00);
  free(d64);
  free(rdinp);
  free(rdb);
  free(rdw);
  dfree(db);
  dfree(dw);
  free(ref);
  free(b64);
  free(w64);
  free(i64);
  dfree(dinp);
  dfree(dout);
  dfree(out);
  dfree(bd);
  dfree(wd);
  dfree(ind);
  free(doutf);
  free(bias);
  free(w);
  free(inp);
  return fail;
}

static int matmul(enum zo_dtype dt) {
  zo_rng_seed(203);
  return matmul_case(5, 7, 3, true, true, dt) | matmul_case(1, 64, 33, false, true, dt) |
         matmul_case(300, 530, 270, true, true, dt) | matmul_case(257, 40, 513, false, false, dt);
}

static int test_matmul_bf16(void) { return matmul(ZO_BF16); }
static int test_matmul_fp16(void) { return matmul(ZO_F16); }

/* The tiled GEMM gives the same bits whatever the thread count. */
static int test_matmul_threads_bitwise(void) {
#if defined(__SANITIZE_THREAD__)
  /* libgomp is not instrumented: TSan would report its own barriers. */
  printf("SKIP: needs 2 OpenMP threads, which ThreadSanitizer builds do not run\n");
  return ZO_TEST_SKIP;
#endif
  enum { N = 300, C = 600, OC = 290 };
  zo_rng_seed(204);
  void *in = dalloc(N * C, ZO_BF16), *w = dalloc(OC * C, ZO_BF16), *o1 = dalloc(N * OC, ZO_BF16),
       *o2 = dalloc(N * OC, ZO_BF16);
  rand_dt(NULL, in, N * C, -1, 1, ZO_BF16);
  rand_dt(NULL, w, OC * C, -1, 1, ZO_BF16);
  be->set_threads(1);
  be->matmul_forward(o1, in, w, NULL, N, C, OC, ZO_BF16, NULL);
  be->set_threads(2);
  be->matmul_forward(o2, in, w, NULL, N, C, OC, ZO_BF16, NULL);
  int fail = memcmp(o1, o2, (size_t)N * OC * 2) != 0;
  if (fail) fprintf(stderr, "  1 and 2 threads differ\n");
  dfree(o2);
  dfree(o1);
  dfree(w);
  dfree(in);
  return fail;
}

/* ---- attention -------------------------------------------------------------------- */

static int attention_case(int B, int T, int NH, int NKV, int hs, enum zo_dtype dt) {
  const int G = NH / NKV;
  const size_t ld = (size_t)(NH + 2 * NKV) * hs, ldo = (size_t)NH * hs;
  const size_t nq = (size_t)B * T * ld, no = (size_t)B * T * ldo, na = (size_t)B * NH * T * T;
  float *qkv = zo_test_xmalloc(nq * 4), *doutf = zo_test_xmalloc(no * 4);
  void *qkvd = dalloc(nq, dt), *out = dalloc(no, dt), *att = dalloc(na, dt), *dout = dalloc(no, dt);
  void *dqkv = dalloc(nq, dt), *datt = dalloc(na, dt);
  rand_dt(qkv, qkvd, nq, -2, 2, dt);
  rand_dt(doutf, dout, no, -1, 1, dt);
  poison(out, no, dt);
  poison(att, na, dt);
  poison(dqkv, nq, dt);
  poison(datt, na, dt);
  be->attention_forward(out, att, qkvd, B, T, NH, NKV, hs, dt, NULL);
  double *q64 = widen64(qkv, nq), *ref_out = zo_test_xmalloc(no * 8), *ref_att = zo_test_xmalloc(na * 8);
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
  float *a32 = dt_to_f32(att, na, dt);
  double *want = zo_test_xmalloc(no * 8);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++)
        for (int i = 0; i < hs; i++) {
          double s = 0.0;
          for (int u = 0; u < T; u++) s += (double)a32[AO(b, h, t, u)] * qkv[VO(b, u, h / G) + i];
          want[OO(b, t, h) + i] = s;
        }
  fail |= check_dt("out = att_stored @ v", out, no, dt, want, 1e-6);
  /* ... and close to the exact attention: the rounded probabilities each
   * err by u, so a sum over T keys errs by about u times its largest value. */
  float *o32 = dt_to_f32(out, no, dt);
  double big_out = 0.0;
  for (size_t i = 0; i < no; i++) big_out = fmax(big_out, fabs(ref_out[i]));
  fail |= zo_test_close("out vs exact", o32, ref_out, no, 2 * unit_roundoff(dt) * big_out, 4 * unit_roundoff(dt));
  free(o32);

  be->attention_backward(dqkv, datt, dout, qkvd, att, B, T, NH, NKV, hs, dt, NULL);
  /* datt: the softmax backward of the stored probabilities, rounded once. */
  double *rdatt = zo_test_xmalloc(na * 8), *raw = zo_test_xmalloc((size_t)T * 8);
  const double scale = 1.0 / sqrt((double)hs);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const float *a = a32 + AO(b, h, t, 0);
        double dot = 0.0;
        for (int u = 0; u < T; u++) {
          double s = 0.0;
          for (int i = 0; i < hs; i++) s += (double)doutf[OO(b, t, h) + i] * qkv[VO(b, u, h / G) + i];
          raw[u] = u <= t ? s : 0.0;
          dot += a[u] * raw[u];
        }
        for (int u = 0; u < T; u++) rdatt[AO(b, h, t, u)] = u <= t ? scale * a[u] * (raw[u] - dot) : 0.0;
      }
  fail |= check_dt("datt", datt, na, dt, rdatt, 1e-6);
  /* dq, dk, dv: products of the stored datt and att, rounded once; dk and dv
   * summed over the group's query heads first. */
  float *d32 = dt_to_f32(datt, na, dt);
  double *rdq = zo_test_xmalloc(nq * 8);
  memset(rdq, 0, nq * 8);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++)
        for (int u = 0; u < T; u++) {
          const double da = d32[AO(b, h, t, u)], a = a32[AO(b, h, t, u)];
          const size_t qo = QO(b, t, h), ko = KO(b, u, h / G), vo = VO(b, u, h / G);
          for (int i = 0; i < hs; i++) {
            rdq[qo + i] += da * qkv[ko + i];               /* dq[t] += datt[t,u] k[u] */
            rdq[ko + i] += da * qkv[qo + i];               /* dk[u] += datt[t,u] q[t] */
            rdq[vo + i] += a * doutf[OO(b, t, h) + i];     /* dv[u] += att[t,u] dout[t] */
          }
        }
#undef QO
#undef KO
#undef VO
#undef OO
#undef AO
  fail |= check_dt("dqkv", dqkv, nq, dt, rdq, 1e-5);
  /* ... and close to the exact gradient. */
  double *exact = zo_test_xmalloc(nq * 8), *d64 = widen64(doutf, no);
  attention_backward64(exact, d64, q64, B, T, NH, NKV, hs);
  float *g = dt_to_f32(dqkv, nq, dt);
  double big = 0.0;
  for (size_t i = 0; i < nq; i++) big = fmax(big, fabs(exact[i]));
  fail |= zo_test_close("dqkv vs exact", g, exact, nq, 2 * unit_roundoff(dt) * big, 8 * unit_roundoff(dt));
  if (fail) fprintf(stderr, "  (%s, B=%d T=%d NH=%d NKV=%d hs=%d)\n", dt_name(dt), B, T, NH, NKV, hs);
  free(g);
  free(d64);
  free(exact);
  free(rdq);
  free(d32);
  free(raw);
  free(rdatt);
  free(want);
  free(a32);
  free(ref_att);
  free(ref_out);
  free(q64);
  dfree(datt);
  dfree(dqkv);
  dfree(dout);
  dfree(att);
  dfree(out);
  dfree(qkvd);
  free(doutf);
  free(qkv);
  return fail;
}

/* Multi-head (NKV == NH), grouped-query (groups of 3) and multi-query
 * (one kv head) attention, T across two row blocks. */
static int attention(enum zo_dtype dt) {
  zo_rng_seed(205);
  return attention_case(2, 70, 3, 3, 8, dt) | attention_case(2, 70, 6, 2, 8, dt) |
         attention_case(1, 67, 4, 1, 6, dt);
}

static int test_attention_bf16(void) { return attention(ZO_BF16); }
static int test_attention_fp16(void) { return attention(ZO_F16); }

/* ---- rope -------------------------------------------------------------------------- */

/* In place on dt q and k heads, fp32 tables: each element rounded once from
 * the fp32 rotation; the v heads keep their bits. Forward, then backward
 * (the transpose) on fresh values. */
static int rope(enum zo_dtype dt) {
  enum { B = 2, T = 67, NH = 6, NKV = 2, hs = 10, maxT = 70, h2 = hs / 2 };
  const size_t ld = (size_t)(NH + 2 * NKV) * hs, n = (size_t)B * T * ld;
  zo_rng_seed(209);
  float *cos_t = dalloc((size_t)maxT * h2, ZO_F32), *sin_t = dalloc((size_t)maxT * h2, ZO_F32);
  for (int t = 0; t < maxT; t++)
    for (int i = 0; i < h2; i++) {
      const double a = t * pow(10000.0, -2.0 * i / hs);
      cos_t[t * h2 + i] = (float)cos(a), sin_t[t * h2 + i] = (float)sin(a);
    }
  double *c64 = widen64(cos_t, (size_t)maxT * h2), *s64 = widen64(sin_t, (size_t)maxT * h2);
  float *x = zo_test_xmalloc(n * 4);
  void *xd = dalloc(n, dt), *x0 = zo_test_xmalloc(n * 2);
  int fail = 0;
  for (int pass = 0; pass < 2; pass++) {
    rand_dt(x, xd, n, -2, 2, dt);
    memcpy(x0, xd, n * 2);
    if (pass == 0)
      be->rope_forward(xd, cos_t, sin_t, B, T, NH, NKV, hs, dt, NULL);
    else
      be->rope_backward(xd, cos_t, sin_t, B, T, NH, NKV, hs, dt, NULL);
    double *ref = widen64(x, n);
    rope64(ref, c64, s64, pass == 0 ? 1.0 : -1.0, B, T, NH, NKV, hs);
    fail |= check_dt(pass == 0 ? "rope_forward" : "rope_backward", xd, n, dt, ref, 1e-6);
    for (size_t r = 0; r < (size_t)B * T; r++)
      if (memcmp((uint16_t *)xd + r * ld + (NH + NKV) * hs, (uint16_t *)x0 + r * ld + (NH + NKV) * hs,
                 (size_t)NKV * hs * 2)) {
        fprintf(stderr, "  %s: v heads of row %zu changed\n", pass == 0 ? "rope_forward" : "rope_backward", r);
        fail = 1;
        break;
      }
    free(ref);
  }
  fail |= dguard("cos", cos_t, (size_t)maxT * h2, ZO_F32) | dguard("sin", sin_t, (size_t)maxT * h2, ZO_F32);
  if (fail) fprintf(stderr, "  (%s rope)\n", dt_name(dt));
  free(x0);
  dfree(xd);
  free(x);
  free(s64);
  free(c64);
  dfree(sin_t);
  dfree(cos_t);
  return fail;
}

static int test_rope_bf16(void) { return rope(ZO_BF16); }
static int test_rope_fp16(void) { return rope(ZO_F16); }

/* ---- elementwise ----------------------------------------------------------------- */

static int elementwise(enum zo_dtype dt) {
  enum { N = 70001 };
  zo_rng_seed(206);
  float *x = zo_test_xmalloc(N * 4), *y = zo_test_xmalloc(N * 4), *d = zo_test_xmalloc(N * 4);
  void *xd = dalloc(N, dt), *yd = dalloc(N, dt), *dd = dalloc(N, dt), *out = dalloc(N, dt);
  rand_dt(x, xd, N, -4, 4, dt);
  rand_dt(y, yd, N, -4, 4, dt);
  rand_dt(d, dd, N, -1, 1, dt);
  double *ref = zo_test_xmalloc(N * 8);
  poison(out, N, dt);
  be->gelu_forward(out, xd, N, dt, NULL);
  for (size_t i = 0; i < N; i++) ref[i] = gelu64(x[i]);
  int fail = check_dt("gelu", out, N, dt, ref, 1e-6);
  poison(out, N, dt);
  be->gelu_backward(out, xd, dd, N, dt, NULL);
  for (size_t i = 0; i < N; i++) ref[i] = gelu_grad64(x[i]) * d[i];
  fail |= check_dt("gelu backward", out, N, dt, ref, 1e-6);
  be->gelu_backward(dd, xd, dd, N, dt, NULL); /* in place: dinp aliases dout */
  fail |= check_dt("gelu backward in place", dd, N, dt, ref, 1e-6);
  poison(out, N, dt);
  be->residual_forward(out, xd, yd, N, dt, NULL);
  for (size_t i = 0; i < N; i++) ref[i] = (double)x[i] + y[i];
  fail |= check_dt("residual", out, N, dt, ref, 0);
  be->residual_forward(xd, xd, yd, N, dt, NULL); /* out aliases an input */
  fail |= check_dt("residual in place", xd, N, dt, ref, 0);
  /* residual backward: both accumulate the same dout */
  rand_dt(d, dd, N, -1, 1, dt);
  rand_dt(x, xd, N, -4, 4, dt);
  rand_dt(y, yd, N, -4, 4, dt);
  double *ref2 = zo_test_xmalloc(N * 8);
  for (size_t i = 0; i < N; i++) {
    ref[i] = (double)x[i] + d[i];
    ref2[i] = (double)y[i] + d[i];
  }
  be->residual_backward(xd, yd, dd, N, dt, NULL);
  fail |= check_dt("residual backward 1", xd, N, dt, ref, 0) | check_dt("residual backward 2", yd, N, dt, ref2, 0);
  free(ref2);
  free(ref);
  dfree(out);
  dfree(dd);
  dfree(yd);
  dfree(xd);
  free(d);
  free(y);
  free(x);
  return fail;
}

/* SwiGLU on dt rows [gate | up]: out and dinp each rounded once. */
static int swiglu(enum zo_dtype dt) {
  enum { N = 9, I = 1001 };
  const size_t ni = (size_t)N * 2 * I, no = (size_t)N * I;
  zo_rng_seed(210);
  float *x = zo_test_xmalloc(ni * 4), *d = zo_test_xmalloc(no * 4);
  void *xd = dalloc(ni, dt), *dd = dalloc(no, dt), *out = dalloc(no, dt), *dinp = dalloc(ni, dt);
  rand_dt(x, xd, ni, -8, 8, dt);
  rand_dt(d, dd, no, -1, 1, dt);
  poison(out, no, dt);
  poison(dinp, ni, dt);
  be->swiglu_forward(out, xd, N, I, dt, NULL);
  be->swiglu_backward(dinp, xd, dd, N, I, dt, NULL);
  double *x64 = widen64(x, ni), *d64 = widen64(d, no), *ref = zo_test_xmalloc(no * 8), *rd = zo_test_xmalloc(ni * 8);
  swiglu_forward64(ref, x64, N, I);
  swiglu_backward64(rd, x64, d64, N, I);
  int fail = check_dt("swiglu out", out, no, dt, ref, 1e-6) | check_dt("swiglu dinp", dinp, ni, dt, rd, 1e-6);
  if (fail) fprintf(stderr, "  (%s swiglu)\n", dt_name(dt));
  free(rd);
  free(ref);
  free(d64);
  free(x64);
  dfree(dinp);
  dfree(out);
  dfree(dd);
  dfree(xd);
  free(d);
  free(x);
  return fail;
}

static int test_swiglu_bf16(void) { return swiglu(ZO_BF16); }
static int test_swiglu_fp16(void) { return swiglu(ZO_F16); }

static int test_elementwise_bf16(void) { return elementwise(ZO_BF16); }
static int test_elementwise_fp16(void) { return elementwise(ZO_F16); }

/* ---- cross-entropy ----------------------------------------------------------------- */

static int crossentropy(enum zo_dtype dt) {
  enum { N = 9, V = 1000, Vp = 1024 };
  zo_rng_seed(207);
  const size_t n = (size_t)N * Vp;
  float *x = zo_test_xmalloc(n * 4);
  void *xd = dalloc(n, dt), *dl = dalloc(n, dt);
  rand_dt(x, xd, n, -6, 6, dt);
  int32_t targets[N];
  for (int i = 0; i < N; i++) targets[i] = i == 4 ? -1 : (int32_t)(zo_rng_u32() % V);
  const float dloss = 0.37f;
  float *losses = dalloc(N, ZO_F32);
  poison(dl, n, dt);
  be->crossentropy_forward(losses, dl, xd, targets, dloss, N, V, Vp, dt, NULL);
  double *x64 = widen64(x, n), *rl = zo_test_xmalloc(N * 8), *rd = zo_test_xmalloc(n * 8);
  crossentropy_forward64(rl, rd, x64, targets, dloss, N, V, Vp);
  int fail = check_f32("losses", losses, N, rl, 1e-6, 1e-6) | check_dt("dlogits", dl, n, dt, rd, 1e-7);
  /* without dlogits: the same losses; in place: the same gradient */
  float *l2 = dalloc(N, ZO_F32);
  be->crossentropy_forward(l2, NULL, xd, targets, dloss, N, V, Vp, dt, NULL);
  fail |= memcmp(l2, losses, N * 4) != 0;
  be->crossentropy_forward(l2, xd, xd, targets, dloss, N, V, Vp, dt, NULL);
  fail |= memcmp(l2, losses, N * 4) != 0 || memcmp(xd, dl, n * 2) != 0;
  if (fail) fprintf(stderr, "  %s cross-entropy: variants (no dlogits, in place) differ\n", dt_name(dt));
  dfree(l2);
  free(rd);
  free(rl);
  free(x64);
  dfree(losses);
  dfree(dl);
  dfree(xd);
  free(x);
  return fail;
}

static int test_crossentropy_bf16(void) { return crossentropy(ZO_BF16); }
static int test_crossentropy_fp16(void) { return crossentropy(ZO_F16); }

/* fp16's range: large activations become inf, never garbage. */
static int test_fp16_overflow_is_inf(void) {
  enum { N = 4, C = 8, OC = 2 };
  void *in = dalloc(N * C, ZO_F16), *w = dalloc(OC * C, ZO_F16), *out = dalloc(N * OC, ZO_F16);
  float one = 60000.0f, two = 2.0f;
  for (int i = 0; i < N * C; i++) ((uint16_t *)in)[i] = to_bits(one, ZO_F16);
  for (int i = 0; i < OC * C; i++) ((uint16_t *)w)[i] = to_bits(two, ZO_F16);
  be->matmul_forward(out, in, w, NULL, N, C, OC, ZO_F16, NULL);
  float *o = dt_to_f32(out, N * OC, ZO_F16);
  int fail = 0;
  for (int i = 0; i < N * OC; i++) fail |= !(isinf(o[i]) && o[i] > 0);
  if (fail) fprintf(stderr, "  60000 * 2 * 8 in fp16 should be +inf, got %g\n", (double)o[0]);
  free(o);
  dfree(out);
  dfree(w);
  dfree(in);
  return fail;
}

int main(void) {
  be = zo_backend_cpu();
  static const struct zo_test tests[] = {
      ZO_TEST(rounding_bf16),     ZO_TEST(rounding_fp16),     ZO_TEST(cast_pairs),
      ZO_TEST(encoder_bf16),      ZO_TEST(encoder_fp16),      ZO_TEST(layernorm_bf16),
      ZO_TEST(layernorm_fp16),    ZO_TEST(rmsnorm_bf16),      ZO_TEST(rmsnorm_fp16),
      ZO_TEST(matmul_bf16),       ZO_TEST(matmul_fp16),
      ZO_TEST(matmul_threads_bitwise), ZO_TEST(attention_bf16), ZO_TEST(attention_fp16),
      ZO_TEST(rope_bf16),         ZO_TEST(rope_fp16),
      ZO_TEST(swiglu_bf16),       ZO_TEST(swiglu_fp16),
      ZO_TEST(elementwise_bf16),  ZO_TEST(elementwise_fp16),  ZO_TEST(crossentropy_bf16),
      ZO_TEST(crossentropy_fp16), ZO_TEST(fp16_overflow_is_inf),
  };
  return ZO_TEST_MAIN(tests);
}
