/* Tests for offload/adamw.c: the AdamW update against a float64 evaluation of
 * the same formula (lockstep: every step starts both from the same fp32 state,
 * so the tolerance is the rounding of one step, a few ulps of the terms) and
 * against torch 1.13 vectors (tests/reference/adamw_torch.bin); zo_sumsq
 * against long double; zo_clip_coef edge cases; zo_lr_at against closed forms.
 * Buffers carry sentinels on both sides to catch out-of-bounds writes. */
#include "zo/adamw.h"
#include "zo/lr_schedule.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo_test.h"

#define GUARD 16
#define SENTINEL 0x7fa5a5a5u /* a NaN no computation produces */

/* A gradient-like value: normal times a magnitude spread over 10^lo..10^hi. */
static float rng_grad(double lo, double hi) {
  return (float)(zo_rng_normal() * pow(10.0, lo + (hi - lo) * zo_rng_uniform()));
}

/* n floats with GUARD sentinel floats before and after. */
static float *guarded_alloc(size_t n) {
  float *base = malloc((n + 2 * GUARD) * sizeof(float));
  if (base == NULL) {
    fprintf(stderr, "out of memory allocating %zu floats\n", n + 2 * GUARD);
    exit(1);
  }
  const uint32_t s = SENTINEL;
  for (size_t i = 0; i < GUARD; i++) {
    memcpy(&base[i], &s, sizeof s);
    memcpy(&base[GUARD + n + i], &s, sizeof s);
  }
  return base + GUARD;
}

static bool guarded_intact(const float *x, size_t n) {
  const float *base = x - GUARD;
  for (size_t i = 0; i < GUARD; i++) {
    uint32_t a, b;
    memcpy(&a, &base[i], sizeof a);
    memcpy(&b, &base[GUARD + n + i], sizeof b);
    if (a != SENTINEL || b != SENTINEL) return false;
  }
  return true;
}

static void guarded_free(float *x) {
  if (x != NULL) free(x - GUARD);
}

/* ---- AdamW against float64 ---------------------------------------------- */

struct state {
  size_t n;
  float *p, *g, *m, *v; /* (n) each, guarded */
  double *rp, *rm, *rv; /* (n) float64 result of the current step */
  double *sp, *sm, *sv; /* (n) error scale: sum of |terms| of each result */
};

static void state_init(struct state *s, size_t n) {
  s->n = n;
  s->p = guarded_alloc(n);
  s->g = guarded_alloc(n);
  s->m = guarded_alloc(n);
  s->v = guarded_alloc(n);
  double **d[] = {&s->rp, &s->rm, &s->rv, &s->sp, &s->sm, &s->sv};
  for (size_t k = 0; k < sizeof d / sizeof d[0]; k++) {
    *d[k] = malloc((n ? n : 1) * sizeof(double));
    if (*d[k] == NULL) {
      fprintf(stderr, "out of memory allocating %zu doubles\n", n);
      exit(1);
    }
  }
  for (size_t i = 0; i < n; i++) {
    s->p[i] = (float)(zo_rng_normal() * (i % 7 == 0 ? 1.0 : 0.02));
    s->m[i] = 0.0f;
    s->v[i] = 0.0f;
  }
}

static void state_free(struct state *s) {
  guarded_free(s->p);
  guarded_free(s->g);
  guarded_free(s->m);
  guarded_free(s->v);
  free(s->rp);
  free(s->rm);
  free(s->rv);
  free(s->sp);
  free(s->sm);
  free(s->sv);
}

static void fill_grad(struct state *s) {
  for (size_t i = 0; i < s->n; i++) s->g[i] = (i % 101 == 3) ? 0.0f : rng_grad(-6.0, 1.0);
}

/* The documented formula in float64, from the current fp32 state. */
static void reference_step(struct state *s, const struct zo_adamw_hparams *hp, bool decay, long t,
                           float grad_scale) {
  const double lr = hp->lr, b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps;
  const double step = lr / (1.0 - pow(b1, (double)t));
  const double bc2_sqrt = sqrt(1.0 - pow(b2, (double)t));
  const double keep = decay ? 1.0 - lr * (double)hp->weight_decay : 1.0;
  for (size_t i = 0; i < s->n; i++) {
    const double g = (double)s->g[i] * (double)grad_scale;
    const double p = (double)s->p[i] * keep;
    const double m = b1 * s->m[i] + (1.0 - b1) * g;
    const double v = b2 * s->v[i] + (1.0 - b2) * g * g;
    const double denom = sqrt(v) / bc2_sqrt + eps;
    s->rp[i] = p - step * m / denom;
    s->rm[i] = m;
    s->rv[i] = v;
    s->sm[i] = fabs(b1 * s->m[i]) + fabs((1.0 - b1) * g);
    /* m may cancel: its error is relative to its terms, and so is the update's. */
    s->sp[i] = fabs(p) + step * s->sm[i] / denom;
    s->sv[i] = v;
  }
}

