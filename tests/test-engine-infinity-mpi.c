/* The Infinity tier (offload_param.device "nvme", optimizer on NVMe) over
 * data-parallel ranks at ZeRO stage 3, on the CPU backend. Each rank's
 * parameter, gradient, master, m and v files hold its shard only; a slot
 * load reads this rank's part of the block from its parameter file and
 * gathers the rest from the owners; each block's gradients are summed onto
 * their owners, who read-modify-write their own gradient file.
 * Checked, for GPT-2 and a grouped-query Llama, fp32 and bf16, gradient
 * accumulation 2, 12 steps:
 *  - bit-identical losses and final weights to ZeRO-3 with the parameters
 *    on cpu and the optimizer on NVMe at the same rank count (2 ranks, also
 *    with max_in_cpu keeping a block in host memory): the same
 *    shards, the same sums onto the same owners in the same order, so any
 *    part gathered or reduced wrongly changes the bits (3 ranks: GPT-2
 *    fp32, also with max_in_cpu);
 *  - every rank's final weights the same bits as rank 0's;
 *  - within test-engine-mpi's tolerances of the single process all on the
 *    device with the global micro-batch (only the order of the gradient
 *    sums differs, so bits cannot match it);
 *  - the same bits under random stream delays (ZO_STREAM_DELAY_US);
 *  - a resume of the 2 ranks' step-6 checkpoint (model.safetensors and
 *    optimizer-<r>-of-<N> through the tier's state I/O) continuing to the
 *    same losses and bits as the uninterrupted run; 3 ranks resuming the 2
 *    ranks' checkpoint and one process the 3 ranks' staying within the
 *    tolerances of the single process;
 *  - fp16 (dynamic loss scaling) and AdamW8bit on GPT-2 at 2 ranks, and a
 *    GPT-2 whose embedding outweighs its blocks (rank 0 owning no block at
 *    2 ranks, nothing at 3): bit-identical to their ZeRO-3
 *    parameters-on-cpu twins (the wide one at 3 ranks within the fp32
 *    tolerances: the embedding's gradients are summed in block-sized
 *    pieces there, and MPI picks the association of 3 addends by message
 *    size);
 *  - the NVMe files of the ranks (their planned sizes, which the store
 *    fallocates) adding up to the single process's, none larger than its
 *    share plus the rounding of a split block;
 *  - in every run, on every rank, the measured device and host peaks (and
 *    the NVMe bytes) equal to that rank's plan (zo_plan_build_rank).
 * The driver (started by ctest) computes the single-process runs and
 * launches itself under mpirun. Skips (77) without MPI or an NVMe store. */
#include "zo_engine_test.h"
#include "zo_mpi_test.h"

#define N_STEPS ZO_MPITEST_STEPS
#define GLOBAL_B ZO_MPITEST_GLOBAL_B
#define LR ZO_MPITEST_LR

/* test-engine-mpi's tolerances against the single process (see there). */
enum tol_class { TOL_F32, TOL_MIXED };
static const struct {
  double loss_rtol, atol, rtol, frac, max;
} tols[] = {
    [TOL_F32] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-4},
    [TOL_MIXED] = {1e-4, 1e-3, 8e-3, 1e-2, 2.0 * LR * N_STEPS},
};

static char dir[256];
static char data_path[300];
static char nvme_dir[300];

static const char *const gpt2_model[] = {"model.n_layer=3", "model.n_head=3", "model.n_embd=36",
                                         "model.vocab_size=200", "model.max_seq_len=16"};
static const char *const llama_model[] = {"model.arch=llama", "model.n_layer=3", "model.n_head=6",
                                          "model.num_key_value_heads=2", "model.n_embd=36",
                                          "model.intermediate_size=50", "model.vocab_size=200",
                                          "model.max_seq_len=16", "model.tie_word_embeddings=false"};
/* The embedding outweighs the blocks: at 2 ranks rank 0 owns wte alone (no
 * part of any block: no parameter or gradient file), at 3 ranks nothing at
 * all (no file). */
