/* NF4 / FP4 quantization (zo/quant4.h) against bitsandbytes: every packed
 * byte, absmax, nested code, nested absmax, offset and dequantized float of
 * the reference files that tests/hf/make_nf4_ref.py wrote with bitsandbytes'
 * quantize_4bit / dequantize_4bit on the CPU (ties on every decision
 * boundary, zero and subnormal blocks, blocks of 32 to 256, fp32, bf16 and
 * fp16 inputs, odd lengths, with and without double quantization), bit for
 * bit. Then properties on fresh inputs: each code is a nearest value, the
 * round trip is within half the widest gap of the map times the absmax, and
 * the bits do not depend on the OpenMP thread count. */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "zo/quant4.h"
#include "zo_test.h"

struct ref {
  char name[64];
  enum zo_quant4_type type;
  enum zo_dtype dtype;
  size_t blocksize, numel, n_blocks, n_blocks2;
  bool nested;
  char versions[128];
  unsigned char *blob;
  float *floats; /* the file's float arrays copied aligned (the file packs them at any offset) */
  const void *x;
  const uint8_t *packed, *qabsmax;
  const float *absmax, *absmax2, *code, *offset, *out;
};

static bool header_value(const char *hdr, const char *key, char *val, size_t cap) {
  char pat[64];
  snprintf(pat, sizeof pat, "\n%s=", key);
  const char *p = strstr(hdr, pat);
  if (!p) return false;
  p += strlen(pat);
  size_t n = strcspn(p, "\n");
  if (n >= cap) return false;
  memcpy(val, p, n);
  val[n] = '\0';
  return true;
}

static size_t header_size(const char *hdr, const char *key) {
  char v[32];
  return header_value(hdr, key, v, sizeof v) ? strtoull(v, NULL, 10) : 0;
}

/* Reads tests/hf/ref/nf4/NAME.bin; 0 or 1 with the reason printed. */
static int ref_load(struct ref *r, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/hf/ref/nf4/%s.bin", ZO_TEST_DIR, name);
  FILE *f = fopen(path, "rb");
  if (!f) return zo_test_fail("cannot open %s: %s", path, strerror(errno));
  ZO_REQUIRE(fseek(f, 0, SEEK_END) == 0);
  const long size = ftell(f);
  ZO_REQUIRE(size > 0 && fseek(f, 0, SEEK_SET) == 0);
  r->blob = zo_test_xmalloc((size_t)size + 1);
  const size_t got = fread(r->blob, 1, (size_t)size, f);
  fclose(f);
  ZO_REQUIRE(got == (size_t)size);
  r->blob[size] = '\0';
  char *end = strstr((char *)r->blob, "\n\n");
  ZO_REQUIRE(end != NULL);
  *end = '\0';
  char hdr[1024], v[64], bnb[48], torch[48];
  snprintf(hdr, sizeof hdr, "\n%s", (char *)r->blob);
  ZO_REQUIRE(header_value(hdr, "format", v, sizeof v) && strcmp(v, "zoq4ref1") == 0);
  ZO_REQUIRE(header_value(hdr, "quant_type", v, sizeof v));
  r->type = strcmp(v, "nf4") == 0 ? ZO_QUANT4_NF4 : ZO_QUANT4_FP4;
  ZO_REQUIRE(header_value(hdr, "dtype", v, sizeof v));
  r->dtype = strcmp(v, "f32") == 0 ? ZO_F32 : strcmp(v, "bf16") == 0 ? ZO_BF16 : ZO_F16;
  r->blocksize = header_size(hdr, "blocksize");
  r->numel = header_size(hdr, "numel");
  r->n_blocks = header_size(hdr, "n_blocks");
  r->n_blocks2 = header_size(hdr, "n_blocks2");
  r->nested = header_size(hdr, "nested") != 0;
  ZO_REQUIRE(header_value(hdr, "bitsandbytes", bnb, sizeof bnb) && header_value(hdr, "torch", torch, sizeof torch));
  snprintf(r->versions, sizeof r->versions, "bitsandbytes %s, torch %s", bnb, torch);
  snprintf(r->name, sizeof r->name, "%s", name);
  const unsigned char *p = (const unsigned char *)end + 2;
  /* The input stays where it is (zo_quant4_quantize reads any alignment);
   * the float arrays are copied to aligned memory, in the file's order. */
  const size_t nf = r->n_blocks + (r->nested ? r->n_blocks2 + 256 + 1 : 0) + r->numel;
  float *fl = r->floats = zo_test_xmalloc(4 * nf + 4);
  r->x = p, p += r->numel * (r->dtype == ZO_F32 ? 4 : 2);
  r->packed = p, p += zo_quant4_packed_nbytes(r->numel);
#define TAKE_FLOATS(dst, n)                                                      \
  do {                                                                           \
    ZO_REQUIRE(p + 4 * (size_t)(n) <= r->blob + size);                           \
    memcpy(fl, p, 4 * (size_t)(n));                                              \
    (dst) = fl, fl += (n), p += 4 * (size_t)(n);                                 \
  } while (0)
  TAKE_FLOATS(r->absmax, r->n_blocks);
  if (r->nested) {
    r->qabsmax = p, p += r->n_blocks;
    TAKE_FLOATS(r->absmax2, r->n_blocks2);
    TAKE_FLOATS(r->code, 256);
    TAKE_FLOATS(r->offset, 1);
  }
  TAKE_FLOATS(r->out, r->numel);
#undef TAKE_FLOATS
  ZO_REQUIRE(p == r->blob + size);
  ZO_REQUIRE(r->n_blocks == zo_quant4_n_blocks(r->numel, r->blocksize));
  ZO_REQUIRE(!r->nested || r->n_blocks2 == zo_quant4_n_blocks(r->n_blocks, ZO_QUANT4_NESTED_BLOCK));
  return 0;
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* Counts the floats of a and b whose bits differ, printing the first; with
 * zero_signs, +0 against -0 is counted there instead. */
static size_t count_float_diffs_z(const char *what, const float *a, const float *b, size_t n, size_t *zero_signs) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    if (zero_signs && a[i] == 0.0f && b[i] == 0.0f && f32_bits(a[i]) != f32_bits(b[i])) {
      ++*zero_signs;
      continue;
    }
    if (f32_bits(a[i]) != f32_bits(b[i]) && bad++ == 0)
      fprintf(stderr, "  %s[%zu]: ours %.9g (0x%08x), bitsandbytes %.9g (0x%08x)\n", what, i, (double)a[i],
              f32_bits(a[i]), (double)b[i], f32_bits(b[i]));
  }
  return bad;
}

