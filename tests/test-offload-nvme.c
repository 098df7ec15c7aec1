/* Tests for offload/nvme.c: round trips of random data through the io_uring
 * engine and the pread/pwrite threads, tails that are not block or 4096
 * multiples, more requests than the queue depth from several threads,
 * registered against unregistered buffers, CRC32C corruption caught (checked
 * against a bitwise CRC32C written here), contract errors, file and directory
 * modes and removal, ENOSPC at creation and mid-write (in a 1 MiB tmpfs
 * mounted in a private mount namespace of a child process: root only, else
 * that case is skipped), and the fallback when io_uring_setup is refused
 * (seccomp filter in a child). Files go to $ZO_NVME_TEST_DIR, else to
 * <build dir>/nvme-test, on the build's file system (ext4 here, O_DIRECT). */
#include "zo/nvme.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "zo_test.h"

#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#define HAVE_SECCOMP_TEST 1
#endif

#define KiB 1024u

static char test_dir[3072];  /* where stores are created */
static bool uring_available; /* io_uring engine starts here */

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("  note: ", stdout);
  vprintf(fmt, ap);
  fputc('\n', stdout);
  va_end(ap);
}

static void fill_random(void *buf, size_t n, uint64_t seed) {
  uint64_t s = seed;
  unsigned char *p = buf;
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)zo_splitmix64(&s);
}

/* Bitwise CRC32C (reflected polynomial 0x82F63B78), the reference. */
static uint32_t ref_crc32c(const void *data, size_t n) {
  const unsigned char *p = data;
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}

static void *xalloc(size_t n) {
  void *p = zo_nvme_buffer_alloc(n);
  if (p == NULL) {
    fprintf(stderr, "out of memory allocating %zu bytes\n", n);
    exit(1);
  }
  return p;
}

static const struct {
  const char *name;
  bool force_fallback;
} engines[] = {{"io_uring", false}, {"threads", true}};
#define N_ENGINES (sizeof engines / sizeof engines[0])

/* A store on engine e, or NULL (with a note) when that engine is unavailable. */
static zo_nvme_t open_store(size_t e, const char *dir, size_t block, int qd, int *err) {
  *err = 0;
  if (!engines[e].force_fallback && !uring_available) {
    note("io_uring unavailable here: %s case skipped", engines[e].name);
    return NULL;
  }
  const struct zo_nvme_config cfg = {.dir = dir,
                                     .block_size = block,
                                     .queue_depth = qd,
                                     .force_fallback = engines[e].force_fallback};
  zo_nvme_t nv = zo_nvme_init(&cfg);
  if (nv == NULL)
    *err = zo_test_fail("zo_nvme_init(%s): %s", engines[e].name, zo_last_error());
  else if (strcmp(zo_nvme_engine(nv), engines[e].name) != 0)
    *err = zo_test_fail("engine %s, expected %s", zo_nvme_engine(nv), engines[e].name);
  return nv;
}

static bool exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

/* ---- cases ----------------------------------------------------------------- */

static int test_roundtrip(void) {
  for (size_t e = 0; e < N_ENGINES; e++) {
    int err;
    const size_t block = 64 * KiB;
    zo_nvme_t nv = open_store(e, test_dir, block, 4, &err);
    if (nv == NULL) {
      if (err) return 1;
      continue;
    }
    const size_t n = 16 * block + 12345; /* 17 blocks, the last one short */
    int fm, fv;
    if (zo_nvme_file_create(nv, "master", n, &fm) || zo_nvme_file_create(nv, "exp_avg", n, &fv)) {
      zo_nvme_free(nv);
      return zo_test_fail("%s: file_create: %s", engines[e].name, zo_last_error());
    }
    unsigned char *a = xalloc(n), *b = xalloc(n), *got = xalloc(n + 4096);
    fill_random(a, n, 1 + e);
    fill_random(b, n, 100 + e);
    int rc = 0;
    if (zo_nvme_write(nv, fm, 0, a, n) || zo_nvme_write(nv, fv, 0, b, n))
      rc = zo_test_fail("%s: write: %s", engines[e].name, zo_last_error());
    for (int f = 0; f < 2 && rc == 0; f++) {
      memset(got, 0xa5, n + 4096);
      if (zo_nvme_read(nv, f == 0 ? fm : fv, 0, got, n))
        rc = zo_test_fail("%s: read: %s", engines[e].name, zo_last_error());
      else if (memcmp(got, f == 0 ? a : b, n) != 0)
        rc = zo_test_fail("%s: file %d reads back different bytes", engines[e].name, f);
      /* I/O rounds up to 4096: bytes past round_up(n, 4096) stay untouched. */
      const size_t end = (n + 4095) / 4096 * 4096;
      for (size_t i = end; i < n + 4096 && rc == 0; i++)
        if (got[i] != 0xa5)
          rc = zo_test_fail("%s: byte %zu past the rounded end was written", engines[e].name, i);
    }
    zo_nvme_free(nv);
    zo_nvme_buffer_free(a);
    zo_nvme_buffer_free(b);
    zo_nvme_buffer_free(got);
    if (rc) return rc;
  }
  return 0;
}

