/* Trace files (zo/trace_file.h): the recorder's events as Chrome
 * trace-event JSON through jansson (the summary read back from such a file
 * is trace_summary.c's). */
#include "zo/trace_file.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo/fsutil.h"

/* ---- writing ------------------------------------------------------------- */

struct span_key {
  int track;
  uint64_t seq;
  const struct zo_trace_event *ev;
};

struct collect {
  const struct zo_trace_event **ev;
  size_t n, cap;
  uint64_t origin;
  int err;
};

static void collect_fn(const struct zo_trace_event *ev, void *ctx) {
  struct collect *c = ctx;
  if (c->err) return;
  if (c->n == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 4096;
    const struct zo_trace_event **p = realloc(c->ev, cap * sizeof *p);
    if (!p) {
      c->err = -ENOMEM;
      return;
    }
    c->ev = p;
    c->cap = cap;
  }
  c->ev[c->n++] = ev;
  if (ev->t0 < c->origin) c->origin = ev->t0;
}

static int cmp_key(const void *a, const void *b) {
  const struct span_key *x = a, *y = b;
  if (x->track != y->track) return x->track < y->track ? -1 : 1;
  return (x->seq > y->seq) - (x->seq < y->seq);
}

static double us(uint64_t t, uint64_t origin) { return (double)(t - origin) / 1000.0; }

/* "name [index]" of a span. */
static void span_title(const struct zo_trace_event *ev, char *buf, size_t size) {
  if (ev->index >= 0) snprintf(buf, size, "%s [%d]", ev->name, ev->index);
  else snprintf(buf, size, "%s", ev->name);
}

static int add(json_t *arr, json_t *obj) {
  if (!obj || json_array_append_new(arr, obj)) return zo_error(-ENOMEM, "trace: out of host memory");
  return 0;
}

int zo_trace_write_json(const char *path) {
  struct collect c = {.origin = UINT64_MAX};
  zo_trace_foreach(collect_fn, &c);
  if (c.err) {
    free(c.ev);
    return zo_error(c.err, "trace %s: out of host memory collecting %zu events", path, c.n);
  }
  if (c.n == 0) c.origin = 0;
  /* (track, seq) -> span, so that each wait names what it waited for */
  size_t n_keys = 0;
  struct span_key *keys = malloc((c.n ? c.n : 1) * sizeof *keys);
  json_t *root = json_object(), *arr = json_array();
  int err = 0;
  if (!keys || !root || !arr) {
    err = zo_error(-ENOMEM, "trace %s: out of host memory", path);
    goto out;
  }
  for (size_t i = 0; i < c.n; i++)
    if (c.ev[i]->kind == ZO_TRACE_SPAN || (c.ev[i]->kind == ZO_TRACE_WAIT && c.ev[i]->seq))
      keys[n_keys++] = (struct span_key){c.ev[i]->track, c.ev[i]->seq, c.ev[i]};
  qsort(keys, n_keys, sizeof *keys, cmp_key);
  err = add(arr, json_pack("{s:s, s:s, s:i, s:{s:s}}", "name", "process_name", "ph", "M", "pid", 1, "args", "name",
                           "zoffload"));
  char name[ZO_TRACE_NAME_MAX];
  int step_tid = 0;
  for (int t = 0; t < ZO_TRACE_MAX_TRACKS && !err; t++) {
    if (!zo_trace_track_name(t, name, sizeof name)) break;
    err = add(arr, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name", "ph", "M", "pid", 1, "tid", t,
                             "args", "name", name));
    if (!err)
      err = add(arr, json_pack("{s:s, s:s, s:i, s:i, s:{s:i}}", "name", "thread_sort_index", "ph", "M", "pid", 1,
                               "tid", t, "args", "sort_index", t));
    step_tid = t + 1;
  }
  if (!err)
    err = add(arr, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name", "ph", "M", "pid", 1, "tid",
                             step_tid, "args", "name", "steps"));
  long async_id = 0;
  for (size_t i = 0; i < c.n && !err; i++) {
    const struct zo_trace_event *ev = c.ev[i];
    const double ts = us(ev->t0, c.origin), dur = (double)(ev->t1 - ev->t0) / 1000.0;
    switch (ev->kind) {
    case ZO_TRACE_SPAN:
      err = add(arr, json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:{s:i, s:I, s:I, s:I}}", "name", ev->name,
                               "cat", "op", "ph", "X", "ts", ts, "dur", dur, "pid", 1, "tid", ev->track, "args",
                               "index", ev->index, "bytes", (json_int_t)ev->bytes, "flops", (json_int_t)ev->flops,
                               "seq", (json_int_t)ev->seq));
      break;
    case ZO_TRACE_WAIT: {
      struct span_key k = {ev->src_track, ev->src_seq, NULL};
      const struct span_key *hit = bsearch(&k, keys, n_keys, sizeof *keys, cmp_key);
      char on[96] = "(not traced)", src[ZO_TRACE_NAME_MAX] = "?";
      if (hit) span_title(hit->ev, on, sizeof on);
      zo_trace_track_name(ev->src_track, src, sizeof src);
      err = add(arr, json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:{s:I, s:s, s:i, s:I, s:s}}", "name", "wait",
                               "cat", "wait", "ph", "X", "ts", ts, "dur", dur, "pid", 1, "tid", ev->track, "args",
                               "seq", (json_int_t)ev->seq, "on_track", src, "on_tid", ev->src_track, "on_seq",
                               (json_int_t)ev->src_seq, "on", on));
      break;
    }
    case ZO_TRACE_ASYNC:
      async_id++;
      err = add(arr, json_pack("{s:s, s:s, s:s, s:I, s:f, s:i, s:i, s:{s:i, s:I}}", "name", ev->name, "cat", "nvme",
                               "ph", "b", "id", (json_int_t)async_id, "ts", ts, "pid", 1, "tid", ev->track, "args",
                               "index", ev->index, "bytes", (json_int_t)ev->bytes));
      if (!err)
        err = add(arr, json_pack("{s:s, s:s, s:s, s:I, s:f, s:i, s:i}", "name", ev->name, "cat", "nvme", "ph", "e",
                                 "id", (json_int_t)async_id, "ts", us(ev->t1, c.origin), "pid", 1, "tid",
                                 ev->track));
      break;
    case ZO_TRACE_COUNTER:
      err = add(arr, json_pack("{s:s, s:s, s:f, s:i, s:{s:I}}", "name", ev->name, "ph", "C", "ts", ts, "pid", 1,
                               "args", "bytes", (json_int_t)ev->bytes));
      break;
    case ZO_TRACE_STEP: {
      char sn[32];
      snprintf(sn, sizeof sn, "step %d", ev->index);
      err = add(arr, json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:{s:i}}", "name", sn, "cat", "step", "ph", "X",
                               "ts", ts, "dur", dur, "pid", 1, "tid", step_tid, "args", "step", ev->index));
      break;
    }
    default:
      break;
    }
  }
  if (err) goto out;
  if (json_object_set(root, "traceEvents", arr) || json_object_set_new(root, "displayTimeUnit", json_string("ms")) ||
      json_object_set_new(root, "otherData", json_pack("{s:s, s:I}", "clock", "CLOCK_MONOTONIC (CPU backend workers)",
                                                       "dropped_events", (json_int_t)zo_trace_dropped()))) {
    err = zo_error(-ENOMEM, "trace %s: out of host memory", path);
    goto out;
  }
  char *text = json_dumps(root, JSON_COMPACT);
  if (!text) {
    err = zo_error(-ENOMEM, "trace %s: out of host memory formatting %zu events", path, c.n);
    goto out;
  }
  err = zo_write_file_atomic(path, text, strlen(text));
  free(text);
  if (err) err = zo_error(err, "trace %s: %s", path, strerror(-err));

