/* The bytes a step moves (zo_sched_stats: h2d_bytes, d2h_bytes,
 * nvme_read_bytes, nvme_write_bytes, counted where each copy and NVMe
 * request is issued) against the count derived independently from the
 * tensor table and the placement: for each placement the second step of K
 * micro-batches (K = 1 and K = 4) must move exactly what the schedule
 * implies -- gradients out once per micro-batch, the updated parameters in
 * once per step, parameter slots reloaded per micro-batch except the blocks
 * a slot still holds, the optimizer state read and written once per step on
 * NVMe, the tokens in and the losses out per micro-batch; LoRA's frozen
 * base on the device, streamed from the host or read from NVMe (no
 * gradient out, nothing written back, the NVMe base computing the device
 * base's bits). Where the plan's prediction of a step's bytes
 * (zo_plan_traffic) says it is exact -- LoRA on every base placement,
 * everything on the device, the optimizer and parameters on the host --
 * the counters equal it too; the optimizer on NVMe prints its approximate
 * prediction (the files' sizes) beside them. A placement that
 * moves a byte more or less than its schedule says fails. NVMe cases skip
 * when the store cannot be created. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo/lora.h"
#include "zo_engine_test.h"

static char tmpdir[256];

static int load(struct zo_config *cfg, const char *const *extra, int n_extra) {
  static char nvme_set[400];
  snprintf(nvme_set, sizeof nvme_set, "zero_optimization.offload_optimizer.nvme_path=%s/nvme", tmpdir);
  const char *base[] = {"model.n_layer=3", "model.n_head=3", "model.n_embd=36",
                        "model.vocab_size=200", "model.max_seq_len=16", "data.seq_len=11",
                        "data.train=unused.bin", "train_micro_batch_size_per_gpu=3",
                        "engine.device=cpu", "aio.block_size=4096", nvme_set};
  return zo_etest_config_load(cfg, base, ZO_ARRAY_LEN(base), extra, n_extra);
}

static void fill_random(int32_t *in, int32_t *tg, size_t BT, int vocab_size) {
  for (size_t i = 0; i < BT; i++) {
    in[i] = (int32_t)(zo_rng_u32() % (uint32_t)vocab_size);
    tg[i] = (int32_t)(zo_rng_u32() % (uint32_t)vocab_size);
  }
}

struct moved {
  uint64_t h2d, d2h, nvr, nvw;
};

/* What a LoRA run computed: the two steps' losses, the adapters and the
 * base's parameters (fp32) after them; malloc'd, free with bits_free. */
struct bits {
  double loss[2];
  float *adapters, *params;
  size_t n_adapters, n_params;
};

static void bits_free(struct bits *b) {
  free(b->adapters);
  free(b->params);
  memset(b, 0, sizeof *b);
}

/* Builds the placement of sets with K micro-batches, runs two steps and
 * returns the second's bytes in *out (the first warms nothing up: every
 * step queues the same work, but the second also counts the prefetch the
 * first step's end queued for it) and, LoRA, what it computed in *bits
 * (may be NULL). Returns 0, 1, or ZO_TEST_SKIP. */
