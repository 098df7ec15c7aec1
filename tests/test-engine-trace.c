/* The timeline (engine.trace, zo/trace_file.h) of a small GPT-2's training
 * in four placements (all on the device; optimizer on cpu, stage 2, two
 * micro-batches; optimizer on NVMe; parameters and optimizer on cpu). Each
 * trace file parses with jansson; spans of one track never overlap; every
 * wait ends after the task it names has ended and the next task of its
 * track starts after that (checked for the parameter prefetch, the gradient
 * copies and the optimizer updates, which each placement must show); the
 * optimizer stream's update spans add up to the scheduler's own optimizer
 * counter; the summary reads the file back; and tracing changes no bit of
 * the trained weights. The binary runs again with random stream delays
 * (ZO_STREAM_DELAY_US=200), where the same must hold. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo/trace_file.h"
#include "zo_engine_test.h"

static struct zo_etest_files fx;

#define N_STEPS 4

static int load(struct zo_config *cfg, const char *const *extra, int n_extra) {
  static char train_set[400], nvme_set[400];
  snprintf(train_set, sizeof train_set, "data.train=%s", fx.data_path);
  snprintf(nvme_set, sizeof nvme_set, "zero_optimization.offload_optimizer.nvme_path=%s", fx.nvme_dir);
  const char *base[] = {"model.n_layer=3", "model.n_head=3", "model.n_embd=36", "model.vocab_size=200",
                        "model.max_seq_len=16", "data.seq_len=11", "data.format=u16",
                        "train_micro_batch_size_per_gpu=3", "steps=4", "optimizer.params.lr=0.01",
                        "engine.device=cpu", "log.every=100", "aio.block_size=4096",
                        "zero_optimization.offload_param.buffer_count=2", train_set, nvme_set};
  return zo_etest_config_load(cfg, base, ZO_ARRAY_LEN(base), extra, n_extra);
}

/* One track's items (spans and waits) as read back from a trace file. */
struct item {
  double t0, t1; /* us */
  bool wait;
  long seq, on_seq;
  int on_tid;
  const char *name;
};

struct track {
  char name[ZO_TRACE_NAME_MAX];
  struct item *it;
  int n, cap;
};

struct trace {
  json_t *root;
  struct track tracks[ZO_TRACE_MAX_TRACKS + 1];
  int n_steps, n_counters;
};

static void trace_free(struct trace *tr) {
  for (int t = 0; t <= ZO_TRACE_MAX_TRACKS; t++) free(tr->tracks[t].it);
  json_decref(tr->root);
  memset(tr, 0, sizeof *tr);
}

static int cmp_item(const void *a, const void *b) {
  const struct item *x = a, *y = b;
  return (x->t0 > y->t0) - (x->t0 < y->t0);
}

static int trace_read(const char *path, struct trace *tr) {
  memset(tr, 0, sizeof *tr);
  json_error_t je;
  tr->root = json_load_file(path, 0, &je);
  if (!tr->root) {
    printf("  %s: %s (line %d)\n", path, je.text, je.line);
    return 1;
  }
  json_t *evs = json_object_get(tr->root, "traceEvents");
  CHECK(json_is_array(evs));
  size_t i;
  json_t *e;
  json_array_foreach(evs, i, e) {
    const char *ph = json_string_value(json_object_get(e, "ph"));
    const char *cat = json_string_value(json_object_get(e, "cat"));
    const char *name = json_string_value(json_object_get(e, "name"));
    json_t *args = json_object_get(e, "args"), *tidj = json_object_get(e, "tid");
    CHECK(ph && name);
    const int tid = json_is_integer(tidj) ? (int)json_integer_value(tidj) : -1;
    if (!strcmp(ph, "M") && !strcmp(name, "thread_name")) {
      CHECK(tid >= 0 && tid <= ZO_TRACE_MAX_TRACKS);
      snprintf(tr->tracks[tid].name, ZO_TRACE_NAME_MAX, "%s", json_string_value(json_object_get(args, "name")));
    } else if (!strcmp(ph, "C")) {
      tr->n_counters++;
    } else if (!strcmp(ph, "X") && cat && !strcmp(cat, "step")) {
      tr->n_steps++;
    } else if (!strcmp(ph, "X")) {
      CHECK(cat && tid >= 0 && tid < ZO_TRACE_MAX_TRACKS);
      struct track *t = &tr->tracks[tid];
      if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 256;
        t->it = realloc(t->it, (size_t)t->cap * sizeof *t->it);
        CHECK(t->it);
      }
      const double ts = json_number_value(json_object_get(e, "ts"));
      const double dur = json_number_value(json_object_get(e, "dur"));
      CHECK(dur >= 0);
      const bool wait = !strcmp(cat, "wait");
      t->it[t->n++] = (struct item){ts, ts + dur, wait, (long)json_integer_value(json_object_get(args, "seq")),
                                    wait ? (long)json_integer_value(json_object_get(args, "on_seq")) : 0,
                                    wait ? (int)json_integer_value(json_object_get(args, "on_tid")) : -1, name};
    }
  }
  for (int t = 0; t < ZO_TRACE_MAX_TRACKS; t++)
    if (tr->tracks[t].n) qsort(tr->tracks[t].it, (size_t)tr->tracks[t].n, sizeof(struct item), cmp_item);
  return 0;
}

