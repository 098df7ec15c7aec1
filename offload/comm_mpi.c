/* The MPI implementation of zo/comm.h: one MPI_Comm per handle (the world
 * handle owns MPI_COMM_WORLD's duplicate and finalizes MPI when freed),
 * MPI_THREAD_MULTIPLE so that handles are usable from different threads at
 * once, MPI_ERRORS_RETURN so that every call's result is checked and turned
 * into -errno with MPI's own message. MPI may be initialized once per
 * process. It never touches device memory (see comm.h for NCCL). */
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

struct mpi_impl {
  MPI_Comm comm;
};

static MPI_Comm comm_of(const struct zo_comm *c) { return ((const struct mpi_impl *)c->impl)->comm; }

/* -errno and a message for a failed MPI call. */
static int mpi_fail(const struct zo_comm *c, int rc, const char *call, const char *what) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0, cls = MPI_ERR_OTHER;
  MPI_Error_string(rc, msg, &len);
  MPI_Error_class(rc, &cls);
  const int err = cls == MPI_ERR_NO_MEM ? -ENOMEM
                  : cls == MPI_ERR_COUNT || cls == MPI_ERR_ARG || cls == MPI_ERR_TYPE || cls == MPI_ERR_ROOT ||
                            cls == MPI_ERR_BUFFER || cls == MPI_ERR_OP
                      ? -EINVAL
                      : -EIO;
  if (c)
    return zo_error(err, "%s (%s) failed on rank %d of %d: %s", call, what, c->rank, c->size, msg);
  return zo_error(err, "%s (%s) failed: %s", call, what, msg);
}

static MPI_Datatype mpi_type(enum zo_dtype dtype) {
  switch (dtype) {
  case ZO_F32: return MPI_FLOAT;
  case ZO_F64: return MPI_DOUBLE;
  case ZO_I32: return MPI_INT32_T;
  case ZO_I64: return MPI_INT64_T;
  default: break;
  }
  zo_abort(__FILE__, __LINE__, "allreduce of dtype %s", zo_dtype_name(dtype));
}

static int mpi_allreduce(struct zo_comm *c, void *buf, size_t count, enum zo_dtype dtype, enum zo_comm_op op) {
  const MPI_Op mop = op == ZO_COMM_SUM ? MPI_SUM : op == ZO_COMM_MAX ? MPI_MAX : MPI_MIN;
  const int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(dtype), mop, comm_of(c));
  if (rc == MPI_SUCCESS) return 0;
  char what[96];
  snprintf(what, sizeof what, "%zu elements of %s", count, zo_dtype_name(dtype));
  return mpi_fail(c, rc, "MPI_Allreduce", what);
}

static int mpi_reduce(struct zo_comm *c, void *buf, size_t count, enum zo_dtype dtype, enum zo_comm_op op, int root) {
  const MPI_Op mop = op == ZO_COMM_SUM ? MPI_SUM : op == ZO_COMM_MAX ? MPI_MAX : MPI_MIN;
  /* In place at the root; the others' buffers are only read. */
  const int rc = c->rank == root ? MPI_Reduce(MPI_IN_PLACE, buf, (int)count, mpi_type(dtype), mop, root, comm_of(c))
                                 : MPI_Reduce(buf, NULL, (int)count, mpi_type(dtype), mop, root, comm_of(c));
  if (rc == MPI_SUCCESS) return 0;
  char what[96];
  snprintf(what, sizeof what, "%zu elements of %s to rank %d", count, zo_dtype_name(dtype), root);
  return mpi_fail(c, rc, "MPI_Reduce", what);
}

static int mpi_send(struct zo_comm *c, const void *buf, size_t nbytes, int peer, int tag) {
  const int rc = MPI_Send(buf, (int)nbytes, MPI_BYTE, peer, tag, comm_of(c));
  if (rc == MPI_SUCCESS) return 0;
  char what[96];
  snprintf(what, sizeof what, "%zu bytes to rank %d", nbytes, peer);
  return mpi_fail(c, rc, "MPI_Send", what);
}

