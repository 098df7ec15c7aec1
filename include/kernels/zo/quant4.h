/* 4-bit block-wise quantization in bitsandbytes' layout (QLoRA's NF4 and
 * FP4, bitsandbytes.functional.quantize_4bit / dequantize_4bit), on the
 * host. A tensor of numel elements, taken flat in row-major order, is cut
 * into blocks of `blocksize` consecutive elements (the last one partial);
 * each block keeps its fp32 absmax and one 4-bit code per element, two
 * codes per byte, the even element in the high nibble. Double quantization
 * (bitsandbytes' compress_statistics) stores the absmax themselves as 8-bit
 * codes of the dynamic map, blocks of 256, around their mean (the offset).
 * Every result is bit-identical to bitsandbytes 0.50.2 on the CPU (torch
 * 2.15), tests/test-kernels-quant4.c against tests/hf/ref/nf4/. Host memory
 * only, no allocation, no state: OpenMP over blocks on the calling thread's
 * team, and the same bits with any number of threads. The implementation is
 * the CPU backend's (kernels/cpu/quant4.c). */
#ifndef ZO_QUANT4_H
#define ZO_QUANT4_H

#include "zo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

enum zo_quant4_type {
  ZO_QUANT4_NF4, /* NormalFloat: the 16 quantiles of N(0, 1) (QLoRA), sorted */
  ZO_QUANT4_FP4, /* sign, 2 exponent bits, 1 mantissa bit, scaled to [-1, 1] */
};

#define ZO_QUANT4_NESTED_BLOCK 256 /* elements per block of the nested absmax */

/* bitsandbytes' block sizes: 32, 64, 128, ..., 4096. */
bool zo_quant4_blocksize_is_valid(size_t blocksize);
/* Blocks of a tensor: ceil(numel / blocksize). */
size_t zo_quant4_n_blocks(size_t numel, size_t blocksize);
/* Bytes of the packed codes: ceil(numel / 2). */
size_t zo_quant4_packed_nbytes(size_t numel);
/* The 16 values of a code (code k means values[k] * absmax), as
 * bitsandbytes' get_4bit_type builds them in float32; FP4's code 8 is +0.0
 * (bitsandbytes' AVX-512 and torch dequantizers; the AVX2 / scalar one it
 * picks for some shapes gives -0.0). "nf4" / "fp4" for the name. */
const float *zo_quant4_values(enum zo_quant4_type type);
const char *zo_quant4_type_name(enum zo_quant4_type type);

/* Quantizes x (numel elements of dtype ZO_F32, ZO_BF16 or ZO_F16, widened
 * exactly to fp32) into packed (zo_quant4_packed_nbytes(numel) bytes) and
 * absmax (zo_quant4_n_blocks floats), as bitsandbytes' quantize_4bit:
 *   absmax = max |x| over the block;
 *   s = clamp(x * (1 / max(absmax, 1e-38f)), -1, 1) in fp32 (the last
 *   block, when partial: x / max(absmax, 1e-38f), and its stored absmax is
 *   max(absmax, 1e-38f));
 *   code = the value whose interval (between float32 midpoints of
 *   neighbouring values, sorted) holds s, a tie going to the lower value
 *   (torch.bucketize); FP4's +0.0 and -0.0 split at 0: s in (0, m] codes
 *   as 8 (-0.0), 0 and below as 0.
 * An odd numel pads the last byte's low nibble with the code of 0.0. Inputs
 * must be finite (inf and NaN give unspecified codes). */
void zo_quant4_quantize(uint8_t *packed, float *absmax, const void *x, enum zo_dtype dtype,
                        size_t numel, size_t blocksize, enum zo_quant4_type type);

/* out[i] = values[code of i] * absmax[i / blocksize], fp32 (bitsandbytes'
 * dequantize_4bit bit for bit but the sign of FP4's zero). bitsandbytes'
 * native dequantizer indexes absmax row by row (last dimension / blocksize
 * per row): the same as this flat layout whenever the last dimension is a
 * multiple of blocksize, as in every Linear weight it quantizes in practice. */
