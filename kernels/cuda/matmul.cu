/* Fully connected layer (out = inp @ weight^T + bias) and its backward as
 * cuBLASLt fp32 GEMMs, plus a column-sum kernel for dbias. Compute type is
 * CUBLAS_COMPUTE_32F without TF32: results must match the CPU backend to 1e-5.
 *
 * Row major onto cuBLASLt's column major: a row-major (R, K) matrix with row
 * stride ld is, byte for byte, the column-major (K, R) matrix with leading
 * dimension ld, i.e. its transpose. So a row-major product Y = X @ W^T is
 * computed as the column-major Y^T = W @ X^T with the operands' memory as is:
 *   forward   out^T (OC,N) = op_T(weight as col-major (C,OC), ld C) @ inp as col-major (C,N), ld C
 *             m = OC, n = N, k = C; the bias (OC) runs along D's rows: EPILOGUE_BIAS.
 *   dinp      dinp^T (C,N) = weight as col-major (C,OC) @ dout as col-major (OC,N)
 *             m = C, n = N, k = OC, no transposes, beta 0 (overwrite).
 *   dweight   dweight^T (C,OC) = inp as col-major (C,N) @ op_T(dout as col-major (OC,N))
 *             m = C, n = OC, k = N, beta 1 (+=).
 * dbias is a separate column-sum kernel: CUBLASLT_EPILOGUE_BGRADB overwrites
 * rather than accumulates and is not offered for every fp32 layout.
 *
 * The algorithm cache: cuBLASLt's heuristic costs tens of microseconds, so its
 * answer is kept per (shape, strides, transposes, epilogue, pointer
 * alignments) in a small open-addressing table, guarded by a mutex because
 * ops may be queued from several host threads. */
#include "matmul.cuh"

#include <pthread.h>
#include <string.h>

#define ZO_GEMM_CACHE_SLOTS 512 /* power of two; full table: heuristic each call */

struct gemm_key {
  int trans_a, trans_b, m, n, k, lda, ldb, ldd, batch, epilogue;
  long long stride_a, stride_b, stride_d;
  unsigned align_a, align_b, align_d, align_bias; /* bytes, <= 256 */
};

struct gemm_slot {
  bool used;
  struct gemm_key key;
  cublasLtMatmulAlgo_t algo;
};

static struct gemm_slot gemm_cache[ZO_GEMM_CACHE_SLOTS];
static pthread_mutex_t gemm_cache_mu = PTHREAD_MUTEX_INITIALIZER;

/* Largest power of two (<= 256, cuBLASLt's default assumption) dividing the
 * address of every batch's matrix. */
static unsigned gemm_alignment(const void *p, long long stride_elems) {
  uintptr_t bits = (uintptr_t)p | (uintptr_t)(stride_elems * (long long)sizeof(float)) | 256u;
  return (unsigned)(bits & (~bits + 1));
}

static uint64_t gemm_key_hash(const struct gemm_key *key) {
  /* FNV-1a over the bytes: the key has no padding (all 4- and 8-byte fields,
   * 8-byte ones 8-aligned) and is zeroed before it is filled. */
  const unsigned char *p = (const unsigned char *)key;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < sizeof *key; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static bool gemm_cache_get(const struct gemm_key *key, cublasLtMatmulAlgo_t *algo) {
  bool found = false;
  pthread_mutex_lock(&gemm_cache_mu);
  for (uint64_t i = gemm_key_hash(key), n = 0; n < ZO_GEMM_CACHE_SLOTS; i++, n++) {
    struct gemm_slot *s = &gemm_cache[i & (ZO_GEMM_CACHE_SLOTS - 1)];
    if (!s->used) break;
    if (memcmp(&s->key, key, sizeof *key) == 0) {
      *algo = s->algo;
      found = true;
      break;
    }
  }
  pthread_mutex_unlock(&gemm_cache_mu);
  return found;
}

static void gemm_cache_put(const struct gemm_key *key, const cublasLtMatmulAlgo_t *algo) {
  pthread_mutex_lock(&gemm_cache_mu);
  for (uint64_t i = gemm_key_hash(key), n = 0; n < ZO_GEMM_CACHE_SLOTS; i++, n++) {
    struct gemm_slot *s = &gemm_cache[i & (ZO_GEMM_CACHE_SLOTS - 1)];
    if (!s->used || memcmp(&s->key, key, sizeof *key) == 0) {
      s->used = true;
      s->key = *key;
      s->algo = *algo;
      break;
    }
  }
  pthread_mutex_unlock(&gemm_cache_mu);
}

static void gemm_layout(cublasLtMatrixLayoutOpaque_t *layout, int rows, int cols, int ld, int batch,
                        long long stride) {
  cublasLtMatrixLayout_t l = layout;
  ZO_CUBLAS_CHECK(cublasLtMatrixLayoutInit(l, CUDA_R_32F, (uint64_t)rows, (uint64_t)cols, ld));
  if (batch > 1) {
    int32_t count = batch;
    int64_t offset = stride;
    ZO_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                     sizeof count));
    ZO_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                     &offset, sizeof offset));
  }
}

