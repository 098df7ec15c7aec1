/* AdamW with block-wise 8-bit states on the CPU (zo/adamw8bit.h; the CPU
 * backend's adamw8bit_update op): quantization to the nearest entry of the
 * dynamic maps (built in kernels/qmap.c), and the fused update (dequantize,
 * AdamW in fp32, requantize against the block's new absmax, write p), one
 * pass per block, OpenMP over blocks and SIMD within one. Two kernels:
 * portable C, which is zo_adamw_update's IEEE formula and whose quantization
 * is one lookup in a table indexed by the top 16 bits of |x| (each bucket
 * holds at most one decision threshold), and AVX-512, which has no fast
 * gather here: table lookups by byte permutes, the code from the map's
 * decade structure in arithmetic, and the table path for the rare lanes
 * within rounding of a threshold. Their m, v, codes and absmax are
 * bit-identical; the AVX-512 p takes sqrt and the division from rsqrt14 and
 * rcp14 with a Newton step each (an IEEE sqrt and two divisions were a third
 * of its time), a few ulps from the formula's. Nothing here allocates
 * (static tables, built on first use). */
#include "zo/adamw8bit.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Below this many elements a parallel region costs more than it saves. */
#define ZO_ADAMW8BIT_PAR_MIN ((size_t)1 << 15)

/* As in offload/adamw.c: contraction off so that the update rounds exactly
 * where zo_adamw_update does; its two fusions are written as fmaf. */
#if defined(__clang__)
#define ZO_FP_CONTRACT_OFF
#else
#define ZO_FP_CONTRACT_OFF __attribute__((optimize("fp-contract=off")))
#endif

/* Quantization table: bucket k covers the non-negative floats whose bits
 * shifted right by 16 equal lut_lo + k. Entry = (thresholds below the bucket)
 * << 17 | (low 16 bits of the one threshold inside the bucket, or 0x10000 when
 * none). A threshold is the smallest float above the exact midpoint of two
 * neighbouring map values, so "x >= threshold" is "x nearer the upper value,
 * ties to the lower". Bucket lo holds no threshold and absorbs everything
 * smaller; the bucket of 1.0 absorbs everything larger (NaN included). */
#define LUT_MAX 4096

/* The AVX-512 kernel's view of the same decisions. The positive map values
 * come in 7 decades of evenly spaced means (plus 0 and 1); D_0..D_7 are the
 * thresholds at the decade edges (0 | decade 0 | ... | decade 6 | 1), q =
 * #{D_k <= |x|}, and in region q the count of thresholds below |x| is
 * floor(|x| s[q] + o[q]) capped at cmax[q], exact except within rounding of
 * an inner threshold, where the lookup table decides: lanes whose floor moves
 * within +-FAST_DELTA (checked against the table on every float in [-1, 1]:
 * 2^-14 suffices, 2^-16 does not). */
#define FAST_OCT_MIN 96 /* octaves below this exponent hold no threshold */
#define FAST_DELTA 0x1.0p-13f
#define FAST_PREFETCH 2048 /* elements ahead */

struct qtable {
  float values[256];     /* the map, increasing (zo_qmap_values) */
  uint32_t lut[LUT_MAX]; /* (lut_n) */
  uint32_t lut_lo, lut_n;
  uint8_t planes[4][256] __attribute__((aligned(64))); /* byte k of values[c] */
  uint32_t oct_q[16] __attribute__((aligned(64)));     /* by octave pair: #{D_k below the pair} */
  uint32_t oct_d[16] __attribute__((aligned(64)));     /* bits of the D_k inside the pair, else +inf */
  float fs[16] __attribute__((aligned(64)));           /* by q */
  float fo[16] __attribute__((aligned(64)));           /* by q */
  uint32_t fcmax[16] __attribute__((aligned(64)));     /* by q */
};

/* vpermb order that makes the byte-plane interleave come out in element order. */
static uint8_t plane_perm[64] __attribute__((aligned(64)));

static struct qtable qt_signed, qt_unsigned;
static pthread_once_t qt_once = PTHREAD_ONCE_INIT;

static uint32_t float_bits(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  return b;
}

/* The AVX-512 tables from the thresholds thr[0..n_thr) and the decade sizes
 * (means per decade: 2^d signed, 2^(d+1) unsigned). */
