/* A run directory belongs to one run (issue 18, part A): a fresh run into
 * another run's checkpoints is refused (--overwrite removes them), one
 * writer per directory (the lock names its pid), retention keeps the
 * checkpoint just written, killed runs' leftovers are removed, non-finite
 * steps stop the run (or are skipped) and never reach a checkpoint,
 * trainer_state.json is range-checked, a failed save reports its own error,
 * long paths and thread counts are refused before step 1, eval names or
 * refuses its weights, and the planner's advice is exact. Signals, ulimits
 * and kill -9 through the CLI: tests/cli/test-hardening.sh. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo/checkpoint.h"
#include "zo/fsutil.h"
#include "zo/hf.h"
#include "zo/plan.h"
#include "zo/sample.h"
#include "zo_engine_test.h"

static char tmpdir[256];
static char data_path[300];

/* A tiny model on the test's token file, checkpoints under tmpdir/<name>. */
static int load(struct zo_config *cfg, const char *name, const char *const *extra, int n_extra) {
  static char train_set[400], dir_set[400];
  snprintf(train_set, sizeof train_set, "data.train=%s", data_path);
  snprintf(dir_set, sizeof dir_set, "checkpoint.dir=%s/%s", tmpdir, name);
  const char *base[] = {"model.n_layer=1", "model.n_head=2", "model.n_embd=16", "model.vocab_size=256",
                        "model.max_seq_len=16", "data.seq_len=8", "data.format=u16",
                        "train_micro_batch_size_per_gpu=2", "steps=2", "engine.device=cpu", "log.every=100",
                        "checkpoint.keep=1", dir_set, train_set};
  return zo_etest_config_load(cfg, base, ZO_ARRAY_LEN(base), extra, n_extra);
}

static int train(const char *name, const char *const *extra, int n_extra, const struct zo_train_opts *o) {
  struct zo_config cfg;
  CHECK(load(&cfg, name, extra, n_extra) == 0);
  struct zo_train_opts opts = {0};
  if (o) opts = *o;
  const int err = zo_train(&cfg, &opts);
  zo_config_free(&cfg);
  return err;
}

static bool exists(const char *name, const char *sub) {
  char p[700];
  snprintf(p, sizeof p, "%s/%s/%s", tmpdir, name, sub);
  return access(p, F_OK) == 0;
}

static int test_fresh_run_into_another_runs_dir(void) {
  CHECK(train("fresh", NULL, 0, NULL) == 0);
  CHECK(exists("fresh", "checkpoint-2"));
  const char *s3[] = {"steps=3"};
  CHECK(train("fresh", s3, 1, NULL) == -EEXIST);
  CHECK(strstr(zo_last_error(), "--resume auto") && strstr(zo_last_error(), "--overwrite"));
  CHECK(strstr(zo_last_error(), "checkpoint-2"));
  const struct zo_train_opts ow = {.overwrite = true};
  CHECK(train("fresh", s3, 1, &ow) == 0);
  CHECK(!exists("fresh", "checkpoint-2") && exists("fresh", "checkpoint-3"));
  /* A metrics file of another run counts as well. */
  char met[600];
  snprintf(met, sizeof met, "log.metrics_path=%s/fresh-m.jsonl", tmpdir);
  const char *m[] = {met};
  CHECK(train("fresh-m", m, 1, NULL) == 0);
  CHECK(train("fresh-m2", m, 1, NULL) == -EEXIST);
  CHECK(strstr(zo_last_error(), "log.metrics_path"));
  return 0;
}

/* Before the fix a checkpoint-9 of an older run made keep = 1 delete every
 * new checkpoint as soon as it was written. */
static int test_retention_keeps_the_checkpoint_just_written(void) {
  CHECK(train("keep", NULL, 0, NULL) == 0);
  char from[700], to[700];
  snprintf(from, sizeof from, "%s/keep/checkpoint-2", tmpdir);
  snprintf(to, sizeof to, "%s/keep/checkpoint-9", tmpdir);
  char cmd[1600];
  snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", from, to);
  CHECK(system(cmd) == 0);
  const char *s4[] = {"steps=4"};
  const struct zo_train_opts r = {.resume = from};
  CHECK(train("keep", s4, 1, &r) == 0);
  CHECK(exists("keep", "checkpoint-4"));
  CHECK(exists("keep", "checkpoint-9"));
  CHECK(!exists("keep", "checkpoint-2"));
  return 0;
}

