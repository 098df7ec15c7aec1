/* Trace files (zo/trace_file.h): the recorder's events as Chrome
 * trace-event JSON through jansson, and the per-step summary computed back
 * from such a file: each track's busy and waiting time, the copy and NVMe
 * time hidden behind compute, the critical path (from the step's last task
 * back through each task's predecessor on its track, or through the task a
 * wait waited for), and the compute track's longest waits. */
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
  const char *slash = strrchr(path, '/');
  char dir[4096];
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == path) snprintf(dir, sizeof dir, "/");
  else if ((size_t)(slash - path) >= sizeof dir) return zo_error(-ENAMETOOLONG, "engine.trace.path %.80s...: too long", path);
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  struct stat st;
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

/* ---- reading and summarizing --------------------------------------------- */

struct rspan {
  double t0, t1; /* us */
  int tid;
  bool wait;
  long seq;      /* the task's position on its stream */
  long on_seq;   /* waits: the position waited for on on_tid */
  int on_tid;    /* waits: the track waited on */
  int index;
  const char *name;
};

struct rtrace {
  struct rspan *sp;
  size_t n;
  char tracks[ZO_TRACE_MAX_TRACKS + 1][ZO_TRACE_NAME_MAX];
  double (*nvme)[2]; /* async NVMe requests [t0, t1) */
  size_t n_nvme;
  double (*steps)[2];
  long *step_no;
  int n_steps;
};

static int cmp_rspan(const void *a, const void *b) {
  const struct rspan *x = a, *y = b;
  if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
  return (x->t0 > y->t0) - (x->t0 < y->t0);
}

static double jnum(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_number(v) ? json_number_value(v) : 0.0;
}

static int jint(json_t *o, const char *k, int def) {
  json_t *v = json_object_get(o, k);
  return json_is_integer(v) ? (int)json_integer_value(v) : def;
}

static int read_trace(const char *path, json_t **root_out, struct rtrace *r) {
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root) return zo_error(-EINVAL, "trace %s:%d: %s", path, je.line, je.text);
  *root_out = root;
  json_t *evs = json_object_get(root, "traceEvents");
  if (!json_is_array(evs))
    return zo_error(-EINVAL, "trace %s: no \"traceEvents\" array (not a zoffload trace file)", path);
  const size_t n = json_array_size(evs);
  r->sp = calloc(n ? n : 1, sizeof *r->sp);
  r->nvme = calloc(n ? n : 1, sizeof *r->nvme);
  r->steps = calloc(n ? n : 1, sizeof *r->steps);
  r->step_no = calloc(n ? n : 1, sizeof *r->step_no);
  double *open = calloc(n ? n + 1 : 1, sizeof *open); /* async begin time by id */
  if (!r->sp || !r->nvme || !r->steps || !r->step_no || !open) {
    free(open);
    return zo_error(-ENOMEM, "trace %s: out of host memory for %zu events", path, n);
  }
  size_t i;
  json_t *e;
  json_array_foreach(evs, i, e) {
    const char *ph = json_string_value(json_object_get(e, "ph"));
    const char *cat = json_string_value(json_object_get(e, "cat"));
    const char *name = json_string_value(json_object_get(e, "name"));
    json_t *args = json_object_get(e, "args");
    if (!ph || !name) continue;
    const int tid = jint(e, "tid", -1);
    if (!strcmp(ph, "M") && !strcmp(name, "thread_name") && tid >= 0 && tid <= ZO_TRACE_MAX_TRACKS) {
      const char *tn = json_string_value(json_object_get(args, "name"));
      if (tn) snprintf(r->tracks[tid], ZO_TRACE_NAME_MAX, "%s", tn);
    } else if (!strcmp(ph, "X") && cat && !strcmp(cat, "step")) {
      r->steps[r->n_steps][0] = jnum(e, "ts");
      r->steps[r->n_steps][1] = jnum(e, "ts") + jnum(e, "dur");
      r->step_no[r->n_steps] = jint(args, "step", r->n_steps + 1);
      r->n_steps++;
    } else if (!strcmp(ph, "X") && cat && tid >= 0 && tid < ZO_TRACE_MAX_TRACKS) {
      const bool wait = !strcmp(cat, "wait");
      r->sp[r->n++] = (struct rspan){jnum(e, "ts"), jnum(e, "ts") + jnum(e, "dur"), tid, wait, jint(args, "seq", -1),
                                     wait ? jint(args, "on_seq", -1) : -1, wait ? jint(args, "on_tid", -1) : -1,
                                     jint(args, "index", -1), name};
    } else if (cat && !strcmp(cat, "nvme")) {
      const long id = jint(e, "id", 0);
      if (id <= 0 || (size_t)id > n) continue;
      if (!strcmp(ph, "b")) open[id] = jnum(e, "ts");
      else if (!strcmp(ph, "e")) {
        r->nvme[r->n_nvme][0] = open[id];
        r->nvme[r->n_nvme++][1] = jnum(e, "ts");
      }
    }
  }
  free(open);
  qsort(r->sp, r->n, sizeof *r->sp, cmp_rspan);
  return 0;
}

