/* Data parallelism against the single process. The truth is the
 * single-process run with micro-batch 6 (computed here, by the driver that
 * ctest starts); the same binary then runs under mpirun as 2 ranks of
 * micro-batch 3 and as 3 ranks of micro-batch 2, on the CPU backend, one
 * OpenMP thread per rank. For every case (GPT-2: all on the device, the
 * optimizer on cpu at stage 1 and 2, the parameters on cpu at stage 3 (with
 * the optimizer on cpu or NVMe: ZeRO-3, each block gathered from its owners
 * into the slot that loads it), the
 * optimizer on NVMe at stage 2 when the store works, in fp32 and bf16 but
 * stage 1; fp16 with loss scaling and AdamW8bit with the optimizer on cpu;
 * a grouped-query Llama all on the device in fp32; every case at stage >= 1
 * shards the optimizer over the ranks, ZeRO-1 all-reducing the gradients,
 * ZeRO-2 and 3 reduce-scattering them, block by block during the backward
 * (overlap_comm, the default) or once after it; the device cases at stage 0
 * replicate it) the 12 losses match the
 * single process to the loss tolerance of the case's class (fp32: 1e-6
 * relative; only the reduction order of the gradient sums differs), the
 * final weights to the class's weight tolerances (see tols below), and
 * every rank's final weights are the same bits as rank 0's (replicas
 * never drift; sharded, the exchanged parameters agree). Checkpoints cross
 * rank counts (sharded ones: rank 0 writes model.safetensors, reading the
 * other ranks' parameter shards from them, each rank its own optimizer
 * file; every rank keeps its own shard of what it loads; a corrupt shard
 * file is refused by name): 2 ranks resume the single
 * process's step-6 checkpoint, 3 ranks resume the 2 ranks', one process
 * resumes the 3 ranks', each continuing the single-process trajectory to
 * the same tolerances. A control: the single process with the per-rank
 * micro-batch (3) is far from the truth, so matching it is not vacuous.
 * Ranks report failures through their exit status (a failing rank ends the
 * job). Skips (77) without MPI support or mpiexec. */
#include "zo_engine_test.h"
#include "zo_mpi_test.h"

#define N_STEPS ZO_MPITEST_STEPS
#define GLOBAL_B ZO_MPITEST_GLOBAL_B
#define LR ZO_MPITEST_LR
/* Losses: the 1e-6 relative in fp32 (measured: a few 1e-8). bf16
 * rounds the working weights, so a master weight that moves across a bf16
 * rounding boundary changes the forward by a bf16 ulp (measured: ~2e-5).
 * Weights: AdamW divides by sqrt(v), so a weight whose gradients nearly
 * cancel turns the last bits of the reduction order into a different
 * update, up to the learning rate per step either way (sign(g) when v is
 * tiny): a few weights differ by up to 2 * LR * N_STEPS, whatever the
 * implementation. So: at most frac of the weights outside atol + rtol |w|,
 * and none beyond max. AdamW8bit's
 * states move by whole quantization steps, so a state near a decision
 * threshold amplifies the same last bits (its own class). Measured here
 * (2 and 3 ranks, GPT-2, 57924 weights): fp32 2 outside, the worst 2.3e-5
 * off; bf16 about 90 outside, the worst 0.02 off (a sign flip), fp16 about
 * 64, 0.007; AdamW8bit about 1090 outside, the worst 7.7e-4 off, losses
 * within 2.3e-6. */
enum tol_class { TOL_F32, TOL_MIXED, TOL_Q8 };
static const struct {
  const char *name;
  double loss_rtol, atol, rtol, frac, max;
} tols[] = {
    [TOL_F32] = {"fp32", 1e-6, 1e-5, 1e-4, 1e-3, 1e-4},
    [TOL_MIXED] = {"mixed", 1e-4, 1e-3, 8e-3 /* about 2 bf16 ulps */, 1e-2, 2.0 * LR * N_STEPS},
    [TOL_Q8] = {"8-bit", 1e-5, 1e-5, 1e-4, 5e-2, 2.0 * LR * N_STEPS},
};

