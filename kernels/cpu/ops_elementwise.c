/* Elementwise ops: GELU (tanh approximation), SwiGLU, the residual add,
 * the strided scaled add (y[:, col0:col0+M] += s * v, LoRA's adapter output
 * into a fused projection's columns), forward and backward, and dtype casts, over fp32, bf16 or fp16 storage
 * with fp32 arithmetic. GELU uses 0.5 (1 + tanh(u)) = sigmoid(2u), so it
 * needs one vectorized exp and no tanh (gcc keeps tanhf scalar) and never
 * cancels; SwiGLU's silu is x sigmoid(x) with the same exp.
 * Each op is one always-inline loop instantiated per dtype (ZO_DT_DISPATCH),
 * so the fp32 loop is the plain fp32 code. */
#include "cpu.h"
#include "ops_half.h"
#include "ops_math.h"

#include <string.h>

#define ZO_GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define ZO_GELU_A 0.044715f

ZO_INLINE float gelu(float x) {
  float u = ZO_GELU_K * (x + ZO_GELU_A * x * x * x);
  return x / (1.0f + zo_expf(-2.0f * u));
}

ZO_INLINE float gelu_grad(float x) {
  float u = ZO_GELU_K * (x + ZO_GELU_A * x * x * x);
  float du = ZO_GELU_K * (1.0f + 3.0f * ZO_GELU_A * x * x);
  float s = 1.0f / (1.0f + zo_expf(-2.0f * u)); /* 0.5 (1 + tanh u) */
  /* d/dx [x s(2u)] = s + x * 2 s (1 - s) u', since sech^2 u = 4 s (1 - s). */
  return s + 2.0f * x * s * (1.0f - s) * du;
}

/* The parallel loops run over chunks and dispatch on the dtype per chunk:
 * OpenMP outlines a parallel region before inlining, so a region inside an
 * instantiated worker would see the dtype as a run-time value. */
#define ZO_EW_CHUNK ((size_t)1 << 14)
#define ZO_EW_CHUNKS(N) (((N) + ZO_EW_CHUNK - 1) / ZO_EW_CHUNK)
#define ZO_EW_END(i0, N) ((N) - (i0) < ZO_EW_CHUNK ? (N) : (i0) + ZO_EW_CHUNK)

ZO_INLINE void gelu_forward_t(void *out, const void *inp, size_t i0, size_t i1, enum zo_dtype dt) {
#pragma omp simd
  for (size_t i = i0; i < i1; i++) zo_st(out, i, gelu(zo_ld(inp, i, dt)), dt);
}

void zo_cpu_gelu_forward(void *out, const void *inp, size_t N, enum zo_dtype dt) {
#pragma omp parallel for schedule(static)
  for (size_t k = 0; k < ZO_EW_CHUNKS(N); k++)
    ZO_DT_DISPATCH(dt, gelu_forward_t, out, inp, k * ZO_EW_CHUNK, ZO_EW_END(k * ZO_EW_CHUNK, N));
}

ZO_INLINE void gelu_backward_t(void *dinp, const void *inp, const void *dout, size_t i0,
                               size_t i1, enum zo_dtype dt) {
#pragma omp simd
  for (size_t i = i0; i < i1; i++)
    zo_st(dinp, i, gelu_grad(zo_ld(inp, i, dt)) * zo_ld(dout, i, dt), dt);
}

void zo_cpu_gelu_backward(void *dinp, const void *inp, const void *dout, size_t N,
                          enum zo_dtype dt) {
#pragma omp parallel for schedule(static)
  for (size_t k = 0; k < ZO_EW_CHUNKS(N); k++)
    ZO_DT_DISPATCH(dt, gelu_backward_t, dinp, inp, dout, k * ZO_EW_CHUNK,
                   ZO_EW_END(k * ZO_EW_CHUNK, N));
}

/* SwiGLU over rows [gate (I) | up (I)] of inp: columns [i0, i1) of row n.
 * zo_expf saturates at e^88.38 instead of overflowing, so a very negative
 * gate x gives a sigmoid of about e^-88.38 and a silu of x times that (CUDA:
 * 0 and -0), never NaN. */
