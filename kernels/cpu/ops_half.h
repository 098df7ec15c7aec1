/* bf16 and fp16 storage for the CPU ops: scalar conversions that gcc
 * vectorizes inside `omp simd` loops, element loads and stores by dtype, and
 * the dispatch that turns a run-time dtype into a compile-time one.
 * Narrowing rounds to nearest even exactly as the GPU stores a float
 * (__float2bfloat16_rn, __float2half_rn): NaN stays NaN, values beyond the
 * format's range become inf (fp16) and fp16 keeps subnormals. Widening is
 * exact. Everything is integer and float arithmetic without branches: gcc
 * 12 keeps _Float16 conversions scalar (one vcvtph2ps per element) on CPUs
 * without AVX512-FP16. Not a public header; nothing here touches memory
 * beyond the element it is handed. */
#ifndef ZO_KERNELS_CPU_OPS_HALF_H
#define ZO_KERNELS_CPU_OPS_HALF_H

#include <stdint.h>

#include "zo/common.h"

#define ZO_INLINE static inline __attribute__((always_inline))

ZO_INLINE uint16_t zo_f32_to_bf16(float f) {
  union { float f; uint32_t u; } x = {.f = f};
  const uint32_t u = x.u;
  /* Adding 0x7fff plus the lowest kept bit carries into the kept half
   * exactly when the dropped half is above the midpoint, or at it with an
   * odd kept half. NaN keeps its sign and top payload bits, made quiet. */
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  return (uint16_t)(nan ? (u >> 16) | 0x0040u : rounded);
}

ZO_INLINE float zo_bf16_to_f32(uint16_t h) {
  union { uint32_t u; float f; } x = {.u = (uint32_t)h << 16};
  return x.f;
}

/* Widening: the 15 magnitude bits shifted into a float's exponent and
 * mantissa fields and scaled by 2^112 give every finite half exactly
 * (subnormals too, through the multiplication); inf and NaN (scaled to
 * 2^16 and beyond) get an all-ones exponent. */
ZO_INLINE float zo_f16_to_f32(uint16_t h) {
  union { uint32_t u; float f; } o = {.u = (uint32_t)(h & 0x7fffu) << 13};
  o.f *= 0x1p112f;
  const uint32_t special = o.f >= 65536.0f ? 0x7f800000u : 0u;
  o.u |= special | (uint32_t)(h & 0x8000u) << 16;
  return o.f;
}

/* Narrowing, round to nearest even (F. Giesen's float_to_half_fast3_rtne):
 * below 2^-14 adding 0.5 (whose ulp is 2^-24, the smallest half) lets the
 * FPU's own round-to-nearest-even round the subnormal; above, the mantissa
 * is rounded with 0xfff plus the kept odd bit and the exponent rebiased in
 * the same addition. NaN becomes the quiet NaN 0x7e00 (sign kept), values
 * from 65520 up inf. */
ZO_INLINE uint16_t zo_f32_to_f16(float f) {
  union { float f; uint32_t u; } x = {.f = f};
  const uint32_t sign = x.u & 0x80000000u;
  const uint32_t a = x.u ^ sign;
  union { uint32_t u; float f; } sub = {.u = a}, magic = {.u = 126u << 23};
  sub.f += magic.f;
  const uint32_t sub_bits = sub.u - magic.u;
  const uint32_t norm_bits = (a + ((uint32_t)(15 - 127) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  const uint32_t big = a > 0x7f800000u ? 0x7e00u : 0x7c00u;
  const uint32_t o = a >= (143u << 23) ? big : a < (113u << 23) ? sub_bits : norm_bits;
  return (uint16_t)(o | sign >> 16);
}

/* 16-bit elements that may alias any storage (tests poison dt buffers as
 * uint16_t, casts write what ops read). */
typedef uint16_t __attribute__((may_alias)) zo_u16_alias;

/* Element i of p, stored as dt, as a float. */
ZO_INLINE float zo_ld(const void *p, size_t i, enum zo_dtype dt) {
  if (dt == ZO_BF16) return zo_bf16_to_f32(((const zo_u16_alias *)p)[i]);
  if (dt == ZO_F16) return zo_f16_to_f32(((const zo_u16_alias *)p)[i]);
  return ((const float *)p)[i];
}

/* Stores x as element i of p in dt (rounded once). */
ZO_INLINE void zo_st(void *p, size_t i, float x, enum zo_dtype dt) {
  if (dt == ZO_BF16) ((zo_u16_alias *)p)[i] = zo_f32_to_bf16(x);
  else if (dt == ZO_F16) ((zo_u16_alias *)p)[i] = zo_f32_to_f16(x);
  else ((float *)p)[i] = x;
}

/* x rounded to dt and widened back: the float a dt store then load gives. */
ZO_INLINE float zo_round_dt(float x, enum zo_dtype dt) {
  if (dt == ZO_BF16) return zo_bf16_to_f32(zo_f32_to_bf16(x));
  if (dt == ZO_F16) return zo_f16_to_f32(zo_f32_to_f16(x));
  return x;
}

/* Calls fn(args..., DT) with DT the compile-time constant equal to dt, so
 * that an always-inline fn is compiled once per dtype with its loads and
 * stores resolved (C's stand-in for a template). */
#define ZO_DT_DISPATCH(dt, fn, ...)                                             \
  do {                                                                          \
    switch (dt) {                                                               \
    case ZO_BF16: fn(__VA_ARGS__, ZO_BF16); break;                              \
    case ZO_F16: fn(__VA_ARGS__, ZO_F16); break;                                \
    case ZO_F32: fn(__VA_ARGS__, ZO_F32); break;                                \
    default: zo_abort(__FILE__, __LINE__, "op dtype %s: need F32, BF16 or F16", \
                      zo_dtype_name(dt));                                       \
    }                                                                           \
  } while (0)

#endif /* ZO_KERNELS_CPU_OPS_HALF_H */
