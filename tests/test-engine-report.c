/* The memory report: for several placements a scheduler is built, runs two
 * optimizer steps on synthetic tokens, and its measured bytes
 * (zo_sched_memory: arena purpose groups, host pool carves, NVMe file sizes)
 * must equal the plan per tier and category, peak and current; the device
 * arena's peak must equal the plan and never pass its capacity; the printed
 * report (captured with open_memstream) names every tier and category and
 * says that fragmentation cannot happen. Also the arena's group accounting
 * itself, including reset. NVMe placements skip when the store cannot be
 * created. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo/arena.h"
#include "zo/bench.h"
#include "zo_engine_test.h"

static char tmpdir[256];

static int load(struct zo_config *cfg, const char *const *extra, int n_extra) {
  static char nvme_set[400];
  snprintf(nvme_set, sizeof nvme_set, "zero_optimization.offload_optimizer.nvme_path=%s/nvme", tmpdir);
  const char *base[] = {"model.n_layer=3", "model.n_head=3", "model.n_embd=36",
                        "model.vocab_size=200", "model.max_seq_len=16", "data.seq_len=11",
                        "data.train=unused.bin", "train_micro_batch_size_per_gpu=3",
                        "gradient_accumulation_steps=2", "engine.device=cpu", "aio.block_size=4096",
                        "zero_optimization.offload_param.buffer_count=2", nvme_set};
  return zo_etest_config_load(cfg, base, ZO_ARRAY_LEN(base), extra, n_extra);
}

static void fill_random(int32_t *in, int32_t *tg, size_t BT, int vocab_size) {
  for (size_t i = 0; i < BT; i++) {
    in[i] = (int32_t)(zo_rng_u32() % (uint32_t)vocab_size);
    tg[i] = (int32_t)(zo_rng_u32() % (uint32_t)vocab_size);
  }
}

/* Two steps of K micro-batches on pseudo-random tokens. */
static int run_steps(struct zo_sched *s, const struct zo_config *cfg) {
  const struct zo_adamw_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                      .weight_decay = 0.1f};
  zo_rng_seed(5);
  for (long step = 1; step <= 2; step++) {
    double loss;
    CHECK(zo_etest_sched_step(s, step, cfg->grad_accum, &hp, fill_random, &loss) == 0);
  }
  CHECK(zo_sched_synchronize(s) == 0);
  return 0;
}

/* The report text names every tier and category and the fragmentation line. */
static int check_text(const struct zo_plan *p, const struct zo_sched_mem *mem) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CHECK(f);
  zo_plan_report_print(p, mem, f);
  fclose(f);
  int bad = 0;
  for (int i = 0; i < ZO_N_TIERS; i++)
    if (!strstr(text, zo_tier_name((enum zo_tier)i))) bad = zo_test_fail("no tier %s", zo_tier_name((enum zo_tier)i));
  for (int k = 0; k < ZO_SCHED_MEM_N_CATEGORIES; k++)
    if (!strstr(text, zo_sched_mem_category_name(k)))
      bad = zo_test_fail("no category %s", zo_sched_mem_category_name(k));
  const char *need[] = {"planned", "peak", "current", "free", "fragmentation: cannot happen by construction"};
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
    if (!strstr(text, need[i])) bad = zo_test_fail("no \"%s\" in the report", need[i]);
  if (mem && !strstr(text, "device arena peak == plan")) bad = zo_test_fail("arena peak not reported equal to plan");
  if (mem && strstr(text, "unclassified")) bad = zo_test_fail("unclassified bytes in the report");
  if (bad) fprintf(stderr, "%s", text);
  free(text);
  return bad;
}

/* Builds the placement of sets, runs two steps and compares the measured
 * report with the plan. Returns 0, 1, or ZO_TEST_SKIP when the NVMe store
 * cannot be created. */
