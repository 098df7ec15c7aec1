/* Mixed precision through the engine (the placement and checkpointing
 * invariants in bf16 and fp16 live in test-engine-offload and
 * test-engine-memory): the fp16 loss scaler's rule step by step against
 * DeepSpeed's, a skipped step leaving no trace in any placement (the
 * parameters, master weights and m, v after an overflowed step and a clean
 * one equal those after the clean one alone, bit for bit), a forced overflow
 * through zo_train whose logged scale sequence follows the rule and whose
 * checkpoint resumes bit-identically mid-sequence, bf16 and fp16 tracking the
 * fp32 loss curve, and on real text (fortune files) bf16 and fp16 validation
 * losses within 2% of fp32. Every case but the scaler's rule and the real
 * text runs for GPT-2 and for a Llama with grouped-query attention and a
 * tied LM head; the real-text case (900 steps of a width-128 model, most
 * of this binary's time) stays GPT-2 only. Re-runs itself with random
 * stream delays. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo/loss_scale.h"
#include "zo_engine_test.h"

static struct zo_etest_files fx;
static bool delay_mode;

static const char *const gpt2_model[] = {ZO_ETEST_GPT2_SMALL};
/* 6 query heads on 2 key/value heads of size 6, an MLP width of 50, the LM
 * head tied to the embedding. */
static const char *const llama_model[] = {"model.arch=llama", "model.n_layer=3", "model.n_head=6",
                                          "model.num_key_value_heads=2", "model.n_embd=36",
                                          "model.intermediate_size=50", "model.vocab_size=200",
                                          "model.max_seq_len=16", "model.tie_word_embeddings=true"};

/* The learning rate of the loss-curve case is one at which that model's
 * 20-step curve is smooth (at 0.01 GPT-2 spikes; at 0.003 the Llama's
 * gradient norm goes from 1.5 to 4.0 in the last three steps, and bf16 and
 * fp16 both leave the fp32 curve there by 0.3-0.5%). */
struct arch {
  struct zo_etest_arch run; /* the model */
  const char *curve_lr;     /* --set of the loss-curve case's learning rate */
};
static const struct arch archs[] = {
    {ZO_ETEST_ARCH("gpt2", gpt2_model), "optimizer.params.lr=0.003"},
    {ZO_ETEST_ARCH("llama", llama_model), "optimizer.params.lr=0.0015"},
};
static const struct arch *arch; /* the one the cases run for */

/* A run's name with the architecture. */
static const char *run_name(const char *name) { return zo_etest_run_name(&arch->run, NULL, name); }

#define N_STEPS 20

static int load(struct zo_config *cfg, const char *const *extra, int n_extra) {
  return zo_etest_placement_load(cfg, &fx, &arch->run, NULL, 0, extra, n_extra);
}

/* ---- the scaler's rule ----------------------------------------------------- */

static int scaler_with(struct zo_loss_scaler *ls, const char *const *sets, int n) {
  struct zo_config cfg;
  CHECK(zo_config_load(&cfg, NULL, sets, n) == 0);
  zo_loss_scaler_init(ls, &cfg);
  zo_config_free(&cfg);
  return 0;
}

