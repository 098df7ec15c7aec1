/* Stream and event emulation of the CPU backend: FIFO order, ordering across
 * streams through events, re-record and never-recorded events, destroy
 * draining, enqueue blocking on a full ring, the NULL stream, and the thread
 * count reaching stream workers. Runs with ZO_STREAM_DELAY_US set (by main,
 * before the first stream exists) so that a missing wait shows as a wrong
 * result; test_missing_wait_observed checks that it does. Must stay clean
 * under ThreadSanitizer: cross-stream races are only ever made on atomics. */
#include "../kernels/cpu/cpu.h"

#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zo_test.h"

#define DELAY_US "100"

#define CHECK(cond)                                                             \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);  \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

#define CHECK_OK(call)                                                          \
  do {                                                                          \
    int ok_err_ = (call);                                                       \
    if (ok_err_) {                                                              \
      fprintf(stderr, "%s:%d: %s returned %d (%s)\n", __FILE__, __LINE__, #call, \
              ok_err_, zo_last_error());                                        \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

static zo_backend_t be;

static void sleep_us(long us) {
  struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* Polls flag until it reads want or timeout_ms passes; returns whether it did. */
static int wait_flag(atomic_int *flag, int want, int timeout_ms) {
  for (int i = 0; i < timeout_ms * 10; i++) {
    if (atomic_load(flag) == want) return 1;
    sleep_us(100);
  }
  return atomic_load(flag) == want;
}

/* ---- tasks ---------------------------------------------------------------- */
struct log {
  int *entries; /* (cap) */
  int n;        /* written by one stream's worker only */
};
struct log_args {
  struct log *log;
  int value;
};
static void log_task(void *p) {
  struct log_args *a = p;
  a->log->entries[a->log->n++] = a->value;
}

/* Blocks its stream until *gate becomes nonzero. */
static void gate_task(void *p) {
  atomic_int *gate = *(atomic_int **)p;
  while (!atomic_load(gate)) sleep_us(100);
}

static void set_flag_task(void *p) { atomic_store(*(atomic_int **)p, 1); }

struct store_args {
  atomic_int *cell;
  int value;
};
static void store_task(void *p) {
  struct store_args *a = p;
  atomic_store_explicit(a->cell, a->value, memory_order_relaxed);
}
struct load_args {
  atomic_int *cell;
  int *out;
};
static void load_task(void *p) {
  struct load_args *a = p;
  *a->out = atomic_load_explicit(a->cell, memory_order_relaxed);
}

struct self_args {
  pthread_t *thread;
  int *ran;
};
static void self_task(void *p) {
  struct self_args *a = p;
  *a->thread = pthread_self();
  *a->ran = 1;
}

static void threads_task(void *p) { **(int **)p = omp_get_max_threads(); }

/* ---- cases ---------------------------------------------------------------- */
static int test_fifo_order(void) {
  enum { N = 5000 };
  struct log log = {.entries = calloc(N, sizeof(int))};
  CHECK(log.entries);
  zo_stream_t s;
  CHECK_OK(be->stream_create(&s));
  for (int i = 0; i < N; i++) {
    struct log_args a = {&log, i};
    zo_cpu_stream_enqueue(s, log_task, &a, sizeof a);
  }
  CHECK_OK(be->stream_synchronize(s));
  CHECK(log.n == N);
  for (int i = 0; i < N; i++) CHECK(log.entries[i] == i);
  be->stream_destroy(s);
  free(log.entries);
  return 0;
}

static int test_event_orders_streams(void) {
  enum { N = 1 << 16, TRIALS = 50 };
  unsigned char *src = malloc(N), *mid = malloc(N), *dst = malloc(N);
  CHECK(src && mid && dst);
  zo_stream_t a, b;
  zo_event_t ev;
  CHECK_OK(be->stream_create(&a));
  CHECK_OK(be->stream_create(&b));
  CHECK_OK(be->event_create(&ev));
  memset(mid, 0, N);
  for (int t = 0; t < TRIALS; t++) {
    memset(src, t + 1, N);
    /* Producer: mid = src. Consumer: dst = mid once the copy is done, then
     * reset mid for the next trial, ordered back on the producer. */
    CHECK_OK(be->memcpy_async(mid, src, N, ZO_COPY_H2D, a));
    CHECK_OK(be->event_record(ev, a));
    CHECK_OK(be->stream_wait_event(b, ev));
    CHECK_OK(be->memcpy_async(dst, mid, N, ZO_COPY_D2H, b));
    CHECK_OK(be->event_record(ev, b));
    CHECK_OK(be->stream_wait_event(a, ev));
    CHECK_OK(be->memset_async(mid, 0, N, a));
    CHECK_OK(be->stream_synchronize(b));
    for (int i = 0; i < N; i++) CHECK(dst[i] == (unsigned char)(t + 1));
    CHECK_OK(be->stream_synchronize(a));
  }
  be->event_destroy(ev);
  be->stream_destroy(b);
  be->stream_destroy(a);
  free(dst);
  free(mid);
  free(src);
  return 0;
}

/* The same producer/consumer with the wait left out must go wrong sometimes,
 * or the delay mode would not catch a missing wait. The race is on an atomic
 * (relaxed), so it is an ordering bug, not a data race. */
static int test_missing_wait_observed(void) {
  enum { TRIALS = 50 };
  atomic_int cell;
  int seen = 0, n_wrong = 0;
  zo_stream_t a, b;
  CHECK_OK(be->stream_create(&a));
  CHECK_OK(be->stream_create(&b));
  for (int t = 1; t <= TRIALS; t++) {
    atomic_store(&cell, 0);
    struct store_args st = {&cell, t};
    struct load_args ld = {&cell, &seen};
    zo_cpu_stream_enqueue(a, store_task, &st, sizeof st);
    zo_cpu_stream_enqueue(b, load_task, &ld, sizeof ld);
    CHECK_OK(be->stream_synchronize(a));
    CHECK_OK(be->stream_synchronize(b));
    n_wrong += seen != t;
  }
  be->stream_destroy(b);
  be->stream_destroy(a);
  printf("  missing wait: %d of %d trials read stale data\n", n_wrong, TRIALS);
  CHECK(n_wrong > 0);
  return 0;
}

static int test_event_never_recorded(void) {
  zo_event_t ev;
  zo_stream_t s;
  atomic_int gate = 0, ran = 0;
  atomic_int *pgate = &gate, *pran = &ran;
  CHECK_OK(be->event_create(&ev));
  CHECK_OK(be->stream_create(&s));
  CHECK_OK(be->event_synchronize(ev));
  CHECK_OK(be->stream_wait_event(NULL, ev));
  CHECK_OK(be->stream_wait_event(s, ev));
  zo_cpu_stream_enqueue(s, set_flag_task, &pran, sizeof pran);
  CHECK(wait_flag(&ran, 1, 5000));
  /* Recorded on the NULL stream: complete at once, even with s blocked. */
  zo_cpu_stream_enqueue(s, gate_task, &pgate, sizeof pgate);
  CHECK_OK(be->event_record(ev, NULL));
  CHECK_OK(be->event_synchronize(ev));
  atomic_store(&gate, 1);
  CHECK_OK(be->stream_synchronize(s));
  be->stream_destroy(s);
  be->event_destroy(ev);
  return 0;
}

static int test_rerecord_replaces_capture(void) {
  zo_stream_t blocked, idle, w1, w2, w3;
  zo_event_t ev;
  atomic_int gate = 0, ran1 = 0, ran2 = 0, ran3 = 0;
  atomic_int *pgate = &gate, *pran1 = &ran1, *pran2 = &ran2, *pran3 = &ran3;
  CHECK_OK(be->stream_create(&blocked));
  CHECK_OK(be->stream_create(&idle));
  CHECK_OK(be->stream_create(&w1));
  CHECK_OK(be->stream_create(&w2));
  CHECK_OK(be->stream_create(&w3));
  CHECK_OK(be->event_create(&ev));
  zo_cpu_stream_enqueue(blocked, gate_task, &pgate, sizeof pgate);

  /* w1 waits on the capture of the blocked stream. */
  CHECK_OK(be->event_record(ev, blocked));
  CHECK_OK(be->stream_wait_event(w1, ev));
  zo_cpu_stream_enqueue(w1, set_flag_task, &pran1, sizeof pran1);

  /* Re-recorded on an idle stream: waits queued from now on pass, the wait
   * queued before keeps the capture it was given. */
  CHECK_OK(be->event_record(ev, idle));
  CHECK_OK(be->stream_wait_event(w2, ev));
  zo_cpu_stream_enqueue(w2, set_flag_task, &pran2, sizeof pran2);
  CHECK(wait_flag(&ran2, 1, 5000));
  CHECK_OK(be->event_synchronize(ev));
  CHECK(atomic_load(&ran1) == 0);

  /* And back onto the blocked stream. */
  CHECK_OK(be->event_record(ev, blocked));
  CHECK_OK(be->stream_wait_event(w3, ev));
  zo_cpu_stream_enqueue(w3, set_flag_task, &pran3, sizeof pran3);
  sleep_us(20000);
  CHECK(atomic_load(&ran1) == 0);
  CHECK(atomic_load(&ran3) == 0);

  atomic_store(&gate, 1);
  CHECK_OK(be->event_synchronize(ev));
  CHECK(wait_flag(&ran1, 1, 5000));
  CHECK(wait_flag(&ran3, 1, 5000));
  be->event_destroy(ev);
  be->stream_destroy(w3);
  be->stream_destroy(w2);
  be->stream_destroy(w1);
  be->stream_destroy(idle);
  be->stream_destroy(blocked);
  return 0;
}

/* An event and a queued wait may outlive the stream they captured. */
static int test_event_outlives_stream(void) {
  enum { N = 200 }; /* behind a closed gate: fewer than a ring holds (256) */
  struct log log = {.entries = calloc(N + 1, sizeof(int))};
  CHECK(log.entries);
  zo_stream_t a, b;
  zo_event_t ev;
  atomic_int gate = 0;
  atomic_int *pgate = &gate;
  CHECK_OK(be->stream_create(&a));
  CHECK_OK(be->stream_create(&b));
  CHECK_OK(be->event_create(&ev));
  zo_cpu_stream_enqueue(a, gate_task, &pgate, sizeof pgate);
  for (int i = 0; i < N; i++) {
    struct log_args la = {&log, i};
    zo_cpu_stream_enqueue(a, log_task, &la, sizeof la);
  }
  CHECK_OK(be->event_record(ev, a));
  CHECK_OK(be->stream_wait_event(b, ev));
  struct log_args last = {&log, N};
  zo_cpu_stream_enqueue(b, log_task, &last, sizeof last);
  atomic_store(&gate, 1);
  be->stream_destroy(a);
  CHECK_OK(be->event_synchronize(ev));
  CHECK_OK(be->stream_synchronize(b));
  CHECK(log.n == N + 1);
  for (int i = 0; i <= N; i++) CHECK(log.entries[i] == i);
  be->event_destroy(ev);
  be->stream_destroy(b);
  free(log.entries);
  return 0;
}

static int test_destroy_drains(void) {
  enum { N = 200 }; /* behind a closed gate: fewer than a ring holds (256) */
  struct log log = {.entries = calloc(N, sizeof(int))};
  CHECK(log.entries);
  zo_stream_t s;
  atomic_int gate = 0;
  atomic_int *pgate = &gate;
  CHECK_OK(be->stream_create(&s));
  zo_cpu_stream_enqueue(s, gate_task, &pgate, sizeof pgate);
  for (int i = 0; i < N; i++) {
    struct log_args a = {&log, i};
    zo_cpu_stream_enqueue(s, log_task, &a, sizeof a);
  }
  atomic_store(&gate, 1);
  be->stream_destroy(s);
  CHECK(log.n == N);
  for (int i = 0; i < N; i++) CHECK(log.entries[i] == i);
  free(log.entries);
  return 0;
}

enum { FULL_N = 4096 }; /* far more tasks than a stream's ring holds */
struct filler {
  zo_stream_t stream;
  struct log *log;
  atomic_int n_enqueued;
};
static void *filler_main(void *p) {
  struct filler *f = p;
  for (int i = 0; i < FULL_N; i++) {
    struct log_args a = {f->log, i};
    zo_cpu_stream_enqueue(f->stream, log_task, &a, sizeof a);
    atomic_fetch_add(&f->n_enqueued, 1);
  }
  return NULL;
}

static int test_queue_full_blocks(void) {
  struct log log = {.entries = calloc(FULL_N, sizeof(int))};
  CHECK(log.entries);
  atomic_int gate = 0;
  atomic_int *pgate = &gate;
  struct filler f = {.log = &log};
  CHECK_OK(be->stream_create(&f.stream));
  zo_cpu_stream_enqueue(f.stream, gate_task, &pgate, sizeof pgate);
  pthread_t th;
  CHECK(pthread_create(&th, NULL, filler_main, &f) == 0);
  /* While the stream is blocked the filler stops at the ring's capacity. */
  int n = -1;
  for (int i = 0; i < 500; i++) {
    sleep_us(10000);
    int now = atomic_load(&f.n_enqueued);
    if (now == n && n > 0) break;
    n = now;
  }
  CHECK(n > 0 && n < FULL_N);
  CHECK(n == atomic_load(&f.n_enqueued));
  atomic_store(&gate, 1);
  CHECK(pthread_join(th, NULL) == 0);
  CHECK(atomic_load(&f.n_enqueued) == FULL_N);
  CHECK_OK(be->stream_synchronize(f.stream));
  CHECK(log.n == FULL_N);
  for (int i = 0; i < FULL_N; i++) CHECK(log.entries[i] == i);
  be->stream_destroy(f.stream);
  printf("  queue full: enqueue blocked after %d tasks\n", n);
  free(log.entries);
  return 0;
}

static int test_null_stream_inline(void) {
  pthread_t who;
  int ran = 0;
  struct self_args a = {&who, &ran};
  zo_cpu_stream_enqueue(NULL, self_task, &a, sizeof a);
  CHECK(ran == 1);
  CHECK(pthread_equal(who, pthread_self()));

  enum { N = 4096 };
  unsigned char src[N], dst[N];
  memset(src, 0x5a, N);
  memset(dst, 0, N);
  CHECK_OK(be->memcpy_async(dst, src, N, ZO_COPY_H2H, NULL));
  CHECK(memcmp(dst, src, N) == 0);
  CHECK_OK(be->memset_async(dst, 7, N, NULL));
  for (int i = 0; i < N; i++) CHECK(dst[i] == 7);
  CHECK_OK(be->stream_synchronize(NULL));

  /* A worker's task runs elsewhere. */
  zo_stream_t s;
  CHECK_OK(be->stream_create(&s));
  ran = 0;
  zo_cpu_stream_enqueue(s, self_task, &a, sizeof a);
  CHECK_OK(be->stream_synchronize(s));
  CHECK(ran == 1);
  CHECK(!pthread_equal(who, pthread_self()));
  be->stream_destroy(s);
  return 0;
}

static int test_thread_count_propagates(void) {
  int old = zo_cpu_get_threads();
  CHECK(old >= 1);
  zo_stream_t s;
  CHECK_OK(be->stream_create(&s)); /* created before the change: must still see it */
  int seen = 0;
  int *pseen = &seen;
  for (int n = 3; n <= 5; n += 2) {
    be->set_threads(n);
    CHECK(zo_cpu_get_threads() == n);
    CHECK(omp_get_max_threads() == n);
    zo_cpu_stream_enqueue(s, threads_task, &pseen, sizeof pseen);
    CHECK_OK(be->stream_synchronize(s));
    CHECK(seen == n);
    zo_stream_t fresh;
    CHECK_OK(be->stream_create(&fresh));
    seen = 0;
    zo_cpu_stream_enqueue(fresh, threads_task, &pseen, sizeof pseen);
    CHECK_OK(be->stream_synchronize(fresh));
    CHECK(seen == n);
    be->stream_destroy(fresh);
  }
  zo_cpu_set_threads(old);
  CHECK(omp_get_max_threads() == old);
  be->stream_destroy(s);
  return 0;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* Read once, at the first stream_create: set it before any stream exists. */
  setenv("ZO_STREAM_DELAY_US", DELAY_US, 1);
  be = zo_backend_cpu();
  if (!be) {
    fprintf(stderr, "zo_backend_cpu: %s\n", zo_last_error());
    return 1;
  }
  static const struct zo_test tests[] = {
      ZO_TEST(fifo_order),
      ZO_TEST(event_orders_streams),
      ZO_TEST(missing_wait_observed),
      ZO_TEST(event_never_recorded),
      ZO_TEST(rerecord_replaces_capture),
      ZO_TEST(event_outlives_stream),
      ZO_TEST(destroy_drains),
      ZO_TEST(queue_full_blocks),
      ZO_TEST(null_stream_inline),
      ZO_TEST(thread_count_propagates),
  };
  return ZO_TEST_MAIN(tests);
}
