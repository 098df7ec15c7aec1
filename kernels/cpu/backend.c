/* The CPU backend table: every op becomes a task on a zo_cpu stream (stream.c)
 * that calls the zo_cpu_* implementation with the arguments copied at enqueue
 * time; on the NULL stream it runs before the call returns. "Device" memory is
 * host memory, page aligned. Nothing here computes or keeps state. */
#include "cpu.h"

#include "zo/adamw8bit.h"
#include "zo/trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZO_CPU_MEM_ALIGN 4096 /* bytes: pages, so O_DIRECT I/O may target the arena */

/* ---- memory --------------------------------------------------------------- */

static int cpu_mem_info(size_t *free_bytes, size_t *total_bytes) {
  *free_bytes = zo_meminfo_bytes("MemAvailable");
  *total_bytes = zo_meminfo_bytes("MemTotal");
  if (!*free_bytes || !*total_bytes)
    return zo_error(-EIO, "cpu backend: /proc/meminfo unreadable, or it lacks MemTotal or MemAvailable");
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

/* Every kind is host to host here; the kind names the copy on the timeline. */
static int cpu_memcpy_async(void *dst, const void *src, size_t nbytes, enum zo_copy_kind kind,
                            zo_stream_t stream) {
  static const char *const names[] = {[ZO_COPY_H2D] = "copy H2D", [ZO_COPY_D2H] = "copy D2H", [ZO_COPY_H2H] = "copy H2H",
                                      [ZO_COPY_D2D] = "copy D2D"};
  struct copy_args a = {dst, src, nbytes};
  const char *name = (unsigned)kind < sizeof names / sizeof names[0] && names[kind] ? names[kind] : "copy";
  zo_cpu_stream_enqueue_op(stream, copy_run, &a, sizeof a, name, nbytes, 0);
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
  zo_cpu_stream_enqueue_op(stream, set_run, &a, sizeof a, "memset", nbytes, 0);
  return 0;
}

struct copy2d_args {
  void *dst;
  const void *src;
  size_t dpitch, spitch, width, rows;
};

static void copy2d_run(void *p) {
  const struct copy2d_args *a = p;
#pragma omp parallel for schedule(static) if (a->rows * a->width >= ((size_t)1 << 20))
  for (size_t i = 0; i < a->rows; i++) memcpy((char *)a->dst + i * a->dpitch, (const char *)a->src + i * a->spitch, a->width);
}

static int cpu_memcpy2d_async(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t rows,
                              zo_stream_t stream) {
  struct copy2d_args a = {dst, src, dpitch, spitch, width, rows};
  zo_cpu_stream_enqueue_op(stream, copy2d_run, &a, sizeof a, "copy 2D", width * rows, 0);
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
  zo_cpu_stream_enqueue_op(stream, host_fn_run, &a, sizeof a, "host function", 0, 0);
  return 0;
}

/* ---- ops ------------------------------------------------------------------
 * CPU_OP(op, (type, name), ...) defines the table entry cpu_<op>(args...,
 * stream) from an op's argument list (zo_cpu_<op>'s, in its order): its
 * task record struct <op>_args holds the arguments, copied into the stream's
 * queue at enqueue time, and <op>_run calls zo_cpu_<op> with them on the
 * stream's worker (on the NULL stream, before cpu_<op> returns). CPU_OP_FN
 * names the function to run instead. CPU_OP_FLOPS gives the op's FLOPs as an
 * expression over the record `a`, for the timeline (zo/trace.h; evaluated
 * only while it records). The table below checks every entry's signature
 * against struct zo_backend. No argument may be named a or stream (the
 * wrappers' own names). */

#define CPU_OP(op, ...) CPU_OP_FN(op, zo_cpu_##op, 0, __VA_ARGS__)
#define CPU_OP_FLOPS(op, flops, ...) CPU_OP_FN(op, zo_cpu_##op, flops, __VA_ARGS__)
#define CPU_OP_FN(op, fn, flops, ...)                                                        \
  struct op##_args {                                                                         \
    OP_MAP(OP_FIELD, OP_NOSEP, __VA_ARGS__)                                                  \
  };                                                                                         \
  _Static_assert(sizeof(struct op##_args) <= ZO_CPU_TASK_ARGS, #op ": task record too big"); \
  static void op##_run(void *p) {                                                            \
    const struct op##_args *a = p;                                                           \
    fn(OP_MAP(OP_FROM_TASK, OP_COMMA, __VA_ARGS__));                                         \
  }                                                                                          \
  static void cpu_##op(OP_MAP(OP_PARAM, OP_COMMA, __VA_ARGS__), zo_stream_t stream) {        \
    const struct op##_args a = {OP_MAP(OP_NAME, OP_COMMA, __VA_ARGS__)};                     \
    zo_cpu_stream_enqueue_op(stream, op##_run, &a, sizeof a, #op, 0,                         \
                             zo_trace_on() ? (uint64_t)(flops) : 0);                         \
  }