ZO_INLINE void swiglu_forward_t(void *out, const void *inp, size_t n, int i0, int i1, int I,
                                enum zo_dtype dt) {
  const size_t g = n * 2 * (size_t)I, o = n * (size_t)I;
#pragma omp simd
  for (int i = i0; i < i1; i++) {
    const float x = zo_ld(inp, g + i, dt), up = zo_ld(inp, g + I + i, dt);
    zo_st(out, o + i, x / (1.0f + zo_expf(-x)) * up, dt);
  }
}

/* silu'(x) = s (1 + x (1 - s)) with s = sigmoid(x). */
ZO_INLINE void swiglu_backward_t(void *dinp, const void *inp, const void *dout, size_t n, int i0,
                                 int i1, int I, enum zo_dtype dt) {
  const size_t g = n * 2 * (size_t)I, o = n * (size_t)I;
#pragma omp simd
  for (int i = i0; i < i1; i++) {
    const float x = zo_ld(inp, g + i, dt), up = zo_ld(inp, g + I + i, dt);
    const float d = zo_ld(dout, o + i, dt);
    const float s = 1.0f / (1.0f + zo_expf(-x));
    zo_st(dinp, g + i, d * up * (s * (1.0f + x * (1.0f - s))), dt);
    zo_st(dinp, g + I + i, d * (x * s), dt);
  }
}

/* Task k of SwiGLU, whose rows split into nc tasks of ZO_EW_CHUNK columns:
 * row *n, columns [*i0, *i1). */
static inline void swiglu_task(size_t k, size_t nc, int I, size_t *n, int *i0, int *i1) {
  *n = k / nc;
  *i0 = (int)(k % nc * ZO_EW_CHUNK);
  *i1 = I - *i0 < (int)ZO_EW_CHUNK ? I : *i0 + (int)ZO_EW_CHUNK;
}

void zo_cpu_swiglu_forward(void *out, const void *inp, size_t N, int I, enum zo_dtype dt) {
  const size_t nc = ZO_EW_CHUNKS((size_t)I);
#pragma omp parallel for schedule(static)
  for (size_t k = 0; k < N * nc; k++) {
    size_t n;
    int i0, i1;
    swiglu_task(k, nc, I, &n, &i0, &i1);
    ZO_DT_DISPATCH(dt, swiglu_forward_t, out, inp, n, i0, i1, I);
  }
}

void zo_cpu_swiglu_backward(void *dinp, const void *inp, const void *dout, size_t N, int I,
                            enum zo_dtype dt) {
  const size_t nc = ZO_EW_CHUNKS((size_t)I);
#pragma omp parallel for schedule(static)
  for (size_t k = 0; k < N * nc; k++) {
    size_t n;
    int i0, i1;
    swiglu_task(k, nc, I, &n, &i0, &i1);
    ZO_DT_DISPATCH(dt, swiglu_backward_t, dinp, inp, dout, n, i0, i1, I);
  }
}

ZO_INLINE void residual_forward_t(void *out, const void *inp1, const void *inp2, size_t i0,
                                  size_t i1, enum zo_dtype dt) {
#pragma omp simd
  for (size_t i = i0; i < i1; i++) zo_st(out, i, zo_ld(inp1, i, dt) + zo_ld(inp2, i, dt), dt);
}

void zo_cpu_residual_forward(void *out, const void *inp1, const void *inp2, size_t N,
                             enum zo_dtype dt) {
#pragma omp parallel for schedule(static)
  for (size_t k = 0; k < ZO_EW_CHUNKS(N); k++)
    ZO_DT_DISPATCH(dt, residual_forward_t, out, inp1, inp2, k * ZO_EW_CHUNK,
                   ZO_EW_END(k * ZO_EW_CHUNK, N));
}

ZO_INLINE void residual_backward_t(void *dinp1, void *dinp2, const void *dout, size_t i0,
                                   size_t i1, enum zo_dtype dt) {
#pragma omp simd
  for (size_t i = i0; i < i1; i++) {
    const float d = zo_ld(dout, i, dt);
    zo_st(dinp1, i, zo_ld(dinp1, i, dt) + d, dt);
    zo_st(dinp2, i, zo_ld(dinp2, i, dt) + d, dt);
  }
}

