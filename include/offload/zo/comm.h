/* Collectives across data-parallel ranks: rank and size, in-place allreduce
 * and reduce (sum, max, min) of host buffers, reduce-scatter and allgather
 * over consecutive per-rank ranges, broadcast, allgather of small records,
 * point-to-point send and receive, barrier, and a
 * duplicate handle for another thread. Two implementations behind one
 * handle: a single process (size 1: every collective leaves the buffer as
 * it is) and MPI (offload/comm_mpi.c, compiled when CMake finds MPI,
 * option ZO_MPI). MPI types never appear here.
 * Buffers are host memory; on the CPU backend device memory is host memory.
 * Device buffers on CUDA streams (NCCL) are not implemented: that is a third
 * implementation of the same table whose collectives are queued on a
 * zo_stream_t instead of running on the calling thread (docs/parallel.md).
 * Every collective is synchronous and blocking, and every rank of a handle
 * makes the same collectives in the same order. A handle belongs to one
 * thread at a time; zo_comm_dup gives another thread a handle of its own
 * (the MPI implementation runs at MPI_THREAD_MULTIPLE for this). Results of
 * a floating-point sum may differ from a sequential sum in the last bits
 * (reduction order); they are expected to be the same bits on every rank
 * (Open MPI's algorithms reduce each element once and distribute it, or
 * combine pairs commutatively), which the tests check. */
#ifndef ZO_COMM_H
#define ZO_COMM_H

#include "zo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zo_comm *zo_comm_t;

enum zo_comm_op { ZO_COMM_SUM, ZO_COMM_MAX, ZO_COMM_MIN };

/* Whether this build has the MPI implementation. */
bool zo_comm_has_mpi(void);
/* Whether the environment says an MPI launcher (mpirun, mpiexec, srun with
 * PMI) started this process: any of the variables zo/launcher.h reads is set
 * (Open MPI's OMPI_COMM_WORLD_*, MPICH's PMI_*, PMIx's PMIX_*). */
bool zo_comm_launched(void);

/* Creates the process's communicator over every rank of the job. kind:
 * "single" (one process, no MPI), "mpi" (MPI_Init_thread, which may be
 * called once per process: a second "mpi" handle, or one after its free, is
 * refused), or "auto": "mpi" when zo_comm_launched() and the build has MPI,
 * "single" otherwise (an error instead when launched with more than one
 * rank by a build without MPI: each process would train alone, or when the
 * launcher's variables are inconsistent, zo_launcher_rank_env). Returns
 * NULL with zo_last_error() set (-ENOTSUP without MPI support, MPI failing
 * to start, a thread level below MPI_THREAD_MULTIPLE). */
zo_comm_t zo_comm_init(const char *kind);
/* Frees a handle; for the one from zo_comm_init this finalizes MPI (every
 * duplicate must be freed first). Collective. Accepts NULL. */
void zo_comm_free(zo_comm_t c);
/* Ends the whole job at once with exit code code (MPI_Abort): for a rank
 * that failed while the others may wait in a collective. Returns only for
 * the single-process implementation, whose caller then exits itself. */
void zo_comm_abort(zo_comm_t c, int code);

/* "single" or "mpi". */
const char *zo_comm_name(const zo_comm_t c);
/* This rank (0..size-1) and the number of ranks. */
int zo_comm_rank(const zo_comm_t c);
int zo_comm_size(const zo_comm_t c);
/* The rank among the ranks on this machine (shared memory) and their number:
 * for dividing the cores (and, with NCCL, choosing the GPU). */
int zo_comm_local_rank(const zo_comm_t c);
int zo_comm_local_size(const zo_comm_t c);

/* A new handle over the same ranks whose collectives are independent of c's
 * (MPI_Comm_dup): the scheduler's optimizer thread reduces gradients on one
 * while the main thread reduces losses on c. Collective. Returns 0 or -errno
 * with a message. */
int zo_comm_dup(zo_comm_t c, zo_comm_t *out);

/* buf[i] = op over the ranks of buf[i], for count elements of dtype
 * (ZO_F32, ZO_F64, ZO_I32 or ZO_I64; anything else is a broken contract),
 * in place, every rank receiving the result. Counts beyond MPI's int are
 * split into pieces. Returns 0 or -errno with a message naming the call,
 * the elements and the rank (-ENOMEM, -EINVAL, else -EIO). */
int zo_comm_allreduce(zo_comm_t c, void *buf, size_t count, enum zo_dtype dtype, enum zo_comm_op op);
/* buf[i] = op over the ranks of buf[i] on rank root only, in place there;
 * the other ranks' buffers are read, not written. Counts split as above.
 * Returns 0 or -errno. */
int zo_comm_reduce(zo_comm_t c, void *buf, size_t count, enum zo_dtype dtype, enum zo_comm_op op, int root);
/* Reduce-scatter by sum over consecutive ranges: buf holds counts[0] +
 * ... + counts[size-1] elements of dtype on every rank, and rank r's range
 * (counts[r] elements after the ranges of ranks below r) ends up summed over
 * the ranks on rank r, in place; the rest of r's buffer is left as it is.
 * One zo_comm_reduce per rank. Returns 0 or -errno. */
int zo_comm_reduce_scatter(zo_comm_t c, void *buf, const size_t *counts, enum zo_dtype dtype);
/* Allgather of consecutive byte ranges: rank r's nbytes[r] bytes (after
 * the ranges of the ranks below r) copied from r to every rank's buf, in
 * place. One zo_comm_broadcast per rank. Returns 0 or -errno. */
int zo_comm_allgatherv(zo_comm_t c, void *buf, const size_t *nbytes);
/* Point to point: nbytes to / from rank peer (not this rank) with tag
 * (0..32767); the receiver must ask for exactly the bytes sent. Returns 0
 * or -errno (-EINVAL for a bad peer or tag, -EIO for a size mismatch). */
int zo_comm_send(zo_comm_t c, const void *buf, size_t nbytes, int peer, int tag);
int zo_comm_recv(zo_comm_t c, void *buf, size_t nbytes, int peer, int tag);
/* Copies root's nbytes at buf to every other rank's buf. Returns 0 or -errno. */
int zo_comm_broadcast(zo_comm_t c, void *buf, size_t nbytes, int root);
/* recv[r * nbytes, (r + 1) * nbytes) = rank r's send[0, nbytes) on every
 * rank; recv holds size * nbytes bytes, at most INT_MAX (for small records:
 * per-rank figures). Returns 0 or -errno (-EINVAL over INT_MAX). */
int zo_comm_allgather(zo_comm_t c, const void *send, size_t nbytes, void *recv);
/* Returns when every rank has called it. Returns 0 or -errno. */
int zo_comm_barrier(zo_comm_t c);

#ifdef __cplusplus
}
#endif
#endif /* ZO_COMM_H */
