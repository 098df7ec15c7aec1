/* Tests for kernels/cpu/ops_adamw8bit.c (zo/adamw8bit.h): the dynamic maps against a float64
 * construction and against torch's float32 one (hash from
 * tests/reference/adamw8bit_ref.py); quantization against a brute-force
 * nearest search; the round-trip error bound; the fused update against a
 * float64 evaluation of the same quantized algorithm (lockstep: each step
 * starts both from the kernel's state), against dequantize + zo_adamw_update +
 * quantize (bit for bit), and its edge cases (t = 1, zero gradients, all-zero
 * blocks, NaN, pieces, threads). Buffers carry sentinels on both sides. */
#include "zo/adamw.h" /* zo_adamw_update, zo_lr_at: the references */
#include "zo/lr_schedule.h"
#include "zo/adamw8bit.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo_test.h"

#define GUARD 64
#define SENTINEL_BYTE 0xA5 /* 0xA5A5A5A5 as a float is -2.9e-16: no result here equals it */

/* A gradient-like value: normal times a magnitude spread over 10^lo..10^hi. */
static float rng_grad(double lo, double hi) {
  return (float)(zo_rng_normal() * pow(10.0, lo + (hi - lo) * zo_rng_uniform()));
}

/* nbytes with GUARD sentinel bytes before and after. */
static void *guarded_alloc(size_t nbytes) {
  unsigned char *base = malloc(nbytes + 2 * GUARD);
  if (base == NULL) {
    fprintf(stderr, "out of memory allocating %zu bytes\n", nbytes + 2 * GUARD);
    exit(1);
  }
  memset(base, SENTINEL_BYTE, GUARD);
  memset(base + GUARD + nbytes, SENTINEL_BYTE, GUARD);
  return base + GUARD;
}

static bool guarded_intact(const void *x, size_t nbytes) {
  const unsigned char *base = (const unsigned char *)x - GUARD;
  for (size_t i = 0; i < GUARD; i++)
    if (base[i] != SENTINEL_BYTE || base[GUARD + nbytes + i] != SENTINEL_BYTE) return false;
  return true;
}

static void guarded_free(void *x) {
  if (x != NULL) free((unsigned char *)x - GUARD);
}

