/* The CUDA backend table: device memory, streams, events and copies map onto
 * the CUDA runtime one to one; the ops are the launchers in the per-op .cu
 * files, each called through a wrapper here. zo_backend_cuda() initialises
 * once (blocking synchronization, device properties, the cuBLASLt handle)
 * and returns NULL with a message when there is no driver or no device, so
 * "device": "auto" falls back to the CPU. Uses the current device (0 unless
 * the caller chose one).
 * Device memory: the arena (mem_alloc) and the streams' cuBLASLt workspaces,
 * which the engine carves from its arena and gives each op stream
 * (stream_set_workspace); a stream never given one allocates its own on
 * first use. Nothing else is allocated on the device. NCCL (offload/dcomm.c)
 * keeps its own buffers; the scheduler does not use it yet.
 * Host threads: no call spins (blocking-sync events, cudaDeviceScheduleBlockingSync);
 * host functions run with set_threads' OpenMP thread count and must not call
 * the backend (each entry point checks). ZO_CUDA_SYNC=1 synchronizes after
 * every op and copy and names the failing one with its shapes.
 * ZO_CUDA_GEMM=fallback sends every GEMM to the tiled kernel (gemm.cu), so
 * that the op parity test runs it; "auto" or unset: cuBLASLt first. */
#include "common.cuh"

#include "adamw.cuh"
#include "adamw8bit.cuh"
#include "attention.cuh"
#include "cast.cuh"
#include "crossentropy.cuh"
#include "encoder.cuh"
#include "dropout.cuh"
#include "gelu.cuh"
#include "layernorm.cuh"
#include "matmul.cuh"
#include "matmul_q4.cuh"
#include "residual.cuh"
#include "rmsnorm.cuh"
#include "rope.cuh"
#include "scaled_add.cuh"
#include "sumsq.cuh"
#include "swiglu.cuh"

#include <omp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

struct zo_cuda_state zo_cuda;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_err;       /* 0 or -errno, set once */
static char init_msg[512]; /* zo_last_error of a failed init, for every caller */
static bool sync_ops;      /* ZO_CUDA_SYNC=1: synchronize after every op and copy */

static std::atomic<int> host_threads{0}; /* set_threads' count; 0: OpenMP's default */
static thread_local int applied_threads; /* what this thread gave omp_set_num_threads */
static thread_local const char *in_host_func; /* the host function this thread runs, or NULL */

/* CUDA forbids CUDA calls inside a host function (cudaLaunchHostFunc); a
 * backend call from one is a broken contract, named here rather than left
 * to deadlock or to fail later. */
static void guard(const char *call) {
  if (in_host_func)
    zo_abort(__FILE__, __LINE__,
             "cuda backend: %s called from inside a host function (launch_host_func): host "
             "functions must not call the backend; queue the work from the host thread",
             call);
}

/* ---- workspaces ------------------------------------------------------------------- */

static pthread_mutex_t ws_mu = PTHREAD_MUTEX_INITIALIZER;
static std::atomic_flag ws_noted = ATOMIC_FLAG_INIT;

static void *ws_alloc_own(void) {
  void *p = NULL;
  cudaError_t err = cudaMalloc(&p, ZO_CUDA_WORKSPACE_BYTES);
  if (err != cudaSuccess)
    zo_abort(__FILE__, __LINE__,
             "cuda backend: cannot allocate a %zu-byte cuBLASLt workspace for a stream the "
             "engine gave none (cudaMalloc: %s)",
             (size_t)ZO_CUDA_WORKSPACE_BYTES, cudaGetErrorName(err));
  if (!ws_noted.test_and_set())
    fprintf(stderr,
            "zoffload: cuda backend: note: a stream without a planned workspace allocated its "
            "own %zu MiB of device memory, outside any device plan\n",
            (size_t)(ZO_CUDA_WORKSPACE_BYTES >> 20));
  return p;
}

void *zo_cuda_workspace(zo_stream_t stream) {
  void **slot = stream ? &stream->workspace : &zo_cuda.default_workspace;
  pthread_mutex_lock(&ws_mu);
  if (!*slot) {
    *slot = ws_alloc_own();
    if (stream) stream->owns_workspace = true;
  }
  void *ws = *slot;
  pthread_mutex_unlock(&ws_mu);
  return ws;
}

