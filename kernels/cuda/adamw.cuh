/* AdamW update, fp32, elementwise. */
#ifndef ZO_CUDA_ADAMW_CUH
#define ZO_CUDA_ADAMW_CUH

#include "common.cuh"

extern "C" void zo_cuda_adamw_update(float *p, const float *g, float *m, float *v, size_t n,
                                     float lr, float beta1, float beta2, float eps,
                                     float weight_decay, bool decay, long t, float grad_scale,
                                     zo_stream_t stream);

#endif /* ZO_CUDA_ADAMW_CUH */
