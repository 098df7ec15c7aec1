/* GEMMs over a frozen 4-bit weight (QLoRA's NF4 / FP4 base): the forward
 * and the input gradient, with no weight gradient. The weight is never
 * widened whole: threads take panels of ZO_Q4_PANEL rows (forward) or
 * columns (dx) of W, dequantize a panel into their slot-1 scratch (fp32,
 * or dt rounded once) with a 16-entry table per block (AVX2 permutes where
 * the target has them, a portable loop otherwise) and run the backend's
 * own GEMM on it (OpenBLAS sgemm single-threaded inside our team, or
 * zo_cpu_gemm's fixed 256 x 256 tiles). A panel splits the GEMM's output
 * columns, never its reduction, so every output element is summed exactly
 * as matmul_forward / matmul_backward sum it over the dequantized weight,
 * and the bits do not depend on the thread count. */
#include "cpu.h"
#include "ops_half.h"

#include <cblas.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#define ZO_Q4_PANEL 256 /* rows (forward) or columns (dx) of W per panel: zo_cpu_gemm's tile */
#define ZO_Q4_CHUNK 512 /* elements widened at once before a 16-bit store */

/* Block b's scale: zo_quant4_nested_dequantize's two roundings when nested. */
ZO_INLINE float block_scale(const struct zo_quant4_weight *w, size_t b) {
  if (w->absmax) return w->absmax[b];
  /* volatile: -ffp-contract=fast would fuse the two into one FMA rounding
   * (bitsandbytes rounds the product, then adds the offset). */
  volatile float v = w->map[w->qabsmax[b]] * w->absmax2[b / ZO_QUANT4_NESTED_BLOCK];
  return v + w->offset;
}

/* dst[0 .. 2 n) = lut[codes] of the n bytes at p, high nibble first. */
ZO_INLINE void decode_pairs(float *dst, const uint8_t *p, size_t n, const float lut[16]) {
  size_t j = 0;
#if defined(__AVX2__)
  const __m256 lo = _mm256_loadu_ps(lut), hi = _mm256_loadu_ps(lut + 8);
  const __m256i low4 = _mm256_set1_epi32(15);
  for (; j + 8 <= n; j += 8) {
    const __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + j)));
    const __m256i h = _mm256_srli_epi32(bytes, 4), l = _mm256_and_si256(bytes, low4);
    /* Per 128-bit lane: (h0 l0 h1 l1 | h4 l4 h5 l5) and (h2 l2 h3 l3 | h6 l6 h7 l7). */
    const __m256i u0 = _mm256_unpacklo_epi32(h, l), u1 = _mm256_unpackhi_epi32(h, l);
    const __m256i c0 = _mm256_permute2x128_si256(u0, u1, 0x20);
    const __m256i c1 = _mm256_permute2x128_si256(u0, u1, 0x31);
    const __m256 v0 = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, c0), _mm256_permutevar8x32_ps(hi, c0),
                                       _mm256_castsi256_ps(_mm256_slli_epi32(c0, 28)));
    const __m256 v1 = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, c1), _mm256_permutevar8x32_ps(hi, c1),
                                       _mm256_castsi256_ps(_mm256_slli_epi32(c1, 28)));
    _mm256_storeu_ps(dst + 2 * j, v0);
    _mm256_storeu_ps(dst + 2 * j + 8, v1);
  }
#endif
  for (; j < n; j++) {
    dst[2 * j] = lut[p[j] >> 4];
    dst[2 * j + 1] = lut[p[j] & 15];
  }
}

/* dst[0 .. count) = elements [start, start + count) of w in fp32. */
static void dequant_range(float *dst, const struct zo_quant4_weight *w, size_t start, size_t count) {
  const float *values = zo_quant4_values(w->type);
  const size_t bs = (size_t)w->blocksize, end = start + count;
  size_t i = start;
  while (i < end) {
    const size_t b = i / bs, seg_end = (b + 1) * bs < end ? (b + 1) * bs : end;
    const float scale = block_scale(w, b);
    float lut[16];
    for (int k = 0; k < 16; k++) lut[k] = values[k] * scale;
    float *d = dst + (i - start);
    if (i & 1) {
      *d++ = lut[w->packed[i / 2] & 15];
      i++;
    }
    const size_t pairs = (seg_end - i) / 2;
    decode_pairs(d, w->packed + i / 2, pairs, lut);
    d += 2 * pairs;
    i += 2 * pairs;
    if (i < seg_end) {
      *d = lut[w->packed[i / 2] >> 4];
      i++;
    }
  }
}

