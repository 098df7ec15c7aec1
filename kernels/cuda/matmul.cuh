/* Fully connected layer through cuBLASLt (gemm.cuh), forward and backward. */
#ifndef ZO_CUDA_MATMUL_CUH
#define ZO_CUDA_MATMUL_CUH

#include "common.cuh"

extern "C" void zo_cuda_matmul_forward(void *out, const void *inp, const void *weight,
                                       const void *bias, int N, int C, int OC, enum zo_dtype dt,
                                       zo_stream_t stream);
extern "C" void zo_cuda_matmul_backward(void *dinp, float *dweight, float *dbias, const void *dout,
                                        const void *inp, const void *weight, int N, int C, int OC,
                                        enum zo_dtype dt, zo_stream_t stream);

#endif /* ZO_CUDA_MATMUL_CUH */
