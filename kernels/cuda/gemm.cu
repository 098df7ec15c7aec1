/* The one cuBLASLt call sequence of the backend: a strided-batched GEMM with
 * CUBLAS_COMPUTE_32F (fp32 operands stay fp32, no TF32; bf16/fp16 operands
 * accumulate in fp32), A and B of one type, D of that type or fp32, and an
 * optional bias epilogue whose vector has D's type (cublasLt.h: the bias
 * type is Dtype outside the IMMA and fp8 kernels). Descriptors live on the
 * stack (the *Init variants), so nothing is created or freed per call.
 *
 * The algorithm cache: cuBLASLt's heuristic costs tens of microseconds, so its
 * answer is kept per (shape, strides, transposes, types, epilogue, pointer
 * alignments, workspace size) in a small open-addressing table, guarded by a
 * mutex because ops may be queued from several host threads. "No algorithm"
 * is cached too, so a fallback costs one heuristic call per shape.
 *
 * No heuristic answer aborts: every answer but SUCCESS with an algorithm
 * (NOT_SUPPORTED, INVALID_VALUE for a leading dimension or alignment it
 * rejects, zero results; known for N = 1 or M = 1 with the bias epilogue and
 * for 2-byte aligned bf16/fp16 views with odd leading dimensions) means "no
 * algorithm for this descriptor". The path (kernels/gemm_route.c, unit-tested
 * on the CPU): cuBLASLt with the bias epilogue; else cuBLASLt without it and
 * the bias by a separate kernel; else a tiled kernel with fp32 accumulation,
 * legal for every shape, stride, alignment and type. ZO_CUDA_GEMM=fallback
 * (read at backend start-up) sends every GEMM to the tiled kernel, for the
 * op parity test of that kernel. */
#include "gemm.cuh"

#include "../gemm_route.h"

#include <pthread.h>
#include <string.h>

#define ZO_GEMM_CACHE_SLOTS 512 /* power of two; full table: heuristic each call */

/* All fields 4 or 8 bytes, the 8-byte ones 8-aligned: no padding, so the key
 * hashes and compares as bytes (it is zeroed before it is filled). */
struct gemm_key {
  int trans_a, trans_b, m, n, k, lda, ldb, ldd, batch, epilogue, ab_type, d_type;
  long long stride_a, stride_b, stride_d, workspace_bytes;
  unsigned align_a, align_b, align_d, align_bias; /* bytes, <= 256 */
};

struct gemm_slot {
  bool used;
  bool has_algo; /* false: cuBLASLt offers nothing for this key */
  struct gemm_key key;
  cublasLtMatmulAlgo_t algo;
};

static struct gemm_slot gemm_cache[ZO_GEMM_CACHE_SLOTS];
static pthread_mutex_t gemm_cache_mu = PTHREAD_MUTEX_INITIALIZER;

static size_t gemm_type_size(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

/* Largest power of two (<= 256, cuBLASLt's default assumption) dividing the
 * address of every batch's matrix. */
static unsigned gemm_alignment(const void *p, long long stride_elems, size_t elem_size) {
  return zo_gemm_alignment((uintptr_t)p, stride_elems * (long long)elem_size);
}

static uint64_t gemm_key_hash(const struct gemm_key *key) {
  const unsigned char *p = (const unsigned char *)key;
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < sizeof *key; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* Returns whether key is cached; if so, *has_algo says whether cuBLASLt had
 * an algorithm, and *algo is it. */
static bool gemm_cache_get(const struct gemm_key *key, bool *has_algo, cublasLtMatmulAlgo_t *algo) {
  bool found = false;
  pthread_mutex_lock(&gemm_cache_mu);
  for (uint64_t i = gemm_key_hash(key), n = 0; n < ZO_GEMM_CACHE_SLOTS; i++, n++) {
    struct gemm_slot *s = &gemm_cache[i & (ZO_GEMM_CACHE_SLOTS - 1)];
    if (!s->used) break;
    if (memcmp(&s->key, key, sizeof *key) == 0) {
      *has_algo = s->has_algo;
      *algo = s->algo;
      found = true;
      break;
    }
  }
  pthread_mutex_unlock(&gemm_cache_mu);
  return found;
}

static void gemm_cache_put(const struct gemm_key *key, bool has_algo,
                           const cublasLtMatmulAlgo_t *algo) {
  pthread_mutex_lock(&gemm_cache_mu);
  for (uint64_t i = gemm_key_hash(key), n = 0; n < ZO_GEMM_CACHE_SLOTS; i++, n++) {
    struct gemm_slot *s = &gemm_cache[i & (ZO_GEMM_CACHE_SLOTS - 1)];
    if (!s->used || memcmp(&s->key, key, sizeof *key) == 0) {
      s->used = true;
      s->has_algo = has_algo;
      s->key = *key;
      s->algo = *algo;
      break;
    }
  }
  pthread_mutex_unlock(&gemm_cache_mu);
}

static void gemm_layout(cublasLtMatrixLayoutOpaque_t *layout, cudaDataType_t type, int rows,
                        int cols, int ld, int batch, long long stride) {
  cublasLtMatrixLayout_t l = layout;
  ZO_CUBLAS_CHECK(cublasLtMatrixLayoutInit(l, type, (uint64_t)rows, (uint64_t)cols, ld));
  if (batch > 1) {
    int32_t count = batch;
    int64_t offset = stride;
    ZO_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                     sizeof count));
    ZO_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                     &offset, sizeof offset));
  }
}

