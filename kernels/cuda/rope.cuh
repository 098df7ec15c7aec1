/* Rotary position embedding (Hugging Face's rotate_half layout), in place on
 * the q and k heads of qkv, and its transpose. */
#ifndef ZO_CUDA_ROPE_CUH
#define ZO_CUDA_ROPE_CUH

#include "common.cuh"

extern "C" void zo_cuda_rope_forward(void *qkv, const float *cos, const float *sin, int B, int T,
                                     int NH, int NKV, int hs, enum zo_dtype dt,
                                     zo_stream_t stream);
extern "C" void zo_cuda_rope_backward(void *dqkv, const float *cos, const float *sin, int B, int T,
                                      int NH, int NKV, int hs, enum zo_dtype dt,
                                      zo_stream_t stream);

#endif /* ZO_CUDA_ROPE_CUH */
