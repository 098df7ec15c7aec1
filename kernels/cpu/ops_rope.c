/* Rotary position embedding in Hugging Face's rotate_half layout, in place
 * on the q and k heads of a qkv tensor, and its transpose for backward,
 * over fp32, bf16 or fp16 storage with fp32 tables and arithmetic, one
 * rounding per stored element. A qkv row is (NH + 2 NKV) hs elements whose
 * first (NH + NKV) hs are the q and k heads the rotation touches; the v
 * heads after them are never read or written. Threads split the (b, t) rows;
 * every head of row t uses table row t. The transpose is the same loop with
 * sin negated (exact), so backward is exactly forward's transpose. */
#include "cpu.h"
#include "ops_half.h"

/* Heads [0, n_heads) of the row at off, each pair (i, i + h2) rotated by
 * (c, sgn * s). */
ZO_INLINE void rope_row(void *x, const float *cos, const float *sin, float sgn, size_t off,
                        int n_heads, int hs, enum zo_dtype dt) {
  const int h2 = hs / 2;
  for (int hd = 0; hd < n_heads; hd++) {
    const size_t p = off + (size_t)hd * hs;
#pragma omp simd
    for (int i = 0; i < h2; i++) {
      const float c = cos[i], s = sgn * sin[i];
      const float a = zo_ld(x, p + i, dt), b = zo_ld(x, p + i + h2, dt);
      zo_st(x, p + i, a * c - b * s, dt);
      zo_st(x, p + i + h2, b * c + a * s, dt);
    }
  }
}

static void rope(void *qkv, const float *cos, const float *sin, float sgn, int B, int T, int NH,
                 int NKV, int hs, enum zo_dtype dt) {
  ZO_ASSERT(NH > 0 && NKV > 0 && hs > 0 && hs % 2 == 0);
  const size_t ld = (size_t)(NH + 2 * NKV) * hs, h2 = (size_t)hs / 2;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      ZO_DT_DISPATCH(dt, rope_row, qkv, cos + (size_t)t * h2, sin + (size_t)t * h2, sgn,
                     ((size_t)b * T + t) * ld, NH + NKV, hs);
}

void zo_cpu_rope_forward(void *qkv, const float *cos, const float *sin, int B, int T, int NH,
                         int NKV, int hs, enum zo_dtype dt) {
  rope(qkv, cos, sin, 1.0f, B, T, NH, NKV, hs, dt);
}

void zo_cpu_rope_backward(void *dqkv, const float *cos, const float *sin, int B, int T, int NH,
                          int NKV, int hs, enum zo_dtype dt) {
  rope(dqkv, cos, sin, -1.0f, B, T, NH, NKV, hs, dt);
}
