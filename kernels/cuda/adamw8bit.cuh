/* AdamW with block-wise 8-bit states (zo/adamw8bit.h), one CUDA block per
 * quantization block. */
#ifndef ZO_CUDA_ADAMW8BIT_CUH
#define ZO_CUDA_ADAMW8BIT_CUH

#include "common.cuh"

extern "C" void zo_cuda_adamw8bit_update(float *p, const float *g, uint8_t *m_code, float *m_absmax,
                                         uint8_t *v_code, float *v_absmax, size_t n, size_t block,
                                         float lr, float beta1, float beta2, float eps,
                                         float weight_decay, bool decay, long t, float grad_scale,
                                         zo_stream_t stream);

#endif /* ZO_CUDA_ADAMW8BIT_CUH */