static const char *const wide_model[] = {"model.n_layer=3", "model.n_head=3", "model.n_embd=36",
                                         "model.vocab_size=4000", "model.max_seq_len=16"};
static const struct zo_etest_arch archs[] = {ZO_ETEST_ARCH("gpt2", gpt2_model), ZO_ETEST_ARCH("llama", llama_model),
                                             ZO_ETEST_ARCH("gpt2", wide_model)};

#define S3 "zero_optimization.stage=3"
#define OPT_NVME "zero_optimization.offload_optimizer.device=nvme"
#define PARAM_CPU "zero_optimization.offload_param.device=cpu"
#define PARAM_NVME "zero_optimization.offload_param.device=nvme"
#define BF16 "bf16.enabled=true"
#define FP16 "fp16.enabled=true"
#define ADAMW8 "optimizer.type=AdamW8bit"

/* A placement of an arch and precision: "device" (the single-process
 * truth), "p3cpu" (the ranks' reference), "p3nvme" (the tier). */
struct mcase {
  const char *name;
  int arch;
  bool bf16;
  bool twin_only;      /* compared with its p3cpu twin only (no device truth run) */
  const char *sets[4]; /* unused entries NULL */
};

static const struct mcase cases[] = {
    {"gpt2-device", 0, false, false, {0}},
    {"gpt2-bf16-device", 0, true, false, {0}},
    {"llama-device", 1, false, false, {0}},
    {"llama-bf16-device", 1, true, false, {0}},
    {"gpt2-p3cpu", 0, false, false, {S3, OPT_NVME, PARAM_CPU}},
    {"gpt2-p3nvme", 0, false, false, {S3, OPT_NVME, PARAM_NVME}},
    {"gpt2-bf16-p3cpu", 0, true, false, {S3, OPT_NVME, PARAM_CPU}},
    {"gpt2-bf16-p3nvme", 0, true, false, {S3, OPT_NVME, PARAM_NVME}},
    {"llama-p3cpu", 1, false, false, {S3, OPT_NVME, PARAM_CPU}},
    {"llama-p3nvme", 1, false, false, {S3, OPT_NVME, PARAM_NVME}},
    {"llama-bf16-p3cpu", 1, true, false, {S3, OPT_NVME, PARAM_CPU}},
    {"llama-bf16-p3nvme", 1, true, false, {S3, OPT_NVME, PARAM_NVME}},
    /* max_in_cpu (elements) keeps GPT-2's first block in host memory */
    {"gpt2-p3nvme-maxcpu", 0, false, false, {S3, OPT_NVME, PARAM_NVME, "zero_optimization.offload_param.max_in_cpu=20000"}},
    /* dynamic loss scaling (a skipped step leaves the files as they are), 8-bit states */
    {"gpt2-fp16-p3cpu", 0, false, true, {S3, OPT_NVME, PARAM_CPU, FP16}},
    {"gpt2-fp16-p3nvme", 0, false, true, {S3, OPT_NVME, PARAM_NVME, FP16}},
    {"gpt2-adamw8bit-p3cpu", 0, false, true, {S3, OPT_NVME, PARAM_CPU, ADAMW8}},
    {"gpt2-adamw8bit-p3nvme", 0, false, true, {S3, OPT_NVME, PARAM_NVME, ADAMW8}},
    {"wide-p3cpu", 2, false, true, {S3, OPT_NVME, PARAM_CPU}},
    {"wide-p3nvme", 2, false, true, {S3, OPT_NVME, PARAM_NVME}},
};
#define N_CASES (int)ZO_ARRAY_LEN(cases)
enum { DEVICE_CASES = 4 };

static const struct mcase *case_named(const char *name) {
  for (int i = 0; i < N_CASES; i++)
    if (strcmp(cases[i].name, name) == 0) return &cases[i];
  ZO_ASSERT(!"unknown case");
  return NULL;
}

