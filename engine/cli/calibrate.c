/* zoffload bench calibrate: the rates of the cost model (zo/autoplan.h)
 * measured on this machine through the code a step runs: the backend's
 * matmul ops at model widths and attention at sequence lengths, in fp32 and
 * bf16, an elementwise
 * op, the backend's copies each way, CPU AdamW fp32 and 8-bit
 * (offload/adamw.c via zo_bench_adamw8bit_run), and the NVMe store
 * (zo_nvme_bench). Each figure is the best of a few repetitions after a
 * warm-up: the rate the machine can give, as a step sees it when alone. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zo/autoplan.h"
#include "zo/bench.h"
#include "zo/config.h"
#include "zo/nvme.h"
#include "zo/train_setup.h"

#define REPS 5

struct bufs {
  zo_backend_t be;
  zo_stream_t s;
  void *p[6];
  int n;
};

static void *dev_alloc(struct bufs *b, size_t nbytes, int *err) {
  void *p = NULL;
  if (*err) return NULL;
  if ((*err = b->be->mem_alloc(&p, nbytes))) return NULL;
  b->p[b->n++] = p;
  /* Not NaN garbage: denormal or NaN inputs run slow paths. */
  *err = b->be->memset_async(p, 0, nbytes, b->s);
  return p;
}

static void bufs_free(struct bufs *b) {
  for (int i = 0; i < b->n; i++) b->be->mem_free(b->p[i]);
  b->n = 0;
}

/* Seconds of one run of the statements: the best of REPS timings after a
 * warm-up, each timing as many runs back to back as make 0.1 s, so that a
 * short op is not lost in the clock's and the scheduler's noise (the other
 * processes of a shared machine come and go; the best is what it can give). */
#define TIME_BEST(best, stream, ...)                                    \
  do {                                                                  \
    best = 0;                                                           \
    int k_ = 1;                                                         \
    for (int r_ = 0; r_ <= REPS && !err; r_++) {                        \
      const double t0_ = zo_time_s();                                   \
      for (int i_ = 0; i_ < k_; i_++) { __VA_ARGS__; }                  \
      err = be->stream_synchronize(stream);                             \
      const double dt_ = (zo_time_s() - t0_) / k_;                      \
      if (r_ == 0) k_ = dt_ >= 0.1 ? 1 : dt_ <= 1e-6 ? 1000 : (int)(0.1 / dt_) + 1; \
      if (r_ > 0 && (best == 0 || dt_ < best)) best = dt_;              \
    }                                                                   \
  } while (0)

static int gemm_rate(zo_backend_t be, zo_stream_t s, int C, enum zo_dtype dt, double *flops) {
  /* Rows as a micro-batch has them (B x T of a few thousand); fewer at the
   * largest width, where the rate no longer depends on them, to keep it short. */
  const int N = C <= 1024 ? 2048 : 512, OC = 4 * C;
  const size_t e = zo_dtype_size(dt);
  struct bufs b = {.be = be, .s = s};
  int err = 0;
  void *inp = dev_alloc(&b, (size_t)N * C * e, &err), *w = dev_alloc(&b, (size_t)OC * C * e, &err);
  void *out = dev_alloc(&b, (size_t)N * OC * e, &err), *dinp = dev_alloc(&b, (size_t)N * C * e, &err);
  float *dw = dev_alloc(&b, (size_t)OC * C * sizeof(float), &err);
  double best = 0;
  if (!err) {
    TIME_BEST(best, s, {
      be->matmul_forward(out, inp, w, NULL, N, C, OC, dt, s);
      be->matmul_backward(dinp, dw, NULL, out, inp, w, N, C, OC, dt, s);
    });
  }
  bufs_free(&b);
  *flops = err || best <= 0 ? 0 : 6.0 * N * C * (double)OC / best;
  return err;
}

/* Causal attention of 8 heads of 64 at sequence length T (B x T of 2048
 * positions, one sequence at the longest). */