static int test_loss_scaler_rule(void) {
  /* DeepSpeed's DynamicLossScaler, worked by hand: scale 16, window 3,
   * hysteresis 2. */
  const char *dyn[] = {"fp16.enabled=true", "fp16.initial_scale_power=4", "fp16.loss_scale_window=3",
                       "fp16.hysteresis=2"};
  struct zo_loss_scaler ls;
  CHECK(scaler_with(&ls, dyn, ZO_ARRAY_LEN(dyn)) == 0);
  CHECK(ls.enabled && ls.dynamic && ls.scale == 16.0);
  const bool overflow[] = {true, true, false, false, false, false, true, false, false, true, true, true};
  /* after each step: the scale and the hysteresis left */
  const double scale[] = {16, 8, 8, 8, 16, 16, 16, 16, 16, 8, 4, 2};
  const int hyst[] = {1, 1, 1, 1, 2, 2, 1, 1, 1, 1, 1, 1};
  for (int i = 0; i < 12; i++) {
    CHECK(zo_loss_scaler_update(&ls, overflow[i]) == 0);
    if (ls.scale != scale[i] || ls.hysteresis_left != hyst[i]) {
      fprintf(stderr, "  step %d: scale %g hysteresis %d, want %g %d\n", i, ls.scale, ls.hysteresis_left,
              scale[i], hyst[i]);
      return 1;
    }
  }
  /* From a clean start the first doubling comes after `window` clean steps. */
  CHECK(scaler_with(&ls, dyn, ZO_ARRAY_LEN(dyn)) == 0);
  for (int i = 0; i < 3; i++) CHECK(zo_loss_scaler_update(&ls, false) == 0);
  CHECK(ls.scale == 32.0);
  for (int i = 0; i < 3; i++) CHECK(zo_loss_scaler_update(&ls, false) == 0);
  CHECK(ls.scale == 64.0);
  /* At the minimum with no hysteresis left an overflow is an error. */
  const char *low[] = {"fp16.enabled=true", "fp16.initial_scale_power=1", "fp16.min_loss_scale=1",
                       "fp16.hysteresis=1"};
  CHECK(scaler_with(&ls, low, ZO_ARRAY_LEN(low)) == 0);
  CHECK(zo_loss_scaler_update(&ls, true) == 0 && ls.scale == 1.0);
  CHECK(zo_loss_scaler_update(&ls, true) == -ERANGE);
  CHECK(strstr(zo_last_error(), "fp16.min_loss_scale") != NULL);
  /* A static scale never moves; bf16 and fp32 have scale 1. */
  const char *stat[] = {"fp16.enabled=true", "fp16.loss_scale=128"};
  CHECK(scaler_with(&ls, stat, ZO_ARRAY_LEN(stat)) == 0);
  CHECK(!ls.dynamic && ls.scale == 128.0);
  for (int i = 0; i < 5; i++) CHECK(zo_loss_scaler_update(&ls, i % 2 == 0) == 0);
  CHECK(ls.scale == 128.0);
  const char *bf[] = {"bf16.enabled=true"};
  CHECK(scaler_with(&ls, bf, ZO_ARRAY_LEN(bf)) == 0);
  CHECK(!ls.enabled && ls.scale == 1.0);
  return 0;
}

/* ---- a skipped step leaves no trace ------------------------------------------ */

static void fill_tokens(int32_t *in, int32_t *tg, size_t BT, int vocab_size) {
  for (size_t i = 0; i < BT; i++) in[i] = (int32_t)((i * 7 + 3) % (size_t)vocab_size),
                                  tg[i] = (int32_t)((i * 13 + 5) % (size_t)vocab_size);
}

struct sched_state {
  float *params;
  uint8_t *m, *v;
  size_t n, sb;
};

static void state_free(struct sched_state *st) {
  free(st->params);
  free(st->m);
  free(st->v);
}

static int state_get(struct zo_sched *s, const struct zo_placement *pl, struct sched_state *st) {
  const struct zo_model *m = zo_sched_model(s);
  st->n = m->table.numel;
  st->sb = zo_optim_state_nbytes(&pl->opt, &m->table);
  st->params = malloc(st->n * sizeof(float));
  st->m = malloc(st->sb);
  st->v = malloc(st->sb);
  CHECK(st->params && st->m && st->v);
  CHECK(zo_sched_get_state(s, st->params, st->m, st->v) == 0);
  return 0;
}

static bool state_equal(const char *what, const struct sched_state *a, const struct sched_state *b) {
  if (memcmp(a->params, b->params, a->n * sizeof(float)) == 0 && memcmp(a->m, b->m, a->sb) == 0 &&
      memcmp(a->v, b->v, a->sb) == 0)
    return true;
  fprintf(stderr, "  %s: parameters %s, m %s, v %s\n", what,
          memcmp(a->params, b->params, a->n * sizeof(float)) ? "differ" : "equal",
          memcmp(a->m, b->m, a->sb) ? "differ" : "equal", memcmp(a->v, b->v, a->sb) ? "differ" : "equal");
  return false;
}

/* One step at loss scale `scale` on the fixed tokens: whether it was skipped. */
static int step_at(struct zo_sched *s, int n_micro, long t, double scale, bool *skipped) {
  const struct zo_adamw_hparams hp = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                      .weight_decay = 0.1f};
  double loss, norm;
  zo_sched_set_loss_scale(s, scale);
  CHECK(zo_etest_sched_step(s, t, n_micro, &hp, fill_tokens, &loss) == 0);
  CHECK(zo_sched_norm(s, &norm, skipped) == 0);
  CHECK(zo_sched_synchronize(s) == 0);
  CHECK(*skipped == !isfinite(norm));
  return 0;
}

