/* Inverted dropout (zo/backend.h: dropout): out = inp / (1 - p) where
 * Philox4x32-10 keeps the element, else 0, the mask a pure function of
 * (seed, site, element index) (zo/philox.h), so the backward (this op on the
 * gradient) and the CUDA kernel regenerate it; nothing is stored. Parallel
 * over chunks whose starts are multiples of 4: one Philox call gives the
 * draws of four consecutive elements. */
#include "cpu.h"
#include "ops_half.h"
#include "zo/philox.h"

#define ZO_DROPOUT_CHUNK ((size_t)1 << 14) /* a multiple of 4 */

ZO_INLINE void dropout_t(void *out, const void *inp, size_t i0, size_t i1, uint32_t thr, float scale, uint64_t seed,
                         uint64_t site, enum zo_dtype dt) {
  for (size_t i = i0; i < i1; i += 4) {
    uint32_t r[4];
    zo_philox_dropout_draws(r, seed, site, i / 4);
    for (size_t k = 0; k < 4 && i + k < i1; k++)
      zo_st(out, i + k, r[k] >= thr ? zo_ld(inp, i + k, dt) * scale : 0.0f, dt);
  }
}

void zo_cpu_dropout(void *out, const void *inp, size_t N, float p, uint64_t seed, uint64_t site, enum zo_dtype dt) {
  ZO_ASSERT(p >= 0.0f && p < 1.0f);
  const uint32_t thr = zo_philox_dropout_threshold(p);
  const float scale = (float)(1.0 / (1.0 - (double)p));
  const size_t n_chunks = (N + ZO_DROPOUT_CHUNK - 1) / ZO_DROPOUT_CHUNK;
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < n_chunks; c++) {
    const size_t i0 = c * ZO_DROPOUT_CHUNK, i1 = N - i0 < ZO_DROPOUT_CHUNK ? N : i0 + ZO_DROPOUT_CHUNK;
    ZO_DT_DISPATCH(dt, dropout_t, out, inp, i0, i1, thr, scale, seed, site);
  }
}