void zo_quant4_dequantize(float *out, const uint8_t *packed, const float *absmax, size_t numel,
                          size_t blocksize, enum zo_quant4_type type);

/* The double-quantized absmax of n_blocks 4-bit blocks. */
struct zo_quant4_nested {
  uint8_t *qabsmax; /* (n_blocks) 8-bit codes of absmax - offset */
  float *absmax2;   /* (ceil(n_blocks / ZO_QUANT4_NESTED_BLOCK)) */
  float offset;     /* the mean of the absmax, torch's float32 sum / n */
};

/* The 256 values of the nested map: bitsandbytes' create_dynamic_map(signed)
 * as torch 2.15 builds it (a constant table; kernels/qmap.c's torch 1.13
 * build differs in the last bit of some entries). A checkpoint carries its
 * own (nested_quant_map); the functions below take the map as an argument. */
const float *zo_quant4_nested_map(void);

/* Double quantization of absmax (n_blocks floats) into nq (arrays sized by
 * the caller) with map (256 increasing values in [-1, 1]), as bitsandbytes'
 * quantize_4bit(compress_statistics=True) on the CPU:
 *   offset = torch.mean(absmax): float32 sum in torch's order (a cascade of
 *     8-lane partial sums) divided by n_blocks: torch's serial reduction,
 *     which it runs whatever the length with one thread; with more it
 *     splits long ones (2 threads: 100000 absmax, not 40000) and the
 *     offset's last bit then follows its thread count (a Llama-3-8B q_proj
 *     has 262144 blocks of 64);
 *   v = absmax - offset; per block of 256: a = max |v| (0: codes 0);
 *   code = lut[trunc(((clamp(v * (1/a), -1, 1) + 1) * 0.5) * 65535 + 0.5)]
 *     where lut[i] counts the map's float32 midpoints below
 *     -1 + 2i / 65535 (bitsandbytes' 65536-entry table, which rounds to the
 *     nearest value to within 3e-5: a value near 0 may take a neighbour).
 * OpenMP over blocks. */
void zo_quant4_nested_quantize(struct zo_quant4_nested *nq, const float *absmax, size_t n_blocks,
                               const float *map);

/* absmax[i] = map[qabsmax[i]] * absmax2[i / 256] + offset (two fp32
 * roundings, as bitsandbytes' dequantize_blockwise then += offset). */
void zo_quant4_nested_dequantize(float *absmax, const struct zo_quant4_nested *nq, size_t n_blocks,
                                 const float *map);


/* A 4-bit weight (OC, C) as a frozen base's GEMMs read it (backend ops
 * matmul_q4_forward / matmul_q4_backward_dx): the OC * C elements taken
 * flat in row-major order, quantized by zo_quant4_quantize with blocksize
 * (blocks may straddle rows), their absmax plain or double-quantized.
 * Pointers are the backend's memory (host on the CPU, device on CUDA); the
 * descriptor owns nothing and is passed by value. Element i is
 *   values(type)[code i] * absmax[i / blocksize], fp32,
 * absmax[b] = map[qabsmax[b]] * absmax2[b / 256] + offset when nested (the
 * bits of zo_quant4_dequantize and zo_quant4_nested_dequantize). */
struct zo_quant4_weight {
  const uint8_t *packed;  /* (ceil(OC * C / 2)) two codes per byte, even element high */
  const float *absmax;    /* (n_blocks) fp32; NULL when nested */
  const uint8_t *qabsmax; /* (n_blocks) nested codes; NULL when absmax is given */
  const float *absmax2;   /* (ceil(n_blocks / 256)) nested scales */
  const float *map;       /* (256) the nested map (zo_quant4_nested_map, or a checkpoint's) */
  float offset;           /* the nested offset */
  int blocksize;          /* elements per block, zo_quant4_blocksize_is_valid */
  enum zo_quant4_type type;
  int OC, C; /* rows (output features), columns (input features) */
};

/* Checks w's shape, block size and that exactly one of absmax and qabsmax
 * (with absmax2 and map) is given; aborts naming the field otherwise. */
void zo_quant4_weight_check(const struct zo_quant4_weight *w);

#ifdef __cplusplus
}
#endif
#endif /* ZO_QUANT4_H */
