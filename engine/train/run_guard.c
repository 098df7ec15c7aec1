/* A training run's guards: its directories, its limits, its stop signals
 * (see run_guard.h). Moved out of engine/train/train.c, which calls them. */
#include "run_guard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo/checkpoint.h"

/* ---- signals --------------------------------------------------------------
 * The handler only stores the first SIGINT / SIGTERM; the loop reads it
 * after each step. A second one cannot wait for a step: the handler removes
 * the NVMe directory (its path copied here before the handler could run,
 * removed with zo_remove_tree_signal_safe's async-signal-safe calls) and
 * _exits. Checkpoint temporaries it leaves are the next run's to remove. */
static volatile sig_atomic_t stop_signal;
static volatile sig_atomic_t swap_dir_set;
static char swap_dir[PATH_MAX];

int zo_run_stop_signal(void) { return stop_signal; }

static void on_stop_signal(int sig) {
  if (!stop_signal) {
    stop_signal = sig;
    return;
  }
  static const char msg[] = "\nzoffload: second signal: stopping now, without a checkpoint of this step\n";
  ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)w;
  if (swap_dir_set) zo_remove_tree_signal_safe(swap_dir, 2);
  _exit(128 + sig);
}

void zo_run_signals_install(struct zo_run_signals *old) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  stop_signal = 0;
  sigaction(SIGINT, &sa, &old->intr);
  sigaction(SIGTERM, &sa, &old->term);
  /* Past ulimit -f a write fails with EFBIG (reported, the save aborted)
   * instead of the signal killing the process mid-save. */
  struct sigaction ign;
  memset(&ign, 0, sizeof ign);
  ign.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &ign, &old->xfsz);
}

void zo_run_signals_restore(const struct zo_run_signals *old) {
  sigaction(SIGINT, &old->intr, NULL);
  sigaction(SIGTERM, &old->term, NULL);
  sigaction(SIGXFSZ, &old->xfsz, NULL);
  swap_dir_set = 0;
}

const char *zo_run_signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }

/* ---- the NVMe directory ---------------------------------------------------
 * The store makes its zoffload-nvme-* directory inside ours,
 * <nvme_path>/zoffload-run-<pid>-XXXXXX, created under a hidden name, locked
 * (flock on the directory, held to the end) and only then renamed: a
 * zoffload-run-* directory whose lock is free belongs to a run that died,
 * and any run on the same nvme_path removes it. */
static int nvme_dir_clean(const char *nvme_path, bool say) {
  DIR *d = opendir(nvme_path);
  if (!d) return 0;
  struct dirent *e;
  char found[16][256];
  int n = 0, err = 0;
  while ((e = readdir(d)) && n < 16)
    if (!strncmp(e->d_name, "zoffload-run-", 13) || !strncmp(e->d_name, "zoffload-nvme-", 14))
      snprintf(found[n++], sizeof found[0], "%s", e->d_name);
  closedir(d);
  for (int i = 0; i < n && !err; i++) {
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/%s", nvme_path, found[i]) >= (int)sizeof p) continue;
    if (!strncmp(found[i], "zoffload-nvme-", 14)) {
      if (say)
        printf("note: %s is an NVMe swap directory of an older zoffload or of another program (bench nvme, a "
               "test); remove it if none of them is running\n", p);
      continue;
    }
    int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      if ((err = zo_remove_tree(p)))
        err = zo_error(err, "cannot remove a dead run's NVMe directory: %s", zo_last_error());
      else if (say)
        printf("removed %s: the NVMe swap directory of a run that was killed\n", p);
    }
    close(fd);
  }
  return err;
}