static char dir[256];
static char data_path[300];
static char nvme_dir[300];
static bool have_nvme;

static const char *const gpt2_model[] = {ZO_ETEST_GPT2_SMALL};
static const char *const llama_model[] = {ZO_ETEST_LLAMA_SMALL};
static const struct zo_etest_arch archs[] = {ZO_ETEST_ARCH("gpt2", gpt2_model),
                                             ZO_ETEST_ARCH("llama", llama_model)};

struct mcase {
  const char *name;
  int arch;              /* index into archs */
  enum tol_class tol;
  const char *precision; /* NULL (fp32), or the --set enabling bf16 or fp16 */
  bool nvme;             /* skipped when the store cannot be created */
  bool resume;           /* checkpoints cross rank counts */
  const char *sets[4];   /* placement options; unused entries NULL */
};

#define S1 "zero_optimization.stage=1"
#define S2 "zero_optimization.stage=2"
#define S3 "zero_optimization.stage=3"
#define OPT_CPU "zero_optimization.offload_optimizer.device=cpu"
#define OPT_NVME "zero_optimization.offload_optimizer.device=nvme"
#define PARAM_CPU "zero_optimization.offload_param.device=cpu"

#define BF16 "bf16.enabled=true"
#define FP16 "fp16.enabled=true"
#define ADAMW8 "optimizer.type=AdamW8bit"

static const struct mcase cases[] = {
    {"device", 0, TOL_F32, NULL, false, true, {0}},
    {"opt-cpu-s1", 0, TOL_F32, NULL, false, false, {S1, OPT_CPU}},
    {"opt-cpu-s2", 0, TOL_F32, NULL, false, false, {S2, OPT_CPU}},
    {"opt-cpu-s2-no-overlap", 0, TOL_F32, NULL, false, false, {S2, OPT_CPU, "zero_optimization.overlap_comm=false"}},
    {"param-cpu-s3", 0, TOL_F32, NULL, false, false, {S3, OPT_CPU, PARAM_CPU}},
    {"opt-nvme-s2", 0, TOL_F32, NULL, true, true, {S2, OPT_NVME}},
    {"param-cpu-opt-nvme-s3", 0, TOL_F32, NULL, true, false, {S3, OPT_NVME, PARAM_CPU}},
    {"bf16-device", 0, TOL_MIXED, BF16, false, false, {0}},
    {"bf16-opt-cpu-s2", 0, TOL_MIXED, BF16, false, false, {S2, OPT_CPU}},
    {"bf16-param-cpu-s3", 0, TOL_MIXED, BF16, false, true, {S3, OPT_CPU, PARAM_CPU}},
    {"bf16-opt-nvme-s2", 0, TOL_MIXED, BF16, true, false, {S2, OPT_NVME}},
    {"fp16-opt-cpu-s2", 0, TOL_MIXED, FP16, false, false, {S2, OPT_CPU}},
    {"adamw8bit-opt-cpu-s2", 0, TOL_Q8, NULL, false, false, {S2, OPT_CPU, ADAMW8}},
    {"llama-device", 1, TOL_F32, NULL, false, false, {0}},
};
#define N_CASES (int)ZO_ARRAY_LEN(cases)

static bool case_runs(const struct mcase *c) { return !c->nvme || have_nvme; }

static int load_case(const struct mcase *c, struct zo_config *cfg, const char *const *extra, int n_extra) {
  static char train_set[400], nvme_set[400];
  snprintf(train_set, sizeof train_set, "data.train=%s", data_path);
  snprintf(nvme_set, sizeof nvme_set, "zero_optimization.offload_optimizer.nvme_path=%s", nvme_dir);
  const char *common[] = {ZO_MPITEST_SETS, train_set, nvme_set, c->precision};
  /* NULL entries (fp32's precision, unused placement slots) are skipped. */
  const char *base[ZO_ARRAY_LEN(common) + ZO_ARRAY_LEN(c->sets)];
  memcpy(base, common, sizeof common);
  memcpy(base + ZO_ARRAY_LEN(common), c->sets, sizeof c->sets);
  return zo_etest_config_load_arch(cfg, &archs[c->arch], base, ZO_ARRAY_LEN(base), extra, n_extra);
}

