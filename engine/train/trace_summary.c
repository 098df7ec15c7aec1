/* `zoffload trace summary` (zo/trace_file.h): a trace file read back as a
 * stream, one event at a time (a 1 GB trace must not become a 12 GB
 * jansson tree): the top-level object or array is scanned by hand and only
 * each event object is parsed, so memory grows with the compact spans kept
 * (about 60 bytes an event, names interned), not with the file. The trace
 * is validated as it is read: a negative duration, an NVMe request that
 * ends before it begins, two events of one track at once (a duplicated or
 * corrupted trace) or overlapping steps are refused naming the events, so
 * a summary never reports more than 100% busy. Then, per step: each
 * track's busy and waiting time, the copy and NVMe time hidden behind
 * compute, the critical path (from the step's last task back through each
 * task's predecessor on its track, or through the task a wait waited for),
 * and the compute track's longest waits. */
#include "zo/trace_file.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct rspan {
  double t0, t1; /* us */
  long seq;      /* the task's position on its stream */
  long on_seq;   /* waits: the position waited for on on_tid */
  int tid;
  int on_tid;    /* waits: the track waited on */
  int index;
  uint32_t name; /* offset in rtrace.names */
  bool wait;
};

struct rstep {
  double t0, t1;
  long no;
};

/* One sample of a "... bytes issued" counter (ZO_TRACE_BYTES_*). */
struct rcounter {
  double ts; /* us */
  int which;
  uint64_t value;
};

static const char *const byte_counters[4] = {"h2d bytes issued", "d2h bytes issued", "nvme read bytes issued",
                                             "nvme write bytes issued"};

struct rtrace {
  const char *path; /* for messages */
  struct rspan *sp;
  size_t n, cap;
  char tracks[ZO_TRACE_MAX_TRACKS + 1][ZO_TRACE_NAME_MAX];
  double (*nvme)[2]; /* async NVMe requests [t0, t1) */
  size_t n_nvme, cap_nvme;
  double *open;      /* async begin time by id, NAN: none open */
  size_t cap_open;
  struct rstep *steps;
  size_t n_steps, cap_steps;
  char *names;       /* interned names, NUL-terminated, back to back */
  size_t names_n, names_cap;
  uint32_t *name_slot; /* open addressing: offset + 1, 0 empty */
  size_t slot_mask, n_names;
  const struct rspan **by_seq; /* spans sorted by (tid, seq) for find_span */
  struct rcounter *ctr;        /* the scheduler's "... bytes issued" counters, in file order */
  size_t n_ctr, cap_ctr;
};

enum { MAX_EVENT_BYTES = 1 << 20, MAX_NAME = 256 };

static int grow(void **p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 1024;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * size);
  if (!q) return -ENOMEM;
  *p = q;
  *cap = c;
  return 0;
}

static uint64_t name_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

/* The offset of name (cut to MAX_NAME bytes) in r->names, added once. */
static int intern(struct rtrace *r, const char *name, uint32_t *off) {
  char cut[MAX_NAME];
  snprintf(cut, sizeof cut, "%s", name);
  if (2 * (r->n_names + 1) > r->slot_mask + 1 || !r->name_slot) {
    const size_t cap = r->name_slot ? 2 * (r->slot_mask + 1) : 256;
    uint32_t *s = calloc(cap, sizeof *s);
    if (!s) return -ENOMEM;
    for (size_t i = 0; r->name_slot && i <= r->slot_mask; i++) {
      if (!r->name_slot[i]) continue;
      size_t j = name_hash(r->names + r->name_slot[i] - 1) & (cap - 1);
      while (s[j]) j = (j + 1) & (cap - 1);
      s[j] = r->name_slot[i];
    }
    free(r->name_slot);
    r->name_slot = s;
    r->slot_mask = cap - 1;
  }
  size_t i = name_hash(cut) & r->slot_mask;
  for (; r->name_slot[i]; i = (i + 1) & r->slot_mask)
    if (!strcmp(r->names + r->name_slot[i] - 1, cut)) {
      *off = r->name_slot[i] - 1;
      return 0;
    }
  const size_t len = strlen(cut) + 1;
  if (r->names_n + len >= UINT32_MAX) return -ENOMEM;
  if (grow((void **)&r->names, &r->names_cap, r->names_n + len, 1)) return -ENOMEM;
  memcpy(r->names + r->names_n, cut, len);
  *off = (uint32_t)r->names_n;
  r->name_slot[i] = (uint32_t)r->names_n + 1;
  r->names_n += len;
  r->n_names++;
  return 0;
}

