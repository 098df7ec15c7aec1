/* The CPU backend table: every op becomes a task on a zo_cpu stream (stream.c)
 * that calls the zo_cpu_* implementation with the arguments copied at enqueue
 * time; on the NULL stream it runs before the call returns. "Device" memory is
 * host memory, page aligned. Nothing here computes or keeps state. */
#include "cpu.h"

#include "zo/adamw8bit.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZO_CPU_MEM_ALIGN 4096 /* bytes: pages, so O_DIRECT I/O may target the arena */

/* ---- memory --------------------------------------------------------------- */

static int cpu_mem_info(size_t *free_bytes, size_t *total_bytes) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return zo_error(-errno, "cpu backend: cannot open /proc/meminfo: %s", strerror(errno));
  unsigned long long avail_kib = 0, total_kib = 0;
  int found = 0;
  char line[256];
  while (found < 2 && fgets(line, sizeof line, f)) {
    if (sscanf(line, "MemTotal: %llu kB", &total_kib) == 1 ||
        sscanf(line, "MemAvailable: %llu kB", &avail_kib) == 1)
      found++;
  }
  fclose(f);
  if (found < 2) return zo_error(-EIO, "cpu backend: /proc/meminfo lacks MemTotal or MemAvailable");
  *free_bytes = (size_t)avail_kib * 1024;
  *total_bytes = (size_t)total_kib * 1024;
  return 0;
}

/* Refuses more than the machine's total memory up front: under overcommit
 * aligned_alloc could succeed and the process be killed at first touch. */
static int cpu_mem_alloc(void **ptr, size_t nbytes) {
  *ptr = NULL;
  size_t free_bytes = 0, total_bytes = 0;
  bool have_info = cpu_mem_info(&free_bytes, &total_bytes) == 0;
  /* aligned_alloc wants a multiple of the alignment; never ask for 0 bytes. */
  size_t rounded = (nbytes + ZO_CPU_MEM_ALIGN - 1) / ZO_CPU_MEM_ALIGN * ZO_CPU_MEM_ALIGN;
  if (nbytes == 0) rounded = ZO_CPU_MEM_ALIGN;
  bool fits = nbytes <= SIZE_MAX - ZO_CPU_MEM_ALIGN && (!have_info || nbytes <= total_bytes);
  if (fits) *ptr = aligned_alloc(ZO_CPU_MEM_ALIGN, rounded);
  if (*ptr) return 0;
  char asked[32], avail[32] = "?", total[32] = "?";
  if (have_info) {
    zo_format_bytes(free_bytes, avail);
    zo_format_bytes(total_bytes, total);
  }
  return zo_error(-ENOMEM,
                  "cpu backend: cannot allocate %s (%zu bytes) of host memory for the device "
                  "arena; %s available of %s total: lower gpu_memory_budget",
                  zo_format_bytes(nbytes, asked), nbytes, avail, total);
}

static void cpu_mem_free(void *ptr) { free(ptr); }

struct copy_args {
  void *dst;
  const void *src;
  size_t nbytes;
};

static void copy_run(void *p) {
  struct copy_args *a = p;
  memcpy(a->dst, a->src, a->nbytes);
}

/* Every kind is host to host here. */
static int cpu_memcpy_async(void *dst, const void *src, size_t nbytes, enum zo_copy_kind kind,
                            zo_stream_t stream) {
  struct copy_args a = {dst, src, nbytes};
  zo_cpu_stream_enqueue(stream, copy_run, &a, sizeof a);
  return 0;
}

struct set_args {
  void *dst;
  int value;
  size_t nbytes;
};

static void set_run(void *p) {
  struct set_args *a = p;
  memset(a->dst, a->value, a->nbytes);
}

static int cpu_memset_async(void *dst, int value, size_t nbytes, zo_stream_t stream) {
  struct set_args a = {dst, value, nbytes};
  zo_cpu_stream_enqueue(stream, set_run, &a, sizeof a);
  return 0;
}

struct host_fn_args {
  void (*fn)(void *arg);
  void *arg;
};