static int attn_rate(zo_backend_t be, zo_stream_t s, enum zo_dtype dt, int T, double *flops) {
  const int B = T >= 2048 ? 1 : 2048 / T, NH = 8, hs = 64, C = NH * hs;
  const size_t e = zo_dtype_size(dt);
  struct bufs b = {.be = be, .s = s};
  int err = 0;
  void *qkv = dev_alloc(&b, (size_t)B * T * 3 * C * e, &err), *out = dev_alloc(&b, (size_t)B * T * C * e, &err);
  void *att = dev_alloc(&b, (size_t)B * NH * T * T * e, &err), *datt = dev_alloc(&b, (size_t)B * NH * T * T * e, &err);
  void *dqkv = dev_alloc(&b, (size_t)B * T * 3 * C * e, &err);
  double best = 0;
  if (!err) {
    TIME_BEST(best, s, {
      be->attention_forward(out, att, qkv, B, T, NH, NH, hs, dt, s);
      be->attention_backward(dqkv, datt, out, qkv, att, B, T, NH, NH, hs, dt, s);
    });
  }
  bufs_free(&b);
  /* The architectures' count: 6 T C per token (T/2 keys on average, x3). */
  *flops = err || best <= 0 ? 0 : 6.0 * B * T * (double)T * C / best;
  return err;
}

static int ew_rate(zo_backend_t be, zo_stream_t s, double *bw) {
  const size_t n = (size_t)16 << 20;
  struct bufs b = {.be = be, .s = s};
  int err = 0;
  void *x = dev_alloc(&b, n * 4, &err), *y = dev_alloc(&b, n * 4, &err);
  double best = 0;
  if (!err) {
    TIME_BEST(best, s, {
      be->gelu_forward(y, x, n, ZO_F32, s);
      be->gelu_backward(y, x, y, n, ZO_F32, s);
    });
  }
  bufs_free(&b);
  *bw = err || best <= 0 ? 0 : 5.0 * 4.0 * (double)n / best; /* read x, write y; read x, y, write y */
  return err;
}

/* The fixed cost of an op: 64 tiny ones queued back to back. */
static int op_cost(zo_backend_t be, zo_stream_t s, double *op_s) {
  struct bufs b = {.be = be, .s = s};
  int err = 0;
  void *x = dev_alloc(&b, 4096, &err), *y = dev_alloc(&b, 4096, &err);
  double best = 0;
  if (!err) {
    TIME_BEST(best, s, {
      for (int k = 0; k < 64; k++) be->gelu_forward(y, x, 1024, ZO_F32, s);
    });
  }
  bufs_free(&b);
  *op_s = err || best <= 0 ? 0 : best / 64;
  return err;
}

static int copy_rate(zo_backend_t be, zo_stream_t s, double *h2d, double *d2h) {
  const size_t n = (size_t)128 << 20;
  struct bufs b = {.be = be, .s = s};
  int err = 0;
  void *d = dev_alloc(&b, n, &err);
  void *h = NULL;
  if (!err && posix_memalign(&h, 4096, n) != 0) err = zo_error(-ENOMEM, "calibrate: out of host memory");
  if (!err) memset(h, 1, n);
  const bool reg = !err && be->host_register && be->host_register(h, n) == 0;
  double bh = 0, bd = 0;
  if (!err) TIME_BEST(bh, s, err = be->memcpy_async(d, h, n, ZO_COPY_H2D, s));
  if (!err) TIME_BEST(bd, s, err = be->memcpy_async(h, d, n, ZO_COPY_D2H, s));
  if (reg) be->host_unregister(h);
  free(h);
  bufs_free(&b);
  *h2d = bh > 0 ? (double)n / bh : 0;
  *d2h = bd > 0 ? (double)n / bd : 0;
  return err;
}

/* The reference step at width W: a 2-layer GPT-2 of 64-wide heads, 8 x 256
 * tokens, a 1024-token vocabulary, all on the device, fp32 or bf16 (half);
 * its forward and backward measured and predicted by the rates in p (scale 1). */
