/* Loss masks beside token files (PATH.mask, zo/data.h): masked targets come
 * out as -1 in every micro-batch, with and without shuffle, over the wrap
 * at the end of the file and in every rank's rows; zo_data_count_targets
 * equals the trained targets the ranks' micro-batches hold together; a mask
 * of the wrong size, with a byte other than 0 and 1, or of zeros only (no
 * target trained) is refused naming both; the mask writer round-trips. Expected values come from plain loops
 * over the arrays the files were written from. */
#include "zo/data.h"

#include "zo_test.h"

enum { N = 1000, V = 50, B = 3, T = 7 };

static char dir[256];
static uint16_t tokens[N];
static uint8_t mask[N];

static const char *path(const char *name) {
  static char buf[4][512];
  static int k;
  char *p = buf[k++ % 4];
  snprintf(p, sizeof buf[0], "%s/%s", dir, name);
  return p;
}

static int setup(void) {
  uint64_t s = 42;
  for (int k = 0; k < N; k++) {
    tokens[k] = (uint16_t)(zo_splitmix64(&s) % V);
    mask[k] = (uint8_t)(zo_splitmix64(&s) % 3 != 0);
  }
  if (zo_data_write_u16(path("t.bin"), tokens, N) || zo_data_write_mask(path("t.bin"), mask, N) ||
      zo_data_write_u16(path("plain.bin"), tokens, N))
    return zo_test_fail("writing the files: %s", zo_last_error());
  return 0;
}

/* Every micro-batch of n_ranks ranks against the unmasked file's targets
 * with the mask applied by hand; the counts against zo_data_count_targets. */
static int check_stream(bool shuffle, int n_ranks, int n_batches) {
  int bad = 0;
  for (int r = 0; r < n_ranks && !bad; r++) {
    struct zo_data *d = zo_data_open_rank(path("t.bin"), ZO_DATA_U16, V, B, T, shuffle, 7, r, n_ranks);
    struct zo_data *p = zo_data_open_rank(path("plain.bin"), ZO_DATA_U16, V, B, T, shuffle, 7, r, n_ranks);
    if (!d || !p) return zo_test_fail("open: %s", zo_last_error());
    if (!zo_data_has_mask(d) || zo_data_has_mask(p)) bad = zo_test_fail("has_mask wrong");
    int32_t in[B * T], tg[B * T], pin[B * T], ptg[B * T];
    for (int i = 0; i < n_batches && !bad; i++) {
      if (zo_data_next(d, in, tg) || zo_data_next(p, pin, ptg)) return zo_test_fail("next: %s", zo_last_error());
      /* Inputs and unmasked targets are the plain file's; without shuffle
       * the window starts where zo/data.h's "Order" says, so each target's
       * mask byte is known: token k + 1 of the window is target k. */
      for (int k = 0; k < B * T && !bad; k++) {
        if (in[k] != pin[k]) bad = zo_test_fail("rank %d batch %d: input %d differs", r, i, k);
        if (tg[k] != -1 && tg[k] != ptg[k]) bad = zo_test_fail("rank %d batch %d: target %d altered", r, i, k);
        if (!shuffle) {
          const size_t start = ((size_t)i * n_ranks * B * T + (size_t)r * B * T) % N;
          const int want = mask[(start + (size_t)k + 1) % N] ? ptg[k] : -1;
          if (tg[k] != want) bad = zo_test_fail("rank %d batch %d target %d: %d, want %d", r, i, k, tg[k], want);
        }
      }
    }
    zo_data_close(d);
    zo_data_close(p);
  }
  /* The count over the step equals what the ranks' micro-batches hold. */
  for (int first = 0; first < n_batches - 2 && !bad; first += 3) {
    size_t want = 0, got = 0;
    for (int r = 0; r < n_ranks; r++) {
      struct zo_data *d = zo_data_open_rank(path("t.bin"), ZO_DATA_U16, V, B, T, shuffle, 7, r, n_ranks);
      int32_t in[B * T], tg[B * T];
      zo_data_seek(d, (uint64_t)first);
      for (int j = 0; j < 3; j++) {
        zo_data_next(d, in, tg);
        for (int k = 0; k < B * T; k++) want += tg[k] >= 0;
      }
      if (r == n_ranks - 1 && zo_data_count_targets(d, (uint64_t)first, 3, &got))
        bad = zo_test_fail("count: %s", zo_last_error());
      zo_data_close(d);
    }
    if (!bad && got != want) bad = zo_test_fail("count_targets(%d, 3) = %zu, the batches hold %zu", first, got, want);
  }
  return bad;
}

