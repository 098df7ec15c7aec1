/* dtype conversion (fp32, bf16, fp16) over device memory. */
#ifndef ZO_CUDA_CAST_CUH
#define ZO_CUDA_CAST_CUH

#include "common.cuh"

extern "C" void zo_cuda_cast(void *dst, enum zo_dtype dst_dt, const void *src, enum zo_dtype src_dt,
                             size_t n, zo_stream_t stream);

#endif /* ZO_CUDA_CAST_CUH */