/* What each (type, name) pair becomes in the record, the call and the entry. */
#define OP_FIELD(type, name) type name;
#define OP_FROM_TASK(type, name) a->name
#define OP_PARAM(type, name) type name
#define OP_NAME(type, name) name
#define OP_COMMA() ,
#define OP_NOSEP()

/* OP_MAP(f, sep, x1, ..., xn) = f x1 sep() ... sep() f xn, for n <= 16. */
#define OP_MAP(f, sep, ...) OP_CAT(OP_MAP_, OP_COUNT(__VA_ARGS__))(f, sep, __VA_ARGS__)
#define OP_COUNT(...) OP_COUNT_(__VA_ARGS__, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define OP_COUNT_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, n, ...) n
#define OP_CAT(a, b) OP_CAT_(a, b)
#define OP_CAT_(a, b) a##b
#define OP_MAP_1(f, sep, x) f x
#define OP_MAP_2(f, sep, x, ...) f x sep() OP_MAP_1(f, sep, __VA_ARGS__)
#define OP_MAP_3(f, sep, x, ...) f x sep() OP_MAP_2(f, sep, __VA_ARGS__)
#define OP_MAP_4(f, sep, x, ...) f x sep() OP_MAP_3(f, sep, __VA_ARGS__)
#define OP_MAP_5(f, sep, x, ...) f x sep() OP_MAP_4(f, sep, __VA_ARGS__)
#define OP_MAP_6(f, sep, x, ...) f x sep() OP_MAP_5(f, sep, __VA_ARGS__)
#define OP_MAP_7(f, sep, x, ...) f x sep() OP_MAP_6(f, sep, __VA_ARGS__)
#define OP_MAP_8(f, sep, x, ...) f x sep() OP_MAP_7(f, sep, __VA_ARGS__)
#define OP_MAP_9(f, sep, x, ...) f x sep() OP_MAP_8(f, sep, __VA_ARGS__)
#define OP_MAP_10(f, sep, x, ...) f x sep() OP_MAP_9(f, sep, __VA_ARGS__)
#define OP_MAP_11(f, sep, x, ...) f x sep() OP_MAP_10(f, sep, __VA_ARGS__)
#define OP_MAP_12(f, sep, x, ...) f x sep() OP_MAP_11(f, sep, __VA_ARGS__)
#define OP_MAP_13(f, sep, x, ...) f x sep() OP_MAP_12(f, sep, __VA_ARGS__)
#define OP_MAP_14(f, sep, x, ...) f x sep() OP_MAP_13(f, sep, __VA_ARGS__)
#define OP_MAP_15(f, sep, x, ...) f x sep() OP_MAP_14(f, sep, __VA_ARGS__)
#define OP_MAP_16(f, sep, x, ...) f x sep() OP_MAP_15(f, sep, __VA_ARGS__)

CPU_OP(encoder_forward, (void *, out), (const int32_t *, inp), (const void *, wte), (const void *, wpe),
       (int, B), (int, T), (int, C), (enum zo_dtype, dt))
CPU_OP(encoder_backward, (float *, dwte), (float *, dwpe), (const void *, dout), (const int32_t *, inp),
       (int, B), (int, T), (int, C), (int, padding_idx), (enum zo_dtype, dt))
CPU_OP(layernorm_forward, (void *, out), (float *, mean), (float *, rstd), (const void *, inp),
       (const void *, weight), (const void *, bias), (int, N), (int, C), (enum zo_dtype, dt))
CPU_OP(layernorm_backward, (void *, dinp), (float *, dweight), (float *, dbias), (const void *, dout),
       (const void *, inp), (const void *, weight), (const float *, mean), (const float *, rstd),
       (int, N), (int, C), (enum zo_dtype, dt))
CPU_OP(rmsnorm_forward, (void *, out), (float *, rstd), (const void *, inp), (const void *, weight),
       (float, eps), (int, N), (int, C), (enum zo_dtype, dt))
