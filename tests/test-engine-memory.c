/* Memory savers against the plain run. Chunked LM head: several chunks with a
 * partial last one give losses and every gradient within 1e-6 (relative to
 * the largest magnitude of each tensor) of one chunk, the fused head backward
 * of zo_model_forward_train equals forward + backward bit for bit, sampling's
 * last row survives, and the arena peak equals the smaller plan. Activation
 * checkpointing: 10 training steps give bit-identical losses and final
 * weights to the run without it, every block or some, inputs on the device
 * or in host memory, with all on the device, gradients on the host and
 * parameters streamed through K slots; measured peaks equal the plan, and
 * the plan's device activations shrink. Every case runs for GPT-2 and for a
 * Llama with grouped-query attention and an LM head tied to the embedding
 * (the head's gradient then accumulates into the embedding's). Like
 * test-engine-offload, the binary re-executes itself with
 * ZO_STREAM_DELAY_US=200. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zo/model.h"
#include "zo_engine_test.h"

static char tmpdir[256];
static char data_path[300];

/* The models one architecture's cases run. */
struct arch {
  struct zo_etest_arch run;    /* the training cases' model */
  struct zo_model_config head; /* the chunked-head cases' model (vocabulary 130) */
  struct zo_model_config big;  /* a full-size model whose plan the head's chunking shrinks */
  int big_rows;                /* its rows per LM-head chunk at 16 x 512 */
};

static const char *const gpt2_model[] = {ZO_ETEST_GPT2_SMALL};
/* 6 query heads on 3 key/value heads of size 6, an MLP width of 50, the LM
 * head tied to the embedding. */
static const char *const llama_model[] = {"model.arch=llama", "model.n_layer=3", "model.n_head=6",
                                          "model.num_key_value_heads=3", "model.n_embd=36",
                                          "model.intermediate_size=50", "model.vocab_size=200",
                                          "model.max_seq_len=16", "model.tie_word_embeddings=true"};

static const struct arch archs[] = {
    {ZO_ETEST_ARCH("gpt2", gpt2_model),
     {.n_layer = 2, .n_head = 2, .n_embd = 32, .vocab_size = 130, .max_seq_len = 16},
     /* GPT-2 124M */
     {.n_layer = 12, .n_head = 12, .n_embd = 768, .vocab_size = 50257, .max_seq_len = 1024}, 333},
    {ZO_ETEST_ARCH("llama", llama_model),
     {.arch = ZO_ARCH_LLAMA, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 32, .intermediate_size = 40,
      .vocab_size = 130, .max_seq_len = 16, .tie_embeddings = true},
     /* Llama 3.2 1B */
     {.arch = ZO_ARCH_LLAMA, .n_layer = 16, .n_head = 32, .n_kv_head = 8, .n_embd = 2048,
      .intermediate_size = 8192, .vocab_size = 128256, .max_seq_len = 131072, .tie_embeddings = true},
     130},
};
static const struct arch *arch; /* the one the cases run for */

/* ---- chunked LM head ---------------------------------------------------- */

enum { HB = 3, HT = 7, HBT = HB * HT, HCHUNK = 5 }; /* 5 chunks: 5, 5, 5, 5, 1 rows */

struct head_run {
  float losses[HBT];
  float *grads; /* (numel) */
  float last_logits[192]; /* (Vp) the last row, inference-style forward */
};

static void head_tokens(int32_t *in, int32_t *tg) {
  for (int i = 0; i < HBT; i++) {
    in[i] = (int32_t)((i * 37 + 11) % 130);
    tg[i] = i == 4 ? -1 : (int32_t)((i * 53 + 7) % 130); /* one ignored target */
  }
}

/* One micro-batch's gradients from zero (loss mean over HBT targets); fused:
 * zo_model_forward_train, else zo_model_forward + zo_model_backward. */
static int head_pass(struct zo_model *m, const int32_t *in, const int32_t *tg, bool fused) {
  const float dloss = 1.0f / HBT;
  zo_model_zero_grad(m, NULL);
  if (fused)
    zo_model_forward_train(m, in, tg, HB, HT, dloss, NULL);
  else
    zo_model_forward(m, in, tg, HB, HT, NULL);
  zo_model_backward(m, HB, HT, dloss, NULL);
  return m->backend->stream_synchronize(NULL);
}

/* Trains one micro-batch with chunk rows (0: the default, all rows here);
 * fused: zo_model_forward_train, else zo_model_forward + zo_model_backward. */
