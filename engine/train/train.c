/* The training loop. One step: gradient_accumulation_steps
 * micro-batches (forward, backward with dloss = 1/(B*T*K), so the gradient is
 * the mean), the global L2 norm, clipping, and AdamW tensor by tensor with
 * decay only on 2-D tensors; the scheduler (engine/sched/) places and orders
 * all of it as the config's zero_optimization section says, after the
 * planner (engine/plan/plan.c) has checked that every tier fits. The reported loss
 * is the mean of the micro-batch losses. AdamW or AdamW8bit (8-bit m, v on
 * any optimizer tier; the CPU backend only, like the rest of training).
 * fp32, or bf16 / fp16 mixed precision (fp32 master weights); fp16 scales the
 * loss (zo/loss_scale.h), and a step with an overflowed gradient is skipped:
 * it counts as a step (data consumed, logged with "skipped": true) but not
 * as an AdamW step or LR-schedule step, as in DeepSpeed. Parameters on NVMe
 * are refused with -ENOTSUP. Activation checkpointing and the chunked LM
 * head live in the model and the scheduler. Every run ends with one line of
 * planned and peak bytes per tier, and with --verbose or --memory-report the
 * memory report (planned, peak and current bytes per tier and category,
 * measured in the allocators); --memory-report also prints the plan before
 * anything is allocated.
 * Data parallel (zo_train_opts.comm over several ranks): each rank trains its
 * rows of the global micro-batch; at ZeRO stage 0 every rank holds the whole
 * state and the scheduler sums the gradients, at stage >= 1 each rank owns
 * its shard of the optimizer state (zo_placement_sharded); rank 0 alone
 * prints and logs (see zo/train.h). Evaluation and sampling are
 * engine/train/sample.c's.
 * A run owns its checkpoint.dir and its NVMe directory, checks its limits
 * before step 1 and stops on SIGINT / SIGTERM after the step, saving
 * (engine/train/run_guard.c); the loop returns -EINTR then.
 * The file reads top to bottom as a run goes: open (checks, plan, run
 * directory, scheduler, tokenizer, data), load (resume, model.init_from or
 * the seeded init), one step returning a record, the loop (step, log,
 * evaluate or save, stop check), finish. Shared setup: setup.c; the logs:
 * run_log.c; checkpoint saves: run_save.c. */
#include "zo/train.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zo/adamw.h"
#include "zo/checkpoint.h"
#include "zo/data.h"
#include "zo/hf.h"
#include "zo/host_check.h"
#include "zo/lora.h"
#include "zo/lora_ckpt.h"
#include "zo/loss_scale.h"
#include "zo/lr_schedule.h"
#include "zo/model.h"
#include "zo/plan.h"
#include "zo/run_settings.h"
#include "zo/run_tokenizer.h"
#include "zo/sample.h"
#include "zo/sched.h"
#include "zo/tokenizer.h"
#include "zo/trace_file.h"
#include "run_guard.h"
#include "run_log.h"
#include "run_save.h"

struct trainer {
  const struct zo_config *cfg;     /* the caller's, or epochs_cfg */
  struct zo_config epochs_cfg;     /* cfg with the steps of data.epochs (shares cfg's strings) */
  const struct zo_train_opts *opts;
  zo_comm_t comm;                  /* NULL: one process */
  int rank, n_ranks;
  bool lead;                       /* rank 0: prints, logs metrics, saves checkpoints */
  bool tty;                        /* progress bar: stdout is a terminal, one process (mpirun
                                    * gives ranks a terminal even when its output is a file) */
  bool ckpt_dir;                   /* checkpoint.dir is set: the run saves */
  int B, T, K;                     /* rows per rank, sequence, accumulation; N = n_ranks */
  struct zo_model_config mc;
  struct zo_plan plan;             /* every tier checked before anything is allocated */
  zo_backend_t be;
  struct zo_sched *sched;
  struct zo_model *m;              /* the scheduler's */
  struct zo_data *train, *val;
  int n_val;                       /* validation micro-batches */
  struct zo_state_io io;           /* the scheduler's state I/O: loads, saves, init */
  struct zo_run_guard guard;       /* checkpoint.dir's lock, this run's NVMe directory */
  char tokenizer[PATH_MAX];        /* the run's tokenizer.json (zo/run_tokenizer.h), "" none */
  bool tokenizer_from_ckpt;        /* taken from the resumed checkpoint: follows the newest save */
  struct zo_run_inputs inputs;     /* data.train and the tokenizer, as checkpoints record them */
  struct zo_run_settings *settings; /* what the mathematics depends on, as checkpoints record it */
  struct zo_train_state st;        /* what a checkpoint records */
  struct zo_adamw_hparams hp0;     /* AdamW's constants; the rate is the schedule's */
  struct zo_tracer tracer;         /* engine.trace: rank 0's timeline of the configured steps */
  struct zo_run_log log;           /* metrics, TensorBoard, the console line */
  bool lora_on;                    /* the lora section is on: the adapters train, the base is frozen */
  struct zo_lora_table lora;       /* lora_on: the adapters' table */
};

static void trainer_free(struct trainer *t) {
  if (t->lora_on) zo_lora_table_free(&t->lora);
  zo_run_settings_free(t->settings);
  zo_run_log_close(&t->log);
  zo_data_close(t->train);
  zo_data_close(t->val);
  zo_sched_free(t->sched); /* removes the store's directory, then ours goes */
  zo_run_nvme_dir_close(&t->guard);
  zo_dir_unlock(&t->guard.lock);
}