/* |got - ref| <= ulps * FLT_EPSILON * scale, elementwise, plus sentinels. */
static int compare_step(const struct state *s, double ulps, long t) {
  const struct {
    const char *name;
    const float *got;
    const double *ref, *scale;
  } arrs[] = {{"p", s->p, s->rp, s->sp}, {"m", s->m, s->rm, s->sm}, {"v", s->v, s->rv, s->sv}};
  for (size_t k = 0; k < 3; k++) {
    if (!guarded_intact(arrs[k].got, s->n))
      return zo_test_fail("t=%ld: write outside %s[0..%zu)", t, arrs[k].name, s->n);
    for (size_t i = 0; i < s->n; i++) {
      const double err = fabs((double)arrs[k].got[i] - arrs[k].ref[i]);
      const double tol = ulps * FLT_EPSILON * arrs[k].scale[i];
      if (!(err <= tol))
        return zo_test_fail("t=%ld n=%zu: %s[%zu] = %.9g, float64 %.17g, error %.3g > %.3g (%.1f ulps of the terms)",
                    t, s->n, arrs[k].name, i, (double)arrs[k].got[i], arrs[k].ref[i], err, tol, ulps);
    }
  }
  if (!guarded_intact(s->g, s->n)) return zo_test_fail("t=%ld: write outside g", t);
  return 0;
}

static const struct zo_adamw_hparams HP = {
    .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f};

/* steps 1..n_steps with a warmup-cosine learning rate, each against float64. */
static int run_lockstep(size_t n, bool decay, float grad_scale, long n_steps, uint64_t seed) {
  const struct zo_lr_schedule sched = {
      .kind = ZO_LR_WARMUP_COSINE, .lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 5, .total_steps = 20};
  struct state s;
  zo_rng_seed(seed);
  state_init(&s, n);
  int rc = 0;
  for (long t = 1; t <= n_steps && rc == 0; t++) {
    struct zo_adamw_hparams hp = HP;
    hp.lr = (float)zo_lr_at(&sched, t);
    fill_grad(&s);
    reference_step(&s, &hp, decay, t, grad_scale);
    zo_adamw_update(s.p, s.g, s.m, s.v, n, &hp, decay, t, grad_scale);
    rc = compare_step(&s, 4.0, t);
  }
  state_free(&s);
  return rc;
}

static int test_update_decay(void) { return run_lockstep(1000003, true, 1.0f, 20, 1); }

static int test_update_no_decay(void) { return run_lockstep(1000003, false, 1.0f, 20, 2); }

static int test_update_grad_scale(void) {
  if (run_lockstep(1000003, true, 0.3173f, 8, 3)) return 1;
  return run_lockstep(200003, false, 1.0f / 65536.0f, 8, 4); /* fp16 loss-scale inverse */
}

/* Tails of every SIMD width, a size at the parallel threshold, and n = 0. */
static int test_update_small_n(void) {
  const size_t sizes[] = {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 65, 32767, 32768, 32769};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
    if (run_lockstep(sizes[k], k % 2 == 0, k % 3 == 0 ? 0.5f : 1.0f, 3, 10 + k)) return 1;
  return 0;
}

/* grad_scale is applied as g is read: same bits as pre-scaling g in fp32. */
static int test_update_scale_is_read_time(void) {
  const size_t n = 100003;
  const float scale = 0.0371f;
  struct state a, b;
  zo_rng_seed(5);
  state_init(&a, n);
  zo_rng_seed(5);
  state_init(&b, n);
  int rc = 0;
  for (long t = 1; t <= 3 && rc == 0; t++) {
    fill_grad(&a);
    for (size_t i = 0; i < n; i++) b.g[i] = a.g[i] * scale;
    zo_adamw_update(a.p, a.g, a.m, a.v, n, &HP, true, t, scale);
    zo_adamw_update(b.p, b.g, b.m, b.v, n, &HP, true, t, 1.0f);
    if (memcmp(a.p, b.p, n * sizeof(float)) || memcmp(a.m, b.m, n * sizeof(float)) ||
        memcmp(a.v, b.v, n * sizeof(float)))
      rc = zo_test_fail("t=%ld: grad_scale differs from scaling g beforehand", t);
  }
  state_free(&a);
  state_free(&b);
  return rc;
}

