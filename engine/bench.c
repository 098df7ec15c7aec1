/* `zoffload bench adamw|step` measurements (nvme is zo_nvme_bench in
 * offload/). AdamW is timed against a yardstick loop with exactly its memory
 * traffic and trivial arithmetic, in alternating back-to-back pairs, and the
 * medians reported: only the ratio is comparable across runs. */
#include "zo/bench.h"

#include <errno.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "zo/adamw.h"
#include "zo/plan.h"
#include "zo/sched.h"

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *x, int n) {
  qsort(x, (size_t)n, sizeof *x, cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* Same traffic as the AdamW step; v stays positive and nothing goes subnormal. */
static void yardstick(float *restrict p, const float *restrict g, float *restrict m,
                      float *restrict v, size_t n, float s) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    const float gi = g[i] * s;
    m[i] = m[i] + gi;
    v[i] = v[i] + gi * gi;
    p[i] = p[i] - gi;
  }
}

int zo_bench_adamw_run(size_t n, int threads, int reps, struct zo_bench_adamw *out) {
  if (threads > 0) omp_set_num_threads(threads);
  const size_t nbytes = (n * sizeof(float) + 63) / 64 * 64;
  float *p = aligned_alloc(64, nbytes), *g = aligned_alloc(64, nbytes);
  float *m = aligned_alloc(64, nbytes), *v = aligned_alloc(64, nbytes);
  double *ta = malloc((size_t)reps * sizeof(double)), *ty = malloc((size_t)reps * sizeof(double));
  double *ratio = malloc((size_t)reps * sizeof(double));
  int err = 0;
  if (!p || !g || !m || !v || !ta || !ty || !ratio) {
    char b[32];
    err = zo_error(-ENOMEM, "bench adamw: cannot allocate 4 x %s: pass a smaller --params",
                   zo_format_bytes(nbytes, b));
    goto out;
  }
  /* First touch with the kernels' static schedule: each thread's pages are its own. */
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    const uint32_t h = (uint32_t)(i * 2654435761u);
    const float u = (float)(h >> 8) * 0x1.0p-24f;
    g[i] = (h & 1 ? -1.0f : 1.0f) * (1e-3f + 1e-2f * u);
    p[i] = 0.02f * (u - 0.5f);
    m[i] = 0.1f * g[i];
    v[i] = 1e-3f * g[i] * g[i];
  }
  const struct zo_adamw_hparams hp = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                      .weight_decay = 0.1f};
  long t = 1;
  zo_adamw_update(p, g, m, v, n, &hp, true, t++, 1.0f);
  yardstick(p, g, m, v, n, 1e-3f);
  for (int r = 0; r < reps; r++) {
    for (int k = 0; k < 2; k++) {
      const bool adamw_now = (k == 0) == (r % 2 == 0);
      const double t0 = zo_time_s();
      if (adamw_now)
        zo_adamw_update(p, g, m, v, n, &hp, true, t++, 0.5f);
      else
        yardstick(p, g, m, v, n, 1e-3f);
      *(adamw_now ? &ta[r] : &ty[r]) = zo_time_s() - t0;
    }
    ratio[r] = ty[r] / ta[r];
  }
  out->n = n;
  out->threads = omp_get_max_threads();
  out->reps = reps;
  out->adamw_s = median(ta, reps);
  out->yardstick_s = median(ty, reps);
  out->ratio = median(ratio, reps);
  out->params_per_s = (double)n / out->adamw_s;
out:
  free(p);
  free(g);
  free(m);
  free(v);
  free(ta);
  free(ty);
  free(ratio);
  return err;
}

/* Synthetic tokens: a fixed pseudo-random sequence. */
static void fill_tokens(int32_t *in, int32_t *tg, size_t n, int V, uint64_t *state) {
  for (size_t i = 0; i < n; i++) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    in[i] = (int32_t)((*state >> 33) % (uint64_t)V);
    tg[i] = (int32_t)((*state >> 13) % (uint64_t)V);
  }
}

/* Mean step time over steps steps after 2 warm-up steps; with compute_only the
 * optimizer is skipped and only the micro-batches are timed. */