static void host_fn_run(void *p) {
  const struct host_fn_args *a = p;
  a->fn(a->arg);
}

static int cpu_launch_host_func(zo_stream_t stream, void (*fn)(void *arg), void *arg) {
  struct host_fn_args a = {fn, arg};
  zo_cpu_stream_enqueue(stream, host_fn_run, &a, sizeof a);
  return 0;
}

/* ---- ops: args struct, task function, table entry ------------------------- */

struct encoder_forward_args {
  void *out;
  const int32_t *inp;
  const void *wte;
  const void *wpe;
  int B;
  int T;
  int C;
  enum zo_dtype dt;
};

static void encoder_forward_run(void *p) {
  struct encoder_forward_args *a = p;
  zo_cpu_encoder_forward(a->out, a->inp, a->wte, a->wpe, a->B, a->T, a->C, a->dt);
}

static void cpu_encoder_forward(void *out, const int32_t *inp, const void *wte, const void *wpe, int B, int T, int C, enum zo_dtype dt, zo_stream_t stream) {
  struct encoder_forward_args a = {out, inp, wte, wpe, B, T, C, dt};
  zo_cpu_stream_enqueue(stream, encoder_forward_run, &a, sizeof a);
}

struct encoder_backward_args {
  float *dwte;
  float *dwpe;
  const void *dout;
  const int32_t *inp;
  int B;
  int T;
  int C;
  enum zo_dtype dt;
};

static void encoder_backward_run(void *p) {
  struct encoder_backward_args *a = p;
  zo_cpu_encoder_backward(a->dwte, a->dwpe, a->dout, a->inp, a->B, a->T, a->C, a->dt);
}

static void cpu_encoder_backward(float *dwte, float *dwpe, const void *dout, const int32_t *inp, int B, int T, int C, enum zo_dtype dt, zo_stream_t stream) {
  struct encoder_backward_args a = {dwte, dwpe, dout, inp, B, T, C, dt};
  zo_cpu_stream_enqueue(stream, encoder_backward_run, &a, sizeof a);
}

struct layernorm_forward_args {
  void *out;
  float *mean;
  float *rstd;
  const void *inp;
  const void *weight;
  const void *bias;
  int N;
  int C;
  enum zo_dtype dt;
};

static void layernorm_forward_run(void *p) {
  struct layernorm_forward_args *a = p;
  zo_cpu_layernorm_forward(a->out, a->mean, a->rstd, a->inp, a->weight, a->bias, a->N, a->C, a->dt);
}

static void cpu_layernorm_forward(void *out, float *mean, float *rstd, const void *inp, const void *weight, const void *bias, int N, int C, enum zo_dtype dt, zo_stream_t stream) {
  struct layernorm_forward_args a = {out, mean, rstd, inp, weight, bias, N, C, dt};
  zo_cpu_stream_enqueue(stream, layernorm_forward_run, &a, sizeof a);
}

struct layernorm_backward_args {
  void *dinp;
  float *dweight;
  float *dbias;
  const void *dout;
  const void *inp;
  const void *weight;
  const float *mean;
  const float *rstd;
  int N;
  int C;
  enum zo_dtype dt;
};

static void layernorm_backward_run(void *p) {
  struct layernorm_backward_args *a = p;
  zo_cpu_layernorm_backward(a->dinp, a->dweight, a->dbias, a->dout, a->inp, a->weight, a->mean, a->rstd, a->N, a->C, a->dt);
}

static void cpu_layernorm_backward(void *dinp, float *dweight, float *dbias, const void *dout, const void *inp, const void *weight, const float *mean, const float *rstd, int N, int C, enum zo_dtype dt, zo_stream_t stream) {
  struct layernorm_backward_args a = {dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, dt};
  zo_cpu_stream_enqueue(stream, layernorm_backward_run, &a, sizeof a);
}

struct rmsnorm_forward_args {
  void *out;
  float *rstd;
  const void *inp;
  const void *weight;
  float eps;
  int N;
  int C;
  enum zo_dtype dt;
};

