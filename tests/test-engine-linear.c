/* The model's linear entry (engine/model/linear.h) on the CPU backend in
 * fp32: y = x W^T + b + sum of scale (x A^T) B^T into each adapter's column
 * range, and its backward (dx, dA, dB; the base's dW skipped when frozen),
 * against float64 loops written here; without adapters, the bits of the
 * plain matmul. */
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
  f->p = (struct zo_linear){f->w, f->b, dweight, dbias, C, OC, NA, f->ad, f->work};
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

static int test_forward(void) {
  const int before = zo_test_n_expect_failed;
  zo_backend_t be = zo_backend_cpu();
  struct fixture *f = zo_test_xmalloc(sizeof *f);
  setup(f, NULL, NULL);
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
static int backward_case(bool frozen) {
  const int before = zo_test_n_expect_failed;
  zo_backend_t be = zo_backend_cpu();
  struct fixture *f = zo_test_xmalloc(sizeof *f);
  static float dw[OC * C], dbias[OC];
  memset(dw, 0, sizeof dw), memset(dbias, 0, sizeof dbias);
  setup(f, frozen ? NULL : dw, frozen ? NULL : dbias);
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

static int test_backward(void) { return backward_case(false); }
static int test_backward_frozen(void) { return backward_case(true); }

int main(void) {
  static const struct zo_test tests[] = {
      ZO_TEST(no_adapters_bits), ZO_TEST(forward), ZO_TEST(backward), ZO_TEST(backward_frozen),
  };
  return ZO_TEST_MAIN(tests);
}
