/* AdamW with 8-bit block-wise quantized states (Dettmers et al. 2021,
 * "8-bit Optimizers via Block-wise Quantization"; bitsandbytes' AdamW8bit).
 * m and v of a tensor are stored as one uint8 code per element plus one fp32
 * absmax per block of `block` consecutive elements; m uses the signed dynamic
 * map, v the unsigned one (bitsandbytes' create_dynamic_map), and an element
 * is map[code] * absmax. State: 2 + 8/block bytes per parameter (fp32 m, v:
 * 8). Tensors below ZO_ADAMW8BIT_MIN_NUMEL elements keep fp32 m, v and go
 * through zo_adamw_update: the caller decides per tensor. The maps are
 * zo-common's (kernels/qmap.c); the host implementation is the CPU backend's
 * (kernels/cpu/ops_adamw8bit.c, also its adamw8bit_update op); the CUDA
 * backend's op computes the same bits from the same map values and
 * thresholds. */
#ifndef ZO_ADAMW8BIT_H
#define ZO_ADAMW8BIT_H

#include "zo/adamw_hparams.h"
#include "zo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_ADAMW8BIT_BLOCK 256      /* default elements per quantization block */
#define ZO_ADAMW8BIT_BLOCK_MAX 4096 /* largest block the update accepts */
#define ZO_ADAMW8BIT_MIN_NUMEL 4096 /* default: tensors with fewer elements keep fp32 m, v */
#define ZO_ADAMW8BIT_M_ZERO_CODE 127 /* code of 0.0 in the signed map (m) */
#define ZO_ADAMW8BIT_V_ZERO_CODE 0   /* code of 0.0 in the unsigned map (v) */

enum zo_qmap {
  ZO_QMAP_SIGNED,   /* m: create_dynamic_map(signed=True), [-0.99296875, 1] */
  ZO_QMAP_UNSIGNED, /* v: create_dynamic_map(signed=False), [0, 1] */
};

/* The 256 map values, strictly increasing (code k means values[k]). They are
 * bitsandbytes' construction in float32 as torch 1.13 evaluates it with its
 * scalar CPU kernels (ATEN_CPU_CAPABILITY=default): torch's AVX2/AVX-512
 * linspace gives up to 45 entries 1 ulp apart, nothing else.
 * Thread-safe; the table lives for the whole program. */
const float *zo_qmap_values(enum zo_qmap map);

/* The decision thresholds of map's quantization: thr[k] is the smallest
 * float above the exact midpoint of neighbouring map values, so a ratio r
 * codes as the count c of thresholds whose bits are <= the bits of |r| (NaN
 * and inf count them all). Unsigned map: 255 thresholds over values[0..255],
 * code c for r >= 0 and 0 for r < 0. Signed map: 128 thresholds over the
 * magnitudes values[127..255], code 127 + c for r >= 0 and 127 - min(c, 127)
 * for r < 0. Writes them to thr (room for 255) and returns their count. */
int zo_qmap_thresholds(enum zo_qmap map, float *thr);

/* Blocks of a tensor: ceil(numel / block). */
size_t zo_adamw8bit_n_blocks(size_t numel, size_t block);

/* Host/NVMe bytes of a tensor's m and v together: 8 numel below min_numel
 * (fp32 states), else 2 numel + 8 ceil(numel / block) (codes + absmax). */
size_t zo_adamw8bit_state_nbytes(size_t numel, size_t block, size_t min_numel);

/* Fresh state (m = v = 0): m codes ZO_ADAMW8BIT_M_ZERO_CODE, v codes
 * ZO_ADAMW8BIT_V_ZERO_CODE, every absmax 0. Layout as zo_adamw8bit_update. */
void zo_adamw8bit_init(uint8_t *m_code, float *m_absmax, uint8_t *v_code, float *v_absmax,
                       size_t numel, size_t block);

/* Block-wise quantization of x (numel) into code (numel) and absmax
 * (ceil(numel / block)): absmax = max |x| of the block, code = the map entry
 * nearest to x / absmax (exact rounding, ties toward zero; an all-zero block
 * gets the code of 0 and absmax 0; a block holding a NaN gets absmax NaN).
 * The unsigned map codes negative values as 0. Converts fp32 states (a
 * checkpoint written by AdamW) to 8-bit. OpenMP over blocks. */
void zo_adamw8bit_quantize(uint8_t *code, float *absmax, const float *x, size_t numel, size_t block,
                           enum zo_qmap map);
/* x[i] = values[code[i]] * absmax[i / block]. OpenMP over blocks. */
void zo_adamw8bit_dequantize(float *x, const uint8_t *code, const float *absmax, size_t numel,
                             size_t block, enum zo_qmap map);

/* One AdamW step over n elements of one tensor, in place on p and the 8-bit
 * states, fused in one pass per block:
 *   m0 = values_s[m_code[i]] * m_absmax[i / block], v0 likewise (unsigned map);
 *   g', p, m, v, p update: zo_adamw_update's formula in its order of
 *     operations, on m0, v0 (fp32; with fresh states at t = 1 the new p is
 *     bit-identical to zo_adamw_update's with the portable kernel; the
 *     AVX-512 kernel's sqrt and divisions are rsqrt14 / rcp14 and a Newton
 *     step each: p within 8 FLT_EPSILON of |old p| + |new p| (tested; under
 *     4 seen), m and v exact);
 *   then m_absmax = max |m| of the block, m_code = quantized m / m_absmax
 *   (zo_adamw8bit_quantize), v likewise.
 * Layout: m_code, v_code (n) uint8; m_absmax, v_absmax (ceil(n / block)) fp32;
 * block in [1, ZO_ADAMW8BIT_BLOCK_MAX]. Blocks are independent, so a tensor
 * may be updated in pieces whose starts are multiples of block (relative to
 * the tensor's first element), each call given the pointers at its piece;
 * the result is identical to one call. Traffic: 16 + 16/block bytes per
 * parameter (p r/w, g, codes r/w, absmax r/w) against 28 for fp32.
 * A NaN in a block's new m (v) makes that block's absmax NaN.
 * Uses the calling thread's OpenMP team (parallel over blocks). */
void zo_adamw8bit_update(float *p, const float *g, uint8_t *m_code, float *m_absmax, uint8_t *v_code,
                         float *v_absmax, size_t n, size_t block, const struct zo_adamw_hparams *hp,
                         bool decay, long t, float grad_scale);

/* The kernel that zo_adamw8bit_update and zo_adamw8bit_quantize run:
 * "avx512" where the CPU has AVX-512 F/BW/VL/DQ (x86-64, gcc), else
 * "portable" (OpenMP SIMD C). The codes and absmax are bit-identical; p
 * differs by a few ulps (see zo_adamw8bit_update), so a run is reproducible
 * bit for bit on CPUs that pick the same kernel. */
const char *zo_adamw8bit_kernel(void);
/* Forces the portable kernel (true) or restores the choice by CPU (false),
 * for tests and benchmarks. Call it with no update in flight. */
void zo_adamw8bit_force_portable(bool portable);

#ifdef __cplusplus
}
#endif
#endif /* ZO_ADAMW8BIT_H */