static const char *name_of(const struct rtrace *r, const struct rspan *s) { return r->names + s->name; }

/* A number field; false when it is missing or not a finite number. */
static bool jnum(json_t *o, const char *k, double *v) {
  json_t *x = json_object_get(o, k);
  if (!json_is_number(x)) return false;
  *v = json_number_value(x);
  return isfinite(*v);
}

static long jlong(json_t *o, const char *k, long def) {
  json_t *v = json_object_get(o, k);
  return json_is_integer(v) ? (long)json_integer_value(v) : def;
}

static int bad_event(const struct rtrace *r, size_t idx, const char *name, const char *what) {
  return zo_error(-EINVAL, "trace %s: event %zu (\"%.64s\") %s", r->path, idx, name, what);
}

/* One complete event ("X"): a span, a wait or a step. */
static int take_complete(struct rtrace *r, json_t *e, size_t idx, const char *name, const char *cat, int tid) {
  double ts, dur;
  if (!jnum(e, "ts", &ts) || !jnum(e, "dur", &dur))
    return bad_event(r, idx, name, "has no finite numeric \"ts\" and \"dur\"");
  if (dur < 0) {
    char what[96];
    snprintf(what, sizeof what, "has a negative duration (%g us)", dur);
    return bad_event(r, idx, name, what);
  }
  json_t *args = json_object_get(e, "args");
  if (!strcmp(cat, "step")) {
    if (grow((void **)&r->steps, &r->cap_steps, r->n_steps + 1, sizeof *r->steps)) return -ENOMEM;
    r->steps[r->n_steps] = (struct rstep){ts, ts + dur, jlong(args, "step", (long)r->n_steps + 1)};
    r->n_steps++;
    return 0;
  }
  if (tid < 0 || tid >= ZO_TRACE_MAX_TRACKS) return 0; /* not one of ours */
  if (grow((void **)&r->sp, &r->cap, r->n + 1, sizeof *r->sp)) return -ENOMEM;
  const bool wait = !strcmp(cat, "wait");
  const long on_tid = wait ? jlong(args, "on_tid", -1) : -1;
  struct rspan *s = &r->sp[r->n];
  *s = (struct rspan){ts, ts + dur, jlong(args, "seq", -1), wait ? jlong(args, "on_seq", -1) : -1, tid,
                      on_tid >= -1 && on_tid < ZO_TRACE_MAX_TRACKS ? (int)on_tid : -1,
                      (int)jlong(args, "index", -1), 0, wait};
  if (intern(r, name, &s->name)) return -ENOMEM;
  r->n++;
  return 0;
}

/* An NVMe request's begin or end ("b"/"e", cat "nvme", ids 1, 2, ...). */
static int take_async(struct rtrace *r, json_t *e, size_t idx, const char *name, const char *ph) {
  const long id = jlong(e, "id", 0);
  double ts;
  if (id <= 0 || (size_t)id > idx + 1) return 0; /* the writer numbers them from 1, one per request */
  if (!jnum(e, "ts", &ts)) return bad_event(r, idx, name, "has no finite numeric \"ts\"");
  const size_t old = r->cap_open;
  if (grow((void **)&r->open, &r->cap_open, (size_t)id + 1, sizeof *r->open)) return -ENOMEM;
  for (size_t k = old; k < r->cap_open; k++) r->open[k] = NAN;
  if (!strcmp(ph, "b")) {
    if (!isnan(r->open[id])) return bad_event(r, idx, name, "begins an NVMe request whose id is already open");
    r->open[id] = ts;
  } else if (!strcmp(ph, "e")) {
    if (isnan(r->open[id])) return bad_event(r, idx, name, "ends an NVMe request that did not begin");
    if (ts < r->open[id]) return bad_event(r, idx, name, "ends an NVMe request before it began");
    if (grow((void **)&r->nvme, &r->cap_nvme, r->n_nvme + 1, sizeof *r->nvme)) return -ENOMEM;
    r->nvme[r->n_nvme][0] = r->open[id];
    r->nvme[r->n_nvme++][1] = ts;
    r->open[id] = NAN;
  }
  return 0;
}

