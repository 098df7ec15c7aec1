/* The layer-major order with everything on the device (issue 49, piece 2;
 * zo_model_train_layer_major): for K = 1, 2, 4 micro-batches over K
 * contexts, every block checkpointed, dropout 0.1 at every site, its losses
 * and its accumulated gradient equal today's micro-batch-major order bit for
 * bit, for GPT-2 (tied head: the embedding's gradient has the head's and the
 * lookup's parts) and a Llama (untied head, grouped-query attention), in
 * fp32, bf16 and fp16 at two loss scales: one whose gradient is finite and
 * one that overflows, where the skip decision (a non-finite gradient norm,
 * taken by the scheduler, engine/sched/step.c's sched_norm_fn) is the same.
 * Today's order is the scheduler's all-on-device accumulation
 * (engine/sched/hooks.c) at the model level: micro-batch k's whole pass
 * (zo_model_forward_train + zo_model_backward) into zeroed gradients, the
 * first micro-batch's into the accumulator, the others' into the model's
 * gradient buffer, added whole into the accumulator after its pass; that
 * this reference is the scheduler's bits is checked too (zo_sched, everything
 * on the device, K = 1, 2, 4, fp32, bf16, fp16 at both scales). Also the
 * refusals by name of what the order does not run. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo/arena.h"
#include "zo/model.h"
#include "zo/plan.h"
#include "zo/sched.h"
#include "zo_engine_test.h"

enum { B = 2, T = 8, V = 64, L = 3, KMAX = 4 };
static const uint64_t SEED = 4242;

static struct zo_model_config config(bool llama) {
  struct zo_model_config mc =
      llama ? (struct zo_model_config){.arch = ZO_ARCH_LLAMA, .n_layer = L, .n_head = 4, .n_kv_head = 2,
                                       .n_embd = 16, .intermediate_size = 24, .vocab_size = V, .max_seq_len = T}
            : (struct zo_model_config){.arch = ZO_ARCH_GPT2, .n_layer = L, .n_head = 2, .n_embd = 16,
                                       .vocab_size = V, .max_seq_len = T};
  mc.embd_pdrop = mc.attn_pdrop = mc.resid_pdrop = 0.1f;
  return mc;
}

/* What a step leaves: each micro-batch's losses and the accumulated gradient. */
struct result {
  float losses[KMAX][B * T];
  float *grads; /* (table.numel) */
};

struct fixture {
  struct zo_model *m;
  int K;
  float *params;
  int32_t in[KMAX][B * T], tg[KMAX][B * T];
};

static int fixture_init(struct fixture *f, bool llama, enum zo_dtype dtype, int K) {
  struct zo_model_config mc = config(llama);
  const struct zo_model_layout lo = {.dtype = dtype, .training = true, .ckpt_blocks = L, .grad_accum = K > 1};
  f->K = K;
  f->m = zo_model_init_layout(&mc, zo_backend_cpu(), B, T, &lo);
  CHECK(f->m);
  f->params = malloc(f->m->table.numel * sizeof(float));
  CHECK(f->params);
  zo_model_init_params(f->m, f->params, 5);
  uint64_t x = 0x9e3779b97f4a7c15u;
  for (int k = 0; k < K; k++)
    for (int i = 0; i < B * T; i++) {
      x = x * 6364136223846793005u + 1442695040888963407u;
      f->in[k][i] = (int32_t)((x >> 33) % V);
      f->tg[k][i] = i % 7 == 3 ? -1 : (int32_t)((x >> 17) % V); /* some positions without a loss */
    }
  CHECK(zo_model_upload_params(f->m, f->params) == 0);
  return 0;
}

static void fixture_free(struct fixture *f) {
  zo_model_free(f->m);
  free(f->params);
}

static uint64_t pass_base = 10;
static uint64_t pass_of(int k) { return pass_base + (uint64_t)k; }

static float *acc_of(struct fixture *f) { return f->K > 1 ? f->m->grads_acc : f->m->grads; }

static int fetch(struct fixture *f, void *dst, const void *src, size_t nbytes) {
  zo_backend_t be = f->m->backend;
  CHECK(be->memcpy_async(dst, src, nbytes, ZO_COPY_D2H, NULL) == 0);
  return be->stream_synchronize(NULL) == 0 ? 0 : 1;
}