static int load_case(const struct mcase *c, struct zo_config *cfg, const char *const *extra, int n_extra) {
  static char train_set[400], nvme_set[400];
  snprintf(train_set, sizeof train_set, "data.train=%s", data_path);
  snprintf(nvme_set, sizeof nvme_set, "zero_optimization.offload_optimizer.nvme_path=%s", nvme_dir);
  const char *common[] = {ZO_MPITEST_SETS, train_set, nvme_set, c->bf16 ? BF16 : NULL};
  const char *base[ZO_ARRAY_LEN(common) + ZO_ARRAY_LEN(c->sets)];
  memcpy(base, common, sizeof common);
  memcpy(base + ZO_ARRAY_LEN(common), c->sets, sizeof c->sets);
  return zo_etest_config_load_arch(cfg, &archs[c->arch], base, ZO_ARRAY_LEN(base), extra, n_extra);
}

static void run_name(char *buf, size_t size, const struct mcase *c, int ranks, const char *tag) {
  snprintf(buf, size, "%s-np%d%s%s", c->name, ranks, tag ? "-" : "", tag ? tag : "");
}

static size_t case_numel(const struct mcase *c) {
  struct zo_config cfg;
  return load_case(c, &cfg, NULL, 0) ? 0 : zo_mpitest_numel(&cfg);
}


/* Trains case c as this process's share of `ranks` ranks (comm NULL: one
 * process), micro-batch GLOBAL_B / ranks, from checkpoint `resume` when not
 * NULL, a checkpoint every 6 steps under dir/ck-<name>. Writes
 * dir/<name>.jsonl (rank 0), the final weights to dir/<name>-rank<r>.f32
 * and the NVMe files' bytes to dir/<name>-rank<r>.nvme. */
static int train_case(const struct mcase *c, zo_comm_t comm, int ranks, const char *tag, const char *resume) {
  char name[160], mb[64], met[600], ck[600], out[700];
  run_name(name, sizeof name, c, ranks, tag);
  snprintf(mb, sizeof mb, "train_micro_batch_size_per_gpu=%d", GLOBAL_B / ranks);
  snprintf(met, sizeof met, "log.metrics_path=%s/%s.jsonl", dir, name);
  snprintf(ck, sizeof ck, "checkpoint.dir=%s/ck-%s", dir, name);
  const char *extra[] = {mb, met, ck, "checkpoint.every=6", "checkpoint.keep=0"};
  struct zo_config cfg;
  CHECK(load_case(c, &cfg, extra, ZO_ARRAY_LEN(extra)) == 0);
  const size_t n = case_numel(c);
  CHECK(n > 0);
  const int r = comm ? zo_comm_rank(comm) : 0;
  /* This rank's plan: its measured peaks must be it (the memory report). */
  struct zo_model_config mc;
  struct zo_etest_run run = {0};
  CHECK(zo_train_model_config(&cfg, &mc) == 0);
  CHECK(zo_plan_build_rank(&cfg, &mc, zo_train_backend(&cfg, comm), r, ranks, &run.plan) == 0);
  float *params = zo_test_xmalloc(n * sizeof *params);
  struct zo_train_opts opts = {.resume = resume, .final_params = params, .comm = comm, .stats = &run.stats};
  const int err = zo_train(&cfg, &opts);
  zo_config_free(&cfg);
  if (err) fprintf(stderr, "  %s: %s\n", name, zo_last_error());
  CHECK(err == 0);
  char who[200];
  snprintf(who, sizeof who, "%s rank %d", name, r);
  CHECK(zo_etest_peaks_match(who, &run));
  const struct zo_sched_stats stats = run.stats;
  snprintf(out, sizeof out, "%s/%s-rank%d.f32", dir, name, r);
  CHECK(zo_mpitest_write_bytes(out, params, n * sizeof *params) == 0);
  snprintf(out, sizeof out, "%s/%s-rank%d.nvme", dir, name, r);
  const uint64_t nv = stats.nvme_planned;
  CHECK(zo_mpitest_write_bytes(out, &nv, sizeof nv) == 0);
  free(params);
  return 0;
}


