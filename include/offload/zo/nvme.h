/* NVMe tier: one preallocated file per tensor class ("master", "exp_avg", ...)
 * in a private 0700 directory under nvme_path, read and written with O_DIRECT
 * in aio.block_size blocks through io_uring (fixed buffers where the caller
 * registered them), at most aio.queue_depth blocks in flight. Every block
 * carries a CRC32C kept in memory: set by each write, checked by each read, so
 * corruption is an error and never a wrong model. Where io_uring cannot be set
 * up, a pool of pread/pwrite threads does the same work after one warning.
 * The store is scratch space: zo_nvme_free removes its files and directory and
 * it never touches anything outside that directory, so an I/O error, a full
 * disk or a failed CRC here cannot damage a checkpoint. liburing types never
 * appear in this header. */
#ifndef ZO_NVME_H
#define ZO_NVME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_NVME_ALIGN 4096           /* bytes: buffers, offsets and I/O sizes (O_DIRECT) */
#define ZO_NVME_MAX_FILES 64         /* tensor-class files per store */
#define ZO_NVME_MAX_BLOCK (1u << 30) /* bytes: largest aio.block_size */
#define ZO_NVME_MAX_QUEUE_DEPTH 4096

typedef struct zo_nvme *zo_nvme_t;

struct zo_nvme_config {
  const char *dir;     /* nvme_path: parent of the private directory, created if missing */
  size_t block_size;   /* bytes, aio.block_size: a multiple of 4096, at most 1 GiB */
  int queue_depth;     /* aio.queue_depth: blocks in flight, 1..ZO_NVME_MAX_QUEUE_DEPTH */
  bool force_fallback; /* use the pread/pwrite threads even where io_uring works (tests) */
};

/* A buffer for zo_nvme_register_buffers. */
struct zo_nvme_buffer {
  void *base;    /* 4096-aligned */
  size_t nbytes; /* bytes */
};

enum zo_nvme_op { ZO_NVME_READ, ZO_NVME_WRITE };

/* One asynchronous read or write of a range. The caller allocates it (stack,
 * array, anywhere) and must keep it, and the buffer it names, untouched from
 * zo_nvme_*_async until zo_nvme_wait returns; after that it may be reused.
 * Fields are set by *_async and private to offload/nvme*.c: read them only
 * for messages. */
struct zo_nvme_req {
  int file;                 /* file id */
  enum zo_nvme_op op;       /* read or write */
  uint64_t offset;          /* bytes into the file */
  size_t nbytes;            /* bytes */
  char *buf;                /* caller's buffer */
  struct zo_nvme_req *next; /* pending list */
  size_t n_dispatched;      /* bytes handed to the I/O engine */
  size_t n_done;            /* bytes finished, well or not */
  int status;               /* 0 or the first -errno */
  uint32_t magic;           /* set by *_async; checked by wait */
  bool done;                /* finished: wait returns at once */
  uint64_t t_submit;        /* ns (zo/trace.h clock) when submitted while tracing, else 0 */
  char msg[320];            /* message for status, moved to zo_last_error() by wait */
};

/* Creates the store: a private directory "<dir>/zoffload-nvme-XXXXXX" (0700),
 * the io_uring ring and its completion thread, or the pread/pwrite threads
 * when io_uring is unavailable or force_fallback is set (one warning line on
 * stderr naming why, unless forced). File systems without O_DIRECT (EINVAL at
 * open) get buffered I/O and one warning. Returns the handle, or NULL with a
 * message in zo_last_error() and errno set to the error. Call from one thread;
 * the handle is then shared. */
zo_nvme_t zo_nvme_init(const struct zo_nvme_config *cfg);
/* Waits for the I/O still in flight, stops the threads, removes the files and
 * the private directory (warnings on stderr when that fails) and frees the
 * handle. Accepts NULL and stores in any state after errors. Requests not
 * waited for are finished but must not be waited on afterwards. No other call
 * on nv may run concurrently or follow. */
void zo_nvme_free(zo_nvme_t nv);

/* "io_uring" or "threads" (the pread/pwrite fallback). */
const char *zo_nvme_engine(zo_nvme_t nv);
/* Whether files are opened with O_DIRECT. */
bool zo_nvme_is_direct(zo_nvme_t nv);
/* The private directory (owned by nv). */
const char *zo_nvme_dir(zo_nvme_t nv);
/* aio.block_size and aio.queue_depth in force. */
size_t zo_nvme_block_size(zo_nvme_t nv);
int zo_nvme_queue_depth(zo_nvme_t nv);

