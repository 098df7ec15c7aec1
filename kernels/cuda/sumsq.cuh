/* Deterministic sum of squares in double. */
#ifndef ZO_CUDA_SUMSQ_CUH
#define ZO_CUDA_SUMSQ_CUH

#include "common.cuh"

extern "C" void zo_cuda_sumsq(double *out, const float *x, size_t n, zo_stream_t stream);

#endif /* ZO_CUDA_SUMSQ_CUH */
