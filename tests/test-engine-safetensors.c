/* safetensors reader/writer and the file-system helpers under it: round trips
 * over every dtype with metadata, the writer's exact header bytes, one
 * expected message per malformed header (and truncations and random header
 * mutations that must fail cleanly, never read out of bounds), bf16/f16
 * widening against known bit patterns, atomic replacement that leaves no temp
 * file and keeps the old file on injected failures (missing directory, file
 * size limit hit mid-write, rename over a directory), directory publication
 * and symlink-safe removal. When /usr/bin/python3 exists it re-reads the
 * writer's file with struct/json (and torch, safetensors when installed). */
#include "zo/fsutil.h"
#include "zo/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "zo_test.h"

static char tmp_dir[] = "/tmp/zo-test-safetensors-XXXXXX";

#define CHECK(cond) ZO_EXPECT(cond)

/* Path of name in the temp directory; valid for the next 31 calls. */
static const char *tmp_path(const char *name) { return zo_test_path(tmp_dir, name); }

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rng_u32(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng_state >> 33);
}

static bool write_plain(const char *path, const void *data, size_t n) {
  FILE *fp = fopen(path, "wb");
  if (!fp) return false;
  bool ok = fwrite(data, 1, n, fp) == n;
  return fclose(fp) == 0 && ok;
}

static bool file_equals(const char *path, const void *data, size_t n) {
  void *got = NULL;
  size_t got_n = 0;
  if (zo_read_file(path, &got, &got_n, SIZE_MAX) < 0) return false;
  bool ok = got_n == n && (n == 0 || memcmp(got, data, n) == 0);
  free(got);
  return ok;
}

static bool exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

/* Number of entries in dir whose name contains ".tmp.". */
static int count_temp_files(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) n += strstr(e->d_name, ".tmp.") != NULL;
  closedir(d);
  return n;
}

static bool error_has(const char *needle) {
  bool ok = strstr(zo_last_error(), needle) != NULL;
  if (!ok) fprintf(stderr, "  expected \"%s\" in the message \"%s\"\n", needle, zo_last_error());
  return ok;
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* ---- fsutil ------------------------------------------------------------ */

static int test_crc32(void) {
  int bad = 0;
  bad += !CHECK(zo_crc32(0, "123456789", 9) == 0xCBF43926u);
  uint32_t c = zo_crc32(0, "1234", 4);
  bad += !CHECK(zo_crc32(c, "56789", 5) == 0xCBF43926u);
  bad += !CHECK(zo_crc32(0x1234u, NULL, 0) == 0x1234u);
  bad += !CHECK(zo_crc32(0, "", 0) == 0);
  return bad;
}

static int test_atomic_write(void) {
  int bad = 0;
  const char *p = tmp_path("atomic.bin");
  bad += !CHECK(zo_write_file_atomic(p, "hello", 5) == 0);
  bad += !CHECK(file_equals(p, "hello", 5));
  struct stat st;
  bad += !CHECK(stat(p, &st) == 0 && (st.st_mode & 07777) == 0644);
  char big[100000];
  for (size_t i = 0; i < sizeof big; i++) big[i] = (char)rng_u32();
  bad += !CHECK(zo_write_file_atomic(p, big, sizeof big) == 0);
  bad += !CHECK(file_equals(p, big, sizeof big));
  bad += !CHECK(zo_write_file_atomic(p, NULL, 0) == 0);
  bad += !CHECK(file_equals(p, "", 0));
  bad += !CHECK(count_temp_files(tmp_dir) == 0);
  bad += !CHECK(unlink(p) == 0);
  return bad;
}

static int test_atomic_stream(void) {
  int bad = 0;
  const char *p = tmp_path("stream.bin");
  bad += !CHECK(zo_write_file_atomic(p, "old", 3) == 0);

  struct zo_atomic_file f;
  bad += !CHECK(zo_atomic_file_begin(&f, p) == 0);
  bad += !CHECK(zo_atomic_file_write(&f, "abc", 3) == 0);
  bad += !CHECK(count_temp_files(tmp_dir) == 1);
  zo_atomic_file_abort(&f);
  zo_atomic_file_abort(&f); /* idempotent */
  bad += !CHECK(file_equals(p, "old", 3));
  bad += !CHECK(count_temp_files(tmp_dir) == 0);

  bad += !CHECK(zo_atomic_file_begin(&f, p) == 0);
  for (int i = 0; i < 10; i++) bad += !CHECK(zo_atomic_file_write(&f, "0123456789" + i, 1) == 0);
  bad += !CHECK(zo_atomic_file_write(&f, NULL, 0) == 0);
  bad += !CHECK(f.nbytes == 10);
  bad += !CHECK(file_equals(p, "old", 3)); /* invisible until commit */
  bad += !CHECK(zo_atomic_file_commit(&f) == 0);
  zo_atomic_file_abort(&f); /* harmless after commit */
  bad += !CHECK(file_equals(p, "0123456789", 10));
  bad += !CHECK(count_temp_files(tmp_dir) == 0);
  bad += !CHECK(unlink(p) == 0);
  return bad;
}

static int test_atomic_missing_dir(void) {
  int bad = 0;
  const char *p = tmp_path("no/such/dir/file.bin");
  bad += !CHECK(zo_write_file_atomic(p, "x", 1) == -ENOENT);
  bad += !CHECK(error_has(p) && error_has(strerror(ENOENT)));
  struct zo_atomic_file f;
  bad += !CHECK(zo_atomic_file_begin(&f, p) == -ENOENT);
  zo_atomic_file_abort(&f); /* harmless after a failed begin */
  return bad;
}

/* RLIMIT_FSIZE makes the kernel cut the write short and then fail it with
 * EFBIG: the same path as ENOSPC or EIO half way through a checkpoint. */
static int test_atomic_fails_mid_write(void) {
  int bad = 0;
  const char *p = tmp_path("limited.bin");
  bad += !CHECK(zo_write_file_atomic(p, "old contents", 12) == 0);
  size_t n = 1 << 20;
  char *big = calloc(n, 1);
  struct rlimit saved, lim;
  bad += !CHECK(big && getrlimit(RLIMIT_FSIZE, &saved) == 0);
  if (bad) goto out;
  void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
  lim = saved;
  lim.rlim_cur = 64 << 10;
  bad += !CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  int err = zo_write_file_atomic(p, big, n);
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, old_handler);
  bad += !CHECK(err == -EFBIG);
  bad += !CHECK(error_has(p) && error_has(strerror(EFBIG)) && error_has("after 65536 bytes"));
  bad += !CHECK(file_equals(p, "old contents", 12));
  bad += !CHECK(count_temp_files(tmp_dir) == 0);

  /* The same through the streaming API, failing on a later chunk. */
  struct zo_atomic_file f;
  bad += !CHECK(zo_atomic_file_begin(&f, p) == 0);
  bad += !CHECK(zo_atomic_file_write(&f, big, 32 << 10) == 0);
  signal(SIGXFSZ, SIG_IGN);
  bad += !CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  err = zo_atomic_file_write(&f, big, 64 << 10);
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, old_handler);
  bad += !CHECK(err == -EFBIG && f.fd == -1);
  zo_atomic_file_abort(&f);
  bad += !CHECK(file_equals(p, "old contents", 12));
  bad += !CHECK(count_temp_files(tmp_dir) == 0);
  unlink(p);
