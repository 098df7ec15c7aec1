/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 * 3", SC 2011; Random123's constants): a counter-based generator, four
 * 32-bit outputs as a pure function of a 128-bit counter and a 64-bit key.
 * Dropout draws its mask from it (zo_philox_dropout_keep), so the CPU and
 * CUDA backends, every offload placement, a recomputed (checkpointed) block
 * and a resumed run see the same mask for the same (seed, site, element),
 * and backward regenerates the mask instead of storing it. Header-only,
 * compiled as C and as CUDA (host and device). */
#ifndef ZO_PHILOX_H
#define ZO_PHILOX_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define ZO_PHILOX_FN static __host__ __device__ __forceinline__
#else
#define ZO_PHILOX_FN static inline
#endif

/* ctr (4) is replaced by Philox4x32-10(ctr, key). */
ZO_PHILOX_FN void zo_philox4x32_10(uint32_t ctr[4], uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; r++) {
    const uint64_t p0 = (uint64_t)0xD2511F53u * ctr[0], p1 = (uint64_t)0xCD9E8D57u * ctr[2];
    const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0, hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    const uint32_t c1 = ctr[1], c3 = ctr[3];
    ctr[0] = hi1 ^ c1 ^ k0;
    ctr[1] = lo1;
    ctr[2] = hi0 ^ c3 ^ k1;
    ctr[3] = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

/* The dropout threshold of probability p in [0, 1): an element is kept when
 * its 32-bit draw is >= this, so it is kept with probability
 * 1 - threshold / 2^32 (1 - p to within 2^-32). */
ZO_PHILOX_FN uint32_t zo_philox_dropout_threshold(float p) {
  const double t = (double)p * 4294967296.0;
  return t <= 0.0 ? 0u : t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}

/* The four draws of elements 4j .. 4j+3 of dropout site `site` under seed:
 * counter (j, site), key seed. */
ZO_PHILOX_FN void zo_philox_dropout_draws(uint32_t out[4], uint64_t seed, uint64_t site, uint64_t j) {
  out[0] = (uint32_t)j;
  out[1] = (uint32_t)(j >> 32);
  out[2] = (uint32_t)site;
  out[3] = (uint32_t)(site >> 32);
  zo_philox4x32_10(out, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* Whether element i of site is kept (one element alone: the reference and
 * tests; the kernels draw four at a time). */
ZO_PHILOX_FN bool zo_philox_dropout_keep(uint64_t seed, uint64_t site, uint64_t i, uint32_t threshold) {
  uint32_t r[4];
  zo_philox_dropout_draws(r, seed, site, i / 4);
  return r[i % 4] >= threshold;
}

#endif /* ZO_PHILOX_H */
