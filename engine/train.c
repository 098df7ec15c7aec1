/* The training loop. One step: gradient_accumulation_steps
 * micro-batches (forward, backward with dloss = 1/(B*T*K), so the gradient is
 * the mean), the global L2 norm, clipping, and AdamW tensor by tensor with
 * decay only on 2-D tensors; the scheduler (engine/sched/) places and orders
 * all of it as the config's zero_optimization section says, after the
 * planner (engine/plan.c) has checked that every tier fits. The reported loss
 * is the mean of the micro-batch losses. AdamW or AdamW8bit (8-bit m, v on
 * any optimizer tier; the CPU backend only, like the rest of training).
 * fp32, or bf16 / fp16 mixed precision (fp32 master weights); fp16 scales the
 * loss (zo/loss_scale.h), and a step with an overflowed gradient is skipped:
 * it counts as a step (data consumed, logged with "skipped": true) but not
 * as an AdamW step or LR-schedule step, as in DeepSpeed. Parameters on NVMe
 * are refused with -ENOTSUP. Activation checkpointing and the chunked LM
 * head live in the model and the scheduler. Every run ends with the memory report
 * (planned, peak and current bytes per tier and category, measured in the
 * allocators); --memory-report prints the plan before anything is allocated.
 * Data parallel (zo_train_opts.comm over several ranks): each rank trains its
 * rows of the global micro-batch; at ZeRO stage 0 every rank holds the whole
 * state and the scheduler sums the gradients, at stage >= 1 each rank owns
 * its shard of the optimizer state (zo_placement_sharded); rank 0 alone
 * prints and logs (see zo/train.h). Evaluation and sampling are
 * engine/sample.c's.
 * A run owns its checkpoint.dir and its NVMe directory, checks its limits
 * before step 1 and stops on SIGINT / SIGTERM after the step, saving
 * (engine/run_guard.c); the loop returns -EINTR then. */
#include "zo/train.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "zo/adamw.h"
#include "zo/autoplan.h"
#include "zo/checkpoint.h"
#include "zo/data.h"
#include "zo/fsutil.h"
#include "zo/hf.h"
#include "zo/model.h"
#include "zo/loss_scale.h"
#include "zo/plan.h"
#include "zo/run_tokenizer.h"
#include "zo/sample.h"
#include "zo/tokenizer.h"
#include "zo/tensorboard.h"
#include "zo/trace_file.h"
#include "run_guard.h"
#include "zo/sched.h"

/* The backend the engine runs on: engine.device, "auto" taking CUDA when a
 * GPU answers (zo_backend_init prints one line when it falls back to the
 * CPU). Returns NULL with zo_last_error() set. */
static zo_backend_t engine_backend(const struct zo_config *cfg) {
  return zo_backend_init(zo_device_name(cfg->engine.device), cfg->engine.threads);
}

static int check_threads(const struct zo_config *cfg);

/* engine.threads and OMP_NUM_THREADS beyond 4x the hardware threads are
 * refused: libgomp crashes on 100000, and no such count helps. */
int zo_train_check_threads(const struct zo_config *cfg) { return check_threads(cfg); }

static int check_threads(const struct zo_config *cfg) {
  const long hw = sysconf(_SC_NPROCESSORS_ONLN) > 0 ? sysconf(_SC_NPROCESSORS_ONLN) : 1, most = 4 * hw;
  if (cfg->engine.threads > most)
    return zo_error(-EINVAL, "engine.threads = %d: more than 4x the %ld hardware threads here; use 0 (one per "
                             "core) or at most %ld", cfg->engine.threads, hw, most);
  const char *env = getenv("OMP_NUM_THREADS");
  if (env && env[0]) {
    char *end;
    errno = 0;
    const long n = strtol(env, &end, 10); /* "8" or the first of "8,4" */
    if (errno || end == env || (*end && *end != ',') || n < 1 || n > most)
      return zo_error(-EINVAL, "OMP_NUM_THREADS = %s: need a thread count from 1 to %ld (4x the %ld hardware "
                               "threads here); unset it to use one thread per core", env, most, hw);
  }
  return 0;
}

zo_backend_t zo_train_backend(const struct zo_config *cfg, zo_comm_t comm) {
  if (check_threads(cfg)) return NULL;
  if (cfg->engine.threads > 0 || !comm || zo_comm_local_size(comm) <= 1 || getenv("OMP_NUM_THREADS"))
    return engine_backend(cfg);
  const long per = sysconf(_SC_NPROCESSORS_ONLN) / zo_comm_local_size(comm);
  return zo_backend_init(zo_device_name(cfg->engine.device), per >= 1 ? (int)per : 1);
}


/* The model shapes: from model.init_from's file when given (n_head from the config). */
static int model_config(const struct zo_config *cfg, struct zo_model_config *mc) {
  *mc = cfg->model.spec;
  const bool init = cfg->model.init_from && cfg->model.init_from[0];
  if (init) {
    int err = zo_model_config_from_pretrained(cfg->model.init_from, cfg->model.spec.n_head, mc);
    if (err) return zo_error(err, "model.init_from: %s", zo_last_error());
  }
  if (cfg->model.hf_dropout && !init)
    return zo_error(-EINVAL, "model.hf_dropout = true takes the dropout rates of model.init_from's config.json, "
                             "and model.init_from is not set: set it, or set model.dropout");
  if (!cfg->model.hf_dropout) mc->embd_pdrop = mc->attn_pdrop = mc->resid_pdrop = (float)cfg->model.dropout;
  if (cfg->data.seq_len > mc->max_seq_len)
    return zo_error(-EINVAL, "data.seq_len = %d exceeds the model's max_seq_len = %d", cfg->data.seq_len,
                    mc->max_seq_len);
  return zo_model_config_check(mc);
}