/* A run's files: "<case>-np<ranks>[-<tag>]". */
static void run_name(char *buf, size_t size, const struct mcase *c, int ranks, const char *tag) {
  snprintf(buf, size, "%s-np%d%s%s", c->name, ranks, tag ? "-" : "", tag ? tag : "");
}

static size_t case_numel(const struct mcase *c) {
  struct zo_config cfg;
  return load_case(c, &cfg, NULL, 0) ? 0 : zo_mpitest_numel(&cfg);
}

/* Trains case c as this process's share of `ranks` ranks (comm NULL: one
 * process) with micro-batch GLOBAL_B / ranks (or micro_batch when > 0),
 * from checkpoint `resume` when not NULL, saving checkpoints every 6 steps
 * under dir/ck-<name>. Writes dir/<name>.jsonl (rank 0) and the final
 * weights to dir/<name>-rank<r>.f32. */
static int train_case(const struct mcase *c, zo_comm_t comm, int ranks, int micro_batch, const char *tag,
                      const char *resume) {
  char name[160], mb[64], met[600], ck[600], out[700];
  run_name(name, sizeof name, c, ranks, tag);
  snprintf(mb, sizeof mb, "train_micro_batch_size_per_gpu=%d", micro_batch > 0 ? micro_batch : GLOBAL_B / ranks);
  snprintf(met, sizeof met, "log.metrics_path=%s/%s.jsonl", dir, name);
  snprintf(ck, sizeof ck, "checkpoint.dir=%s/ck-%s", dir, name);
  const char *extra[] = {mb, met, ck, "checkpoint.every=6", "checkpoint.keep=0"};
  struct zo_config cfg;
  CHECK(load_case(c, &cfg, extra, ZO_ARRAY_LEN(extra)) == 0);
  const size_t n = case_numel(c);
  CHECK(n > 0);
  float *params = zo_test_xmalloc(n * sizeof *params);
  struct zo_train_opts opts = {.resume = resume, .final_params = params, .comm = comm};
  const int err = zo_train(&cfg, &opts);
  zo_config_free(&cfg);
  CHECK(err == 0);
  snprintf(out, sizeof out, "%s/%s-rank%d.f32", dir, name, comm ? zo_comm_rank(comm) : 0);
  CHECK(zo_mpitest_write_bytes(out, params, n * sizeof *params) == 0);
  free(params);
  return 0;
}

/* The checkpoint at step 6 of case c's run with `ranks` ranks. */
static void ckpt6(char *buf, size_t size, const struct mcase *c, int ranks) {
  char name[160];
  run_name(name, sizeof name, c, ranks, NULL);
  snprintf(buf, size, "%s/ck-%s/checkpoint-6", dir, name);
}

/* n tokens below 200 from a noisy recurrence: every row differs (a short
 * repeated text would make the rows of a micro-batch nearly alike, and the
 * per-rank micro-batch hard to tell from the global one). */

/* ---- the ranks ------------------------------------------------------------- */

static int rank_main(void) {
  zo_comm_t comm = zo_comm_init("auto");
  if (!comm) {
    fprintf(stderr, "rank: %s\n", zo_last_error());
    return 1;
  }
  const int ranks = zo_comm_size(comm), rank = zo_comm_rank(comm);
  for (int i = 0; i < N_CASES; i++) {
    const struct mcase *c = &cases[i];
    if (!case_runs(c)) continue;
    const double t0 = zo_time_s();
    int rc = train_case(c, comm, ranks, 0, NULL, NULL);
    /* 2 ranks resume the single process's checkpoint, 3 ranks the 2 ranks'. */
    if (!rc && c->resume) {
      char from[700];
      ckpt6(from, sizeof from, c, ranks == 2 ? 1 : 2);
      rc = train_case(c, comm, ranks, 0, "resumed", from);
    }
    if (rc) {
      fprintf(stderr, "rank %d of %d: case %s failed\n", rank, ranks, c->name);
      zo_comm_abort(comm, 1);
    }
    if (rank == 0) printf("  %d ranks: trained %s%s (%.2f s)\n", ranks, c->name, c->resume ? " and resumed" : "",
                          zo_time_s() - t0);
    fflush(stdout);
  }
  zo_comm_free(comm);
  return 0;
}

