/* The run logger (see run_log.h): metrics JSONL, TensorBoard, the console
 * line and the progress bar of a training run. */
#include "run_log.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "zo/fsutil.h"

/* Wall-clock time in Unix seconds, for the metrics lines ("time"). */
static double unix_time(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* printf on the lead rank only (the figures it prints are global). */
static void say(const struct zo_run_log *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const struct zo_run_log *l, const char *fmt, ...) {
  if (!l->o.lead) return;
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
}

static int open_metrics(struct zo_run_log *l) {
  const char *path = l->cfg->log.metrics_path;
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash && slash != dir) {
    *slash = '\0';
    int err = zo_mkdir_p(dir, 0755);
    if (err) return err;
  }
  l->metrics = fopen(path, l->o.append ? "a" : "w");
  if (!l->metrics) return zo_error(-errno, "log.metrics_path: %s: %s", path, strerror(errno));
  struct stat st;
  l->metrics_good = fstat(fileno(l->metrics), &st) == 0 && S_ISREG(st.st_mode) ? (long long)st.st_size : -1;
  return 0;
}

/* A log output that cannot be written: said once on stderr, then no longer
 * written; the run goes on (its checkpoints carry what it trained). */
static void output_lost(const char *key, const char *path, const char *why) {
  fprintf(stderr, "zoffload: warning: %s %s cannot be written (%s): it is no longer written; the run goes on and "
                  "its checkpoints are unaffected\n", key, path, why);
}

/* One metrics line; a failed write (a full disk) closes the file cut back to
 * its last whole line (a regular file), said once. */
