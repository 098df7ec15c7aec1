/* SwiGLU over rows [gate (I) | up (I)]: out = silu(gate) * up with
 * silu(x) = x / (1 + e^-x), and backward dgate = dout * up * silu'(gate),
 * dup = dout * silu(gate), over fp32, bf16 or fp16 with fp32 arithmetic and
 * one rounding per stored element, written as the CPU backend writes it.
 * expf, not __expf (see gelu.cu); for a very negative gate e^-x is inf and
 * x / inf is -0, sigmoid 0, never NaN. One thread per output column. */
#include "swiglu.cuh"

template <typename scalar_t>
static __global__ void swiglu_forward_kernel(scalar_t *out, const scalar_t *__restrict__ inp,
                                             size_t n, int I) {
  for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
       k += (size_t)gridDim.x * blockDim.x) {
    const size_t row = k / I, g = row * 2 * I + k % I;
    const float x = zo_ld(inp, g), up = zo_ld(inp, g + I);
    zo_st(out, k, x / (1.0f + expf(-x)) * up);
  }
}

/* silu'(x) = s (1 + x (1 - s)) with s = sigmoid(x). */
template <typename scalar_t>
static __global__ void swiglu_backward_kernel(scalar_t *dinp, const scalar_t *__restrict__ inp,
                                              const scalar_t *__restrict__ dout, size_t n, int I) {
  for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
       k += (size_t)gridDim.x * blockDim.x) {
    const size_t row = k / I, g = row * 2 * I + k % I;
    const float x = zo_ld(inp, g), up = zo_ld(inp, g + I), d = zo_ld(dout, k);
    const float s = 1.0f / (1.0f + expf(-x));
    zo_st(dinp, g, d * up * (s * (1.0f + x * (1.0f - s))));
    zo_st(dinp, g + I, d * (x * s));
  }
}

template <typename scalar_t>
static void swiglu_forward(void *out, const void *inp, size_t N, int I, zo_stream_t stream) {
  const size_t n = N * (size_t)I;
  const int block = 256;
  swiglu_forward_kernel<scalar_t><<<zo_cuda_grid_1d(n, block), block, 0, zo_cuda_stream(stream)>>>(
      (scalar_t *)out, (const scalar_t *)inp, n, I);
  ZO_CUDA_CHECK_LAUNCH();
}

template <typename scalar_t>
static void swiglu_backward(void *dinp, const void *inp, const void *dout, size_t N, int I,
                            zo_stream_t stream) {
  const size_t n = N * (size_t)I;
  const int block = 256;
  swiglu_backward_kernel<scalar_t>
      <<<zo_cuda_grid_1d(n, block), block, 0, zo_cuda_stream(stream)>>>(
          (scalar_t *)dinp, (const scalar_t *)inp, (const scalar_t *)dout, n, I);
  ZO_CUDA_CHECK_LAUNCH();
}

extern "C" void zo_cuda_swiglu_forward(void *out, const void *inp, size_t N, int I,
                                       enum zo_dtype dt, zo_stream_t stream) {
  if (N * (size_t)I == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, swiglu_forward, out, inp, N, I, stream);
}

extern "C" void zo_cuda_swiglu_backward(void *dinp, const void *inp, const void *dout, size_t N,
                                        int I, enum zo_dtype dt, zo_stream_t stream) {
  if (N * (size_t)I == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, swiglu_backward, dinp, inp, dout, N, I, stream);
}
