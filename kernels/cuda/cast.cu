/* dtype conversion between fp32, bf16 and fp16, elementwise: widening is
 * exact, narrowing rounds to nearest even (__float2bfloat16_rn,
 * __float2half_rn: NaN stays NaN, overflow gives inf), fp16 <-> bf16 goes
 * through fp32, which is exact on the way in. Equal dtypes are a plain
 * device copy (none when dst == src). The 3 x 3 instantiations are one
 * template over the source and destination storage types. */
#include "cast.cuh"

template <typename dst_t, typename src_t>
static __global__ void cast_kernel(dst_t *dst, const src_t *src, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    zo_st(dst, i, zo_ld(src, i));
}

template <typename dst_t, typename src_t>
static void cast_launch(void *dst, const void *src, size_t n, zo_stream_t stream) {
  const int block = 256;
  cast_kernel<dst_t, src_t><<<zo_cuda_grid_1d(n, block), block, 0, zo_cuda_stream(stream)>>>(
      (dst_t *)dst, (const src_t *)src, n);
  ZO_CUDA_CHECK_LAUNCH();
}

/* Instantiated per source type, dispatching on the destination's. */
template <typename src_t>
static void cast_from(void *dst, enum zo_dtype dst_dt, const void *src, size_t n,
                      zo_stream_t stream) {
  switch (dst_dt) {
  case ZO_F32: cast_launch<float, src_t>(dst, src, n, stream); break;
  case ZO_BF16: cast_launch<__nv_bfloat16, src_t>(dst, src, n, stream); break;
  case ZO_F16: cast_launch<__half, src_t>(dst, src, n, stream); break;
  default:
    zo_abort(__FILE__, __LINE__, "cast: destination dtype %s: need F32, BF16 or F16",
             zo_dtype_name(dst_dt));
  }
}

extern "C" void zo_cuda_cast(void *dst, enum zo_dtype dst_dt, const void *src, enum zo_dtype src_dt,
                             size_t n, zo_stream_t stream) {
  (void)zo_cuda_data_type(dst_dt);
  (void)zo_cuda_data_type(src_dt);
  if (n == 0) return;
  if (dst_dt == src_dt) {
    if (dst != src)
      ZO_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * zo_dtype_size(dst_dt), cudaMemcpyDeviceToDevice,
                                    zo_cuda_stream(stream)));
    return;
  }
  ZO_CUDA_DT_DISPATCH(src_dt, cast_from, dst, dst_dt, src, n, stream);
}