static int check_placement(const char *const *sets, int n_sets) {
  struct zo_config cfg;
  CHECK(load(&cfg, sets, n_sets) == 0);
  struct zo_model_config mc = cfg.model.spec;
  CHECK(zo_model_config_check(&mc) == 0);
  struct zo_plan p;
  CHECK(zo_plan_build(&cfg, &mc, zo_backend_cpu(), &p) == 0);
  const struct zo_sched_config sc = {.model = mc, .B = p.B, .T = p.T, .placement = p.placement,
                                     .backend = zo_backend_cpu()};
  struct zo_sched *s = zo_sched_init(&sc);
  if (!s && p.placement.optimizer == ZO_OFFLOAD_NVME) {
    printf("  skipped: NVMe store: %s\n", zo_last_error());
    zo_config_free(&cfg);
    return ZO_TEST_SKIP;
  }
  CHECK(s);
  CHECK(zo_sched_state_init(s, 1) == 0);
  CHECK(zo_sched_state_fresh(s, ZO_STATE_M) == 0 && zo_sched_state_fresh(s, ZO_STATE_V) == 0);
  CHECK(zo_sched_state_done(s) == 0);
  int ret = run_steps(s, &cfg);
  struct zo_sched_mem mem;
  CHECK(zo_sched_memory(s, &mem) == 0);
  for (int i = 0; i < ZO_N_TIERS; i++) {
    for (int k = 0; k < ZO_SCHED_MEM_N_CATEGORIES; k++)
      if (mem.peak[i][k] != p.bytes[i][k] || mem.current[i][k] != p.bytes[i][k])
        ret = zo_test_fail("%s %s: peak %zu current %zu, plan %zu", zo_tier_name((enum zo_tier)i),
                           zo_sched_mem_category_name(k), mem.peak[i][k], mem.current[i][k], p.bytes[i][k]);
    if (mem.peak_total[i] != p.total[i] || mem.used[i] != p.total[i] || mem.unclassified[i] != 0)
      ret = zo_test_fail("%s: peak %zu used %zu unclassified %zu, plan %zu", zo_tier_name((enum zo_tier)i),
                         mem.peak_total[i], mem.used[i], mem.unclassified[i], p.total[i]);
  }
  /* The arena never needed more than planned. */
  const int D = ZO_TIER_DEVICE;
  if (!(mem.peak_total[D] <= mem.capacity[D] && mem.capacity[D] == p.total[D]))
    ret = zo_test_fail("device arena: peak %zu capacity %zu plan %zu", mem.peak_total[D], mem.capacity[D],
                       p.total[D]);
  if (mem.n_device_carves < 10) ret = zo_test_fail("only %d device carves recorded", mem.n_device_carves);
  if (check_text(&p, &mem) || check_text(&p, NULL)) ret = 1;
  zo_sched_free(s);
  zo_config_free(&cfg);
  return ret;
}

static int test_all_on_device(void) { return check_placement(NULL, 0); }

/* Llama carves constant tables (the rotary cos and sin) as workspace. */
static int test_llama_all_on_device(void) {
  const char *sets[] = {"model.arch=llama", "model.n_head=6", "model.n_embd=36", "model.num_key_value_heads=2",
                        "model.intermediate_size=37"};
  return check_placement(sets, ZO_ARRAY_LEN(sets));
}

