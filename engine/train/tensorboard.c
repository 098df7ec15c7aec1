/* TensorBoard event files (zo/tensorboard.h): Event protobufs serialized by
 * protobuf-c from engine/train/proto/event.proto (generated at build time by
 * protoc-c), framed as TFRecords with ISA-L's CRC32C. Only scalar summaries;
 * no histograms, images or graphs. A record is assembled in memory and
 * written with one write(2), so a reader never sees half a record unless
 * the disk fills or the process dies inside the call. */
#include "zo/tensorboard.h"

#include <errno.h>
#include <fcntl.h>
#include <isa-l/crc.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "event.pb-c.h"
#include "zo/common.h"
#include "zo/fsutil.h"

struct zo_tb {
  int fd;
  char path[PATH_MAX];
};

uint32_t zo_tb_masked_crc32c(const void *data, size_t n) {
  const unsigned char *p = data;
  unsigned int crc = 0xffffffffu;
  while (n > 0) {
    const int k = n > (1u << 30) ? 1 << 30 : (int)n;
    crc = crc32_iscsi((unsigned char *)p, k, crc);
    p += k;
    n -= (size_t)k;
  }
  crc = ~crc;
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void put_le32(unsigned char *p, uint32_t x) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(x >> (8 * i));
}

/* One TFRecord: u64 length, masked CRC of those 8 bytes, the data, masked
 * CRC of the data; little-endian. */
static int write_event(zo_tb_t tb, const Tensorboard__Event *ev) {
  const size_t n = tensorboard__event__get_packed_size(ev);
  unsigned char *rec = malloc(n + 16);
  if (!rec) return zo_error(-ENOMEM, "TensorBoard event of %zu bytes: out of memory", n);
  for (int i = 0; i < 8; i++) rec[i] = (unsigned char)((uint64_t)n >> (8 * i));
  put_le32(rec + 8, zo_tb_masked_crc32c(rec, 8));
  const size_t packed = tensorboard__event__pack(ev, rec + 12);
  ZO_ASSERT(packed == n);
  put_le32(rec + 12 + n, zo_tb_masked_crc32c(rec + 12, n));
  const ssize_t w = write(tb->fd, rec, n + 16);
  const int e = errno;
  free(rec);
  if (w < 0) return zo_error(-e, "writing TensorBoard events to %s: %s", tb->path, strerror(e));
  if ((size_t)w != n + 16)
    return zo_error(-EIO, "writing TensorBoard events to %s: wrote %zd of %zu bytes (disk full?)", tb->path, w,
                    n + 16);
  return 0;
}

static double now_unix(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

zo_tb_t zo_tb_init(const char *dir, const char *key) {
  if (!dir || !dir[0]) {
    zo_error(-EINVAL, "%s: empty directory", key);
    return NULL;
  }
  int err = zo_mkdir_p(dir, 0755);
  if (err) {
    zo_error(err, "%s: %s", key, zo_last_error());
    return NULL;
  }
  zo_tb_t tb = calloc(1, sizeof *tb);
  if (!tb) {
    zo_error(-ENOMEM, "%s: out of memory", key);
    return NULL;
  }
  char host[256];
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = '\0';
  for (char *c = host; *c; c++)
    if (*c == '/') *c = '_';
  const double t = now_unix();
  const int len = snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%ld.%s.%ld", dir, (long)t, host,
                           (long)getpid());
  if (len < 0 || (size_t)len >= sizeof tb->path) {
    zo_error(-ENAMETOOLONG, "%s: the event file's path in %s is over %d bytes", key, dir, PATH_MAX - 1);
    free(tb);
    return NULL;
  }
  tb->fd = open(tb->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (tb->fd < 0) {
    zo_error(-errno, "%s: cannot create %s: %s", key, tb->path, strerror(errno));
    free(tb);
    return NULL;
  }
  Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
  ev.wall_time = t;
  ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
  ev.file_version = (char *)"brain.Event:2";
  if ((err = write_event(tb, &ev))) {
    zo_error(err, "%s: %s", key, zo_last_error());
    zo_tb_free(tb);
    return NULL;
  }
  return tb;
}

int zo_tb_write(zo_tb_t tb, long step, double wall_time, const struct zo_tb_scalar *v, size_t n) {
  enum { MAX_VALUES = 32 };
  ZO_ASSERT(n <= MAX_VALUES);
  Tensorboard__Summary__Value values[MAX_VALUES];
  Tensorboard__Summary__Value *ptrs[MAX_VALUES];
  for (size_t i = 0; i < n; i++) {
    tensorboard__summary__value__init(&values[i]);
    values[i].tag = (char *)v[i].tag;
    values[i].value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    values[i].simple_value = (float)v[i].value;
    ptrs[i] = &values[i];
  }
  Tensorboard__Summary summary = TENSORBOARD__SUMMARY__INIT;
  summary.n_value = n;
  summary.value = ptrs;
  Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
  ev.wall_time = wall_time;
  ev.step = step;
  ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
  ev.summary = &summary;
  return write_event(tb, &ev);
}

const char *zo_tb_path(zo_tb_t tb) { return tb->path; }

void zo_tb_free(zo_tb_t tb) {
  if (!tb) return;
  if (tb->fd >= 0) close(tb->fd);
  free(tb);
}