static void cuda_stream_set_workspace(zo_stream_t stream, void *ptr) {
  guard("stream_set_workspace");
  ZO_ASSERT(stream && ptr && ((uintptr_t)ptr & 255) == 0);
  pthread_mutex_lock(&ws_mu);
  void *old = stream->owns_workspace ? stream->workspace : NULL;
  stream->workspace = ptr;
  stream->owns_workspace = false;
  pthread_mutex_unlock(&ws_mu);
  if (old) {
    ZO_CUDA_CHECK(cudaStreamSynchronize(stream->cu));
    ZO_CUDA_CHECK(cudaFree(old));
  }
}

/* ---- ZO_CUDA_SYNC ------------------------------------------------------------------- */

/* After op `what` on stream: with ZO_CUDA_SYNC=1 waits for it and aborts
 * naming it and its shapes (fmt ...) if it or anything before it failed. */
static void op_done(const char *what, zo_stream_t stream, const char *fmt, ...) {
  if (!sync_ops) return;
  cudaError_t err = cudaStreamSynchronize(zo_cuda_stream(stream));
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err == cudaSuccess) return;
  char shapes[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(shapes, sizeof shapes, fmt, ap);
  va_end(ap);
  zo_abort(__FILE__, __LINE__, "ZO_CUDA_SYNC: %s (%s) on stream %p failed: %s (%s)", what, shapes,
           (void *)zo_cuda_stream(stream), cudaGetErrorName(err), cudaGetErrorString(err));
}

/* ---- memory ----------------------------------------------------------------------- */

static int cuda_mem_info(size_t *free_bytes, size_t *total_bytes) {
  guard("mem_info");
  return ZO_CUDA_TRY(cudaMemGetInfo(free_bytes, total_bytes));
}

static int cuda_mem_alloc(void **ptr, size_t nbytes) {
  guard("mem_alloc");
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
  guard("mem_free");
  if (ptr) ZO_CUDA_CHECK(cudaFree(ptr));
}

/* Kernels size their own launches; the count is the host side's: the calling
 * thread's OpenMP team now, and each host function's (applied on the
 * callback thread, whose OpenMP settings are its own). */
static void threads_apply(void) {
  const int n = host_threads.load();
  if (n > 0 && n != applied_threads) {
    omp_set_num_threads(n);
    applied_threads = n;
  }
}

static void cuda_set_threads(int n_threads) {
  ZO_ASSERT(n_threads > 0);
  host_threads.store(n_threads);
  threads_apply();
}

/* Registering makes copies from and to the pages DMA, asynchronous on their
 * stream and ordered like any other work; it also locks them (no mlock
 * needed). */
static int cuda_host_register(void *ptr, size_t nbytes) {
  guard("host_register");
  return ZO_CUDA_TRY(cudaHostRegister(ptr, nbytes, cudaHostRegisterDefault));
}

static void cuda_host_unregister(void *ptr) {
  guard("host_unregister");
  ZO_CUDA_CHECK(cudaHostUnregister(ptr));
}

static int cuda_device_pci_bus_id(char *buf, size_t size) {
  guard("device_pci_bus_id");
  return ZO_CUDA_TRY(cudaDeviceGetPCIBusId(buf, (int)size, zo_cuda.device));
}

/* ---- streams and events ----------------------------------------------------------- */

static int cuda_stream_create(zo_stream_t *stream) {
  guard("stream_create");
  *stream = NULL;
  struct zo_stream *s = (struct zo_stream *)calloc(1, sizeof *s);
  if (!s) return zo_error(-ENOMEM, "cuda backend: out of host memory for a stream");
  int err = ZO_CUDA_TRY(cudaStreamCreateWithFlags(&s->cu, cudaStreamNonBlocking));
  if (err) {
    free(s);
    return err;
  }
  *stream = s;
  return 0;
}

/* The contract says destroy waits for queued work: the workspace must outlive
 * the GEMMs using it, so synchronize before freeing either. */