static void build_fast(struct qtable *q, const uint32_t *thr, int n_thr, bool is_signed) {
  uint32_t d_bits[8];
  int first = 0; /* thresholds below the decade's first mean */
  for (int d = 0; d < 7; d++) {
    const int n_d = is_signed ? 1 << d : 2 << d;
    d_bits[d] = thr[first];
    const double scale = pow(10.0, 6 - d) * n_d / 0.9, base = first + 1;
    q->fs[d + 1] = (float)scale;
    q->fo[d + 1] = (float)(base - 0.1 * n_d / 0.9);
    q->fcmax[d + 1] = (uint32_t)(first + n_d);
    first += n_d;
  }
  ZO_ASSERT(first == n_thr - 1);
  d_bits[7] = thr[first];
  for (int k = 0; k < 16; k++) {
    if (k >= 1 && k <= 7) continue;
    const int c = k == 0 ? 0 : n_thr; /* below D_0; at or above D_7 (9: NaN) */
    q->fs[k] = 0.0f;
    q->fo[k] = (float)c + 0.5f;
    q->fcmax[k] = (uint32_t)c;
  }
  for (int e = 0; e < 16; e++) {
    const uint32_t oct = (uint32_t)(FAST_OCT_MIN + 2 * e), lo = oct << 23, hi = lo + (2u << 23);
    uint32_t below = 0, inside = 0x7F800000u;
    for (int k = 0; k < 8; k++) {
      below += d_bits[k] < lo;
      if (d_bits[k] >= lo && d_bits[k] < hi) {
        ZO_ASSERT(inside == 0x7F800000u); /* one decade edge per octave pair */
        inside = d_bits[k];
      }
    }
    q->oct_q[e] = below;
    q->oct_d[e] = inside;
  }
  ZO_ASSERT(d_bits[0] >> 23 >= FAST_OCT_MIN);
  for (int c = 0; c < 256; c++)
    for (int k = 0; k < 4; k++) q->planes[k][c] = (uint8_t)(float_bits(q->values[c]) >> (8 * k));
}

/* The lookup table from map's thresholds (zo_qmap_thresholds), as bits. */
static void build_lut(struct qtable *q, enum zo_qmap map, bool is_signed) {
  float thr_f[255];
  uint32_t thr[256];
  const int n_thr = zo_qmap_thresholds(map, thr_f);
  for (int k = 0; k < n_thr; k++) thr[k] = float_bits(thr_f[k]);
  q->lut_lo = (thr[0] >> 16) - 1;
  q->lut_n = (float_bits(1.0f) >> 16) - q->lut_lo + 1;
  ZO_ASSERT(q->lut_n <= LUT_MAX);
  int below = 0;
  for (uint32_t k = 0; k < q->lut_n; k++) {
    const uint32_t start = (q->lut_lo + k) << 16, end = start + 0x10000;
    while (below < n_thr && thr[below] < start) below++;
    uint32_t low = 0x10000;
    if (below < n_thr && thr[below] < end) {
      low = thr[below] & 0xFFFF;
      ZO_ASSERT(below + 1 >= n_thr || thr[below + 1] >= end); /* one threshold per bucket */
    }
    q->lut[k] = (uint32_t)below << 17 | low;
  }
  build_fast(q, thr, n_thr, is_signed);
}

static void build_tables(void) {
  memcpy(qt_signed.values, zo_qmap_values(ZO_QMAP_SIGNED), sizeof qt_signed.values);
  memcpy(qt_unsigned.values, zo_qmap_values(ZO_QMAP_UNSIGNED), sizeof qt_unsigned.values);
  build_lut(&qt_signed, ZO_QMAP_SIGNED, true);
  build_lut(&qt_unsigned, ZO_QMAP_UNSIGNED, false);
  for (int l = 0; l < 4; l++)
    for (int a = 0; a < 4; a++)
      for (int j = 0; j < 4; j++) plane_perm[16 * l + 4 * a + j] = (uint8_t)(16 * a + 4 * l + j);
}

static void tables_init(void) { ZO_ASSERT(pthread_once(&qt_once, build_tables) == 0); }

/* ---- kernels --------------------------------------------------------------
 * Both round exactly where zo_adamw_update does (contraction off: gcc would
 * otherwise fuse the intrinsics' multiplies and adds too). A block is
 * quantized against x * (1 / absmax): one division per block, not per
 * element; a subnormal absmax, whose reciprocal overflows, divides. */

/* The step's scalars, formed as zo_adamw_update forms them. */
struct step_consts {
  float decay, b1, c1, b2, c2, neg_step, bc2_sqrt, inv_bc2_sqrt, eps, grad_scale;
};

typedef void (*update_block_fn)(float *restrict p, const float *restrict g, uint8_t *restrict mc,
                                float *restrict ma, uint8_t *restrict vc, float *restrict va, size_t len,
                                const struct step_consts *k);
typedef void (*quantize_block_fn)(uint8_t *restrict code, const float *restrict x, size_t len, float amax,
                                  const struct qtable *q, bool is_signed);

