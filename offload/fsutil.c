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
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
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
  static _Thread_local char hint[96];
  if (err == -EFBIG) {
    struct rlimit rl;
    char a[32];
    if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
      snprintf(hint, sizeof hint, " (the file size limit, ulimit -f, is %s)",
               zo_format_bytes((size_t)rl.rlim_cur, a));
      return hint;
    }
    return " (a file size limit of the file system or the process)";
  }
  return err == -ENOSPC || err == -EDQUOT ? " (free space on that file system or write elsewhere)" : "";
}

/* ---- atomic file ------------------------------------------------------- */

const char *zo_file_kind(mode_t m) {
  return S_ISDIR(m)    ? "a directory"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISSOCK(m) ? "a socket"
                       : "not a regular file";
}

/* A destination that exists and is not a regular file is never renamed
 * over (as root that would replace /dev/null). */
static int check_not_special(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0 || S_ISREG(st.st_mode)) return 0; /* missing: created; errors: open reports them */
  return zo_error(S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL, "output %s is %s: outputs are regular files, written beside themselves and renamed over the old "
                  "one, so a device, FIFO or directory is never replaced; give a file path",
                  path, zo_file_kind(st.st_mode));
}

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
  int err = check_not_special(path);
  if (err) return err;
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
    err = -errno;
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

int zo_atomic_file_seal(struct zo_atomic_file *f) {
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
  return 0;
}