static int mpi_recv(struct zo_comm *c, void *buf, size_t nbytes, int peer, int tag) {
  MPI_Status st;
  int rc = MPI_Recv(buf, (int)nbytes, MPI_BYTE, peer, tag, comm_of(c), &st);
  int got = 0;
  if (rc == MPI_SUCCESS) rc = MPI_Get_count(&st, MPI_BYTE, &got);
  char what[96];
  snprintf(what, sizeof what, "%zu bytes from rank %d", nbytes, peer);
  if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Recv", what);
  if ((size_t)got != nbytes)
    return zo_error(-EIO, "rank %d: MPI_Recv of %s: %d bytes arrived", c->rank, what, got);
  return 0;
}

static int mpi_broadcast(struct zo_comm *c, void *buf, size_t nbytes, int root) {
  const int rc = MPI_Bcast(buf, (int)nbytes, MPI_BYTE, root, comm_of(c));
  if (rc == MPI_SUCCESS) return 0;
  char what[96];
  snprintf(what, sizeof what, "%zu bytes from rank %d", nbytes, root);
  return mpi_fail(c, rc, "MPI_Bcast", what);
}

static int mpi_allgather(struct zo_comm *c, const void *send, size_t nbytes, void *recv) {
  const int rc = MPI_Allgather(send, (int)nbytes, MPI_BYTE, recv, (int)nbytes, MPI_BYTE, comm_of(c));
  if (rc == MPI_SUCCESS) return 0;
  char what[64];
  snprintf(what, sizeof what, "%zu bytes per rank", nbytes);
  return mpi_fail(c, rc, "MPI_Allgather", what);
}

static int mpi_barrier(struct zo_comm *c) {
  const int rc = MPI_Barrier(comm_of(c));
  return rc == MPI_SUCCESS ? 0 : mpi_fail(c, rc, "MPI_Barrier", "all ranks");
}

static void mpi_free(struct zo_comm *c);
static int mpi_dup(struct zo_comm *c, struct zo_comm **out);

static void mpi_abort(struct zo_comm *c, int code) {
  fflush(stdout);
  fflush(stderr);
  MPI_Abort(comm_of(c), code);
  /* MPI_Abort does not return on a working MPI; if it does, end this rank. */
  abort();
}

static const struct zo_comm_ops mpi_ops = {
    .name = "mpi", .allreduce = mpi_allreduce, .reduce = mpi_reduce, .send = mpi_send, .recv = mpi_recv,
    .broadcast = mpi_broadcast, .allgather = mpi_allgather,
    .barrier = mpi_barrier, .dup = mpi_dup, .free = mpi_free, .abort = mpi_abort,
};

/* A handle over a duplicate of parent (world: MPI_COMM_WORLD), errors returned. */
static struct zo_comm *mpi_new(MPI_Comm parent, const struct zo_comm *like) {
  struct zo_comm *c = calloc(1, sizeof *c);
  struct mpi_impl *im = calloc(1, sizeof *im);
  if (!c || !im) {
    free(c);
    free(im);
    zo_error(-ENOMEM, "out of host memory for a communicator");
    return NULL;
  }
  im->comm = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(parent, &im->comm);
  if (rc != MPI_SUCCESS) {
    mpi_fail(like, rc, "MPI_Comm_dup", "a communicator of its own");
    goto out_free;
  }
  if ((rc = MPI_Comm_set_errhandler(im->comm, MPI_ERRORS_RETURN)) != MPI_SUCCESS) {
    mpi_fail(like, rc, "MPI_Comm_set_errhandler", "MPI_ERRORS_RETURN");
    goto out_comm;
  }
  c->ops = &mpi_ops;
  c->impl = im;
  if (like) {
    c->rank = like->rank;
    c->size = like->size;
    c->local_rank = like->local_rank;
    c->local_size = like->local_size;
    return c;
  }
  MPI_Comm node = MPI_COMM_NULL;
  if ((rc = MPI_Comm_rank(im->comm, &c->rank)) != MPI_SUCCESS ||
      (rc = MPI_Comm_size(im->comm, &c->size)) != MPI_SUCCESS) {
    mpi_fail(NULL, rc, "MPI_Comm_rank/size", "the job");
    goto out_comm;
  }
  if ((rc = MPI_Comm_split_type(im->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node)) != MPI_SUCCESS ||
      (rc = MPI_Comm_rank(node, &c->local_rank)) != MPI_SUCCESS ||
      (rc = MPI_Comm_size(node, &c->local_size)) != MPI_SUCCESS) {
    mpi_fail(c, rc, "MPI_Comm_split_type", "the ranks on this machine");
    if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
    goto out_comm;
  }
  MPI_Comm_free(&node);
  return c;

out_comm:
  MPI_Comm_free(&im->comm);
out_free:
  free(im);
  free(c);
  return NULL;
}