static int test_tail_sizes(void) {
  const size_t block = 32 * KiB;
  static const size_t sizes[] = {
      1, 7, 4095, 4096, 4097, 32 * KiB - 1, 32 * KiB, 32 * KiB + 1, 3 * 32 * KiB + 12345};
  const size_t n_sizes = sizeof sizes / sizeof sizes[0];
  const size_t slot = 4 * block; /* each size gets its own block-aligned extent */
  for (size_t e = 0; e < N_ENGINES; e++) {
    int err, f;
    zo_nvme_t nv = open_store(e, test_dir, block, 3, &err);
    if (nv == NULL) {
      if (err) return 1;
      continue;
    }
    if (zo_nvme_file_create(nv, "params", n_sizes * slot, &f)) {
      zo_nvme_free(nv);
      return zo_test_fail("file_create: %s", zo_last_error());
    }
    unsigned char *src = xalloc(n_sizes * slot), *dst = xalloc(n_sizes * slot);
    fill_random(src, n_sizes * slot, 7 + e);
    memset(dst, 0x5a, n_sizes * slot);
    struct zo_nvme_req req[sizeof sizes / sizeof sizes[0]];
    int rc = 0;
    for (size_t i = 0; i < n_sizes; i++)
      zo_nvme_write_async(nv, f, i * slot, src + i * slot, sizes[i], &req[i]);
    for (size_t i = 0; i < n_sizes; i++)
      if (zo_nvme_wait(nv, &req[i]) && !rc) rc = zo_test_fail("write %zu: %s", sizes[i], zo_last_error());
    for (size_t i = 0; i < n_sizes && !rc; i++)
      zo_nvme_read_async(nv, f, i * slot, dst + i * slot, sizes[i], &req[i]);
    for (size_t i = 0; i < n_sizes && !rc; i++)
      if (zo_nvme_wait(nv, &req[i])) rc = zo_test_fail("read %zu: %s", sizes[i], zo_last_error());
    for (size_t i = 0; i < n_sizes && !rc; i++)
      if (memcmp(src + i * slot, dst + i * slot, sizes[i]) != 0)
        rc = zo_test_fail("%s: %zu bytes read back different", engines[e].name, sizes[i]);
    zo_nvme_free(nv);
    zo_nvme_buffer_free(src);
    zo_nvme_buffer_free(dst);
    if (rc) return rc;
  }
  return 0;
}

struct worker_arg {
  zo_nvme_t nv;
  int file;
  int id;
  size_t extent; /* bytes per request, block-aligned stride */
  int rc;
};

/* Several rounds of write-all-then-read-all on the thread's own extents. */
static void *worker(void *p) {
  struct worker_arg *w = p;
  enum { N_REQ = 6, ROUNDS = 8 };
  const size_t len = w->extent - 1000;
  unsigned char *src = xalloc(N_REQ * w->extent), *dst = xalloc(N_REQ * w->extent);
  struct zo_nvme_req req[N_REQ];
  for (int r = 0; r < ROUNDS && !w->rc; r++) {
    fill_random(src, N_REQ * w->extent, (uint64_t)(w->id * 1000 + r));
    for (int i = 0; i < N_REQ; i++) {
      const uint64_t off = (uint64_t)(w->id * N_REQ + i) * w->extent;
      zo_nvme_write_async(w->nv, w->file, off, src + i * w->extent, len, &req[i]);
    }
    for (int i = 0; i < N_REQ; i++)
      if (zo_nvme_wait(w->nv, &req[i])) w->rc = zo_test_fail("thread %d write: %s", w->id, zo_last_error());
    for (int i = 0; i < N_REQ && !w->rc; i++) {
      const uint64_t off = (uint64_t)(w->id * N_REQ + i) * w->extent;
      zo_nvme_read_async(w->nv, w->file, off, dst + i * w->extent, len, &req[i]);
    }
    for (int i = 0; i < N_REQ && !w->rc; i++)
      if (zo_nvme_wait(w->nv, &req[i])) w->rc = zo_test_fail("thread %d read: %s", w->id, zo_last_error());
    for (int i = 0; i < N_REQ && !w->rc; i++)
      if (memcmp(src + i * w->extent, dst + i * w->extent, len) != 0)
        w->rc = zo_test_fail("thread %d round %d request %d: data differs", w->id, r, i);
  }
  zo_nvme_buffer_free(src);
  zo_nvme_buffer_free(dst);
  return NULL;
}