static size_t count_float_diffs(const char *what, const float *a, const float *b, size_t n) {
  return count_float_diffs_z(what, a, b, n, NULL);
}

static size_t count_byte_diffs(const char *what, const uint8_t *a, const uint8_t *b, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i] && bad++ == 0) fprintf(stderr, "  %s[%zu]: ours 0x%02x, bitsandbytes 0x%02x\n", what, i, a[i], b[i]);
  return bad;
}

/* One reference file: quantize, double-quantize, dequantize, every bit. */
static int check_ref(const char *name) {
  struct ref r = {0};
  if (ref_load(&r, name)) return 1;
  const size_t nbytes = zo_quant4_packed_nbytes(r.numel);
  uint8_t *packed = zo_test_xmalloc(nbytes), *qabsmax = zo_test_xmalloc(r.n_blocks);
  float *absmax = zo_test_xmalloc(4 * r.n_blocks), *absmax2 = zo_test_xmalloc(4 * (r.n_blocks2 + 1));
  float *deq_absmax = zo_test_xmalloc(4 * r.n_blocks), *out = zo_test_xmalloc(4 * r.numel);
  memset(packed, 0xa5, nbytes);
  zo_quant4_quantize(packed, absmax, r.x, r.dtype, r.numel, r.blocksize, r.type);
  size_t bad = count_byte_diffs("packed", packed, r.packed, nbytes);
  bad += count_float_diffs("absmax", absmax, r.absmax, r.n_blocks);
  const float *scale = absmax;
  if (r.nested) {
    struct zo_quant4_nested nq = {.qabsmax = qabsmax, .absmax2 = absmax2};
    zo_quant4_nested_quantize(&nq, absmax, r.n_blocks, r.code);
    bad += count_float_diffs("offset", &nq.offset, r.offset, 1);
    bad += count_byte_diffs("qabsmax", qabsmax, r.qabsmax, r.n_blocks);
    bad += count_float_diffs("absmax2", absmax2, r.absmax2, r.n_blocks2);
    bad += count_float_diffs("nested map", zo_quant4_nested_map(), r.code, 256);
    zo_quant4_nested_dequantize(deq_absmax, &nq, r.n_blocks, r.code);
    scale = deq_absmax;
  }
  zo_quant4_dequantize(out, packed, scale, r.numel, r.blocksize, r.type);
  /* FP4's code 8 (-0) dequantizes to +0 in bitsandbytes' AVX-512 and torch
   * kernels and to -0 in its AVX2 / scalar one, which it picks for some
   * shapes (fp4_bs64_tail, a 1-D tensor of 174): that zero's sign is forgiven. */
  size_t zero_signs = 0;
  bad += count_float_diffs_z("out", out, r.out, r.numel, r.type == ZO_QUANT4_FP4 ? &zero_signs : NULL);
  printf("  %-18s %s bs %4zu numel %6zu%s: %zu differences, %zu zero signs (%s)\n", name,
         zo_quant4_type_name(r.type), r.blocksize, r.numel, r.nested ? " nested" : "", bad, zero_signs,
         r.versions);
  free(packed), free(qabsmax), free(absmax), free(absmax2), free(deq_absmax), free(out), free(r.blob), free(r.floats);
  return bad != 0;
}