/* printf on the lead rank only (the figures it prints are global). */
static void say(const struct trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const struct trainer *t, const char *fmt, ...) {
  if (!t->lead) return;
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
}

/* ---- open: checks, plan, run directory, scheduler, tokenizer, data -------- */

/* LoRA: the adapters' table and their first values (*params, t->lora.numel
 * floats; free them): lora.init_from's PEFT adapter (its base checked
 * against model.init_from), else PEFT's initialisation from engine.seed
 * (B = 0: the first step starts at the base model exactly). */
static int open_lora(struct trainer *t, float **params) {
  const struct zo_config *cfg = t->cfg;
  struct zo_lora l;
  int err = zo_lora_resolve(&cfg->lora, &t->mc, &l);
  if (err < 0) return err;
  const char *dir = cfg->lora.init_from && cfg->lora.init_from[0] ? cfg->lora.init_from : NULL;
  const char *base = cfg->model.init_from ? cfg->model.init_from : "";
  if (dir && (err = zo_lora_check_base(&l, dir, base))) return err;
  if ((err = zo_lora_table_build(&t->mc, &l, &t->lora))) return err;
  if (!(*params = malloc(t->lora.numel * sizeof **params + 1)))
    return zo_error(-ENOMEM, "out of host memory for the LoRA adapters");
  if (dir) err = zo_lora_load(&t->lora, dir, *params);
  else zo_lora_init(&t->lora, cfg->engine.seed, *params);
  if (err) {
    free(*params);
    *params = NULL;
  }
  return err;
}

/* Everything refused before anything is allocated, then the scheduler. */
static int trainer_open(struct trainer *t) {
  const struct zo_config *cfg = t->cfg;
  const struct zo_train_opts *opts = t->opts;
  int err;
  if ((err = zo_train_check_threads(cfg)) || (err = zo_train_model_config_lora(cfg, &t->mc, &t->lora_on))) return err;
  if (t->lora_on && !cfg->checkpoint.save_optimizer)
    return zo_error(-ENOTSUP, "checkpoint.save_optimizer = false with a lora section is not built: a LoRA run's "
                              "checkpoints always carry the adapters' m and v (twice the adapters' bytes, never the "
                              "base's); remove the key");
  if ((err = zo_host_check_data(cfg))) return err;
  /* B rows per rank; a step is K global micro-batches of N*B rows. */
  const int B = t->B = cfg->micro_batch, K = t->K = cfg->grad_accum, N = t->n_ranks;
  t->T = cfg->data.seq_len;
  if (cfg->train_batch_size && cfg->train_batch_size != (long)B * K * N)
    return zo_error(-EINVAL, "train_batch_size = %ld but this run has train_micro_batch_size_per_gpu %d x "
                             "gradient_accumulation_steps %d x %d rank%s = %ld: leave gradient_accumulation_steps out "
                             "to derive it, or set train_batch_size to %ld",
                    cfg->train_batch_size, B, K, N, N == 1 ? "" : "s", (long)B * K * N, (long)B * K * N);
  if (!(t->be = opts->backend ? opts->backend : zo_train_backend(cfg, t->comm))) return -ENODEV;
  /* Plan every tier before allocating anything; refuse what cannot fit. */
  struct zo_plan *plan = &t->plan;
  if ((err = zo_plan_build_rank(cfg, &t->mc, t->be, t->rank, N, plan))) return err;
  if (opts->memory_report && t->lead) zo_plan_print(plan, stdout);
  if ((err = zo_plan_check(cfg, plan)) || (err = zo_run_check_address_space(plan, t->be))) return err;
  if ((err = zo_host_check(cfg, plan, !strcmp(t->be->name, "cpu")))) return err;
  if (t->lead && t->ckpt_dir) err = zo_run_dir_open(&t->guard, cfg, opts);
  if (t->comm) {
    /* Rank 0's verdict on the run directory, so that no rank starts alone
     * and none waits for a rank 0 that has given up. */
    int32_t ok = err == 0;
    const int e = zo_comm_broadcast(t->comm, &ok, sizeof ok, 0);
    if (!err && !(err = e) && !ok) err = zo_error(-EIO, "rank 0 refused checkpoint.dir %s", cfg->checkpoint.dir);
  }
  if (err) return err;
  if (plan->placement.optimizer == ZO_OFFLOAD_NVME) {
    if ((err = zo_run_nvme_dir_open(&t->guard, plan->placement.nvme_path))) return err;
    plan->placement.nvme_path = t->guard.nvme_dir;
  }
  /* fp16 skips an overflowed step anyway; fp32 and bf16 when asked to. */
  plan->placement.skip_nonfinite = cfg->engine.on_nonfinite == ZO_NONFINITE_SKIP;
  float *lora_params = NULL;
  if (t->lora_on && (err = open_lora(t, &lora_params))) return err;
  const struct zo_sched_config sc = {.model = t->mc, .B = B, .T = t->T, .placement = plan->placement,
                                     .backend = t->be, .host_budget = cfg->engine.host_memory_budget,
                                     .comm = t->comm, .lora = t->lora_on ? &t->lora : NULL,
                                     .lora_params = lora_params};
  t->sched = zo_sched_init(&sc);
  free(lora_params);
  if (!t->sched) return zo_run_quote_limit(-ENOMEM);
  t->m = zo_sched_model(t->sched);
  zo_sched_state_io(t->sched, &t->io);
  if (t->lead && t->ckpt_dir && (err = zo_run_dir_check_space(cfg, t->m, &plan->placement.opt, t->lora_on ? t->lora.numel : 0)))
    return err;
  return 0;
}

