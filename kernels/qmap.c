/* The dynamic quantization maps of AdamW8bit (zo/adamw8bit.h): the 256 map
 * values of bitsandbytes' create_dynamic_map, built in float32 as torch 1.13
 * builds them, the decision thresholds between neighbours, and the block
 * layout of the states. In zo-common because both backends quantize from
 * these same tables (the CPU backend's lookup tables and the CUDA kernel's
 * binary search); the quantization itself is each backend's. Static tables,
 * built once on first use, thread-safe. */
#include "zo/adamw8bit.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* As in kernels/cpu/ops_adamw8bit.c: contraction off so that the float32
 * construction rounds where torch's does. */
#if defined(__clang__)
#define ZO_FP_CONTRACT_OFF
#else
#define ZO_FP_CONTRACT_OFF __attribute__((optimize("fp-contract=off")))
#endif

struct qmap {
  float values[256]; /* the map, increasing */
  float thr[255];    /* (n_thr) the decision thresholds, increasing */
  int n_thr;
};

static struct qmap qt_signed, qt_unsigned;
static pthread_once_t qt_once = PTHREAD_ONCE_INIT;

static int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* torch.linspace(0.1, 1, steps) in float32 as torch 1.13's CPU kernel with
 * the generic 8-float Vectorized computes it: blocks of 16 elements start
 * from a base and add k * step; the tail is elementwise; the second half is
 * counted back from the end. */
ZO_FP_CONTRACT_OFF
static void torch_linspace(float *out, long steps) {
  const long vs = 8;
  const float start = 0.1f, end = 1.0f;
  const float step = (end - start) / (float)(steps - 1);
  const long halfway = steps / 2;
  long i = 0;
  for (; i + 2 * vs <= steps; i += 2 * vs) {
    for (long j = i; j < i + 2 * vs; j += vs) {
      const float base = j < halfway ? start + step * (float)j : end - step * (float)(steps - j - 1);
      for (long k = 0; k < vs; k++) out[j + k] = base + (float)k * step;
    }
  }
  for (; i < steps; i++) out[i] = i < halfway ? start + step * (float)i : end - step * (float)(steps - i - 1);
}

/* bitsandbytes' create_dynamic_map(signed, max_exponent_bits=7, total_bits=8):
 * for decade i = 0..6, the midpoints of linspace(0.1, 1, 2^i + 1) (signed, and
 * their negatives) or of linspace(0.1, 1, 2^(i+1) + 1) (unsigned), times
 * 10^(i-6) (a float32 multiply by the float32 scalar), plus 0 and 1, sorted. */
ZO_FP_CONTRACT_OFF
static void build_map(float values[256], bool is_signed) {
  static const float scale[7] = {1e-6f, 1e-5f, 1e-4f, 1e-3f, 1e-2f, 1e-1f, 1.0f};
  float b[129];
  int n = 0;
  for (int i = 0; i < 7; i++) {
    const long items = is_signed ? (1L << i) + 1 : (1L << (i + 1)) + 1;
    torch_linspace(b, items);
    for (long k = 0; k + 1 < items; k++) {
      const float mean = (b[k] + b[k + 1]) / 2.0f;
      values[n++] = scale[i] * mean;
      if (is_signed) values[n++] = -(scale[i] * mean);
    }
  }
  values[n++] = 0.0f;
  values[n++] = 1.0f;
  ZO_ASSERT(n == 256);
  qsort(values, 256, sizeof(float), cmp_float);
}

/* Thresholds between the non-negative values v[0..n) (v[0] = 0). */
static void build_thresholds(struct qmap *q, const float *v, int n) {
  for (int k = 0; k + 1 < n; k++) {
    ZO_ASSERT(v[k] < v[k + 1]);
    const double mid = 0.5 * ((double)v[k] + (double)v[k + 1]); /* exact */
    float f = (float)mid;
    if ((double)f <= mid) f = nextafterf(f, INFINITY);
    q->thr[k] = f;
  }
  q->n_thr = n - 1;
}

static void build_tables(void) {
  build_map(qt_signed.values, true);
  build_map(qt_unsigned.values, false);
  /* m: the table counts thresholds among 0, the 127 positive values and 1;
   * the negative half mirrors the first 127 of them. */
  for (int j = 1; j <= 127; j++) ZO_ASSERT(qt_signed.values[127 - j] == -qt_signed.values[127 + j]);
  ZO_ASSERT(qt_signed.values[ZO_ADAMW8BIT_M_ZERO_CODE] == 0.0f);
  ZO_ASSERT(qt_unsigned.values[ZO_ADAMW8BIT_V_ZERO_CODE] == 0.0f);
  build_thresholds(&qt_signed, qt_signed.values + 127, 129);
  build_thresholds(&qt_unsigned, qt_unsigned.values, 256);
}

static void tables_init(void) { ZO_ASSERT(pthread_once(&qt_once, build_tables) == 0); }

const float *zo_qmap_values(enum zo_qmap map) {
  tables_init();
  return map == ZO_QMAP_SIGNED ? qt_signed.values : qt_unsigned.values;
}

int zo_qmap_thresholds(enum zo_qmap map, float *thr) {
  tables_init();
  const struct qmap *q = map == ZO_QMAP_SIGNED ? &qt_signed : &qt_unsigned;
  memcpy(thr, q->thr, (size_t)q->n_thr * sizeof(float));
  return q->n_thr;
}

/* ---- block layout (both backends size their blocks with it) ------------- */

size_t zo_adamw8bit_n_blocks(size_t numel, size_t block) {
  ZO_ASSERT(block >= 1);
  return numel / block + (numel % block != 0);
}

size_t zo_adamw8bit_state_nbytes(size_t numel, size_t block, size_t min_numel) {
  if (numel < min_numel) return 2 * sizeof(float) * numel;
  return 2 * numel + 2 * sizeof(float) * zo_adamw8bit_n_blocks(numel, block);
}