int zo_run_nvme_dir_open(struct zo_run_guard *t, const char *nvme_path) {
  int err = zo_mkdir_leaf(nvme_path, 0700);
  if (err) return zo_error(err, "zero_optimization.offload_optimizer.nvme_path: %s", zo_last_error());
  if ((err = nvme_dir_clean(nvme_path, t->lead))) return err;
  char tmp[PATH_MAX];
  if (snprintf(tmp, sizeof tmp, "%s/.zoffload-run-%ld-XXXXXX", nvme_path, (long)getpid()) >= (int)sizeof tmp)
    return zo_error(-ENAMETOOLONG, "path too long: zero_optimization.offload_optimizer.nvme_path %s", nvme_path);
  if (!mkdtemp(tmp)) return zo_error(-errno, "%s: cannot create a directory in nvme_path %s", strerror(errno), nvme_path);
  t->nvme_fd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (t->nvme_fd < 0 || flock(t->nvme_fd, LOCK_EX | LOCK_NB) != 0) {
    err = zo_error(-errno, "%s: cannot lock %s", strerror(errno), tmp);
    rmdir(tmp);
    return err;
  }
  char *slash = strrchr(tmp, '/');
  snprintf(t->nvme_dir, sizeof t->nvme_dir, "%.*s/%s", (int)(slash - tmp), tmp, slash + 2);
  if (rename(tmp, t->nvme_dir) != 0) {
    err = zo_error(-errno, "%s: cannot rename %s", strerror(errno), tmp);
    rmdir(tmp);
    t->nvme_dir[0] = '\0';
    return err;
  }
  memcpy(swap_dir, t->nvme_dir, sizeof swap_dir);
  swap_dir_set = 1;
  return 0;
}

void zo_run_nvme_dir_close(struct zo_run_guard *t) {
  swap_dir_set = 0;
  if (t->nvme_dir[0] && rmdir(t->nvme_dir) != 0 && errno != ENOENT)
    fprintf(stderr, "zoffload: warning: could not remove %s: %s\n", t->nvme_dir, strerror(errno));
  t->nvme_dir[0] = '\0';
  if (t->nvme_fd >= 0) close(t->nvme_fd);
  t->nvme_fd = -1;
}

/* ---- the run directory ----------------------------------------------------
 * Everything about checkpoint.dir that could fail at the first save is
 * checked here, before step 1: the longest path a save makes, writability
 * (a probe file), one writer (the lock), the leftovers of killed runs, and
 * whether it holds another run's checkpoints or metrics. Lead rank only. */