/* The run's tokenizer goes into every checkpoint; its ids must fit the model. */
static int open_tokenizer(struct trainer *t) {
  const struct zo_config *cfg = t->cfg;
  int err = zo_run_tokenizer(cfg, t->tokenizer, sizeof t->tokenizer);
  if (err || !t->tokenizer[0]) return err;
  struct zo_tokenizer *tk;
  size_t tv = 0;
  if ((err = zo_tokenizer_load(t->tokenizer, &tk))) {
    /* model.init_from's tokenizer only came along: one this build cannot
     * read still travels with the checkpoints (transformers may read it). */
    if (cfg->model.tokenizer && cfg->model.tokenizer[0]) return err;
    say(t, "note: tokenizer %s is not usable here (%s): copied into checkpoints, but the sample prints ids\n",
        t->tokenizer, zo_last_error());
  } else {
    tv = zo_tokenizer_vocab_size(tk);
    zo_tokenizer_free(tk);
  }
  if (tv > (size_t)t->mc.vocab_size)
    return zo_error(-EINVAL, "tokenizer %s has %zu ids but the model's vocab_size is %d: set model.vocab_size "
                             ">= %zu, or give the model's own tokenizer (model.tokenizer)",
                    t->tokenizer, tv, t->mc.vocab_size, tv);
  if (tv) say(t, "tokenizer: %s (%zu ids; copied into every checkpoint)\n", t->tokenizer, tv);
  return 0;
}

/* data.train (rank r's rows), data.epochs' steps, data.val. */
static int open_data(struct trainer *t) {
  const struct zo_config *cfg = t->cfg;
  const int N = t->n_ranks;
  t->train = zo_data_open_rank(cfg->data.train, (enum zo_data_format)cfg->data.format, t->mc.vocab_size, t->B,
                               t->T, cfg->data.shuffle, cfg->engine.seed, t->rank, N);
  if (!t->train) return zo_error(-EIO, "data.train: %s", zo_last_error());
  if (cfg->data.epochs > 0) {
    /* data.epochs: the steps, and the schedule that follows them, come from the file. */
    t->epochs_cfg = *cfg;
    const long steps = zo_config_steps_for_epochs(cfg, zo_data_n_tokens(t->train), N);
    int err = zo_config_set_steps(&t->epochs_cfg, steps);
    if (err) return err;
    cfg = t->cfg = &t->epochs_cfg;
    say(t, "data.epochs %g: %ld steps over %s's %zu tokens\n", cfg->data.epochs, steps, cfg->data.train,
        zo_data_n_tokens(t->train));
  }
  if (cfg->data.val && cfg->data.val[0]) {
    t->val = zo_data_open_rank(cfg->data.val, (enum zo_data_format)cfg->data.format, t->mc.vocab_size, t->B, t->T,
                               false, cfg->engine.seed, t->rank, N);
    if (!t->val) return zo_error(-EIO, "data.val: %s", zo_last_error());
  }
  return 0;
}

/* data.train's and the tokenizer's fingerprints and the run's settings,
 * recorded in every checkpoint. */
static int record_inputs(struct trainer *t) {
  struct zo_run_inputs *in = &t->inputs;
  uint64_t bytes;
  int err = zo_run_settings_of_run(t->cfg, &t->mc, t->n_ranks, &t->settings);
  if (err) return err;
  err = zo_file_fingerprint(t->cfg->data.train, false, &in->data_bytes, &in->data_crc);
  if (err) return zo_error(err, "data.train: %s", zo_last_error());
  in->data_known = true;
  snprintf(in->data_path, sizeof in->data_path, "%s", t->cfg->data.train);
  if (!t->tokenizer[0]) return 0;
  if ((err = zo_file_fingerprint(t->tokenizer, true, &bytes, &in->tokenizer_crc))) return err;
  in->tokenizer = true;
  return 0;
}

/* The resumed checkpoint's inputs (st->inputs) against this run's: another
 * data file or tokenizer is refused unless --allow-data-change; a run
 * without a tokenizer takes the checkpoint's. */
static int check_inputs(struct trainer *t, const char *path, const struct zo_run_inputs *was) {
  struct zo_run_inputs *now = &t->inputs;
  const bool allow = t->opts->allow_data_change;
  if (!was->data_known) {
    say(t, "note: %s records no data.train (saved before checkpoints recorded it): not compared\n", path);
  } else if (was->data_bytes != now->data_bytes || was->data_crc != now->data_crc) {
    if (!allow)
      return zo_error(-EINVAL, "%s was trained on data.train %s (%llu bytes, fingerprint %08x), this run's data.train "
                               "%s is another file (%llu bytes, fingerprint %08x): its data position would index "
                               "other tokens; resume with the same data, or pass --allow-data-change to go on "
                               "with this one", path, was->data_path, (unsigned long long)was->data_bytes,
                      was->data_crc, now->data_path, (unsigned long long)now->data_bytes, now->data_crc);
    say(t, "note: data.train changed (%s -> %s): --allow-data-change given, training goes on with it\n",
        was->data_path, now->data_path);
  } else if (strcmp(was->data_path, now->data_path) != 0) {
    say(t, "note: data.train %s has the same bytes as the checkpoint's %s\n", now->data_path, was->data_path);
  }
  if (was->tokenizer && now->tokenizer && was->tokenizer_crc != now->tokenizer_crc) {
    if (!allow)
      return zo_error(-EINVAL, "%s carries another tokenizer (tokenizer.json CRC32 %08x) than this run's %s (CRC32 "
                               "%08x): the token ids would mean other text; resume with the checkpoint's tokenizer "
                               "(--set model.tokenizer=%s), or pass --allow-data-change to go on with this one",
                      path, was->tokenizer_crc, t->tokenizer, now->tokenizer_crc, path);
    say(t, "note: tokenizer changed to %s: --allow-data-change given\n", t->tokenizer);
  } else if (was->tokenizer && !now->tokenizer) {
    if (snprintf(t->tokenizer, sizeof t->tokenizer, "%s/tokenizer.json", path) >= (int)sizeof t->tokenizer)
      return zo_error(-ENAMETOOLONG, "%s/tokenizer.json: path too long", path);
    now->tokenizer = true;
    now->tokenizer_crc = was->tokenizer_crc;
    t->tokenizer_from_ckpt = true;
    say(t, "tokenizer: %s (the checkpoint's; copied into every checkpoint)\n", t->tokenizer);
  } else if (!was->tokenizer && now->tokenizer) {
    say(t, "note: %s carries no tokenizer; this run's %s goes into its checkpoints from now on\n", path,
        t->tokenizer);
  }
  return 0;
}

