/* AdamW8bit update (zo/adamw8bit.h) with the CPU backend's arithmetic
 * (kernels/cpu/ops_adamw8bit.c, update_block_portable), one CUDA block of
 * 256 threads per quantization block. Per element: dequantize m, v from the
 * map values and the block's absmax, the AdamW update in explicitly rounded
 * intrinsics (as kernels/cuda/adamw.cu: nothing for nvcc to contract), the
 * new m, v kept in shared memory; then the block's new absmax (max |m|, max
 * v, NaN-ignoring like the CPU's `a > max ? a : max`, with a NaN flag that
 * makes the absmax NaN), and the codes: r = x * (1 / absmax) (x / absmax
 * when that reciprocal overflows), code = the count of decision thresholds
 * whose bits are <= the bits of |r| (zo_qmap_thresholds), found by binary
 * search. The map values and thresholds are the CPU's, copied to constant
 * memory once, so both backends produce the same bits. */
#include "adamw8bit.cuh"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "zo/adamw8bit.h"

#define Q_THREADS 256 /* threads per quantization block */

static __constant__ float q_values_signed[256], q_values_unsigned[256];
static __constant__ uint32_t q_thr_signed[128], q_thr_unsigned[255];

static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void tables_upload(void) {
  float thr[255];
  uint32_t bits[255];
  ZO_CUDA_CHECK(cudaMemcpyToSymbol(q_values_signed, zo_qmap_values(ZO_QMAP_SIGNED), 256 * sizeof(float)));
  ZO_CUDA_CHECK(cudaMemcpyToSymbol(q_values_unsigned, zo_qmap_values(ZO_QMAP_UNSIGNED), 256 * sizeof(float)));
  int n = zo_qmap_thresholds(ZO_QMAP_SIGNED, thr);
  if (n != 128) zo_abort(__FILE__, __LINE__, "signed map: %d thresholds, want 128", n);
  memcpy(bits, thr, 128 * sizeof(float));
  ZO_CUDA_CHECK(cudaMemcpyToSymbol(q_thr_signed, bits, 128 * sizeof(uint32_t)));
  n = zo_qmap_thresholds(ZO_QMAP_UNSIGNED, thr);
  if (n != 255) zo_abort(__FILE__, __LINE__, "unsigned map: %d thresholds, want 255", n);
  memcpy(bits, thr, 255 * sizeof(float));
  ZO_CUDA_CHECK(cudaMemcpyToSymbol(q_thr_unsigned, bits, 255 * sizeof(uint32_t)));
  /* The copies above run on the legacy stream from pageable memory: they may
   * return before the tables are in device memory, and the update kernel runs
   * on a non-blocking stream that does not wait for the legacy one. Wait here,
   * once, so that no kernel reads a half-written table. */
  ZO_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

/* Thresholds among thr[0, n) (increasing bits) at or below bits a. */
static __device__ __forceinline__ uint32_t count_le(const uint32_t *thr, uint32_t n, uint32_t a) {
  uint32_t lo = 0, hi = n; /* answer in [lo, hi] */
  while (lo < hi) {
    const uint32_t mid = (lo + hi) / 2;
    if (thr[mid] <= a) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static __device__ __forceinline__ uint8_t quantize(float x, float inv, float amax, bool divide, bool is_signed) {
  const float r = divide ? __fdiv_rn(x, amax) : __fmul_rn(x, inv);
  const uint32_t b = __float_as_uint(r), a = b & 0x7FFFFFFFu;
  if (!is_signed) return (uint8_t)(b >> 31 ? 0u : count_le(q_thr_unsigned, 255, a));
  const uint32_t c = count_le(q_thr_signed, 128, a);
  return (uint8_t)(b >> 31 ? ZO_ADAMW8BIT_M_ZERO_CODE - (c < 127 ? c : 127) : ZO_ADAMW8BIT_M_ZERO_CODE + c);
}

struct step_consts {
  float decay, b1, c1, b2, c2, neg_step, bc2_sqrt, eps, grad_scale;
};

static __global__ void adamw8bit_update_kernel(float *p, const float *g, uint8_t *mc, float *ma,
                                               uint8_t *vc, float *va, size_t n, int block,
                                               struct step_consts k) {
  __shared__ float mt[ZO_ADAMW8BIT_BLOCK_MAX], vt[ZO_ADAMW8BIT_BLOCK_MAX];
  __shared__ float red_m[Q_THREADS / ZO_WARP], red_v[Q_THREADS / ZO_WARP];
  __shared__ int red_nan[Q_THREADS / ZO_WARP];
  const size_t b = blockIdx.x, off = b * (size_t)block;
  const int len = n - off < (size_t)block ? (int)(n - off) : block;
  const float am = ma[b], av = va[b];
  float mmax = 0.0f, vmax = 0.0f;
  int nan = 0;
  for (int i = threadIdx.x; i < len; i += Q_THREADS) {
    const size_t j = off + (size_t)i;
    const float gi = __fmul_rn(g[j], k.grad_scale);
    const float pi = __fmul_rn(p[j], k.decay);
    const float mi = __fmaf_rn(gi, k.c1, __fmul_rn(__fmul_rn(q_values_signed[mc[j]], am), k.b1));
    const float vi = __fmaf_rn(__fmul_rn(k.c2, gi), gi, __fmul_rn(__fmul_rn(q_values_unsigned[vc[j]], av), k.b2));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.bc2_sqrt), k.eps);
    p[j] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(k.neg_step, mi), denom));
    mt[i] = mi;
    vt[i] = vi;
    const float a = fabsf(mi);
    mmax = a > mmax ? a : mmax;
    vmax = vi > vmax ? vi : vmax;
    nan |= (mi != mi) | (vi != vi);
  }
  /* Block maxima: the maximum is exact whatever the order. */
  for (int o = ZO_WARP / 2; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, mmax, o), ov = __shfl_xor_sync(0xffffffffu, vmax, o);
    mmax = om > mmax ? om : mmax;
    vmax = ov > vmax ? ov : vmax;
    nan |= __shfl_xor_sync(0xffffffffu, nan, o);
  }
  const int warp = threadIdx.x / ZO_WARP;
  if (threadIdx.x % ZO_WARP == 0) {
    red_m[warp] = mmax;
    red_v[warp] = vmax;
    red_nan[warp] = nan;
  }
  __syncthreads();
  mmax = 0.0f, vmax = 0.0f, nan = 0;
  for (int w = 0; w < Q_THREADS / ZO_WARP; w++) {
    mmax = red_m[w] > mmax ? red_m[w] : mmax;
    vmax = red_v[w] > vmax ? red_v[w] : vmax;
    nan |= red_nan[w];
  }
  const float mq = mmax > 0.0f ? mmax : 1.0f, vq = vmax > 0.0f ? vmax : 1.0f;
  const float minv = __fdiv_rn(1.0f, mq), vinv = __fdiv_rn(1.0f, vq);
  const bool mdiv = !(minv <= 3.0e38f), vdiv = !(vinv <= 3.0e38f);
  for (int i = threadIdx.x; i < len; i += Q_THREADS) {
    const size_t j = off + (size_t)i;
    mc[j] = quantize(mt[i], minv, mq, mdiv, true);
    vc[j] = quantize(vt[i], vinv, vq, vdiv, false);
  }
  if (threadIdx.x == 0) {
    ma[b] = nan ? NAN : mmax;
    va[b] = nan ? NAN : vmax;
  }
}

