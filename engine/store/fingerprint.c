/* A file's size and CRC32 for a run's recorded inputs (zo/checkpoint.h's
 * zo_file_fingerprint): whole for small files, sampled for large ones. */
#include "zo/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo/common.h"
#include "zo/fsutil.h"

#define FP_BLOCK ((size_t)64 << 10)
#define FP_BLOCKS 16
#define FP_WHOLE_MAX ((uint64_t)64 << 20)

/* CRC of n bytes at off, read in FP_BLOCK pieces through buf. */
static int crc_range(int fd, const char *path, uint8_t *buf, uint64_t off, uint64_t n, uint32_t *crc) {
  while (n > 0) {
    const size_t want = n < FP_BLOCK ? (size_t)n : FP_BLOCK;
    const ssize_t r = pread(fd, buf, want, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return zo_error(-errno, "%s: read: %s", path, strerror(errno));
    if (r == 0) return zo_error(-EIO, "%s: changed while read (ends at byte %llu)", path, (unsigned long long)off);
    *crc = zo_crc32(*crc, buf, (size_t)r);
    off += (uint64_t)r;
    n -= (uint64_t)r;
  }
  return 0;
}

int zo_file_fingerprint(const char *path, bool whole, uint64_t *bytes, uint32_t *crc) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return zo_error(-errno, "%s: %s", path, strerror(errno));
  struct stat st;
  int err = 0;
  uint8_t *buf = NULL;
  if (fstat(fd, &st) != 0) err = zo_error(-errno, "%s: %s", path, strerror(errno));
  else if (!S_ISREG(st.st_mode)) err = zo_error(-EINVAL, "%s: not a regular file", path);
  else if (!(buf = malloc(FP_BLOCK))) err = zo_error(-ENOMEM, "out of host memory reading %s", path);
  const uint64_t n = err ? 0 : (uint64_t)st.st_size;
  *bytes = n;
  *crc = zo_crc32(0, NULL, 0);
  if (!err && (whole || n <= FP_WHOLE_MAX)) {
    err = crc_range(fd, path, buf, 0, n, crc);
  } else if (!err) {
    const uint64_t stride = (n - FP_BLOCK) / (FP_BLOCKS - 1);
    for (int k = 0; k < FP_BLOCKS && !err; k++) err = crc_range(fd, path, buf, (uint64_t)k * stride, FP_BLOCK, crc);
  }
  free(buf);
  close(fd);
  return err;
}
