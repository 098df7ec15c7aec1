/* Device collectives (zo/dcomm.h): NCCL when the build found it
 * (ZO_HAVE_NCCL), otherwise every entry point refuses with -ENOTSUP. */
#include "zo/dcomm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef ZO_HAVE_NCCL
#include <nccl.h>

struct zo_dcomm {
  ncclComm_t nc;
  zo_backend_t be;
  int rank, size;
};

bool zo_dcomm_has_nccl(void) { return true; }

int zo_dcomm_nccl_version(void) {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

static int nccl_fail(const struct zo_dcomm *d, ncclResult_t rc, const char *call, const char *what) {
  const char *last = d && d->nc ? ncclGetLastError(d->nc) : NULL;
  return zo_error(-EIO, "%s (%s) failed on rank %d of %d: %s%s%s", call, what, d ? d->rank : -1, d ? d->size : -1,
                  ncclGetErrorString(rc), last && *last ? ": " : "", last && *last ? last : "");
}

int zo_dcomm_init(zo_comm_t host, zo_backend_t be, zo_dcomm_t *out) {
  ZO_ASSERT(host != NULL && be != NULL && out != NULL);
  *out = NULL;
  if (!be->native_stream)
    return zo_error(-ENOTSUP, "device collectives need the CUDA backend, not the %s backend", be->name);
  struct zo_dcomm *d = calloc(1, sizeof *d);
  if (!d) return zo_error(-ENOMEM, "out of host memory for a device communicator");
  d->be = be;
  d->rank = zo_comm_rank(host);
  d->size = zo_comm_size(host);
  /* Rank 0's id to everybody; a failure to make it still broadcasts (zeros)
   * so that no rank waits, and every rank then refuses. */
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  int32_t ok = 1;
  ncclResult_t rc = ncclSuccess;
  if (d->rank == 0 && (rc = ncclGetUniqueId(&id)) != ncclSuccess) ok = 0;
  int err = zo_comm_broadcast(host, &ok, sizeof ok, 0);
  if (!err) err = zo_comm_broadcast(host, &id, sizeof id, 0);
  if (!err && !ok)
    err = d->rank == 0 ? nccl_fail(d, rc, "ncclGetUniqueId", "the job's id")
                       : zo_error(-EIO, "rank 0 could not create the NCCL id");
  if (!err && (rc = ncclCommInitRank(&d->nc, d->size, id, d->rank)) != ncclSuccess) {
    d->nc = NULL;
    err = nccl_fail(d, rc, "ncclCommInitRank", "the device communicator");
  }
  if (err) {
    free(d);
    return err;
  }
  *out = d;
  return 0;
}

void zo_dcomm_free(zo_dcomm_t d) {
  if (!d) return;
  if (d->nc) {
    ncclResult_t rc = ncclCommDestroy(d->nc);
    if (rc != ncclSuccess) fprintf(stderr, "zoffload: warning: ncclCommDestroy: %s\n", ncclGetErrorString(rc));
  }
  free(d);
}

int zo_dcomm_rank(const zo_dcomm_t d) { return d->rank; }
int zo_dcomm_size(const zo_dcomm_t d) { return d->size; }

static ncclDataType_t nccl_type(enum zo_dtype dtype) {
  switch (dtype) {
  case ZO_F32: return ncclFloat32;
  case ZO_F64: return ncclFloat64;
  case ZO_BF16: return ncclBfloat16;
  case ZO_F16: return ncclFloat16;
  case ZO_I32: return ncclInt32;
  case ZO_I64: return ncclInt64;
  default: break;
  }
  zo_abort(__FILE__, __LINE__, "device collective of dtype %s", zo_dtype_name(dtype));
}

static ncclRedOp_t nccl_op(enum zo_comm_op op) {
  return op == ZO_COMM_SUM ? ncclSum : op == ZO_COMM_MAX ? ncclMax : ncclMin;
}

static cudaStream_t cu(const struct zo_dcomm *d, zo_stream_t stream) {
  return (cudaStream_t)d->be->native_stream(stream);
}

int zo_dcomm_allreduce(zo_dcomm_t d, const void *send, void *recv, size_t count, enum zo_dtype dtype,
                       enum zo_comm_op op, zo_stream_t stream) {
  ZO_ASSERT(d != NULL && ((send && recv) || count == 0));
  ncclResult_t rc = ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op), d->nc, cu(d, stream));
  if (rc == ncclSuccess) return 0;
  char what[96];
  snprintf(what, sizeof what, "%zu elements of %s", count, zo_dtype_name(dtype));
  return nccl_fail(d, rc, "ncclAllReduce", what);
}