CPU_OP(rmsnorm_backward, (void *, dinp), (float *, dweight), (const void *, dout), (const void *, inp),
       (const void *, weight), (const float *, rstd), (int, N), (int, C), (enum zo_dtype, dt))
CPU_OP(rmsnorm_heads_forward, (void *, out), (float *, rstd), (const void *, inp), (const void *, weight),
       (float, eps), (int, N), (int, H), (int, D), (int, ld_out), (int, ld_inp), (enum zo_dtype, dt))
CPU_OP(rmsnorm_heads_backward, (void *, dinp), (float *, dweight), (const void *, dout), (const void *, inp),
       (const void *, weight), (const float *, rstd), (int, N), (int, H), (int, D), (int, ld_d), (int, ld_inp),
       (enum zo_dtype, dt))
/* FLOPs: a GEMM's 2 per multiply-add (backward: dinp and dweight; a frozen
 * weight, dweight NULL, only dinp's), causal
 * attention's two products over the lower triangle (backward: twice). */
CPU_OP_FLOPS(matmul_forward, 2.0 * a.N * a.C * a.OC, (void *, out), (const void *, inp), (const void *, weight), (const void *, bias),
       (int, N), (int, C), (int, OC), (enum zo_dtype, dt))
CPU_OP_FLOPS(matmul_backward, (a.dweight ? 4.0 : a.dinp ? 2.0 : 0.0) * a.N * a.C * a.OC, (void *, dinp), (float *, dweight), (float *, dbias), (const void *, dout),
       (const void *, inp), (const void *, weight), (int, N), (int, C), (int, OC), (enum zo_dtype, dt))
CPU_OP_FLOPS(matmul_q4_forward, 2.0 * a.N * a.w.C * a.w.OC, (void *, out), (const void *, inp),
             (struct zo_quant4_weight, w), (const void *, bias), (int, N), (enum zo_dtype, dt))
CPU_OP_FLOPS(matmul_q4_backward_dx, 2.0 * a.N * a.w.C * a.w.OC, (void *, dinp), (const void *, dout),
             (struct zo_quant4_weight, w), (int, N), (enum zo_dtype, dt))
CPU_OP_FLOPS(attention_forward, 2.0 * a.B * a.NH * a.T * (a.T + 1.0) * a.hs, (void *, out), (void *, att), (const void *, qkv), (int, B), (int, T),
       (int, NH), (int, NKV), (int, hs), (enum zo_dtype, dt))
CPU_OP_FLOPS(attention_window_forward, 2.0 * a.B * a.NH * a.T * (a.T + 1.0) * a.hs, (void *, out), (void *, att),
       (const void *, qkv), (int, B), (int, T), (int, NH), (int, NKV), (int, hs), (int, window), (enum zo_dtype, dt))
CPU_OP_FLOPS(attention_backward, 4.0 * a.B * a.NH * a.T * (a.T + 1.0) * a.hs, (void *, dqkv), (void *, datt), (const void *, dout), (const void *, qkv),
       (const void *, att), (int, B), (int, T), (int, NH), (int, NKV), (int, hs), (enum zo_dtype, dt))
CPU_OP(rope_forward, (void *, qkv), (const float *, cos), (const float *, sin), (int, B), (int, T),
       (int, NH), (int, NKV), (int, hs), (enum zo_dtype, dt))
CPU_OP(rope_backward, (void *, dqkv), (const float *, cos), (const float *, sin), (int, B), (int, T),
       (int, NH), (int, NKV), (int, hs), (enum zo_dtype, dt))
CPU_OP(gelu_forward, (void *, out), (const void *, inp), (size_t, N), (enum zo_dtype, dt))
CPU_OP(gelu_backward, (void *, dinp), (const void *, inp), (const void *, dout), (size_t, N),
       (enum zo_dtype, dt))
CPU_OP(swiglu_forward, (void *, out), (const void *, inp), (size_t, N), (int, I), (enum zo_dtype, dt))
CPU_OP(swiglu_backward, (void *, dinp), (const void *, inp), (const void *, dout), (size_t, N), (int, I),
       (enum zo_dtype, dt))
CPU_OP(residual_forward, (void *, out), (const void *, inp1), (const void *, inp2), (size_t, N),
       (enum zo_dtype, dt))
CPU_OP(residual_backward, (void *, dinp1), (void *, dinp2), (const void *, dout), (size_t, N),
       (enum zo_dtype, dt))
CPU_OP(scaled_add_forward, (void *, y), (const void *, v), (float, s), (int, N), (int, M), (int, ld_y),
       (int, col0), (enum zo_dtype, dt))
