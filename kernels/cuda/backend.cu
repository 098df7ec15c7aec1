/* The CUDA backend table: device memory, streams, events and copies map onto
 * the CUDA runtime one to one; the ops are the launchers in the per-op .cu
 * files. zo_backend_cuda() initialises once (device properties, the cuBLASLt
 * handle, the NULL stream's cuBLASLt workspace) and returns NULL with a
 * message when there is no driver or no device, so "device": "auto" falls
 * back to the CPU. Uses the current device (0 unless the caller chose one).
 * Not yet: the cuBLASLt workspaces (32 MiB per stream and one for the NULL
 * stream) are cudaMalloc'ed outside the device arena; the planner does not
 * count them, and the arena should own them. */
#include "common.cuh"

#include "adamw.cuh"
#include "adamw8bit.cuh"
#include "attention.cuh"
#include "cast.cuh"
#include "crossentropy.cuh"
#include "encoder.cuh"
#include "gelu.cuh"
#include "layernorm.cuh"
#include "matmul.cuh"
#include "residual.cuh"
#include "rmsnorm.cuh"
#include "rope.cuh"
#include "sumsq.cuh"
#include "swiglu.cuh"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct zo_cuda_state zo_cuda;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_err;       /* 0 or -errno, set once */
static char init_msg[512]; /* zo_last_error of a failed init, for every caller */

/* ---- memory ----------------------------------------------------------------------- */

static int cuda_mem_info(size_t *free_bytes, size_t *total_bytes) {
  return ZO_CUDA_TRY(cudaMemGetInfo(free_bytes, total_bytes));
}

static int cuda_mem_alloc(void **ptr, size_t nbytes) {
  *ptr = NULL;
  cudaError_t err = cudaMalloc(ptr, nbytes ? nbytes : 1);
  if (err == cudaSuccess) return 0;
  (void)cudaGetLastError();
  *ptr = NULL;
  size_t free_bytes = 0, total_bytes = 0;
  char asked[32], avail[32] = "?", total[32] = "?";
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    zo_format_bytes(free_bytes, avail);
    zo_format_bytes(total_bytes, total);
  } else {
    (void)cudaGetLastError();
  }
  return zo_error(err == cudaErrorMemoryAllocation ? -ENOMEM : -EIO,
                  "cuda backend: cannot allocate %s (%zu bytes) of device memory for the device "
                  "arena (cudaMalloc: %s); %s free of %s total on %s: lower "
                  "engine.gpu_memory_budget or offload more (zero_optimization.offload_param)",
                  zo_format_bytes(nbytes, asked), nbytes, cudaGetErrorName(err), avail, total,
                  zo_cuda.prop.name);
}

static void cuda_mem_free(void *ptr) {
  if (ptr) ZO_CUDA_CHECK(cudaFree(ptr));
}

/* Ops size their own launches; nothing to set. */
static void cuda_set_threads(int n_threads) { (void)n_threads; }

/* The host pool's pages are locked already; registering them makes copies
 * from and to them DMA, asynchronous on their stream. */
static int cuda_host_register(void *ptr, size_t nbytes) {
  return ZO_CUDA_TRY(cudaHostRegister(ptr, nbytes, cudaHostRegisterDefault));
}

static void cuda_host_unregister(void *ptr) { ZO_CUDA_CHECK(cudaHostUnregister(ptr)); }

static int cuda_device_pci_bus_id(char *buf, size_t size) {
  return ZO_CUDA_TRY(cudaDeviceGetPCIBusId(buf, (int)size, zo_cuda.device));
}

/* ---- streams and events ----------------------------------------------------------- */

static int cuda_stream_create(zo_stream_t *stream) {
  *stream = NULL;
  struct zo_stream *s = (struct zo_stream *)calloc(1, sizeof *s);
  if (!s) return zo_error(-ENOMEM, "cuda backend: out of host memory for a stream");
  int err = ZO_CUDA_TRY(cudaStreamCreateWithFlags(&s->cu, cudaStreamNonBlocking));
  if (err) goto out_free;
  err = ZO_CUDA_TRY(cudaMalloc(&s->workspace, ZO_CUDA_WORKSPACE_BYTES));
  if (err) goto out_destroy;
  *stream = s;
  return 0;
out_destroy:
  ZO_CUDA_CHECK(cudaStreamDestroy(s->cu));
out_free:
  free(s);
  return err;
}

