/* NF4 / FP4 block-wise quantization in bitsandbytes' layout on the host
 * (zo/quant4.h): the 4-bit codes as bitsandbytes' torch implementation
 * computes them (reciprocal or division, clamp, bucketize against float32
 * midpoints), the dequantization as its native CPU kernel, and double
 * quantization of the absmax as quantize_4bit(compress_statistics=True):
 * torch's float32 mean, then bitsandbytes' native 8-bit quantizer with its
 * 65536-entry lookup table, whose entries are computed here on demand by a
 * binary search instead of stored. Scalar C, OpenMP over blocks; blocks are
 * independent, so the bits do not depend on the thread count. Contraction
 * is off in every function that rounds: an fma would change the bits. */
#include "zo/quant4.h"

#include <math.h>
#include <string.h>

#include "ops_half.h"

#if defined(__clang__)
#define ZO_FP_CONTRACT_OFF
#else
#define ZO_FP_CONTRACT_OFF __attribute__((optimize("fp-contract=off")))
#endif

/* Below this many blocks a parallel region costs more than it saves. */
#define ZO_QUANT4_PAR_MIN_BLOCKS 64
/* bitsandbytes' CPU 8-bit quantizer: a table over [-1, 1] in 65536 steps. */
#define ZO_QUANT4_LUT_SIZE 65536

/* get_4bit_type("nf4"): the float32 values bitsandbytes lists. */
static const float nf4_values[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f,
};
/* get_4bit_type("fp4"): the codes' float values divided by the largest, 12,
 * in float32. Code 8 (negative zero) dequantizes to +0.0, as bitsandbytes'
 * AVX-512 and torch dequantizers do (its AVX2 / scalar kernel, which it
 * picks for some shapes, gives -0.0). */
static const float fp4_values[16] = {
    0.0f,  0.0625f / 12.0f,  8.0f / 12.0f,  1.0f,  4.0f / 12.0f,  6.0f / 12.0f,  2.0f / 12.0f,  3.0f / 12.0f,
    0.0f, -0.0625f / 12.0f, -8.0f / 12.0f, -1.0f, -4.0f / 12.0f, -6.0f / 12.0f, -2.0f / 12.0f, -3.0f / 12.0f,
};
/* The codes in increasing order of value: torch.argsort of the code table
 * (bitsandbytes' _get_4bit_quantize_bounds). FP4's two zeros are equal;
 * torch 2.15 puts +0 (code 0) first, so (0, first midpoint] codes as 8. */
