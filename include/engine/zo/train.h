/* The training loop over a loaded config: backend selection, model and
 * optimizer state, data, gradient accumulation, clipping, the LR schedule,
 * progress lines, metrics JSONL and checkpoints (evaluation and sampling:
 * zo/sample.h). Placement (zero_optimization) follows engine/sched/ after the planner
 * (engine/plan/plan.c) has checked every tier; optimizer AdamW or AdamW8bit
 * (8-bit m, v on any optimizer tier); fp32, or bf16 / fp16 mixed precision
 * (fp16 with loss scaling, zo/loss_scale.h: an overflowed step is skipped);
 * activation checkpointing. Parameters on NVMe are refused with -ENOTSUP. */
#ifndef ZO_TRAIN_H
#define ZO_TRAIN_H

#include "zo/comm.h"
#include "zo/config.h"
#include "zo/sched.h"
#include "zo/train_setup.h" /* zo_train_backend, zo_train_model_config, zo_train_check_threads */

#ifdef __cplusplus
extern "C" {
#endif

struct zo_train_opts {
  const char *resume;  /* NULL: fresh run; "auto": latest under checkpoint.dir; else a checkpoint dir */
  int sample_tokens;   /* generate this many tokens after training (0 = none) */
  bool memory_report;  /* print the memory plan before the first step, and the memory report at the end */
  bool verbose;        /* the memory report per tier and category at the end (else its one summary line) */
  struct zo_sched_stats *stats; /* receives the planned and peak bytes per tier (may be NULL) */
  float *final_params; /* receives the final parameters, table order (may be NULL) */
  zo_comm_t comm;      /* data-parallel ranks, borrowed (NULL: one process); see zo_train */
  bool overwrite;      /* a fresh run into a checkpoint.dir holding another run's checkpoints (or a
                        * non-empty log.metrics_path) removes them first instead of refusing */
  bool allow_data_change; /* a resume on another data.train or tokenizer than the checkpoint's goes on
                           * (said) instead of being refused */
  const char *const *resume_allow; /* keys of zo/run_settings.h whose change a resume allows (said) instead
                                    * of refusing (--resume-allow KEY) */
  int n_resume_allow;
  int *stop_signal;    /* receives SIGINT or SIGTERM when one stopped the run (it returns -EINTR),
                        * else 0 (may be NULL) */
  zo_backend_t backend; /* the backend to run on, borrowed (NULL: engine.device's, zo_train_backend);
                         * a test gives a CPU backend copy with a non-zero stream workspace */
};

/* Trains cfg->steps optimizer steps. Before step 1 (rank 0): checkpoint.dir
 * is created and probed writable, its path length and free space (one
 * checkpoint) checked, locked for the whole run (a second run on it is
 * -EBUSY naming the holder's pid and host), cleared of killed runs'
 * leftovers (one line each), and a fresh run (opts->resume NULL) into one
 * holding checkpoints or into a non-empty metrics file is -EEXIST unless
 * opts->overwrite; threads beyond 4x the hardware's and an address-space
 * limit too small for the plan are refused. While it runs, SIGINT and
 * SIGTERM end it after the current step with a checkpoint (-EINTR,
 * *opts->stop_signal set); a second signal exits the process at once
 * (128 + signal) after removing the NVMe directory. An fp32 or bf16 step
 * with a non-finite loss or gradient norm stops the run with -ERANGE
 * naming the last good checkpoint (engine.on_nonfinite "stop") or skips
 * the update ("skip"). Returns 0; -EINVAL/-ENOTSUP for a config
 * the engine cannot run (message says which key); -EIO/-ENOENT/... for data
 * and checkpoint errors; -ENOMEM with the tier, bytes asked and available.
 * With opts->comm over N > 1 ranks (collective: every rank calls it with the
 * same config): data parallelism on the CPU backend.
 * train_micro_batch_size_per_gpu is per rank (B), rank r reads rows
 * [r*B, (r+1)*B) of each global micro-batch of N*B rows (zo_data_open_rank).
 * At ZeRO stage 0 every rank holds the whole state and the gradients are
 * summed over the ranks before the optimizer; at stage >= 1 the optimizer
 * state (master weights, m, v) is sharded over the ranks and each rank
 * updates its shard (zo_placement_sharded, zo/sched.h). Either way the run
 * follows the single-process run with micro-batch N*B up to the reduction
 * order. Losses, validation losses and tokens/s are global; only rank 0
 * prints and writes metrics; rank 0 saves checkpoints, every rank writing
 * its optimizer shard when the state is sharded; every rank loads a resumed
 * checkpoint (with "auto", the one rank 0 finds), whatever rank count saved
 * it. Threads: zo_train_backend. A rank that
 * fails returns its error while the others may wait in a collective: the
 * caller ends the job (zo_comm_abort). */
int zo_train(const struct zo_config *cfg, const struct zo_train_opts *opts);

#ifdef __cplusplus
}
#endif
#endif /* ZO_TRAIN_H */