static const struct item *find(const struct trace *tr, int tid, long seq) {
  if (tid < 0 || tid >= ZO_TRACE_MAX_TRACKS) return NULL;
  const struct track *t = &tr->tracks[tid];
  for (int i = 0; i < t->n; i++)
    if (t->it[i].seq == seq) return &t->it[i];
  return NULL;
}

static bool named(const char *name, const char *const *names) {
  for (; *names; names++)
    if (!strcmp(name, *names)) return true;
  return false;
}

/* Timestamps are microseconds printed as doubles: allow a nanosecond. */
#define EPS_US 1e-3

/* The invariants of every trace; counts the waits (of any track) for tasks
 * named in `kinds` (groups of names, NULL-terminated each) into seen[]. */
static int check_order(const struct trace *tr, const char *const *const *kinds, int n_kinds, int *seen) {
  int n_items = 0;
  for (int tid = 0; tid < ZO_TRACE_MAX_TRACKS; tid++) {
    const struct track *t = &tr->tracks[tid];
    for (int i = 0; i < t->n; i++) {
      n_items++;
      const struct item *x = &t->it[i];
      /* one track: no two tasks at once */
      if (i > 0 && x->t0 < t->it[i - 1].t1 - EPS_US) {
        printf("  track %s: %s [%.3f, %.3f) overlaps %s [%.3f, %.3f)\n", t->name, x->name, x->t0, x->t1,
               t->it[i - 1].name, t->it[i - 1].t0, t->it[i - 1].t1);
        return 1;
      }
      if (!x->wait || x->on_seq <= 0) continue;
      const struct item *w = find(tr, x->on_tid, x->on_seq);
      if (!w) {
        printf("  track %s: a wait names task %ld of track %d, which is not in the trace\n", t->name, x->on_seq,
               x->on_tid);
        return 1;
      }
      /* the wait returns only after the task it waits for has ended, and
       * its track's next task starts after that */
      CHECK(x->t1 >= w->t1 - EPS_US);
      if (i + 1 < t->n) CHECK(t->it[i + 1].t0 >= w->t1 - EPS_US);
      for (int k = 0; k < n_kinds; k++)
        if (named(w->name, kinds[k])) seen[k]++;
    }
  }
  CHECK(n_items > 0);
  return 0;
}

/* Sum of the spans named in names on the track named track, seconds. */
static double busy_s(const struct trace *tr, const char *track, const char *const *names) {
  double us = 0;
  for (int tid = 0; tid < ZO_TRACE_MAX_TRACKS; tid++) {
    if (strcmp(tr->tracks[tid].name, track) != 0) continue;
    for (int i = 0; i < tr->tracks[tid].n; i++)
      if (!tr->tracks[tid].it[i].wait && named(tr->tracks[tid].it[i].name, names))
        us += tr->tracks[tid].it[i].t1 - tr->tracks[tid].it[i].t0;
  }
  return us * 1e-6;
}

static const char *const prefetch[] = {"load block", "load unit", "load chunk", NULL};
static const char *const grads[] = {"grads out", "accumulate grads", NULL};
static const char *const updates[] = {"adamw unit", "adamw chunk", "adamw_update", "norm", NULL};
static const char *const optim_spans[] = {"norm", "adamw unit", "adamw chunk", NULL};

