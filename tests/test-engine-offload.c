/* Offload placements against the all-on-device run: 20 steps of a small
 * model (3 layers, odd width, 2 accumulation steps, clipping active) give
 * bit-identical losses and final weights in every placement, in fp32, in
 * bf16 and in fp16 mixed precision (each precision against its own
 * all-on-device run); the measured peaks equal the plan; a budget too small
 * fails before step 1 with the planner's message; a corrupted NVMe state
 * file is an error on the next read. Every case runs for GPT-2 and for a
 * Llama with grouped-query attention and an untied LM head, each against
 * its own all-on-device runs. The binary runs its cases twice: once as is,
 * then re-executed with ZO_STREAM_DELAY_US=200 (the CPU streams sleep at
 * random before each task, so a missing wait shows as a different result).
 * NVMe cases skip (the reason printed) when the store cannot be created. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zo/host.h"
#include "zo_engine_test.h"

static struct zo_etest_files fx;
static const char *precision; /* NULL: fp32, else the --set that enables bf16 or fp16 */

static const char *const gpt2_model[] = {ZO_ETEST_GPT2_SMALL};
/* 6 query heads on 2 key/value heads of size 6, an MLP width of 50, and an
 * LM head of its own (longer than a block: the tail unit is split into
 * NVMe chunks). */
static const char *const llama_model[] = {ZO_ETEST_LLAMA_SMALL};
static const struct zo_etest_arch archs[] = {ZO_ETEST_ARCH("gpt2", gpt2_model),
                                             ZO_ETEST_ARCH("llama", llama_model)};
static const struct zo_etest_arch *arch; /* the one the cases run for */

#define N_STEPS 20

static int load(struct zo_config *cfg, const char *const *extra, int n_extra) {
  return zo_etest_placement_load(cfg, &fx, arch, &precision, 1, extra, n_extra);
}

/* Trains the placement's --set options for n_steps (from checkpoint resume
 * when not NULL). */
static int train_resume(const char *name, const char *const *extra, int n_extra, int n_steps,
                        const char *resume, struct zo_etest_run *r) {
  return zo_etest_train(load, fx.tmpdir, name, extra, n_extra, n_steps, resume, r);
}

static int train(const char *name, const char *const *extra, int n_extra, struct zo_etest_run *r) {
  return train_resume(name, extra, n_extra, N_STEPS, NULL, r);
}

/* A run's name with the architecture and precision. */
static const char *run_name(const char *name) { return zo_etest_run_name(arch, precision, name); }

static struct zo_etest_run ref;

static int test_all_device_reference(void) {
  free(ref.params);
  CHECK(train(run_name("device"), NULL, 0, &ref) == 0);
  CHECK(ref.losses[N_STEPS - 1] < ref.losses[0]);
  CHECK(zo_etest_peaks_match(run_name("device"), &ref));
  return 0;
}

/* One placement against the reference: losses and weights bit for bit,
 * peaks equal to the plan. */
static int check_placement(const char *name, const char *const *sets, int n_sets) {
  struct zo_etest_run r;
  name = run_name(name);
  int ret = zo_etest_train_same(load, fx.tmpdir, name, sets, n_sets, N_STEPS, &ref, "all-device", &r);
  if (!r.params) return 1;
  /* The offloaded placements use less device memory. */
  if (!(r.plan.total[ZO_TIER_DEVICE] < ref.plan.total[ZO_TIER_DEVICE])) {
    fprintf(stderr, "%s: device plan %zu is not below all-device %zu\n", name, r.plan.total[0], ref.plan.total[0]);
    ret = 1;
  }
  free(r.params);
  return ret;
}

static int test_optimizer_cpu_stage1(void) {
  const char *s[] = {"zero_optimization.stage=1", "zero_optimization.offload_optimizer.device=cpu"};
  return check_placement("opt-cpu-s1", s, ZO_ARRAY_LEN(s));
}