void zo_cuda_gemm(const struct zo_gemm *g, zo_stream_t stream) {
  ZO_ASSERT(g->m > 0 && g->n > 0 && g->k > 0 && g->batch >= 1);
  ZO_ASSERT(!g->bias || g->batch == 1);
  /* Descriptors live on the stack (the *Init variants): nothing to free. */
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
    cudaDataType_t bias_type = CUDA_R_32F;
    ZO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                   &bias_type, sizeof bias_type));
    ZO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &g->bias, sizeof g->bias));
  }

  /* Stored (pre-op) shapes: op(A) is (m, k), so A is (k, m) when transposed. */
  cublasLtMatrixLayoutOpaque_t a_mem, b_mem, d_mem;
  gemm_layout(&a_mem, g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->lda, g->batch,
              g->stride_a);
  gemm_layout(&b_mem, g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->ldb, g->batch,
              g->stride_b);
  gemm_layout(&d_mem, g->m, g->n, g->ldd, g->batch, g->stride_d);

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
  key.stride_a = g->batch > 1 ? g->stride_a : 0;
  key.stride_b = g->batch > 1 ? g->stride_b : 0;
  key.stride_d = g->batch > 1 ? g->stride_d : 0;
  key.align_a = gemm_alignment(g->a, key.stride_a);
  key.align_b = gemm_alignment(g->b, key.stride_b);
  key.align_d = gemm_alignment(g->d, key.stride_d);
  key.align_bias = g->bias ? gemm_alignment(g->bias, 0) : 0;

  cublasLtMatmulAlgo_t algo;
  if (!gemm_cache_get(&key, &algo)) {
    cublasLtMatmulPreferenceOpaque_t pref_mem;
    cublasLtMatmulPreference_t pref = &pref_mem;
    ZO_CUBLAS_CHECK(cublasLtMatmulPreferenceInit(pref));
    size_t ws = ZO_CUDA_WORKSPACE_BYTES;
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
    int n_results = 0;
    ZO_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(zo_cuda.lt, desc, &a_mem, &b_mem, &d_mem, &d_mem,
                                                   pref, 1, &result, &n_results));
    if (n_results == 0)
      zo_abort(__FILE__, __LINE__,
               "cuBLASLt has no fp32 algorithm for m=%d n=%d k=%d lda=%d ldb=%d ldd=%d batch=%d "
               "trans=%d%d bias=%d alignments a=%u b=%u d=%u",
               g->m, g->n, g->k, g->lda, g->ldb, g->ldd, g->batch, (int)g->trans_a, (int)g->trans_b,
               g->bias != NULL, key.align_a, key.align_b, key.align_d);
    algo = result.algo;
    gemm_cache_put(&key, &algo);
  }

  ZO_CUBLAS_CHECK(cublasLtMatmul(zo_cuda.lt, desc, &g->alpha, g->a, &a_mem, g->b, &b_mem, &g->beta,
                                 g->d, &d_mem, g->d, &d_mem, &algo, zo_cuda_workspace(stream),
                                 ZO_CUDA_WORKSPACE_BYTES, zo_cuda_stream(stream)));
}

/* ---- dbias: column sums of dout (N, OC), added to dbias ------------------------ */

#define COLSUM_ROWS 8      /* threadIdx.y extent: rows summed side by side */
#define COLSUM_MIN_ROWS 64 /* rows per block at least, before splitting the rows */