static int test_one_writer_per_directory(void) {
  char dir[600];
  snprintf(dir, sizeof dir, "%s/locked", tmpdir);
  CHECK(zo_mkdir_p(dir, 0755) == 0);
  struct zo_dir_lock a, b;
  CHECK(zo_dir_lock(dir, NULL, &a) == 0);
  CHECK(zo_dir_lock(dir, NULL, &b) == -EBUSY);
  char pid[32];
  snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
  CHECK(strstr(zo_last_error(), pid) && strstr(zo_last_error(), "host "));
  CHECK(train("locked", NULL, 0, NULL) == -EBUSY);
  CHECK(strstr(zo_last_error(), pid));
  zo_dir_unlock(&a);
  CHECK(train("locked", NULL, 0, NULL) == 0);
  return 0;
}

static int test_leftovers_of_killed_runs_removed(void) {
  CHECK(train("left", NULL, 0, NULL) == 0);
  char p[700];
  snprintf(p, sizeof p, "%s/left/.checkpoint-7.tmp-99999", tmpdir);
  CHECK(zo_mkdir_p(p, 0755) == 0);
  snprintf(p, sizeof p, "%s/left/.checkpoint-1.prune-99999", tmpdir);
  CHECK(zo_mkdir_p(p, 0755) == 0);
  /* checkpoint-1 half removed: its trainer_state.json is gone. */
  snprintf(p, sizeof p, "%s/left/checkpoint-1/model.safetensors", tmpdir);
  CHECK(zo_mkdir_p(p, 0755) == 0);
  const char *s3[] = {"steps=3"};
  const struct zo_train_opts r = {.resume = "auto"};
  CHECK(train("left", s3, 1, &r) == 0);
  CHECK(!exists("left", ".checkpoint-7.tmp-99999") && !exists("left", ".checkpoint-1.prune-99999"));
  CHECK(!exists("left", "checkpoint-1") && exists("left", "checkpoint-3"));
  return 0;
}

static int test_nonfinite_stops_or_skips(void) {
  CHECK(train("nan", NULL, 0, NULL) == 0);
  /* lr 1e38 makes the weights overflow within two steps. */
  const char *huge[] = {"steps=8", "checkpoint.every=1", "optimizer.params.lr=1e38"};
  const struct zo_train_opts r = {.resume = "auto"};
  CHECK(train("nan", huge, 3, &r) == -ERANGE);
  CHECK(strstr(zo_last_error(), "last good checkpoint is") && strstr(zo_last_error(), "checkpoint-"));
  CHECK(strstr(zo_last_error(), "engine.on_nonfinite"));
  long *steps;
  int n;
  char dir[600];
  snprintf(dir, sizeof dir, "%s/nan", tmpdir);
  CHECK(zo_checkpoint_list(dir, &steps, &n) == 0 && n == 1);
  const long last = steps[0];
  free(steps);
  CHECK(last < 8);
  /* Every checkpoint left loads with finite weights. */
  char ck[700];
  snprintf(ck, sizeof ck, "%s/checkpoint-%ld", dir, last);
  struct zo_model_config mc;
  CHECK(zo_model_config_from_pretrained(ck, 2, &mc) == 0);
  struct zo_model *m = zo_model_init_inference(&mc, zo_backend_cpu(), 1, 1);
  CHECK(m);
  float *p = zo_test_xmalloc(m->table.numel * sizeof *p);
  struct zo_train_state st;
  CHECK(zo_checkpoint_load(ck, m, p, NULL, NULL, &st) == 0);
  for (size_t i = 0; i < m->table.numel; i++) CHECK(isfinite(p[i]));
  free(p);
  zo_model_free(m);
  /* lr 1e20 keeps the weights finite (about 1e20) but makes the next loss
   * NaN. "skip": the run goes on, skipping those updates, and saves the
   * last good weights. */
  const char *nan_stop[] = {"steps=8", "checkpoint.every=1", "optimizer.params.lr=1e20"};
  CHECK(train("nan", nan_stop, 3, &r) == -ERANGE);
  CHECK(strstr(zo_last_error(), "the loss is NaN") || strstr(zo_last_error(), "the gradient norm is"));
  const char *skip[] = {"steps=8", "checkpoint.every=1", "optimizer.params.lr=1e20", "engine.on_nonfinite=skip"};
  CHECK(train("nan", skip, 4, &r) == 0);
  CHECK(exists("nan", "checkpoint-8"));
  return 0;
}