static int test_bitsandbytes_reference(void) {
  static const char *names[] = {
      "nf4_bs64",  "nf4_bs64_dq",       "fp4_bs64",     "fp4_bs256_dq", "nf4_bs256",
      "fp4_bs256", "nf4_bs128_bf16_dq", "fp4_bs32_f16", "nf4_bs64_odd", "fp4_bs64_odd",
      "nf4_bs64_tail", "fp4_bs64_tail",
  };
  int failed = 0;
  for (size_t i = 0; i < ZO_ARRAY_LEN(names); i++) failed |= check_ref(names[i]);
  return failed;
}

/* Fresh inputs: normal, with a heavy tail, over decades of scale. */
static float *random_input(size_t n, uint64_t seed) {
  float *x = zo_test_xmalloc(4 * n);
  zo_rng_seed(seed);
  for (size_t i = 0; i < n; i++) {
    x[i] = (float)(zo_rng_normal() * pow(10.0, (double)((i / 97) % 7) - 3.0));
  }
  return x;
}

/* Each code's value is a nearest one to x / absmax (the scaling is one
 * fp32 rounding, hence the slack), and |dequantized - x| is at most half
 * the widest gap between neighbouring values, times the block's absmax. */
static int test_nearest_and_error_bound(void) {
  const size_t n = 64 * 97 + 33;
  float *x = random_input(n, 4801);
  uint8_t *packed = zo_test_xmalloc(zo_quant4_packed_nbytes(n));
  float *absmax = zo_test_xmalloc(4 * zo_quant4_n_blocks(n, 32)), *out = zo_test_xmalloc(4 * n);
  int failed = 0;
  for (int t = 0; t < 2; t++) {
    const enum zo_quant4_type type = t ? ZO_QUANT4_FP4 : ZO_QUANT4_NF4;
    const float *v = zo_quant4_values(type);
    float sorted[16];
    memcpy(sorted, v, sizeof sorted);
    double max_gap = 0;
    for (int i = 0; i < 16; i++)
      for (int j = i + 1; j < 16; j++)
        if (sorted[j] < sorted[i]) { const float s = sorted[i]; sorted[i] = sorted[j]; sorted[j] = s; }
    for (int i = 0; i + 1 < 16; i++) max_gap = fmax(max_gap, (double)sorted[i + 1] - sorted[i]);
    for (size_t bs = 32; bs <= 4096; bs *= 4) {
      zo_quant4_quantize(packed, absmax, x, ZO_F32, n, bs, type);
      zo_quant4_dequantize(out, packed, absmax, n, bs, type);
      size_t bad = 0;
      double worst = 0;
      for (size_t i = 0; i < n; i++) {
        const double a = absmax[i / bs], s = x[i] / a;
        const uint8_t c = i % 2 ? packed[i / 2] & 0xf : packed[i / 2] >> 4;
        double best = INFINITY;
        for (int k = 0; k < 16; k++) best = fmin(best, fabs(s - v[k]));
        const double err = fabs((double)out[i] - x[i]);
        worst = fmax(worst, err / (0.5 * max_gap * a));
        if (fabs(s - v[c]) > best + 1e-6 || err > 0.5 * max_gap * a * (1 + 1e-6)) bad++;
      }
      if (bad) failed = zo_test_fail("%s bs %zu: %zu elements not nearest or beyond the bound",
                                     zo_quant4_type_name(type), bs, bad);
      printf("  %s bs %4zu: worst error %.4f of half the widest gap times absmax\n", zo_quant4_type_name(type),
             bs, worst);
    }
  }
  free(x), free(packed), free(absmax), free(out);
  return failed;
}

