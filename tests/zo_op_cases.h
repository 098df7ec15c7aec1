/* The backend op cases both parity runners iterate: test-kernels-cpu-ops
 * (the CPU backend in F32 against float64 references, tests/zo_ref64.h) and
 * test-gpu-backend-ops (the CUDA backend against the CPU one, in F32, BF16
 * and F16), and test-kernels-cpu-mixed (the CPU backend in BF16 and F16
 * against float64 references). One line a case: the shape letters the op takes, flags, a seed;
 * adding a line runs it in both. The tolerances stay with each runner's
 * check of each output (a float64 reference and a CPU reference call for
 * different ones). The finite-difference checks, on tiny shapes of their
 * own, and cases that test one backend's property (the GPU's chunking, the
 * CPU's thread count) are not here. Header-only data; each runner seeds
 * zo_rng_seed(seed) before a case, so a case's inputs do not depend on the
 * cases before it. */
#ifndef ZO_OP_CASES_H
#define ZO_OP_CASES_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "zo_test.h"

enum {
  ZO_OPC_BIAS = 1 << 0,        /* matmul: a bias (forward), dbias (backward); else NULL */
  ZO_OPC_DINP = 1 << 1,        /* matmul backward: dinp; else NULL */
  ZO_OPC_HALF_ONLY = 1 << 2,   /* only the GPU runner's BF16 and F16 runs (too large for float64 or F32 references) */
  ZO_OPC_NULL_STREAM = 1 << 3, /* the GPU runner's ops on the NULL stream, not a created one */
};

struct zo_op_case {
  int N, C, OC;          /* rows, channels, output channels (norms, matmul) */
  int B, T, NH, NKV, hs; /* batch, time, query heads, kv heads, head size (attention, rope) */
  int V, Vp, maxT;       /* vocabulary, padded logit row, rows of wpe (encoder, crossentropy) */
  int I;                 /* swiglu: out's row width (inp's rows are [gate | up], 2 * I) */
  int W;                 /* attention_window_forward: the sliding window */
  float eps;             /* rmsnorm */
  float shift;           /* crossentropy: added to every logit (the max subtraction must absorb it) */
  float p;               /* dropout probability */
  int M, ld, col0;       /* scaled_add: v's columns, y's row length, y's first column */
  float scale;           /* scaled_add: s */
  unsigned flags;        /* ZO_OPC_* */
  uint64_t seed;
};

/* ---- layernorm, rmsnorm ------------------------------------------------------ */

/* The GPU shapes' B*T rows of C (128 x 96, 111 x 72 on the NULL stream), rows
 * many warp-widths long, and (backward) many row chunks: the atomics path. */
static const struct zo_op_case zo_layernorm_forward_cases[] = {
    {.N = 13, .C = 150, .seed = 4},
    {.N = 11, .C = 200, .seed = 202},
    {.N = 128, .C = 96, .seed = 3},
    {.N = 5, .C = 1000, .seed = 3},
    {.N = 111, .C = 72, .flags = ZO_OPC_NULL_STREAM, .seed = 3},
    {.N = 5, .C = 1000, .flags = ZO_OPC_NULL_STREAM, .seed = 3},
};

static const struct zo_op_case zo_layernorm_backward_cases[] = {
    {.N = 13, .C = 150, .seed = 5},
    {.N = 11, .C = 200, .seed = 202},
    {.N = 128, .C = 96, .seed = 4},
    {.N = 300, .C = 1000, .seed = 4},
    {.N = 111, .C = 72, .flags = ZO_OPC_NULL_STREAM, .seed = 4},
    {.N = 300, .C = 1000, .flags = ZO_OPC_NULL_STREAM, .seed = 4},
};

/* C over two column blocks with a partial last one, tiny rows, one long
 * row, odd rows many warp-widths long, many rows (chunks of partials). */