/* Rewrites key's value in dir/checkpoint-2/trainer_state.json. */
static int edit_state(const char *ck, const char *key, const char *value) {
  char p[800], cmd[2400];
  snprintf(p, sizeof p, "%s/trainer_state.json", ck);
  snprintf(cmd, sizeof cmd, "sed -i 's/\"%s\": [-0-9]*/\"%s\": %s/' '%s'", key, key, value, p);
  return system(cmd);
}

static int test_trainer_state_range_checked(void) {
  CHECK(train("range", NULL, 0, NULL) == 0);
  char ck[700], save[800], cmd[1800];
  snprintf(ck, sizeof ck, "%s/range/checkpoint-2", tmpdir);
  snprintf(save, sizeof save, "%s/range-state.json", tmpdir);
  snprintf(cmd, sizeof cmd, "cp '%s/trainer_state.json' '%s'", ck, save);
  CHECK(system(cmd) == 0);
  const char *s4[] = {"steps=4"};
  const struct zo_train_opts r = {.resume = ck};
  static const char *const bad[][2] = {{"data_position", "-7"}, {"data_position", "1000000000000000"},
                                       {"loss_scale_iter", "99"}};
  for (size_t i = 0; i < ZO_ARRAY_LEN(bad); i++) {
    CHECK(edit_state(ck, bad[i][0], bad[i][1]) == 0);
    CHECK(train("range", s4, 1, &r) == -EINVAL);
    CHECK(strstr(zo_last_error(), bad[i][0]) && strstr(zo_last_error(), "out of range"));
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/trainer_state.json'", save, ck);
    CHECK(system(cmd) == 0);
  }
  CHECK(edit_state(ck, "seed", "4242") == 0);
  CHECK(train("range", s4, 1, &r) == -EINVAL);
  CHECK(strstr(zo_last_error(), "engine.seed = 4242"));
  snprintf(cmd, sizeof cmd, "cp '%s' '%s/trainer_state.json'", save, ck);
  CHECK(system(cmd) == 0);
  CHECK(train("range", s4, 1, &r) == 0);
  return 0;
}

/* A save that cannot even create its directory reports why, not the
 * removal of the temporary directory that never existed. */
static int test_failed_save_reports_its_own_error(void) {
  struct zo_model_config mc = {.n_layer = 1, .n_head = 2, .n_embd = 16, .vocab_size = 256, .max_seq_len = 16};
  struct zo_model *m = zo_model_init_inference(&mc, zo_backend_cpu(), 1, 1);
  CHECK(m);
  float *p = zo_test_xmalloc(m->table.numel * sizeof *p);
  zo_model_init_params(m, p, 1);
  char file[600], dir[700];
  snprintf(file, sizeof file, "%s/a-file", tmpdir);
  FILE *f = fopen(file, "w");
  CHECK(f && fclose(f) == 0);
  snprintf(dir, sizeof dir, "%s/sub", file);
  struct zo_train_state st = {.step = 1, .applied_steps = 1};
  int err = zo_checkpoint_save(dir, m, p, NULL, p, p, &st, 1, NULL, 0);
  CHECK(err == -ENOTDIR);
  CHECK(!strstr(zo_last_error(), "cannot remove"));
  /* A non-finite weight fails the save, and no checkpoint appears. */
  snprintf(dir, sizeof dir, "%s/nonfinite", tmpdir);
  p[5] = NAN;
  err = zo_checkpoint_save(dir, m, p, NULL, p, p, &st, 1, NULL, 0);
  CHECK(err == -ERANGE && strstr(zo_last_error(), "non-finite"));
  char ck[800];
  snprintf(ck, sizeof ck, "%s/checkpoint-1", dir);
  CHECK(access(ck, F_OK) != 0);
  free(p);
  zo_model_free(m);
  return 0;
}