static bool gemm_type_ok(cudaDataType_t t) {
  return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F;
}

static_assert(CUBLAS_STATUS_SUCCESS == ZO_GEMM_STATUS_SUCCESS, "gemm_route.h's success status");

/* One GEMM's cuBLASLt descriptors for one epilogue, and the algorithm of the
 * last query that found one. */
struct lt_call {
  const struct zo_gemm *g;
  size_t ws_bytes;
  bool bias_epilogue; /* what desc, key and algo describe */
  cublasLtMatmulDescOpaque_t desc;
  cublasLtMatrixLayoutOpaque_t a, b, d;
  struct gemm_key key;
  cublasLtMatmulAlgo_t algo;
};

static void lt_describe(struct lt_call *c, bool bias_epilogue) {
  const struct zo_gemm *g = c->g;
  const size_t ab_size = gemm_type_size(g->ab_type), d_size = gemm_type_size(g->d_type);
  c->bias_epilogue = bias_epilogue;
  cublasLtMatmulDesc_t desc = &c->desc;
  ZO_CUBLAS_CHECK(cublasLtMatmulDescInit(desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  ZO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  ZO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  cublasLtEpilogue_t epilogue = bias_epilogue ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  ZO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                 sizeof epilogue));
  if (bias_epilogue) {
    int32_t bias_type = (int32_t)g->d_type;
    ZO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                   sizeof bias_type));
    ZO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                                   sizeof g->bias));
  }
  /* Stored (pre-op) shapes: op(A) is (m, k), so A is (k, m) when transposed. */
  gemm_layout(&c->a, g->ab_type, g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->lda, g->batch,
              g->stride_a);
  gemm_layout(&c->b, g->ab_type, g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->ldb, g->batch,
              g->stride_b);
  gemm_layout(&c->d, g->d_type, g->m, g->n, g->ldd, g->batch, g->stride_d);

  struct gemm_key *key = &c->key;
  memset(key, 0, sizeof *key);
  key->trans_a = g->trans_a;
  key->trans_b = g->trans_b;
  key->m = g->m;
  key->n = g->n;
  key->k = g->k;
  key->lda = g->lda;
  key->ldb = g->ldb;
  key->ldd = g->ldd;
  key->batch = g->batch;
  key->epilogue = (int)epilogue;
  key->ab_type = (int)g->ab_type;
  key->d_type = (int)g->d_type;
  key->stride_a = g->batch > 1 ? g->stride_a : 0;
  key->stride_b = g->batch > 1 ? g->stride_b : 0;
  key->stride_d = g->batch > 1 ? g->stride_d : 0;
  key->workspace_bytes = (long long)c->ws_bytes;
  key->align_a = gemm_alignment(g->a, key->stride_a, ab_size);
  key->align_b = gemm_alignment(g->b, key->stride_b, ab_size);
  key->align_d = gemm_alignment(g->d, key->stride_d, d_size);
  key->align_bias = bias_epilogue ? gemm_alignment(g->bias, 0, d_size) : 0;
}

