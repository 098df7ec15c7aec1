/* GPT-2 encoder: out = wte[token] + wpe[t], and its backward. Backward gives
 * each (t, c) to one thread, which sums dout over the batch in order for dwpe
 * (no atomics, deterministic) and scatters into dwte with atomicAdd, because
 * the same token may occur at several positions: dwte's summation order, and
 * so its last bits, vary from run to run. */
#include "encoder.cuh"

static __global__ void encoder_forward_kernel(float *out, const int32_t *inp, const float *wte,
                                              const float *wpe, int B, int T, int C) {
  size_t n = (size_t)B * T * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t bt = i / C;
    int c = (int)(i % C);
    int t = (int)(bt % T);
    out[i] = wte[(size_t)inp[bt] * C + c] + wpe[(size_t)t * C + c];
  }
}

static __global__ void encoder_backward_kernel(float *dwte, float *dwpe, const float *dout,
                                               const int32_t *inp, int B, int T, int C) {
  size_t n = (size_t)T * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    int t = (int)(i / C), c = (int)(i % C);
    float acc = 0.0f;
    for (int b = 0; b < B; b++) {
      size_t bt = (size_t)b * T + t;
      float d = dout[bt * C + c];
      atomicAdd(&dwte[(size_t)inp[bt] * C + c], d);
      acc += d;
    }
    dwpe[i] += acc;
  }
}

extern "C" void zo_cuda_encoder_forward(float *out, const int32_t *inp, const float *wte,
                                        const float *wpe, int B, int T, int C, zo_stream_t stream) {
  size_t n = (size_t)B * T * C;
  if (n == 0) return;
  const int block = 256;
  encoder_forward_kernel<<<zo_cuda_grid_1d(n, block), block, 0, zo_cuda_stream(stream)>>>(
      out, inp, wte, wpe, B, T, C);
  ZO_CUDA_CHECK_LAUNCH();
}

extern "C" void zo_cuda_encoder_backward(float *dwte, float *dwpe, const float *dout,
                                         const int32_t *inp, int B, int T, int C,
                                         zo_stream_t stream) {
  size_t n = (size_t)T * C;
  if (n == 0 || B == 0) return;
  const int block = 256;
  encoder_backward_kernel<<<zo_cuda_grid_1d(n, block), block, 0, zo_cuda_stream(stream)>>>(
      dwte, dwpe, dout, inp, B, T, C);
  ZO_CUDA_CHECK_LAUNCH();
}
