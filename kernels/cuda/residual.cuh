/* Residual add, forward and backward. */
#ifndef ZO_CUDA_RESIDUAL_CUH
#define ZO_CUDA_RESIDUAL_CUH

#include "common.cuh"

extern "C" void zo_cuda_residual_forward(void *out, const void *inp1, const void *inp2, size_t N,
                                         enum zo_dtype dt, zo_stream_t stream);
extern "C" void zo_cuda_residual_backward(void *dinp1, void *dinp2, const void *dout, size_t N,
                                          enum zo_dtype dt, zo_stream_t stream);

#endif /* ZO_CUDA_RESIDUAL_CUH */