/* ---- load: resume > model.init_from > seeded init ---------------------------- */

/* The checkpoint's settings against this run's (zo/run_settings.h), before
 * anything of it is loaded. */
static int check_settings(struct trainer *t, const char *path) {
  struct zo_run_settings *was;
  int err = zo_run_settings_of_checkpoint(path, t->mc.n_head, &was);
  if (err) return err;
  err = zo_run_settings_compare(was, t->settings, path, t->opts->resume_allow, t->opts->n_resume_allow,
                                t->lead ? stdout : NULL);
  zo_run_settings_free(was);
  return err;
}

/* A LoRA run's checkpoint: the adapters and their m, v (the base is
 * model.init_from's, loaded before). */
static int resume_lora(struct trainer *t, const char *path) {
  const size_t n = t->lora.numel;
  float *buf = malloc(3 * n * sizeof *buf + 1);
  if (!buf) return zo_error(-ENOMEM, "out of host memory for the LoRA adapters");
  int err = zo_lora_checkpoint_load(path, &t->lora, buf, buf + n, buf + 2 * n, &t->st);
  if (!err) err = zo_sched_lora_write(t->sched, buf, buf + n, buf + 2 * n);
  free(buf);
  return err;
}

/* opts->resume's checkpoint ("auto": rank 0's latest, so that every rank
 * loads the same one) into the scheduler, the data position restored. */
static int resume(struct trainer *t, char *path, size_t size) {
  const struct zo_config *cfg = t->cfg;
  struct zo_train_state *st = &t->st;
  int err;
  if (strcmp(t->opts->resume, "auto") == 0) {
    if (!cfg->checkpoint.dir || !cfg->checkpoint.dir[0])
      return zo_error(-EINVAL, "--resume auto needs checkpoint.dir in the config");
    if (t->lead && (err = zo_checkpoint_latest(cfg->checkpoint.dir, path, size))) return err;
    if (t->comm && (err = zo_comm_broadcast(t->comm, path, size, 0))) return err;
  } else {
    snprintf(path, size, "%s", t->opts->resume);
  }
  if ((err = zo_checkpoint_refuse_unchecked(path)) || (err = check_settings(t, path))) return err;
  if ((err = t->lora_on ? resume_lora(t, path) : zo_checkpoint_load_io(path, t->m, &t->plan.placement.opt, &t->io,
                                                                        true, st)))
    return err;
  if ((err = check_inputs(t, path, &st->inputs))) return err;
  if (st->seed != cfg->engine.seed)
    return zo_error(-EINVAL, "%s was saved by a run with engine.seed = %llu, the config has %llu: the data order "
                             "follows the seed; resume with --set engine.seed=%llu", path,
                    (unsigned long long)st->seed, (unsigned long long)cfg->engine.seed,
                    (unsigned long long)st->seed);
  zo_data_seek(t->train, st->data_position);
  say(t, "resumed from %s at step %ld\n", path, st->step);
  if (st->step >= cfg->steps)
    say(t, "nothing to train: the checkpoint is at step %ld and steps = %ld; raise steps (--set steps=N, N > "
           "%ld) to train further\n", st->step, cfg->steps, st->step);
  return 0;
}

/* Parameters and optimizer state, staged through host copies. */
static int trainer_load(struct trainer *t) {
  const struct zo_config *cfg = t->cfg;
  const bool init_from = cfg->model.init_from && cfg->model.init_from[0];
  char resume_path[PATH_MAX] = "";
  t->st = (struct zo_train_state){.seed = cfg->engine.seed};
  zo_loss_scaler_init(&t->st.scaler, cfg);
  const double t_load = zo_time_s();
  int err;
  if (t->opts->resume && !t->lora_on) {
    err = resume(t, resume_path, sizeof resume_path);
  } else { /* a LoRA run's base is never in its checkpoints */
    err = init_from ? zo_model_load_safetensors_io(cfg->model.init_from, t->m, &t->io)
                    : zo_sched_state_init(t->sched, cfg->engine.seed);
    if (!err) err = zo_sched_state_fresh(t->sched, ZO_STATE_M);
    if (!err) err = zo_sched_state_fresh(t->sched, ZO_STATE_V);
    if (!err && t->opts->resume) err = resume(t, resume_path, sizeof resume_path);
  }
  if (!err) err = zo_sched_state_done(t->sched);
  if (err) return err;
  if (t->opts->resume || init_from) {
    char rate[96];
    const size_t lb = t->m->table.numel * sizeof(float) +
                      (t->opts->resume ? 2 * zo_optim_state_nbytes(&t->plan.placement.opt, &t->m->table) : 0);
    say(t, "loaded %s: %s\n", t->opts->resume ? resume_path : cfg->model.init_from,
        zo_run_rate_str(lb, zo_time_s() - t_load, rate));
  }
  t->st.batch_rows = (long)t->B * t->n_ranks;
  t->st.world_size = t->n_ranks;
  t->st.inputs = t->inputs;
  return 0;
}

