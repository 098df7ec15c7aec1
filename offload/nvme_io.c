/* NVMe store, block level: cutting requests into blocks, the per-block
 * CRC32C records (set after a write completes, checked after a read), the
 * accounting of finished blocks, and the threads engine: up to 64 workers,
 * one blocking pread/pwrite each, used where io_uring is unavailable. */
#include "nvme_internal.h"

#include "zo/fault.h"

#include <errno.h>
#include <isa-l/crc.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

void zo_nvme_warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("zoffload: warning: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* CRC32C (Castagnoli, as iSCSI, ext4 and NVMe use): zo_nvme_crc32c("123456789") is
 * 0xE3069283. ISA-L's crc32_iscsi neither pre- nor post-inverts, hence the ~. */
uint32_t zo_nvme_crc32c(const void *data, size_t n) {
  unsigned char *p = (unsigned char *)data;
  unsigned int crc = 0xffffffffu;
  while (n > 0) {
    const int k = n > (1u << 30) ? 1 << 30 : (int)n;
    crc = crc32_iscsi(p, k, crc);
    p += k;
    n -= (size_t)k;
  }
  return ~crc;
}

static bool is_zero(const char *p, size_t n) {
  static const char zeros[4096];
  while (n > 0) {
    const size_t k = n < sizeof zeros ? n : sizeof zeros;
    if (memcmp(p, zeros, k) != 0) return false;
    p += k;
    n -= k;
  }
  return true;
}

/* "<free> free of <total>" on the file system holding dir. */
const char *zo_nvme_fs_space(const char *dir, char out[96]) {
  struct statvfs sv;
  char fr[32], tot[32];
  if (statvfs(dir, &sv) != 0) {
    snprintf(out, 96, "free space unknown (statvfs: %s)", strerror(errno));
    return out;
  }
  snprintf(out, 96, "%s free of %s", zo_format_bytes((size_t)sv.f_bavail * sv.f_frsize, fr),
           zo_format_bytes((size_t)sv.f_blocks * sv.f_frsize, tot));
  return out;
}

int zo_nvme_trace_track(struct zo_nvme *nv) {
  const uint64_t gen = zo_trace_generation();
  if (nv->trace_track < 0 || nv->trace_gen != gen) {
    nv->trace_track = zo_trace_track("nvme");
    nv->trace_gen = gen;
  }
  return nv->trace_track;
}

/* Takes the next block of the first pending request into b. Called with mu. */
bool zo_nvme_blk_take(struct zo_nvme *nv, struct nvme_block *b) {
  struct zo_nvme_req *r = nv->head;
  if (r == NULL) return false;
  const size_t pos = r->n_dispatched;
  const size_t left = r->nbytes - pos;
  const size_t len = left < nv->block_size ? left : nv->block_size;
  b->req = r;
  b->f = &nv->files[r->file];
  b->buf = r->buf + pos;
  b->offset = r->offset + pos;
  b->index = (size_t)(b->offset / nv->block_size);
  b->len = (uint32_t)len;
  b->io_len = (uint32_t)zo_nvme_round_up(len, ZO_NVME_ALIGN);
  b->moved = 0;
  b->crc = 0;
  b->reg = -1;
  /* Last fixed buffer starting at or below the block: the one that may hold it. */
  int lo = 0, hi = nv->n_regs - 1;
  while (lo <= hi) {
    const int mid = (lo + hi) / 2;
    if ((char *)nv->regs[mid].base <= b->buf) {
      b->reg = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  if (b->reg >= 0 &&
      (size_t)(b->buf - (char *)nv->regs[b->reg].base) + b->io_len > nv->regs[b->reg].nbytes)
    b->reg = -1;
  r->n_dispatched += len;
  if (r->n_dispatched == r->nbytes) {
    nv->head = r->next;
    if (nv->head == NULL) nv->tail = NULL;
    r->next = NULL;
  }
  return true;
}

/* Message for a failed transfer of block b (err < 0). Returns err. */
static int block_io_error(struct zo_nvme *nv, const struct nvme_block *b, int err, char *msg,
                          size_t n) {
  const bool wr = b->req->op == ZO_NVME_WRITE;
  char space[96];
  if (err == -ENOSPC)
    snprintf(msg, n,
             "nvme: no space left on device writing block %zu of '%s' (%s): %s on that file "
             "system. Free space there or point nvme_path at a larger drive",
             b->index, b->f->name, b->f->path, zo_nvme_fs_space(nv->dir, space));
  else
    snprintf(msg, n, "nvme: %s block %zu of '%s' (%s, offset %llu, %u bytes) failed: %s",
             wr ? "writing" : "reading", b->index, b->f->name, b->f->path,
             (unsigned long long)b->offset, b->len, strerror(-err));
  return err;
}

/* Finishes a transferred block outside mu: records the CRC of a write, checks
 * the CRC of a read. err is the transfer's 0 or -errno. Returns the block's
 * status with its message in msg. */
int zo_nvme_blk_check(struct zo_nvme *nv, struct nvme_block *b, int err, char *msg, size_t n) {
  _Atomic uint64_t *rec = &b->f->blocks[b->index];
  if (b->req->op == ZO_NVME_WRITE) {
    /* A failed write leaves the block's contents unknown: poison it so that a
     * read is an error rather than stale data with a stale CRC. */
    atomic_store_explicit(rec,
                          err ? (uint64_t)NVME_BLOCK_BAD << 32 : (uint64_t)b->len << 32 | b->crc,
                          memory_order_relaxed);
    return err ? block_io_error(nv, b, err, msg, n) : 0;
  }
  if (err) return block_io_error(nv, b, err, msg, n);
  const uint64_t r = atomic_load_explicit(rec, memory_order_relaxed);
  const uint32_t want_len = (uint32_t)(r >> 32), want = (uint32_t)r;
  if (want_len == 0) {
    if (is_zero(b->buf, b->len)) return 0;
    snprintf(msg, n,
             "nvme: block %zu of '%s' (%s) was never written but does not read as zeros: the "
             "file was changed behind the store's back; the data was not used",
             b->index, b->f->name, b->f->path);
    return -EBADMSG;
  }
  if (want_len == NVME_BLOCK_BAD) {
    snprintf(msg, n, "nvme: block %zu of '%s' (%s) holds no valid data: its last write failed",
             b->index, b->f->name, b->f->path);
    return -EIO;
  }
  if (want_len != b->len) {
    snprintf(msg, n,
             "nvme: reading %u bytes of block %zu of '%s' but its last write stored %u: read "
             "back the extents that were written",
             b->len, b->index, b->f->name, want_len);
    return -EINVAL;
  }
  const uint32_t got = zo_nvme_crc32c(b->buf, b->len);
  if (got == want) return 0;
  snprintf(msg, n,
           "nvme: CRC32C mismatch in block %zu of '%s' (%s, offset %llu, %u bytes): expected "
           "0x%08x, read 0x%08x. The file is corrupt or was modified; the data was not used",
           b->index, b->f->name, b->f->path, (unsigned long long)b->offset, b->len, want, got);
  return -EBADMSG;
}

/* Accounts a finished block to its request. Called with mu. */
void zo_nvme_blk_finish(struct zo_nvme *nv, struct nvme_block *b, int status, const char *msg) {
  struct zo_nvme_req *r = b->req;
  if (status && r->status == 0) {
    r->status = status;
    snprintf(r->msg, sizeof r->msg, "%s", msg);
  }
  r->n_done += b->len;
  if (r->n_done == r->nbytes) {
    r->done = true;
    nv->n_active--;
    if (r->t_submit && zo_trace_on()) {
      const uint64_t now = zo_trace_now();
      zo_trace_async(zo_nvme_trace_track(nv), r->op == ZO_NVME_WRITE ? "nvme write" : "nvme read", r->file,
                     r->nbytes, r->t_submit, now);
      zo_trace_counter("nvme requests in flight", (uint64_t)nv->n_active, now);
    }
    pthread_cond_broadcast(&nv->done_cv);
  }
}

static int block_sync_io(struct nvme_block *b) {
  const bool wr = b->req->op == ZO_NVME_WRITE;
  if (wr) b->crc = zo_nvme_crc32c(b->buf, b->len);
  while (b->moved < b->io_len) {
    const size_t n = b->io_len - b->moved;
    const off_t off = (off_t)(b->offset + b->moved);
    const ssize_t k = zo_fault_pio(wr ? ZO_FAULT_NVME_WRITE : ZO_FAULT_NVME_READ, b->f->fd,
                                   b->buf + b->moved, n, off, ZO_NVME_ALIGN);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return -errno;
    if (k == 0) return -EIO; /* end of file inside a preallocated file */
    b->moved += (uint32_t)k;
  }
  return 0;
}

void *zo_nvme_worker_main(void *arg) {
  struct zo_nvme *nv = arg;
  struct nvme_block b;
  char msg[sizeof((struct zo_nvme_req *)0)->msg];
  pthread_mutex_lock(&nv->mu);
  for (;;) {
    while (nv->head == NULL && !nv->stop) pthread_cond_wait(&nv->work_cv, &nv->mu);
    if (nv->head == NULL) break;
    zo_nvme_blk_take(nv, &b);
    if (nv->head != NULL) pthread_cond_signal(&nv->work_cv);
    pthread_mutex_unlock(&nv->mu);
    const int err = block_sync_io(&b);
    const int status = zo_nvme_blk_check(nv, &b, err, msg, sizeof msg);
    pthread_mutex_lock(&nv->mu);
    zo_nvme_blk_finish(nv, &b, status, msg);
  }
  pthread_mutex_unlock(&nv->mu);
  return NULL;
}