/* A counter sample: kept when it is one of the byte counters. */
static int take_counter(struct rtrace *r, json_t *e, const char *name) {
  int which = -1;
  for (int i = 0; i < 4; i++)
    if (!strcmp(name, byte_counters[i])) which = i;
  double ts;
  const long v = jlong(json_object_get(e, "args"), "bytes", -1);
  if (which < 0 || v < 0 || !jnum(e, "ts", &ts)) return 0;
  if (grow((void **)&r->ctr, &r->cap_ctr, r->n_ctr + 1, sizeof *r->ctr)) return -ENOMEM;
  r->ctr[r->n_ctr++] = (struct rcounter){ts, which, (uint64_t)v};
  return 0;
}

static int take_event(struct rtrace *r, json_t *e, size_t idx) {
  if (!json_is_object(e)) return zo_error(-EINVAL, "trace %s: event %zu is not an object", r->path, idx);
  const char *ph = json_string_value(json_object_get(e, "ph"));
  const char *cat = json_string_value(json_object_get(e, "cat"));
  const char *name = json_string_value(json_object_get(e, "name"));
  if (!ph || !name) return 0; /* not an event the summary reads */
  const long tid = jlong(e, "tid", -1);
  int err = 0;
  if (!strcmp(ph, "M") && !strcmp(name, "thread_name") && tid >= 0 && tid <= ZO_TRACE_MAX_TRACKS) {
    const char *tn = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
    if (tn) snprintf(r->tracks[tid], ZO_TRACE_NAME_MAX, "%s", tn);
  } else if (!strcmp(ph, "X") && cat) {
    err = take_complete(r, e, idx, name, cat, tid >= INT32_MIN && tid <= INT32_MAX ? (int)tid : -1);
  } else if (cat && !strcmp(cat, "nvme")) {
    err = take_async(r, e, idx, name, ph);
  } else if (!strcmp(ph, "C")) {
    err = take_counter(r, e, name);
  }
  if (err == -ENOMEM) err = zo_error(-ENOMEM, "trace %s: out of host memory at event %zu", r->path, idx);
  return err;
}

/* ---- the stream ------------------------------------------------------------ */

struct scan {
  FILE *f;
  const char *path;
  long long off; /* bytes read */
  char *buf;     /* the event being read */
  size_t n, cap;
};

static int sc_get(struct scan *s) {
  const int c = getc_unlocked(s->f);
  if (c != EOF) s->off++;
  return c;
}

static int sc_ws(struct scan *s) {
  int c;
  do c = sc_get(s);
  while (c == ' ' || c == '\t' || c == '\n' || c == '\r');
  return c;
}

static int sc_bad(const struct scan *s, int c, const char *want) {
  if (c == EOF && ferror(s->f)) return zo_error(-EIO, "trace %s: read error at byte %lld", s->path, s->off);
  char found[16];
  if (c == EOF) snprintf(found, sizeof found, "the end");
  else if (c >= 0x20 && c < 0x7f) snprintf(found, sizeof found, "'%c'", c);
  else snprintf(found, sizeof found, "byte 0x%02x", c);
  return zo_error(-EINVAL, "trace %s: byte %lld: expected %s, found %s (not a trace file, or a cut one)", s->path,
                  s->off, want, found);
}

/* The rest of the object or array whose opening c was read: into s->buf
 * when keep (at most MAX_EVENT_BYTES), else skipped. */
