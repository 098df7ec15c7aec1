/* The strided scaled add y[:, col0:col0+M] += s * v and its backward
 * dv = s * dy[:, col0:col0+M]. */
#ifndef ZO_CUDA_SCALED_ADD_CUH
#define ZO_CUDA_SCALED_ADD_CUH

#include "common.cuh"

extern "C" void zo_cuda_scaled_add_forward(void *y, const void *v, float s, int N, int M, int ld_y, int col0,
                                           enum zo_dtype dt, zo_stream_t stream);
extern "C" void zo_cuda_scaled_add_backward(void *dv, const void *dy, float s, int N, int M, int ld_y,
                                            int col0, enum zo_dtype dt, zo_stream_t stream);

#endif /* ZO_CUDA_SCALED_ADD_CUH */
