/* GEMM throughput of a backend's matmul ops at GPT-2 124M shapes: TFLOP/s of
 * matmul_forward (with bias) and matmul_backward (dinp, dweight, dbias) for
 * the qkv, attention projection, MLP and LM-head layers, in bf16 (fp32
 * accumulation; the fastest of them is the peak MFU is measured against)
 * and in fp32 (no TF32). Goes through the public backend table only, so it
 * measures what the engine would get, heuristic cache included. Timing:
 * warm-up, then back-to-back calls on one stream between two
 * stream_synchronize, host clock. Prints a table per dtype, one
 * `zoffload gemm ...` line per row (bf16 rows first) and one
 * `zoffload gemm_peak ...` line. --device cuda (default) exits 77 with the
 * reason when there is no GPU; --device cpu runs the same shapes on the CPU
 * backend (use a small --N there). */
#include "zo/backend.h"
#include "zo/cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct layer {
  const char *name;
  int C, OC;
  bool bias;
};

static const struct layer layers[] = {
    {"qkv", 768, 3 * 768, true},    {"attn.proj", 768, 768, true},
    {"mlp.fc", 768, 4 * 768, true}, {"mlp.proj", 4 * 768, 768, true},
    {"lm_head", 768, 50304, false},
};
#define N_LAYERS (sizeof layers / sizeof layers[0])

static zo_backend_t be;

static void *dev_alloc(size_t nbytes, const char *what) {
  void *p = NULL;
  if (be->mem_alloc(&p, nbytes)) {
    fprintf(stderr, "bench-gpu-gemm: %s: %s\n", what, zo_last_error());
    exit(1);
  }
  return p;
}

/* n random values in [-1, 1) as dt from host, so the GPU does not run on
 * zeros (it clocks higher on zeros). */
static void fill(void *dev, size_t n, enum zo_dtype dt, uint64_t seed, zo_stream_t stream) {
  const size_t chunk = (size_t)1 << 20, es = zo_dtype_size(dt);
  float *host = malloc(chunk * sizeof(float));
  void *host_dt = malloc(chunk * es);
  if (!host || !host_dt) exit(1);
  for (size_t i0 = 0; i0 < n; i0 += chunk) {
    size_t m = n - i0 < chunk ? n - i0 : chunk;
    for (size_t i = 0; i < m; i++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      host[i] = (float)((seed >> 40) & 0xffffff) / 8388608.0f - 1.0f;
    }
    zo_cpu_cast(host_dt, dt, host, ZO_F32, m);
    if (be->memcpy_async((char *)dev + i0 * es, host_dt, m * es, ZO_COPY_H2D, stream) ||
        be->stream_synchronize(stream)) {
      fprintf(stderr, "bench-gpu-gemm: upload: %s\n", zo_last_error());
      exit(1);
    }
  }
  free(host_dt);
  free(host);
}

static void sync_or_die(zo_stream_t stream) {
  if (be->stream_synchronize(stream)) {
    fprintf(stderr, "bench-gpu-gemm: %s\n", zo_last_error());
    exit(1);
  }
}

