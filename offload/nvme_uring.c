/* NVMe store, io_uring engine: one thread owns the ring. It takes blocks
 * from the pending requests (at most queue_depth in flight), computes write
 * CRCs, submits (READ_FIXED/WRITE_FIXED for blocks inside registered buffers),
 * reaps, resumes short transfers and checks read CRCs. Callers wake it through
 * an eventfd whose read stays armed in the ring; buffer registration runs on
 * this thread with the ring idle (no I/O, no armed read), so no kernel ever
 * has to quiesce the ring for it. Built to a stub without liburing. */
#include "nvme_internal.h"

#include "zo/fault.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef ZO_HAVE_LIBURING
#include <sys/eventfd.h>

void zo_nvme_ring_wake(struct zo_nvme *nv) {
  const uint64_t one = 1;
  for (;;) {
    const ssize_t k = write(nv->wake_fd, &one, sizeof one);
    if (k == (ssize_t)sizeof one) return;
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno == EAGAIN) return; /* counter saturated: a wake-up is pending anyway */
    zo_abort(__FILE__, __LINE__, "nvme: write to the wake-up eventfd failed: %s",
             k < 0 ? strerror(errno) : "short write");
  }
}

static struct io_uring_sqe *ring_sqe(struct zo_nvme *nv) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&nv->ring);
  /* The ring has queue_depth + 1 entries: every block slot plus the wake read. */
  ZO_ASSERT(sqe != NULL);
  return sqe;
}

static void ring_prep_block(struct zo_nvme *nv, int slot) {
  struct nvme_block *b = &nv->slots[slot];
  struct io_uring_sqe *sqe = ring_sqe(nv);
  char *p = b->buf + b->moved;
  const unsigned n = b->io_len - b->moved;
  const uint64_t off = b->offset + b->moved;
  const int fd = b->f->fd;
  if (b->req->op == ZO_NVME_WRITE) {
    if (b->reg >= 0)
      io_uring_prep_write_fixed(sqe, fd, p, n, off, b->reg);
    else
      io_uring_prep_write(sqe, fd, p, n, off);
  } else {
    if (b->reg >= 0)
      io_uring_prep_read_fixed(sqe, fd, p, n, off, b->reg);
    else
      io_uring_prep_read(sqe, fd, p, n, off);
  }
  io_uring_sqe_set_data64(sqe, (uint64_t)slot);
}

/* Submits everything prepared. Returns with SQEs left unsubmitted only when
 * the kernel pushed back (-EAGAIN, -EBUSY) while SQEs already in the kernel
 * will complete and let the next call succeed. */
static void ring_submit(struct zo_nvme *nv, int in_ring) {
  while (io_uring_sq_ready(&nv->ring) > 0) {
    const int r = io_uring_submit(&nv->ring);
    if (r > 0 || r == -EINTR) continue;
    if (r == 0 || r == -EAGAIN || r == -EBUSY) {
      if (in_ring - (int)io_uring_sq_ready(&nv->ring) > 0) return;
      nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
      continue;
    }
    zo_abort(__FILE__, __LINE__, "nvme: io_uring_submit failed: %s", strerror(-r));
  }
}

/* Registers the table handed over by zo_nvme_register_buffers, with the ring
 * idle (no I/O and no armed read), then publishes the result. */
static void ring_ctl(struct zo_nvme *nv) {
  int r = 0;
  if (nv->n_regs > 0) r = io_uring_unregister_buffers(&nv->ring);
  const bool unregistered = r == 0;
  if (r == 0 && nv->ctl_n > 0)
    r = io_uring_register_buffers(&nv->ring, nv->ctl_iov, (unsigned)nv->ctl_n);
  pthread_mutex_lock(&nv->mu);
  struct zo_nvme_buffer *old = nv->regs;
  if (r == 0) {
    nv->regs = nv->ctl_regs;
    nv->n_regs = nv->ctl_n;
    nv->ctl_regs = old;
  } else if (unregistered) {
    /* The old table is gone from the kernel: both are the caller's to free. */
    nv->regs = NULL;
    nv->n_regs = 0;
    free(old);
  }
  nv->ctl_result = r;
  nv->ctl_pending = false;
  nv->ctl_done = true;
  pthread_cond_broadcast(&nv->done_cv);
  pthread_mutex_unlock(&nv->mu);
}

/* Order of work in one turn, chosen to keep the device's queue full: take and
 * submit new blocks first, then compute the CRCs of the writes just submitted
 * (the kernel only reads those buffers, and the record is stored at
 * completion, which this thread handles later), then check the reads that
 * completed last turn, whose slots were already refilled, then wait. */