static void rmsnorm_forward_run(void *p) {
  struct rmsnorm_forward_args *a = p;
  zo_cpu_rmsnorm_forward(a->out, a->rstd, a->inp, a->weight, a->eps, a->N, a->C, a->dt);
}

static void cpu_rmsnorm_forward(void *out, float *rstd, const void *inp, const void *weight, float eps, int N, int C, enum zo_dtype dt, zo_stream_t stream) {
  struct rmsnorm_forward_args a = {out, rstd, inp, weight, eps, N, C, dt};
  zo_cpu_stream_enqueue(stream, rmsnorm_forward_run, &a, sizeof a);
}

struct rmsnorm_backward_args {
  void *dinp;
  float *dweight;
  const void *dout;
  const void *inp;
  const void *weight;
  const float *rstd;
  int N;
  int C;
  enum zo_dtype dt;
};

static void rmsnorm_backward_run(void *p) {
  struct rmsnorm_backward_args *a = p;
  zo_cpu_rmsnorm_backward(a->dinp, a->dweight, a->dout, a->inp, a->weight, a->rstd, a->N, a->C, a->dt);
}

static void cpu_rmsnorm_backward(void *dinp, float *dweight, const void *dout, const void *inp, const void *weight, const float *rstd, int N, int C, enum zo_dtype dt, zo_stream_t stream) {
  struct rmsnorm_backward_args a = {dinp, dweight, dout, inp, weight, rstd, N, C, dt};
  zo_cpu_stream_enqueue(stream, rmsnorm_backward_run, &a, sizeof a);
}

struct matmul_forward_args {
  void *out;
  const void *inp;
  const void *weight;
  const void *bias;
  int N;
  int C;
  int OC;
  enum zo_dtype dt;
};

static void matmul_forward_run(void *p) {
  struct matmul_forward_args *a = p;
  zo_cpu_matmul_forward(a->out, a->inp, a->weight, a->bias, a->N, a->C, a->OC, a->dt);
}

static void cpu_matmul_forward(void *out, const void *inp, const void *weight, const void *bias, int N, int C, int OC, enum zo_dtype dt, zo_stream_t stream) {
  struct matmul_forward_args a = {out, inp, weight, bias, N, C, OC, dt};
  zo_cpu_stream_enqueue(stream, matmul_forward_run, &a, sizeof a);
}

struct matmul_backward_args {
  void *dinp;
  float *dweight;
  float *dbias;
  const void *dout;
  const void *inp;
  const void *weight;
  int N;
  int C;
  int OC;
  enum zo_dtype dt;
};

static void matmul_backward_run(void *p) {
  struct matmul_backward_args *a = p;
  zo_cpu_matmul_backward(a->dinp, a->dweight, a->dbias, a->dout, a->inp, a->weight, a->N, a->C, a->OC, a->dt);
}

static void cpu_matmul_backward(void *dinp, float *dweight, float *dbias, const void *dout, const void *inp, const void *weight, int N, int C, int OC, enum zo_dtype dt, zo_stream_t stream) {
  struct matmul_backward_args a = {dinp, dweight, dbias, dout, inp, weight, N, C, OC, dt};
  zo_cpu_stream_enqueue(stream, matmul_backward_run, &a, sizeof a);
}

struct attention_forward_args {
  void *out;
  void *att;
  const void *qkv;
  int B;
  int T;
  int NH;
  int NKV;
  int hs;
  enum zo_dtype dt;
};

static void attention_forward_run(void *p) {
  struct attention_forward_args *a = p;
  zo_cpu_attention_forward(a->out, a->att, a->qkv, a->B, a->T, a->NH, a->NKV, a->hs, a->dt);
}

static void cpu_attention_forward(void *out, void *att, const void *qkv, int B, int T, int NH, int NKV, int hs, enum zo_dtype dt, zo_stream_t stream) {
  struct attention_forward_args a = {out, att, qkv, B, T, NH, NKV, hs, dt};
  zo_cpu_stream_enqueue(stream, attention_forward_run, &a, sizeof a);
}

