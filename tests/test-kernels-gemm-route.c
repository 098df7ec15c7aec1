/* The CUDA GEMM's path choice (kernels/gemm_route.c) with mocked cuBLASLt
 * heuristic answers, on any machine: every answer other than SUCCESS with an
 * algorithm (NOT_SUPPORTED, INVALID_VALUE, INTERNAL_ERROR, SUCCESS with zero
 * results) is "no algorithm", never an abort; a bias GEMM without an
 * epilogue algorithm takes cuBLASLt plus the bias kernel when cuBLASLt has a
 * plain algorithm, else the tiled kernel; a GEMM without a bias never asks
 * for the epilogue; a bias pointer aligned to less than 16 bytes never asks
 * for the epilogue either (it ignores the pointer's alignment) and takes the
 * bias kernel; ZO_CUDA_GEMM=fallback asks nothing. */
#include <stdio.h>

#include "../kernels/gemm_route.h"
#include "zo_test.h"

/* cuBLAS status values (cublas_api.h), spelled out: this test has no CUDA. */
enum { ST_SUCCESS = 0, ST_INVALID_VALUE = 7, ST_INTERNAL_ERROR = 14, ST_NOT_SUPPORTED = 15 };

struct answer {
  int status, n_results;
};

/* The heuristic's answers with ([1]) and without ([0]) the bias epilogue,
 * and which were asked. */
struct mock {
  struct answer ans[2];
  int asked[2];
};

static bool mock_query(void *ctx, bool bias_epilogue) {
  struct mock *m = ctx;
  m->asked[bias_epilogue]++;
  return zo_gemm_answer_has_algo(m->ans[bias_epilogue].status, m->ans[bias_epilogue].n_results);
}

static enum zo_gemm_route route_aligned(bool bias, unsigned bias_align, struct answer with, struct answer without,
                                        struct mock *m) {
  *m = (struct mock){.ans = {without, with}};
  return zo_gemm_route_select(bias, bias_align, false, mock_query, m);
}

static enum zo_gemm_route route(bool bias, struct answer with, struct answer without, struct mock *m) {
  return route_aligned(bias, bias ? 256u : 0u, with, without, m);
}

static int test_answers(void) {
  ZO_REQUIRE(zo_gemm_answer_has_algo(ST_SUCCESS, 1));
  ZO_REQUIRE(zo_gemm_answer_has_algo(ST_SUCCESS, 3));
  ZO_REQUIRE(!zo_gemm_answer_has_algo(ST_SUCCESS, 0));
  ZO_REQUIRE(!zo_gemm_answer_has_algo(ST_NOT_SUPPORTED, 0));
  ZO_REQUIRE(!zo_gemm_answer_has_algo(ST_NOT_SUPPORTED, 1)); /* a stale count with a failure */
  ZO_REQUIRE(!zo_gemm_answer_has_algo(ST_INVALID_VALUE, 0));
  ZO_REQUIRE(!zo_gemm_answer_has_algo(ST_INTERNAL_ERROR, 0));
  return 0;
}

static int test_bias_routes(void) {
  const struct answer ok = {ST_SUCCESS, 1}, none = {ST_SUCCESS, 0}, unsup = {ST_NOT_SUPPORTED, 0},
                      invalid = {ST_INVALID_VALUE, 0}, internal = {ST_INTERNAL_ERROR, 0};
  struct mock m;
  ZO_REQUIRE(route(true, ok, ok, &m) == ZO_GEMM_ROUTE_LT && m.asked[1] == 1 && m.asked[0] == 0);
  /* N = 1 or M = 1 with the bias epilogue: no algorithm for it. */
  ZO_REQUIRE(route(true, unsup, ok, &m) == ZO_GEMM_ROUTE_LT_BIAS_KERNEL && m.asked[1] == 1 && m.asked[0] == 1);
  ZO_REQUIRE(route(true, invalid, ok, &m) == ZO_GEMM_ROUTE_LT_BIAS_KERNEL);
  ZO_REQUIRE(route(true, none, ok, &m) == ZO_GEMM_ROUTE_LT_BIAS_KERNEL);
  ZO_REQUIRE(route(true, internal, ok, &m) == ZO_GEMM_ROUTE_LT_BIAS_KERNEL);
  /* Odd leading dimensions of 2-byte aligned views: nothing from cuBLASLt. */
  ZO_REQUIRE(route(true, invalid, invalid, &m) == ZO_GEMM_ROUTE_TILED && m.asked[0] == 1);
  ZO_REQUIRE(route(true, unsup, none, &m) == ZO_GEMM_ROUTE_TILED);
  ZO_REQUIRE(route(true, internal, internal, &m) == ZO_GEMM_ROUTE_TILED);
  return 0;
}

