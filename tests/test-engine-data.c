/* Data loader: exact micro-batch order without shuffle for text, llm.c
 * (uint16 and uint32 shards), uint16 and uint32 files (including the wrap
 * across the end), the same streams from every format holding the same
 * tokens, ids above 65535, seek/position resume, shuffle as a seeded
 * permutation of windows, data-parallel ranks' slices of the global
 * micro-batch, one distinct message per malformed file, and the
 * prepare round trip. Every expected value comes from
 * a plain loop over the token array the file was written from, never from the
 * loader. Files live in a mkdtemp directory removed at the end. */
#include "zo/data.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo_test.h"

static char tmp_dir[256];

#define CHECK(cond) ZO_EXPECT(cond)

/* Path of name in the temp directory; valid for the next 31 calls. */
static const char *tmp_path(const char *name) { return zo_test_path(tmp_dir, name); }

static bool write_raw(const char *path, const void *buf, size_t nbytes) {
  FILE *f = fopen(path, "wb");
  if (!f) return false;
  bool ok = fwrite(buf, 1, nbytes, f) == nbytes;
  return fclose(f) == 0 && ok;
}

/* Reads a whole file; *nbytes set; caller frees. */
static uint8_t *read_raw(const char *path, size_t *nbytes) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *nbytes = (size_t)n;
  return buf;
}

/* Writes tokens (each < 256 for text, < 65536 for llmc and u16) in format
 * fmt; llm.c shards get the version 1 (uint16) header. */
static bool write_tokens(const char *path, enum zo_data_format fmt, const uint32_t *tok, size_t n) {
  bool ok = false;
  if (fmt == ZO_DATA_U32) {
    ok = zo_data_write_u32(path, tok, n) == 0;
  } else if (fmt == ZO_DATA_TEXT) {
    uint8_t *b = malloc(n);
    for (size_t k = 0; k < n; k++) b[k] = (uint8_t)tok[k];
    ok = write_raw(path, b, n);
    free(b);
  } else {
    uint16_t *u = malloc(n * sizeof *u);
    for (size_t k = 0; k < n; k++) u[k] = (uint16_t)tok[k];
    ok = (fmt == ZO_DATA_LLMC ? zo_data_write_llmc(path, u, n) : zo_data_write_u16(path, u, n)) == 0;
    free(u);
  }
  return ok;
}

/* Writes tokens as uint32: a version 7 llm.c shard (fmt llmc) or a flat
 * uint32 file (fmt u32). */
static bool write_tokens32(const char *path, enum zo_data_format fmt, const uint32_t *tok, size_t n) {
  ZO_ASSERT(fmt == ZO_DATA_LLMC || fmt == ZO_DATA_U32);
  int err = fmt == ZO_DATA_LLMC ? zo_data_write_llmc32(path, tok, n) : zo_data_write_u32(path, tok, n);
  if (err) fprintf(stderr, "  %s\n", zo_last_error());
  return err == 0;
}

/* Opens path without shuffle and compares n_batches micro-batches against
 * micro-batch i, row r, column t: input = tok[(i*B*T + r*T + t) mod N],
 * target = tok[(i*B*T + r*T + t + 1) mod N]. */
static int check_sequential(const char *path, enum zo_data_format fmt, int vocab, const uint32_t *tok, size_t N,
                            int B, int T, int n_batches) {
  struct zo_data *d = zo_data_open(path, fmt, vocab, B, T, false, 0);
  if (!CHECK(d != NULL)) {
    fprintf(stderr, "  %s\n", zo_last_error());
    return 1;
  }
  int rc = 0;
  int32_t *in = malloc((size_t)B * T * sizeof *in), *tg = malloc((size_t)B * T * sizeof *tg);
  if (!CHECK(zo_data_n_tokens(d) == N)) rc = 1;
  for (int i = 0; i < n_batches && !rc; i++) {
    if (!CHECK(zo_data_position(d) == (uint64_t)i)) rc = 1;
    if (!CHECK(zo_data_next(d, in, tg) == 0)) rc = 1;
    for (int r = 0; r < B && !rc; r++) {
      for (int t = 0; t < T && !rc; t++) {
        size_t idx = (size_t)i * B * T + (size_t)r * T + t;
        if (!CHECK(in[r * T + t] == (int32_t)tok[idx % N]) || !CHECK(tg[r * T + t] == (int32_t)tok[(idx + 1) % N])) {
          fprintf(stderr, "  micro-batch %d row %d col %d\n", i, r, t);
          rc = 1;
        }
      }
    }
    /* targets are inputs shifted by one within the flat (B,T) window */
    for (int k = 0; k + 1 < B * T && !rc; k++)
      if (!CHECK(tg[k] == in[k + 1])) rc = 1;
  }
  free(in);
  free(tg);
  zo_data_close(d);
  return rc;
}

/* Reads n micro-batches into in (n, BT) and tg (n, BT). */
static void read_batches(struct zo_data *d, int n, size_t BT, int32_t *in, int32_t *tg) {
  for (int i = 0; i < n; i++) zo_data_next(d, in + (size_t)i * BT, tg + (size_t)i * BT);
}

/* wide: write uint32 tokens (write_tokens32) */
static int order_case(enum zo_data_format fmt, bool wide, int vocab, const char *name) {
  /* N = 37 is not a multiple of B*T = 10: windows straddle the end and the
   * second pass starts at other offsets. */
  const size_t N = 37;
  const int B = 2, T = 5;
  uint32_t tok[37];
  for (size_t k = 0; k < N; k++) tok[k] = zo_rng_u32() % (uint32_t)vocab;
  const char *path = tmp_path(name);
  if (!CHECK(wide ? write_tokens32(path, fmt, tok, N) : write_tokens(path, fmt, tok, N))) return 1;
  if (check_sequential(path, fmt, vocab, tok, N, B, T, 30)) return 1;
  /* Spelled out for micro-batch 3 (tokens 30..40 -> 30..36, 0..3): row 1
   * is tokens 35, 36, 0, 1, 2 and its targets 36, 0, 1, 2, 3. */
  struct zo_data *d = zo_data_open(path, fmt, vocab, B, T, false, 0);
  if (!CHECK(d != NULL)) return 1;
  int32_t in[10], tg[10];
  zo_data_seek(d, 3);
  zo_data_next(d, in, tg);
  int rc = 0;
  const int want_in[5] = {35, 36, 0, 1, 2}, want_tg[5] = {36, 0, 1, 2, 3};
  for (int t = 0; t < 5; t++)
    if (!CHECK(in[5 + t] == (int32_t)tok[want_in[t]]) || !CHECK(tg[5 + t] == (int32_t)tok[want_tg[t]])) rc = 1;
  /* A file of exactly B*T+1 tokens is long enough. */
  if (check_sequential(path, fmt, vocab, tok, N, 4, 9, 5)) rc = 1;
  zo_data_close(d);
  return rc;
}

