/* The model driver by units (zo/model.h): a training pass driven by hand
 * through the unit entry points -- embedding, each block's forward, the
 * head's forward and backward, each block's backward, the embedding's
 * backward -- gives the losses and every gradient of today's passes
 * (zo_model_forward_train + zo_model_backward) bit for bit, for GPT-2 and a
 * Llama with grouped-query attention and an untied head, fp32 and bf16,
 * dropout 0.1 at every site, one block of two checkpointed, two
 * micro-batches accumulated. Three ways: over the default context, over a
 * second context whose tokens, losses, residual gradient and block inputs
 * are caller-provided buffers (a second arena), and (Llama, every block
 * checkpointed) in the layer-major order over two such contexts at once:
 * block l's forward for both micro-batches before block l + 1's, the
 * backward likewise. GPT-2's tied head is left out of the last: its
 * embedding's gradient sums the head's and the lookup's parts in another
 * order there (issue 49, piece 2). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo/arena.h"
#include "zo/model.h"
#include "zo_test.h"

#define CHECK(cond) ZO_REQUIRE(cond)

enum { B = 2, T = 8, V = 64, K = 2 };
static const uint64_t SEED = 4242;

static enum zo_dtype dtype;
static bool llama;

static struct zo_model_config config(void) {
  struct zo_model_config mc =
      llama ? (struct zo_model_config){.arch = ZO_ARCH_LLAMA, .n_layer = 2, .n_head = 4, .n_kv_head = 2,
                                       .n_embd = 16, .intermediate_size = 24, .vocab_size = V, .max_seq_len = T}
            : (struct zo_model_config){.arch = ZO_ARCH_GPT2, .n_layer = 2, .n_head = 2, .n_embd = 16,
                                       .vocab_size = V, .max_seq_len = T};
  mc.embd_pdrop = mc.attn_pdrop = mc.resid_pdrop = 0.1f;
  return mc;
}

/* What a pass leaves: each micro-batch's losses and the accumulated gradient. */
struct result {
  float losses[K][B * T];
  float *grads; /* (table.numel) */
};

struct fixture {
  struct zo_model *m;
  float *params;
  int32_t in[K][B * T], tg[K][B * T];
};

static int fixture_init(struct fixture *f, int ckpt_blocks) {
  struct zo_model_config mc = config();
  const struct zo_model_layout lo = {.dtype = dtype, .training = true, .ckpt_blocks = ckpt_blocks};
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
  return 0;
}

static void fixture_free(struct fixture *f) {
  zo_model_free(f->m);
  free(f->params);
}

/* Fresh parameters and zeroed gradients, so every pass starts alike. */
static int start(struct fixture *f) {
  CHECK(zo_model_upload_params(f->m, f->params) == 0);
  zo_model_zero_grad(f->m, NULL);
  return 0;
}

static float dloss(void) { return 1.0f / (float)(B * T * K); }

static int finish(struct fixture *f, struct result *r) {
  zo_backend_t be = f->m->backend;
  r->grads = malloc(f->m->table.numel * sizeof(float));
  CHECK(r->grads);
  CHECK(be->memcpy_async(r->grads, f->m->grads, f->m->table.numel * sizeof(float), ZO_COPY_D2H, NULL) == 0);
  return be->stream_synchronize(NULL) == 0 ? 0 : 1;
}

static int save_losses(struct fixture *f, const float *dev, float *out) {
  zo_backend_t be = f->m->backend;
  CHECK(be->memcpy_async(out, dev, B * T * sizeof(float), ZO_COPY_D2H, NULL) == 0);
  return be->stream_synchronize(NULL) == 0 ? 0 : 1;
}

/* Today's pass: forward_train then backward, micro-batch by micro-batch. */
static int today(struct fixture *f, struct result *r) {
  CHECK(start(f) == 0);
  for (int k = 0; k < K; k++) {
    zo_model_set_dropout(f->m, SEED, 10 + (uint64_t)k);
    zo_model_forward_train(f->m, f->in[k], f->tg[k], B, T, dloss(), NULL);
    CHECK(save_losses(f, f->m->losses, r->losses[k]) == 0);
    zo_model_backward(f->m, B, T, dloss(), NULL);
  }
  return finish(f, r);
}

