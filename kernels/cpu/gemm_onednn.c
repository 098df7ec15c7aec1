/* bf16 GEMMs through oneDNN's matmul primitive: bf16 operands, fp32
 * accumulation, the output rounded once to bf16 (bias added before the
 * rounding, as the CUDA path's cuBLASLt epilogue does) or, for weight
 * gradients, added to an fp32 matrix by a sum post-op. oneDNN picks its AMX
 * or AVX512_BF16 brgemm kernel from the CPU (ONEDNN_MAX_CPU_ISA limits it).
 *
 * Why the matmul primitive and not a BLAS-like call: oneDNN 2.x exports no
 * bf16 GEMM function (dnnl_gemm_bf16bf16f32 is internal), and only the
 * matmul primitive reaches the AMX kernels; its bias and sum fuse the store.
 *
 * Determinism: a oneDNN primitive created for n threads may split K between
 * them, so its bits would follow the thread count. Here the output is cut
 * into fixed tiles (ZO_ONEDNN_TM x ZO_ONEDNN_TN, the whole of K), each tile's
 * primitive is created for one thread (the creating thread's OpenMP count is
 * set to 1 around the creation) and our OpenMP team shares the tiles; a
 * tile's result depends on its shape only. Each tile is executed by one
 * thread on its own oneDNN stream with its own scratchpad (user mode, from
 * the thread's zo_cpu_scratch), so stream workers may run GEMMs at once.
 * Primitives come from oneDNN's primitive cache after the first call. */
#include "gemm_onednn.h"

#include <cpuid.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "cpu.h"

#define ZO_ONEDNN_TM 256 /* rows of an output tile */
#define ZO_ONEDNN_TN 256 /* columns of an output tile */

#define DNNL_CHECK(call)                                                                          \
  do {                                                                                            \
    dnnl_status_t st_ = (call);                                                                   \
    if (st_ != dnnl_success) zo_abort(__FILE__, __LINE__, "%s: %s", #call, dnnl_status2str(st_)); \
  } while (0)

struct gemm_choice {
  bool onednn;
  dnnl_engine_t engine; /* the CPU engine, for the process's life; NULL on fallback */
  char name[128];
};

static pthread_once_t choice_once = PTHREAD_ONCE_INIT;
static struct gemm_choice choice;

/* cpuid leaf 7: AMX-BF16 (subleaf 0, EDX bit 22), AVX512_BF16 (subleaf 1, EAX bit 5). */
static void cpu_bf16_features(bool *avx512_bf16, bool *amx_bf16) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  *avx512_bf16 = *amx_bf16 = false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
  const unsigned max_sub = a;
  *amx_bf16 = (d >> 22) & 1u;
  if (max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) *avx512_bf16 = (a >> 5) & 1u;
}

static bool isa_has(dnnl_cpu_isa_t isa, dnnl_cpu_isa_t want) {
  return ((unsigned)isa & (unsigned)want) == (unsigned)want;
}

static void choice_make(void) {
  const char *mode = getenv("ZO_CPU_GEMM");
  if (!mode || !*mode) mode = "auto";
  const bool force_fallback = strcmp(mode, "fallback") == 0, force_onednn = strcmp(mode, "onednn") == 0;
  if (!force_fallback && !force_onednn && strcmp(mode, "auto") != 0)
    zo_abort(__FILE__, __LINE__, "ZO_CPU_GEMM=%s: valid values are auto (default), onednn, fallback",
             mode);
  bool avx512_bf16, amx_bf16;
  cpu_bf16_features(&avx512_bf16, &amx_bf16);
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  const bool amx = amx_bf16 && isa_has(isa, dnnl_cpu_isa_avx512_core_amx);
  const bool usable = (avx512_bf16 || amx_bf16) && isa_has(isa, dnnl_cpu_isa_avx512_core_bf16);
  if (force_onednn && !usable)
    zo_abort(__FILE__, __LINE__,
             "ZO_CPU_GEMM=onednn: this CPU (or ONEDNN_MAX_CPU_ISA) offers oneDNN neither "
             "AVX512_BF16 nor AMX-BF16; use auto or fallback");
  choice.onednn = usable && !force_fallback;
  if (!choice.onednn) {
    snprintf(choice.name, sizeof choice.name,
             "fallback (bf16 widened to fp32 tiles, OpenBLAS sgemm)%s",
             force_fallback ? ", forced by ZO_CPU_GEMM" : "");
    return;
  }
  DNNL_CHECK(dnnl_engine_create(&choice.engine, dnnl_cpu, 0));
  const dnnl_version_t *v = dnnl_version();
  snprintf(choice.name, sizeof choice.name, "oneDNN %d.%d.%d matmul, %s", v->major, v->minor,
           v->patch, amx ? "AMX-BF16" : "AVX512_BF16");
}

