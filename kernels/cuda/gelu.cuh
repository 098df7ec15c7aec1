/* GELU, tanh approximation, forward and backward. */
#ifndef ZO_CUDA_GELU_CUH
#define ZO_CUDA_GELU_CUH

#include "common.cuh"

extern "C" void zo_cuda_gelu_forward(void *out, const void *inp, size_t N, enum zo_dtype dt,
                                     zo_stream_t stream);
extern "C" void zo_cuda_gelu_backward(void *dinp, const void *inp, const void *dout, size_t N,
                                      enum zo_dtype dt, zo_stream_t stream);

#endif /* ZO_CUDA_GELU_CUH */