static int finish(struct fixture *f, struct result *r) {
  r->grads = malloc(f->m->table.numel * sizeof(float));
  CHECK(r->grads);
  return fetch(f, r->grads, acc_of(f), f->m->table.numel * sizeof(float));
}

/* Every gradient view at buffer g (table.numel), as the scheduler's hooks bind them. */
static void bind_all(struct zo_model *m, float *g) {
  zo_model_bind_resident_grads(m, g, g + (m->table.numel - m->tail_numel));
  for (int l = 0; l < m->cfg.n_layer; l++) zo_model_bind_block(m, l, NULL, g + m->table.layer_offset[l]);
}

/* Today's order (engine/sched/hooks.c, everything on the device). */
static int today(struct fixture *f, float dloss, struct result *r) {
  struct zo_model *m = f->m;
  zo_backend_t be = m->backend;
  const size_t n = m->table.numel;
  for (int k = 0; k < f->K; k++) {
    float *target = k == 0 ? acc_of(f) : m->grads;
    CHECK(be->memset_async(target, 0, n * sizeof(float), NULL) == 0);
    bind_all(m, target);
    zo_model_set_dropout(m, SEED, pass_of(k));
    zo_model_forward_train(m, f->in[k], f->tg[k], B, T, dloss, NULL);
    CHECK(fetch(f, r->losses[k], m->losses, B * T * sizeof(float)) == 0);
    zo_model_backward(m, B, T, dloss, NULL);
    if (k > 0) be->residual_forward(acc_of(f), acc_of(f), m->grads, n, ZO_F32, NULL);
  }
  bind_all(m, m->grads);
  return finish(f, r);
}

/* K contexts over buffers of their own, carved from arena a. */
static int own_contexts(struct zo_model *m, struct zo_arena *a, struct zo_model_ctx *cs, int K, size_t extra) {
  const size_t nbt = (size_t)B * T, bin = zo_model_ctx_block_inputs_bytes(m);
  const size_t per = zo_arena_round(2 * nbt * sizeof(int32_t)) + zo_arena_round(nbt * sizeof(float)) +
                     zo_arena_round(nbt * (size_t)m->cfg.n_embd * m->esize) + zo_arena_round(bin);
  CHECK(zo_arena_init(a, m->backend, (size_t)K * per + zo_arena_round(extra) + 64, "test contexts") == 0);
  for (int k = 0; k < K; k++) {
    struct zo_model_ctx *c = &cs[k];
    void *tok = NULL, *losses = NULL, *blocks = NULL;
    CHECK(zo_model_ctx_init(m, c) == 0);
    CHECK(zo_arena_alloc(a, 2 * nbt * sizeof(int32_t), "tokens", &tok) == 0);
    CHECK(zo_arena_alloc(a, nbt * sizeof(float), "losses", &losses) == 0);
    CHECK(zo_arena_alloc(a, nbt * (size_t)m->cfg.n_embd * m->esize, "residual gradient", &c->dresidual) == 0);
    CHECK(zo_arena_alloc(a, bin, "block inputs", &blocks) == 0);
    c->losses = losses;
    c->inputs = tok;
    c->targets = (int32_t *)tok + nbt;
    c->pass = pass_of(k);
    zo_model_ctx_place_block_inputs(m, c, blocks);
  }
  return 0;
}