static uint64_t fnv1a64(const void *data, size_t nbytes) {
  const unsigned char *b = data;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < nbytes; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* ---- the maps ------------------------------------------------------------ */

/* create_dynamic_map in float64: exact linspace, means, decade scales. */
static void map_float64(double out[256], bool is_signed) {
  int n = 0;
  for (int i = 0; i < 7; i++) {
    const int items = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
    for (int k = 0; k + 1 < items; k++) {
      const double lo = 0.1 + 0.9 * k / (items - 1), hi = 0.1 + 0.9 * (k + 1) / (items - 1);
      const double v = pow(10.0, i - 6) * (lo + hi) / 2.0;
      out[n++] = v;
      if (is_signed) out[n++] = -v;
    }
  }
  out[n++] = 0.0;
  out[n++] = 1.0;
  qsort(out, 256, sizeof(double), cmp_double);
}

static int check_map(enum zo_qmap map, const char *name, uint64_t torch_hash) {
  const bool is_signed = map == ZO_QMAP_SIGNED;
  const float *v = zo_qmap_values(map);
  double d[256];
  map_float64(d, is_signed);
  for (int k = 0; k < 256; k++) {
    if (k > 0 && !(v[k - 1] < v[k])) return zo_test_fail("%s map not increasing at %d", name, k);
    /* float32 linspace: the ends of each interval are within ~2e-7 of exact,
     * and every mean is >= 0.1 of its decade. */
    if (!(fabs(v[k] - d[k]) <= 4e-6 * fabs(d[k])))
      return zo_test_fail("%s map[%d] = %a, float64 construction %a", name, k, (double)v[k], d[k]);
  }
  const uint64_t h = fnv1a64(v, 256 * sizeof(float));
  if (h != torch_hash)
    return zo_test_fail("%s map hash 0x%016llx, torch's (adamw8bit_ref.py) 0x%016llx", name, (unsigned long long)h,
                (unsigned long long)torch_hash);
  return 0;
}

static int test_maps(void) {
  const float *s = zo_qmap_values(ZO_QMAP_SIGNED), *u = zo_qmap_values(ZO_QMAP_UNSIGNED);
  /* torch's float32 values (adamw8bit_ref.py --hex): 0.99296875, 5.5e-7, 3.25e-7, 0.996484375 rounded. */
  if (s[0] != -0x1.fc6666p-1f || s[ZO_ADAMW8BIT_M_ZERO_CODE] != 0.0f || s[128] != 0x1.27476ep-21f ||
      s[254] != 0x1.fc6666p-1f || s[255] != 1.0f)
    return zo_test_fail("signed map ends: %a %a %a %a %a", (double)s[0], (double)s[127], (double)s[128], (double)s[254],
                (double)s[255]);
  if (u[ZO_ADAMW8BIT_V_ZERO_CODE] != 0.0f || u[1] != 0x1.5cf754p-22f || u[254] != 0x1.fe3334p-1f || u[255] != 1.0f)
    return zo_test_fail("unsigned map ends: %a %a %a %a", (double)u[0], (double)u[1], (double)u[254], (double)u[255]);
  for (int j = 1; j <= 127; j++)
    if (s[127 - j] != -s[127 + j]) return zo_test_fail("signed map not symmetric at %d", j);
  if (check_map(ZO_QMAP_SIGNED, "signed", 0x79441bcb5f3eca10ull)) return 1;
  return check_map(ZO_QMAP_UNSIGNED, "unsigned", 0xf108e079b84f9f81ull);
}

/* ---- quantization -------------------------------------------------------- */

/* Exact midpoints between neighbouring map values (float64 holds them). */
static void map_mids(enum zo_qmap map, double mids[255]) {
  const float *v = zo_qmap_values(map);
  for (int k = 0; k < 255; k++) mids[k] = 0.5 * ((double)v[k] + (double)v[k + 1]);
}

/* Nearest map entry to r, ties toward zero, by binary search on the
 * midpoints; the unsigned map codes r < 0 as 0. */
static int nearest(const double mids[255], enum zo_qmap map, double r) {
  if (map == ZO_QMAP_UNSIGNED && r < 0.0) return 0;
  int lo = 0, hi = 255; /* code = number of midpoints "below" r */
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    const bool below = r >= 0.0 ? mids[mid] < r : mids[mid] <= r;
    if (below)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Brute force: argmin |r - v[k]|, ties to the smaller |v[k]|. */
static int nearest_brute(enum zo_qmap map, double r) {
  const float *v = zo_qmap_values(map);
  if (map == ZO_QMAP_UNSIGNED && r < 0.0) return 0;
  int best = 0;
  for (int k = 1; k < 256; k++) {
    const double dk = fabs(r - v[k]), db = fabs(r - v[best]);
    if (dk < db || (dk == db && fabs(v[k]) < fabs(v[best]))) best = k;
  }
  return best;
}

/* Values of x / absmax that probe every decision: the map values, the floats
 * around every midpoint, random values over all magnitudes, zeros,
 * subnormals. x[0] = 1 so that absmax = 1 and x / absmax = x exactly. */
static size_t probe_values(float *x, size_t cap, enum zo_qmap map) {
  const float *v = zo_qmap_values(map);
  size_t n = 0;
  x[n++] = 1.0f;
  const float sgn = map == ZO_QMAP_SIGNED ? -1.0f : 1.0f;
  for (int k = 0; k < 256; k++) x[n++] = v[k];
  for (int k = 0; k < 255; k++) {
    float f = (float)(0.5 * ((double)v[k] + (double)v[k + 1]));
    for (int j = 0; j < 3; j++) f = nextafterf(f, -INFINITY);
    for (int j = 0; j < 7; j++, f = nextafterf(f, INFINITY)) x[n++] = f;
  }
  x[n++] = 0.0f;
  x[n++] = -0.0f;
  x[n++] = 1e-45f;
  x[n++] = sgn * 1e-40f;
  x[n++] = -1.0f; /* unsigned: codes as 0 */
  while (n < cap) {
    const double u = zo_rng_uniform();
    const double mag = zo_rng_u64() & 1 ? u : pow(10.0, -9.0 * u);
    x[n++] = (float)(zo_rng_u64() & 1 ? mag : sgn * mag);
  }
  return n;
}

static int check_quantize_exact(enum zo_qmap map, const char *name) {
  /* One block holds everything: absmax 1. */
  const size_t n = 8192;
  float *x = guarded_alloc(n * sizeof(float));
  uint8_t *code = guarded_alloc(n);
  float *absmax = guarded_alloc(sizeof(float));
  double mids[255];
  map_mids(map, mids);
  int rc = 0;
  probe_values(x, n, map);
  zo_adamw8bit_quantize(code, absmax, x, n, n, map);
  if (*absmax != 1.0f) rc = zo_test_fail("%s: absmax %g, want 1", name, (double)*absmax);
  for (size_t i = 0; i < n && !rc; i++) {
    const int want = nearest_brute(map, x[i]);
    if (code[i] != want || nearest(mids, map, x[i]) != want)
      rc = zo_test_fail("%s: x = %a: code %d, search %d, brute force %d", name, (double)x[i], code[i],
                nearest(mids, map, x[i]), want);
  }
  if (!rc && (!guarded_intact(code, n) || !guarded_intact(absmax, sizeof(float))))
    rc = zo_test_fail("%s: write outside code or absmax", name);
  guarded_free(x);
  guarded_free(code);
  guarded_free(absmax);
  return rc;
}

/* A subnormal absmax, whose reciprocal overflows: codes of x / absmax. */
static int check_quantize_subnormal(enum zo_qmap map, const char *name) {
  enum { N = 1001 };
  float x[N];
  uint8_t code[N];
  float absmax;
  double mids[255];
  map_mids(map, mids);
  for (int k = 0; k < N; k++) x[k] = (map == ZO_QMAP_SIGNED && k % 3 == 1 ? -1.0f : 1.0f) * ldexpf((float)k, -149);
  zo_adamw8bit_quantize(code, &absmax, x, N, N, map);
  if (absmax != fabsf(x[N - 1])) return zo_test_fail("%s: subnormal absmax %a", name, (double)absmax);
  for (int k = 0; k < N; k++) {
    const int want = nearest(mids, map, x[k] / absmax);
    if (code[k] != want) return zo_test_fail("%s: subnormal x = %a: code %d, want %d", name, (double)x[k], code[k], want);
  }
  return 0;
}

static int test_quantize_exact(void) {
  zo_rng_seed(11);
  if (check_quantize_exact(ZO_QMAP_SIGNED, "signed")) return 1;
  if (check_quantize_exact(ZO_QMAP_UNSIGNED, "unsigned")) return 1;
  if (check_quantize_subnormal(ZO_QMAP_SIGNED, "signed")) return 1;
  return check_quantize_subnormal(ZO_QMAP_UNSIGNED, "unsigned");
}

/* Per block: max |x - deq(q(x))| <= (half the largest gap + rounding) * absmax,
 * and each element within half the gap around it. */
static int check_roundtrip(enum zo_qmap map, const char *name, size_t n, size_t block, int dist) {
  const float *v = zo_qmap_values(map);
  double max_gap = 0.0;
  for (int k = 0; k < 255; k++) max_gap = fmax(max_gap, (double)v[k + 1] - v[k]);
  const size_t nb = zo_adamw8bit_n_blocks(n, block);
  float *x = guarded_alloc(n * sizeof(float)), *y = guarded_alloc(n * sizeof(float));
  uint8_t *code = guarded_alloc(n);
  float *absmax = guarded_alloc(nb * sizeof(float));
  for (size_t i = 0; i < n; i++) {
    double r = dist == 0 ? zo_rng_normal() : dist == 1 ? rng_grad(-8.0, 2.0) : 1e-3 * zo_rng_uniform();
    if (map == ZO_QMAP_UNSIGNED) r = r * r;
    x[i] = (float)r;
  }
  if (dist == 2)
    for (size_t i = 0; i < n && i < 3 * block; i++) x[i] = 0.0f; /* all-zero blocks */
  zo_adamw8bit_quantize(code, absmax, x, n, block, map);
  zo_adamw8bit_dequantize(y, code, absmax, n, block, map);
  int rc = 0;
  for (size_t b = 0; b < nb && !rc; b++) {
    const size_t lo = b * block, hi = lo + block < n ? lo + block : n;
    double amax = 0.0, err_max = 0.0;
    for (size_t i = lo; i < hi; i++) amax = fmax(amax, fabs(x[i]));
    if (absmax[b] != (float)amax) rc = zo_test_fail("%s block %zu: absmax %g, want %g", name, b, (double)absmax[b], amax);
    for (size_t i = lo; i < hi && !rc; i++) {
      const double err = fabs((double)x[i] - y[i]);
      err_max = fmax(err_max, err);
      /* x / absmax and map * absmax each round once: 2^-24 of absmax each. */
      const double slop = 0x1.0p-23 * amax;
      const double r = amax > 0.0 ? x[i] / amax : 0.0;
      int k = 0;
      while (k < 254 && v[k + 1] < r) k++;
      const bool inside = r >= v[0] && r <= v[255];
      const double half_gap = inside ? 0.5 * ((double)v[k + 1] - v[k]) : 0.5 * max_gap;
      if (!(err <= half_gap * amax + slop))
        rc = zo_test_fail("%s block %zu: x[%zu] = %a -> %a, error %.3g > half gap %.3g x absmax %.3g", name, b, i,
                  (double)x[i], (double)y[i], err, half_gap, amax);
    }
    if (!rc && !(err_max <= 0.5 * max_gap * amax + 0x1.0p-23 * amax))
      rc = zo_test_fail("%s block %zu: max error %.3g > half the largest gap %.3g x absmax %.3g", name, b, err_max,
                0.5 * max_gap, amax);
  }
  if (!rc && (!guarded_intact(code, n) || !guarded_intact(absmax, nb * sizeof(float)) ||
              !guarded_intact(y, n * sizeof(float))))
    rc = zo_test_fail("%s: write outside code, absmax or output", name);
  guarded_free(x);
  guarded_free(y);
  guarded_free(code);
  guarded_free(absmax);
  return rc;
}

static int test_roundtrip_bound(void) {
  zo_rng_seed(12);
  static const size_t blocks[] = {256, 64, 4096, 100, 1};
  for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++)
    for (int dist = 0; dist < 3; dist++) {
      if (check_roundtrip(ZO_QMAP_SIGNED, "signed", 100003, blocks[b], dist)) return 1;
      if (check_roundtrip(ZO_QMAP_UNSIGNED, "unsigned", 100003, blocks[b], dist)) return 1;
    }
  return 0;
}

/* ---- the update ---------------------------------------------------------- */

struct state8 {
  size_t n, block, nb;
  float *p, *g;             /* (n) guarded */
  uint8_t *mc, *vc;         /* (n) guarded */
  float *ma, *va;           /* (nb) guarded */
};

static void state8_init(struct state8 *s, size_t n, size_t block) {
  s->n = n;
  s->block = block;
  s->nb = zo_adamw8bit_n_blocks(n, block);
  s->p = guarded_alloc(n * sizeof(float));
  s->g = guarded_alloc(n * sizeof(float));
  s->mc = guarded_alloc(n);
  s->vc = guarded_alloc(n);
  s->ma = guarded_alloc(s->nb * sizeof(float));
  s->va = guarded_alloc(s->nb * sizeof(float));
  for (size_t i = 0; i < n; i++) s->p[i] = (float)(zo_rng_normal() * (i % 7 == 0 ? 1.0 : 0.02));
  zo_adamw8bit_init(s->mc, s->ma, s->vc, s->va, n, block);
}

/* Random non-zero states, as a few steps would leave them. */
static void state8_randomize(struct state8 *s) {
  float *m = malloc(s->n * sizeof(float)), *v = malloc(s->n * sizeof(float));
  if (!m || !v) exit(1);
  for (size_t i = 0; i < s->n; i++) {
    const float gi = rng_grad(-6.0, 0.0);
    m[i] = 0.3f * gi + (float)(1e-7 * zo_rng_normal());
    v[i] = 0.05f * gi * gi;
  }
  zo_adamw8bit_quantize(s->mc, s->ma, m, s->n, s->block, ZO_QMAP_SIGNED);
  zo_adamw8bit_quantize(s->vc, s->va, v, s->n, s->block, ZO_QMAP_UNSIGNED);
  free(m);
  free(v);
}

static void state8_free(struct state8 *s) {
  guarded_free(s->p);
  guarded_free(s->g);
  guarded_free(s->mc);
  guarded_free(s->vc);
  guarded_free(s->ma);
  guarded_free(s->va);
}

static bool state8_intact(const struct state8 *s) {
  return guarded_intact(s->p, s->n * sizeof(float)) && guarded_intact(s->g, s->n * sizeof(float)) &&
         guarded_intact(s->mc, s->n) && guarded_intact(s->vc, s->n) &&
         guarded_intact(s->ma, s->nb * sizeof(float)) && guarded_intact(s->va, s->nb * sizeof(float));
}

static void fill_grad(struct state8 *s) {
  for (size_t i = 0; i < s->n; i++) s->g[i] = (i % 101 == 3) ? 0.0f : rng_grad(-6.0, 1.0);
}

static void update8(struct state8 *s, const struct zo_adamw_hparams *hp, bool decay, long t, float scale) {
  zo_adamw8bit_update(s->p, s->g, s->mc, s->ma, s->vc, s->va, s->n, s->block, hp, decay, t, scale);
}

static const struct zo_adamw_hparams HP = {
    .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f};

/* The AVX-512 kernel forms sqrt(v) and 1 / denom from rsqrt14 and rcp14 with
 * a Newton step each: its p is within P_ULPS of the IEEE formula's, relative
 * to |p before| + |p after| (which bounds the step); its m and v, so the
 * codes and absmax, are the formula's exactly. The portable kernel is the
 * formula. */
#define P_ULPS 8.0

static int p_close(const char *what, long t, const float *got, const float *want, const float *p0, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const double err = fabs((double)got[i] - (double)want[i]);
    const double tol = P_ULPS * FLT_EPSILON * (fabs((double)p0[i]) + fabs((double)want[i]));
    if (!(err <= tol))
      return zo_test_fail("t=%ld: %s p[%zu] = %a, want %a (p before %a): error %.3g > %.3g", t, what, i,
                          (double)got[i], (double)want[i], (double)p0[i], err, tol);
  }
  return 0;
}

