/* The planner that chooses (zo/autoplan.h) on the cases users bring, planner
 * only (nothing trains): GPT-2 1.5B at micro-batch 16 x 512 in a 10 GiB
 * device budget, Llama-1B with 16 GiB of host and an NVMe path, Llama-3-8B
 * with 10 GiB of device, 32 GiB of host and an NVMe path, and a plan that
 * fits nowhere, which must name the short tier and by how much. Every
 * candidate found must fit every budget when its --set lines are loaded and
 * planned again by zo_plan_build (the same bytes), keep the global batch, and
 * the ranking must be by predicted step time. The cost model: monotone
 * properties (more compute or more bytes moved never predicts a faster step)
 * with the documented defaults. The machine's own memory plays no part
 * (host_limit 0), except in train's automatic choice (zo_autoplan_apply),
 * tried on the tiny config, which fits any machine, and on one that fits no
 * budget. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo/autoplan.h"
#include "zo/train.h"
#include "zo_test.h"

static char tmpdir[256];
static const size_t GiB = (size_t)1 << 30;

/* An NVMe path means a 2 TB drive here, whatever the test machine's disk holds. */
static int search(const char *config, const char *const *sets, int n_sets, const char *nvme,
                  struct zo_autoplan *a, struct zo_cost_profile *prof) {
  zo_cost_profile_defaults(prof, "cuda");
  const struct zo_autoplan_opts o = {.config_path = config, .sets = sets, .n_sets = n_sets, .nvme_path = nvme,
                                     .profile = prof, .nvme_free = (size_t)2000000000000};
  return zo_autoplan_search(&o, a);
}

/* Each fitting candidate, loaded with the user's sets and its own and planned
 * again, has the bytes it was listed with, within the budgets; the global
 * batch is kept; the list is sorted by predicted step. */
static int check_candidates(const char *config, const char *const *sets, int n_sets, const struct zo_autoplan *a,
                            size_t dev_budget, size_t host_budget) {
  for (int i = 0; i < a->n_fit; i++) {
    const struct zo_autoplan_candidate *c = &a->fit[i];
    const char *all[64];
    int n = 0;
    for (int k = 0; k < n_sets; k++) all[n++] = sets[k];
    for (int k = 0; k < c->n_sets; k++) all[n++] = c->sets[k];
    struct zo_config cfg;
    int err = zo_config_load_quiet(&cfg, config, all, n);
    ZO_REQUIRE(err == 0);
    struct zo_model_config mc;
    struct zo_plan p;
    ZO_REQUIRE(zo_train_model_config(&cfg, &mc) == 0);
    err = zo_plan_build(&cfg, &mc, NULL, &p);
    const int G = cfg.micro_batch * cfg.grad_accum;
    zo_config_free(&cfg);
    ZO_REQUIRE(err == 0);
    for (int t = 0; t < ZO_N_TIERS; t++) ZO_REQUIRE(p.total[t] == c->bytes[t]);
    ZO_REQUIRE(p.total[ZO_TIER_DEVICE] <= dev_budget);
    if (host_budget) ZO_REQUIRE(p.total[ZO_TIER_HOST] <= host_budget);
    ZO_REQUIRE(G == a->global_batch);
    ZO_REQUIRE(c->cost.step_s > 0 && c->tokens_per_s > 0);
    if (i) ZO_REQUIRE(a->fit[i - 1].cost.step_s <= c->cost.step_s);
    for (int k = 0; k < c->n_sets; k++) ZO_REQUIRE(strstr(c->sets[k], "AdamW8bit") == NULL);
  }
  return 0;
}

static bool has_set(const struct zo_autoplan_candidate *c, const char *s) {
  for (int k = 0; k < c->n_sets; k++)
    if (!strcmp(c->sets[k], s)) return true;
  return false;
}

/* The single-change advice said "use a smaller model"; activation
 * checkpointing plus optimizer offload fits in about 5.7 GiB. */