static int test_optimizer_cpu_stage2(void) {
  const char *sets[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu"};
  return check_placement(sets, ZO_ARRAY_LEN(sets));
}

static int test_params_and_optimizer_on_host_checkpointing(void) {
  const char *sets[] = {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
                        "zero_optimization.offload_param.device=cpu", "activation_checkpointing.enabled=true",
                        "activation_checkpointing.cpu_checkpointing=true"};
  return check_placement(sets, ZO_ARRAY_LEN(sets));
}

static int test_device_checkpointing_8bit(void) {
  const char *sets[] = {"activation_checkpointing.enabled=true", "activation_checkpointing.number_checkpoints=2",
                        "optimizer.type=AdamW8bit", "optimizer.params.min_8bit_size=64",
                        "optimizer.params.block_size=64"};
  return check_placement(sets, ZO_ARRAY_LEN(sets));
}

static int test_optimizer_nvme(void) {
  const char *sets[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=nvme"};
  return check_placement(sets, ZO_ARRAY_LEN(sets));
}

/* bench memory on the small model: every buildable row measured equal to
 * its plan, each saver below the row before it (they add up from bf16 on;
 * the optimizer offload moves master weights and m, v off the device, which
 * outweighs the rounded host copy it loads from). */
static int test_bench_memory_rows(void) {
  struct zo_config cfg;
  CHECK(load(&cfg, NULL, 0) == 0);
  CHECK(zo_model_config_check(&cfg.model.spec) == 0);
  struct zo_bench_memory_row rows[ZO_BENCH_MEMORY_ROWS];
  CHECK(zo_bench_memory_run(&cfg, rows) == 0);
  zo_config_free(&cfg);
  CHECK(rows[0].status == ZO_BENCH_MEMORY_PLANNED_ONLY);
  for (int i = 1; i < ZO_BENCH_MEMORY_ROWS; i++) {
    CHECK(rows[i].status == ZO_BENCH_MEMORY_MEASURED);
    CHECK(rows[i].device_measured == rows[i].device_planned && rows[i].host_measured == rows[i].host_planned);
    /* (row 1: the unchunked head of this small batch is one chunk anyway) */
    CHECK(i == 1 ? rows[i].device_planned <= rows[0].device_planned
                 : rows[i].device_planned < rows[i - 1].device_planned);
  }
  /* bf16 halves the activations: the all-device bf16 plan is below fp32's
   * even though it adds fp32 master weights. */
  CHECK(rows[2].device_planned < rows[1].device_planned);
  CHECK(rows[6].host_planned > rows[5].host_planned);
  return 0;
}

/* Groups by purpose prefix, peaks kept across a reset, used bytes returned. */
static int test_arena_groups_reset(void) {
  struct zo_arena a;
  CHECK(zo_arena_init(&a, zo_backend_cpu(), 64 * 1024, "test") == 0);
  void *p;
  CHECK(zo_arena_alloc(&a, 1000, "activations (ln_1)", &p) == 0);
  CHECK(zo_arena_alloc(&a, 100, "parameters", &p) == 0);
  const size_t mark = a.used;
  CHECK(zo_arena_alloc(&a, 3000, "activations (qkv)", &p) == 0);
  CHECK(zo_arena_alloc(&a, 256, "backward scratch (B,T,C)", &p) == 0);
  CHECK(a.n_groups == 3 && strcmp(a.groups[0].name, "activations") == 0);
  CHECK(a.groups[0].used == 1024 + 3072 && a.groups[2].used == 256);
  CHECK(zo_arena_free_bytes(&a) == 64 * 1024 - a.used);
  zo_arena_reset(&a, mark);
  CHECK(a.groups[0].used == 1024 && a.groups[0].peak == 1024 + 3072);
  CHECK(a.groups[2].used == 0 && a.groups[2].peak == 256 && a.n_carves == 2);
  CHECK(zo_sched_device_category("activations") == ZO_MEM_ACTIVATIONS);
  CHECK(zo_sched_device_category("gradient slot") == ZO_MEM_BUFFERS);
  CHECK(zo_sched_device_category("gradient accumulator") == ZO_MEM_GRADS);
  CHECK(zo_sched_device_category("no such thing") == -1);
  zo_arena_free(&a);
  return 0;
}

int main(void) {
  if (zo_test_mkdtemp(tmpdir, sizeof tmpdir, "report")) return 1;
  static const struct zo_test tests[] = {
      ZO_TEST(arena_groups_reset),
      ZO_TEST(all_on_device),
      ZO_TEST(llama_all_on_device),
      ZO_TEST(optimizer_cpu_stage2),
      ZO_TEST(params_and_optimizer_on_host_checkpointing),
      ZO_TEST(device_checkpointing_8bit),
      ZO_TEST(optimizer_nvme),
      ZO_TEST(bench_memory_rows),
  };
  int rc = ZO_TEST_MAIN(tests);
  zo_test_rmtree(tmpdir);
  return rc;
}
