/* `zoffload bench adamw|step|memory` measurements (nvme is zo_nvme_bench
 * in offload/). memory builds schedulers without stepping them. AdamW is
 * timed against a yardstick loop with exactly its memory traffic and trivial
 * arithmetic, in alternating back-to-back pairs, and the medians reported:
 * only the ratio is comparable across runs. AdamW8bit (`--optimizer
 * AdamW8bit`): the 8-bit update, the fp32 update and a loop with the 8-bit
 * update's traffic back to back in each round, in a rotating order, over the
 * same parameters and gradients; the 8-bit update needs no fp32 m, v, but
 * they are allocated for the side-by-side fp32 figure. Every benchmark of
 * the optimizer starts from the same synthetic state (synth_state). */
#include "zo/bench.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "zo/adamw.h"
#include "zo/adamw8bit.h"
#include "zo/lora.h"
#include "zo/plan.h"
#include "zo/trace_file.h"
#include "zo/lora.h"
#include "zo/sched.h"
#include "zo/train.h"

/* Element i of the synthetic optimizer state every benchmark starts from: a
 * gradient of either sign with magnitude in [1e-3, 1.1e-2), a small
 * parameter, and m, v of a run in progress (v > 0, nothing subnormal). */
static inline void synth_state(float *p, float *g, float *m, float *v, size_t i) {
  const uint32_t h = (uint32_t)(i * 2654435761u);
  const float u = (float)(h >> 8) * 0x1.0p-24f;
  g[i] = (h & 1 ? -1.0f : 1.0f) * (1e-3f + 1e-2f * u);
  p[i] = 0.02f * (u - 0.5f);
  m[i] = 0.1f * g[i];
  v[i] = 1e-3f * g[i] * g[i];
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
  for (size_t i = 0; i < n; i++) synth_state(p, g, m, v, i);
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
  out->adamw_s = zo_median(ta, reps);
  out->yardstick_s = zo_median(ty, reps);
  out->ratio = zo_median(ratio, reps);
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

/* ---- bench adamw --optimizer AdamW8bit ----------------------------------- */

/* The 8-bit update's traffic (p r/w, g, both codes r/w; the absmax, 1/16 of a
 * byte per parameter, is left out) with trivial arithmetic; parallel over the
 * same blocks as the update. */
static void yardstick8(float *restrict p, const float *restrict g, uint8_t *restrict mc, uint8_t *restrict vc,
                       size_t n, size_t block, float s) {
  const size_t nb = zo_adamw8bit_n_blocks(n, block);
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < nb; b++) {
    const size_t lo = b * block, hi = lo + block < n ? lo + block : n;
#pragma omp simd
    for (size_t i = lo; i < hi; i++) {
      p[i] = p[i] - g[i] * s;
      mc[i] = (uint8_t)(mc[i] + 1);
      vc[i] = (uint8_t)(vc[i] ^ 1);
    }
  }
}

static void *alloc64(size_t nbytes) { return aligned_alloc(64, (nbytes + 63) / 64 * 64); }

