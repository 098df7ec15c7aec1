/* The seeded initialisation (zo/model.h): one splitmix64 stream of
 * Box-Muller pairs over the whole table in table order (engine/arch.h), in
 * which every tensor's, and every element's, position is known in advance.
 * So any element range can be drawn alone, and a range is drawn in parallel
 * pieces (OpenMP) with the serial draw's bits whatever the piece size and
 * thread count: a piece may start on either element of a Box-Muller pair
 * (normal_range then draws the pair and keeps the element it owns). A
 * zeroed row (the embedding's padding index) still consumes its draws, so
 * no other element moves. */
#include "zo/model.h"

#include <math.h>
#include <string.h>

#include "arch.h"

/* splitmix64: a small, well-known generator; the stream depends only on the
 * seed, and its k-th output (from 0) is mix(seed + (k + 1) * golden), so any
 * position can be drawn directly. */
#define SPLITMIX_GOLDEN 0x9E3779B97F4A7C15ull
static uint64_t splitmix64_at(uint64_t seed, uint64_t k) {
  uint64_t z = seed + (k + 1) * SPLITMIX_GOLDEN;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Elements [a, b) of a N(0, std^2) tensor whose draws start at stream
 * position k0: pair p = elements (2p, 2p + 1) is one Box-Muller transform of
 * the draws k0 + 2p (u1, in (0, 1]) and k0 + 2p + 1 (u2). */
static void normal_range(float *dst, size_t a, size_t b, double std, uint64_t seed, uint64_t k0) {
  for (size_t e = a; e < b;) {
    const uint64_t p = e / 2;
    const double u1 = ((double)(splitmix64_at(seed, k0 + 2 * p) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = (double)(splitmix64_at(seed, k0 + 2 * p + 1) >> 11) * 0x1.0p-53;
    const double r = sqrt(-2.0 * log(u1)) * std;
    if (e % 2 == 0) dst[e++ - a] = (float)(r * cos(2.0 * M_PI * u2));
    if (e < b) dst[e++ - a] = (float)(r * sin(2.0 * M_PI * u2));
  }
}

/* The serial draw of [first, first + numel) on the calling thread. */
static void init_range_serial(const struct zo_model_config *mc, const struct zo_arch *arch,
                              const struct zo_tensor_table *t, uint64_t seed, size_t first, float *dst, size_t numel) {
  ZO_ASSERT(first + numel <= t->numel);
  uint64_t k0 = 0; /* stream position of tensor i's first draw */
  const size_t end = first + numel;
  for (int i = 0; i < t->n_tensors && first < end; i++) {
    const struct zo_tensor_info *ti = &t->tensors[i];
    const struct zo_init_spec sp = arch->init_tensor(mc, ti, i);
    const uint64_t draws = sp.kind == ZO_INIT_NORMAL ? 2 * (((uint64_t)ti->numel + 1) / 2) : 0;
    const size_t lo = ti->offset, hi = ti->offset + ti->numel;
    if (first < hi && lo < end) {
      const size_t a = (first > lo ? first : lo) - lo, b = (end < hi ? end : hi) - lo;
      float *d = dst + (lo + a - first);
      const size_t cols = ti->ndim == 2 ? (size_t)ti->shape[1] : 1;
      const size_t z = (size_t)sp.zero_from_row * cols; /* first zero element */
      const size_t bk = b < z ? b : z;
      if (a < bk) {
        if (sp.kind == ZO_INIT_NORMAL) normal_range(d, a, bk, sp.std, seed, k0);
        else if (sp.kind == ZO_INIT_ONES)
          for (size_t e = a; e < bk; e++) d[e - a] = 1.0f;
        else memset(d, 0, (bk - a) * sizeof(float));
      }
      const size_t az = a > z ? a : z;
      if (az < b) memset(d + (az - a), 0, (b - az) * sizeof(float));
      if (sp.has_zero_row) {
        const size_t r0 = (size_t)sp.zero_row * cols, ra = a > r0 ? a : r0, rb = b < r0 + cols ? b : r0 + cols;
        if (ra < rb) memset(d + (ra - a), 0, (rb - ra) * sizeof(float));
      }
    }
    k0 += draws;
  }
}

void zo_model_init_table_range(const struct zo_model_config *mc, const struct zo_tensor_table *t, uint64_t seed,
                               size_t first, float *dst, size_t numel, size_t piece) {
  ZO_ASSERT(first + numel <= t->numel);
  const struct zo_arch *arch = zo_arch_of(mc->arch);
  if (piece == 0 || numel <= piece) {
    init_range_serial(mc, arch, t, seed, first, dst, numel);
    return;
  }
  const long long n_pieces = (long long)((numel + piece - 1) / piece);
#pragma omp parallel for schedule(dynamic, 1)
  for (long long k = 0; k < n_pieces; k++) {
    const size_t a = (size_t)k * piece, n = numel - a < piece ? numel - a : piece;
    init_range_serial(mc, arch, t, seed, first + a, dst + a, n);
  }
}

void zo_model_init_range(const struct zo_model *m, uint64_t seed, size_t first, float *dst, size_t numel) {
  zo_model_init_table_range(&m->cfg, &m->table, seed, first, dst, numel, ZO_MODEL_INIT_PIECE);
}

void zo_model_init_params(const struct zo_model *m, float *params, uint64_t seed) {
  zo_model_init_range(m, seed, 0, params, m->table.numel);
}