/* p of the kernel named against the formula's: bit for bit for "portable". */
static int p_matches(const char *kernel, long t, const float *got, const float *want, const float *p0, size_t n) {
  if (strcmp(kernel, "portable") != 0) return p_close(kernel, t, got, want, p0, n);
  if (memcmp(got, want, n * sizeof(float)) == 0) return 0;
  return zo_test_fail("t=%ld: portable: p differs from zo_adamw_update's", t);
}

/* Result of one float64 step of the quantized algorithm from s's state. */
struct ref8 {
  double *p, *sp;         /* (n) parameters, error scale */
  double *m, *v, *sm;     /* (n) new m, v, error scale of m (v has no cancellation) */
  double *ma, *va;        /* (nb) new absmax */
  double *sma;            /* (nb) largest error scale of m in the block */
};

static void ref8_init(struct ref8 *r, size_t n, size_t nb) {
  double **a[] = {&r->p, &r->sp, &r->m, &r->v, &r->sm};
  for (size_t k = 0; k < sizeof a / sizeof a[0]; k++) *a[k] = malloc(n * sizeof(double));
  double **b[] = {&r->ma, &r->va, &r->sma};
  for (size_t k = 0; k < sizeof b / sizeof b[0]; k++) *b[k] = malloc(nb * sizeof(double));
  if (!r->p || !r->sp || !r->m || !r->v || !r->sm || !r->ma || !r->va || !r->sma) exit(1);
}