static int test_unshuffled_wraps(void) { return check_stream(false, 1, 3 * N / (B * T)); }
static int test_shuffled(void) { return check_stream(true, 1, 2 * N / (B * T)); }
static int test_ranks(void) { return check_stream(false, 3, N / (B * T)) || check_stream(true, 2, 30); }

static int test_bad_masks_refused(void) {
  int bad = 0;
  uint8_t m[N];
  memcpy(m, mask, N);
  FILE *f = fopen(path("short.bin.mask"), "wb");
  if (!f || fwrite(m, 1, N - 1, f) != N - 1 || fclose(f)) return zo_test_fail("write");
  if (zo_data_write_u16(path("short.bin"), tokens, N)) return zo_test_fail("write");
  struct zo_data *d = zo_data_open(path("short.bin"), ZO_DATA_U16, V, B, T, false, 1);
  if (d || !strstr(zo_last_error(), "999 bytes") || !strstr(zo_last_error(), "1000 tokens"))
    bad = zo_test_fail("short mask: %s", d ? "opened" : zo_last_error());
  zo_data_close(d);
  m[123] = 2;
  f = fopen(path("two.bin.mask"), "wb");
  if (!f || fwrite(m, 1, N, f) != N || fclose(f)) return zo_test_fail("write");
  if (zo_data_write_u16(path("two.bin"), tokens, N)) return zo_test_fail("write");
  d = zo_data_open(path("two.bin"), ZO_DATA_U16, V, B, T, false, 1);
  if (d || !strstr(zo_last_error(), "byte 123 is 2")) bad = zo_test_fail("byte 2: %s", d ? "opened" : zo_last_error());
  zo_data_close(d);
  if (zo_data_write_mask(path("x.bin"), m, N) != -EINVAL) bad = zo_test_fail("the writer took a 2");
  /* A mask of zeros trains nothing: every step would log a loss of 0. */
  memset(m, 0, N);
  if (zo_data_write_u16(path("zero.bin"), tokens, N) || zo_data_write_mask(path("zero.bin"), m, N))
    return zo_test_fail("write: %s", zo_last_error());
  d = zo_data_open(path("zero.bin"), ZO_DATA_U16, V, B, T, false, 1);
  if (d || !strstr(zo_last_error(), "zero.bin.mask") || !strstr(zo_last_error(), "0 of 1000 tokens trained"))
    bad = zo_test_fail("zero mask: %s", d ? "opened" : zo_last_error());
  zo_data_close(d);
  /* One trained token is enough to open. */
  m[N / 2] = 1;
  if (zo_data_write_mask(path("zero.bin"), m, N)) return zo_test_fail("write: %s", zo_last_error());
  d = zo_data_open(path("zero.bin"), ZO_DATA_U16, V, B, T, false, 1);
  if (!d) bad = zo_test_fail("one trained token: %s", zo_last_error());
  zo_data_close(d);
  return bad;
}

int main(void) {
  if (zo_test_mkdtemp(dir, sizeof dir, "data-mask")) return 1;
  if (setup()) return 1;
  static const struct zo_test tests[] = {ZO_TEST(unshuffled_wraps), ZO_TEST(shuffled), ZO_TEST(ranks),
                                         ZO_TEST(bad_masks_refused)};
  const int rc = ZO_TEST_MAIN(tests);
  zo_test_rmtree(dir);
  return rc;
}
