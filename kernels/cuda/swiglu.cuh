/* SwiGLU (Llama's MLP activation), forward and backward. */
#ifndef ZO_CUDA_SWIGLU_CUH
#define ZO_CUDA_SWIGLU_CUH

#include "common.cuh"

extern "C" void zo_cuda_swiglu_forward(void *out, const void *inp, size_t N, int I,
                                       enum zo_dtype dt, zo_stream_t stream);
extern "C" void zo_cuda_swiglu_backward(void *dinp, const void *inp, const void *dout, size_t N,
                                        int I, enum zo_dtype dt, zo_stream_t stream);

#endif /* ZO_CUDA_SWIGLU_CUH */
