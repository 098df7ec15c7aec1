/* The timeline recorder (zo/trace.h): per-thread chunked event buffers on a
 * global list, a table of named tracks, and the thread-local label the next
 * queued task carries. Buffers outlive their threads (a stream's worker
 * exits before the trace is written); zo_trace_free bumps a generation so
 * that a thread's cached buffer pointer is never used after it is freed. */
#include "zo/trace.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHUNK_EVENTS 4096

struct chunk {
  struct chunk *next;
  size_t n;                                  /* events used */
  struct zo_trace_event ev[CHUNK_EVENTS];
};

struct tbuf {
  struct tbuf *next;   /* the global list */
  struct chunk *head;  /* first chunk, kept across starts */
  struct chunk *tail;  /* the chunk being filled */
};

atomic_bool zo_trace_active_;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* guards everything below */
static struct tbuf *bufs;
static char track_names[ZO_TRACE_MAX_TRACKS][ZO_TRACE_NAME_MAX];
static int n_tracks;
static atomic_uint_fast64_t generation = 1; /* bumped by zo_trace_free */
static atomic_uint_fast64_t dropped;

static _Thread_local struct tbuf *tls_buf;
static _Thread_local uint64_t tls_gen;
static _Thread_local struct zo_trace_label tls_next;
static _Thread_local bool tls_has_next;
static _Thread_local int tls_scope = -1;
static _Thread_local int tls_track = -1;
static _Thread_local uint64_t tls_track_gen;

uint64_t zo_trace_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int zo_trace_start(void) {
  pthread_mutex_lock(&mu);
  for (struct tbuf *b = bufs; b; b = b->next) {
    for (struct chunk *c = b->head->next; c;) {
      struct chunk *n = c->next;
      free(c);
      c = n;
    }
    b->head->next = NULL;
    b->head->n = 0;
    b->tail = b->head;
  }
  atomic_store(&dropped, 0);
  pthread_mutex_unlock(&mu);
  atomic_store_explicit(&zo_trace_active_, true, memory_order_release);
  return 0;
}

void zo_trace_stop(void) { atomic_store_explicit(&zo_trace_active_, false, memory_order_release); }

void zo_trace_free(void) {
  zo_trace_stop();
  pthread_mutex_lock(&mu);
  for (struct tbuf *b = bufs; b;) {
    for (struct chunk *c = b->head; c;) {
      struct chunk *n = c->next;
      free(c);
      c = n;
    }
    struct tbuf *n = b->next;
    free(b);
    b = n;
  }
  bufs = NULL;
  n_tracks = 0;
  atomic_fetch_add(&generation, 1);
  pthread_mutex_unlock(&mu);
}

int zo_trace_track(const char *name) {
  pthread_mutex_lock(&mu);
  int id = n_tracks < ZO_TRACE_MAX_TRACKS ? n_tracks++ : -1;
  if (id >= 0) snprintf(track_names[id], ZO_TRACE_NAME_MAX, "%s", name);
  pthread_mutex_unlock(&mu);
  return id;
}

void zo_trace_track_rename(int id, const char *name) {
  if (id < 0) return;
  pthread_mutex_lock(&mu);
  if (id < n_tracks) snprintf(track_names[id], ZO_TRACE_NAME_MAX, "%s", name);
  pthread_mutex_unlock(&mu);
}

uint64_t zo_trace_generation(void) { return atomic_load(&generation); }

int zo_trace_thread_track(const char *name) {
  const uint64_t gen = atomic_load(&generation);
  if (tls_track < 0 || tls_track_gen != gen) {
    tls_track = zo_trace_track(name);
    tls_track_gen = gen;
  }
  return tls_track;
}

bool zo_trace_track_name(int id, char *buf, size_t size) {
  pthread_mutex_lock(&mu);
  const bool ok = id >= 0 && id < n_tracks;
  if (ok) snprintf(buf, size, "%s", track_names[id]);
  pthread_mutex_unlock(&mu);
  return ok;
}

