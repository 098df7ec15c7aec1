/* The CPU backend's GEMMs over a frozen 4-bit weight (matmul_q4_forward,
 * matmul_q4_backward_dx) against float64 loops over the dequantized weight
 * (zo_quant4_dequantize, rounded to dt), and bit for bit against
 * matmul_forward / matmul_backward's dinp over that same dequantized weight
 * run on one thread (the q4 ops split only the GEMM's output columns, so
 * each sum runs in the same order; fp32 on more threads: see below). NF4 and FP4, plain and nested absmax, blocks of 64 and 128,
 * fp32 and bf16, shapes whose N, C and OC are not multiples of the 256-row
 * panel (and an odd C, whose rows start mid-byte and mid-block); outputs
 * poisoned before each call; the same bits with 1 and 2 threads. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "zo/backend.h"
#include "zo/cpu.h"
#include "zo/quant4.h"
#include "zo_test.h"

struct shape {
  int N, C, OC;
};

/* A quantized weight with its dequantized copy in dt, and what it is made of. */
struct q4 {
  struct zo_quant4_weight w;
  uint8_t *packed, *qabsmax;
  float *absmax, *absmax2, *deq32;
  void *deq; /* (OC, C) dt: what matmul_forward takes */
};

static size_t esize(enum zo_dtype dt) { return dt == ZO_F32 ? 4 : 2; }

static void *random_dt(size_t n, float scale, enum zo_dtype dt) {
  float *x = zo_test_xmalloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) x[i] = (float)zo_rng_normal() * scale;
  if (dt == ZO_F32) return x;
  void *y = zo_test_xmalloc(n * 2);
  zo_cpu_cast(y, dt, x, ZO_F32, n);
  free(x);
  return y;
}