static const struct zo_op_case zo_rmsnorm_forward_cases[] = {
    {.N = 13, .C = 151, .eps = 1e-5f, .seed = 40},
    {.N = 5, .C = 3, .eps = 1e-6f, .seed = 40},
    {.N = 1, .C = 1000, .eps = 1e-5f, .seed = 40},
    {.N = 11, .C = 201, .eps = 1e-6f, .seed = 208},
    {.N = 128, .C = 96, .eps = 1e-5f, .seed = 16},
    {.N = 5, .C = 1001, .eps = 1e-5f, .seed = 16},
    {.N = 111, .C = 72, .eps = 1e-5f, .flags = ZO_OPC_NULL_STREAM, .seed = 16},
    {.N = 5, .C = 1001, .eps = 1e-5f, .flags = ZO_OPC_NULL_STREAM, .seed = 16},
};

static const struct zo_op_case zo_rmsnorm_backward_cases[] = {
    {.N = 13, .C = 151, .eps = 1e-5f, .seed = 41},
    {.N = 300, .C = 70, .eps = 1e-6f, .seed = 41},
    {.N = 11, .C = 201, .eps = 1e-6f, .seed = 208},
    {.N = 128, .C = 96, .eps = 1e-5f, .seed = 17},
    {.N = 300, .C = 1000, .eps = 1e-5f, .seed = 17},
    {.N = 111, .C = 72, .eps = 1e-5f, .flags = ZO_OPC_NULL_STREAM, .seed = 17},
    {.N = 300, .C = 1000, .eps = 1e-5f, .flags = ZO_OPC_NULL_STREAM, .seed = 17},
};

/* ---- matmul ------------------------------------------------------------------ */

/* The GPU shapes: GPT-2-like (B*T = 128 rows, C = 96, V = Vp = 256) and
 * awkward (111 rows, C = 72, V = 101, Vp = 128): qkv, MLP projection, the
 * head without a bias, odd OC (unaligned rows of out). */
static const struct zo_op_case zo_matmul_forward_cases[] = {
    {.N = 13, .C = 37, .OC = 150, .flags = ZO_OPC_BIAS, .seed = 7},
    {.N = 13, .C = 37, .OC = 150, .seed = 7},
    {.N = 1, .C = 5, .OC = 3, .flags = ZO_OPC_BIAS, .seed = 7},
    {.N = 5, .C = 7, .OC = 3, .flags = ZO_OPC_BIAS, .seed = 203},
    {.N = 1, .C = 64, .OC = 33, .seed = 203},
    {.N = 300, .C = 530, .OC = 270, .flags = ZO_OPC_BIAS, .seed = 203},
    {.N = 257, .C = 40, .OC = 513, .seed = 203},
    {.N = 128, .C = 96, .OC = 288, .flags = ZO_OPC_BIAS, .seed = 5},
    {.N = 128, .C = 384, .OC = 96, .flags = ZO_OPC_BIAS, .seed = 5},
    {.N = 128, .C = 96, .OC = 256, .seed = 5},
    {.N = 128, .C = 96, .OC = 256, .flags = ZO_OPC_BIAS, .seed = 5},
    {.N = 111, .C = 72, .OC = 216, .flags = ZO_OPC_BIAS | ZO_OPC_NULL_STREAM, .seed = 5},
    {.N = 111, .C = 288, .OC = 72, .flags = ZO_OPC_BIAS | ZO_OPC_NULL_STREAM, .seed = 5},
    {.N = 111, .C = 72, .OC = 128, .flags = ZO_OPC_NULL_STREAM, .seed = 5},
    {.N = 111, .C = 72, .OC = 101, .flags = ZO_OPC_BIAS | ZO_OPC_NULL_STREAM, .seed = 5},
    /* Where cuBLASLt may have no algorithm (kernels/cuda/gemm.cu falls back to
     * cuBLASLt + a bias kernel, or the tiled kernel): N = 1 (sampling's first
     * token) and M = OC = 1 with the bias epilogue; odd C and OC, so that
     * bf16/fp16 rows of inp and out are only 2-byte aligned. */
    {.N = 1, .C = 33, .OC = 77, .flags = ZO_OPC_BIAS, .seed = 31},
    {.N = 7, .C = 33, .OC = 1, .flags = ZO_OPC_BIAS, .seed = 31},
    {.N = 1, .C = 33, .OC = 1, .flags = ZO_OPC_BIAS, .seed = 31},
    {.N = 9, .C = 129, .OC = 65, .flags = ZO_OPC_BIAS, .seed = 31},
    {.N = 9, .C = 129, .OC = 65, .seed = 31},
};