/* ---- before step 1: the logs, what the run is, the first evaluation ------- */

static int open_log(struct trainer *t) {
  const size_t rank_tokens = (size_t)t->B * (size_t)t->T * (size_t)t->K;
  const struct zo_run_log_opts o = {.lead = t->lead, .tty = t->tty, .append = t->opts->resume != NULL,
                                    .n_ranks = t->n_ranks, .step_tokens = rank_tokens * (size_t)t->n_ranks,
                                    .rank_step_tokens = rank_tokens,
                                    .flops_per_token = t->lora_on ? zo_model_lora_flops_per_token(&t->mc, t->T,
                                                                                                  t->lora.numel)
                                                                  : zo_model_flops_per_token(&t->mc, t->T),
                                    .scaler = t->st.scaler.enabled, .scaler_dynamic = t->st.scaler.dynamic};
  return zo_run_log_open(&t->log, t->cfg, t->sched, &o);
}

/* The model, data, batch, ranks, placement and optimizer, one line each. */
static void describe(const struct trainer *t) {
  const struct zo_config *cfg = t->cfg;
  const struct zo_model_config *mc = &t->mc;
  const struct zo_placement *pl = &t->plan.placement;
  const int B = t->B, T = t->T, K = t->K, N = t->n_ranks;
  const size_t n = t->m->table.numel;
  char where[400], desc[200];
  const size_t padding = (size_t)(mc->padded_vocab_size - mc->vocab_size) * (size_t)mc->n_embd *
                         (mc->tie_embeddings ? 1u : 2u);
  say(t, "model: %s, %.2fM parameters\n", zo_model_describe(mc, desc, sizeof desc), (double)(n - padding) / 1e6);
  say(t, "train: %s (%zu tokens), micro-batch %d x %d, %d accumulation step%s, %ld steps, %s backend\n",
      cfg->data.train, zo_data_n_tokens(t->train), B, T, K, K == 1 ? "" : "s", cfg->steps, t->be->name);
  if (t->comm)
    say(t, "data parallel: %d ranks (%s), global micro-batch %d x %d (rank r reads rows [%d r, %d r + %d)), "
           "%s\n",
        N, zo_comm_name(t->comm), B * N, T, B, B, B,
        zo_placement_sharded(pl) ? "optimizer state sharded (ZeRO stage >= 1)"
                                 : "optimizer state replicated on every rank (ZeRO stage 0)");
  say(t, "placement: %s\n", zo_placement_describe(pl, where, sizeof where));
  if (t->lora_on) {
    const struct zo_lora *l = &t->lora.lora;
    say(t, "lora: r %d, alpha %g (scale %g%s), %d modules, %zu trainable parameters (%.3f%% of the model's); "
           "adapters %s\n", l->r, l->alpha, l->scale, l->use_rslora ? ", rsLoRA" : "", t->lora.n_modules,
        t->lora.numel, 100.0 * (double)t->lora.numel / (double)(n - padding),
        cfg->lora.init_from && cfg->lora.init_from[0] ? cfg->lora.init_from : "initialised as PEFT does (B = 0)");
  }
  if (t->st.scaler.enabled && !t->st.scaler.dynamic)
    say(t, "fp16: static loss scale %g (fp16.loss_scale): it never changes; a step that overflows is skipped\n",
        t->st.scaler.scale);
  if (pl->opt.eightbit) {
    const struct zo_optim_format *of = &pl->opt;
    const size_t n8 = zo_optim_numel_8bit(of, &t->m->table), sb = zo_optim_state_nbytes(of, &t->m->table);
    say(t, "optimizer: AdamW8bit, block %zu, %.1f%% of parameters with 8-bit m, v (tensors >= %zu "
           "elements); m + v %.3f B/param (fp32: 8)\n",
        of->block, 100.0 * (double)n8 / (double)n, of->min_numel, 2.0 * (double)sb / (double)n);
  }
}

/* Mean validation loss over t->n_val micro-batches of data.val from
 * position 0, forward only, through the scheduler (parameters wherever
 * they live). */
static int eval_loss(struct trainer *t, double *loss) {
  double sum = 0.0;
  zo_data_seek(t->val, 0);
  for (int i = 0; i < t->n_val; i++) {
    int32_t *in, *tg;
    double l;
    zo_sched_batch(t->sched, &in, &tg);
    int err = zo_data_next(t->val, in, tg);
    if (!err) err = zo_sched_eval(t->sched, &l);
    if (err) return err;
    sum += l;
  }
  *loss = sum / t->n_val;
  return 0;
}