static int head_run(int chunk_rows, bool fused, struct head_run *r) {
  struct zo_model_layout lo = {.training = true, .head_chunk_rows = chunk_rows};
  const struct zo_model_config *head_cfg = &arch->head;
  struct zo_model *m = zo_model_init_layout(head_cfg, zo_backend_cpu(), HB, HT, &lo);
  CHECK(m);
  const size_t n = m->table.numel;
  const int Vp = m->cfg.padded_vocab_size;
  CHECK(Vp == 192);
  CHECK(m->head_rows == (chunk_rows ? chunk_rows : HBT));
  float *p = malloc(n * sizeof(float));
  r->grads = malloc(n * sizeof(float));
  CHECK(p && r->grads);
  zo_model_init_params(m, p, 7);
  CHECK(zo_model_upload_params(m, p) == 0);
  int32_t in[HBT], tg[HBT];
  head_tokens(in, tg);
  CHECK(head_pass(m, in, tg, fused) == 0);
  memcpy(r->losses, m->losses, sizeof r->losses);
  memcpy(r->grads, m->grads, n * sizeof(float));
  /* Sampling reads the last row from the last chunk. */
  zo_model_forward(m, in, NULL, HB, HT, NULL);
  CHECK(m->backend->stream_synchronize(NULL) == 0);
  CHECK(m->head_row0 == (chunk_rows ? (HBT - 1) / chunk_rows * chunk_rows : 0));
  memcpy(r->last_logits, (const float *)m->logits + (size_t)(HBT - 1 - m->head_row0) * (size_t)Vp,
         sizeof r->last_logits);
  /* The arena never needed more than the plan, which counts one chunk. */
  size_t cat[ZO_MEM_N_CATEGORIES];
  const size_t plan = zo_model_device_plan(head_cfg, HB, HT, &lo, cat);
  CHECK(m->arena.peak == plan && m->arena.capacity == plan);
  zo_model_free(m);
  free(p);
  return 0;
}

/* |a - b| <= 1e-6 max|b| over n elements. */
static bool close_rel(const char *what, const float *a, const float *b, size_t n) {
  double mx = 0.0, worst = 0.0;
  size_t wi = 0;
  for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs((double)b[i]));
  for (size_t i = 0; i < n; i++) {
    const double d = fabs((double)a[i] - (double)b[i]);
    if (d > worst) worst = d, wi = i;
  }
  if (worst <= 1e-6 * mx) return true;
  fprintf(stderr, "  %s: element %zu differs by %.3g, max magnitude %.3g\n", what, wi, worst, mx);
  return false;
}

static int test_head_chunks_match_one_chunk(void) {
  struct head_run one, chunked, unfused;
  CHECK(head_run(0, true, &one) == 0);
  CHECK(head_run(HCHUNK, true, &chunked) == 0);
  CHECK(head_run(HCHUNK, false, &unfused) == 0);
  struct zo_tensor_table t;
  struct zo_model_config cfg = arch->head;
  CHECK(zo_model_config_check(&cfg) == 0 && zo_model_build_table(&cfg, &t) == 0);
  int ret = 0;
  if (!close_rel("losses", chunked.losses, one.losses, HBT)) ret = 1;
  for (int i = 0; i < t.n_tensors; i++) {
    const struct zo_tensor_info *ti = &t.tensors[i];
    if (!close_rel(ti->name, chunked.grads + ti->offset, one.grads + ti->offset, ti->numel)) ret = 1;
  }
  if (!close_rel("last row's logits", chunked.last_logits, one.last_logits, 130)) ret = 1;
  /* The fused head backward is the same arithmetic as forward + backward. */
  if (memcmp(chunked.losses, unfused.losses, sizeof chunked.losses) != 0 ||
      memcmp(chunked.grads, unfused.grads, t.numel * sizeof(float)) != 0) {
    size_t i = 0;
    while (i < t.numel && memcmp(&chunked.grads[i], &unfused.grads[i], sizeof(float)) == 0) i++;
    fprintf(stderr, "  forward_train differs from forward + backward (losses %d, grads at %zu of %zu)\n",
            memcmp(chunked.losses, unfused.losses, sizeof chunked.losses) != 0, i, t.numel);
    ret = 1;
  }
  /* Nothing was ignored by accident: the ignored token has loss 0, the others not. */
  if (one.losses[4] != 0.0f || one.losses[5] == 0.0f) ret = 1;
  zo_tensor_table_free(&t);
  free(one.grads);
  free(chunked.grads);
  free(unfused.grads);
  return ret;
}