/* ---- the driver ------------------------------------------------------------ */

/* The largest relative loss difference and the worst weight, printed. */
static int compare_run(const struct mcase *c, int ranks, const char *tag, int first_step, int n_ranks_files) {
  char name[160], ref_name[160], path[700];
  run_name(name, sizeof name, c, ranks, tag);
  run_name(ref_name, sizeof ref_name, c, 1, NULL);
  double got[ZO_ETEST_MAX_STEPS], want[ZO_ETEST_MAX_STEPS];
  snprintf(path, sizeof path, "%s/%s.jsonl", dir, name);
  const int n = zo_etest_read_metric(path, "loss", got, ZO_ETEST_MAX_STEPS);
  snprintf(path, sizeof path, "%s/%s.jsonl", dir, ref_name);
  CHECK(zo_etest_read_metric(path, "loss", want, ZO_ETEST_MAX_STEPS) == N_STEPS);
  if (n != N_STEPS - first_step) return zo_test_fail("%s: %d losses logged, want %d", name, n, N_STEPS - first_step);
  const double ltol = tols[c->tol].loss_rtol;
  double worst = 0.0;
  int ret = 0;
  for (int i = 0; i < n; i++) {
    const double rel = fabs(got[i] - want[first_step + i]) / fabs(want[first_step + i]);
    if (rel > worst) worst = rel;
    if (!(rel <= ltol)) {
      fprintf(stderr, "  %s: step %d loss %.9g, single process %.9g (relative %.3g > %g)\n", name, first_step + i + 1,
              got[i], want[first_step + i], rel, ltol);
      ret = 1;
    }
  }
  const size_t numel = case_numel(c);
  CHECK(numel > 0);
  snprintf(path, sizeof path, "%s/%s-rank0.f32", dir, ref_name);
  float *ref = zo_mpitest_read_bytes(path, numel * sizeof(float));
  snprintf(path, sizeof path, "%s/%s-rank0.f32", dir, name);
  float *p0 = zo_mpitest_read_bytes(path, numel * sizeof(float));
  CHECK(ref && p0);
  const double atol = tols[c->tol].atol, rtol = tols[c->tol].rtol, frac = tols[c->tol].frac, wlim = tols[c->tol].max;
  double wmax = 0.0;
  size_t n_out = 0, worst_i = 0;
  for (size_t i = 0; i < numel; i++) {
    const double d = fabs((double)p0[i] - ref[i]);
    if (d > wmax) wmax = d, worst_i = i;
    n_out += !(d <= atol + rtol * fabs((double)ref[i]));
  }
  if ((double)n_out > frac * (double)numel || !(wmax <= wlim)) {
    fprintf(stderr, "  %s: %zu of %zu weights outside %g + %g |w| (at most %.0f allowed), the worst [%zu] %.9g vs "
                    "%.9g (at most %g allowed)\n",
            name, n_out, numel, atol, rtol, frac * (double)numel, worst_i, p0[worst_i], ref[worst_i], wlim);
    ret = 1;
  }
  for (int r = 1; r < n_ranks_files; r++) {
    snprintf(path, sizeof path, "%s/%s-rank%d.f32", dir, name, r);
    float *pr = zo_mpitest_read_bytes(path, numel * sizeof(float));
    CHECK(pr);
    if (memcmp(pr, p0, numel * sizeof *p0) != 0) {
      size_t i = 0;
      while (memcmp(&pr[i], &p0[i], sizeof *p0) == 0) i++;
      fprintf(stderr, "  %s: rank %d's weights differ from rank 0's first at element %zu: %.9g vs %.9g\n", name, r,
              i, pr[i], p0[i]);
      ret = 1;
    }
    free(pr);
  }
  printf("  %-30s losses: max rel. diff %.3g (tol %g); weights: %zu of %zu outside %g + %g |w|, max |diff| %.3g%s\n",
         name, worst, ltol, n_out, numel, atol, rtol, wmax, n_ranks_files > 1 ? "; ranks' weights identical" : "");
  free(ref);
  free(p0);
  return ret;
}