out:
  free(big);
  return bad;
}

/* The rename is the last step: failing there must still clean up. */
static int test_atomic_rename_fails(void) {
  int bad = 0;
  const char *d = tmp_path("is-a-dir");
  bad += !CHECK(zo_mkdir_p(tmp_path("is-a-dir/sub"), 0755) == 0);
  int err = zo_write_file_atomic(d, "x", 1);
  bad += !CHECK(err == -EISDIR || err == -ENOTEMPTY || err == -EEXIST);
  bad += !CHECK(error_has(d));
  bad += !CHECK(exists(tmp_path("is-a-dir/sub")));
  bad += !CHECK(count_temp_files(tmp_dir) == 0);
  bad += !CHECK(zo_remove_tree(d) == 0);
  return bad;
}

/* Root ignores directory permissions, so as root the attempt runs in a child
 * that has dropped to nobody (65534). */
static int test_atomic_readonly_dir(void) {
  int bad = 0;
  const char *d = tmp_path("ro");
  const char *p = tmp_path("ro/file");
  bad += !CHECK(zo_mkdir_p(d, 0755) == 0 && zo_write_file_atomic(p, "keep", 4) == 0);
  bad += !CHECK(chmod(d, 0555) == 0 && chmod(tmp_dir, 0755) == 0);
  if (bad) return bad;
  fflush(stdout);
  fflush(stderr);
  bool as_child = geteuid() == 0;
  pid_t pid = as_child ? fork() : 0;
  if (pid == 0) {
    if (as_child && (setgid(65534) < 0 || setuid(65534) < 0)) {
      perror("  dropping to uid 65534");
      _exit(1);
    }
    int child_bad = 0;
    child_bad += !CHECK(zo_write_file_atomic(p, "lost", 4) == -EACCES);
    child_bad += !CHECK(error_has(p) && error_has(strerror(EACCES)));
    if (as_child) _exit(child_bad ? 1 : 0);
    bad += child_bad;
  } else {
    int status = 0;
    bad += !CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  bad += !CHECK(chmod(d, 0755) == 0 && chmod(tmp_dir, 0700) == 0);
  bad += !CHECK(file_equals(p, "keep", 4) && count_temp_files(d) == 0);
  bad += !CHECK(zo_remove_tree(d) == 0);
  return bad;
}

static int test_mkdir_p(void) {
  int bad = 0;
  bad += !CHECK(zo_mkdir_p(tmp_path("m/a/b/c"), 0755) == 0);
  bad += !CHECK(zo_mkdir_p(tmp_path("m/a/b/c"), 0755) == 0);
  bad += !CHECK(zo_mkdir_p(tmp_path("m/a//x/"), 0755) == 0);
  struct stat st;
  bad += !CHECK(stat(tmp_path("m/a/b/c"), &st) == 0 && S_ISDIR(st.st_mode));
  bad += !CHECK(stat(tmp_path("m/a/x"), &st) == 0 && S_ISDIR(st.st_mode));
  bad += !CHECK(zo_write_file_atomic(tmp_path("m/file"), "f", 1) == 0);
  bad += !CHECK(zo_mkdir_p(tmp_path("m/file/sub"), 0755) == -ENOTDIR);
  bad += !CHECK(error_has(tmp_path("m/file")));
  bad += !CHECK(zo_mkdir_p(tmp_path("m/file"), 0755) == -ENOTDIR);
  bad += !CHECK(zo_mkdir_p("", 0755) == -EINVAL);
  bad += !CHECK(zo_remove_tree(tmp_path("m")) == 0);
  return bad;
}

static int test_rename_atomic_dir(void) {
  int bad = 0;
  const char *dst = tmp_path("ckpt");
  bad += !CHECK(zo_mkdir_p(tmp_path("ckpt.tmp/sub"), 0755) == 0);
  bad += !CHECK(zo_write_file_atomic(tmp_path("ckpt.tmp/a"), "v1", 2) == 0);
  bad += !CHECK(zo_rename_atomic_dir(tmp_path("ckpt.tmp"), dst) == 0);
  bad += !CHECK(file_equals(tmp_path("ckpt/a"), "v1", 2) && !exists(tmp_path("ckpt.tmp")));

  /* Replacing a non-empty directory swaps it and removes the old tree. */
  bad += !CHECK(zo_mkdir_p(tmp_path("ckpt.tmp"), 0755) == 0);
  bad += !CHECK(zo_write_file_atomic(tmp_path("ckpt.tmp/b"), "v2", 2) == 0);
  bad += !CHECK(zo_rename_atomic_dir(tmp_path("ckpt.tmp"), dst) == 0);
  bad += !CHECK(file_equals(tmp_path("ckpt/b"), "v2", 2));
  bad += !CHECK(!exists(tmp_path("ckpt/a")) && !exists(tmp_path("ckpt/sub")));
  bad += !CHECK(!exists(tmp_path("ckpt.tmp")));

  bad += !CHECK(zo_write_file_atomic(tmp_path("plain"), "p", 1) == 0);
  bad += !CHECK(zo_rename_atomic_dir(tmp_path("plain"), dst) == -ENOTDIR);
  bad += !CHECK(zo_rename_atomic_dir(tmp_path("missing"), dst) == -ENOENT);
  bad += !CHECK(error_has(tmp_path("missing")));
  bad += !CHECK(file_equals(tmp_path("ckpt/b"), "v2", 2));
  bad += !CHECK(zo_remove_tree(dst) == 0 && zo_remove_tree(tmp_path("plain")) == 0);
  bad += !CHECK(zo_fsync_dir(tmp_dir) == 0);
  bad += !CHECK(zo_fsync_dir(tmp_path("missing")) == -ENOENT);
  return bad;
}

static int test_remove_tree_symlinks(void) {
  int bad = 0;
  /* outside/ must survive the removal of tree/, which links into it. */
  bad += !CHECK(zo_mkdir_p(tmp_path("outside/deep"), 0755) == 0);
  bad += !CHECK(zo_write_file_atomic(tmp_path("outside/deep/keep"), "k", 1) == 0);
  bad += !CHECK(zo_mkdir_p(tmp_path("tree/a/b/c"), 0755) == 0);
  bad += !CHECK(zo_write_file_atomic(tmp_path("tree/a/f1"), "1", 1) == 0);
  bad += !CHECK(zo_write_file_atomic(tmp_path("tree/a/b/c/f2"), "2", 1) == 0);
  bad += !CHECK(symlink(tmp_path("outside"), tmp_path("tree/a/link-dir")) == 0);
  bad += !CHECK(symlink(tmp_path("outside/deep/keep"), tmp_path("tree/link-file")) == 0);
  bad += !CHECK(symlink("/nonexistent/target", tmp_path("tree/a/b/dangling")) == 0);
  bad += !CHECK(zo_remove_tree(tmp_path("tree")) == 0);
  bad += !CHECK(!exists(tmp_path("tree")));
  bad += !CHECK(file_equals(tmp_path("outside/deep/keep"), "k", 1));

  /* A symlink given as the root is unlinked, its target kept. */
  bad += !CHECK(symlink(tmp_path("outside"), tmp_path("root-link")) == 0);
  bad += !CHECK(zo_remove_tree(tmp_path("root-link")) == 0);
  bad += !CHECK(!exists(tmp_path("root-link")) && file_equals(tmp_path("outside/deep/keep"), "k", 1));

  bad += !CHECK(zo_remove_tree(tmp_path("missing")) == -ENOENT);
  bad += !CHECK(error_has(tmp_path("missing")));
  bad += !CHECK(zo_remove_tree(tmp_path("outside")) == 0 && !exists(tmp_path("outside")));
  return bad;
}

static int test_read_file(void) {
  int bad = 0;
  const char *p = tmp_path("read.txt");
  bad += !CHECK(zo_write_file_atomic(p, "abcdef", 6) == 0);
  void *data = NULL;
  size_t n = 0;
  bad += !CHECK(zo_read_file(p, &data, &n, 6) == 0 && n == 6 && !memcmp(data, "abcdef", 7));
  free(data);
  bad += !CHECK(zo_read_file(p, &data, &n, 5) == -EFBIG && data == NULL);
  bad += !CHECK(error_has(p));
  bad += !CHECK(zo_read_file(tmp_path("missing"), &data, &n, 100) == -ENOENT);
  bad += !CHECK(zo_read_file(tmp_dir, &data, &n, 100) == -EISDIR);
  bad += !CHECK(zo_write_file_atomic(p, NULL, 0) == 0);
  bad += !CHECK(zo_read_file(p, &data, &n, 100) == 0 && n == 0 && ((char *)data)[0] == '\0');
  free(data);
  unlink(p);
  return bad;
}

/* ---- conversions ------------------------------------------------------- */

static int test_f16_bf16_bits(void) {
  static const struct {
    uint16_t h;
    uint32_t f;
  } f16[] = {
      {0x0000, 0x00000000}, {0x8000, 0x80000000}, {0x3c00, 0x3f800000}, {0xc000, 0xc0000000},
      {0x7bff, 0x477fe000}, /* 65504, the largest half */
      {0x0400, 0x38800000}, /* 2^-14, the smallest normal */
      {0x0001, 0x33800000}, /* 2^-24, the smallest subnormal */
      {0x8001, 0xb3800000}, {0x0200, 0x38000000}, {0x03ff, 0x387fc000}, /* 1023 * 2^-24 */
      {0x3555, 0x3eaaa000}, {0x7c00, 0x7f800000}, {0xfc00, 0xff800000},
      {0x7e00, 0x7fc00000}, {0x7c01, 0x7f802000}, {0xfe01, 0xffc02000},
  };
  static const struct {
    uint16_t h;
    uint32_t f;
  } bf16[] = {
      {0x0000, 0x00000000}, {0x8000, 0x80000000}, {0x3f80, 0x3f800000}, {0xbf80, 0xbf800000},
      {0x4049, 0x40490000}, {0x0001, 0x00010000}, {0x7f80, 0x7f800000}, {0xff80, 0xff800000},
      {0x7fc1, 0x7fc10000}, {0x7f7f, 0x7f7f0000},
  };
  int bad = 0;
  for (size_t i = 0; i < sizeof f16 / sizeof f16[0]; i++) {
    uint32_t got = f32_bits(zo_st_f16_to_f32(f16[i].h));
    if (got != f16[i].f) {
      fprintf(stderr, "  f16 0x%04x -> 0x%08x, expected 0x%08x\n", f16[i].h, got, f16[i].f);
      bad++;
    }
  }
  for (size_t i = 0; i < sizeof bf16 / sizeof bf16[0]; i++) {
    uint32_t got = f32_bits(zo_st_bf16_to_f32(bf16[i].h));
    if (got != bf16[i].f) {
      fprintf(stderr, "  bf16 0x%04x -> 0x%08x, expected 0x%08x\n", bf16[i].h, got, bf16[i].f);
      bad++;
    }
  }
  bad += !CHECK(zo_st_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
  bad += !CHECK(zo_st_f16_to_f32(0x03ff) == 1023.0f * ldexpf(1.0f, -24));
#ifdef __FLT16_MAX__
  /* Every half against the compiler's own conversion. */
  int mismatches = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    uint16_t hb = (uint16_t)h;
    _Float16 x;
    memcpy(&x, &hb, 2);
    float ref = (float)x, got = zo_st_f16_to_f32(hb);
    bool same = isnan(ref) ? isnan(got) : f32_bits(ref) == f32_bits(got);
    if (!same && mismatches++ < 5) fprintf(stderr, "  f16 0x%04x -> %a, _Float16 says %a\n", h, got, ref);
  }
  bad += !CHECK(mismatches == 0);
#endif
  return bad;
}

static int test_read_f32(void) {
  int bad = 0;
  uint16_t bf[3] = {0x3f80, 0xc000, 0x4049};
  uint16_t hf[3] = {0x3c00, 0x0001, 0x7c00};
  unsigned char f32_unaligned[1 + 3 * sizeof(float)];
  float fv[3] = {1.5f, -0.25f, 3e38f};
  memcpy(f32_unaligned + 1, fv, sizeof fv);
  int64_t shape[1] = {3};
  struct zo_st_tensor t = {.name = "t", .file = "mem", .ndim = 1, .shape = shape, .numel = 3};
  float out[3];
  t.dtype = ZO_BF16, t.data = bf, t.nbytes = 6;
  bad += !CHECK(zo_st_read_f32(&t, out, 3) == 0 && out[0] == 1.0f && out[1] == -2.0f && out[2] == 3.140625f);
  t.dtype = ZO_F16, t.data = hf;
  bad += !CHECK(zo_st_read_f32(&t, out, 3) == 0 && out[0] == 1.0f && out[1] == ldexpf(1.0f, -24) &&
                isinf(out[2]));
  t.dtype = ZO_F32, t.data = f32_unaligned + 1, t.nbytes = 12;
  bad += !CHECK(zo_st_read_f32(&t, out, 3) == 0 && !memcmp(out, fv, sizeof fv));
  bad += !CHECK(zo_st_read_f32(&t, out, 2) == -EINVAL && error_has("\"t\""));
  t.dtype = ZO_I32;
  bad += !CHECK(zo_st_read_f32(&t, out, 3) == -ENOTSUP && error_has("I32"));
  return bad;
}

/* ---- safetensors round trip -------------------------------------------- */

static float w_f32[2][3];
static uint16_t w_bf16[4] = {0x3f80, 0xbf80, 0x4049, 0x7f80};
static uint16_t w_f16[3] = {0x3c00, 0x0001, 0xc000};
static int32_t w_i32[2] = {-7, 2147483647};
static uint16_t w_u16[5] = {0, 1, 2, 65535, 12345};
static uint8_t w_u8[3] = {1, 2, 255};
static float w_scalar = 42.0f;

static int write_sample(const char *path) {
  for (int i = 0; i < 6; i++) w_f32[i / 3][i % 3] = 0.5f * (float)i - 1.0f;
  struct zo_st_writer *w = zo_st_writer_init();
  if (!w) return -ENOMEM;
  int err = 0;
  err |= zo_st_writer_add(w, "h.0.attn.c_attn.weight", ZO_F32, 2, (int64_t[]){2, 3}, w_f32);
  err |= zo_st_writer_add(w, "bf", ZO_BF16, 2, (int64_t[]){2, 2}, w_bf16);
  err |= zo_st_writer_add(w, "half", ZO_F16, 1, (int64_t[]){3}, w_f16);
  err |= zo_st_writer_add(w, "ints", ZO_I32, 1, (int64_t[]){2}, w_i32);
  err |= zo_st_writer_add(w, "u16", ZO_U16, 1, (int64_t[]){5}, w_u16);
  err |= zo_st_writer_add(w, "u8", ZO_U8, 3, (int64_t[]){1, 3, 1}, w_u8);
  err |= zo_st_writer_add(w, "scalar", ZO_F32, 0, NULL, &w_scalar);
  err |= zo_st_writer_add(w, "empty", ZO_F32, 2, (int64_t[]){0, 4}, NULL);
  err |= zo_st_writer_set_metadata(w, "step", "7");
  err |= zo_st_writer_set_metadata(w, "note", "ünïcode \"quoted\"");
  err |= zo_st_writer_set_metadata(w, "dropped", "x");
  err |= zo_st_writer_set_metadata(w, "dropped", NULL);
  if (err == 0) err = zo_st_writer_write(w, path);
  zo_st_writer_free(w);
  return err;
}

static bool tensor_is(const struct zo_st_tensor *t, const char *name, enum zo_dtype dtype, int ndim,
                      const int64_t *shape, size_t numel, const void *data) {
  if (!t || strcmp(t->name, name) || t->dtype != dtype || t->ndim != ndim || t->numel != numel) return false;
  for (int d = 0; d < ndim; d++) {
    if (t->shape[d] != shape[d]) return false;
  }
  size_t nbytes = numel * zo_dtype_size(dtype);
  return t->nbytes == nbytes && (nbytes == 0 || !memcmp(t->data, data, nbytes));
}

static int test_st_round_trip(void) {
  int bad = 0;
  const char *p = tmp_path("sample.safetensors");
  bad += !CHECK(write_sample(p) == 0);
  bad += !CHECK(count_temp_files(tmp_dir) == 0);
  struct zo_st_file *f = zo_st_open(p);
  bad += !CHECK(f != NULL);
  if (!f) return bad;
  bad += !CHECK(!strcmp(zo_st_path(f), p));
  bad += !CHECK(zo_st_n_tensors(f) == 8);
  static const char *order[] = {"h.0.attn.c_attn.weight", "bf", "half", "ints", "u16", "u8", "scalar", "empty"};
  size_t pos = 0;
  for (int i = 0; i < zo_st_n_tensors(f) && i < 8; i++) {
    const struct zo_st_tensor *t = zo_st_tensor_at(f, i);
    bad += !CHECK(!strcmp(t->name, order[i]) && t->offset == pos && !strcmp(t->file, p));
    bad += !CHECK(zo_st_find(f, order[i]) == t);
    pos += t->nbytes;
  }
  bad += !CHECK(tensor_is(zo_st_find(f, "h.0.attn.c_attn.weight"), "h.0.attn.c_attn.weight", ZO_F32, 2,
                          (int64_t[]){2, 3}, 6, w_f32));
  bad += !CHECK(tensor_is(zo_st_find(f, "bf"), "bf", ZO_BF16, 2, (int64_t[]){2, 2}, 4, w_bf16));
  bad += !CHECK(tensor_is(zo_st_find(f, "half"), "half", ZO_F16, 1, (int64_t[]){3}, 3, w_f16));
  bad += !CHECK(tensor_is(zo_st_find(f, "ints"), "ints", ZO_I32, 1, (int64_t[]){2}, 2, w_i32));
  bad += !CHECK(tensor_is(zo_st_find(f, "u16"), "u16", ZO_U16, 1, (int64_t[]){5}, 5, w_u16));
  bad += !CHECK(tensor_is(zo_st_find(f, "u8"), "u8", ZO_U8, 3, (int64_t[]){1, 3, 1}, 3, w_u8));
  bad += !CHECK(tensor_is(zo_st_find(f, "scalar"), "scalar", ZO_F32, 0, NULL, 1, &w_scalar));
  bad += !CHECK(tensor_is(zo_st_find(f, "empty"), "empty", ZO_F32, 2, (int64_t[]){0, 4}, 0, NULL));
  bad += !CHECK(zo_st_find(f, "missing") == NULL && zo_st_find(f, "__metadata__") == NULL);

  float out[6];
  bad += !CHECK(zo_st_read_f32(zo_st_find(f, "bf"), out, 4) == 0 && out[0] == 1.0f && out[1] == -1.0f &&
                out[2] == 3.140625f && isinf(out[3]));
  bad += !CHECK(zo_st_read_f32(zo_st_find(f, "half"), out, 3) == 0 && out[0] == 1.0f && out[2] == -2.0f);
  bad += !CHECK(zo_st_read_f32(zo_st_find(f, "h.0.attn.c_attn.weight"), out, 6) == 0 &&
                !memcmp(out, w_f32, sizeof out));

  bad += !CHECK(zo_st_metadata(f, "format") && !strcmp(zo_st_metadata(f, "format"), "pt"));
  bad += !CHECK(zo_st_metadata(f, "step") && !strcmp(zo_st_metadata(f, "step"), "7"));
  bad += !CHECK(zo_st_metadata(f, "note") && !strcmp(zo_st_metadata(f, "note"), "ünïcode \"quoted\""));
  bad += !CHECK(zo_st_metadata(f, "dropped") == NULL);
  bad += !CHECK(zo_st_n_metadata(f) == 3);
  const char *k, *v;
  zo_st_metadata_at(f, 0, &k, &v);
  bad += !CHECK(!strcmp(k, "format") && !strcmp(v, "pt"));
  zo_st_close(f);
  zo_st_close(NULL);
  return bad;
}

/* Produces float k = k * 0.5 - 7, whatever chunking the writer chose. */
static int fill_ramp(void *ctx, void *dst, size_t offset, size_t nbytes) {
  size_t *calls = ctx;
  float *d = dst;
  (*calls)++;
  for (size_t k = 0; k < nbytes / sizeof(float); k++) d[k] = (float)(offset / sizeof(float) + k) * 0.5f - 7.0f;
  return 0;
}

static int fill_fail(void *ctx, void *dst, size_t offset, size_t nbytes) {
  size_t *calls = ctx;
  memset(dst, 0, nbytes);
  return ++*calls == 2 ? zo_error(-EIO, "state read failed at offset %zu", offset) : 0;
}

/* A produced tensor larger than one write chunk, between borrowed ones: the
 * file holds exactly the bytes the producer made, in order. */
static int test_st_writer_fill(void) {
  int bad = 0;
  const char *p = tmp_path("fill.safetensors");
  const size_t n = ZO_ST_FILL_CHUNK / sizeof(float) * 2 + 124; /* a multiple of 3 */
  size_t calls = 0;
  struct zo_st_writer *w = zo_st_writer_init();
  bad += !CHECK(w != NULL);
  if (!w) return bad;
  const float before[2] = {1.5f, -2.5f};
  bad += !CHECK(zo_st_writer_add(w, "before", ZO_F32, 1, (int64_t[]){2}, before) == 0);
  bad += !CHECK(zo_st_writer_add_fill(w, "ramp", ZO_F32, 2, (int64_t[]){(int64_t)n / 3, 3}, fill_ramp, &calls) == 0);
  bad += !CHECK(zo_st_writer_add(w, "after", ZO_F32, 1, (int64_t[]){2}, before) == 0);
  bad += !CHECK(zo_st_writer_write(w, p) == 0);
  zo_st_writer_free(w);
  bad += !CHECK(calls == 3); /* two full chunks and the tail */
  struct zo_st_file *f = zo_st_open(p);
  bad += !CHECK(f != NULL);
  if (!f) return bad;
  const struct zo_st_tensor *t = zo_st_find(f, "ramp");
  bad += !CHECK(t && t->numel == n);
  float *out = malloc(n * sizeof *out);
  bad += !CHECK(out && t && zo_st_read_f32(t, out, n) == 0);
  size_t wrong = 0;
  for (size_t k = 0; out && t && k < n; k++) wrong += out[k] != (float)k * 0.5f - 7.0f;
  bad += !CHECK(wrong == 0);
  float tail[2];
  bad += !CHECK(zo_st_read_f32(zo_st_find(f, "after"), tail, 2) == 0 && !memcmp(tail, before, sizeof tail));
  free(out);
  zo_st_close(f);

  /* A producer that fails (a state read error) fails the write with its
   * error and leaves the previous file as it was. */
  size_t fcalls = 0;
  w = zo_st_writer_init();
  bad += !CHECK(w && zo_st_writer_add_fill(w, "ramp", ZO_F32, 1, (int64_t[]){(int64_t)n}, fill_fail, &fcalls) == 0);
  bad += !CHECK(zo_st_writer_write(w, p) == -EIO);
  zo_st_writer_free(w);
  bad += !CHECK(fcalls == 2);
  f = zo_st_open(p);
  bad += !CHECK(f && zo_st_find(f, "before") && zo_st_find(f, "ramp") && zo_st_find(f, "ramp")->numel == n);
  zo_st_close(f);
  return bad;
}

/* The exact bytes: length, compact JSON in insertion order, space padding. */
static int test_st_header_bytes(void) {
  int bad = 0;
  const char *p = tmp_path("exact.safetensors");
  float a[2] = {1.0f, 2.0f};
  uint16_t b[3] = {1, 2, 3};
  struct zo_st_writer *w = zo_st_writer_init();
  bad += !CHECK(w && zo_st_writer_add(w, "a", ZO_F32, 1, (int64_t[]){2}, a) == 0);
  bad += !CHECK(zo_st_writer_add(w, "b", ZO_BF16, 2, (int64_t[]){1, 3}, b) == 0);
  bad += !CHECK(zo_st_writer_write(w, p) == 0);
  zo_st_writer_free(w);
  const char *json = "{\"__metadata__\":{\"format\":\"pt\"},"
                     "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"BF16\",\"shape\":[1,3],\"data_offsets\":[8,14]}}";
  size_t len = strlen(json), padded = (len + 7) / 8 * 8;
  unsigned char expect[512];
  for (int i = 0; i < 8; i++) expect[i] = (unsigned char)(padded >> (8 * i));
  memcpy(expect + 8, json, len);
  memset(expect + 8 + len, ' ', padded - len);
  memcpy(expect + 8 + padded, a, 8);
  memcpy(expect + 8 + padded + 8, b, 6);
  bad += !CHECK(file_equals(p, expect, 8 + padded + 14));
  unlink(p);
  return bad;
}

static int test_st_writer_errors(void) {
  int bad = 0;
  float x = 0;
  struct zo_st_writer *w = zo_st_writer_init();
  bad += !CHECK(w && zo_st_writer_add(w, "x", ZO_F32, 1, (int64_t[]){1}, &x) == 0);
  bad += !CHECK(zo_st_writer_add(w, "x", ZO_F32, 1, (int64_t[]){1}, &x) == -EINVAL && error_has("twice"));
  bad += !CHECK(zo_st_writer_add(w, "", ZO_F32, 1, (int64_t[]){1}, &x) == -EINVAL);
  bad += !CHECK(zo_st_writer_add(w, "__metadata__", ZO_F32, 1, (int64_t[]){1}, &x) == -EINVAL);
  bad += !CHECK(zo_st_writer_add(w, "neg", ZO_F32, 1, (int64_t[]){-1}, &x) == -EINVAL && error_has("negative"));
  bad += !CHECK(zo_st_writer_add(w, "big", ZO_F32, 2, (int64_t[]){INT64_MAX, 4}, &x) == -EINVAL &&
                error_has("overflow"));
  bad += !CHECK(zo_st_writer_add(w, "null", ZO_F32, 1, (int64_t[]){2}, NULL) == -EINVAL);
  bad += !CHECK(zo_st_writer_add(w, "bad\xff", ZO_F32, 1, (int64_t[]){1}, &x) == -EINVAL && error_has("UTF-8"));
  bad += !CHECK(zo_st_writer_set_metadata(w, "k", "bad\xc3") == -EINVAL && error_has("UTF-8"));
  bad += !CHECK(zo_st_writer_set_metadata(w, "bad\xc3", "v") == -EINVAL);
  const char *p = tmp_path("no-dir/out.safetensors");
  bad += !CHECK(zo_st_writer_write(w, p) == -ENOENT && error_has(p));
  /* Without any metadata the header has no "__metadata__" entry. */
  bad += !CHECK(zo_st_writer_set_metadata(w, "format", NULL) == 0);
  p = tmp_path("nometa.safetensors");
  bad += !CHECK(zo_st_writer_write(w, p) == 0);
  zo_st_writer_free(w);
  struct zo_st_file *f = zo_st_open(p);
  bad += !CHECK(f && zo_st_n_metadata(f) == 0 && zo_st_n_tensors(f) == 1);
  zo_st_close(f);
  unlink(p);
  return bad;
}

/* ---- malformed files --------------------------------------------------- */

/* Writes an 8-byte length (hlen, or strlen(header) when hlen < 0), the header
 * and data_len bytes of data. */
static bool write_st_raw(const char *path, int64_t hlen, const char *header, size_t data_len) {
  size_t n = strlen(header);
  size_t total = 8 + n + data_len;
  unsigned char *buf = calloc(total, 1);
  if (!buf) return false;
  uint64_t len = hlen < 0 ? (uint64_t)n : (uint64_t)hlen;
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(len >> (8 * i));
  memcpy(buf + 8, header, n);
  bool ok = write_plain(path, buf, total);
  free(buf);
  return ok;
}

static int test_st_malformed(void) {
  static const struct {
    const char *what;
    int64_t hlen; /* -1: the header's length */
    const char *header;
    size_t data_len;
    const char *expect;
  } cases[] = {
      {"header length > file", 1000, "{}", 0, "header length 1000 exceeds"},
      {"header length 2^63", INT64_MAX, "{}", 0, "exceeds the"},
      {"not JSON object start", -1, "[1]     ", 0, "does not start with '{'"},
      {"empty header", -1, "", 0, "does not start with '{'"},
      {"bad JSON", -1, "{\"a\": {\"dtype\": \"F32\",", 0, "not valid JSON"},
      {"trailing garbage", -1, "{} x", 0, "not valid JSON"},
      {"NUL in name", -1, "{\"a\\u0000b\":{}}", 0, "not valid JSON"},
      {"integer too big", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,0]}}", 0,
       "not valid JSON"},
      {"duplicate tensor", -1,
       "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
       "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
       2, "duplicate"},
      {"entry not object", -1, "{\"a\":3}", 0, "tensor \"a\": entry is not a JSON object"},
      {"unknown dtype", -1, "{\"w.q\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
       "tensor \"w.q\": unknown dtype \"Q7\""},
      {"unsupported dtype", -1, "{\"d\":{\"dtype\":\"U64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
       "tensor \"d\": dtype U64 is not supported"},
      {"dtype not string", -1, "{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
       "tensor \"a\": \"dtype\" is not a string"},
      {"missing dtype", -1, "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor \"a\": missing \"dtype\""},
      {"missing shape", -1, "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4,
       "tensor \"a\": missing \"shape\""},
      {"missing data_offsets", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4,
       "tensor \"a\": missing \"data_offsets\""},
      {"unexpected field", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
       "tensor \"a\": unexpected field \"x\""},
      {"shape not array", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,4]}}", 4,
       "\"shape\" is not an array"},
      {"shape real", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4,
       "tensor \"a\": shape[0] is not an integer"},
      {"negative shape", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,4]}}", 4,
       "tensor \"a\": shape[1] = -1 is negative"},
      {"huge shape overflow", -1,
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}", 4,
       "tensor \"a\": shape overflows"},
      {"shape times dtype overflow", -1,
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,4]}}", 4,
       "tensor \"a\": shape overflows"},
      {"shape/size mismatch", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
       "tensor \"a\": shape and dtype F32 make 8 bytes but data_offsets [0, 4] span 4"},
      {"offsets out of bounds", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
       "tensor \"a\": data_offsets [0, 8] out of bounds: the data buffer is 4 bytes"},
      {"offsets huge", -1,
       "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[9223372036854775806,9223372036854775807]}}", 4,
       "out of bounds"},
      {"offsets reversed", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4,
       "tensor \"a\": data_offsets [4, 0] end before they begin"},
      {"offsets negative", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4,
       "negative data_offsets"},
      {"offsets one number", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", 4,
       "\"data_offsets\" is not an array [begin, end]"},
      {"offsets strings", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",\"4\"]}}", 4,
       "\"data_offsets\" are not integers"},
      {"overlapping", -1,
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
       12, "tensors \"a\" [0, 8] and \"b\" [4, 12] overlap"},
      {"same range twice", -1,
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
       "\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
       4, "overlap"},
      {"gap", -1,
       "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
       12, "tensor \"b\" starts at byte 8, leaving a gap"},
      {"trailing bytes", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
       "the data buffer is 8 bytes but its tensors cover 4"},
      {"metadata not object", -1, "{\"__metadata__\":3}", 0, "\"__metadata__\" is not a JSON object"},
      {"metadata value not string", -1, "{\"__metadata__\":{\"step\":7}}", 0,
       "metadata \"step\": value is not a string"},
  };
  int bad = 0;
  const char *p = tmp_path("bad.safetensors");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    zo_error(0, "%s", "");
    if (!write_st_raw(p, cases[i].hlen, cases[i].header, cases[i].data_len)) return bad + 1;
    struct zo_st_file *f = zo_st_open(p);
    const char *msg = zo_last_error();
    if (f || !strstr(msg, cases[i].expect) || !strstr(msg, p)) {
      fprintf(stderr, "  case \"%s\": %s, message \"%s\", expected \"%s\" and the path\n", cases[i].what,
              f ? "opened" : "refused", msg, cases[i].expect);
      bad++;
    }
    zo_st_close(f);
  }

  /* Files too short to hold the length itself. */
  for (size_t n = 0; n < 8; n++) {
    bad += !CHECK(write_plain(p, "\x02\0\0\0\0\0\0\0", n));
    bad += !CHECK(zo_st_open(p) == NULL && error_has("too short") && error_has(p));
  }
  /* A header past the size limit is refused before it is parsed (sparse file). */
  uint64_t huge = ZO_ST_MAX_HEADER + 8;
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(huge >> (8 * i));
  bad += !CHECK(write_plain(p, len8, 8) && truncate(p, (off_t)(8 + huge)) == 0);
  bad += !CHECK(zo_st_open(p) == NULL && error_has("exceeds the") && error_has("limit"));
  bad += !CHECK(zo_st_open(tmp_path("missing.safetensors")) == NULL && error_has(strerror(ENOENT)));
  bad += !CHECK(zo_st_open(tmp_dir) == NULL && error_has("not a regular file"));
  unlink(p);
  return bad;
}

