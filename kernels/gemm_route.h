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

/* Asks (or looks up in a cache) whether cuBLASLt has an algorithm for the
 * GEMM with or without the bias epilogue. */
typedef bool (*zo_gemm_query_fn)(void *ctx, bool bias_epilogue);

/* The route of a GEMM with (has_bias) or without a bias: cuBLASLt with the
 * epilogue when it has an algorithm; with a bias and none for the epilogue,
 * cuBLASLt without it when it has one; else the tiled kernel. force_tiled
 * (ZO_CUDA_GEMM=fallback) takes the tiled kernel without asking. */
enum zo_gemm_route zo_gemm_route_select(bool has_bias, bool force_tiled, zo_gemm_query_fn query, void *ctx);

/* "cublaslt", "cublaslt + bias kernel", "tiled". */
const char *zo_gemm_route_name(enum zo_gemm_route r);

#ifdef __cplusplus
}
#endif
#endif /* ZO_GEMM_ROUTE_H */