/* dweight always (+=); dinp and dbias where flagged. 4096 rows: dbias over
 * many row chunks. */
#define ZO_OPC_DINP_DBIAS (ZO_OPC_DINP | ZO_OPC_BIAS)
static const struct zo_op_case zo_matmul_backward_cases[] = {
    {.N = 13, .C = 37, .OC = 150, .flags = ZO_OPC_DINP_DBIAS, .seed = 8},
    {.N = 13, .C = 37, .OC = 150, .seed = 8},
    {.N = 1, .C = 5, .OC = 3, .flags = ZO_OPC_DINP_DBIAS, .seed = 8},
    {.N = 5, .C = 7, .OC = 3, .flags = ZO_OPC_DINP_DBIAS, .seed = 203},
    {.N = 1, .C = 64, .OC = 33, .flags = ZO_OPC_DINP_DBIAS, .seed = 203},
    {.N = 300, .C = 530, .OC = 270, .flags = ZO_OPC_DINP_DBIAS, .seed = 203},
    {.N = 257, .C = 40, .OC = 513, .flags = ZO_OPC_BIAS, .seed = 203},
    {.N = 128, .C = 96, .OC = 288, .flags = ZO_OPC_DINP_DBIAS, .seed = 6},
    {.N = 128, .C = 384, .OC = 96, .flags = ZO_OPC_DINP_DBIAS, .seed = 6},
    {.N = 128, .C = 96, .OC = 256, .flags = ZO_OPC_DINP_DBIAS, .seed = 6},
    {.N = 128, .C = 96, .OC = 256, .flags = ZO_OPC_DINP, .seed = 6},
    {.N = 128, .C = 96, .OC = 384, .flags = ZO_OPC_BIAS, .seed = 6},
    {.N = 4096, .C = 96, .OC = 288, .flags = ZO_OPC_DINP_DBIAS, .seed = 6},
    {.N = 111, .C = 72, .OC = 216, .flags = ZO_OPC_DINP_DBIAS | ZO_OPC_NULL_STREAM, .seed = 6},
    {.N = 111, .C = 288, .OC = 72, .flags = ZO_OPC_DINP_DBIAS | ZO_OPC_NULL_STREAM, .seed = 6},
    {.N = 111, .C = 72, .OC = 101, .flags = ZO_OPC_DINP_DBIAS | ZO_OPC_NULL_STREAM, .seed = 6},
    {.N = 111, .C = 72, .OC = 128, .flags = ZO_OPC_DINP | ZO_OPC_NULL_STREAM, .seed = 6},
    {.N = 111, .C = 72, .OC = 288, .flags = ZO_OPC_BIAS | ZO_OPC_NULL_STREAM, .seed = 6},
    {.N = 4096, .C = 72, .OC = 216, .flags = ZO_OPC_DINP_DBIAS | ZO_OPC_NULL_STREAM, .seed = 6},
    /* N = 1, OC = 1, odd leading dimensions (see the forward cases). */
    {.N = 1, .C = 33, .OC = 77, .flags = ZO_OPC_DINP_DBIAS, .seed = 31},
    {.N = 7, .C = 33, .OC = 1, .flags = ZO_OPC_DINP_DBIAS, .seed = 31},
    {.N = 9, .C = 129, .OC = 65, .flags = ZO_OPC_DINP_DBIAS, .seed = 31},
};

/* ---- attention --------------------------------------------------------------- */