/* Creates the file for one tensor class (name: [A-Za-z0-9_.-], 1..63 chars, not
 * starting with '.') holding nbytes, mode 0600, preallocated with fallocate so
 * that a disk too small fails here with -ENOSPC, the bytes asked and the free
 * space, and not mid-training. Blocks never written read as zeros. Stores the
 * id in *file_id. Returns 0, -EEXIST (class already created), -ENOSPC, -EMFILE
 * (more than ZO_NVME_MAX_FILES) or another -errno. Synchronous; any thread. */
int zo_nvme_file_create(zo_nvme_t nv, const char *class_name, size_t nbytes, int *file_id);
/* Path of a file (owned by nv), for messages and tests. */
const char *zo_nvme_file_path(zo_nvme_t nv, int file_id);

/* nbytes rounded up to 4096, 4096-aligned, uninitialised; NULL when out of
 * memory. Free with zo_nvme_buffer_free. Any thread. */
void *zo_nvme_buffer_alloc(size_t nbytes);
void zo_nvme_buffer_free(void *buf);

/* Registers buffers as io_uring fixed buffers (pinning them; buffers over
 * 1 GiB are split), replacing an earlier registration. Blocks that lie inside
 * a registered buffer then use READ_FIXED/WRITE_FIXED, the others plain
 * READ/WRITE. A no-op returning 0 on the threads engine. Buffers must stay
 * allocated until zo_nvme_unregister_buffers or zo_nvme_free. Returns 0,
 * -EBUSY (requests in flight), -EINVAL (overlapping or misaligned buffers) or
 * the kernel's -errno (-ENOMEM: RLIMIT_MEMLOCK). Synchronous; call with no
 * request in flight, from one thread at a time. */
int zo_nvme_register_buffers(zo_nvme_t nv, const struct zo_nvme_buffer *bufs, int n_bufs);
/* Drops the registration. Returns 0 or -errno (-EBUSY: requests in flight). */
int zo_nvme_unregister_buffers(zo_nvme_t nv);

/* Start a write of nbytes from buf to [offset, offset + nbytes) of a file, or
 * a read into buf. Asynchronous: returns at once; finish with zo_nvme_wait.
 * Contract: buf is 4096-aligned with round_up(nbytes, 4096) bytes usable (what
 * zo_nvme_buffer_alloc gives), since I/O sizes are rounded up to 4096 (a read
 * overwrites those tail bytes, a write stores them); offset is a multiple of
 * the block size, so every extent owns its blocks (lay extents out at block
 * multiples); a block is read back with the length it was last written with
 * (read the extents that were written); requests on overlapping ranges are
 * not ordered and must not be in flight together. Blocks are dispatched in
 * submission order, up to queue_depth at once across all requests.
 * Returns 0, or -EINVAL / -EBADF with a message when the request breaks the
 * contract; the request is then already finished with that status, so
 * zo_nvme_wait returns it too. Thread-safe. */
int zo_nvme_write_async(zo_nvme_t nv, int file_id, uint64_t offset, const void *buf, size_t nbytes,
                        struct zo_nvme_req *req);
int zo_nvme_read_async(zo_nvme_t nv, int file_id, uint64_t offset, void *buf, size_t nbytes,
                       struct zo_nvme_req *req);
/* Blocks until req is finished. Returns 0 or its -errno, with the message in
 * the caller's zo_last_error(): -ENOSPC (disk full: bytes and free space),
 * -EIO (device error, or a block whose last write failed), -EBADMSG (CRC32C
 * mismatch: file, block index, expected and actual CRC), -EINVAL (a read
 * whose block lengths differ from the last write). Waiting again returns the
 * same. Thread-safe; any thread may wait on any request. */
int zo_nvme_wait(zo_nvme_t nv, struct zo_nvme_req *req);
/* Whether req is finished (zo_nvme_wait would not block). Thread-safe. */
bool zo_nvme_is_done(zo_nvme_t nv, struct zo_nvme_req *req);

/* Synchronous write / read: *_async followed by zo_nvme_wait. Returns 0 or -errno. */
int zo_nvme_write(zo_nvme_t nv, int file_id, uint64_t offset, const void *buf, size_t nbytes);
int zo_nvme_read(zo_nvme_t nv, int file_id, uint64_t offset, void *buf, size_t nbytes);

/* Benchmark: writes nbytes sequentially to one file of a fresh store under
 * dir, then reads them back (CRC checked), with the given block size and
 * queue depth, through registered buffers. Stores GB/s (1e9 bytes per second)
 * in *write_gb_s and *read_gb_s. Prints nothing but a warning when the buffers
 * cannot be registered (it then runs unregistered). Returns 0 or -errno with
 * a message. Synchronous. */
int zo_nvme_bench(const char *dir, size_t nbytes, size_t block, int qd, double *write_gb_s,
                  double *read_gb_s);

#ifdef __cplusplus
}
#endif
#endif /* ZO_NVME_H */
