/* LayerNorm over the last dimension, forward and backward. */
#ifndef ZO_CUDA_LAYERNORM_CUH
#define ZO_CUDA_LAYERNORM_CUH

#include "common.cuh"

extern "C" void zo_cuda_layernorm_forward(void *out, float *mean, float *rstd, const void *inp,
                                          const void *weight, const void *bias, int N, int C,
                                          enum zo_dtype dt, zo_stream_t stream);
extern "C" void zo_cuda_layernorm_backward(void *dinp, float *dweight, float *dbias,
                                           const void *dout, const void *inp, const void *weight,
                                           const float *mean, const float *rstd, int N, int C,
                                           enum zo_dtype dt, zo_stream_t stream);

#endif /* ZO_CUDA_LAYERNORM_CUH */