void zo_cpu_residual_backward(void *dinp1, void *dinp2, const void *dout, size_t N,
                              enum zo_dtype dt) {
#pragma omp parallel for schedule(static)
  for (size_t k = 0; k < ZO_EW_CHUNKS(N); k++)
    ZO_DT_DISPATCH(dt, residual_backward_t, dinp1, dinp2, dout, k * ZO_EW_CHUNK,
                   ZO_EW_END(k * ZO_EW_CHUNK, N));
}

ZO_INLINE void cast_to_t(void *dst, const void *src, enum zo_dtype src_dt, size_t i0, size_t i1,
                         enum zo_dtype dst_dt) {
#pragma omp simd
  for (size_t i = i0; i < i1; i++) zo_st(dst, i, zo_ld(src, i, src_dt), dst_dt);
}

/* Instantiated per source dtype, dispatching on the destination's. */
ZO_INLINE void cast_t(void *dst, enum zo_dtype dst_dt, const void *src, size_t i0, size_t i1,
                      enum zo_dtype src_dt) {
  ZO_DT_DISPATCH(dst_dt, cast_to_t, dst, src, src_dt, i0, i1);
}

void zo_cpu_cast(void *dst, enum zo_dtype dst_dt, const void *src, enum zo_dtype src_dt, size_t n) {
  if (n == 0) return;
  if (dst_dt == src_dt) {
    if (dst != src) memcpy(dst, src, n * zo_dtype_size(dst_dt));
    return;
  }
#pragma omp parallel for schedule(static) if (n >= 4 * ZO_EW_CHUNK)
  for (size_t k = 0; k < ZO_EW_CHUNKS(n); k++)
    ZO_DT_DISPATCH(src_dt, cast_t, dst, dst_dt, src, k * ZO_EW_CHUNK, ZO_EW_END(k * ZO_EW_CHUNK, n));
}

/* The strided scaled add over rows: row n of v (M) into columns
 * [col0, col0 + M) of row n of y (ld_y), and its backward. One task a row
 * (each element is written by one thread; no order to keep). */
ZO_INLINE void scaled_add_forward_t(void *y, const void *v, float s, size_t n, int M, int ld_y, int col0,
                                    enum zo_dtype dt) {
  const size_t yr = n * (size_t)ld_y + (size_t)col0, vr = n * (size_t)M;
#pragma omp simd
  for (int j = 0; j < M; j++) zo_st(y, yr + j, zo_ld(y, yr + j, dt) + s * zo_ld(v, vr + j, dt), dt);
}

ZO_INLINE void scaled_add_backward_t(void *dv, const void *dy, float s, size_t n, int M, int ld_y, int col0,
                                     enum zo_dtype dt) {
  const size_t yr = n * (size_t)ld_y + (size_t)col0, vr = n * (size_t)M;
#pragma omp simd
  for (int j = 0; j < M; j++) zo_st(dv, vr + j, s * zo_ld(dy, yr + j, dt), dt);
}

void zo_cpu_scaled_add_forward(void *y, const void *v, float s, int N, int M, int ld_y, int col0,
                               enum zo_dtype dt) {
  ZO_ASSERT(N >= 0 && M >= 0 && col0 >= 0 && (long)col0 + M <= ld_y);
#pragma omp parallel for schedule(static) if ((size_t)N * (size_t)M >= ZO_EW_CHUNK)
  for (int n = 0; n < N; n++) ZO_DT_DISPATCH(dt, scaled_add_forward_t, y, v, s, (size_t)n, M, ld_y, col0);
}

void zo_cpu_scaled_add_backward(void *dv, const void *dy, float s, int N, int M, int ld_y, int col0,
                                enum zo_dtype dt) {
  ZO_ASSERT(N >= 0 && M >= 0 && col0 >= 0 && (long)col0 + M <= ld_y);
#pragma omp parallel for schedule(static) if ((size_t)N * (size_t)M >= ZO_EW_CHUNK)
  for (int n = 0; n < N; n++) ZO_DT_DISPATCH(dt, scaled_add_backward_t, dv, dy, s, (size_t)n, M, ld_y, col0);
}