static int test_plain_routes(void) {
  const struct answer ok = {ST_SUCCESS, 1}, none = {ST_SUCCESS, 0}, invalid = {ST_INVALID_VALUE, 0};
  struct mock m;
  ZO_REQUIRE(route(false, invalid, ok, &m) == ZO_GEMM_ROUTE_LT && m.asked[1] == 0 && m.asked[0] == 1);
  ZO_REQUIRE(route(false, ok, none, &m) == ZO_GEMM_ROUTE_TILED && m.asked[1] == 0 && m.asked[0] == 1);
  ZO_REQUIRE(route(false, ok, invalid, &m) == ZO_GEMM_ROUTE_TILED && m.asked[0] == 1);
  return 0;
}

static int test_alignment(void) {
  ZO_REQUIRE(zo_gemm_alignment(0x1000, 0) == 256);
  ZO_REQUIRE(zo_gemm_alignment(0x1010, 0) == 16);
  ZO_REQUIRE(zo_gemm_alignment(0x1008, 0) == 8);
  ZO_REQUIRE(zo_gemm_alignment(0x1002, 0) == 2);
  ZO_REQUIRE(zo_gemm_alignment(0x1000, 12) == 4); /* a batch stride of 3 floats */
  ZO_REQUIRE(zo_gemm_alignment(0x1000, 512) == 256);
  return 0;
}

/* The epilogue ignores the bias pointer's alignment: below 16 bytes it is
 * not asked for even where the heuristic would answer yes for it. */
static int test_bias_alignment_routes(void) {
  const struct answer ok = {ST_SUCCESS, 1}, unsup = {ST_NOT_SUPPORTED, 0};
  const unsigned below[] = {2, 4, 8};
  struct mock m;
  for (int i = 0; i < 3; i++) {
    ZO_REQUIRE(route_aligned(true, below[i], ok, ok, &m) == ZO_GEMM_ROUTE_LT_BIAS_KERNEL);
    ZO_REQUIRE(m.asked[1] == 0 && m.asked[0] == 1);
    ZO_REQUIRE(route_aligned(true, below[i], ok, unsup, &m) == ZO_GEMM_ROUTE_TILED && m.asked[1] == 0);
  }
  /* 16 bytes and more: the epilogue as before. */
  ZO_REQUIRE(route_aligned(true, ZO_GEMM_BIAS_EPILOGUE_ALIGN, ok, ok, &m) == ZO_GEMM_ROUTE_LT && m.asked[1] == 1);
  ZO_REQUIRE(route_aligned(true, 64, ok, ok, &m) == ZO_GEMM_ROUTE_LT && m.asked[0] == 0);
  /* An fp32 bias at an offset of 6 elements in its buffer: 8-byte aligned. */
  ZO_REQUIRE(route_aligned(true, zo_gemm_alignment(0x7f0000001000 + 6 * 4, 0), ok, ok, &m) ==
             ZO_GEMM_ROUTE_LT_BIAS_KERNEL);
  return 0;
}

static int test_forced_fallback(void) {
  struct mock m = {.ans = {{ST_SUCCESS, 1}, {ST_SUCCESS, 1}}};
  ZO_REQUIRE(zo_gemm_route_select(true, 256, true, mock_query, &m) == ZO_GEMM_ROUTE_TILED);
  ZO_REQUIRE(zo_gemm_route_select(false, 0, true, mock_query, &m) == ZO_GEMM_ROUTE_TILED);
  ZO_REQUIRE(m.asked[0] == 0 && m.asked[1] == 0);
  printf("  routes: %s, %s, %s\n", zo_gemm_route_name(ZO_GEMM_ROUTE_LT),
         zo_gemm_route_name(ZO_GEMM_ROUTE_LT_BIAS_KERNEL), zo_gemm_route_name(ZO_GEMM_ROUTE_TILED));
  return 0;
}

int main(void) {
  static const struct zo_test tests[] = {
      ZO_TEST(answers),
      ZO_TEST(bias_routes),
      ZO_TEST(plain_routes),
      ZO_TEST(alignment),
      ZO_TEST(bias_alignment_routes),
      ZO_TEST(forced_fallback),
  };
  return ZO_TEST_MAIN(tests);
}
