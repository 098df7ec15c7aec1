/* GELU (tanh approximation) forward and backward, elementwise. Written as the
 * CPU backend writes it, 0.5 (1 + tanh u) = sigmoid(2u), so the two agree to
 * rounding and nothing cancels for large |x|. expf, not __expf: the fast
 * intrinsic's error is ~2 ulp plus range reduction loss, too much for 1e-5.
 * Pointers are not __restrict__: dinp may alias dout (each element is read
 * before it is written, by the same thread). */
#include "gelu.cuh"

#define ZO_GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define ZO_GELU_A 0.044715f

static __global__ void gelu_forward_kernel(float *out, const float *inp, size_t N) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N;
       i += (size_t)gridDim.x * blockDim.x) {
    float x = inp[i];
    float u = ZO_GELU_K * (x + ZO_GELU_A * x * x * x);
    out[i] = x / (1.0f + expf(-2.0f * u));
  }
}

static __global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout,
                                            size_t N) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N;
       i += (size_t)gridDim.x * blockDim.x) {
    float x = inp[i];
    float u = ZO_GELU_K * (x + ZO_GELU_A * x * x * x);
    float du = ZO_GELU_K * (1.0f + 3.0f * ZO_GELU_A * x * x);
    float s = 1.0f / (1.0f + expf(-2.0f * u));
    dinp[i] = (s + 2.0f * x * s * (1.0f - s) * du) * dout[i];
  }
}

extern "C" void zo_cuda_gelu_forward(float *out, const float *inp, size_t N, zo_stream_t stream) {
  if (N == 0) return;
  const int block = 256;
  gelu_forward_kernel<<<zo_cuda_grid_1d(N, block), block, 0, zo_cuda_stream(stream)>>>(out, inp, N);
  ZO_CUDA_CHECK_LAUNCH();
}

extern "C" void zo_cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t N,
                                      zo_stream_t stream) {
  if (N == 0) return;
  const int block = 256;
  gelu_backward_kernel<<<zo_cuda_grid_1d(N, block), block, 0, zo_cuda_stream(stream)>>>(dinp, inp,
                                                                                        dout, N);
  ZO_CUDA_CHECK_LAUNCH();
}