static int test_gpt2_1_5b_10gib(void) {
  const char *cfg = ZO_TEST_DIR "/../configs/gpt2-1.5b.json";
  static const char *const sets[] = {"train_micro_batch_size_per_gpu=16", "gradient_accumulation_steps=1",
                                     "data.seq_len=512", "engine.gpu_memory_budget=10GiB"};
  struct zo_autoplan a;
  struct zo_cost_profile prof;
  ZO_REQUIRE(search(cfg, sets, 4, "none", &a, &prof) == 0);
  int rc = 1;
  if (a.n_fit == 0) {
    zo_test_fail("no candidate fits");
    goto out;
  }
  if (check_candidates(cfg, sets, 4, &a, 10 * GiB, 0)) goto out;
  bool ckpt_offload_mb16 = false;
  for (int i = 0; i < a.n_fit; i++) {
    const struct zo_autoplan_candidate *c = &a.fit[i];
    if (has_set(c, "activation_checkpointing.enabled=true") &&
        has_set(c, "zero_optimization.offload_optimizer.device=cpu") &&
        !has_set(c, "zero_optimization.offload_param.device=cpu") &&
        strstr(c->what, "micro-batch 16 x 1")) {
      ckpt_offload_mb16 = true;
      if (c->bytes[ZO_TIER_DEVICE] > (size_t)(6.5 * (double)GiB)) {
        zo_test_fail("checkpointing + optimizer on cpu at 16 x 512: %zu device bytes, expected about 5.7 GiB",
                     c->bytes[ZO_TIER_DEVICE]);
        goto out;
      }
    }
  }
  if (!ckpt_offload_mb16) {
    zo_test_fail("checkpointing + optimizer offload at micro-batch 16 is not among the %d candidates", a.n_fit);
    goto out;
  }
  /* --nvme-path none: no candidate has NVMe bytes. */
  for (int i = 0; i < a.n_fit; i++) ZO_REQUIRE(a.fit[i].bytes[ZO_TIER_NVME] == 0);
  rc = 0;
out:
  zo_autoplan_free(&a);
  return rc;
}

static int test_llama_1b_host_16gib_nvme(void) {
  const char *cfg = ZO_TEST_DIR "/../configs/llama-1b.json";
  static const char *const sets[] = {"engine.host_memory_budget=16GiB"};
  struct zo_autoplan a;
  struct zo_cost_profile prof;
  ZO_REQUIRE(search(cfg, sets, 1, tmpdir, &a, &prof) == 0);
  int rc = 1;
  if (a.n_fit == 0) {
    zo_test_fail("no candidate fits (host 16 GiB, NVMe under %s)", tmpdir);
    goto out;
  }
  if (check_candidates(cfg, sets, 1, &a, 10 * GiB, 16 * GiB)) goto out;
  /* Without NVMe the 16 GiB host cannot hold the optimizer: every plan found uses it. */
  for (int i = 0; i < a.n_fit; i++)
    if (a.fit[i].bytes[ZO_TIER_NVME] == 0) {
      zo_test_fail("candidate %d (%s) has no NVMe bytes yet fits 16 GiB of host", i + 1, a.fit[i].what);
      goto out;
    }
  rc = 0;
out:
  zo_autoplan_free(&a);
  return rc;
}

/* Needs parameters on NVMe (zero_optimization.offload_param.device = "nvme",
 * issue 17): with the optimizer alone on NVMe the host needs 51 GiB. */
static int test_llama_8b_device_10_host_32_nvme(void) {
  const char *cfg = ZO_TEST_DIR "/../configs/llama-8b.json";
  static const char *const sets[] = {"engine.gpu_memory_budget=10GiB", "engine.host_memory_budget=32GiB"};
  struct zo_autoplan a;
  struct zo_cost_profile prof;
  ZO_REQUIRE(search(cfg, sets, 2, tmpdir, &a, &prof) == 0);
  int rc = 1;
  if (a.n_fit == 0) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f) {
      zo_autoplan_print(&a, &prof, 0, f);
      fclose(f);
    }
    zo_test_fail("no candidate fits; the planner says:\n%s", buf ? buf : "");
    free(buf);
    goto out;
  }
  if (check_candidates(cfg, sets, 2, &a, 10 * GiB, 32 * GiB)) goto out;
  rc = 0;
out:
  zo_autoplan_free(&a);
  return rc;
}

/* Llama-3-8B in 1 GiB of device and 4 GiB of host without NVMe: nothing
 * fits, and the answer names each short tier with its bytes over budget. */