struct attention_backward_args {
  void *dqkv;
  void *datt;
  const void *dout;
  const void *qkv;
  const void *att;
  int B;
  int T;
  int NH;
  int NKV;
  int hs;
  enum zo_dtype dt;
};

static void attention_backward_run(void *p) {
  struct attention_backward_args *a = p;
  zo_cpu_attention_backward(a->dqkv, a->datt, a->dout, a->qkv, a->att, a->B, a->T, a->NH, a->NKV, a->hs, a->dt);
}

static void cpu_attention_backward(void *dqkv, void *datt, const void *dout, const void *qkv, const void *att, int B, int T, int NH, int NKV, int hs, enum zo_dtype dt, zo_stream_t stream) {
  struct attention_backward_args a = {dqkv, datt, dout, qkv, att, B, T, NH, NKV, hs, dt};
  zo_cpu_stream_enqueue(stream, attention_backward_run, &a, sizeof a);
}

struct rope_args {
  void *qkv;
  const float *cos;
  const float *sin;
  int B;
  int T;
  int NH;
  int NKV;
  int hs;
  enum zo_dtype dt;
};

static void rope_forward_run(void *p) {
  struct rope_args *a = p;
  zo_cpu_rope_forward(a->qkv, a->cos, a->sin, a->B, a->T, a->NH, a->NKV, a->hs, a->dt);
}

static void cpu_rope_forward(void *qkv, const float *cos, const float *sin, int B, int T, int NH, int NKV, int hs, enum zo_dtype dt, zo_stream_t stream) {
  struct rope_args a = {qkv, cos, sin, B, T, NH, NKV, hs, dt};
  zo_cpu_stream_enqueue(stream, rope_forward_run, &a, sizeof a);
}

static void rope_backward_run(void *p) {
  struct rope_args *a = p;
  zo_cpu_rope_backward(a->qkv, a->cos, a->sin, a->B, a->T, a->NH, a->NKV, a->hs, a->dt);
}

static void cpu_rope_backward(void *dqkv, const float *cos, const float *sin, int B, int T, int NH, int NKV, int hs, enum zo_dtype dt, zo_stream_t stream) {
  struct rope_args a = {dqkv, cos, sin, B, T, NH, NKV, hs, dt};
  zo_cpu_stream_enqueue(stream, rope_backward_run, &a, sizeof a);
}

struct gelu_forward_args {
  void *out;
  const void *inp;
  size_t N;
  enum zo_dtype dt;
};

static void gelu_forward_run(void *p) {
  struct gelu_forward_args *a = p;
  zo_cpu_gelu_forward(a->out, a->inp, a->N, a->dt);
}

static void cpu_gelu_forward(void *out, const void *inp, size_t N, enum zo_dtype dt, zo_stream_t stream) {
  struct gelu_forward_args a = {out, inp, N, dt};
  zo_cpu_stream_enqueue(stream, gelu_forward_run, &a, sizeof a);
}

struct gelu_backward_args {
  void *dinp;
  const void *inp;
  const void *dout;
  size_t N;
  enum zo_dtype dt;
};

static void gelu_backward_run(void *p) {
  struct gelu_backward_args *a = p;
  zo_cpu_gelu_backward(a->dinp, a->inp, a->dout, a->N, a->dt);
}

static void cpu_gelu_backward(void *dinp, const void *inp, const void *dout, size_t N, enum zo_dtype dt, zo_stream_t stream) {
  struct gelu_backward_args a = {dinp, inp, dout, N, dt};
  zo_cpu_stream_enqueue(stream, gelu_backward_run, &a, sizeof a);
}

struct swiglu_forward_args {
  void *out;
  const void *inp;
  size_t N;
  int I;
  enum zo_dtype dt;
};

static void swiglu_forward_run(void *p) {
  struct swiglu_forward_args *a = p;
  zo_cpu_swiglu_forward(a->out, a->inp, a->N, a->I, a->dt);
}

