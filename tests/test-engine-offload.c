/* Offload placements against the all-on-device run: 20 steps of a small
 * model (3 layers, odd width, 2 accumulation steps, clipping active) give
 * bit-identical losses and final weights in every placement; the measured
 * peaks equal the plan; a budget too small fails before step 1 with the
 * planner's message; a corrupted NVMe state file is an error on the next read.
 * The binary runs its cases twice: once as is, then re-executed with
 * ZO_STREAM_DELAY_US=200 (the CPU streams sleep at random before each task,
 * so a missing wait shows as a different result). NVMe cases skip (the
 * reason printed) when the store cannot be created. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "zo/data.h"
#include "zo/host.h"
#include "zo/nvme.h"
#include "zo/plan.h"
#include "zo/sched.h"
#include "zo/train.h"
#include "zo_test.h"

static char tmpdir[256];
static char data_path[300];
static char nvme_dir[300];
static bool have_nvme;

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "%s:%d: check failed: %s (%s)\n", __FILE__, __LINE__, #cond, \
              zo_last_error());                                                     \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

#define N_STEPS 20

static int load(struct zo_config *cfg, const char *const *extra, int n_extra) {
  static char train_set[400], nvme_set[400];
  snprintf(train_set, sizeof train_set, "data.train=%s", data_path);
  snprintf(nvme_set, sizeof nvme_set, "zero_optimization.offload_optimizer.nvme_path=%s", nvme_dir);
  const char *sets[64] = {"model.n_layer=3", "model.n_head=3", "model.n_embd=36",
                          "model.vocab_size=200", "model.max_seq_len=16", "data.seq_len=11",
                          "data.format=u16", "data.shuffle=true", "train_micro_batch_size_per_gpu=3",
                          "gradient_accumulation_steps=2", "steps=20", "optimizer.params.lr=0.01",
                          "optimizer.params.weight_decay=0.1", "gradient_clipping=0.5",
                          "engine.device=cpu", "log.every=100", "aio.block_size=4096",
                          "zero_optimization.offload_param.buffer_count=2", train_set, nvme_set};
  int n = 20;
  for (int i = 0; i < n_extra; i++) sets[n++] = extra[i];
  return zo_config_load(cfg, NULL, sets, n);
}

static int read_losses(const char *path, double *losses, int cap) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[512];
  int n = 0;
  while (fgets(line, sizeof line, f) && n < cap) {
    const char *p = strstr(line, "\"loss\": ");
    if (p) losses[n++] = strtod(p + 8, NULL);
  }
  fclose(f);
  return n;
}

struct run {
  double losses[N_STEPS];
  float *params;
  size_t n;
  struct zo_sched_stats stats;
  struct zo_plan plan;
};

/* Trains with the placement's --set options (from checkpoint resume when
 * not NULL); fills r with the n_steps losses logged. */
static int train_resume(const char *name, const char *const *extra, int n_extra, int n_steps,
                        const char *resume, struct run *r) {
  char met[400];
  snprintf(met, sizeof met, "log.metrics_path=%s/%s.jsonl", tmpdir, name);
  const char *sets[16];
  for (int i = 0; i < n_extra; i++) sets[i] = extra[i];
  sets[n_extra] = met;
  struct zo_config cfg;
  CHECK(load(&cfg, sets, n_extra + 1) == 0);
  struct zo_gpt2_config mc = cfg.model.gpt2;
  struct zo_tensor_table t;
  CHECK(zo_gpt2_build_table(&mc, &t) == 0);
  r->n = t.numel;
  zo_tensor_table_free(&t);
  r->params = malloc(r->n * sizeof(float));
  CHECK(r->params);
  CHECK(zo_plan_build(&cfg, &mc, NULL, &r->plan) == 0);
  struct zo_train_opts opts = {.resume = resume, .stats = &r->stats, .final_params = r->params};
  int err = zo_train(&cfg, &opts);
  zo_config_free(&cfg);
  CHECK(err == 0);
  char path[500];
  snprintf(path, sizeof path, "%s/%s.jsonl", tmpdir, name);
  CHECK(read_losses(path, r->losses, N_STEPS) == n_steps);
  return 0;
}

static int train_steps(const char *name, const char *const *extra, int n_extra, int n_steps,
                       struct run *r) {
  return train_resume(name, extra, n_extra, n_steps, NULL, r);
}