static double ld(const void *p, size_t i, enum zo_dtype dt) {
  if (dt == ZO_F32) return ((const float *)p)[i];
  ZO_REQUIRE(dt == ZO_BF16); /* widened exactly: the high half of an fp32 */
  const uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static void q4_make(struct q4 *q, int OC, int C, int blocksize, enum zo_quant4_type type, bool nested,
                    enum zo_dtype dt) {
  const size_t numel = (size_t)OC * C, nb = zo_quant4_n_blocks(numel, (size_t)blocksize);
  float *w = random_dt(numel, 0.05f, ZO_F32);
  q->packed = zo_test_xmalloc(zo_quant4_packed_nbytes(numel));
  q->absmax = zo_test_xmalloc(nb * sizeof(float));
  zo_quant4_quantize(q->packed, q->absmax, w, ZO_F32, numel, (size_t)blocksize, type);
  q->w = (struct zo_quant4_weight){.packed = q->packed, .blocksize = blocksize, .type = type, .OC = OC, .C = C};
  q->qabsmax = NULL;
  q->absmax2 = NULL;
  if (nested) {
    q->qabsmax = zo_test_xmalloc(nb);
    q->absmax2 = zo_test_xmalloc((nb + ZO_QUANT4_NESTED_BLOCK - 1) / ZO_QUANT4_NESTED_BLOCK * sizeof(float));
    struct zo_quant4_nested nq = {.qabsmax = q->qabsmax, .absmax2 = q->absmax2};
    zo_quant4_nested_quantize(&nq, q->absmax, nb, zo_quant4_nested_map());
    zo_quant4_nested_dequantize(q->absmax, &nq, nb, zo_quant4_nested_map());
    q->w.qabsmax = q->qabsmax;
    q->w.absmax2 = q->absmax2;
    q->w.map = zo_quant4_nested_map();
    q->w.offset = nq.offset;
  } else {
    q->w.absmax = q->absmax;
  }
  q->deq32 = w; /* reused: the dequantized weight */
  zo_quant4_dequantize(q->deq32, q->packed, q->absmax, numel, (size_t)blocksize, type);
  q->deq = q->deq32;
  if (dt != ZO_F32) {
    q->deq = zo_test_xmalloc(numel * 2);
    zo_cpu_cast(q->deq, dt, q->deq32, ZO_F32, numel);
  }
}

static void q4_free(struct q4 *q) {
  if (q->deq != q->deq32) free(q->deq);
  free(q->deq32);
  free(q->packed);
  free(q->absmax);
  free(q->qabsmax);
  free(q->absmax2);
}

/* got (n of dt) within float64 ref: |d| <= 1e-6 sum|terms| + |ref| eps(dt) + 1e-30. */
static int close64(const char *what, const void *got, const double *ref, const double *mag, size_t n,
                   enum zo_dtype dt) {
  const double eps = dt == ZO_F32 ? 0x1p-23 : 0x1p-8;
  for (size_t i = 0; i < n; i++) {
    const double g = ld(got, i, dt), tol = 1e-6 * mag[i] + fabs(ref[i]) * eps + 1e-30;
    if (!(fabs(g - ref[i]) <= tol))
      return zo_test_fail("%s[%zu] = %.9g, float64 %.9g (tolerance %.3g)", what, i, g, ref[i], tol);
  }
  return 0;
}

static int check_case(struct shape s, int blocksize, enum zo_quant4_type type, bool nested, enum zo_dtype dt) {
  zo_backend_t be = zo_backend_cpu();
  const size_t es = esize(dt), nout = (size_t)s.N * s.OC, nin = (size_t)s.N * s.C;
  struct q4 q;
  q4_make(&q, s.OC, s.C, blocksize, type, nested, dt);
  void *inp = random_dt(nin, 1.0f, dt), *dout = random_dt(nout, 1.0f, dt), *bias = random_dt((size_t)s.OC, 0.1f, dt);
  void *out = zo_test_xmalloc(nout * es), *out2 = zo_test_xmalloc(nout * es), *ref = zo_test_xmalloc(nout * es);
  void *dinp = zo_test_xmalloc(nin * es), *dinp2 = zo_test_xmalloc(nin * es), *dref = zo_test_xmalloc(nin * es);
  double *r64 = zo_test_xmalloc(nout * sizeof(double)), *m64 = zo_test_xmalloc(nout * sizeof(double));
  double *d64 = zo_test_xmalloc(nin * sizeof(double)), *dm64 = zo_test_xmalloc(nin * sizeof(double));
  int rc = 0;
  char what[160];
  snprintf(what, sizeof what, "%s %s bs %d %s N %d C %d OC %d", zo_quant4_type_name(type),
           nested ? "nested" : "plain", blocksize, zo_dtype_name(dt), s.N, s.C, s.OC);

  for (int n = 0; n < s.N; n++) {
    for (int o = 0; o < s.OC; o++) {
      double acc = ld(bias, (size_t)o, dt), mag = fabs(acc);
      for (int c = 0; c < s.C; c++) {
        const double t = ld(inp, (size_t)n * s.C + c, dt) * ld(q.deq, (size_t)o * s.C + c, dt);
        acc += t;
        mag += fabs(t);
      }
      r64[(size_t)n * s.OC + o] = acc;
      m64[(size_t)n * s.OC + o] = mag;
    }
    for (int c = 0; c < s.C; c++) {
      double acc = 0, mag = 0;
      for (int o = 0; o < s.OC; o++) {
        const double t = ld(dout, (size_t)n * s.OC + o, dt) * ld(q.deq, (size_t)o * s.C + c, dt);
        acc += t;
        mag += fabs(t);
      }
      d64[(size_t)n * s.C + c] = acc;
      dm64[(size_t)n * s.C + c] = mag;
    }
  }

  const int threads = omp_get_max_threads();
#if defined(__SANITIZE_THREAD__) /* libgomp is not instrumented: no 2-thread runs under TSan */
  const int max_t = 1;
#else
  const int max_t = 2;
#endif
  for (int t = 1; t <= max_t && !rc; t++) {
    omp_set_num_threads(t);
    void *o = t == 1 ? out : out2, *d = t == 1 ? dinp : dinp2;
    memset(o, 0xff, nout * es); /* NaN in every dtype */
    memset(d, 0xff, nin * es);
    be->matmul_q4_forward(o, inp, q.w, bias, s.N, dt, NULL);
    be->matmul_q4_backward_dx(d, dout, q.w, s.N, dt, NULL);
  }
  /* One thread: OpenBLAS's threaded sgemm may split an fp32 product's sum
   * differently (the existing matmul_backward's dinp at N 300 C 640 OC 520
   * does); the q4 ops always run each panel's sgemm on one thread. */
  omp_set_num_threads(1);
  be->matmul_forward(ref, inp, q.deq, bias, s.N, s.C, s.OC, dt, NULL);
  memset(dref, 0, nin * es);
  be->matmul_backward(dref, NULL, NULL, dout, inp, q.deq, s.N, s.C, s.OC, dt, NULL);
  omp_set_num_threads(threads);

  if (!rc) rc = close64(what, out, r64, m64, nout, dt);
  if (!rc) rc = close64(what, dinp, d64, dm64, nin, dt);
  if (max_t == 2 && !rc && memcmp(out, out2, nout * es))
    rc = zo_test_fail("%s: forward bits differ with 1 and 2 threads", what);
  if (max_t == 2 && !rc && memcmp(dinp, dinp2, nin * es))
    rc = zo_test_fail("%s: dx bits differ with 1 and 2 threads", what);
  if (!rc && memcmp(out, ref, nout * es))
    rc = zo_test_fail("%s: forward differs from matmul_forward on the dequantized weight", what);
  if (!rc && memcmp(dinp, dref, nin * es))
    rc = zo_test_fail("%s: dx differs from matmul_backward on the dequantized weight", what);

  free(r64), free(m64), free(d64), free(dm64);
  free(out), free(out2), free(ref), free(dinp), free(dinp2), free(dref);
  free(inp), free(dout), free(bias);
  q4_free(&q);
  return rc;
}

static const struct shape shapes[] = {
    {37, 320, 300},  /* OC: a full panel and a partial one */
    {300, 640, 520}, /* N over a 256-row tile, C over a 512-deep K tile and two dx panels */
    {3, 257, 65},    /* odd C: rows start mid-byte and mid-block */
};

static int run_all(int blocksize, enum zo_dtype dt) {
  zo_rng_seed(48u + (unsigned)blocksize + (unsigned)dt);
  for (size_t i = 0; i < ZO_ARRAY_LEN(shapes); i++)
    for (int type = 0; type < 2; type++)
      for (int nested = 0; nested < 2; nested++) {
        int rc = check_case(shapes[i], blocksize, (enum zo_quant4_type)type, nested, dt);
        if (rc) return rc;
      }
  return 0;
}

static int test_fp32_block64(void) { return run_all(64, ZO_F32); }
static int test_fp32_block128(void) { return run_all(128, ZO_F32); }
static int test_bf16_block64(void) { return run_all(64, ZO_BF16); }
static int test_bf16_block128(void) { return run_all(128, ZO_BF16); }

int main(void) {
  static const struct zo_test tests[] = {
      ZO_TEST(fp32_block64),
      ZO_TEST(fp32_block128),
      ZO_TEST(bf16_block64),
      ZO_TEST(bf16_block128),
  };
  return ZO_TEST_MAIN(tests);
}
