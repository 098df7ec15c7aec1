/* Shared by every CUDA op: the check macros, the zo_stream -> cudaStream_t
 * mapping, dtype loads, stores and dispatch, launch geometry helpers and
 * warp/block reductions. Not a public header: CUDA types stay inside
 * kernels/cuda/. Nothing here allocates.
 * Invariant: this code is compiled without --default-stream per-thread, so
 * stream 0 is the legacy default stream that the contract gives the NULL
 * zo_stream. */
#ifndef ZO_CUDA_COMMON_CUH
#define ZO_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
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
 * as scratch between GEMMs (sumsq, the norms' and matmul's weight-gradient
 * partials, the encoder's position sort; attention's bf16/fp16 path keeps
 * fp32 scores in its upper half while its GEMMs get the lower half): stream
 * order keeps them apart. The workspace is planned device memory the engine
 * gives the stream (stream_set_workspace, carved from its device arena); a
 * stream never given one allocates its own on first use (tests, tools).
 * backend.cu owns creation. */
struct zo_stream {
  cudaStream_t cu;
  void *workspace;     /* device, ZO_CUDA_WORKSPACE_BYTES; NULL until given or first used */
  bool owns_workspace; /* allocated by the backend (freed with the stream) */
};

/* bytes of cuBLASLt workspace per stream (32 MiB: what cuBLAS asks on Hopper) */
#define ZO_CUDA_WORKSPACE_BYTES ((size_t)32 << 20)

static inline cudaStream_t zo_cuda_stream(zo_stream_t stream) {
  return stream ? stream->cu : (cudaStream_t)0;
}

/* Process-wide state set once by zo_backend_cuda() (backend.cu). */
struct zo_cuda_state {
  cublasLtHandle_t lt;
  void *default_workspace; /* the NULL stream's workspace, allocated on first use */
  cudaDeviceProp prop;
  int device;
  bool gemm_fallback; /* ZO_CUDA_GEMM=fallback: every GEMM takes the tiled kernel (gemm.cu) */
};
extern struct zo_cuda_state zo_cuda;

/* The stream's workspace (ZO_CUDA_WORKSPACE_BYTES of device memory): the one
 * the engine gave it, or the backend's own, allocated on first use (aborts
 * naming the bytes when that fails). backend.cu. */
void *zo_cuda_workspace(zo_stream_t stream);

/* ---- dtypes -------------------------------------------------------------------- */

/* Element i of p as a float (widening is exact), and x stored as element i
 * of p, rounded once to nearest even: the CPU backend's zo_ld / zo_st
 * (kernels/cpu/ops_half.h), overloaded on the storage type. Kernels are
 * templates over scalar_t = float, __nv_bfloat16 or __half and do their
 * arithmetic in float between one zo_ld and one zo_st. */
static __device__ __forceinline__ float zo_ld(const float *p, size_t i) { return p[i]; }
static __device__ __forceinline__ float zo_ld(const __nv_bfloat16 *p, size_t i) {
  return __bfloat162float(p[i]);
}
static __device__ __forceinline__ float zo_ld(const __half *p, size_t i) {
  return __half2float(p[i]);
}
static __device__ __forceinline__ void zo_st(float *p, size_t i, float x) { p[i] = x; }
static __device__ __forceinline__ void zo_st(__nv_bfloat16 *p, size_t i, float x) {
  p[i] = __float2bfloat16_rn(x);
}
static __device__ __forceinline__ void zo_st(__half *p, size_t i, float x) {
  p[i] = __float2half_rn(x);
}

/* Calls fn<scalar_t>(args...) with scalar_t the storage type of dt (the CPU
 * backend's ZO_DT_DISPATCH); other dtypes are a broken contract. */
#define ZO_CUDA_DT_DISPATCH(dt, fn, ...)                                                           \
  do {                                                                                             \
    switch (dt) {                                                                                  \
    case ZO_F32: fn<float>(__VA_ARGS__); break;                                                    \
    case ZO_BF16: fn<__nv_bfloat16>(__VA_ARGS__); break;                                           \
    case ZO_F16: fn<__half>(__VA_ARGS__); break;                                                   \
    default:                                                                                       \
        zo_abort(__FILE__, __LINE__, "op dtype %s: need F32, BF16 or F16", zo_dtype_name(dt));     \
    }                                                                                              \
  } while (0)

/* The cuBLASLt matrix type of an op dtype. */
static inline cudaDataType_t zo_cuda_data_type(enum zo_dtype dt) {
  switch (dt) {
  case ZO_F32: return CUDA_R_32F;
  case ZO_BF16: return CUDA_R_16BF;
  case ZO_F16: return CUDA_R_16F;
  default: zo_abort(__FILE__, __LINE__, "op dtype %s: need F32, BF16 or F16", zo_dtype_name(dt));
  }
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