/* ---- AdamW against torch 1.13 ------------------------------------------- */

static bool read_exact(FILE *f, void *dst, size_t nbytes) { return fread(dst, 1, nbytes, f) == nbytes; }

static int test_update_torch(void) {
  const char *path = ZO_TEST_DIR "/reference/adamw_torch.bin";
  enum { MAX_T = 4, MAX_S = 8 };
  struct {
    uint32_t n, decay;
    float weight_decay;
    int32_t t0;
  } tens[MAX_T];
  float steps[MAX_S][5]; /* lr, beta1, beta2, eps, grad_scale */
  float *p[MAX_T] = {0}, *m[MAX_T] = {0}, *v[MAX_T] = {0}, *g = NULL, *ref = NULL;
  char magic[8];
  uint32_t n_tensors = 0, n_steps = 0;
  size_t n_checked = 0, n_bitwise = 0;
  int rc = 1;

  FILE *f = fopen(path, "rb");
  if (f == NULL) return zo_test_fail("cannot open %s: regenerate it with /usr/bin/python3 tests/reference/adamw_torch.py", path);
  if (!read_exact(f, magic, 8) || memcmp(magic, "ZOADAMW1", 8) || !read_exact(f, &n_tensors, 4) ||
      !read_exact(f, &n_steps, 4) || n_tensors > MAX_T || n_steps > MAX_S) {
    zo_test_fail("%s: bad header", path);
    goto out_close;
  }
  if (!read_exact(f, steps, n_steps * sizeof steps[0]) || !read_exact(f, tens, n_tensors * sizeof tens[0])) {
    zo_test_fail("%s: truncated header", path);
    goto out_close;
  }
  size_t n_max = 0;
  for (uint32_t k = 0; k < n_tensors; k++) {
    const size_t n = tens[k].n;
    n_max = n > n_max ? n : n_max;
    p[k] = guarded_alloc(n);
    m[k] = guarded_alloc(n);
    v[k] = guarded_alloc(n);
    if (!read_exact(f, p[k], n * 4) || !read_exact(f, m[k], n * 4) || !read_exact(f, v[k], n * 4)) {
      zo_test_fail("%s: truncated initial state", path);
      goto out_free;
    }
  }
  g = guarded_alloc(n_max);
  ref = malloc(3 * n_max * sizeof(float) + 1);
  if (ref == NULL) {
    zo_test_fail("out of memory");
    goto out_free;
  }
  for (uint32_t s = 0; s < n_steps; s++) {
    for (uint32_t k = 0; k < n_tensors; k++) {
      const size_t n = tens[k].n;
      const long t = (long)tens[k].t0 + (long)s + 1;
      const struct zo_adamw_hparams hp = {.lr = steps[s][0], .beta1 = steps[s][1], .beta2 = steps[s][2],
                                          .eps = steps[s][3], .weight_decay = tens[k].weight_decay};
      if (!read_exact(f, g, n * 4) || !read_exact(f, ref, 3 * n * 4)) {
        zo_test_fail("%s: truncated step %u", path, s);
        goto out_free;
      }
      zo_adamw_update(p[k], g, m[k], v[k], n, &hp, tens[k].decay != 0, t, steps[s][4]);
      const float *got[3] = {p[k], m[k], v[k]};
      for (int a = 0; a < 3; a++) {
        if (!guarded_intact(got[a], n)) {
          zo_test_fail("tensor %u step %u: write outside %c", k, s, "pmv"[a]);
          goto out_free;
        }
        for (size_t i = 0; i < n; i++) {
          const float r = ref[(size_t)a * n + i], c = got[a][i];
          n_checked++;
          n_bitwise += memcmp(&r, &c, 4) == 0;
          if (!(fabs((double)c - r) <= 1e-6 * fabs((double)r) + 1e-30)) {
            zo_test_fail("tensor %u (n=%zu, decay=%u) t=%ld: %c[%zu] = %.9g, torch %.9g", k, n, tens[k].decay, t,
                 "pmv"[a], i, (double)c, (double)r);
            goto out_free;
          }
        }
      }
    }
  }
  printf("  torch 1.13 reference: %zu of %zu values bitwise equal\n", n_bitwise, n_checked);
  rc = 0;
out_free:
  free(ref);
  guarded_free(g);
  for (uint32_t k = 0; k < MAX_T; k++) {
    guarded_free(p[k]);
    guarded_free(m[k]);
    guarded_free(v[k]);
  }
out_close:
  fclose(f);
  return rc;
}