static void cpu_swiglu_forward(void *out, const void *inp, size_t N, int I, enum zo_dtype dt, zo_stream_t stream) {
  struct swiglu_forward_args a = {out, inp, N, I, dt};
  zo_cpu_stream_enqueue(stream, swiglu_forward_run, &a, sizeof a);
}

struct swiglu_backward_args {
  void *dinp;
  const void *inp;
  const void *dout;
  size_t N;
  int I;
  enum zo_dtype dt;
};

static void swiglu_backward_run(void *p) {
  struct swiglu_backward_args *a = p;
  zo_cpu_swiglu_backward(a->dinp, a->inp, a->dout, a->N, a->I, a->dt);
}

static void cpu_swiglu_backward(void *dinp, const void *inp, const void *dout, size_t N, int I, enum zo_dtype dt, zo_stream_t stream) {
  struct swiglu_backward_args a = {dinp, inp, dout, N, I, dt};
  zo_cpu_stream_enqueue(stream, swiglu_backward_run, &a, sizeof a);
}

struct residual_forward_args {
  void *out;
  const void *inp1;
  const void *inp2;
  size_t N;
  enum zo_dtype dt;
};

static void residual_forward_run(void *p) {
  struct residual_forward_args *a = p;
  zo_cpu_residual_forward(a->out, a->inp1, a->inp2, a->N, a->dt);
}

static void cpu_residual_forward(void *out, const void *inp1, const void *inp2, size_t N, enum zo_dtype dt, zo_stream_t stream) {
  struct residual_forward_args a = {out, inp1, inp2, N, dt};
  zo_cpu_stream_enqueue(stream, residual_forward_run, &a, sizeof a);
}

struct residual_backward_args {
  void *dinp1;
  void *dinp2;
  const void *dout;
  size_t N;
  enum zo_dtype dt;
};

static void residual_backward_run(void *p) {
  struct residual_backward_args *a = p;
  zo_cpu_residual_backward(a->dinp1, a->dinp2, a->dout, a->N, a->dt);
}

static void cpu_residual_backward(void *dinp1, void *dinp2, const void *dout, size_t N, enum zo_dtype dt, zo_stream_t stream) {
  struct residual_backward_args a = {dinp1, dinp2, dout, N, dt};
  zo_cpu_stream_enqueue(stream, residual_backward_run, &a, sizeof a);
}

struct crossentropy_forward_args {
  float *losses;
  void *dlogits;
  const void *logits;
  const int32_t *targets;
  float dloss;
  int N;
  int V;
  int Vp;
  enum zo_dtype dt;
};

static void crossentropy_forward_run(void *p) {
  struct crossentropy_forward_args *a = p;
  zo_cpu_crossentropy_forward(a->losses, a->dlogits, a->logits, a->targets, a->dloss, a->N, a->V, a->Vp, a->dt);
}

static void cpu_crossentropy_forward(float *losses, void *dlogits, const void *logits, const int32_t *targets, float dloss, int N, int V, int Vp, enum zo_dtype dt, zo_stream_t stream) {
  struct crossentropy_forward_args a = {losses, dlogits, logits, targets, dloss, N, V, Vp, dt};
  zo_cpu_stream_enqueue(stream, crossentropy_forward_run, &a, sizeof a);
}

struct cast_args {
  void *dst;
  const void *src;
  enum zo_dtype dst_dt, src_dt;
  size_t n;
};

static void cast_run(void *p) {
  struct cast_args *a = p;
  zo_cpu_cast(a->dst, a->dst_dt, a->src, a->src_dt, a->n);
}

static void cpu_cast(void *dst, enum zo_dtype dst_dt, const void *src, enum zo_dtype src_dt, size_t n,
                     zo_stream_t stream) {
  struct cast_args a = {dst, src, dst_dt, src_dt, n};
  zo_cpu_stream_enqueue(stream, cast_run, &a, sizeof a);
}

struct adamw_update_args {
  float *p, *m, *v;
  const float *g;
  size_t n;
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  bool decay;
  long t;
};