int zo_train_model_config(const struct zo_config *cfg, struct zo_model_config *mc) {
  return model_config(cfg, mc);
}

/* Mean validation loss over n micro-batches of d from position 0, forward
 * only, through the scheduler (parameters wherever they live). */
static int sched_eval_loss(struct zo_sched *s, struct zo_data *d, int n, double *loss) {
  double sum = 0.0;
  zo_data_seek(d, 0);
  for (int i = 0; i < n; i++) {
    int32_t *in, *tg;
    double l;
    zo_sched_batch(s, &in, &tg);
    int err = zo_data_next(d, in, tg);
    if (!err) err = zo_sched_eval(s, &l);
    if (err) return err;
    sum += l;
  }
  *loss = sum / n;
  return 0;
}

struct trainer {
  const struct zo_config *cfg;
  zo_comm_t comm;                  /* NULL: one process */
  int rank, n_ranks;
  bool lead;                       /* rank 0: prints, logs metrics, saves checkpoints */
  bool tty;                        /* progress bar: stdout is a terminal, one process (mpirun
                                    * gives ranks a terminal even when its output is a file) */
  zo_backend_t be;
  struct zo_sched *sched;
  struct zo_data *train, *val;
  struct zo_state_io io;           /* the scheduler's state I/O: loads, saves, init */
  FILE *metrics;
  zo_tb_t tb;                      /* log.tensorboard_dir's event file, NULL: none */
  struct zo_run_guard guard;       /* checkpoint.dir's lock, this run's NVMe directory */
  char tokenizer[PATH_MAX];        /* the run's tokenizer.json (zo/run_tokenizer.h), "" none */
};

static void trainer_free(struct trainer *t) {
  zo_checkpoint_carry_tokenizer(NULL);
  if (t->metrics) fclose(t->metrics);
  zo_tb_free(t->tb);
  zo_data_close(t->train);
  zo_data_close(t->val);
  zo_sched_free(t->sched); /* removes the store's directory, then ours goes */
  zo_run_nvme_dir_close(&t->guard);
  zo_dir_unlock(&t->guard.lock);
}

/* Wall-clock time in Unix seconds, for the metrics lines ("time"). */
static double unix_time(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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

static void progress_bar(long step, long total, double elapsed, long first) {
  int width = 30, filled = (int)(width * step / total);
  double eta = step > first ? elapsed / (double)(step - first) * (double)(total - step) : 0.0;
  printf("\r[%.*s%*s] %3d%% ETA %d:%02d ", filled, "==============================", width - filled, "",
         (int)(100 * step / total), (int)eta / 60, (int)eta % 60);
  fflush(stdout);
}

/* A sharded optimizer's checkpoint, collective: rank 0 starts it and writes
 * the model (the other ranks serve their shards of the parameters
 * meanwhile), every rank writes its shard's optimizer file into the same
 * directory, and rank 0 commits once every rank reports its file written
 * (any rank's failure fails the save on every rank; the previous
 * checkpoints stay). */
static int save_sharded(struct trainer *t, const struct zo_config *cfg, const struct zo_placement *pl,
                        const struct zo_train_state *st, char *out, size_t out_size) {
  struct zo_model *m = zo_sched_model(t->sched);
  struct zo_checkpoint_txn x;
  memset(&x, 0, sizeof x);
  int err = t->lead ? zo_checkpoint_begin(cfg->checkpoint.dir, st->step, &x) : 0;
  int32_t ok = err == 0;
  int e = zo_comm_broadcast(t->comm, &ok, sizeof ok, 0);
  if (!e) e = zo_comm_broadcast(t->comm, &x, sizeof x, 0);
  if (e) return e;
  if (!ok) return t->lead ? err : zo_error(-EIO, "rank 0 could not start checkpoint %ld", st->step);
  if (t->lead) {
    err = zo_checkpoint_write_model(&x, m, &t->io);
    const int end = zo_sched_state_serve_end(t->sched);
    if (!err) err = end;
  } else {
    err = zo_sched_state_serve(t->sched);
  }
  const struct zo_shard sh = zo_placement_shard(pl, &m->table);
  struct {
    int32_t ok;
    uint32_t crc;
  } mine = {0, 0}, *all = calloc(t->n_ranks > 0 ? (size_t)t->n_ranks : 1, sizeof *all);
  if (!all) return zo_error(-ENOMEM, "out of host memory saving a checkpoint");
  if (!err)
    err = zo_checkpoint_write_optimizer(&x, m, &pl->opt, &t->io, t->rank, t->n_ranks, sh.t_lo, sh.t_hi, &mine.crc);
  const int done = zo_sched_state_done(t->sched);
  if (!err) err = done;
  mine.ok = err == 0;
  if ((e = zo_comm_allgather(t->comm, &mine, sizeof mine, all))) {
    free(all);
    return e;
  }
  int failed = -1;
  for (int r = 0; r < t->n_ranks; r++)
    if (!all[r].ok && failed < 0) failed = r;
  if (t->lead) {
    if (failed < 0) {
      uint32_t *crcs = calloc(t->n_ranks > 0 ? (size_t)t->n_ranks : 1, sizeof *crcs);
      if (!crcs) err = zo_error(-ENOMEM, "out of host memory saving a checkpoint");
      for (int r = 0; crcs && r < t->n_ranks; r++) crcs[r] = all[r].crc;
      if (crcs) err = zo_checkpoint_commit(&x, st, t->n_ranks, crcs, cfg->checkpoint.keep, out, out_size);
      free(crcs);
    }
    if (failed >= 0 || err) zo_checkpoint_abort(&x);
  }
  free(all);
  /* Every rank learns whether rank 0 committed. */
  ok = failed < 0 && err == 0;
  if ((e = zo_comm_broadcast(t->comm, &ok, sizeof ok, 0))) return e;
  if (err) return err;
  if (failed >= 0) return zo_error(-EIO, "checkpoint %ld: rank %d could not write its shard", st->step, failed);
  return ok ? 0 : zo_error(-EIO, "checkpoint %ld: rank 0 could not commit it", st->step);
}

static void print_peaks(const struct zo_sched_stats *st, FILE *out) {
  char a[32], b[32], c[32], d[32], e[32];
  fprintf(out, "memory: device arena %s planned, %s peak (%zu bytes) | host pool %s planned, %s peak "
               "(%zu bytes, %s) | nvme %s\n",
          zo_format_bytes(st->device_planned, a), zo_format_bytes(st->device_peak, b), st->device_peak,
          zo_format_bytes(st->host_planned, c), zo_format_bytes(st->host_peak, d), st->host_peak,
          st->pinned ? "pinned" : "pageable", zo_format_bytes(st->nvme_planned, e));
}

/* "1.20 MiB in 0.31 s, 4.1 MB/s" into buf, for the progress lines. */
static const char *rate_str(size_t nbytes, double s, char buf[96]) {
  char b[32];
  snprintf(buf, 96, "%s in %.2f s, %.1f MB/s", zo_format_bytes(nbytes, b), s,
           (double)nbytes / 1e6 / (s > 0 ? s : 1e-9));
  return buf;
}

/* Bytes of the files directly in dir (a checkpoint's). */
static size_t dir_bytes(const char *dir) {
  size_t n = 0;
  DIR *d = opendir(dir);
  for (const struct dirent *e; d && (e = readdir(d));) {
    char p[PATH_MAX];
    struct stat sb;
    if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < (int)sizeof p && stat(p, &sb) == 0 &&
        S_ISREG(sb.st_mode))
      n += (size_t)sb.st_size;
  }
  if (d) closedir(d);
  return n;
}