static int sc_compound(struct scan *s, int c, bool keep) {
  int depth = 1;
  bool in_str = false, esc = false;
  s->n = 0;
  for (;;) {
    if (keep) {
      if (s->n + 2 > MAX_EVENT_BYTES)
        return zo_error(-EINVAL, "trace %s: byte %lld: an event of over %d bytes (not a trace event)", s->path,
                        s->off, MAX_EVENT_BYTES);
      if (grow((void **)&s->buf, &s->cap, s->n + 2, 1)) return zo_error(-ENOMEM, "trace: out of host memory");
      s->buf[s->n++] = (char)c;
    }
    if (depth == 0) return 0;
    if ((c = sc_get(s)) == EOF) return sc_bad(s, c, "the rest of a JSON value");
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '{' || c == '[') {
      if (++depth > 64) return zo_error(-EINVAL, "trace %s: byte %lld: nested over 64 deep", s->path, s->off);
    } else if (c == '}' || c == ']') {
      depth--;
    }
  }
}

/* A top-level member's key (first byte '"' read); longer keys are cut. */
static int sc_key(struct scan *s, char *key, size_t cap) {
  size_t n = 0;
  bool esc = false;
  for (;;) {
    const int c = sc_get(s);
    if (c == EOF) return sc_bad(s, c, "the rest of a key");
    if (!esc && c == '"') break;
    esc = !esc && c == '\\';
    if (n + 1 < cap) key[n++] = (char)c;
  }
  key[n] = '\0';
  return 0;
}

/* Skips one value whose first byte is c; returns the byte after it. */
static int sc_skip(struct scan *s, int c, int *next) {
  int err = 0;
  if (c == '{' || c == '[') {
    err = sc_compound(s, c, false);
    *next = sc_ws(s);
  } else if (c == '"') {
    char k[1];
    err = sc_key(s, k, sizeof k);
    *next = sc_ws(s);
  } else {
    if (c == EOF || c == ',' || c == '}' || c == ']') return sc_bad(s, c, "a value");
    while ((c = sc_get(s)) != EOF && !strchr(",}] \t\r\n", c)) {}
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') c = sc_ws(s);
    *next = c;
  }
  return err;
}

/* The events of the array whose '[' was read. */
static int sc_events(struct scan *s, struct rtrace *r) {
  int c = sc_ws(s);
  if (c == ']') return 0;
  for (size_t idx = 0;; idx++) {
    if (c != '{') return sc_bad(s, c, "an event object");
    int err = sc_compound(s, c, true);
    if (err) return err;
    json_error_t je;
    json_t *e = json_loadb(s->buf, s->n, 0, &je);
    if (!e) return zo_error(-EINVAL, "trace %s: event %zu (byte %lld): %s", s->path, idx, s->off, je.text);
    err = take_event(r, e, idx);
    json_decref(e);
    if (err) return err;
    c = sc_ws(s);
    if (c == ']') return 0;
    if (c != ',') return sc_bad(s, c, "',' or ']' after an event");
    c = sc_ws(s);
  }
}

/* The file: {"traceEvents": [...], ...} or a bare array of events. */
static int sc_file(struct scan *s, struct rtrace *r) {
  int c = sc_ws(s), err = 0;
  bool found = false;
  if (c == '[') {
    found = true;
    err = sc_events(s, r);
  } else if (c == '{') {
    c = sc_ws(s);
    while (!err && c != '}') {
      char key[32];
      if (c != '"') return sc_bad(s, c, "a key");
      if ((err = sc_key(s, key, sizeof key))) return err;
      if ((c = sc_ws(s)) != ':') return sc_bad(s, c, "':'");
      c = sc_ws(s);
      if (!strcmp(key, "traceEvents")) {
        if (c != '[') return sc_bad(s, c, "the \"traceEvents\" array");
        if (found) return zo_error(-EINVAL, "trace %s: two \"traceEvents\" arrays", s->path);
        found = true;
        if ((err = sc_events(s, r))) return err;
        c = sc_ws(s);
      } else if ((err = sc_skip(s, c, &c))) {
        return err;
      }
      if (c == ',') c = sc_ws(s);
      else if (c != '}') return sc_bad(s, c, "',' or '}'");
    }
  } else {
    return sc_bad(s, c, "a JSON object or array");
  }
  if (err) return err;
  if ((c = sc_ws(s)) != EOF || ferror(s->f)) return sc_bad(s, c, "the end of the file");
  if (!found) return zo_error(-EINVAL, "trace %s: no \"traceEvents\" array (not a zoffload trace file)", s->path);
  return 0;
}