static int skip_case(const char *name, const char *const *sets, int n_sets) {
  const char *all[8] = {"fp16.enabled=true"};
  for (int i = 0; i < n_sets; i++) all[1 + i] = sets[i];
  struct zo_config cfg;
  CHECK(load(&cfg, all, n_sets + 1) == 0);
  struct zo_plan plan;
  CHECK(zo_plan_build(&cfg, &cfg.model.spec, zo_backend_cpu(), &plan) == 0);
  struct zo_sched_config sc = {.model = cfg.model.spec, .B = cfg.micro_batch, .T = cfg.data.seq_len,
                               .placement = plan.placement, .backend = zo_backend_cpu()};
  CHECK(zo_model_config_check(&sc.model) == 0);
  struct zo_sched *a = zo_sched_init(&sc), *b = zo_sched_init(&sc);
  CHECK(a && b);
  const struct zo_model *m = zo_sched_model(a);
  float *p0 = malloc(m->table.numel * sizeof(float));
  CHECK(p0);
  zo_model_init_params(m, p0, 3);
  CHECK(zo_sched_set_state(a, p0, NULL, NULL) == 0 && zo_sched_set_state(b, p0, NULL, NULL) == 0);
  struct sched_state s0, s_skip, s_a, s_b;
  CHECK(state_get(a, &plan.placement, &s0) == 0);
  /* 2^30 times the loss overflows fp16 in the first backward op. */
  bool skipped;
  CHECK(step_at(a, cfg.grad_accum, 1, 0x1p30, &skipped) == 0);
  CHECK(skipped);
  CHECK(state_get(a, &plan.placement, &s_skip) == 0);
  int ret = state_equal("after the skipped step vs before", &s_skip, &s0) ? 0 : 1;
  /* The clean step after it is the clean step alone: nothing (working copy,
   * gradient buffers, m, v, the step count) kept a trace. */
  CHECK(step_at(a, cfg.grad_accum, 1, 1024.0, &skipped) == 0);
  CHECK(!skipped);
  CHECK(step_at(b, cfg.grad_accum, 1, 1024.0, &skipped) == 0);
  CHECK(!skipped);
  CHECK(state_get(a, &plan.placement, &s_a) == 0 && state_get(b, &plan.placement, &s_b) == 0);
  if (!state_equal("skip + step vs step", &s_a, &s_b)) ret = 1;
  if (memcmp(s_a.params, p0, s_a.n * sizeof(float)) == 0) {
    fprintf(stderr, "  the clean step changed nothing\n");
    ret = 1;
  }
  if (ret) fprintf(stderr, "  %s: placement %s\n", arch->run.name, name);
  state_free(&s0);
  state_free(&s_skip);
  state_free(&s_a);
  state_free(&s_b);
  free(p0);
  zo_sched_free(a);
  zo_sched_free(b);
  zo_config_free(&cfg);
  return ret;
}

static int test_skip_device(void) { return skip_case("device", NULL, 0); }