static int ref_step(zo_backend_t be, int W, bool half, const struct zo_cost_profile *p, double *scale) {
  char emb[48], nh[48], dev[48];
  snprintf(emb, sizeof emb, "model.n_embd=%d", W);
  snprintf(nh, sizeof nh, "model.n_head=%d", W / 64);
  snprintf(dev, sizeof dev, "engine.device=%s", be->name);
  const char *sets[] = {"model.arch=gpt2", "model.n_layer=2", emb, nh, "model.vocab_size=1024",
                        "model.max_seq_len=256", "data.seq_len=256", "train_micro_batch_size_per_gpu=8",
                        "gradient_accumulation_steps=1", dev, half ? "bf16.enabled=true" : "bf16.enabled=false"};
  struct zo_config cfg;
  int err = zo_config_load_quiet(&cfg, NULL, sets, (int)(sizeof sets / sizeof sets[0]));
  if (err) return err;
  struct zo_plan plan;
  double measured = 0;
  err = zo_train_model_config(&cfg, &cfg.model.spec);
  if (!err) err = zo_plan_build(&cfg, &cfg.model.spec, be, &plan);
  if (!err) err = zo_bench_compute_run(&cfg, be, 2 * REPS, &measured);
  zo_config_free(&cfg);
  if (err) return err;
  struct zo_cost_profile unscaled = *p;
  for (int h = 0; h < 2; h++)
    for (int i = 0; i < ZO_COST_N_REF; i++) unscaled.compute_scale[h][i] = 1.0;
  struct zo_cost c;
  zo_cost_step(&unscaled, &plan, &c);
  *scale = c.compute_s > 0 && measured > 0 ? measured / c.compute_s : 1.0;
  return 0;
}

int zo_calibrate_run(zo_backend_t be, const char *nvme_path, struct zo_cost_profile *p) {
  zo_cost_profile_defaults(p, be->name);
  char model[256] = "", host[64] = "";
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
  host[sizeof host - 1] = '\0';
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof line, f))
      if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
        snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
        model[strcspn(model, "\n")] = '\0';
        break;
      }
    fclose(f);
  }
  snprintf(p->machine, sizeof p->machine, "%s, %s, %ld cores", host, model, sysconf(_SC_NPROCESSORS_ONLN));
  zo_stream_t s;
  int err = be->stream_create(&s);
  if (err) return err;
  for (int i = 0; i < ZO_COST_N_WIDTHS && !err; i++) {
    err = gemm_rate(be, s, p->widths[i], ZO_F32, &p->gemm_flops[0][i]);
    if (!err) err = gemm_rate(be, s, p->widths[i], ZO_BF16, &p->gemm_flops[1][i]);
  }
  for (int i = 0; i < ZO_COST_N_SEQ && !err; i++) {
    err = attn_rate(be, s, ZO_F32, p->seqs[i], &p->attn_flops[0][i]);
    if (!err) err = attn_rate(be, s, ZO_BF16, p->seqs[i], &p->attn_flops[1][i]);
  }
  if (!err) err = ew_rate(be, s, &p->mem_bw);
  if (!err) err = op_cost(be, s, &p->op_s);
  if (!err) err = copy_rate(be, s, &p->h2d_bw, &p->d2h_bw);
  be->stream_destroy(s);
  for (int h = 0; h < 2 && !err; h++)
    for (int i = 0; i < ZO_COST_N_REF && !err; i++) err = ref_step(be, p->ref_widths[i], h, p, &p->compute_scale[h][i]);
  if (err) return err;
  struct zo_bench_adamw8bit a;
  if ((err = zo_bench_adamw8bit_run((size_t)16 << 20, 0, 3, &a))) return err;
  p->adamw_pps = a.fp32_params_per_s;
  p->adamw8_pps = a.params_per_s;
  if (p->shared_cores) p->dev_adamw_pps = p->adamw_pps;
  if (nvme_path && nvme_path[0]) {
    double w = 0, r = 0;
    if ((err = zo_nvme_bench(nvme_path, (size_t)256 << 20, (size_t)1 << 20, 32, &w, &r))) return err;
    p->nvme_write_bw = w * 1e9;
    p->nvme_read_bw = r * 1e9;
  }
  p->measured = true;
  return 0;
}