/* Headers that are odd but valid must open. */
static int test_st_valid_edges(void) {
  int bad = 0;
  const char *p = tmp_path("edge.safetensors");
  struct zo_st_file *f;

  bad += !CHECK(write_st_raw(p, -1, "{}      ", 0));
  bad += !CHECK((f = zo_st_open(p)) != NULL && zo_st_n_tensors(f) == 0 && zo_st_n_metadata(f) == 0);
  zo_st_close(f);

  /* An overflowing prefix times a zero dim is an empty tensor. */
  bad += !CHECK(write_st_raw(
      p, -1, "{\"z\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,0],\"data_offsets\":[0,0]}}", 0));
  bad += !CHECK((f = zo_st_open(p)) != NULL && zo_st_find(f, "z") && zo_st_find(f, "z")->numel == 0);
  zo_st_close(f);

  /* Unpadded header (odd length): the F32 data is misaligned in memory. */
  char hdr[80] = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  size_t n = strlen(hdr);
  if (n % 2 == 0) hdr[n++] = ' ';
  unsigned char buf[256] = {0};
  buf[0] = (unsigned char)n;
  memcpy(buf + 8, hdr, n);
  float xv[2] = {3.5f, -1.25f};
  memcpy(buf + 8 + n, xv, 8);
  bad += !CHECK(n % 2 == 1 && write_plain(p, buf, 8 + n + 8));
  bad += !CHECK((f = zo_st_open(p)) != NULL && zo_st_find(f, "x"));
  if (f && zo_st_find(f, "x")) {
    float out[2];
    bad += !CHECK(zo_st_read_f32(zo_st_find(f, "x"), out, 2) == 0 && out[0] == 3.5f && out[1] == -1.25f);
  }
  zo_st_close(f);

  /* Zero-size tensors may share an offset with the next tensor. */
  bad += !CHECK(write_st_raw(p, -1,
                             "{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                             "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}",
                             2));
  bad += !CHECK((f = zo_st_open(p)) != NULL && zo_st_n_tensors(f) == 2);
  zo_st_close(f);
  unlink(p);
  return bad;
}