static int layer_major(struct fixture *f, float dloss, struct result *r) {
  struct zo_model *m = f->m;
  const int K = f->K;
  const size_t hg = zo_model_layer_major_head_grads_numel(m, K);
  struct zo_arena a = {0};
  struct zo_model_ctx cs[KMAX] = {0};
  void *head_grads = NULL;
  CHECK(own_contexts(m, &a, cs, K, hg * sizeof(float)) == 0);
  if (hg) CHECK(zo_arena_alloc(&a, hg * sizeof(float), "head ranges", &head_grads) == 0);
  /* Poisoned: the order must overwrite the accumulator and its scratch. */
  zo_backend_t be = m->backend;
  CHECK(be->memset_async(acc_of(f), 0x7f, m->table.numel * sizeof(float), NULL) == 0);
  CHECK(be->memset_async(m->grads, 0x7f, m->table.numel * sizeof(float), NULL) == 0);
  if (hg) CHECK(be->memset_async(head_grads, 0x7f, hg * sizeof(float), NULL) == 0);
  const int32_t *in[KMAX], *tg[KMAX];
  for (int k = 0; k < K; k++) {
    in[k] = f->in[k];
    tg[k] = f->tg[k];
  }
  zo_model_set_dropout(m, SEED, 0);
  CHECK(zo_model_train_layer_major(m, cs, K, in, tg, B, T, dloss, head_grads, NULL) == 0);
  for (int k = 0; k < K; k++) CHECK(fetch(f, r->losses[k], cs[k].losses, B * T * sizeof(float)) == 0);
  const int ret = finish(f, r);
  for (int k = 0; k < K; k++) zo_model_ctx_free(&cs[k]);
  zo_arena_free(&a);
  return ret;
}

/* got against want bit for bit, naming the first difference. */
static int same(const char *what, const struct fixture *f, const struct result *got, const struct result *want) {
  for (int k = 0; k < f->K; k++)
    for (int i = 0; i < B * T; i++)
      if (memcmp(&got->losses[k][i], &want->losses[k][i], sizeof(float)) != 0) {
        fprintf(stderr, "  %s: micro-batch %d position %d loss %.9g, today's %.9g\n", what, k, i,
                got->losses[k][i], want->losses[k][i]);
        return 1;
      }
  for (size_t i = 0; i < f->m->table.numel; i++)
    if (memcmp(&got->grads[i], &want->grads[i], sizeof(float)) != 0) {
      fprintf(stderr, "  %s: gradient element %zu = %.9g, today's %.9g\n", what, i, got->grads[i], want->grads[i]);
      return 1;
    }
  return 0;
}

/* The scheduler's skip decision: the gradient's norm is not finite. */
static bool skips(const struct fixture *f, const struct result *r) {
  double sumsq = 0.0;
  for (size_t i = 0; i < f->m->table.numel; i++) sumsq += (double)r->grads[i] * r->grads[i];
  return !isfinite(sqrt(sumsq));
}

/* One case: today's order and the layer-major order at loss scale `scale`;
 * want_skip: whether the step must be skipped (an fp16 overflow). */
static int one_case(bool llama, enum zo_dtype dtype, int K, double scale, bool want_skip) {
  char what[96];
  snprintf(what, sizeof what, "%s %s K=%d scale %g", llama ? "llama" : "gpt2", zo_dtype_name(dtype), K, scale);
  struct fixture f;
  struct result want = {0}, got = {0};
  CHECK(fixture_init(&f, llama, dtype, K) == 0);
  const float dloss = (float)(scale / (double)(B * T * K));
  CHECK(today(&f, dloss, &want) == 0);
  CHECK(layer_major(&f, dloss, &got) == 0);
  int ret = same(what, &f, &got, &want);
  if (skips(&f, &want) != want_skip || skips(&f, &got) != want_skip) {
    fprintf(stderr, "  %s: skip decision today %d, layer-major %d, wanted %d\n", what, skips(&f, &want),
            skips(&f, &got), want_skip);
    ret = 1;
  }
  /* The dropout masks act: other passes change the losses. */
  struct result moved = {0};
  pass_base = 50;
  CHECK(today(&f, dloss, &moved) == 0);
  pass_base = 10;
  if (memcmp(moved.losses, want.losses, sizeof want.losses) == 0) {
    fprintf(stderr, "  %s: other dropout passes gave the same losses\n", what);
    ret = 1;
  }
  free(moved.grads);
  size_t nonzero = 0;
  for (size_t i = 0; i < f.m->table.numel; i++) nonzero += want.grads[i] != 0.0f;
  if (nonzero < f.m->table.numel / 2) {
    fprintf(stderr, "  %s: only %zu of %zu gradient elements non-zero\n", what, nonzero, f.m->table.numel);
    ret = 1;
  }
  free(want.grads);
  free(got.grads);
  fixture_free(&f);
  return ret;
}

