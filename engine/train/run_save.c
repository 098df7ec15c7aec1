/* A training run's checkpoint saves (see run_save.h): one file written by
 * rank 0 when every rank holds the same state, or a collective save where
 * every rank writes its optimizer shard. */
#include "run_save.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "zo/checkpoint.h"
#include "zo/lora_ckpt.h"

/* A sharded optimizer's checkpoint, collective: rank 0 starts it and writes
 * the model (the other ranks serve their shards of the parameters
 * meanwhile), every rank writes its shard's optimizer file into the same
 * directory, and rank 0 commits once every rank reports its file written
 * (any rank's failure fails the save on every rank; the previous
 * checkpoints stay). */
static int save_sharded(const struct zo_run_saver *t, const struct zo_train_state *st, char *out, size_t out_size) {
  const struct zo_config *cfg = t->cfg;
  const struct zo_placement *pl = t->pl;
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
    err = zo_checkpoint_write_model(&x, m, t->io);
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
    err = zo_checkpoint_write_optimizer(&x, m, &pl->opt, t->io, t->rank, t->n_ranks, sh.t_lo, sh.t_hi, &mine.crc);
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
      if (crcs) {
        const struct zo_checkpoint_opts o = {.keep = cfg->checkpoint.keep, .tokenizer = t->tokenizer,
                                            .settings = t->settings};
        err = zo_checkpoint_commit(&x, st, t->n_ranks, crcs, &o, out, out_size);
      }
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

/* "1.20 MiB in 0.31 s, 4.1 MB/s" into buf, for the progress lines. */
const char *zo_run_rate_str(size_t nbytes, double s, char buf[96]) {
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

/* A LoRA run's checkpoint (one process): the adapters and their m, v. */
static int save_lora(const struct zo_run_saver *t, const struct zo_train_state *st, char *path, size_t size) {
  const struct zo_config *cfg = t->cfg;
  const size_t n = t->lora->numel;
  float *buf = malloc(3 * n * sizeof *buf + 1);
  if (!buf) return zo_error(-ENOMEM, "out of host memory saving the LoRA adapters");
  int err = zo_sched_lora_read(t->sched, buf, buf + n, buf + 2 * n);
  const struct zo_checkpoint_opts o = {.keep = cfg->checkpoint.keep, .tokenizer = t->tokenizer,
                                       .settings = t->settings};
  if (!err)
    err = zo_lora_checkpoint_save(cfg->checkpoint.dir, t->lora, buf, buf + n, buf + 2 * n,
                                  cfg->model.init_from ? cfg->model.init_from : "", st, &o, path, size);
  free(buf);
  return err;
}

int zo_run_save(const struct zo_run_saver *t, const struct zo_train_state *st) {
  const struct zo_config *cfg = t->cfg;
  const struct zo_placement *pl = t->pl;
  char path[PATH_MAX], rate[96];
  int err = 0;
  const double t0 = zo_time_s();
  /* checkpoint.save_optimizer = false: the run's final checkpoint holds the weights only. */
  const bool weights_only = !cfg->checkpoint.save_optimizer && st->step >= cfg->steps;
  if (t->lora) {
    if ((err = save_lora(t, st, path, sizeof path))) return err;
    printf("%ssaved %s (the LoRA adapters, a PEFT adapter directory, and their optimizer state)\n  wrote %s\n",
           t->tty ? "\r" : "", path, zo_run_rate_str(dir_bytes(path), zo_time_s() - t0, rate));
  } else if (zo_placement_sharded(pl)) {
    if ((err = save_sharded(t, st, path, sizeof path))) return err;
    if (t->lead)
      printf("%ssaved %s (%d optimizer shards%s)\n  wrote %s\n", t->tty ? "\r" : "", path, t->n_ranks,
          weights_only ? "; checkpoint.save_optimizer = false is not applied to a sharded optimizer" : "",
          zo_run_rate_str(dir_bytes(path), zo_time_s() - t0, rate));
  } else if (t->lead) {
    /* Rank 0 writes the checkpoint: every rank holds the same state. */
    const struct zo_model *m = zo_sched_model(t->sched);
    const struct zo_checkpoint_opts o = {.keep = cfg->checkpoint.keep, .tokenizer = t->tokenizer,
                                            .settings = t->settings};
    err = zo_checkpoint_save_opts(cfg->checkpoint.dir, m, weights_only ? NULL : &pl->opt, t->io, st, &o, path,
                                  sizeof path);
    const int done = zo_sched_state_done(t->sched);
    if (err || (err = done)) return err;
    printf("%ssaved %s%s\n  wrote %s\n", t->tty ? "\r" : "", path,
        weights_only ? " (weights only: checkpoint.save_optimizer = false)" : "",
        zo_run_rate_str(dir_bytes(path), zo_time_s() - t0, rate));
  }
  /* The others go on once it is on disk, so that a job stopped after this
   * line resumes from it. */
  if (t->comm && (err = zo_comm_barrier(t->comm))) return err;
  return 0;
}
