/* The CPU backend's 4-bit GEMM (matmul_q4_forward, and matmul_q4_backward_dx)
 * on one shape: a random (OC, C) weight quantized to NF4 (blocks of 64,
 * double-quantized absmax, QLoRA's defaults), random inputs, the median of
 * --reps timed calls after one warm-up. Also matmul_forward over the same
 * weight dequantized to dt (the roofline the fused op cannot beat: the same
 * GEMM with the weight already wide). Prints one line per op:
 *   zoffload op=q4_forward dt=bf16 N=.. C=.. OC=.. threads=.. ms=.. gflops=..
 * benchmarks/q4_gemm.py runs it beside bitsandbytes and torch. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zo/backend.h"
#include "zo/cpu.h"
#include "zo/quant4.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (!p) {
    fprintf(stderr, "out of memory: %zu bytes\n", n);
    exit(1);
  }
  return p;
}

enum op { OP_Q4_FORWARD, OP_Q4_DX, OP_DENSE_FORWARD };
static const char *const op_names[] = {"q4_forward", "q4_backward_dx", "dense_forward"};

struct bench {
  zo_backend_t be;
  struct zo_quant4_weight w;
  void *inp, *out, *dout, *dinp, *deq;
  int N;
  enum zo_dtype dt;
};

static void run(const struct bench *b, enum op op) {
  if (op == OP_Q4_FORWARD) b->be->matmul_q4_forward(b->out, b->inp, b->w, NULL, b->N, b->dt, NULL);
  else if (op == OP_Q4_DX) b->be->matmul_q4_backward_dx(b->dinp, b->dout, b->w, b->N, b->dt, NULL);
  else b->be->matmul_forward(b->out, b->inp, b->deq, NULL, b->N, b->w.C, b->w.OC, b->dt, NULL);
}

int main(int argc, char **argv) {
  int N = 512, C = 4096, OC = 4096, threads = 2, reps = 5;
  enum zo_dtype dt = ZO_BF16;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--N")) N = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--C")) C = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--OC")) OC = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--dt") && !strcmp(argv[i + 1], "fp32")) dt = ZO_F32;
    else if (!strcmp(argv[i], "--dt") && !strcmp(argv[i + 1], "bf16")) dt = ZO_BF16;
    else {
      fprintf(stderr, "unknown option %s %s: valid are --N --C --OC --threads --reps, --dt fp32|bf16\n",
              argv[i], argv[i + 1]);
      return 2;
    }
  }
  if (N <= 0 || C <= 0 || OC <= 0 || threads <= 0 || reps <= 0 || reps > 100) {
    fprintf(stderr, "need positive N, C, OC, threads and 1 <= reps <= 100\n");
    return 2;
  }
  omp_set_num_threads(threads);
  const size_t numel = (size_t)OC * C, nb = zo_quant4_n_blocks(numel, 64), es = dt == ZO_F32 ? 4 : 2;
  float *w32 = xmalloc(numel * sizeof(float)), *absmax = xmalloc(nb * sizeof(float));
  srand(48);
  for (size_t i = 0; i < numel; i++) w32[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * 0.1f;
  uint8_t *packed = xmalloc(zo_quant4_packed_nbytes(numel)), *qabsmax = xmalloc(nb);
  float *absmax2 = xmalloc((nb + 255) / 256 * sizeof(float));
  zo_quant4_quantize(packed, absmax, w32, ZO_F32, numel, 64, ZO_QUANT4_NF4);
  struct zo_quant4_nested nq = {.qabsmax = qabsmax, .absmax2 = absmax2};
  zo_quant4_nested_quantize(&nq, absmax, nb, zo_quant4_nested_map());
  zo_quant4_nested_dequantize(absmax, &nq, nb, zo_quant4_nested_map());
  zo_quant4_dequantize(w32, packed, absmax, numel, 64, ZO_QUANT4_NF4);
  struct bench b = {.be = zo_backend_cpu(), .N = N, .dt = dt};
  b.w = (struct zo_quant4_weight){.packed = packed, .qabsmax = qabsmax, .absmax2 = absmax2,
                                  .map = zo_quant4_nested_map(), .offset = nq.offset, .blocksize = 64,
                                  .type = ZO_QUANT4_NF4, .OC = OC, .C = C};
  b.deq = xmalloc(numel * es);
  zo_cpu_cast(b.deq, dt, w32, ZO_F32, numel);
  float *x = xmalloc((size_t)N * (C > OC ? C : OC) * sizeof(float));
  for (size_t i = 0; i < (size_t)N * (C > OC ? C : OC); i++) x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  b.inp = xmalloc((size_t)N * C * es), b.dinp = xmalloc((size_t)N * C * es);
  b.out = xmalloc((size_t)N * OC * es), b.dout = xmalloc((size_t)N * OC * es);
  zo_cpu_cast(b.inp, dt, x, ZO_F32, (size_t)N * C);
  zo_cpu_cast(b.dout, dt, x, ZO_F32, (size_t)N * OC);
  printf("zoffload gemm kernel: %s\n", zo_cpu_gemm_kernel());
  for (int op = 0; op < 3; op++) {
    double t[100];
    run(&b, (enum op)op);
    for (int r = 0; r < reps; r++) {
      const double t0 = now_s();
      run(&b, (enum op)op);
      t[r] = now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    const double s = t[reps / 2];
    printf("zoffload op=%s dt=%s N=%d C=%d OC=%d threads=%d ms=%.2f gflops=%.1f\n", op_names[op],
           dt == ZO_F32 ? "fp32" : "bf16", N, C, OC, threads, s * 1e3, 2.0 * N * C * OC / s * 1e-9);
    fflush(stdout);
  }
  free(w32), free(absmax), free(packed), free(qabsmax), free(absmax2), free(b.deq), free(x);
  free(b.inp), free(b.dinp), free(b.out), free(b.dout);
  return 0;
}
