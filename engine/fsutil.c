/* Durable file-system operations for checkpoints. A file is replaced by
 * writing "<path>.tmp.<pid>" beside it, fsyncing it, renaming it over the
 * destination and fsyncing the directory, so a crash leaves either the old or
 * the new contents, never a mix. Every system call is checked; messages name
 * the path and strerror. Removal walks with *at() calls on open directory
 * descriptors and O_NOFOLLOW, so a symlink planted in a tree is unlinked and
 * never followed. Nothing here buffers: writes go straight to write(2). */
#include "zo/fsutil.h"
#include "zo/fault.h" /* zo_fault_*: the plain calls unless ZO_FAULT_INJECTION */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* read(2)/write(2) move at most 0x7ffff000 bytes per call on Linux. */
#define ZO_IO_CHUNK ((size_t)1 << 30)

static char *str_dup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* The directory holding path: "." for a bare name, "/" for "/name". */
static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return str_dup(".");
  size_t n = slash == path ? 1 : (size_t)(slash - path);
  char *d = malloc(n + 1);
  if (!d) return NULL;
  memcpy(d, path, n);
  d[n] = '\0';
  return d;
}

static char *path_join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *p = malloc(a + 1 + b + 1);
  if (!p) return NULL;
  memcpy(p, dir, a);
  p[a] = '/';
  memcpy(p + a + 1, name, b + 1);
  return p;
}

static int close_checked(int fd) {
  /* Linux releases the descriptor even when close fails with EINTR, and the
   * data was already fsynced, so only other errors are real failures. */
  if (close(fd) < 0 && errno != EINTR) return -errno;
  return 0;
}

static int fsync_retry(int fd) {
  while (zo_fault_fsync(fd) < 0) {
    if (errno != EINTR) return -errno;
  }
  return 0;
}

static const char *space_hint(int err) {
  return err == -ENOSPC || err == -EDQUOT ? " (free space on that file system or write elsewhere)" : "";
}

/* ---- atomic file ------------------------------------------------------- */

static void atomic_file_clear(struct zo_atomic_file *f) {
  free(f->path);
  free(f->tmp_path);
  f->path = NULL;
  f->tmp_path = NULL;
  f->fd = -1;
  f->nbytes = 0;
}