static int step_run(const char *const *sets, int n_sets, int K, struct zo_plan *p, struct moved *out,
                    struct bits *bits) {
  char ks[64];
  snprintf(ks, sizeof ks, "gradient_accumulation_steps=%d", K);
  const char *all[24];
  int n = 0;
  CHECK(n_sets < (int)ZO_ARRAY_LEN(all));
  for (int i = 0; i < n_sets; i++) all[n++] = sets[i];
  all[n++] = ks;
  struct zo_config cfg;
  CHECK(load(&cfg, all, n) == 0);
  struct zo_model_config mc = cfg.model.spec;
  CHECK(zo_model_config_check(&mc) == 0);
  CHECK(zo_plan_build(&cfg, &mc, NULL, p) == 0);
  /* LoRA (the lora section on): the adapters, PEFT's init. */
  struct zo_lora l;
  struct zo_lora_table lt = {0};
  float *lp = NULL;
  if (p->placement.frozen) {
    CHECK(zo_lora_resolve(&cfg.lora, &mc, &l) == 1 && zo_lora_table_build(&mc, &l, &lt) == 0);
    CHECK((lp = malloc(lt.numel * sizeof *lp)) != NULL);
    zo_lora_init(&lt, 3, lp);
  }
  const struct zo_sched_config sc = {.model = mc, .B = p->B, .T = p->T, .placement = p->placement,
                                     .backend = zo_backend_cpu(), .lora = lp ? &lt : NULL, .lora_params = lp};
  struct zo_sched *s = zo_sched_init(&sc);
  free(lp);
  if (!s && (p->placement.optimizer == ZO_OFFLOAD_NVME || p->placement.param_nvme)) {
    printf("  skipped: NVMe store: %s\n", zo_last_error());
    zo_config_free(&cfg);
    return ZO_TEST_SKIP;
  }
  CHECK(s);
  CHECK(zo_sched_state_init(s, 1) == 0);
  CHECK(zo_sched_state_fresh(s, ZO_STATE_M) == 0 && zo_sched_state_fresh(s, ZO_STATE_V) == 0);
  CHECK(zo_sched_state_done(s) == 0);
  const struct zo_adamw_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                      .weight_decay = 0.1f};
  zo_rng_seed(5);
  struct zo_sched_stats st[2];
  for (long step = 1; step <= 2; step++) {
    double loss;
    CHECK(zo_etest_sched_step(s, step, K, &hp, fill_random, &loss) == 0);
    CHECK(zo_sched_synchronize(s) == 0);
    zo_sched_stats(s, &st[step - 1]);
    if (bits) bits->loss[step - 1] = loss;
  }
  if (bits) {
    CHECK(p->placement.frozen);
    bits->n_adapters = lt.numel;
    bits->n_params = zo_sched_model(s)->table.numel;
    CHECK((bits->adapters = malloc(bits->n_adapters * sizeof(float))) != NULL);
    CHECK((bits->params = malloc(bits->n_params * sizeof(float))) != NULL);
    CHECK(zo_sched_lora_read(s, bits->adapters, NULL, NULL) == 0);
    CHECK(zo_sched_get_state(s, bits->params, NULL, NULL) == 0);
  }
  out->h2d = st[1].h2d_bytes - st[0].h2d_bytes;
  out->d2h = st[1].d2h_bytes - st[0].d2h_bytes;
  out->nvr = st[1].nvme_read_bytes - st[0].nvme_read_bytes;
  out->nvw = st[1].nvme_write_bytes - st[0].nvme_write_bytes;
  zo_sched_free(s);
  if (p->placement.frozen) zo_lora_table_free(&lt);
  zo_config_free(&cfg);
  return 0;
}

static int step_bytes(const char *const *sets, int n_sets, int K, struct zo_plan *p, struct moved *out) {
  return step_run(sets, n_sets, K, p, out, NULL);
}

/* The table's sizes for the plan's model. */
struct sizes {
  uint64_t N, layer, res, BT; /* elements: all, one block, the resident ranges; tokens per micro-batch */
  int L, n_tensors;
};

static int sizes_of(const struct zo_plan *p, struct sizes *z) {
  struct zo_tensor_table t;
  CHECK(zo_model_build_table(&p->model, &t) == 0);
  z->N = t.numel;
  z->layer = t.layer_numel;
  z->L = t.n_layer;
  z->n_tensors = t.n_tensors;
  z->res = t.numel - (uint64_t)t.n_layer * t.layer_numel;
  z->BT = (uint64_t)p->B * (uint64_t)p->T;
  zo_tensor_table_free(&t);
  return 0;
}

static int expect(const char *what, int K, const struct moved *got, const struct moved *want) {
  printf("  %s, K = %d: h2d %llu (want %llu), d2h %llu (%llu), nvme read %llu (%llu), written %llu (%llu)\n", what,
         K, (unsigned long long)got->h2d, (unsigned long long)want->h2d, (unsigned long long)got->d2h,
         (unsigned long long)want->d2h, (unsigned long long)got->nvr, (unsigned long long)want->nvr,
         (unsigned long long)got->nvw, (unsigned long long)want->nvw);
  CHECK(got->h2d == want->h2d && got->d2h == want->d2h && got->nvr == want->nvr && got->nvw == want->nvw);
  return 0;
}

