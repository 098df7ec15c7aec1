/* Inline fp32 math shared by the CPU ops, written so that gcc vectorizes it
 * inside `omp simd` loops: libm's expf stays a scalar call unless -ffast-math
 * exposes libmvec, which would cost softmax and cross-entropy ~10x. Not a
 * public header; nothing here touches memory. */
#ifndef ZO_KERNELS_CPU_OPS_MATH_H
#define ZO_KERNELS_CPU_OPS_MATH_H

#include <stdint.h>

/* Columns per block when threads split a reduction over rows by columns. */
#define ZO_COL_BLOCK 64

/* e^x with ~1 ulp error (Cephes expf: x = n ln2 + r, |r| <= ln2/2, degree-6
 * polynomial for e^r, then scale by 2^n). Returns 0 below -87.33 (where e^x
 * is denormal) and saturates at e^88.376 (2^127.5) above, so it never
 * overflows; NaN propagates. No float-to-int conversion, so no input is UB. */
static inline float zo_expf(float x) {
  float xc = x > 88.3762626647949f ? 88.3762626647949f : x;
  /* Adding 1.5*2^23 rounds to the nearest integer n and leaves n in the low
   * mantissa bits of t (floorf would not vectorize under -ftrapping-math). */
  float t = xc * 1.44269504088896341f + 0x1.8p23f;
  float n = t - 0x1.8p23f;
  float r = xc - n * 0.693359375f; /* ln2 split in two: n * hi is exact */
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  union { float f; uint32_t u; } tbits = {.f = t};
  union { uint32_t u; float f; } scale = {.u = (tbits.u - 0x4b400000u + 127u) << 23};
  return x < -87.33f ? 0.0f : p * scale.f;
}

#endif /* ZO_KERNELS_CPU_OPS_MATH_H */