/* The heuristic's answer for c's descriptors (one algorithm asked). */
static bool lt_heuristic(struct lt_call *c) {
  cublasLtMatmulPreferenceOpaque_t pref_mem;
  cublasLtMatmulPreference_t pref = &pref_mem;
  ZO_CUBLAS_CHECK(cublasLtMatmulPreferenceInit(pref));
  uint64_t ws = c->ws_bytes;
  ZO_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  /* The default assumes 256-byte aligned matrices; views into qkv and
   * arena offsets are often less aligned. */
  uint32_t al_a = c->key.align_a, al_b = c->key.align_b, al_d = c->key.align_d;
  ZO_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                                       sizeof al_a));
  ZO_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                                       sizeof al_b));
  ZO_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d,
                                                       sizeof al_d));
  ZO_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d,
                                                       sizeof al_d));
  cublasLtMatmulHeuristicResult_t result;
  memset(&result, 0, sizeof result);
  int n_results = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(zo_cuda.lt, &c->desc, &c->a, &c->b, &c->d, &c->d,
                                                           pref, 1, &result, &n_results);
  const bool has = zo_gemm_answer_has_algo((int)st, n_results);
  if (has) c->algo = result.algo;
  return has;
}

/* zo_gemm_query_fn: whether cuBLASLt has an algorithm for the GEMM with or
 * without the bias epilogue (cached per key, misses included). */
static bool lt_query(void *ctx, bool bias_epilogue) {
  struct lt_call *c = (struct lt_call *)ctx;
  lt_describe(c, bias_epilogue);
  bool has_algo = false;
  cublasLtMatmulAlgo_t algo;
  memset(&algo, 0, sizeof algo);
  if (gemm_cache_get(&c->key, &has_algo, &algo)) {
    if (has_algo) c->algo = algo;
    return has_algo;
  }
  has_algo = lt_heuristic(c);
  gemm_cache_put(&c->key, has_algo, &c->algo);
  return has_algo;
}

static void lt_run(struct lt_call *c, float beta, zo_stream_t stream) {
  const struct zo_gemm *g = c->g;
  ZO_CUBLAS_CHECK(cublasLtMatmul(zo_cuda.lt, &c->desc, &g->alpha, g->a, &c->a, g->b, &c->b, &beta, g->d, &c->d,
                                 g->d, &c->d, &c->algo, zo_cuda_workspace(stream), c->ws_bytes,
                                 zo_cuda_stream(stream)));
}

/* ---- the separate bias and the tiled GEMM ------------------------------------- */

/* D (m, n, column-major, ldd) = bias broadcast over columns (add: D + bias,
 * in fp32, rounded once). */
template <typename d_t>
static __global__ void bias_cols_kernel(d_t *d, const d_t *bias, int m, int n, int ldd, bool add) {
  const size_t total = (size_t)m * n;
  for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total; t += (size_t)gridDim.x * blockDim.x) {
    const size_t i = t % (size_t)m, at = i + (t / (size_t)m) * (size_t)ldd;
    zo_st(d, at, (add ? zo_ld(d, at) : 0.0f) + zo_ld(bias, i));
  }
}

#define GEMM_TILE 16

/* One GEMM_TILE x GEMM_TILE block of D (columns from col0) for batch
 * blockIdx.z + batch0: the
 * k sum in fp32 over shared-memory tiles, alpha, beta (D not read when 0)
 * and the bias added in fp32, D rounded once. Any lda/ldb/ldd and alignment. */
template <typename ab_t, typename d_t>
static __global__ void gemm_tiled_kernel(struct zo_gemm g, int batch0, int col0) {
  __shared__ float as[GEMM_TILE][GEMM_TILE + 1], bs[GEMM_TILE][GEMM_TILE + 1];
  const long long z = (long long)blockIdx.z + batch0;
  const ab_t *a = (const ab_t *)g.a + z * g.stride_a;
  const ab_t *b = (const ab_t *)g.b + z * g.stride_b;
  d_t *d = (d_t *)g.d + z * g.stride_d;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int i = blockIdx.x * GEMM_TILE + tx, j = col0 + blockIdx.y * GEMM_TILE + ty;
  float acc = 0.0f;
  for (int l0 = 0; l0 < g.k; l0 += GEMM_TILE) {
    const int al = l0 + ty; /* op(A)(i, al) */
    as[ty][tx] = i < g.m && al < g.k
                     ? zo_ld(a, g.trans_a ? (size_t)al + (size_t)i * g.lda : (size_t)i + (size_t)al * g.lda)
                     : 0.0f;
    const int bl = l0 + tx; /* op(B)(bl, j) */
    bs[tx][ty] = bl < g.k && j < g.n
                     ? zo_ld(b, g.trans_b ? (size_t)j + (size_t)bl * g.ldb : (size_t)bl + (size_t)j * g.ldb)
                     : 0.0f;
    __syncthreads();
    for (int l = 0; l < GEMM_TILE; l++) acc = fmaf(as[l][tx], bs[l][ty], acc);
    __syncthreads();
  }
  if (i >= g.m || j >= g.n) return;
  const size_t at = (size_t)i + (size_t)j * g.ldd;
  float v = g.alpha * acc;
  if (g.beta != 0.0f) v += g.beta * zo_ld(d, at);
  if (g.bias) v += zo_ld((const d_t *)g.bias, i);
  zo_st(d, at, v);
}

