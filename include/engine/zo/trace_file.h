/* Trace files: the recorder's events (zo/trace.h) written as Chrome
 * trace-event JSON (Perfetto and chrome://tracing open it), and the
 * per-step summary read back from such a file (`zoffload trace summary`).
 * File layout: one process; one thread (tid) per track, named by a
 * "thread_name" metadata event; spans and waits as complete events ("X",
 * cat "op" or "wait"; a wait's args name the track, sequence number and
 * name of the task it waited for); NVMe requests as async events ("b"/"e",
 * cat "nvme"); counters ("C"); each traced step as an "X" event of cat
 * "step" on a track of its own. Times are microseconds from the first
 * event. */
#ifndef ZO_TRACE_FILE_H
#define ZO_TRACE_FILE_H

#include <stdio.h>

#include "zo/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the events recorded since zo_trace_start to path (atomically:
 * temporary file, fsync, rename). Call after zo_trace_stop with the
 * recording threads idle. Returns 0 or -errno (message set). */
int zo_trace_write_json(const char *path);

/* Traces steps [first, first + n) of a run: zo_tracer_step before each
 * step's work is queued starts recording at the first and marks where each
 * step begins; once the last traced step's work has been queued and
 * synchronized (zo_tracer_due says when), zo_tracer_end marks its end,
 * stops and writes the file. */
struct zo_tracer {
  const char *path; /* NULL or "": off */
  long first, last; /* steps traced */
  long cur;         /* the step being traced, 0 none */
  uint64_t t_cur;   /* ns: its start */
  bool written;
};

void zo_tracer_init(struct zo_tracer *tr, const char *path, long first, long n);
/* Checks, before any step, that the file at path can be written: its
 * directory exists and is writable. Returns 0 or -errno, the message
 * naming engine.trace.path. */
int zo_trace_path_check(const char *path);
/* Before queueing step `step`. Returns true while the step is traced. */
bool zo_tracer_step(struct zo_tracer *tr, long step);
/* True when step is the last one traced (or the run ends at it while
 * tracing): synchronize, then call zo_tracer_end. */
bool zo_tracer_due(const struct zo_tracer *tr, long step, long last_step_of_run);
/* Marks the last traced step's end, stops recording and writes the file;
 * prints one line naming it on out (NULL: quiet). Returns 0 or -errno. */
int zo_tracer_end(struct zo_tracer *tr, FILE *out);

/* One track's share of one step. */
struct zo_trace_track_time {
  char name[ZO_TRACE_NAME_MAX];
  double busy_ms;  /* spans (not waits) inside the step */
  double wait_ms;  /* waits inside the step */
  int n_spans;
};

#define ZO_TRACE_TOP_WAITS 5

/* A wait of the compute track: which task on which track it waited for. */
struct zo_trace_top_wait {
  double ms;
  char on_track[ZO_TRACE_NAME_MAX];
  char on_name[64]; /* the waited-for task's name and index, e.g. "copy H2D [3]" */
};

struct zo_trace_step_info {
  long step;
  double step_ms;                 /* the step's wall time */
  int n_tracks;
  struct zo_trace_track_time tracks[ZO_TRACE_MAX_TRACKS];
  double copy_io_ms;              /* busy time of the copy and NVMe tracks and requests */
  double hidden_ms;               /* the part of it that overlaps compute spans */
  double critical_ms;             /* length of the critical path's spans */
  int critical_n;                 /* spans on it */
  char critical_tracks[256];      /* "compute 812.1 ms, h2d 20.3 ms, ..." */
  int n_top;
  struct zo_trace_top_wait top[ZO_TRACE_TOP_WAITS];
  /* Bytes the scheduler issued during the step, per copy stream and NVMe
   * direction (ZO_TRACE_BYTES_*), from its "... bytes issued" counters at
   * the step's start and the next one's (or the trace's end); have_bytes
   * false when the trace holds no such pair. */
  bool have_bytes;
  uint64_t bytes[4];
};
enum { ZO_TRACE_BYTES_H2D, ZO_TRACE_BYTES_D2H, ZO_TRACE_BYTES_NVME_READ, ZO_TRACE_BYTES_NVME_WRITE };

/* Reads a trace file and fills at most max_steps steps' summaries
 * (*n_steps set). Returns 0 or -errno (message names the file and what is
 * wrong). */
int zo_trace_summarize(const char *path, struct zo_trace_step_info *steps, int max_steps, int *n_steps);
/* The same from an open stream, read once from where it stands (memory
 * grows with the spans kept, not with the file); name is for messages. A
 * negative duration, an NVMe request ending before it begins, two events
 * of one track at once or overlapping steps are refused (-EINVAL) naming
 * the events. */
int zo_trace_summarize_stream(FILE *f, const char *name, struct zo_trace_step_info *steps, int max_steps,
                              int *n_steps);

/* Prints zo_trace_summarize's result for every step of path. */
int zo_trace_summary_print(const char *path, FILE *out);

#ifdef __cplusplus
}
#endif

#endif /* ZO_TRACE_FILE_H */