static const uint8_t nf4_order[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
static const uint8_t fp4_order[16] = {11, 10, 13, 12, 15, 14, 9, 0, 8, 1, 6, 7, 4, 5, 2, 3};

bool zo_quant4_blocksize_is_valid(size_t blocksize) {
  for (size_t b = 32; b <= 4096; b *= 2)
    if (blocksize == b) return true;
  return false;
}

size_t zo_quant4_n_blocks(size_t numel, size_t blocksize) {
  ZO_ASSERT(blocksize >= 1);
  return numel / blocksize + (numel % blocksize != 0);
}

size_t zo_quant4_packed_nbytes(size_t numel) { return numel / 2 + numel % 2; }

const float *zo_quant4_values(enum zo_quant4_type type) {
  return type == ZO_QUANT4_NF4 ? nf4_values : fp4_values;
}

const char *zo_quant4_type_name(enum zo_quant4_type type) {
  return type == ZO_QUANT4_NF4 ? "nf4" : "fp4";
}

/* bitsandbytes' create_dynamic_map(signed=True) as torch 2.15 builds it on
 * x86-64 (its vectorized linspace): the nested map of bitsandbytes 0.50.2.
 * zo_qmap_values(ZO_QMAP_SIGNED) (kernels/qmap.c) is torch 1.13's scalar
 * construction of the same map, some entries 1 ulp away; the test checks
 * this table against the map in bitsandbytes' QuantState. */
static const float nested_map[256] = {
    -0x1.fc6666p-1f, -0x1.f53334p-1f, -0x1.eep-1f, -0x1.e6ccccp-1f,
    -0x1.df999ap-1f, -0x1.d86666p-1f, -0x1.d13334p-1f, -0x1.cap-1f,
    -0x1.c2ccccp-1f, -0x1.bb999ap-1f, -0x1.b46666p-1f, -0x1.ad3334p-1f,
    -0x1.a6p-1f, -0x1.9eccccp-1f, -0x1.97999ap-1f, -0x1.906666p-1f,
    -0x1.893334p-1f, -0x1.82p-1f, -0x1.7accccp-1f, -0x1.73999ap-1f,
    -0x1.6c6668p-1f, -0x1.653334p-1f, -0x1.5ep-1f, -0x1.56ccccp-1f,
    -0x1.4f999ap-1f, -0x1.486668p-1f, -0x1.413334p-1f, -0x1.3ap-1f,
    -0x1.32ccccp-1f, -0x1.2b999ap-1f, -0x1.246668p-1f, -0x1.1d3334p-1f,
    -0x1.16p-1f, -0x1.0eccccp-1f, -0x1.079998p-1f, -0x1.006666p-1f,
    -0x1.f26664p-2f, -0x1.e4p-2f, -0x1.d59998p-2f, -0x1.c73334p-2f,
    -0x1.b8ccccp-2f, -0x1.aa6666p-2f, -0x1.9cp-2f, -0x1.8d9998p-2f,
    -0x1.7f3334p-2f, -0x1.70ccccp-2f, -0x1.626666p-2f, -0x1.54p-2f,
    -0x1.459998p-2f, -0x1.373334p-2f, -0x1.28ccccp-2f, -0x1.1a6668p-2f,
    -0x1.0cp-2f, -0x1.fb3332p-3f, -0x1.de6666p-3f, -0x1.c1999ap-3f,
    -0x1.a4ccccp-3f, -0x1.88p-3f, -0x1.6b3334p-3f, -0x1.4e6666p-3f,
    -0x1.31999ap-3f, -0x1.14ccccp-3f, -0x1.fp-4f, -0x1.b66668p-4f,
    -0x1.93d70ap-4f, -0x1.8851eep-4f, -0x1.7ccccep-4f, -0x1.7147aep-4f,
    -0x1.65c29p-4f, -0x1.5a3d7p-4f, -0x1.4eb854p-4f, -0x1.433334p-4f,
    -0x1.37ae14p-4f, -0x1.2c28f6p-4f, -0x1.20a3d6p-4f, -0x1.151ebap-4f,
    -0x1.09999ap-4f, -0x1.fc28f6p-5f, -0x1.e51ebap-5f, -0x1.ce147ap-5f,
    -0x1.b70a3ep-5f, -0x1.ap-5f, -0x1.88f5c2p-5f, -0x1.71eb86p-5f,
    -0x1.5ae146p-5f, -0x1.43d70ap-5f, -0x1.2ccccep-5f, -0x1.15c29p-5f,
    -0x1.fd70a4p-6f, -0x1.cf5c2ap-6f, -0x1.a147aep-6f, -0x1.733334p-6f,
    -0x1.451ebap-6f, -0x1.170a3ep-6f, -0x1.d1eb86p-7f, -0x1.75c29p-7f,
    -0x1.3e76c8p-7f, -0x1.2c083p-7f, -0x1.19999ap-7f, -0x1.072b02p-7f,
    -0x1.e978d4p-8f, -0x1.c49ba6p-8f, -0x1.9fbe76p-8f, -0x1.7ae148p-8f,
    -0x1.56041ap-8f, -0x1.3126e8p-8f, -0x1.0c49bap-8f, -0x1.ced914p-9f,
    -0x1.851eb8p-9f, -0x1.3b645ap-9f, -0x1.e353f8p-10f, -0x1.4fdf3ap-10f,
    -0x1.eecbfep-11f, -0x1.b3d07cp-11f, -0x1.78d5p-11f, -0x1.3dd982p-11f,
    -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f,
    -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f,
    -0x1.040bfep-17f, -0x1.b43528p-19f, -0x1.27476ep-21f, 0.0f,
    0x1.27476ep-21f, 0x1.b43528p-19f, 0x1.040bfep-17f, 0x1.64840cp-16f,
    0x1.6f0068p-15f, 0x1.15df66p-14f, 0x1.743e96p-14f, 0x1.47ae16p-13f,
    0x1.19ce0ap-12f, 0x1.8fc506p-12f, 0x1.02de02p-11f, 0x1.3dd982p-11f,
    0x1.78d5p-11f, 0x1.b3d07cp-11f, 0x1.eecbfep-11f, 0x1.4fdf3ap-10f,
    0x1.e353f8p-10f, 0x1.3b645ap-9f, 0x1.851eb8p-9f, 0x1.ced914p-9f,
    0x1.0c49bap-8f, 0x1.3126e8p-8f, 0x1.56041ap-8f, 0x1.7ae148p-8f,
    0x1.9fbe76p-8f, 0x1.c49ba6p-8f, 0x1.e978d4p-8f, 0x1.072b02p-7f,
    0x1.19999ap-7f, 0x1.2c083p-7f, 0x1.3e76c8p-7f, 0x1.75c29p-7f,
    0x1.d1eb86p-7f, 0x1.170a3ep-6f, 0x1.451ebap-6f, 0x1.733334p-6f,
    0x1.a147aep-6f, 0x1.cf5c2ap-6f, 0x1.fd70a4p-6f, 0x1.15c29p-5f,
    0x1.2ccccep-5f, 0x1.43d70ap-5f, 0x1.5ae146p-5f, 0x1.71eb86p-5f,
    0x1.88f5c2p-5f, 0x1.ap-5f, 0x1.b70a3ep-5f, 0x1.ce147ap-5f,
    0x1.e51ebap-5f, 0x1.fc28f6p-5f, 0x1.09999ap-4f, 0x1.151ebap-4f,
    0x1.20a3d6p-4f, 0x1.2c28f6p-4f, 0x1.37ae14p-4f, 0x1.433334p-4f,
    0x1.4eb854p-4f, 0x1.5a3d7p-4f, 0x1.65c29p-4f, 0x1.7147aep-4f,
    0x1.7ccccep-4f, 0x1.8851eep-4f, 0x1.93d70ap-4f, 0x1.b66668p-4f,
    0x1.fp-4f, 0x1.14ccccp-3f, 0x1.31999ap-3f, 0x1.4e6666p-3f,
    0x1.6b3334p-3f, 0x1.88p-3f, 0x1.a4ccccp-3f, 0x1.c1999ap-3f,
    0x1.de6666p-3f, 0x1.fb3332p-3f, 0x1.0cp-2f, 0x1.1a6668p-2f,
    0x1.28ccccp-2f, 0x1.373334p-2f, 0x1.459998p-2f, 0x1.54p-2f,
    0x1.626666p-2f, 0x1.70ccccp-2f, 0x1.7f3334p-2f, 0x1.8d9998p-2f,
    0x1.9cp-2f, 0x1.aa6666p-2f, 0x1.b8ccccp-2f, 0x1.c73334p-2f,
    0x1.d59998p-2f, 0x1.e4p-2f, 0x1.f26664p-2f, 0x1.006666p-1f,
    0x1.079998p-1f, 0x1.0eccccp-1f, 0x1.16p-1f, 0x1.1d3334p-1f,
    0x1.246668p-1f, 0x1.2b999ap-1f, 0x1.32ccccp-1f, 0x1.3ap-1f,
    0x1.413334p-1f, 0x1.486668p-1f, 0x1.4f999ap-1f, 0x1.56ccccp-1f,
    0x1.5ep-1f, 0x1.653334p-1f, 0x1.6c6668p-1f, 0x1.73999ap-1f,
    0x1.7accccp-1f, 0x1.82p-1f, 0x1.893334p-1f, 0x1.906666p-1f,
    0x1.97999ap-1f, 0x1.9eccccp-1f, 0x1.a6p-1f, 0x1.ad3334p-1f,
    0x1.b46666p-1f, 0x1.bb999ap-1f, 0x1.c2ccccp-1f, 0x1.cap-1f,
    0x1.d13334p-1f, 0x1.d86666p-1f, 0x1.df999ap-1f, 0x1.e6ccccp-1f,
    0x1.eep-1f, 0x1.f53334p-1f, 0x1.fc6666p-1f, 0x1.p+0f,
};

const float *zo_quant4_nested_map(void) { return nested_map; }

/* ---- 4-bit ------------------------------------------------------------- */

struct quant4_map {
  float bounds[15];     /* midpoints of the sorted values, float32 */
  const uint8_t *order; /* (16) code of the k-th smallest value */
};

ZO_FP_CONTRACT_OFF
static void quant4_map_init(struct quant4_map *m, enum zo_quant4_type type) {
  const float *v = zo_quant4_values(type);
  m->order = type == ZO_QUANT4_NF4 ? nf4_order : fp4_order;
  for (int k = 0; k < 15; k++) m->bounds[k] = (v[m->order[k]] + v[m->order[k + 1]]) / 2.0f;
}

/* torch.bucketize(s, bounds): the number of bounds strictly below s. */
static inline uint8_t quant4_code(const struct quant4_map *m, float s) {
  int c = 0;
  for (int k = 0; k < 15; k++) c += m->bounds[k] < s;
  return m->order[c];
}

/* Element i of x, which need not be aligned to its dtype (a safetensors
 * mapping, a reference file): read through memcpy, one unaligned load. */
static inline float load_f32(const void *x, enum zo_dtype dtype, size_t i) {
  const unsigned char *p = x;
  float f;
  uint16_t h;
  switch (dtype) {
  case ZO_F32: memcpy(&f, p + i * sizeof f, sizeof f); return f;
  case ZO_BF16: memcpy(&h, p + i * sizeof h, sizeof h); return zo_bf16_to_f32(h);
  case ZO_F16: memcpy(&h, p + i * sizeof h, sizeof h); return zo_f16_to_f32(h);
  default: ZO_ASSERT(!"zo_quant4_quantize: dtype must be f32, bf16 or f16");
  }
  return 0.0f;
}

static inline float clamp1(float s) { return fminf(fmaxf(s, -1.0f), 1.0f); }

/* One block: elements [start, start + len), len even unless it is the
 * tensor's last; partial = the tensor's last block is shorter than
 * blocksize (bitsandbytes divides there and keeps the clamped absmax). */
ZO_FP_CONTRACT_OFF
static void quant4_block(uint8_t *packed, float *absmax, const void *x, enum zo_dtype dtype,
                         size_t start, size_t len, bool partial, const struct quant4_map *m) {
  float am = 0.0f;
  for (size_t i = 0; i < len; i++) am = fmaxf(am, fabsf(load_f32(x, dtype, start + i)));
  const float am_c = fmaxf(am, 1e-38f);
  const float r = 1.0f / am_c;
  *absmax = partial ? am_c : am;
  const uint8_t pad = quant4_code(m, 0.0f);
  for (size_t i = 0; i < len; i += 2) {
    const float x0 = load_f32(x, dtype, start + i);
    const uint8_t c0 = quant4_code(m, clamp1(partial ? x0 / am_c : x0 * r));
    uint8_t c1 = pad;
    if (i + 1 < len) {
      const float x1 = load_f32(x, dtype, start + i + 1);
      c1 = quant4_code(m, clamp1(partial ? x1 / am_c : x1 * r));
    }
    packed[(start + i) / 2] = (uint8_t)(c0 << 4 | c1);
  }
}

void zo_quant4_quantize(uint8_t *packed, float *absmax, const void *x, enum zo_dtype dtype,
                        size_t numel, size_t blocksize, enum zo_quant4_type type) {
  ZO_ASSERT(zo_quant4_blocksize_is_valid(blocksize));
  ZO_ASSERT(dtype == ZO_F32 || dtype == ZO_BF16 || dtype == ZO_F16);
  struct quant4_map m;
  quant4_map_init(&m, type);
  const long n_blocks = (long)zo_quant4_n_blocks(numel, blocksize);
#pragma omp parallel for schedule(static) if (n_blocks >= ZO_QUANT4_PAR_MIN_BLOCKS)
  for (long b = 0; b < n_blocks; b++) {
    const size_t start = (size_t)b * blocksize;
    const size_t len = numel - start < blocksize ? numel - start : blocksize;
    quant4_block(packed, absmax + b, x, dtype, start, len, len < blocksize, &m);
  }
}

ZO_FP_CONTRACT_OFF
void zo_quant4_dequantize(float *out, const uint8_t *packed, const float *absmax, size_t numel,
                          size_t blocksize, enum zo_quant4_type type) {
  ZO_ASSERT(zo_quant4_blocksize_is_valid(blocksize));
  const float *v = zo_quant4_values(type);
  const long n_blocks = (long)zo_quant4_n_blocks(numel, blocksize);
#pragma omp parallel for schedule(static) if (n_blocks >= ZO_QUANT4_PAR_MIN_BLOCKS)
  for (long b = 0; b < n_blocks; b++) {
    const size_t start = (size_t)b * blocksize;
    const size_t end = numel - start < blocksize ? numel : start + blocksize;
    const float scale = absmax[b];
    for (size_t i = start; i < end; i++) {
      const uint8_t byte = packed[i / 2];
      out[i] = v[i % 2 ? byte & 0xf : byte >> 4] * scale;
    }
  }
}

/* ---- double quantization of the absmax ---------------------------------- */

/* torch's float32 sum of a contiguous 1-D tensor (aten/src/ATen/native/cpu/
 * SumKernel.cpp, one thread): rows of 4 elements of W lanes (W = 8 for the
 * 8-float vectors torch reduces with, W = 1 below 8 elements), a cascade of
 * 4 accumulator levels flushed every 2^p rows, p = max(4, ceil(log2 rows) / 4),
 * then the leftover elements into the first column, the columns summed in
 * order, the scalar tail and the lanes added last. */
enum { TS_LEVELS = 4, TS_ILP = 4, TS_LANES = 8 };

static int ceil_log2(size_t x) {
  if (x <= 2) return 1;
  int b = 0;
  for (size_t v = x - 1; v; v >>= 1) b++;
  return b;
}

ZO_FP_CONTRACT_OFF
static void torch_row_sum(float *res, const float *a, size_t n_elem, int w) {
  float acc[TS_LEVELS][TS_ILP][TS_LANES] = {{{0}}};
  const size_t rows = n_elem / TS_ILP;
  const int lp = ceil_log2(rows) / TS_LEVELS > 4 ? ceil_log2(rows) / TS_LEVELS : 4;
  const size_t step = (size_t)1 << lp, mask = step - 1;
  size_t i = 0;
  while (i + step <= rows) {
    for (size_t j = 0; j < step; j++, i++)
      for (int k = 0; k < TS_ILP; k++)
        for (int l = 0; l < w; l++) acc[0][k][l] += a[(i * TS_ILP + k) * w + l];
    for (int lv = 1; lv < TS_LEVELS; lv++) {
      for (int k = 0; k < TS_ILP; k++)
        for (int l = 0; l < w; l++) acc[lv][k][l] += acc[lv - 1][k][l], acc[lv - 1][k][l] = 0.0f;
      if ((i & (mask << (lv * lp))) != 0) break;
    }
  }
  for (; i < rows; i++)
    for (int k = 0; k < TS_ILP; k++)
      for (int l = 0; l < w; l++) acc[0][k][l] += a[(i * TS_ILP + k) * w + l];
  for (int lv = 1; lv < TS_LEVELS; lv++)
    for (int k = 0; k < TS_ILP; k++)
      for (int l = 0; l < w; l++) acc[0][k][l] += acc[lv][k][l];
  for (size_t e = rows * TS_ILP; e < n_elem; e++)
    for (int l = 0; l < w; l++) acc[0][0][l] += a[e * w + l];
  for (int k = 1; k < TS_ILP; k++)
    for (int l = 0; l < w; l++) acc[0][0][l] += acc[0][k][l];
  for (int l = 0; l < w; l++) res[l] = acc[0][0][l];
}

ZO_FP_CONTRACT_OFF
static float torch_mean_f32(const float *a, size_t n) {
  float sum;
  if (n >= TS_LANES) {
    const size_t n_vec = n / TS_LANES;
    float lanes[TS_LANES];
    torch_row_sum(lanes, a, n_vec, TS_LANES);
    sum = 0.0f;
    for (size_t k = n_vec * TS_LANES; k < n; k++) sum += a[k];
    for (int l = 0; l < TS_LANES; l++) sum += lanes[l];
  } else {
    torch_row_sum(&sum, a, n, 1);
  }
  return sum / (float)n;
}

/* Entry i of bitsandbytes' table: the midpoints 0.5f * (map[k] + map[k+1])
 * below -1 + 2i / 65535 (float32), found by bisection. */
ZO_FP_CONTRACT_OFF
static uint8_t nested_lut(const float *map, unsigned i) {
  const float val = -1.0f + (2.0f * (float)i) / (float)(ZO_QUANT4_LUT_SIZE - 1);
  int lo = 0, hi = 255; /* answer in [lo, hi] */
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (0.5f * (map[mid] + map[mid + 1]) < val) lo = mid + 1;
    else hi = mid;
  }
  return (uint8_t)lo;
}