static int train(const char *name, const char *const *extra, int n_extra, struct run *r) {
  return train_steps(name, extra, n_extra, N_STEPS, r);
}

static struct run ref;

static bool peaks_match(const char *name, const struct run *r) {
  if (r->stats.device_peak == r->plan.total[ZO_TIER_DEVICE] &&
      r->stats.host_peak == r->plan.total[ZO_TIER_HOST] &&
      r->stats.host_planned == r->plan.total[ZO_TIER_HOST] &&
      r->stats.nvme_planned == r->plan.total[ZO_TIER_NVME])
    return true;
  fprintf(stderr, "%s: peaks device %zu host %zu nvme %zu, plan %zu %zu %zu\n", name, r->stats.device_peak,
          r->stats.host_peak, r->stats.nvme_planned, r->plan.total[0], r->plan.total[1], r->plan.total[2]);
  return false;
}

static int test_all_device_reference(void) {
  CHECK(train("device", NULL, 0, &ref) == 0);
  CHECK(ref.losses[N_STEPS - 1] < ref.losses[0]);
  CHECK(peaks_match("device", &ref));
  return 0;
}

/* One placement against the reference: losses and weights bit for bit,
 * peaks equal to the plan. */
static int check_placement(const char *name, const char *const *sets, int n_sets) {
  struct run r;
  CHECK(train(name, sets, n_sets, &r) == 0);
  int ret = 0;
  for (int i = 0; i < N_STEPS; i++)
    if (memcmp(&r.losses[i], &ref.losses[i], sizeof(double)) != 0) {
      fprintf(stderr, "%s: step %d loss %.17g, all-device %.17g\n", name, i + 1, r.losses[i], ref.losses[i]);
      ret = 1;
      break;
    }
  if (r.n != ref.n || memcmp(r.params, ref.params, r.n * sizeof(float)) != 0) {
    size_t i = 0;
    while (i < r.n && memcmp(&r.params[i], &ref.params[i], sizeof(float)) == 0) i++;
    fprintf(stderr, "%s: final weights differ from all-device first at element %zu\n", name, i);
    ret = 1;
  }
  if (!peaks_match(name, &r)) ret = 1;
  /* The offloaded placements use less device memory. */
  if (strcmp(name, "device") != 0 && !(r.plan.total[ZO_TIER_DEVICE] < ref.plan.total[ZO_TIER_DEVICE])) {
    fprintf(stderr, "%s: device plan %zu is not below all-device %zu\n", name, r.plan.total[0], ref.plan.total[0]);
    ret = 1;
  }
  free(r.params);
  return ret;
}

static int test_optimizer_cpu_stage1(void) {
  const char *s[] = {"zero_optimization.stage=1", "zero_optimization.offload_optimizer.device=cpu"};
  return check_placement("opt-cpu-s1", s, 2);
}

