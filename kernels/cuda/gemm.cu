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
 * is cached too, so a caller's fallback costs one heuristic call per shape. */
#include "gemm.cuh"

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
  uintptr_t bits = (uintptr_t)p | (uintptr_t)(stride_elems * (long long)elem_size) | 256u;
  return (unsigned)(bits & (~bits + 1));
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

bool zo_cuda_gemm_try(const struct zo_gemm *g, zo_stream_t stream) {
  ZO_ASSERT(g->m > 0 && g->n > 0 && g->k > 0 && g->batch >= 1);
  ZO_ASSERT(!g->bias || g->batch == 1);
  ZO_ASSERT(gemm_type_ok(g->ab_type) && (g->d_type == g->ab_type || g->d_type == CUDA_R_32F));
  ZO_ASSERT(g->workspace_bytes <= ZO_CUDA_WORKSPACE_BYTES);
  const size_t ws_bytes = g->workspace_bytes ? g->workspace_bytes : ZO_CUDA_WORKSPACE_BYTES;
  const size_t ab_size = gemm_type_size(g->ab_type), d_size = gemm_type_size(g->d_type);

  cublasLtMatmulDescOpaque_t desc_mem;
  cublasLtMatmulDesc_t desc = &desc_mem;
  ZO_CUBLAS_CHECK(cublasLtMatmulDescInit(desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  ZO_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  ZO_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  cublasLtEpilogue_t epilogue = g->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  ZO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                 sizeof epilogue));
  if (g->bias) {
    int32_t bias_type = (int32_t)g->d_type;
    ZO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                   &bias_type, sizeof bias_type));
    ZO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &g->bias, sizeof g->bias));
  }

  /* Stored (pre-op) shapes: op(A) is (m, k), so A is (k, m) when transposed. */
  cublasLtMatrixLayoutOpaque_t a_mem, b_mem, d_mem;
  gemm_layout(&a_mem, g->ab_type, g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->lda,
              g->batch, g->stride_a);
  gemm_layout(&b_mem, g->ab_type, g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->ldb,
              g->batch, g->stride_b);
  gemm_layout(&d_mem, g->d_type, g->m, g->n, g->ldd, g->batch, g->stride_d);

  struct gemm_key key;
  memset(&key, 0, sizeof key);
  key.trans_a = g->trans_a;
  key.trans_b = g->trans_b;
  key.m = g->m;
  key.n = g->n;
  key.k = g->k;
  key.lda = g->lda;
  key.ldb = g->ldb;
  key.ldd = g->ldd;
  key.batch = g->batch;
  key.epilogue = (int)epilogue;
  key.ab_type = (int)g->ab_type;
  key.d_type = (int)g->d_type;
  key.stride_a = g->batch > 1 ? g->stride_a : 0;
  key.stride_b = g->batch > 1 ? g->stride_b : 0;
  key.stride_d = g->batch > 1 ? g->stride_d : 0;
  key.workspace_bytes = (long long)ws_bytes;
  key.align_a = gemm_alignment(g->a, key.stride_a, ab_size);
  key.align_b = gemm_alignment(g->b, key.stride_b, ab_size);
  key.align_d = gemm_alignment(g->d, key.stride_d, d_size);
  key.align_bias = g->bias ? gemm_alignment(g->bias, 0, d_size) : 0;

  bool has_algo = false;
  cublasLtMatmulAlgo_t algo;
  memset(&algo, 0, sizeof algo);
  if (!gemm_cache_get(&key, &has_algo, &algo)) {
    cublasLtMatmulPreferenceOpaque_t pref_mem;
    cublasLtMatmulPreference_t pref = &pref_mem;
    ZO_CUBLAS_CHECK(cublasLtMatmulPreferenceInit(pref));
    uint64_t ws = ws_bytes;
    ZO_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    /* The default assumes 256-byte aligned matrices; views into qkv and
     * arena offsets are often less aligned. */
    uint32_t al_a = key.align_a, al_b = key.align_b, al_d = key.align_d;
    ZO_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    ZO_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    ZO_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
    ZO_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
    cublasLtMatmulHeuristicResult_t result;
    memset(&result, 0, sizeof result);
    int n_results = 0;
    /* NOT_SUPPORTED is cuBLASLt's answer for a configuration it has no
     * kernel for: an answer, not a failure. */
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(zo_cuda.lt, desc, &a_mem, &b_mem, &d_mem,
                                                       &d_mem, pref, 1, &result, &n_results);
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
      zo_abort(__FILE__, __LINE__, "cublasLtMatmulAlgoGetHeuristic: %s (%s)",
               cublasLtGetStatusName(st), cublasLtGetStatusString(st));
    has_algo = st == CUBLAS_STATUS_SUCCESS && n_results > 0;
    if (has_algo) algo = result.algo;
    gemm_cache_put(&key, has_algo, &algo);
  }
  if (!has_algo) return false;

  ZO_CUBLAS_CHECK(cublasLtMatmul(zo_cuda.lt, desc, &g->alpha, g->a, &a_mem, g->b, &b_mem, &g->beta,
                                 g->d, &d_mem, g->d, &d_mem, &algo, zo_cuda_workspace(stream),
                                 ws_bytes, zo_cuda_stream(stream)));
  return true;
}

static const char *gemm_type_name(cudaDataType_t t) {
  return t == CUDA_R_32F ? "fp32" : t == CUDA_R_16BF ? "bf16" : t == CUDA_R_16F ? "fp16" : "?";
}

void zo_cuda_gemm(const struct zo_gemm *g, zo_stream_t stream) {
  if (zo_cuda_gemm_try(g, stream)) return;
  zo_abort(__FILE__, __LINE__,
           "cuBLASLt has no algorithm for A/B %s, D %s, m=%d n=%d k=%d lda=%d ldb=%d ldd=%d "
           "batch=%d trans=%d%d bias=%d a=%p b=%p d=%p workspace=%zu bytes",
           gemm_type_name(g->ab_type), gemm_type_name(g->d_type), g->m, g->n, g->k, g->lda, g->ldb,
           g->ldd, g->batch, (int)g->trans_a, (int)g->trans_b, g->bias != NULL, g->a, g->b,
           (void *)g->d, g->workspace_bytes ? g->workspace_bytes : ZO_CUDA_WORKSPACE_BYTES);
}
