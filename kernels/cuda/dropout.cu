/* Inverted dropout over fp32, bf16 or fp16: out = inp * (1 / (1 - p)) where
 * the element is kept, else 0, the scale the fp32 value the CPU backend
 * computes and one rounding per stored element. The mask is the CPU's
 * exactly: the same header-only Philox4x32-10 (zo/philox.h), counter
 * (i / 4, site), key seed, threshold compare; each thread draws one counter
 * and writes its four elements. out may alias inp: a thread reads its four
 * elements before writing them and no other thread touches them. */
#include "dropout.cuh"
#include "zo/philox.h"

template <typename scalar_t>
static __global__ void dropout_kernel(scalar_t *out, const scalar_t *inp, size_t N, uint32_t thr, float scale,
                                      uint64_t seed, uint64_t site) {
  const size_t n4 = (N + 3) / 4;
  for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < n4; j += (size_t)gridDim.x * blockDim.x) {
    uint32_t r[4];
    zo_philox_dropout_draws(r, seed, site, j);
    for (int k = 0; k < 4; k++) {
      const size_t i = 4 * j + (size_t)k;
      if (i < N) zo_st(out, i, r[k] >= thr ? zo_ld(inp, i) * scale : 0.0f);
    }
  }
}

template <typename scalar_t>
static void dropout(void *out, const void *inp, size_t N, uint32_t thr, float scale, uint64_t seed, uint64_t site,
                    zo_stream_t stream) {
  const int block = 256;
  dropout_kernel<scalar_t><<<zo_cuda_grid_1d((N + 3) / 4, block), block, 0, zo_cuda_stream(stream)>>>(
      (scalar_t *)out, (const scalar_t *)inp, N, thr, scale, seed, site);
  ZO_CUDA_CHECK_LAUNCH();
}

extern "C" void zo_cuda_dropout(void *out, const void *inp, size_t N, float p, uint64_t seed, uint64_t site,
                                enum zo_dtype dt, zo_stream_t stream) {
  if (N == 0) return;
  const uint32_t thr = zo_philox_dropout_threshold(p);
  const float scale = (float)(1.0 / (1.0 - (double)p));
  ZO_CUDA_DT_DISPATCH(dt, dropout, out, inp, N, thr, scale, seed, site, stream);
}