/* Forward and backward. Multi-head (NKV == NH) as GPT-2 calls it, T across
 * several of the CPU's 64-row blocks (the last partial), odd head sizes,
 * grouped-query heads with groups of 3 and 4 and one kv head for all
 * (multi-query), B > NH (the GPU's other split of (b, h)), and, BF16/F16
 * only, long sequences whose fp32 scores the CUDA backend computes in chunks
 * of its workspace (heads, query rows, kv heads, key rows). */
static const struct zo_op_case zo_attention_cases[] = {
    {.B = 2, .T = 7, .NH = 3, .NKV = 3, .hs = 8, .seed = 10},
    {.B = 1, .T = 150, .NH = 2, .NKV = 2, .hs = 16, .seed = 10},
    {.B = 1, .T = 1, .NH = 2, .NKV = 2, .hs = 4, .seed = 10},
    {.B = 2, .T = 67, .NH = 6, .NKV = 6, .hs = 7, .seed = 10},
    {.B = 2, .T = 70, .NH = 6, .NKV = 2, .hs = 5, .seed = 10},
    {.B = 1, .T = 130, .NH = 4, .NKV = 1, .hs = 8, .seed = 10},
    {.B = 3, .T = 65, .NH = 6, .NKV = 1, .hs = 3, .seed = 10},
    {.B = 2, .T = 70, .NH = 3, .NKV = 3, .hs = 8, .seed = 205},
    {.B = 2, .T = 70, .NH = 6, .NKV = 2, .hs = 8, .seed = 205},
    {.B = 1, .T = 67, .NH = 4, .NKV = 1, .hs = 6, .seed = 205},
    {.B = 2, .T = 64, .NH = 3, .NKV = 3, .hs = 32, .seed = 7},
    {.B = 3, .T = 37, .NH = 3, .NKV = 3, .hs = 24, .flags = ZO_OPC_NULL_STREAM, .seed = 7},
    {.B = 5, .T = 19, .NH = 2, .NKV = 2, .hs = 16, .seed = 77},
    {.B = 1, .T = 70, .NH = 6, .NKV = 2, .hs = 16, .seed = 120},
    {.B = 3, .T = 37, .NH = 6, .NKV = 2, .hs = 24, .flags = ZO_OPC_NULL_STREAM, .seed = 121},
    {.B = 2, .T = 64, .NH = 4, .NKV = 1, .hs = 32, .seed = 122},
    {.B = 5, .T = 19, .NH = 8, .NKV = 4, .hs = 8, .flags = ZO_OPC_NULL_STREAM, .seed = 123},
    {.B = 2, .T = 1024, .NH = 6, .NKV = 6, .hs = 8, .flags = ZO_OPC_HALF_ONLY, .seed = 99},
    {.B = 1, .T = 2100, .NH = 1, .NKV = 1, .hs = 16, .flags = ZO_OPC_HALF_ONLY, .seed = 100},
    {.B = 20, .T = 1024, .NH = 2, .NKV = 1, .hs = 128, .flags = ZO_OPC_HALF_ONLY, .seed = 101},
    {.B = 1, .T = 2100, .NH = 2, .NKV = 1, .hs = 1000, .flags = ZO_OPC_HALF_ONLY, .seed = 102},
};

/* Sliding-window attention (Mistral): windows of 1 (each query sees itself),
 * shorter than a CPU row block and longer, one past T - 1 (binds on the last
 * query only), across grouped-query heads and odd head sizes; BF16/F16 only,
 * a window inside the CUDA backend's chunked scores. */