int zo_bench_adamw8bit_run(size_t n, int threads, int reps, struct zo_bench_adamw8bit *out) {
  if (threads > 0) omp_set_num_threads(threads);
  if (reps < 1) reps = 1;
  const size_t block = ZO_ADAMW8BIT_BLOCK, nb = zo_adamw8bit_n_blocks(n, block);
  float *p = alloc64(n * sizeof(float)), *g = alloc64(n * sizeof(float));
  float *m = alloc64(n * sizeof(float)), *v = alloc64(n * sizeof(float));
  uint8_t *mc = alloc64(n), *vc = alloc64(n);
  float *ma = alloc64(nb * sizeof(float)), *va = alloc64(nb * sizeof(float));
  double *t8 = malloc((size_t)reps * sizeof(double)), *t32 = malloc((size_t)reps * sizeof(double));
  double *ty = malloc((size_t)reps * sizeof(double)), *sp = malloc((size_t)reps * sizeof(double));
  double *yr = malloc((size_t)reps * sizeof(double));
  int err = 0;
  if (!p || !g || !m || !v || !mc || !vc || !ma || !va || !t8 || !t32 || !ty || !sp || !yr) {
    char b[32];
    err = zo_error(-ENOMEM, "bench adamw AdamW8bit: cannot allocate %s (18 bytes per parameter): pass a smaller --params",
                   zo_format_bytes(18 * n, b));
    goto out;
  }
  /* First touch block by block with the kernels' static schedule, so that each
   * thread's pages are its own. */
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < nb; b++) {
    const size_t lo = b * block, hi = lo + block < n ? lo + block : n;
    for (size_t i = lo; i < hi; i++) synth_state(p, g, m, v, i);
    zo_adamw8bit_quantize(mc + lo, ma + b, m + lo, hi - lo, block, ZO_QMAP_SIGNED);
    zo_adamw8bit_quantize(vc + lo, va + b, v + lo, hi - lo, block, ZO_QMAP_UNSIGNED);
  }
  const struct zo_adamw_hparams hp = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                      .weight_decay = 0.1f};
  long t8_step = 10, t32_step = 10;
  zo_adamw8bit_update(p, g, mc, ma, vc, va, n, block, &hp, true, t8_step++, 1.0f);
  zo_adamw_update(p, g, m, v, n, &hp, true, t32_step++, 1.0f);
  yardstick8(p, g, mc, vc, n, block, 1e-3f);
  for (int r = 0; r < reps; r++) {
    for (int k = 0; k < 3; k++) {
      const int which = (k + r) % 3;
      const double t0 = zo_time_s();
      if (which == 0)
        zo_adamw8bit_update(p, g, mc, ma, vc, va, n, block, &hp, true, t8_step++, 0.5f);
      else if (which == 1)
        zo_adamw_update(p, g, m, v, n, &hp, true, t32_step++, 0.5f);
      else
        yardstick8(p, g, mc, vc, n, block, 1e-3f);
      const double dt = zo_time_s() - t0;
      *(which == 0 ? &t8[r] : which == 1 ? &t32[r] : &ty[r]) = dt;
    }
    sp[r] = t32[r] / t8[r];
    yr[r] = ty[r] / t8[r];
  }
  out->n = n;
  out->block = block;
  out->threads = omp_get_max_threads();
  out->reps = reps;
  out->adamw8bit_s = zo_median(t8, reps);
  out->adamw_s = zo_median(t32, reps);
  out->yardstick_s = zo_median(ty, reps);
  out->speedup = zo_median(sp, reps);
  out->yardstick_ratio = zo_median(yr, reps);
  out->params_per_s = (double)n / out->adamw8bit_s;
  out->fp32_params_per_s = (double)n / out->adamw_s;
  out->bytes_per_param = 16.0 + 16.0 / (double)block;
  out->fp32_bytes_per_param = 28.0;
  out->state_bytes_per_param = 2.0 + 8.0 / (double)block;
out:
  free(p);
  free(g);
  free(m);
  free(v);
  free(mc);
  free(vc);
  free(ma);
  free(va);
  free(t8);
  free(t32);
  free(ty);
  free(sp);
  free(yr);
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

/* Mean step time over `steps` steps (after `warmup` untimed ones), steps
 * numbered from *t; with compute_only the optimizer is skipped and each
 * step's micro-batches are timed to completion. comm_s (may be NULL): the
 * mean seconds per step in collectives. With traced the timed steps are
 * recorded on the timeline (zo/trace.h), numbered 1..steps, recording
 * stopped at the end: its cost is part of the time. */