int zo_atomic_file_begin(struct zo_atomic_file *f, const char *path) {
  ZO_ASSERT(f && path);
  f->fd = -1;
  f->path = NULL;
  f->tmp_path = NULL;
  f->nbytes = 0;
  if (!*path) return zo_error(-EINVAL, "atomic write: empty destination path");
  size_t n = strlen(path) + 32;
  f->path = str_dup(path);
  f->tmp_path = malloc(n);
  if (!f->path || !f->tmp_path) {
    atomic_file_clear(f);
    return zo_error(-ENOMEM, "atomic write of %s: out of host memory for the path", path);
  }
  snprintf(f->tmp_path, n, "%s.tmp.%ld", path, (long)getpid());
  /* No O_EXCL: a temp file with our pid can only be a leftover of a crashed
   * process that had the same pid, and truncating it is what we want. */
  int fd;
  do {
    fd = open(f->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    int err = -errno;
    zo_error(err, "cannot create %s (to replace %s): %s", f->tmp_path, path, strerror(-err));
    atomic_file_clear(f);
    return err;
  }
  f->fd = fd;
  return 0;
}

int zo_atomic_file_write(struct zo_atomic_file *f, const void *data, size_t nbytes) {
  ZO_ASSERT(f && f->fd >= 0 && (data || nbytes == 0));
  const char *p = data;
  while (nbytes > 0) {
    size_t chunk = nbytes < ZO_IO_CHUNK ? nbytes : ZO_IO_CHUNK;
    ssize_t w = zo_fault_write(f->fd, p, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      /* write returning 0 for a non-empty buffer means the device took
       * nothing and will not: treat it as an I/O error, never spin. */
      int err = w < 0 ? -errno : -EIO;
      zo_error(err, "writing %s (after %zu bytes): %s%s", f->tmp_path, f->nbytes, strerror(-err),
               space_hint(err));
      zo_atomic_file_abort(f);
      return err;
    }
    p += w;
    nbytes -= (size_t)w;
    f->nbytes += (size_t)w;
  }
  return 0;
}

int zo_atomic_file_commit(struct zo_atomic_file *f) {
  ZO_ASSERT(f && f->fd >= 0);
  int err = fsync_retry(f->fd);
  if (err < 0) {
    zo_error(err, "fsync of %s: %s%s", f->tmp_path, strerror(-err), space_hint(err));
    zo_atomic_file_abort(f);
    return err;
  }
  err = close_checked(f->fd);
  f->fd = -1;
  if (err < 0) {
    zo_error(err, "closing %s: %s", f->tmp_path, strerror(-err));
    zo_atomic_file_abort(f);
    return err;
  }
  if (zo_fault_rename(f->tmp_path, f->path) < 0) {
    err = -errno;
    zo_error(err, "renaming %s to %s: %s", f->tmp_path, f->path, strerror(-err));
    zo_atomic_file_abort(f);
    return err;
  }
  char *dir = dir_of(f->path);
  if (!dir) {
    err = zo_error(-ENOMEM, "atomic write of %s: out of host memory", f->path);
  } else {
    err = zo_fsync_dir(dir);
    free(dir);
  }
  atomic_file_clear(f);
  return err;
}

void zo_atomic_file_abort(struct zo_atomic_file *f) {
  if (!f) return;
  if (f->fd >= 0) close(f->fd);
  /* Only a file we created is removed; after a failed begin tmp_path is NULL. */
  if (f->tmp_path) unlink(f->tmp_path);
  atomic_file_clear(f);
}

int zo_write_file_atomic(const char *path, const void *data, size_t nbytes) {
  struct zo_atomic_file f;
  int err = zo_atomic_file_begin(&f, path);
  if (err < 0) return err;
  err = zo_atomic_file_write(&f, data, nbytes);
  if (err < 0) return err;
  return zo_atomic_file_commit(&f);
}

/* ---- directories ------------------------------------------------------- */

int zo_fsync_dir(const char *dir) {
  ZO_ASSERT(dir);
  int fd;
  do {
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    int err = -errno;
    return zo_error(err, "cannot open directory %s to fsync it: %s", dir, strerror(-err));
  }
  int err = fsync_retry(fd);
  if (err == -EINVAL) err = 0; /* file systems that cannot sync directories */
  close(fd);
  if (err < 0) return zo_error(err, "fsync of directory %s: %s", dir, strerror(-err));
  return 0;
}

static int mkdir_one(const char *p, mode_t mode) {
  if (mkdir(p, mode) == 0) return 0;
  int err = -errno;
  if (err == -EEXIST) {
    struct stat st;
    if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
    return zo_error(-ENOTDIR, "cannot create directory %s: a file that is not a directory is in the way", p);
  }
  return zo_error(err, "cannot create directory %s: %s", p, strerror(-err));
}

int zo_mkdir_p(const char *path, mode_t mode) {
  ZO_ASSERT(path);
  if (!*path) return zo_error(-EINVAL, "mkdir: empty path");
  char *p = str_dup(path);
  if (!p) return zo_error(-ENOMEM, "mkdir %s: out of host memory", path);
  size_t n = strlen(p);
  while (n > 1 && p[n - 1] == '/') p[--n] = '\0';
  int err = 0;
  for (char *s = p + 1; *s && err == 0; s++) {
    if (*s != '/' || s[-1] == '/') continue;
    *s = '\0';
    err = mkdir_one(p, mode);
    *s = '/';
  }
  if (err == 0) err = mkdir_one(p, mode);
  free(p);
  return err;
}

static int fsync_parents(const char *a, const char *b) {
  char *da = dir_of(a), *db = b ? dir_of(b) : NULL;
  int err = 0;
  if (!da || (b && !db)) {
    err = zo_error(-ENOMEM, "fsync of the parent of %s: out of host memory", a);
  } else {
    err = zo_fsync_dir(da);
    if (err == 0 && db && strcmp(da, db) != 0) err = zo_fsync_dir(db);
  }
  free(da);
  free(db);
  return err;
}

int zo_rename_atomic_dir(const char *tmpdir, const char *dst) {
  ZO_ASSERT(tmpdir && dst);
  struct stat st;
  if (lstat(tmpdir, &st) < 0) {
    int err = -errno;
    return zo_error(err, "cannot publish %s as %s: %s", tmpdir, dst, strerror(-err));
  }
  if (!S_ISDIR(st.st_mode))
    return zo_error(-ENOTDIR, "cannot publish %s as %s: %s is not a directory", tmpdir, dst, tmpdir);
  int err = zo_fsync_dir(tmpdir);
  if (err < 0) return err;
  if (zo_fault_rename(tmpdir, dst) == 0) return fsync_parents(dst, tmpdir);
  err = -errno;
  if (err != -ENOTEMPTY && err != -EEXIST)
    return zo_error(err, "renaming directory %s to %s: %s", tmpdir, dst, strerror(-err));
  /* dst is a non-empty directory: swap the two atomically, so readers see the
   * old tree or the new one, then remove the old one from tmpdir. */
  if (renameat2(AT_FDCWD, tmpdir, AT_FDCWD, dst, RENAME_EXCHANGE) < 0) {
    err = -errno;
    return zo_error(err, "replacing directory %s with %s (rename exchange): %s", dst, tmpdir,
                    strerror(-err));
  }
  err = fsync_parents(dst, tmpdir);
  if (err < 0) return err;
  err = zo_remove_tree(tmpdir);
  if (err < 0) return err;
  return fsync_parents(tmpdir, NULL);
}

/* ---- removal ----------------------------------------------------------- */

static int remove_at(int parent, const char *name, const char *shown, dev_t dev);

static int remove_contents(int dfd, const char *shown, dev_t dev) {
  DIR *d = fdopendir(dfd);
  if (!d) {
    int err = -errno;
    close(dfd);
    return zo_error(err, "cannot list %s: %s", shown, strerror(-err));
  }
  int err = 0;
  for (;;) {
    errno = 0;
    struct dirent *e = readdir(d);
    if (!e) {
      if (errno) {
        int e2 = errno;
        err = zo_error(-e2, "cannot list %s: %s", shown, strerror(e2));
      }
      break;
    }
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char *child = path_join(shown, e->d_name);
    if (!child) {
      err = zo_error(-ENOMEM, "removing %s: out of host memory", shown);
      break;
    }
    err = remove_at(dirfd(d), e->d_name, child, dev);
    free(child);
    if (err < 0) break;
  }
  closedir(d);
  return err;
}

/* Removes name (shown as `shown` in messages) relative to directory parent. */
static int remove_at(int parent, const char *name, const char *shown, dev_t dev) {
  struct stat st;
  if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    int err = -errno;
    return zo_error(err, "cannot remove %s: %s", shown, strerror(-err));
  }
  if (!S_ISDIR(st.st_mode)) {
    if (unlinkat(parent, name, 0) < 0) {
      int err = -errno;
      return zo_error(err, "cannot remove %s: %s", shown, strerror(-err));
    }
    return 0;
  }
  if (st.st_dev != dev)
    return zo_error(-EXDEV, "refusing to remove %s: it is on another file system (a mount point)", shown);
  /* O_NOFOLLOW: if the directory was swapped for a symlink since fstatat, the
   * open fails instead of walking wherever the link points. */
  int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int err = -errno;
    return zo_error(err, "cannot open directory %s to remove it: %s", shown, strerror(-err));
  }
  int err = remove_contents(fd, shown, dev);
  if (err < 0) return err;
  if (unlinkat(parent, name, AT_REMOVEDIR) < 0) {
    err = -errno;
    return zo_error(err, "cannot remove directory %s: %s", shown, strerror(-err));
  }
  return 0;
}

