/* Elementwise ops: GELU (tanh approximation) and the residual add, forward and
 * backward. GELU uses 0.5 (1 + tanh(u)) = sigmoid(2u), so it needs one
 * vectorized exp and no tanh (gcc keeps tanhf scalar) and never cancels. */
#include "cpu.h"
#include "ops_math.h"

#define ZO_GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define ZO_GELU_A 0.044715f

void zo_cpu_gelu_forward(float *out, const float *inp, size_t N) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < N; i++) {
    float x = inp[i];
    float u = ZO_GELU_K * (x + ZO_GELU_A * x * x * x);
    out[i] = x / (1.0f + zo_expf(-2.0f * u));
  }
}

void zo_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t N) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < N; i++) {
    float x = inp[i];
    float u = ZO_GELU_K * (x + ZO_GELU_A * x * x * x);
    float du = ZO_GELU_K * (1.0f + 3.0f * ZO_GELU_A * x * x);
    float s = 1.0f / (1.0f + zo_expf(-2.0f * u)); /* 0.5 (1 + tanh u) */
    /* d/dx [x s(2u)] = s + x * 2 s (1 - s) u', since sech^2 u = 4 s (1 - s). */
    dinp[i] = (s + 2.0f * x * s * (1.0f - s) * du) * dout[i];
  }
}

void zo_cpu_residual_forward(float *out, const float *inp1, const float *inp2, size_t N) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < N; i++) out[i] = inp1[i] + inp2[i];
}

void zo_cpu_residual_backward(float *dinp1, float *dinp2, const float *dout, size_t N) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < N; i++) {
    dinp1[i] += dout[i];
    dinp2[i] += dout[i];
  }
}
