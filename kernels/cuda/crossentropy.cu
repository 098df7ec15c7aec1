/* Fused softmax + cross-entropy, one block per row: one read of the row for an
 * online max and sum of exponentials (each thread keeps a running (max, sum)
 * pair, rescaled when its max grows; pairs merge across the block), then, with
 * dlogits, a second pass writing (softmax - onehot) * dloss and zeros over the
 * padding [V, Vp). Rows with target -1 get loss 0 and a zero gradient row.
 * dlogits may alias logits: the target logit is read before the block barrier
 * that precedes any write, and each later write to element i follows the read
 * of element i by the same thread. Only columns [0, V) are read. fp32, bf16
 * or fp16 logits are widened as read; everything is fp32 and each dlogits
 * element is rounded once when stored (losses are fp32).
 *
 * -inf logits (fp16 overflow) are skipped by the running pair: e^(-inf - m)
 * is 0 for any m the row's finite values give, and skipping them keeps
 * -inf - -inf (NaN) out of the running sums and their merges (a thread or
 * warp whose elements are all -inf keeps the empty pair (-inf, 0), which
 * every merge ignores). So a row with a finite max gets the CPU backend's
 * finite loss, and a row of -inf only ends with the empty pair: loss
 * log(0) - (-inf - -inf) = NaN and a NaN gradient over [0, V), as on the
 * CPU (zo/backend.h). */
#include "crossentropy.cuh"

#include <math.h>

#define CE_BLOCK 256 /* threads per row */

/* Merges (m2, s2) into (m, s): sums of e^(x - m) over disjoint sets. An
 * empty pair (s == 0, m == -inf) is the identity: -inf - -inf is never
 * formed. */
static __device__ __forceinline__ void online_merge(float *m, float *s, float m2, float s2) {
  if (s2 == 0.0f) return;
  if (*s == 0.0f) {
    *m = m2;
    *s = s2;
    return;
  }
  float mx = fmaxf(*m, m2);
  *s = *s * expf(*m - mx) + s2 * expf(m2 - mx);
  *m = mx;
}

template <typename scalar_t>
static __global__ void crossentropy_forward_kernel(float *losses, scalar_t *dlogits,
                                                   const scalar_t *logits, const int32_t *targets,
                                                   float dloss, int V, int Vp) {
  __shared__ float red_m[CE_BLOCK / ZO_WARP], red_s[CE_BLOCK / ZO_WARP];
  __shared__ float x_target;
  const int row = blockIdx.x;
  const scalar_t *x = logits + (size_t)row * Vp;
  scalar_t *dx = dlogits ? dlogits + (size_t)row * Vp : NULL;
  const int target = targets[row];
  if (target < 0) {
    if (threadIdx.x == 0) losses[row] = 0.0f;
    if (dx)
      for (int i = threadIdx.x; i < Vp; i += blockDim.x) zo_st(dx, i, 0.0f);
    return;
  }
  if (threadIdx.x == 0) x_target = zo_ld(x, target);

  float m = -INFINITY, s = 0.0f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    float v = zo_ld(x, i);
    if (v == -INFINITY) continue; /* adds e^-inf = 0; keeps -inf - -inf out of s */
    if (v > m) {
      s = s * expf(m - v) + 1.0f; /* first element: s = 0, expf(-inf) = 0 */
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  for (int o = ZO_WARP / 2; o > 0; o >>= 1) {
    float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    online_merge(&m, &s, m2, s2);
  }
  const int warp = threadIdx.x / ZO_WARP, lane = threadIdx.x % ZO_WARP;
  if (lane == 0) {
    red_m[warp] = m;
    red_s[warp] = s;
  }
  __syncthreads();
  /* Every thread merges the per-warp pairs in the same order: same result. */
  m = red_m[0];
  s = red_s[0];
  for (int w = 1; w < (int)(blockDim.x / ZO_WARP); w++) online_merge(&m, &s, red_m[w], red_s[w]);

  if (threadIdx.x == 0) losses[row] = logf(s) - (x_target - m);
  if (!dx) return;
  const float norm = dloss / s;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    float g = expf(zo_ld(x, i) - m) * norm;
    zo_st(dx, i, i == target ? g - dloss : g);
  }
  for (int i = V + threadIdx.x; i < Vp; i += blockDim.x) zo_st(dx, i, 0.0f);
}

template <typename scalar_t>
static void crossentropy_forward(float *losses, void *dlogits, const void *logits,
                                 const int32_t *targets, float dloss, int N, int V, int Vp,
                                 zo_stream_t stream) {
  crossentropy_forward_kernel<scalar_t><<<(unsigned)N, CE_BLOCK, 0, zo_cuda_stream(stream)>>>(
      losses, (scalar_t *)dlogits, (const scalar_t *)logits, targets, dloss, V, Vp);
  ZO_CUDA_CHECK_LAUNCH();
}

extern "C" void zo_cuda_crossentropy_forward(float *losses, void *dlogits, const void *logits,
                                             const int32_t *targets, float dloss, int N, int V,
                                             int Vp, enum zo_dtype dt, zo_stream_t stream) {
  ZO_ASSERT(V >= 1 && V <= Vp);
  if (N == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, crossentropy_forward, losses, dlogits, logits, targets, dloss, N, V, Vp,
                      stream);
}