static int time_steps(struct zo_sched *s, const struct zo_config *cfg, int steps, bool compute_only,
                      double *mean_s) {
  struct zo_gpt2 *m = zo_sched_model(s);
  const size_t BT = (size_t)m->B * (size_t)m->T;
  struct zo_adamw_hparams hp = {.lr = (float)cfg->optimizer.lr, .beta1 = (float)cfg->optimizer.betas[0],
                                .beta2 = (float)cfg->optimizer.betas[1], .eps = (float)cfg->optimizer.eps,
                                .weight_decay = (float)cfg->optimizer.weight_decay};
  uint64_t rng = 7;
  double t0 = 0.0;
  int err = 0;
  for (int step = 1; step <= steps + 2 && !err; step++) {
    if (step == 3) {
      if ((err = zo_sched_synchronize(s))) break;
      t0 = zo_time_s();
    }
    for (int k = 0; k < cfg->grad_accum; k++) {
      int32_t *in, *tg;
      zo_sched_batch(s, &in, &tg);
      fill_tokens(in, tg, BT, m->cfg.vocab_size, &rng);
      zo_sched_micro_batch(s, k);
    }
    double loss;
    if (compute_only)
      err = zo_sched_synchronize(s);
    else
      err = zo_sched_step_end(s, step, &hp, cfg->gradient_clipping, &loss);
  }
  if (!err) err = zo_sched_synchronize(s);
  *mean_s = (zo_time_s() - t0) / steps;
  return err;
}

static struct zo_sched *bench_sched(const struct zo_config *cfg, const struct zo_placement *pl) {
  const struct zo_sched_config sc = {.model = cfg->model.gpt2, .B = cfg->micro_batch, .T = cfg->data.seq_len,
                                     .placement = *pl, .backend = zo_backend_cpu(),
                                     .host_budget = cfg->engine.host_memory_budget};
  struct zo_sched *s = zo_sched_init(&sc);
  if (!s) return NULL;
  struct zo_gpt2 *m = zo_sched_model(s);
  float *p = malloc(m->table.numel * sizeof(float));
  int err = p ? 0 : zo_error(-ENOMEM, "bench step: out of host memory");
  if (!err) {
    zo_gpt2_init_params(m, p, cfg->engine.seed);
    err = zo_sched_set_state(s, p, NULL, NULL);
  }
  free(p);
  if (err) {
    zo_sched_free(s);
    return NULL;
  }
  return s;
}

int zo_bench_step_run(const struct zo_config *cfg, int steps, struct zo_bench_step *out) {
  memset(out, 0, sizeof *out);
  out->steps = steps;
  struct zo_plan plan;
  int err = zo_plan_build(cfg, &cfg->model.gpt2, zo_backend_cpu(), &plan);
  if (err) return err;
  struct zo_placement dev = plan.placement;
  dev.optimizer = ZO_OFFLOAD_NONE;
  dev.grads_on_host = false;
  dev.param_slots = 0;
  struct zo_sched *s = bench_sched(cfg, &plan.placement);
  if (!s) return -ENOMEM;
  struct zo_sched_stats a, b;
  zo_sched_stats(s, &a);
  err = time_steps(s, cfg, steps, false, &out->step_s);
  zo_sched_stats(s, &b);
  /* The optimizer alone: its host functions' time less what they spent
   * waiting for NVMe reads (the I/O, measured separately). */
  out->optimizer_s = ((b.optimizer_s - a.optimizer_s) - (b.nvme_wait_s - a.nvme_wait_s)) / (steps + 2);
  if (!err) err = zo_sched_time_io(s, &out->io_s);
  zo_sched_free(s);
  if (err) return err;
  if (!(s = bench_sched(cfg, &dev))) return -ENOMEM;
  err = time_steps(s, cfg, steps, false, &out->device_step_s);
  if (!err) err = time_steps(s, cfg, steps, true, &out->compute_s);
  zo_sched_free(s);
  if (err) return err;
  double slowest = out->compute_s;
  if (out->io_s > slowest) slowest = out->io_s;
  if (out->optimizer_s > slowest) slowest = out->optimizer_s;
  out->overlap = out->step_s / slowest;
  return 0;
}