static int test_skip_optimizer_cpu(void) {
  const char *s[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu"};
  return skip_case("optimizer cpu", s, ZO_ARRAY_LEN(s));
}

static int test_skip_optimizer_nvme(void) {
  if (!fx.have_nvme) return ZO_TEST_SKIP;
  const char *s[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=nvme"};
  return skip_case("optimizer nvme", s, ZO_ARRAY_LEN(s));
}

static int test_skip_params_on_host(void) {
  const char *s[] = {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
                     "zero_optimization.offload_param.device=cpu"};
  return skip_case("params cpu, optimizer cpu", s, ZO_ARRAY_LEN(s));
}

static int test_skip_params_on_host_nvme(void) {
  if (!fx.have_nvme) return ZO_TEST_SKIP;
  const char *s[] = {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=nvme",
                     "zero_optimization.offload_param.device=cpu"};
  return skip_case("params cpu, optimizer nvme", s, ZO_ARRAY_LEN(s));
}

static int test_skip_adamw8bit_device(void) {
  const char *s[] = {"optimizer.type=AdamW8bit", "optimizer.params.min_8bit_size=64"};
  return skip_case("AdamW8bit on the device", s, ZO_ARRAY_LEN(s));
}

/* ---- a forced overflow through zo_train -------------------------------------- */

/* Starting at 2^24 the first steps overflow (the first step's gradients
 * fit in fp16 below 2^21 for GPT-2, below 2^20 for the Llama); hysteresis
 * 2 absorbs the first, then each halves the scale until the gradients fit;
 * every 4 clean steps it doubles again, which overflows again now and then. */
static const char *const overflow_sets[] = {"fp16.enabled=true", "fp16.initial_scale_power=24",
                                            "fp16.loss_scale_window=4", "fp16.hysteresis=2"};

static struct zo_etest_run overflow_ref;

static int test_overflow_sequence(void) {
  const char *name = run_name("overflow");
  free(overflow_ref.params);
  CHECK(zo_etest_train(load, fx.tmpdir, name, overflow_sets, ZO_ARRAY_LEN(overflow_sets), N_STEPS, NULL, &overflow_ref) == 0);
  char path[600];
  snprintf(path, sizeof path, "%s/%s.jsonl", fx.tmpdir, name);
  double scale[ZO_ETEST_MAX_STEPS], skipped[ZO_ETEST_MAX_STEPS];
  CHECK(zo_etest_read_metric(path, "loss_scale", scale, ZO_ETEST_MAX_STEPS) == N_STEPS);
  /* "skipped": true / false read as a number is 0; count the words. */
  FILE *f = fopen(path, "r");
  CHECK(f);
  char line[512];
  int n = 0;
  while (fgets(line, sizeof line, f) && n < N_STEPS)
    if (strstr(line, "\"loss\"")) skipped[n++] = strstr(line, "\"skipped\": true") != NULL;
  fclose(f);
  CHECK(n == N_STEPS);
  /* The logged scales follow the rule from the logged overflows. */
  struct zo_loss_scaler ls;
  struct zo_config cfg;
  CHECK(load(&cfg, overflow_sets, ZO_ARRAY_LEN(overflow_sets)) == 0);
  zo_loss_scaler_init(&ls, &cfg);
  zo_config_free(&cfg);
  int n_skip = 0, n_grow = 0;
  for (int i = 0; i < N_STEPS; i++) {
    if (scale[i] != ls.scale) {
      fprintf(stderr, "  step %d ran at loss scale %g, the rule says %g\n", i + 1, scale[i], ls.scale);
      return 1;
    }
    if (i > 0 && scale[i] > scale[i - 1]) n_grow++;
    n_skip += skipped[i] != 0;
    CHECK(zo_loss_scaler_update(&ls, skipped[i] != 0) == 0);
  }
  printf("  %d of %d steps skipped, the scale grew %d times, from 2^24 to %g\n", n_skip, N_STEPS, n_grow,
         scale[N_STEPS - 1]);
  CHECK(skipped[0] && skipped[1] && scale[0] == 0x1p24 && scale[1] == 0x1p24 && scale[2] == 0x1p23);
  CHECK(n_grow >= 1 && n_skip >= 3 && n_skip < N_STEPS - 5);
  /* It still learned. */
  CHECK(overflow_ref.losses[N_STEPS - 1] < overflow_ref.losses[0]);
  return 0;
}

/* A checkpoint in the middle of the sequence resumes it exactly: the
 * scaler's state (scale, hysteresis, the window's position) and the
 * applied/skipped step counts travel in trainer_state.json. */
static int inspect_scaler(const char *ckpt_dir, const struct zo_etest_run *first) {
  char path[600];
  snprintf(path, sizeof path, "%s/trainer_state.json", ckpt_dir);
  double v[2];
  CHECK(zo_etest_read_metric(path, "skipped_steps", v, 1) == 1 && v[0] >= 3);
  CHECK(zo_etest_read_metric(path, "applied_steps", v + 1, 1) == 1 && v[0] + v[1] == 10);
  CHECK(zo_etest_read_metric(path, "loss_scale", v, 1) == 1 && v[0] < 0x1p24);
  return 0;
}

static int test_overflow_checkpoint_resume(void) {
  return zo_etest_checkpoint_resume(load, fx.tmpdir, run_name("overflow"), overflow_sets, ZO_ARRAY_LEN(overflow_sets), N_STEPS,
                                    &overflow_ref, inspect_scaler);
}

/* ---- the loss curves ------------------------------------------------------------- */

static int test_mixed_tracks_fp32(void) {
  if (delay_mode) return ZO_TEST_SKIP; /* no threading here the other cases do not cover */
  /* A learning rate that keeps the curve smooth: where the model spikes,
   * any rounding difference moves the spikes. */
  struct zo_etest_run f32, b16, f16;
  const char *lr = arch->curve_lr;
  const char *f[] = {lr}, *bf[] = {lr, "bf16.enabled=true"}, *fp[] = {lr, "fp16.enabled=true"};
  CHECK(zo_etest_train(load, fx.tmpdir, run_name("curve-fp32"), f, ZO_ARRAY_LEN(f), N_STEPS, NULL, &f32) == 0);
  CHECK(zo_etest_train(load, fx.tmpdir, run_name("curve-bf16"), bf, ZO_ARRAY_LEN(bf), N_STEPS, NULL, &b16) == 0);
  CHECK(zo_etest_train(load, fx.tmpdir, run_name("curve-fp16"), fp, ZO_ARRAY_LEN(fp), N_STEPS, NULL, &f16) == 0);
  int ret = 0;
  double worst_b = 0, worst_f = 0;
  for (int i = 0; i < N_STEPS; i++) {
    worst_b = fmax(worst_b, fabs(b16.losses[i] - f32.losses[i]) / f32.losses[i]);
    worst_f = fmax(worst_f, fabs(f16.losses[i] - f32.losses[i]) / f32.losses[i]);
  }
  printf("  worst relative loss difference over %d steps: bf16 %.2e, fp16 %.2e\n", N_STEPS, worst_b, worst_f);
  /* Not equal (the rounding is real), and close. */
  if (!(worst_b > 0 && worst_b < 0.01 && worst_f > 0 && worst_f < 0.005)) ret = 1;
  free(f32.params);
  free(b16.params);
  free(f16.params);
  return ret;
}

static struct zo_etest_corpus corpus;

static int test_quality_real_text(void) {
  if (delay_mode) return ZO_TEST_SKIP;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  printf("SKIP: the quality runs are left to the release build (sanitizers make them ~10x slower)\n");
  return ZO_TEST_SKIP;
#endif
  int r = zo_etest_prepare_fortunes(fx.tmpdir, &corpus);
  if (r) return r;
  double fp32, bf16, fp16;
  const char *a[] = {"engine.seed=7"}, *b[] = {"bf16.enabled=true"}, *c[] = {"fp16.enabled=true"};
  CHECK(zo_etest_quality_run(&corpus, fx.tmpdir, "q-fp32", a, ZO_ARRAY_LEN(a), &fp32) == 0);
  CHECK(zo_etest_quality_run(&corpus, fx.tmpdir, "q-bf16", b, ZO_ARRAY_LEN(b), &bf16) == 0);
  CHECK(zo_etest_quality_run(&corpus, fx.tmpdir, "q-fp16", c, ZO_ARRAY_LEN(c), &fp16) == 0);
  printf("quality: val loss fp32 %.4f, bf16 %.4f (%+.2f%%), fp16 %.4f (%+.2f%%)\n", fp32, bf16,
         100.0 * (bf16 - fp32) / fp32, fp16, 100.0 * (fp16 - fp32) / fp32);
  CHECK(bf16 <= fp32 * 1.02 && fp16 <= fp32 * 1.02);
  return 0;
}

int main(int argc, char **argv) {
  delay_mode = zo_etest_delay_mode();
  if (zo_etest_files_init(&fx, "mixed")) return 1;
  static const struct zo_test rule[] = {ZO_TEST(loss_scaler_rule)};
  static const struct zo_test per_arch[] = {
      ZO_TEST(skip_device),         ZO_TEST(skip_optimizer_cpu),
      ZO_TEST(skip_optimizer_nvme), ZO_TEST(skip_params_on_host),
      ZO_TEST(skip_params_on_host_nvme), ZO_TEST(skip_adamw8bit_device),
      ZO_TEST(overflow_sequence),   ZO_TEST(overflow_checkpoint_resume),
      ZO_TEST(mixed_tracks_fp32),
  };
  static const struct zo_test gpt2_only[] = {ZO_TEST(quality_real_text)};
  struct zo_test_counts counts = zo_test_run(rule, sizeof rule / sizeof rule[0]);
  for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
    if (!zo_etest_arch_selected(archs[a].run.name)) continue;
    arch = &archs[a];
    zo_etest_arch_print(&arch->run, NULL);
    zo_test_counts_add(&counts, zo_test_run(per_arch, ZO_ARRAY_LEN(per_arch)));
  }
  printf("arch: gpt2 (its own 3-layer width-128 model on real text)\n");
  zo_test_counts_add(&counts, zo_test_run(gpt2_only, ZO_ARRAY_LEN(gpt2_only)));
  free(overflow_ref.params);
  return zo_etest_finish(fx.tmpdir, counts, delay_mode, argc, argv);
}