static int mpi_dup(struct zo_comm *c, struct zo_comm **out) {
  *out = mpi_new(comm_of(c), c);
  return *out ? 0 : -EIO;
}

/* A failure while freeing cannot be returned: it is reported. */
static void mpi_warn(const struct zo_comm *c, int rc, const char *call) {
  if (rc == MPI_SUCCESS) return;
  mpi_fail(c, rc, call, "freeing a communicator");
  fprintf(stderr, "zoffload: warning: %s\n", zo_last_error());
}

static void mpi_free(struct zo_comm *c) {
  struct mpi_impl *im = c->impl;
  int finalized = 0;
  mpi_warn(c, MPI_Finalized(&finalized), "MPI_Finalized");
  if (!finalized) {
    mpi_warn(c, MPI_Comm_free(&im->comm), "MPI_Comm_free");
    if (c->world) mpi_warn(c, MPI_Finalize(), "MPI_Finalize");
  }
  free(im);
  free(c);
}

struct zo_comm *zo_comm_mpi_init(void) {
  int initialized = 0, finalized = 0, rc;
  if ((rc = MPI_Initialized(&initialized)) != MPI_SUCCESS || (rc = MPI_Finalized(&finalized)) != MPI_SUCCESS) {
    mpi_fail(NULL, rc, "MPI_Initialized", "whether MPI runs");
    return NULL;
  }
  if (initialized || finalized) {
    zo_error(-EINVAL, "MPI was %s in this process: it starts once per process (one zo_comm_init(\"mpi\"))",
             finalized ? "initialized and finalized already" : "initialized already");
    return NULL;
  }
  /* A rank runs its compute threads next to threads blocked in collectives
   * (gradient sums overlapped with the backward, block gathers): Open MPI's
   * blocking calls spin by default, taking the cores the compute needs
   * (measured on 2 cores, 2 ranks, ZeRO-2 with overlap: 6952 tokens/s
   * spinning, 9823 yielding). Yield unless the user chose (the MCA
   * parameter from the environment wins). */
  if (setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0) != 0)
    fprintf(stderr, "zoffload: warning: setenv OMPI_MCA_mpi_yield_when_idle: %s\n", strerror(errno));
  int provided = MPI_THREAD_SINGLE;
  rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
  if (rc != MPI_SUCCESS) {
    mpi_fail(NULL, rc, "MPI_Init_thread", "MPI_THREAD_MULTIPLE");
    return NULL;
  }
  if ((rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)) != MPI_SUCCESS) {
    mpi_fail(NULL, rc, "MPI_Comm_set_errhandler", "MPI_COMM_WORLD, MPI_ERRORS_RETURN");
    MPI_Finalize();
    return NULL;
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    zo_error(-ENOTSUP, "the MPI library provides thread level %d, below MPI_THREAD_MULTIPLE (%d): the scheduler's "
                       "optimizer thread reduces gradients while the main thread reduces losses; use an MPI "
                       "built with thread support (Debian's Open MPI is)",
             provided, MPI_THREAD_MULTIPLE);
    MPI_Finalize();
    return NULL;
  }
  struct zo_comm *c = mpi_new(MPI_COMM_WORLD, NULL);
  if (!c) {
    MPI_Finalize();
    return NULL;
  }
  c->world = true;
  return c;
}
