/* The strided-batched cuBLASLt GEMM that matmul and attention share, with a
 * per-shape algorithm cache. Not an op: no zo_backend entry. */
#ifndef ZO_CUDA_GEMM_CUH
#define ZO_CUDA_GEMM_CUH

#include "common.cuh"

/* One column-major GEMM, batched with fixed strides:
 *   D[i] = alpha * op(A[i]) @ op(B[i]) + beta * D[i] (+ bias broadcast over columns)
 * op(A) is (m, k), op(B) is (k, n), D is (m, n); X[i] = x + i * stride_x.
 * Compute is CUBLAS_COMPUTE_32F with fp32 alpha and beta: fp32 operands are
 * multiplied in fp32 (no TF32), bf16/fp16 ones on tensor cores with fp32
 * accumulation; D (and C, which is D) is rounded once when stored. */
struct zo_gemm {
  bool trans_a, trans_b;
  int m, n, k;
  cudaDataType_t ab_type; /* A and B: CUDA_R_32F, CUDA_R_16BF or CUDA_R_16F */
  cudaDataType_t d_type;  /* D: ab_type, or CUDA_R_32F */
  const void *a;
  int lda;
  long long stride_a; /* elements between batches */
  const void *b;
  int ldb;
  long long stride_b;
  void *d;
  int ldd;
  long long stride_d;
  int batch; /* >= 1 */
  float alpha, beta;
  /* (m) of d_type, or NULL: CUBLASLT_EPILOGUE_BIAS, added in fp32 before D
   * is rounded; batch must be 1 */
  const void *bias;
  /* bytes of the stream's workspace, from its start, cuBLASLt may use;
   * 0: all ZO_CUDA_WORKSPACE_BYTES */
  size_t workspace_bytes;
};

/* Queues the GEMM on stream. The path (kernels/gemm_route.h): cuBLASLt with
 * the algorithm its heuristic picks for this shape, these types and pointer
 * alignments (cached per shape, misses included), the bias in its epilogue;
 * when it has none for the epilogue, cuBLASLt without it and the bias by a
 * separate kernel (written first and accumulated onto when beta is 0, so D
 * is still rounded once); when it has none at all, a tiled kernel with fp32
 * accumulation that takes every legal shape. Never aborts on a heuristic
 * answer; aborts only when a CUDA or cuBLASLt call fails. */
void zo_cuda_gemm(const struct zo_gemm *g, zo_stream_t stream);

#endif /* ZO_CUDA_GEMM_CUH */
