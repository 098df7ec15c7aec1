/* CUDA backend entry point. This version only probes for a driver and a GPU:
 * the kernels, cuBLASLt GEMMs and stream mapping are not written yet, so
 * zo_backend_cuda() reports that and "device": "auto" falls back to the CPU.
 * It is compiled whenever nvcc is found so that the CUDA toolchain, the
 * architectures and the link against cudart/cuBLASLt are exercised in CI. */
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <errno.h>

extern "C" {
#include "zo/backend.h"
}

extern "C" zo_backend_t zo_backend_cuda(void) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    zo_error(-ENODEV, "no usable CUDA device (cudaGetDeviceCount: %s: %s)", cudaGetErrorName(err),
             cudaGetErrorString(err));
    return NULL;
  }
  if (n == 0) {
    zo_error(-ENODEV, "no CUDA device found");
    return NULL;
  }
  size_t version = cublasLtGetVersion();
  zo_error(-ENOTSUP,
           "found %d CUDA device(s) and cuBLASLt %zu, but this build's CUDA backend has no "
           "kernels yet",
           n, version);
  return NULL;
}