static int all_k(bool llama, enum zo_dtype dtype, double scale, bool want_skip) {
  int ret = 0;
  for (int K = 1; K <= KMAX; K *= 2) ret |= one_case(llama, dtype, K, scale, want_skip);
  return ret;
}

static int test_gpt2_f32(void) { return all_k(false, ZO_F32, 1.0, false); }
static int test_gpt2_bf16(void) { return all_k(false, ZO_BF16, 1.0, false); }
static int test_gpt2_f16_scaled(void) { return all_k(false, ZO_F16, 1024.0, false); }
static int test_gpt2_f16_overflow(void) { return all_k(false, ZO_F16, 0x1p40, true); }
static int test_llama_f32(void) { return all_k(true, ZO_F32, 1.0, false); }
static int test_llama_bf16(void) { return all_k(true, ZO_BF16, 1.0, false); }
static int test_llama_f16_scaled(void) { return all_k(true, ZO_F16, 1024.0, false); }
static int test_llama_f16_overflow(void) { return all_k(true, ZO_F16, 0x1p40, true); }

/* The reference is today's order: the scheduler itself, everything on the
 * device, accumulates the same bits as today() for the same micro-batches
 * and dropout passes (its gradient read before the optimizer's step). */
static int sched_case(bool llama, enum zo_dtype dtype, int K, double scale) {
  char gas[64];
  snprintf(gas, sizeof gas, "gradient_accumulation_steps=%d", K);
  const char *sets[] = {llama ? "model.arch=llama" : "model.arch=gpt2", "model.n_layer=3",
                        llama ? "model.n_head=4" : "model.n_head=2", llama ? "model.num_key_value_heads=2" : NULL,
                        "model.n_embd=16", llama ? "model.intermediate_size=24" : NULL, "model.vocab_size=64",
                        "model.max_seq_len=8", llama ? "model.tie_word_embeddings=false" : NULL,
                        "train_micro_batch_size_per_gpu=2", "data.seq_len=8", gas, "engine.device=cpu",
                        "activation_checkpointing.enabled=true", dtype == ZO_BF16 ? "bf16.enabled=true" : NULL,
                        dtype == ZO_F16 ? "fp16.enabled=true" : NULL};
  struct zo_config cfg;
  CHECK(zo_etest_config_load(&cfg, sets, (int)ZO_ARRAY_LEN(sets), NULL, 0) == 0);
  struct zo_plan plan;
  CHECK(zo_plan_build(&cfg, &cfg.model.spec, zo_backend_cpu(), &plan) == 0);
  struct zo_sched_config sc = {.model = cfg.model.spec, .B = cfg.micro_batch, .T = cfg.data.seq_len,
                               .placement = plan.placement, .backend = zo_backend_cpu()};
  sc.model.embd_pdrop = sc.model.attn_pdrop = sc.model.resid_pdrop = 0.1f; /* model.dropout, as engine/config/setup.c gives it */
  CHECK(zo_model_config_check(&sc.model) == 0);
  struct zo_sched *s = zo_sched_init(&sc);
  CHECK(s);
  struct zo_model *sm = zo_sched_model(s);
  struct fixture f;
  struct result want = {0};
  CHECK(fixture_init(&f, llama, dtype, K) == 0);
  CHECK(sm->table.numel == f.m->table.numel && sm->layout.ckpt_blocks == L && sm->B == B && sm->T == T);
  CHECK(zo_sched_set_state(s, f.params, NULL, NULL) == 0);
  zo_sched_set_loss_scale(s, scale);
  for (int k = 0; k < K; k++) {
    int32_t *in, *tg;
    zo_sched_batch(s, &in, &tg);
    memcpy(in, f.in[k], sizeof f.in[k]);
    memcpy(tg, f.tg[k], sizeof f.tg[k]);
    zo_model_set_dropout(sm, SEED, pass_of(k));
    zo_sched_micro_batch(s, k);
  }
  CHECK(zo_sched_synchronize(s) == 0);
  float *got = malloc(sm->table.numel * sizeof(float));
  CHECK(got);
  zo_backend_t be = sm->backend;
  CHECK(be->memcpy_async(got, K > 1 ? sm->grads_acc : sm->grads, sm->table.numel * sizeof(float), ZO_COPY_D2H,
                         NULL) == 0 && be->stream_synchronize(NULL) == 0);
  CHECK(today(&f, (float)(scale / (double)(B * T * K)), &want) == 0);
  int ret = 0;
  for (size_t i = 0; i < f.m->table.numel && !ret; i++)
    if (memcmp(&got[i], &want.grads[i], sizeof(float)) != 0) {
      fprintf(stderr, "  %s %s K=%d scale %g: the scheduler's gradient element %zu = %.9g, today() %.9g\n",
              llama ? "llama" : "gpt2", zo_dtype_name(dtype), K, scale, i, got[i], want.grads[i]);
      ret = 1;
    }
  free(got);
  free(want.grads);
  fixture_free(&f);
  zo_sched_free(s);
  zo_config_free(&cfg);
  return ret;
}

