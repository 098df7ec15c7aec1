/* NVMe store, public API: the private directory, one preallocated 0600
 * file per tensor class, aligned buffers and their registration, requests
 * (validated here, queued for an engine) and waiting. The engines live in
 * nvme_uring.c (io_uring, the default) and nvme_io.c (pread/pwrite threads,
 * the fallback); both cut requests into blocks and keep a CRC32C per block.
 * Nothing outside the private directory is ever written or removed, so no
 * error here can touch a checkpoint. Ordering between overlapping requests
 * is the caller's job. */
#include "nvme_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Creates path, not its parents: a typo in nvme_path must not become a tree
 * of directories. A missing parent is -ENOENT. */
static int mkdir_leaf(const char *path) {
  if (mkdir(path, 0700) != 0 && errno != EEXIST) return -errno;
  struct stat st;
  if (stat(path, &st) != 0) return -errno;
  return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* Starts n threads running fn. Returns 0 or -errno; threads started before a
 * failure are counted in n_threads, for zo_nvme_free to stop. */
static int threads_start(struct zo_nvme *nv, int n, void *(*fn)(void *)) {
  nv->threads = calloc((size_t)n, sizeof *nv->threads);
  if (nv->threads == NULL) return zo_error(-ENOMEM, "nvme: out of memory");
  for (int i = 0; i < n; i++) {
    const int r = pthread_create(&nv->threads[i], NULL, fn, nv);
    if (r != 0)
      return zo_error(-r, "nvme: cannot start I/O thread %d of %d: %s", i + 1, n, strerror(r));
    nv->n_threads++;
  }
  return 0;
}

static void engine_wake(struct zo_nvme *nv) {
  if (nv->uring) zo_nvme_ring_wake(nv);
}

zo_nvme_t zo_nvme_init(const struct zo_nvme_config *cfg) {
  ZO_ASSERT(cfg != NULL);
  int err;
  if (cfg->dir == NULL || cfg->dir[0] == '\0') {
    err = zo_error(-EINVAL, "nvme: no directory given: set zero_optimization.*.nvme_path");
    goto out_errno;
  }
  if (cfg->block_size == 0 || cfg->block_size % ZO_NVME_ALIGN != 0 ||
      cfg->block_size > ZO_NVME_MAX_BLOCK) {
    err = zo_error(-EINVAL, "nvme: aio.block_size = %zu: must be a multiple of %d up to %u",
                   cfg->block_size, ZO_NVME_ALIGN, ZO_NVME_MAX_BLOCK);
    goto out_errno;
  }
  if (cfg->queue_depth < 1 || cfg->queue_depth > ZO_NVME_MAX_QUEUE_DEPTH) {
    err = zo_error(-EINVAL, "nvme: aio.queue_depth = %d: must be in 1..%d", cfg->queue_depth,
                   ZO_NVME_MAX_QUEUE_DEPTH);
    goto out_errno;
  }
  ZO_ASSERT(zo_nvme_crc32c("123456789", 9) == 0xE3069283u);

  struct zo_nvme *nv = calloc(1, sizeof *nv);
  if (nv == NULL) {
    err = zo_error(-ENOMEM, "nvme: out of memory");
    goto out_errno;
  }
  nv->trace_track = -1;
  nv->block_size = cfg->block_size;
  nv->queue_depth = cfg->queue_depth;
  for (int i = 0; i < ZO_NVME_MAX_FILES; i++) nv->files[i].fd = -1;
#ifdef ZO_HAVE_LIBURING
  nv->wake_fd = -1;
#endif

  err = mkdir_leaf(cfg->dir);
  if (err) {
    zo_error(err, "nvme: cannot create nvme_path %s: %s%s", cfg->dir, strerror(-err),
             err == -ENOENT ? " (its parent directory does not exist: only the last component is created)" : "");
    goto out_free;
  }
  const size_t n_dir = strlen(cfg->dir) + sizeof "/zoffload-nvme-XXXXXX";
  char *dir = malloc(n_dir);
  if (dir == NULL) {
    err = zo_error(-ENOMEM, "nvme: out of memory");
    goto out_free;
  }
  snprintf(dir, n_dir, "%s/zoffload-nvme-XXXXXX", cfg->dir);
  if (mkdtemp(dir) == NULL) {
    err = zo_error(-errno, "nvme: cannot create a directory in nvme_path %s: %s", cfg->dir,
                   strerror(errno));
    free(dir);
    goto out_free;
  }
  nv->dir = dir;
  if (chmod(dir, 0700) != 0) {
    err = zo_error(-errno, "nvme: chmod 0700 %s: %s", dir, strerror(errno));
    goto out_free;
  }

  /* tmpfs before Linux 6.6 and some FUSE file systems refuse O_DIRECT. */
  char probe[4096];
  snprintf(probe, sizeof probe, "%s/.direct-probe", dir);
  int fd = open(probe, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
  nv->direct = fd >= 0;
  if (fd < 0 && errno == EINVAL) {
    zo_nvme_warn("the file system of %s does not support O_DIRECT: the NVMe tier uses buffered I/O "
                 "(page cache); point nvme_path at a local disk file system for direct I/O",
                 cfg->dir);
  } else if (fd < 0) {
    err = zo_error(-errno, "nvme: cannot create files in %s: %s", dir, strerror(errno));
    goto out_free;
  } else {
    close(fd);
  }
  if (unlink(probe) != 0 && errno != ENOENT) {
    err = zo_error(-errno, "nvme: unlink %s: %s", probe, strerror(errno));
    goto out_free;
  }

  if (pthread_mutex_init(&nv->mu, NULL) != 0) {
    err = zo_error(-ENOMEM, "nvme: pthread_mutex_init failed");
    goto out_free;
  }
  if (pthread_cond_init(&nv->done_cv, NULL) != 0) {
    pthread_mutex_destroy(&nv->mu);
    err = zo_error(-ENOMEM, "nvme: pthread_cond_init failed");
    goto out_free;
  }
  if (pthread_cond_init(&nv->work_cv, NULL) != 0) {
    pthread_cond_destroy(&nv->done_cv);
    pthread_mutex_destroy(&nv->mu);
    err = zo_error(-ENOMEM, "nvme: pthread_cond_init failed");
    goto out_free;
  }
  nv->sync_ok = true;

  if (!cfg->force_fallback) {
    char why[256];
    err = zo_nvme_ring_open(nv, why, sizeof why);
    if (err == 0) {
      nv->uring = true;
      err = threads_start(nv, 1, zo_nvme_ring_main);
      if (err) goto out_free;
    } else {
      const int n = nv->queue_depth < NVME_MAX_WORKERS ? nv->queue_depth : NVME_MAX_WORKERS;
      zo_nvme_warn(
          "io_uring is unavailable (%s): the NVMe tier uses %d pread/pwrite threads instead", why,
          n);
    }
  }
  if (!nv->uring) {
    const int n = nv->queue_depth < NVME_MAX_WORKERS ? nv->queue_depth : NVME_MAX_WORKERS;
    err = threads_start(nv, n, zo_nvme_worker_main);
    if (err) goto out_free;
  }
  return nv;

out_free:
  zo_nvme_free(nv);
out_errno:
  errno = -err;
  return NULL;
}

void zo_nvme_free(zo_nvme_t nv) {
  if (nv == NULL) return;
  if (nv->n_threads > 0) {
    pthread_mutex_lock(&nv->mu);
    nv->stop = true;
    pthread_cond_broadcast(&nv->work_cv);
    pthread_mutex_unlock(&nv->mu);
    engine_wake(nv);
    for (int i = 0; i < nv->n_threads; i++) pthread_join(nv->threads[i], NULL);
  }
  zo_nvme_ring_close(nv);
  for (int i = 0; i < ZO_NVME_MAX_FILES; i++) {
    struct nvme_file *f = &nv->files[i];
    if (f->fd >= 0) close(f->fd);
    if (f->path && unlink(f->path) != 0 && errno != ENOENT)
      zo_nvme_warn("nvme: could not remove %s: %s", f->path, strerror(errno));
    free(f->path);
    free(f->blocks);
  }
  if (nv->dir && rmdir(nv->dir) != 0 && errno != ENOENT)
    zo_nvme_warn("nvme: could not remove directory %s: %s", nv->dir, strerror(errno));
  free(nv->dir);
  free(nv->regs);
  free(nv->threads);
  if (nv->sync_ok) {
    pthread_cond_destroy(&nv->work_cv);
    pthread_cond_destroy(&nv->done_cv);
    pthread_mutex_destroy(&nv->mu);
  }
  free(nv);
}

const char *zo_nvme_engine(zo_nvme_t nv) { return nv->uring ? "io_uring" : "threads"; }
bool zo_nvme_is_direct(zo_nvme_t nv) { return nv->direct; }
const char *zo_nvme_dir(zo_nvme_t nv) { return nv->dir; }
size_t zo_nvme_block_size(zo_nvme_t nv) { return nv->block_size; }
int zo_nvme_queue_depth(zo_nvme_t nv) { return nv->queue_depth; }

static bool class_name_ok(const char *name) {
  const size_t n = strlen(name);
  if (n == 0 || n >= sizeof((struct nvme_file *)0)->name || name[0] == '.') return false;
  for (size_t i = 0; i < n; i++) {
    const char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-' || c == '.'))
      return false;
  }
  return true;
}

int zo_nvme_file_create(zo_nvme_t nv, const char *class_name, size_t nbytes, int *file_id) {
  ZO_ASSERT(nv != NULL && class_name != NULL && file_id != NULL);
  if (!class_name_ok(class_name))
    return zo_error(-EINVAL,
                    "nvme: tensor class name '%s': use 1..63 of [A-Za-z0-9_.-], not "
                    "starting with '.'",
                    class_name);
  if (nbytes == 0) return zo_error(-EINVAL, "nvme: file for '%s' of 0 bytes", class_name);
  const size_t phys = zo_nvme_round_up(nbytes, ZO_NVME_ALIGN);
  const size_t n_blocks = (nbytes + nv->block_size - 1) / nv->block_size;
  char asked[32], space[96];
  int err = 0;

  const size_t n_path = strlen(nv->dir) + strlen(class_name) + 2;
  char *path = malloc(n_path);
  _Atomic uint64_t *blocks = calloc(n_blocks, sizeof *blocks);
  if (path == NULL || blocks == NULL) {
    err = zo_error(-ENOMEM, "nvme: out of memory");
    goto out_free;
  }
  snprintf(path, n_path, "%s/%s", nv->dir, class_name);
  const int fd =
      open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | (nv->direct ? O_DIRECT : 0), 0600);
  if (fd < 0) {
    err = -errno;
    if (err == -EEXIST)
      zo_error(err, "nvme: tensor class '%s' already has a file (%s)", class_name, path);
    else
      zo_error(err, "nvme: cannot create %s: %s", path, strerror(-err));
    goto out_free;
  }
  /* The umask may have taken bits away; 0600 is the contract. */
  if (fchmod(fd, 0600) != 0) {
    err = zo_error(-errno, "nvme: chmod 0600 %s: %s", path, strerror(errno));
    goto out_unlink;
  }
  if (fallocate(fd, 0, 0, (off_t)phys) != 0) {
    err = -errno;
    if (err == -EOPNOTSUPP) {
      zo_nvme_warn("nvme: %s cannot preallocate (fallocate: %s): a full disk will show up at the "
                   "first write instead of now",
                   nv->dir, strerror(-err));
      if (ftruncate(fd, (off_t)phys) == 0) {
        err = 0;
      } else {
        err = zo_error(-errno, "nvme: ftruncate %s to %zu bytes: %s", path, phys, strerror(errno));
        goto out_unlink;
      }
    } else {
      /* Give back what a partial preallocation took before measuring free space. */
      close(fd);
      unlink(path);
      if (err == -ENOSPC || err == -EDQUOT)
        zo_error(err,
                 "nvme: cannot reserve %s (%zu bytes) for '%s' in %s: %s (%s on that file "
                 "system). Free space there, point nvme_path at a larger drive, or keep this "
                 "state off NVMe (zero_optimization.offload_*.device)",
                 zo_format_bytes(phys, asked), phys, class_name, nv->dir,
                 err == -ENOSPC ? "no space left on device" : "disk quota exceeded",
                 zo_nvme_fs_space(nv->dir, space));
      else
        zo_error(err, "nvme: fallocate %s (%zu bytes): %s", path, phys, strerror(-err));
      goto out_free;
    }
  }

  pthread_mutex_lock(&nv->mu);
  if (nv->n_files == ZO_NVME_MAX_FILES) {
    pthread_mutex_unlock(&nv->mu);
    err = zo_error(-EMFILE, "nvme: more than %d tensor-class files", ZO_NVME_MAX_FILES);
    goto out_unlink;
  }
  const int id = nv->n_files;
  struct nvme_file *f = &nv->files[id];
  snprintf(f->name, sizeof f->name, "%s", class_name);
  f->path = path;
  f->fd = fd;
  f->nbytes = nbytes;
  f->n_blocks = n_blocks;
  f->blocks = blocks;
  nv->n_files++;
  pthread_mutex_unlock(&nv->mu);
  *file_id = id;
  return 0;

out_unlink:
  close(fd);
  unlink(path);
out_free:
  free(blocks);
  free(path);
  return err;
}

const char *zo_nvme_file_path(zo_nvme_t nv, int file_id) {
  ZO_ASSERT(nv != NULL);
  pthread_mutex_lock(&nv->mu);
  const char *path = file_id >= 0 && file_id < nv->n_files ? nv->files[file_id].path : NULL;
  pthread_mutex_unlock(&nv->mu);
  ZO_ASSERT(path != NULL);
  return path;
}

void *zo_nvme_buffer_alloc(size_t nbytes) {
  void *p = NULL;
  const size_t n = zo_nvme_round_up(nbytes ? nbytes : 1, ZO_NVME_ALIGN);
  if (posix_memalign(&p, ZO_NVME_ALIGN, n) != 0) return NULL;
  return p;
}

void zo_nvme_buffer_free(void *buf) { free(buf); }

static int cmp_buffer(const void *a, const void *b) {
  const char *x = ((const struct zo_nvme_buffer *)a)->base;
  const char *y = ((const struct zo_nvme_buffer *)b)->base;
  return x < y ? -1 : x > y;
}

int zo_nvme_register_buffers(zo_nvme_t nv, const struct zo_nvme_buffer *bufs, int n_bufs) {
  ZO_ASSERT(nv != NULL && n_bufs >= 0 && (bufs != NULL || n_bufs == 0));
  if (!nv->uring) return 0;
  size_t n_pieces = 0, total = 0;
  for (int i = 0; i < n_bufs; i++) {
    if ((uintptr_t)bufs[i].base % ZO_NVME_ALIGN != 0 || bufs[i].nbytes == 0)
      return zo_error(-EINVAL,
                      "nvme: buffer %d to register (%p, %zu bytes) is empty or not "
                      "%d-aligned",
                      i, bufs[i].base, bufs[i].nbytes, ZO_NVME_ALIGN);
    n_pieces += (bufs[i].nbytes + NVME_REG_PIECE_MAX - 1) / NVME_REG_PIECE_MAX;
    total += bufs[i].nbytes;
  }
  if (n_pieces > NVME_REG_PIECES_MAX)
    return zo_error(-EINVAL, "nvme: %zu fixed buffers of at most 1 GiB asked; the kernel takes %d",
                    n_pieces, NVME_REG_PIECES_MAX);
  struct zo_nvme_buffer *regs = n_pieces ? malloc(n_pieces * sizeof *regs) : NULL;
  struct iovec *iov = n_pieces ? malloc(n_pieces * sizeof *iov) : NULL;
  if (n_pieces && (regs == NULL || iov == NULL)) {
    free(regs);
    free(iov);
    return zo_error(-ENOMEM, "nvme: out of memory");
  }
  size_t k = 0;
  for (int i = 0; i < n_bufs; i++) {
    for (size_t off = 0; off < bufs[i].nbytes; off += NVME_REG_PIECE_MAX, k++) {
      regs[k].base = (char *)bufs[i].base + off;
      regs[k].nbytes =
          bufs[i].nbytes - off < NVME_REG_PIECE_MAX ? bufs[i].nbytes - off : NVME_REG_PIECE_MAX;
    }
  }
  if (n_pieces) qsort(regs, n_pieces, sizeof *regs, cmp_buffer);
  for (size_t i = 0; i < n_pieces; i++) {
    if (i > 0 && (char *)regs[i - 1].base + regs[i - 1].nbytes > (char *)regs[i].base) {
      const void *at = regs[i].base;
      free(regs);
      free(iov);
      return zo_error(-EINVAL, "nvme: buffers to register overlap at %p", at);
    }
    iov[i] = (struct iovec){.iov_base = regs[i].base, .iov_len = regs[i].nbytes};
  }

  const int r = zo_nvme_ring_register(nv, regs, iov, (int)n_pieces);
  if (r == -EBUSY)
    return zo_error(r, "nvme: cannot change registered buffers with requests in flight: wait "
                       "for them first");
  if (r < 0) {
    char tot[32];
    return zo_error(r, "nvme: registering %d buffer(s) of %s with io_uring failed: %s%s", n_bufs,
                    zo_format_bytes(total, tot), strerror(-r),
                    r == -ENOMEM ? ". Raise the locked-memory limit (ulimit -l, RLIMIT_MEMLOCK) "
                                   "or run with unregistered buffers"
                                 : "");
  }
  return 0;
}

int zo_nvme_unregister_buffers(zo_nvme_t nv) { return zo_nvme_register_buffers(nv, NULL, 0); }

static int submit(struct zo_nvme *nv, enum zo_nvme_op op, int file_id, uint64_t offset, void *buf,
                  size_t nbytes, struct zo_nvme_req *req) {
  ZO_ASSERT(nv != NULL && req != NULL);
  req->file = file_id;
  req->op = op;
  req->offset = offset;
  req->nbytes = nbytes;
  req->buf = buf;
  req->next = NULL;
  req->n_dispatched = 0;
  req->n_done = 0;
  req->status = 0;
  req->magic = NVME_REQ_MAGIC;
  req->done = false;
  req->msg[0] = '\0';
  const char *what = op == ZO_NVME_WRITE ? "write" : "read";
  int err = 0;
  pthread_mutex_lock(&nv->mu);
  if (file_id < 0 || file_id >= nv->n_files) {
    err = -EBADF;
    snprintf(req->msg, sizeof req->msg, "nvme: %s of file id %d: only %d file(s) exist", what,
             file_id, nv->n_files);
  } else {
    const struct nvme_file *f = &nv->files[file_id];
    err = -EINVAL;
    if (offset % nv->block_size != 0)
      snprintf(req->msg, sizeof req->msg,
               "nvme: %s of '%s' at offset %llu: offsets must be multiples of the block size "
               "(aio.block_size = %zu)",
               what, f->name, (unsigned long long)offset, nv->block_size);
    else if ((uintptr_t)buf % ZO_NVME_ALIGN != 0)
      snprintf(req->msg, sizeof req->msg,
               "nvme: %s of '%s': buffer %p is not %d-aligned (use zo_nvme_buffer_alloc)", what,
               f->name, buf, ZO_NVME_ALIGN);
    else if (offset > f->nbytes || nbytes > f->nbytes - offset)
      snprintf(req->msg, sizeof req->msg,
               "nvme: %s of bytes [%llu, %llu) of '%s' which holds %zu bytes", what,
               (unsigned long long)offset, (unsigned long long)(offset + nbytes), f->name,
               f->nbytes);
    else
      err = 0;
  }
  if (err || nbytes == 0) {
    req->status = err;
    req->done = true;
  } else {
    if (nv->tail)
      nv->tail->next = req;
    else
      nv->head = req;
    nv->tail = req;
    nv->n_active++;
    req->t_submit = 0;
    if (zo_trace_on()) {
      req->t_submit = zo_trace_now();
      zo_trace_counter("nvme requests in flight", (uint64_t)nv->n_active, req->t_submit);
    }
    if (!nv->uring) pthread_cond_signal(&nv->work_cv);
  }
  pthread_mutex_unlock(&nv->mu);
  if (err) return zo_error(err, "%s", req->msg);
  if (nbytes > 0) engine_wake(nv);
  return 0;
}

int zo_nvme_write_async(zo_nvme_t nv, int file_id, uint64_t offset, const void *buf, size_t nbytes,
                        struct zo_nvme_req *req) {
  return submit(nv, ZO_NVME_WRITE, file_id, offset, (void *)buf, nbytes, req);
}

int zo_nvme_read_async(zo_nvme_t nv, int file_id, uint64_t offset, void *buf, size_t nbytes,
                       struct zo_nvme_req *req) {
  return submit(nv, ZO_NVME_READ, file_id, offset, buf, nbytes, req);
}

int zo_nvme_wait(zo_nvme_t nv, struct zo_nvme_req *req) {
  ZO_ASSERT(nv != NULL && req != NULL && req->magic == NVME_REQ_MAGIC);
  pthread_mutex_lock(&nv->mu);
  while (!req->done) pthread_cond_wait(&nv->done_cv, &nv->mu);
  const int status = req->status;
  pthread_mutex_unlock(&nv->mu);
  if (status) return zo_error(status, "%s", req->msg);
  return 0;
}

bool zo_nvme_is_done(zo_nvme_t nv, struct zo_nvme_req *req) {
  ZO_ASSERT(nv != NULL && req != NULL && req->magic == NVME_REQ_MAGIC);
  pthread_mutex_lock(&nv->mu);
  const bool done = req->done;
  pthread_mutex_unlock(&nv->mu);
  return done;
}

int zo_nvme_write(zo_nvme_t nv, int file_id, uint64_t offset, const void *buf, size_t nbytes) {
  struct zo_nvme_req req;
  zo_nvme_write_async(nv, file_id, offset, buf, nbytes, &req);
  return zo_nvme_wait(nv, &req);
}

int zo_nvme_read(zo_nvme_t nv, int file_id, uint64_t offset, void *buf, size_t nbytes) {
  struct zo_nvme_req req;
  zo_nvme_read_async(nv, file_id, offset, buf, nbytes, &req);
  return zo_nvme_wait(nv, &req);
}