/* The plan's prediction (zo_plan_traffic), exact for this placement: the
 * counters equal it. */
static int expect_predicted(const char *what, int K, const struct zo_plan *p, const struct moved *got) {
  struct zo_plan_traffic tr;
  CHECK(zo_plan_traffic(p, p->layer_major, &tr) == 0);
  CHECK(tr.exact);
  const struct moved want = {.h2d = tr.h2d, .d2h = tr.d2h, .nvr = tr.nvme_read, .nvw = tr.nvme_write};
  char w[160];
  snprintf(w, sizeof w, "%s, the plan's prediction", what);
  return expect(w, K, got, &want);
}

/* A placement whose prediction is labelled approximate: printed beside the
 * counters, not compared. */
static int show_approximate(const char *what, int K, const struct zo_plan *p, const struct moved *got) {
  struct zo_plan_traffic tr;
  CHECK(zo_plan_traffic(p, p->layer_major, &tr) == 0);
  CHECK(!tr.exact);
  printf("  %s, K = %d, the plan's approximate prediction: h2d %llu (measured %llu), d2h %llu (%llu), nvme read %llu "
         "(%llu), written %llu (%llu)\n", what, K, (unsigned long long)tr.h2d, (unsigned long long)got->h2d,
         (unsigned long long)tr.d2h, (unsigned long long)got->d2h, (unsigned long long)tr.nvme_read,
         (unsigned long long)got->nvr, (unsigned long long)tr.nvme_write, (unsigned long long)got->nvw);
  return 0;
}

static const int Ks[] = {1, 4};

/* Everything on the device: the tokens in and the losses out, nothing else;
 * fp32 and bf16, the plan's prediction exact. */
static int test_all_on_device(void) {
  const char *bf16[] = {"bf16.enabled=true"};
  for (int bf = 0; bf < 2; bf++)
    for (size_t i = 0; i < ZO_ARRAY_LEN(Ks); i++) {
      const int K = Ks[i];
      struct zo_plan p;
      struct moved got;
      CHECK(step_bytes(bf ? bf16 : NULL, bf, K, &p, &got) == 0);
      struct sizes z;
      CHECK(sizes_of(&p, &z) == 0);
      /* and the per-tensor sums of squares of the norm, fp64 */
      const struct moved want = {.h2d = K * z.BT * 8, .d2h = K * z.BT * 4 + (uint64_t)z.n_tensors * 8};
      const char *what = bf ? "all on device, bf16" : "all on device";
      CHECK(expect(what, K, &got, &want) == 0);
      CHECK(expect_predicted(what, K, &p, &got) == 0);
    }
  return 0;
}

/* Placement sets in bf16 on the small Llama (an untied embedding: its rows
 * gathered on the host with the parameters there, its gradient leaving as
 * d(embedding output); with the parameters on the host its LM head, larger
 * than a block, streamed in pieces through the slots), K = 1 and 4: the
 * counters equal the plan's prediction. */
static int host_bf16_llama(const char *const *sets, int n_sets, const char *what) {
  const char *all[24];
  int n = 0;
  const char *llama[] = {ZO_ETEST_LLAMA_SMALL};
  for (int i = 0; i < n_sets; i++) all[n++] = sets[i];
  for (size_t a = 0; a < ZO_ARRAY_LEN(llama); a++) all[n++] = llama[a];
  all[n++] = "bf16.enabled=true";
  char w[96];
  snprintf(w, sizeof w, "%s (llama, bf16)", what);
  for (size_t i = 0; i < ZO_ARRAY_LEN(Ks); i++) {
    struct zo_plan p;
    struct moved got;
    CHECK(step_bytes(all, n, Ks[i], &p, &got) == 0);
    CHECK(expect_predicted(w, Ks[i], &p, &got) == 0);
  }
  return 0;
}

/* The optimizer on the host (fp32): every micro-batch's gradients out, the
 * updated parameters in once. */
