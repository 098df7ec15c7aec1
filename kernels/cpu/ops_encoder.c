/* GPT-2 encoder: token embedding plus position embedding, and its backward,
 * over fp32, bf16 or fp16 embeddings (the gradients are fp32). Without a
 * position embedding (wpe, dwpe NULL: Llama) the token rows are copied, not
 * added to a zero (which would turn -0 into +0). Backward scatters dout
 * into dwte by token id, and the same id can occur at many
 * positions, so threads split the channels rather than the positions: no two
 * threads touch one element, no atomics, and the summation order is fixed
 * (deterministic results for any thread count). A position whose token is
 * the padding index adds to dwpe only (nn.Embedding's padding_idx). */
#include "cpu.h"
#include "ops_half.h"

#include <omp.h>

/* Parallel regions stay outside the dtype-instantiated workers: OpenMP
 * outlines a region before inlining, which would leave the dtype a run-time
 * value inside the loops. */
ZO_INLINE void encoder_row_t(void *out, const void *wte, const void *wpe, size_t o, size_t te,
                             size_t pe, int C, enum zo_dtype dt) {
  if (!wpe) {
#pragma omp simd
    for (int c = 0; c < C; c++) zo_st(out, o + c, zo_ld(wte, te + c, dt), dt);
    return;
  }
#pragma omp simd
  for (int c = 0; c < C; c++) zo_st(out, o + c, zo_ld(wte, te + c, dt) + zo_ld(wpe, pe + c, dt), dt);
}

void zo_cpu_encoder_forward(void *out, const int32_t *inp, const void *wte, const void *wpe, int B,
                            int T, int C, enum zo_dtype dt) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      ZO_DT_DISPATCH(dt, encoder_row_t, out, wte, wpe, ((size_t)b * T + t) * C,
                     (size_t)inp[b * T + t] * C, (size_t)t * C, C);
}

/* dte NULL (the padding index): dpe alone. */
ZO_INLINE void encoder_backward_cols_t(float *dte, float *dpe, const void *dout, size_t d, int c0,
                                       int c1, enum zo_dtype dt) {
  if (!dte) {
#pragma omp simd
    for (int c = c0; c < c1; c++) dpe[c] += zo_ld(dout, d + c, dt);
    return;
  }
  if (!dpe) {
#pragma omp simd
    for (int c = c0; c < c1; c++) dte[c] += zo_ld(dout, d + c, dt);
    return;
  }
#pragma omp simd
  for (int c = c0; c < c1; c++) {
    const float g = zo_ld(dout, d + c, dt);
    dte[c] += g;
    dpe[c] += g;
  }
}

void zo_cpu_encoder_backward(float *dwte, float *dwpe, const void *dout, const int32_t *inp, int B,
                             int T, int C, int padding_idx, enum zo_dtype dt) {
#pragma omp parallel
  {
    /* This thread's channels [c0, c1), whole cache lines apart from the last. */
    int n_threads = omp_get_num_threads();
    int per_thread = ((C + n_threads - 1) / n_threads + 15) / 16 * 16;
    int c0 = omp_get_thread_num() * per_thread;
    int c1 = c0 + per_thread < C ? c0 + per_thread : C;
    for (int t = 0; t < T; t++) {
      float *dpe = dwpe ? dwpe + (size_t)t * C : NULL;
      for (int b = 0; b < B; b++) {
        const int32_t tok = inp[b * T + t];
        float *dte = tok == padding_idx ? NULL : dwte + (size_t)tok * C;
        if (!dte && !dpe) continue;
        ZO_DT_DISPATCH(dt, encoder_backward_cols_t, dte, dpe, dout, ((size_t)b * T + t) * C, c0, c1);
      }
    }
  }
}
