/* LayerNorm over the last dimension, forward and backward. */
#ifndef ZO_CUDA_LAYERNORM_CUH
#define ZO_CUDA_LAYERNORM_CUH

#include "common.cuh"

extern "C" void zo_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                          const float *weight, const float *bias, int N, int C,
                                          zo_stream_t stream);
extern "C" void zo_cuda_layernorm_backward(float *dinp, float *dweight, float *dbias,
                                           const float *dout, const float *inp, const float *weight,
                                           const float *mean, const float *rstd, int N, int C,
                                           zo_stream_t stream);

#endif /* ZO_CUDA_LAYERNORM_CUH */