/* The contract says destroy waits for queued work: the workspace must outlive
 * the GEMMs using it, so synchronize before freeing either. */
static void cuda_stream_destroy(zo_stream_t stream) {
  if (!stream) return;
  ZO_CUDA_CHECK(cudaStreamSynchronize(stream->cu));
  ZO_CUDA_CHECK(cudaFree(stream->workspace));
  ZO_CUDA_CHECK(cudaStreamDestroy(stream->cu));
  free(stream);
}

static int cuda_stream_synchronize(zo_stream_t stream) {
  return ZO_CUDA_TRY(cudaStreamSynchronize(zo_cuda_stream(stream)));
}

/* zo_event_t is the cudaEvent_t itself (both are opaque pointers). */
static int cuda_event_create(zo_event_t *event) {
  cudaEvent_t e = NULL;
  int err = ZO_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  *event = (zo_event_t)e;
  return err;
}

static void cuda_event_destroy(zo_event_t event) {
  if (event) ZO_CUDA_CHECK(cudaEventDestroy((cudaEvent_t)event));
}

static int cuda_event_record(zo_event_t event, zo_stream_t stream) {
  return ZO_CUDA_TRY(cudaEventRecord((cudaEvent_t)event, zo_cuda_stream(stream)));
}

/* A never-recorded event is complete for cudaStreamWaitEvent and
 * cudaEventSynchronize alike, as the contract wants. */
static int cuda_stream_wait_event(zo_stream_t stream, zo_event_t event) {
  return ZO_CUDA_TRY(cudaStreamWaitEvent(zo_cuda_stream(stream), (cudaEvent_t)event, 0));
}

static int cuda_event_synchronize(zo_event_t event) {
  return ZO_CUDA_TRY(cudaEventSynchronize((cudaEvent_t)event));
}

static int cuda_memcpy_async(void *dst, const void *src, size_t nbytes, enum zo_copy_kind kind,
                             zo_stream_t stream) {
  cudaMemcpyKind k = cudaMemcpyDefault;
  switch (kind) {
  case ZO_COPY_H2D: k = cudaMemcpyHostToDevice; break;
  case ZO_COPY_D2H: k = cudaMemcpyDeviceToHost; break;
  case ZO_COPY_D2D: k = cudaMemcpyDeviceToDevice; break;
  case ZO_COPY_H2H: k = cudaMemcpyHostToHost; break;
  }
  if (nbytes == 0) return 0;
  return ZO_CUDA_TRY(cudaMemcpyAsync(dst, src, nbytes, k, zo_cuda_stream(stream)));
}

static int cuda_launch_host_func(zo_stream_t stream, void (*fn)(void *arg), void *arg) {
  return ZO_CUDA_TRY(cudaLaunchHostFunc(zo_cuda_stream(stream), fn, arg));
}

static int cuda_memset_async(void *dst, int value, size_t nbytes, zo_stream_t stream) {
  if (nbytes == 0) return 0;
  return ZO_CUDA_TRY(cudaMemsetAsync(dst, value, nbytes, zo_cuda_stream(stream)));
}

static void *cuda_native_stream(zo_stream_t stream) { return (void *)zo_cuda_stream(stream); }

/* ---- the table ---------------------------------------------------------------------- */

/* Filled by name in cuda_init (C++17 has no designated initializers), read-only after. */
static struct zo_backend cuda_backend;