static int test_fits_nowhere_names_tier(void) {
  const char *cfg = ZO_TEST_DIR "/../configs/llama-8b.json";
  static const char *const sets[] = {"engine.gpu_memory_budget=1GiB", "engine.host_memory_budget=4GiB"};
  struct zo_autoplan a;
  struct zo_cost_profile prof;
  ZO_REQUIRE(search(cfg, sets, 2, "none", &a, &prof) == 0);
  int rc = 1;
  char *buf = NULL;
  size_t len = 0;
  if (a.n_fit != 0 || !a.have_closest) {
    zo_test_fail("%d candidates fit 1 GiB of device and 4 GiB of host", a.n_fit);
    goto out;
  }
  size_t shortfall = 0;
  for (int t = 0; t < ZO_N_TIERS; t++) {
    const struct zo_autoplan_candidate *c = &a.closest;
    if (c->short_by[t]) ZO_REQUIRE(c->bytes[t] == a.budget[t] + c->short_by[t]);
    shortfall += c->short_by[t];
  }
  ZO_REQUIRE(shortfall > 0 && a.closest.short_by[ZO_TIER_HOST] > 0);
  FILE *f = open_memstream(&buf, &len);
  ZO_REQUIRE(f != NULL);
  zo_autoplan_print(&a, &prof, 0, f);
  fclose(f);
  char want[96], b[32];
  snprintf(want, sizeof want, "host needs %s, ", zo_format_bytes(a.closest.bytes[ZO_TIER_HOST], b));
  if (!strstr(buf, "no candidate fits") || !strstr(buf, want) || !strstr(buf, "over its budget of 4.00 GiB") ||
      !strstr(buf, "--nvme-path")) {
    zo_test_fail("the answer does not name the short tier (want \"%s\"):\n%s", want, buf);
    goto out;
  }
  rc = 0;
out:
  free(buf);
  zo_autoplan_free(&a);
  return rc;
}

/* With the defaults: checkpointing recomputes (never faster), a slower NVMe
 * never makes a step faster, and the CPU backend adds what the GPU overlaps. */
static int test_cost_monotone(void) {
  struct zo_config cfg;
  static const char *const sets[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=nvme",
                                     "zero_optimization.offload_optimizer.nvme_path=/tmp"};
  ZO_REQUIRE(zo_config_load(&cfg, ZO_TEST_DIR "/../configs/gpt2-350m.json", sets, 3) == 0);
  struct zo_model_config mc;
  struct zo_plan p, pc;
  ZO_REQUIRE(zo_train_model_config(&cfg, &mc) == 0);
  int err = zo_plan_build(&cfg, &mc, NULL, &p);
  cfg.activation_checkpointing.enabled = true;
  if (!err) err = zo_plan_build(&cfg, &mc, NULL, &pc);
  zo_config_free(&cfg);
  ZO_REQUIRE(err == 0);
  for (int k = 0; k < 2; k++) {
    struct zo_cost_profile r;
    zo_cost_profile_defaults(&r, k ? "cuda" : "cpu");
    struct zo_cost c, cc, slow;
    zo_cost_step(&r, &p, &c);
    zo_cost_step(&r, &pc, &cc);
    ZO_REQUIRE(c.compute_s > 0 && c.nvme_s > 0 && c.optimizer_s > 0);
    ZO_REQUIRE(cc.compute_s > c.compute_s && cc.step_s >= c.step_s);
    r.nvme_read_bw /= 100, r.nvme_write_bw /= 100;
    zo_cost_step(&r, &p, &slow);
    ZO_REQUIRE(slow.step_s > c.step_s && slow.bottleneck == ZO_BOTTLENECK_NVME);
    if (k == 0) ZO_REQUIRE(c.step_s >= c.compute_s + c.h2d_s + c.d2h_s);
    else ZO_REQUIRE(c.step_s < c.compute_s + c.h2d_s + c.d2h_s + c.optimizer_s + c.nvme_s);
    /* The reference steps' scale multiplies the compute and nothing else. */
    for (int h = 0; h < 2; h++) r.compute_scale[h][0] = r.compute_scale[h][1] = 2.0;
    struct zo_cost twice;
    zo_cost_step(&r, &p, &twice);
    ZO_REQUIRE(fabs(twice.compute_s - 2.0 * slow.compute_s) <= 1e-12 * slow.compute_s);
    ZO_REQUIRE(twice.nvme_s == slow.nvme_s && twice.optimizer_s == slow.optimizer_s);
  }
  return 0;
}