static int test_single_process_truth(void) {
  for (int i = 0; i < N_CASES; i++)
    if (case_runs(&cases[i])) CHECK(train_case(&cases[i], NULL, 1, 0, NULL, NULL) == 0);
  return 0;
}

/* The single process with the per-rank micro-batch is another trajectory. */
static int test_per_rank_micro_batch_differs(void) {
  CHECK(train_case(&cases[0], NULL, 1, GLOBAL_B / 2, "b3", NULL) == 0);
  char path[700];
  double a[ZO_ETEST_MAX_STEPS], b[ZO_ETEST_MAX_STEPS];
  snprintf(path, sizeof path, "%s/%s-np1.jsonl", dir, cases[0].name);
  CHECK(zo_etest_read_metric(path, "loss", a, ZO_ETEST_MAX_STEPS) == N_STEPS);
  snprintf(path, sizeof path, "%s/%s-np1-b3.jsonl", dir, cases[0].name);
  CHECK(zo_etest_read_metric(path, "loss", b, ZO_ETEST_MAX_STEPS) == N_STEPS);
  double worst = 0.0;
  for (int i = 0; i < N_STEPS; i++)
    if (fabs(a[i] - b[i]) / fabs(a[i]) > worst) worst = fabs(a[i] - b[i]) / fabs(a[i]);
  printf("  micro-batch 3 vs 6 in one process: max relative loss difference %.3g\n", worst);
  CHECK(worst > 1e3 * tols[TOL_F32].loss_rtol);
  return 0;
}

static int ranks_case(int ranks) {
  if (!zo_mpitest_available()) return ZO_TEST_SKIP;
  const char *args[] = {"--ranks", dir};
  CHECK(zo_mpitest_launch(ranks, args, ZO_ARRAY_LEN(args), NULL, 0) == 0);
  int ret = 0;
  for (int i = 0; i < N_CASES; i++)
    if (case_runs(&cases[i]) && compare_run(&cases[i], ranks, NULL, 0, ranks)) ret = 1;
  return ret;
}

static int test_two_ranks(void) { return ranks_case(2); }
static int test_three_ranks(void) { return ranks_case(3); }

/* 2 ranks from the single process's checkpoint, 3 from the 2 ranks', and one
 * process from the 3 ranks': each continues the single-process run. */
static int test_resume_across_rank_counts(void) {
  if (!zo_mpitest_available()) return ZO_TEST_SKIP;
  int ret = 0;
  for (int i = 0; i < N_CASES; i++) {
    const struct mcase *c = &cases[i];
    if (!c->resume || !case_runs(c)) continue;
    char from[700];
    ckpt6(from, sizeof from, c, 3);
    CHECK(train_case(c, NULL, 1, GLOBAL_B, "resumed-from-np3", from) == 0);
    if (compare_run(c, 2, "resumed", 6, 2) || compare_run(c, 3, "resumed", 6, 3) ||
        compare_run(c, 1, "resumed-from-np3", 6, 1))
      ret = 1;
  }
  return ret;
}

/* A sharded run's checkpoint holds one optimizer file per rank (and no
 * optimizer.safetensors); a flipped byte in one of them, or a missing
 * one, is refused at resume with a message naming that file. */
