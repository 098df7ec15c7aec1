/* bf16 GEMMs through oneDNN's matmul primitive (AMX / AVX512_BF16 kernels),
 * chosen once per process from the CPU and ZO_CPU_GEMM; see gemm_onednn.c.
 * Not a public header. */
#ifndef ZO_KERNELS_CPU_GEMM_ONEDNN_H
#define ZO_KERNELS_CPU_GEMM_ONEDNN_H

#include <stdbool.h>

/* True when bf16 GEMMs go to oneDNN (the CPU has AVX512_BF16 or AMX-BF16,
 * oneDNN may use it, and ZO_CPU_GEMM is not "fallback"); false: the widening
 * fp32 tiles of ops_matmul.c. Aborts naming ZO_CPU_GEMM's value and the valid
 * ones when it is not one of them. */
bool zo_cpu_gemm_onednn_on(void);

/* Row-major C (M, N) = op(A) (M, K) @ op(B) (K, N) over bf16 A and B, fp32
 * accumulation over the whole of K: C is bf16 (overwritten; plus the bf16
 * bias (N) when not NULL, before the one rounding) or, with accumulate_f32,
 * fp32 and added to. Threads split fixed output tiles and run each tile
 * single-threaded, so the bits do not depend on the thread count. */
void zo_cpu_gemm_onednn_bf16(bool ta, bool tb, int M, int N, int K, const void *A, int lda,
                             const void *B, int ldb, void *C, int ldc, bool accumulate_f32,
                             const void *bias);

#endif /* ZO_KERNELS_CPU_GEMM_ONEDNN_H */
