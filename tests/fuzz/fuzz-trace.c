/* `trace summary`'s reader (engine/train/trace_summary.c): the input is a
 * trace file read as a stream; refusals are fine, crashes are not. What it
 * accepts it has validated, so no track is busy and waiting longer than
 * its step together (never "196% busy") and the hidden copy time is at most
 * the copy time. */
#include "fuzz_common.h"

#include "zo/common.h"
#include "zo/trace_file.h"

enum { MAX_STEPS = 8 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  static struct zo_trace_step_info steps[MAX_STEPS];
  FILE *f = fmemopen((void *)data, n ? n : 1, "rb");
  if (!f) abort();
  if (!n) getc(f); /* an empty stream */
  int n_steps = 0;
  const int err = zo_trace_summarize_stream(f, "fuzz", steps, MAX_STEPS, &n_steps);
  fclose(f);
  if (err) return 0;
  if (n_steps < 1 || n_steps > MAX_STEPS) abort();
  for (int k = 0; k < n_steps; k++) {
    const struct zo_trace_step_info *s = &steps[k];
    const double eps = 1e-6 * (1.0 + s->step_ms);
    if (!(s->step_ms >= 0) || s->n_tracks < 0 || s->n_tracks > ZO_TRACE_MAX_TRACKS) abort();
    for (int t = 0; t < s->n_tracks; t++) {
      if (s->tracks[t].busy_ms + s->tracks[t].wait_ms > s->step_ms + eps) abort(); /* over 100% */
    }
    if (s->hidden_ms > s->copy_io_ms + eps) abort();
  }
  return 0;
}
