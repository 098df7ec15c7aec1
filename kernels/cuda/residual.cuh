/* Residual add, forward and backward. */
#ifndef ZO_CUDA_RESIDUAL_CUH
#define ZO_CUDA_RESIDUAL_CUH

#include "common.cuh"

extern "C" void zo_cuda_residual_forward(float *out, const float *inp1, const float *inp2, size_t N,
                                         zo_stream_t stream);
extern "C" void zo_cuda_residual_backward(float *dinp1, float *dinp2, const float *dout, size_t N,
                                          zo_stream_t stream);

#endif /* ZO_CUDA_RESIDUAL_CUH */