int zo_dcomm_reduce(zo_dcomm_t d, const void *send, void *recv, size_t count, enum zo_dtype dtype,
                    enum zo_comm_op op, int root, zo_stream_t stream) {
  ZO_ASSERT(d != NULL && root >= 0 && root < d->size);
  ncclResult_t rc = ncclReduce(send, recv, count, nccl_type(dtype), nccl_op(op), root, d->nc, cu(d, stream));
  if (rc == ncclSuccess) return 0;
  char what[96];
  snprintf(what, sizeof what, "%zu elements of %s to rank %d", count, zo_dtype_name(dtype), root);
  return nccl_fail(d, rc, "ncclReduce", what);
}

int zo_dcomm_broadcast(zo_dcomm_t d, const void *send, void *recv, size_t nbytes, int root, zo_stream_t stream) {
  ZO_ASSERT(d != NULL && root >= 0 && root < d->size);
  ncclResult_t rc = ncclBroadcast(send, recv, nbytes, ncclUint8, root, d->nc, cu(d, stream));
  if (rc == ncclSuccess) return 0;
  char what[96];
  snprintf(what, sizeof what, "%zu bytes from rank %d", nbytes, root);
  return nccl_fail(d, rc, "ncclBroadcast", what);
}

int zo_dcomm_check(zo_dcomm_t d) {
  ncclResult_t async = ncclSuccess;
  ncclResult_t rc = ncclCommGetAsyncError(d->nc, &async);
  if (rc != ncclSuccess) return nccl_fail(d, rc, "ncclCommGetAsyncError", "polling");
  return async == ncclSuccess ? 0 : nccl_fail(d, async, "an asynchronous collective", "reported later");
}

#else /* no NCCL */

static int no_nccl(void) {
  return zo_error(-ENOTSUP, "this zoffload was built without NCCL (ZO_NCCL=OFF, or CMake found no nccl.h and "
                            "libnccl next to the CUDA toolkit, or the CUDA backend is off): device "
                            "collectives are unavailable");
}

bool zo_dcomm_has_nccl(void) { return false; }
int zo_dcomm_nccl_version(void) { return 0; }
int zo_dcomm_init(zo_comm_t host, zo_backend_t be, zo_dcomm_t *out) {
  (void)host, (void)be;
  *out = NULL;
  return no_nccl();
}
void zo_dcomm_free(zo_dcomm_t d) { (void)d; }
int zo_dcomm_rank(const zo_dcomm_t d) { return d ? 0 : -1; }
int zo_dcomm_size(const zo_dcomm_t d) { return d ? 1 : 0; }
int zo_dcomm_allreduce(zo_dcomm_t d, const void *send, void *recv, size_t count, enum zo_dtype dtype,
                       enum zo_comm_op op, zo_stream_t stream) {
  return no_nccl();
}
int zo_dcomm_reduce(zo_dcomm_t d, const void *send, void *recv, size_t count, enum zo_dtype dtype,
                    enum zo_comm_op op, int root, zo_stream_t stream) {
  return no_nccl();
}
int zo_dcomm_broadcast(zo_dcomm_t d, const void *send, void *recv, size_t nbytes, int root, zo_stream_t stream) {
  return no_nccl();
}
int zo_dcomm_check(zo_dcomm_t d) { return no_nccl(); }

#endif