/* One micro-batch's units in today's order over context c. */
static void units_one(struct zo_model *m, struct zo_model_ctx *c, const int32_t *in, const int32_t *tg) {
  const int L = m->cfg.n_layer;
  zo_model_unit_embed_forward(m, c, in, tg, B, T, true, NULL);
  for (int l = 0; l < L; l++) zo_model_unit_block_forward(m, c, l, NULL);
  zo_model_unit_head_forward(m, c, NULL);
  zo_model_unit_head_backward(m, c, dloss(), NULL);
  for (int l = L - 1; l >= 0; l--) zo_model_unit_block_backward(m, c, l, NULL);
  zo_model_unit_embed_backward(m, c, NULL);
}

static int by_units_default(struct fixture *f, struct result *r) {
  CHECK(start(f) == 0);
  struct zo_model_ctx *c = zo_model_default_ctx(f->m);
  for (int k = 0; k < K; k++) {
    c->pass = 10 + (uint64_t)k;
    units_one(f->m, c, f->in[k], f->tg[k]);
    CHECK(save_losses(f, c->losses, r->losses[k]) == 0);
  }
  return finish(f, r);
}

/* n contexts over buffers of their own, carved from arena a. */
static int own_contexts(struct zo_model *m, struct zo_arena *a, struct zo_model_ctx *cs, int n) {
  const size_t nbt = (size_t)B * T, bin = zo_model_ctx_block_inputs_bytes(m);
  const size_t per = zo_arena_round(2 * nbt * sizeof(int32_t)) + zo_arena_round(nbt * sizeof(float)) +
                     zo_arena_round(nbt * (size_t)m->cfg.n_embd * m->esize) + zo_arena_round(bin);
  CHECK(zo_arena_init(a, m->backend, (size_t)n * per, "test contexts") == 0);
  for (int k = 0; k < n; k++) {
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
    zo_model_ctx_place_block_inputs(m, c, blocks);
    /* None of the model's own buffers is left in the context. */
    struct zo_model_ctx *d = zo_model_default_ctx(m);
    CHECK(c->inputs != d->inputs && c->losses != d->losses && c->dresidual != d->dresidual);
    for (int l = 0; l <= m->cfg.n_layer; l++) CHECK(c->block_in[l] != d->block_in[l]);
  }
  return 0;
}

static int by_units_own(struct fixture *f, struct result *r) {
  CHECK(start(f) == 0);
  struct zo_arena a = {0};
  struct zo_model_ctx c = {0};
  CHECK(own_contexts(f->m, &a, &c, 1) == 0);
  for (int k = 0; k < K; k++) {
    c.pass = 10 + (uint64_t)k;
    units_one(f->m, &c, f->in[k], f->tg[k]);
    CHECK(save_losses(f, c.losses, r->losses[k]) == 0);
  }
  const int ret = finish(f, r);
  zo_model_ctx_free(&c);
  zo_arena_free(&a);
  return ret;
}

/* Both micro-batches unit by unit: block l of each before block l + 1. */
static int layer_major(struct fixture *f, struct result *r) {
  struct zo_model *m = f->m;
  const int L = m->cfg.n_layer;
  CHECK(m->layout.ckpt_blocks == L);
  CHECK(start(f) == 0);
  struct zo_arena a = {0};
  struct zo_model_ctx cs[K] = {0};
  CHECK(own_contexts(m, &a, cs, K) == 0);
  for (int k = 0; k < K; k++) {
    cs[k].pass = 10 + (uint64_t)k;
    zo_model_unit_embed_forward(m, &cs[k], f->in[k], f->tg[k], B, T, true, NULL);
  }
  for (int l = 0; l < L; l++)
    for (int k = 0; k < K; k++) zo_model_unit_block_forward(m, &cs[k], l, NULL);
  for (int k = 0; k < K; k++) {
    zo_model_unit_head_forward(m, &cs[k], NULL);
    zo_model_unit_head_backward(m, &cs[k], dloss(), NULL);
  }
  for (int l = L - 1; l >= 0; l--)
    for (int k = 0; k < K; k++) zo_model_unit_block_backward(m, &cs[k], l, NULL);
  for (int k = 0; k < K; k++) zo_model_unit_embed_backward(m, &cs[k], NULL);
  for (int k = 0; k < K; k++) CHECK(save_losses(f, cs[k].losses, r->losses[k]) == 0);
  const int ret = finish(f, r);
  for (int k = 0; k < K; k++) zo_model_ctx_free(&cs[k]);
  zo_arena_free(&a);
  return ret;
}