/* The planner counts one chunk of logits: the full-size model at 16 x 512. */
static int test_head_plan_shrinks(void) {
  struct zo_model_config cfg = arch->big;
  CHECK(zo_model_config_check(&cfg) == 0);
  const int rows = arch->big_rows;
  const struct zo_model_layout chunked = {.training = true};
  const struct zo_model_layout whole = {.training = true, .head_chunk_rows = 16 * 512};
  size_t a[ZO_MEM_N_CATEGORIES], b[ZO_MEM_N_CATEGORIES];
  const size_t ta = zo_model_device_plan(&cfg, 16, 512, &chunked, a);
  const size_t tb = zo_model_device_plan(&cfg, 16, 512, &whole, b);
  CHECK(zo_model_head_rows(&cfg, 16, 512, &chunked) == rows);
  const size_t saved = (size_t)(16 * 512 - rows) * (size_t)cfg.padded_vocab_size * sizeof(float);
  CHECK(tb - ta >= saved && tb - ta < saved + 4096);
  CHECK(b[ZO_MEM_ACTIVATIONS] - a[ZO_MEM_ACTIVATIONS] == tb - ta);
  printf("  logits: %d rows of %d per chunk, device plan %.2f GiB -> %.2f GiB\n", rows, 16 * 512,
         (double)tb / (1 << 30), (double)ta / (1 << 30));
  return 0;
}

/* ---- the LM head in vocabulary pieces ------------------------------------ */

/* An untied Llama whose head (1024 x 32) is 4.7 blocks: 6 pieces of 192
 * rows (the last 64). */
static const struct zo_model_config pieces_cfg = {
    .arch = ZO_ARCH_LLAMA, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 32, .intermediate_size = 40,
    .vocab_size = 1000, .max_seq_len = 16, .tie_embeddings = false};

/* One micro-batch of the pieced model (chunk rows as head_run), fused or
 * not; against float64: each row's loss, the head's weight gradient and the
 * final norm's (which reads the pieces' summed d(final output)) from the
 * final norm's input and output and the head's weights read back. */
