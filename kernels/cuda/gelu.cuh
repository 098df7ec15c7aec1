/* GELU, tanh approximation, forward and backward. */
#ifndef ZO_CUDA_GELU_CUH
#define ZO_CUDA_GELU_CUH

#include "common.cuh"

extern "C" void zo_cuda_gelu_forward(float *out, const float *inp, size_t N, zo_stream_t stream);
extern "C" void zo_cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t N,
                                      zo_stream_t stream);

#endif /* ZO_CUDA_GELU_CUH */