/* got against want bit for bit, naming the first difference. */
static int same(const char *what, const struct fixture *f, const struct result *got, const struct result *want) {
  const size_t n = f->m->table.numel;
  for (int k = 0; k < K; k++)
    for (int i = 0; i < B * T; i++)
      if (memcmp(&got->losses[k][i], &want->losses[k][i], sizeof(float)) != 0) {
        fprintf(stderr, "  %s: micro-batch %d position %d loss %.9g, today's %.9g\n", what, k, i,
                got->losses[k][i], want->losses[k][i]);
        return 1;
      }
  for (size_t i = 0; i < n; i++)
    if (memcmp(&got->grads[i], &want->grads[i], sizeof(float)) != 0) {
      fprintf(stderr, "  %s: gradient element %zu = %.9g, today's %.9g\n", what, i, got->grads[i], want->grads[i]);
      return 1;
    }
  return 0;
}

/* Runs today's pass and `other` on a fixture with ckpt_blocks checkpointed
 * blocks and compares them; also that the gradient is not all zero and the
 * dropout masks act (another pass number changes the losses). */
static int compare(const char *what, int ckpt_blocks, int (*other)(struct fixture *, struct result *)) {
  struct fixture f;
  struct result want = {0}, got = {0}, moved = {0};
  CHECK(fixture_init(&f, ckpt_blocks) == 0);
  CHECK(today(&f, &want) == 0);
  CHECK(other(&f, &got) == 0);
  int ret = same(what, &f, &got, &want);
  size_t nonzero = 0;
  for (size_t i = 0; i < f.m->table.numel; i++) nonzero += want.grads[i] != 0.0f;
  if (nonzero < f.m->table.numel / 2) {
    fprintf(stderr, "  %s: only %zu of %zu gradient elements non-zero\n", what, nonzero, f.m->table.numel);
    ret = 1;
  }
  /* The default context's pass moved: the masks differ, so the losses do. */
  CHECK(start(&f) == 0);
  struct zo_model_ctx *c = zo_model_default_ctx(f.m);
  c->pass = 99;
  units_one(f.m, c, f.in[0], f.tg[0]);
  CHECK(save_losses(&f, c->losses, moved.losses[0]) == 0);
  if (memcmp(moved.losses[0], want.losses[0], sizeof moved.losses[0]) == 0) {
    fprintf(stderr, "  %s: another dropout pass gave the same losses\n", what);
    ret = 1;
  }
  free(want.grads);
  free(got.grads);
  fixture_free(&f);
  return ret;
}

static int test_units_default_context(void) { return compare("units, default context", 1, by_units_default); }
static int test_units_own_context(void) { return compare("units, own context", 1, by_units_own); }
static int test_units_layer_major(void) {
  if (!llama) { /* measured: wte's elements differ in the last bits, fp32 and bf16 */
    printf("  skipped: by hand GPT-2's tied embedding sums its gradient's parts in another order; "
           "zo_model_train_layer_major keeps today's (test-engine-layer-major)\n");
    return ZO_TEST_SKIP;
  }
  return compare("units, layer-major over two contexts", 2, layer_major);
}

int main(void) {
  static const struct zo_test tests[] = {
      ZO_TEST(units_default_context),
      ZO_TEST(units_own_context),
      ZO_TEST(units_layer_major),
  };
  struct zo_test_counts counts = {0, 0, 0};
  for (int a = 0; a < 2; a++)
    for (int d = 0; d < 2; d++) {
      llama = a == 1;
      dtype = d ? ZO_BF16 : ZO_F32;
      printf("%s, %s\n", llama ? "llama" : "gpt2", zo_dtype_name(dtype));
      zo_test_counts_add(&counts, zo_test_run(tests, ZO_ARRAY_LEN(tests)));
    }
  return zo_test_report(counts);
}
