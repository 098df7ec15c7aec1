/* Causal multi-head self-attention, forward and backward. */
#ifndef ZO_CUDA_ATTENTION_CUH
#define ZO_CUDA_ATTENTION_CUH

#include "common.cuh"

extern "C" void zo_cuda_attention_forward(float *out, float *att, const float *qkv, int B, int T,
                                          int C, int NH, zo_stream_t stream);
extern "C" void zo_cuda_attention_backward(float *dqkv, float *datt, const float *dout,
                                           const float *qkv, const float *att, int B, int T, int C,
                                           int NH, zo_stream_t stream);

#endif /* ZO_CUDA_ATTENTION_CUH */