static void cuda_stream_destroy(zo_stream_t stream) {
  if (!stream) return;
  guard("stream_destroy");
  ZO_CUDA_CHECK(cudaStreamSynchronize(stream->cu));
  if (stream->owns_workspace) ZO_CUDA_CHECK(cudaFree(stream->workspace));
  ZO_CUDA_CHECK(cudaStreamDestroy(stream->cu));
  free(stream);
}

/* Every event sleeps in cudaEventSynchronize (cudaEventBlockingSync) rather
 * than spinning a core the CPU optimizer needs. */
static const unsigned event_flags = cudaEventDisableTiming | cudaEventBlockingSync;

/* Through a blocking-sync event of this thread's, so the wait sleeps even if
 * the device's schedule flag could not be set (a context made before ours). */
static int cuda_stream_synchronize(zo_stream_t stream) {
  guard("stream_synchronize");
  static thread_local cudaEvent_t ev;
  if (!ev) {
    int err = ZO_CUDA_TRY(cudaEventCreateWithFlags(&ev, event_flags));
    if (err) return err;
  }
  int err = ZO_CUDA_TRY(cudaEventRecord(ev, zo_cuda_stream(stream)));
  return err ? err : ZO_CUDA_TRY(cudaEventSynchronize(ev));
}

/* zo_event_t is the cudaEvent_t itself (both are opaque pointers). */
static int cuda_event_create(zo_event_t *event) {
  guard("event_create");
  cudaEvent_t e = NULL;
  int err = ZO_CUDA_TRY(cudaEventCreateWithFlags(&e, event_flags));
  *event = (zo_event_t)e;
  return err;
}

static void cuda_event_destroy(zo_event_t event) {
  if (!event) return;
  guard("event_destroy");
  ZO_CUDA_CHECK(cudaEventDestroy((cudaEvent_t)event));
}

static int cuda_event_record(zo_event_t event, zo_stream_t stream) {
  guard("event_record");
  return ZO_CUDA_TRY(cudaEventRecord((cudaEvent_t)event, zo_cuda_stream(stream)));
}

/* A never-recorded event is complete for cudaStreamWaitEvent and
 * cudaEventSynchronize alike, as the contract wants. */
static int cuda_stream_wait_event(zo_stream_t stream, zo_event_t event) {
  guard("stream_wait_event");
  return ZO_CUDA_TRY(cudaStreamWaitEvent(zo_cuda_stream(stream), (cudaEvent_t)event, 0));
}

static int cuda_event_synchronize(zo_event_t event) {
  guard("event_synchronize");
  return ZO_CUDA_TRY(cudaEventSynchronize((cudaEvent_t)event));
}

/* Whether p is host memory the driver does not know (pageable). */
static bool is_pageable(const void *p) {
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;
  }
  return a.type == cudaMemoryTypeUnregistered;
}

static const char *copy_kind_name(enum zo_copy_kind kind) {
  switch (kind) {
  case ZO_COPY_H2D: return "H2D";
  case ZO_COPY_D2H: return "D2H";
  case ZO_COPY_D2D: return "D2D";
  case ZO_COPY_H2H: return "H2H";
  }
  return "?";
}

/* A copy from or to pageable memory is not ordered like other stream work:
 * CUDA reads a pageable source when the call is made (through a staging
 * buffer), not when the stream reaches the copy, so a copy queued behind an
 * event that a host function records later would read stale bytes. Such a
 * copy therefore waits for everything queued on the stream, runs, and waits
 * for itself: synchronous, correct, and slow, which is why the host pool is
 * registered (offload/host.c). */
