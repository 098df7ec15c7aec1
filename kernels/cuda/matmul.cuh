/* Fully connected layer through cuBLASLt, and the strided-batched fp32 GEMM
 * that it and attention share. */
#ifndef ZO_CUDA_MATMUL_CUH
#define ZO_CUDA_MATMUL_CUH

#include "common.cuh"

/* One column-major GEMM, batched with fixed strides:
 *   D[i] = alpha * op(A[i]) @ op(B[i]) + beta * D[i] (+ bias broadcast over columns)
 * op(A) is (m, k), op(B) is (k, n), D is (m, n); X[i] = x + i * stride_x.
 * fp32 in, out and compute (CUBLAS_COMPUTE_32F, no TF32). */
struct zo_gemm {
  bool trans_a, trans_b;
  int m, n, k;
  const float *a;
  int lda;
  long long stride_a; /* elements between batches */
  const float *b;
  int ldb;
  long long stride_b;
  float *d;
  int ldd;
  long long stride_d;
  int batch; /* >= 1 */
  float alpha, beta;
  const float *bias; /* (m) or NULL: CUBLASLT_EPILOGUE_BIAS; batch must be 1 */
};

/* Queues the GEMM on stream with the algorithm cuBLASLt's heuristic picks for
 * this shape and these pointer alignments (cached per shape). Aborts when
 * cuBLASLt has no algorithm or fails. */
void zo_cuda_gemm(const struct zo_gemm *g, zo_stream_t stream);

extern "C" void zo_cuda_matmul_forward(float *out, const float *inp, const float *weight,
                                       const float *bias, int N, int C, int OC, zo_stream_t stream);
extern "C" void zo_cuda_matmul_backward(float *dinp, float *dweight, float *dbias,
                                        const float *dout, const float *inp, const float *weight,
                                        int N, int C, int OC, zo_stream_t stream);

#endif /* ZO_CUDA_MATMUL_CUH */