ZO_FP_CONTRACT_OFF
static void nested_block(uint8_t *q, float *absmax2, const float *absmax, size_t len, float offset,
                         const float *map) {
  float a = 0.0f;
  for (size_t i = 0; i < len; i++) a = fmaxf(a, fabsf(absmax[i] - offset));
  *absmax2 = a;
  if (a == 0.0f) {
    for (size_t i = 0; i < len; i++) q[i] = 0;
    return;
  }
  const float inv = 1.0f / a;
  for (size_t i = 0; i < len; i++) {
    float t = clamp1((absmax[i] - offset) * inv) + 1.0f;
    t = t * 0.5f;
    t = t * (float)(ZO_QUANT4_LUT_SIZE - 1);
    t = t + 0.5f;
    q[i] = nested_lut(map, (unsigned)t);
  }
}

void zo_quant4_nested_quantize(struct zo_quant4_nested *nq, const float *absmax, size_t n_blocks,
                               const float *map) {
  ZO_ASSERT(n_blocks >= 1);
  const float offset = torch_mean_f32(absmax, n_blocks);
  nq->offset = offset;
  const size_t bs = ZO_QUANT4_NESTED_BLOCK;
  const long n2 = (long)zo_quant4_n_blocks(n_blocks, bs);
#pragma omp parallel for schedule(static) if (n2 >= ZO_QUANT4_PAR_MIN_BLOCKS)
  for (long b = 0; b < n2; b++) {
    const size_t start = (size_t)b * bs;
    const size_t len = n_blocks - start < bs ? n_blocks - start : bs;
    nested_block(nq->qabsmax + start, nq->absmax2 + b, absmax + start, len, offset, map);
  }
}