/* The validation batches, and a fresh run's loss before step 1. */
static int first_eval(struct trainer *t) {
  const struct zo_config *cfg = t->cfg;
  const size_t GBT = (size_t)t->B * (size_t)t->T * (size_t)t->n_ranks;
  t->n_val = t->val ? cfg->eval.steps > 0 ? cfg->eval.steps : zo_eval_n_batches(t->val, t->B * t->n_ranks, t->T) : 0;
  if (!t->val && cfg->eval.every > 0)
    say(t, "note: eval.every = %ld but there is no data.val: no validation loss during this run\n", cfg->eval.every);
  if (!t->val || t->st.step != 0) return 0;
  double vl;
  const double te = zo_time_s();
  int err = eval_loss(t, &vl);
  if (err) return err;
  const double ds = zo_time_s() - te;
  say(t, "step 0: val loss %.4f\n  evaluated %d batches, %zu tokens in %.2f s, %.0f tok/s\n", vl, t->n_val,
      (size_t)t->n_val * GBT, ds, (double)((size_t)t->n_val * GBT) / (ds > 0 ? ds : 1e-9));
  return 0;
}

/* engine.trace on rank 0 (the CPU backend records the timeline). */
static int open_tracer(struct trainer *t) {
  const struct zo_config *cfg = t->cfg;
  zo_tracer_init(&t->tracer, t->lead && t->be->stream_set_name ? cfg->engine.trace.path : NULL,
                 cfg->engine.trace.first_step, cfg->engine.trace.steps);
  int err = t->tracer.path ? zo_trace_path_check(t->tracer.path) : 0;
  if (err) return err;
  if (t->lead && cfg->engine.trace.path[0] && !t->be->stream_set_name)
    say(t, "trace: the %s backend records no timeline (only the CPU backend does); engine.trace.path ignored\n",
        t->be->name);
  t->hp0 = (struct zo_adamw_hparams){.beta1 = (float)cfg->optimizer.betas[0],
                                     .beta2 = (float)cfg->optimizer.betas[1],
                                     .eps = (float)cfg->optimizer.eps,
                                     .weight_decay = (float)cfg->optimizer.weight_decay};
  return 0;
}

/* ---- one step ---------------------------------------------------------------- */

/* -ERANGE: step's what (a loss, a norm, a weight) is not finite; names the
 * last good checkpoint to resume from. */
static int nonfinite_stop(const struct zo_config *cfg, long step, const char *what) {
  char w[600], last[PATH_MAX] = "";
  snprintf(w, sizeof w, "%s", what);
  const bool dir = cfg->checkpoint.dir && cfg->checkpoint.dir[0];
  if (!dir || zo_checkpoint_latest(cfg->checkpoint.dir, last, sizeof last) != 0)
    snprintf(last, sizeof last, "none (no checkpoint was saved)");
  return zo_error(-ERANGE, "step %ld: %s (engine.on_nonfinite = \"stop\"): the run stops, nothing of this step is "
                           "saved; the last good checkpoint is %s. Resume from it with a lower "
                           "optimizer.params.lr or gradient_clipping, or set engine.on_nonfinite = \"skip\"",
                  step, w, last);
}

/* The step's K micro-batches read and queued (forward, backward, the
 * gradient accumulated); *io receives the seconds spent reading data. */
static int micro_batches(struct trainer *t, long step, double *io) {
  const int K = t->K;
  int err;
  if (zo_data_has_mask(t->train)) {
    /* With a loss mask the step's loss is the mean over its trained
     * targets (every micro-batch, every rank), known before the first. */
    size_t n_targets;
    if ((err = zo_data_count_targets(t->train, zo_data_position(t->train), K, &n_targets))) return err;
    zo_sched_set_step_targets(t->sched, n_targets);
  }
  for (int k = 0; k < K; k++) {
    int32_t *in, *tg;
    zo_sched_batch(t->sched, &in, &tg);
    const double ti = zo_time_s();
    if ((err = zo_data_next(t->train, in, tg))) return err;
    *io += zo_time_s() - ti;
    /* Dropout masks: a function of the seed and this micro-batch's place in the run. */
    zo_model_set_dropout(t->m, t->cfg->engine.seed,
                         ((uint64_t)(step - 1) * (uint64_t)K + (uint64_t)k) * (uint64_t)t->n_ranks +
                             (uint64_t)t->rank);
    zo_sched_micro_batch(t->sched, k);
  }
  return 0;
}

/* Training step `step`: the micro-batches, the optimizer at the schedule's
 * rate, the norm; a non-finite fp32 / bf16 step stops the run (-ERANGE) or
 * is skipped; the train state advanced. *r receives what happened. */