static int pieces_run(int chunk_rows, bool fused, float *losses, float *grads) {
  struct zo_model_layout lo = {.training = true, .head_chunk_rows = chunk_rows};
  struct zo_model *m = zo_model_init_layout(&pieces_cfg, zo_backend_cpu(), HB, HT, &lo);
  CHECK(m);
  int rows = 0;
  CHECK(m->head_pieces == 6 && zo_model_head_pieces(&m->table, &rows) == 6 && rows == 192 &&
        m->head_piece_rows == 192);
  const size_t n = m->table.numel, C = 32, V = 1000, Vp = 1024;
  float *p = malloc(n * sizeof(float));
  CHECK(p);
  zo_model_init_params(m, p, 11);
  CHECK(zo_model_upload_params(m, p) == 0);
  int32_t in[HBT], tg[HBT];
  for (int i = 0; i < HBT; i++) {
    in[i] = (int32_t)((i * 37 + 11) % 1000);
    tg[i] = i == 4 ? -1 : (int32_t)((i * 397 + 5) % 1000); /* every piece, one ignored */
  }
  CHECK(head_pass(m, in, tg, fused) == 0);
  memcpy(losses, m->losses, HBT * sizeof(float));
  memcpy(grads, m->grads, n * sizeof(float));
  const struct zo_tensor_info *hw = &m->table.tensors[m->table.n_tensors - 1], *nw = hw - 1;
  CHECK(strcmp(hw->name, "lm_head.weight") == 0 && strcmp(nw->name, "model.norm.weight") == 0);
  /* x: the final norm's output, x = h rstd g, so h rstd = x / g */
  const float *W = p + hw->offset, *x = m->fin[0], *g = p + nw->offset;
  double *dx = calloc(HBT * C, sizeof *dx), *dW = calloc(Vp * C, sizeof *dW), *z = malloc(V * sizeof *z);
  CHECK(dx && dW && z);
  double worst_loss = 0.0;
  for (size_t i = 0; i < HBT; i++) {
    double mx = -1e300, sum = 0.0;
    for (size_t v = 0; v < V; v++) {
      double d = 0.0;
      for (size_t c = 0; c < C; c++) d += (double)x[i * C + c] * W[v * C + c];
      z[v] = d;
      mx = fmax(mx, d);
    }
    for (size_t v = 0; v < V; v++) sum += exp(z[v] - mx);
    const double lse = mx + log(sum);
    if (tg[i] < 0) {
      CHECK(losses[i] == 0.0f);
      continue;
    }
    worst_loss = fmax(worst_loss, fabs(losses[i] - (lse - z[tg[i]])) / (lse - z[tg[i]]));
    for (size_t v = 0; v < V; v++) {
      const double dz = (exp(z[v] - lse) - (v == (size_t)tg[i])) * (double)(1.0f / HBT); /* the float dloss the model took */
      for (size_t c = 0; c < C; c++) {
        dW[v * C + c] += dz * x[i * C + c];
        dx[i * C + c] += dz * W[v * C + c];
      }
    }
  }
  /* RMSNorm: x = h rstd g, so dg_c = sum_i dx_ic h_ic rstd_i = sum_i dx_ic x_ic / g_c. */
  double dg[32] = {0}, worst_w = 0.0, max_w = 0.0, worst_g = 0.0, max_g = 0.0;
  for (size_t i = 0; i < HBT; i++)
    for (size_t c = 0; c < C; c++) dg[c] += dx[i * C + c] * x[i * C + c] / g[c];
  for (size_t k = 0; k < Vp * C; k++) {
    max_w = fmax(max_w, fabs(dW[k]));
    worst_w = fmax(worst_w, fabs(grads[hw->offset + k] - dW[k]));
  }
  for (size_t c = 0; c < C; c++) {
    max_g = fmax(max_g, fabs(dg[c]));
    worst_g = fmax(worst_g, fabs(grads[nw->offset + c] - dg[c]));
  }
  printf("  pieces (chunk rows %d, %s): losses rel %.2g, head gradient %.2g of %.2g, final norm %.2g of %.2g\n",
         chunk_rows, fused ? "fused" : "forward + backward", worst_loss, worst_w, max_w, worst_g, max_g);
  CHECK(worst_loss < 1e-5 && worst_w < 1e-5 * max_w && worst_g < 1e-4 * max_g);
  /* The padded rows get no gradient. */
  for (size_t k = V * C; k < Vp * C; k++) CHECK(grads[hw->offset + k] == 0.0f);
  /* The arena's peak is the plan, which holds every row's logits. */
  size_t cat[ZO_MEM_N_CATEGORIES];
  CHECK(m->arena.peak == zo_model_device_plan(&pieces_cfg, HB, HT, &lo, cat));
  free(dx);
  free(dW);
  free(z);
  free(p);
  zo_model_free(m);
  return 0;
}

static int test_head_pieces_float64(void) {
  struct zo_tensor_table t;
  struct zo_model_config cfg = pieces_cfg;
  CHECK(zo_model_config_check(&cfg) == 0 && zo_model_build_table(&cfg, &t) == 0);
  const size_t n = t.numel;
  zo_tensor_table_free(&t);
  float l1[HBT], l2[HBT], l3[HBT];
  float *g1 = malloc(n * sizeof(float)), *g2 = malloc(n * sizeof(float)), *g3 = malloc(n * sizeof(float));
  CHECK(g1 && g2 && g3);
  CHECK(pieces_run(0, true, l1, g1) == 0);
  CHECK(pieces_run(HCHUNK, true, l2, g2) == 0);
  CHECK(pieces_run(HCHUNK, false, l3, g3) == 0);
  /* The fused head is forward + backward's arithmetic, bit for bit. */
  CHECK(memcmp(l2, l3, sizeof l2) == 0 && memcmp(g2, g3, n * sizeof(float)) == 0);
  free(g1);
  free(g2);
  free(g3);
  return 0;
}

/* A layout that streams the head carves neither its weights nor its
 * gradient on the device: the plan is that much smaller. */
