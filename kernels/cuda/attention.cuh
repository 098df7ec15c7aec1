/* Causal self-attention with grouped-query heads, forward and backward. */
#ifndef ZO_CUDA_ATTENTION_CUH
#define ZO_CUDA_ATTENTION_CUH

#include "common.cuh"

extern "C" void zo_cuda_attention_forward(void *out, void *att, const void *qkv, int B, int T,
                                          int NH, int NKV, int hs, enum zo_dtype dt,
                                          zo_stream_t stream);
/* The same with a sliding window: query t attends to keys (t - window, t]. */
extern "C" void zo_cuda_attention_window_forward(void *out, void *att, const void *qkv, int B, int T,
                                                 int NH, int NKV, int hs, int window, enum zo_dtype dt,
                                                 zo_stream_t stream);
extern "C" void zo_cuda_attention_backward(void *dqkv, void *datt, const void *dout,
                                           const void *qkv, const void *att, int B, int T, int NH,
                                           int NKV, int hs, enum zo_dtype dt, zo_stream_t stream);

#endif /* ZO_CUDA_ATTENTION_CUH */