/* Block (32, COLSUM_ROWS) sums rows [row0, row1) of 32 columns; one atomic per
 * column per block (a plain += when the grid has one row chunk). */
static __global__ void colsum_add_kernel(float *dbias, const float *dout, int N, int OC,
                                         int rows_per_chunk, int use_atomics) {
  __shared__ float part[COLSUM_ROWS][ZO_WARP + 1];
  int c = blockIdx.x * ZO_WARP + threadIdx.x;
  int row0 = blockIdx.y * rows_per_chunk;
  int row1 = min(row0 + rows_per_chunk, N);
  float s = 0.0f;
  if (c < OC)
    for (int r = row0 + threadIdx.y; r < row1; r += COLSUM_ROWS) s += dout[(size_t)r * OC + c];
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || c >= OC) return;
  for (int y = 1; y < COLSUM_ROWS; y++) s += part[y][threadIdx.x];
  if (use_atomics)
    atomicAdd(&dbias[c], s);
  else
    dbias[c] += s;
}

static void colsum_add(float *dbias, const float *dout, int N, int OC, zo_stream_t stream) {
  unsigned col_blocks = zo_ceil_div((size_t)OC, ZO_WARP);
  /* Enough blocks to cover the SMs twice, each with at least COLSUM_MIN_ROWS rows. */
  unsigned want = 2u * (unsigned)zo_cuda.prop.multiProcessorCount;
  unsigned chunks = want > col_blocks ? want / col_blocks : 1u;
  unsigned max_chunks = zo_ceil_div((size_t)N, COLSUM_MIN_ROWS);
  if (chunks > max_chunks) chunks = max_chunks;
  if (chunks < 1) chunks = 1;
  int rows_per_chunk = (int)zo_ceil_div((size_t)N, chunks);
  chunks = zo_ceil_div((size_t)N, (size_t)rows_per_chunk);
  dim3 grid(col_blocks, chunks), block(ZO_WARP, COLSUM_ROWS);
  colsum_add_kernel<<<grid, block, 0, zo_cuda_stream(stream)>>>(dbias, dout, N, OC, rows_per_chunk,
                                                                chunks > 1);
  ZO_CUDA_CHECK_LAUNCH();
}

/* ---- the ops ----------------------------------------------------------------------- */

extern "C" void zo_cuda_matmul_forward(float *out, const float *inp, const float *weight,
                                       const float *bias, int N, int C, int OC,
                                       zo_stream_t stream) {
  if (N == 0 || OC == 0) return;
  struct zo_gemm g;
  memset(&g, 0, sizeof g);
  g.trans_a = true;
  g.m = OC;
  g.n = N;
  g.k = C;
  g.a = weight;
  g.lda = C;
  g.b = inp;
  g.ldb = C;
  g.d = out;
  g.ldd = OC;
  g.batch = 1;
  g.alpha = 1.0f;
  g.beta = 0.0f;
  g.bias = bias;
  zo_cuda_gemm(&g, stream);
}

extern "C" void zo_cuda_matmul_backward(float *dinp, float *dweight, float *dbias,
                                        const float *dout, const float *inp, const float *weight,
                                        int N, int C, int OC, zo_stream_t stream) {
  if (N == 0 || OC == 0 || C == 0) return; /* nothing to add; an empty dinp */
  struct zo_gemm g;
  if (dinp) {
    memset(&g, 0, sizeof g);
    g.m = C;
    g.n = N;
    g.k = OC;
    g.a = weight;
    g.lda = C;
    g.b = dout;
    g.ldb = OC;
    g.d = dinp;
    g.ldd = C;
    g.batch = 1;
    g.alpha = 1.0f;
    g.beta = 0.0f;
    zo_cuda_gemm(&g, stream);
  }
  memset(&g, 0, sizeof g);
  g.trans_b = true;
  g.m = C;
  g.n = OC;
  g.k = N;
  g.a = inp;
  g.lda = C;
  g.b = dout;
  g.ldb = OC;
  g.d = dweight;
  g.ldd = C;
  g.batch = 1;
  g.alpha = 1.0f;
  g.beta = 1.0f;
  zo_cuda_gemm(&g, stream);
  if (dbias) colsum_add(dbias, dout, N, OC, stream);
}