static int test_head_pieces_streamed_plan(void) {
  struct zo_model_config cfg = pieces_cfg;
  struct zo_tensor_table t;
  CHECK(zo_model_config_check(&cfg) == 0 && zo_model_build_table(&cfg, &t) == 0);
  const size_t head = t.tensors[t.n_tensors - 1].numel;
  zo_tensor_table_free(&t);
  struct zo_model_layout kept = {.training = true, .param_slots = 2, .grad_slots = 1};
  struct zo_model_layout streamed = kept;
  streamed.head_stream = true;
  const size_t a = zo_model_device_plan(&pieces_cfg, HB, HT, &kept, NULL);
  const size_t b = zo_model_device_plan(&pieces_cfg, HB, HT, &streamed, NULL);
  const size_t want = head * (sizeof(float) + sizeof(float)), slack = 2 * zo_arena_round(1);
  printf("  device plan %zu -> %zu bytes (head %zu elements)\n", a, b, head);
  CHECK(a > b && a - b + slack >= want && a - b <= want + slack);
  /* Tied, or not larger than a block: one piece, nothing streamed. */
  cfg = pieces_cfg;
  cfg.vocab_size = 100;
  CHECK(zo_model_device_plan(&cfg, HB, HT, &kept, NULL) == zo_model_device_plan(&cfg, HB, HT, &streamed, NULL));
  return 0;
}

/* ---- activation checkpointing ------------------------------------------- */

#define N_STEPS 10

static const char *precision; /* NULL: fp32, else the --set enabling bf16 or fp16 */

static int load(struct zo_config *cfg, const char *const *extra, int n_extra) {
  static char train_set[400];
  snprintf(train_set, sizeof train_set, "data.train=%s", data_path);
  const char *base[] = {"data.seq_len=11", "data.format=u16", "data.shuffle=true",
                        "train_micro_batch_size_per_gpu=3", "gradient_accumulation_steps=2", "steps=10",
                        "optimizer.params.lr=0.01", "optimizer.params.weight_decay=0.1",
                        "gradient_clipping=0.5", "engine.device=cpu", "log.every=100",
                        "zero_optimization.offload_param.buffer_count=2", train_set, precision};
  return zo_etest_config_load_arch(cfg, &arch->run, base, ZO_ARRAY_LEN(base), extra, n_extra);
}

/* A run's name with the architecture and precision. */
static const char *run_name(const char *name) { return zo_etest_run_name(&arch->run, precision, name); }

static int train(const char *name, const char *const *extra, int n_extra, struct zo_etest_run *r) {
  return zo_etest_train(load, tmpdir, run_name(name), extra, n_extra, N_STEPS, NULL, r);
}

static struct zo_etest_run ref;

static int test_reference_without_checkpointing(void) {
  free(ref.params);
  CHECK(train("ref", NULL, 0, &ref) == 0);
  CHECK(ref.losses[N_STEPS - 1] < ref.losses[0]);
  CHECK(zo_etest_peaks_match(run_name("ref"), &ref));
  return 0;
}

/* The plan must hold the backend's per-stream op workspaces (CUDA carves
 * 32 MiB of cuBLASLt scratch per stream; the CPU backend none): a CPU backend
 * given a non-zero stream workspace (a test-only copy of its table) carves
 * them, the plan built with that backend equals the measured peaks, one
 * built without a backend would not (the check test-gpu-train makes would
 * fail on a GPU), and the run gives the reference's bits. */
static int test_stream_workspace_planned(void) {
  struct zo_backend ws_be = *zo_backend_cpu();
  ws_be.stream_workspace_bytes = (size_t)1 << 20;
  struct zo_etest_run r;
  CHECK(zo_etest_train_on(load, tmpdir, run_name("stream-ws"), NULL, 0, N_STEPS, NULL, &ws_be, &r) == 0);
  const char *name = run_name("stream-ws");
  int ret = zo_etest_same_run(name, &r, &ref, "the CPU backend's run", 0, N_STEPS);
  if (!zo_etest_peaks_match(name, &r)) ret = 1;
  struct zo_config cfg;
  CHECK(load(&cfg, NULL, 0) == 0);
  struct zo_etest_run no_be = r;
  CHECK(zo_plan_build(&cfg, &cfg.model.spec, NULL, &no_be.plan) == 0);
  zo_config_free(&cfg);
  const size_t ws = r.plan.bytes[ZO_TIER_DEVICE][ZO_MEM_WORKSPACE] - no_be.plan.bytes[ZO_TIER_DEVICE][ZO_MEM_WORKSPACE];
  printf("  %s: device plan %zu with the workspaces, %zu without (%zu bytes of stream workspace)\n", name,
         r.plan.total[ZO_TIER_DEVICE], no_be.plan.total[ZO_TIER_DEVICE], ws);
  if (ws != ZO_MODEL_STREAM_WORKSPACES * ws_be.stream_workspace_bytes) ret = 1;
  fprintf(stderr, "  (a plan without the backend must not match; expect one mismatch line)\n");
  if (zo_etest_peaks_match("plan without the backend", &no_be)) ret = 1;
  free(r.params);
  return ret;
}