static int test_many_requests(void) {
  const size_t block = 16 * KiB, extent = 3 * block;
  enum { N = 96, N_THREADS = 4 };
  for (size_t e = 0; e < N_ENGINES; e++) {
    int err, f;
    zo_nvme_t nv = open_store(e, test_dir, block, 4, &err);
    if (nv == NULL) {
      if (err) return 1;
      continue;
    }
    if (zo_nvme_file_create(nv, "exp_avg_sq", N * extent, &f)) {
      zo_nvme_free(nv);
      return zo_test_fail("file_create: %s", zo_last_error());
    }
    /* N requests of 3 blocks (the last short) at once: 72x the queue depth. */
    const size_t len = extent - 777;
    unsigned char *src = xalloc(N * extent), *dst = xalloc(N * extent);
    fill_random(src, N * extent, 42 + e);
    memset(dst, 0, N * extent);
    static struct zo_nvme_req req[N];
    int rc = 0;
    for (int i = 0; i < N; i++)
      zo_nvme_write_async(nv, f, i * extent, src + i * extent, len, &req[i]);
    for (int i = 0; i < N; i++)
      if (zo_nvme_wait(nv, &req[i]) && !rc) rc = zo_test_fail("write %d: %s", i, zo_last_error());
    for (int i = N - 1; i >= 0 && !rc; i--)
      zo_nvme_read_async(nv, f, i * extent, dst + i * extent, len, &req[i]);
    for (int i = 0; i < N && !rc; i++)
      if (zo_nvme_wait(nv, &req[i])) rc = zo_test_fail("read %d: %s", i, zo_last_error());
    for (int i = 0; i < N && !rc; i++)
      if (memcmp(src + i * extent, dst + i * extent, len) != 0) rc = zo_test_fail("request %d differs", i);
    zo_nvme_buffer_free(src);
    zo_nvme_buffer_free(dst);

    /* Now from several threads at once on disjoint extents of the same file. */
    struct worker_arg w[N_THREADS];
    pthread_t th[N_THREADS];
    for (int t = 0; t < N_THREADS && !rc; t++) {
      w[t] = (struct worker_arg){.nv = nv, .file = f, .id = t, .extent = extent};
      if (pthread_create(&th[t], NULL, worker, &w[t]) != 0) rc = zo_test_fail("pthread_create");
      for (int u = 0; rc && u < t; u++) pthread_join(th[u], NULL);
    }
    for (int t = 0; t < N_THREADS && !rc; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < N_THREADS && !rc; t++) rc = w[t].rc;
    zo_nvme_free(nv);
    if (rc) return zo_test_fail("engine %s", engines[e].name);
  }
  return 0;
}

static int test_registered_buffers(void) {
  const size_t block = 64 * KiB, n = 10 * block + 5000;
  for (size_t e = 0; e < N_ENGINES; e++) {
    int err, f;
    zo_nvme_t nv = open_store(e, test_dir, block, 8, &err);
    if (nv == NULL) {
      if (err) return 1;
      continue;
    }
    const uint64_t off1 = (n + block - 1) / block * block; /* extent 1 */
    if (zo_nvme_file_create(nv, "master", off1 + n, &f)) {
      zo_nvme_free(nv);
      return zo_test_fail("file_create: %s", zo_last_error());
    }
    /* reg: registered, holds two extents; plain: never registered. */
    unsigned char *reg = xalloc(3 * n), *plain = xalloc(n), *other = xalloc(8192);
    const struct zo_nvme_buffer bufs[] = {{reg, 3 * n}, {other, 8192}};
    int rc = 0;
    if (zo_nvme_register_buffers(nv, bufs, 2)) rc = zo_test_fail("register: %s", zo_last_error());
    /* Contract errors leave the registration as it was. */
    const struct zo_nvme_buffer bad[] = {{reg + 100, 4096}};
    if (!rc && zo_nvme_register_buffers(nv, bad, 1) != (e == 0 ? -EINVAL : 0))
      rc = zo_test_fail("%s: misaligned buffer not refused", engines[e].name);
    const struct zo_nvme_buffer overlap[] = {{reg, 8192}, {reg + 4096, 8192}};
    if (!rc && zo_nvme_register_buffers(nv, overlap, 2) != (e == 0 ? -EINVAL : 0))
      rc = zo_test_fail("%s: overlapping buffers not refused", engines[e].name);
    fill_random(reg, n, 5);
    fill_random(plain, n, 6);
    /* registered -> extent 0, unregistered -> extent 1 */
    if (!rc && (zo_nvme_write(nv, f, 0, reg, n) || zo_nvme_write(nv, f, off1, plain, n)))
      rc = zo_test_fail("write: %s", zo_last_error());
    /* Read back crosswise: extent 1 into the registered buffer (at an offset
     * inside it), extent 0 into the unregistered one. */
    unsigned char *reg_dst = reg + off1; /* past extent 0's bytes, 4096-aligned */
    if (!rc && (zo_nvme_read(nv, f, off1, reg_dst, n) || zo_nvme_read(nv, f, 0, plain + 0, n)))
      rc = zo_test_fail("read: %s", zo_last_error());
    if (!rc && memcmp(plain, reg, n) != 0) rc = zo_test_fail("registered -> unregistered differs");
    unsigned char *expect = xalloc(n);
    fill_random(expect, n, 6);
    if (!rc && memcmp(reg_dst, expect, n) != 0) rc = zo_test_fail("unregistered -> registered differs");
    /* Unregister and go on. */
    if (!rc && zo_nvme_unregister_buffers(nv)) rc = zo_test_fail("unregister: %s", zo_last_error());
    memset(plain, 0, n);
    if (!rc && (zo_nvme_read(nv, f, off1, plain, n) || memcmp(plain, expect, n) != 0))
      rc = zo_test_fail("read after unregister: %s", zo_last_error());
    if (!rc && zo_nvme_register_buffers(nv, bufs, 2)) rc = zo_test_fail("re-register: %s", zo_last_error());
    zo_nvme_free(nv);
    zo_nvme_buffer_free(reg);
    zo_nvme_buffer_free(plain);
    zo_nvme_buffer_free(other);
    zo_nvme_buffer_free(expect);
    if (rc) return zo_test_fail("engine %s", engines[e].name);
  }
  return 0;
}