static int train_step(struct trainer *t, long step, struct zo_step_record *r) {
  const struct zo_config *cfg = t->cfg;
  struct zo_train_state *st = &t->st;
  const bool mixed16 = t->plan.placement.dtype == ZO_F16;
  int err;
  if (zo_tracer_step(&t->tracer, step)) zo_sched_trace_counters(t->sched);
  *r = (struct zo_step_record){.step = step, .loss_scale = st->scaler.scale};
  const double t0 = zo_time_s();
  zo_sched_stats(t->sched, &r->before);
  zo_sched_set_loss_scale(t->sched, r->loss_scale);
  if ((err = micro_batches(t, step, &r->io_s))) return err;
  /* AdamW's step count and the schedule advance with applied steps only. */
  const long opt_step = st->applied_steps + 1;
  struct zo_adamw_hparams hp = t->hp0;
  hp.lr = r->lr = (float)zo_lr_at(&cfg->lr_schedule, opt_step);
  if ((err = zo_sched_step_end(t->sched, opt_step, &hp, cfg->gradient_clipping, &r->loss))) return err;
  const double t1 = zo_time_s();
  if ((err = zo_sched_norm(t->sched, &r->norm, &r->skipped))) return err;
  if (zo_tracer_due(&t->tracer, step, cfg->steps)) {
    if ((err = zo_sched_synchronize(t->sched))) return err;
    zo_sched_trace_counters(t->sched);
    /* A trace that cannot be written (a full disk) loses the trace, never the run's steps. */
    if (zo_tracer_end(&t->tracer, stdout))
      fprintf(stderr, "zoffload: warning: engine.trace.path %s cannot be written (%s): the run goes on without "
                      "the trace\n", t->tracer.path, zo_last_error());
  }
  const double t2 = zo_time_s();
  const double loss = r->loss, norm = r->norm;
  if (!mixed16 && !r->skipped && (!isfinite(loss) || !isfinite(norm))) {
    /* Nothing of this step reaches a checkpoint: the run ends before the save. */
    char what[64];
    const double v = isfinite(loss) ? norm : loss;
    snprintf(what, sizeof what, "the %s is %s", isfinite(loss) ? "gradient norm" : "loss",
             isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf");
    return nonfinite_stop(cfg, step, what);
  }
  if (r->skipped) {
    st->skipped_steps++;
    if (mixed16)
      say(t, "%sstep %ld: gradient overflow at loss scale %g: update skipped\n", t->tty ? "\r" : "", step,
          r->loss_scale);
    else
      say(t, "%sstep %ld: the gradient norm is %s: update skipped (engine.on_nonfinite = \"skip\")\n",
          t->tty ? "\r" : "", step, isnan(norm) ? "NaN" : "inf");
  } else {
    st->applied_steps++;
  }
  if ((err = zo_loss_scaler_update(&st->scaler, r->skipped))) return err;
  r->skipped_steps = st->skipped_steps;
  r->wall_s = t2 - t0;
  r->compute_s = t1 - t0 - r->io_s;
  if (t->comm) {
    struct zo_sched_stats se;
    zo_sched_stats(t->sched, &se);
    r->comm_ms = 1e3 * (se.comm_s - r->before.comm_s);
  }
  st->step = step;
  st->data_position = zo_data_position(t->train);
  return 0;
}

/* ---- evaluate, save, stop ---------------------------------------------------- */

static int evaluate(struct trainer *t, long step) {
  double vl;
  int err = eval_loss(t, &vl);
  return err ? err : zo_run_log_eval(&t->log, step, vl);
}

static int save(struct trainer *t) {
  const struct zo_run_saver s = {.cfg = t->cfg, .comm = t->comm, .rank = t->rank, .n_ranks = t->n_ranks,
                                 .lead = t->lead, .tty = t->tty, .sched = t->sched, .io = &t->io,
                                 .pl = &t->plan.placement, .tokenizer = t->tokenizer,
                                 .settings = t->settings, .lora = t->lora_on ? &t->lora : NULL};
  int err = zo_run_save(&s, &t->st);
  /* The checkpoint's tokenizer, taken at resume, is read from the newest
   * save from now on: retention may remove the one resumed from. */
  char latest[PATH_MAX];
  if (!err && t->lead && t->tokenizer_from_ckpt && zo_checkpoint_latest(t->cfg->checkpoint.dir, latest, sizeof latest) == 0)
    snprintf(t->tokenizer, sizeof t->tokenizer, "%.*s/tokenizer.json", (int)sizeof t->tokenizer - 16, latest);
  return err;
}

/* The step at which a signal stops the run: rank 0's, on every rank. */
static int stop_requested(struct trainer *t, int *sig) {
  int32_t v = zo_run_stop_signal();
  if (t->comm) {
    int err = zo_comm_broadcast(t->comm, &v, sizeof v, 0);
    if (err) return err;
  }
  *sig = v;
  return 0;
}

/* ---- the loop ---------------------------------------------------------------- */

/* Steps until cfg->steps or a signal (*sig, after that step's save). */
static int train_loop(struct trainer *t, int *sig) {
  const struct zo_config *cfg = t->cfg;
  int err = stop_requested(t, sig);
  for (long step = t->st.step + 1; !err && step <= cfg->steps && !*sig; step++) {
    struct zo_step_record r;
    if ((err = train_step(t, step, &r)) || (err = zo_run_log_step(&t->log, &r))) break;
    const bool last = step == cfg->steps;
    const bool save_due = t->ckpt_dir && (last || (cfg->checkpoint.every > 0 && step % cfg->checkpoint.every == 0));
    const bool eval_due = t->val && (last || save_due || (cfg->eval.every > 0 && step % cfg->eval.every == 0));
    if (eval_due && (err = evaluate(t, step))) break;
    /* -ERANGE: weights that overflowed while the loss and norm were still finite. */
    if (save_due && (err = save(t))) return err == -ERANGE ? nonfinite_stop(cfg, step, zo_last_error()) : err;
    if ((err = stop_requested(t, sig))) break;
    if (*sig && !save_due && t->ckpt_dir) err = save(t);
  }
  return err;
}

/* ---- finish: the stop message, the memory report, the sample ------------------- */

/* A run stopped by signal sig after step t->st.step (it began after first). */
static int stopped(const struct trainer *t, int sig, long first) {
  const long step = t->st.step;
  if (t->tty) say(t, "\n");
  if (t->opts->stop_signal) *t->opts->stop_signal = sig;
  if (step == first)
    return zo_error(-EINTR, "stopped by %s before step %ld: nothing new to save", zo_run_signal_name(sig), step + 1);
  if (t->ckpt_dir)
    return zo_error(-EINTR, "stopped by %s after step %ld (saved in %s): continue with --resume auto",
                    zo_run_signal_name(sig), step, t->cfg->checkpoint.dir);
  return zo_error(-EINTR, "stopped by %s after step %ld (no checkpoint.dir: nothing saved)", zo_run_signal_name(sig),
                  step);
}

static void print_peaks(const struct zo_sched_stats *st, FILE *out) {
  char a[32], b[32], c[32], d[32], e[32];
  fprintf(out, "memory: device arena %s planned, %s peak (%zu bytes) | host pool %s planned, %s peak "
               "(%zu bytes, %s) | nvme %s\n",
          zo_format_bytes(st->device_planned, a), zo_format_bytes(st->device_peak, b), st->device_peak,
          zo_format_bytes(st->host_planned, c), zo_format_bytes(st->host_peak, d), st->host_peak,
          st->pinned ? "pinned" : "pageable", zo_format_bytes(st->nvme_planned, e));
}

/* opts->sample_tokens from the trained model. ZeRO-3 over ranks gathers
 * each block from every rank as the forward loads it: then every rank
 * samples (the same tokens), rank 0 prints. */
static int sample(struct trainer *t) {
  const struct zo_config *cfg = t->cfg;
  const int n = t->opts->sample_tokens;
  const bool all_sample = t->comm && zo_placement_sharded(&t->plan.placement) && t->plan.placement.param_slots;
  if (n <= 0 || !(t->lead || all_sample)) return 0;
  int32_t *ctx = calloc((size_t)n + 1, sizeof *ctx);
  FILE *out = t->lead ? stdout : fopen("/dev/null", "w");
  if (!ctx || !out) {
    free(ctx);
    return zo_error(-ENOMEM, "out of host memory for sampling");
  }
  ctx[0] = t->mc.vocab_size == 256 ? '\n' : 0;
  /* With the run's tokenizer the sample is text, started at its
   * beginning- (else end-) of-text token and running through end-of-text
   * tokens (printed), so it shows several documents. */
  struct zo_tokenizer *tk = NULL;
  if (t->tokenizer[0] && zo_tokenizer_load(t->tokenizer, &tk)) tk = NULL; /* said at the start */
  if (tk && zo_tokenizer_bos_id(tk) >= 0) ctx[0] = zo_tokenizer_bos_id(tk);
  else if (tk && zo_tokenizer_eos_id(tk) >= 0) ctx[0] = zo_tokenizer_eos_id(tk);
  fprintf(out, "sample (temperature 0.8, top-k 40, seed %llu):\n", (unsigned long long)cfg->engine.seed);
  const int err = zo_sample_generate_text(t->m, zo_sched_stream(t->sched), ctx, 1, n, 0.8, 40, cfg->engine.seed, tk,
                                          false, out);
  zo_tokenizer_free(tk);
  if (out != stdout) fclose(out);
  free(ctx);
  return err;
}

/* After the last step: the peaks and the memory report, what the caller
 * asked for (stats, final parameters), the sample. */
static int trainer_finish(struct trainer *t) {
  const struct zo_train_opts *opts = t->opts;
  struct zo_sched_stats s1;
  struct zo_sched_mem mem;
  if (t->tty) say(t, "\n");
  int err = zo_sched_synchronize(t->sched);
  if (err) return err;
  zo_sched_stats(t->sched, &s1);
  if (t->lead) print_peaks(&s1, stdout);
  if ((err = zo_sched_memory(t->sched, &mem))) return err;
  /* The summary line is print_peaks'; the report per category on request. */
  if (t->lead && (opts->verbose || opts->memory_report)) zo_plan_report_print(&t->plan, &mem, stdout);
  if (opts->stats) *opts->stats = s1;
  if (opts->final_params && (err = zo_sched_get_state(t->sched, opts->final_params, NULL, NULL))) return err;
  return sample(t);
}

/* open, load, log, loop, finish. */
static int train_run(struct trainer *t) {
  int err, sig = 0;
  if ((err = trainer_open(t)) || (err = open_tokenizer(t)) || (err = open_data(t)) ||
      (err = record_inputs(t)) || (err = trainer_load(t)) ||
      (err = open_log(t)))
    return err;
  describe(t);
  if ((err = first_eval(t)) || (err = open_tracer(t))) return err;
  const long first = t->st.step;
  if ((err = train_loop(t, &sig))) return err;
  return sig ? stopped(t, sig, first) : trainer_finish(t);
}

int zo_train(const struct zo_config *cfg, const struct zo_train_opts *opts) {
  struct zo_run_signals old_signals;
  zo_run_signals_install(&old_signals);
  if (opts->stop_signal) *opts->stop_signal = 0;
  struct trainer *t = calloc(1, sizeof *t);
  if (!t) {
    zo_run_signals_restore(&old_signals);
    return zo_error(-ENOMEM, "out of host memory starting the run");
  }
  t->cfg = cfg;
  t->opts = opts;
  t->n_ranks = opts->comm ? zo_comm_size(opts->comm) : 1;
  t->comm = t->n_ranks > 1 ? opts->comm : NULL;
  t->rank = t->comm ? zo_comm_rank(t->comm) : 0;
  t->lead = t->rank == 0;
  t->tty = !t->comm && isatty(STDOUT_FILENO);
  t->ckpt_dir = cfg->checkpoint.dir && cfg->checkpoint.dir[0];
  t->guard = (struct zo_run_guard){.lead = t->lead, .lock = {.fd = -1}, .nvme_fd = -1};
  const int err = train_run(t);
  trainer_free(t);
  free(t);
  zo_run_signals_restore(&old_signals);
  return err;
}