static void metrics_line(struct zo_run_log *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void metrics_line(struct zo_run_log *l, const char *fmt, ...) {
  if (!l->metrics) return;
  va_list ap;
  va_start(ap, fmt);
  const int n = vfprintf(l->metrics, fmt, ap);
  va_end(ap);
  if (n >= 0 && fflush(l->metrics) == 0) {
    if (l->metrics_good >= 0) l->metrics_good += n;
    return;
  }
  const int e = errno;
  fclose(l->metrics); /* its own failure is the same one */
  l->metrics = NULL;
  const char *path = l->cfg->log.metrics_path;
  if (l->metrics_good >= 0 && truncate(path, (off_t)l->metrics_good) != 0)
    fprintf(stderr, "zoffload: warning: log.metrics_path %s: cannot cut it back to its last whole line: %s\n", path,
            strerror(errno));
  output_lost("log.metrics_path", path, strerror(e));
}

/* TensorBoard's write failed (err): said once, its writer closed. */
static void tb_lost(struct zo_run_log *l) {
  output_lost("log.tensorboard_dir", l->cfg->log.tensorboard_dir, zo_last_error());
  zo_tb_free(l->tb);
  l->tb = NULL;
}

int zo_run_log_open(struct zo_run_log *l, const struct zo_config *cfg, struct zo_sched *s,
                    const struct zo_run_log_opts *o) {
  *l = (struct zo_run_log){.o = *o, .cfg = cfg, .sched = s, .first = -1};
  int err;
  if (o->lead && cfg->log.metrics_path && cfg->log.metrics_path[0] && (err = open_metrics(l))) return err;
  if (o->lead && cfg->log.tensorboard_dir && cfg->log.tensorboard_dir[0]) {
    if (!(l->tb = zo_tb_init(cfg->log.tensorboard_dir, "log.tensorboard_dir"))) return -EINVAL;
    say(l, "tensorboard: %s\n", zo_tb_path(l->tb));
  }
  return 0;
}

static void progress_bar(long step, long total, double elapsed, long first) {
  int width = 30, filled = (int)(width * step / total);
  double eta = step > first ? elapsed / (double)(step - first) * (double)(total - step) : 0.0;
  printf("\r[%.*s%*s] %3d%% ETA %d:%02d ", filled, "==============================", width - filled, "",
         (int)(100 * step / total), (int)eta / 60, (int)eta % 60);
  fflush(stdout);
}

static int write_records(struct zo_run_log *l, const struct zo_step_record *r) {
  const bool dp = l->o.n_ranks > 1;
  const double tok_s = (double)l->o.step_tokens / r->wall_s, now = unix_time();
  if (l->tb) {
    struct zo_tb_scalar tbs[] = {
        {"train/loss", r->loss},       {"train/lr", r->lr},
        {"train/grad_norm", r->norm},  {"train/loss_scale", r->loss_scale},
        {"train/skipped", r->skipped}, {"train/tokens_per_s", tok_s},
        {"train/ms", 1e3 * r->wall_s}, {"train/comm_ms", r->comm_ms},
    };
    const size_t n_tb = sizeof tbs / sizeof tbs[0] - (dp ? 0 : 1); /* comm_ms over ranks only */
    if (zo_tb_write(l->tb, r->step, now, tbs, n_tb)) tb_lost(l);
  }
  if (l->metrics) {
    /* JSON has no inf or NaN: an overflowed step's norm is null. */
    char norm_s[32] = "null", dp_s[96] = "";
    if (isfinite(r->norm)) snprintf(norm_s, sizeof norm_s, "%.17g", r->norm);
    if (dp) snprintf(dp_s, sizeof dp_s, ", \"ranks\": %d, \"comm_ms\": %.3f", l->o.n_ranks, r->comm_ms);
    metrics_line(l,
            "{\"step\": %ld, \"loss\": %.17g, \"lr\": %.9g, \"grad_norm\": %s, \"loss_scale\": %.17g, "
            "\"skipped\": %s, \"tokens_per_s\": %.1f, \"ms\": %.2f%s, \"time\": %.3f}\n",
            r->step, r->loss, r->lr, norm_s, r->loss_scale, r->skipped ? "true" : "false", tok_s, 1e3 * r->wall_s,
            dp_s, now);
  }
  return 0;
}

/* The console line: means over the steps since the last one. */
static void console_line(struct zo_run_log *l, const struct zo_step_record *r) {
  const struct zo_config *cfg = l->cfg;
  const double n = (double)l->n, dt = l->wall_s / n, tokens = (double)l->o.step_tokens;
  struct zo_sched_stats s1;
  char peak[32], scale_s[48] = "", ranks_s[48] = "", comm_s[32] = "";
  zo_sched_stats(l->sched, &s1);
  if (l->o.tty) say(l, "\r");
  if (l->o.scaler)
    snprintf(scale_s, sizeof scale_s, " | scale %g%s, %ld skipped", r->loss_scale,
             l->o.scaler_dynamic ? "" : " static", r->skipped_steps);
  if (l->o.n_ranks > 1) {
    snprintf(ranks_s, sizeof ranks_s, " (%d ranks, %.0f per rank)", l->o.n_ranks,
             (double)l->o.rank_step_tokens / dt);
    snprintf(comm_s, sizeof comm_s, ", comm %.1f", 1e3 * (s1.comm_s - l->since.comm_s) / n);
  }
  say(l, "step %ld/%ld | loss %.4f | lr %.2e | norm %.3f%s | %.0f tok/s%s | %.3f TFLOP/s | ms: "
         "compute %.0f, copies %.1f, optimizer %.0f, io wait %.1f, nvme wait %.1f%s | device peak %s\n",
      r->step, cfg->steps, l->loss / n, r->lr, r->norm, scale_s, tokens / dt, ranks_s,
      l->o.flops_per_token * tokens / dt / 1e12, 1e3 * l->compute_s / n,
      1e3 * (s1.accumulate_s - l->since.accumulate_s) / n, 1e3 * (s1.optimizer_s - l->since.optimizer_s) / n,
      1e3 * l->io_s / n, 1e3 * (s1.nvme_wait_s - l->since.nvme_wait_s) / n, comm_s,
      zo_format_bytes(s1.device_peak, peak));
  l->since = s1;
  l->compute_s = l->io_s = l->loss = l->wall_s = 0;
  l->n = 0;
}

int zo_run_log_step(struct zo_run_log *l, const struct zo_step_record *r) {
  const struct zo_config *cfg = l->cfg;
  if (l->first < 0) {
    l->first = r->step - 1;
    l->t_first = zo_time_s() - r->wall_s;
    l->since = r->before;
  }
  l->compute_s += r->compute_s;
  l->io_s += r->io_s;
  l->wall_s += r->wall_s;
  l->loss += r->loss;
  l->n++;
  int err = write_records(l, r);
  if (err) return err;
  if (r->step % cfg->log.every == 0 || r->step == cfg->steps) console_line(l, r);
  if (l->o.tty) progress_bar(r->step, cfg->steps, zo_time_s() - l->t_first, l->first);
  return 0;
}

int zo_run_log_eval(struct zo_run_log *l, long step, double val_loss) {
  say(l, "%sstep %ld: val loss %.4f\n", l->o.tty ? "\r" : "", step, val_loss);
  const double now = unix_time();
  metrics_line(l, "{\"step\": %ld, \"val_loss\": %.17g, \"time\": %.3f}\n", step, val_loss, now);
  if (l->tb && zo_tb_write(l->tb, step, now, &(struct zo_tb_scalar){"val/loss", val_loss}, 1)) tb_lost(l);
  return 0;
}

void zo_run_log_close(struct zo_run_log *l) {
  if (l->metrics) fclose(l->metrics);
  l->metrics = NULL;
  zo_tb_free(l->tb);
  l->tb = NULL;
}