/* dst (count elements of dt) = elements [start, start + count) of w. */
static void dequant_to(void *dst, const struct zo_quant4_weight *w, size_t start, size_t count,
                       enum zo_dtype dt) {
  if (dt == ZO_F32) {
    dequant_range(dst, w, start, count);
    return;
  }
  float tmp[ZO_Q4_CHUNK];
  for (size_t o = 0; o < count; o += ZO_Q4_CHUNK) {
    const size_t n = count - o < ZO_Q4_CHUNK ? count - o : ZO_Q4_CHUNK;
    dequant_range(tmp, w, start + o, n);
    for (size_t k = 0; k < n; k++) zo_st(dst, o + k, tmp[k], dt);
  }
}

static size_t dt_size(enum zo_dtype dt) { return dt == ZO_F32 ? sizeof(float) : sizeof(uint16_t); }

void zo_cpu_matmul_q4_forward(void *out, const void *inp, struct zo_quant4_weight w, const void *bias,
                              int N, enum zo_dtype dt) {
  zo_quant4_weight_check(&w);
  const int C = w.C, OC = w.OC, n_panels = (OC + ZO_Q4_PANEL - 1) / ZO_Q4_PANEL;
  const size_t esz = dt_size(dt);
#pragma omp parallel for schedule(dynamic)
  for (int p = 0; p < n_panels; p++) {
    const int r0 = p * ZO_Q4_PANEL, rows = OC - r0 < ZO_Q4_PANEL ? OC - r0 : ZO_Q4_PANEL;
    void *panel = zo_cpu_scratch_slot(1, ((size_t)rows * C * esz + sizeof(float) - 1) / sizeof(float));
    dequant_to(panel, &w, (size_t)r0 * C, (size_t)rows * C, dt);
    char *o = (char *)out + (size_t)r0 * esz;
    const char *b = bias ? (const char *)bias + (size_t)r0 * esz : NULL;
    if (dt != ZO_F32) {
      zo_cpu_gemm(false, true, N, rows, C, inp, C, panel, C, o, OC, false, b, dt);
      continue;
    }
    /* As zo_cpu_matmul_forward: the bias pre-filled, then beta = 1. */
    if (b) {
      for (int n = 0; n < N; n++) {
        float *on = (float *)o + (size_t)n * OC;
        for (int c = 0; c < rows; c++) on[c] = ((const float *)b)[c];
      }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, rows, C, 1.0f, inp, C, panel, C,
                b ? 1.0f : 0.0f, (float *)o, OC);
  }
}

void zo_cpu_matmul_q4_backward_dx(void *dinp, const void *dout, struct zo_quant4_weight w, int N,
                                  enum zo_dtype dt) {
  zo_quant4_weight_check(&w);
  const int C = w.C, OC = w.OC, n_panels = (C + ZO_Q4_PANEL - 1) / ZO_Q4_PANEL;
  const size_t esz = dt_size(dt);
#pragma omp parallel for schedule(dynamic)
  for (int p = 0; p < n_panels; p++) {
    const int c0 = p * ZO_Q4_PANEL, cols = C - c0 < ZO_Q4_PANEL ? C - c0 : ZO_Q4_PANEL;
    char *panel = (char *)zo_cpu_scratch_slot(1, ((size_t)OC * cols * esz + sizeof(float) - 1) / sizeof(float));
    for (int r = 0; r < OC; r++)
      dequant_to(panel + (size_t)r * cols * esz, &w, (size_t)r * C + (size_t)c0, (size_t)cols, dt);
    char *d = (char *)dinp + (size_t)c0 * esz;
    if (dt != ZO_F32)
      zo_cpu_gemm(false, false, N, cols, OC, dout, OC, panel, cols, d, C, false, NULL, dt);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, cols, OC, 1.0f, dout, OC,
                  (const float *)panel, cols, 0.0f, (float *)d, C);
  }
}
