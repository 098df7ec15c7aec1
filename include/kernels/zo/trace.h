/* The timeline recorder: what ran on which stream (track), when, for how
 * long, and what it moved or computed. Off by default; while off, every
 * recording call is one relaxed atomic load. While on, events go to
 * per-thread buffers without locks (a thread takes a mutex once, to register
 * its buffer) and are read back only after zo_trace_stop, when the threads
 * that recorded them are idle (the caller synchronizes its streams first).
 * Timestamps are CLOCK_MONOTONIC nanoseconds (the CPU backend's workers'
 * clock). Names and categories are static strings: the recorder stores the
 * pointers. It writes no file: engine/train/trace.c turns the events into a
 * Chrome trace-event JSON file (zo/trace_file.h). */
#ifndef ZO_TRACE_H
#define ZO_TRACE_H

#include <stdatomic.h>

#include "zo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_TRACE_MAX_TRACKS 64 /* named tracks: streams, the main thread, NVMe requests */
#define ZO_TRACE_NAME_MAX 32   /* bytes of a track's name, NUL included */

enum zo_trace_kind {
  ZO_TRACE_SPAN,    /* a task on a track: tracks' spans never overlap */
  ZO_TRACE_WAIT,    /* a track blocked on task src_seq of track src_track */
  ZO_TRACE_ASYNC,   /* an operation in flight (an NVMe request): may overlap others */
  ZO_TRACE_COUNTER, /* value at t0 of the counter `name` */
  ZO_TRACE_STEP,    /* a training step, [t0, t1), index = step number */
};

/* What the next task queued by a thread is: an op's name, the block, unit
 * or chunk it works on (-1 none), the bytes it moves and its FLOPs. */
struct zo_trace_label {
  const char *name;
  int32_t index;
  uint64_t bytes;
  uint64_t flops;
};

struct zo_trace_event {
  uint64_t t0, t1;     /* ns, CLOCK_MONOTONIC; t1 = t0 for counters */
  const char *name;    /* static string */
  uint64_t bytes;      /* bytes moved; counters: the value */
  uint64_t flops;      /* floating-point operations */
  uint64_t seq;        /* spans and waits: the task's 1-based position on its stream (0: not a stream's) */
  uint64_t src_seq;    /* waits: the position of the task waited for on src_track */
  int32_t index;       /* block, unit, chunk or step; -1 none */
  int16_t track;       /* the track it ran on */
  int16_t src_track;   /* waits: the track waited on; -1 otherwise */
  uint8_t kind;        /* enum zo_trace_kind */
};

extern atomic_bool zo_trace_active_;

/* True while recording. */
static inline bool zo_trace_on(void) { return atomic_load_explicit(&zo_trace_active_, memory_order_relaxed); }

/* Monotonic time in nanoseconds, the recorder's clock. */
uint64_t zo_trace_now(void);

/* Starts recording: earlier events are dropped, track names kept. Returns
 * 0 or -ENOMEM. */
int zo_trace_start(void);

/* Stops recording (events already in buffers stay until the next start or
 * zo_trace_free). */
void zo_trace_stop(void);

/* Frees every buffer; tracks are forgotten. Call with no recording thread
 * running. */
void zo_trace_free(void);

/* A new track named name (copied, truncated to ZO_TRACE_NAME_MAX - 1).
 * Returns its id, or -1 when the table is full (then its events are not
 * recorded). Thread-safe. */
int zo_trace_track(const char *name);

/* Renames track id. Thread-safe. */
void zo_trace_track_rename(int id, const char *name);

/* The calling thread's track, registered as name on first use. */
int zo_trace_thread_track(const char *name);

/* Increments when zo_trace_free forgets the tracks: a cached track id is
 * valid while the generation it was taken in lasts. */
uint64_t zo_trace_generation(void);

/* Track names, for writers: copies track id's name into buf. Returns false
 * when id was never registered. */
bool zo_trace_track_name(int id, char *buf, size_t size);

/* The label the calling thread's next queued task carries (consumed by
 * zo_trace_take). Cheap no-op while not recording. */
void zo_trace_next(const char *name, int index, uint64_t bytes, uint64_t flops);

/* The block or unit index the calling thread's ops work on, for tasks
 * queued without an explicit label (-1: none). */
void zo_trace_scope(int index);

/* The label of a task being queued by this thread: the pending label of
 * zo_trace_next if there is one (consumed), else def_name with this
 * thread's scope index and the given bytes and flops. */
struct zo_trace_label zo_trace_take(const char *def_name, uint64_t bytes, uint64_t flops);

/* Records an event on the calling thread's buffer (any thread). */
void zo_trace_span(int track, const struct zo_trace_label *l, uint64_t seq, uint64_t t0, uint64_t t1);
void zo_trace_wait(int track, uint64_t seq, int src_track, uint64_t src_seq, uint64_t t0, uint64_t t1);
void zo_trace_async(int track, const char *name, int index, uint64_t bytes, uint64_t t0, uint64_t t1);
void zo_trace_counter(const char *name, uint64_t value, uint64_t t);
void zo_trace_step(long step, uint64_t t0, uint64_t t1);

/* Calls fn on every recorded event, thread buffer by thread buffer, each in
 * recording order. Call after zo_trace_stop with the recording threads
 * idle. Returns the number of events. */
size_t zo_trace_foreach(void (*fn)(const struct zo_trace_event *ev, void *ctx), void *ctx);

/* Events dropped because a thread's buffer could not grow. */
uint64_t zo_trace_dropped(void);

#ifdef __cplusplus
}
#endif

#endif /* ZO_TRACE_H */