static int test_sharded_checkpoint_files(void) {
  if (!zo_mpitest_available()) return ZO_TEST_SKIP;
  const struct mcase *c = NULL;
  for (int i = 0; i < N_CASES; i++)
    if (cases[i].resume && !cases[i].nvme && strstr(cases[i].name, "-s3")) c = &cases[i];
  CHECK(c != NULL);
  char ck[700], p[800];
  ckpt6(ck, sizeof ck, c, 3);
  for (int r = 1; r <= 3; r++) {
    snprintf(p, sizeof p, "%s/optimizer-%05d-of-00003.safetensors", ck, r);
    CHECK(access(p, R_OK) == 0);
  }
  snprintf(p, sizeof p, "%s/optimizer.safetensors", ck);
  CHECK(access(p, F_OK) != 0);
  snprintf(p, sizeof p, "%s/optimizer-00002-of-00003.safetensors", ck);
  FILE *f = fopen(p, "r+b");
  CHECK(f != NULL);
  CHECK(fseek(f, -1, SEEK_END) == 0);
  const int b = fgetc(f);
  CHECK(b != EOF && fseek(f, -1, SEEK_END) == 0 && fputc(b ^ 0x5a, f) != EOF && fclose(f) == 0);
  char met[600], cdir[600];
  snprintf(met, sizeof met, "log.metrics_path=%s/corrupt.jsonl", dir);
  snprintf(cdir, sizeof cdir, "checkpoint.dir=%s/ck-corrupt", dir);
  const char *extra[] = {"train_micro_batch_size_per_gpu=6", met, cdir};
  struct zo_config cfg;
  CHECK(load_case(c, &cfg, extra, ZO_ARRAY_LEN(extra)) == 0);
  struct zo_train_opts opts = {.resume = ck};
  const int err = zo_train(&cfg, &opts);
  zo_config_free(&cfg);
  printf("  corrupt shard: %d (%s)\n", err, zo_last_error());
  const bool named = strstr(zo_last_error(), "optimizer-00002-of-00003.safetensors") != NULL &&
                     strstr(zo_last_error(), "checksum") != NULL;
  f = fopen(p, "r+b"); /* restored for whoever reads the checkpoint later */
  CHECK(f != NULL && fseek(f, -1, SEEK_END) == 0 && fputc(b, f) != EOF && fclose(f) == 0);
  CHECK(err == -EIO && named);
  /* A shard missing from the directory: refused by name as well. */
  char gone[820];
  snprintf(p, sizeof p, "%s/optimizer-00003-of-00003.safetensors", ck);
  snprintf(gone, sizeof gone, "%s.away", p);
  CHECK(rename(p, gone) == 0);
  CHECK(load_case(c, &cfg, extra, ZO_ARRAY_LEN(extra)) == 0);
  const int err2 = zo_train(&cfg, &opts);
  zo_config_free(&cfg);
  printf("  missing shard: %d (%s)\n", err2, zo_last_error());
  const bool named2 = strstr(zo_last_error(), "optimizer-00003-of-00003.safetensors") != NULL;
  CHECK(rename(gone, p) == 0);
  CHECK(err2 < 0 && named2);
  return 0;
}

int main(int argc, char **argv) {
  const int start = zo_mpitest_start(argc, argv, 0, "mpi", dir, sizeof dir, data_path, nvme_dir);
  if (start) return start;
  if (zo_comm_launched()) {
    have_nvme = access(nvme_dir, F_OK) == 0;
    return rank_main();
  }
  if (zo_mpitest_write_tokens(data_path, 6000)) return 1;
  have_nvme = zo_etest_nvme_probe(nvme_dir);
  /* The ranks see the probe's answer as the directory's existence. */
  if (have_nvme && mkdir(nvme_dir, 0700) != 0 && errno != EEXIST) have_nvme = false;
  if (!have_nvme) rmdir(nvme_dir);
  static const struct zo_test tests[] = {
      ZO_TEST(single_process_truth), ZO_TEST(per_rank_micro_batch_differs), ZO_TEST(two_ranks),
      ZO_TEST(three_ranks), ZO_TEST(resume_across_rank_counts), ZO_TEST(sharded_checkpoint_files),
  };
  const int rc = ZO_TEST_MAIN(tests);
  if (rc == 0) zo_test_rmtree(dir);
  return rc;
}
