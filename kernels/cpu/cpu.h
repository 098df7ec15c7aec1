/* Internal interface of the CPU backend: the op implementations (run on the
 * calling thread, OpenMP inside) and the stream/event emulation. backend.c
 * wraps each op into a task queued on a stream. Not a public header. */
#ifndef ZO_KERNELS_CPU_H
#define ZO_KERNELS_CPU_H

#include "zo/backend.h"
#include "zo/cpu.h" /* the direct entry points defined here */

/* ---- ops: same contracts as the zo_backend fields of the same name ------- */
void zo_cpu_layernorm_forward(void *out, float *mean, float *rstd, const void *inp,
                              const void *weight, const void *bias, int N, int C, enum zo_dtype dt);
void zo_cpu_layernorm_backward(void *dinp, float *dweight, float *dbias, const void *dout,
                               const void *inp, const void *weight, const float *mean,
                               const float *rstd, int N, int C, enum zo_dtype dt);
void zo_cpu_rmsnorm_forward(void *out, float *rstd, const void *inp, const void *weight, float eps,
                            int N, int C, enum zo_dtype dt);
void zo_cpu_rmsnorm_backward(void *dinp, float *dweight, const void *dout, const void *inp,
                             const void *weight, const float *rstd, int N, int C,
                             enum zo_dtype dt);
void zo_cpu_rmsnorm_heads_forward(void *out, float *rstd, const void *inp, const void *weight, float eps,
                                  int N, int H, int D, int ld_out, int ld_inp, enum zo_dtype dt);
void zo_cpu_rmsnorm_heads_backward(void *dinp, float *dweight, const void *dout, const void *inp,
                                   const void *weight, const float *rstd, int N, int H, int D, int ld_d,
                                   int ld_inp, enum zo_dtype dt);
void zo_cpu_matmul_forward(void *out, const void *inp, const void *weight, const void *bias, int N,
                           int C, int OC, enum zo_dtype dt);
void zo_cpu_matmul_backward(void *dinp, float *dweight, float *dbias, const void *dout,
                            const void *inp, const void *weight, int N, int C, int OC,
                            enum zo_dtype dt);
void zo_cpu_attention_forward(void *out, void *att, const void *qkv, int B, int T, int NH, int NKV,
                              int hs, enum zo_dtype dt);
void zo_cpu_attention_window_forward(void *out, void *att, const void *qkv, int B, int T, int NH, int NKV,
                                     int hs, int window, enum zo_dtype dt);
void zo_cpu_attention_backward(void *dqkv, void *datt, const void *dout, const void *qkv,
                               const void *att, int B, int T, int NH, int NKV, int hs,
                               enum zo_dtype dt);
void zo_cpu_rope_forward(void *qkv, const float *cos, const float *sin, int B, int T, int NH,
                         int NKV, int hs, enum zo_dtype dt);
void zo_cpu_rope_backward(void *dqkv, const float *cos, const float *sin, int B, int T, int NH,
                          int NKV, int hs, enum zo_dtype dt);
void zo_cpu_dropout(void *out, const void *inp, size_t N, float p, uint64_t seed, uint64_t site,
                    enum zo_dtype dt);
void zo_cpu_gelu_forward(void *out, const void *inp, size_t N, enum zo_dtype dt);
void zo_cpu_gelu_backward(void *dinp, const void *inp, const void *dout, size_t N, enum zo_dtype dt);
void zo_cpu_swiglu_forward(void *out, const void *inp, size_t N, int I, enum zo_dtype dt);
void zo_cpu_swiglu_backward(void *dinp, const void *inp, const void *dout, size_t N, int I,
                            enum zo_dtype dt);
void zo_cpu_residual_forward(void *out, const void *inp1, const void *inp2, size_t N,
                             enum zo_dtype dt);