/* Overwrites one byte of path at off behind the store's back. */
static int poke(const char *path, off_t off, unsigned char *old) {
  const int fd = open(path, O_RDWR);
  if (fd < 0) return zo_test_fail("open %s: %s", path, strerror(errno));
  unsigned char c;
  if (pread(fd, &c, 1, off) != 1) return zo_test_fail("pread: %s", strerror(errno));
  if (old) *old = c;
  c ^= 0x10;
  if (pwrite(fd, &c, 1, off) != 1 || fdatasync(fd) != 0) return zo_test_fail("pwrite: %s", strerror(errno));
  close(fd);
  return 0;
}

static int test_crc_corruption(void) {
  const size_t block = 64 * KiB, n = 4 * block;
  for (size_t e = 0; e < N_ENGINES; e++) {
    int err, f, g;
    zo_nvme_t nv = open_store(e, test_dir, block, 4, &err);
    if (nv == NULL) {
      if (err) return 1;
      continue;
    }
    if (zo_nvme_file_create(nv, "exp_avg", n, &f) || zo_nvme_file_create(nv, "spare", n, &g)) {
      zo_nvme_free(nv);
      return zo_test_fail("file_create: %s", zo_last_error());
    }
    unsigned char *src = xalloc(n), *dst = xalloc(n);
    fill_random(src, n, 9);
    int rc = 0;
    if (zo_nvme_write(nv, f, 0, src, n)) rc = zo_test_fail("write: %s", zo_last_error());
    const off_t at = 2 * block + 777;
    if (!rc) rc = poke(zo_nvme_file_path(nv, f), at, NULL);
    if (!rc) {
      const int r = zo_nvme_read(nv, f, 0, dst, n);
      const char *msg = zo_last_error();
      char want[16], got[16];
      snprintf(want, sizeof want, "0x%08x", ref_crc32c(src + 2 * block, block));
      src[at] ^= 0x10;
      snprintf(got, sizeof got, "0x%08x", ref_crc32c(src + 2 * block, block));
      src[at] ^= 0x10;
      if (r != -EBADMSG)
        rc = zo_test_fail("%s: read of a corrupt block returned %d, not -EBADMSG", engines[e].name, r);
      else if (!strstr(msg, "block 2 ") || !strstr(msg, "'exp_avg'") || !strstr(msg, want) ||
               !strstr(msg, got))
        rc = zo_test_fail("message lacks block 2, 'exp_avg', %s or %s: %s", want, got, msg);
      else
        printf("  %s: %s\n", engines[e].name, msg);
    }
    /* The intact blocks still read; a rewrite through the store heals block 2. */
    if (!rc && (zo_nvme_read(nv, f, 0, dst, 2 * block) || memcmp(dst, src, 2 * block) != 0))
      rc = zo_test_fail("blocks 0-1 no longer read: %s", zo_last_error());
    if (!rc && (zo_nvme_write(nv, f, 2 * block, src + 2 * block, block) ||
                zo_nvme_read(nv, f, 0, dst, n) || memcmp(dst, src, n) != 0))
      rc = zo_test_fail("rewrite did not heal block 2: %s", zo_last_error());
    /* Blocks never written must read as zeros. */
    if (!rc && (zo_nvme_read(nv, g, 0, dst, n) || dst[0] != 0 || dst[n - 1] != 0))
      rc = zo_test_fail("fresh file does not read as zeros: %s", zo_last_error());
    if (!rc) rc = poke(zo_nvme_file_path(nv, g), 3 * block + 5, NULL);
    if (!rc &&
        (zo_nvme_read(nv, g, 0, dst, n) != -EBADMSG || !strstr(zo_last_error(), "never written")))
      rc = zo_test_fail("corrupt unwritten block not caught: %s", zo_last_error());
    zo_nvme_free(nv);
    zo_nvme_buffer_free(src);
    zo_nvme_buffer_free(dst);
    if (rc) return zo_test_fail("engine %s", engines[e].name);
  }
  return 0;
}

