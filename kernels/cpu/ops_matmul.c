/* Fully connected layer, out = inp @ weight^T + bias, and its backward, as
 * OpenBLAS sgemm calls (fp32 accumulation). sgemm runs on its own OpenMP pool,
 * so it is never called from inside one of our parallel regions. */
#include "cpu.h"
#include "ops_math.h"

#include <cblas.h>

void zo_cpu_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                           int N, int C, int OC) {
  /* Pre-filling out with the bias and accumulating (beta = 1) saves a pass
   * over out: OpenBLAS implements beta = 0 as a separate zeroing pass. */
  float beta = 0.0f;
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
      float *o = out + (size_t)n * OC;
#pragma omp simd
      for (int oc = 0; oc < OC; oc++) o[oc] = bias[oc];
    }
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, beta,
              out, OC);
}

void zo_cpu_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC) {
  if (dinp)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C,
                0.0f, dinp, C);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f,
              dweight, C);
  if (!dbias) return;
  /* Column sums block by block, added to dbias once (see layernorm backward). */
  int n_blocks = (OC + ZO_COL_BLOCK - 1) / ZO_COL_BLOCK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < n_blocks; blk++) {
    int c0 = blk * ZO_COL_BLOCK;
    int width = OC - c0 < ZO_COL_BLOCK ? OC - c0 : ZO_COL_BLOCK;
    float db[ZO_COL_BLOCK] = {0};
    for (int n = 0; n < N; n++) {
      const float *d = dout + (size_t)n * OC + c0;
#pragma omp simd
      for (int c = 0; c < width; c++) db[c] += d[c];
    }
#pragma omp simd
    for (int c = 0; c < width; c++) dbias[c0 + c] += db[c];
  }
}
