/* The model's linear entry (engine/model/linear.h) on the CPU backend in
 * fp32: y = x W^T + b + sum of scale (x A^T) B^T into each adapter's column
 * range, and its backward (dx, dA, dB; the base's dW skipped when frozen),
 * against float64 loops written here; without adapters, the bits of the
 * plain matmul. A 4-bit frozen base (QLoRA: NF4 in one part, double
 * quantized, or three parts of a fused tensor, FP4) against the same loops
 * over the weight zo_quant4_dequantize gives back. */
#include "../engine/model/linear.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo/backend.h"
#include "zo_test.h"

#define EXPECT(cond) ZO_EXPECT(cond)

enum { N = 13, C = 24, OC = 40, NA = 3 };

static uint64_t rng = 0x9e3779b97f4a7c15u;
static float uni(void) { /* splitmix64, uniform in [-1, 1) */
  uint64_t z = (rng += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  z ^= z >> 31;
  return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static void fill(float *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = uni();
}

/* Three adapters: ranks 4, 1 and 3 at columns [8, 24), [0, 40) and [30, 37). */
static const int ranks[NA] = {4, 1, 3}, outs[NA] = {16, 40, 7}, row0s[NA] = {8, 0, 30};
static const float scales[NA] = {2.0f, 0.5f, 1.7320508f};

struct fixture {
  float x[N * C], w[OC * C], b[OC], dy[N * OC];
  float a[NA][4 * C], bb[NA][OC * 4], da[NA][4 * C], db[NA][OC * 4];
  struct zo_linear_adapter ad[NA];
  float *work;
  struct zo_linear p;
  /* a 4-bit base: up to three parts' codes and (plain or nested) absmax */
  struct zo_linear_q4 q4[3];
  uint8_t packed[3][OC * C / 2], qabsmax[3][OC * C / 64];
  float absmax[3][OC * C / 64], absmax2[3][1];
};

static void setup(struct fixture *f, float *dweight, float *dbias) {
  fill(f->x, N * C), fill(f->w, OC * C), fill(f->b, OC), fill(f->dy, N * OC);
  for (int i = 0; i < NA; i++) {
    fill(f->a[i], (size_t)ranks[i] * C), fill(f->bb[i], (size_t)outs[i] * ranks[i]);
    fill(f->da[i], (size_t)ranks[i] * C), fill(f->db[i], (size_t)outs[i] * ranks[i]); /* accumulated into */
    f->ad[i] = (struct zo_linear_adapter){f->a[i], f->bb[i], f->da[i], f->db[i], ranks[i], outs[i], row0s[i],
                                          scales[i]};
  }
  f->work = zo_test_xmalloc(zo_linear_work_numel(N, C, 4, OC) * sizeof(float));
  f->p = (struct zo_linear){f->w, f->b, dweight, dbias, C, OC, NA, f->ad, f->work, 0, NULL};
}

/* The base as n parts (1: rows [0, 40); 3: rows [0, 16), [16, 24),
 * [24, 40), the adapters' ranges straddling them) of type, each quantized
 * on its own in blocks of 64 (nested: double quantized); f->w becomes the
 * dequantized weight the float64 loops read, p.weight NULL. */
static void make_q4(struct fixture *f, int n, enum zo_quant4_type type, bool nested) {
  static const int rows1[] = {OC}, rows3[] = {16, 8, 16};
  const int *rows = n == 1 ? rows1 : rows3;
  int row0 = 0;
  for (int i = 0; i < n; i++) {
    const size_t numel = (size_t)rows[i] * C, nb = zo_quant4_n_blocks(numel, 64);
    float *w = f->w + (size_t)row0 * C;
    zo_quant4_quantize(f->packed[i], f->absmax[i], w, ZO_F32, numel, 64, type);
    struct zo_quant4_weight q = {.packed = f->packed[i], .blocksize = 64, .type = type, .OC = rows[i], .C = C};
    if (nested) {
      struct zo_quant4_nested nq = {.qabsmax = f->qabsmax[i], .absmax2 = f->absmax2[i]};
      zo_quant4_nested_quantize(&nq, f->absmax[i], nb, zo_quant4_nested_map());
      zo_quant4_nested_dequantize(f->absmax[i], &nq, nb, zo_quant4_nested_map());
      q.qabsmax = nq.qabsmax, q.absmax2 = nq.absmax2, q.map = zo_quant4_nested_map(), q.offset = nq.offset;
    } else {
      q.absmax = f->absmax[i];
    }
    zo_quant4_dequantize(w, f->packed[i], f->absmax[i], numel, 64, type);
    f->q4[i] = (struct zo_linear_q4){q, row0};
    row0 += rows[i];
  }
  f->p.weight = NULL, f->p.n_q4 = n, f->p.q4 = f->q4;
}

struct q4_case {
  int n;
  enum zo_quant4_type type;
  bool nested;
};
static const struct q4_case no_q4 = {0, ZO_QUANT4_NF4, false};

static void setup_q4(struct fixture *f, float *dweight, float *dbias, struct q4_case q) {
  setup(f, dweight, dbias);
  if (q.n) make_q4(f, q.n, q.type, q.nested);
}

static bool close_to(double got, double want, const char *what, int i) {
  if (fabs(got - want) <= 2e-5 * (1.0 + fabs(want))) return true;
  fprintf(stderr, "    %s[%d] = %.9g, float64 %.9g\n", what, i, got, want);
  return false;
}

/* t[n][k] = sum_c x[n][c] A[k][c] in float64. */
static void lora_t(const struct fixture *f, int i, double *t) {
  for (int n = 0; n < N; n++)
    for (int k = 0; k < ranks[i]; k++) {
      double s = 0;
      for (int c = 0; c < C; c++) s += (double)f->x[n * C + c] * f->a[i][k * C + c];
      t[n * 4 + k] = s;
    }
}

static int test_no_adapters_bits(void) {
  const int before = zo_test_n_expect_failed;
  zo_backend_t be = zo_backend_cpu();
  struct fixture *f = zo_test_xmalloc(sizeof *f);
  setup(f, NULL, NULL);
  f->p.n_adapters = 0;
  float y1[N * OC], y2[N * OC], dx1[N * C], dx2[N * C];
  zo_linear_forward(be, &f->p, y1, f->x, N, ZO_F32, NULL);
  be->matmul_forward(y2, f->x, f->w, f->b, N, C, OC, ZO_F32, NULL);
  EXPECT(memcmp(y1, y2, sizeof y1) == 0);
  zo_linear_backward(be, &f->p, dx1, f->dy, f->x, N, ZO_F32, NULL);
  be->matmul_backward(dx2, NULL, NULL, f->dy, f->x, f->w, N, C, OC, ZO_F32, NULL);
  EXPECT(memcmp(dx1, dx2, sizeof dx1) == 0);
  free(f->work), free(f);
  return zo_test_expect_failed_since(before);
}

static int forward_case(struct q4_case q) {
  const int before = zo_test_n_expect_failed;
  zo_backend_t be = zo_backend_cpu();
  struct fixture *f = zo_test_xmalloc(sizeof *f);
  setup_q4(f, NULL, NULL, q);
  float y[N * OC];
  zo_linear_forward(be, &f->p, y, f->x, N, ZO_F32, NULL);
  double ref[N * OC], t[N * 4];
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double s = f->b[o];
      for (int c = 0; c < C; c++) s += (double)f->x[n * C + c] * f->w[o * C + c];
      ref[n * OC + o] = s;
    }
  for (int i = 0; i < NA; i++) {
    lora_t(f, i, t);
    for (int n = 0; n < N; n++)
      for (int j = 0; j < outs[i]; j++) {
        double s = 0;
        for (int k = 0; k < ranks[i]; k++) s += t[n * 4 + k] * f->bb[i][j * ranks[i] + k];
        ref[n * OC + row0s[i] + j] += (double)scales[i] * s;
      }
  }
  for (int e = 0; e < N * OC; e++) EXPECT(close_to(y[e], ref[e], "y", e));
  free(f->work), free(f);
  return zo_test_expect_failed_since(before);
}

/* dx, dA, dB (accumulated onto their starting values) and, with dweight,
 * the base's dW and db; frozen (dweight NULL) gives the same dx, dA, dB. */
static int backward_case(bool frozen, struct q4_case q) {
  const int before = zo_test_n_expect_failed;
  zo_backend_t be = zo_backend_cpu();
  struct fixture *f = zo_test_xmalloc(sizeof *f);
  static float dw[OC * C], dbias[OC];
  memset(dw, 0, sizeof dw), memset(dbias, 0, sizeof dbias);
  setup_q4(f, frozen ? NULL : dw, frozen ? NULL : dbias, q);
  double da0[NA][4 * C], db0[NA][OC * 4];
  for (int i = 0; i < NA; i++) {
    for (int e = 0; e < ranks[i] * C; e++) da0[i][e] = f->da[i][e];
    for (int e = 0; e < outs[i] * ranks[i]; e++) db0[i][e] = f->db[i][e];
  }
  float dx[N * C];
  zo_linear_backward(be, &f->p, dx, f->dy, f->x, N, ZO_F32, NULL);
  double rdx[N * C], t[N * 4], dt[N * 4];
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      double s = 0;
      for (int o = 0; o < OC; o++) s += (double)f->dy[n * OC + o] * f->w[o * C + c];
      rdx[n * C + c] = s;
    }
  for (int i = 0; i < NA; i++) {
    const int r = ranks[i];
    lora_t(f, i, t);
    for (int n = 0; n < N; n++)
      for (int k = 0; k < r; k++) {
        double s = 0;
        for (int j = 0; j < outs[i]; j++)
          s += (double)scales[i] * f->dy[n * OC + row0s[i] + j] * f->bb[i][j * r + k];
        dt[n * 4 + k] = s;
      }
    for (int j = 0; j < outs[i]; j++)
      for (int k = 0; k < r; k++) {
        double s = db0[i][j * r + k];
        for (int n = 0; n < N; n++) s += (double)scales[i] * f->dy[n * OC + row0s[i] + j] * t[n * 4 + k];
        EXPECT(close_to(f->db[i][j * r + k], s, "dB", j * r + k));
      }
    for (int k = 0; k < r; k++)
      for (int c = 0; c < C; c++) {
        double s = da0[i][k * C + c];
        for (int n = 0; n < N; n++) s += dt[n * 4 + k] * f->x[n * C + c];
        EXPECT(close_to(f->da[i][k * C + c], s, "dA", k * C + c));
      }
    for (int n = 0; n < N; n++)
      for (int c = 0; c < C; c++)
        for (int k = 0; k < r; k++) rdx[n * C + c] += dt[n * 4 + k] * f->a[i][k * C + c];
  }
  for (int e = 0; e < N * C; e++) EXPECT(close_to(dx[e], rdx[e], "dx", e));
  if (!frozen) {
    for (int o = 0; o < OC; o++) {
      double sb = 0;
      for (int n = 0; n < N; n++) sb += f->dy[n * OC + o];
      EXPECT(close_to(dbias[o], sb, "dbias", o));
      for (int c = 0; c < C; c++) {
        double s = 0;
        for (int n = 0; n < N; n++) s += (double)f->dy[n * OC + o] * f->x[n * C + c];
        EXPECT(close_to(dw[o * C + c], s, "dW", o * C + c));
      }
    }
  }
  free(f->work), free(f);
  return zo_test_expect_failed_since(before);
}