static int cuda_memcpy_async(void *dst, const void *src, size_t nbytes, enum zo_copy_kind kind,
                             zo_stream_t stream) {
  guard("memcpy_async");
  cudaMemcpyKind k = cudaMemcpyDefault;
  bool pageable = false;
  switch (kind) {
  case ZO_COPY_H2D: k = cudaMemcpyHostToDevice; pageable = is_pageable(src); break;
  case ZO_COPY_D2H: k = cudaMemcpyDeviceToHost; pageable = is_pageable(dst); break;
  case ZO_COPY_D2D: k = cudaMemcpyDeviceToDevice; break;
  case ZO_COPY_H2H: k = cudaMemcpyHostToHost; pageable = is_pageable(src) || is_pageable(dst); break;
  }
  if (nbytes == 0) return 0;
  const cudaStream_t cu = zo_cuda_stream(stream);
  int err;
  if (pageable) {
    if ((err = cuda_stream_synchronize(stream))) return err;
    if (kind == ZO_COPY_H2H) {
      memcpy(dst, src, nbytes);
      return 0;
    }
    if ((err = ZO_CUDA_TRY(cudaMemcpyAsync(dst, src, nbytes, k, cu)))) return err;
    err = cuda_stream_synchronize(stream);
  } else {
    err = ZO_CUDA_TRY(cudaMemcpyAsync(dst, src, nbytes, k, cu));
  }
  if (!err)
    op_done("memcpy_async", stream, "%s, %zu bytes, dst %p, src %p%s", copy_kind_name(kind), nbytes,
            dst, src, pageable ? ", pageable host memory" : "");
  return err;
}

/* What a host function runs: the caller's function, with this backend's
 * OpenMP thread count and the guard armed. */
struct host_call {
  void (*fn)(void *arg);
  void *arg;
};

static void CUDART_CB host_call_run(void *p) {
  const struct host_call c = *(const struct host_call *)p;
  free(p);
  threads_apply();
  in_host_func = "host function";
  c.fn(c.arg);
  in_host_func = NULL;
}

static int cuda_launch_host_func(zo_stream_t stream, void (*fn)(void *arg), void *arg) {
  guard("launch_host_func");
  struct host_call *c = (struct host_call *)malloc(sizeof *c);
  if (!c) return zo_error(-ENOMEM, "cuda backend: out of host memory for a host function");
  c->fn = fn;
  c->arg = arg;
  int err = ZO_CUDA_TRY(cudaLaunchHostFunc(zo_cuda_stream(stream), host_call_run, c));
  if (err) free(c);
  return err;
}

static int cuda_memset_async(void *dst, int value, size_t nbytes, zo_stream_t stream) {
  guard("memset_async");
  if (nbytes == 0) return 0;
  int err = ZO_CUDA_TRY(cudaMemsetAsync(dst, value, nbytes, zo_cuda_stream(stream)));
  if (!err) op_done("memset_async", stream, "%zu bytes at %p", nbytes, dst);
  return err;
}

static int cuda_memcpy2d_async(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t rows,
                               zo_stream_t stream) {
  guard("memcpy2d_async");
  if (width == 0 || rows == 0) return 0;
  int err = ZO_CUDA_TRY(
      cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToDevice, zo_cuda_stream(stream)));
  if (!err) op_done("memcpy2d_async", stream, "%zu rows of %zu bytes, dst %p, src %p", rows, width, dst, src);
  return err;
}

static void *cuda_native_stream(zo_stream_t stream) { return (void *)zo_cuda_stream(stream); }

/* ---- the ops, through their wrappers ---------------------------------------------------- */

/* Each wrapper checks the guard, queues the op and, with ZO_CUDA_SYNC=1,
 * waits for it and names it with its shapes if it failed. */
#define DT(dt) zo_dtype_name(dt)

static void w_encoder_forward(void *out, const int32_t *inp, const void *wte, const void *wpe,
                              int B, int T, int C, enum zo_dtype dt, zo_stream_t stream) {
  guard("encoder_forward");
  zo_cuda_encoder_forward(out, inp, wte, wpe, B, T, C, dt, stream);
  op_done("encoder_forward", stream, "B=%d T=%d C=%d %s wpe=%d", B, T, C, DT(dt), wpe != NULL);
}

static void w_encoder_backward(float *dwte, float *dwpe, const void *dout, const int32_t *inp,
                               int B, int T, int C, int padding_idx, enum zo_dtype dt,
                               zo_stream_t stream) {
  guard("encoder_backward");
  zo_cuda_encoder_backward(dwte, dwpe, dout, inp, B, T, C, padding_idx, dt, stream);
  op_done("encoder_backward", stream, "B=%d T=%d C=%d padding_idx=%d %s dwpe=%d", B, T, C, padding_idx,
          DT(dt), dwpe != NULL);
}