static void ref8_free(struct ref8 *r) {
  double *a[] = {r->p, r->sp, r->m, r->v, r->sm, r->ma, r->va, r->sma};
  for (size_t k = 0; k < sizeof a / sizeof a[0]; k++) free(a[k]);
}

static void reference_step8(const struct state8 *s, struct ref8 *r, const struct zo_adamw_hparams *hp,
                            bool decay, long t, float grad_scale) {
  const float *qs = zo_qmap_values(ZO_QMAP_SIGNED), *qu = zo_qmap_values(ZO_QMAP_UNSIGNED);
  const double lr = hp->lr, b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps;
  const double step = lr / (1.0 - pow(b1, (double)t));
  const double bc2_sqrt = sqrt(1.0 - pow(b2, (double)t));
  const double keep = decay ? 1.0 - lr * (double)hp->weight_decay : 1.0;
  for (size_t b = 0; b < s->nb; b++) {
    const size_t lo = b * s->block, hi = lo + s->block < s->n ? lo + s->block : s->n;
    double ma = 0.0, va = 0.0, sma = 0.0;
    for (size_t i = lo; i < hi; i++) {
      const double g = (double)s->g[i] * (double)grad_scale;
      const double p = (double)s->p[i] * keep;
      const double m0 = (double)qs[s->mc[i]] * s->ma[b], v0 = (double)qu[s->vc[i]] * s->va[b];
      const double m = b1 * m0 + (1.0 - b1) * g;
      const double v = b2 * v0 + (1.0 - b2) * g * g;
      const double denom = sqrt(v) / bc2_sqrt + eps;
      r->p[i] = p - step * m / denom;
      r->m[i] = m;
      r->v[i] = v;
      r->sm[i] = fabs(b1 * m0) + fabs((1.0 - b1) * g);
      r->sp[i] = fabs(p) + step * r->sm[i] / denom;
      ma = fmax(ma, fabs(m));
      va = fmax(va, v);
      sma = fmax(sma, r->sm[i]);
    }
    r->ma[b] = ma;
    r->va[b] = va;
    r->sma[b] = sma;
  }
}

struct code_stats {
  size_t checked, off_by_one;
};

/* One state's codes against the float64 values: equal, or off by one where
 * the float64 value lies within tol of the midpoint between the two codes. */
static int compare_codes(const char *what, enum zo_qmap map, const uint8_t *code, const double *x,
                         const double *xs, const double *amax, const double *samax, size_t n, size_t block,
                         long t, struct code_stats *st) {
  const float *v = zo_qmap_values(map);
  double mids[255];
  map_mids(map, mids);
  for (size_t i = 0; i < n; i++) {
    const size_t b = i / block;
    const double r = amax[b] > 0.0 ? x[i] / amax[b] : 0.0;
    const int want = nearest(mids, map, r);
    st->checked++;
    if (code[i] == want) continue;
    const int lo = code[i] < want ? code[i] : want;
    /* fp32 m and absmax are within ~2 ulps of their terms; x / absmax adds one rounding. */
    const double tol = amax[b] > 0.0 ? 8.0 * FLT_EPSILON * (xs[i] + fabs(r) * samax[b]) / amax[b] : 0.0;
    const double mid = 0.5 * ((double)v[lo] + (double)v[lo + 1]);
    if (abs(code[i] - want) != 1 || !(fabs(r - mid) <= tol + FLT_EPSILON * fabs(r)))
      return zo_test_fail("t=%ld %s[%zu]: code %d, float64 %d (x / absmax = %.9g, midpoint %.9g, tol %.3g)", t, what, i,
                  code[i], want, r, mid, tol);
    st->off_by_one++;
  }
  return 0;
}