static int test_optimizer_cpu_stage2(void) {
  const char *s[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu"};
  return check_placement("opt-cpu-s2", s, ZO_ARRAY_LEN(s));
}

static int test_params_cpu_optimizer_cpu(void) {
  const char *s[] = {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
                     "zero_optimization.offload_param.device=cpu"};
  return check_placement("param-cpu-opt-cpu", s, ZO_ARRAY_LEN(s));
}

/* engine.grad_slots = 1: each block's backward waits for the previous
 * block's gradients to leave the one slot. The same bits, and a device plan
 * smaller by exactly one block's fp32 gradients (the arena's rounding). */
static int test_params_cpu_one_grad_slot(void) {
  const char *s[] = {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
                     "zero_optimization.offload_param.device=cpu", "engine.grad_slots=1"};
  struct zo_etest_run r;
  const char *name = run_name("param-cpu-1-grad-slot");
  int ret = zo_etest_train_same(load, fx.tmpdir, name, s, ZO_ARRAY_LEN(s), N_STEPS, &ref, "all-device", &r);
  if (!r.params) return 1;
  free(r.params);
  struct zo_config cfg;
  CHECK(load(&cfg, s, ZO_ARRAY_LEN(s) - 1) == 0);
  struct zo_plan two;
  CHECK(zo_plan_build(&cfg, &cfg.model.spec, zo_train_backend(&cfg, NULL), &two) == 0);
  struct zo_tensor_table t;
  CHECK(zo_model_build_table(&cfg.model.spec, &t) == 0);
  const size_t slot = zo_arena_round(t.layer_numel * sizeof(float));
  zo_tensor_table_free(&t);
  zo_config_free(&cfg);
  fprintf(stderr, "%s: device plan %zu with one gradient slot, %zu with two (slot %zu)\n", name,
          r.plan.total[ZO_TIER_DEVICE], two.total[ZO_TIER_DEVICE], slot);
  CHECK(two.total[ZO_TIER_DEVICE] - r.plan.total[ZO_TIER_DEVICE] == slot);
  return ret;
}

static int test_optimizer_nvme_stage2(void) {
  if (!fx.have_nvme) return 77;
  const char *s[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=nvme"};
  return check_placement("opt-nvme-s2", s, ZO_ARRAY_LEN(s));
}

/* Chunks far smaller than a block (sub_group_size), cut inside tensors:
 * still the same bits. */
static int test_optimizer_nvme_small_chunks(void) {
  if (!fx.have_nvme) return 77;
  const char *s[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=nvme",
                     "zero_optimization.sub_group_size=1500"};
  return check_placement("opt-nvme-chunks-1500", s, ZO_ARRAY_LEN(s));
}

static int test_params_cpu_optimizer_nvme(void) {
  if (!fx.have_nvme) return 77;
  const char *s[] = {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=nvme",
                     "zero_optimization.offload_param.device=cpu",
                     "zero_optimization.offload_optimizer.buffer_count=2"};
  return check_placement("param-cpu-opt-nvme", s, ZO_ARRAY_LEN(s));
}

/* The Infinity tier: the blocks' parameters and gradients on NVMe too,
 * streamed through a ring of host buffers and read-modify-written per
 * micro-batch (grad_accum = 2). */
static const char *const infinity[] = {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=nvme",
                                       "zero_optimization.offload_param.device=nvme",
                                       "zero_optimization.offload_optimizer.buffer_count=2"};

static int test_params_nvme(void) {
  if (!fx.have_nvme) return 77;
  return check_placement("param-nvme", infinity, ZO_ARRAY_LEN(infinity));
}

/* Chunks cut inside tensors, three ring buffers, activation checkpoints in
 * host memory, one gradient slot. */
static int test_params_nvme_small_chunks(void) {
  if (!fx.have_nvme) return 77;
  const char *s[] = {infinity[0], infinity[1], infinity[2], "zero_optimization.sub_group_size=700",
                     "zero_optimization.offload_param.buffer_count=3", "activation_checkpointing.enabled=true",
                     "activation_checkpointing.cpu_checkpointing=true", "engine.grad_slots=1"};
  return check_placement("param-nvme-chunks-700", s, ZO_ARRAY_LEN(s));
}

/* offload_param.max_in_cpu: the first one (GPT-2) or two (Llama) blocks in
 * host memory, the rest on NVMe. */
static int test_params_nvme_max_in_cpu(void) {
  if (!fx.have_nvme) return 77;
  const char *s[] = {infinity[0], infinity[1], infinity[2], infinity[3],
                     "zero_optimization.offload_param.max_in_cpu=20000"};
  return check_placement("param-nvme-max-in-cpu", s, ZO_ARRAY_LEN(s));
}

/* Checkpoints every 10 steps, then a resume from step 10: the same losses
 * and final weights as the uninterrupted all-device run, and every host byte
 * (the state staging included) inside the planned, measured host pool. */
/* Saves and loads stream through one fixed staging buffer, whatever the
 * model's size: no host copy of the parameters, m or v. */
static int inspect_staging(const char *ckpt_dir, const struct zo_etest_run *first) {
  (void)ckpt_dir;
  CHECK(first->plan.bytes[ZO_TIER_HOST][ZO_SCHED_MEM_STAGE] == zo_host_round(ZO_STATE_STAGE_MIN));
  return 0;
}

static int checkpoint_resume(const char *name, const char *const *sets, int n_sets) {
  return zo_etest_checkpoint_resume(load, fx.tmpdir, run_name(name), sets, n_sets, N_STEPS, &ref, inspect_staging);
}

static int test_checkpoint_resume_device(void) { return checkpoint_resume("device", NULL, 0); }

static int test_checkpoint_resume_params_nvme(void) {
  if (!fx.have_nvme) return 77;
  return checkpoint_resume("param-nvme", infinity, ZO_ARRAY_LEN(infinity));
}

static int test_checkpoint_resume_nvme(void) {
  if (!fx.have_nvme) return 77;
  const char *s[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=nvme"};
  return checkpoint_resume("nvme", s, ZO_ARRAY_LEN(s));
}

/* One accumulation step and three parameter slots (K = L): the other paths. */
static int test_single_micro_batch_slots(void) {
  const char *a[] = {"gradient_accumulation_steps=1", "steps=5"};
  const char *b[] = {"gradient_accumulation_steps=1", "steps=5", "zero_optimization.stage=3",
                     "zero_optimization.offload_optimizer.device=cpu",
                     "zero_optimization.offload_param.device=cpu",
                     "zero_optimization.offload_param.buffer_count=3"};
  struct zo_etest_run r0, r1;
  const char *na = run_name("k1-device"), *nb = run_name("k1-slots");
  CHECK(train_resume(na, a, ZO_ARRAY_LEN(a), 5, NULL, &r0) == 0);
  CHECK(train_resume(nb, b, ZO_ARRAY_LEN(b), 5, NULL, &r1) == 0);
  CHECK(zo_etest_same_run(nb, &r1, &r0, na, 0, 5) == 0);
  free(r0.params);
  free(r1.params);
  return 0;
}

static int test_budget_too_small(void) {
  const char *s[] = {"engine.gpu_memory_budget=64KiB"};
  struct zo_config cfg;
  CHECK(load(&cfg, s, ZO_ARRAY_LEN(s)) == 0);
  struct zo_train_opts opts = {0};
  int err = zo_train(&cfg, &opts);
  zo_config_free(&cfg);
  CHECK(err == -ENOMEM);
  CHECK(strstr(zo_last_error(), "the plan needs") != NULL);
  CHECK(strstr(zo_last_error(), "engine.gpu_memory_budget") != NULL);
  CHECK(strstr(zo_last_error(), "largest:") != NULL);
  /* A budget between the offloaded and the all-device plans: the advice
   * names the optimizer offload, and following it trains. */
  char set[100];
  snprintf(set, sizeof set, "engine.gpu_memory_budget=%zu", ref.plan.total[ZO_TIER_DEVICE] - 1);
  const char *s2[] = {set};
  CHECK(load(&cfg, s2, ZO_ARRAY_LEN(s2)) == 0);
  err = zo_train(&cfg, &opts);
  zo_config_free(&cfg);
  CHECK(err == -ENOMEM);
  CHECK(strstr(zo_last_error(), "offload_optimizer.device=cpu") != NULL);
  const char *s3[] = {set, "zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu",
                      "steps=1"};
  CHECK(load(&cfg, s3, ZO_ARRAY_LEN(s3)) == 0);
  err = zo_train(&cfg, &opts);
  zo_config_free(&cfg);
  CHECK(err == 0);
  return 0;
}

/* Flips one byte of the NVMe file named only (or of the first file found
 * when NULL) under the store's private directory. */
static int corrupt_one_file(const char *store_dir, const char *only) {
  DIR *d = opendir(store_dir);
  if (!d) return -1;
  struct dirent *e;
  int ret = -1;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' || (only && strcmp(e->d_name, only) != 0)) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", store_dir, e->d_name);
    FILE *f = fopen(path, "r+b");
    if (!f) continue;
    int c = fgetc(f);
    fseek(f, 0, SEEK_SET);
    fputc(c ^ 0x5a, f);
    fclose(f);
    fprintf(stderr, "corrupted one byte of %s\n", path);
    ret = 0;
    break;
  }
  closedir(d);
  return ret;
}

static void fill_mod7(int32_t *in, int32_t *tg, size_t BT, int vocab_size) {
  (void)vocab_size;
  for (size_t i = 0; i < BT; i++) in[i] = (int32_t)(i % 7), tg[i] = (int32_t)((i + 1) % 7);
}

/* Trains the placement's sets and corrupts file `only` of the NVMe store
 * after step 1: step 2 must fail with the CRC error, naming the file. */
static int corruption_detected(const char *const *sets, int n_sets, const char *only) {
  if (!fx.have_nvme) return 77;
  struct zo_config cfg;
  CHECK(load(&cfg, sets, n_sets) == 0);
  struct zo_plan plan;
  CHECK(zo_plan_build(&cfg, &cfg.model.spec, zo_backend_cpu(), &plan) == 0);
  struct zo_sched_config sc = {.model = cfg.model.spec, .B = cfg.micro_batch, .T = cfg.data.seq_len,
                               .placement = plan.placement, .backend = zo_backend_cpu()};
  CHECK(zo_model_config_check(&sc.model) == 0);
  struct zo_sched *s = zo_sched_init(&sc);
  CHECK(s);
  struct zo_model *m = zo_sched_model(s);
  float *p = malloc(m->table.numel * sizeof(float));
  zo_model_init_params(m, p, 1);
  CHECK(zo_sched_set_state(s, p, NULL, NULL) == 0);
  struct zo_adamw_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
  int err = 0;
  for (long step = 1; step <= 2 && !err; step++) {
    double loss;
    err = zo_etest_sched_step(s, step, cfg.grad_accum, &hp, fill_mod7, &loss);
    if (!err) err = zo_sched_synchronize(s);
    if (step == 1) {
      CHECK(err == 0);
      /* The store's private directory: the only entry under fx.nvme_dir. */
      DIR *d = opendir(fx.nvme_dir);
      CHECK(d);
      struct dirent *e;
      char store[700] = "";
      while ((e = readdir(d)))
        if (strncmp(e->d_name, "zoffload-nvme-", 14) == 0)
          snprintf(store, sizeof store, "%s/%s", fx.nvme_dir, e->d_name);
      closedir(d);
      CHECK(store[0]);
      CHECK(corrupt_one_file(store, only) == 0);
    }
  }
  fprintf(stderr, "after corruption: %s\n", zo_last_error());
  CHECK(err == -EBADMSG || err == -EIO);
  CHECK(strstr(zo_last_error(), "NVMe") != NULL);
  if (only) {
    char named[80];
    snprintf(named, sizeof named, "of '%s'", only);
    CHECK(err == -EBADMSG);
    CHECK(strstr(zo_last_error(), named) != NULL);
    CHECK(strstr(zo_last_error(), "offset 0") != NULL);
  }
  zo_sched_free(s);
  free(p);
  zo_config_free(&cfg);
  return 0;
}

static int test_nvme_corruption_detected(void) {
  const char *sets[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=nvme"};
  return corruption_detected(sets, ZO_ARRAY_LEN(sets), NULL);
}

/* The Infinity tier's parameter file: a corrupt block is found by the slot
 * load that reads it (step 2's backward reloads block 0). */
static int test_params_nvme_corruption_detected(void) {
  return corruption_detected(infinity, ZO_ARRAY_LEN(infinity), "params");
}

/* Host pool bytes of the placement's sets for the model at n_layer blocks. */
static size_t host_plan_at(const char *const *sets, int n_sets, int n_layer) {
  char nl[40];
  snprintf(nl, sizeof nl, "model.n_layer=%d", n_layer);
  const char *all[8];
  int n = 0;
  for (int i = 0; i < n_sets; i++) all[n++] = sets[i];
  all[n++] = nl;
  struct zo_config cfg;
  if (load(&cfg, all, n)) return 0;
  struct zo_plan plan;
  const size_t host = zo_plan_build(&cfg, &cfg.model.spec, NULL, &plan) ? 0 : plan.total[ZO_TIER_HOST];
  zo_config_free(&cfg);
  return host;
}

/* The Infinity tier's host pool is a window: it does not grow with the
 * depth, where parameters on the host do. */
static int test_params_nvme_host_window(void) {
  const char *cpu[] = {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=nvme",
                       "zero_optimization.offload_param.device=cpu"};
  const size_t a = host_plan_at(infinity, ZO_ARRAY_LEN(infinity), 3),
               b = host_plan_at(infinity, ZO_ARRAY_LEN(infinity), 12);
  const size_t c = host_plan_at(cpu, ZO_ARRAY_LEN(cpu), 3), d = host_plan_at(cpu, ZO_ARRAY_LEN(cpu), 12);
  fprintf(stderr, "host plan: nvme params %zu (3 blocks) %zu (12 blocks); host params %zu, %zu\n", a, b, c, d);
  CHECK(a > 0 && a == b);
  CHECK(c > 0 && d > c && a < c);
  return 0;
}

int main(int argc, char **argv) {
  const bool delay = zo_etest_delay_mode();
  if (zo_etest_files_init(&fx, "offload")) return 1;

  /* For each architecture: every placement in every precision, each
   * against the all-device run of its precision; then the cases that do
   * not depend on it, in fp32. */
  static const struct zo_test placements[] = {
      ZO_TEST(all_device_reference),
      ZO_TEST(optimizer_cpu_stage1),
      ZO_TEST(optimizer_cpu_stage2),
      ZO_TEST(optimizer_nvme_stage2),
      ZO_TEST(optimizer_nvme_small_chunks),
      ZO_TEST(params_cpu_optimizer_cpu),
      ZO_TEST(params_cpu_one_grad_slot),
      ZO_TEST(params_cpu_optimizer_nvme),
      ZO_TEST(params_nvme),
      ZO_TEST(params_nvme_small_chunks),
      ZO_TEST(params_nvme_max_in_cpu),
      ZO_TEST(single_micro_batch_slots),
      ZO_TEST(checkpoint_resume_device),
      ZO_TEST(checkpoint_resume_nvme),
      ZO_TEST(checkpoint_resume_params_nvme),
  };
  static const struct zo_test once[] = {
      ZO_TEST(budget_too_small),
      ZO_TEST(nvme_corruption_detected),
      ZO_TEST(params_nvme_corruption_detected),
      ZO_TEST(params_nvme_host_window),
  };
  static const char *const precisions[] = {NULL, "bf16.enabled=true", "fp16.enabled=true"};
  struct zo_test_counts counts = {0, 0, 0};
  for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
    if (!zo_etest_arch_selected(archs[a].name)) continue;
    arch = &archs[a];
    for (int p = 0; p < 3; p++) {
      precision = precisions[p];
      zo_etest_arch_print(arch, precision ? precision : "fp32");
      zo_test_counts_add(&counts, zo_test_run(placements, ZO_ARRAY_LEN(placements)));
    }
    precision = NULL;
    zo_etest_arch_print(arch, "fp32 (budget, corruption)");
    CHECK(test_all_device_reference() == 0);
    zo_test_counts_add(&counts, zo_test_run(once, ZO_ARRAY_LEN(once)));
  }
  free(ref.params);
  return zo_etest_finish(fx.tmpdir, counts, delay, argc, argv);
}