/* Thresholds at or below |r|, r given by its bits b. */
static inline uint32_t lut_count(const uint32_t *lut, uint32_t lo, uint32_t n, uint32_t b) {
  const uint32_t a = b & 0x7FFFFFFFu;
  uint32_t k = a >> 16;
  k = k < lo ? 0 : k - lo;
  k = k < n ? k : n - 1;
  const uint32_t e = lut[k];
  return (e >> 17) + ((a & 0xFFFFu) >= (e & 0x1FFFFu));
}

static inline uint8_t quant_lut(const struct qtable *q, bool is_signed, float r) {
  const uint32_t b = float_bits(r);
  const uint32_t c = lut_count(q->lut, q->lut_lo, q->lut_n, b);
  if (!is_signed) return (uint8_t)(b >> 31 ? 0 : c);
  return (uint8_t)(b >> 31 ? ZO_ADAMW8BIT_M_ZERO_CODE - (c < 127 ? c : 127) : ZO_ADAMW8BIT_M_ZERO_CODE + c);
}

/* The factor that takes a block of absmax amax (1 for an all-zero block) to
 * [-1, 1]; false when it overflows (subnormal amax) and the block divides. */
static inline bool block_scale(float amax, float *inv) {
  *inv = 1.0f / amax;
  return *inv <= 3.0e38f;
}

static void quantize_block_portable(uint8_t *restrict code, const float *restrict x, size_t len, float amax,
                                    const struct qtable *q, bool is_signed) {
  float inv;
  if (!block_scale(amax, &inv)) {
    for (size_t i = 0; i < len; i++) code[i] = quant_lut(q, is_signed, x[i] / amax);
    return;
  }
  const uint32_t *lut = q->lut, lo = q->lut_lo, n = q->lut_n;
  if (is_signed) {
#pragma omp simd
    for (size_t i = 0; i < len; i++) {
      const uint32_t b = float_bits(x[i] * inv), c = lut_count(lut, lo, n, b);
      code[i] = (uint8_t)(b >> 31 ? ZO_ADAMW8BIT_M_ZERO_CODE - (c < 127 ? c : 127) : ZO_ADAMW8BIT_M_ZERO_CODE + c);
    }
  } else {
#pragma omp simd
    for (size_t i = 0; i < len; i++) {
      const uint32_t b = float_bits(x[i] * inv), c = lut_count(lut, lo, n, b);
      code[i] = (uint8_t)(b >> 31 ? 0 : c);
    }
  }
}

/* One block: the AdamW update into p and an fp32 scratch (pass 1, which also
 * finds the new absmax), then the requantization (pass 2). The scratch stays
 * in L1; p, g and the codes are touched once each. */
ZO_FP_CONTRACT_OFF
static void update_block_portable(float *restrict p, const float *restrict g, uint8_t *restrict mc,
                                  float *restrict ma, uint8_t *restrict vc, float *restrict va, size_t len,
                                  const struct step_consts *k) {
  float mt[ZO_ADAMW8BIT_BLOCK_MAX] __attribute__((aligned(64)));
  float vt[ZO_ADAMW8BIT_BLOCK_MAX] __attribute__((aligned(64)));
  const float *restrict qs = qt_signed.values, *restrict qu = qt_unsigned.values;
  const float am = *ma, av = *va;
  const float decay = k->decay, b1 = k->b1, c1 = k->c1, b2 = k->b2, c2 = k->c2;
  const float neg_step = k->neg_step, bc2_sqrt = k->bc2_sqrt, eps = k->eps, s = k->grad_scale;
  float mmax = 0.0f, vmax = 0.0f;
  int nan = 0;
#pragma omp simd reduction(max : mmax, vmax) reduction(| : nan)
  for (size_t i = 0; i < len; i++) {
    const float gi = g[i] * s;
    const float pi = p[i] * decay;
    const float mi = fmaf(gi, c1, (qs[mc[i]] * am) * b1);
    const float vi = fmaf(c2 * gi, gi, (qu[vc[i]] * av) * b2);
    const float denom = sqrtf(vi) / bc2_sqrt + eps;
    p[i] = pi + (neg_step * mi) / denom;
    mt[i] = mi;
    vt[i] = vi;
    const float a = fabsf(mi);
    mmax = a > mmax ? a : mmax;
    vmax = vi > vmax ? vi : vmax;
    nan |= (mi != mi) | (vi != vi);
  }
  quantize_block_portable(mc, mt, len, mmax > 0.0f ? mmax : 1.0f, &qt_signed, true);
  quantize_block_portable(vc, vt, len, vmax > 0.0f ? vmax : 1.0f, &qt_unsigned, false);
  *ma = nan ? NAN : mmax;
  *va = nan ? NAN : vmax;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define ZO_HAVE_AVX512_KERNEL 1
#define ZO_AVX512                                                                       \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,prfchw"),              \
                 optimize("fp-contract=off")))

