/* What a training run writes about itself (engine/train/run_log.c), behind
 * open / step / eval / close: the metrics JSONL (log.metrics_path, one line a
 * step and one a validation), the TensorBoard event file
 * (log.tensorboard_dir), the console line every log.every steps (means over
 * the steps since the last line: loss, tokens/s, TFLOP/s, the step's
 * compute, copies, optimizer, io and NVMe waits) and the progress bar on a
 * terminal. Only the lead rank writes; on the others every call is a no-op
 * but for the bookkeeping. Private to engine/train/. */
#ifndef ZO_ENGINE_RUN_LOG_H
#define ZO_ENGINE_RUN_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "zo/config.h"
#include "zo/sched.h"
#include "zo/tensorboard.h"

/* One training step as it happened: what train.c's step returns. */
struct zo_step_record {
  long step;                    /* 1-based */
  double loss;                  /* mean of the micro-batch losses (global) */
  float lr;                     /* the rate the update used (zo_lr_at of the applied step) */
  double norm;                  /* global gradient norm before clipping (inf or NaN when it overflowed) */
  double loss_scale;            /* fp16's loss scale during the step (1 otherwise) */
  bool skipped;                 /* the update was skipped (overflow, or engine.on_nonfinite "skip") */
  long skipped_steps;           /* skipped steps so far, this one included */
  double wall_s;                /* the whole step */
  double compute_s;             /* the step's forward, backward and queueing, less reading data */
  double io_s;                  /* reading the step's data */
  double comm_ms;               /* collective time of the step (data parallel) */
  struct zo_sched_stats before; /* the scheduler's counters as the step began */
};

struct zo_run_log_opts {
  bool lead;               /* rank 0: the one that writes */
  bool tty;                /* progress bar and "\r" line starts */
  bool append;             /* a resumed run: the metrics file is appended to */
  int n_ranks;             /* data-parallel ranks (1: one process) */
  size_t step_tokens;      /* tokens of one step, all ranks */
  size_t rank_step_tokens; /* of them, one rank's */
  double flops_per_token;  /* forward + backward, for TFLOP/s */
  bool scaler;             /* the loss scaler is on (its scale and skips on the console line) */
  bool scaler_dynamic;     /* ... and dynamic */
};

struct zo_run_log {
  struct zo_run_log_opts o;
  const struct zo_config *cfg;
  struct zo_sched *sched;  /* its counters (borrowed) */
  FILE *metrics;           /* NULL: none (or lost: a write failed, said once) */
  long long metrics_good;  /* bytes of whole lines in it (-1: not a regular file) */
  zo_tb_t tb;              /* NULL: none */
  /* since the last console line */
  double compute_s, io_s, loss, wall_s;
  long n;
  struct zo_sched_stats since;
  /* the progress bar's origin: the first step logged */
  long first;
  double t_first;
};

/* Opens cfg's log outputs (the metrics file's directory made; "tensorboard:
 * PATH" printed). Returns 0 or -errno naming the key; close it either way. */
int zo_run_log_open(struct zo_run_log *l, const struct zo_config *cfg, struct zo_sched *s,
                    const struct zo_run_log_opts *o);
/* Logs step r: its TensorBoard scalars, its metrics line, the
 * console line when due, the progress bar. A metrics or TensorBoard write
 * that fails (a full disk) is said once on stderr and that output is no
 * longer written (the metrics file cut back to its last whole line): the
 * run goes on. Returns 0 or -errno. */
int zo_run_log_step(struct zo_run_log *l, const struct zo_step_record *r);
/* Logs a validation loss after step (console, metrics, TensorBoard). */
int zo_run_log_eval(struct zo_run_log *l, long step, double val_loss);
void zo_run_log_close(struct zo_run_log *l);

#endif /* ZO_ENGINE_RUN_LOG_H */
