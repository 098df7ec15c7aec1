/* RMSNorm over the last dimension (Llama), forward and backward. */
#ifndef ZO_CUDA_RMSNORM_CUH
#define ZO_CUDA_RMSNORM_CUH

#include "common.cuh"

extern "C" void zo_cuda_rmsnorm_forward(void *out, float *rstd, const void *inp, const void *weight,
                                        float eps, int N, int C, enum zo_dtype dt,
                                        zo_stream_t stream);
extern "C" void zo_cuda_rmsnorm_backward(void *dinp, float *dweight, const void *dout,
                                         const void *inp, const void *weight, const float *rstd,
                                         int N, int C, enum zo_dtype dt, zo_stream_t stream);
/* RMSNorm of each head's D elements, rows at n ld + h D (backend.h's rmsnorm_heads_*). */
extern "C" void zo_cuda_rmsnorm_heads_forward(void *out, float *rstd, const void *inp, const void *weight,
                                              float eps, int N, int H, int D, int ld_out, int ld_inp,
                                              enum zo_dtype dt, zo_stream_t stream);
extern "C" void zo_cuda_rmsnorm_heads_backward(void *dinp, float *dweight, const void *dout, const void *inp,
                                               const void *weight, const float *rstd, int N, int H, int D,
                                               int ld_d, int ld_inp, enum zo_dtype dt, zo_stream_t stream);

#endif /* ZO_CUDA_RMSNORM_CUH */