static inline __mmask16 tail16(size_t left) {
  return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

static inline __mmask64 tail64(size_t left) {
  return left >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
}

/* values[c] for 64 codes, as 4 x 16 floats in element order: each byte of
 * the float from a 256-byte plane (two 128-byte permutes and a blend), then
 * the bytes interleaved; plane_perm pre-orders the codes so that the
 * interleave, which works within 128-bit lanes, ends in element order. */
ZO_AVX512
static inline void dequant64(__m512i codes, const struct qtable *q, __m512 out[4]) {
  const __m512i cp = _mm512_permutexvar_epi8(_mm512_load_si512(plane_perm), codes);
  const __mmask64 upper = _mm512_movepi8_mask(cp);
  __m512i pl[4];
  for (int k = 0; k < 4; k++) {
    const __m512i *t = (const __m512i *)q->planes[k];
    const __m512i lo = _mm512_permutex2var_epi8(_mm512_load_si512(t + 0), cp, _mm512_load_si512(t + 1));
    const __m512i hi = _mm512_permutex2var_epi8(_mm512_load_si512(t + 2), cp, _mm512_load_si512(t + 3));
    pl[k] = _mm512_mask_blend_epi8(upper, lo, hi);
  }
  const __m512i w01lo = _mm512_unpacklo_epi8(pl[0], pl[1]), w01hi = _mm512_unpackhi_epi8(pl[0], pl[1]);
  const __m512i w23lo = _mm512_unpacklo_epi8(pl[2], pl[3]), w23hi = _mm512_unpackhi_epi8(pl[2], pl[3]);
  out[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(w01lo, w23lo));
  out[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(w01lo, w23lo));
  out[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(w01hi, w23hi));
  out[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(w01hi, w23hi));
}

/* The count of thresholds at or below the value a (bits; a negative value,
 * read as a signed integer, falls in the empty bottom pair of octaves and
 * counts 0); *unsure gets the lanes the table must decide. The pairs of
 * octaves from FAST_OCT_MIN to 2^1 are 16, one vpermd each: (a >> 24) mod 16
 * with a >> 24 clamped to [FAST_OCT_MIN / 2, 63]. */
ZO_AVX512
static inline __m512i count16(__m512i a, const struct qtable *q, __mmask16 *unsure) {
  const __m512i pair = _mm512_min_epi32(_mm512_max_epi32(_mm512_srai_epi32(a, 24), _mm512_set1_epi32(FAST_OCT_MIN / 2)),
                                        _mm512_set1_epi32(63)); /* 2 and above (NaN too) count as 1 */
  const __m512i qlo = _mm512_permutexvar_epi32(pair, _mm512_load_si512(q->oct_q));
  const __m512i dn = _mm512_permutexvar_epi32(pair, _mm512_load_si512(q->oct_d));
  const __m512i reg = _mm512_mask_add_epi32(qlo, _mm512_cmpge_epi32_mask(a, dn), qlo, _mm512_set1_epi32(1));
  const __m512 y = _mm512_fmadd_ps(_mm512_castsi512_ps(a), _mm512_permutexvar_ps(reg, _mm512_load_ps(q->fs)),
                                   _mm512_permutexvar_ps(reg, _mm512_load_ps(q->fo)));
  const __m512 delta = _mm512_set1_ps(FAST_DELTA);
  const __m512i below = _mm512_cvttps_epi32(_mm512_sub_ps(y, delta));
  const __m512i above = _mm512_cvttps_epi32(_mm512_add_ps(y, delta));
  *unsure = _mm512_cmpneq_epi32_mask(below, above);
  return _mm512_min_epu32(above, _mm512_permutexvar_epi32(reg, _mm512_load_si512(q->fcmax)));
}

/* Signed map: 127 +- count as int32, -1 for 127 - 128 (the packs saturate it to 0). */
ZO_AVX512
static inline __m512i quant16_m(__m512 r, __mmask16 *unsure) {
  const __m512i b = _mm512_castps_si512(r);
  const __m512i c = count16(_mm512_and_si512(b, _mm512_set1_epi32(0x7FFFFFFF)), &qt_signed, unsure);
  const __m512i s = _mm512_mask_sub_epi32(c, _mm512_movepi32_mask(b), _mm512_setzero_si512(), c);
  return _mm512_add_epi32(s, _mm512_set1_epi32(ZO_ADAMW8BIT_M_ZERO_CODE));
}

/* Unsigned map: negative values (and -NaN) count 0. */
ZO_AVX512
static inline __m512i quant16_v(__m512 r, __mmask16 *unsure) {
  return count16(_mm512_castps_si512(r), &qt_unsigned, unsure);
}

/* 64 codes from four int32 vectors: two saturating packs and a dword transpose. */
ZO_AVX512
static inline __m512i pack64(const __m512i c[4]) {
  const __m512i transpose = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  const __m512i bytes = _mm512_packus_epi16(_mm512_packus_epi32(c[0], c[1]), _mm512_packus_epi32(c[2], c[3]));
  return _mm512_permutexvar_epi32(transpose, bytes);
}

ZO_AVX512
static inline __m128i pack16(__m512i c) {
  return _mm512_castsi512_si128(_mm512_permutexvar_epi32(
      _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0),
      _mm512_packus_epi16(_mm512_packus_epi32(c, c), _mm512_setzero_si512())));
}