static int cmp_iv(const void *a, const void *b) {
  const double *x = a, *y = b;
  return (x[0] > y[0]) - (x[0] < y[0]);
}

/* Merges intervals in place (sorted, disjoint); returns their count. */
static size_t merge(double (*iv)[2], size_t n) {
  qsort(iv, n, sizeof *iv, cmp_iv);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (m && iv[i][0] <= iv[m - 1][1]) {
      if (iv[i][1] > iv[m - 1][1]) iv[m - 1][1] = iv[i][1];
    } else {
      iv[m][0] = iv[i][0];
      iv[m++][1] = iv[i][1];
    }
  }
  return m;
}

static double total(double (*iv)[2], size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += iv[i][1] - iv[i][0];
  return s;
}

/* Length of the intersection of two merged interval lists. */
static double overlap(double (*a)[2], size_t na, double (*b)[2], size_t nb) {
  double s = 0;
  for (size_t i = 0, j = 0; i < na && j < nb;) {
    const double lo = a[i][0] > b[j][0] ? a[i][0] : b[j][0], hi = a[i][1] < b[j][1] ? a[i][1] : b[j][1];
    if (hi > lo) s += hi - lo;
    if (a[i][1] < b[j][1]) i++;
    else j++;
  }
  return s;
}

static double clip(const struct rspan *s, double lo, double hi) {
  const double a = s->t0 > lo ? s->t0 : lo, b = s->t1 < hi ? s->t1 : hi;
  return b > a ? b - a : 0.0;
}

static bool is_copy_io(const char *track) {
  return !strcmp(track, "h2d") || !strcmp(track, "d2h") || !strcmp(track, "nvme_io");
}

/* The task (span or wait) at position seq of track tid. */
static const struct rspan *find_span(const struct rtrace *r, int tid, long seq) {
  if (seq <= 0) return NULL;
  for (size_t i = 0; i < r->n; i++)
    if (r->sp[i].tid == tid && r->sp[i].seq == seq) return &r->sp[i];
  return NULL;
}

static void summarize_step(const struct rtrace *r, int k, struct zo_trace_step_info *o) {
  const double lo = r->steps[k][0], hi = r->steps[k][1];
  memset(o, 0, sizeof *o);
  o->step = r->step_no[k];
  o->step_ms = (hi - lo) / 1000.0;
  int compute = -1;
  for (int t = 0; t < ZO_TRACE_MAX_TRACKS; t++) {
    if (!r->tracks[t][0] || !strcmp(r->tracks[t], "steps")) continue;
    if (!strcmp(r->tracks[t], "compute")) compute = t;
    struct zo_trace_track_time *tt = &o->tracks[o->n_tracks];
    snprintf(tt->name, sizeof tt->name, "%s", r->tracks[t]);
    for (size_t i = 0; i < r->n; i++) {
      const struct rspan *s = &r->sp[i];
      if (s->tid != t) continue;
      const double c = clip(s, lo, hi);
      if (c <= 0) continue;
      if (s->wait) tt->wait_ms += c / 1000.0;
      else {
        tt->busy_ms += c / 1000.0;
        tt->n_spans++;
      }
    }
    if (tt->n_spans || tt->wait_ms > 0) o->n_tracks++;
  }
  /* copy and I/O time hidden behind compute */
  double(*cio)[2] = calloc(r->n + r->n_nvme + 1, sizeof *cio), (*cmp)[2] = calloc(r->n + 1, sizeof *cmp);
  size_t nc = 0, nm = 0;
  if (cio && cmp) {
    for (size_t i = 0; i < r->n; i++) {
      const struct rspan *s = &r->sp[i];
      if (s->wait || clip(s, lo, hi) <= 0) continue;
      const double a = s->t0 > lo ? s->t0 : lo, b = s->t1 < hi ? s->t1 : hi;
      if (is_copy_io(r->tracks[s->tid])) {
        cio[nc][0] = a;
        cio[nc++][1] = b;
      } else if (s->tid == compute) {
        cmp[nm][0] = a;
        cmp[nm++][1] = b;
      }
    }
    for (size_t i = 0; i < r->n_nvme; i++) {
      const double a = r->nvme[i][0] > lo ? r->nvme[i][0] : lo, b = r->nvme[i][1] < hi ? r->nvme[i][1] : hi;
      if (b <= a) continue;
      cio[nc][0] = a;
      cio[nc++][1] = b;
    }
    nc = merge(cio, nc);
    nm = merge(cmp, nm);
    o->copy_io_ms = total(cio, nc) / 1000.0;
    o->hidden_ms = overlap(cio, nc, cmp, nm) / 1000.0;
  }
  free(cio);
  free(cmp);
  /* critical path: from the step's last-finishing span back */
  const struct rspan *cur = NULL;
  for (size_t i = 0; i < r->n; i++) {
    const struct rspan *s = &r->sp[i];
    if (!s->wait && s->t1 <= hi + 1e-3 && s->t0 >= lo && (!cur || s->t1 > cur->t1)) cur = s;
  }
  double per_track[ZO_TRACE_MAX_TRACKS] = {0};
  for (int guard = 0; cur && cur->t0 >= lo && guard < 1000000; guard++) {
    if (!cur->wait) {
      o->critical_ms += (cur->t1 - cur->t0) / 1000.0;
      o->critical_n++;
      per_track[cur->tid] += (cur->t1 - cur->t0) / 1000.0;
    }
    /* the item before cur on its track (spans are sorted by track, start) */
    const struct rspan *prev = NULL;
    for (const struct rspan *p = cur - 1; p >= r->sp && p->tid == cur->tid; p--)
      if (p->t1 <= cur->t0 + 1e-3) {
        prev = p;
        break;
      }
    if (prev && prev->wait) {
      const struct rspan *w = find_span(r, prev->on_tid, prev->on_seq);
      cur = w && w->t1 >= prev->t0 ? w : prev; /* a wait that blocked leads to its task */
    } else {
      cur = prev;
    }
  }
  size_t len = 0;
  for (int t = 0; t < ZO_TRACE_MAX_TRACKS && len < sizeof o->critical_tracks; t++)
    if (per_track[t] > 0)
      len += (size_t)snprintf(o->critical_tracks + len, sizeof o->critical_tracks - len, "%s%s %.1f ms",
                              len ? ", " : "", r->tracks[t], per_track[t]);
  /* the compute track's longest waits */
  for (size_t i = 0; i < r->n; i++) {
    const struct rspan *s = &r->sp[i];
    if (!s->wait || s->tid != compute || clip(s, lo, hi) <= 0) continue;
    const double ms = clip(s, lo, hi) / 1000.0;
    if (o->n_top == ZO_TRACE_TOP_WAITS && o->top[ZO_TRACE_TOP_WAITS - 1].ms >= ms) continue;
    int at = o->n_top < ZO_TRACE_TOP_WAITS ? o->n_top++ : ZO_TRACE_TOP_WAITS - 1;
    for (; at > 0 && o->top[at - 1].ms < ms; at--) o->top[at] = o->top[at - 1];
    struct zo_trace_top_wait *tw = &o->top[at];
    tw->ms = ms;
    snprintf(tw->on_track, sizeof tw->on_track, "%s",
             s->on_tid >= 0 && s->on_tid < ZO_TRACE_MAX_TRACKS ? r->tracks[s->on_tid] : "?");
    const struct rspan *w = find_span(r, s->on_tid, s->on_seq);
    if (w && w->index >= 0) snprintf(tw->on_name, sizeof tw->on_name, "%s [%d]", w->name, w->index);
    else snprintf(tw->on_name, sizeof tw->on_name, "%s", w ? w->name : "(not traced)");
  }
}

