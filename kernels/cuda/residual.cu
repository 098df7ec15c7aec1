/* Residual add: out = inp1 + inp2 (out may alias either input, so no
 * __restrict__), and its backward dinp1 += dout, dinp2 += dout, over fp32,
 * bf16 or fp16: each sum in fp32, rounded once when stored (fp32 is also
 * what the engine uses on gradient buffers). dinp1 and dinp2 are distinct
 * buffers by contract; each element is touched by one thread, so no
 * atomics. */
#include "residual.cuh"

template <typename scalar_t>
static __global__ void residual_forward_kernel(scalar_t *out, const scalar_t *inp1,
                                               const scalar_t *inp2, size_t N) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N;
       i += (size_t)gridDim.x * blockDim.x)
    zo_st(out, i, zo_ld(inp1, i) + zo_ld(inp2, i));
}

template <typename scalar_t>
static __global__ void residual_backward_kernel(scalar_t *dinp1, scalar_t *dinp2,
                                                const scalar_t *dout, size_t N) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N;
       i += (size_t)gridDim.x * blockDim.x) {
    float d = zo_ld(dout, i);
    zo_st(dinp1, i, zo_ld(dinp1, i) + d);
    zo_st(dinp2, i, zo_ld(dinp2, i) + d);
  }
}

template <typename scalar_t>
static void residual_forward(void *out, const void *inp1, const void *inp2, size_t N,
                             zo_stream_t stream) {
  const int block = 256;
  residual_forward_kernel<scalar_t>
      <<<zo_cuda_grid_1d(N, block), block, 0, zo_cuda_stream(stream)>>>(
          (scalar_t *)out, (const scalar_t *)inp1, (const scalar_t *)inp2, N);
  ZO_CUDA_CHECK_LAUNCH();
}

template <typename scalar_t>
static void residual_backward(void *dinp1, void *dinp2, const void *dout, size_t N,
                              zo_stream_t stream) {
  const int block = 256;
  residual_backward_kernel<scalar_t>
      <<<zo_cuda_grid_1d(N, block), block, 0, zo_cuda_stream(stream)>>>(
          (scalar_t *)dinp1, (scalar_t *)dinp2, (const scalar_t *)dout, N);
  ZO_CUDA_CHECK_LAUNCH();
}

extern "C" void zo_cuda_residual_forward(void *out, const void *inp1, const void *inp2, size_t N,
                                         enum zo_dtype dt, zo_stream_t stream) {
  if (N == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, residual_forward, out, inp1, inp2, N, stream);
}

extern "C" void zo_cuda_residual_backward(void *dinp1, void *dinp2, const void *dout, size_t N,
                                          enum zo_dtype dt, zo_stream_t stream) {
  if (N == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, residual_backward, dinp1, dinp2, dout, N, stream);
}
