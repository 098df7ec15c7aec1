/* Fault injection for tests: the NVMe tier's block transfers and the
 * checkpoint writer's write, fsync and rename calls go through the wrappers
 * below, which a test build (CMake option ZO_FAULT_INJECTION) makes fail on
 * purpose. The faults come from the environment variable ZO_FAULT, read once
 * at the first call, or from zo_fault_set:
 *   ZO_FAULT="op:N:kind[,op:N:kind...]"   N: the Nth call of op (from 1);
 *                                         "N+": that call and every later one
 *   op:   nvme-read, nvme-write (one block transfer of the NVMe store),
 *         write, fsync, rename (offload/fsutil.c: checkpoints, atomic files)
 *   kind: eio, enospc, edquot, efbig (the call fails with that errno), or
 *         short (a read or write moves about half its bytes, as the kernel
 *         may: the caller has to resume it), or log (the call goes through
 *         and prints one line "zoffload: fault log: ...": where is call N?)
 * e.g. ZO_FAULT=nvme-write:3:eio, ZO_FAULT=write:2+:enospc. Each fault that
 * fires prints one line on stderr ("zoffload: fault injected: ..."); with
 * ZO_FAULT_COUNTS=1 the process prints its call count of each op at exit
 * ("zoffload: fault calls: nvme-read=N ..."), to place faults by. Without
 * the option the wrappers are the plain system calls and ZO_FAULT is never
 * read: release builds pay nothing. All functions are thread-safe. */
#ifndef ZO_FAULT_H
#define ZO_FAULT_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

enum zo_fault_op {
  ZO_FAULT_NVME_READ,  /* one block transfer (or its resumed rest) read from an NVMe file */
  ZO_FAULT_NVME_WRITE, /* the same, written */
  ZO_FAULT_WRITE,      /* one write(2) of an atomic file (checkpoint files, metrics) */
  ZO_FAULT_FSYNC,      /* one fsync(2) of a file or directory in offload/fsutil.c */
  ZO_FAULT_RENAME,     /* one rename(2) of a file or checkpoint directory */
  ZO_FAULT_N_OPS
};

#ifdef ZO_FAULT_INJECTION
#define ZO_FAULT_COMPILED true

/* Replaces the faults in force with those of spec (the ZO_FAULT syntax; NULL
 * or "" for none) and zeroes every call count. Returns 0, or -EINVAL with a
 * message in zo_last_error() (the faults are then none). */
int zo_fault_set(const char *spec);
/* Counts one call of op of n bytes. Returns the bytes the call should move
 * (n, or for a short fault about n / 2 rounded down to a multiple of align,
 * at least align, when n > align), or the -errno it should fail with. */
ssize_t zo_fault_io(enum zo_fault_op op, size_t n, size_t align);
/* Calls of op counted since the last zo_fault_set (or the start). */
uint64_t zo_fault_calls(enum zo_fault_op op);
/* Faults fired since the last zo_fault_set (or the start). */
uint64_t zo_fault_fired(void);

#else
#define ZO_FAULT_COMPILED false
static inline ssize_t zo_fault_io(enum zo_fault_op op, size_t n, size_t align) {
  (void)op;
  (void)align;
  return (ssize_t)n;
}
#endif

/* write(2), or the fault injected for ZO_FAULT_WRITE. */
static inline ssize_t zo_fault_write(int fd, const void *buf, size_t n) {
  const ssize_t k = zo_fault_io(ZO_FAULT_WRITE, n, 1);
  if (k < 0) {
    errno = (int)-k;
    return -1;
  }
  return write(fd, buf, (size_t)k);
}

/* pread(2) / pwrite(2) of an NVMe block, or the fault injected for op. */
static inline ssize_t zo_fault_pio(enum zo_fault_op op, int fd, void *buf, size_t n, off_t off,
                                   size_t align) {
  const ssize_t k = zo_fault_io(op, n, align);
  if (k < 0) {
    errno = (int)-k;
    return -1;
  }
  return op == ZO_FAULT_NVME_WRITE ? pwrite(fd, buf, (size_t)k, off) : pread(fd, buf, (size_t)k, off);
}

/* fsync(2), or the fault injected for ZO_FAULT_FSYNC. */
static inline int zo_fault_fsync(int fd) {
  const ssize_t k = zo_fault_io(ZO_FAULT_FSYNC, 0, 1);
  if (k < 0) {
    errno = (int)-k;
    return -1;
  }
  return fsync(fd);
}

/* rename(2), or the fault injected for ZO_FAULT_RENAME. */
static inline int zo_fault_rename(const char *from, const char *to) {
  const ssize_t k = zo_fault_io(ZO_FAULT_RENAME, 0, 1);
  if (k < 0) {
    errno = (int)-k;
    return -1;
  }
  return rename(from, to);
}

#ifdef __cplusplus
}
#endif
#endif /* ZO_FAULT_H */
