/* AdamW update: one grid-stride pass over p, g, m, v with the CPU backend's
 * arithmetic (kernels/cpu/ops_adamw.c, PyTorch's single-tensor order). The
 * step scalars are formed on the host in double exactly as the CPU forms
 * them and passed as the same floats. Per element every operation is an
 * explicitly rounded intrinsic: __fmaf_rn where torch fuses (the m and v
 * updates), __fmul_rn / __fadd_rn / __fdiv_rn / __fsqrt_rn elsewhere, so
 * nvcc's default --fmad=true cannot contract anything and neither
 * --use_fast_math nor -prec-div/-prec-sqrt changes the result. All of these
 * are IEEE round-to-nearest, as are the CPU's sqrtf, division and fmaf, so
 * the result is expected to be bit-identical to the CPU backend (denormals
 * included: no FTZ on either side); the contract promises within an ulp and
 * the parity test checks that. */
#include "adamw.cuh"

#include <math.h>

static __global__ void adamw_update_kernel(float *p, const float *g, float *m, float *v, size_t n,
                                           float decay_f, float b1, float c1, float b2, float c2,
                                           float neg_step, float bc2_sqrt, float eps,
                                           float grad_scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const float gi = __fmul_rn(g[i], grad_scale);
    const float pi = __fmul_rn(p[i], decay_f); /* decay_f == 1 is exact */
    const float mi = __fmaf_rn(gi, c1, __fmul_rn(m[i], b1));
    const float vi = __fmaf_rn(__fmul_rn(c2, gi), gi, __fmul_rn(v[i], b2));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
    m[i] = mi;
    v[i] = vi;
    p[i] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(neg_step, mi), denom));
  }
}

extern "C" void zo_cuda_adamw_update(float *p, const float *g, float *m, float *v, size_t n,
                                     float lr_f, float beta1_f, float beta2_f, float eps,
                                     float weight_decay, bool decay, long t, float grad_scale,
                                     zo_stream_t stream) {
  if (t < 1) zo_abort(__FILE__, __LINE__, "adamw_update: step t = %ld, want >= 1", t);
  if (n == 0) return;
  /* The CPU backend's scalars, the same doubles rounded at the same points. */
  const double lr = lr_f, beta1 = beta1_f, beta2 = beta2_f;
  const double bc1 = 1.0 - pow(beta1, (double)t);
  const double bc2 = 1.0 - pow(beta2, (double)t);
  const float decay_f = decay ? (float)(1.0 - lr * (double)weight_decay) : 1.0f;
  const float c1 = (float)(1.0 - beta1), c2 = (float)(1.0 - beta2);
  const float neg_step = (float)(-(lr / bc1));
  const float bc2_sqrt = (float)sqrt(bc2);
  const int block = 256;
  adamw_update_kernel<<<zo_cuda_grid_1d(n, block), block, 0, zo_cuda_stream(stream)>>>(
      p, g, m, v, n, decay_f, beta1_f, c1, beta2_f, c2, neg_step, bc2_sqrt, eps, grad_scale);
  ZO_CUDA_CHECK_LAUNCH();
}