void *zo_nvme_ring_main(void *arg) {
  struct zo_nvme *nv = arg;
  struct io_uring *ring = &nv->ring;
  char msg[sizeof((struct zo_nvme_req *)0)->msg];
  int in_ring = 0;  /* SQEs prepared and not completed, the wake read included */
  int n_blocks = 0; /* blocks in flight */
  int n_done = 0;   /* finished blocks in nv->done, not yet checked */
  bool wake_armed = false;
  for (;;) {
    /* Slots taken now are the entries popped off the free stack: they stay in
     * free_slots[n_free .. n_free_before) until completions push over them. */
    const int n_free_before = nv->n_free;
    pthread_mutex_lock(&nv->mu);
    const bool ctl = nv->ctl_pending;
    while (!ctl && nv->n_free > 0 && nv->head != NULL)
      zo_nvme_blk_take(nv, &nv->slots[nv->free_slots[--nv->n_free]]);
    const bool stop = nv->stop && nv->head == NULL;
    pthread_mutex_unlock(&nv->mu);
    for (int i = nv->n_free; i < n_free_before; i++) {
      ring_prep_block(nv, nv->free_slots[i]);
      in_ring++;
      n_blocks++;
    }
    if (!wake_armed && !stop && !ctl) {
      struct io_uring_sqe *sqe = ring_sqe(nv);
      io_uring_prep_read(sqe, nv->wake_fd, &nv->wake_val, sizeof nv->wake_val, 0);
      io_uring_sqe_set_data64(sqe, NVME_WAKE_TAG);
      in_ring++;
      wake_armed = true;
    }
    ring_submit(nv, in_ring);
    for (int i = nv->n_free; i < n_free_before; i++) {
      struct nvme_block *b = &nv->slots[nv->free_slots[i]];
      if (b->req->op == ZO_NVME_WRITE) b->crc = zo_nvme_crc32c(b->buf, b->len);
    }
    for (int i = 0; i < n_done; i++) {
      struct nvme_block *b = &nv->done[i];
      const int status = zo_nvme_blk_check(nv, b, nv->done_err[i], msg, sizeof msg);
      pthread_mutex_lock(&nv->mu);
      zo_nvme_blk_finish(nv, b, status, msg);
      pthread_mutex_unlock(&nv->mu);
    }
    n_done = 0;
    if (ctl && n_blocks == 0 && !wake_armed) {
      ring_ctl(nv);
      continue;
    }
    if (stop && n_blocks == 0) break;

    struct io_uring_cqe *cqe;
    int r = io_uring_wait_cqe(ring, &cqe);
    if (r == -EINTR || r == -EAGAIN) continue;
    if (r < 0) zo_abort(__FILE__, __LINE__, "nvme: io_uring_wait_cqe failed: %s", strerror(-r));
    unsigned head, n_cqe = 0;
    io_uring_for_each_cqe(ring, head, cqe) {
      ZO_ASSERT((int)n_cqe <= nv->queue_depth);
      nv->cqe_data[n_cqe] = io_uring_cqe_get_data64(cqe);
      nv->cqe_res[n_cqe] = cqe->res;
      n_cqe++;
    }
    io_uring_cq_advance(ring, n_cqe);
    for (unsigned i = 0; i < n_cqe; i++) {
      int res = nv->cqe_res[i];
      in_ring--;
      if (nv->cqe_data[i] == NVME_WAKE_TAG) {
        wake_armed = false;
        if (res < 0 && res != -EINTR && res != -EAGAIN && res != -ECANCELED)
          zo_abort(__FILE__, __LINE__, "nvme: reading the wake-up eventfd failed: %s",
                   strerror(-res));
        continue;
      }
      const int s = (int)nv->cqe_data[i];
      struct nvme_block *b = &nv->slots[s];
      /* An injected fault replaces what the kernel did (zo/fault.h). */
      if (res > 0)
        res = (int)zo_fault_io(b->req->op == ZO_NVME_WRITE ? ZO_FAULT_NVME_WRITE : ZO_FAULT_NVME_READ,
                               (size_t)res, ZO_NVME_ALIGN);
      if (res > 0 && b->moved + (uint32_t)res < b->io_len) {
        b->moved += (uint32_t)res; /* short transfer: resume where it stopped */
        ring_prep_block(nv, s);
        in_ring++;
        continue;
      }
      if (res > 0) b->moved += (uint32_t)res;
      nv->done[n_done] = *b;
      nv->done_err[n_done++] = res < 0 ? res : res == 0 ? -EIO : 0;
      nv->free_slots[nv->n_free++] = s;
      n_blocks--;
    }
  }
  return NULL;
}