/* Llama-3-8B, parameters on the host and the optimizer on NVMe, 16 x 2048
 * tokens as micro-batch 4 x 4 (issue 34's case, the default CUDA rates):
 * the micro-batch-major order moves each block 4 times a step, the
 * layer-major order once, which must predict at most 120 s (1 x 16 of
 * micro-batch 4 would take about 106 s) and at least the optimizer state's
 * NVMe traffic, the same in both orders. With one micro-batch both orders
 * are one, and "auto" (layer-major not built yet) resolves to
 * micro-batch-major saying why; "layer_major" is refused by name. */
static int test_llama_8b_layer_major(void) {
  static const char *const sets[] = {
      "train_micro_batch_size_per_gpu=4", "gradient_accumulation_steps=4", "data.seq_len=2048",
      "activation_checkpointing.enabled=true", "activation_checkpointing.cpu_checkpointing=true",
      "zero_optimization.offload_optimizer.device=nvme", "zero_optimization.offload_optimizer.nvme_path=/tmp",
      "zero_optimization.offload_param.buffer_count=4", "engine.gpu_memory_budget=10GiB",
      "engine.host_memory_budget=32GiB", "engine.schedule=auto"};
  const int n = ZO_ARRAY_LEN(sets);
  struct zo_config cfg;
  ZO_REQUIRE(zo_config_load_quiet(&cfg, ZO_TEST_DIR "/../configs/llama-8b.json", sets, n) == 0);
  struct zo_model_config mc;
  ZO_REQUIRE(zo_train_model_config(&cfg, &mc) == 0);
  struct zo_plan p, p1;
  int err = zo_plan_build(&cfg, &mc, NULL, &p);
  cfg.engine.schedule = ZO_SCHEDULE_LAYER_MAJOR;
  const int refused = zo_plan_build(&cfg, &mc, NULL, &p1);
  const bool named = strstr(zo_last_error(), "engine.schedule") && strstr(zo_last_error(), "not built");
  cfg.engine.schedule = ZO_SCHEDULE_AUTO;
  cfg.grad_accum = 1;
  if (!err) err = zo_plan_build(&cfg, &mc, NULL, &p1);
  zo_config_free(&cfg);
  ZO_REQUIRE(err == 0 && refused == -ENOTSUP && named);
  ZO_REQUIRE(!p.layer_major && strstr(p.schedule_why, "auto") && strstr(p.schedule_why, "4 micro-batches"));
  ZO_REQUIRE(p.fits[ZO_TIER_DEVICE] && p.fits[ZO_TIER_HOST]); /* (NVMe: this machine's /tmp holds no 116 GiB) */
  struct zo_cost_profile r;
  zo_cost_profile_defaults(&r, "cuda");
  struct zo_cost c, c1;
  zo_cost_step(&r, &p, &c);
  zo_cost_step(&r, &p1, &c1);
  printf("  micro-batch-major %.1f s, layer-major %.1f s (%.1f s the optimizer state on NVMe), one micro-batch "
         "of 4: %.1f s; %.2f GiB more checkpoints\n", c.step_s, c.layer_major_s, c.nvme_state_s, c1.step_s,
         (double)c.layer_major_ckpt_extra / (double)GiB);
  ZO_REQUIRE(c.layer_major_s > 0 && c.layer_major_s <= 120.0 && c.step_s > 150.0);
  ZO_REQUIRE(c.nvme_state_s > 60.0 && c.nvme_state_s < c.layer_major_s && c.nvme_state_s == c1.nvme_state_s);
  ZO_REQUIRE(c1.layer_major_s == 0); /* one micro-batch: nothing to reorder */
  /* K inputs of every block on the host: 4 x 32 x (4 x 2048 x 4096) bf16, less the plan's 32 */
  ZO_REQUIRE(c.layer_major_ckpt_extra == (size_t)(4 * 32 - 32) * 4 * 2048 * 4096 * 2 &&
             c.layer_major_ckpt_tier == ZO_TIER_HOST);
  return 0;
}

/* A profile written by zo_cost_profile_save loads back the same; one written
 * before the attention lengths and reference steps (one attention figure, no
 * compute_scale) loads that figure at every length and a scale of 1. */