static int test_order_text(void) { return order_case(ZO_DATA_TEXT, false, 256, "order.txt"); }
static int test_order_u16(void) { return order_case(ZO_DATA_U16, false, 50257, "order.u16"); }
static int test_order_llmc(void) { return order_case(ZO_DATA_LLMC, false, 50257, "order.llmc"); }
/* Llama 3's vocabulary: most ids are above 65535. */
static int test_order_u32(void) { return order_case(ZO_DATA_U32, true, 128256, "order.u32"); }
static int test_order_llmc32(void) { return order_case(ZO_DATA_LLMC, true, 128256, "order.llmc32"); }

/* The writers' bytes: n tokens after the header (NULL: none), nothing else. */
static int check_file_bytes(const char *path, const int32_t *header, const void *tokens, size_t tokens_nbytes) {
  size_t nbytes, header_nbytes = header ? ZO_LLMC_HEADER_INTS * sizeof *header : 0;
  uint8_t *raw = read_raw(path, &nbytes);
  int rc = 0;
  if (!CHECK(raw != NULL) || !CHECK(nbytes == header_nbytes + tokens_nbytes)) rc = 1;
  if (!rc && header && !CHECK(memcmp(raw, header, header_nbytes) == 0)) rc = 1;
  if (!rc && !CHECK(memcmp(raw + header_nbytes, tokens, tokens_nbytes) == 0)) rc = 1;
  free(raw);
  return rc;
}

static int test_roundtrip_u32(void) {
  /* ids above 65535 and the largest that fits int32 */
  uint32_t tok[7] = {0, 65535, 65536, 128255, 1u << 24, 2147483646u, 2147483647u};
  int32_t h[ZO_LLMC_HEADER_INTS] = {20240801, 7, 7};
  const char *u = tmp_path("rt.u32"), *l = tmp_path("rt.llmc32");
  if (!CHECK(zo_data_write_u32(u, tok, 7) == 0) || !CHECK(zo_data_write_llmc32(l, tok, 7) == 0)) return 1;
  if (check_file_bytes(u, NULL, tok, sizeof tok) || check_file_bytes(l, h, tok, sizeof tok)) return 1;
  /* the v1 writer's header is llm.c's GPT-2 one */
  uint16_t t16[3] = {7, 65535, 0};
  int32_t h16[ZO_LLMC_HEADER_INTS] = {20240520, 1, 3};
  if (!CHECK(zo_data_write_llmc(tmp_path("rt.llmc"), t16, 3) == 0)) return 1;
  if (check_file_bytes(tmp_path("rt.llmc"), h16, t16, sizeof t16)) return 1;
  /* Read back through the loader with the largest vocabulary (every id but
   * INT32_MAX is below it): B*T = 6, so tokens 0..5 then 6 as last target. */
  int rc = 0;
  for (int f = 0; f < 2; f++) {
    struct zo_data *d = zo_data_open(f ? l : u, f ? ZO_DATA_LLMC : ZO_DATA_U32, INT32_MAX, 2, 3, false, 0);
    if (!CHECK(d == NULL)) { /* id 2147483647 is not < vocab_size INT32_MAX */
      zo_data_close(d);
      return 1;
    }
    if (!CHECK(strstr(zo_last_error(), "token id 2147483647 at index 6 is >= vocab_size 2147483647") != NULL)) {
      fprintf(stderr, "  message: %s\n", zo_last_error());
      rc = 1;
    }
  }
  tok[6] = 2147483646u;
  if (!CHECK(zo_data_write_u32(u, tok, 7) == 0) || !CHECK(zo_data_write_llmc32(l, tok, 7) == 0)) return 1;
  for (int f = 0; f < 2 && !rc; f++) {
    struct zo_data *d = zo_data_open(f ? l : u, f ? ZO_DATA_LLMC : ZO_DATA_U32, INT32_MAX, 2, 3, false, 0);
    if (!CHECK(d != NULL)) {
      fprintf(stderr, "  %s\n", zo_last_error());
      return 1;
    }
    int32_t in[6], tg[6];
    zo_data_next(d, in, tg);
    for (int k = 0; k < 6; k++)
      if (!CHECK(in[k] == (int32_t)tok[k]) || !CHECK(tg[k] == (int32_t)tok[k + 1])) rc = 1;
    zo_data_close(d);
  }
  size_t n = 0, width = 0;
  if (!CHECK(zo_data_read_llmc_header(l, &n, &width) == 0) || !CHECK(n == 7 && width == 4)) rc = 1;
  return rc;
}

/* The same tokens as text, llm.c v1, u16, llm.c v7 and u32 files give the same
 * micro-batches, with and without shuffle, also after a seek. */
static int test_same_stream_every_format(void) {
  const size_t N = 5003;
  const int B = 3, T = 17, n = 250; /* about 2.5 epochs of 98 windows */
  const size_t BT = (size_t)B * T;
  uint32_t *tok = malloc(N * sizeof *tok);
  for (size_t k = 0; k < N; k++) tok[k] = zo_rng_u32() % 256;
  struct {
    const char *name;
    enum zo_data_format fmt;
    bool wide;
  } files[] = {{"same.u16", ZO_DATA_U16, false},   {"same.txt", ZO_DATA_TEXT, false},
               {"same.llmc", ZO_DATA_LLMC, false}, {"same.llmc32", ZO_DATA_LLMC, true},
               {"same.u32", ZO_DATA_U32, true}};
  const int n_files = (int)(sizeof files / sizeof files[0]);
  int rc = 0;
  for (int f = 0; f < n_files && !rc; f++) {
    const char *path = tmp_path(files[f].name);
    if (!CHECK(files[f].wide ? write_tokens32(path, files[f].fmt, tok, N) : write_tokens(path, files[f].fmt, tok, N)))
      rc = 1;
  }
  free(tok);
  int32_t *in0 = malloc(n * BT * sizeof *in0), *tg0 = malloc(n * BT * sizeof *tg0);
  int32_t *in = malloc(n * BT * sizeof *in), *tg = malloc(n * BT * sizeof *tg);
  for (int shuffle = 0; shuffle < 2 && !rc; shuffle++) {
    for (int f = 0; f < n_files && !rc; f++) {
      struct zo_data *d = zo_data_open(tmp_path(files[f].name), files[f].fmt, 256, B, T, shuffle, 99);
      if (!CHECK(d != NULL) || !CHECK(zo_data_n_tokens(d) == N)) {
        fprintf(stderr, "  %s: %s\n", files[f].name, zo_last_error());
        rc = 1;
        zo_data_close(d);
        break;
      }
      read_batches(d, n, BT, f ? in : in0, f ? tg : tg0);
      if (f && (!CHECK(memcmp(in, in0, n * BT * sizeof *in) == 0) ||
                !CHECK(memcmp(tg, tg0, n * BT * sizeof *tg) == 0))) {
        fprintf(stderr, "  %s (shuffle %d) differs from same.u16\n", files[f].name, shuffle);
        rc = 1;
      }
      zo_data_seek(d, 137);
      zo_data_next(d, in, tg);
      if (!CHECK(memcmp(in, in0 + 137 * BT, BT * sizeof *in) == 0) ||
          !CHECK(memcmp(tg, tg0 + 137 * BT, BT * sizeof *tg) == 0))
        rc = 1;
      zo_data_close(d);
    }
  }
  free(in0);
  free(tg0);
  free(in);
  free(tg);
  return rc;
}