/* The lanes of 16 elements from i the table decides. */
static inline void fixup16(uint8_t *code, const float *x, size_t i, __mmask16 un, float inv,
                           const struct qtable *q, bool is_signed) {
  for (; un; un &= (__mmask16)(un - 1)) {
    const size_t j = i + (size_t)__builtin_ctz(un);
    code[j] = quant_lut(q, is_signed, x[j] * inv);
  }
}

/* Quantizes one map's x (len) against inv = 1 / absmax; 64 at a time with
 * one plain store (AMD's vpmovdb and masked stores are slow). */
ZO_AVX512
static inline void quantize_avx512(uint8_t *restrict code, const float *restrict x, size_t len, float inv,
                                   bool is_signed) {
  const struct qtable *q = is_signed ? &qt_signed : &qt_unsigned;
  const __m512 vinv = _mm512_set1_ps(inv);
  size_t i0 = 0;
  for (; i0 + 64 <= len; i0 += 64) {
    __mmask16 u[4];
    __m512i c[4];
    for (int h = 0; h < 4; h++) {
      const __m512 r = _mm512_mul_ps(_mm512_loadu_ps(x + i0 + 16 * h), vinv);
      c[h] = is_signed ? quant16_m(r, &u[h]) : quant16_v(r, &u[h]);
    }
    _mm512_storeu_si512(code + i0, pack64(c));
    if (__builtin_expect((u[0] | u[1] | u[2] | u[3]) != 0, 0))
      for (int h = 0; h < 4; h++) fixup16(code, x, i0 + 16 * (size_t)h, u[h], inv, q, is_signed);
  }
  for (size_t i = i0; i < len; i += 16) {
    __mmask16 unsure;
    if (len - i >= 16) {
      const __m512 r = _mm512_mul_ps(_mm512_loadu_ps(x + i), vinv);
      const __m512i c = is_signed ? quant16_m(r, &unsure) : quant16_v(r, &unsure);
      _mm_storeu_si128((__m128i *)(code + i), pack16(c));
    } else {
      const __mmask16 msk = tail16(len - i);
      const __m512 r = _mm512_mul_ps(_mm512_maskz_loadu_ps(msk, x + i), vinv);
      const __m512i c = is_signed ? quant16_m(r, &unsure) : quant16_v(r, &unsure);
      _mm_mask_storeu_epi8(code + i, msk, pack16(c));
      unsure &= msk;
    }
    fixup16(code, x, i, unsure, inv, q, is_signed);
  }
}

/* Both maps of one block, m and v interleaved for more independent work. */
ZO_AVX512
static inline void quantize_mv_avx512(uint8_t *restrict mc, const float *restrict mt, float minv,
                                      uint8_t *restrict vc, const float *restrict vt, float vinv_s, size_t len) {
  const __m512 minv_v = _mm512_set1_ps(minv), vinv = _mm512_set1_ps(vinv_s);
  size_t i0 = 0;
  for (; i0 + 64 <= len; i0 += 64) {
    __mmask16 um[4], uv[4];
    __m512i cm[4], cv[4];
    for (int h = 0; h < 4; h++) {
      cm[h] = quant16_m(_mm512_mul_ps(_mm512_load_ps(mt + i0 + 16 * h), minv_v), &um[h]);
      cv[h] = quant16_v(_mm512_mul_ps(_mm512_load_ps(vt + i0 + 16 * h), vinv), &uv[h]);
    }
    _mm512_storeu_si512(mc + i0, pack64(cm));
    _mm512_storeu_si512(vc + i0, pack64(cv));
    if (__builtin_expect((um[0] | um[1] | um[2] | um[3] | uv[0] | uv[1] | uv[2] | uv[3]) != 0, 0))
      for (int h = 0; h < 4; h++) {
        fixup16(mc, mt, i0 + 16 * (size_t)h, um[h], minv, &qt_signed, true);
        fixup16(vc, vt, i0 + 16 * (size_t)h, uv[h], vinv_s, &qt_unsigned, false);
      }
  }
  if (i0 < len) {
    quantize_avx512(mc + i0, mt + i0, len - i0, minv, true);
    quantize_avx512(vc + i0, vt + i0, len - i0, vinv_s, false);
  }
}