static int test_profile_round_trip(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/cache/zoffload/profile.json", tmpdir);
  struct zo_cost_profile a, b;
  zo_cost_profile_defaults(&a, "cpu");
  a.attn_flops[0][1] = 123e9, a.attn_flops[1][2] = 77e9, a.seqs[2] = 4096;
  a.compute_scale[0][0] = 1.25, a.compute_scale[0][1] = 0.75, a.compute_scale[1][0] = 1.5, a.ref_widths[1] = 640;
  ZO_REQUIRE(zo_cost_profile_save(&a, path) == 0);
  char dir[600];
  snprintf(dir, sizeof dir, "%s/cache", tmpdir);
  setenv("XDG_CACHE_HOME", dir, 1);
  char want[4096];
  ZO_REQUIRE(zo_cost_profile_path("cpu", want, sizeof want) == 0);
  ZO_REQUIRE(rename(path, want) == 0);
  ZO_REQUIRE(zo_cost_profile_load(&b, "cpu") == 0 && b.measured);
  for (int i = 0; i < ZO_COST_N_SEQ; i++) {
    ZO_REQUIRE(b.seqs[i] == a.seqs[i]);
    for (int h = 0; h < 2; h++) ZO_REQUIRE(fabs(b.attn_flops[h][i] - a.attn_flops[h][i]) <= 1e-5 * a.attn_flops[h][i]);
  }
  for (int i = 0; i < ZO_COST_N_REF; i++) {
    ZO_REQUIRE(b.ref_widths[i] == a.ref_widths[i]);
    for (int h = 0; h < 2; h++) ZO_REQUIRE(fabs(b.compute_scale[h][i] - a.compute_scale[h][i]) < 1e-9);
  }
  FILE *f = fopen(want, "w");
  ZO_REQUIRE(f != NULL);
  fputs("{\"machine\": \"old\", \"backend\": \"cpu\", \"widths\": [256, 1024, 2048], "
        "\"gemm_flops_fp32\": [1e11, 2e11, 3e11], \"gemm_flops_half\": [1e11, 2e11, 3e11], "
        "\"attn_flops_fp32\": 5e10, \"attn_flops_half\": 4e10, \"mem_bw\": 5e9, \"op_s\": 1e-5}\n", f);
  ZO_REQUIRE(fclose(f) == 0);
  ZO_REQUIRE(zo_cost_profile_load(&b, "cpu") == 0);
  ZO_REQUIRE(b.widths[0] == 256 && b.gemm_flops[0][2] == 3e11);
  for (int i = 0; i < ZO_COST_N_SEQ; i++) ZO_REQUIRE(b.attn_flops[0][i] == 5e10 && b.attn_flops[1][i] == 4e10);
  for (int i = 0; i < ZO_COST_N_REF; i++) ZO_REQUIRE(b.compute_scale[0][i] == 1.0 && b.compute_scale[1][i] == 1.0);
  unsetenv("XDG_CACHE_HOME");
  return 0;
}

/* Runs zo_autoplan_apply on config with sets, its output in *text (freed by
 * the caller). */
static int apply(const char *config, const char *const *sets, int n_sets, struct zo_config *cfg,
                 struct zo_autoplan_applied *res, char **text, char **errtext) {
  size_t len = 0, elen = 0;
  FILE *out = open_memstream(text, &len), *err = open_memstream(errtext, &elen);
  ZO_REQUIRE(out && err);
  ZO_REQUIRE(zo_config_load(cfg, config, sets, n_sets) == 0);
  const struct zo_autoplan_apply_opts o = {.config_path = config, .sets = sets, .n_sets = n_sets, .out = out,
                                           .err = err};
  const int rc = zo_autoplan_apply(cfg, &o, res);
  ZO_REQUIRE(fclose(out) == 0 && fclose(err) == 0);
  return rc;
}

/* train's automatic choice: nothing "auto" leaves the config alone and says
 * nothing; an "auto" micro-batch keeps train_batch_size (16) and the
 * placement, prints the chosen --set lines and writes a config that loads
 * back the same; engine.placement = "auto" fixes the placement to "config"
 * in what it writes; and when nothing fits the answer is -ENOSPC with the
 * candidates on the error stream. */