static int test_optimizer_on_host(void) {
  const char *sets[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu"};
  for (size_t i = 0; i < ZO_ARRAY_LEN(Ks); i++) {
    const int K = Ks[i];
    struct zo_plan p;
    struct moved got;
    CHECK(step_bytes(sets, ZO_ARRAY_LEN(sets), K, &p, &got) == 0);
    struct sizes z;
    CHECK(sizes_of(&p, &z) == 0);
    const struct moved want = {.h2d = z.N * 4 + K * z.BT * 8, .d2h = K * (z.N * 4 + z.BT * 4)};
    CHECK(expect("optimizer on host", K, &got, &want) == 0);
    CHECK(expect_predicted("optimizer on host", K, &p, &got) == 0);
  }
  return host_bf16_llama(sets, ZO_ARRAY_LEN(sets), "optimizer on host");
}

/* Parameters on the host in S = 2 slots for L = 3 blocks: a micro-batch
 * loads every block forward and backward except those a slot still holds
 * (the last S of the forward for the backward, the first S of the previous
 * micro-batch's backward for the forward; the step's first S are loaded by
 * the previous step's end), so S + 2 K (L - S) block loads per step -- 4 at
 * K = 1 and 10 at K = 4, not the 1.25 x a layer-major order would move. */
static int test_params_on_host(void) {
  const char *sets[] = {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
                        "zero_optimization.offload_param.device=cpu",
                        "zero_optimization.offload_param.buffer_count=2"};
  uint64_t total[2] = {0, 0};
  for (size_t i = 0; i < ZO_ARRAY_LEN(Ks); i++) {
    const int K = Ks[i], S = 2;
    struct zo_plan p;
    struct moved got;
    CHECK(step_bytes(sets, ZO_ARRAY_LEN(sets), K, &p, &got) == 0);
    CHECK(p.placement.param_slots == S);
    struct sizes z;
    CHECK(sizes_of(&p, &z) == 0);
    const uint64_t loads = (uint64_t)S + 2ull * (uint64_t)K * (uint64_t)(z.L - S);
    const struct moved want = {.h2d = z.res * 4 + loads * z.layer * 4 + K * z.BT * 8,
                               .d2h = K * (z.N * 4 + z.BT * 4)};
    CHECK(expect("parameters on host", K, &got, &want) == 0);
    CHECK(expect_predicted("parameters on host", K, &p, &got) == 0);
    total[i] = got.h2d + got.d2h;
  }
  printf("  parameters on host: K = 4 moves %.3f x the bytes of K = 1\n", (double)total[1] / (double)total[0]);
  return host_bf16_llama(sets, ZO_ARRAY_LEN(sets), "parameters on host");
}

/* The optimizer on NVMe (fp32 AdamW): master, m and v read and written once
 * per step, whatever K; the blocks' gradients go to the NVMe gradient file,
 * written by every micro-batch, read back by every later one's accumulation
 * and by the update: K writes and K reads of it per step. */
static int test_optimizer_on_nvme(void) {
  const char *sets[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=nvme"};
  for (size_t i = 0; i < ZO_ARRAY_LEN(Ks); i++) {
    const int K = Ks[i];
    struct zo_plan p;
    struct moved got;
    const int r = step_bytes(sets, ZO_ARRAY_LEN(sets), K, &p, &got);
    if (r) return r;
    struct sizes z;
    CHECK(sizes_of(&p, &z) == 0);
    CHECK(p.placement.grads_nvme);
    const uint64_t G = (uint64_t)z.L * z.layer * 4; /* the blocks' gradient file */
    const struct moved want = {.h2d = z.N * 4 + K * z.BT * 8, .d2h = K * (z.N * 4 + z.BT * 4),
                               .nvr = 3 * z.N * 4 + (uint64_t)K * G, .nvw = 3 * z.N * 4 + (uint64_t)K * G};
    CHECK(expect("optimizer on NVMe", K, &got, &want) == 0);
    CHECK(show_approximate("optimizer on NVMe", K, &p, &got) == 0);
  }
  return 0;
}

/* LoRA (issue 47): the base frozen, nothing of it ever leaves the device or
 * is written back. On the device: the tokens in, the losses and the
 * adapters' one fp64 sum of squares out. Streamed from the host in S = 2
 * slots for L = 3 blocks: the same block loads as a trained run's (S + 2 K
 * (L - S)), no resident range reloaded (nothing is updated), no gradient
 * out; a Llama's untied embedding gathers its rows on the host (B T C
 * working-dtype values in per micro-batch). GPT-2 and Llama, fp32 and bf16,
 * activation checkpointing off and on (the recompute loads nothing more),
 * K = 1 and 4; the plan's prediction equals the counters. */
static int test_lora(void) {
  const char *llama[] = {ZO_ETEST_LLAMA_SMALL};
  for (int arch = 0; arch < 2; arch++)
    for (int bf = 0; bf < 2; bf++)
      for (int host = 0; host < 2; host++)
        for (int c = 0; c < 2 * (int)ZO_ARRAY_LEN(Ks); c++) {
          const int ck = c / (int)ZO_ARRAY_LEN(Ks), i = c % (int)ZO_ARRAY_LEN(Ks);
          const int K = Ks[i], S = 2;
          const char *sets[24];
          int n = 0;
          sets[n++] = "lora.r=4";
          sets[n++] = bf ? "bf16.enabled=true" : "bf16.enabled=false";
          for (size_t a = 0; arch && a < ZO_ARRAY_LEN(llama); a++) sets[n++] = llama[a];
          if (ck) sets[n++] = "activation_checkpointing.enabled=true";
          if (host) {
            sets[n++] = "zero_optimization.stage=3";
            sets[n++] = "zero_optimization.offload_param.device=cpu";
            sets[n++] = "zero_optimization.offload_param.buffer_count=2";
          }
          struct zo_plan p;
          struct moved got;
          CHECK(step_bytes(sets, n, K, &p, &got) == 0);
          CHECK(p.placement.frozen && p.placement.param_slots == (host ? S : 0));
          struct sizes z;
          CHECK(sizes_of(&p, &z) == 0);
          const uint64_t e = bf ? 2 : 4;
          const uint64_t loads = host ? (uint64_t)S + 2ull * (uint64_t)K * (uint64_t)(z.L - S) : 0;
          const uint64_t rows = arch && host ? K * z.BT * 36 * e : 0; /* n_embd 36 */
          const struct moved want = {.h2d = loads * z.layer * e + K * z.BT * 8 + rows, .d2h = K * z.BT * 4 + 8};
          char what[96];
          snprintf(what, sizeof what, "LoRA, base on %s (%s, %s%s)", host ? "host" : "device", arch ? "llama" : "gpt2",
                   bf ? "bf16" : "fp32", ck ? ", checkpointed" : "");
          CHECK(expect(what, K, &got, &want) == 0);
          CHECK(expect_predicted(what, K, &p, &got) == 0);
        }
  return 0;
}

/* The same two steps with the base on the device and on NVMe compute the
 * same bits: losses, adapters and the base read back. */
static int same_bits(const char *what, const struct bits *dev, const struct bits *nv) {
  const bool loss = memcmp(dev->loss, nv->loss, sizeof dev->loss) == 0;
  const bool ad = dev->n_adapters == nv->n_adapters &&
                  memcmp(dev->adapters, nv->adapters, dev->n_adapters * sizeof(float)) == 0;
  const bool base = dev->n_params == nv->n_params && memcmp(dev->params, nv->params, dev->n_params * sizeof(float)) == 0;
  printf("  %s: losses %.9g %.9g (device %.9g %.9g)%s%s%s\n", what, nv->loss[0], nv->loss[1], dev->loss[0],
         dev->loss[1], loss ? "" : " DIFFER", ad ? "" : ", adapters DIFFER", base ? "" : ", base DIFFERS");
  CHECK(loss && ad && base && dev->loss[0] != dev->loss[1]);
  return 0;
}

/* LoRA's frozen base on NVMe (issue 47, piece 3): a parameter file written
 * once by the state I/O, then only read. S = 2 slots, L = 3 blocks: the
 * block loads of the base on the host (test_lora), per block 1 + K (block
 * 0: the step's end and each backward), 1 (block 1: the step's end) and K
 * (block 2: each forward), each read from the file unless max_in_cpu keeps
 * the block in host memory: NVMe reads = those loads' blocks, NVMe writes
 * 0, no gradient out; a Llama with an untied embedding gathers the
 * embedding's rows on the host (B T C working-dtype values in per
 * micro-batch). Losses, adapters and the base read back are the base on the
 * device's bits, fp32 and bf16, K = 1 and 4. */
static int test_lora_nvme(void) {
  static char path[400], cpu_set[96];
  snprintf(path, sizeof path, "zero_optimization.offload_param.nvme_path=%s/nvme-base", tmpdir);
  const char *llama[] = {ZO_ETEST_LLAMA_SMALL};
  for (int arch = 0; arch < 2; arch++)
    for (int bf = 0; bf < 2; bf++)
      for (int in_cpu = 0; in_cpu < 2; in_cpu++)
        for (size_t i = 0; i < ZO_ARRAY_LEN(Ks); i++) {
          const int K = Ks[i], S = 2;
          const char *sets[24];
          int n = 0;
          sets[n++] = "lora.r=4";
          sets[n++] = bf ? "bf16.enabled=true" : "bf16.enabled=false";
          for (size_t a = 0; arch && a < ZO_ARRAY_LEN(llama); a++) sets[n++] = llama[a];
          const int n_dev = n;
          struct zo_plan p;
          struct moved got;
          struct bits dev = {0}, nv = {0};
          CHECK(step_run(sets, n_dev, K, &p, &got, &dev) == 0);
          CHECK(p.placement.frozen && !p.placement.param_nvme);
          struct sizes z;
          CHECK(sizes_of(&p, &z) == 0);
          /* max_in_cpu: the first block whole in the host pool */
          snprintf(cpu_set, sizeof cpu_set, "zero_optimization.offload_param.max_in_cpu=%llu",
                   (unsigned long long)(in_cpu ? z.layer : 0));
          sets[n++] = "zero_optimization.stage=3";
          sets[n++] = "zero_optimization.offload_param.device=nvme";
          sets[n++] = "zero_optimization.offload_param.buffer_count=2";
          sets[n++] = path;
          sets[n++] = cpu_set;
          const int r = step_run(sets, n, K, &p, &got, &nv);
          if (r == ZO_TEST_SKIP) {
            bits_free(&dev);
            return r;
          }
          CHECK(r == 0);
          CHECK(p.placement.frozen && p.placement.param_nvme && !p.placement.grads_nvme && p.placement.param_slots == S);
          CHECK(p.total[ZO_TIER_NVME] == p.bytes[ZO_TIER_NVME][ZO_MEM_PARAMS] && p.total[ZO_TIER_NVME] > 0);
          const uint64_t e = bf ? 2 : 4, loads[3] = {1 + (uint64_t)K, 1, (uint64_t)K};
          uint64_t all = 0, read = 0;
          for (int l = 0; l < 3; l++) {
            all += loads[l];
            if (l >= in_cpu) read += loads[l];
          }
          CHECK(all == (uint64_t)S + 2ull * (uint64_t)K * (uint64_t)(z.L - S));
          const uint64_t rows = arch ? K * z.BT * 36 * e : 0; /* n_embd 36 */
          const struct moved want = {.h2d = all * z.layer * e + K * z.BT * 8 + rows, .d2h = K * z.BT * 4 + 8,
                                     .nvr = read * z.layer * e, .nvw = 0};
          char what[96];
          snprintf(what, sizeof what, "LoRA, base on NVMe (%s, %s%s)", arch ? "llama" : "gpt2", bf ? "bf16" : "fp32",
                   in_cpu ? ", block 0 in host memory" : "");
          CHECK(expect(what, K, &got, &want) == 0);
          CHECK(expect_predicted(what, K, &p, &got) == 0);
          CHECK(same_bits(what, &dev, &nv) == 0);
          bits_free(&dev);
          bits_free(&nv);
        }
  return 0;
}

int main(void) {
  if (zo_test_mkdtemp(tmpdir, sizeof tmpdir, "bytes")) return 1;
  static const struct zo_test tests[] = {
      ZO_TEST(all_on_device),
      ZO_TEST(optimizer_on_host),
      ZO_TEST(params_on_host),
      ZO_TEST(optimizer_on_nvme),
      ZO_TEST(lora),
      ZO_TEST(lora_nvme),
  };
  int rc = ZO_TEST_MAIN(tests);
  zo_test_rmtree(tmpdir);
  return rc;
}