static int test_refused_before_step_1(void) {
  /* 5000 characters: the reason comes first, not cut off by the path. */
  static char longset[5200];
  int n = snprintf(longset, sizeof longset, "checkpoint.dir=%s/", tmpdir);
  while (n < 5000) longset[n++] = 'x';
  longset[n] = '\0';
  const char *s[] = {longset};
  int err = train("unused", s, 1, NULL);
  CHECK(err == -ENAMETOOLONG);
  CHECK(strstr(zo_last_error(), "checkpoint.dir is too long") == zo_last_error());
  const char *t[] = {"engine.threads=100000"};
  CHECK(train("threads", t, 1, NULL) == -EINVAL);
  CHECK(strstr(zo_last_error(), "engine.threads = 100000") && strstr(zo_last_error(), "hardware threads"));
  return 0;
}

static int test_eval_names_or_refuses_weights(void) {
  struct zo_config cfg;
  CHECK(load(&cfg, "typo", NULL, 0) == 0);
  struct zo_eval_result res;
  CHECK(zo_eval(&cfg, NULL, 1, &res) == -ENOENT);
  CHECK(strstr(zo_last_error(), "--random-init") && strstr(zo_last_error(), "typo"));
  const struct zo_weights w = {.random_init = true};
  CHECK(zo_eval_weights(&cfg, &w, 1, &res) == 0);
  zo_config_free(&cfg);
  return 0;
}

static int test_plan_advice_is_exact(void) {
  struct zo_config cfg;
  CHECK(load(&cfg, "plan", NULL, 0) == 0);
  struct zo_model_config mc;
  CHECK(zo_train_model_config(&cfg, &mc) == 0);
  struct zo_plan p;
  CHECK(zo_plan_build(&cfg, &mc, NULL, &p) == 0);
  /* One byte short: the figures must differ in the message. */
  cfg.engine.gpu_memory_budget = p.total[ZO_TIER_DEVICE] - 1;
  CHECK(zo_plan_build(&cfg, &mc, NULL, &p) == 0);
  CHECK(zo_plan_check(&cfg, &p) == -ENOMEM);
  char want[96];
  snprintf(want, sizeof want, "needs %zu bytes", p.total[ZO_TIER_DEVICE]);
  CHECK(strstr(zo_last_error(), want));
  zo_config_free(&cfg);
  /* The optimizer on an NVMe too small for it: the host would do. */
  char nv[600];
  snprintf(nv, sizeof nv, "zero_optimization.offload_optimizer.nvme_path=%s/nvme", tmpdir);
  const char *s[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=nvme", nv};
  CHECK(load(&cfg, "plan", s, 3) == 0);
  CHECK(zo_plan_build(&cfg, &mc, NULL, &p) == 0);
  p.budget[ZO_TIER_NVME] = 1;
  p.fits[ZO_TIER_NVME] = false;
  CHECK(zo_plan_check(&cfg, &p) == -ENOMEM);
  CHECK(!strstr(zo_last_error(), "No single change fits"));
  CHECK(strstr(zo_last_error(), "offload_optimizer.device=cpu"));
  zo_config_free(&cfg);
  return 0;
}

int main(void) {
  if (zo_test_mkdtemp(tmpdir, sizeof tmpdir, "rundir")) return 1;
  snprintf(data_path, sizeof data_path, "%s/tokens.u16", tmpdir);
  if (zo_etest_write_tokens(data_path, 4000, "the quick brown fox jumps over the lazy dog; ", 256)) return 1;
  static const struct zo_test tests[] = {
      ZO_TEST(fresh_run_into_another_runs_dir),
      ZO_TEST(retention_keeps_the_checkpoint_just_written),
      ZO_TEST(one_writer_per_directory),
      ZO_TEST(leftovers_of_killed_runs_removed),
      ZO_TEST(nonfinite_stops_or_skips),
      ZO_TEST(trainer_state_range_checked),
      ZO_TEST(failed_save_reports_its_own_error),
      ZO_TEST(refused_before_step_1),
      ZO_TEST(eval_names_or_refuses_weights),
      ZO_TEST(plan_advice_is_exact),
  };
  struct zo_test_counts counts = zo_test_run(tests, ZO_ARRAY_LEN(tests));
  zo_test_rmtree(tmpdir);
  return zo_test_report(counts);
}