/* Tokens above 65535 are read as they are: the u32 and llm.c v7 streams equal
 * the plain-loop expectation, and a u16 view of the same values cannot hold
 * them (the test writes their low halves to show the loss is real). */
static int test_ids_above_u16(void) {
  const size_t N = 70001;
  const int vocab = 128256;
  uint32_t *tok = malloc(N * sizeof *tok);
  for (size_t k = 0; k < N; k++) tok[k] = (uint32_t)((k * 2654435761u) % (uint32_t)vocab);
  tok[0] = 65536;
  tok[1] = 128255;
  tok[2] = 65535;
  size_t above = 0;
  for (size_t k = 0; k < N; k++) above += tok[k] > 65535;
  int rc = !CHECK(above > N / 3);
  if (!rc) rc = !CHECK(write_tokens32(tmp_path("wide.u32"), ZO_DATA_U32, tok, N));
  if (!rc) rc = !CHECK(write_tokens32(tmp_path("wide.llmc32"), ZO_DATA_LLMC, tok, N));
  if (!rc) rc = check_sequential(tmp_path("wide.u32"), ZO_DATA_U32, vocab, tok, N, 4, 64, 300);
  if (!rc) rc = check_sequential(tmp_path("wide.llmc32"), ZO_DATA_LLMC, vocab, tok, N, 4, 64, 300);
  if (!rc) rc = check_sequential(tmp_path("wide.llmc32"), ZO_DATA_LLMC, vocab, tok, N, 1, 1, 20);
  free(tok);
  return rc;
}

static int test_order_long(void) {
  /* Larger file and B*T, many passes, T=1 and B=1 corner shapes. */
  const size_t N = 100003;
  uint32_t *tok = malloc(N * sizeof *tok);
  for (size_t k = 0; k < N; k++) tok[k] = zo_rng_u32() % 65536;
  int rc = !CHECK(write_tokens(tmp_path("long.u16"), ZO_DATA_U16, tok, N));
  if (!rc) rc = check_sequential(tmp_path("long.u16"), ZO_DATA_U16, 65536, tok, N, 8, 1024, 40);
  if (!rc) rc = check_sequential(tmp_path("long.u16"), ZO_DATA_U16, 65536, tok, N, 1, 1, 50);
  if (!rc) rc = check_sequential(tmp_path("long.u16"), ZO_DATA_U16, 65536, tok, N, 7, 1, 50);
  free(tok);
  return rc;
}

static int seek_case(bool shuffle) {
  const size_t N = 1000;
  const int B = 3, T = 7, n = 300;
  const size_t BT = (size_t)B * T;
  uint32_t tok[1000];
  for (size_t k = 0; k < N; k++) tok[k] = zo_rng_u32() % 1000;
  const char *path = tmp_path("seek.u16");
  if (!CHECK(write_tokens(path, ZO_DATA_U16, tok, N))) return 1;
  struct zo_data *a = zo_data_open(path, ZO_DATA_U16, 1000, B, T, shuffle, 42);
  struct zo_data *b = zo_data_open(path, ZO_DATA_U16, 1000, B, T, shuffle, 42);
  if (!CHECK(a != NULL && b != NULL)) return 1;
  int32_t *in = malloc(n * BT * sizeof *in), *tg = malloc(n * BT * sizeof *tg);
  int32_t x[21], y[21];
  read_batches(a, n, BT, in, tg);
  int rc = !CHECK(zo_data_position(a) == (uint64_t)n);
  /* forward, backward, into a later epoch, back to 0 */
  const int seeks[] = {17, 5, 123, 250, 0, 299, 47};
  for (size_t s = 0; s < sizeof seeks / sizeof seeks[0] && !rc; s++) {
    if (!CHECK(zo_data_seek(b, (uint64_t)seeks[s]) == 0)) rc = 1;
    if (!CHECK(zo_data_position(b) == (uint64_t)seeks[s])) rc = 1;
    for (int i = seeks[s]; i < n && i < seeks[s] + 30 && !rc; i++) {
      zo_data_next(b, x, y);
      if (!CHECK(memcmp(x, in + i * BT, sizeof x) == 0) || !CHECK(memcmp(y, tg + i * BT, sizeof y) == 0)) {
        fprintf(stderr, "  after seek(%d), micro-batch %d differs\n", seeks[s], i);
        rc = 1;
      }
    }
  }
  free(in);
  free(tg);
  zo_data_close(a);
  zo_data_close(b);
  return rc;
}

static int test_seek_sequential(void) { return seek_case(false); }
static int test_seek_shuffle(void) { return seek_case(true); }

/* Data-parallel slices: rank r of n with B rows reads rows [r*B, (r+1)*B)
 * of the n*B-row micro-batches. Without shuffle against a plain loop over
 * the tokens (N not a multiple of the global window, so passes wrap at
 * different offsets); with shuffle against the n*B-row handle (the window
 * order itself is checked by shuffle_permutation); after a seek too. */