/* ---- the ranks ------------------------------------------------------------- */

/* What each launch trains: "main" (2 ranks) every ranks' case and the
 * resumes, "delay" two of the tier's cases again under stream delays,
 * "three" the GPT-2 fp32 and wide cases with 3 ranks and a resume of the 2
 * ranks' checkpoint. */
static int rank_main(const char *phase) {
  zo_comm_t comm = zo_comm_init("auto");
  if (!comm) {
    fprintf(stderr, "rank: %s\n", zo_last_error());
    return 1;
  }
  const int ranks = zo_comm_size(comm), rank = zo_comm_rank(comm);
  const bool delay = strcmp(phase, "delay") == 0;
  for (int i = DEVICE_CASES; i < N_CASES; i++) {
    const struct mcase *c = &cases[i];
    if (strcmp(phase, "three") == 0 && strncmp(c->name, "gpt2-p3", 7) != 0 && strncmp(c->name, "wide-", 5) != 0)
      continue;
    if (delay && strcmp(c->name, "gpt2-p3nvme") != 0 && strcmp(c->name, "llama-bf16-p3nvme") != 0) continue;
    const double t0 = zo_time_s();
    int rc = train_case(c, comm, ranks, delay ? "delayed" : NULL, NULL);
    const bool resume = strcmp(phase, "main") == 0 && (strcmp(c->name, "gpt2-p3nvme") == 0 ||
                                                      strcmp(c->name, "llama-bf16-p3nvme") == 0);
    if (!rc && resume) {
      char from[700], name[160];
      run_name(name, sizeof name, c, ranks, NULL);
      snprintf(from, sizeof from, "%s/ck-%s/checkpoint-6", dir, name);
      rc = train_case(c, comm, ranks, "resumed", from);
    }
    /* 3 ranks also resume the 2 ranks' checkpoint (resharded at load). */
    if (!rc && strcmp(phase, "three") == 0 && strcmp(c->name, "gpt2-p3nvme") == 0) {
      char from[700], name[160];
      run_name(name, sizeof name, c, 2, NULL);
      snprintf(from, sizeof from, "%s/ck-%s/checkpoint-6", dir, name);
      rc = train_case(c, comm, ranks, "resumed-from-np2", from);
    }
    if (rc) {
      fprintf(stderr, "rank %d of %d: case %s failed\n", rank, ranks, c->name);
      zo_comm_abort(comm, 1);
    }
    if (rank == 0)
      printf("  %d ranks%s: trained %s%s (%.2f s)\n", ranks, delay ? " (stream delays)" : "", c->name,
             resume ? " and resumed" : "", zo_time_s() - t0);
    fflush(stdout);
  }
  zo_comm_free(comm);
  return 0;
}

/* ---- the driver ------------------------------------------------------------ */

/* Run a's losses the same bits as run b's from step first_step + 1 on. */
static int same_losses(const char *a, const char *b, int first_step) {
  char path[700];
  double la[ZO_ETEST_MAX_STEPS], lb[ZO_ETEST_MAX_STEPS];
  snprintf(path, sizeof path, "%s/%s.jsonl", dir, a);
  const int na = zo_etest_read_metric(path, "loss", la, ZO_ETEST_MAX_STEPS);
  snprintf(path, sizeof path, "%s/%s.jsonl", dir, b);
  CHECK(zo_etest_read_metric(path, "loss", lb, ZO_ETEST_MAX_STEPS) == N_STEPS);
  if (na != N_STEPS - first_step) return zo_test_fail("%s: %d losses logged, want %d", a, na, N_STEPS - first_step);
  for (int i = 0; i < na; i++)
    if (memcmp(&la[i], &lb[first_step + i], sizeof la[i]) != 0)
      return zo_test_fail("%s: step %d loss %.17g, %s %.17g", a, first_step + i + 1, la[i], b, lb[first_step + i]);
  return 0;
}

