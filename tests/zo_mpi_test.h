/* Scaffolding of the tests that run under mpirun (ctest label mpi): whether
 * they can run here (the build has MPI, the launcher exists), and running
 * this binary again as N ranks. A test executable has two roles: started by
 * ctest it is the driver, which computes the single-process truth and
 * launches itself under mpirun; started by mpirun (zo_comm_launched()) each
 * process is one rank. As root, Open MPI needs OMPI_ALLOW_RUN_AS_ROOT and
 * its confirmation; ranks run with --oversubscribe (more ranks than cores)
 * and --bind-to none (a rank's stream threads must not share one core), one
 * OpenMP thread each. Header-only, on libc and zo/comm.h. */
#ifndef ZO_MPI_TEST_H
#define ZO_MPI_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "zo/comm.h"

#ifndef ZO_MPIEXEC
#define ZO_MPIEXEC "" /* the launcher CMake's FindMPI found, "" without MPI */
#endif

/* Whether ranks can be launched; when not, prints why the test skips. */
static inline bool zo_mpitest_available(void) {
  if (!zo_comm_has_mpi()) {
    printf("skipped: this build has no MPI (ZO_MPI=OFF, or CMake found none; Debian: libopenmpi-dev openmpi-bin)\n");
    return false;
  }
  if (!ZO_MPIEXEC[0] || access(ZO_MPIEXEC, X_OK) != 0) {
    printf("skipped: no MPI launcher (mpiexec) at \"%s\" (Debian: openmpi-bin)\n", ZO_MPIEXEC);
    return false;
  }
  return true;
}

/* Runs this binary as n_ranks ranks with arguments args[0, n_args) (after
 * the program name) and the extra environment "NAME=value" strings
 * env[0, n_env), which every rank receives. Returns the launcher's exit
 * status: 0 when every rank exited with 0. */
static inline int zo_mpitest_launch(int n_ranks, const char *const *args, int n_args, const char *const *env,
                                    int n_env) {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    perror("readlink /proc/self/exe");
    return -1;
  }
  self[len] = '\0';
  char np[16];
  snprintf(np, sizeof np, "%d", n_ranks);
  const char *argv[64];
  int n = 0;
  argv[n++] = ZO_MPIEXEC;
  argv[n++] = "--oversubscribe";
  argv[n++] = "--bind-to";
  argv[n++] = "none";
  argv[n++] = "-np";
  argv[n++] = np;
  argv[n++] = "-x";
  argv[n++] = "OMP_NUM_THREADS=1";
  for (int i = 0; i < n_env && n < 56; i++) {
    argv[n++] = "-x";
    argv[n++] = env[i];
  }
  argv[n++] = self;
  for (int i = 0; i < n_args && n < 63; i++) argv[n++] = args[i];
  argv[n] = NULL;
  fflush(stdout);
  fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    if (geteuid() == 0) {
      setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
      setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    }
    execv(ZO_MPIEXEC, (char *const *)argv);
    perror("execv " ZO_MPIEXEC);
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0) {
    perror("fork/waitpid");
    return -1;
  }
  if (!WIFEXITED(status)) {
    fprintf(stderr, "  %s -np %d ended by signal %d\n", ZO_MPIEXEC, n_ranks, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return -1;
  }
  if (WEXITSTATUS(status)) fprintf(stderr, "  %s -np %d exited with %d\n", ZO_MPIEXEC, n_ranks, WEXITSTATUS(status));
  return WEXITSTATUS(status);
}

#endif /* ZO_MPI_TEST_H */