static void w_layernorm_forward(void *out, float *mean, float *rstd, const void *inp,
                                const void *weight, const void *bias, int N, int C,
                                enum zo_dtype dt, zo_stream_t stream) {
  guard("layernorm_forward");
  zo_cuda_layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, dt, stream);
  op_done("layernorm_forward", stream, "N=%d C=%d %s", N, C, DT(dt));
}

static void w_layernorm_backward(void *dinp, float *dweight, float *dbias, const void *dout,
                                 const void *inp, const void *weight, const float *mean,
                                 const float *rstd, int N, int C, enum zo_dtype dt,
                                 zo_stream_t stream) {
  guard("layernorm_backward");
  zo_cuda_layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, dt, stream);
  op_done("layernorm_backward", stream, "N=%d C=%d %s", N, C, DT(dt));
}

static void w_rmsnorm_forward(void *out, float *rstd, const void *inp, const void *weight,
                              float eps, int N, int C, enum zo_dtype dt, zo_stream_t stream) {
  guard("rmsnorm_forward");
  zo_cuda_rmsnorm_forward(out, rstd, inp, weight, eps, N, C, dt, stream);
  op_done("rmsnorm_forward", stream, "N=%d C=%d eps=%g %s", N, C, (double)eps, DT(dt));
}

static void w_rmsnorm_backward(void *dinp, float *dweight, const void *dout, const void *inp,
                               const void *weight, const float *rstd, int N, int C,
                               enum zo_dtype dt, zo_stream_t stream) {
  guard("rmsnorm_backward");
  zo_cuda_rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, dt, stream);
  op_done("rmsnorm_backward", stream, "N=%d C=%d %s", N, C, DT(dt));
}

static void w_rmsnorm_heads_forward(void *out, float *rstd, const void *inp, const void *weight, float eps,
                                    int N, int H, int D, int ld_out, int ld_inp, enum zo_dtype dt,
                                    zo_stream_t stream) {
  guard("rmsnorm_heads_forward");
  zo_cuda_rmsnorm_heads_forward(out, rstd, inp, weight, eps, N, H, D, ld_out, ld_inp, dt, stream);
  op_done("rmsnorm_heads_forward", stream, "N=%d H=%d D=%d ld_out=%d ld_inp=%d eps=%g %s", N, H, D, ld_out,
          ld_inp, (double)eps, DT(dt));
}

static void w_rmsnorm_heads_backward(void *dinp, float *dweight, const void *dout, const void *inp,
                                     const void *weight, const float *rstd, int N, int H, int D, int ld_d,
                                     int ld_inp, enum zo_dtype dt, zo_stream_t stream) {
  guard("rmsnorm_heads_backward");
  zo_cuda_rmsnorm_heads_backward(dinp, dweight, dout, inp, weight, rstd, N, H, D, ld_d, ld_inp, dt, stream);
  op_done("rmsnorm_heads_backward", stream, "N=%d H=%d D=%d ld_d=%d ld_inp=%d %s", N, H, D, ld_d, ld_inp,
          DT(dt));
}

static void w_matmul_forward(void *out, const void *inp, const void *weight, const void *bias,
                             int N, int C, int OC, enum zo_dtype dt, zo_stream_t stream) {
  guard("matmul_forward");
  zo_cuda_matmul_forward(out, inp, weight, bias, N, C, OC, dt, stream);
  op_done("matmul_forward", stream, "N=%d C=%d OC=%d %s bias=%d", N, C, OC, DT(dt), bias != NULL);
}

static void w_matmul_backward(void *dinp, float *dweight, float *dbias, const void *dout,
                              const void *inp, const void *weight, int N, int C, int OC,
                              enum zo_dtype dt, zo_stream_t stream) {
  guard("matmul_backward");
  zo_cuda_matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, dt, stream);
  op_done("matmul_backward", stream, "N=%d C=%d OC=%d %s dinp=%d dbias=%d", N, C, OC, DT(dt),
          dinp != NULL, dbias != NULL);
}

static void w_matmul_q4_forward(void *out, const void *inp, struct zo_quant4_weight w, const void *bias, int N,
                                enum zo_dtype dt, zo_stream_t stream) {
  guard("matmul_q4_forward");
  zo_cuda_matmul_q4_forward(out, inp, w, bias, N, dt, stream);
  op_done("matmul_q4_forward", stream, "N=%d C=%d OC=%d %s %s bs=%d nested=%d bias=%d", N, w.C, w.OC, DT(dt),
          zo_quant4_type_name(w.type), w.blocksize, w.absmax == NULL, bias != NULL);
}