static const struct zo_op_case zo_attention_window_cases[] = {
    {.B = 2, .T = 7, .NH = 3, .NKV = 3, .hs = 8, .W = 3, .seed = 10},
    {.B = 2, .T = 9, .NH = 2, .NKV = 2, .hs = 4, .W = 1, .seed = 11},
    {.B = 2, .T = 70, .NH = 6, .NKV = 2, .hs = 5, .W = 17, .seed = 12},
    {.B = 1, .T = 150, .NH = 4, .NKV = 1, .hs = 8, .W = 100, .seed = 13},
    {.B = 3, .T = 37, .NH = 6, .NKV = 2, .hs = 24, .W = 36, .flags = ZO_OPC_NULL_STREAM, .seed = 14},
    {.B = 1, .T = 2100, .NH = 1, .NKV = 1, .hs = 16, .W = 700, .flags = ZO_OPC_HALF_ONLY, .seed = 15},
};

/* ---- rope -------------------------------------------------------------------- */

/* Forward and backward in place on qkv. GQA and MHA, head sizes 2 and 6
 * (h2 odd), rows wider than a SIMD vector, T across 64-row blocks. */
static const struct zo_op_case zo_rope_cases[] = {
    {.B = 2, .T = 7, .NH = 6, .NKV = 2, .hs = 8, .seed = 43},
    {.B = 1, .T = 70, .NH = 4, .NKV = 1, .hs = 6, .seed = 43},
    {.B = 3, .T = 5, .NH = 3, .NKV = 3, .hs = 2, .seed = 43},
    {.B = 1, .T = 3, .NH = 2, .NKV = 1, .hs = 130, .seed = 43},
    {.B = 2, .T = 67, .NH = 6, .NKV = 2, .hs = 10, .seed = 209},
    {.B = 2, .T = 64, .NH = 6, .NKV = 2, .hs = 16, .seed = 130},
    {.B = 3, .T = 37, .NH = 4, .NKV = 1, .hs = 6, .flags = ZO_OPC_NULL_STREAM, .seed = 131},
    {.B = 1, .T = 19, .NH = 3, .NKV = 3, .hs = 130, .seed = 132},
};

/* ---- encoder ----------------------------------------------------------------- */

/* Forward, then again with wpe NULL (Llama: out is the token's row, bit for
 * bit). Tiny vocabularies, odd C, the GPU shapes' vocabularies (256; 101). */
static const struct zo_op_case zo_encoder_forward_cases[] = {
    {.B = 2, .T = 7, .C = 24, .V = 13, .maxT = 9, .seed = 1},
    {.B = 2, .T = 7, .C = 37, .V = 13, .maxT = 7, .seed = 47},
    {.B = 2, .T = 9, .C = 40, .V = 7, .maxT = 11, .seed = 201},
    {.B = 2, .T = 64, .C = 96, .V = 256, .maxT = 64, .seed = 1},
    {.B = 3, .T = 37, .C = 72, .V = 101, .maxT = 40, .flags = ZO_OPC_NULL_STREAM, .seed = 1},
};

/* dwte and dwpe += (pre-filled), then dwte alone with dwpe NULL. V well
 * below B*T: tokens repeat across positions and batch rows. */
static const struct zo_op_case zo_encoder_backward_cases[] = {
    {.B = 3, .T = 7, .C = 37, .V = 5, .maxT = 9, .seed = 2},
    {.B = 2, .T = 9, .C = 40, .V = 7, .maxT = 11, .seed = 201},
    {.B = 2, .T = 64, .C = 96, .V = 7, .maxT = 64, .seed = 2},
    {.B = 3, .T = 37, .C = 72, .V = 7, .maxT = 40, .flags = ZO_OPC_NULL_STREAM, .seed = 2},
};

/* ---- elementwise: gelu, residual, swiglu ------------------------------------- */

/* gelu forward and backward (dinp also aliasing dout); residual forward
 * (out also aliasing either input) and backward (both +=). N odd, past the
 * CPU's parallel chunks (70001), not a multiple of the GPU's vector width. */
static const struct zo_op_case zo_gelu_cases[] = {
    {.N = 1001, .seed = 13},
    {.N = 70001, .seed = 206},
    {.N = 49155, .seed = 9},
    {.N = 31971, .flags = ZO_OPC_NULL_STREAM, .seed = 9},
};