static int rank_slices_case(bool shuffle, int n_ranks) {
  const size_t N = 1009;
  const int B = 2, T = 5, n = 150;
  const size_t BT = (size_t)B * T, GBT = (size_t)n_ranks * BT;
  uint32_t tok[1009];
  for (size_t k = 0; k < N; k++) tok[k] = zo_rng_u32() % 1000;
  const char *path = tmp_path("ranks.u16");
  if (!CHECK(write_tokens(path, ZO_DATA_U16, tok, N))) return 1;
  struct zo_data *g = zo_data_open(path, ZO_DATA_U16, 1000, n_ranks * B, T, shuffle, 9);
  if (!CHECK(g != NULL)) return 1;
  int32_t *gin = malloc(n * GBT * sizeof *gin), *gtg = malloc(n * GBT * sizeof *gtg);
  read_batches(g, n, GBT, gin, gtg);
  zo_data_close(g);
  int rc = 0;
  if (!shuffle)
    for (size_t i = 0; i < n * GBT && !rc; i++)
      if (!CHECK(gin[i] == (int32_t)tok[i % N] && gtg[i] == (int32_t)tok[(i + 1) % N])) rc = 1;
  int32_t x[10], y[10];
  for (int r = 0; r < n_ranks && !rc; r++) {
    struct zo_data *d = zo_data_open_rank(path, ZO_DATA_U16, 1000, B, T, shuffle, 9, r, n_ranks);
    if (!CHECK(d != NULL)) return 1;
    for (int i = 0; i < n && !rc; i++) {
      zo_data_next(d, x, y);
      if (!CHECK(memcmp(x, gin + i * GBT + r * BT, sizeof x) == 0) ||
          !CHECK(memcmp(y, gtg + i * GBT + r * BT, sizeof y) == 0)) {
        fprintf(stderr, "  rank %d of %d, micro-batch %d differs from the global one's rows\n", r, n_ranks, i);
        rc = 1;
      }
    }
    rc = rc || !CHECK(zo_data_position(d) == (uint64_t)n);
    rc = rc || !CHECK(zo_data_seek(d, 77) == 0);
    zo_data_next(d, x, y);
    rc = rc || !CHECK(memcmp(x, gin + 77 * GBT + r * BT, sizeof x) == 0);
    zo_data_close(d);
  }
  free(gin);
  free(gtg);
  return rc;
}

static int test_rank_slices_sequential(void) { return rank_slices_case(false, 2) || rank_slices_case(false, 3); }
static int test_rank_slices_shuffle(void) { return rank_slices_case(true, 2) || rank_slices_case(true, 3); }

/* Window index of a micro-batch of the file whose token k is k, or -1 when
 * it is not a whole window [j*BT, j*BT+BT]. */
static long window_of(const int32_t *in, const int32_t *tg, size_t BT) {
  if (in[0] % (int32_t)BT != 0) return -1;
  for (size_t k = 0; k < BT; k++)
    if (in[k] != in[0] + (int32_t)k || tg[k] != in[0] + (int32_t)k + 1) return -1;
  return in[0] / (long)BT;
}

/* Window order of n_epochs epochs for seed; order (n_epochs, W). */
static int shuffle_order(const char *path, int B, int T, uint64_t seed, int n_epochs, long W, long *order) {
  struct zo_data *d = zo_data_open(path, ZO_DATA_U16, 65536, B, T, true, seed);
  if (!CHECK(d != NULL)) return 1;
  size_t BT = (size_t)B * T;
  int32_t *in = malloc(BT * sizeof *in), *tg = malloc(BT * sizeof *tg);
  int rc = 0;
  for (int e = 0; e < n_epochs && !rc; e++) {
    char *seen = calloc((size_t)W, 1);
    for (long k = 0; k < W && !rc; k++) {
      zo_data_next(d, in, tg);
      long w = window_of(in, tg, BT);
      if (!CHECK(w >= 0 && w < W) || !CHECK(!seen[w])) {
        fprintf(stderr, "  seed %llu epoch %d batch %ld: window %ld\n", (unsigned long long)seed, e, k, w);
        rc = 1;
        break;
      }
      seen[w] = 1;
      order[e * W + k] = w;
    }
    free(seen);
  }
  free(in);
  free(tg);
  zo_data_close(d);
  return rc;
}

static int test_shuffle_permutation(void) {
  /* W = 64 windows of B*T = 12 tokens plus 1 shared end token plus a tail
   * of 5 tokens that shuffle never reads. */
  const int B = 3, T = 4;
  const long W = 64;
  const size_t N = (size_t)W * B * T + 1 + 5;
  uint32_t *tok = malloc(N * sizeof *tok);
  for (size_t k = 0; k < N; k++) tok[k] = (uint32_t)k;
  const char *path = tmp_path("shuffle.u16");
  int rc = !CHECK(write_tokens(path, ZO_DATA_U16, tok, N));
  free(tok);
  long a[3 * 64], b[3 * 64], c[3 * 64];
  if (!rc) rc = shuffle_order(path, B, T, 7, 3, W, a);
  if (!rc) rc = shuffle_order(path, B, T, 7, 3, W, b);
  if (!rc) rc = shuffle_order(path, B, T, 8, 3, W, c);
  if (rc) return rc;
  if (!CHECK(memcmp(a, b, sizeof a) == 0)) rc = 1;          /* deterministic per seed */
  if (!CHECK(memcmp(a, c, W * sizeof *a) != 0)) rc = 1;      /* another seed, another order */
  if (!CHECK(memcmp(a, a + W, W * sizeof *a) != 0)) rc = 1;  /* each epoch reshuffled */
  if (!CHECK(memcmp(a + W, a + 2 * W, W * sizeof *a) != 0)) rc = 1;
  long in_place = 0;
  for (long k = 0; k < W; k++) in_place += a[k] == k;
  if (!CHECK(in_place < W / 4)) rc = 1; /* not (nearly) the identity */
  /* With shuffle the windows must also be valid when (N-1) is a multiple of
   * B*T (no tail) and when there is exactly one window. */
  uint32_t small[13];
  for (int k = 0; k < 13; k++) small[k] = (uint32_t)k;
  long one[4];
  if (!CHECK(write_tokens(tmp_path("one.u16"), ZO_DATA_U16, small, 13))) return 1;
  if (shuffle_order(tmp_path("one.u16"), 3, 4, 1, 4, 1, one)) return 1;
  /* N = 2*B*T: the second window would need token N, so there is only one. */
  uint32_t two[24];
  for (int k = 0; k < 24; k++) two[k] = (uint32_t)k;
  if (!CHECK(write_tokens(tmp_path("two.u16"), ZO_DATA_U16, two, 24))) return 1;
  if (shuffle_order(tmp_path("two.u16"), 3, 4, 1, 4, 1, one)) return 1;
  return rc;
}