static void w_matmul_q4_backward_dx(void *dinp, const void *dout, struct zo_quant4_weight w, int N,
                                    enum zo_dtype dt, zo_stream_t stream) {
  guard("matmul_q4_backward_dx");
  zo_cuda_matmul_q4_backward_dx(dinp, dout, w, N, dt, stream);
  op_done("matmul_q4_backward_dx", stream, "N=%d C=%d OC=%d %s %s bs=%d nested=%d", N, w.C, w.OC, DT(dt),
          zo_quant4_type_name(w.type), w.blocksize, w.absmax == NULL);
}

static void w_attention_forward(void *out, void *att, const void *qkv, int B, int T, int NH,
                                int NKV, int hs, enum zo_dtype dt, zo_stream_t stream) {
  guard("attention_forward");
  zo_cuda_attention_forward(out, att, qkv, B, T, NH, NKV, hs, dt, stream);
  op_done("attention_forward", stream, "B=%d T=%d NH=%d NKV=%d hs=%d %s", B, T, NH, NKV, hs, DT(dt));
}

static void w_attention_window_forward(void *out, void *att, const void *qkv, int B, int T, int NH,
                                       int NKV, int hs, int window, enum zo_dtype dt, zo_stream_t stream) {
  guard("attention_window_forward");
  zo_cuda_attention_window_forward(out, att, qkv, B, T, NH, NKV, hs, window, dt, stream);
  op_done("attention_window_forward", stream, "B=%d T=%d NH=%d NKV=%d hs=%d window=%d %s", B, T, NH, NKV, hs,
          window, DT(dt));
}

static void w_attention_backward(void *dqkv, void *datt, const void *dout, const void *qkv,
                                 const void *att, int B, int T, int NH, int NKV, int hs,
                                 enum zo_dtype dt, zo_stream_t stream) {
  guard("attention_backward");
  zo_cuda_attention_backward(dqkv, datt, dout, qkv, att, B, T, NH, NKV, hs, dt, stream);
  op_done("attention_backward", stream, "B=%d T=%d NH=%d NKV=%d hs=%d %s", B, T, NH, NKV, hs,
          DT(dt));
}

static void w_rope_forward(void *qkv, const float *cos, const float *sin, int B, int T, int NH,
                           int NKV, int hs, enum zo_dtype dt, zo_stream_t stream) {
  guard("rope_forward");
  zo_cuda_rope_forward(qkv, cos, sin, B, T, NH, NKV, hs, dt, stream);
  op_done("rope_forward", stream, "B=%d T=%d NH=%d NKV=%d hs=%d %s", B, T, NH, NKV, hs, DT(dt));
}

static void w_rope_backward(void *dqkv, const float *cos, const float *sin, int B, int T, int NH,
                            int NKV, int hs, enum zo_dtype dt, zo_stream_t stream) {
  guard("rope_backward");
  zo_cuda_rope_backward(dqkv, cos, sin, B, T, NH, NKV, hs, dt, stream);
  op_done("rope_backward", stream, "B=%d T=%d NH=%d NKV=%d hs=%d %s", B, T, NH, NKV, hs, DT(dt));
}

static void w_swiglu_forward(void *out, const void *inp, size_t N, int I, enum zo_dtype dt,
                             zo_stream_t stream) {
  guard("swiglu_forward");
  zo_cuda_swiglu_forward(out, inp, N, I, dt, stream);
  op_done("swiglu_forward", stream, "N=%zu I=%d %s", N, I, DT(dt));
}

static void w_swiglu_backward(void *dinp, const void *inp, const void *dout, size_t N, int I,
                              enum zo_dtype dt, zo_stream_t stream) {
  guard("swiglu_backward");
  zo_cuda_swiglu_backward(dinp, inp, dout, N, I, dt, stream);
  op_done("swiglu_backward", stream, "N=%zu I=%d %s", N, I, DT(dt));
}