void zo_nvme_ring_close(struct zo_nvme *nv) {
  if (nv->ring_ok) io_uring_queue_exit(&nv->ring);
  nv->ring_ok = false;
  if (nv->wake_fd >= 0) close(nv->wake_fd);
  nv->wake_fd = -1;
  free(nv->slots);
  free(nv->free_slots);
  free(nv->cqe_data);
  free(nv->cqe_res);
  free(nv->done);
  free(nv->done_err);
  nv->done = NULL;
  nv->done_err = NULL;
  nv->slots = NULL;
  nv->free_slots = NULL;
  nv->cqe_data = NULL;
  nv->cqe_res = NULL;
}

int zo_nvme_ring_open(struct zo_nvme *nv, char *why, size_t n) {
  const unsigned entries = (unsigned)nv->queue_depth + 1;
  int r = io_uring_queue_init(entries, &nv->ring, 0);
  if (r < 0) {
    snprintf(why, n, "io_uring_queue_init(%u entries): %s", entries, strerror(-r));
    return r;
  }
  nv->ring_ok = true;
  struct io_uring_probe *probe = io_uring_get_probe_ring(&nv->ring);
  if (probe == NULL) {
    snprintf(why, n, "io_uring_get_probe_ring failed: kernel older than 5.6");
    r = -ENOTSUP;
    goto out_close;
  }
  static const int ops[] = {IORING_OP_READ, IORING_OP_WRITE, IORING_OP_READ_FIXED,
                            IORING_OP_WRITE_FIXED};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    if (!io_uring_opcode_supported(probe, ops[i])) {
      snprintf(why, n, "the kernel's io_uring lacks opcode %d", ops[i]);
      io_uring_free_probe(probe);
      r = -ENOTSUP;
      goto out_close;
    }
  }
  io_uring_free_probe(probe);
  nv->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (nv->wake_fd < 0) {
    r = -errno;
    snprintf(why, n, "eventfd: %s", strerror(errno));
    goto out_close;
  }
  const int qd = nv->queue_depth;
  nv->slots = calloc((size_t)qd, sizeof *nv->slots);
  nv->free_slots = malloc((size_t)qd * sizeof *nv->free_slots);
  nv->cqe_data = malloc(((size_t)qd + 1) * sizeof *nv->cqe_data);
  nv->cqe_res = malloc(((size_t)qd + 1) * sizeof *nv->cqe_res);
  nv->done = malloc((size_t)qd * sizeof *nv->done);
  nv->done_err = malloc((size_t)qd * sizeof *nv->done_err);
  if (!nv->slots || !nv->free_slots || !nv->cqe_data || !nv->cqe_res || !nv->done ||
      !nv->done_err) {
    r = -ENOMEM;
    snprintf(why, n, "out of memory");
    goto out_close;
  }
  for (int i = 0; i < qd; i++) nv->free_slots[i] = qd - 1 - i;
  nv->n_free = qd;
  return 0;

out_close:
  zo_nvme_ring_close(nv);
  return r;
}

int zo_nvme_ring_register(struct zo_nvme *nv, struct zo_nvme_buffer *regs, struct iovec *iov,
                          int n) {
  pthread_mutex_lock(&nv->mu);
  if (nv->n_active > 0 || nv->ctl_pending) {
    pthread_mutex_unlock(&nv->mu);
    free(regs);
    free(iov);
    return -EBUSY;
  }
  nv->ctl_regs = regs;
  nv->ctl_iov = iov;
  nv->ctl_n = n;
  nv->ctl_done = false;
  nv->ctl_pending = true;
  pthread_mutex_unlock(&nv->mu);
  zo_nvme_ring_wake(nv);
  pthread_mutex_lock(&nv->mu);
  while (!nv->ctl_done) pthread_cond_wait(&nv->done_cv, &nv->mu);
  const int r = nv->ctl_result;
  free(nv->ctl_regs); /* the table replaced, or the one refused */
  free(nv->ctl_iov);
  nv->ctl_regs = NULL;
  nv->ctl_iov = NULL;
  nv->ctl_n = 0;
  pthread_mutex_unlock(&nv->mu);
  return r;
}

#else /* !ZO_HAVE_LIBURING */

int zo_nvme_ring_open(struct zo_nvme *nv, char *why, size_t n) {
  (void)nv;
  snprintf(why, n, "zoffload was built without liburing");
  return -ENOTSUP;
}

void zo_nvme_ring_close(struct zo_nvme *nv) { (void)nv; }

void *zo_nvme_ring_main(void *arg) {
  (void)arg;
  zo_abort(__FILE__, __LINE__, "nvme: io_uring engine started without liburing");
}

void zo_nvme_ring_wake(struct zo_nvme *nv) { (void)nv; }

int zo_nvme_ring_register(struct zo_nvme *nv, struct zo_nvme_buffer *regs, struct iovec *iov,
                          int n) {
  (void)nv;
  (void)n;
  free(regs);
  free(iov);
  return 0;
}
#endif