/* ---- zo_sumsq ----------------------------------------------------------- */

static int test_sumsq(void) {
  const size_t n = 1000003;
  float *x = guarded_alloc(n);
  zo_rng_seed(7);
  for (size_t i = 0; i < n; i++) x[i] = rng_grad(-8.0, 3.0);
  long double ref = 0.0L;
  for (size_t i = 0; i < n; i++) ref += (long double)x[i] * x[i];
  const double got = zo_sumsq(x, n);
  int rc = 0;
  if (!(fabs(got - (double)ref) <= 1e-12 * (double)ref))
    rc = zo_test_fail("zo_sumsq = %.17g, long double %.17Lg", got, ref);
  /* (1 + 2^-23)^2 needs 47 bits: a float accumulator would lose the tail. */
  for (size_t i = 0; i < n && rc == 0; i++) x[i] = 1.0f + 0x1.0p-23f;
  const double sq = (1.0 + 0x1.0p-23) * (1.0 + 0x1.0p-23);
  if (rc == 0 && !(fabs(zo_sumsq(x, n) - sq * (double)n) <= 1e-12 * sq * (double)n))
    rc = zo_test_fail("zo_sumsq of %zu x (1+2^-23) = %.17g, expected %.17g", n, zo_sumsq(x, n), sq * (double)n);
  if (rc == 0 && zo_sumsq(x, 0) != 0.0) rc = zo_test_fail("zo_sumsq(n=0) != 0");
  if (rc == 0 && zo_sumsq(x, 1) != sq) rc = zo_test_fail("zo_sumsq(n=1) != x^2");
  if (rc == 0 && !guarded_intact(x, n)) rc = zo_test_fail("zo_sumsq wrote to its input");
  guarded_free(x);
  return rc;
}

/* ---- zo_clip_coef ------------------------------------------------------- */

static int test_clip_coef(void) {
  const struct {
    double norm, max_norm;
    float want;
  } cases[] = {
      {0.0, 1.0, 1.0f},                           /* zero gradient: never scale up */
      {5.0, 0.0, 1.0f},                           /* max_norm 0: clipping off */
      {5.0, -1.0, 1.0f},                          /* negative: off */
      {0.5, 1.0, 1.0f},                           /* below */
      {4.0, 1.0, (float)(1.0 / (4.0 + 1e-6))},    /* above */
      {1e6, 2.5, (float)(2.5 / (1e6 + 1e-6))},    /* far above */
      {1.0, 1.0, (float)(1.0 / (1.0 + 1e-6))},    /* equal: torch's +1e-6 makes it just below 1 */
      {INFINITY, 1.0, 0.0f},                      /* overflowed norm: zero step */
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const float got = zo_clip_coef(cases[k].norm, cases[k].max_norm);
    if (got != cases[k].want)
      return zo_test_fail("zo_clip_coef(%g, %g) = %.9g, expected %.9g", cases[k].norm, cases[k].max_norm, (double)got,
                  (double)cases[k].want);
  }
  if (!isnan(zo_clip_coef(NAN, 1.0))) return zo_test_fail("zo_clip_coef(NaN, 1) is not NaN");
  if (zo_clip_coef(NAN, 0.0) != 1.0f) return zo_test_fail("zo_clip_coef(NaN, 0) != 1 with clipping off");
  return 0;
}

/* ---- zo_lr_at ----------------------------------------------------------- */

static int expect_lr(const struct zo_lr_schedule *s, long t, double want) {
  const double got = zo_lr_at(s, t);
  if (!(fabs(got - want) <= 1e-14 * fabs(want) + 1e-300))
    return zo_test_fail("kind %d, t=%ld: lr %.17g, expected %.17g", (int)s->kind, t, got, want);
  return 0;
}