/* Trains the placement traced over every step and untraced, and checks the
 * trace; need[k]: the placement must show waits for kinds[k]. */
static int traced_run(const char *name, const char *const *extra, int n_extra, const bool need[3]) {
  char path[400], tset[440], run_name[128];
  snprintf(path, sizeof path, "%s/%s.trace.json", fx.tmpdir, name);
  snprintf(tset, sizeof tset, "engine.trace.path=%s", path);
  const char *sets[16];
  CHECK(n_extra + 3 < 16);
  for (int i = 0; i < n_extra; i++) sets[i] = extra[i];
  sets[n_extra] = tset;
  sets[n_extra + 1] = "engine.trace.first_step=1";
  sets[n_extra + 2] = "engine.trace.steps=4";
  struct zo_etest_run traced = {0}, plain = {0};
  snprintf(run_name, sizeof run_name, "%s-traced", name);
  CHECK(zo_etest_train(load, fx.tmpdir, run_name, sets, n_extra + 3, N_STEPS, NULL, &traced) == 0);
  snprintf(run_name, sizeof run_name, "%s-plain", name);
  CHECK(zo_etest_train(load, fx.tmpdir, run_name, extra, n_extra, N_STEPS, NULL, &plain) == 0);
  /* tracing observes; it changes nothing */
  CHECK(traced.n == plain.n && memcmp(traced.params, plain.params, traced.n * sizeof(float)) == 0);
  CHECK(memcmp(traced.losses, plain.losses, sizeof traced.losses) == 0);
  free(traced.params);
  free(plain.params);

  struct trace tr;
  CHECK(trace_read(path, &tr) == 0);
  CHECK(tr.n_steps == N_STEPS);
  CHECK(tr.n_counters >= 3 * N_STEPS); /* device, host, nvme bytes at each step */
  const char *const *kinds[3] = {prefetch, grads, updates};
  int seen[3] = {0, 0, 0};
  int err = check_order(&tr, kinds, 3, seen);
  printf("  %s: waits for parameter loads %d, gradient copies %d, updates %d\n", name, seen[0], seen[1], seen[2]);
  for (int k = 0; k < 3 && !err; k++)
    if (need[k] && seen[k] == 0) {
      printf("  %s: no wait for %s in the trace\n", name, kinds[k][0]);
      err = 1;
    }
  /* The optimizer stream's update spans wrap exactly the code the
   * scheduler's own counter times (zo_sched_stats.optimizer_s). */
  const double spans = busy_s(&tr, "optim", optim_spans), counter = traced.stats.optimizer_s;
  printf("  %s: optimizer spans %.6f s, scheduler counter %.6f s\n", name, spans, counter);
  if (!err && !(spans >= counter * 0.999 - 1e-6 && spans <= counter * 1.10 + 2e-3)) {
    printf("  %s: the optimizer spans do not agree with the scheduler's counter\n", name);
    err = 1;
  }
  trace_free(&tr);
  /* The summary reads it back: every step, a compute track that worked. */
  struct zo_trace_step_info info[N_STEPS];
  int n = 0;
  CHECK(zo_trace_summarize(path, info, N_STEPS, &n) == 0 && n == N_STEPS);
  for (int s = 0; s < n; s++) {
    bool compute = false;
    for (int t = 0; t < info[s].n_tracks; t++)
      compute |= !strcmp(info[s].tracks[t].name, "compute") && info[s].tracks[t].busy_ms > 0;
    CHECK(compute && info[s].step == s + 1 && info[s].critical_n > 0);
    CHECK(info[s].hidden_ms <= info[s].copy_io_ms + 1e-6);
    /* The bytes the scheduler issued, from its counters at each step's
     * start and the next (the last step's: taken as the trace ends). Every
     * step after the first queues the same copies; the tokens at least go
     * in and the losses out. */
    CHECK(info[s].have_bytes);
    CHECK(info[s].bytes[ZO_TRACE_BYTES_H2D] > 0 && info[s].bytes[ZO_TRACE_BYTES_D2H] > 0);
    if (s > 1)
      for (int w = ZO_TRACE_BYTES_H2D; w <= ZO_TRACE_BYTES_D2H; w++) CHECK(info[s].bytes[w] == info[1].bytes[w]);
  }
  printf("  %s: step 2 issued %llu bytes h2d, %llu d2h, NVMe %llu read, %llu written\n", name,
         (unsigned long long)info[1].bytes[0], (unsigned long long)info[1].bytes[1],
         (unsigned long long)info[1].bytes[2], (unsigned long long)info[1].bytes[3]);
  return err;
}