static int test_contract_errors(void) {
  int err, f;
  const size_t block = 64 * KiB;
  zo_nvme_t nv = open_store(1, test_dir, block, 2, &err);
  if (nv == NULL) return 1;
  unsigned char *buf = xalloc(4 * block);
  memset(buf, 1, 4 * block);
  struct zo_nvme_req req;
  int rc = 0;
#define EXPECT(call, want)                                                                         \
  do {                                                                                             \
    const int r_ = (call);                                                                         \
    if (!rc && r_ != (want)) rc = zo_test_fail("%s returned %d, expected %s", #call, r_, #want);           \
  } while (0)
  EXPECT(zo_nvme_file_create(nv, "master", 3 * block + 100, &f), 0);
  EXPECT(zo_nvme_file_create(nv, "master", block, &err), -EEXIST);
  EXPECT(zo_nvme_file_create(nv, "../evil", block, &err), -EINVAL);
  EXPECT(zo_nvme_file_create(nv, ".hidden", block, &err), -EINVAL);
  EXPECT(zo_nvme_file_create(nv, "empty", 0, &err), -EINVAL);
  EXPECT(zo_nvme_write_async(nv, f, 4096, buf, 10, &req),
         -EINVAL); /* offset not a block multiple */
  EXPECT(zo_nvme_wait(nv, &req), -EINVAL);
  EXPECT(zo_nvme_write(nv, f, 0, buf + 512, 10), -EINVAL);        /* misaligned buffer */
  EXPECT(zo_nvme_write(nv, f, 0, buf, 3 * block + 101), -EINVAL); /* past the end */
  EXPECT(zo_nvme_write(nv, f, 4 * block, buf, 1), -EINVAL);
  EXPECT(zo_nvme_write(nv, 7, 0, buf, 1), -EBADF);
  EXPECT(zo_nvme_write(nv, -1, 0, buf, 1), -EBADF);
  EXPECT(zo_nvme_write(nv, f, 0, buf, 0), 0);
  /* A block is read back with the length it was written with. */
  EXPECT(zo_nvme_write(nv, f, 0, buf, block + block / 2), 0);
  EXPECT(zo_nvme_read(nv, f, 0, buf, 2 * block), -EINVAL);
  if (!rc && !strstr(zo_last_error(), "block 1 of 'master'"))
    rc = zo_test_fail("message: %s", zo_last_error());
  EXPECT(zo_nvme_read(nv, f, 0, buf, block), 0);
  EXPECT(zo_nvme_read(nv, f, 0, buf, block + block / 2), 0);
  EXPECT(zo_nvme_write(nv, f, 3 * block, buf, 100), 0);
  EXPECT(zo_nvme_read(nv, f, 3 * block, buf, 100), 0);
  zo_nvme_free(nv);
  zo_nvme_buffer_free(buf);
  const struct zo_nvme_config bad_block = {.dir = test_dir, .block_size = 1000, .queue_depth = 4};
  const struct zo_nvme_config bad_qd = {.dir = test_dir, .block_size = 4096, .queue_depth = 0};
  const struct zo_nvme_config no_dir = {.dir = "", .block_size = 4096, .queue_depth = 4};
  if (!rc && (zo_nvme_init(&bad_block) || zo_nvme_init(&bad_qd) || zo_nvme_init(&no_dir)))
    rc = zo_test_fail("a bad config was accepted");
#undef EXPECT
  return rc;
}

static int test_private_files(void) {
  int err, f;
  const mode_t old_umask = umask(0); /* the modes must not depend on it */
  zo_nvme_t nv = open_store(0, test_dir, 64 * KiB, 2, &err);
  if (nv == NULL && !err) nv = open_store(1, test_dir, 64 * KiB, 2, &err);
  umask(old_umask);
  if (nv == NULL) return 1;
  int rc = 0;
  char dir[4096], path[4096];
  snprintf(dir, sizeof dir, "%s", zo_nvme_dir(nv));
  umask(0);
  if (zo_nvme_file_create(nv, "master", 100000, &f)) rc = zo_test_fail("file_create: %s", zo_last_error());
  umask(old_umask);
  if (!rc) snprintf(path, sizeof path, "%s", zo_nvme_file_path(nv, f));
  struct stat st;
  if (!rc && (stat(dir, &st) != 0 || (st.st_mode & 07777) != 0700 || !S_ISDIR(st.st_mode)))
    rc = zo_test_fail("%s: mode %o, expected a 0700 directory", dir, st.st_mode & 07777);
  if (!rc && strncmp(dir, test_dir, strlen(test_dir)) != 0)
    rc = zo_test_fail("%s is not under %s", dir, test_dir);
  if (!rc && (stat(path, &st) != 0 || (st.st_mode & 07777) != 0600 || !S_ISREG(st.st_mode)))
    rc = zo_test_fail("%s: mode %o, expected a 0600 file", path, st.st_mode & 07777);
  if (!rc && st.st_size != 102400)
    rc = zo_test_fail("%s: %lld bytes, expected 102400", path, (long long)st.st_size);
  if (!rc && st.st_blocks * 512 < 102400) rc = zo_test_fail("%s is not preallocated", path);
  printf("  %s engine, %s I/O, dir %s\n", zo_nvme_engine(nv),
         zo_nvme_is_direct(nv) ? "O_DIRECT" : "buffered", dir);
  /* Requests never waited for are finished by free, which must not hang. */
  unsigned char *buf = xalloc(100000);
  memset(buf, 3, 100000);
  struct zo_nvme_req req[3];
  for (int i = 0; i < 3; i++) zo_nvme_write_async(nv, f, 0, buf, 100000, &req[i]);
  zo_nvme_free(nv);
  zo_nvme_buffer_free(buf);
  if (!rc && (exists(path) || exists(dir)))
    rc = zo_test_fail("%s or its directory survived zo_nvme_free", path);
  zo_nvme_free(NULL);
  return rc;
}

/* ENOSPC in a 1 MiB tmpfs, in a child with a private mount namespace. */
static int enospc_child(const char *mnt) {
  if (unshare(CLONE_NEWNS) != 0)
    return printf("  skipped: unshare(CLONE_NEWNS): %s\n", strerror(errno)), 77;
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
    return printf("  skipped: mount --make-rprivate /: %s\n", strerror(errno)), 77;
  if (mount("zo-nvme-test", mnt, "tmpfs", 0, "size=1m,mode=0700") != 0)
    return printf("  skipped: mount tmpfs: %s\n", strerror(errno)), 77;
  const size_t block = 64 * KiB;
  char ckpt[4096], filler[4096];
  snprintf(ckpt, sizeof ckpt, "%s/checkpoint.bin", mnt);
  snprintf(filler, sizeof filler, "%s/filler", mnt);
  unsigned char *buf = xalloc(2 * block), *chk = xalloc(4096);
  fill_random(buf, 2 * block, 11);
  /* A stand-in for the last checkpoint, which no error may touch. */
  FILE *fp = fopen(ckpt, "wb");
  if (fp == NULL || fwrite(buf, 1, 4096, fp) != 4096 || fclose(fp) != 0)
    return zo_test_fail("write %s", ckpt);
  for (size_t e = 0; e < N_ENGINES; e++) {
    int err, f;
    zo_nvme_t nv = open_store(e, mnt, block, 2, &err);
    if (nv == NULL) {
      if (err) return 1;
      continue;
    }
    /* At creation: 4 MiB asked of 1 MiB. */
    if (zo_nvme_file_create(nv, "master", 4u << 20, &f) != -ENOSPC)
      return zo_test_fail("%s: 4 MiB in a 1 MiB tmpfs: not -ENOSPC", engines[e].name);
    const char *msg = zo_last_error();
    if (!strstr(msg, "4194304 bytes") || !strstr(msg, "free of"))
      return zo_test_fail("ENOSPC message lacks bytes asked or free space: %s", msg);
    printf("  %s: %s\n", engines[e].name, msg);
    char path[4096];
    snprintf(path, sizeof path, "%s/master", zo_nvme_dir(nv));
    if (exists(path)) return zo_test_fail("%s left behind after ENOSPC", path);
    /* Mid-write: punch a hole in a reserved file, fill the disk, write there. */
    if (zo_nvme_file_create(nv, "exp_avg", 2 * block, &f))
      return zo_test_fail("file_create: %s", zo_last_error());
    const int fd = open(zo_nvme_file_path(nv, f), O_RDWR);
    if (fd < 0 || fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)block) != 0)
      return zo_test_fail("punch hole: %s", strerror(errno));
    close(fd);
    const int ffd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (ffd < 0) return zo_test_fail("open %s: %s", filler, strerror(errno));
    while (write(ffd, chk, 4096) == 4096) continue;
    close(ffd);
    const int r = zo_nvme_write(nv, f, 0, buf, 2 * block);
    msg = zo_last_error();
    if (r != -ENOSPC || !strstr(msg, "no space left") || !strstr(msg, "block 0 of 'exp_avg'"))
      return zo_test_fail("%s: write into a full disk returned %d: %s", engines[e].name, r, msg);
    printf("  %s: %s\n", engines[e].name, msg);
    if (zo_nvme_read(nv, f, 0, buf, block) != -EIO)
      return zo_test_fail("%s: read of a block whose write failed: %s", engines[e].name, zo_last_error());
    if (zo_nvme_read(nv, f, block, chk, 4096) != -EINVAL) /* block 1 was written whole */
      return zo_test_fail("%s: short read of block 1 not refused", engines[e].name);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", zo_nvme_dir(nv));
    zo_nvme_free(nv);
    if (exists(dir)) return zo_test_fail("%s survived zo_nvme_free", dir);
    if (unlink(filler) != 0) return zo_test_fail("unlink %s", filler);
    fill_random(buf, 4096, 11);
    fp = fopen(ckpt, "rb");
    if (fp == NULL || fread(chk, 1, 4096, fp) != 4096 || fclose(fp) != 0 || memcmp(chk, buf, 4096))
      return zo_test_fail("%s changed", ckpt);
  }
  zo_nvme_buffer_free(buf);
  zo_nvme_buffer_free(chk);
  umount(mnt);
  return 0;
}