static int compare_step8(const struct state8 *s, const struct ref8 *r, double ulps, long t, struct code_stats *st) {
  if (!state8_intact(s)) return zo_test_fail("t=%ld: write outside a buffer", t);
  for (size_t i = 0; i < s->n; i++) {
    const double err = fabs((double)s->p[i] - r->p[i]), tol = ulps * FLT_EPSILON * r->sp[i];
    if (!(err <= tol))
      return zo_test_fail("t=%ld: p[%zu] = %.9g, float64 %.17g, error %.3g > %.3g", t, i, (double)s->p[i], r->p[i], err,
                  tol);
  }
  for (size_t b = 0; b < s->nb; b++) {
    if (!(fabs(s->ma[b] - r->ma[b]) <= ulps * FLT_EPSILON * r->sma[b]))
      return zo_test_fail("t=%ld: m absmax[%zu] = %.9g, float64 %.17g", t, b, (double)s->ma[b], r->ma[b]);
    if (!(fabs(s->va[b] - r->va[b]) <= ulps * FLT_EPSILON * r->va[b]))
      return zo_test_fail("t=%ld: v absmax[%zu] = %.9g, float64 %.17g", t, b, (double)s->va[b], r->va[b]);
  }
  if (compare_codes("m", ZO_QMAP_SIGNED, s->mc, r->m, r->sm, r->ma, r->sma, s->n, s->block, t, st)) return 1;
  return compare_codes("v", ZO_QMAP_UNSIGNED, s->vc, r->v, r->v, r->va, r->va, s->n, s->block, t, st);
}

/* steps t0+1..t0+n_steps with a warmup-cosine learning rate, each against
 * float64. Codes may differ by one only at float64 ties with the fp32 value;
 * fewer than 1 in 10^4 do. */
static int run_lockstep8(size_t n, size_t block, bool decay, float grad_scale, long t0, long n_steps,
                         uint64_t seed) {
  const struct zo_lr_schedule sched = {
      .kind = ZO_LR_WARMUP_COSINE, .lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 5, .total_steps = 20};
  struct state8 s;
  struct ref8 r;
  zo_rng_seed(seed);
  state8_init(&s, n, block);
  ref8_init(&r, n, s.nb);
  if (t0 > 0) state8_randomize(&s);
  struct code_stats st = {0, 0};
  int rc = 0;
  for (long t = t0 + 1; t <= t0 + n_steps && rc == 0; t++) {
    struct zo_adamw_hparams hp = HP;
    hp.lr = (float)zo_lr_at(&sched, t);
    fill_grad(&s);
    reference_step8(&s, &r, &hp, decay, t, grad_scale);
    update8(&s, &hp, decay, t, grad_scale);
    rc = compare_step8(&s, &r, 6.0, t, &st);
  }
  if (!rc && st.off_by_one * 10000 > st.checked)
    rc = zo_test_fail("%zu of %zu codes off by one: more than ties explain", st.off_by_one, st.checked);
  if (!rc && st.off_by_one)
    printf("  n=%zu block=%zu: %zu of %zu codes off by one at float64 ties\n", n, block, st.off_by_one, st.checked);
  ref8_free(&r);
  state8_free(&s);
  return rc;
}

static int test_update_reference(void) {
  if (run_lockstep8(100003, 256, true, 1.0f, 0, 10, 1)) return 1;
  if (run_lockstep8(100003, 256, false, 0.7317f, 9, 6, 2)) return 1;
  if (run_lockstep8(50001, 64, true, 0.25f, 3, 5, 3)) return 1;
  if (run_lockstep8(50001, 4096, true, 1.0f, 0, 5, 4)) return 1;
  if (run_lockstep8(50001, 100, false, 1.0f, 20, 5, 5)) return 1;
  return run_lockstep8(1000, 1, true, 1.0f, 0, 5, 6);
}

/* The fused update equals dequantize, zo_adamw_update, quantize: bit for bit
 * with the portable kernel; with the native one, states bit for bit and p
 * within P_ULPS. */
static int test_update_composition(void) {
  const size_t n = 70001, block = 256, nb = zo_adamw8bit_n_blocks(n, block);
  float *p = malloc(n * sizeof(float)), *m = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
  float *p0 = malloc(n * sizeof(float));
  uint8_t *mc = malloc(n), *vc = malloc(n);
  float *ma = malloc(nb * sizeof(float)), *va = malloc(nb * sizeof(float));
  if (!p || !p0 || !m || !v || !mc || !vc || !ma || !va) exit(1);
  int rc = 0;
  for (int portable = 1; portable >= 0 && !rc; portable--) {
    const char *kernel = portable ? "portable" : zo_adamw8bit_kernel();
    struct state8 s;
    zo_rng_seed(21);
    state8_init(&s, n, block);
    state8_randomize(&s);
    for (long t = 4; t <= 8 && !rc; t++) {
      fill_grad(&s);
      memcpy(p, s.p, n * sizeof(float));
      memcpy(p0, s.p, n * sizeof(float));
      zo_adamw8bit_dequantize(m, s.mc, s.ma, n, block, ZO_QMAP_SIGNED);
      zo_adamw8bit_dequantize(v, s.vc, s.va, n, block, ZO_QMAP_UNSIGNED);
      zo_adamw_update(p, s.g, m, v, n, &HP, t % 2 == 0, t, 0.5f);
      zo_adamw8bit_quantize(mc, ma, m, n, block, ZO_QMAP_SIGNED);
      zo_adamw8bit_quantize(vc, va, v, n, block, ZO_QMAP_UNSIGNED);
      zo_adamw8bit_force_portable(portable);
      update8(&s, &HP, t % 2 == 0, t, 0.5f);
      zo_adamw8bit_force_portable(false);
      if (memcmp(mc, s.mc, n) || memcmp(vc, s.vc, n) || memcmp(ma, s.ma, nb * sizeof(float)) ||
          memcmp(va, s.va, nb * sizeof(float)))
        rc = zo_test_fail("t=%ld: %s: states differ from dequantize + zo_adamw_update + quantize", t, kernel);
      else
        rc = p_matches(kernel, t, s.p, p, p0, n);
      /* Both kernels go on from the formula's p, so that errors do not compound. */
      memcpy(s.p, p, n * sizeof(float));
    }
    state8_free(&s);
  }
  free(p);
  free(p0);
  free(m);
  free(v);
  free(mc);
  free(vc);
  free(ma);
  free(va);
  return rc;
}

