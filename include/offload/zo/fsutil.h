/* File-system helpers for checkpoints: atomic file replacement (write a temp
 * file beside the destination, fsync, rename over it, fsync the directory),
 * atomic directory publication, recursive removal that never follows
 * symlinks, whole-file reads and a CRC-32 (zlib's) for integrity checks.
 * Invariant: after a failed atomic write the destination is untouched and no
 * temporary file is left behind. Every function here is synchronous and may be
 * called from any thread; messages go to zo_last_error(). */
#ifndef ZO_FSUTIL_H
#define ZO_FSUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "zo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A file being written under a temporary name. Lifecycle:
 * begin -> write ... -> commit, or abort at any point. A failed write or
 * commit cleans up on its own (temp removed, destination untouched); abort
 * after that, after commit, or after a failed begin is a harmless no-op.
 * The temp name depends only on path and pid: two threads of one process
 * must not write the same path at once. */
struct zo_atomic_file {
  int fd;         /* open temp file, -1 when none */
  char *path;     /* destination (owned) */
  char *tmp_path; /* "<path>.tmp.<pid>" in the same directory (owned) */
  size_t nbytes;  /* bytes written so far */
};

/* Creates "<path>.tmp.<pid>" with mode 0644 (less the umask), truncating a
 * stale one. A path that exists and is not a regular file (a device, FIFO,
 * directory) is refused (zo_output_check): it is never renamed over.
 * Returns 0 or -errno. */
int zo_atomic_file_begin(struct zo_atomic_file *f, const char *path);
/* Appends nbytes, retrying short writes and EINTR. Returns 0 or -errno
 * (-ENOSPC, -EIO, -EFBIG, ...); on error the file is already aborted. */
int zo_atomic_file_write(struct zo_atomic_file *f, const void *data, size_t nbytes);
/* fsyncs and closes the temp file, renames it over path and fsyncs the
 * directory. Returns 0 or -errno; on error before the rename the temp file is
 * removed and path untouched. A failure of the final directory fsync is
 * reported although path already holds the new contents. */
int zo_atomic_file_commit(struct zo_atomic_file *f);
/* commit in two halves: seal fsyncs and closes the temp file (on error it is
 * removed); publish renames it over path and fsyncs the directory. abort
 * after seal still removes the temp file. */
int zo_atomic_file_seal(struct zo_atomic_file *f);
int zo_atomic_file_publish(struct zo_atomic_file *f);
/* Commits files[0, n) as a set: all are sealed first, and when any seal
 * fails all are aborted and no destination is touched; then the paths
 * remove[0, n_remove) are unlinked (files the new set replaces with none,
 * missing ones fine; a failure aborts all) and each file is published. Only
 * a rename failing in that last phase (the directory itself failing) can
 * leave some replaced: reported. Returns 0 or -errno. */
int zo_atomic_files_commit(struct zo_atomic_file *const *files, int n, const char *const *remove, int n_remove);
/* Closes and removes the temp file, leaving path as it was. */
void zo_atomic_file_abort(struct zo_atomic_file *f);

/* Whether path can be an output written by an atomic file: absent with an
 * existing parent directory, or a regular file. Refuses a directory, device,
 * FIFO or socket naming what it is. Returns 0 or -errno. */
int zo_output_check(const char *path);
/* "a directory", "a FIFO", "a character device", ... for st_mode m, for
 * messages refusing what is not a regular file. */
const char *zo_file_kind(mode_t m);
/* Whether a and b name the same file (device and inode): false when either
 * is missing. */
bool zo_same_file(const char *a, const char *b);
/* Removes the "<path>.tmp.<pid>" files (or directories) beside path whose pid is not a live
 * process (the leftovers of a killed writer; a pid of another host or PID
 * namespace sharing the directory looks dead). Returns how many were
 * removed, or -errno. */
int zo_atomic_sweep_stale(const char *path);