static int run_child(int (*fn)(const char *), const char *arg) {
  fflush(stdout);
  fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) return zo_test_fail("fork: %s", strerror(errno));
  if (pid == 0) {
    const int rc = fn(arg);
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  int status;
  if (waitpid(pid, &status, 0) != pid) return zo_test_fail("waitpid: %s", strerror(errno));
  if (!WIFEXITED(status)) return zo_test_fail("child died (status %d)", status);
  return WEXITSTATUS(status);
}

static int test_enospc(void) {
  if (geteuid() != 0) {
    note("skipped: mounting a small tmpfs needs root");
    return 0;
  }
  char mnt[4096];
  snprintf(mnt, sizeof mnt, "%s/tmpfs-mnt", test_dir);
  if (mkdir(mnt, 0700) != 0 && errno != EEXIST) return zo_test_fail("mkdir %s: %s", mnt, strerror(errno));
  int rc = run_child(enospc_child, mnt);
  rmdir(mnt);
  if (rc == 77) rc = 0; /* reason printed by the child */
  return rc;
}

#ifdef HAVE_SECCOMP_TEST
/* io_uring_setup refused with EPERM by a seccomp filter: the store must warn
 * once and run on the threads. stderr goes to the file named by arg. */
static int refused_child(const char *log) {
  const int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || dup2(fd, 2) < 0) return zo_test_fail("redirect stderr: %s", strerror(errno));
  close(fd);
