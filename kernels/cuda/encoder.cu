/* GPT-2 encoder: out = wte[token] + wpe[t], and its backward, over fp32, bf16
 * or fp16 embeddings (the sum is fp32, rounded once into out; the gradients
 * are fp32). wpe NULL (Llama): out = wte[token], the row copied as on the
 * CPU; dwpe NULL skips the position gradient.
 * Backward is deterministic and sums in the CPU backend's order (positions
 * t-major, then b; kernels/cpu/ops_encoder.c), without atomics: dwpe gives
 * each (t, c) to one thread, which adds dout over b into dwpe[t, c]; dwte
 * gives each vocabulary row one owner: the positions are sorted by token
 * (CUB's stable radix sort, in the stream workspace, which stream order keeps
 * apart from GEMMs: common.cuh), and the first position of each token's run
 * adds the run's rows into dwte in position order, one thread per channel.
 * So fp32 dwte and dwpe are bitwise the CPU backend's. The padding index's
 * run adds nothing to dwte (nn.Embedding's padding_idx); dwpe still sums
 * every position. */
#include "encoder.cuh"

#include <cub/device/device_radix_sort.cuh>

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

/* dwpe[t, c] += dout[b, t, c] for b in order. */
template <typename scalar_t>
static __global__ void encoder_backward_wpe_kernel(float *dwpe, const scalar_t *dout, int B, int T,
                                                   int C) {
  size_t n = (size_t)T * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float acc = dwpe[i];
    for (int b = 0; b < B; b++) acc += zo_ld(dout, (size_t)b * n + i);
    dwpe[i] = acc;
  }
}

/* The sort's input: key p = the token at position p of the t-major order
 * (p = t B + b), value p. */
static __global__ void encoder_sort_input_kernel(int32_t *keys, int32_t *vals, const int32_t *inp,
                                                 int B, int T) {
  const size_t n = (size_t)B * T;
  for (size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x; p < n;
       p += (size_t)gridDim.x * blockDim.x) {
    const size_t t = p / (size_t)B, b = p % (size_t)B;
    keys[p] = inp[b * (size_t)T + t];
    vals[p] = (int32_t)p;
  }
}

/* Grid (B T, column blocks): block x owns sorted entry x's token when x
 * starts its run, and adds the run's dout rows in sorted (= t-major
 * position) order for its columns. */
template <typename scalar_t>
static __global__ void encoder_backward_wte_kernel(float *dwte, const scalar_t *dout,
                                                   const int32_t *keys, const int32_t *vals, int B,
                                                   int T, int C, int padding_idx) {
  const int n = B * T, x = blockIdx.x;
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C || (x > 0 && keys[x - 1] == keys[x])) return;
  const int32_t tok = keys[x];
  if (tok == padding_idx) return;
  float acc = dwte[(size_t)tok * C + c];
  for (int j = x; j < n && keys[j] == tok; j++) {
    const size_t p = (size_t)vals[j], t = p / (size_t)B, b = p % (size_t)B;
    acc += zo_ld(dout, (b * (size_t)T + t) * C + c);
  }
  dwte[(size_t)tok * C + c] = acc;
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

/* The workspace: keys and values in and out (4 arrays of B T int32, each
 * 256-byte aligned), then CUB's temporary storage. */
static size_t enc_align(size_t n) { return (n + 255) / 256 * 256; }

template <typename scalar_t>
static void encoder_backward(float *dwte, float *dwpe, const void *dout, const int32_t *inp, int B,
                             int T, int C, int padding_idx, zo_stream_t stream) {
  cudaStream_t s = zo_cuda_stream(stream);
  const int block = 256;
  if (dwpe) {
    const size_t n = (size_t)T * C;
    encoder_backward_wpe_kernel<scalar_t><<<zo_cuda_grid_1d(n, block), block, 0, s>>>(
        dwpe, (const scalar_t *)dout, B, T, C);
    ZO_CUDA_CHECK_LAUNCH();
  }
  const size_t n = (size_t)B * T, arr = enc_align(n * sizeof(int32_t));
  if (n > (size_t)INT32_MAX)
    zo_abort(__FILE__, __LINE__, "encoder_backward: B*T = %zu positions exceed int32", n);
  size_t temp_bytes = 0;
  ZO_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, (const int32_t *)NULL,
                                                (int32_t *)NULL, (const int32_t *)NULL,
                                                (int32_t *)NULL, (int)n, 0, 32, s));
  if (4 * arr + temp_bytes > ZO_CUDA_WORKSPACE_BYTES)
    zo_abort(__FILE__, __LINE__,
             "encoder_backward: sorting B*T = %zu positions needs %zu bytes of the stream "
             "workspace, which has %zu: lower the micro-batch or sequence length",
             n, 4 * arr + temp_bytes, (size_t)ZO_CUDA_WORKSPACE_BYTES);
  char *ws = (char *)zo_cuda_workspace(stream);
  int32_t *keys_in = (int32_t *)ws, *vals_in = (int32_t *)(ws + arr);
  int32_t *keys = (int32_t *)(ws + 2 * arr), *vals = (int32_t *)(ws + 3 * arr);
  encoder_sort_input_kernel<<<zo_cuda_grid_1d(n, block), block, 0, s>>>(keys_in, vals_in, inp, B,
                                                                          T);
  ZO_CUDA_CHECK_LAUNCH();
  ZO_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(ws + 4 * arr, temp_bytes, keys_in, keys, vals_in,
                                                vals, (int)n, 0, 32, s));
  dim3 grid((unsigned)n, zo_ceil_div((size_t)C, block));
  encoder_backward_wte_kernel<scalar_t><<<grid, block, 0, s>>>(dwte, (const scalar_t *)dout, keys,
                                                               vals, B, T, C, padding_idx);
  ZO_CUDA_CHECK_LAUNCH();
}

extern "C" void zo_cuda_encoder_forward(void *out, const int32_t *inp, const void *wte,
                                        const void *wpe, int B, int T, int C, enum zo_dtype dt,
                                        zo_stream_t stream) {
  if ((size_t)B * T * C == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, encoder_forward, out, inp, wte, wpe, B, T, C, stream);
}

extern "C" void zo_cuda_encoder_backward(float *dwte, float *dwpe, const void *dout,
                                         const int32_t *inp, int B, int T, int C, int padding_idx,
                                         enum zo_dtype dt, zo_stream_t stream) {
  if ((size_t)T * C == 0 || B == 0) return;
  ZO_CUDA_DT_DISPATCH(dt, encoder_backward, dwte, dwpe, dout, inp, B, T, C, padding_idx, stream);
}