/* t = 1 from fresh states: p as zo_adamw_update's with m = v = 0 (exactly
 * with the portable kernel, within P_ULPS with the native one), and the
 * states exactly its m, v quantized. */
static int test_update_t1(void) {
  const size_t n = 40000, block = 256, nb = zo_adamw8bit_n_blocks(n, block);
  struct state8 s;
  zo_rng_seed(31);
  state8_init(&s, n, block);
  fill_grad(&s);
  float *p = malloc(n * sizeof(float)), *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
  uint8_t *mc = malloc(n), *vc = malloc(n);
  float *ma = malloc(nb * sizeof(float)), *va = malloc(nb * sizeof(float));
  if (!p || !m || !v || !mc || !vc || !ma || !va) exit(1);
  float *p0 = malloc(n * sizeof(float));
  if (!p0) exit(1);
  memcpy(p0, s.p, n * sizeof(float));
  memcpy(p, s.p, n * sizeof(float));
  zo_adamw_update(p, s.g, m, v, n, &HP, true, 1, 1.0f);
  update8(&s, &HP, true, 1, 1.0f);
  zo_adamw8bit_quantize(mc, ma, m, n, block, ZO_QMAP_SIGNED);
  zo_adamw8bit_quantize(vc, va, v, n, block, ZO_QMAP_UNSIGNED);
  int rc = 0;
  if (p_matches(zo_adamw8bit_kernel(), 1, s.p, p, p0, n)) rc = zo_test_fail("t=1: p differs from zo_adamw_update's");
  if (!rc && (memcmp(mc, s.mc, n) || memcmp(vc, s.vc, n) || memcmp(ma, s.ma, nb * sizeof(float)) ||
              memcmp(va, s.va, nb * sizeof(float))))
    rc = zo_test_fail("t=1: states differ from zo_adamw_update's m, v quantized");
  /* |g| >> eps: the first step moves the decayed p by lr against the sign of g. */
  const double keep = 1.0 - (double)HP.lr * (double)HP.weight_decay;
  for (size_t i = 0; i < n && !rc; i++) {
    if (fabsf(s.g[i]) < 1e-4f) continue;
    const double moved = (double)s.p[i] - (double)p0[i] * keep;
    const double want = s.g[i] > 0.0f ? -(double)HP.lr : (double)HP.lr;
    if (!(fabs(moved - want) <= 2e-4 * HP.lr + 2.0 * FLT_EPSILON * fabs(p0[i])))
      rc = zo_test_fail("t=1: p[%zu] moved by %g, want %g", i, moved, want);
  }
  free(p0);
  free(p);
  free(m);
  free(v);
  free(mc);
  free(vc);
  free(ma);
  free(va);
  state8_free(&s);
  return rc;
}

/* Zero gradients: m decays by beta1 and v by beta2, the codes stay (every
 * block's largest m is positive, code 255), p moves by the step term only. */
static int test_update_zero_grad(void) {
  const size_t n = 30000, block = 256;
  struct state8 s;
  zo_rng_seed(41);
  state8_init(&s, n, block);
  for (size_t i = 0; i < n; i++) {
    s.mc[i] = (uint8_t)(zo_rng_u64() & 0xFF);
    s.vc[i] = (uint8_t)(zo_rng_u64() & 0xFF);
  }
  for (size_t b = 0; b < s.nb; b++) {
    s.mc[b * block] = 255;
    s.vc[b * block] = 255;
    s.ma[b] = (float)(1e-3 * (1.0 + zo_rng_uniform()));
    s.va[b] = (float)(1e-7 * (1.0 + zo_rng_uniform()));
  }
  memset(s.g, 0, n * sizeof(float));
  uint8_t *mc = malloc(n), *vc = malloc(n);
  float *ma = malloc(s.nb * sizeof(float)), *va = malloc(s.nb * sizeof(float));
  if (!mc || !vc || !ma || !va) exit(1);
  memcpy(mc, s.mc, n);
  memcpy(vc, s.vc, n);
  memcpy(ma, s.ma, s.nb * sizeof(float));
  memcpy(va, s.va, s.nb * sizeof(float));
  update8(&s, &HP, false, 5, 1.0f);
  int rc = 0;
  if (memcmp(mc, s.mc, n) || memcmp(vc, s.vc, n)) rc = zo_test_fail("zero gradient changed the codes");
  for (size_t b = 0; b < s.nb && !rc; b++) {
    const double wm = (double)ma[b] * HP.beta1, wv = (double)va[b] * HP.beta2;
    if (!(fabs(s.ma[b] - wm) <= 2.0 * FLT_EPSILON * wm) || !(fabs(s.va[b] - wv) <= 2.0 * FLT_EPSILON * wv))
      rc = zo_test_fail("block %zu: absmax %g, %g; want %g, %g", b, (double)s.ma[b], (double)s.va[b], wm, wv);
  }
  for (size_t i = 0; i < n && !rc; i++)
    if (!isfinite(s.p[i])) rc = zo_test_fail("p[%zu] = %g", i, (double)s.p[i]);
  if (!rc && !state8_intact(&s)) rc = zo_test_fail("write outside a buffer");
  free(mc);
  free(vc);
  free(ma);
  free(va);
  state8_free(&s);
  return rc;
}

/* A block with zero state and zero gradient keeps absmax 0 (never 0/0) and
 * its zero codes; p only decays. Other blocks update normally. */