static int test_optimizer_cpu_stage2(void) {
  const char *s[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu"};
  return check_placement("opt-cpu-s2", s, 2);
}

static int test_params_cpu_optimizer_cpu(void) {
  const char *s[] = {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
                     "zero_optimization.offload_param.device=cpu"};
  return check_placement("param-cpu-opt-cpu", s, 3);
}

static int test_optimizer_nvme_stage2(void) {
  if (!have_nvme) return 77;
  const char *s[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=nvme"};
  return check_placement("opt-nvme-s2", s, 2);
}

static int test_params_cpu_optimizer_nvme(void) {
  if (!have_nvme) return 77;
  const char *s[] = {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=nvme",
                     "zero_optimization.offload_param.device=cpu",
                     "zero_optimization.offload_optimizer.buffer_count=2"};
  return check_placement("param-cpu-opt-nvme", s, 4);
}

/* Checkpoints every 10 steps, then a resume from step 10: the same losses
 * and final weights as the uninterrupted all-device run, and every host byte
 * (checkpoint staging included) inside the planned, measured host pool. */
static int checkpoint_resume(const char *name, const char *const *sets, int n_sets) {
  char dir[400], ckdir[400], sub[500];
  snprintf(dir, sizeof dir, "checkpoint.dir=%s/ck-%s", tmpdir, name);
  snprintf(ckdir, sizeof ckdir, "%s/ck-%s", tmpdir, name);
  const char *s[16];
  int n = 0;
  for (int i = 0; i < n_sets; i++) s[n++] = sets[i];
  s[n++] = dir;
  s[n++] = "checkpoint.every=10";
  s[n++] = "checkpoint.keep=0";
  struct run a, b;
  char na[100], nb[100];
  snprintf(na, sizeof na, "%s-ck", name);
  snprintf(nb, sizeof nb, "%s-resume", name);
  CHECK(train(na, s, n, &a) == 0);
  CHECK(memcmp(a.losses, ref.losses, sizeof ref.losses) == 0);
  CHECK(memcmp(a.params, ref.params, ref.n * sizeof(float)) == 0);
  CHECK(peaks_match(na, &a));
  CHECK(a.plan.bytes[ZO_TIER_HOST][ZO_SCHED_MEM_CHECKPOINT] == 3 * zo_host_round(ref.n * sizeof(float)));
  snprintf(sub, sizeof sub, "%s/checkpoint-10", ckdir);
  CHECK(train_resume(nb, s, n, N_STEPS - 10, sub, &b) == 0);
  CHECK(memcmp(b.losses, ref.losses + 10, (N_STEPS - 10) * sizeof(double)) == 0);
  CHECK(memcmp(b.params, ref.params, ref.n * sizeof(float)) == 0);
  CHECK(peaks_match(nb, &b));
  free(a.params);
  free(b.params);
  return 0;
}

static int test_checkpoint_resume_device(void) { return checkpoint_resume("device", NULL, 0); }

static int test_checkpoint_resume_nvme(void) {
  if (!have_nvme) return 77;
  const char *s[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=nvme"};
  return checkpoint_resume("nvme", s, 2);
}

/* One accumulation step and three parameter slots (K = L): the other paths. */
static int test_single_micro_batch_slots(void) {
  const char *a[] = {"gradient_accumulation_steps=1", "steps=5"};
  const char *b[] = {"gradient_accumulation_steps=1", "steps=5", "zero_optimization.stage=3",
                     "zero_optimization.offload_optimizer.device=cpu",
                     "zero_optimization.offload_param.device=cpu",
                     "zero_optimization.offload_param.buffer_count=3"};
  struct run r0, r1;
  CHECK(train_steps("k1-device", a, 2, 5, &r0) == 0);
  CHECK(train_steps("k1-slots", b, 6, 5, &r1) == 0);
  CHECK(memcmp(r0.losses, r1.losses, 5 * sizeof(double)) == 0);
  CHECK(memcmp(r0.params, r1.params, r0.n * sizeof(float)) == 0);
  free(r0.params);
  free(r1.params);
  return 0;
}

static int test_budget_too_small(void) {
  const char *s[] = {"engine.gpu_memory_budget=64KiB"};
  struct zo_config cfg;
  CHECK(load(&cfg, s, 1) == 0);
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
  CHECK(load(&cfg, s2, 1) == 0);
  err = zo_train(&cfg, &opts);
  zo_config_free(&cfg);
  CHECK(err == -ENOMEM);
  CHECK(strstr(zo_last_error(), "offload_optimizer.device=cpu") != NULL);
  const char *s3[] = {set, "zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu",
                      "steps=1"};
  CHECK(load(&cfg, s3, 4) == 0);
  err = zo_train(&cfg, &opts);
  zo_config_free(&cfg);
  CHECK(err == 0);
  return 0;
}

/* Flips one byte of the first NVMe state file found under the store's
 * private directory. */
static int corrupt_one_file(const char *store_dir) {
  DIR *d = opendir(store_dir);
  if (!d) return -1;
  struct dirent *e;
  int ret = -1;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
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

static int test_nvme_corruption_detected(void) {
  if (!have_nvme) return 77;
  struct zo_config cfg;
  const char *sets[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=nvme"};
  CHECK(load(&cfg, sets, 2) == 0);
  struct zo_plan plan;
  CHECK(zo_plan_build(&cfg, &cfg.model.gpt2, NULL, &plan) == 0);
  struct zo_sched_config sc = {.model = cfg.model.gpt2, .B = cfg.micro_batch, .T = cfg.data.seq_len,
                               .placement = plan.placement, .backend = zo_backend_cpu()};
  CHECK(zo_gpt2_config_check(&sc.model) == 0);
  struct zo_sched *s = zo_sched_init(&sc);
  CHECK(s);
  struct zo_gpt2 *m = zo_sched_model(s);
  float *p = malloc(m->table.numel * sizeof(float));
  zo_gpt2_init_params(m, p, 1);
  CHECK(zo_sched_set_state(s, p, NULL, NULL) == 0);
  struct zo_adamw_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
  const size_t BT = (size_t)cfg.micro_batch * (size_t)cfg.data.seq_len;
  int err = 0;
  for (long step = 1; step <= 2 && !err; step++) {
    for (int k = 0; k < cfg.grad_accum; k++) {
      int32_t *in, *tg;
      zo_sched_batch(s, &in, &tg);
      for (size_t i = 0; i < BT; i++) in[i] = (int32_t)(i % 7), tg[i] = (int32_t)((i + 1) % 7);
      zo_sched_micro_batch(s, k);
    }
    double loss;
    err = zo_sched_step_end(s, step, &hp, 1.0, &loss);
    if (!err) err = zo_sched_synchronize(s);
    if (step == 1) {
      CHECK(err == 0);
      /* The store's private directory: the only entry under nvme_dir. */
      DIR *d = opendir(nvme_dir);
      CHECK(d);
      struct dirent *e;
      char store[700] = "";
      while ((e = readdir(d)))
        if (strncmp(e->d_name, "zoffload-nvme-", 14) == 0) snprintf(store, sizeof store, "%s/%s", nvme_dir, e->d_name);
      closedir(d);
      CHECK(store[0]);
      CHECK(corrupt_one_file(store) == 0);
    }
  }
  fprintf(stderr, "after corruption: %s\n", zo_last_error());
  CHECK(err == -EBADMSG || err == -EIO);
  CHECK(strstr(zo_last_error(), "NVMe") != NULL);
  zo_sched_free(s);
  free(p);
  zo_config_free(&cfg);
  return 0;
}

int main(int argc, char **argv) {
  const char *delay = getenv("ZO_STREAM_DELAY_US");
  printf("mode: %s\n", delay ? "random stream delays (ZO_STREAM_DELAY_US set)" : "no stream delays");
  if (zo_test_mkdtemp(tmpdir, sizeof tmpdir, "offload")) return 1;
  size_t n = 6000;
  uint16_t *tok = malloc(n * sizeof *tok);
  const char *text = "a stitch in time saves nine; 123 ";
  for (size_t i = 0; i < n; i++) tok[i] = (uint16_t)((unsigned char)text[i % strlen(text)] % 200);
  snprintf(data_path, sizeof data_path, "%s/tokens.u16", tmpdir);
  if (zo_data_write_u16(data_path, tok, n)) {
    fprintf(stderr, "%s\n", zo_last_error());
    return 1;
  }
  free(tok);
  /* NVMe: prefer a directory beside the build, fall back to the temp dir. */
  snprintf(nvme_dir, sizeof nvme_dir, "%s/nvme", tmpdir);
  struct zo_nvme_config nc = {.dir = nvme_dir, .block_size = 4096, .queue_depth = 8};
  zo_nvme_t probe = zo_nvme_init(&nc);
  have_nvme = probe != NULL;
  if (!probe) printf("NVMe cases skipped: the store cannot be created under %s: %s\n", nvme_dir, zo_last_error());
  zo_nvme_free(probe);

  static const struct zo_test tests[] = {
      ZO_TEST(all_device_reference),
      ZO_TEST(optimizer_cpu_stage1),
      ZO_TEST(optimizer_cpu_stage2),
      ZO_TEST(optimizer_nvme_stage2),
      ZO_TEST(params_cpu_optimizer_cpu),
      ZO_TEST(params_cpu_optimizer_nvme),
      ZO_TEST(single_micro_batch_slots),
      ZO_TEST(checkpoint_resume_device),
      ZO_TEST(checkpoint_resume_nvme),
      ZO_TEST(budget_too_small),
      ZO_TEST(nvme_corruption_detected),
  };
  struct zo_test_counts counts = zo_test_run(tests, sizeof tests / sizeof tests[0]);
  free(ref.params);
  zo_test_rmtree(tmpdir);
  const int rc = zo_test_report(counts);
  if (rc != 0) return rc;
  if (!delay && argc >= 1) {
    /* Again with random stream delays: the variable is read at the first
     * stream creation, so it needs a fresh process. */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      setenv("ZO_STREAM_DELAY_US", "200", 1);
      execv("/proc/self/exe", argv);
      perror("execv");
      _exit(1);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0) return 1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  }
  return 0;
}