out:
  json_decref(arr);
  json_decref(root);
  free(keys);
  free(c.ev);
  return err;
}

/* ---- tracing a run's steps ----------------------------------------------- */

void zo_tracer_init(struct zo_tracer *tr, const char *path, long first, long n) {
  *tr = (struct zo_tracer){.path = path, .first = first, .last = first + n - 1};
}

int zo_trace_path_check(const char *path) {
  /* A device, FIFO or directory there would make the write after the traced
   * steps fail (it is never renamed over): say so before step 1. */
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
    return zo_error(-EINVAL, "engine.trace.path %s is %s, not a regular file (the "
                    "trace is written beside it and renamed over it); give a file path", path,
                    S_ISDIR(st.st_mode) ? "a directory" : "a device, FIFO or socket");
  const char *slash = strrchr(path, '/');
  char dir[4096];
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == path) snprintf(dir, sizeof dir, "/");
  else if ((size_t)(slash - path) >= sizeof dir) return zo_error(-ENAMETOOLONG, "engine.trace.path %.80s...: too long", path);
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  if (stat(dir, &st) != 0)
    return zo_error(-errno, "engine.trace.path %s: its directory %s: %s (the trace is written there after the "
                            "traced steps; create it first)", path, dir, strerror(errno));
  if (!S_ISDIR(st.st_mode)) return zo_error(-ENOTDIR, "engine.trace.path %s: %s is not a directory", path, dir);
  if (access(dir, W_OK | X_OK) != 0)
    return zo_error(-errno, "engine.trace.path %s: cannot write in %s: %s", path, dir, strerror(errno));
  return 0;
}

bool zo_tracer_step(struct zo_tracer *tr, long step) {
  if (!tr->path || !tr->path[0] || tr->written || step < tr->first || step > tr->last) return false;
  const uint64_t now = zo_trace_now();
  if (tr->cur) zo_trace_step(tr->cur, tr->t_cur, now);
  else zo_trace_start();
  tr->cur = step;
  tr->t_cur = zo_trace_now();
  return true;
}

bool zo_tracer_due(const struct zo_tracer *tr, long step, long last_step_of_run) {
  return tr->cur && !tr->written && (step >= tr->last || step >= last_step_of_run);
}

int zo_tracer_end(struct zo_tracer *tr, FILE *out) {
  if (!tr->cur || tr->written) return 0;
  zo_trace_step(tr->cur, tr->t_cur, zo_trace_now());
  zo_trace_stop();
  tr->written = true;
  int err = zo_trace_write_json(tr->path);
  if (!err && out)
    fprintf(out, "trace: steps %ld-%ld written to %s (open in Perfetto or chrome://tracing; zoffload trace "
                 "summary %s)\n",
            tr->first, tr->cur, tr->path, tr->path);
  return err;
}