/* ---- validation ------------------------------------------------------------ */

static int cmp_rspan(const void *a, const void *b) {
  const struct rspan *x = a, *y = b;
  if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
  if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
  return (x->t1 > y->t1) - (x->t1 < y->t1);
}

static int cmp_step(const void *a, const void *b) {
  const struct rstep *x = a, *y = b;
  return (x->t0 > y->t0) - (x->t0 < y->t0);
}

static int cmp_seq(const void *a, const void *b) {
  const struct rspan *x = *(const struct rspan *const *)a, *y = *(const struct rspan *const *)b;
  if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
  return (x->seq > y->seq) - (x->seq < y->seq);
}

#define EPS_US 1e-3 /* the writer's times are exact to the nanosecond */

/* A track runs one task at a time and steps follow each other: anything
 * else is a duplicated or corrupted trace, whose busy shares would exceed
 * 100%. Sorts the spans by (track, start) and indexes them by sequence. */
static int validate(struct rtrace *r) {
  if (r->n) qsort(r->sp, r->n, sizeof *r->sp, cmp_rspan);
  for (size_t i = 1; i < r->n; i++) {
    const struct rspan *a = &r->sp[i - 1], *b = &r->sp[i];
    if (a->tid != b->tid || b->t0 >= a->t1 - EPS_US) continue;
    char track[16];
    snprintf(track, sizeof track, "tid %d", b->tid);
    return zo_error(-EINVAL, "trace %s: track %s runs \"%s\" [%.3f, %.3f) us and \"%s\" [%.3f, %.3f) us at once; a "
                             "track runs one task at a time (a duplicated or corrupted trace?)",
                    r->path, r->tracks[b->tid][0] ? r->tracks[b->tid] : track, name_of(r, a), a->t0, a->t1,
                    name_of(r, b), b->t0, b->t1);
  }
  if (r->n_steps) qsort(r->steps, r->n_steps, sizeof *r->steps, cmp_step);
  for (size_t k = 1; k < r->n_steps; k++)
    if (r->steps[k].t0 < r->steps[k - 1].t1 - EPS_US)
      return zo_error(-EINVAL, "trace %s: steps %ld [%.3f, %.3f) us and %ld [%.3f, %.3f) us overlap (a duplicated "
                               "or corrupted trace?)",
                      r->path, r->steps[k - 1].no, r->steps[k - 1].t0, r->steps[k - 1].t1, r->steps[k].no,
                      r->steps[k].t0, r->steps[k].t1);
  if (!(r->by_seq = malloc((r->n ? r->n : 1) * sizeof *r->by_seq)))
    return zo_error(-ENOMEM, "trace %s: out of host memory", r->path);
  for (size_t i = 0; i < r->n; i++) r->by_seq[i] = &r->sp[i];
  if (r->n) qsort(r->by_seq, r->n, sizeof *r->by_seq, cmp_seq);
  return 0;
}

static int read_trace(FILE *f, const char *path, struct rtrace *r) {
  struct scan s = {.f = f, .path = path};
  r->path = path;
  int err = sc_file(&s, r);
  free(s.buf);
  return err ? err : validate(r);
}

static void rtrace_free(struct rtrace *r) {
  free(r->sp);
  free(r->nvme);
  free(r->open);
  free(r->steps);
  free(r->names);
  free(r->name_slot);
  free(r->by_seq);
  free(r->ctr);
}

/* ---- summarizing ----------------------------------------------------------- */

