/* GPT-2 encoder: token embedding plus position embedding, and its backward.
 * Backward scatters dout into dwte by token id, and the same id can occur at
 * many positions, so threads split the channels rather than the positions: no
 * two threads touch one element, no atomics, and the summation order is fixed
 * (deterministic results for any thread count). */
#include "cpu.h"

#include <omp.h>

void zo_cpu_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe,
                            int B, int T, int C) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      float *o = out + ((size_t)b * T + t) * C;
      const float *te = wte + (size_t)inp[b * T + t] * C;
      const float *pe = wpe + (size_t)t * C;
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = te[c] + pe[c];
    }
  }
}

void zo_cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                             int B, int T, int C) {
#pragma omp parallel
  {
    /* This thread's channels [c0, c1), whole cache lines apart from the last. */
    int n_threads = omp_get_num_threads();
    int per_thread = ((C + n_threads - 1) / n_threads + 15) / 16 * 16;
    int c0 = omp_get_thread_num() * per_thread;
    int c1 = c0 + per_thread < C ? c0 + per_thread : C;
    for (int t = 0; t < T; t++) {
      float *dpe = dwpe + (size_t)t * C;
      for (int b = 0; b < B; b++) {
        const float *d = dout + ((size_t)b * T + t) * C;
        float *dte = dwte + (size_t)inp[b * T + t] * C;
#pragma omp simd
        for (int c = c0; c < c1; c++) {
          dte[c] += d[c];
          dpe[c] += d[c];
        }
      }
    }
  }
}
