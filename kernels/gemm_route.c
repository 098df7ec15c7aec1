/* The CUDA GEMM's path choice (see gemm_route.h): plain C, no CUDA. */
#include "gemm_route.h"

bool zo_gemm_answer_has_algo(int status, int n_results) {
  return status == ZO_GEMM_STATUS_SUCCESS && n_results > 0;
}

unsigned zo_gemm_alignment(uintptr_t addr, long long stride_bytes) {
  uintptr_t bits = addr | (uintptr_t)stride_bytes | 256u;
  return (unsigned)(bits & (~bits + 1));
}

enum zo_gemm_route zo_gemm_route_select(bool has_bias, unsigned bias_align, bool force_tiled,
                                        zo_gemm_query_fn query, void *ctx) {
  if (force_tiled) return ZO_GEMM_ROUTE_TILED;
  if (!has_bias) return query(ctx, false) ? ZO_GEMM_ROUTE_LT : ZO_GEMM_ROUTE_TILED;
  if (bias_align >= ZO_GEMM_BIAS_EPILOGUE_ALIGN && query(ctx, true)) return ZO_GEMM_ROUTE_LT;
  if (query(ctx, false)) return ZO_GEMM_ROUTE_LT_BIAS_KERNEL;
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