/* Opens and expects NULL with every substring in the message. */
static int expect_open_error(const char *path, enum zo_data_format fmt, int vocab, int B, int T, const char *s1,
                             const char *s2) {
  struct zo_data *d = zo_data_open(path, fmt, vocab, B, T, false, 0);
  if (!CHECK(d == NULL)) {
    zo_data_close(d);
    return 1;
  }
  const char *msg = zo_last_error();
  int rc = 0;
  if (!CHECK(strstr(msg, path) != NULL)) rc = 1;
  if (!CHECK(strstr(msg, s1) != NULL)) rc = 1;
  if (s2 && !CHECK(strstr(msg, s2) != NULL)) rc = 1;
  if (rc) fprintf(stderr, "  message: %s\n", msg);
  return rc;
}

static void llmc_header(int32_t h[ZO_LLMC_HEADER_INTS], int32_t magic, int32_t version, int32_t n) {
  memset(h, 0, ZO_LLMC_HEADER_INTS * sizeof *h);
  h[0] = magic;
  h[1] = version;
  h[2] = n;
}

/* Header h followed by payload_nbytes zero bytes. */
static bool write_header_payload(const char *path, const int32_t *h, size_t payload_nbytes) {
  size_t nbytes = ZO_LLMC_HEADER_INTS * sizeof *h + payload_nbytes;
  uint8_t *buf = calloc(nbytes, 1);
  memcpy(buf, h, ZO_LLMC_HEADER_INTS * sizeof *h);
  bool ok = write_raw(path, buf, nbytes);
  free(buf);
  return ok;
}

/* Header h followed by n_tokens zero uint16 tokens. */
static bool write_llmc_raw(const char *path, const int32_t *h, size_t n_tokens) {
  return write_header_payload(path, h, n_tokens * 2);
}

static int test_error_wrong_magic(void) {
  int32_t h[ZO_LLMC_HEADER_INTS];
  llmc_header(h, 12345, 1, 100);
  const char *p = tmp_path("magic.bin");
  if (!CHECK(write_llmc_raw(p, h, 100))) return 1;
  /* a text file read as llm.c shows as a wrong magic too */
  const char *t = tmp_path("magic-text.bin");
  if (!CHECK(write_raw(t, "hello world, this is text\n", 26))) return 1;
  return expect_open_error(p, ZO_DATA_LLMC, 50257, 2, 4, "wrong magic 12345", "expected 20240520") ||
         expect_open_error(p, ZO_DATA_LLMC, 50257, 2, 4,
                           "expected 20240520 (uint16 tokens) or 20240801 (uint32 tokens)", "\"u32\"") ||
         expect_open_error(t, ZO_DATA_LLMC, 50257, 2, 4, "wrong magic", "expected 20240520");
}

static int test_error_wrong_version(void) {
  int32_t h[ZO_LLMC_HEADER_INTS];
  llmc_header(h, ZO_LLMC_MAGIC, 2, 100);
  const char *p = tmp_path("version.bin");
  if (!CHECK(write_llmc_raw(p, h, 100))) return 1;
  /* the magic decides the version: each magic with the other's version */
  llmc_header(h, ZO_LLMC_MAGIC, 7, 100);
  const char *q = tmp_path("version-7-narrow-magic.bin");
  if (!CHECK(write_header_payload(q, h, 400))) return 1;
  llmc_header(h, ZO_LLMC32_MAGIC, 1, 100);
  const char *r = tmp_path("version-1-wide-magic.bin");
  if (!CHECK(write_llmc_raw(r, h, 100))) return 1;
  const char *valid = "valid headers: {magic 20240520, version 1} (uint16 tokens) or {magic 20240801, version 7} "
                      "(uint32 tokens)";
  return expect_open_error(p, ZO_DATA_LLMC, 50257, 2, 4, "wrong version 2", "expected 1") ||
         expect_open_error(p, ZO_DATA_LLMC, 50257, 2, 4, valid, NULL) ||
         expect_open_error(q, ZO_DATA_LLMC, 50257, 2, 4, "magic 20240520 has wrong version 7, expected 1", valid) ||
         expect_open_error(r, ZO_DATA_LLMC, 50257, 2, 4, "magic 20240801 has wrong version 1, expected 7", valid);
}

static int test_error_truncated(void) {
  int32_t h[ZO_LLMC_HEADER_INTS];
  llmc_header(h, ZO_LLMC_MAGIC, 1, 100);
  const char *p = tmp_path("trunc.bin");
  if (!CHECK(write_llmc_raw(p, h, 60))) return 1;
  const char *q = tmp_path("trailing.bin");
  if (!CHECK(write_llmc_raw(q, h, 101))) return 1;
  const char *hd = tmp_path("trunc-header.bin");
  if (!CHECK(write_raw(hd, h, 100))) return 1;
  const char *u = tmp_path("odd.u16");
  if (!CHECK(write_raw(u, "abcdefghijklm", 13))) return 1;
  return expect_open_error(p, ZO_DATA_LLMC, 50257, 2, 4, "truncated", "says 100 tokens") ||
         expect_open_error(p, ZO_DATA_LLMC, 50257, 2, 4, "(version 1, uint16 tokens)", NULL) ||
         expect_open_error(p, ZO_DATA_LLMC, 50257, 2, 4, "has 1144 bytes (60 tokens)", NULL) ||
         expect_open_error(q, ZO_DATA_LLMC, 50257, 2, 4, "2 bytes too many", NULL) ||
         expect_open_error(hd, ZO_DATA_LLMC, 50257, 2, 4, "truncated", "shorter than the 1024-byte llm.c header") ||
         expect_open_error(u, ZO_DATA_U16, 50257, 2, 4, "truncated", "13 bytes is odd");
}