static int cmp_iv(const void *a, const void *b) {
  const double *x = a, *y = b;
  return (x[0] > y[0]) - (x[0] < y[0]);
}

/* Merges intervals in place (sorted, disjoint); returns their count. */
static size_t merge(double (*iv)[2], size_t n) {
  if (n) qsort(iv, n, sizeof *iv, cmp_iv);
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
  const struct rspan key = {.tid = tid, .seq = seq}, *kp = &key;
  const struct rspan *const *hit = bsearch(&kp, r->by_seq, r->n, sizeof *r->by_seq, cmp_seq);
  return hit ? *hit : NULL;
}

/* The first sample of counter `which` after ts (at it too when at_too). */
static const struct rcounter *counter_after(const struct rtrace *r, int which, double ts, bool at_too) {
  const struct rcounter *best = NULL;
  for (size_t i = 0; i < r->n_ctr; i++) {
    const struct rcounter *c = &r->ctr[i];
    if (c->which == which && (c->ts > ts || (at_too && c->ts == ts)) && (!best || c->ts < best->ts)) best = c;
  }
  return best;
}

/* Step k's bytes: each byte counter's first sample in the step (taken as it
 * starts) and the sample after it (the next step's start, or the one taken
 * as the trace ends). */
static void step_bytes(const struct rtrace *r, int k, struct zo_trace_step_info *o) {
  o->have_bytes = r->n_ctr > 0;
  for (int w = 0; w < 4 && o->have_bytes; w++) {
    const struct rcounter *a = counter_after(r, w, r->steps[k].t0, true);
    const struct rcounter *b = a && a->ts <= r->steps[k].t1 ? counter_after(r, w, a->ts, false) : NULL;
    o->have_bytes = b && b->value >= a->value;
    if (o->have_bytes) o->bytes[w] = b->value - a->value;
  }
}

static void summarize_step(const struct rtrace *r, int k, struct zo_trace_step_info *o) {
  const double lo = r->steps[k].t0, hi = r->steps[k].t1;
  memset(o, 0, sizeof *o);
  o->step = r->steps[k].no;
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
    if (w && w->index >= 0) snprintf(tw->on_name, sizeof tw->on_name, "%s [%d]", name_of(r, w), w->index);
    else snprintf(tw->on_name, sizeof tw->on_name, "%s", w ? name_of(r, w) : "(not traced)");
  }
}

int zo_trace_summarize_stream(FILE *f, const char *name, struct zo_trace_step_info *steps, int max_steps,
                               int *n_steps) {
  struct rtrace r = {0};
  int err = read_trace(f, name, &r);
  *n_steps = 0;
  if (!err && r.n_steps == 0) err = zo_error(-EINVAL, "trace %s: no traced step (no event of cat \"step\")", name);
  for (int k = 0; !err && (size_t)k < r.n_steps && k < max_steps; k++) {
    summarize_step(&r, k, &steps[*n_steps]);
    step_bytes(&r, k, &steps[(*n_steps)++]);
  }
  rtrace_free(&r);
  return err;
}

int zo_trace_summarize(const char *path, struct zo_trace_step_info *steps, int max_steps, int *n_steps) {
  *n_steps = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return zo_error(-errno, "trace %s: %s", path, strerror(errno));
  const int err = zo_trace_summarize_stream(f, path, steps, max_steps, n_steps);
  fclose(f);
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
    if (s->have_bytes)
      fprintf(out, "  bytes issued: h2d %.2f MiB, d2h %.2f MiB, NVMe read %.2f MiB, NVMe written %.2f MiB\n",
              (double)s->bytes[ZO_TRACE_BYTES_H2D] / 1048576.0, (double)s->bytes[ZO_TRACE_BYTES_D2H] / 1048576.0,
              (double)s->bytes[ZO_TRACE_BYTES_NVME_READ] / 1048576.0,
              (double)s->bytes[ZO_TRACE_BYTES_NVME_WRITE] / 1048576.0);
  }
  free(st);
  return err;
}
