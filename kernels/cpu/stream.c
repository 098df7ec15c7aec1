/* CUDA-like streams and events on the CPU. Each zo_stream is one worker pthread
 * draining a bounded FIFO ring of tasks (fn + args copied into a fixed slot):
 * enqueue never allocates and never fails, it blocks while the ring is full.
 * A stream counts tasks queued (n_queued) and finished (n_done); an event
 * captures (stream, n_queued) and is complete once that stream's n_done reaches
 * it. Stream state is reference-counted so that an event, or a wait queued on
 * another stream, may outlive the stream it captured. The NULL stream runs each
 * task inline on the caller. Test mode: ZO_STREAM_DELAY_US=N (read once, at the
 * first stream_create) makes each worker sleep 0..N us before each task.
 * While the timeline recorder (zo/trace.h) is on, each worker records every
 * task it runs as a span of its stream's track (a wait as a wait naming the
 * task it waited for), and a host blocked in a synchronize as a wait on its
 * own track. */
#include "cpu.h"

#include "zo/trace.h"

#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ZO_CPU_QUEUE_LEN 256 /* tasks a stream holds before enqueue blocks */

/* For pthread calls whose failure means a broken invariant (void contracts). */
#define ZO_PT_CHECK(call)                                                       \
  do {                                                                          \
    int pt_err_ = (call);                                                       \
    if (pt_err_) zo_abort(__FILE__, __LINE__, "%s: %s", #call, strerror(pt_err_)); \
  } while (0)

struct zo_task {
  zo_cpu_task_fn fn;
  struct zo_trace_label label; /* what the task is, for the timeline; name NULL: not traced */
  _Alignas(max_align_t) unsigned char args[ZO_CPU_TASK_ARGS];
};

struct zo_stream {
  pthread_mutex_t mu;         /* guards everything below but refs, worker, rng */
  pthread_cond_t not_empty;   /* the worker waits here for work or stopping */
  pthread_cond_t not_full;    /* enqueuers wait here while count == QUEUE_LEN */
  pthread_cond_t done;        /* waiters on n_done (hosts, other workers) */
  struct zo_task ring[ZO_CPU_QUEUE_LEN];
  uint32_t head;              /* slot of the oldest task (running or next) */
  uint32_t count;             /* queued tasks, the running one included */
  uint64_t n_queued;          /* tasks ever enqueued */
  uint64_t n_done;            /* tasks ever finished, <= n_queued */
  int n_done_waiters;         /* threads blocked on done */
  bool stopping;              /* set by destroy: drain, then exit */
  atomic_int refs;            /* owner + events capturing it + queued waits */
  pthread_t worker;
  uint64_t rng;               /* delay-mode PRNG state, worker thread only */
  char name[ZO_TRACE_NAME_MAX]; /* timeline track name (zo_cpu_stream_set_name); guarded by mu */
  int track;                  /* timeline track, -1 until first traced; guarded by mu */
  uint64_t track_gen;         /* zo_trace_generation the track belongs to; guarded by mu */
};

struct zo_event {
  pthread_mutex_t mu;         /* guards stream and seq */
  struct zo_stream *stream;   /* captured stream (a reference held); NULL: complete */
  uint64_t seq;               /* complete once stream->n_done >= seq */
};

/* Arguments of the internal task queued by stream_wait_event. */
struct zo_wait_args {
  struct zo_stream *src;      /* a reference held until the wait has run */
  uint64_t seq;
  int src_track;              /* src's timeline track when traced, else -1 */
};

#define ZO_SEQ_ALL UINT64_MAX /* stream_wait_done: everything queued so far */

static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static unsigned long delay_us;          /* ZO_STREAM_DELAY_US; 0: no delays */
static atomic_uint_fast64_t n_streams;  /* streams ever created: delay seeds */
static atomic_int cpu_threads;          /* 0 until set or first asked */
static _Thread_local int applied_threads; /* what this thread gave omp_set_num_threads */

static void config_read(void) {
  const char *s = getenv("ZO_STREAM_DELAY_US");
  if (s && *s) delay_us = strtoul(s, NULL, 10);
}

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void stream_delay(struct zo_stream *s) {
  uint64_t us = splitmix64(&s->rng) % (delay_us + 1);
  if (us == 0) return;
  struct timespec ts = {.tv_sec = (time_t)(us / 1000000), .tv_nsec = (long)(us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

/* The OpenMP nthreads ICV is per thread: each thread that runs ops adopts the
 * global count itself, before its next task. */
static void threads_apply(void) {
  int n = atomic_load(&cpu_threads);
  if (n > 0 && n != applied_threads) {
    omp_set_num_threads(n);
    applied_threads = n;
  }
}

void zo_cpu_set_threads(int n_threads) {
  ZO_ASSERT(n_threads > 0);
  atomic_store(&cpu_threads, n_threads);
  omp_set_num_threads(n_threads);
  applied_threads = n_threads;
}

int zo_cpu_get_threads(void) {
  int n = atomic_load(&cpu_threads);
  if (n > 0) return n;
  int def = omp_get_max_threads();
  if (atomic_compare_exchange_strong(&cpu_threads, &n, def)) return def;
  return n; /* another thread set it first */
}

static void stream_ref(struct zo_stream *s) { atomic_fetch_add(&s->refs, 1); }

static void stream_unref(struct zo_stream *s) {
  if (!s || atomic_fetch_sub(&s->refs, 1) != 1) return;
  ZO_PT_CHECK(pthread_cond_destroy(&s->done));
  ZO_PT_CHECK(pthread_cond_destroy(&s->not_full));
  ZO_PT_CHECK(pthread_cond_destroy(&s->not_empty));
  ZO_PT_CHECK(pthread_mutex_destroy(&s->mu));
  free(s);
}

/* Blocks until s has finished its first seq tasks (ZO_SEQ_ALL: all queued now).
 * Returns 0 or -errno. */
static int stream_wait_done(struct zo_stream *s, uint64_t seq) {
  int err = pthread_mutex_lock(&s->mu);
  if (err) return zo_error(-err, "stream wait: pthread_mutex_lock: %s", strerror(err));
  if (seq == ZO_SEQ_ALL) seq = s->n_queued;
  s->n_done_waiters++;
  while (s->n_done < seq && !err) err = pthread_cond_wait(&s->done, &s->mu);
  s->n_done_waiters--;
  int err_unlock = pthread_mutex_unlock(&s->mu);
  if (err) return zo_error(-err, "stream wait: pthread_cond_wait: %s", strerror(err));
  if (err_unlock)
    return zo_error(-err_unlock, "stream wait: pthread_mutex_unlock: %s", strerror(err_unlock));
  return 0;
}

/* Returns 1 when s has finished its first seq tasks, 0 when not, or -errno. */
static int stream_is_done(struct zo_stream *s, uint64_t seq) {
  int err = pthread_mutex_lock(&s->mu);
  if (err) return zo_error(-err, "stream query: pthread_mutex_lock: %s", strerror(err));
  int done = s->n_done >= seq;
  err = pthread_mutex_unlock(&s->mu);
  if (err) return zo_error(-err, "stream query: pthread_mutex_unlock: %s", strerror(err));
  return done;
}

static void stream_wait_task(void *args);

/* s's timeline track, registered under its name on first use. */
static int stream_track(struct zo_stream *s) {
  const uint64_t gen = zo_trace_generation();
  ZO_PT_CHECK(pthread_mutex_lock(&s->mu));
  if (s->track < 0 || s->track_gen != gen) {
    s->track = zo_trace_track(s->name);
    s->track_gen = gen;
  }
  const int track = s->track;
  ZO_PT_CHECK(pthread_mutex_unlock(&s->mu));
  return track;
}

/* Runs task t of s and records it: a span, or a wait naming the task it
 * waited for (n_done is written by this worker only, so reading it here
 * needs no lock). */
static void run_traced(struct zo_stream *s, struct zo_task *t) {
  const uint64_t seq = s->n_done + 1, t0 = zo_trace_now();
  t->fn(t->args);
  const uint64_t t1 = zo_trace_now();
  const int track = stream_track(s);
  if (t->fn == stream_wait_task) {
    const struct zo_wait_args *a = (const void *)t->args;
    zo_trace_wait(track, seq, a->src_track, a->seq, t0, t1);
  } else if (t->label.name) {
    zo_trace_span(track, &t->label, seq, t0, t1);
  }
}

static void *stream_worker(void *arg) {
  struct zo_stream *s = arg;
  ZO_PT_CHECK(pthread_mutex_lock(&s->mu));
  for (;;) {
    while (s->count == 0 && !s->stopping) ZO_PT_CHECK(pthread_cond_wait(&s->not_empty, &s->mu));
    if (s->count == 0) break; /* stopping and drained */
    /* The slot stays counted while it runs, so no enqueue can overwrite it. */
    struct zo_task *t = &s->ring[s->head];
    ZO_PT_CHECK(pthread_mutex_unlock(&s->mu));
    threads_apply();
    if (delay_us) stream_delay(s);
    if (zo_trace_on()) run_traced(s, t);
    else t->fn(t->args);
    ZO_PT_CHECK(pthread_mutex_lock(&s->mu));
    s->head = (s->head + 1) % ZO_CPU_QUEUE_LEN;
    s->count--;
    s->n_done++;
    ZO_PT_CHECK(pthread_cond_signal(&s->not_full));
    if (s->n_done_waiters) ZO_PT_CHECK(pthread_cond_broadcast(&s->done));
  }
  ZO_PT_CHECK(pthread_mutex_unlock(&s->mu));
  return NULL;
}

void zo_cpu_stream_enqueue(zo_stream_t s, zo_cpu_task_fn fn, const void *args, size_t args_size) {
  zo_cpu_stream_enqueue_op(s, fn, args, args_size, "task", 0, 0);
}

void zo_cpu_stream_enqueue_op(zo_stream_t s, zo_cpu_task_fn fn, const void *args, size_t args_size,
                              const char *name, uint64_t bytes, uint64_t flops) {
  ZO_ASSERT(fn);
  ZO_ASSERT(args_size <= ZO_CPU_TASK_ARGS);
  ZO_ASSERT(args || args_size == 0);
  if (!s) {
    struct zo_task t = {.fn = fn};
    if (args_size) memcpy(t.args, args, args_size);
    threads_apply();
    fn(t.args);
    return;
  }
  ZO_PT_CHECK(pthread_mutex_lock(&s->mu));
  ZO_ASSERT(!s->stopping);
  while (s->count == ZO_CPU_QUEUE_LEN) ZO_PT_CHECK(pthread_cond_wait(&s->not_full, &s->mu));
  struct zo_task *t = &s->ring[(s->head + s->count) % ZO_CPU_QUEUE_LEN];
  t->fn = fn;
  t->label = zo_trace_on() ? zo_trace_take(name, bytes, flops) : (struct zo_trace_label){0};
  if (args_size) memcpy(t->args, args, args_size);
  s->count++;
  s->n_queued++;
  ZO_PT_CHECK(pthread_cond_signal(&s->not_empty));
  ZO_PT_CHECK(pthread_mutex_unlock(&s->mu));
}

int zo_cpu_stream_create(zo_stream_t *stream) {
  ZO_ASSERT(stream);
  *stream = NULL;
  int err = pthread_once(&config_once, config_read);
  if (err) return zo_error(-err, "stream create: pthread_once: %s", strerror(err));
  const char *what;
  struct zo_stream *s = calloc(1, sizeof *s);
  if (!s)
    return zo_error(-ENOMEM, "stream create: out of host memory (%zu bytes asked)", sizeof *s);
  what = "pthread_mutex_init";
  if ((err = pthread_mutex_init(&s->mu, NULL))) goto out_free;
  what = "pthread_cond_init";
  if ((err = pthread_cond_init(&s->not_empty, NULL))) goto out_mutex;
  if ((err = pthread_cond_init(&s->not_full, NULL))) goto out_not_empty;
  if ((err = pthread_cond_init(&s->done, NULL))) goto out_not_full;
  atomic_init(&s->refs, 1);
  uint64_t id = atomic_fetch_add(&n_streams, 1) + 1;
  snprintf(s->name, sizeof s->name, "stream %llu", (unsigned long long)id);
  s->track = -1;
  s->rng = splitmix64(&id);
  what = "pthread_create (worker thread)";
  if ((err = pthread_create(&s->worker, NULL, stream_worker, s))) goto out_done;
  *stream = s;
  return 0;

out_done:
  ZO_PT_CHECK(pthread_cond_destroy(&s->done));
out_not_full:
  ZO_PT_CHECK(pthread_cond_destroy(&s->not_full));
out_not_empty:
  ZO_PT_CHECK(pthread_cond_destroy(&s->not_empty));
out_mutex:
  ZO_PT_CHECK(pthread_mutex_destroy(&s->mu));
out_free:
  free(s);
  return zo_error(-err, "stream create: %s: %s", what, strerror(err));
}

void zo_cpu_stream_destroy(zo_stream_t s) {
  if (!s) return;
  ZO_PT_CHECK(pthread_mutex_lock(&s->mu));
  ZO_ASSERT(!s->stopping);
  s->stopping = true;
  ZO_PT_CHECK(pthread_cond_signal(&s->not_empty));
  ZO_PT_CHECK(pthread_mutex_unlock(&s->mu));
  /* EDEADLK here means a task destroyed its own stream. */
  ZO_PT_CHECK(pthread_join(s->worker, NULL));
  stream_unref(s);
}

/* The host blocked until task seq of src ran, recorded on its own track. */
static void trace_host_wait(struct zo_stream *src, uint64_t seq, uint64_t t0) {
  zo_trace_wait(zo_trace_thread_track("host"), 0, stream_track(src), seq, t0, zo_trace_now());
}

int zo_cpu_stream_synchronize(zo_stream_t s) {
  if (!s) return 0;
  if (!zo_trace_on()) return stream_wait_done(s, ZO_SEQ_ALL);
  ZO_PT_CHECK(pthread_mutex_lock(&s->mu));
  const uint64_t seq = s->n_queued;
  ZO_PT_CHECK(pthread_mutex_unlock(&s->mu));
  const uint64_t t0 = zo_trace_now();
  int err = stream_wait_done(s, seq);
  trace_host_wait(s, seq, t0);
  return err;
}

void zo_cpu_stream_set_name(zo_stream_t s, const char *name) {
  if (!s) return;
  ZO_PT_CHECK(pthread_mutex_lock(&s->mu));
  snprintf(s->name, sizeof s->name, "%s", name);
  s->track = -1; /* registered anew under this name when next traced */
  ZO_PT_CHECK(pthread_mutex_unlock(&s->mu));
}

int zo_cpu_event_create(zo_event_t *event) {
  ZO_ASSERT(event);
  *event = NULL;
  struct zo_event *e = calloc(1, sizeof *e);
  if (!e)
    return zo_error(-ENOMEM, "event create: out of host memory (%zu bytes asked)", sizeof *e);
  int err = pthread_mutex_init(&e->mu, NULL);
  if (err) {
    free(e);
    return zo_error(-err, "event create: pthread_mutex_init: %s", strerror(err));
  }
  *event = e;
  return 0;
}

void zo_cpu_event_destroy(zo_event_t e) {
  if (!e) return;
  /* Waits already queued hold their own reference to the captured stream. */
  stream_unref(e->stream);
  ZO_PT_CHECK(pthread_mutex_destroy(&e->mu));
  free(e);
}

int zo_cpu_event_record(zo_event_t e, zo_stream_t s) {
  ZO_ASSERT(e);
  uint64_t seq = 0;
  if (s) {
    int err = pthread_mutex_lock(&s->mu);
    if (err) return zo_error(-err, "event record: pthread_mutex_lock: %s", strerror(err));
    seq = s->n_queued;
    err = pthread_mutex_unlock(&s->mu);
    if (err) return zo_error(-err, "event record: pthread_mutex_unlock: %s", strerror(err));
    stream_ref(s);
  }
  int err = pthread_mutex_lock(&e->mu);
  if (err) {
    stream_unref(s);
    return zo_error(-err, "event record: pthread_mutex_lock: %s", strerror(err));
  }
  struct zo_stream *old = e->stream;
  e->stream = s;
  e->seq = seq;
  err = pthread_mutex_unlock(&e->mu);
  stream_unref(old);
  if (err) return zo_error(-err, "event record: pthread_mutex_unlock: %s", strerror(err));
  return 0;
}

/* Takes a reference to e's captured stream (NULL when e is complete). */
static int event_capture(struct zo_event *e, struct zo_stream **src, uint64_t *seq) {
  *src = NULL;
  *seq = 0;
  int err = pthread_mutex_lock(&e->mu);
  if (err) return zo_error(-err, "event: pthread_mutex_lock: %s", strerror(err));
  *src = e->stream;
  *seq = e->seq;
  if (*src) stream_ref(*src);
  err = pthread_mutex_unlock(&e->mu);
  if (err) {
    stream_unref(*src);
    return zo_error(-err, "event: pthread_mutex_unlock: %s", strerror(err));
  }
  return 0;
}

static void stream_wait_task(void *args) {
  struct zo_wait_args *a = args;
  int err = stream_wait_done(a->src, a->seq);
  if (err) zo_abort(__FILE__, __LINE__, "stream worker: waiting on an event: %s", zo_last_error());
  stream_unref(a->src);
}

int zo_cpu_stream_wait_event(zo_stream_t s, zo_event_t e) {
  ZO_ASSERT(e);
  struct zo_stream *src = NULL;
  uint64_t seq = 0;
  int err = event_capture(e, &src, &seq);
  if (err) return err;
  if (!src) return 0;
  if (!s) {
    /* The NULL stream runs its work inline: ordering it means blocking now. */
    err = stream_wait_done(src, seq);
    stream_unref(src);
    return err;
  }
  /* Already complete: the caller has synchronized with src's worker, and the
   * caller's later enqueues on s carry that on to s's worker. Same stream: the
   * FIFO already orders it. */
  int done = src == s ? 1 : stream_is_done(src, seq);
  if (done != 0) {
    stream_unref(src);
    return done < 0 ? done : 0;
  }
  struct zo_wait_args a = {.src = src, .seq = seq, .src_track = zo_trace_on() ? stream_track(src) : -1};
  zo_cpu_stream_enqueue(s, stream_wait_task, &a, sizeof a);
  return 0;
}

int zo_cpu_event_synchronize(zo_event_t e) {
  ZO_ASSERT(e);
  struct zo_stream *src = NULL;
  uint64_t seq = 0;
  int err = event_capture(e, &src, &seq);
  if (err || !src) return err;
  const uint64_t t0 = zo_trace_on() ? zo_trace_now() : 0;
  err = stream_wait_done(src, seq);
  if (t0) trace_host_wait(src, seq, t0);
  stream_unref(src);
  return err;
}
