/* Inverted dropout with a Philox4x32-10 mask (zo/philox.h), forward and
 * backward (the same op on the gradient). */
#ifndef ZO_CUDA_DROPOUT_CUH
#define ZO_CUDA_DROPOUT_CUH

#include "common.cuh"

extern "C" void zo_cuda_dropout(void *out, const void *inp, size_t N, float p, uint64_t seed, uint64_t site,
                                enum zo_dtype dt, zo_stream_t stream);

#endif /* ZO_CUDA_DROPOUT_CUH */
