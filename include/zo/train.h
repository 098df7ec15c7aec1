/* The training loop and its siblings (eval, sample) over a loaded config:
 * backend selection, model and optimizer state, data, gradient accumulation,
 * clipping, the LR schedule, progress lines, metrics JSONL and checkpoints.
 * Placement (zero_optimization) follows engine/sched.c after the planner
 * (engine/plan.c) has checked every tier; optimizer AdamW or AdamW8bit
 * (8-bit m, v on any optimizer tier); fp32, or bf16 / fp16 mixed precision
 * (fp16 with loss scaling, zo/loss_scale.h: an overflowed step is skipped);
 * activation checkpointing. Parameters on NVMe are refused with -ENOTSUP. */
#ifndef ZO_TRAIN_H
#define ZO_TRAIN_H

#include "zo/comm.h"
#include "zo/config.h"
#include "zo/sched.h"

#ifdef __cplusplus
extern "C" {
#endif

struct zo_train_opts {
  const char *resume;  /* NULL: fresh run; "auto": latest under checkpoint.dir; else a checkpoint dir */
  int sample_tokens;   /* generate this many tokens after training (0 = none) */
  bool memory_report;  /* print the memory plan before the first step too */
  struct zo_sched_stats *stats; /* receives the planned and peak bytes per tier (may be NULL) */
  float *final_params; /* receives the final parameters, table order (may be NULL) */
  zo_comm_t comm;      /* data-parallel ranks, borrowed (NULL: one process); see zo_train */
};

/* The model shapes of cfg: model.* or, with model.init_from, the file's
 * (n_head from the config); checked against data.seq_len. Returns 0 or -errno. */
int zo_train_model_config(const struct zo_config *cfg, struct zo_model_config *mc);

/* The backend of engine.device for this rank: with engine.threads 0,
 * OMP_NUM_THREADS unset and several ranks of comm (may be NULL) on this
 * machine, OpenMP gets the machine's cores divided among them (each would
 * otherwise start one thread per core). NULL with zo_last_error() set. */
zo_backend_t zo_train_backend(const struct zo_config *cfg, zo_comm_t comm);

/* Trains cfg->steps optimizer steps. Returns 0; -EINVAL/-ENOTSUP for a config
 * the engine cannot run (message says which key); -EIO/-ENOENT/... for data
 * and checkpoint errors; -ENOMEM with the tier, bytes asked and available.
 * With opts->comm over N > 1 ranks (collective: every rank calls it with the
 * same config): data parallelism with replicated state on the CPU backend.
 * train_micro_batch_size_per_gpu is per rank (B), rank r reads rows
 * [r*B, (r+1)*B) of each global micro-batch of N*B rows (zo_data_open_rank),
 * gradients are summed over the ranks before the optimizer (zo/sched.h), so
 * the run follows the single-process run with micro-batch N*B up to the
 * reduction order. Losses, validation losses and tokens/s are global; only
 * rank 0 prints, writes metrics and saves checkpoints (every rank holds the
 * same state); every rank loads a resumed checkpoint (with "auto", the one
 * rank 0 finds), whatever rank count saved it. Threads: zo_train_backend. A rank that
 * fails returns its error while the others may wait in a collective: the
 * caller ends the job (zo_comm_abort). */
int zo_train(const struct zo_config *cfg, const struct zo_train_opts *opts);

struct zo_eval_result {
  double loss;               /* mean validation loss over the batches */
  int n_batches;             /* micro-batches evaluated */
  size_t device_bytes;       /* device arena bytes the evaluation used */
  size_t train_device_bytes; /* what training the same config plans, for comparison */
};

/* Validation loss of the checkpoint (NULL: latest under checkpoint.dir, or
 * model.init_from, or the random init) over n_batches micro-batches of
 * data.val (data.train when val is empty), with a forward-only model.
 * Returns 0 or -errno. */
int zo_eval(const struct zo_config *cfg, const char *checkpoint, int n_batches,
            struct zo_eval_result *out);

struct zo_sample_opts {
  const char *checkpoint; /* as for zo_eval */
  const char *prompt;     /* byte-level text for vocab 256, else comma-separated token ids */
  int n_tokens;           /* tokens to generate */
  double temperature;     /* > 0 */
  int top_k;              /* 0 = whole vocabulary */
  uint64_t seed;
};

/* Generates text (vocab 256: bytes written as text; otherwise token ids) to
 * out. Returns 0 or -errno. */
int zo_sample(const struct zo_config *cfg, const struct zo_sample_opts *opts, FILE *out);

#ifdef __cplusplus
}
#endif
#endif /* ZO_TRAIN_H */