static void cuda_table_fill(struct zo_backend *t) {
  t->name = "cuda";
  t->mem_alloc = cuda_mem_alloc;
  t->mem_free = cuda_mem_free;
  t->mem_info = cuda_mem_info;
  t->set_threads = cuda_set_threads;
  t->host_register = cuda_host_register;
  t->host_unregister = cuda_host_unregister;
  t->device_pci_bus_id = cuda_device_pci_bus_id;
  t->stream_create = cuda_stream_create;
  t->stream_destroy = cuda_stream_destroy;
  t->stream_synchronize = cuda_stream_synchronize;
  t->event_create = cuda_event_create;
  t->event_destroy = cuda_event_destroy;
  t->event_record = cuda_event_record;
  t->stream_wait_event = cuda_stream_wait_event;
  t->event_synchronize = cuda_event_synchronize;
  t->memcpy_async = cuda_memcpy_async;
  t->memset_async = cuda_memset_async;
  t->launch_host_func = cuda_launch_host_func;
  t->native_stream = cuda_native_stream;
  t->encoder_forward = zo_cuda_encoder_forward;
  t->encoder_backward = zo_cuda_encoder_backward;
  t->layernorm_forward = zo_cuda_layernorm_forward;
  t->layernorm_backward = zo_cuda_layernorm_backward;
  t->rmsnorm_forward = zo_cuda_rmsnorm_forward;
  t->rmsnorm_backward = zo_cuda_rmsnorm_backward;
  t->matmul_forward = zo_cuda_matmul_forward;
  t->matmul_backward = zo_cuda_matmul_backward;
  t->attention_forward = zo_cuda_attention_forward;
  t->attention_backward = zo_cuda_attention_backward;
  t->rope_forward = zo_cuda_rope_forward;
  t->rope_backward = zo_cuda_rope_backward;
  t->gelu_forward = zo_cuda_gelu_forward;
  t->gelu_backward = zo_cuda_gelu_backward;
  t->swiglu_forward = zo_cuda_swiglu_forward;
  t->swiglu_backward = zo_cuda_swiglu_backward;
  t->residual_forward = zo_cuda_residual_forward;
  t->residual_backward = zo_cuda_residual_backward;
  t->crossentropy_forward = zo_cuda_crossentropy_forward;
  t->cast = zo_cuda_cast;
  t->adamw_update = zo_cuda_adamw_update;
  t->adamw8bit_update = zo_cuda_adamw8bit_update;
  t->sumsq = zo_cuda_sumsq;
}

/* ---- initialisation ------------------------------------------------------------------ */

static void cuda_init(void) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    init_err = zo_error(-ENODEV, "no usable CUDA driver or device (cudaGetDeviceCount: %s: %s)",
                        cudaGetErrorName(err), cudaGetErrorString(err));
    goto out_msg;
  }
  if (n == 0) {
    init_err = zo_error(-ENODEV, "no CUDA device found (cudaGetDeviceCount returned 0)");
    goto out_msg;
  }
  init_err = ZO_CUDA_TRY(cudaGetDevice(&zo_cuda.device));
  if (init_err) goto out_msg;
  init_err = ZO_CUDA_TRY(cudaGetDeviceProperties(&zo_cuda.prop, zo_cuda.device));
  if (init_err) goto out_msg;
  {
    cublasStatus_t st = cublasLtCreate(&zo_cuda.lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
      init_err = zo_error(-EIO, "%s:%d: cublasLtCreate: %s (%s)", __FILE__, __LINE__,
                          cublasLtGetStatusName(st), cublasLtGetStatusString(st));
      goto out_msg;
    }
  }
  init_err = ZO_CUDA_TRY(cudaMalloc(&zo_cuda.default_workspace, ZO_CUDA_WORKSPACE_BYTES));
  if (init_err) goto out_lt;
  cuda_table_fill(&cuda_backend);
  return;

out_lt:
  ZO_CUBLAS_CHECK(cublasLtDestroy(zo_cuda.lt));
  zo_cuda.lt = NULL;
out_msg:
  /* zo_last_error is per thread: keep the message for callers on other threads. */
  snprintf(init_msg, sizeof init_msg, "%s", zo_last_error());
}

extern "C" zo_backend_t zo_backend_cuda(void) {
  pthread_once(&init_once, cuda_init);
  if (init_err) {
    zo_error(init_err, "%s", init_msg);
    return NULL;
  }
  return &cuda_backend;
}
