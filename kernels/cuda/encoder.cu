/* GPT-2 encoder: out = wte[token] + wpe[t], and its backward, over fp32, bf16
 * or fp16 embeddings (the sum is fp32, rounded once into out; the gradients
 * are fp32). wpe NULL (Llama): out = wte[token], the row copied as on the
 * CPU; dwpe NULL skips the position gradient. Backward gives each (t, c) to
 * one thread, which sums dout over the batch in order for dwpe (no atomics,
 * deterministic) and scatters into dwte with atomicAdd, because the same
 * token may occur at several positions: dwte's summation order, and so its
 * last bits, vary from run to run. */
#include "encoder.cuh"

template <typename scalar_t>
static __global__ void encoder_forward_kernel(scalar_t *out, const int32_t *inp,
                                              const scalar_t *wte, const scalar_t *wpe, int B,
                                              int T, int C) {
  size_t n = (size_t)B * T * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t bt = i / C;
    int c = (int)(i % C);
    int t = (int)(bt % T);
    const float e = zo_ld(wte, (size_t)inp[bt] * C + c);
    zo_st(out, i, wpe ? e + zo_ld(wpe, (size_t)t * C + c) : e);
  }
}

template <typename scalar_t>
static __global__ void encoder_backward_kernel(float *dwte, float *dwpe, const scalar_t *dout,
                                               const int32_t *inp, int B, int T, int C) {
  size_t n = (size_t)T * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    int t = (int)(i / C), c = (int)(i % C);
    float acc = 0.0f;
    for (int b = 0; b < B; b++) {
      size_t bt = (size_t)b * T + t;
      float d = zo_ld(dout, bt * C + c);
      atomicAdd(&dwte[(size_t)inp[bt] * C + c], d);
      acc += d;
    }
    if (dwpe) dwpe[i] += acc;
  }
}

template <typename scalar_t>
static void encoder_forward(void *out, const int32_t *inp, const void *wte, const void *wpe, int B,
                            int T, int C, zo_stream_t stream) {
  size_t n = (size_t)B * T * C;
  const int block = 256;
  encoder_forward_kernel<scalar_t><<<zo_cuda_grid_1d(n, block), block, 0, zo_cuda_stream(stream)>>>(
      (scalar_t *)out, inp, (const scalar_t *)wte, (const scalar_t *)wpe, B, T, C);
  ZO_CUDA_CHECK_LAUNCH();
}

template <typename scalar_t>
static void encoder_backward(float *dwte, float *dwpe, const void *dout, const int32_t *inp, int B,
                             int T, int C, zo_stream_t stream) {
  size_t n = (size_t)T * C;
  const int block = 256;
  encoder_backward_kernel<scalar_t>
      <<<zo_cuda_grid_1d(n, block), block, 0, zo_cuda_stream(stream)>>>(
          dwte, dwpe, (const scalar_t *)dout, inp, B, T, C);
  ZO_CUDA_CHECK_LAUNCH();
}

extern "C" void zo_cuda_encoder_forward(void *out, const int32_t *inp, const void *wte,
                                        const void *wpe, int B, int T, int C, enum zo_dtype dt,
                                        zo_stream_t stream) {
  if ((size_t)B * T * C == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, encoder_forward, out, inp, wte, wpe, B, T, C, stream);
}

extern "C" void zo_cuda_encoder_backward(float *dwte, float *dwpe, const void *dout,
                                         const int32_t *inp, int B, int T, int C, enum zo_dtype dt,
                                         zo_stream_t stream) {
  if ((size_t)T * C == 0 || B == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, encoder_backward, dwte, dwpe, dout, inp, B, T, C, stream);
}