/* The same bits from 1, 2 and 3 OpenMP threads (enough blocks for the
 * parallel regions to open), double quantization included. */
static int test_thread_count_independent(void) {
#ifdef __SANITIZE_THREAD__
  printf("SKIP: libgomp is not instrumented: TSan runs OpenMP on one thread\n");
  return ZO_TEST_SKIP;
#endif
  const int threads = omp_get_max_threads();
  const size_t n = 64 * 40000 + 7, nb = zo_quant4_n_blocks(n, 64), nb2 = zo_quant4_n_blocks(nb, 256);
  float *x = random_input(n, 4802);
  uint8_t *p[3], *q[3];
  float *a[3], *a2[3], off[3], *out[3];
  for (int t = 0; t < 3; t++) {
    p[t] = zo_test_xmalloc(zo_quant4_packed_nbytes(n)), q[t] = zo_test_xmalloc(nb);
    a[t] = zo_test_xmalloc(4 * nb), a2[t] = zo_test_xmalloc(4 * nb2), out[t] = zo_test_xmalloc(4 * n);
    omp_set_num_threads(t + 1);
    zo_quant4_quantize(p[t], a[t], x, ZO_F32, n, 64, ZO_QUANT4_NF4);
    struct zo_quant4_nested nq = {.qabsmax = q[t], .absmax2 = a2[t]};
    zo_quant4_nested_quantize(&nq, a[t], nb, zo_quant4_nested_map());
    off[t] = nq.offset;
    zo_quant4_nested_dequantize(a[t], &nq, nb, zo_quant4_nested_map());
    zo_quant4_dequantize(out[t], p[t], a[t], n, 64, ZO_QUANT4_NF4);
  }
  omp_set_num_threads(threads);
  const int before = zo_test_n_expect_failed;
  for (int t = 1; t < 3; t++) {
    ZO_EXPECT(memcmp(p[t], p[0], zo_quant4_packed_nbytes(n)) == 0);
    ZO_EXPECT(memcmp(q[t], q[0], nb) == 0 && memcmp(a2[t], a2[0], 4 * nb2) == 0);
    ZO_EXPECT(f32_bits(off[t]) == f32_bits(off[0]));
    ZO_EXPECT(memcmp(out[t], out[0], 4 * n) == 0);
  }
  const int failed = zo_test_expect_failed_since(before);
  for (int t = 0; t < 3; t++) free(p[t]), free(q[t]), free(a[t]), free(a2[t]), free(out[t]);
  free(x);
  return failed;
}

static int test_layout(void) {
  ZO_REQUIRE(zo_quant4_blocksize_is_valid(32) && zo_quant4_blocksize_is_valid(4096));
  ZO_REQUIRE(!zo_quant4_blocksize_is_valid(16) && !zo_quant4_blocksize_is_valid(96));
  ZO_REQUIRE(!zo_quant4_blocksize_is_valid(8192));
  ZO_REQUIRE(zo_quant4_packed_nbytes(7) == 4 && zo_quant4_n_blocks(129, 64) == 3);
  /* The pad nibble of an odd length is the code of 0, and element 0 is the high nibble. */
  const float x[3] = {1.0f, -1.0f, 0.5f};
  uint8_t packed[2];
  float absmax[1];
  zo_quant4_quantize(packed, absmax, x, ZO_F32, 3, 64, ZO_QUANT4_NF4);
  ZO_REQUIRE(packed[0] == 0xf0 && packed[1] == 0xc7 && absmax[0] == 1.0f);
  zo_quant4_quantize(packed, absmax, x, ZO_F32, 3, 64, ZO_QUANT4_FP4);
  ZO_REQUIRE(packed[0] == 0x3b && packed[1] == 0x50);
  return 0;
}

int main(void) {
  static const struct zo_test tests[] = {
      ZO_TEST(layout),
      ZO_TEST(bitsandbytes_reference),
      ZO_TEST(nearest_and_error_bound),
      ZO_TEST(thread_count_independent),
  };
  return ZO_TEST_MAIN(tests);
}
