/* Which path one CUDA GEMM takes (kernels/cuda/gemm.cu), as plain C so that
 * the choice is unit-tested on a machine without a GPU with mocked cuBLASLt
 * heuristic answers (tests/test-kernels-gemm-route.c).
 *
 * Every answer of cublasLtMatmulAlgoGetHeuristic other than SUCCESS with at
 * least one algorithm (NOT_SUPPORTED, INVALID_VALUE for an alignment or a
 * leading dimension it rejects, any other status, or SUCCESS with zero
 * results) means "no algorithm for this descriptor": the caller caches that
 * answer and takes the next path, down to a tiled kernel that is legal for
 * every shape, alignment and type. No answer aborts the process. */
#ifndef ZO_GEMM_ROUTE_H
#define ZO_GEMM_ROUTE_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CUBLAS_STATUS_SUCCESS (gemm.cu checks the value at compile time). */
#define ZO_GEMM_STATUS_SUCCESS 0

enum zo_gemm_route {
  ZO_GEMM_ROUTE_LT,           /* cuBLASLt, the bias (if any) in its epilogue */
  ZO_GEMM_ROUTE_LT_BIAS_KERNEL, /* cuBLASLt without an epilogue, the bias by a separate kernel */
  ZO_GEMM_ROUTE_TILED,        /* the tiled kernel (fp32 accumulation, the bias added before rounding) */
};

/* Whether one heuristic answer (its status, and the algorithms it returned)
 * gives an algorithm: SUCCESS and n_results > 0; everything else is "none". */
bool zo_gemm_answer_has_algo(int status, int n_results);

/* The bias epilogue reads its vector in 16-byte loads and takes no
 * alignment in the heuristic's preferences: a bias pointer aligned to less
 * (a view into a packed parameter, an arena offset) takes the bias kernel. */
#define ZO_GEMM_BIAS_EPILOGUE_ALIGN 16u

/* The alignment in bytes (a power of two, at most 256) that both the address
 * and every batch stride (stride_bytes; 0 when unbatched) keep. */
unsigned zo_gemm_alignment(uintptr_t addr, long long stride_bytes);

/* Asks (or looks up in a cache) whether cuBLASLt has an algorithm for the
 * GEMM with or without the bias epilogue. */
typedef bool (*zo_gemm_query_fn)(void *ctx, bool bias_epilogue);

/* The route of a GEMM with (has_bias) or without a bias: cuBLASLt with the
 * epilogue when it has an algorithm and the bias pointer's alignment
 * (bias_align, bytes; from zo_gemm_alignment) is at least
 * ZO_GEMM_BIAS_EPILOGUE_ALIGN (below it the epilogue is never asked for);
 * with a bias and no epilogue, cuBLASLt without it when it has an algorithm;
 * else the tiled kernel. force_tiled (ZO_CUDA_GEMM=fallback) takes the tiled
 * kernel without asking. */
enum zo_gemm_route zo_gemm_route_select(bool has_bias, unsigned bias_align, bool force_tiled,
                                        zo_gemm_query_fn query, void *ctx);

/* "cublaslt", "cublaslt + bias kernel", "tiled". */
const char *zo_gemm_route_name(enum zo_gemm_route r);

#ifdef __cplusplus
}
#endif
#endif /* ZO_GEMM_ROUTE_H */
