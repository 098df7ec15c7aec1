/* GELU (tanh approximation) forward and backward, elementwise, over fp32,
 * bf16 or fp16 with fp32 arithmetic and one rounding per stored element.
 * Written as the CPU backend writes it, 0.5 (1 + tanh u) = sigmoid(2u), so
 * the two agree to rounding and nothing cancels for large |x|. expf, not
 * __expf: the fast intrinsic's error is ~2 ulp plus range reduction loss,
 * too much for 1e-5. Pointers are not __restrict__: dinp may alias dout
 * (each element is read before it is written, by the same thread). */
#include "gelu.cuh"

#define ZO_GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define ZO_GELU_A 0.044715f

template <typename scalar_t>
static __global__ void gelu_forward_kernel(scalar_t *out, const scalar_t *inp, size_t N) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N;
       i += (size_t)gridDim.x * blockDim.x) {
    float x = zo_ld(inp, i);
    float u = ZO_GELU_K * (x + ZO_GELU_A * x * x * x);
    zo_st(out, i, x / (1.0f + expf(-2.0f * u)));
  }
}

template <typename scalar_t>
static __global__ void gelu_backward_kernel(scalar_t *dinp, const scalar_t *inp,
                                            const scalar_t *dout, size_t N) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N;
       i += (size_t)gridDim.x * blockDim.x) {
    float x = zo_ld(inp, i);
    float u = ZO_GELU_K * (x + ZO_GELU_A * x * x * x);
    float du = ZO_GELU_K * (1.0f + 3.0f * ZO_GELU_A * x * x);
    float s = 1.0f / (1.0f + expf(-2.0f * u));
    zo_st(dinp, i, (s + 2.0f * x * s * (1.0f - s) * du) * zo_ld(dout, i));
  }
}

template <typename scalar_t>
static void gelu_forward(void *out, const void *inp, size_t N, zo_stream_t stream) {
  const int block = 256;
  gelu_forward_kernel<scalar_t><<<zo_cuda_grid_1d(N, block), block, 0, zo_cuda_stream(stream)>>>(
      (scalar_t *)out, (const scalar_t *)inp, N);
  ZO_CUDA_CHECK_LAUNCH();
}

template <typename scalar_t>
static void gelu_backward(void *dinp, const void *inp, const void *dout, size_t N,
                          zo_stream_t stream) {
  const int block = 256;
  gelu_backward_kernel<scalar_t><<<zo_cuda_grid_1d(N, block), block, 0, zo_cuda_stream(stream)>>>(
      (scalar_t *)dinp, (const scalar_t *)inp, (const scalar_t *)dout, N);
  ZO_CUDA_CHECK_LAUNCH();
}

extern "C" void zo_cuda_gelu_forward(void *out, const void *inp, size_t N, enum zo_dtype dt,
                                     zo_stream_t stream) {
  if (N == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, gelu_forward, out, inp, N, stream);
}

extern "C" void zo_cuda_gelu_backward(void *dinp, const void *inp, const void *dout, size_t N,
                                      enum zo_dtype dt, zo_stream_t stream) {
  if (N == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, gelu_backward, dinp, inp, dout, N, stream);
}