/* Every rank's final weights of run a (n floats) the bits of rank 0 of run b. */
static int same_weights(const char *a, const char *b, int ranks, size_t n) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s-rank0.f32", dir, b);
  float *want = zo_mpitest_read_bytes(path, n * sizeof(float));
  CHECK(want);
  int ret = 0;
  for (int r = 0; r < ranks && !ret; r++) {
    snprintf(path, sizeof path, "%s/%s-rank%d.f32", dir, a, r);
    float *got = zo_mpitest_read_bytes(path, n * sizeof(float));
    CHECK(got);
    if (memcmp(got, want, n * sizeof *got) != 0) {
      size_t i = 0;
      while (memcmp(&got[i], &want[i], sizeof *got) == 0) i++;
      ret = zo_test_fail("%s rank %d: weight %zu is %.9g, %s's %.9g (first of the differences)", a, r, i, got[i], b,
                         want[i]);
    }
    free(got);
  }
  free(want);
  return ret;
}

/* Run a (the case's own) against b: losses and weights the same bits. */
static int check_same(const struct mcase *c, const char *a, const char *b, int ranks, int first_step) {
  if (same_losses(a, b, first_step) || same_weights(a, b, ranks, case_numel(c))) return 1;
  printf("  %-34s = %s: losses and every rank's weights bit-identical\n", a, b);
  return 0;
}

/* Run `name` (its losses from step first_step + 1 on) against the single
 * process all on the device. */
static int check_close(const struct mcase *c, const char *name, const char *ref, int first_step) {
  char path[700];
  double got[ZO_ETEST_MAX_STEPS], want[ZO_ETEST_MAX_STEPS];
  snprintf(path, sizeof path, "%s/%s.jsonl", dir, name);
  CHECK(zo_etest_read_metric(path, "loss", got, ZO_ETEST_MAX_STEPS) == N_STEPS - first_step);
  snprintf(path, sizeof path, "%s/%s.jsonl", dir, ref);
  CHECK(zo_etest_read_metric(path, "loss", want, ZO_ETEST_MAX_STEPS) == N_STEPS);
  const int k = c->bf16 ? TOL_MIXED : TOL_F32;
  double worst = 0.0;
  for (int i = 0; i < N_STEPS - first_step; i++) {
    const double rel = fabs(got[i] - want[first_step + i]) / fabs(want[first_step + i]);
    if (rel > worst) worst = rel;
  }
  if (!(worst <= tols[k].loss_rtol))
    return zo_test_fail("%s: losses up to %.3g relative from %s (tol %g)", name, worst, ref, tols[k].loss_rtol);
  const size_t n = case_numel(c);
  snprintf(path, sizeof path, "%s/%s-rank0.f32", dir, ref);
  float *w = zo_mpitest_read_bytes(path, n * sizeof(float));
  snprintf(path, sizeof path, "%s/%s-rank0.f32", dir, name);
  float *p = zo_mpitest_read_bytes(path, n * sizeof(float));
  CHECK(w && p);
  size_t n_out = 0;
  double wmax = 0.0;
  for (size_t i = 0; i < n; i++) {
    const double d = fabs((double)p[i] - w[i]);
    if (d > wmax) wmax = d;
    n_out += !(d <= tols[k].atol + tols[k].rtol * fabs((double)w[i]));
  }
  free(w);
  free(p);
  if ((double)n_out > tols[k].frac * (double)n || !(wmax <= tols[k].max))
    return zo_test_fail("%s: %zu of %zu weights outside %g + %g |w| of %s, the worst %.3g off", name, n_out, n,
                        tols[k].atol, tols[k].rtol, ref, wmax);
  printf("  %-34s ~ %s: losses within %.3g relative, %zu of %zu weights outside tolerance, max |diff| %.3g\n", name,
         ref, worst, n_out, n, wmax);
  return 0;
}