static int test_device(void) {
  const bool need[3] = {false, false, true}; /* the next forward waits for the updates */
  return traced_run("device", NULL, 0, need);
}

static int test_optimizer_cpu_stage2(void) {
  const char *const sets[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu",
                              "gradient_accumulation_steps=2"};
  const bool need[3] = {true, true, true};
  return traced_run("optimizer-cpu", sets, ZO_ARRAY_LEN(sets), need);
}

static int test_optimizer_nvme(void) {
  if (!fx.have_nvme) return ZO_TEST_SKIP;
  const char *const sets[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=nvme"};
  const bool need[3] = {true, true, true};
  return traced_run("optimizer-nvme", sets, ZO_ARRAY_LEN(sets), need);
}

static int test_params_cpu(void) {
  const char *const sets[] = {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
                              "zero_optimization.offload_param.device=cpu"};
  const bool need[3] = {true, true, true};
  return traced_run("params-cpu", sets, ZO_ARRAY_LEN(sets), need);
}

/* A file that is not a trace is refused by name. */
static int test_summary_refuses_garbage(void) {
  char path[400];
  snprintf(path, sizeof path, "%s/not-a-trace.json", fx.tmpdir);
  FILE *f = fopen(path, "w");
  CHECK(f && fputs("{\"traceEvents\": [}", f) >= 0 && fclose(f) == 0);
  struct zo_trace_step_info info[1];
  int n = 0;
  CHECK(zo_trace_summarize(path, info, 1, &n) == -EINVAL && strstr(zo_last_error(), path));
  CHECK(f = fopen(path, "w"));
  CHECK(fputs("{\"traceEvents\": []}", f) >= 0 && fclose(f) == 0);
  CHECK(zo_trace_summarize(path, info, 1, &n) == -EINVAL && strstr(zo_last_error(), "no traced step"));
  return 0;
}

/* A trace path whose directory is missing stops the run before step 1,
 * naming the key and the directory, and writes nothing. */
static int test_trace_path_missing_dir(void) {
  char tset[400], met[400];
  snprintf(tset, sizeof tset, "engine.trace.path=%s/no-such-dir/t.json", fx.tmpdir);
  snprintf(met, sizeof met, "log.metrics_path=%s/missing-dir.jsonl", fx.tmpdir);
  const char *const sets[] = {tset, met};
  struct zo_config cfg;
  CHECK(load(&cfg, sets, ZO_ARRAY_LEN(sets)) == 0);
  struct zo_train_opts opts = {0};
  const int err = zo_train(&cfg, &opts);
  zo_config_free(&cfg);
  CHECK(err == -ENOENT && strstr(zo_last_error(), "engine.trace.path") && strstr(zo_last_error(), "no-such-dir"));
  double losses[4];
  char path[400];
  snprintf(path, sizeof path, "%s/missing-dir.jsonl", fx.tmpdir);
  CHECK(zo_etest_read_metric(path, "loss", losses, 4) <= 0); /* no step ran */
  return 0;
}

int main(int argc, char **argv) {
  const bool delay = zo_etest_delay_mode();
  if (zo_etest_files_init(&fx, "trace")) return 1;
  static const struct zo_test tests[] = {
      ZO_TEST(device),
      ZO_TEST(optimizer_cpu_stage2),
      ZO_TEST(optimizer_nvme),
      ZO_TEST(params_cpu),
      ZO_TEST(summary_refuses_garbage),
      ZO_TEST(trace_path_missing_dir),
  };
  const struct zo_test_counts counts = zo_test_run(tests, ZO_ARRAY_LEN(tests));
  zo_trace_free();
  return zo_etest_finish(fx.tmpdir, counts, delay, argc, argv);
}
