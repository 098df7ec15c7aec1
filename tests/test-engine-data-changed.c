/* A token file changed under a running job: truncated (once a SIGBUS from
 * the mapped pages, now -EIO naming the file and both sizes) or rewritten
 * with ids beyond the vocabulary (-EINVAL, never an out-of-range embedding
 * index), for flat uint16, uint32, text and llm.c files, and in llm.c shards
 * the header excluded. Micro-batches read before the change are unaffected. */
#include "zo/data.h"
#include "zo_test.h"

#include <fcntl.h>

static char tmp_dir[256];

static int write_u16(const char *path, size_t n, unsigned vocab) {
  uint16_t *t = zo_test_xmalloc(n * sizeof *t);
  for (size_t i = 0; i < n; i++) t[i] = (uint16_t)(i * 7 % vocab);
  const int err = zo_data_write_u16(path, t, n);
  free(t);
  return err;
}

/* Opens a file of n tokens in fmt (B=2, T=16), reads one micro-batch,
 * truncates the file to keep_nbytes and reads until the stream reaches the
 * cut: wants -EIO with a message naming the file and "changed". */
static int truncated_case(enum zo_data_format fmt, const char *name, size_t keep_nbytes) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
  const size_t n = 4096;
  int err = 0;
  if (fmt == ZO_DATA_LLMC) {
    uint16_t *t = zo_test_xmalloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = (uint16_t)(i % 200);
    err = zo_data_write_llmc(path, t, n);
    free(t);
  } else if (fmt == ZO_DATA_U32) {
    uint32_t *t = zo_test_xmalloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = (uint32_t)(i % 200);
    err = zo_data_write_u32(path, t, n);
    free(t);
  } else if (fmt == ZO_DATA_TEXT) {
    FILE *f = fopen(path, "wb");
    ZO_REQUIRE(f);
    for (size_t i = 0; i < n; i++) fputc('a' + (int)(i % 26), f);
    fclose(f);
  } else {
    err = write_u16(path, n, 200);
  }
  ZO_REQUIRE(err == 0);
  struct zo_data *d = zo_data_open(path, fmt, 256, 2, 16, false, 1);
  ZO_REQUIRE(d);
  int32_t in[32], tg[32];
  ZO_REQUIRE(zo_data_next(d, in, tg) == 0);
  ZO_REQUIRE(truncate(path, (off_t)keep_nbytes) == 0);
  int rc = 0;
  for (int i = 0; i < 200 && rc == 0; i++) rc = zo_data_next(d, in, tg);
  ZO_REQUIRE(rc == -EIO);
  ZO_REQUIRE(strstr(zo_last_error(), path) && strstr(zo_last_error(), "changed under the running job"));
  fprintf(stderr, "  %s: %s\n", name, zo_last_error());
  zo_data_close(d);
  return 0;
}

static int test_truncated_u16(void) { return truncated_case(ZO_DATA_U16, "t.u16", 1000); }
static int test_truncated_u32(void) { return truncated_case(ZO_DATA_U32, "t.u32", 1000); }
static int test_truncated_text(void) { return truncated_case(ZO_DATA_TEXT, "t.txt", 1000); }
static int test_truncated_llmc(void) { return truncated_case(ZO_DATA_LLMC, "t.llmc", 1024 + 600); }
static int test_truncated_to_zero(void) { return truncated_case(ZO_DATA_U16, "z.u16", 0); }

/* The file rewritten in place with ids >= vocab_size after open. */
static int test_rewritten_over_vocab(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/w.u16", tmp_dir);
  ZO_REQUIRE(write_u16(path, 4096, 200) == 0);
  struct zo_data *d = zo_data_open(path, ZO_DATA_U16, 200, 2, 16, false, 1);
  ZO_REQUIRE(d);
  int32_t in[32], tg[32];
  ZO_REQUIRE(zo_data_next(d, in, tg) == 0);
  const int fd = open(path, O_WRONLY);
  ZO_REQUIRE(fd >= 0);
  const uint16_t big[64] = {[0 ... 63] = 60000};
  ZO_REQUIRE(pwrite(fd, big, sizeof big, 33 * 2) == (ssize_t)sizeof big);
  close(fd);
  ZO_REQUIRE(zo_data_next(d, in, tg) == -EINVAL);
  ZO_REQUIRE(strstr(zo_last_error(), "60000") && strstr(zo_last_error(), "changed under the running job"));
  zo_data_close(d);
  return 0;
}

/* Unchanged files read the same stream as before (the pread path wraps). */
static int test_wraps_unchanged(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/u.u16", tmp_dir);
  const size_t n = 101;
  ZO_REQUIRE(write_u16(path, n, 200) == 0);
  struct zo_data *d = zo_data_open(path, ZO_DATA_U16, 200, 2, 16, false, 1);
  ZO_REQUIRE(d);
  int32_t in[32], tg[32];
  for (uint64_t i = 0; i < 20; i++) {
    ZO_REQUIRE(zo_data_next(d, in, tg) == 0);
    for (size_t k = 0; k < 32; k++) {
      ZO_REQUIRE(in[k] == (int32_t)((i * 32 + k) % n * 7 % 200));
      ZO_REQUIRE(tg[k] == (int32_t)((i * 32 + k + 1) % n * 7 % 200));
    }
  }
  zo_data_close(d);
  return 0;
}

int main(void) {
  static const struct zo_test tests[] = {
      ZO_TEST(truncated_u16),  ZO_TEST(truncated_u32),          ZO_TEST(truncated_text),
      ZO_TEST(truncated_llmc), ZO_TEST(truncated_to_zero),      ZO_TEST(rewritten_over_vocab),
      ZO_TEST(wraps_unchanged),
  };
  if (zo_test_mkdtemp(tmp_dir, sizeof tmp_dir, "data-changed")) return 1;
  struct zo_test_counts counts = zo_test_run(tests, ZO_ARRAY_LEN(tests));
  zo_test_rmtree(tmp_dir);
  return zo_test_report(counts);
}