static bool file_read(const char *path, unsigned char **data, size_t *n) {
  return zo_read_file(path, (void **)data, n, SIZE_MAX) == 0;
}

/* The reader's promises, checked from outside after a successful open. */
static bool layout_ok(struct zo_st_file *f, size_t data_len) {
  size_t pos = 0;
  for (int i = 0; i < zo_st_n_tensors(f); i++) {
    const struct zo_st_tensor *t = zo_st_tensor_at(f, i);
    size_t numel = 1;
    for (int d = 0; d < t->ndim; d++) numel *= (size_t)t->shape[d];
    if (t->offset != pos || numel != t->numel || t->nbytes != numel * zo_dtype_size(t->dtype)) return false;
    pos += t->nbytes;
    if (pos > data_len) return false;
  }
  return pos == data_len;
}

/* Every truncation and many random header mutations of a valid file either
 * open with a consistent layout or fail with a message naming the file. */
static int test_st_corruptions(void) {
  int bad = 0;
  const char *src = tmp_path("good.safetensors");
  const char *p = tmp_path("corrupt.safetensors");
  unsigned char *good = NULL;
  size_t n = 0;
  bad += !CHECK(write_sample(src) == 0 && file_read(src, &good, &n));
  if (bad) return bad;
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | good[i];

  for (size_t cut = 0; cut < n; cut++) {
    bad += !CHECK(write_plain(p, good, cut));
    struct zo_st_file *f = zo_st_open(p);
    if (f || !strstr(zo_last_error(), p)) {
      fprintf(stderr, "  truncated to %zu of %zu bytes: %s\n", cut, n, f ? "opened" : zo_last_error());
      bad++;
    }
    zo_st_close(f);
    if (bad > 5) break;
  }

  static const char alphabet[] = "{}[]\",:-0123456789eE. aF3BU1_\\";
  unsigned char *buf = malloc(n);
  int opened = 0;
  for (int iter = 0; iter < 3000 && buf && bad <= 5; iter++) {
    memcpy(buf, good, n);
    int n_mut = 1 + (int)(rng_u32() % 3);
    for (int m = 0; m < n_mut; m++) {
      size_t at = 8 + rng_u32() % hlen;
      buf[at] = (unsigned char)alphabet[rng_u32() % (sizeof alphabet - 1)];
    }
    if (iter % 10 == 0) buf[rng_u32() % 8] = (unsigned char)rng_u32();
    bad += !CHECK(write_plain(p, buf, n));
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--) h = h << 8 | buf[i];
    zo_error(0, "%s", "");
    struct zo_st_file *f = zo_st_open(p);
    if (f) {
      opened++;
      bad += !CHECK(h <= n - 8 && layout_ok(f, n - 8 - (size_t)h));
    } else if (!strstr(zo_last_error(), p)) {
      fprintf(stderr, "  mutation %d refused without naming the file: \"%s\"\n", iter, zo_last_error());
      bad++;
    }
    zo_st_close(f);
  }
  printf("  (%d of 3000 mutated headers still valid)\n", opened);
  free(buf);
  free(good);
  unlink(p);
  unlink(src);
  return bad;
}

