/* Shared by every CUDA op: the check macros, the zo_stream -> cudaStream_t
 * mapping, launch geometry helpers and warp/block reductions. Not a public
 * header: CUDA types stay inside kernels/cuda/. Nothing here allocates.
 * Invariant: this code is compiled without --default-stream per-thread, so
 * stream 0 is the legacy default stream that the contract gives the NULL
 * zo_stream. */
#ifndef ZO_CUDA_COMMON_CUH
#define ZO_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "zo/backend.h"

#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
#error "zo-kernels-cuda maps the NULL zo_stream to the legacy default stream (stream 0)"
#endif

/* ---- error checks ---------------------------------------------------------- */

/* For calls whose failure breaks a void contract (ops, destroy): aborts with
 * the statement, the error name and file:line. */
#define ZO_CUDA_CHECK(call)                                                                        \
  do {                                                                                             \
    cudaError_t cu_err_ = (call);                                                                  \
    if (cu_err_ != cudaSuccess)                                                                    \
      zo_abort(__FILE__, __LINE__, "%s: %s (%s)", #call, cudaGetErrorName(cu_err_),                \
               cudaGetErrorString(cu_err_));                                                       \
  } while (0)

#define ZO_CUBLAS_CHECK(call)                                                                      \
  do {                                                                                             \
    cublasStatus_t cb_st_ = (call);                                                                \
    if (cb_st_ != CUBLAS_STATUS_SUCCESS)                                                           \
      zo_abort(__FILE__, __LINE__, "%s: %s (%s)", #call, cublasLtGetStatusName(cb_st_),            \
               cublasLtGetStatusString(cb_st_));                                                   \
  } while (0)

/* After a kernel launch: a bad configuration shows up here, not at the next
 * synchronize. */
#define ZO_CUDA_CHECK_LAUNCH() ZO_CUDA_CHECK(cudaGetLastError())

/* For int functions: evaluates to 0, or sets zo_last_error (statement, error
 * name, file:line) and evaluates to -ENOMEM for cudaErrorMemoryAllocation and
 * -EIO otherwise. The caller returns it: `int err = ZO_CUDA_TRY(...); if (err)
 * return err;` (no macro hides a return). */
#define ZO_CUDA_TRY(call) zo_cuda_try((call), #call, __FILE__, __LINE__)

static inline int zo_cuda_try(cudaError_t err, const char *stmt, const char *file, int line) {
  if (err == cudaSuccess) return 0;
  /* Clear the non-sticky error so the next launch check does not report it. */
  (void)cudaGetLastError();
  return zo_error(err == cudaErrorMemoryAllocation ? -ENOMEM : -EIO, "%s:%d: %s: %s (%s)", file,
                  line, stmt, cudaGetErrorName(err), cudaGetErrorString(err));
}

/* ---- streams ----------------------------------------------------------------- */

/* A zo_stream on CUDA: the stream plus the cuBLASLt workspace that GEMMs on it
 * use (a workspace must never serve two GEMMs running at once, and GEMMs on
 * different streams may run at once). Other ops on the same stream may use it
 * as scratch between GEMMs (sumsq does): stream order keeps them apart.
 * backend.cu owns creation. */
struct zo_stream {
  cudaStream_t cu;
  void *workspace; /* device, ZO_CUDA_WORKSPACE_BYTES */
};

/* bytes of cuBLASLt workspace per stream (32 MiB: what cuBLAS asks on Hopper) */
#define ZO_CUDA_WORKSPACE_BYTES ((size_t)32 << 20)

static inline cudaStream_t zo_cuda_stream(zo_stream_t stream) {
  return stream ? stream->cu : (cudaStream_t)0;
}

/* Process-wide state set once by zo_backend_cuda() (backend.cu). */
struct zo_cuda_state {
  cublasLtHandle_t lt;
  void *default_workspace; /* the NULL stream's workspace */
  cudaDeviceProp prop;
  int device;
};
extern struct zo_cuda_state zo_cuda;

static inline void *zo_cuda_workspace(zo_stream_t stream) {
  return stream ? stream->workspace : zo_cuda.default_workspace;
}

/* ---- launch geometry and reductions --------------------------------------------- */

#define ZO_WARP 32

static inline unsigned zo_ceil_div(size_t n, size_t d) { return (unsigned)((n + d - 1) / d); }

/* Blocks for a grid-stride loop over n elements: enough to fill the device,
 * never more than the loop needs. */
static inline unsigned zo_cuda_grid_1d(size_t n, int block) {
  size_t want = (n + (size_t)block - 1) / (size_t)block;
  size_t cap = (size_t)zo_cuda.prop.multiProcessorCount * 16;
  if (want > cap) want = cap;
  return want ? (unsigned)want : 1u;
}

static __device__ __forceinline__ float zo_warp_sum(float v) {
  for (int o = ZO_WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

static __device__ __forceinline__ float zo_warp_max(float v) {
  for (int o = ZO_WARP / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

#endif /* ZO_CUDA_COMMON_CUH */