/* Saves checkpoint-<st->step> (every rank calls it; rank 0 writes unless the
 * optimizer is sharded) and prints where, its bytes and the write rate. */
static int save_checkpoint(struct trainer *t, const struct zo_config *cfg, const struct zo_placement *pl,
                           const struct zo_train_state *st) {
  char path[PATH_MAX], rate[96];
  int err = 0;
  const double t0 = zo_time_s();
  /* checkpoint.save_optimizer = false: the run's final checkpoint holds the weights only. */
  const bool weights_only = !cfg->checkpoint.save_optimizer && st->step >= cfg->steps;
  if (zo_placement_sharded(pl)) {
    if ((err = save_sharded(t, cfg, pl, st, path, sizeof path))) return err;
    if (t->lead)
      say(t, "%ssaved %s (%d optimizer shards%s)\n  wrote %s\n", t->tty ? "\r" : "", path, t->n_ranks,
          weights_only ? "; checkpoint.save_optimizer = false is not applied to a sharded optimizer" : "",
          rate_str(dir_bytes(path), zo_time_s() - t0, rate));
  } else if (t->lead) {
    /* Rank 0 writes the checkpoint: every rank holds the same state. */
    const struct zo_model *m = zo_sched_model(t->sched);
    err = weights_only ? zo_checkpoint_save_weights_io(cfg->checkpoint.dir, m, &t->io, st, cfg->checkpoint.keep,
                                                       path, sizeof path)
                       : zo_checkpoint_save_io(cfg->checkpoint.dir, m, &pl->opt, &t->io, st, cfg->checkpoint.keep,
                                               path, sizeof path);
    const int done = zo_sched_state_done(t->sched);
    if (err || (err = done)) return err;
    say(t, "%ssaved %s%s\n  wrote %s\n", t->tty ? "\r" : "", path,
        weights_only ? " (weights only: checkpoint.save_optimizer = false)" : "",
        rate_str(dir_bytes(path), zo_time_s() - t0, rate));
  }
  /* The others go on once it is on disk, so that a job stopped after this
   * line resumes from it. */
  if (t->comm && (err = zo_comm_barrier(t->comm))) return err;
  return 0;
}

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

static int train_run(const struct zo_config *cfg, const struct zo_train_opts *opts);

int zo_train(const struct zo_config *cfg, const struct zo_train_opts *opts) {
  struct zo_run_signals old_signals;
  zo_run_signals_install(&old_signals);
  if (opts->stop_signal) *opts->stop_signal = 0;
  int err = train_run(cfg, opts);
  zo_run_signals_restore(&old_signals);
  return err;
}