static int test_single_process(void) {
  for (int i = 0; i < DEVICE_CASES; i++) CHECK(train_case(&cases[i], NULL, 1, NULL, NULL) == 0);
  CHECK(train_case(case_named("gpt2-p3nvme"), NULL, 1, NULL, NULL) == 0);
  CHECK(train_case(case_named("llama-bf16-p3nvme"), NULL, 1, NULL, NULL) == 0);
  return 0;
}

static const char *device_ref(const struct mcase *c) {
  static const char *const refs[2][2] = {{"gpt2-device-np1", "gpt2-bf16-device-np1"},
                                        {"llama-device-np1", "llama-bf16-device-np1"}};
  return refs[c->arch][c->bf16];
}

/* Each tier case against its p3cpu twin: "x-p3nvme[-maxcpu]" -> "x-p3cpu". */
static void twin_name(char *buf, size_t size, const struct mcase *c, int ranks) {
  char base[64];
  snprintf(base, sizeof base, "%s", c->name);
  *strstr(base, "p3nvme") = '\0';
  snprintf(buf, size, "%sp3cpu-np%d", base, ranks);
}

static int compare_ranks(int ranks) {
  int ret = 0;
  for (int i = DEVICE_CASES; i < N_CASES; i++) {
    const struct mcase *c = &cases[i];
    if (!strstr(c->name, "p3nvme")) continue;
    if (ranks == 3 && strncmp(c->name, "gpt2-p3", 7) != 0 && strncmp(c->name, "wide-", 5) != 0) continue;
    char name[160], twin[160];
    run_name(name, sizeof name, c, ranks, NULL);
    twin_name(twin, sizeof twin, c, ranks);
    /* The wide embedding at 3 ranks: the tier sums the embedding's
     * gradients in block-sized pieces (its staging holds one block), the
     * cpu tier in one piece per owner, and MPI chooses its reduction (so
     * the association of 3 addends) by message size: close, not the bits. */
    if (ranks == 3 && c->arch == 2) {
      if (check_close(c, name, twin, 0)) ret = 1;
      continue;
    }
    if (check_same(c, name, twin, ranks, 0) || (!c->twin_only && check_close(c, name, device_ref(c), 0))) ret = 1;
  }
  return ret;
}

static int test_two_ranks(void) {
  const char *args[] = {"--ranks", dir, "main"};
  CHECK(zo_mpitest_launch(2, args, ZO_ARRAY_LEN(args), NULL, 0) == 0);
  return compare_ranks(2);
}

static int test_stream_delays(void) {
  const char *args[] = {"--ranks", dir, "delay"};
  const char *env[] = {"ZO_STREAM_DELAY_US=200"};
  CHECK(zo_mpitest_launch(2, args, ZO_ARRAY_LEN(args), env, ZO_ARRAY_LEN(env)) == 0);
  int ret = 0;
  const char *const names[] = {"gpt2-p3nvme", "llama-bf16-p3nvme"};
  for (int i = 0; i < 2; i++) {
    const struct mcase *c = case_named(names[i]);
    char a[160], b[160];
    run_name(a, sizeof a, c, 2, "delayed");
    run_name(b, sizeof b, c, 2, NULL);
    if (check_same(c, a, b, 2, 0)) ret = 1;
  }
  return ret;
}

/* The resumed runs (2 ranks from their own step-6 checkpoint) continue the
 * uninterrupted ones to the bit. */
static int test_resume(void) {
  int ret = 0;
  const char *const names[] = {"gpt2-p3nvme", "llama-bf16-p3nvme"};
  for (int i = 0; i < 2; i++) {
    const struct mcase *c = case_named(names[i]);
    char a[160], b[160], p[800];
    run_name(a, sizeof a, c, 2, "resumed");
    run_name(b, sizeof b, c, 2, NULL);
    /* the sharded checkpoint: one optimizer file per rank */
    for (int r = 1; r <= 2; r++) {
      snprintf(p, sizeof p, "%s/ck-%s/checkpoint-6/optimizer-%05d-of-00002.safetensors", dir, b, r);
      CHECK(access(p, R_OK) == 0);
    }
    if (check_same(c, a, b, 2, 6)) ret = 1;
  }
  return ret;
}