ZO_FP_CONTRACT_OFF
void zo_quant4_nested_dequantize(float *absmax, const struct zo_quant4_nested *nq, size_t n_blocks,
                                 const float *map) {
  const long n = (long)n_blocks;
#pragma omp parallel for schedule(static) if (n >= ZO_QUANT4_PAR_MIN_BLOCKS * 256)
  for (long i = 0; i < n; i++) {
    const float v = map[nq->qabsmax[i]] * nq->absmax2[i / ZO_QUANT4_NESTED_BLOCK];
    absmax[i] = v + nq->offset;
  }
}

void zo_quant4_weight_check(const struct zo_quant4_weight *w) {
  if (w->OC <= 0 || w->C <= 0)
    zo_abort(__FILE__, __LINE__, "4-bit weight shape (%d, %d): need positive OC and C", w->OC, w->C);
  if (!zo_quant4_blocksize_is_valid((size_t)w->blocksize))
    zo_abort(__FILE__, __LINE__, "4-bit weight blocksize %d: valid are 32, 64, ..., 4096", w->blocksize);
  if (w->type != ZO_QUANT4_NF4 && w->type != ZO_QUANT4_FP4)
    zo_abort(__FILE__, __LINE__, "4-bit weight type %d: valid are ZO_QUANT4_NF4, ZO_QUANT4_FP4",
             (int)w->type);
  if (!w->packed) zo_abort(__FILE__, __LINE__, "4-bit weight: packed is NULL");
  const bool nested = w->qabsmax || w->absmax2 || w->map;
  if (w->absmax ? nested : !(w->qabsmax && w->absmax2 && w->map))
    zo_abort(__FILE__, __LINE__,
             "4-bit weight: give absmax, or qabsmax with absmax2 and map (nested), not both nor part");
}