void zo_trace_next(const char *name, int index, uint64_t bytes, uint64_t flops) {
  if (!zo_trace_on()) return;
  tls_next = (struct zo_trace_label){name, index, bytes, flops};
  tls_has_next = true;
}

void zo_trace_scope(int index) { tls_scope = index; }

struct zo_trace_label zo_trace_take(const char *def_name, uint64_t bytes, uint64_t flops) {
  if (tls_has_next) {
    tls_has_next = false;
    return tls_next;
  }
  return (struct zo_trace_label){def_name, tls_scope, bytes, flops};
}

/* A slot in the calling thread's buffer; NULL when no memory (counted). */
static struct zo_trace_event *slot(void) {
  const uint64_t gen = atomic_load(&generation);
  if (!tls_buf || tls_gen != gen) {
    struct tbuf *b = calloc(1, sizeof *b);
    struct chunk *c = b ? calloc(1, sizeof *c) : NULL;
    if (!c) {
      free(b);
      atomic_fetch_add(&dropped, 1);
      return NULL;
    }
    b->head = b->tail = c;
    pthread_mutex_lock(&mu);
    b->next = bufs;
    bufs = b;
    pthread_mutex_unlock(&mu);
    tls_buf = b;
    tls_gen = gen;
  }
  struct chunk *c = tls_buf->tail;
  if (c->n == CHUNK_EVENTS) {
    struct chunk *n = calloc(1, sizeof *n);
    if (!n) {
      atomic_fetch_add(&dropped, 1);
      return NULL;
    }
    c->next = n;
    tls_buf->tail = c = n;
  }
  return &c->ev[c->n++];
}

static void put(struct zo_trace_event ev) {
  if (!zo_trace_on()) return;
  struct zo_trace_event *e = slot();
  if (e) *e = ev;
}

void zo_trace_span(int track, const struct zo_trace_label *l, uint64_t seq, uint64_t t0, uint64_t t1) {
  if (track < 0) return;
  put((struct zo_trace_event){.t0 = t0, .t1 = t1, .name = l->name, .bytes = l->bytes, .flops = l->flops,
                              .seq = seq, .index = l->index, .track = (int16_t)track, .src_track = -1,
                              .kind = ZO_TRACE_SPAN});
}

void zo_trace_wait(int track, uint64_t seq, int src_track, uint64_t src_seq, uint64_t t0, uint64_t t1) {
  if (track < 0) return;
  put((struct zo_trace_event){.t0 = t0, .t1 = t1, .name = "wait", .seq = seq, .src_seq = src_seq, .index = -1,
                              .track = (int16_t)track, .src_track = (int16_t)src_track, .kind = ZO_TRACE_WAIT});
}

void zo_trace_async(int track, const char *name, int index, uint64_t bytes, uint64_t t0, uint64_t t1) {
  if (track < 0) return;
  put((struct zo_trace_event){.t0 = t0, .t1 = t1, .name = name, .bytes = bytes, .index = index,
                              .track = (int16_t)track, .src_track = -1, .kind = ZO_TRACE_ASYNC});
}

void zo_trace_counter(const char *name, uint64_t value, uint64_t t) {
  put((struct zo_trace_event){.t0 = t, .t1 = t, .name = name, .bytes = value, .index = -1, .track = -1,
                              .src_track = -1, .kind = ZO_TRACE_COUNTER});
}

void zo_trace_step(long step, uint64_t t0, uint64_t t1) {
  put((struct zo_trace_event){.t0 = t0, .t1 = t1, .name = "step", .index = (int32_t)step, .track = -1,
                              .src_track = -1, .kind = ZO_TRACE_STEP});
}

size_t zo_trace_foreach(void (*fn)(const struct zo_trace_event *ev, void *ctx), void *ctx) {
  size_t n = 0;
  pthread_mutex_lock(&mu);
  for (struct tbuf *b = bufs; b; b = b->next)
    for (struct chunk *c = b->head; c; c = c->next)
      for (size_t i = 0; i < c->n; i++, n++) fn(&c->ev[i], ctx);
  pthread_mutex_unlock(&mu);
  return n;
}

uint64_t zo_trace_dropped(void) { return atomic_load(&dropped); }