static int test_lr_constant(void) {
  const struct zo_lr_schedule s = {
      .kind = ZO_LR_CONSTANT, .lr = 6e-4, .min_lr = 1e-5, .warmup_steps = 10, .total_steps = 100};
  const long ts[] = {1, 5, 10, 11, 50, 100, 101, 100000};
  for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++)
    if (expect_lr(&s, ts[k], 6e-4)) return 1;
  return 0;
}

static int test_lr_warmup(void) {
  const double lr = 1e-3, lo = 1e-5;
  const struct zo_lr_schedule s = {
      .kind = ZO_LR_WARMUP, .lr = lr, .min_lr = lo, .warmup_steps = 10, .total_steps = 100};
  if (expect_lr(&s, 1, lo + (lr - lo) * 0.1)) return 1;
  if (expect_lr(&s, 5, (lo + lr) / 2)) return 1;
  if (expect_lr(&s, 9, lo + (lr - lo) * 0.9)) return 1;
  if (expect_lr(&s, 10, lr)) return 1;
  if (expect_lr(&s, 11, lr)) return 1;
  if (expect_lr(&s, 100, lr)) return 1; /* total does not apply */
  if (expect_lr(&s, 1000, lr)) return 1;
  const struct zo_lr_schedule none = {.kind = ZO_LR_WARMUP, .lr = lr, .min_lr = lo, .warmup_steps = 0};
  return expect_lr(&none, 1, lr);
}

static int test_lr_warmup_cosine(void) {
  const double lr = 6e-4, lo = 6e-5;
  const struct zo_lr_schedule s = {
      .kind = ZO_LR_WARMUP_COSINE, .lr = lr, .min_lr = lo, .warmup_steps = 100, .total_steps = 1100};
  if (expect_lr(&s, 1, lr / 100)) return 1;
  if (expect_lr(&s, 50, lr / 2)) return 1;
  if (expect_lr(&s, 100, lr)) return 1;
  if (expect_lr(&s, 101, lo + 0.5 * (lr - lo) * (1 + cos(M_PI / 1000)))) return 1;
  if (expect_lr(&s, 350, lo + 0.5 * (lr - lo) * (1 + sqrt(0.5)))) return 1; /* a quarter in */
  if (expect_lr(&s, 600, (lr + lo) / 2)) return 1;                          /* midpoint */
  if (expect_lr(&s, 1099, lo + 0.5 * (lr - lo) * (1 - cos(M_PI / 1000)))) return 1;
  if (expect_lr(&s, 1100, lo)) return 1;
  if (expect_lr(&s, 1101, lo)) return 1;
  if (expect_lr(&s, 1000000, lo)) return 1;
  const struct zo_lr_schedule nowarm = {
      .kind = ZO_LR_WARMUP_COSINE, .lr = lr, .min_lr = 0.0, .warmup_steps = 0, .total_steps = 10};
  if (expect_lr(&nowarm, 5, lr / 2)) return 1;
  return expect_lr(&nowarm, 10, 0.0);
}

static int test_lr_warmup_decay(void) {
  const double lr = 1e-3;
  const struct zo_lr_schedule s = {
      .kind = ZO_LR_WARMUP_DECAY, .lr = lr, .min_lr = 0.0, .warmup_steps = 10, .total_steps = 110};
  if (expect_lr(&s, 1, lr / 10)) return 1;
  if (expect_lr(&s, 5, lr / 2)) return 1;
  if (expect_lr(&s, 10, lr)) return 1;
  if (expect_lr(&s, 11, lr * 0.99)) return 1;
  if (expect_lr(&s, 60, lr / 2)) return 1; /* midpoint of the decay */
  if (expect_lr(&s, 109, lr * 0.01)) return 1;
  if (expect_lr(&s, 110, 0.0)) return 1;
  return expect_lr(&s, 500, 0.0);
}

int main(void) {
  static const struct zo_test tests[] = {
      ZO_TEST(update_decay),
      ZO_TEST(update_no_decay),
      ZO_TEST(update_grad_scale),
      ZO_TEST(update_small_n),
      ZO_TEST(update_scale_is_read_time),
      ZO_TEST(update_torch),
      ZO_TEST(sumsq),
      ZO_TEST(clip_coef),
      ZO_TEST(lr_constant),
      ZO_TEST(lr_warmup),
      ZO_TEST(lr_warmup_cosine),
      ZO_TEST(lr_warmup_decay),
  };
  return ZO_TEST_MAIN(tests);
}
