/* What a training run guards (engine/train/run_guard.c): its checkpoint.dir (a
 * flock held to the end, leftovers of killed runs removed, another run's
 * checkpoints or metrics refused unless --overwrite, writability, path
 * length and free space checked before step 1), its NVMe directory (a
 * locked zoffload-run-* under nvme_path holding the store's; unlocked ones
 * are a dead run's and removed), its limits (an address-space limit too
 * small for the plan refused; out-of-memory messages quote the limit), and
 * SIGINT / SIGTERM: the handler only records the first signal, the loop
 * finishes the step and saves; a second signal ends the process from the
 * handler, which removes the NVMe directory with async-signal-safe calls
 * only. Private to engine/train/train.c. */
#ifndef ZO_ENGINE_RUN_GUARD_H
#define ZO_ENGINE_RUN_GUARD_H

#include <limits.h>
#include <signal.h>

#include "zo/config.h"
#include "zo/fsutil.h"
#include "zo/model.h"
#include "zo/optim_format.h"
#include "zo/plan.h"
#include "zo/train.h"

struct zo_run_guard {
  bool lead;               /* rank 0: the one that owns checkpoint.dir and prints */
  struct zo_dir_lock lock; /* checkpoint.dir's run lock (lead rank), fd -1 when none */
  int nvme_fd;             /* flock on nvme_dir, -1 when none */
  char nvme_dir[PATH_MAX]; /* this run's zoffload-run-* under nvme_path, "" when none */
};

struct zo_run_signals {
  struct sigaction intr, term, xfsz; /* the handlers replaced */
};

/* SIGINT and SIGTERM recorded (zo_run_stop_signal), SIGXFSZ ignored (a
 * write past ulimit -f fails with EFBIG instead); restore puts back old. */
void zo_run_signals_install(struct zo_run_signals *old);
void zo_run_signals_restore(const struct zo_run_signals *old);
/* The first stop signal received since install, 0 none. */
int zo_run_stop_signal(void);
const char *zo_run_signal_name(int sig);

/* checkpoint.dir before step 1 (lead rank). Returns 0 or -errno. */
int zo_run_dir_open(struct zo_run_guard *g, const struct zo_config *cfg, const struct zo_train_opts *opts);
/* Free space for one more checkpoint of m (lora_numel > 0: a LoRA run's, its
 * adapters and their m, v only). Returns 0 or -ENOSPC. */
int zo_run_dir_check_space(const struct zo_config *cfg, const struct zo_model *m,
                           const struct zo_optim_format *opt, size_t lora_numel);
/* This run's locked directory under nvme_path (g->nvme_dir), the dead
 * runs' removed first; the signal handler learns its path. */
int zo_run_nvme_dir_open(struct zo_run_guard *g, const char *nvme_path);
/* Removes it (empty by then) and drops the lock; harmless when none. */
void zo_run_nvme_dir_close(struct zo_run_guard *g);

/* Refuses an address-space limit too small for the plan plus the BLAS
 * buffers, with the figures. Returns 0 or -ENOMEM. */
int zo_run_check_address_space(const struct zo_plan *plan, const struct zo_backend *be);
/* err, with the address-space limit quoted when it is -ENOMEM under one. */
int zo_run_quote_limit(int err);

#endif /* ZO_ENGINE_RUN_GUARD_H */