static int test_forward(void) { return forward_case(no_q4); }
static int test_backward(void) { return backward_case(false, no_q4); }
static int test_backward_frozen(void) { return backward_case(true, no_q4); }

/* The 4-bit base: one NF4 part, one double-quantized NF4 part, three FP4
 * parts (the fused path through the workspace), adapters on. */
static const struct q4_case q4_cases[] = {
    {1, ZO_QUANT4_NF4, false}, {1, ZO_QUANT4_NF4, true}, {3, ZO_QUANT4_FP4, false}, {3, ZO_QUANT4_NF4, true}};
static int test_q4_forward(void) {
  int failed = 0;
  for (size_t i = 0; i < sizeof q4_cases / sizeof q4_cases[0]; i++) failed |= forward_case(q4_cases[i]);
  return failed;
}
static int test_q4_backward(void) {
  int failed = 0;
  for (size_t i = 0; i < sizeof q4_cases / sizeof q4_cases[0]; i++) failed |= backward_case(true, q4_cases[i]);
  return failed;
}

/* The q4 parts' bias is sliced per part and dinp = NULL skips the base. */
static int test_q4_no_adapters(void) {
  const int before = zo_test_n_expect_failed;
  zo_backend_t be = zo_backend_cpu();
  struct fixture *f = zo_test_xmalloc(sizeof *f);
  setup_q4(f, NULL, NULL, (struct q4_case){3, ZO_QUANT4_NF4, false});
  f->p.n_adapters = 0;
  float y[N * OC];
  zo_linear_forward(be, &f->p, y, f->x, N, ZO_F32, NULL);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double s = f->b[o];
      for (int c = 0; c < C; c++) s += (double)f->x[n * C + c] * f->w[o * C + c];
      EXPECT(close_to(y[n * OC + o], s, "y", n * OC + o));
    }
  zo_linear_backward(be, &f->p, NULL, f->dy, f->x, N, ZO_F32, NULL);
  free(f->work), free(f);
  return zo_test_expect_failed_since(before);
}

int main(void) {
  static const struct zo_test tests[] = {
      ZO_TEST(no_adapters_bits), ZO_TEST(forward), ZO_TEST(backward), ZO_TEST(backward_frozen),
      ZO_TEST(q4_forward),       ZO_TEST(q4_backward), ZO_TEST(q4_no_adapters),
  };
  return ZO_TEST_MAIN(tests);
}