static int test_three_ranks(void) {
  const char *args[] = {"--ranks", dir, "three"};
  CHECK(zo_mpitest_launch(3, args, ZO_ARRAY_LEN(args), NULL, 0) == 0);
  return compare_ranks(3);
}

/* Checkpoints cross rank counts: 3 ranks resumed the 2 ranks' step-6
 * checkpoint, one process resumes the 3 ranks'; each continues the
 * single-process trajectory (the gradient sums' order differs, so within
 * the tolerances, not the bits). */
static int test_resume_across_rank_counts(void) {
  const struct mcase *c = case_named("gpt2-p3nvme");
  char from[700], name[160];
  run_name(name, sizeof name, c, 3, NULL);
  snprintf(from, sizeof from, "%s/ck-%s/checkpoint-6", dir, name);
  CHECK(train_case(c, NULL, 1, "resumed-from-np3", from) == 0);
  char a[160], b[160];
  run_name(a, sizeof a, c, 3, "resumed-from-np2");
  run_name(b, sizeof b, c, 1, "resumed-from-np3");
  return check_close(c, a, device_ref(c), 6) || check_close(c, b, device_ref(c), 6);
}

/* The ranks' NVMe bytes add up to the single process's: each split block
 * adds at most one chunk's rounding (aio.block_size) per file (5 files). */
static int test_files_sharded(void) {
  const char *const names[] = {"gpt2-p3nvme", "llama-bf16-p3nvme"};
  for (int i = 0; i < 2; i++) {
    const struct mcase *c = case_named(names[i]);
    uint64_t single = 0;
    for (int ranks = 1; ranks <= (i == 0 ? 3 : 2); ranks++) {
      char name[160], path[800];
      run_name(name, sizeof name, c, ranks, NULL);
      uint64_t sum = 0, most = 0;
      for (int r = 0; r < ranks; r++) {
        snprintf(path, sizeof path, "%s/%s-rank%d.nvme", dir, name, r);
        uint64_t *nv = zo_mpitest_read_bytes(path, sizeof *nv);
        CHECK(nv);
        sum += *nv;
        if (*nv > most) most = *nv;
        free(nv);
      }
      if (ranks == 1) single = sum;
      const uint64_t slack = (uint64_t)(ranks - 1) * 5 * 4096;
      printf("  %s, %d rank(s): NVMe files %llu bytes in all, the largest rank's %llu (one process %llu)\n", c->name,
             ranks, (unsigned long long)sum, (unsigned long long)most, (unsigned long long)single);
      CHECK(sum >= single && sum <= single + slack);
      CHECK(most <= single / (uint64_t)ranks + single / 4 + slack);
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  const int start = zo_mpitest_start(argc, argv, 1, "infinity-mpi", dir, sizeof dir, data_path, nvme_dir);
  if (start) return start;
  if (zo_comm_launched()) return rank_main(argv[3]);
  if (zo_mpitest_write_tokens(data_path, 6000)) return 1;
  if (mkdir(nvme_dir, 0700) != 0 || !zo_etest_nvme_probe(nvme_dir)) {
    zo_test_rmtree(dir);
    printf("skipped: no NVMe store under %s\n", nvme_dir);
    return ZO_TEST_SKIP;
  }
  static const struct zo_test tests[] = {
      ZO_TEST(single_process), ZO_TEST(two_ranks), ZO_TEST(stream_delays),
      ZO_TEST(resume),         ZO_TEST(three_ranks), ZO_TEST(resume_across_rank_counts), ZO_TEST(files_sharded),
  };
  const int rc = ZO_TEST_MAIN(tests);
  if (rc == 0) zo_test_rmtree(dir);
  return rc;
}
