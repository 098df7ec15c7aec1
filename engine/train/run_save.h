/* Saving a training run's checkpoint (engine/train/run_save.c): every rank
 * calls zo_run_save; rank 0 writes unless the optimizer is sharded, when
 * each rank writes its shard's optimizer file and rank 0 commits once all
 * are written. The run's tokenizer files go into each checkpoint
 * (struct zo_checkpoint_opts). Private to engine/train/. */
#ifndef ZO_ENGINE_RUN_SAVE_H
#define ZO_ENGINE_RUN_SAVE_H

#include <stdbool.h>
#include <stddef.h>

#include "zo/checkpoint.h"
#include "zo/comm.h"
#include "zo/config.h"
#include "zo/sched.h"
#include "zo/state.h"

/* What a save needs of the run (all borrowed). */
struct zo_run_saver {
  const struct zo_config *cfg;    /* checkpoint.dir, keep, save_optimizer; steps */
  zo_comm_t comm;                 /* NULL: one process */
  int rank, n_ranks;
  bool lead;                      /* rank 0: writes and prints */
  bool tty;                       /* lines start with "\r" (after the progress bar) */
  struct zo_sched *sched;
  const struct zo_state_io *io;   /* the scheduler's state I/O */
  const struct zo_placement *pl;  /* the optimizer's format and sharding */
  const char *tokenizer;          /* the run's tokenizer.json, "" none */
  const struct zo_run_settings *settings; /* recorded in every checkpoint (zo/run_settings.h) */
  const struct zo_lora_table *lora; /* a LoRA run's adapters (zo/lora_ckpt.h), else NULL */
};

/* Saves checkpoint-<st->step> under checkpoint.dir (weights only at the
 * last step with checkpoint.save_optimizer = false) and prints where, its
 * bytes and the write rate; every rank goes on once it is on disk. Returns
 * 0 or -errno (-ERANGE: a weight is not finite). */
int zo_run_save(const struct zo_run_saver *s, const struct zo_train_state *st);

/* "1.20 MiB in 0.31 s, 4.1 MB/s" into buf, for the progress lines. */
const char *zo_run_rate_str(size_t nbytes, double s, char buf[96]);

#endif /* ZO_ENGINE_RUN_SAVE_H */