static const struct zo_op_case zo_residual_cases[] = {
    {.N = 1001, .seed = 16},
    {.N = 70001, .seed = 206},
    {.N = 12289, .seed = 10},
    {.N = 7993, .flags = ZO_OPC_NULL_STREAM, .seed = 10},
};

/* scaled_add forward (y[:, col0:col0+M] += s * v) and backward (dv = s *
 * dy[:, col0:col0+M]): a column range inside the row, at its start, at its
 * end and the whole row; M odd and not a multiple of any vector width; q, k
 * and v of a fused qkv output (GQA: v narrower than q), gate and up; N * M
 * past the CPU's parallel threshold (16384) and the GPU's grid. */
static const struct zo_op_case zo_scaled_add_cases[] = {
    {.N = 13, .M = 37, .ld = 150, .col0 = 50, .scale = 0.5f, .seed = 51},
    {.N = 7, .M = 33, .ld = 33, .col0 = 0, .scale = 2.0f, .seed = 52},
    {.N = 1, .M = 5, .ld = 17, .col0 = 12, .scale = -1.25f, .seed = 53},
    {.N = 5, .M = 1, .ld = 3, .col0 = 1, .scale = 0.3f, .seed = 54},
    {.N = 300, .M = 96, .ld = 160, .col0 = 0, .scale = 0.125f, .seed = 55},
    {.N = 300, .M = 32, .ld = 160, .col0 = 128, .scale = 0.125f, .seed = 55},
    {.N = 9, .M = 1001, .ld = 2002, .col0 = 1001, .scale = 1.5f, .seed = 56},
    {.N = 2000, .M = 35, .ld = 107, .col0 = 36, .scale = 0.0625f, .seed = 57},
    {.N = 111, .M = 72, .ld = 216, .col0 = 72, .scale = 4.0f, .flags = ZO_OPC_NULL_STREAM, .seed = 58},
};

/* dropout (the same op forward and backward): N odd and past the CPU's
 * 16384-element chunks, p from 0 (identity) to 0.9; the seed doubles as the
 * dropout seed and site. */
static const struct zo_op_case zo_dropout_cases[] = {
    {.N = 1001, .p = 0.1f, .seed = 301},
    {.N = 70001, .p = 0.5f, .seed = 302},
    {.N = 49155, .p = 0.0f, .seed = 303},
    {.N = 32771, .p = 0.9f, .seed = 304},
    {.N = 7993, .p = 0.25f, .flags = ZO_OPC_NULL_STREAM, .seed = 305},
};

/* Forward and backward on N rows of [gate | up]: odd I, a row longer than
 * the CPU's 16384-column task, one column, the GPU shapes' 4C + 3. */
static const struct zo_op_case zo_swiglu_cases[] = {
    {.N = 13, .I = 37, .seed = 45},
    {.N = 3, .I = 20001, .seed = 45},
    {.N = 5, .I = 1, .seed = 45},
    {.N = 9, .I = 1001, .seed = 210},
    {.N = 128, .I = 387, .seed = 18},
    {.N = 111, .I = 291, .flags = ZO_OPC_NULL_STREAM, .seed = 18},
};

/* ---- crossentropy ------------------------------------------------------------- */

/* N rows of V real and Vp - V padded logits (padding NaN: reading it poisons
 * the row), targets with -1 (masked) and V - 1; dlogits separate, NULL, and
 * aliasing logits. Logits shifted by +-300 (exp must not overflow), the GPU
 * shapes, GPT-2's vocabulary. */
static const struct zo_op_case zo_crossentropy_cases[] = {
    {.N = 13, .V = 101, .Vp = 128, .seed = 19},
    {.N = 13, .V = 101, .Vp = 128, .shift = 300.0f, .seed = 19},
    {.N = 13, .V = 101, .Vp = 128, .shift = -300.0f, .seed = 19},
    {.N = 9, .V = 1000, .Vp = 1024, .seed = 207},
    {.N = 128, .V = 256, .Vp = 256, .seed = 11},
    {.N = 111, .V = 101, .Vp = 128, .flags = ZO_OPC_NULL_STREAM, .seed = 11},
    {.N = 6, .V = 50257, .Vp = 50304, .seed = 111},
};