int zo_run_dir_open(struct zo_run_guard *t, const struct zo_config *cfg, const struct zo_train_opts *opts) {
  const char *dir = cfg->checkpoint.dir;
  /* The deepest path a save writes: dir/.checkpoint-N.tmp-PID/<file>.tmp.PID */
  char tail[256];
  const int nt = snprintf(tail, sizeof tail, "/.checkpoint-%ld.tmp-%ld/optimizer-00001-of-00001.safetensors.tmp.%ld",
                          cfg->steps, (long)getpid(), (long)getpid());
  const size_t len = strlen(dir);
  if (len + (size_t)nt >= PATH_MAX)
    return zo_error(-ENAMETOOLONG, "checkpoint.dir is too long: %zu characters, and the files a checkpoint writes "
                                   "in it would have paths of %zu, over the %d the system allows (PATH_MAX); use "
                                   "a shorter path (it begins %.60s...)", len, len + (size_t)nt, PATH_MAX, dir);
  int err = zo_dir_probe_writable(dir);
  if (err) return zo_error(err, "checkpoint.dir: %s", zo_last_error());
  if ((err = zo_dir_lock(dir, NULL, &t->lock))) return err;
  if ((err = zo_checkpoint_clean_leftovers(dir, stdout))) return err;
  if (opts->resume) return 0;
  long *steps;
  int n;
  if ((err = zo_checkpoint_list(dir, &steps, &n))) return err;
  const long lo = n ? steps[0] : 0, hi = n ? steps[n - 1] : 0;
  free(steps);
  struct stat st;
  const char *mp = cfg->log.metrics_path;
  const bool metrics = mp && mp[0] && stat(mp, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
  if (!n && !metrics) return 0;
  char what[96];
  if (n == 1) snprintf(what, sizeof what, "checkpoint-%ld", lo);
  else snprintf(what, sizeof what, "%d of them, checkpoint-%ld to checkpoint-%ld", n, lo, hi);
  if (!opts->overwrite) {
    if (n)
      return zo_error(-EEXIST, "checkpoint.dir %s already holds another run's checkpoints (%s): continue that run "
                               "with --resume auto, or start over with --overwrite (removes them)", dir, what);
    return zo_error(-EEXIST, "log.metrics_path %s already holds another run's metrics (%lld bytes): continue that "
                             "run with --resume auto, or start over with --overwrite (starts the file anew)",
                    mp, (long long)st.st_size);
  }
  if (n) {
    printf("--overwrite: removing the %d checkpoint%s of the previous run in %s\n", n, n == 1 ? "" : "s", dir);
    if ((err = zo_checkpoint_remove_all(dir, stdout))) return err;
  }
  if (metrics) printf("--overwrite: %s starts anew\n", mp);
  return 0;
}

/* Free space for one more checkpoint (model in fp32, m and v) on
 * checkpoint.dir's file system, checked before step 1. */
int zo_run_dir_check_space(const struct zo_config *cfg, const struct zo_model *m,
                           const struct zo_optim_format *opt, size_t lora_numel) {
  size_t avail;
  int err = zo_fs_free_bytes(cfg->checkpoint.dir, &avail);
  if (err) return err;
  /* A LoRA run's checkpoint holds the adapters and their m, v, never the base. */
  const size_t need = (lora_numel ? 3 * lora_numel * sizeof(float)
                                  : m->table.numel * sizeof(float) + 2 * zo_optim_state_nbytes(opt, &m->table)) +
                      ((size_t)1 << 20);
  if (avail >= need) return 0;
  char a[32], b[32];
  return zo_error(-ENOSPC, "not enough space for a checkpoint: one needs %s (%s, m and v) and the file "
                           "system of checkpoint.dir %s has %s free; free space or point checkpoint.dir elsewhere",
                  zo_format_bytes(need, a), lora_numel ? "the LoRA adapters" : "parameters", cfg->checkpoint.dir,
                  zo_format_bytes(avail, b));
}

/* ---- limits ---------------------------------------------------------------
 * Under an address-space limit (ulimit -v) too small for the plan, OpenBLAS
 * spins forever in its buffer allocator instead of failing: refuse before
 * the first GEMM, with the figures. What the process maps besides the plan:
 * per thread, OpenBLAS's GEMM buffer, a malloc arena and a stack. */
#define ZO_THREAD_VM ((size_t)160 << 20)
#define ZO_BASE_VM ((size_t)256 << 20)

static size_t vm_now(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long pages = 0;
  if (f) {
    if (fscanf(f, "%lu", &pages) != 1) pages = 0;
    fclose(f);
  }
  return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

int zo_run_check_address_space(const struct zo_plan *plan, const struct zo_backend *be) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 0;
  const long hw = sysconf(_SC_NPROCESSORS_ONLN) > 0 ? sysconf(_SC_NPROCESSORS_ONLN) : 1;
  const size_t threads = (size_t)hw + 8; /* OpenMP's, the streams', the NVMe engine's */
  const bool host_device = strcmp(be->name, "cpu") == 0;
  const size_t need = vm_now() + (host_device ? plan->total[ZO_TIER_DEVICE] : 0) + plan->total[ZO_TIER_HOST] +
                      threads * ZO_THREAD_VM + ZO_BASE_VM;
  if (need <= (size_t)rl.rlim_cur) return 0;
  char a[32], b[32], c[32], d[32], e[32];
  return zo_error(-ENOMEM, "the address-space limit (ulimit -v) is %s, and this run needs about %s: %s mapped now, "
                           "%s of plan (device arena and host pool), %s for %zu threads (BLAS buffers, stacks, "
                           "malloc arenas); raise the limit (ulimit -v unlimited) or shrink the plan",
                  zo_format_bytes((size_t)rl.rlim_cur, a), zo_format_bytes(need, b), zo_format_bytes(vm_now(), c),
                  zo_format_bytes((host_device ? plan->total[ZO_TIER_DEVICE] : 0) + plan->total[ZO_TIER_HOST], d),
                  zo_format_bytes(threads * ZO_THREAD_VM, e), threads);
}

/* An out-of-memory message under a limit names the limit, not physical memory. */
int zo_run_quote_limit(int err) {
  struct rlimit rl;
  if (err != -ENOMEM || getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return err;
  char msg[900], a[32];
  snprintf(msg, sizeof msg, "%s", zo_last_error());
  return zo_error(err, "%s (this process runs under an address-space limit, ulimit -v, of %s: that limit, not "
                       "the free memory, is what ran out)", msg, zo_format_bytes((size_t)rl.rlim_cur, a));
}