static int time_steps(struct zo_sched *s, const struct zo_config *cfg, int steps, int warmup,
                      bool compute_only, bool traced, long *t, double *mean_s, double *comm_s,
                      struct zo_bench_step *bytes) {
  struct zo_model *m = zo_sched_model(s);
  const size_t BT = (size_t)m->B * (size_t)m->T;
  struct zo_adamw_hparams hp = {.lr = (float)cfg->optimizer.lr, .beta1 = (float)cfg->optimizer.betas[0],
                                .beta2 = (float)cfg->optimizer.betas[1], .eps = (float)cfg->optimizer.eps,
                                .weight_decay = (float)cfg->optimizer.weight_decay};
  uint64_t rng = 7 + (uint64_t)*t;
  double t0 = zo_time_s();
  struct zo_sched_stats st0, st1;
  zo_sched_stats(s, &st0);
  int err = 0;
  uint64_t step_t0 = 0;
  for (int i = 0; i < steps + warmup && !err; i++) {
    if (i == warmup) {
      if ((err = zo_sched_synchronize(s))) break;
      zo_sched_stats(s, &st0);
      t0 = zo_time_s();
      if (traced) zo_trace_start();
    }
    if (traced && i >= warmup) {
      const uint64_t now = zo_trace_now();
      if (i > warmup) zo_trace_step(i - warmup, step_t0, now);
      zo_sched_trace_counters(s);
      step_t0 = now;
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
      err = zo_sched_step_end(s, ++*t, &hp, cfg->gradient_clipping, &loss);
  }
  if (!err) err = zo_sched_synchronize(s);
  if (traced) {
    zo_sched_trace_counters(s); /* the last step's bytes end here */
    zo_trace_step(steps, step_t0, zo_trace_now());
    zo_trace_stop();
  }
  *mean_s = (zo_time_s() - t0) / steps;
  zo_sched_stats(s, &st1);
  if (comm_s) *comm_s = (st1.comm_s - st0.comm_s) / steps;
  if (bytes) {
    bytes->h2d_bytes = (st1.h2d_bytes - st0.h2d_bytes) / (uint64_t)steps;
    bytes->d2h_bytes = (st1.d2h_bytes - st0.d2h_bytes) / (uint64_t)steps;
    bytes->nvme_read_bytes = (st1.nvme_read_bytes - st0.nvme_read_bytes) / (uint64_t)steps;
    bytes->nvme_write_bytes = (st1.nvme_write_bytes - st0.nvme_write_bytes) / (uint64_t)steps;
  }
  return err;
}

/* LoRA (pl->frozen): the lora section's adapters, PEFT's init from
 * engine.seed or lora.init_from's, for bench_sched. Returns 0 (*params
 * malloc'd, the table built) or -errno. */
static int bench_lora(const struct zo_config *cfg, struct zo_lora_table *t, float **params) {
  struct zo_lora l;
  int err = zo_lora_resolve(&cfg->lora, &cfg->model.spec, &l);
  if (err < 0 || (err = zo_lora_table_build(&cfg->model.spec, &l, t))) return err;
  *params = malloc(t->numel * sizeof **params + 1);
  if (!*params) err = zo_error(-ENOMEM, "out of host memory for the LoRA adapters");
  else if (l.from_adapter) err = zo_lora_load(t, cfg->lora.init_from, *params);
  else zo_lora_init(t, cfg->engine.seed, *params);
  if (err) {
    free(*params);
    zo_lora_table_free(t);
  }
  return err;
}

static struct zo_sched *bench_sched(const struct zo_config *cfg, const struct zo_placement *pl,
                                    zo_backend_t be, zo_comm_t comm) {
  struct zo_lora_table lt;
  float *lp = NULL;
  if (pl->frozen && bench_lora(cfg, &lt, &lp)) return NULL;
  const struct zo_sched_config sc = {.model = cfg->model.spec, .B = cfg->micro_batch, .T = cfg->data.seq_len,
                                     .placement = *pl, .backend = be,
                                     .host_budget = cfg->engine.host_memory_budget, .comm = comm,
                                     .lora = pl->frozen ? &lt : NULL, .lora_params = lp};
  struct zo_sched *s = zo_sched_init(&sc);
  if (pl->frozen) {
    free(lp);
    zo_lora_table_free(&lt);
  }
  if (!s) return NULL;
  int err = zo_sched_state_init(s, cfg->engine.seed);
  if (!err) err = zo_sched_state_fresh(s, ZO_STATE_M);
  if (!err) err = zo_sched_state_fresh(s, ZO_STATE_V);
  const int done = zo_sched_state_done(s);
  if (err || done) {
    zo_sched_free(s);
    return NULL;
  }
  return s;
}

/* cfg's plan (placement, budgets) and the same placement with everything on
 * the device: the side-by-side figure of bench step, calibrate's reference. */
static int plan_and_device(const struct zo_config *cfg, zo_backend_t be, struct zo_plan *plan,
                           struct zo_placement *dev) {
  int err = zo_plan_build(cfg, &cfg->model.spec, be, plan);
  if (err) return err;
  *dev = plan->placement;
  dev->optimizer = ZO_OFFLOAD_NONE;
  dev->grads_on_host = false;
  dev->param_slots = 0;
  dev->param_nvme = dev->grads_nvme = false; /* no NVMe file either (a frozen base's would open one) */
  return 0;
}

int zo_bench_compute_run(const struct zo_config *cfg, zo_backend_t be, int reps, double *seconds) {
  *seconds = 0;
  struct zo_plan plan;
  struct zo_placement dev;
  int err = plan_and_device(cfg, be, &plan, &dev);
  if (err) return err;
  struct zo_sched *s = bench_sched(cfg, &dev, be, NULL);
  if (!s) return -ENOMEM;
  long t = 0;
  double best = 0;
  for (int r = 0; r < reps && !err; r++) {
    double one;
    err = time_steps(s, cfg, 1, r == 0 ? 1 : 0, true, false, &t, &one, NULL, NULL);
    if (!err && (best == 0 || one < best)) best = one;
  }
  zo_sched_free(s);
  *seconds = best;
  return err;
}

/* The optimizer alone: the step's host work (per-tensor sums of squares for
 * the norm, then zo_adamw_update per tensor) over host arrays of the model's
 * size, nothing else running; the best of reps passes after one warm-up. */
struct opt_bench {
  const struct zo_tensor_table *t;
  float *p, *g, *m, *v; /* (numel) */
};

static int opt_bench_init(struct opt_bench *o, const struct zo_tensor_table *t) {
  const size_t nb = (t->numel * sizeof(float) + 63) / 64 * 64;
  o->t = t;
  o->p = aligned_alloc(64, nb), o->g = aligned_alloc(64, nb);
  o->m = aligned_alloc(64, nb), o->v = aligned_alloc(64, nb);
  if (!o->p || !o->g || !o->m || !o->v) return zo_error(-ENOMEM, "bench step: out of host memory");
  for (size_t i = 0; i < t->numel; i++) synth_state(o->p, o->g, o->m, o->v, i);
  return 0;
}

static void opt_bench_free(struct opt_bench *o) {
  free(o->p);
  free(o->g);
  free(o->m);
  free(o->v);
}

static double opt_bench_time(struct opt_bench *o, const struct zo_config *cfg, int reps) {
  const struct zo_adamw_hparams hp = {.lr = (float)cfg->optimizer.lr, .beta1 = (float)cfg->optimizer.betas[0],
                                      .beta2 = (float)cfg->optimizer.betas[1], .eps = (float)cfg->optimizer.eps,
                                      .weight_decay = (float)cfg->optimizer.weight_decay};
  double best = 0.0;
  for (int r = 0; r <= reps; r++) {
    const double t0 = zo_time_s();
    double sumsq = 0.0;
    for (int i = 0; i < o->t->n_tensors; i++)
      sumsq += zo_sumsq(o->g + o->t->tensors[i].offset, o->t->tensors[i].numel);
    const float coef = zo_clip_coef(sqrt(sumsq), cfg->gradient_clipping);
    for (int i = 0; i < o->t->n_tensors; i++) {
      const struct zo_tensor_info *ti = &o->t->tensors[i];
      zo_adamw_update(o->p + ti->offset, o->g + ti->offset, o->m + ti->offset, o->v + ti->offset, ti->numel,
                      &hp, ti->decay, r + 1, coef);
    }
    const double dt = zo_time_s() - t0;
    if (r > 0 && (r == 1 || dt < best)) best = dt;
  }
  return best;
}

#define BENCH_ROUNDS 5

/* Rounds of: configured steps, all-device steps, compute alone, I/O alone,
 * optimizer alone, back to back; each figure is the median over rounds and
 * the overlap is the median of the per-round ratios, so a drift of the
 * machine's speed between rounds cancels. */
int zo_bench_step_run(const struct zo_config *cfg, int steps, zo_comm_t comm, struct zo_bench_step *out) {
  memset(out, 0, sizeof *out);
  out->steps = steps;
  zo_backend_t be = zo_train_backend(cfg, comm);
  if (!be) return -ENODEV;
  snprintf(out->backend, sizeof out->backend, "%s", be->name);
  struct zo_plan plan;
  struct zo_placement dev;
  int err = plan_and_device(cfg, be, &plan, &dev);
  if (err) return err;
  struct zo_sched *s = bench_sched(cfg, &plan.placement, be, comm), *sd = s ? bench_sched(cfg, &dev, be, comm) : NULL;
  struct opt_bench ob = {0};
  if (!s || !sd) {
    zo_sched_free(s);
    return -ENOMEM;
  }
  double step[BENCH_ROUNDS], device[BENCH_ROUNDS], compute[BENCH_ROUNDS], io[BENCH_ROUNDS], opt[BENCH_ROUNDS];
  double ratio[BENCH_ROUNDS], overlap[BENCH_ROUNDS], comm_s[BENCH_ROUNDS];
  double traced[BENCH_ROUNDS], traced_ratio[BENCH_ROUNDS];
  /* engine.trace.path: each round also times the configured steps traced
   * (the CPU backend records the timeline); the last round's is written. */
  const bool tracing = cfg->engine.trace.path[0] && be->stream_set_name && (!comm || zo_comm_rank(comm) == 0);
  long ts = 0, td = 0;
  err = tracing ? zo_trace_path_check(cfg->engine.trace.path) : 0;
  if (!err) err = opt_bench_init(&ob, &zo_sched_model(s)->table);
  for (int r = 0; r < BENCH_ROUNDS && !err; r++) {
    const int warmup = r == 0 ? 2 : 0;
    if ((err = time_steps(s, cfg, steps, warmup, false, false, &ts, &step[r], &comm_s[r], r == 0 ? out : NULL)) ||
        (tracing && (err = time_steps(s, cfg, steps, 0, false, true, &ts, &traced[r], NULL, NULL))) ||
        (err = time_steps(sd, cfg, steps, warmup, false, false, &td, &device[r], NULL, NULL)) ||
        (err = time_steps(sd, cfg, steps, warmup, true, false, &td, &compute[r], NULL, NULL)) ||
        (err = zo_sched_time_io(s, &io[r])))
      break;
    if (tracing) traced_ratio[r] = traced[r] / step[r];
    opt[r] = opt_bench_time(&ob, cfg, 3);
    double slowest = compute[r];
    if (io[r] > slowest) slowest = io[r];
    if (opt[r] > slowest) slowest = opt[r];
    ratio[r] = step[r] / device[r];
    overlap[r] = step[r] / slowest;
  }
  opt_bench_free(&ob);
  zo_sched_free(sd);
  zo_sched_free(s);
  if (!err && tracing) {
    out->traced_step_s = zo_median(traced, BENCH_ROUNDS);
    out->trace_overhead = zo_median(traced_ratio, BENCH_ROUNDS) - 1.0;
    err = zo_trace_write_json(cfg->engine.trace.path);
    out->traced = !err;
  }
  if (err) return err;
  out->step_s = zo_median(step, BENCH_ROUNDS);
  out->device_step_s = zo_median(device, BENCH_ROUNDS);
  out->compute_s = zo_median(compute, BENCH_ROUNDS);
  out->io_s = zo_median(io, BENCH_ROUNDS);
  out->optimizer_s = zo_median(opt, BENCH_ROUNDS);
  out->device_ratio = zo_median(ratio, BENCH_ROUNDS);
  const double tokens = (double)cfg->micro_batch * cfg->data.seq_len * cfg->grad_accum;
  const double flops = (plan.placement.frozen ? zo_model_lora_flops_per_token(&cfg->model.spec, cfg->data.seq_len,
                                                                              plan.lora_numel)
                                              : zo_model_flops_per_token(&cfg->model.spec, cfg->data.seq_len)) *
                       tokens;
  out->tokens_per_s = tokens / out->step_s;
  out->device_tokens_per_s = tokens / out->device_step_s;
  out->tflops = flops / out->step_s / 1e12;
  out->device_tflops = flops / out->device_step_s / 1e12;
  out->overlap = zo_median(overlap, BENCH_ROUNDS);
  out->rounds = BENCH_ROUNDS;
  out->comm_s = zo_median(comm_s, BENCH_ROUNDS);
  /* Every rank's figures, for rank 0 to print. */
  out->ranks = comm ? zo_comm_size(comm) : 1;
  double mine[2] = {out->tokens_per_s, out->comm_s};
  double *all = malloc((size_t)out->ranks * sizeof mine);
  if (!all) return zo_error(-ENOMEM, "bench step: out of host memory for %d ranks' figures", out->ranks);
  err = comm ? zo_comm_allgather(comm, mine, sizeof mine, all) : 0;
  if (!comm) memcpy(all, mine, sizeof mine);
  for (int r = 0; r < out->ranks && !err; r++) {
    out->total_tokens_per_s += all[2 * r];
    if (r < ZO_BENCH_MAX_RANKS) {
      out->rank_tokens_per_s[r] = all[2 * r];
      out->rank_comm_s[r] = all[2 * r + 1];
    }
  }
  free(all);
  return err;
}

/* ---- bench memory -------------------------------------------------------- */

/* One row's config: cfg with the row's savers. From row 2 on they add up:
 * bf16, then activation checkpointing, then the optimizer offloaded, then
 * the parameters too, then the kept activations in host memory. */
static void memory_row_config(const struct zo_config *cfg, int row, struct zo_config *v) {
  *v = *cfg;
  v->bf16 = row >= 2;
  v->fp16.enabled = false;
  v->zero.stage = row >= 5 ? 3 : row >= 4 ? 2 : 0;
  v->zero.offload_optimizer.device = row >= 4 ? ZO_OFFLOAD_CPU : ZO_OFFLOAD_NONE;
  v->zero.offload_param.device = row >= 5 ? ZO_OFFLOAD_CPU : ZO_OFFLOAD_NONE;
  v->activation_checkpointing.enabled = row >= 3;
  v->activation_checkpointing.cpu_checkpointing = row >= 6;
  v->activation_checkpointing.number_checkpoints = 0;
}

int zo_bench_memory_run(const struct zo_config *cfg, struct zo_bench_memory_row rows[ZO_BENCH_MEMORY_ROWS]) {
  static const char *const names[ZO_BENCH_MEMORY_ROWS] = {
      "fp32, all on device, unchunked LM head", "fp32, all on device (chunked LM head)",
      "bf16 (chunked LM head)", "+ activation checkpointing", "+ optimizer offload",
      "+ parameter offload", "all combined (+ checkpoints in host memory)"};
  static const char *const sets[ZO_BENCH_MEMORY_ROWS] = {
      "", "", "--set bf16.enabled=true", "+ --set activation_checkpointing.enabled=true",
      "+ --set zero_optimization.stage=2 --set zero_optimization.offload_optimizer.device=cpu",
      "+ --set zero_optimization.stage=3 --set zero_optimization.offload_param.device=cpu",
      "+ --set activation_checkpointing.cpu_checkpointing=true"};
  zo_backend_t be = zo_backend_cpu();
  memset(rows, 0, ZO_BENCH_MEMORY_ROWS * sizeof *rows);
  for (int r = 0; r < ZO_BENCH_MEMORY_ROWS; r++) {
    struct zo_bench_memory_row *row = &rows[r];
    row->name = names[r];
    row->sets = sets[r];
    struct zo_config v;
    struct zo_plan plan;
    memory_row_config(cfg, r, &v);
    int err = zo_plan_build(&v, &v.model.spec, be, &plan);
    if (err) return err;
    row->device_planned = plan.total[ZO_TIER_DEVICE];
    row->host_planned = plan.total[ZO_TIER_HOST];
    if (r == 0) {
      /* The chunked head cannot be turned off: one chunk of all B*T rows is
       * the unchunked head's logits. */
      struct zo_model_layout lo = zo_placement_layout(&plan.placement);
      const size_t chunked = zo_model_device_plan(&v.model.spec, plan.B, plan.T, &lo, NULL);
      lo.head_chunk_rows = plan.B * plan.T;
      /* The scheduler's own device bytes (norm partials) stay as planned. */
      row->device_planned = plan.total[ZO_TIER_DEVICE] - chunked +
                            zo_model_device_plan(&v.model.spec, plan.B, plan.T, &lo, NULL);
      row->status = ZO_BENCH_MEMORY_PLANNED_ONLY;
      snprintf(row->reason, sizeof row->reason,
               "the chunked LM head is always on: plan with one chunk of all %d x %d rows", plan.B, plan.T);
      continue;
    }
    size_t free_b = 0, total_b = 0;
    if ((err = be->mem_info(&free_b, &total_b))) return err;
    const size_t need = row->device_planned + row->host_planned;
    if ((double)need > 0.6 * (double)free_b) {
      char a[32], b[32];
      row->status = ZO_BENCH_MEMORY_PLANNED_ONLY;
      snprintf(row->reason, sizeof row->reason,
               "building it needs %s of RAM (device arena on the CPU backend + host pool), over 60%% of "
               "the %s available", zo_format_bytes(need, a), zo_format_bytes(free_b, b));
      continue;
    }
    struct zo_placement pl = plan.placement;
    pl.pin = false; /* bytes, not speed: no page locking of gigabytes */
    const struct zo_sched_config sc = {.model = v.model.spec, .B = plan.B, .T = plan.T, .placement = pl,
                                       .backend = be, .host_budget = 0};
    struct zo_sched *s = zo_sched_init(&sc);
    if (!s) return zo_error(-ENOMEM, "bench memory: building \"%s\": %s", row->name, zo_last_error());
    struct zo_sched_mem mem;
    err = zo_sched_memory(s, &mem);
    zo_sched_free(s);
    if (err) return err;
    row->status = ZO_BENCH_MEMORY_MEASURED;
    row->device_measured = mem.peak_total[ZO_TIER_DEVICE];
    row->device_free = mem.capacity[ZO_TIER_DEVICE] - mem.used[ZO_TIER_DEVICE];
    row->host_measured = mem.peak_total[ZO_TIER_HOST];
  }
  return 0;
}
