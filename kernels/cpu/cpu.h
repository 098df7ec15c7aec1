/* Internal interface of the CPU backend: the op implementations (run on the
 * calling thread, OpenMP inside) and the stream/event emulation. backend.c
 * wraps each op into a task queued on a stream. Not a public header. */
#ifndef ZO_KERNELS_CPU_H
#define ZO_KERNELS_CPU_H

#include "zo/backend.h"

/* ---- ops: same contracts as the zo_backend fields of the same name ------- */
void zo_cpu_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe,
                            int B, int T, int C);
void zo_cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                             int B, int T, int C);
void zo_cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C);
void zo_cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C);
void zo_cpu_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                           int N, int C, int OC);
void zo_cpu_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC);
void zo_cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                              int NH);
void zo_cpu_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH);
void zo_cpu_gelu_forward(float *out, const float *inp, size_t N);
void zo_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t N);
void zo_cpu_residual_forward(float *out, const float *inp1, const float *inp2, size_t N);
void zo_cpu_residual_backward(float *dinp1, float *dinp2, const float *dout, size_t N);
void zo_cpu_crossentropy_forward(float *losses, float *dlogits, const float *logits,
                                 const int32_t *targets, float dloss, int N, int V, int Vp);

/* ---- streams (stream.c) ------------------------------------------------- */
/* A task: fn(args) runs on the stream's worker thread, in queue order.
 * args (at most ZO_CPU_TASK_ARGS bytes) is copied at enqueue time. */
#define ZO_CPU_TASK_ARGS 192
typedef void (*zo_cpu_task_fn)(void *args);

/* Runs fn(args) on the stream's worker after earlier work; on the NULL stream
 * runs it now on the calling thread. Blocks while the stream's queue is full. */
void zo_cpu_stream_enqueue(zo_stream_t stream, zo_cpu_task_fn fn, const void *args,
                           size_t args_size);

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