ZO_AVX512
static void quantize_block_avx512(uint8_t *restrict code, const float *restrict x, size_t len, float amax,
                                  const struct qtable *q, bool is_signed) {
  float inv;
  if (!block_scale(amax, &inv)) {
    quantize_block_portable(code, x, len, amax, q, is_signed);
    return;
  }
  if (is_signed)
    quantize_avx512(code, x, len, inv, true);
  else
    quantize_avx512(code, x, len, inv, false);
}

/* The AdamW update of 16 elements: p written, the new m and v returned. */
struct avx512_consts {
  __m512 decay, b1, c1, b2, c2, neg_step, inv_bc2_sqrt, half_inv_bc2_sqrt, eps, s;
};

ZO_AVX512
static inline void update16(float *p, const float *g, __m512 m0, __m512 v0, const struct avx512_consts *k,
                            __mmask16 msk, __m512 *m, __m512 *v) {
  const bool full = msk == (__mmask16)0xFFFF;
  const __m512 gi = _mm512_mul_ps(full ? _mm512_loadu_ps(g) : _mm512_maskz_loadu_ps(msk, g), k->s);
  const __m512 pi = _mm512_mul_ps(full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(msk, p), k->decay);
  const __m512 mi = _mm512_fmadd_ps(gi, k->c1, _mm512_mul_ps(m0, k->b1));
  const __m512 vi = _mm512_fmadd_ps(_mm512_mul_ps(k->c2, gi), gi, _mm512_mul_ps(v0, k->b2));
  /* sqrt(v) = v y + (v y) r / 2 with y = rsqrt14(v), r = 1 - v y^2 (one
   * Newton step; v = 0 masked, rsqrt14(0) being inf), folded into
   * denom = sqrt(v) / bc2_sqrt + eps; 1 / denom from rcp14 and one Newton
   * step. v = +inf (a gradient whose square overflows) gives a NaN p where
   * the formula leaves p; its block's states are lost either way. */
  const __m512 y = _mm512_maskz_rsqrt14_ps(_mm512_test_epi32_mask(_mm512_castps_si512(vi), _mm512_castps_si512(vi)), vi);
  const __m512 s0 = _mm512_mul_ps(vi, y);
  const __m512 r = _mm512_fnmadd_ps(s0, s0, vi);
  const __m512 denom = _mm512_fmadd_ps(s0, k->inv_bc2_sqrt, _mm512_fmadd_ps(_mm512_mul_ps(y, r), k->half_inv_bc2_sqrt, k->eps));
  const __m512 d0 = _mm512_rcp14_ps(denom);
  const __m512 d1 = _mm512_fmadd_ps(d0, _mm512_fnmadd_ps(denom, d0, _mm512_set1_ps(1.0f)), d0);
  const __m512 pn = _mm512_fmadd_ps(_mm512_mul_ps(k->neg_step, mi), d1, pi);
  if (full)
    _mm512_storeu_ps(p, pn);
  else
    _mm512_mask_storeu_ps(p, msk, pn);
  *m = mi;
  *v = vi;
}

/* Pass 1's running block maxima and NaN lanes. */
struct pass1_acc {
  __m512 mmax, vmax;
  __mmask16 nan;
};

/* Pass 1 over the elements i0 .. i0 + min(left, 64): dequantize, update p,
 * keep the new m and v in mt, vt. With left >= 64 (the main loop: a
 * constant once inlined) nothing is masked. */
ZO_AVX512
static inline void pass1_group64(float *restrict p, const float *restrict g, const uint8_t *restrict mc,
                                 const uint8_t *restrict vc, float *restrict mt, float *restrict vt, size_t i0,
                                 size_t left, __m512 am, __m512 av, const struct avx512_consts *kv,
                                 struct pass1_acc *acc) {
  /* Pass 2 is pure arithmetic, during which the hardware prefetchers stall:
   * fetch ahead (past this block: the caller's next blocks are contiguous,
   * and a prefetch never faults). */
  for (int l = 0; l < 4; l++) {
    __builtin_prefetch(p + i0 + FAST_PREFETCH + 16 * l, 1, 3);
    __builtin_prefetch(g + i0 + FAST_PREFETCH + 16 * l, 0, 3);
  }
  __builtin_prefetch(mc + i0 + FAST_PREFETCH, 1, 3);
  __builtin_prefetch(vc + i0 + FAST_PREFETCH, 1, 3);
  const bool full = left >= 64;
  const __mmask64 m64 = tail64(left);
  __m512 mq[4], vq[4];
  dequant64(full ? _mm512_loadu_si512(mc + i0) : _mm512_maskz_loadu_epi8(m64, mc + i0), &qt_signed, mq);
  dequant64(full ? _mm512_loadu_si512(vc + i0) : _mm512_maskz_loadu_epi8(m64, vc + i0), &qt_unsigned, vq);
  for (int h = 0; h < 4 && 16 * (size_t)h < left; h++) {
    const size_t i = i0 + 16 * (size_t)h;
    const __mmask16 msk = tail16(left - 16 * (size_t)h);
    __m512 mi, vi;
    update16(p + i, g + i, _mm512_mul_ps(mq[h], am), _mm512_mul_ps(vq[h], av), kv, msk, &mi, &vi);
    _mm512_store_ps(mt + i, mi);
    _mm512_store_ps(vt + i, vi);
    if (full) {
      acc->mmax = _mm512_max_ps(acc->mmax, _mm512_abs_ps(mi));
      acc->vmax = _mm512_max_ps(acc->vmax, vi);
      acc->nan |= _mm512_cmp_ps_mask(mi, vi, _CMP_UNORD_Q);
    } else {
      acc->mmax = _mm512_mask_max_ps(acc->mmax, msk, acc->mmax, _mm512_abs_ps(mi));
      acc->vmax = _mm512_mask_max_ps(acc->vmax, msk, acc->vmax, vi);
      acc->nan |= _mm512_mask_cmp_ps_mask(msk, mi, vi, _CMP_UNORD_Q);
    }
  }
}

