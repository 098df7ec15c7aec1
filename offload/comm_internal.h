/* Private to offload/comm*.c: the handle behind zo_comm_t, a table of
 * collectives per implementation (single process here in comm.c, MPI in
 * comm_mpi.c; an NCCL one would be a third table), and the MPI entry point.
 * comm.c checks the contracts (dtype, root, sizes) before calling a table. */
#ifndef ZO_COMM_INTERNAL_H
#define ZO_COMM_INTERNAL_H

#include "zo/comm.h"

struct zo_comm_ops {
  const char *name;
  int (*allreduce)(struct zo_comm *c, void *buf, size_t count, enum zo_dtype dtype, enum zo_comm_op op);
  int (*reduce)(struct zo_comm *c, void *buf, size_t count, enum zo_dtype dtype, enum zo_comm_op op, int root);
  int (*send)(struct zo_comm *c, const void *buf, size_t nbytes, int peer, int tag);
  int (*recv)(struct zo_comm *c, void *buf, size_t nbytes, int peer, int tag);
  int (*broadcast)(struct zo_comm *c, void *buf, size_t nbytes, int root);
  int (*allgather)(struct zo_comm *c, const void *send, size_t nbytes, void *recv);
  int (*barrier)(struct zo_comm *c);
  int (*dup)(struct zo_comm *c, struct zo_comm **out);
  void (*free)(struct zo_comm *c);
  void (*abort)(struct zo_comm *c, int code);
};

struct zo_comm {
  const struct zo_comm_ops *ops;
  int rank, size;             /* in the job */
  int local_rank, local_size; /* on this machine */
  bool world;                 /* the handle of zo_comm_init (not a duplicate) */
  size_t max_count;           /* elements per collective call at most (MPI's int counts) */
  void *impl;                 /* the implementation's state */
};

#ifdef ZO_HAVE_MPI
/* MPI_Init_thread at MPI_THREAD_MULTIPLE, errors returned (MPI_ERRORS_RETURN).
 * Returns NULL with zo_last_error() set. */
struct zo_comm *zo_comm_mpi_init(void);
#endif

#endif /* ZO_COMM_INTERNAL_H */
