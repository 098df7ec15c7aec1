/* The collectives interface (zo/comm.h): contract checks, the choice of
 * implementation, and the single-process one, where every collective over
 * one rank leaves its buffer as it is. The MPI implementation lives in
 * comm_mpi.c, compiled only when CMake found MPI (ZO_HAVE_MPI). */
#include "comm_internal.h"

#include "zo/launcher.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Elements per collective call: below MPI's int counts with room to spare.
 * ZO_COMM_MAX_COUNT lowers it, so that tests exercise the split. */
#define COMM_MAX_COUNT ((size_t)1 << 30)

bool zo_comm_has_mpi(void) {
#ifdef ZO_HAVE_MPI
  return true;
#else
  return false;
#endif
}

/* Also when the variables are inconsistent: zo_comm_init("auto") then says why. */
bool zo_comm_launched(void) {
  int rank, size;
  return zo_launcher_rank_env(&rank, &size) != 0;
}

/* ---- single process ------------------------------------------------------ */

static int single_allreduce(struct zo_comm *c, void *buf, size_t count, enum zo_dtype dtype, enum zo_comm_op op) {
  return 0;
}

static int single_reduce(struct zo_comm *c, void *buf, size_t count, enum zo_dtype dtype, enum zo_comm_op op,
                         int root) {
  return 0;
}

/* One rank has no peer: zo_comm_send / _recv refuse before calling these. */
static int single_send(struct zo_comm *c, const void *buf, size_t nbytes, int peer, int tag) { return -EINVAL; }
static int single_recv(struct zo_comm *c, void *buf, size_t nbytes, int peer, int tag) { return -EINVAL; }

static int single_broadcast(struct zo_comm *c, void *buf, size_t nbytes, int root) { return 0; }

static int single_allgather(struct zo_comm *c, const void *send, size_t nbytes, void *recv) {
  if (recv != send) memmove(recv, send, nbytes);
  return 0;
}

static int single_barrier(struct zo_comm *c) { return 0; }

static struct zo_comm *single_new(bool world);

static int single_dup(struct zo_comm *c, struct zo_comm **out) {
  *out = single_new(false);
  return *out ? 0 : -ENOMEM;
}

static void single_free(struct zo_comm *c) { free(c); }

static void single_abort(struct zo_comm *c, int code) {}

static const struct zo_comm_ops single_ops = {
    .name = "single", .allreduce = single_allreduce, .reduce = single_reduce, .send = single_send,
    .recv = single_recv, .broadcast = single_broadcast,
    .allgather = single_allgather, .barrier = single_barrier, .dup = single_dup, .free = single_free,
    .abort = single_abort,
};

static struct zo_comm *single_new(bool world) {
  struct zo_comm *c = calloc(1, sizeof *c);
  if (!c) {
    zo_error(-ENOMEM, "out of host memory for a communicator");
    return NULL;
  }
  *c = (struct zo_comm){.ops = &single_ops, .rank = 0, .size = 1, .local_rank = 0, .local_size = 1,
                        .world = world};
  return c;
}

/* ---- the interface -------------------------------------------------------- */

static size_t max_count(void) {
  const char *v = getenv("ZO_COMM_MAX_COUNT");
  if (v && *v) {
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    if (*end == '\0' && n >= 1 && n <= COMM_MAX_COUNT) return (size_t)n;
  }
  return COMM_MAX_COUNT;
}

zo_comm_t zo_comm_init(const char *kind) {
  ZO_ASSERT(kind != NULL);
  bool mpi;
  if (strcmp(kind, "single") == 0) {
    mpi = false;
  } else if (strcmp(kind, "mpi") == 0) {
    mpi = true;
  } else if (strcmp(kind, "auto") == 0) {
    int rank, n;
    const int launched = zo_launcher_rank_env(&rank, &n);
    if (launched < 0) return NULL;
    mpi = launched && zo_comm_has_mpi();
    if (!mpi && n > 1) {
      zo_error(-ENOTSUP, "started by an MPI launcher with %d ranks, but this zoffload was built without MPI: "
                         "every rank would train alone. Install Open MPI (Debian: libopenmpi-dev openmpi-bin, "
                         "scripts/install-deps.sh) and rebuild with -DZO_MPI=AUTO or ON",
               n);
      return NULL;
    }
  } else {
    zo_error(-EINVAL, "communicator \"%s\": expected \"auto\", \"single\" or \"mpi\"", kind);
    return NULL;
  }
  struct zo_comm *c;
  if (!mpi) {
    c = single_new(true);
  } else {
#ifdef ZO_HAVE_MPI
    c = zo_comm_mpi_init();
#else
    zo_error(-ENOTSUP, "this zoffload was built without MPI (ZO_MPI=OFF, or CMake found no MPI): install "
                       "Open MPI (Debian: libopenmpi-dev openmpi-bin) and rebuild");
    c = NULL;
#endif
  }
  if (c) c->max_count = max_count();
  return c;
}

void zo_comm_free(zo_comm_t c) {
  if (c) c->ops->free(c);
}

void zo_comm_abort(zo_comm_t c, int code) {
  ZO_ASSERT(c != NULL);
  c->ops->abort(c, code);
}

const char *zo_comm_name(const zo_comm_t c) { return c->ops->name; }
int zo_comm_rank(const zo_comm_t c) { return c->rank; }
int zo_comm_size(const zo_comm_t c) { return c->size; }
int zo_comm_local_rank(const zo_comm_t c) { return c->local_rank; }
int zo_comm_local_size(const zo_comm_t c) { return c->local_size; }

