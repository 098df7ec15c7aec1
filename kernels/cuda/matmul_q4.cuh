/* GEMMs over a frozen 4-bit weight (zo/quant4.h): the forward and the input
 * gradient, panels of the dequantized weight in the stream's workspace. */
#ifndef ZO_CUDA_MATMUL_Q4_CUH
#define ZO_CUDA_MATMUL_Q4_CUH

#include "common.cuh"

extern "C" void zo_cuda_matmul_q4_forward(void *out, const void *inp, struct zo_quant4_weight w,
                                          const void *bias, int N, enum zo_dtype dt, zo_stream_t stream);
extern "C" void zo_cuda_matmul_q4_backward_dx(void *dinp, const void *dout, struct zo_quant4_weight w, int N,
                                              enum zo_dtype dt, zo_stream_t stream);

#endif /* ZO_CUDA_MATMUL_Q4_CUH */