#if defined(__x86_64__)
  const unsigned arch = AUDIT_ARCH_X86_64;
#else
  const unsigned arch = AUDIT_ARCH_AARCH64;
#endif
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  const struct sock_fprog prog = {.len = sizeof filter / sizeof filter[0], .filter = filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
    return printf("  skipped: seccomp: %s\n", strerror(errno)), 77;
  const struct zo_nvme_config cfg = {.dir = test_dir, .block_size = 64 * KiB, .queue_depth = 4};
  zo_nvme_t nv = zo_nvme_init(&cfg);
  if (nv == NULL) return zo_test_fail("zo_nvme_init: %s", zo_last_error());
  int rc = 0, f;
  if (strcmp(zo_nvme_engine(nv), "threads") != 0)
    rc = zo_test_fail("engine %s with io_uring refused", zo_nvme_engine(nv));
  unsigned char *a = xalloc(200000), *b = xalloc(200000);
  fill_random(a, 200000, 3);
  if (!rc && (zo_nvme_file_create(nv, "master", 200000, &f) || zo_nvme_write(nv, f, 0, a, 200000) ||
              zo_nvme_read(nv, f, 0, b, 200000) || memcmp(a, b, 200000) != 0))
    rc = zo_test_fail("round trip on the fallback: %s", zo_last_error());
  zo_nvme_free(nv);
  zo_nvme_buffer_free(a);
  zo_nvme_buffer_free(b);
  return rc;
}
#endif