ZO_AVX512
static void update_block_avx512(float *restrict p, const float *restrict g, uint8_t *restrict mc,
                                float *restrict ma, uint8_t *restrict vc, float *restrict va, size_t len,
                                const struct step_consts *k) {
  float mt[ZO_ADAMW8BIT_BLOCK_MAX] __attribute__((aligned(64)));
  float vt[ZO_ADAMW8BIT_BLOCK_MAX] __attribute__((aligned(64)));
  const __m512 am = _mm512_set1_ps(*ma), av = _mm512_set1_ps(*va);
  const struct avx512_consts kv = {
      .decay = _mm512_set1_ps(k->decay), .b1 = _mm512_set1_ps(k->b1), .c1 = _mm512_set1_ps(k->c1),
      .b2 = _mm512_set1_ps(k->b2), .c2 = _mm512_set1_ps(k->c2), .neg_step = _mm512_set1_ps(k->neg_step),
      .inv_bc2_sqrt = _mm512_set1_ps(k->inv_bc2_sqrt), .half_inv_bc2_sqrt = _mm512_set1_ps(0.5f * k->inv_bc2_sqrt),
      .eps = _mm512_set1_ps(k->eps), .s = _mm512_set1_ps(k->grad_scale)};
  struct pass1_acc acc = {_mm512_setzero_ps(), _mm512_setzero_ps(), 0};
  size_t i0 = 0;
  for (; i0 + 64 <= len; i0 += 64) pass1_group64(p, g, mc, vc, mt, vt, i0, 64, am, av, &kv, &acc);
  if (i0 < len) pass1_group64(p, g, mc, vc, mt, vt, i0, len - i0, am, av, &kv, &acc);
  const __m512 mmax = acc.mmax, vmax = acc.vmax;
  const __mmask16 nan = acc.nan;
  const float mx = _mm512_reduce_max_ps(mmax), vx = _mm512_reduce_max_ps(vmax);
  const float ma1 = mx > 0.0f ? mx : 1.0f, va1 = vx > 0.0f ? vx : 1.0f;
  float minv, vinv;
  if (block_scale(ma1, &minv) && block_scale(va1, &vinv)) {
    quantize_mv_avx512(mc, mt, minv, vc, vt, vinv, len);
  } else {
    quantize_block_avx512(mc, mt, len, ma1, &qt_signed, true);
    quantize_block_avx512(vc, vt, len, va1, &qt_unsigned, false);
  }
  *ma = nan ? NAN : mx;
  *va = nan ? NAN : vx;
}
#endif

static _Atomic bool force_portable;

static bool use_avx512(void) {
#ifdef ZO_HAVE_AVX512_KERNEL
  static int have = -1; /* every thread computes the same value */
  if (__atomic_load_n(&have, __ATOMIC_RELAXED) < 0) {
    __builtin_cpu_init();
    const int h = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vbmi");
    __atomic_store_n(&have, h, __ATOMIC_RELAXED);
  }
  return __atomic_load_n(&have, __ATOMIC_RELAXED) && !force_portable;
#else
  return false;
#endif
}

const char *zo_adamw8bit_kernel(void) { return use_avx512() ? "avx512" : "portable"; }

void zo_adamw8bit_force_portable(bool portable) { force_portable = portable; }

static quantize_block_fn quantize_block(void) {
#ifdef ZO_HAVE_AVX512_KERNEL
  if (use_avx512()) return quantize_block_avx512;
#endif
  return quantize_block_portable;
}

static update_block_fn update_block(void) {
#ifdef ZO_HAVE_AVX512_KERNEL
  if (use_avx512()) return update_block_avx512;
#endif
  return update_block_portable;
}

/* ---- public functions ---------------------------------------------------- */