/* ---- cross-check with Python -------------------------------------------- */

static const char *py_script =
    "import json, struct, sys\n"
    "p, allp = sys.argv[1], sys.argv[2]\n"
    "b = open(p, 'rb').read()\n"
    "n = struct.unpack('<Q', b[:8])[0]\n"
    "assert n % 8 == 0 and 8 + n <= len(b), n\n"
    "raw = b[8:8 + n]\n"
    "assert raw[:1] == b'{' and raw.rstrip(b' ').endswith(b'}'), raw\n"
    "h = json.loads(raw)\n"
    "assert list(h)[0] == '__metadata__', list(h)\n"
    "assert h.pop('__metadata__') == {'format': 'pt', 'step': '7', 'note': '\\u00fcn\\u00efcode \"quoted\"'}\n"
    "data = b[8 + n:]\n"
    "pos = 0\n"
    "size = {'F32': 4, 'BF16': 2, 'F16': 2, 'I32': 4, 'U16': 2, 'U8': 1}\n"
    "for name, t in h.items():\n"
    "    s, e = t['data_offsets']\n"
    "    numel = 1\n"
    "    for d in t['shape']: numel *= d\n"
    "    assert s == pos and e - s == numel * size[t['dtype']], (name, t)\n"
    "    pos = e\n"
    "assert pos == len(data)\n"
    "def get(name, fmt):\n"
    "    s, e = h[name]['data_offsets']\n"
    "    return list(struct.unpack('<%d%s' % ((e - s) // struct.calcsize(fmt), fmt), data[s:e]))\n"
    "assert get('h.0.attn.c_attn.weight', 'f') == [0.5 * i - 1 for i in range(6)]\n"
    "assert h['h.0.attn.c_attn.weight']['shape'] == [2, 3] and h['u8']['shape'] == [1, 3, 1]\n"
    "assert get('ints', 'i') == [-7, 2147483647] and get('u16', 'H') == [0, 1, 2, 65535, 12345]\n"
    "assert get('u8', 'B') == [1, 2, 255] and get('scalar', 'f') == [42.0] and h['scalar']['shape'] == []\n"
    "assert get('half', 'e') == [1.0, 2.0 ** -24, -2.0] and h['empty']['shape'] == [0, 4]\n"
    "extra = []\n"
    "try:\n"
    "    import torch\n"
    "    def tget(buf, name, dt):\n"
    "        s, e = buf[1][name]['data_offsets']\n"
    "        return torch.frombuffer(bytearray(buf[0][s:e]), dtype=dt)\n"
    "    assert tget((data, h), 'bf', torch.bfloat16).float().tolist()[:3] == [1.0, -1.0, 3.140625]\n"
    "    ab = open(allp, 'rb').read(); an = struct.unpack('<Q', ab[:8])[0]\n"
    "    ah = json.loads(ab[8:8 + an]); ad = ab[8 + an:]\n"
    "    for src, conv in (('f16', torch.float16), ('bf16', torch.bfloat16)):\n"
    "        ref = tget((ad, ah), src, conv).float()\n"
    "        got = tget((ad, ah), src + '_as_f32', torch.float32)\n"
    "        same = (ref == got) | (ref.isnan() & got.isnan())\n"
    "        assert bool(same.all()), (src, int((~same).sum()))\n"
    "        assert torch.equal(ref.view(torch.int32)[~ref.isnan()], got.view(torch.int32)[~ref.isnan()])\n"
    "    extra.append('torch %s conversions of all 65536 f16/bf16 values' % torch.__version__)\n"
    "except ImportError:\n"
    "    pass\n"
    "try:\n"
    "    from safetensors import safe_open\n"
    "    with safe_open(p, framework='numpy') as f:\n"
    "        assert f.metadata()['step'] == '7'\n"
    "        assert f.get_tensor('u16').tolist() == [0, 1, 2, 65535, 12345]\n"
    "    extra.append('safetensors package')\n"
    "except ImportError:\n"
    "    extra.append('no safetensors package: header checked by hand')\n"
    "print('  (python: struct/json; ' + '; '.join(extra) + ')')\n";