bool zo_cpu_gemm_onednn_on(void) {
  pthread_once(&choice_once, choice_make);
  return choice.onednn;
}

const char *zo_cpu_gemm_kernel(void) {
  pthread_once(&choice_once, choice_make);
  return choice.name;
}

/* One tile shape's primitive and the descriptors its memories are made from. */
struct tile_prim {
  dnnl_primitive_t prim;
  dnnl_memory_desc_t src, wei, bias, dst, scratch;
  size_t scratch_bytes;
};

static void md_2d(dnnl_memory_desc_t *md, int rows, int cols, bool transposed, int ld,
                  dnnl_data_type_t dt) {
  const dnnl_dims_t dims = {rows, cols};
  const dnnl_dims_t strides = {transposed ? 1 : ld, transposed ? ld : 1};
  DNNL_CHECK(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides));
}

/* The primitive for a (tm, tn) tile over the whole of K, created for one
 * thread (see the file comment). */
static void tile_prim_create(struct tile_prim *p, bool ta, bool tb, int tm, int tn, int K, int lda,
                             int ldb, int ldc, bool accumulate_f32, bool with_bias) {
  md_2d(&p->src, tm, K, ta, lda, dnnl_bf16);
  md_2d(&p->wei, K, tn, tb, ldb, dnnl_bf16);
  md_2d(&p->dst, tm, tn, false, ldc, accumulate_f32 ? dnnl_f32 : dnnl_bf16);
  if (with_bias) md_2d(&p->bias, 1, tn, false, tn, dnnl_bf16);
  dnnl_matmul_desc_t desc;
  DNNL_CHECK(dnnl_matmul_desc_init(&desc, &p->src, &p->wei, with_bias ? &p->bias : NULL, &p->dst));
  dnnl_primitive_attr_t attr;
  DNNL_CHECK(dnnl_primitive_attr_create(&attr));
  DNNL_CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
  dnnl_post_ops_t po = NULL;
  if (accumulate_f32) {
    DNNL_CHECK(dnnl_post_ops_create(&po));
    DNNL_CHECK(dnnl_post_ops_append_sum(po, 1.0f));
    DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, po));
  }
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  dnnl_primitive_desc_t pd;
  DNNL_CHECK(dnnl_primitive_desc_create(&pd, &desc, attr, choice.engine, NULL));
  p->scratch = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  p->scratch_bytes = dnnl_memory_desc_get_size(&p->scratch);
  DNNL_CHECK(dnnl_primitive_create(&p->prim, pd));
  omp_set_num_threads(threads);
  DNNL_CHECK(dnnl_primitive_desc_destroy(pd));
  if (po) DNNL_CHECK(dnnl_post_ops_destroy(po));
  DNNL_CHECK(dnnl_primitive_attr_destroy(attr));
}

/* A memory over handle (which oneDNN does not own). */
static dnnl_memory_t mem(const dnnl_memory_desc_t *md, const void *handle) {
  dnnl_memory_t m;
  DNNL_CHECK(dnnl_memory_create(&m, md, choice.engine, (void *)handle));
  return m;
}