static int test_update_zero_block(void) {
  const size_t n = 5 * 256 + 17, block = 256;
  struct state8 s;
  zo_rng_seed(51);
  state8_init(&s, n, block);
  float *p0 = malloc(n * sizeof(float));
  if (!p0) exit(1);
  int rc = 0;
  for (long t = 1; t <= 3 && !rc; t++) {
    fill_grad(&s);
    for (size_t i = 256; i < 512; i++) s.g[i] = 0.0f; /* block 1 */
    for (size_t i = 5 * 256; i < n; i++) s.g[i] = 0.0f; /* the tail block */
    memcpy(p0, s.p, n * sizeof(float));
    update8(&s, &HP, true, t, 1.0f);
    const float keep = (float)(1.0 - (double)HP.lr * (double)HP.weight_decay);
    for (size_t b = 1; b < s.nb && !rc; b += 4) {
      if (s.ma[b] != 0.0f || s.va[b] != 0.0f)
        rc = zo_test_fail("t=%ld: zero block %zu absmax %g, %g", t, b, (double)s.ma[b], (double)s.va[b]);
      for (size_t i = b * block; i < n && i < (b + 1) * block && !rc; i++)
        if (s.mc[i] != ZO_ADAMW8BIT_M_ZERO_CODE || s.vc[i] != ZO_ADAMW8BIT_V_ZERO_CODE || s.p[i] != p0[i] * keep)
          rc = zo_test_fail("t=%ld: zero block element %zu: codes %d %d, p %a, want %a", t, i, s.mc[i], s.vc[i],
                    (double)s.p[i], (double)(p0[i] * keep));
    }
    for (size_t b = 0; b < s.nb && !rc; b++)
      if (!isfinite(s.ma[b]) || !isfinite(s.va[b]) || ((b == 0 || b == 2) && !(s.ma[b] > 0.0f && s.va[b] > 0.0f)))
        rc = zo_test_fail("t=%ld: block %zu absmax %g, %g", t, b, (double)s.ma[b], (double)s.va[b]);
  }
  if (!rc && !state8_intact(&s)) rc = zo_test_fail("write outside a buffer");
  free(p0);
  state8_free(&s);
  return rc;
}

/* Gradients over 40 orders of magnitude, subnormals and zeros, 200 steps:
 * nothing becomes NaN or infinite. */
static int test_update_nan_free(void) {
  static const size_t blocks[] = {256, 64, 1};
  for (size_t k = 0; k < sizeof blocks / sizeof blocks[0]; k++) {
    const size_t n = 4099;
    struct state8 s;
    zo_rng_seed(61 + k);
    state8_init(&s, n, blocks[k]);
    float *m = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
    if (!m || !v) exit(1);
    int rc = 0;
    for (long t = 1; t <= 200 && !rc; t++) {
      for (size_t i = 0; i < n; i++) {
        const uint64_t u = zo_rng_u64() % 8;
        s.g[i] = u == 0 ? 0.0f : u == 1 ? (float)(1e-40 * zo_rng_normal()) : rng_grad(-30.0, 6.0);
        if ((i / blocks[k]) % 5 == (size_t)t % 5) s.g[i] = 0.0f; /* whole blocks go quiet */
      }
      update8(&s, &HP, true, t, t % 3 ? 1.0f : 1e-3f);
      zo_adamw8bit_dequantize(m, s.mc, s.ma, n, s.block, ZO_QMAP_SIGNED);
      zo_adamw8bit_dequantize(v, s.vc, s.va, n, s.block, ZO_QMAP_UNSIGNED);
      for (size_t i = 0; i < n && !rc; i++)
        if (!isfinite(s.p[i]) || !isfinite(m[i]) || !isfinite(v[i]) || v[i] < 0.0f)
          rc = zo_test_fail("block %zu t=%ld: element %zu: p %g m %g v %g", blocks[k], t, i, (double)s.p[i], (double)m[i],
                    (double)v[i]);
    }
    if (!rc && !state8_intact(&s)) rc = zo_test_fail("write outside a buffer");
    free(m);
    free(v);
    state8_free(&s);
    if (rc) return rc;
  }
  return 0;
}

/* A NaN gradient poisons its parameter and its block's absmax, nothing else. */
static int test_update_nan_propagates(void) {
  const size_t n = 1024, block = 256;
  struct state8 s;
  zo_rng_seed(71);
  state8_init(&s, n, block);
  fill_grad(&s);
  s.g[300] = NAN;
  update8(&s, &HP, true, 1, 1.0f);
  if (!isnan(s.p[300]) || !isnan(s.ma[1]) || !isnan(s.va[1])) return zo_test_fail("NaN gradient not propagated");
  for (size_t i = 0; i < n; i++)
    if (i != 300 && !isfinite(s.p[i])) return zo_test_fail("p[%zu] = %g", i, (double)s.p[i]);
  if (isnan(s.ma[0]) || isnan(s.ma[2]) || isnan(s.va[3])) return zo_test_fail("NaN leaked into another block");
  state8_free(&s);
  return 0;
}

/* Block-aligned pieces and any thread count give the one-call result. */
static int test_update_pieces_threads(void) {
  const size_t n = 200003, block = 128;
  struct state8 a, b;
  zo_rng_seed(81);
  state8_init(&a, n, block);
  zo_rng_seed(81);
  state8_init(&b, n, block);
  int rc = 0;
  const int threads = omp_get_max_threads();
#ifdef __SANITIZE_THREAD__
  const int many = threads; /* libgomp is not instrumented: TSan runs OpenMP on one thread */
#else
  const int many = threads > 1 ? threads : 2;
#endif
  for (long t = 1; t <= 4 && !rc; t++) {
    zo_rng_seed(90 + (uint64_t)t);
    fill_grad(&a);
    memcpy(b.g, a.g, n * sizeof(float));
    omp_set_num_threads(1);
    update8(&a, &HP, true, t, 0.9f);
    omp_set_num_threads(many);
    static const size_t cuts[] = {0, 128 * 3, 128 * 300, 128 * 301, 128 * 1000, 200003};
    for (size_t c = 0; c + 1 < sizeof cuts / sizeof cuts[0]; c++) {
      const size_t lo = cuts[c], len = cuts[c + 1] - lo;
      zo_adamw8bit_update(b.p + lo, b.g + lo, b.mc + lo, b.ma + lo / block, b.vc + lo, b.va + lo / block, len, block,
                          &HP, true, t, 0.9f);
    }
    omp_set_num_threads(threads);
    if (memcmp(a.p, b.p, n * sizeof(float)) || memcmp(a.mc, b.mc, n) || memcmp(a.vc, b.vc, n) ||
        memcmp(a.ma, b.ma, a.nb * sizeof(float)) || memcmp(a.va, b.va, a.nb * sizeof(float)))
      rc = zo_test_fail("t=%ld: pieces / threads differ from one call", t);
  }
  if (!rc && (!state8_intact(&a) || !state8_intact(&b))) rc = zo_test_fail("write outside a buffer");
  state8_free(&a);
  state8_free(&b);
  return rc;
}