int main(int argc, char **argv) {
  const char *device = "cuda";
  int N = 8192, iters = 20;
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && !strcmp(argv[i], "--device"))
      device = argv[++i];
    else if (i + 1 < argc && !strcmp(argv[i], "--N"))
      N = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--iters"))
      iters = atoi(argv[++i]);
    else {
      fprintf(stderr,
              "usage: bench-gpu-gemm [--device cuda|cpu] [--N 8192 (rows = B*T)] [--iters 20]\n");
      return 2;
    }
  }
  if (N < 1 || iters < 1) return 2;
  be = zo_backend_init(device, 0);
  if (!be) {
    printf("SKIP: %s\n", zo_last_error());
    return 77;
  }
  size_t max_c = 0, max_oc = 0;
  for (size_t l = 0; l < N_LAYERS; l++) {
    if ((size_t)layers[l].C > max_c) max_c = (size_t)layers[l].C;
    if ((size_t)layers[l].OC > max_oc) max_oc = (size_t)layers[l].OC;
  }
  zo_stream_t stream;
  if (be->stream_create(&stream)) {
    fprintf(stderr, "bench-gpu-gemm: %s\n", zo_last_error());
    return 1;
  }
  /* Sized for fp32, the widest dtype; dweight and dbias are always fp32. */
  size_t n_inp = (size_t)N * max_c, n_w = max_c * max_oc, n_out = (size_t)N * max_oc;
  void *inp = dev_alloc(n_inp * sizeof(float), "inp"),
       *dinp = dev_alloc(n_inp * sizeof(float), "dinp");
  void *w = dev_alloc(n_w * sizeof(float), "weight");
  float *dw = dev_alloc(n_w * sizeof(float), "dweight");
  void *out = dev_alloc(n_out * sizeof(float), "out/dout");
  void *b = dev_alloc(max_oc * sizeof(float), "bias");
  float *db = dev_alloc(max_oc * sizeof(float), "dbias");
  if (be->memset_async(dw, 0, n_w * sizeof(float), stream) ||
      be->memset_async(db, 0, max_oc * sizeof(float), stream)) {
    fprintf(stderr, "bench-gpu-gemm: %s\n", zo_last_error());
    return 1;
  }

  static const enum zo_dtype dtypes[] = {ZO_BF16, ZO_F32};
  double peak = 0.0;
  const char *peak_layer = "";
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
    const enum zo_dtype dt = dtypes[d];
    const char *dt_name = dt == ZO_BF16 ? "bf16" : "fp32";
    fill(inp, n_inp, dt, 1, stream);
    fill(w, n_w, dt, 2, stream);
    fill(out, n_out, dt, 3, stream);
    fill(b, max_oc, dt, 4, stream);
    printf("backend %s, %s%s, N = B*T = %d rows, %d timed calls each\n", be->name, dt_name,
           dt == ZO_F32 ? " (no TF32)" : " (fp32 accumulation)", N, iters);
    printf("%-10s %6s %6s | %10s %9s | %10s %9s\n", "layer", "C", "OC", "fwd ms", "TFLOP/s",
           "bwd ms", "TFLOP/s");
    for (size_t l = 0; l < N_LAYERS; l++) {
      const struct layer *L = &layers[l];
      double flop = 2.0 * N * L->C * L->OC;
      /* Forward writes out; backward reads the same buffer as dout (its
       * contents do not matter for timing). */
      for (int i = 0; i < 2; i++)
        be->matmul_forward(out, inp, w, L->bias ? b : NULL, N, L->C, L->OC, dt, stream);
      sync_or_die(stream);
      double t0 = zo_time_s();
      for (int i = 0; i < iters; i++)
        be->matmul_forward(out, inp, w, L->bias ? b : NULL, N, L->C, L->OC, dt, stream);
      sync_or_die(stream);
      double fwd = (zo_time_s() - t0) / iters;
      for (int i = 0; i < 2; i++)
        be->matmul_backward(dinp, dw, L->bias ? db : NULL, out, inp, w, N, L->C, L->OC, dt, stream);
      sync_or_die(stream);
      t0 = zo_time_s();
      for (int i = 0; i < iters; i++)
        be->matmul_backward(dinp, dw, L->bias ? db : NULL, out, inp, w, N, L->C, L->OC, dt, stream);
      sync_or_die(stream);
      double bwd = (zo_time_s() - t0) / iters;
      const double fwd_tflops = flop / fwd * 1e-12, bwd_tflops = 2.0 * flop / bwd * 1e-12;
      printf("%-10s %6d %6d | %10.3f %9.2f | %10.3f %9.2f\n", L->name, L->C, L->OC, fwd * 1e3,
             fwd_tflops, bwd * 1e3, bwd_tflops);
      printf("zoffload gemm backend=%s dtype=%s layer=%s N=%d C=%d OC=%d fwd_tflops=%.2f "
             "bwd_tflops=%.2f\n",
             be->name, dt_name, L->name, N, L->C, L->OC, fwd_tflops, bwd_tflops);
      const double best = fwd_tflops > bwd_tflops ? fwd_tflops : bwd_tflops;
      if (dt == ZO_BF16 && best > peak) {
        peak = best;
        peak_layer = L->name;
      }
    }
  }
  /* The MFU denominator: the best bf16 GEMM rate this backend reaches. */
  printf("zoffload gemm_peak backend=%s dtype=bf16 N=%d tflops=%.2f layer=%s\n", be->name, N, peak,
         peak_layer);
  be->mem_free(inp), be->mem_free(dinp), be->mem_free(w), be->mem_free(dw);
  be->mem_free(out), be->mem_free(b), be->mem_free(db);
  be->stream_destroy(stream);
  return 0;
}