static void w_dropout(void *out, const void *inp, size_t N, float p, uint64_t seed, uint64_t site,
                      enum zo_dtype dt, zo_stream_t stream) {
  guard("dropout");
  zo_cuda_dropout(out, inp, N, p, seed, site, dt, stream);
  op_done("dropout", stream, "N=%zu p=%g %s", N, (double)p, DT(dt));
}

static void w_gelu_forward(void *out, const void *inp, size_t N, enum zo_dtype dt,
                           zo_stream_t stream) {
  guard("gelu_forward");
  zo_cuda_gelu_forward(out, inp, N, dt, stream);
  op_done("gelu_forward", stream, "N=%zu %s", N, DT(dt));
}

static void w_gelu_backward(void *dinp, const void *inp, const void *dout, size_t N,
                            enum zo_dtype dt, zo_stream_t stream) {
  guard("gelu_backward");
  zo_cuda_gelu_backward(dinp, inp, dout, N, dt, stream);
  op_done("gelu_backward", stream, "N=%zu %s", N, DT(dt));
}

static void w_residual_forward(void *out, const void *inp1, const void *inp2, size_t N,
                               enum zo_dtype dt, zo_stream_t stream) {
  guard("residual_forward");
  zo_cuda_residual_forward(out, inp1, inp2, N, dt, stream);
  op_done("residual_forward", stream, "N=%zu %s", N, DT(dt));
}

static void w_residual_backward(void *dinp1, void *dinp2, const void *dout, size_t N,
                                enum zo_dtype dt, zo_stream_t stream) {
  guard("residual_backward");
  zo_cuda_residual_backward(dinp1, dinp2, dout, N, dt, stream);
  op_done("residual_backward", stream, "N=%zu %s", N, DT(dt));
}

static void w_scaled_add_forward(void *y, const void *v, float s, int N, int M, int ld_y, int col0,
                                 enum zo_dtype dt, zo_stream_t stream) {
  guard("scaled_add_forward");
  zo_cuda_scaled_add_forward(y, v, s, N, M, ld_y, col0, dt, stream);
  op_done("scaled_add_forward", stream, "N=%d M=%d ld_y=%d col0=%d s=%g %s", N, M, ld_y, col0, (double)s,
          DT(dt));
}

static void w_scaled_add_backward(void *dv, const void *dy, float s, int N, int M, int ld_y, int col0,
                                  enum zo_dtype dt, zo_stream_t stream) {
  guard("scaled_add_backward");
  zo_cuda_scaled_add_backward(dv, dy, s, N, M, ld_y, col0, dt, stream);
  op_done("scaled_add_backward", stream, "N=%d M=%d ld_y=%d col0=%d s=%g %s", N, M, ld_y, col0, (double)s,
          DT(dt));
}

static void w_crossentropy_forward(float *losses, void *dlogits, const void *logits,
                                   const int32_t *targets, float dloss, int N, int V, int Vp,
                                   enum zo_dtype dt, zo_stream_t stream) {
  guard("crossentropy_forward");
  zo_cuda_crossentropy_forward(losses, dlogits, logits, targets, dloss, N, V, Vp, dt, stream);
  op_done("crossentropy_forward", stream, "N=%d V=%d Vp=%d %s dlogits=%d", N, V, Vp, DT(dt),
          dlogits != NULL);
}

static void w_cast(void *dst, enum zo_dtype dst_dt, const void *src, enum zo_dtype src_dt, size_t n,
                   zo_stream_t stream) {
  guard("cast");
  zo_cuda_cast(dst, dst_dt, src, src_dt, n, stream);
  op_done("cast", stream, "n=%zu %s -> %s", n, DT(src_dt), DT(dst_dt));
}

static void w_adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr,
                           float beta1, float beta2, float eps, float weight_decay, bool decay,
                           long t, float grad_scale, zo_stream_t stream) {
  guard("adamw_update");
  zo_cuda_adamw_update(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, decay, t, grad_scale,
                       stream);
  op_done("adamw_update", stream, "n=%zu t=%ld", n, t);
}

