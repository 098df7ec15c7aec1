/* The MPI launcher's environment: this process's rank and the job's size as
 * the launcher (mpirun, mpiexec, srun) states them in environment variables,
 * readable before MPI starts and in a build without MPI. The one reader of
 * them, for the collectives' choice of implementation (zo/comm.h), the
 * config's train_batch_size and train's choice of the rank that prints.
 * The variables, launcher by launcher, in the order they are read:
 *   Open MPI        OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE
 *   MPICH (Hydra)   PMI_RANK, PMI_SIZE
 *   PMIx            PMIX_RANK, PMIX_SIZE (a PMIx server may give the rank only)
 * An empty variable counts as unset. */
#ifndef ZO_LAUNCHER_H
#define ZO_LAUNCHER_H

#include "zo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads the variables above. Returns 0 when none is set (*rank = 0,
 * *size = 1); 1 when some are: *rank is the rank they state (0 when they
 * state only a size), *size the size (0 when they state only a rank);
 * -EINVAL, with a message naming the variables and their values, when a
 * value is not a whole number in range (a rank >= 0, a size >= 1), when the
 * rank is not below the size, or when two launchers' variables disagree
 * (a launcher started inside another's job). */
int zo_launcher_rank_env(int *rank, int *size);

#ifdef __cplusplus
}
#endif
#endif /* ZO_LAUNCHER_H */