static int test_today_is_the_scheduler(void) {
  int ret = 0;
  for (int a = 0; a < 2; a++)
    for (int d = 0; d < 4; d++)
      for (int K = 1; K <= KMAX; K *= 2) {
        const enum zo_dtype dt = d == 0 ? ZO_F32 : d == 1 ? ZO_BF16 : ZO_F16;
        ret |= sched_case(a == 1, dt, K, d == 2 ? 1024.0 : d == 3 ? 0x1p40 : 1.0);
      }
  return ret;
}

/* What the order does not run is refused by name, with nothing queued. */
static int refused(struct zo_model_config mc, struct zo_model_layout lo, int K, const char *needle) {
  struct zo_model *m = zo_model_init_layout(&mc, zo_backend_cpu(), B, T, &lo);
  CHECK(m);
  struct zo_model_ctx cs[KMAX] = {0};
  for (int k = 0; k < K; k++) CHECK(zo_model_ctx_init(m, &cs[k]) == 0);
  const int32_t tok[B * T] = {0}, *in[KMAX] = {tok, tok, tok, tok};
  const int err = zo_model_train_layer_major(m, cs, K, in, in, B, T, 1.0f, NULL, NULL);
  int ret = 0;
  if (err >= 0 || !strstr(zo_last_error(), needle)) {
    fprintf(stderr, "  refusal: returned %d, message \"%s\", wanted one naming \"%s\"\n", err, zo_last_error(),
            needle);
    ret = 1;
  }
  for (int k = 0; k < K; k++) zo_model_ctx_free(&cs[k]);
  zo_model_free(m);
  return ret;
}

static int test_refusals(void) {
  const struct zo_model_layout ok = {.training = true, .ckpt_blocks = L, .grad_accum = true};
  struct zo_model_layout lo = ok;
  int ret = 0;
  lo.ckpt_blocks = 1;
  ret |= refused(config(true), lo, 2, "layout.ckpt_blocks = 1, valid: 3");
  lo = ok;
  lo.grad_accum = false;
  ret |= refused(config(true), lo, 2, "layout.grad_accum");
  lo = ok;
  lo.ckpt_on_host = true;
  ret |= refused(config(true), lo, 2, "ckpt_on_host");
  lo = ok;
  lo.frozen = true;
  ret |= refused(config(true), lo, 2, "frozen base");
  ret |= refused(config(false), ok, 2, "head_grads"); /* the tied head's scratch missing */
  ret |= refused(config(true), ok, 2, "share their block inputs"); /* two contexts over the model's own */
  return ret;
}

int main(void) {
  static const struct zo_test tests[] = {
      ZO_TEST(gpt2_f32),         ZO_TEST(gpt2_bf16),         ZO_TEST(gpt2_f16_scaled), ZO_TEST(gpt2_f16_overflow),
      ZO_TEST(llama_f32),        ZO_TEST(llama_bf16),        ZO_TEST(llama_f16_scaled),
      ZO_TEST(llama_f16_overflow), ZO_TEST(today_is_the_scheduler), ZO_TEST(refusals),
  };
  return ZO_TEST_MAIN(tests);
}
