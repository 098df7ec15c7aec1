/* Rotary position embedding in Hugging Face's rotate_half layout, in place
 * on the q and k heads of qkv (rows of (NH + 2 NKV) hs; the first
 * (NH + NKV) hs elements are q and k, v is never touched), and the transpose
 * rotation for backward, over fp32, bf16 or fp16 with fp32 tables and
 * arithmetic: the CPU backend's loop. One thread per rotated pair (i, i + h2)
 * of one head at one (b, t), so every element is read and written by one
 * thread and nothing needs ordering. The transpose is the same kernel with
 * sin negated (exact). */
#include "rope.cuh"

template <typename scalar_t>
static __global__ void rope_kernel(scalar_t *x, const float *__restrict__ cos_t,
                                   const float *__restrict__ sin_t, float sgn, int T, int n_heads,
                                   int hs, long long ld, size_t n_pairs) {
  const int h2 = hs / 2;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_pairs;
       i += (size_t)gridDim.x * blockDim.x) {
    const int d = (int)(i % h2);
    const size_t rest = i / h2;
    const int hd = (int)(rest % n_heads);
    const size_t bt = rest / n_heads;
    const size_t t = bt % T;
    const size_t p = bt * ld + (size_t)hd * hs + d;
    const float c = cos_t[t * h2 + d], s = sgn * sin_t[t * h2 + d];
    const float a = zo_ld(x, p), b = zo_ld(x, p + h2);
    zo_st(x, p, a * c - b * s);
    zo_st(x, p + h2, b * c + a * s);
  }
}

template <typename scalar_t>
static void rope(void *qkv, const float *cos_t, const float *sin_t, float sgn, int B, int T,
                 int NH, int NKV, int hs, zo_stream_t stream) {
  const size_t n_pairs = (size_t)B * T * (NH + NKV) * (hs / 2);
  const int block = 256;
  rope_kernel<scalar_t><<<zo_cuda_grid_1d(n_pairs, block), block, 0, zo_cuda_stream(stream)>>>(
      (scalar_t *)qkv, cos_t, sin_t, sgn, T, NH + NKV, hs, (long long)(NH + 2 * NKV) * hs, n_pairs);
  ZO_CUDA_CHECK_LAUNCH();
}

static void rope_launch(void *qkv, const float *cos_t, const float *sin_t, float sgn, int B, int T,
                        int NH, int NKV, int hs, enum zo_dtype dt, zo_stream_t stream) {
  ZO_ASSERT(NH > 0 && NKV > 0 && hs > 0 && hs % 2 == 0);
  if ((size_t)B * T == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, rope, qkv, cos_t, sin_t, sgn, B, T, NH, NKV, hs, stream);
}

extern "C" void zo_cuda_rope_forward(void *qkv, const float *cos, const float *sin, int B, int T,
                                     int NH, int NKV, int hs, enum zo_dtype dt,
                                     zo_stream_t stream) {
  rope_launch(qkv, cos, sin, 1.0f, B, T, NH, NKV, hs, dt, stream);
}

extern "C" void zo_cuda_rope_backward(void *dqkv, const float *cos, const float *sin, int B, int T,
                                      int NH, int NKV, int hs, enum zo_dtype dt,
                                      zo_stream_t stream) {
  rope_launch(dqkv, cos, sin, -1.0f, B, T, NH, NKV, hs, dt, stream);
}