static void adamw_update_run(void *p) {
  struct adamw_update_args *a = p;
  zo_cpu_adamw_update(a->p, a->g, a->m, a->v, a->n, a->lr, a->beta1, a->beta2, a->eps,
                      a->weight_decay, a->decay, a->t, a->grad_scale);
}

static void cpu_adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr,
                             float beta1, float beta2, float eps, float weight_decay, bool decay,
                             long t, float grad_scale, zo_stream_t stream) {
  struct adamw_update_args a = {.p = p, .m = m, .v = v, .g = g, .n = n, .lr = lr, .beta1 = beta1,
                                .beta2 = beta2, .eps = eps, .weight_decay = weight_decay,
                                .grad_scale = grad_scale, .decay = decay, .t = t};
  zo_cpu_stream_enqueue(stream, adamw_update_run, &a, sizeof a);
}

struct adamw8bit_update_args {
  float *p, *m_absmax, *v_absmax;
  uint8_t *m_code, *v_code;
  const float *g;
  size_t n, block;
  struct zo_adamw_hparams hp;
  float grad_scale;
  bool decay;
  long t;
};

static void adamw8bit_update_run(void *p) {
  struct adamw8bit_update_args *a = p;
  zo_adamw8bit_update(a->p, a->g, a->m_code, a->m_absmax, a->v_code, a->v_absmax, a->n, a->block, &a->hp,
                      a->decay, a->t, a->grad_scale);
}

static void cpu_adamw8bit_update(float *p, const float *g, uint8_t *m_code, float *m_absmax, uint8_t *v_code,
                                 float *v_absmax, size_t n, size_t block, float lr, float beta1, float beta2,
                                 float eps, float weight_decay, bool decay, long t, float grad_scale,
                                 zo_stream_t stream) {
  struct adamw8bit_update_args a = {
      .p = p, .m_absmax = m_absmax, .v_absmax = v_absmax, .m_code = m_code, .v_code = v_code, .g = g, .n = n,
      .block = block, .hp = {.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay},
      .grad_scale = grad_scale, .decay = decay, .t = t};
  zo_cpu_stream_enqueue(stream, adamw8bit_update_run, &a, sizeof a);
}

struct sumsq_args {
  double *out;
  const float *x;
  size_t n;
};

static void sumsq_run(void *p) {
  struct sumsq_args *a = p;
  *a->out = zo_cpu_sumsq(a->x, a->n);
}

static void cpu_sumsq(double *out, const float *x, size_t n, zo_stream_t stream) {
  struct sumsq_args a = {out, x, n};
  zo_cpu_stream_enqueue(stream, sumsq_run, &a, sizeof a);
}

/* ---- the table ------------------------------------------------------------ */

static const struct zo_backend cpu_backend = {
    .name = "cpu",
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .mem_info = cpu_mem_info,
    .set_threads = zo_cpu_set_threads,
    .stream_create = zo_cpu_stream_create,
    .stream_destroy = zo_cpu_stream_destroy,
    .stream_synchronize = zo_cpu_stream_synchronize,
    .event_create = zo_cpu_event_create,
    .event_destroy = zo_cpu_event_destroy,
    .event_record = zo_cpu_event_record,
    .stream_wait_event = zo_cpu_stream_wait_event,
    .event_synchronize = zo_cpu_event_synchronize,
    .memcpy_async = cpu_memcpy_async,
    .memset_async = cpu_memset_async,
    .launch_host_func = cpu_launch_host_func,
    .encoder_forward = cpu_encoder_forward,
    .encoder_backward = cpu_encoder_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .residual_forward = cpu_residual_forward,
    .residual_backward = cpu_residual_backward,
    .crossentropy_forward = cpu_crossentropy_forward,
    .cast = cpu_cast,
    .adamw_update = cpu_adamw_update,
    .adamw8bit_update = cpu_adamw8bit_update,
    .sumsq = cpu_sumsq,
};

zo_backend_t zo_backend_cpu(void) { return &cpu_backend; }
