/* LayerNorm over the last dimension (PyTorch semantics: biased variance,
 * eps 1e-5), forward saving mean and rstd per row, and backward. Statistics are
 * fp32 with two passes (mean, then centred squares): no E[x^2] - E[x]^2
 * cancellation. Backward makes one pass over rows for dinp and one over column
 * blocks for dweight/dbias, so threads never share an accumulator. */
#include "cpu.h"
#include "ops_math.h"

#include <math.h>

void zo_cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C;
    float *o = out + (size_t)n * C;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; c++) sum += x[c];
    float m = sum / (float)C;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int c = 0; c < C; c++) sq += (x[c] - m) * (x[c] - m);
    float s = 1.0f / sqrtf(sq / (float)C + 1e-5f);
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

void zo_cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C) {
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int n = 0; n < N; n++) {
      const float *x = inp + (size_t)n * C;
      const float *d = dout + (size_t)n * C;
      float *di = dinp + (size_t)n * C;
      float m = mean[n], s = rstd[n];
      /* dnorm = weight * dout; dinp = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) */
      float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
#pragma omp simd reduction(+ : dnorm_sum, dnorm_norm_sum)
      for (int c = 0; c < C; c++) {
        float dnorm = weight[c] * d[c];
        dnorm_sum += dnorm;
        dnorm_norm_sum += dnorm * (x[c] - m) * s;
      }
      float dnorm_mean = dnorm_sum / (float)C;
      float dnorm_norm_mean = dnorm_norm_sum / (float)C;
#pragma omp simd
      for (int c = 0; c < C; c++) {
        float norm = (x[c] - m) * s;
        di[c] += (weight[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
      }
    }

    /* Sum over rows per column block first, then add once: adding each row
     * straight into dweight would round against its (possibly large)
     * accumulated value N times. */
    int n_blocks = (C + ZO_COL_BLOCK - 1) / ZO_COL_BLOCK;
#pragma omp for schedule(static)
    for (int blk = 0; blk < n_blocks; blk++) {
      int c0 = blk * ZO_COL_BLOCK;
      int width = C - c0 < ZO_COL_BLOCK ? C - c0 : ZO_COL_BLOCK;
      float dw[ZO_COL_BLOCK] = {0}, db[ZO_COL_BLOCK] = {0};
      for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C + c0;
        const float *d = dout + (size_t)n * C + c0;
        float m = mean[n], s = rstd[n];
#pragma omp simd
        for (int c = 0; c < width; c++) {
          dw[c] += d[c] * (x[c] - m) * s;
          db[c] += d[c];
        }
      }
#pragma omp simd
      for (int c = 0; c < width; c++) {
        dweight[c0 + c] += dw[c];
        dbias[c0 + c] += db[c];
      }
    }
  }
}
