/* Collectives over device buffers, queued on backend streams: NCCL between
 * GPUs, one GPU per rank, as llm.c and DeepSpeed do. The NCCL communicator
 * is built over a host communicator (zo/comm.h): rank 0 makes the unique id
 * and broadcasts it there (MPI across processes; the single-process
 * communicator gives a one-rank NCCL communicator, which is what a machine
 * with one GPU can run). Compiled when CMake finds NCCL next to the CUDA
 * toolkit (option ZO_NCCL, offload/dcomm.c); without it every call returns
 * -ENOTSUP with a message saying so. NCCL types never appear here.
 * The collectives are asynchronous: they are queued on stream (a CUDA
 * backend stream) and ordered with the other work on it, like a kernel;
 * errors NCCL reports at queueing time are returned, and zo_dcomm_check
 * polls for asynchronous ones. The scheduler does not use these yet: data
 * parallelism on the CUDA backend is refused (docs/parallel.md). */
#ifndef ZO_DCOMM_H
#define ZO_DCOMM_H

#include "zo/backend.h"
#include "zo/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zo_dcomm *zo_dcomm_t;

/* Whether this build has the NCCL implementation. */
bool zo_dcomm_has_nccl(void);
/* The NCCL version as an integer (NCCL_VERSION_CODE of the library loaded,
 * e.g. 22809 for 2.28.9), 0 without NCCL. */
int zo_dcomm_nccl_version(void);

/* A device communicator over host's ranks, each on backend be's current
 * device (be must be the CUDA backend). Collective over host. Returns 0
 * or -errno with a message (-ENOTSUP without NCCL or on another backend,
 * -EIO for an NCCL failure, naming the call). */
int zo_dcomm_init(zo_comm_t host, zo_backend_t be, zo_dcomm_t *out);
/* Frees (ncclCommDestroy, after the queued collectives). Accepts NULL. */
void zo_dcomm_free(zo_dcomm_t d);
int zo_dcomm_rank(const zo_dcomm_t d);
int zo_dcomm_size(const zo_dcomm_t d);

/* recv[i] = op over the ranks of send[i] for count elements of dtype
 * (ZO_F32, ZO_F64, ZO_BF16, ZO_F16, ZO_I32, ZO_I64; send == recv: in
 * place), device memory, queued on stream. */
int zo_dcomm_allreduce(zo_dcomm_t d, const void *send, void *recv, size_t count, enum zo_dtype dtype,
                       enum zo_comm_op op, zo_stream_t stream);
/* The same with the result on rank root only. */
int zo_dcomm_reduce(zo_dcomm_t d, const void *send, void *recv, size_t count, enum zo_dtype dtype,
                    enum zo_comm_op op, int root, zo_stream_t stream);
/* root's nbytes at send copied to every rank's recv. */
int zo_dcomm_broadcast(zo_dcomm_t d, const void *send, void *recv, size_t nbytes, int root, zo_stream_t stream);
/* An asynchronous NCCL error so far (ncclCommGetAsyncError): 0 or -EIO. */
int zo_dcomm_check(zo_dcomm_t d);

#ifdef __cplusplus
}
#endif
#endif /* ZO_DCOMM_H */