int zo_trace_summarize(const char *path, struct zo_trace_step_info *steps, int max_steps, int *n_steps) {
  struct rtrace r = {0};
  json_t *root = NULL;
  int err = read_trace(path, &root, &r);
  *n_steps = 0;
  if (!err && r.n_steps == 0) err = zo_error(-EINVAL, "trace %s: no traced step (no event of cat \"step\")", path);
  for (int k = 0; !err && k < r.n_steps && k < max_steps; k++) summarize_step(&r, k, &steps[(*n_steps)++]);
  free(r.sp);
  free(r.nvme);
  free(r.steps);
  free(r.step_no);
  json_decref(root);
  return err;
}

int zo_trace_summary_print(const char *path, FILE *out) {
  enum { MAX_STEPS = 64 };
  struct zo_trace_step_info *st = calloc(MAX_STEPS, sizeof *st);
  if (!st) return zo_error(-ENOMEM, "trace summary: out of host memory");
  int n = 0, err = zo_trace_summarize(path, st, MAX_STEPS, &n);
  for (int k = 0; k < n && !err; k++) {
    const struct zo_trace_step_info *s = &st[k];
    fprintf(out, "step %ld: %.1f ms\n", s->step, s->step_ms);
    fprintf(out, "  %-14s %10s %6s %10s %6s\n", "track", "busy ms", "busy%", "wait ms", "spans");
    for (int t = 0; t < s->n_tracks; t++)
      fprintf(out, "  %-14s %10.1f %5.0f%% %10.1f %6d\n", s->tracks[t].name, s->tracks[t].busy_ms,
              s->step_ms > 0 ? 100.0 * s->tracks[t].busy_ms / s->step_ms : 0.0, s->tracks[t].wait_ms,
              s->tracks[t].n_spans);
    fprintf(out, "  copies and NVMe I/O: %.1f ms, %.1f ms (%.0f%%) hidden behind compute\n", s->copy_io_ms,
            s->hidden_ms, s->copy_io_ms > 0 ? 100.0 * s->hidden_ms / s->copy_io_ms : 100.0);
    fprintf(out, "  critical path: %.1f ms in %d tasks (%s)\n", s->critical_ms, s->critical_n,
            s->critical_tracks[0] ? s->critical_tracks : "none");
    for (int i = 0; i < s->n_top; i++)
      fprintf(out, "  compute waited %.1f ms for %s: %s\n", s->top[i].ms, s->top[i].on_track, s->top[i].on_name);
  }
  free(st);
  return err;
}