template <typename ab_t, typename d_t>
static void gemm_tiled_launch(const struct zo_gemm *g, zo_stream_t stream) {
  const dim3 block(GEMM_TILE, GEMM_TILE);
  const int max_z = 65535, max_cols = 65535 * GEMM_TILE; /* grid.y and grid.z limits */
  for (int b0 = 0; b0 < g->batch; b0 += max_z)
    for (int c0 = 0; c0 < g->n; c0 += max_cols) {
      const int nz = g->batch - b0 < max_z ? g->batch - b0 : max_z;
      const int nc = g->n - c0 < max_cols ? g->n - c0 : max_cols;
      const dim3 grid(zo_ceil_div((size_t)g->m, GEMM_TILE), zo_ceil_div((size_t)nc, GEMM_TILE), (unsigned)nz);
      gemm_tiled_kernel<ab_t, d_t><<<grid, block, 0, zo_cuda_stream(stream)>>>(*g, b0, c0);
      ZO_CUDA_CHECK_LAUNCH();
    }
}

static void gemm_tiled(const struct zo_gemm *g, zo_stream_t stream) {
  switch (g->ab_type) {
  case CUDA_R_32F: gemm_tiled_launch<float, float>(g, stream); return;
  case CUDA_R_16BF:
    if (g->d_type == CUDA_R_32F) gemm_tiled_launch<__nv_bfloat16, float>(g, stream);
    else gemm_tiled_launch<__nv_bfloat16, __nv_bfloat16>(g, stream);
    return;
  default:
    if (g->d_type == CUDA_R_32F) gemm_tiled_launch<__half, float>(g, stream);
    else gemm_tiled_launch<__half, __half>(g, stream);
    return;
  }
}

template <typename d_t>
static void bias_cols_launch(const struct zo_gemm *g, bool add, zo_stream_t stream) {
  const int block = 256;
  bias_cols_kernel<d_t><<<zo_cuda_grid_1d((size_t)g->m * g->n, block), block, 0, zo_cuda_stream(stream)>>>(
      (d_t *)g->d, (const d_t *)g->bias, g->m, g->n, g->ldd, add);
  ZO_CUDA_CHECK_LAUNCH();
}

static void bias_cols(const struct zo_gemm *g, bool add, zo_stream_t stream) {
  switch (g->d_type) {
  case CUDA_R_32F: bias_cols_launch<float>(g, add, stream); return;
  case CUDA_R_16BF: bias_cols_launch<__nv_bfloat16>(g, add, stream); return;
  default: bias_cols_launch<__half>(g, add, stream); return;
  }
}

/* ---- the GEMM ----------------------------------------------------------------- */

void zo_cuda_gemm(const struct zo_gemm *g, zo_stream_t stream) {
  ZO_ASSERT(g->m > 0 && g->n > 0 && g->k > 0 && g->batch >= 1);
  ZO_ASSERT(!g->bias || g->batch == 1);
  ZO_ASSERT(gemm_type_ok(g->ab_type) && (g->d_type == g->ab_type || g->d_type == CUDA_R_32F));
  ZO_ASSERT(g->workspace_bytes <= ZO_CUDA_WORKSPACE_BYTES);
  struct lt_call c;
  memset(&c, 0, sizeof c);
  c.g = g;
  c.ws_bytes = g->workspace_bytes ? g->workspace_bytes : ZO_CUDA_WORKSPACE_BYTES;
  const unsigned bias_align = g->bias ? gemm_alignment(g->bias, 0, 1) : 0;
  switch (zo_gemm_route_select(g->bias != NULL, bias_align, zo_cuda.gemm_fallback, lt_query, &c)) {
  case ZO_GEMM_ROUTE_LT:
    lt_run(&c, g->beta, stream);
    return;
  case ZO_GEMM_ROUTE_LT_BIAS_KERNEL:
    ZO_ASSERT(!c.bias_epilogue);
    if (g->beta == 0.0f) { /* D = bias, then D += the product: one rounding, as the epilogue */
      bias_cols(g, false, stream);
      lt_run(&c, 1.0f, stream);
    } else {
      lt_run(&c, g->beta, stream);
      bias_cols(g, true, stream);
    }
    return;
  case ZO_GEMM_ROUTE_TILED:
    gemm_tiled(g, stream);
    return;
  }
}