/* The AVX-512 kernel (where the CPU has it) and the portable one agree: the
 * update over block sizes with tails (states bit for bit, p within P_ULPS),
 * and quantization bit for bit over a sweep of every float bit pattern in
 * [-1, 1] with a stride. */
static int test_kernels_identical(void) {
  const char *native = zo_adamw8bit_kernel();
  printf("  kernel: %s\n", native);
  if (strcmp(native, "portable") == 0) return 0;
  static const size_t blocks[] = {256, 100, 64, 17, 1, 4096};
  int rc = 0;
  for (size_t k = 0; k < sizeof blocks / sizeof blocks[0] && !rc; k++) {
    const size_t n = 20000 + 37 * k;
    struct state8 a, b;
    zo_rng_seed(100 + k);
    state8_init(&a, n, blocks[k]);
    zo_rng_seed(100 + k);
    state8_init(&b, n, blocks[k]);
    float *p0 = malloc(n * sizeof(float));
    if (!p0) exit(1);
    for (long t = 1; t <= 4 && !rc; t++) {
      fill_grad(&a);
      memcpy(b.g, a.g, n * sizeof(float));
      memcpy(p0, b.p, n * sizeof(float));
      update8(&a, &HP, true, t, 0.75f);
      zo_adamw8bit_force_portable(true);
      update8(&b, &HP, true, t, 0.75f);
      zo_adamw8bit_force_portable(false);
      if (memcmp(a.mc, b.mc, n) || memcmp(a.vc, b.vc, n) || memcmp(a.ma, b.ma, a.nb * sizeof(float)) ||
          memcmp(a.va, b.va, a.nb * sizeof(float)))
        rc = zo_test_fail("block %zu t=%ld: %s and portable states differ", blocks[k], t, native);
      else if (p_close(native, t, a.p, b.p, p0, n))
        rc = zo_test_fail("block %zu t=%ld: %s and portable p differ", blocks[k], t, native);
      memcpy(a.p, b.p, n * sizeof(float));
    }
    free(p0);
    state8_free(&a);
    state8_free(&b);
  }
  /* Blocks of 4096 led by 1.0 (absmax 1): x / absmax is x itself. */
  const size_t block = 4096;
  float *x = malloc(block * sizeof(float));
  uint8_t *ca = malloc(block), *cb = malloc(block);
  if (!x || !ca || !cb) exit(1);
  uint32_t bits = 0;
  const uint32_t end = 0x3F800000u, stride = 4099;
  for (int map = 0; map < 2 && !rc; map++)
    for (int sign = 0; sign < 2 && !rc; sign++)
      for (bits = (uint32_t)map; bits < end && !rc;) {
        size_t n = 1;
        x[0] = 1.0f;
        for (; n < block && bits < end; n++, bits += stride) {
          float f;
          memcpy(&f, &bits, sizeof f);
          x[n] = sign ? -f : f;
        }
        const enum zo_qmap m = map ? ZO_QMAP_UNSIGNED : ZO_QMAP_SIGNED;
        float aa, ab;
        zo_adamw8bit_quantize(ca, &aa, x, n, block, m);
        zo_adamw8bit_force_portable(true);
        zo_adamw8bit_quantize(cb, &ab, x, n, block, m);
        zo_adamw8bit_force_portable(false);
        for (size_t i = 0; i < n && !rc; i++)
          if (ca[i] != cb[i]) rc = zo_test_fail("map %d: x = %a: %s code %d, portable %d", map, (double)x[i], native, ca[i], cb[i]);
      }
  free(x);
  free(ca);
  free(cb);
  return rc;
}

static int test_state_nbytes(void) {
  if (zo_adamw8bit_n_blocks(0, 256) != 0 || zo_adamw8bit_n_blocks(256, 256) != 1 ||
      zo_adamw8bit_n_blocks(257, 256) != 2)
    return zo_test_fail("zo_adamw8bit_n_blocks");
  if (zo_adamw8bit_state_nbytes(4095, 256, ZO_ADAMW8BIT_MIN_NUMEL) != 8 * 4095)
    return zo_test_fail("below the threshold: fp32 states");
  if (zo_adamw8bit_state_nbytes(4096, 256, ZO_ADAMW8BIT_MIN_NUMEL) != 2 * 4096 + 8 * 16)
    return zo_test_fail("4096 elements, block 256");
  if (zo_adamw8bit_state_nbytes(5000, 256, ZO_ADAMW8BIT_MIN_NUMEL) != 2 * 5000 + 8 * 20)
    return zo_test_fail("5000 elements, block 256");
  return 0;
}

int main(void) {
  static const struct zo_test tests[] = {
      ZO_TEST(maps),
      ZO_TEST(quantize_exact),
      ZO_TEST(roundtrip_bound),
      ZO_TEST(update_reference),
      ZO_TEST(update_composition),
      ZO_TEST(update_t1),
      ZO_TEST(update_zero_grad),
      ZO_TEST(update_zero_block),
      ZO_TEST(update_nan_free),
      ZO_TEST(update_nan_propagates),
      ZO_TEST(update_pieces_threads),
      ZO_TEST(kernels_identical),
      ZO_TEST(state_nbytes),
  };
  return ZO_TEST_MAIN(tests);
}