static int test_error_truncated_u32(void) {
  int32_t h[ZO_LLMC_HEADER_INTS];
  llmc_header(h, ZO_LLMC32_MAGIC, ZO_LLMC32_VERSION, 100);
  /* a uint16 payload under a version 7 header */
  const char *narrow = tmp_path("v7-narrow.bin");
  if (!CHECK(write_header_payload(narrow, h, 100 * 2))) return 1;
  const char *p = tmp_path("v7-trunc.bin"), *q = tmp_path("v7-trailing.bin"), *q2 = tmp_path("v7-trailing2.bin");
  if (!CHECK(write_header_payload(p, h, 60 * 4))) return 1;
  if (!CHECK(write_header_payload(q, h, 101 * 4))) return 1;
  if (!CHECK(write_header_payload(q2, h, 100 * 4 + 2))) return 1;
  const char *hd = tmp_path("v7-trunc-header.bin");
  if (!CHECK(write_raw(hd, h, 100))) return 1;
  const char *u13 = tmp_path("odd13.u32"), *u14 = tmp_path("odd14.u32");
  if (!CHECK(write_raw(u13, "abcdefghijklm", 13)) || !CHECK(write_raw(u14, "abcdefghijklmn", 14))) return 1;
  return expect_open_error(narrow, ZO_DATA_LLMC, 128256, 2, 4, "truncated", "(version 7, uint32 tokens) says 100 "
                                                                            "tokens (1424 bytes)") ||
         expect_open_error(narrow, ZO_DATA_LLMC, 128256, 2, 4, "has 1224 bytes (50 tokens)",
                           "exactly that many uint16 tokens: a uint16 shard needs the version 1 header") ||
         expect_open_error(p, ZO_DATA_LLMC, 128256, 2, 4, "truncated", "has 1264 bytes (60 tokens)") ||
         expect_open_error(q, ZO_DATA_LLMC, 128256, 2, 4, "says 100 tokens (1424 bytes)", "4 bytes too many") ||
         expect_open_error(q2, ZO_DATA_LLMC, 128256, 2, 4, "1426 bytes: 2 bytes too many", NULL) ||
         expect_open_error(hd, ZO_DATA_LLMC, 128256, 2, 4, "truncated", "shorter than the 1024-byte llm.c header") ||
         expect_open_error(u13, ZO_DATA_U32, 128256, 1, 1, "truncated", "13 bytes is not a multiple of 4") ||
         expect_open_error(u13, ZO_DATA_U32, 128256, 1, 1, "(3 tokens + 1 bytes)", NULL) ||
         expect_open_error(u14, ZO_DATA_U32, 128256, 1, 1, "14 bytes is not a multiple of 4", "format \"u16\"");
}

static int test_read_llmc_header(void) {
  uint16_t toks[5] = {1, 2, 3, 4, 5};
  const char *p = tmp_path("hdr.bin");
  if (!CHECK(zo_data_write_llmc(p, toks, 5) == 0)) return 1;
  size_t n = 0, width = 0;
  int rc = 0;
  if (!CHECK(zo_data_read_llmc_header(p, &n, &width) == 0) || !CHECK(n == 5) || !CHECK(width == 2)) rc = 1;
  if (!CHECK(zo_data_read_llmc_header(p, &n, NULL) == 0) || !CHECK(n == 5)) rc = 1;
  size_t nbytes;
  uint8_t *raw = read_raw(p, &nbytes);
  if (!CHECK(raw != NULL) || !CHECK(nbytes == 1024 + 10)) return 1;
  int32_t h[3];
  memcpy(h, raw, sizeof h);
  if (!CHECK(h[0] == 20240520 && h[1] == 1 && h[2] == 5)) rc = 1;
  if (!CHECK(memcmp(raw + 1024, toks, 10) == 0)) rc = 1;
  free(raw);
  int32_t bad[ZO_LLMC_HEADER_INTS];
  llmc_header(bad, ZO_LLMC_MAGIC, 1, 100);
  if (!CHECK(write_llmc_raw(tmp_path("hdr-trunc.bin"), bad, 99))) return 1;
  if (!CHECK(zo_data_read_llmc_header(tmp_path("hdr-trunc.bin"), &n, &width) == -EINVAL) ||
      !CHECK(strstr(zo_last_error(), "truncated") != NULL))
    rc = 1;
  llmc_header(bad, ZO_LLMC32_MAGIC, 7, 50);
  if (!CHECK(write_header_payload(tmp_path("hdr-v7.bin"), bad, 200))) return 1;
  if (!CHECK(zo_data_read_llmc_header(tmp_path("hdr-v7.bin"), &n, &width) == 0) || !CHECK(n == 50 && width == 4))
    rc = 1;
  if (!CHECK(write_header_payload(tmp_path("hdr-v7-narrow.bin"), bad, 100))) return 1;
  if (!CHECK(zo_data_read_llmc_header(tmp_path("hdr-v7-narrow.bin"), &n, &width) == -EINVAL) ||
      !CHECK(strstr(zo_last_error(), "version 7, uint32 tokens") != NULL))
    rc = 1;
  if (!CHECK(zo_data_read_llmc_header(tmp_path("nope.bin"), &n, &width) == -ENOENT)) rc = 1;
  return rc;
}

static int test_error_too_short(void) {
  uint32_t tok[20] = {0};
  const char *p = tmp_path("short.u16"), *l = tmp_path("short.llmc"), *t = tmp_path("short.txt");
  const char *u = tmp_path("short.u32"), *w = tmp_path("short.llmc32");
  if (!CHECK(write_tokens(p, ZO_DATA_U16, tok, 20))) return 1;
  if (!CHECK(write_tokens(l, ZO_DATA_LLMC, tok, 20))) return 1;
  if (!CHECK(write_tokens(t, ZO_DATA_TEXT, tok, 20))) return 1;
  if (!CHECK(write_tokens32(u, ZO_DATA_U32, tok, 20))) return 1;
  if (!CHECK(write_tokens32(w, ZO_DATA_LLMC, tok, 20))) return 1;
  /* B*T = 20 needs 21 tokens */
  return expect_open_error(p, ZO_DATA_U16, 50257, 4, 5, "too short for one micro-batch", "holds 20 tokens") ||
         expect_open_error(p, ZO_DATA_U16, 50257, 4, 5, "B*T+1 = 4*5+1 = 21", NULL) ||
         expect_open_error(l, ZO_DATA_LLMC, 50257, 4, 5, "too short", "holds 20 tokens") ||
         expect_open_error(u, ZO_DATA_U32, 128256, 4, 5, "too short", "holds 20 tokens") ||
         expect_open_error(w, ZO_DATA_LLMC, 128256, 4, 5, "too short", "holds 20 tokens") ||
         expect_open_error(t, ZO_DATA_TEXT, 256, 1, 20, "too short", "holds 20 tokens");
}