void zo_adamw8bit_init(uint8_t *m_code, float *m_absmax, uint8_t *v_code, float *v_absmax,
                       size_t numel, size_t block) {
  const size_t nb = zo_adamw8bit_n_blocks(numel, block);
  if (numel == 0) return;
  ZO_ASSERT(m_code != NULL && m_absmax != NULL && v_code != NULL && v_absmax != NULL);
  memset(m_code, ZO_ADAMW8BIT_M_ZERO_CODE, numel);
  memset(v_code, ZO_ADAMW8BIT_V_ZERO_CODE, numel);
  for (size_t b = 0; b < nb; b++) m_absmax[b] = v_absmax[b] = 0.0f;
}

void zo_adamw8bit_quantize(uint8_t *code, float *absmax, const float *x, size_t numel, size_t block,
                           enum zo_qmap map) {
  tables_init();
  const size_t nb = zo_adamw8bit_n_blocks(numel, block);
  if (numel == 0) return;
  ZO_ASSERT(code != NULL && absmax != NULL && x != NULL);
  const bool is_signed = map == ZO_QMAP_SIGNED;
  const struct qtable *q = is_signed ? &qt_signed : &qt_unsigned;
  const quantize_block_fn fn = quantize_block();
#pragma omp parallel for schedule(static) if (numel >= ZO_ADAMW8BIT_PAR_MIN)
  for (size_t b = 0; b < nb; b++) {
    const size_t off = b * block, len = numel - off < block ? numel - off : block;
    float amax = 0.0f;
    int nan = 0;
#pragma omp simd reduction(max : amax) reduction(| : nan)
    for (size_t i = 0; i < len; i++) {
      const float a = fabsf(x[off + i]);
      amax = a > amax ? a : amax;
      nan |= a != a;
    }
    fn(code + off, x + off, len, amax > 0.0f ? amax : 1.0f, q, is_signed);
    absmax[b] = nan ? NAN : amax;
  }
}

void zo_adamw8bit_dequantize(float *x, const uint8_t *code, const float *absmax, size_t numel,
                             size_t block, enum zo_qmap map) {
  const float *values = zo_qmap_values(map);
  const size_t nb = zo_adamw8bit_n_blocks(numel, block);
  if (numel == 0) return;
  ZO_ASSERT(code != NULL && absmax != NULL && x != NULL);
#pragma omp parallel for schedule(static) if (numel >= ZO_ADAMW8BIT_PAR_MIN)
  for (size_t b = 0; b < nb; b++) {
    const size_t off = b * block, len = numel - off < block ? numel - off : block;
    const float a = absmax[b];
#pragma omp simd
    for (size_t i = 0; i < len; i++) x[off + i] = values[code[off + i]] * a;
  }
}

void zo_adamw8bit_update(float *p, const float *g, uint8_t *m_code, float *m_absmax, uint8_t *v_code,
                         float *v_absmax, size_t n, size_t block, const struct zo_adamw_hparams *hp,
                         bool decay, long t, float grad_scale) {
  ZO_ASSERT(hp != NULL);
  ZO_ASSERT(t >= 1);
  ZO_ASSERT(block >= 1 && block <= ZO_ADAMW8BIT_BLOCK_MAX);
  if (n == 0) return;
  ZO_ASSERT(p != NULL && g != NULL && m_code != NULL && m_absmax != NULL && v_code != NULL &&
            v_absmax != NULL);
  tables_init();

  /* zo_adamw_update's scalars: Python doubles cast to float where used. */
  const double lr = hp->lr, beta1 = hp->beta1, beta2 = hp->beta2;
  const double bc1 = 1.0 - pow(beta1, (double)t);
  const double bc2 = 1.0 - pow(beta2, (double)t);
  const struct step_consts k = {
      .decay = decay ? (float)(1.0 - lr * (double)hp->weight_decay) : 1.0f,
      .b1 = hp->beta1,
      .c1 = (float)(1.0 - beta1),
      .b2 = hp->beta2,
      .c2 = (float)(1.0 - beta2),
      .neg_step = (float)(-(lr / bc1)),
      .bc2_sqrt = (float)sqrt(bc2),
      .inv_bc2_sqrt = (float)(1.0 / sqrt(bc2)),
      .eps = hp->eps,
      .grad_scale = grad_scale,
  };
  const update_block_fn fn = update_block();
  const size_t nb = zo_adamw8bit_n_blocks(n, block);
#pragma omp parallel for schedule(static) if (n >= ZO_ADAMW8BIT_PAR_MIN)
  for (size_t b = 0; b < nb; b++) {
    const size_t off = b * block, len = n - off < block ? n - off : block;
    fn(p + off, g + off, m_code + off, m_absmax + b, v_code + off, v_absmax + b, len, &k);
  }
}