static int test_st_python(void) {
  if (access("/usr/bin/python3", X_OK) != 0) {
    printf("  (python cross-check skipped: no /usr/bin/python3)\n");
    return 0;
  }
  int bad = 0;
  const char *p = tmp_path("py.safetensors");
  const char *all = tmp_path("all16.safetensors");
  const char *script = tmp_path("check.py");
  bad += !CHECK(write_sample(p) == 0);

  /* Every 16-bit pattern with our conversion of it, for torch to judge. */
  uint16_t *bits = malloc(65536 * sizeof *bits);
  float *as_f16 = malloc(65536 * sizeof *as_f16), *as_bf16 = malloc(65536 * sizeof *as_bf16);
  struct zo_st_writer *w = zo_st_writer_init();
  bad += !CHECK(bits && as_f16 && as_bf16 && w);
  if (!bad) {
    for (uint32_t i = 0; i < 65536; i++) {
      bits[i] = (uint16_t)i;
      as_f16[i] = zo_st_f16_to_f32((uint16_t)i);
      as_bf16[i] = zo_st_bf16_to_f32((uint16_t)i);
    }
    int64_t shape[1] = {65536};
    bad += !CHECK(zo_st_writer_add(w, "f16", ZO_F16, 1, shape, bits) == 0);
    bad += !CHECK(zo_st_writer_add(w, "bf16", ZO_BF16, 1, shape, bits) == 0);
    bad += !CHECK(zo_st_writer_add(w, "f16_as_f32", ZO_F32, 1, shape, as_f16) == 0);
    bad += !CHECK(zo_st_writer_add(w, "bf16_as_f32", ZO_F32, 1, shape, as_bf16) == 0);
    bad += !CHECK(zo_st_writer_write(w, all) == 0);
  }
  zo_st_writer_free(w);
  free(bits);
  free(as_f16);
  free(as_bf16);
  bad += !CHECK(zo_write_file_atomic(script, py_script, strlen(py_script)) == 0);
  if (bad) return bad;
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s' '%s'", script, p, all);
  fflush(stdout);
  int rc = system(cmd);
  bad += !CHECK(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
  unlink(p);
  unlink(all);
  unlink(script);
  return bad;
}

int main(void) {
  static const struct {
    const char *name;
    int (*fn)(void);
  } tests[] = {
#define T(name) {#name, name}
      T(test_crc32),
      T(test_atomic_write),
      T(test_atomic_stream),
      T(test_atomic_missing_dir),
      T(test_atomic_fails_mid_write),
      T(test_atomic_rename_fails),
      T(test_atomic_readonly_dir),
      T(test_mkdir_p),
      T(test_rename_atomic_dir),
      T(test_remove_tree_symlinks),
      T(test_read_file),
      T(test_f16_bf16_bits),
      T(test_read_f32),
      T(test_st_round_trip),
      T(test_st_writer_fill),
      T(test_st_header_bytes),
      T(test_st_writer_errors),
      T(test_st_malformed),
      T(test_st_valid_edges),
      T(test_st_corruptions),
      T(test_st_python),
#undef T
  };
  umask(022);
  if (!mkdtemp(tmp_dir)) {
    perror("mkdtemp");
    return 1;
  }
  int n_failed = 0;
  for (size_t k = 0; k < sizeof tests / sizeof tests[0]; k++) {
    int rc = tests[k].fn();
    printf("%s %s\n", rc ? "FAIL" : "ok  ", tests[k].name);
    fflush(stdout);
    n_failed += rc != 0;
  }
  if (zo_remove_tree(tmp_dir) < 0) {
    fprintf(stderr, "cleanup: %s\n", zo_last_error());
    n_failed++;
  }
  if (n_failed) {
    fprintf(stderr, "%d test(s) failed\n", n_failed);
    return 1;
  }
  printf("test-engine-safetensors: all %zu tests passed\n", sizeof tests / sizeof tests[0]);
  return 0;
}