CPU_OP(scaled_add_backward, (void *, dv), (const void *, dy), (float, s), (int, N), (int, M), (int, ld_y),
       (int, col0), (enum zo_dtype, dt))
CPU_OP(dropout, (void *, out), (const void *, inp), (size_t, N), (float, p), (uint64_t, seed), (uint64_t, site),
       (enum zo_dtype, dt))
CPU_OP(crossentropy_forward, (float *, losses), (void *, dlogits), (const void *, logits),
       (const int32_t *, targets), (float, dloss), (int, N), (int, V), (int, Vp), (enum zo_dtype, dt))
CPU_OP(cast, (void *, dst), (enum zo_dtype, dst_dt), (const void *, src), (enum zo_dtype, src_dt),
       (size_t, n))
CPU_OP(adamw_update, (float *, p), (const float *, g), (float *, m), (float *, v), (size_t, n), (float, lr),
       (float, beta1), (float, beta2), (float, eps), (float, weight_decay), (bool, decay), (long, t),
       (float, grad_scale))

/* zo_adamw8bit_update with the hyperparameters as the op passes them. */
static void adamw8bit_update(float *p, const float *g, uint8_t *m_code, float *m_absmax, uint8_t *v_code,
                             float *v_absmax, size_t n, size_t block, float lr, float beta1, float beta2,
                             float eps, float weight_decay, bool decay, long t, float grad_scale) {
  const struct zo_adamw_hparams hp = {
      .lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay};
  zo_adamw8bit_update(p, g, m_code, m_absmax, v_code, v_absmax, n, block, &hp, decay, t, grad_scale);
}
CPU_OP_FN(adamw8bit_update, adamw8bit_update, 0, (float *, p), (const float *, g), (uint8_t *, m_code),
          (float *, m_absmax), (uint8_t *, v_code), (float *, v_absmax), (size_t, n), (size_t, block),
          (float, lr), (float, beta1), (float, beta2), (float, eps), (float, weight_decay), (bool, decay),
          (long, t), (float, grad_scale))

/* The sum into device memory, as the op's contract has it. */
static void sumsq(double *out, const float *x, size_t n) { *out = zo_cpu_sumsq(x, n); }
CPU_OP_FN(sumsq, sumsq, 0, (double *, out), (const float *, x), (size_t, n))

/* ---- the table ------------------------------------------------------------ */

static const struct zo_backend cpu_backend = {
    .name = "cpu",
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .mem_info = cpu_mem_info,
    .set_threads = zo_cpu_set_threads,
    .stream_create = zo_cpu_stream_create,
    .stream_destroy = zo_cpu_stream_destroy,
    .stream_set_name = zo_cpu_stream_set_name,
    .stream_synchronize = zo_cpu_stream_synchronize,
    .event_create = zo_cpu_event_create,
    .event_destroy = zo_cpu_event_destroy,
    .event_record = zo_cpu_event_record,
    .stream_wait_event = zo_cpu_stream_wait_event,
    .event_synchronize = zo_cpu_event_synchronize,
    .memcpy_async = cpu_memcpy_async,
    .memset_async = cpu_memset_async,
    .memcpy2d_async = cpu_memcpy2d_async,
    .launch_host_func = cpu_launch_host_func,
    .encoder_forward = cpu_encoder_forward,
    .encoder_backward = cpu_encoder_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .rmsnorm_heads_forward = cpu_rmsnorm_heads_forward,
    .rmsnorm_heads_backward = cpu_rmsnorm_heads_backward,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .matmul_q4_forward = cpu_matmul_q4_forward,
    .matmul_q4_backward_dx = cpu_matmul_q4_backward_dx,
    .attention_forward = cpu_attention_forward,
    .attention_window_forward = cpu_attention_window_forward,
    .attention_backward = cpu_attention_backward,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .residual_forward = cpu_residual_forward,
    .residual_backward = cpu_residual_backward,
    .scaled_add_forward = cpu_scaled_add_forward,
    .scaled_add_backward = cpu_scaled_add_backward,
    .dropout = cpu_dropout,
    .crossentropy_forward = cpu_crossentropy_forward,
    .cast = cpu_cast,
    .adamw_update = cpu_adamw_update,
    .adamw8bit_update = cpu_adamw8bit_update,
    .sumsq = cpu_sumsq,
};

zo_backend_t zo_backend_cpu(void) { return &cpu_backend; }