/* The tile at output rows m0.., columns n0.. on this thread's stream. */
static void tile_run(const struct tile_prim *p, dnnl_stream_t stream, void *scratch, bool ta,
                     bool tb, const uint16_t *A, int lda, const uint16_t *B, int ldb, void *C,
                     int ldc, bool accumulate_f32, const uint16_t *bias, int m0, int n0) {
  const size_t esz = accumulate_f32 ? sizeof(float) : sizeof(uint16_t);
  dnnl_exec_arg_t args[5];
  int n = 0;
  args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mem(&p->src, A + (ta ? (size_t)m0 : (size_t)m0 * lda))};
  args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mem(&p->wei, B + (tb ? (size_t)n0 * ldb : (size_t)n0))};
  args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST,
                                mem(&p->dst, (char *)C + ((size_t)m0 * ldc + (size_t)n0) * esz)};
  args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, mem(&p->scratch, scratch)};
  if (bias) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mem(&p->bias, bias + n0)};
  DNNL_CHECK(dnnl_primitive_execute(p->prim, stream, n, args));
  DNNL_CHECK(dnnl_stream_wait(stream));
  for (int i = 0; i < n; i++) DNNL_CHECK(dnnl_memory_destroy(args[i].memory));
}

void zo_cpu_gemm_onednn_bf16(bool ta, bool tb, int M, int N, int K, const void *A, int lda,
                             const void *B, int ldb, void *C, int ldc, bool accumulate_f32,
                             const void *bias) {
  ZO_ASSERT(zo_cpu_gemm_onednn_on());
  const int mt = (M + ZO_ONEDNN_TM - 1) / ZO_ONEDNN_TM, nt = (N + ZO_ONEDNN_TN - 1) / ZO_ONEDNN_TN;
  /* prims[i][j]: full (0) or last (1) tile row i / column j; at most 4 shapes. */
  struct tile_prim prims[2][2] = {0};
  size_t scratch_bytes = 64;
  for (int i = 0; i < 2; i++) {
    for (int j = 0; j < 2; j++) {
      if ((i == 0 && mt < 2) || (j == 0 && nt < 2)) continue; /* no full tile there */
      const int tm = i ? M - (mt - 1) * ZO_ONEDNN_TM : ZO_ONEDNN_TM;
      const int tn = j ? N - (nt - 1) * ZO_ONEDNN_TN : ZO_ONEDNN_TN;
      struct tile_prim *p = &prims[i][j];
      tile_prim_create(p, ta, tb, tm, tn, K, lda, ldb, ldc, accumulate_f32, bias != NULL);
      if (p->scratch_bytes + 64 > scratch_bytes) scratch_bytes = p->scratch_bytes + 64;
    }
  }
#pragma omp parallel
  {
    dnnl_stream_t stream;
    DNNL_CHECK(dnnl_stream_create(&stream, choice.engine, dnnl_stream_default_flags));
    uintptr_t raw = (uintptr_t)zo_cpu_scratch((scratch_bytes + sizeof(float) - 1) / sizeof(float));
    void *scratch = (void *)((raw + 63) & ~(uintptr_t)63);
#pragma omp for collapse(2) schedule(dynamic)
    for (int i = 0; i < mt; i++) {
      for (int j = 0; j < nt; j++) {
        const struct tile_prim *p = &prims[i == mt - 1][j == nt - 1];
        tile_run(p, stream, scratch, ta, tb, A, lda, B, ldb, C, ldc, accumulate_f32, bias,
                 i * ZO_ONEDNN_TM, j * ZO_ONEDNN_TN);
      }
    }
    DNNL_CHECK(dnnl_stream_destroy(stream));
  }
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      if (prims[i][j].prim) DNNL_CHECK(dnnl_primitive_destroy(prims[i][j].prim));
}
