/* GPT-2 encoder (token + position embedding) and its backward. */
#ifndef ZO_CUDA_ENCODER_CUH
#define ZO_CUDA_ENCODER_CUH

#include "common.cuh"

extern "C" void zo_cuda_encoder_forward(void *out, const int32_t *inp, const void *wte,
                                        const void *wpe, int B, int T, int C, enum zo_dtype dt,
                                        zo_stream_t stream);
extern "C" void zo_cuda_encoder_backward(float *dwte, float *dwpe, const void *dout,
                                         const int32_t *inp, int B, int T, int C, int padding_idx,
                                         enum zo_dtype dt, zo_stream_t stream);

#endif /* ZO_CUDA_ENCODER_CUH */