static int test_apply(void) {
  const char *tiny = ZO_TEST_DIR "/../configs/tiny.json";
  char dirset[400], path[400], want[96];
  snprintf(dirset, sizeof dirset, "checkpoint.dir=%s/apply", tmpdir);
  snprintf(path, sizeof path, "%s/apply/auto-config.json", tmpdir);
  struct zo_config cfg, back;
  struct zo_autoplan_applied res;
  char *text = NULL, *errtext = NULL;
  const char *plain[] = {"engine.device=cpu", dirset};
  ZO_REQUIRE(apply(tiny, plain, 2, &cfg, &res, &text, &errtext) == 0);
  ZO_REQUIRE(!res.chosen && !text[0] && cfg.micro_batch == 16 && cfg.grad_accum == 1);
  zo_config_free(&cfg), free(text), free(errtext);

  const char *batch[] = {"engine.device=cpu", dirset, "train_micro_batch_size_per_gpu=auto",
                         "gradient_accumulation_steps=auto", "train_batch_size=16"};
  ZO_REQUIRE(apply(tiny, batch, 5, &cfg, &res, &text, &errtext) == 0);
  ZO_REQUIRE(res.chosen && !cfg.micro_batch_auto && !cfg.grad_accum_auto);
  ZO_REQUIRE(cfg.micro_batch * cfg.grad_accum == 16 && cfg.zero.offload_optimizer.device == ZO_OFFLOAD_NONE);
  snprintf(want, sizeof want, "--set train_micro_batch_size_per_gpu=%d\n", cfg.micro_batch);
  if (!strstr(text, "auto plan (train_micro_batch_size_per_gpu, gradient_accumulation_steps = \"auto\") for GPT-2, 4 "
                    "layers") || !strstr(text, "16 sequences a step (train_batch_size)") || (cfg.micro_batch != 16 && !strstr(text, want)) ||
      !strstr(text, path)) {
    zo_test_fail("the choice is not printed as expected (want \"%s\", %s):\n%s", want, path, text);
    return 1;
  }
  ZO_REQUIRE(zo_config_load(&back, path, NULL, 0) == 0);
  ZO_REQUIRE(back.micro_batch == cfg.micro_batch && back.grad_accum == cfg.grad_accum && !back.micro_batch_auto);
  zo_config_free(&back), zo_config_free(&cfg), free(text), free(errtext);

  const char *placement[] = {"engine.device=cpu", dirset, "engine.placement=auto"};
  ZO_REQUIRE(apply(tiny, placement, 3, &cfg, &res, &text, &errtext) == 0);
  ZO_REQUIRE(res.chosen && cfg.engine.placement == ZO_PLACEMENT_CONFIG);
  ZO_REQUIRE(strstr(text, "auto plan (engine.placement = \"auto\")") != NULL);
  ZO_REQUIRE(zo_config_load(&back, path, NULL, 0) == 0 && back.engine.placement == ZO_PLACEMENT_CONFIG);
  zo_config_free(&back), zo_config_free(&cfg), free(text), free(errtext);

  const char *nofit[] = {"engine.device=cpu", "engine.placement=auto", "engine.gpu_memory_budget=1GiB",
                         "engine.host_memory_budget=1GiB", "zero_optimization.offload_optimizer.nvme_path=none"};
  ZO_REQUIRE(apply(ZO_TEST_DIR "/../configs/llama-8b.json", nofit, 5, &cfg, &res, &text, &errtext) == -ENOSPC);
  ZO_REQUIRE(!res.chosen && !res.reload_failed && !text[0] && strstr(errtext, "no candidate fits"));
  ZO_REQUIRE(strstr(zo_last_error(), "no candidate of the planner fits") != NULL);
  zo_config_free(&cfg), free(text), free(errtext);
  return 0;
}

int main(void) {
  if (zo_test_mkdtemp(tmpdir, sizeof tmpdir, "autoplan")) return 1;
  static const struct zo_test tests[] = {
      ZO_TEST(gpt2_1_5b_10gib),
      ZO_TEST(llama_1b_host_16gib_nvme),
      ZO_TEST(llama_8b_device_10_host_32_nvme),
      ZO_TEST(fits_nowhere_names_tier),
      ZO_TEST(cost_monotone),
      ZO_TEST(llama_8b_layer_major),
      ZO_TEST(profile_round_trip),
      ZO_TEST(apply),
  };
  int rc = ZO_TEST_MAIN(tests);
  zo_test_rmtree(tmpdir);
  return rc;
}