/* Rows with -inf logits (fp16 overflow), the same on every backend
 * (zo/backend.h): ZO_CE_INF_ROWS rows of V = ZO_CE_INF_V real columns (Vp =
 * ZO_CE_INF_VP, padding NaN) and their targets. Row 0: all -inf (loss and
 * gradient NaN); 1: the first 300 columns -inf (whole thread ranges of a
 * block-per-row kernel, and its first elements), the rest finite; 2: every
 * other column -inf; 3: finite but the target column -inf (loss +inf); 4:
 * all -inf with target -1 (loss 0, zero gradient); 5: finite. */
#define ZO_CE_INF_ROWS 6
#define ZO_CE_INF_V 700
#define ZO_CE_INF_VP 704
static inline void zo_op_ce_inf_rows(float *logits, int32_t *targets) {
  const int V = ZO_CE_INF_V, Vp = ZO_CE_INF_VP;
  for (int n = 0; n < ZO_CE_INF_ROWS; n++)
    for (int i = 0; i < Vp; i++) {
      const bool inf = n == 0 || n == 4 || (n == 1 && i < 300) || (n == 2 && i % 2 == 0) || (n == 3 && i == 7);
      logits[(size_t)n * Vp + i] = i >= V ? NAN : inf ? -INFINITY : zo_rng_float(-4.0f, 4.0f);
    }
  static const int32_t t[ZO_CE_INF_ROWS] = {3, 400, 1, 7, -1, 699};
  for (int n = 0; n < ZO_CE_INF_ROWS; n++) targets[n] = t[n];
}

/* n token ids (or targets) uniform in [0, V), kept in b. */
static inline int32_t *zo_op_case_tokens(struct zo_test_bufs *b, size_t n, int V) {
  int32_t *t = zo_test_bufs_alloc(b, n * sizeof(int32_t));
  for (size_t i = 0; i < n; i++) t[i] = (int32_t)(zo_rng_u32() % (uint32_t)V);
  return t;
}

/* Writes the case's nonzero shape letters and flags into buf[0, cap). */
static inline const char *zo_op_case_describe(const struct zo_op_case *c, char *buf, size_t cap) {
  const struct {
    const char *name;
    int v;
  } f[] = {{"N", c->N}, {"C", c->C}, {"OC", c->OC}, {"B", c->B}, {"T", c->T}, {"NH", c->NH}, {"NKV", c->NKV},
           {"hs", c->hs}, {"V", c->V}, {"Vp", c->Vp}, {"maxT", c->maxT}, {"I", c->I}, {"M", c->M},
           {"ld", c->ld}, {"col0", c->col0}};
  size_t len = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < ZO_ARRAY_LEN(f) && len < cap; i++)
    if (f[i].v) len += (size_t)snprintf(buf + len, cap - len, "%s%s=%d", len ? " " : "", f[i].name, f[i].v);
  if (len < cap && (c->flags & ZO_OPC_BIAS)) len += (size_t)snprintf(buf + len, cap - len, " bias");
  if (len < cap && (c->flags & ZO_OPC_DINP)) len += (size_t)snprintf(buf + len, cap - len, " dinp");
  if (len < cap && c->eps != 0.0f) len += (size_t)snprintf(buf + len, cap - len, " eps=%g", (double)c->eps);
  if (len < cap && c->scale != 0.0f) len += (size_t)snprintf(buf + len, cap - len, " s=%g", (double)c->scale);
  if (len < cap && c->shift != 0.0f) len += (size_t)snprintf(buf + len, cap - len, " shift=%g", (double)c->shift);
  if (len < cap) snprintf(buf + len, cap - len, ", seed %llu", (unsigned long long)c->seed);
  return buf;
}

#endif /* ZO_OP_CASES_H */