static int test_error_token_over_vocab(void) {
  /* Big enough for several OpenMP chunks: the first bad index is reported. */
  const size_t N = 300000;
  uint32_t *tok = calloc(N, sizeof *tok);
  for (size_t k = 0; k < N; k++) tok[k] = (uint32_t)(k % 1000);
  tok[280001] = 60000;
  tok[250017] = 50257;
  const char *p = tmp_path("vocab.u16"), *l = tmp_path("vocab.llmc");
  int rc = !CHECK(write_tokens(p, ZO_DATA_U16, tok, N)) || !CHECK(write_tokens(l, ZO_DATA_LLMC, tok, N));
  free(tok);
  if (rc) return 1;
  uint8_t text[64];
  for (int k = 0; k < 64; k++) text[k] = (uint8_t)('a' + k % 26);
  text[17] = 200;
  const char *t = tmp_path("vocab.txt");
  if (!CHECK(write_raw(t, text, sizeof text))) return 1;
  rc = expect_open_error(p, ZO_DATA_U16, 50257, 2, 8, "token id 50257 at index 250017", "vocab_size 50257") ||
       expect_open_error(l, ZO_DATA_LLMC, 50257, 2, 8, "token id 50257 at index 250017", "vocab_size 50257") ||
       expect_open_error(t, ZO_DATA_TEXT, 128, 2, 8, "token id 200 at index 17", "vocab_size 128");
  /* with a vocabulary that holds them the same files open */
  struct zo_data *d = zo_data_open(p, ZO_DATA_U16, 60001, 2, 8, false, 0);
  if (!CHECK(d != NULL)) rc = 1;
  zo_data_close(d);
  d = zo_data_open(t, ZO_DATA_TEXT, 256, 2, 8, false, 0);
  if (!CHECK(d != NULL)) rc = 1;
  zo_data_close(d);
  return rc;
}

static int test_error_token_over_vocab_u32(void) {
  const size_t N = 300000;
  const int vocab = 128256;
  uint32_t *tok = calloc(N, sizeof *tok);
  for (size_t k = 0; k < N; k++) tok[k] = (uint32_t)(k * 7 % (size_t)vocab);
  tok[280001] = 200000;
  tok[250017] = 128256;
  const char *p = tmp_path("vocab.u32"), *l = tmp_path("vocab.llmc32");
  int rc = !CHECK(write_tokens32(p, ZO_DATA_U32, tok, N)) || !CHECK(write_tokens32(l, ZO_DATA_LLMC, tok, N));
  if (!rc)
    rc = expect_open_error(p, ZO_DATA_U32, vocab, 2, 8, "token id 128256 at index 250017", "vocab_size 128256") ||
         expect_open_error(l, ZO_DATA_LLMC, vocab, 2, 8, "token id 128256 at index 250017", "vocab_size 128256");
  /* An id that does not fit int32 (the writers refuse it, so raw bytes):
   * the message says so rather than only comparing with vocab_size. */
  tok[250017] = 0;
  tok[123457] = 0x80000000u;
  tok[290000] = 0xffffffffu;
  const char *r = tmp_path("int32.u32"), *s = tmp_path("int32.llmc32");
  int32_t h[ZO_LLMC_HEADER_INTS];
  llmc_header(h, ZO_LLMC32_MAGIC, ZO_LLMC32_VERSION, (int32_t)N);
  uint8_t *buf = malloc(sizeof h + N * sizeof *tok);
  memcpy(buf, h, sizeof h);
  memcpy(buf + sizeof h, tok, N * sizeof *tok);
  if (!rc) rc = !CHECK(write_raw(r, tok, N * sizeof *tok)) || !CHECK(write_raw(s, buf, sizeof h + N * sizeof *tok));
  free(buf);
  if (!rc)
    rc = expect_open_error(r, ZO_DATA_U32, vocab, 2, 8, "token id 2147483648 at index 123457 does not fit int32",
                           "not a token file of format \"u32\"") ||
         expect_open_error(s, ZO_DATA_LLMC, INT32_MAX, 2, 8, "token id 2147483648 at index 123457 does not fit int32",
                           "\"llmc\"");
  /* the writers refuse it before creating anything */
  const char *w = tmp_path("refused.u32"), *ws = tmp_path("refused.llmc32");
  if (!rc && (!CHECK(zo_data_write_u32(w, tok, N) == -EINVAL) ||
              !CHECK(strstr(zo_last_error(), "token id 2147483648 at index 123457 does not fit int32") != NULL) ||
              !CHECK(zo_data_write_llmc32(ws, tok, N) == -EINVAL) ||
              !CHECK(strstr(zo_last_error(), "refused.llmc32") != NULL) || !CHECK(access(w, F_OK) != 0) ||
              !CHECK(access(ws, F_OK) != 0)))
    rc = 1;
  free(tok);
  return rc;
}

static int test_error_empty(void) {
  const char *p = tmp_path("empty.bin");
  if (!CHECK(write_raw(p, "", 0))) return 1;
  return expect_open_error(p, ZO_DATA_TEXT, 256, 1, 1, "is empty", NULL) ||
         expect_open_error(p, ZO_DATA_U16, 256, 1, 1, "is empty", NULL) ||
         expect_open_error(p, ZO_DATA_U32, 256, 1, 1, "is empty", NULL) ||
         expect_open_error(p, ZO_DATA_LLMC, 256, 1, 1, "is empty", NULL);
}

static int test_error_missing(void) {
  return expect_open_error(tmp_path("does-not-exist.bin"), ZO_DATA_U16, 256, 1, 1, "cannot open",
                           "No such file or directory");
}

static int test_error_directory(void) {
  const char *p = tmp_path("adir");
  if (!CHECK(mkdir(p, 0755) == 0)) return 1;
  int rc = expect_open_error(p, ZO_DATA_LLMC, 256, 1, 1, "is a directory", NULL);
  rmdir(p);
  return rc;
}

static int test_format_parse(void) {
  enum zo_data_format f;
  int rc = 0;
  if (!CHECK(zo_data_format_parse("text", &f) == 0 && f == ZO_DATA_TEXT)) rc = 1;
  if (!CHECK(zo_data_format_parse("llmc", &f) == 0 && f == ZO_DATA_LLMC)) rc = 1;
  if (!CHECK(zo_data_format_parse("u16", &f) == 0 && f == ZO_DATA_U16)) rc = 1;
  if (!CHECK(zo_data_format_parse("u32", &f) == 0 && f == ZO_DATA_U32)) rc = 1;
  if (!CHECK(zo_data_format_parse("bin", &f) == -EINVAL) || !CHECK(strstr(zo_last_error(), "'bin'") != NULL) ||
      !CHECK(strstr(zo_last_error(), "\"u32\" (flat uint32 tokens)") != NULL))
    rc = 1;
  for (int k = ZO_DATA_TEXT; k <= ZO_DATA_U32; k++)
    if (!CHECK(zo_data_format_parse(zo_data_format_name((enum zo_data_format)k), &f) == 0 && (int)f == k)) rc = 1;
  if (!CHECK(strcmp(zo_data_format_name(ZO_DATA_LLMC), "llmc") == 0)) rc = 1;
  if (!CHECK(strcmp(zo_data_format_name(ZO_DATA_U32), "u32") == 0)) rc = 1;
  return rc;
}