int zo_atomic_file_publish(struct zo_atomic_file *f) {
  ZO_ASSERT(f && f->fd < 0 && f->tmp_path);
  int err;
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

int zo_atomic_file_commit(struct zo_atomic_file *f) {
  const int err = zo_atomic_file_seal(f);
  return err ? err : zo_atomic_file_publish(f);
}

int zo_atomic_files_commit(struct zo_atomic_file *const *files, int n, const char *const *remove, int n_remove) {
  int err = 0;
  for (int k = 0; k < n && !err; k++) err = zo_atomic_file_seal(files[k]);
  if (err) {
    for (int k = 0; k < n; k++) zo_atomic_file_abort(files[k]);
    return err;
  }
  for (int k = 0; k < n_remove && !err; k++)
    if (unlink(remove[k]) != 0 && errno != ENOENT)
      err = zo_error(-errno, "cannot remove %s (it belongs to the file being replaced): %s", remove[k],
                     strerror(errno));
  if (err) {
    for (int k = 0; k < n; k++) zo_atomic_file_abort(files[k]);
    return err;
  }
  for (int k = 0; k < n; k++) {
    const int e = zo_atomic_file_publish(files[k]);
    if (e && !err) err = e;
  }
  return err;
}

void zo_atomic_file_abort(struct zo_atomic_file *f) {
  if (!f) return;
  if (f->fd >= 0) close(f->fd);
  /* Only a file we created is removed; after a failed begin tmp_path is NULL. */
  if (f->tmp_path) unlink(f->tmp_path);
  atomic_file_clear(f);
}

/* ---- output paths --------------------------------------------------------- */

int zo_output_check(const char *path) {
  struct stat st;
  if (stat(path, &st) == 0) return check_not_special(path);
  if (errno != ENOENT) return zo_error(-errno, "output %s: %s", path, strerror(errno));
  char *dir = dir_of(path);
  if (!dir) return zo_error(-ENOMEM, "output %s: out of host memory", path);
  int err = 0;
  if (stat(dir, &st) != 0) err = zo_error(-errno, "output %s: its directory %s: %s", path, dir, strerror(errno));
  else if (!S_ISDIR(st.st_mode)) err = zo_error(-ENOTDIR, "output %s: %s is not a directory", path, dir);
  free(dir);
  return err;
}

bool zo_same_file(const char *a, const char *b) {
  struct stat x, y;
  return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* The pid of a "<base>.tmp.<pid>" name, 0 when name is not one. */
static long tmp_pid(const char *name, const char *base) {
  const size_t n = strlen(base);
  if (strncmp(name, base, n) || strncmp(name + n, ".tmp.", 5)) return 0;
  const char *d = name + n + 5;
  char *end;
  errno = 0;
  const long pid = strtol(d, &end, 10);
  return d[0] >= '1' && d[0] <= '9' && !*end && !errno && pid > 0 && pid <= INT32_MAX ? pid : 0;
}

int zo_atomic_sweep_stale(const char *path) {
  char *dir = dir_of(path);
  if (!dir) return zo_error(-ENOMEM, "out of host memory");
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  DIR *d = opendir(dir);
  if (!d) {
    const int err = errno == ENOENT ? 0 : zo_error(-errno, "cannot list %s: %s", dir, strerror(errno));
    free(dir);
    return err;
  }
  int removed = 0, err = 0;
  for (struct dirent *e; (e = readdir(d));) {
    const long pid = tmp_pid(e->d_name, base);
    /* Only a dead writer's: kill(pid, 0) fails with ESRCH. A live one (or
     * one we may not signal, EPERM) is writing it now. */
    if (!pid || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    char full[PATH_MAX];
    if (unlinkat(dirfd(d), e->d_name, 0) == 0) removed++;
    else if (errno == EISDIR && snprintf(full, sizeof full, "%s/%s", dir, e->d_name) < (int)sizeof full &&
             zo_remove_tree(full) == 0) removed++; /* a directory written as a whole (export) */
    else if (errno != ENOENT && !err) err = zo_error(-errno, "cannot remove the leftover %s/%s of a killed writer "
                                                             "(pid %ld): %s", dir, e->d_name, pid, strerror(errno));
  }
  closedir(d);
  free(dir);
  return err ? err : removed;
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

/* A copy of path without trailing slashes into *out (the caller frees).
 * Returns 0 or -errno. */
static int mkdir_path_copy(const char *path, char **out) {
  ZO_ASSERT(path);
  if (!*path) return zo_error(-EINVAL, "mkdir: empty path");
  char *p = str_dup(path);
  if (!p) return zo_error(-ENOMEM, "mkdir %s: out of host memory", path);
  size_t n = strlen(p);
  while (n > 1 && p[n - 1] == '/') p[--n] = '\0';
  *out = p;
  return 0;
}

int zo_mkdir_p(const char *path, mode_t mode) {
  char *p;
  int err = mkdir_path_copy(path, &p);
  if (err) return err;
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

int zo_mkdir_leaf(const char *path, mode_t mode) {
  char *p;
  int err = mkdir_path_copy(path, &p);
  if (err) return err;
  struct stat st;
  if (stat(p, &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      err = zo_error(-ENOTDIR, "cannot create directory %s: a file that is not a directory is in the way", p);
    goto out_free;
  }
  /* A typo in a parent would otherwise become a tree of directories. */
  char *parent = dir_of(p);
  if (!parent) {
    err = zo_error(-ENOMEM, "mkdir %s: out of host memory", path);
    goto out_free;
  }
  if (stat(parent, &st) != 0)
    err = zo_error(-ENOENT, "cannot create directory %s: its parent %s does not exist (a typo? only the last "
                            "component is created: create the parent first, e.g. mkdir -p %s)", p, parent, parent);
  else if (!S_ISDIR(st.st_mode))
    err = zo_error(-ENOTDIR, "cannot create directory %s: its parent %s is not a directory", p, parent);
  else
    err = mkdir_one(p, mode);
  free(parent);
out_free:
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

/* Async-signal-safe: only open, getdents64, unlinkat and close, with the
 * directory entries in a stack buffer (no malloc, no stdio, no errno kept).
 * depth bounds the recursion. */
struct linux_dirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

static int remove_contents_raw(int dfd, int depth) {
  char buf[2048] __attribute__((aligned(8)));
  int err = 0;
  for (;;) {
    long n = syscall(SYS_getdents64, dfd, buf, sizeof buf);
    if (n <= 0) return n < 0 ? -1 : err;
    /* Entries removed while listing: the next call starts after them anyway. */
    for (long off = 0; off < n;) {
      struct linux_dirent64 *e = (struct linux_dirent64 *)(void *)(buf + off);
      off += e->d_reclen;
      const char *nm = e->d_name;
      if (nm[0] == '.' && (nm[1] == '\0' || (nm[1] == '.' && nm[2] == '\0'))) continue;
      if (unlinkat(dfd, nm, 0) == 0) continue;
      if (depth <= 0) {
        err = -1;
        continue;
      }
      int sub = openat(dfd, nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) {
        err = -1;
        continue;
      }
      if (remove_contents_raw(sub, depth - 1) != 0) err = -1;
      close(sub);
      if (unlinkat(dfd, nm, AT_REMOVEDIR) != 0) err = -1;
    }
  }
}

int zo_remove_tree_signal_safe(const char *path, int depth) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  int err = remove_contents_raw(fd, depth);
  close(fd);
  return rmdir(path) == 0 ? err : -1;
}

/* ---- run locks, probes, free space --------------------------------------- */

int zo_dir_lock(const char *dir, const char *extra, struct zo_dir_lock *l) {
  ZO_ASSERT(dir && l);
  l->fd = -1;
  char *path = path_join(dir, ZO_DIR_LOCK_NAME);
  if (!path) return zo_error(-ENOMEM, "locking %s: out of host memory", dir);
  int fd;
  do {
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    int err = -errno;
    zo_error(err, "cannot open the run lock %s: %s", path, strerror(-err));
    free(path);
    return err;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = -errno;
    if (err == -EWOULDBLOCK) {
      char who[256] = "";
      ssize_t n = pread(fd, who, sizeof who - 1, 0);
      who[n > 0 ? n : 0] = '\0';
      long pid = 0;
      char host[128] = "?";
      for (char *line = who; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (!strncmp(line, "pid ", 4)) pid = strtol(line + 4, NULL, 10);
        if (!strncmp(line, "host ", 5)) snprintf(host, sizeof host, "%s", line + 5);
        line = nl ? nl + 1 : NULL;
      }
      err = zo_error(-EBUSY, "another zoffload run (pid %ld on host %s) is writing to %s (it holds %s): "
                             "wait for it to end or use another checkpoint.dir",
                     pid, host, dir, ZO_DIR_LOCK_NAME);
    } else {
      zo_error(err, "cannot lock %s: %s", path, strerror(-err));
    }
    close(fd);
    free(path);
    return err;
  }
  char text[512], host[128] = "?";
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
  host[sizeof host - 1] = '\0';
  int n = snprintf(text, sizeof text, "pid %ld\nhost %s\n%s", (long)getpid(), host, extra ? extra : "");
  if (n < 0 || (size_t)n >= sizeof text) n = (int)strlen(text);
  /* Informational only: the lock is the flock, which the kernel drops with the process. */
  if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != (ssize_t)n) {
    int err = -errno;
    zo_error(err, "cannot write the run lock %s: %s%s", path, strerror(-err), space_hint(err));
    close(fd);
    free(path);
    return err;
  }
  free(path);
  l->fd = fd;
  return 0;
}

void zo_dir_unlock(struct zo_dir_lock *l) {
  if (!l || l->fd < 0) return;
  close(l->fd); /* drops the flock; the file stays, so no one locks an unlinked inode */
  l->fd = -1;
}

bool zo_dir_is_locked(const char *path) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  bool held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);
  return held;
}

int zo_dir_probe_writable(const char *dir) {
  ZO_ASSERT(dir);
  int err = zo_mkdir_leaf(dir, 0755);
  if (err) return err;
  char name[64];
  snprintf(name, sizeof name, ".zoffload-probe-%ld", (long)getpid());
  char *path = path_join(dir, name);
  if (!path) return zo_error(-ENOMEM, "probing %s: out of host memory", dir);
  int fd;
  do {
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    err = -errno;
    zo_error(err, "%s: cannot create a file in %s", strerror(-err), dir);
    free(path);
    return err;
  }
  ssize_t w;
  do {
    w = write(fd, "z", 1);
  } while (w < 0 && errno == EINTR);
  err = w == 1 ? fsync_retry(fd) : w < 0 ? -errno : -EIO;
  close(fd);
  unlink(path);
  free(path);
  if (err) return zo_error(err, "%s%s: cannot write a file in %s", strerror(-err), space_hint(err), dir);
  return 0;
}

int zo_fs_free_bytes(const char *path, size_t *nbytes) {
  ZO_ASSERT(path && nbytes);
  *nbytes = 0;
  char *p = str_dup(path[0] ? path : ".");
  if (!p) return zo_error(-ENOMEM, "free space of %s: out of host memory", path);
  int err = 0;
  for (;;) {
    struct statvfs st;
    if (statvfs(p, &st) == 0) {
      *nbytes = (size_t)st.f_bavail * (size_t)st.f_frsize;
      break;
    }
    char *slash = strrchr(p, '/');
    if (!slash) {
      if (statvfs(".", &st) == 0) *nbytes = (size_t)st.f_bavail * (size_t)st.f_frsize;
      else err = zo_error(-errno, "statvfs %s: %s", path, strerror(errno));
      break;
    }
    if (slash == p) p[1] = '\0';
    else *slash = '\0';
  }
  free(p);
  return err;
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