/* Replaces path with nbytes of data atomically (begin + write + commit).
 * Returns 0 or -errno. */
int zo_write_file_atomic(const char *path, const void *data, size_t nbytes);

/* fsyncs a directory so that entries created, renamed or removed in it are
 * durable. File systems that cannot sync directories (EINVAL) count as
 * success. Returns 0 or -errno. */
int zo_fsync_dir(const char *dir);
/* Creates path and its missing parents with mode (less the umask); existing
 * directories are fine, a non-directory in the way is -ENOTDIR. Returns 0 or
 * -errno. */
int zo_mkdir_p(const char *path, mode_t mode);
/* Creates path with mode when it is missing, and only path: a missing parent
 * is -ENOENT with a message naming it (a typo in a configured path must not
 * become a tree of directories); a non-directory in the way is -ENOTDIR.
 * Returns 0 or -errno. */
int zo_mkdir_leaf(const char *path, mode_t mode);
/* Publishes a fully written directory: fsyncs tmpdir, renames it to dst and
 * fsyncs the parent directories. An existing dst directory is replaced
 * atomically (renameat2 RENAME_EXCHANGE, then the old tree is removed).
 * Returns 0 or -errno. */
int zo_rename_atomic_dir(const char *tmpdir, const char *dst);
/* Removes path and, when it is a directory, everything under it. Symlinks
 * (path itself included) are unlinked, never followed, and the walk does not
 * cross into other file systems (-EXDEV). A missing path is -ENOENT. Returns
 * 0 or -errno. */
int zo_remove_tree(const char *path);
/* Removes path and everything under it, at most depth directory levels
 * below it, with async-signal-safe calls only (open, getdents64, unlinkat,
 * close, rmdir; no allocation, no stdio): what a signal handler may call.
 * Symlinks are unlinked, never followed. Returns 0, or -1 when something
 * could not be removed (errno unspecified, no message). */
int zo_remove_tree_signal_safe(const char *path, int depth);

/* One writer per directory: an exclusive flock on dir/.zoffload.lock, held
 * until zo_dir_unlock or the process's end (the kernel drops it at kill -9).
 * The file names the holder ("pid N", "host H", then extra, may be NULL);
 * it is never removed. A lock held elsewhere, by another process or another
 * open in this one, is -EBUSY with a message naming its pid and host. */
#define ZO_DIR_LOCK_NAME ".zoffload.lock"
struct zo_dir_lock {
  int fd; /* the locked file, -1 when none */
};
int zo_dir_lock(const char *dir, const char *extra, struct zo_dir_lock *l);
/* Drops the lock. Accepts an unlocked one. */
void zo_dir_unlock(struct zo_dir_lock *l);
/* Whether someone holds an flock on path (a file or a directory): false
 * when it is free or cannot be opened. */
bool zo_dir_is_locked(const char *path);
/* Creates dir (its parent must exist: zo_mkdir_leaf) and checks that a file can be created,
 * written and fsynced in it (the probe is removed). Returns 0 or -errno
 * with a message that gives the reason before the path. */
int zo_dir_probe_writable(const char *dir);
/* Bytes available to us on the file system holding path, or its nearest
 * existing ancestor. Returns 0 or -errno. */
int zo_fs_free_bytes(const char *path, size_t *nbytes);

/* Reads a whole regular file into a malloc'd buffer (*data, free() it) of
 * *nbytes bytes, followed by one NUL byte not counted in *nbytes. Files over
 * max_bytes are refused with -EFBIG. Returns 0 or -errno. */
int zo_read_file(const char *path, void **data, size_t *nbytes, size_t max_bytes);

/* CRC-32 (ISO-HDLC, zlib's polynomial) of n bytes, continuing from crc; start
 * with crc = 0. zo_crc32(0, "123456789", 9) == 0xCBF43926. */
uint32_t zo_crc32(uint32_t crc, const void *data, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* ZO_FSUTIL_H */
