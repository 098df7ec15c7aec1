/* Fused softmax + cross-entropy over padded logits, with the gradient. */
#ifndef ZO_CUDA_CROSSENTROPY_CUH
#define ZO_CUDA_CROSSENTROPY_CUH

#include "common.cuh"

extern "C" void zo_cuda_crossentropy_forward(float *losses, void *dlogits, const void *logits,
                                             const int32_t *targets, float dloss, int N, int V,
                                             int Vp, enum zo_dtype dt, zo_stream_t stream);

#endif /* ZO_CUDA_CROSSENTROPY_CUH */