int zo_remove_tree(const char *path) {
  ZO_ASSERT(path);
  if (!*path) return zo_error(-EINVAL, "remove: empty path");
  struct stat st;
  if (lstat(path, &st) < 0) {
    int err = -errno;
    return zo_error(err, "cannot remove %s: %s", path, strerror(-err));
  }
  return remove_at(AT_FDCWD, path, path, st.st_dev);
}

/* ---- reading ----------------------------------------------------------- */

int zo_read_file(const char *path, void **data, size_t *nbytes, size_t max_bytes) {
  ZO_ASSERT(path && data && nbytes);
  *data = NULL;
  *nbytes = 0;
  int fd;
  do {
    fd = open(path, O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    int err = -errno;
    return zo_error(err, "cannot open %s: %s", path, strerror(-err));
  }
  int err = 0;
  char *buf = NULL;
  struct stat st;
  if (fstat(fd, &st) < 0) {
    int e2 = errno;
    err = zo_error(-e2, "cannot stat %s: %s", path, strerror(e2));
    goto out_close;
  }
  if (S_ISDIR(st.st_mode)) {
    err = zo_error(-EISDIR, "cannot read %s: it is a directory", path);
    goto out_close;
  }
  if (!S_ISREG(st.st_mode)) {
    err = zo_error(-EINVAL, "cannot read %s: not a regular file", path);
    goto out_close;
  }
  size_t size = (size_t)st.st_size;
  if ((uint64_t)st.st_size > (uint64_t)max_bytes) {
    char a[32], b[32];
    err = zo_error(-EFBIG, "%s is %s, larger than the %s allowed", path,
                   zo_format_bytes(size, a), zo_format_bytes(max_bytes, b));
    goto out_close;
  }
  buf = malloc(size + 1);
  if (!buf) {
    char a[32];
    err = zo_error(-ENOMEM, "reading %s: out of host memory for %s", path, zo_format_bytes(size + 1, a));
    goto out_close;
  }
  size_t got = 0;
  while (got < size) {
    size_t want = size - got < ZO_IO_CHUNK ? size - got : ZO_IO_CHUNK;
    ssize_t r = read(fd, buf + got, want);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e2 = errno;
      err = zo_error(-e2, "reading %s (at byte %zu): %s", path, got, strerror(e2));
      goto out_free;
    }
    if (r == 0) break; /* the file shrank since fstat */
    got += (size_t)r;
  }
  buf[got] = '\0';
  *data = buf;
  *nbytes = got;
  close(fd);
  return 0;

out_free:
  free(buf);
out_close:
  close(fd);
  return err;
}

/* ---- checksums --------------------------------------------------------- */

uint32_t zo_crc32(uint32_t crc, const void *data, size_t n) {
  /* zlib returns its initial value, not crc, for a NULL buffer. */
  if (n == 0) return crc;
  return (uint32_t)crc32_z(crc, data, n);
}