extern "C" void zo_cuda_adamw8bit_update(float *p, const float *g, uint8_t *m_code, float *m_absmax,
                                         uint8_t *v_code, float *v_absmax, size_t n, size_t block,
                                         float lr_f, float beta1_f, float beta2_f, float eps,
                                         float weight_decay, bool decay, long t, float grad_scale,
                                         zo_stream_t stream) {
  if (t < 1) zo_abort(__FILE__, __LINE__, "adamw8bit_update: step t = %ld, want >= 1", t);
  if (block < 1 || block > ZO_ADAMW8BIT_BLOCK_MAX)
    zo_abort(__FILE__, __LINE__, "adamw8bit_update: block %zu, want 1..%d", block, ZO_ADAMW8BIT_BLOCK_MAX);
  if (n == 0) return;
  if (pthread_once(&tables_once, tables_upload) != 0) zo_abort(__FILE__, __LINE__, "pthread_once failed");
  /* The CPU's scalars: the same doubles rounded at the same points. */
  const double lr = lr_f, beta1 = beta1_f, beta2 = beta2_f;
  const double bc1 = 1.0 - pow(beta1, (double)t);
  const double bc2 = 1.0 - pow(beta2, (double)t);
  struct step_consts k;
  k.decay = decay ? (float)(1.0 - lr * (double)weight_decay) : 1.0f;
  k.b1 = beta1_f;
  k.c1 = (float)(1.0 - beta1);
  k.b2 = beta2_f;
  k.c2 = (float)(1.0 - beta2);
  k.neg_step = (float)(-(lr / bc1));
  k.bc2_sqrt = (float)sqrt(bc2);
  k.eps = eps;
  k.grad_scale = grad_scale;
  const size_t n_blocks = zo_adamw8bit_n_blocks(n, block);
  if (n_blocks > 0x7fffffffu) zo_abort(__FILE__, __LINE__, "adamw8bit_update: %zu blocks", n_blocks);
  adamw8bit_update_kernel<<<(unsigned)n_blocks, Q_THREADS, 0, zo_cuda_stream(stream)>>>(
      p, g, m_code, m_absmax, v_code, v_absmax, n, (int)block, k);
  ZO_CUDA_CHECK_LAUNCH();
}