/* Names in the temp directory that contain ".tmp." */
static int count_temp_files(void) {
  DIR *dir = opendir(tmp_dir);
  int n = 0;
  for (struct dirent *e; dir && (e = readdir(dir));) n += strstr(e->d_name, ".tmp.") != NULL;
  if (dir) closedir(dir);
  return n;
}

static int test_prepare_roundtrip(void) {
  /* three files, bytes 0..255 included, 2 MiB + a bit so the 1 MiB buffer
   * and the train/val cut fall inside chunks */
  const size_t sizes[3] = {1000, (2u << 20) + 77, 5};
  const char *paths[3] = {tmp_path("a.txt"), tmp_path("b.txt"), tmp_path("c.txt")};
  size_t total = sizes[0] + sizes[1] + sizes[2];
  uint8_t *all = malloc(total), *p = all;
  for (int f = 0; f < 3; f++) {
    for (size_t k = 0; k < sizes[f]; k++) p[k] = (uint8_t)(zo_rng_u32() & 0xff);
    if (!CHECK(write_raw(paths[f], p, sizes[f]))) return 1;
    p += sizes[f];
  }
  const char *train = tmp_path("train.bin"), *val = tmp_path("val.bin");
  size_t n_train = 0, n_val = 0;
  int rc = 0;
  if (!CHECK(zo_data_prepare(paths, 3, train, val, 0.1, &n_train, &n_val) == 0)) {
    fprintf(stderr, "  %s\n", zo_last_error());
    free(all);
    return 1;
  }
  size_t want_val = (size_t)((double)total * 0.1);
  if (!CHECK(n_val == want_val) || !CHECK(n_train == total - want_val)) rc = 1;
  size_t nb_train, nb_val;
  uint8_t *rt = read_raw(train, &nb_train), *rv = read_raw(val, &nb_val);
  if (!CHECK(rt && rv) || !CHECK(nb_train == 2 * n_train) || !CHECK(nb_val == 2 * n_val)) rc = 1;
  for (size_t k = 0; !rc && k < total; k++) {
    uint16_t t;
    memcpy(&t, k < n_train ? rt + 2 * k : rv + 2 * (k - n_train), 2);
    if (!CHECK(t == all[k])) {
      fprintf(stderr, "  token %zu\n", k);
      rc = 1;
    }
  }
  free(rt);
  free(rv);
  struct stat st;
  if (!CHECK(stat(train, &st) == 0 && (st.st_mode & 0600) == 0600)) rc = 1;
  if (!CHECK(count_temp_files() == 0)) rc = 1;
  /* the output reads back as a u16 file with the same tokens as the text */
  struct zo_data *dt = zo_data_open(train, ZO_DATA_U16, 256, 4, 16, false, 0);
  struct zo_data *dx = zo_data_open(paths[0], ZO_DATA_TEXT, 256, 4, 16, false, 0);
  if (!CHECK(dt && dx)) rc = 1;
  for (int i = 0; !rc && i < 10; i++) {
    int32_t a[64], b[64], c[64], e[64];
    zo_data_next(dt, a, b);
    zo_data_next(dx, c, e);
    if (!CHECK(memcmp(a, c, sizeof a) == 0) || !CHECK(memcmp(b, e, sizeof b) == 0)) rc = 1;
  }
  zo_data_close(dt);
  zo_data_close(dx);
  free(all);

  /* Failures leave nothing behind and the old outputs untouched. */
  const char *bad[2] = {paths[0], tmp_path("missing.txt")};
  if (!CHECK(zo_data_prepare(bad, 2, train, val, 0.1, NULL, NULL) == -ENOENT) ||
      !CHECK(strstr(zo_last_error(), "missing.txt") != NULL))
    rc = 1;
  const char *tiny[1] = {paths[2]};
  if (!CHECK(zo_data_prepare(tiny, 1, train, val, 0.1, NULL, NULL) == -EINVAL) ||
      !CHECK(strstr(zo_last_error(), "val split is empty") != NULL))
    rc = 1;
  if (!CHECK(zo_data_prepare(paths, 3, train, val, 1.0, NULL, NULL) == -EINVAL)) rc = 1;
  if (!CHECK(zo_data_prepare(paths, 3, train, NULL, 0.1, NULL, NULL) == -EINVAL)) rc = 1;
  if (!CHECK(count_temp_files() == 0)) rc = 1;
  if (!CHECK(stat(train, &st) == 0 && (size_t)st.st_size == 2 * n_train)) rc = 1;
  /* No val output with val fraction 0: everything is train. */
  const char *train2 = tmp_path("train2.bin");
  if (!CHECK(zo_data_prepare(tiny, 1, train2, NULL, 0.0, &n_train, &n_val) == 0) || !CHECK(n_train == 5) ||
      !CHECK(n_val == 0))
    rc = 1;
  /* An output in a directory that does not exist */
  if (!CHECK(zo_data_prepare(tiny, 1, tmp_path("no/such/dir.bin"), NULL, 0.0, NULL, NULL) == -ENOENT)) rc = 1;
  return rc;
}

int main(void) {
  static const struct zo_test tests[] = {
      ZO_TEST(order_text),
      ZO_TEST(order_u16),
      ZO_TEST(order_llmc),
      ZO_TEST(order_u32),
      ZO_TEST(order_llmc32),
      ZO_TEST(order_long),
      ZO_TEST(roundtrip_u32),
      ZO_TEST(same_stream_every_format),
      ZO_TEST(ids_above_u16),
      ZO_TEST(seek_sequential),
      ZO_TEST(seek_shuffle),
      ZO_TEST(shuffle_permutation),
      ZO_TEST(rank_slices_sequential),
      ZO_TEST(rank_slices_shuffle),
      ZO_TEST(error_wrong_magic),
      ZO_TEST(error_wrong_version),
      ZO_TEST(error_truncated),
      ZO_TEST(error_truncated_u32),
      ZO_TEST(read_llmc_header),
      ZO_TEST(error_too_short),
      ZO_TEST(error_token_over_vocab),
      ZO_TEST(error_token_over_vocab_u32),
      ZO_TEST(error_empty),
      ZO_TEST(error_missing),
      ZO_TEST(error_directory),
      ZO_TEST(format_parse),
      ZO_TEST(prepare_roundtrip),
  };
  if (zo_test_mkdtemp(tmp_dir, sizeof tmp_dir, "data")) return 1;
  struct zo_test_counts counts = zo_test_run(tests, sizeof tests / sizeof tests[0]);
  zo_test_rmtree(tmp_dir);
  return zo_test_report(counts);
}