static void w_adamw8bit_update(float *p, const float *g, uint8_t *m_code, float *m_absmax,
                               uint8_t *v_code, float *v_absmax, size_t n, size_t block, float lr,
                               float beta1, float beta2, float eps, float weight_decay, bool decay,
                               long t, float grad_scale, zo_stream_t stream) {
  guard("adamw8bit_update");
  zo_cuda_adamw8bit_update(p, g, m_code, m_absmax, v_code, v_absmax, n, block, lr, beta1, beta2,
                           eps, weight_decay, decay, t, grad_scale, stream);
  op_done("adamw8bit_update", stream, "n=%zu block=%zu t=%ld", n, block, t);
}

static void w_sumsq(double *out, const float *x, size_t n, zo_stream_t stream) {
  guard("sumsq");
  zo_cuda_sumsq(out, x, n, stream);
  op_done("sumsq", stream, "n=%zu", n);
}

#undef DT

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
  t->memcpy2d_async = cuda_memcpy2d_async;
  t->launch_host_func = cuda_launch_host_func;
  t->native_stream = cuda_native_stream;
  t->stream_workspace_bytes = ZO_CUDA_WORKSPACE_BYTES;
  t->stream_set_workspace = cuda_stream_set_workspace;
  t->encoder_forward = w_encoder_forward;
  t->encoder_backward = w_encoder_backward;
  t->layernorm_forward = w_layernorm_forward;
  t->layernorm_backward = w_layernorm_backward;
  t->rmsnorm_forward = w_rmsnorm_forward;
  t->rmsnorm_backward = w_rmsnorm_backward;
  t->rmsnorm_heads_forward = w_rmsnorm_heads_forward;
  t->rmsnorm_heads_backward = w_rmsnorm_heads_backward;
  t->matmul_forward = w_matmul_forward;
  t->matmul_backward = w_matmul_backward;
  t->matmul_q4_forward = w_matmul_q4_forward;
  t->matmul_q4_backward_dx = w_matmul_q4_backward_dx;
  t->attention_forward = w_attention_forward;
  t->attention_window_forward = w_attention_window_forward;
  t->attention_backward = w_attention_backward;
  t->rope_forward = w_rope_forward;
  t->rope_backward = w_rope_backward;
  t->dropout = w_dropout;
  t->gelu_forward = w_gelu_forward;
  t->gelu_backward = w_gelu_backward;
  t->swiglu_forward = w_swiglu_forward;
  t->swiglu_backward = w_swiglu_backward;
  t->residual_forward = w_residual_forward;
  t->residual_backward = w_residual_backward;
  t->scaled_add_forward = w_scaled_add_forward;
  t->scaled_add_backward = w_scaled_add_backward;
  t->crossentropy_forward = w_crossentropy_forward;
  t->cast = w_cast;
  t->adamw_update = w_adamw_update;
  t->adamw8bit_update = w_adamw8bit_update;
  t->sumsq = w_sumsq;
}

/* ---- initialisation ------------------------------------------------------------------ */

static void cuda_init(void) {
  const char *sync = getenv("ZO_CUDA_SYNC");
  sync_ops = sync && *sync && strcmp(sync, "0") != 0;
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
  /* Before the context exists: host waits sleep instead of spinning a core.
   * A context made earlier (by another library) keeps its flags; the events
   * are blocking-sync anyway. */
  err = cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    fprintf(stderr, "zoffload: cuda backend: note: cudaSetDeviceFlags(BlockingSync): %s; "
                    "synchronization still sleeps on blocking-sync events\n",
            cudaGetErrorName(err));
  }
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
  {
    const char *gemm = getenv("ZO_CUDA_GEMM");
    if (gemm && *gemm && strcmp(gemm, "auto") != 0 && strcmp(gemm, "fallback") != 0) {
      init_err = zo_error(-EINVAL, "ZO_CUDA_GEMM = '%s': valid: \"auto\" (cuBLASLt, falling back where it has "
                                   "no algorithm) or \"fallback\" (every GEMM on the tiled kernel, for tests)", gemm);
      goto out_msg;
    }
    zo_cuda.gemm_fallback = gemm && strcmp(gemm, "fallback") == 0;
  }
  if (sync_ops)
    fprintf(stderr, "zoffload: cuda backend: ZO_CUDA_SYNC=1: synchronizing after every op\n");
  cuda_table_fill(&cuda_backend);
  return;

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
