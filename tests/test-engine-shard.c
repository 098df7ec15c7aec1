/* The optimizer's shards over data-parallel ranks (zo_shard_of) and what
 * the planner charges each rank, without MPI: for GPT-2 and Llama tables,
 * fp32 and AdamW8bit formats, 1..5 ranks: the shards are consecutive runs
 * of whole tensors covering the table (elements and canonical state bytes,
 * the latter equal to zo_optim_tensor_offset), none larger than an even
 * share plus half the largest tensor; the host plan's master weights, m and
 * v summed over the ranks equal the single process's (up to the pool's
 * rounding per carve); every rank's is at most an even share plus the
 * largest tensor; the NVMe plan shrinks alike; the host gradients (stage
 * 2 and 3, overlap_comm) add up over the ranks; at stage 3 with the
 * parameters on the host, the host working copy adds up over the ranks as
 * well, and with the parameters on NVMe (the Infinity tier) each rank's
 * parameter and gradient files add up to the single process's; one rank
 * leaves the plan as it is. */
#include "zo_engine_test.h"

static const char *const gpt2[] = {"model.n_layer=4", "model.n_head=4", "model.n_embd=64",
                                   "model.vocab_size=500", "model.max_seq_len=32"};
static const char *const llama[] = {"model.arch=llama", "model.n_layer=3", "model.n_head=4",
                                    "model.num_key_value_heads=2", "model.n_embd=64",
                                    "model.intermediate_size=96", "model.vocab_size=500",
                                    "model.max_seq_len=32", "model.tie_word_embeddings=false"};
static const struct zo_etest_arch archs[] = {ZO_ETEST_ARCH("gpt2", gpt2), ZO_ETEST_ARCH("llama", llama)};

static char nvme_set[400];

static int load(struct zo_config *cfg, const struct zo_etest_arch *a, const char *opt_device, bool eightbit,
                int stage, const char *param_device) {
  static char stage_set[64], dev_set[96], param_set[96];
  snprintf(stage_set, sizeof stage_set, "zero_optimization.stage=%d", stage);
  snprintf(dev_set, sizeof dev_set, "zero_optimization.offload_optimizer.device=%s", opt_device);
  snprintf(param_set, sizeof param_set, "zero_optimization.offload_param.device=%s", param_device);
  /* Stage 3: the parameters offloaded too (cpu, or nvme with the optimizer), in bf16 (a working copy of
   * their own). */
  const char *sets[] = {"data.seq_len=16", "train_micro_batch_size_per_gpu=2", stage_set, dev_set, nvme_set,
                        eightbit ? "optimizer.type=AdamW8bit" : "optimizer.type=AdamW",
                        "optimizer.params.min_8bit_size=1024", "aio.block_size=4096",
                        stage == 3 ? param_set : "bf16.enabled=false",
                        stage == 3 ? "bf16.enabled=true" : "bf16.enabled=false"};
  return zo_etest_config_load_arch(cfg, a, sets, ZO_ARRAY_LEN(sets), NULL, 0);
}

static size_t largest_tensor(const struct zo_tensor_table *t) {
  size_t m = 0;
  for (int i = 0; i < t->n_tensors; i++)
    if (t->tensors[i].numel > m) m = t->tensors[i].numel;
  return m;
}

static int check_shards(const struct zo_tensor_table *t, const struct zo_optim_format *f, int n) {
  const size_t big = largest_tensor(t), total = zo_optim_state_nbytes(f, t);
  struct zo_shard prev = {0};
  for (int r = 0; r < n; r++) {
    const struct zo_shard sh = zo_shard_of(f, t, r, n);
    CHECK(sh.t_lo <= sh.t_hi && sh.lo <= sh.hi && sh.slo <= sh.shi);
    CHECK(r == 0 ? sh.t_lo == 0 && sh.lo == 0 && sh.slo == 0
                    : sh.t_lo == prev.t_hi && sh.lo == prev.hi && sh.slo == prev.shi);
    CHECK(sh.slo == zo_optim_tensor_offset(f, t, sh.t_lo));
    CHECK(sh.shi == zo_optim_tensor_offset(f, t, sh.t_hi));
    if (sh.t_hi > sh.t_lo) {
      CHECK(sh.lo <= t->tensors[sh.t_lo].offset);
      const struct zo_tensor_info *last = &t->tensors[sh.t_hi - 1];
      CHECK(last->offset + last->numel <= sh.hi);
    }
    CHECK(sh.hi - sh.lo <= t->numel / (size_t)n + big / 2 + 1);
    prev = sh;
  }
  CHECK(prev.t_hi == t->n_tensors && prev.hi == t->numel && prev.shi == total);
  return 0;
}

static size_t opt_bytes(const size_t *cat) {
  return cat[ZO_MEM_MASTER] + cat[ZO_MEM_ADAM_M] + cat[ZO_MEM_ADAM_V];
}