/* A checkpointed run (the placement's options, then the checkpointing
 * ones) against the reference bit for bit; its plan against the placement's
 * alone. */
static int check_ckpt(const char *case_name, const char *const *placement, int n_placement,
                      const char *const *ckpt, int n_ckpt) {
  struct zo_etest_run r, base;
  const char *sets[ZO_ETEST_MAX_SETS];
  CHECK(n_placement + n_ckpt <= ZO_ETEST_MAX_SETS);
  int n_sets = 0;
  for (int i = 0; i < n_placement; i++) sets[n_sets++] = placement[i];
  for (int i = 0; i < n_ckpt; i++) sets[n_sets++] = ckpt[i];
  CHECK(train(case_name, sets, n_sets, &r) == 0);
  const char *name = run_name(case_name);
  int ret = zo_etest_same_run(name, &r, &ref, "without checkpointing", 0, N_STEPS);
  if (!zo_etest_peaks_match(name, &r)) ret = 1;
  /* Planned savings: device activations shrink; cpu_checkpointing puts the
   * kept inputs in the host pool. */
  struct zo_config cfg;
  CHECK(load(&cfg, placement, n_placement) == 0);
  struct zo_model_config mc = cfg.model.spec;
  CHECK(zo_plan_build(&cfg, &mc, zo_train_backend(&cfg, NULL), &base.plan) == 0);
  zo_config_free(&cfg);
  const size_t *d = r.plan.bytes[ZO_TIER_DEVICE], *bd = base.plan.bytes[ZO_TIER_DEVICE];
  const size_t *h = r.plan.bytes[ZO_TIER_HOST], *bh = base.plan.bytes[ZO_TIER_HOST];
  /* One checkpointed block saves nothing: the shared set is one block's. */
  const bool one = strstr(case_name, "one-block") != NULL;
  if (one ? d[ZO_MEM_ACTIVATIONS] > bd[ZO_MEM_ACTIVATIONS]
          : !(d[ZO_MEM_ACTIVATIONS] < bd[ZO_MEM_ACTIVATIONS]) || !(r.plan.total[0] < base.plan.total[0])) {
    fprintf(stderr, "  %s: device activations %zu not below %zu without checkpointing\n", name,
            d[ZO_MEM_ACTIVATIONS], bd[ZO_MEM_ACTIVATIONS]);
    ret = 1;
  }
  const bool host_ckpt = strstr(case_name, "cpu") != NULL;
  if (host_ckpt != (h[ZO_MEM_ACTIVATIONS] > bh[ZO_MEM_ACTIVATIONS])) {
    fprintf(stderr, "  %s: host activations %zu vs %zu without checkpointing\n", name,
            h[ZO_MEM_ACTIVATIONS], bh[ZO_MEM_ACTIVATIONS]);
    ret = 1;
  }
  printf("  %s: device %zu -> %zu bytes, host %zu -> %zu\n", name, base.plan.total[0], r.plan.total[0],
         base.plan.total[1], r.plan.total[1]);
  free(r.params);
  return ret;
}

#define CK_ON "activation_checkpointing.enabled=true"
#define CK_CPU "activation_checkpointing.cpu_checkpointing=true"
#define S3 "zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu", \
           "zero_optimization.offload_param.device=cpu"
#define S2 "zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu"

/* Placements (NULL, 0: all on the device). */
static const char *const s2[] = {S2}, *const s3[] = {S3};
static const char *const s3_one_slot[] = {S3, "zero_optimization.offload_param.buffer_count=1"};

static int test_ckpt_every_block_device(void) {
  const char *ck[] = {CK_ON};
  return check_ckpt("every-block", NULL, 0, ck, ZO_ARRAY_LEN(ck));
}

static int test_ckpt_two_blocks_device(void) {
  const char *ck[] = {CK_ON, "activation_checkpointing.number_checkpoints=2"};
  return check_ckpt("two-blocks", NULL, 0, ck, ZO_ARRAY_LEN(ck));
}

static int test_ckpt_cpu_every_block(void) {
  const char *ck[] = {CK_ON, CK_CPU};
  return check_ckpt("cpu-every-block", NULL, 0, ck, ZO_ARRAY_LEN(ck));
}

