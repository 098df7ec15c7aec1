/* Per-thread fp32 scratch for the CPU ops that compute bf16/fp16 operands in
 * fp32 tiles (GEMMs, attention heads, cross-entropy rows). Each OS thread --
 * a stream worker, its OpenMP team, the caller -- owns one buffer that only
 * grows, so the pages are touched once per thread and not per op; the
 * buffer is freed when the thread exits. Tiles are bounded (ops size them
 * from cache blocks, not from tensor sizes), so each buffer stays a few MiB.
 * Contents never survive between calls. Slot 1 is a second buffer for an
 * op that holds one tile while calling code that takes slot 0 (the 4-bit
 * GEMMs keep a dequantized weight panel there around the GEMM's tiles). */
#include "cpu.h"

#include <pthread.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct scratch {
  void *p[ZO_CPU_SCRATCH_SLOTS];
  size_t nbytes[ZO_CPU_SCRATCH_SLOTS];
};

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_release(void *arg) {
  struct scratch *s = arg;
  for (int i = 0; i < ZO_CPU_SCRATCH_SLOTS; i++) free(s->p[i]);
  free(s);
}

static void scratch_key_create(void) {
  int err = pthread_key_create(&scratch_key, scratch_release);
  if (err) zo_abort(__FILE__, __LINE__, "pthread_key_create: %s", strerror(err));
}

/* The main thread never runs key destructors: free its buffer at exit. */
static struct scratch *main_scratch;
static void scratch_main_release(void) {
  if (main_scratch) scratch_release(main_scratch);
  main_scratch = NULL;
}

float *zo_cpu_scratch(size_t n_floats) { return zo_cpu_scratch_slot(0, n_floats); }

float *zo_cpu_scratch_slot(int slot, size_t n_floats) {
  ZO_ASSERT(slot >= 0 && slot < ZO_CPU_SCRATCH_SLOTS);
  pthread_once(&scratch_once, scratch_key_create);
  struct scratch *s = pthread_getspecific(scratch_key);
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) zo_abort(__FILE__, __LINE__, "out of host memory for CPU op scratch");
    int err = pthread_setspecific(scratch_key, s);
    if (err) zo_abort(__FILE__, __LINE__, "pthread_setspecific: %s", strerror(err));
    if (gettid() == getpid()) {
      main_scratch = s;
      atexit(scratch_main_release);
    }
  }
  const size_t need = n_floats * sizeof(float);
  if (need > s->nbytes[slot]) {
    free(s->p[slot]);
    const size_t nbytes = (need + 4095) / 4096 * 4096;
    s->p[slot] = aligned_alloc(4096, nbytes);
    if (!s->p[slot])
      zo_abort(__FILE__, __LINE__, "out of host memory: %zu bytes of CPU op scratch for one thread",
               nbytes);
    s->nbytes[slot] = nbytes;
  }
  return s->p[slot];
}
