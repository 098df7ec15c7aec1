/* Private to offload/nvme*.c: the store's state, the block bookkeeping both
 * engines share (nvme_io.c) and the io_uring engine's entry points
 * (nvme_uring.c). Invariants: a block in flight belongs to exactly one engine
 * thread; everything a caller can reach (pending list, request progress, file
 * table, fixed-buffer table) is guarded by mu; block records are atomics. */
#ifndef ZO_NVME_INTERNAL_H
#define ZO_NVME_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/uio.h>

#include "zo/nvme.h"
#include "zo/trace.h"

#ifdef ZO_HAVE_LIBURING
#include <liburing.h>
#endif

#define NVME_REQ_MAGIC 0x4e564d45u      /* "NVME" */
#define NVME_BLOCK_BAD 0xffffffffu      /* record length: the block's last write failed */
#define NVME_WAKE_TAG UINT64_MAX        /* user_data of the armed eventfd read */
#define NVME_MAX_WORKERS 64             /* threads engine */
#define NVME_REG_PIECE_MAX (1ull << 30) /* bytes: the kernel's limit per fixed buffer */
#define NVME_REG_PIECES_MAX 16384       /* the kernel's limit on fixed buffers */

struct nvme_file {
  char name[64]; /* tensor class */
  char *path;    /* owned */
  int fd;        /* -1 when closed */
  size_t nbytes; /* bytes, as created */
  size_t n_blocks;
  _Atomic uint64_t *blocks; /* (n_blocks) (len << 32) | crc32c; 0: never written */
};

/* One block of a request, in flight on an engine. */
struct nvme_block {
  struct zo_nvme_req *req;
  struct nvme_file *f;
  char *buf;       /* caller's memory for this block */
  uint64_t offset; /* bytes into the file */
  size_t index;    /* block index in the file */
  uint32_t len;    /* bytes of the request in this block */
  uint32_t io_len; /* len rounded up to ZO_NVME_ALIGN: bytes moved */
  uint32_t moved;  /* bytes moved so far; short transfers resume from here */
  uint32_t crc;    /* CRC32C of the len bytes written */
  int reg;         /* fixed-buffer index, -1 when none */
};

struct zo_nvme {
  char *dir;         /* private directory, owned */
  size_t block_size; /* bytes */
  int queue_depth;
  bool direct;  /* O_DIRECT */
  bool uring;   /* io_uring engine running */
  bool sync_ok; /* mu and the condition variables initialised */
  pthread_mutex_t mu;
  pthread_cond_t done_cv;          /* a request or a control call finished */
  pthread_cond_t work_cv;          /* threads engine: blocks pending, or stop */
  struct zo_nvme_req *head, *tail; /* requests with blocks not yet dispatched */
  int n_active;                    /* requests submitted and not finished */
  int trace_track;                 /* timeline track of the requests, -1 none yet */
  uint64_t trace_gen;              /* zo_trace_generation of trace_track */
  bool stop;
  struct nvme_file files[ZO_NVME_MAX_FILES];
  int n_files;
  struct zo_nvme_buffer *regs; /* (n_regs) fixed buffers, sorted by base */
  int n_regs;
  pthread_t *threads; /* (n_threads) */
  int n_threads;
#ifdef ZO_HAVE_LIBURING
  struct io_uring ring;
  bool ring_ok;
  int wake_fd;              /* eventfd, -1 when none */
  uint64_t wake_val;        /* target of the armed eventfd read */
  struct nvme_block *slots; /* (queue_depth) */
  int *free_slots;          /* (queue_depth) stack of free slot indices */
  int n_free;
  uint64_t *cqe_data;      /* (queue_depth + 1) reaped user_data */
  int *cqe_res;            /* (queue_depth + 1) reaped results */
  struct nvme_block *done; /* (queue_depth) blocks transferred, to check */
  int *done_err;           /* (queue_depth) their transfer's 0 or -errno */
  /* A registration handed to the ring thread; guarded by mu. */
  bool ctl_pending, ctl_done;
  struct zo_nvme_buffer *ctl_regs; /* in: new table; out: the table to free */
  struct iovec *ctl_iov;
  int ctl_n;
  int ctl_result;
#endif
};

/* The store's timeline track ("nvme"), registered on first use. Called with mu. */
int zo_nvme_trace_track(struct zo_nvme *nv);

/* "zoffload: warning: <message>" on stderr. */
void zo_nvme_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* n rounded up to a multiple of a. */
static inline size_t zo_nvme_round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
/* CRC32C of n bytes (check value: "123456789" -> 0xE3069283). */
uint32_t zo_nvme_crc32c(const void *data, size_t n);
/* "<free> free of <total>" for the file system holding dir, into out. */
const char *zo_nvme_fs_space(const char *dir, char out[96]);

/* Takes the next block of the first pending request into b; false when none
 * is pending. Called with mu held. */
bool zo_nvme_blk_take(struct zo_nvme *nv, struct nvme_block *b);
/* After a transfer (err: its 0 or -errno), without mu: records a write's CRC
 * or checks a read's. Returns the block's status, its message in msg. */
int zo_nvme_blk_check(struct zo_nvme *nv, struct nvme_block *b, int err, char *msg, size_t n);
/* Accounts a finished block to its request, waking waiters when the request
 * is done. Called with mu held. */
void zo_nvme_blk_finish(struct zo_nvme *nv, struct nvme_block *b, int status, const char *msg);
/* Thread body of the threads engine (one per worker). */
void *zo_nvme_worker_main(void *arg);

/* io_uring engine (nvme_uring.c); without liburing, open fails with -ENOTSUP
 * and the rest are never called. */
/* Sets up the ring, eventfd and slots. Returns 0 or -errno with why. */
int zo_nvme_ring_open(struct zo_nvme *nv, char *why, size_t n);
/* Tears down what open set up; idempotent. Call with the ring thread stopped. */
void zo_nvme_ring_close(struct zo_nvme *nv);
/* Thread body of the ring engine. */
void *zo_nvme_ring_main(void *arg);
/* Wakes the ring thread (new work, stop, registration). */
void zo_nvme_ring_wake(struct zo_nvme *nv);
/* Hands a sorted fixed-buffer table (owned: consumed) to the ring thread and
 * waits until it is registered. Returns 0, -EBUSY (requests in flight), or
 * the kernel's -errno. */
int zo_nvme_ring_register(struct zo_nvme *nv, struct zo_nvme_buffer *regs, struct iovec *iov,
                          int n);

#endif /* ZO_NVME_INTERNAL_H */