static int check_plans(struct zo_config *cfg, const struct zo_tensor_table *t, bool nvme, int n) {
  struct zo_placement pl;
  CHECK(zo_placement_from_config(cfg, cfg->model.spec.n_layer, &pl) == 0);
  size_t one[ZO_SCHED_MEM_N_CATEGORIES], cat[ZO_SCHED_MEM_N_CATEGORIES];
  if (nvme) zo_sched_nvme_plan(&pl, t, one);
  else zo_sched_host_plan(&pl, t, cfg->micro_batch, cfg->data.seq_len, one);
  const size_t whole = opt_bytes(one), big = largest_tensor(t);
  size_t sum = 0, worst = 0, psum = 0, gsum = 0;
  for (int r = 0; r < n; r++) {
    zo_placement_set_ranks(&pl, r, n);
    CHECK(zo_placement_sharded(&pl) == (n > 1 && cfg->zero.stage >= 1));
    if (nvme) zo_sched_nvme_plan(&pl, t, cat);
    else zo_sched_host_plan(&pl, t, cfg->micro_batch, cfg->data.seq_len, cat);
    sum += opt_bytes(cat);
    psum += cat[ZO_MEM_PARAMS];
    gsum += cat[ZO_MEM_GRADS];
    if (opt_bytes(cat) > worst) worst = opt_bytes(cat);
  }
  if (!zo_placement_sharded(&pl)) {
    CHECK(sum == (size_t)n * whole);
    return 0;
  }
  /* Each carve rounds up (host: 4 KiB pages; NVMe: aio.block_size per chunk region). */
  const size_t slack = (size_t)n * 3 * 4096 + (nvme ? (size_t)(t->n_tensors + 8) * 3 * 4096 : 0);
  CHECK(sum + slack >= whole && sum <= whole + slack);
  const size_t share = whole / (size_t)n + 12 * big + slack;
  CHECK(worst <= share);
  /* Stage >= 2 with overlap_comm: each rank accumulates its shard of the gradients only. */
  if (!nvme && pl.grads_on_host && pl.overlap_comm)
    CHECK(gsum + (size_t)n * 4096 >= one[ZO_MEM_GRADS] && gsum <= one[ZO_MEM_GRADS] + (size_t)n * 4096);
  /* ZeRO-3 (parameter slots): the host working copy is sharded too. */
  if (pl.param_slots && !nvme) CHECK(psum + (size_t)n * 4096 >= one[ZO_MEM_PARAMS] && psum <= one[ZO_MEM_PARAMS] + (size_t)n * 4096);
  /* The Infinity tier: each rank's parameter and gradient files hold its
   * shard's chunks (a block split between ranks rounds one more chunk). */
  if (pl.param_nvme && nvme) {
    CHECK(one[ZO_MEM_PARAMS] > 0 && one[ZO_MEM_GRADS] > 0);
    CHECK(psum >= one[ZO_MEM_PARAMS] && psum <= one[ZO_MEM_PARAMS] + (size_t)(n - 1) * 4096);
    CHECK(gsum >= one[ZO_MEM_GRADS] && gsum <= one[ZO_MEM_GRADS] + (size_t)(n - 1) * 4096);
    printf("    %d ranks: NVMe parameter files %zu bytes in all, gradient files %zu (one process %zu, %zu)\n", n, psum,
           gsum, one[ZO_MEM_PARAMS], one[ZO_MEM_GRADS]);
  }
  printf("    %d ranks: optimizer bytes per rank at most %zu (one process %zu)\n", n, worst, whole);
  return 0;
}

static int run_arch(const struct zo_etest_arch *a) {
  for (int q = 0; q < 2; q++) {
    for (int dev = 0; dev < 2; dev++) {
      struct zo_config cfg;
      CHECK(load(&cfg, a, dev ? "nvme" : "cpu", q == 1, 2, "none") == 0);
      struct zo_model_config mc = cfg.model.spec;
      struct zo_tensor_table t;
      CHECK(zo_model_config_check(&mc) == 0 && zo_model_build_table(&mc, &t) == 0);
      const struct zo_optim_format f = zo_optim_format_from_config(&cfg);
      printf("  %s, %s, optimizer on %s (%d tensors, %zu elements)\n", a->name, q ? "AdamW8bit" : "AdamW",
             dev ? "nvme" : "cpu", t.n_tensors, t.numel);
      int err = 0;
      for (int n = 1; n <= 5 && !err; n++) err = check_shards(&t, &f, n) || check_plans(&cfg, &t, dev == 1, n);
      struct zo_config c3;
      memset(&c3, 0, sizeof c3);
      if (!err && load(&c3, a, dev ? "nvme" : "cpu", q == 1, 3, "cpu") != 0) {
        fprintf(stderr, "  stage 3: %s\n", zo_last_error());
        err = 1;
      }
      for (int n = 2; n <= 4 && !err; n++) err = check_plans(&c3, &t, dev == 1, n);
      zo_config_free(&c3);
      /* Stage 3 with the parameters on NVMe too (the Infinity tier). */
      memset(&c3, 0, sizeof c3);
      if (!err && dev && load(&c3, a, "nvme", q == 1, 3, "nvme") != 0) {
        fprintf(stderr, "  stage 3, parameters on NVMe: %s\n", zo_last_error());
        err = 1;
      }
      for (int n = 2; n <= 4 && !err && dev; n++) err = check_plans(&c3, &t, true, n);
      zo_config_free(&c3);
      zo_tensor_table_free(&t);
      zo_config_free(&cfg);
      if (err) return err;
    }
  }
  return 0;
}

static int test_gpt2(void) { return run_arch(&archs[0]); }
static int test_llama(void) { return run_arch(&archs[1]); }

int main(void) {
  snprintf(nvme_set, sizeof nvme_set, "zero_optimization.offload_optimizer.nvme_path=%s", ZO_BINARY_DIR);
  static const struct zo_test tests[] = {ZO_TEST(gpt2), ZO_TEST(llama)};
  return ZO_TEST_MAIN(tests);
}
