/* The CUDA GEMM's path choice (see gemm_route.h): plain C, no CUDA. */
#include "gemm_route.h"

bool zo_gemm_answer_has_algo(int status, int n_results) {
  return status == ZO_GEMM_STATUS_SUCCESS && n_results > 0;
}

enum zo_gemm_route zo_gemm_route_select(bool has_bias, bool force_tiled, zo_gemm_query_fn query, void *ctx) {
  if (force_tiled) return ZO_GEMM_ROUTE_TILED;
  if (query(ctx, has_bias)) return ZO_GEMM_ROUTE_LT;
  if (has_bias && query(ctx, false)) return ZO_GEMM_ROUTE_LT_BIAS_KERNEL;
  return ZO_GEMM_ROUTE_TILED;
}

const char *zo_gemm_route_name(enum zo_gemm_route r) {
  switch (r) {
  case ZO_GEMM_ROUTE_LT: return "cublaslt";
  case ZO_GEMM_ROUTE_LT_BIAS_KERNEL: return "cublaslt + bias kernel";
  case ZO_GEMM_ROUTE_TILED: return "tiled";
  }
  return "?";
}
