/* Scaffolding of the tests that run under mpirun (ctest label mpi): whether
 * they can run here (the build has MPI, the launcher exists), and running
 * this binary again as N ranks. A test executable has two roles: started by
 * ctest it is the driver, which computes the single-process truth and
 * launches itself under mpirun; started by mpirun (zo_comm_launched()) each
 * process is one rank. As root, Open MPI needs OMPI_ALLOW_RUN_AS_ROOT and
 * its confirmation; ranks run with --oversubscribe (more ranks than cores)
 * and --bind-to none (a rank's stream threads must not share one core), one
 * OpenMP thread each. Also the files ranks leave for the driver and the
 * tests' token file. Header-only, on libc, zo/comm.h, zo/data.h, zo_test.h. */
#ifndef ZO_MPI_TEST_H
#define ZO_MPI_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "zo/comm.h"
#include "zo/config.h"
#include "zo/data.h"
#include "zo/model.h"
#include "zo_test.h"

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

/* The start of an MPI test's main: as a rank (under mpirun) the working
 * directory is argv[2] of "--ranks DIR" and n_extra more arguments (usage
 * printed, 2, otherwise); as the driver a new temporary directory named for
 * name, or ZO_TEST_SKIP where ranks cannot be launched. In dir (size bytes)
 * the directory, in data and nvme its token file and NVMe directory (300
 * bytes each). Returns 0 to go on, else main's exit code. */
static inline int zo_mpitest_start(int argc, char **argv, int n_extra, const char *name, char *dir, size_t size,
                                   char data[300], char nvme[300]) {
  if (zo_comm_launched()) {
    if (argc != 3 + n_extra || strcmp(argv[1], "--ranks") != 0) {
      fprintf(stderr, "usage under mpirun: %s --ranks DIR%s\n", argv[0], n_extra ? " ..." : "");
      return 2;
    }
    snprintf(dir, size, "%s", argv[2]);
  } else if (!zo_mpitest_available()) {
    return ZO_TEST_SKIP;
  } else if (zo_test_mkdtemp(dir, size, name)) {
    return 1;
  }
  snprintf(data, 300, "%s/tokens.u16", dir);
  snprintf(nvme, 300, "%s/nvme", dir);
  return 0;
}

/* The MPI tests' runs: 12 steps of a global micro-batch of 6 sequences
 * (split over the ranks), learning rate 0.003, and the options every run
 * shares (data, optimizer, accumulation 2, CPU backend, 4 KiB NVMe blocks). */
#define ZO_MPITEST_STEPS 12
#define ZO_MPITEST_GLOBAL_B 6
#define ZO_MPITEST_LR 0.003
#define ZO_MPITEST_STR_(x) #x
#define ZO_MPITEST_STR(x) ZO_MPITEST_STR_(x)
#define ZO_MPITEST_SETS                                                                                          \
  "data.seq_len=11", "data.format=u16", "data.shuffle=true", "gradient_accumulation_steps=2",                    \
      "steps=" ZO_MPITEST_STR(ZO_MPITEST_STEPS), "optimizer.params.lr=" ZO_MPITEST_STR(ZO_MPITEST_LR),         \
      "optimizer.params.weight_decay=0.1", "gradient_clipping=0.5", "engine.device=cpu", "log.every=100",        \
      "aio.block_size=4096", "zero_optimization.offload_param.buffer_count=2"

/* The number of parameters of cfg's model, cfg freed; 0 on an error. */
static inline size_t zo_mpitest_numel(struct zo_config *cfg) {
  struct zo_tensor_table t;
  const int err = zo_model_build_table(&cfg->model.spec, &t);
  zo_config_free(cfg);
  if (err) return 0;
  const size_t n = t.numel;
  zo_tensor_table_free(&t);
  return n;
}

/* Writes n bytes of x to path. Returns 0 or -1. */
static inline int zo_mpitest_write_bytes(const char *path, const void *x, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  const bool ok = fwrite(x, 1, n, f) == n;
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* The n bytes path holds (exactly n, else NULL with the reason printed);
 * the caller frees them. What ranks leave for the driver to compare. */
static inline void *zo_mpitest_read_bytes(const char *path, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "  cannot open %s\n", path);
    return NULL;
  }
  void *x = zo_test_xmalloc(n);
  const bool ok = fread(x, 1, n, f) == n && fgetc(f) == EOF;
  fclose(f);
  if (!ok) {
    fprintf(stderr, "  %s does not hold %zu bytes\n", path, n);
    free(x);
    return NULL;
  }
  return x;
}

/* The MPI tests' token file: n u16 tokens below 200 of a seeded recurrence
 * (learnable, the same in every test). Returns 0 or -errno, printed. */
static inline int zo_mpitest_write_tokens(const char *path, size_t n) {
  uint16_t *tok = zo_test_xmalloc(n * sizeof *tok);
  zo_rng_seed(5);
  for (size_t i = 0; i < n; i++)
    tok[i] = (uint16_t)(i < 2 ? i : (tok[i - 1] * 31u + tok[i - 2] * 17u + zo_rng_u32() % 5u) % 200u);
  const int err = zo_data_write_u16(path, tok, n);
  free(tok);
  if (err) fprintf(stderr, "%s\n", zo_last_error());
  return err;
}

#endif /* ZO_MPI_TEST_H */
