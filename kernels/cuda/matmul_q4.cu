/* GEMMs over a frozen 4-bit weight (QLoRA's NF4 / FP4 base), forward and
 * dx, no weight gradient. The stream's workspace is split: its first
 * Q4_GEMM_WS bytes stay cuBLASLt's, the rest holds one panel of the
 * dequantized weight (rows for the forward, columns for dx) in dt; per
 * panel a dequantization kernel writes it and the matmul's cuBLASLt GEMM
 * (gemm.cu, the same layouts as matmul.cu) reads it, stream order keeping
 * the next panel's kernel behind the last GEMM. Elements are dequantized
 * with explicit fp32 roundings (__fmul_rn, __fadd_rn: no FMA contraction),
 * the bits of zo_quant4_dequantize / zo_quant4_nested_dequantize on the
 * host. A panel splits the GEMM's output, never its reduction.
 * Compiled here; never run (this machine has no GPU). */
#include "matmul_q4.cuh"

#include "gemm.cuh"

#include <string.h>

#define Q4_GEMM_WS ((size_t)8 << 20) /* bytes of the workspace left to cuBLASLt */

struct q4_values {
  float v[16];
};

/* dst (rows, cols) row-major = the elements start + r C + c of w, in dt. */
template <typename scalar_t>
static __global__ void q4_dequant_kernel(scalar_t *dst, struct zo_quant4_weight w, struct q4_values values,
                                         size_t start, int rows, int cols) {
  const size_t n = (size_t)rows * cols;
  for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < n; j += (size_t)gridDim.x * blockDim.x) {
    const size_t i = start + (j / cols) * (size_t)w.C + j % cols, b = i / (size_t)w.blocksize;
    float scale;
    if (w.absmax) {
      scale = w.absmax[b];
    } else {
      scale = __fadd_rn(__fmul_rn(w.map[w.qabsmax[b]], w.absmax2[b / ZO_QUANT4_NESTED_BLOCK]), w.offset);
    }
    const uint8_t byte = w.packed[i / 2];
    zo_st(dst, j, __fmul_rn(values.v[i % 2 ? byte & 15 : byte >> 4], scale));
  }
}

template <typename scalar_t>
static void q4_dequant(void *dst, const struct zo_quant4_weight &w, size_t start, int rows, int cols,
                       zo_stream_t stream) {
  struct q4_values values;
  memcpy(values.v, zo_quant4_values(w.type), sizeof values.v);
  const int block = 256;
  q4_dequant_kernel<scalar_t><<<zo_cuda_grid_1d((size_t)rows * cols, block), block, 0, zo_cuda_stream(stream)>>>(
      (scalar_t *)dst, w, values, start, rows, cols);
  ZO_CUDA_CHECK_LAUNCH();
}

/* Rows or columns of a panel whose other side has `other` elements of esz
 * bytes: what the workspace holds, a multiple of 16 when more than 16. */
static int panel_width(int total, int other, size_t esz, const char *what) {
  const size_t fit = (ZO_CUDA_WORKSPACE_BYTES - Q4_GEMM_WS) / ((size_t)other * esz);
  if (fit == 0)
    zo_abort(__FILE__, __LINE__, "4-bit GEMM: one %s of %d elements (%zu bytes) exceeds the %zu-byte panel scratch",
             what, other, (size_t)other * esz, ZO_CUDA_WORKSPACE_BYTES - Q4_GEMM_WS);
  size_t p = fit < (size_t)total ? fit : (size_t)total;
  if (p > 16) p &= ~(size_t)15;
  return (int)p;
}

extern "C" void zo_cuda_matmul_q4_forward(void *out, const void *inp, struct zo_quant4_weight w,
                                          const void *bias, int N, enum zo_dtype dt, zo_stream_t stream) {
  zo_quant4_weight_check(&w);
  if (N == 0) return;
  const size_t esz = zo_dtype_size(dt);
  char *panel = (char *)zo_cuda_workspace(stream) + Q4_GEMM_WS;
  const int step = panel_width(w.OC, w.C, esz, "row");
  for (int r0 = 0; r0 < w.OC; r0 += step) {
    const int rows = w.OC - r0 < step ? w.OC - r0 : step;
    ZO_CUDA_DT_DISPATCH(dt, q4_dequant, panel, w, (size_t)r0 * w.C, rows, w.C, stream);
    struct zo_gemm g;
    memset(&g, 0, sizeof g);
    g.trans_a = true;
    g.m = rows;
    g.n = N;
    g.k = w.C;
    g.ab_type = g.d_type = zo_cuda_data_type(dt);
    g.a = panel;
    g.lda = w.C;
    g.b = inp;
    g.ldb = w.C;
    g.d = (char *)out + (size_t)r0 * esz;
    g.ldd = w.OC;
    g.batch = 1;
    g.alpha = 1.0f;
    g.bias = bias ? (const char *)bias + (size_t)r0 * esz : NULL;
    g.workspace_bytes = Q4_GEMM_WS;
    zo_cuda_gemm(&g, stream);
  }
}

extern "C" void zo_cuda_matmul_q4_backward_dx(void *dinp, const void *dout, struct zo_quant4_weight w, int N,
                                              enum zo_dtype dt, zo_stream_t stream) {
  zo_quant4_weight_check(&w);
  if (N == 0) return;
  const size_t esz = zo_dtype_size(dt);
  char *panel = (char *)zo_cuda_workspace(stream) + Q4_GEMM_WS;
  const int step = panel_width(w.C, w.OC, esz, "column");
  for (int c0 = 0; c0 < w.C; c0 += step) {
    const int cols = w.C - c0 < step ? w.C - c0 : step;
    ZO_CUDA_DT_DISPATCH(dt, q4_dequant, panel, w, (size_t)c0, w.OC, cols, stream);
    struct zo_gemm g;
    memset(&g, 0, sizeof g);
    g.m = cols;
    g.n = N;
    g.k = w.OC;
    g.ab_type = g.d_type = zo_cuda_data_type(dt);
    g.a = panel;
    g.lda = cols;
    g.b = dout;
    g.ldb = w.OC;
    g.d = (char *)dinp + (size_t)c0 * esz;
    g.ldd = w.C;
    g.batch = 1;
    g.alpha = 1.0f;
    g.workspace_bytes = Q4_GEMM_WS;
    zo_cuda_gemm(&g, stream);
  }
}