static int test_io_uring_refused(void) {
#ifndef HAVE_SECCOMP_TEST
  note("skipped: no seccomp filter for this architecture");
  return 0;
#else
  if (!uring_available) {
    note("skipped: io_uring is unavailable here anyway");
    return 0;
  }
  char log[4096];
  snprintf(log, sizeof log, "%s/refused.log", test_dir);
  int rc = run_child(refused_child, log);
  char text[4096] = "";
  FILE *fp = fopen(log, "r");
  if (fp) {
    text[fread(text, 1, sizeof text - 1, fp)] = '\0';
    fclose(fp);
  }
  unlink(log);
  if (rc == 77) return 0;
  if (rc) return zo_test_fail("child failed; its stderr:\n%s", text);
  /* Exactly one warning line, naming io_uring and the reason. */
  const char *w = strstr(text, "zoffload: warning: io_uring is unavailable");
  if (w == NULL || !strstr(text, "Operation not permitted") ||
      strchr(text, '\n') != text + strlen(text) - 1)
    return zo_test_fail("expected one warning naming the io_uring failure, got:\n%s", text);
  printf("  %s", text);
  return 0;
#endif
}

/* ---- main ------------------------------------------------------------------ */

static const char *fs_name(const char *dir) {
  struct statfs sf;
  if (statfs(dir, &sf) != 0) return "?";
  switch ((unsigned long)sf.f_type) {
  case 0xEF53: return "ext4";
  case 0x01021994: return "tmpfs";
  case 0x58465342: return "xfs";
  case 0x9123683E: return "btrfs";
  case 0x794c7630: return "overlayfs";
  default: return "other";
  }
}

int main(void) {
  const char *env = getenv("ZO_NVME_TEST_DIR");
  if (env && env[0])
    snprintf(test_dir, sizeof test_dir, "%s", env);
  else
    snprintf(test_dir, sizeof test_dir, "%s/nvme-test", ZO_BINARY_DIR);
  if (mkdir(test_dir, 0700) != 0 && errno != EEXIST) {
    printf("skipped: cannot create the test directory %s: %s (set ZO_NVME_TEST_DIR)\n", test_dir,
           strerror(errno));
    return 77;
  }
  if (access(test_dir, W_OK) != 0) {
    printf("skipped: %s is not writable (set ZO_NVME_TEST_DIR)\n", test_dir);
    return 77;
  }
  /* A file beside the stores standing for the last checkpoint. */
  char sentinel[4096];
  snprintf(sentinel, sizeof sentinel, "%s/checkpoint-sentinel", test_dir);
  static const char sentinel_text[] = "last checkpoint\n";
  FILE *fp = fopen(sentinel, "w");
  if (fp == NULL || fputs(sentinel_text, fp) < 0 || fclose(fp) != 0) {
    printf("skipped: cannot write in %s (set ZO_NVME_TEST_DIR)\n", test_dir);
    return 77;
  }
  {
    const struct zo_nvme_config cfg = {.dir = test_dir, .block_size = 4096, .queue_depth = 2};
    zo_nvme_t nv = zo_nvme_init(&cfg);
    if (nv == NULL) {
      printf("skipped: no NVMe store in %s: %s\n", test_dir, zo_last_error());
      return 77;
    }
    uring_available = strcmp(zo_nvme_engine(nv), "io_uring") == 0;
    printf("test directory %s (%s, %s), io_uring %s\n", test_dir, fs_name(test_dir),
           zo_nvme_is_direct(nv) ? "O_DIRECT" : "buffered", uring_available ? "yes" : "no");
    zo_nvme_free(nv);
  }

  static const struct zo_test tests[] = {
      ZO_TEST(roundtrip),
      ZO_TEST(tail_sizes),
      ZO_TEST(many_requests),
      ZO_TEST(registered_buffers),
      ZO_TEST(crc_corruption),
      ZO_TEST(contract_errors),
      ZO_TEST(private_files),
      ZO_TEST(enospc),
      ZO_TEST(io_uring_refused),
  };
  struct zo_test_counts counts = zo_test_run(tests, sizeof tests / sizeof tests[0]);
  char text[64] = "";
  fp = fopen(sentinel, "r");
  if (fp == NULL || fgets(text, sizeof text, fp) == NULL || strcmp(text, sentinel_text) != 0) {
    fprintf(stderr, "  %s was changed\n", sentinel);
    counts.failed++;
  }
  if (fp) fclose(fp);
  unlink(sentinel);
  rmdir(test_dir); /* fails harmlessly when another run shares it */
  return zo_test_report(counts);
}