static int train_run(const struct zo_config *cfg, const struct zo_train_opts *opts) {
  struct trainer t = {.cfg = cfg, .comm = opts->comm, .n_ranks = opts->comm ? zo_comm_size(opts->comm) : 1,
                      .guard = {.lock = {.fd = -1}, .nvme_fd = -1}};
  if (t.n_ranks == 1) t.comm = NULL;
  t.rank = t.comm ? zo_comm_rank(t.comm) : 0;
  t.lead = t.rank == 0;
  t.tty = !t.comm && isatty(STDOUT_FILENO);
  t.guard.lead = t.lead;
  struct zo_model_config mc;
  struct zo_config epochs_cfg; /* cfg with the steps of data.epochs (shares cfg's strings) */
  int err;
  if ((err = check_threads(cfg)) || (err = model_config(cfg, &mc))) return err;
  if (!cfg->data.train || !cfg->data.train[0])
    return zo_error(-EINVAL, "data.train: no training data given (a token file path)");
  /* B rows per rank; a step is K global micro-batches of N*B rows. */
  const int B = cfg->micro_batch, T = cfg->data.seq_len, K = cfg->grad_accum, N = t.n_ranks;
  const size_t BT = (size_t)B * (size_t)T, GBT = BT * (size_t)N;
  if (cfg->train_batch_size && cfg->train_batch_size != (long)B * K * N)
    return zo_error(-EINVAL, "train_batch_size = %ld but this run has train_micro_batch_size_per_gpu %d x "
                             "gradient_accumulation_steps %d x %d rank%s = %ld: leave gradient_accumulation_steps out "
                             "to derive it, or set train_batch_size to %ld",
                    cfg->train_batch_size, B, K, N, N == 1 ? "" : "s", (long)B * K * N, (long)B * K * N);

  t.be = opts->backend ? opts->backend : zo_train_backend(cfg, t.comm);
  if (!t.be) return -ENODEV;
  /* Plan every tier before allocating anything; refuse what cannot fit. */
  struct zo_plan plan;
  if ((err = zo_plan_build_rank(cfg, &mc, t.be, t.rank, N, &plan))) goto out;
  if (opts->memory_report && t.lead) zo_plan_print(&plan, stdout);
  if ((err = zo_plan_check(cfg, &plan)) || (err = zo_run_check_address_space(&plan, t.be))) goto out;
  if ((err = zo_host_check(cfg, &plan, !strcmp(t.be->name, "cpu")))) goto out;
  const bool ckpt_dir = cfg->checkpoint.dir && cfg->checkpoint.dir[0];
  if (t.lead && ckpt_dir && (err = zo_run_dir_open(&t.guard, cfg, opts))) goto out;
  if (t.comm) {
    /* Rank 0's verdict on the run directory, so that no rank starts alone. */
    int32_t ok = err == 0;
    if ((err = zo_comm_broadcast(t.comm, &ok, sizeof ok, 0))) goto out;
    if (!ok) {
      err = zo_error(-EIO, "rank 0 refused checkpoint.dir %s", cfg->checkpoint.dir);
      goto out;
    }
  }
  if (plan.placement.optimizer == ZO_OFFLOAD_NVME) {
    if ((err = zo_run_nvme_dir_open(&t.guard, plan.placement.nvme_path))) goto out;
    plan.placement.nvme_path = t.guard.nvme_dir;
  }
  /* fp16 skips an overflowed step anyway; fp32 and bf16 when asked to. */
  plan.placement.skip_nonfinite = cfg->engine.on_nonfinite == ZO_NONFINITE_SKIP;
  const struct zo_sched_config sc = {.model = mc, .B = B, .T = T, .placement = plan.placement,
                                     .backend = t.be, .host_budget = cfg->engine.host_memory_budget,
                                     .comm = t.comm};
  if (!(t.sched = zo_sched_init(&sc))) {
    err = zo_run_quote_limit(-ENOMEM);
    goto out;
  }
  struct zo_model *m = zo_sched_model(t.sched);
  const size_t n = m->table.numel;
  if (t.lead && ckpt_dir && (err = zo_run_dir_check_space(cfg, m, &plan.placement.opt))) goto out;

  /* The run's tokenizer goes into every checkpoint; its ids must fit the model. */
  if ((err = zo_run_tokenizer(cfg, t.tokenizer, sizeof t.tokenizer))) goto out;
  if (t.tokenizer[0]) {
    struct zo_tokenizer *tk;
    size_t tv = 0;
    if ((err = zo_tokenizer_load(t.tokenizer, &tk))) {
      /* model.init_from's tokenizer only came along: one this build cannot
       * read still travels with the checkpoints (transformers may read it). */
      if (cfg->model.tokenizer && cfg->model.tokenizer[0]) goto out;
      if (t.lead)
        say(&t, "note: tokenizer %s is not usable here (%s): copied into checkpoints, but the sample prints ids\n",
            t.tokenizer, zo_last_error());
      err = 0;
    } else {
      tv = zo_tokenizer_vocab_size(tk);
      zo_tokenizer_free(tk);
    }
    if (tv > (size_t)mc.vocab_size) {
      err = zo_error(-EINVAL, "tokenizer %s has %zu ids but the model's vocab_size is %d: set model.vocab_size "
                              ">= %zu, or give the model's own tokenizer (model.tokenizer)",
                     t.tokenizer, tv, mc.vocab_size, tv);
      goto out;
    }
    zo_checkpoint_carry_tokenizer(t.tokenizer);
    if (t.lead && tv) say(&t, "tokenizer: %s (%zu ids; copied into every checkpoint)\n", t.tokenizer, tv);
  }
  t.train = zo_data_open_rank(cfg->data.train, (enum zo_data_format)cfg->data.format, mc.vocab_size, B, T,
                              cfg->data.shuffle, cfg->engine.seed, t.rank, N);
  if (!t.train) {
    err = zo_error(-EIO, "data.train: %s", zo_last_error());
    goto out;
  }
  if (cfg->data.epochs > 0) {
    /* data.epochs: the steps, and the schedule that follows them, come from the file. */
    epochs_cfg = *cfg;
    const long steps = zo_config_steps_for_epochs(cfg, zo_data_n_tokens(t.train), N);
    if ((err = zo_config_set_steps(&epochs_cfg, steps))) goto out;
    cfg = t.cfg = &epochs_cfg;
    say(&t, "data.epochs %g: %ld steps over %s's %zu tokens\n", cfg->data.epochs, steps, cfg->data.train,
        zo_data_n_tokens(t.train));
  }
  if (cfg->data.val && cfg->data.val[0]) {
    t.val = zo_data_open_rank(cfg->data.val, (enum zo_data_format)cfg->data.format, mc.vocab_size, B, T,
                              false, cfg->engine.seed, t.rank, N);
    if (!t.val) {
      err = zo_error(-EIO, "data.val: %s", zo_last_error());
      goto out;
    }
  }

  /* Parameters: resume > init_from > seeded init, staged through host copies. */
  struct zo_train_state st = {.seed = cfg->engine.seed};
  zo_loss_scaler_init(&st.scaler, cfg);
  char resume_path[PATH_MAX] = "";
  zo_sched_state_io(t.sched, &t.io);
  const double t_load = zo_time_s();
  if (opts->resume) {
    if (strcmp(opts->resume, "auto") == 0) {
      if (!cfg->checkpoint.dir || !cfg->checkpoint.dir[0]) {
        err = zo_error(-EINVAL, "--resume auto needs checkpoint.dir in the config");
        goto out;
      }
      /* Rank 0's latest, so that every rank loads the same one. */
      if (t.lead && (err = zo_checkpoint_latest(cfg->checkpoint.dir, resume_path, sizeof resume_path))) goto out;
      if (t.comm && (err = zo_comm_broadcast(t.comm, resume_path, sizeof resume_path, 0))) goto out;
    } else {
      snprintf(resume_path, sizeof resume_path, "%s", opts->resume);
    }
    if ((err = zo_checkpoint_load_io(resume_path, m, &plan.placement.opt, &t.io, true, &st))) goto out;
    if (st.seed != cfg->engine.seed) {
      err = zo_error(-EINVAL, "%s was saved by a run with engine.seed = %llu, the config has %llu: the data order "
                              "follows the seed; resume with --set engine.seed=%llu", resume_path,
                     (unsigned long long)st.seed, (unsigned long long)cfg->engine.seed,
                     (unsigned long long)st.seed);
      goto out;
    }
    zo_data_seek(t.train, st.data_position);
    say(&t, "resumed from %s at step %ld\n", resume_path, st.step);
    if (st.step >= cfg->steps)
      say(&t, "nothing to train: the checkpoint is at step %ld and steps = %ld; raise steps (--set steps=N, N > "
              "%ld) to train further\n", st.step, cfg->steps, st.step);
    if (st.batch_rows && st.batch_rows != (long)B * N)
      say(&t, "warning: the checkpoint was saved with global micro-batches of %ld rows (%d rank%s), this run has "
              "%d (%d rank%s x train_micro_batch_size_per_gpu %d): its data position counts micro-batches, so "
              "the data order differs from the saved run's\n",
          st.batch_rows, st.world_size, st.world_size == 1 ? "" : "s", B * N, N, N == 1 ? "" : "s", B);
  } else {
    if (cfg->model.init_from && cfg->model.init_from[0])
      err = zo_model_load_safetensors_io(cfg->model.init_from, m, &t.io);
    else
      err = zo_sched_state_init(t.sched, cfg->engine.seed);
    if (!err) err = zo_sched_state_fresh(t.sched, ZO_STATE_M);
    if (!err) err = zo_sched_state_fresh(t.sched, ZO_STATE_V);
  }
  if (!err) err = zo_sched_state_done(t.sched);
  if (err) goto out;
  if (opts->resume || (cfg->model.init_from && cfg->model.init_from[0])) {
    char rate[96];
    const size_t lb = m->table.numel * sizeof(float) +
                      (opts->resume ? 2 * zo_optim_state_nbytes(&plan.placement.opt, &m->table) : 0);
    say(&t, "loaded %s: %s\n", opts->resume ? resume_path : cfg->model.init_from,
        rate_str(lb, zo_time_s() - t_load, rate));
  }

  st.batch_rows = (long)B * N;
  st.world_size = N;
  if (t.lead && cfg->log.metrics_path && cfg->log.metrics_path[0]) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", cfg->log.metrics_path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
      *slash = '\0';
      if ((err = zo_mkdir_p(dir, 0755))) goto out;
    }
    t.metrics = fopen(cfg->log.metrics_path, opts->resume ? "a" : "w");
    if (!t.metrics) {
      err = zo_error(-errno, "log.metrics_path: %s: %s", cfg->log.metrics_path, strerror(errno));
      goto out;
    }
  }
  if (t.lead && cfg->log.tensorboard_dir && cfg->log.tensorboard_dir[0]) {
    if (!(t.tb = zo_tb_init(cfg->log.tensorboard_dir, "log.tensorboard_dir"))) {
      err = -EINVAL;
      goto out;
    }
    say(&t, "tensorboard: %s\n", zo_tb_path(t.tb));
  }

  const double flops_per_token = zo_model_flops_per_token(&mc, T);
  char where[400];
  char desc[200];
  const size_t padding = (size_t)(mc.padded_vocab_size - mc.vocab_size) * (size_t)mc.n_embd *
                         (mc.tie_embeddings ? 1u : 2u);
  say(&t, "model: %s, %.2fM parameters\n", zo_model_describe(&mc, desc, sizeof desc),
      (double)(n - padding) / 1e6);
  say(&t, "train: %s (%zu tokens), micro-batch %d x %d, %d accumulation step%s, %ld steps, %s backend\n",
      cfg->data.train, zo_data_n_tokens(t.train), B, T, K, K == 1 ? "" : "s", cfg->steps, t.be->name);
  if (t.comm)
    say(&t, "data parallel: %d ranks (%s), global micro-batch %d x %d (rank r reads rows [%d r, %d r + %d)), "
            "%s\n",
        N, zo_comm_name(t.comm), B * N, T, B, B, B,
        zo_placement_sharded(&plan.placement) ? "optimizer state sharded (ZeRO stage >= 1)"
                                              : "optimizer state replicated on every rank (ZeRO stage 0)");
  say(&t, "placement: %s\n", zo_placement_describe(&plan.placement, where, sizeof where));
  if (st.scaler.enabled && !st.scaler.dynamic)
    say(&t, "fp16: static loss scale %g (fp16.loss_scale): it never changes; a step that overflows is skipped\n",
        st.scaler.scale);
  if (plan.placement.opt.eightbit) {
    const struct zo_optim_format *of = &plan.placement.opt;
    const size_t n8 = zo_optim_numel_8bit(of, &m->table), sb = zo_optim_state_nbytes(of, &m->table);
    say(&t, "optimizer: AdamW8bit, block %zu, %.1f%% of parameters with 8-bit m, v (tensors >= %zu "
            "elements); m + v %.3f B/param (fp32: 8)\n",
        of->block, 100.0 * (double)n8 / (double)n, of->min_numel, 2.0 * (double)sb / (double)n);
  }
  int n_val = t.val ? cfg->eval.steps > 0 ? cfg->eval.steps : zo_eval_n_batches(t.val, B * N, T) : 0;
  if (!t.val && cfg->eval.every > 0)
    say(&t, "note: eval.every = %ld but there is no data.val: no validation loss during this run\n",
        cfg->eval.every);
  if (t.val && st.step == 0) {
    double vl;
    const double te = zo_time_s();
    if ((err = sched_eval_loss(t.sched, t.val, n_val, &vl))) goto out;
    const double ds = zo_time_s() - te;
    say(&t, "step 0: val loss %.4f\n  evaluated %d batches, %zu tokens in %.2f s, %.0f tok/s\n", vl, n_val,
        (size_t)n_val * GBT, ds, (double)((size_t)n_val * GBT) / (ds > 0 ? ds : 1e-9));
  }

  const struct zo_adamw_hparams hp0 = {.beta1 = (float)cfg->optimizer.betas[0],
                                       .beta2 = (float)cfg->optimizer.betas[1],
                                       .eps = (float)cfg->optimizer.eps,
                                       .weight_decay = (float)cfg->optimizer.weight_decay};
  const long first = st.step;
  const double t_start = zo_time_s();
  double acc_compute = 0, acc_io = 0, acc_loss = 0, acc_wall = 0;
  struct zo_sched_stats s0, s1;
  zo_sched_stats(t.sched, &s0);
  long acc_n = 0;
  /* engine.trace: rank 0's timeline of the configured steps */
  struct zo_tracer tracer;
  zo_tracer_init(&tracer, t.lead && t.be->stream_set_name ? cfg->engine.trace.path : NULL,
                 cfg->engine.trace.first_step, cfg->engine.trace.steps);
  if (tracer.path && (err = zo_trace_path_check(tracer.path))) goto out;
  if (t.lead && cfg->engine.trace.path[0] && !t.be->stream_set_name)
    say(&t, "trace: the %s backend records no timeline (only the CPU backend does); engine.trace.path ignored\n",
        t.be->name);
  const bool mixed16 = plan.placement.dtype == ZO_F16;
  int sig = 0;
  if ((err = stop_requested(&t, &sig))) goto out;
  for (long step = st.step + 1; step <= cfg->steps && !sig; step++) {
    if (zo_tracer_step(&tracer, step)) zo_sched_trace_counters(t.sched);
    double t0 = zo_time_s(), io = 0.0, loss = 0.0, norm = 0.0;
    struct zo_sched_stats sb;
    zo_sched_stats(t.sched, &sb);
    const double comm0 = sb.comm_s;
    const double scale = st.scaler.scale;
    bool skipped = false;
    zo_sched_set_loss_scale(t.sched, scale);
    if (zo_data_has_mask(t.train)) {
      /* With a loss mask the step's loss is the mean over its trained
       * targets (every micro-batch, every rank), known before the first. */
      size_t n_targets;
      if ((err = zo_data_count_targets(t.train, zo_data_position(t.train), K, &n_targets))) goto out;
      zo_sched_set_step_targets(t.sched, n_targets);
    }
    for (int k = 0; k < K; k++) {
      int32_t *in, *tg;
      zo_sched_batch(t.sched, &in, &tg);
      double ti = zo_time_s();
      if ((err = zo_data_next(t.train, in, tg))) goto out;
      io += zo_time_s() - ti;
      /* Dropout masks: a function of the seed and this micro-batch's place in the run. */
      zo_model_set_dropout(m, cfg->engine.seed, ((uint64_t)(step - 1) * (uint64_t)K + (uint64_t)k) * (uint64_t)N +
                                                    (uint64_t)t.rank);
      zo_sched_micro_batch(t.sched, k);
    }
    /* AdamW's step count and the schedule advance with applied steps only. */
    const long opt_step = st.applied_steps + 1;
    struct zo_adamw_hparams hp = hp0;
    hp.lr = (float)zo_lr_at(&cfg->lr_schedule, opt_step);
    if ((err = zo_sched_step_end(t.sched, opt_step, &hp, cfg->gradient_clipping, &loss))) goto out;
    double t1 = zo_time_s();
    if ((err = zo_sched_norm(t.sched, &norm, &skipped))) goto out;
    if (zo_tracer_due(&tracer, step, cfg->steps) &&
        ((err = zo_sched_synchronize(t.sched)) || (err = zo_tracer_end(&tracer, stdout))))
      goto out;
    double t2 = zo_time_s();
    if (!mixed16 && !skipped && (!isfinite(loss) || !isfinite(norm))) {
      /* Nothing of this step reaches a checkpoint: the run ends before the save. */
      char what[64];
      const double v = isfinite(loss) ? norm : loss;
      snprintf(what, sizeof what, "the %s is %s", isfinite(loss) ? "gradient norm" : "loss",
               isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf");
      err = nonfinite_stop(cfg, step, what);
      goto out;
    }
    if (skipped) {
      st.skipped_steps++;
      if (mixed16)
        say(&t, "%sstep %ld: gradient overflow at loss scale %g: update skipped\n", t.tty ? "\r" : "", step, scale);
      else
        say(&t, "%sstep %ld: the gradient norm is %s: update skipped (engine.on_nonfinite = \"skip\")\n",
            t.tty ? "\r" : "", step, isnan(norm) ? "NaN" : "inf");
    } else {
      st.applied_steps++;
    }
    if ((err = zo_loss_scaler_update(&st.scaler, skipped))) goto out;
    /* Tokens of every rank. */
    double tok_s = (double)(GBT * (size_t)K) / (t2 - t0);
    acc_compute += t1 - t0 - io;
    acc_io += io;
    acc_wall += t2 - t0;
    acc_loss += loss;
    acc_n++;
    const double now = unix_time();
    double comm_ms = 0.0;
    if (t.comm) {
      struct zo_sched_stats se;
      zo_sched_stats(t.sched, &se);
      comm_ms = 1e3 * (se.comm_s - comm0);
    }
    if (t.tb) {
      struct zo_tb_scalar tbs[] = {
          {"train/loss", loss},       {"train/lr", hp.lr},
          {"train/grad_norm", norm},  {"train/loss_scale", scale},
          {"train/skipped", skipped}, {"train/tokens_per_s", tok_s},
          {"train/ms", 1e3 * (t2 - t0)}, {"train/comm_ms", comm_ms},
      };
      const size_t n_tb = sizeof tbs / sizeof tbs[0] - (t.comm ? 0 : 1); /* comm_ms over ranks only */
      if ((err = zo_tb_write(t.tb, step, now, tbs, n_tb))) goto out;
    }
    if (t.metrics) {
      /* JSON has no inf or NaN: an overflowed step's norm is null. */
      char norm_s[32] = "null", dp_s[96] = "";
      if (isfinite(norm)) snprintf(norm_s, sizeof norm_s, "%.17g", norm);
      if (t.comm) snprintf(dp_s, sizeof dp_s, ", \"ranks\": %d, \"comm_ms\": %.3f", N, comm_ms);
      fprintf(t.metrics,
              "{\"step\": %ld, \"loss\": %.17g, \"lr\": %.9g, \"grad_norm\": %s, \"loss_scale\": %.17g, "
              "\"skipped\": %s, \"tokens_per_s\": %.1f, \"ms\": %.2f%s, \"time\": %.3f}\n",
              step, loss, hp.lr, norm_s, scale, skipped ? "true" : "false", tok_s, 1e3 * (t2 - t0), dp_s, now);
      fflush(t.metrics);
    }
    st.step = step;
    st.data_position = zo_data_position(t.train);
    bool last = step == cfg->steps;
    if (step % cfg->log.every == 0 || last) {
      double dt = acc_wall / acc_n;
      char peak[32];
      zo_sched_stats(t.sched, &s1);
      if (t.tty) say(&t, "\r");
      char scale_s[48] = "", ranks_s[48] = "", comm_s[32] = "";
      if (st.scaler.enabled) snprintf(scale_s, sizeof scale_s, " | scale %g%s, %ld skipped", scale,
                                      st.scaler.dynamic ? "" : " static", st.skipped_steps);
      if (t.comm) {
        snprintf(ranks_s, sizeof ranks_s, " (%d ranks, %.0f per rank)", N, (double)(BT * (size_t)K) / dt);
        snprintf(comm_s, sizeof comm_s, ", comm %.1f", 1e3 * (s1.comm_s - s0.comm_s) / acc_n);
      }
      say(&t, "step %ld/%ld | loss %.4f | lr %.2e | norm %.3f%s | %.0f tok/s%s | %.3f TFLOP/s | ms: "
              "compute %.0f, copies %.1f, optimizer %.0f, io wait %.1f, nvme wait %.1f%s | device peak %s\n",
          step, cfg->steps, acc_loss / acc_n, hp.lr, norm, scale_s, (double)(GBT * (size_t)K) / dt, ranks_s,
          flops_per_token * (double)(GBT * (size_t)K) / dt / 1e12, 1e3 * acc_compute / acc_n,
          1e3 * (s1.accumulate_s - s0.accumulate_s) / acc_n, 1e3 * (s1.optimizer_s - s0.optimizer_s) / acc_n,
          1e3 * acc_io / acc_n, 1e3 * (s1.nvme_wait_s - s0.nvme_wait_s) / acc_n, comm_s,
          zo_format_bytes(s1.device_peak, peak));
      s0 = s1;
      acc_compute = acc_io = acc_loss = acc_wall = 0;
      acc_n = 0;
    }
    if (t.tty) progress_bar(step, cfg->steps, zo_time_s() - t_start, first);
    bool save = ckpt_dir && (last || (cfg->checkpoint.every > 0 && step % cfg->checkpoint.every == 0));
    const bool eval_due = t.val && (last || save || (cfg->eval.every > 0 && step % cfg->eval.every == 0));
    if (save || eval_due) {
      if (t.val) {
        double vl;
        if ((err = sched_eval_loss(t.sched, t.val, n_val, &vl))) goto out;
        say(&t, "%sstep %ld: val loss %.4f\n", t.tty ? "\r" : "", step, vl);
        const double now_val = unix_time();
        if (t.metrics) {
          fprintf(t.metrics, "{\"step\": %ld, \"val_loss\": %.17g, \"time\": %.3f}\n", step, vl, now_val);
          fflush(t.metrics);
        }
        if (t.tb && (err = zo_tb_write(t.tb, step, now_val, &(struct zo_tb_scalar){"val/loss", vl}, 1))) goto out;
      }
      if (save && (err = save_checkpoint(&t, cfg, &plan.placement, &st))) {
        /* Weights that overflowed while the loss and norm were still finite. */
        if (err == -ERANGE) err = nonfinite_stop(cfg, step, zo_last_error());
        goto out;
      }
    }
    if ((err = stop_requested(&t, &sig))) goto out;
    if (sig && !save && ckpt_dir && (err = save_checkpoint(&t, cfg, &plan.placement, &st))) goto out;
  }
  if (sig) {
    if (t.tty) say(&t, "\n");
    if (opts->stop_signal) *opts->stop_signal = sig;
    err = st.step == first ? zo_error(-EINTR, "stopped by %s before step %ld: nothing new to save", zo_run_signal_name(sig),
                                      st.step + 1)
          : ckpt_dir ? zo_error(-EINTR, "stopped by %s after step %ld (saved in %s): continue with --resume auto",
                              zo_run_signal_name(sig), st.step, cfg->checkpoint.dir)
          : zo_error(-EINTR, "stopped by %s after step %ld (no checkpoint.dir: nothing saved)",
                              zo_run_signal_name(sig), st.step);
    goto out;
  }
  if (t.tty) say(&t, "\n");
  if ((err = zo_sched_synchronize(t.sched))) goto out;
  zo_sched_stats(t.sched, &s1);
  if (t.lead) print_peaks(&s1, stdout);
  struct zo_sched_mem mem;
  if ((err = zo_sched_memory(t.sched, &mem))) goto out;
  if (t.lead) zo_plan_report_print(&plan, &mem, stdout);
  if (opts->stats) *opts->stats = s1;
  if (opts->final_params && (err = zo_sched_get_state(t.sched, opts->final_params, NULL, NULL))) goto out;
  /* ZeRO-3 over ranks gathers each block from every rank as the forward
   * loads it: then every rank samples (the same tokens), rank 0 prints. */
  const bool all_sample = t.comm && zo_placement_sharded(&plan.placement) && plan.placement.param_slots;
  if (opts->sample_tokens > 0 && (t.lead || all_sample)) {
    int32_t *ctx = calloc((size_t)opts->sample_tokens + 1, sizeof *ctx);
    FILE *out = t.lead ? stdout : fopen("/dev/null", "w");
    if (!ctx || !out) {
      free(ctx);
      err = zo_error(-ENOMEM, "out of host memory for sampling");
      goto out;
    }
    ctx[0] = mc.vocab_size == 256 ? '\n' : 0;
    /* With the run's tokenizer the sample is text, started at its
     * beginning- (else end-) of-text token and running through end-of-text
     * tokens (printed), so it shows several documents. */
    struct zo_tokenizer *tk = NULL;
    if (t.tokenizer[0] && zo_tokenizer_load(t.tokenizer, &tk)) tk = NULL; /* said at the start */
    if (tk && zo_tokenizer_bos_id(tk) >= 0) ctx[0] = zo_tokenizer_bos_id(tk);
    else if (tk && zo_tokenizer_eos_id(tk) >= 0) ctx[0] = zo_tokenizer_eos_id(tk);
    fprintf(out, "sample (temperature 0.8, top-k 40, seed %llu):\n", (unsigned long long)cfg->engine.seed);
    err = zo_sample_generate_text(m, zo_sched_stream(t.sched), ctx, 1, opts->sample_tokens, 0.8, 40,
                                  cfg->engine.seed, tk, false, out);
    zo_tokenizer_free(tk);
    if (out != stdout) fclose(out);
    free(ctx);
  }
out:
  trainer_free(&t);
  return err;
}