void zo_cpu_residual_backward(void *dinp1, void *dinp2, const void *dout, size_t N, enum zo_dtype dt);
void zo_cpu_scaled_add_forward(void *y, const void *v, float s, int N, int M, int ld_y, int col0,
                               enum zo_dtype dt);
void zo_cpu_scaled_add_backward(void *dv, const void *dy, float s, int N, int M, int ld_y, int col0,
                                enum zo_dtype dt);
void zo_cpu_crossentropy_forward(float *losses, void *dlogits, const void *logits,
                                 const int32_t *targets, float dloss, int N, int V, int Vp,
                                 enum zo_dtype dt);

/* This thread's fp32 scratch of at least n_floats (scratch.c): grows, never
 * shrinks, freed at thread exit; contents do not survive the next call.
 * Aborts when host memory runs out. */
float *zo_cpu_scratch(size_t n_floats);
/* The same for slot 0 (zo_cpu_scratch's) or 1, separate buffers. */
#define ZO_CPU_SCRATCH_SLOTS 2
float *zo_cpu_scratch_slot(int slot, size_t n_floats);

/* Row-major C (M, N) = op(A) (M, K) @ op(B) (K, N) over dt operands
 * (ops_matmul.c; dt != F32): C is dt (overwritten, plus bias (N) when not
 * NULL, rounded once) or, with accumulate_f32, fp32 and added to. Fixed
 * 256 x 256 output tiles over the whole of K, so an output tile's bits
 * depend only on its operands, not on the thread count or on which
 * 256-aligned columns of a larger product it is. */
void zo_cpu_gemm(bool ta, bool tb, int M, int N, int K, const void *A, int lda, const void *B,
                 int ldb, void *C, int ldc, bool accumulate_f32, const void *bias, enum zo_dtype dt);
void zo_cpu_matmul_q4_forward(void *out, const void *inp, struct zo_quant4_weight w, const void *bias,
                              int N, enum zo_dtype dt);
void zo_cpu_matmul_q4_backward_dx(void *dinp, const void *dout, struct zo_quant4_weight w, int N,
                                  enum zo_dtype dt);

/* ---- streams (stream.c) ------------------------------------------------- */
/* A task: fn(args) runs on the stream's worker thread, in queue order.
 * args (at most ZO_CPU_TASK_ARGS bytes) is copied at enqueue time. */
#define ZO_CPU_TASK_ARGS 192
typedef void (*zo_cpu_task_fn)(void *args);

/* Runs fn(args) on the stream's worker after earlier work; on the NULL stream
 * runs it now on the calling thread. Blocks while the stream's queue is full. */
void zo_cpu_stream_enqueue(zo_stream_t stream, zo_cpu_task_fn fn, const void *args,
                           size_t args_size);
/* The same, naming the task for the timeline (zo/trace.h): name (static),
 * the bytes it moves and its FLOPs; a label set with zo_trace_next by the
 * enqueuing thread takes precedence. */
void zo_cpu_stream_enqueue_op(zo_stream_t stream, zo_cpu_task_fn fn, const void *args, size_t args_size,
                              const char *name, uint64_t bytes, uint64_t flops);
/* Names the stream's timeline track (copied). */
void zo_cpu_stream_set_name(zo_stream_t stream, const char *name);

int zo_cpu_stream_create(zo_stream_t *stream);
void zo_cpu_stream_destroy(zo_stream_t stream);
int zo_cpu_stream_synchronize(zo_stream_t stream);
int zo_cpu_event_create(zo_event_t *event);
void zo_cpu_event_destroy(zo_event_t event);
int zo_cpu_event_record(zo_event_t event, zo_stream_t stream);
int zo_cpu_stream_wait_event(zo_stream_t stream, zo_event_t event);
int zo_cpu_event_synchronize(zo_event_t event);

/* OpenMP threads each stream worker (and the caller) uses for ops. */
void zo_cpu_set_threads(int n_threads);
int zo_cpu_get_threads(void);

#endif /* ZO_KERNELS_CPU_H */