static int test_ckpt_cpu_one_block(void) {
  const char *ck[] = {CK_ON, CK_CPU, "activation_checkpointing.number_checkpoints=1"};
  return check_ckpt("cpu-one-block", NULL, 0, ck, ZO_ARRAY_LEN(ck));
}

static int test_ckpt_grads_on_host(void) {
  const char *ck[] = {CK_ON, "activation_checkpointing.number_checkpoints=2"};
  return check_ckpt("grads-host", s2, ZO_ARRAY_LEN(s2), ck, ZO_ARRAY_LEN(ck));
}

static int test_ckpt_params_in_slots(void) {
  const char *ck[] = {CK_ON};
  return check_ckpt("param-slots", s3, ZO_ARRAY_LEN(s3), ck, ZO_ARRAY_LEN(ck));
}

static int test_ckpt_cpu_params_in_slots(void) {
  const char *ck[] = {CK_ON, CK_CPU};
  return check_ckpt("cpu-param-slots", s3, ZO_ARRAY_LEN(s3), ck, ZO_ARRAY_LEN(ck));
}

static int test_ckpt_cpu_one_slot_two_blocks(void) {
  const char *ck[] = {CK_ON, CK_CPU, "activation_checkpointing.number_checkpoints=2"};
  return check_ckpt("cpu-one-slot", s3_one_slot, ZO_ARRAY_LEN(s3_one_slot), ck, ZO_ARRAY_LEN(ck));
}

static int test_ckpt_too_many_refused(void) {
  struct zo_config cfg;
  const char *s[] = {CK_ON, "activation_checkpointing.number_checkpoints=4"};
  const int err = load(&cfg, s, ZO_ARRAY_LEN(s));
  if (err == 0) zo_config_free(&cfg);
  CHECK(err == -EINVAL);
  CHECK(strstr(zo_last_error(), "number_checkpoints") != NULL);
  return 0;
}

int main(int argc, char **argv) {
  const bool delay = zo_etest_delay_mode();
  if (zo_test_mkdtemp(tmpdir, sizeof tmpdir, "memory")) return 1;
  snprintf(data_path, sizeof data_path, "%s/tokens.u16", tmpdir);
  if (zo_etest_write_tokens(data_path, 6000, "a stitch in time saves nine; 123 ", 200)) return 1;
  static const struct zo_test per_arch[] = {
      ZO_TEST(head_chunks_match_one_chunk),
      ZO_TEST(head_plan_shrinks),
      ZO_TEST(ckpt_too_many_refused),
  };
  /* Checkpointing is bit-identical to its absence in fp32, bf16 and fp16. */
  static const struct zo_test per_precision[] = {
      ZO_TEST(reference_without_checkpointing),
      ZO_TEST(stream_workspace_planned),
      ZO_TEST(ckpt_every_block_device),
      ZO_TEST(ckpt_two_blocks_device),
      ZO_TEST(ckpt_cpu_every_block),
      ZO_TEST(ckpt_cpu_one_block),
      ZO_TEST(ckpt_grads_on_host),
      ZO_TEST(ckpt_params_in_slots),
      ZO_TEST(ckpt_cpu_params_in_slots),
      ZO_TEST(ckpt_cpu_one_slot_two_blocks),
  };
  static const struct zo_test once[] = {
      ZO_TEST(head_pieces_float64),
      ZO_TEST(head_pieces_streamed_plan),
  };
  static const char *const precisions[] = {NULL, "bf16.enabled=true", "fp16.enabled=true"};
  struct zo_test_counts counts = {0, 0, 0};
  if (zo_etest_arch_selected("llama")) zo_test_counts_add(&counts, zo_test_run(once, ZO_ARRAY_LEN(once)));
  for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
    if (!zo_etest_arch_selected(archs[a].run.name)) continue;
    arch = &archs[a];
    precision = NULL;
    zo_etest_arch_print(&arch->run, NULL);
    zo_test_counts_add(&counts, zo_test_run(per_arch, ZO_ARRAY_LEN(per_arch)));
    for (int p = 0; p < 3; p++) {
      precision = precisions[p];
      zo_etest_arch_print(&arch->run, precision ? precision : "fp32");
      zo_test_counts_add(&counts, zo_test_run(per_precision, ZO_ARRAY_LEN(per_precision)));
    }
  }
  free(ref.params);
  return zo_etest_finish(tmpdir, counts, delay, argc, argv);
}