int zo_comm_dup(zo_comm_t c, zo_comm_t *out) {
  ZO_ASSERT(c != NULL && out != NULL);
  int err = c->ops->dup(c, out);
  if (!err) (*out)->max_count = c->max_count;
  return err;
}

int zo_comm_allreduce(zo_comm_t c, void *buf, size_t count, enum zo_dtype dtype, enum zo_comm_op op) {
  ZO_ASSERT(c != NULL && (buf != NULL || count == 0));
  ZO_ASSERT(dtype == ZO_F32 || dtype == ZO_F64 || dtype == ZO_I32 || dtype == ZO_I64);
  ZO_ASSERT(op == ZO_COMM_SUM || op == ZO_COMM_MAX || op == ZO_COMM_MIN);
  const size_t e = zo_dtype_size(dtype);
  for (size_t i = 0; i < count; i += c->max_count) {
    const size_t n = count - i < c->max_count ? count - i : c->max_count;
    int err = c->ops->allreduce(c, (char *)buf + i * e, n, dtype, op);
    if (err) return err;
  }
  return 0;
}

int zo_comm_reduce(zo_comm_t c, void *buf, size_t count, enum zo_dtype dtype, enum zo_comm_op op, int root) {
  ZO_ASSERT(c != NULL && (buf != NULL || count == 0));
  ZO_ASSERT(dtype == ZO_F32 || dtype == ZO_F64 || dtype == ZO_I32 || dtype == ZO_I64);
  ZO_ASSERT(op == ZO_COMM_SUM || op == ZO_COMM_MAX || op == ZO_COMM_MIN);
  ZO_ASSERT(root >= 0 && root < c->size);
  const size_t e = zo_dtype_size(dtype);
  for (size_t i = 0; i < count; i += c->max_count) {
    const size_t n = count - i < c->max_count ? count - i : c->max_count;
    int err = c->ops->reduce(c, (char *)buf + i * e, n, dtype, op, root);
    if (err) return err;
  }
  return 0;
}

int zo_comm_reduce_scatter(zo_comm_t c, void *buf, const size_t *counts, enum zo_dtype dtype) {
  ZO_ASSERT(c != NULL && counts != NULL);
  const size_t e = zo_dtype_size(dtype);
  size_t off = 0;
  for (int r = 0; r < c->size; r++) {
    int err = zo_comm_reduce(c, (char *)buf + off * e, counts[r], dtype, ZO_COMM_SUM, r);
    if (err) return err;
    off += counts[r];
  }
  return 0;
}

int zo_comm_allgatherv(zo_comm_t c, void *buf, const size_t *nbytes) {
  ZO_ASSERT(c != NULL && nbytes != NULL);
  size_t off = 0;
  for (int r = 0; r < c->size; r++) {
    int err = zo_comm_broadcast(c, (char *)buf + off, nbytes[r], r);
    if (err) return err;
    off += nbytes[r];
  }
  return 0;
}

static int peer_check(const struct zo_comm *c, int peer, int tag, const char *call) {
  if (peer < 0 || peer >= c->size || peer == c->rank || tag < 0 || tag > 32767)
    return zo_error(-EINVAL, "%s: peer %d, tag %d on rank %d of %d: need another rank and a tag in 0..32767", call,
                    peer, tag, c->rank, c->size);
  return 0;
}

int zo_comm_send(zo_comm_t c, const void *buf, size_t nbytes, int peer, int tag) {
  ZO_ASSERT(c != NULL && (buf != NULL || nbytes == 0));
  int err = peer_check(c, peer, tag, "zo_comm_send");
  for (size_t i = 0; !err && (i < nbytes || i == 0); i += c->max_count) {
    const size_t n = nbytes - i < c->max_count ? nbytes - i : c->max_count;
    err = c->ops->send(c, (const char *)buf + i, n, peer, tag);
    if (nbytes == 0) break;
  }
  return err;
}

int zo_comm_recv(zo_comm_t c, void *buf, size_t nbytes, int peer, int tag) {
  ZO_ASSERT(c != NULL && (buf != NULL || nbytes == 0));
  int err = peer_check(c, peer, tag, "zo_comm_recv");
  for (size_t i = 0; !err && (i < nbytes || i == 0); i += c->max_count) {
    const size_t n = nbytes - i < c->max_count ? nbytes - i : c->max_count;
    err = c->ops->recv(c, (char *)buf + i, n, peer, tag);
    if (nbytes == 0) break;
  }
  return err;
}

int zo_comm_broadcast(zo_comm_t c, void *buf, size_t nbytes, int root) {
  ZO_ASSERT(c != NULL && (buf != NULL || nbytes == 0));
  ZO_ASSERT(root >= 0 && root < c->size);
  for (size_t i = 0; i < nbytes; i += c->max_count) {
    const size_t n = nbytes - i < c->max_count ? nbytes - i : c->max_count;
    int err = c->ops->broadcast(c, (char *)buf + i, n, root);
    if (err) return err;
  }
  return 0;
}

int zo_comm_allgather(zo_comm_t c, const void *send, size_t nbytes, void *recv) {
  ZO_ASSERT(c != NULL && send != NULL && recv != NULL);
  if (nbytes > (size_t)INT_MAX / (size_t)c->size)
    return zo_error(-EINVAL, "allgather of %zu bytes from each of %d ranks: over %d bytes in all; it is meant for "
                             "small per-rank records",
                    nbytes, c->size, INT_MAX);
  return c->ops->allgather(c, send, nbytes, recv);
}

int zo_comm_barrier(zo_comm_t c) {
  ZO_ASSERT(c != NULL);
  return c->ops->barrier(c);
}
