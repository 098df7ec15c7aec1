/* GPT-2: parameter table, device buffers carved from one arena, forward,
 * backward and loss over zo_backend ops. Parameters are block-major so a
 * transformer block is one contiguous range; gradients share the table.
 * Does not own optimizer state or data, and never allocates after init.
 * Backward keeps one residual-gradient buffer: layernorm_backward accumulates
 * into it, which is exactly the residual connection's gradient. The LM head
 * runs in row chunks (one chunk of logits exists at a time); checkpointed
 * blocks are recomputed with the forward's own code (block_forward).
 * Every carve is sized in the working dtype's element size (e) or fp32 (f),
 * by kind: working parameters and activations e, gradients, statistics,
 * losses, master weights and m, v f. */
#include "zo/gpt2.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int zo_gpt2_config_check(struct zo_gpt2_config *cfg) {
  if (cfg->n_layer < 1 || cfg->n_layer > 1024)
    return zo_error(-EINVAL, "model.n_layer = %d: must be in [1, 1024]", cfg->n_layer);
  if (cfg->n_head < 1)
    return zo_error(-EINVAL, "model.n_head = %d: must be >= 1", cfg->n_head);
  if (cfg->n_embd < 1 || cfg->n_embd % cfg->n_head != 0)
    return zo_error(-EINVAL, "model.n_embd = %d: must be a positive multiple of model.n_head = %d",
                    cfg->n_embd, cfg->n_head);
  if (cfg->vocab_size < 2 || cfg->vocab_size > (1 << 30))
    return zo_error(-EINVAL, "model.vocab_size = %d: must be in [2, 2^30]", cfg->vocab_size);
  if (cfg->max_seq_len < 1 || cfg->max_seq_len > (1 << 20))
    return zo_error(-EINVAL, "model.max_seq_len = %d: must be in [1, 2^20]", cfg->max_seq_len);
  cfg->padded_vocab_size = (cfg->vocab_size + 63) / 64 * 64;
  return 0;
}

static void table_add(struct zo_tensor_table *t, size_t *offset, const char *name, int layer,
                      int rows, int cols) {
  struct zo_tensor_info *ti = &t->tensors[t->n_tensors++];
  snprintf(ti->name, sizeof ti->name, "%s", name);
  ti->offset = *offset;
  ti->ndim = cols > 0 ? 2 : 1;
  ti->shape[0] = rows;
  ti->shape[1] = cols > 0 ? cols : 0;
  ti->numel = (size_t)rows * (size_t)(cols > 0 ? cols : 1);
  ti->layer = layer;
  ti->decay = ti->ndim >= 2;
  *offset += ti->numel;
}

int zo_gpt2_build_table(const struct zo_gpt2_config *cfg, struct zo_tensor_table *t) {
  const int L = cfg->n_layer, C = cfg->n_embd;
  memset(t, 0, sizeof *t);
  t->tensors = calloc((size_t)(4 + ZO_GPT2_BLOCK_TENSORS * L), sizeof *t->tensors);
  t->layer_offset = calloc((size_t)L, sizeof *t->layer_offset);
  if (!t->tensors || !t->layer_offset) {
    zo_tensor_table_free(t);
    return zo_error(-ENOMEM, "out of host memory building the parameter table");
  }
  t->n_layer = L;
  size_t off = 0;
  char name[ZO_TENSOR_NAME_MAX];
  table_add(t, &off, "transformer.wte.weight", -1, cfg->padded_vocab_size, C);
  table_add(t, &off, "transformer.wpe.weight", -1, cfg->max_seq_len, C);
  /* Order must match struct zo_gpt2_block's field order. */
  static const struct { const char *suffix; int rows_x, cols_x; } block[ZO_GPT2_BLOCK_TENSORS] = {
      {"ln_1.weight", 1, 0},        {"ln_1.bias", 1, 0},      {"attn.c_attn.weight", 3, 1},
      {"attn.c_attn.bias", 3, 0},   {"attn.c_proj.weight", 1, 1}, {"attn.c_proj.bias", 1, 0},
      {"ln_2.weight", 1, 0},        {"ln_2.bias", 1, 0},      {"mlp.c_fc.weight", 4, 1},
      {"mlp.c_fc.bias", 4, 0},      {"mlp.c_proj.weight", 1, 4}, {"mlp.c_proj.bias", 1, 0},
  };
  for (int l = 0; l < L; l++) {
    t->layer_offset[l] = off;
    for (int i = 0; i < ZO_GPT2_BLOCK_TENSORS; i++) {
      snprintf(name, sizeof name, "transformer.h.%d.%s", l, block[i].suffix);
      table_add(t, &off, name, l, block[i].rows_x * C, block[i].cols_x * C);
    }
    if (l == 0) t->layer_numel = off - t->layer_offset[0];
  }
  table_add(t, &off, "transformer.ln_f.weight", -1, C, 0);
  table_add(t, &off, "transformer.ln_f.bias", -1, C, 0);
  t->numel = off;
  return 0;
}

const struct zo_tensor_info *zo_tensor_table_find(const struct zo_tensor_table *t,
                                                  const char *name) {
  for (int i = 0; i < t->n_tensors; i++)
    if (strcmp(t->tensors[i].name, name) == 0) return &t->tensors[i];
  return NULL;
}

void zo_tensor_table_free(struct zo_tensor_table *t) {
  free(t->tensors);
  free(t->layer_offset);
  memset(t, 0, sizeof *t);
}

const char *zo_mem_category_name(enum zo_mem_category c) {
  static const char *names[ZO_MEM_N_CATEGORIES] = {
      "parameters", "gradients", "master weights", "AdamW m", "AdamW v",
      "activations", "workspace", "buffers"};
  ZO_ASSERT((unsigned)c < ZO_MEM_N_CATEGORIES);
  return names[c];
}

/* Either counts bytes (arena NULL) or carves them: one description of the
 * device layout serves both the plan and the allocation. */
struct carver {
  struct zo_arena *arena;
  size_t total;
  size_t by_category[ZO_MEM_N_CATEGORIES];
  int err;
};

static void *carve(struct carver *c, size_t nbytes, const char *what, enum zo_mem_category cat) {
  if (c->err) return NULL;
  c->total += zo_arena_round(nbytes);
  c->by_category[cat] += zo_arena_round(nbytes);
  if (!c->arena) return NULL;
  void *p = NULL;
  c->err = zo_arena_alloc(c->arena, nbytes, what, &p);
  return p;
}

int zo_gpt2_head_rows(const struct zo_gpt2_config *cfg, int B, int T,
                      const struct zo_gpt2_layout *lo) {
  const size_t BT = (size_t)B * (size_t)T, row = (size_t)cfg->padded_vocab_size * sizeof(float);
  size_t rows = lo->head_chunk_rows > 0 ? (size_t)lo->head_chunk_rows : ZO_GPT2_HEAD_CHUNK_BYTES / row;
  if (rows < 1) rows = 1;
  return (int)(rows < BT ? rows : BT);
}

/* The activations one block keeps for backward; res3 only when want_res3.
 * e: bytes of a working-dtype element. */
static void carve_block_acts(struct carver *c, struct zo_gpt2_block_acts *a, size_t BT, size_t C,
                             size_t NH, size_t T, size_t e, bool want_res3) {
  const size_t f = sizeof(float);
  const enum zo_mem_category A = ZO_MEM_ACTIVATIONS;
  a->ln1 = carve(c, BT * C * e, "activations (ln_1)", A);
  a->ln1_mean = carve(c, BT * f, "activations (ln_1 mean)", A);
  a->ln1_rstd = carve(c, BT * f, "activations (ln_1 rstd)", A);
  a->qkv = carve(c, BT * 3 * C * e, "activations (qkv)", A);
  a->atty = carve(c, BT * C * e, "activations (attention out)", A);
  a->att = carve(c, BT * NH * T * e, "activations (attention probabilities)", A);
  a->res2 = carve(c, BT * C * e, "activations (residual)", A);
  a->ln2 = carve(c, BT * C * e, "activations (ln_2)", A);
  a->ln2_mean = carve(c, BT * f, "activations (ln_2 mean)", A);
  a->ln2_rstd = carve(c, BT * f, "activations (ln_2 rstd)", A);
  a->fch = carve(c, BT * 4 * C * e, "activations (mlp fc)", A);
  a->fch_gelu = carve(c, BT * 4 * C * e, "activations (mlp gelu)", A);
  a->res3 = want_res3 ? carve(c, BT * C * e, "activations (block output)", A) : NULL;
}

/* Training keeps every block's activations; inference keeps one block's and
 * reuses them for all blocks (a block's input is only read before its output
 * buffer is written), and has no gradients or backward scratch. With
 * activation checkpointing the first n blocks share one set (recomputed in
 * backward) and each keeps only its output, which is the next block's input;
 * with ckpt_on_host those outputs alternate between two input buffers
 * (ckpt_in, the first being the embedding output) and leave for the host,
 * except the last one, block n's input, which stays like any kept activation.
 * The logits hold one LM-head chunk. */
static void layout(struct zo_gpt2 *m, const struct zo_gpt2_config *cfg,
                   const struct zo_tensor_table *t, struct carver *c, int B, int T,
                   const struct zo_gpt2_layout *lo) {
  const size_t C = (size_t)cfg->n_embd, NH = (size_t)cfg->n_head, BT = (size_t)B * (size_t)T;
  const size_t f = sizeof(float), e = zo_dtype_size(lo->dtype), n_params = t->numel;
  const size_t resident = n_params - (size_t)t->n_layer * t->layer_numel;
  const bool training = lo->training;
  const int n_ckpt = training ? lo->ckpt_blocks : 0;
  const bool on_host = n_ckpt > 0 && lo->ckpt_on_host;
  m->params = carve(c, (lo->param_slots ? resident : n_params) * e, "parameters", ZO_MEM_PARAMS);
  for (int k = 0; k < lo->param_slots; k++) {
    void *p = carve(c, t->layer_numel * e, "parameter slot", ZO_MEM_BUFFERS);
    if (m->param_slots) m->param_slots[k] = p;
  }
  if (training && lo->master)
    m->master = carve(c, n_params * f, "master weights", ZO_MEM_MASTER);
  if (training) {
    m->grads = carve(c, (lo->grad_slots ? resident : n_params) * f, "gradients", ZO_MEM_GRADS);
    if (lo->grad_accum)
      m->grads_acc = carve(c, n_params * f, "gradient accumulator", ZO_MEM_GRADS);
    for (int k = 0; k < lo->grad_slots; k++) {
      float *p = carve(c, t->layer_numel * f, "gradient slot", ZO_MEM_BUFFERS);
      if (m->grad_slots) m->grad_slots[k] = p;
    }
    if (lo->optimizer) {
      m->adam_m = carve(c, n_params * f, "AdamW m", ZO_MEM_ADAM_M);
      m->adam_v = carve(c, n_params * f, "AdamW v", ZO_MEM_ADAM_V);
    }
  }
  const enum zo_mem_category A = ZO_MEM_ACTIVATIONS, W = ZO_MEM_WORKSPACE;
  m->inputs = carve(c, BT * sizeof(int32_t), "input tokens", A);
  m->targets = carve(c, BT * sizeof(int32_t), "target tokens", A);
  m->encoded = carve(c, BT * C * e, on_host ? "checkpoint input buffer 0 (embedding)"
                                            : "activations (embedding)", A);
  m->ckpt_in[0] = on_host ? m->encoded : NULL;
  m->ckpt_in[1] = on_host && n_ckpt > 1 ? carve(c, BT * C * e, "checkpoint input buffer 1", A) : NULL;
  struct zo_gpt2_block_acts shared = {0};
  if (n_ckpt > 0) carve_block_acts(c, &shared, BT, C, NH, (size_t)T, e, false);
  for (int l = 0; l < cfg->n_layer; l++) {
    struct zo_gpt2_block_acts a;
    if (!training && l > 0) {
      if (m->acts) m->acts[l] = m->acts[0];
      continue;
    }
    if (l < n_ckpt) {
      a = shared;
      if (on_host && l < n_ckpt - 1)
        a.res3 = m->ckpt_in[(l + 1) % 2];
      else
        a.res3 = carve(c, BT * C * e, "activations (checkpoint: block output)", A);
    } else {
      carve_block_acts(c, &a, BT, C, NH, (size_t)T, e, true);
    }
    if (m->acts) m->acts[l] = a;
  }
  m->lnf = carve(c, BT * C * e, "activations (ln_f)", A);
  m->lnf_mean = carve(c, BT * f, "activations (ln_f mean)", A);
  m->lnf_rstd = carve(c, BT * f, "activations (ln_f rstd)", A);
  const size_t rows = (size_t)zo_gpt2_head_rows(cfg, B, T, lo);
  m->logits = carve(c, rows * (size_t)cfg->padded_vocab_size * e, "logits (one LM-head chunk)", A);
  m->losses = carve(c, BT * f, "losses", A);
  if (!training) return;
  m->dresidual = carve(c, BT * C * e, "backward scratch (residual grad)", W);
  m->dbtc = carve(c, BT * C * e, "backward scratch (B,T,C)", W);
  m->dqkv = carve(c, BT * 3 * C * e, "backward scratch (qkv grad)", W);
  m->dfch = carve(c, BT * 4 * C * e, "backward scratch (mlp grad)", W);
  m->datt = carve(c, BT * NH * (size_t)T * e, "backward scratch (attention grad)", W);
}

size_t zo_gpt2_device_plan(const struct zo_gpt2_config *cfg_in, int B, int T,
                           const struct zo_gpt2_layout *lo,
                           size_t by_category[ZO_MEM_N_CATEGORIES]) {
  struct zo_gpt2_config cfg = *cfg_in;
  struct zo_tensor_table t;
  if (zo_gpt2_config_check(&cfg) || zo_gpt2_build_table(&cfg, &t)) return 0;
  struct zo_gpt2 m = {0};
  struct carver c = {0};
  layout(&m, &cfg, &t, &c, B, T, lo);
  zo_tensor_table_free(&t);
  if (by_category) memcpy(by_category, c.by_category, sizeof c.by_category);
  return c.total;
}

size_t zo_gpt2_device_bytes(const struct zo_gpt2_config *cfg, int B, int T, bool training) {
  const struct zo_gpt2_layout lo = {.training = training};
  return zo_gpt2_device_plan(cfg, B, T, &lo, NULL);
}

/* Views of block l's tensors in a buffer whose element 0 is table element
 * origin, e bytes per element (the block's own buffer may start at its
 * layer offset: origin is then that offset). */
static void block_views(const struct zo_tensor_table *t, void *base, size_t origin, size_t e, int l,
                        struct zo_gpt2_block *b) {
  void **fields[ZO_GPT2_BLOCK_TENSORS] = {&b->ln1w, &b->ln1b, &b->qkvw, &b->qkvb,
                                          &b->attprojw, &b->attprojb, &b->ln2w, &b->ln2b,
                                          &b->fcw, &b->fcb, &b->fcprojw, &b->fcprojb};
  const struct zo_tensor_info *ti = &t->tensors[2 + l * ZO_GPT2_BLOCK_TENSORS];
  for (int i = 0; i < ZO_GPT2_BLOCK_TENSORS; i++)
    *fields[i] = (char *)base + (ti[i].offset - origin) * e;
}

void zo_gpt2_bind_block(struct zo_gpt2 *m, int l, void *params_base, float *grads_base) {
  ZO_ASSERT(l >= 0 && l < m->cfg.n_layer);
  const size_t off = m->table.layer_offset[l];
  if (params_base) block_views(&m->table, params_base, off, m->esize, l, &m->blocks[l]);
  if (grads_base) block_views(&m->table, grads_base, off, sizeof(float), l, &m->dblocks[l]);
}

void zo_gpt2_bind_resident_grads(struct zo_gpt2 *m, float *head, float *tail) {
  const struct zo_tensor_info *ti = m->table.tensors;
  m->dwte = head + ti[0].offset;
  m->dwpe = head + ti[1].offset;
  m->dlnfw = tail;
  m->dlnfb = tail + ti[m->table.n_tensors - 1].offset - ti[m->table.n_tensors - 2].offset;
}

static struct zo_gpt2 *init(const struct zo_gpt2_config *cfg_in, zo_backend_t backend, int B,
                            int T, const struct zo_gpt2_layout *lo) {
  const bool training = lo->training;
  struct zo_gpt2_config cfg = *cfg_in;
  if (zo_gpt2_config_check(&cfg)) return NULL;
  if (B < 1 || T < 1 || T > cfg.max_seq_len) {
    zo_error(-EINVAL, "micro-batch shape B=%d T=%d: need B >= 1 and 1 <= T <= model.max_seq_len = %d",
             B, T, cfg.max_seq_len);
    return NULL;
  }
  struct zo_gpt2 *m = calloc(1, sizeof *m);
  if (!m) {
    zo_error(-ENOMEM, "out of host memory allocating the model");
    return NULL;
  }
  m->cfg = cfg;
  m->backend = backend;
  m->B = B;
  m->T = T;
  m->training = training;
  m->layout = *lo;
  if (lo->dtype != ZO_F32 && lo->dtype != ZO_BF16 && lo->dtype != ZO_F16) {
    zo_error(-EINVAL, "model dtype %s: need F32, BF16 or F16", zo_dtype_name(lo->dtype));
    goto out_free;
  }
  m->dtype = lo->dtype;
  m->esize = zo_dtype_size(lo->dtype);
  if (!training) {
    m->layout.grad_slots = 0;
    m->layout.grad_accum = false;
    m->layout.optimizer = false;
    m->layout.master = false;
    m->layout.ckpt_blocks = 0;
  }
  if (m->layout.ckpt_blocks < 0 || m->layout.ckpt_blocks > cfg.n_layer) {
    zo_error(-EINVAL, "activation checkpointing of %d blocks: the model has %d (model.n_layer)",
             m->layout.ckpt_blocks, cfg.n_layer);
    goto out_free;
  }
  if (m->layout.ckpt_blocks == 0) m->layout.ckpt_on_host = false;
  m->head_rows = zo_gpt2_head_rows(&cfg, B, T, &m->layout);
  if (zo_gpt2_build_table(&cfg, &m->table)) goto out_free;
  const int L = cfg.n_layer;
  m->head_numel = m->table.layer_offset[0];
  m->tail_numel = m->table.numel - m->head_numel - (size_t)L * m->table.layer_numel;
  m->acts = calloc((size_t)L, sizeof *m->acts);
  m->blocks = calloc((size_t)L, sizeof *m->blocks);
  m->dblocks = calloc((size_t)L, sizeof *m->dblocks);
  m->host_losses = calloc((size_t)B * (size_t)T, sizeof(float));
  m->param_slots = calloc((size_t)lo->param_slots + 1, sizeof *m->param_slots);
  m->grad_slots = calloc((size_t)lo->grad_slots + 1, sizeof *m->grad_slots);
  if (!m->acts || !m->blocks || !m->dblocks || !m->host_losses || !m->param_slots ||
      !m->grad_slots) {
    zo_error(-ENOMEM, "out of host memory allocating the model");
    goto out_free;
  }
  struct carver plan = {0};
  layout(m, &cfg, &m->table, &plan, B, T, &m->layout);
  if (zo_arena_init(&m->arena, backend, plan.total, "device")) goto out_free;
  struct carver c = {.arena = &m->arena};
  layout(m, &cfg, &m->table, &c, B, T, &m->layout);
  if (c.err) goto out_free;

  const struct zo_tensor_info *ti = m->table.tensors;
  const bool pslots = m->layout.param_slots > 0, gslots = m->layout.grad_slots > 0;
  const size_t n_par = pslots ? m->head_numel + m->tail_numel : m->table.numel;
  const size_t tail_off = m->table.numel - m->tail_numel;
  m->wte = zo_gpt2_at(m, m->params, ti[0].offset);
  m->wpe = zo_gpt2_at(m, m->params, ti[1].offset);
  m->lnfw = zo_gpt2_at(m, m->params, pslots ? m->head_numel : tail_off);
  m->lnfb = zo_gpt2_at(m, m->lnfw, ti[m->table.n_tensors - 1].offset - ti[m->table.n_tensors - 2].offset);
  if (!pslots)
    for (int l = 0; l < L; l++) block_views(&m->table, m->params, 0, m->esize, l, &m->blocks[l]);
  if (backend->memset_async(m->params, 0, n_par * m->esize, NULL)) goto out_free;
  if (m->master && backend->memset_async(m->master, 0, m->table.numel * sizeof(float), NULL))
    goto out_free;
  if (training) {
    const size_t n_grad = gslots ? m->head_numel + m->tail_numel : m->table.numel;
    zo_gpt2_bind_resident_grads(m, m->grads, m->grads + (gslots ? m->head_numel : tail_off));
    if (!gslots)
      for (int l = 0; l < L; l++) block_views(&m->table, m->grads, 0, sizeof(float), l, &m->dblocks[l]);
    if (backend->memset_async(m->grads, 0, n_grad * sizeof(float), NULL)) goto out_free;
  }
  if (backend->stream_synchronize(NULL)) goto out_free;
  return m;

out_free:
  zo_gpt2_free(m);
  return NULL;
}

struct zo_gpt2 *zo_gpt2_init(const struct zo_gpt2_config *cfg, zo_backend_t backend, int B, int T) {
  const struct zo_gpt2_layout lo = {.training = true};
  return init(cfg, backend, B, T, &lo);
}

struct zo_gpt2 *zo_gpt2_init_layout(const struct zo_gpt2_config *cfg, zo_backend_t backend, int B,
                                    int T, const struct zo_gpt2_layout *layout) {
  return init(cfg, backend, B, T, layout);
}

struct zo_gpt2 *zo_gpt2_init_inference(const struct zo_gpt2_config *cfg, zo_backend_t backend,
                                       int B, int T) {
  const struct zo_gpt2_layout lo = {.training = false};
  return init(cfg, backend, B, T, &lo);
}

void zo_gpt2_free(struct zo_gpt2 *m) {
  if (!m) return;
  zo_arena_free(&m->arena);
  zo_tensor_table_free(&m->table);
  free(m->acts);
  free(m->blocks);
  free(m->dblocks);
  free(m->host_losses);
  free(m->param_slots);
  free(m->grad_slots);
  free(m);
}

/* splitmix64: a small, well-known generator; the stream depends only on seed. */
static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void fill_normal(float *x, size_t n, double std, uint64_t *state) {
  for (size_t i = 0; i < n; i += 2) {
    /* Box-Muller on two uniforms in (0, 1]. */
    double u1 = ((double)(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53;
    double u2 = (double)(splitmix64(state) >> 11) * 0x1.0p-53;
    double r = sqrt(-2.0 * log(u1)) * std;
    x[i] = (float)(r * cos(2.0 * M_PI * u2));
    if (i + 1 < n) x[i + 1] = (float)(r * sin(2.0 * M_PI * u2));
  }
}

void zo_gpt2_init_params(const struct zo_gpt2 *m, float *params, uint64_t seed) {
  const struct zo_tensor_table *t = &m->table;
  const double std = 0.02, proj_std = 0.02 / sqrt(2.0 * m->cfg.n_layer);
  uint64_t state = seed;
  for (int i = 0; i < t->n_tensors; i++) {
    const struct zo_tensor_info *ti = &t->tensors[i];
    float *p = params + ti->offset;
    const char *leaf = strrchr(ti->name, '.');
    if (ti->ndim == 2) {
      bool proj = strstr(ti->name, "c_proj.weight") != NULL;
      fill_normal(p, ti->numel, proj ? proj_std : std, &state);
    } else if (strcmp(leaf, ".weight") == 0) {
      for (size_t k = 0; k < ti->numel; k++) p[k] = 1.0f;
    } else {
      memset(p, 0, ti->numel * sizeof(float));
    }
  }
  /* Padded vocabulary rows stay zero: their logits are never used and their
   * gradients are zero, so they remain zero through training. */
  size_t V = (size_t)m->cfg.vocab_size, Vp = (size_t)m->cfg.padded_vocab_size,
         C = (size_t)m->cfg.n_embd;
  memset(params + t->tensors[0].offset + V * C, 0, (Vp - V) * C * sizeof(float));
}

/* Elements per host staging chunk of a converting upload or download. */
#define ZO_GPT2_STAGE_NUMEL ((size_t)1 << 20)

int zo_gpt2_upload_params(struct zo_gpt2 *m, const float *host_params) {
  ZO_ASSERT(m->layout.param_slots == 0);
  zo_backend_t be = m->backend;
  const size_t n = m->table.numel;
  int err = 0;
  if (m->master)
    err = be->memcpy_async(m->master, host_params, n * sizeof(float), ZO_COPY_H2D, NULL);
  if (!err && m->dtype == ZO_F32)
    err = be->memcpy_async(m->params, host_params, n * sizeof(float), ZO_COPY_H2D, NULL);
  if (err || m->dtype == ZO_F32) return err ? err : be->stream_synchronize(NULL);
  void *stage = malloc(ZO_GPT2_STAGE_NUMEL * m->esize);
  if (!stage) return zo_error(-ENOMEM, "out of host memory staging the parameter upload");
  for (size_t i = 0; i < n && !err; i += ZO_GPT2_STAGE_NUMEL) {
    const size_t k = n - i < ZO_GPT2_STAGE_NUMEL ? n - i : ZO_GPT2_STAGE_NUMEL;
    zo_cpu_cast(stage, m->dtype, host_params + i, ZO_F32, k);
    err = be->memcpy_async(zo_gpt2_at(m, m->params, i), stage, k * m->esize, ZO_COPY_H2D, NULL);
    if (!err) err = be->stream_synchronize(NULL); /* before the stage is rewritten */
  }
  free(stage);
  return err;
}

int zo_gpt2_download_params(const struct zo_gpt2 *m, float *host_params) {
  ZO_ASSERT(m->layout.param_slots == 0);
  zo_backend_t be = m->backend;
  const size_t n = m->table.numel;
  if (m->master || m->dtype == ZO_F32) {
    int err = be->memcpy_async(host_params, m->master ? m->master : m->params, n * sizeof(float),
                               ZO_COPY_D2H, NULL);
    return err ? err : be->stream_synchronize(NULL);
  }
  void *stage = malloc(ZO_GPT2_STAGE_NUMEL * m->esize);
  if (!stage) return zo_error(-ENOMEM, "out of host memory staging the parameter download");
  int err = 0;
  for (size_t i = 0; i < n && !err; i += ZO_GPT2_STAGE_NUMEL) {
    const size_t k = n - i < ZO_GPT2_STAGE_NUMEL ? n - i : ZO_GPT2_STAGE_NUMEL;
    err = be->memcpy_async(stage, (const char *)m->params + i * m->esize, k * m->esize, ZO_COPY_D2H,
                           NULL);
    if (!err) err = be->stream_synchronize(NULL);
    if (!err) zo_cpu_cast(host_params + i, ZO_F32, stage, m->dtype, k);
  }
  free(stage);
  return err;
}

static void hook_begin(struct zo_gpt2 *m, int l, enum zo_gpt2_phase ph, zo_stream_t s) {
  if (m->hooks && m->hooks->block_begin) m->hooks->block_begin(m->hooks->ctx, m, l, ph, s);
}

static void hook_end(struct zo_gpt2 *m, int l, enum zo_gpt2_phase ph, zo_stream_t s) {
  if (m->hooks && m->hooks->block_end) m->hooks->block_end(m->hooks->ctx, m, l, ph, s);
}

void *zo_gpt2_block_input(struct zo_gpt2 *m, int l) {
  ZO_ASSERT(l >= 0 && l < m->cfg.n_layer);
  return l == 0 ? m->encoded : m->acts[l - 1].res3;
}

/* Block l's forward from its input; without the output (res3) when
 * recomputing, since its backward does not read it. */
static void block_forward(struct zo_gpt2 *m, int l, int B, int T, bool output, zo_stream_t s) {
  zo_backend_t be = m->backend;
  const int C = m->cfg.n_embd, NH = m->cfg.n_head, BT = B * T;
  const size_t nbt = (size_t)BT;
  const enum zo_dtype dt = m->dtype;
  const void *residual = zo_gpt2_block_input(m, l);
  const struct zo_gpt2_block *w = &m->blocks[l];
  struct zo_gpt2_block_acts *a = &m->acts[l];
  be->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, residual, w->ln1w, w->ln1b, BT, C, dt, s);
  be->matmul_forward(a->qkv, a->ln1, w->qkvw, w->qkvb, BT, C, 3 * C, dt, s);
  be->attention_forward(a->atty, a->att, a->qkv, B, T, NH, NH, C / NH, dt, s);
  be->matmul_forward(a->res2, a->atty, w->attprojw, w->attprojb, BT, C, C, dt, s);
  be->residual_forward(a->res2, a->res2, residual, nbt * (size_t)C, dt, s);
  be->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w->ln2w, w->ln2b, BT, C, dt, s);
  be->matmul_forward(a->fch, a->ln2, w->fcw, w->fcb, BT, C, 4 * C, dt, s);
  be->gelu_forward(a->fch_gelu, a->fch, nbt * 4 * (size_t)C, dt, s);
  if (!output) return;
  be->matmul_forward(a->res3, a->fch_gelu, w->fcprojw, w->fcprojb, BT, 4 * C, C, dt, s);
  be->residual_forward(a->res3, a->res3, a->res2, nbt * (size_t)C, dt, s);
}

/* The LM head over row chunks of ln_f's output: logits, then with targets
 * the losses, and with backward dlogits in place (dloss applied), the
 * chunk's rows of d(ln_f) into dbtc and its part of dwte (accumulated). A
 * row's logits and loss do not depend on the chunking; dwte sums the chunks
 * in order (the chunk size changes only its rounding). */
static void head_chunks(struct zo_gpt2 *m, int B, int T, bool targets, bool backward, float dloss,
                        zo_stream_t s) {
  zo_backend_t be = m->backend;
  const int C = m->cfg.n_embd, V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size, BT = B * T;
  const enum zo_dtype dt = m->dtype;
  for (int r = 0; r < BT; r += m->head_rows) {
    const int n = BT - r < m->head_rows ? BT - r : m->head_rows;
    const void *lnf = zo_gpt2_at(m, m->lnf, (size_t)r * (size_t)C);
    be->matmul_forward(m->logits, lnf, m->wte, NULL, n, C, Vp, dt, s);
    if (targets)
      be->crossentropy_forward(m->losses + r, backward ? m->logits : NULL, m->logits, m->targets + r,
                               backward ? dloss : 0.0f, n, V, Vp, dt, s);
    if (backward)
      be->matmul_backward(zo_gpt2_at(m, m->dbtc, (size_t)r * (size_t)C), m->dwte, NULL, m->logits, lnf,
                          m->wte, n, C, Vp, dt, s);
    m->head_row0 = r;
  }
}

/* Everything up to and including ln_f. */
static void forward_body(struct zo_gpt2 *m, const int32_t *inputs, const int32_t *targets, int B,
                         int T, zo_stream_t s) {
  ZO_ASSERT(B >= 1 && B <= m->B && T >= 1 && T <= m->T);
  zo_backend_t be = m->backend;
  const int C = m->cfg.n_embd, BT = B * T, L = m->cfg.n_layer;
  const size_t nbt = (size_t)BT;
  ZO_ASSERT(be->memcpy_async(m->inputs, inputs, nbt * sizeof(int32_t), ZO_COPY_H2D, s) == 0);
  if (targets)
    ZO_ASSERT(be->memcpy_async(m->targets, targets, nbt * sizeof(int32_t), ZO_COPY_H2D, s) == 0);
  ZO_ASSERT(m->hooks || (m->layout.param_slots == 0 && !m->layout.ckpt_on_host));
  m->head_done = false;
  hook_begin(m, ZO_GPT2_EMBED, ZO_GPT2_FORWARD, s);
  be->encoder_forward(m->encoded, m->inputs, m->wte, m->wpe, B, T, C, m->dtype, s);
  hook_end(m, ZO_GPT2_EMBED, ZO_GPT2_FORWARD, s);
  for (int l = 0; l < L; l++) {
    hook_begin(m, l, ZO_GPT2_FORWARD, s);
    block_forward(m, l, B, T, true, s);
    hook_end(m, l, ZO_GPT2_FORWARD, s);
  }
  hook_begin(m, L, ZO_GPT2_FORWARD, s);
  be->layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, m->acts[L - 1].res3, m->lnfw, m->lnfb, BT,
                        C, m->dtype, s);
}

void zo_gpt2_forward(struct zo_gpt2 *m, const int32_t *inputs, const int32_t *targets, int B,
                     int T, zo_stream_t s) {
  forward_body(m, inputs, targets, B, T, s);
  head_chunks(m, B, T, targets != NULL, false, 0.0f, s);
  hook_end(m, m->cfg.n_layer, ZO_GPT2_FORWARD, s);
}

/* Unit L's backward: the head (chunked) and ln_f. */
static void head_backward(struct zo_gpt2 *m, int B, int T, float dloss, zo_stream_t s) {
  zo_backend_t be = m->backend;
  const int C = m->cfg.n_embd, L = m->cfg.n_layer, BT = B * T;
  hook_begin(m, L, ZO_GPT2_BACKWARD, s);
  head_chunks(m, B, T, true, true, dloss, s);
  ZO_ASSERT(be->memset_async(m->dresidual, 0, (size_t)BT * (size_t)C * m->esize, s) == 0);
  be->layernorm_backward(m->dresidual, m->dlnfw, m->dlnfb, m->dbtc, m->acts[L - 1].res3, m->lnfw,
                         m->lnf_mean, m->lnf_rstd, BT, C, m->dtype, s);
  hook_end(m, L, ZO_GPT2_BACKWARD, s);
}

void zo_gpt2_forward_train(struct zo_gpt2 *m, const int32_t *inputs, const int32_t *targets, int B,
                           int T, float dloss, zo_stream_t s) {
  ZO_ASSERT(m->training && targets);
  forward_body(m, inputs, targets, B, T, s);
  hook_end(m, m->cfg.n_layer, ZO_GPT2_FORWARD, s);
  head_backward(m, B, T, dloss, s);
  m->head_done = true;
}

void zo_gpt2_zero_grad(struct zo_gpt2 *m, zo_stream_t s) {
  ZO_ASSERT(m->training);
  const size_t n = m->layout.grad_slots ? m->head_numel + m->tail_numel : m->table.numel;
  ZO_ASSERT(m->backend->memset_async(m->grads, 0, n * sizeof(float), s) == 0);
}

void zo_gpt2_backward(struct zo_gpt2 *m, int B, int T, float dloss, zo_stream_t s) {
  ZO_ASSERT(m->training);
  ZO_ASSERT(B >= 1 && B <= m->B && T >= 1 && T <= m->T);
  zo_backend_t be = m->backend;
  const int C = m->cfg.n_embd, NH = m->cfg.n_head, L = m->cfg.n_layer, BT = B * T;
  const size_t nbt = (size_t)BT;
  const enum zo_dtype dt = m->dtype;

  if (!m->head_done) head_backward(m, B, T, dloss, s);
  m->head_done = false;
  for (int l = L - 1; l >= 0; l--) {
    hook_begin(m, l, ZO_GPT2_BACKWARD, s);
    /* A checkpointed block's activations are recomputed from its input with
     * the forward's kernels, so backward sees the same bits. */
    if (l < m->layout.ckpt_blocks) block_forward(m, l, B, T, false, s);
    const struct zo_gpt2_block *w = &m->blocks[l];
    const struct zo_gpt2_block *dw = &m->dblocks[l];
    const struct zo_gpt2_block_acts *a = &m->acts[l];
    const void *residual_in = zo_gpt2_block_input(m, l);
    /* dresidual holds d(res3) here; the MLP branch adds its part of d(res2). */
    be->matmul_backward(m->dfch, dw->fcprojw, dw->fcprojb, m->dresidual, a->fch_gelu, w->fcprojw,
                        BT, 4 * C, C, dt, s);
    be->gelu_backward(m->dfch, a->fch, m->dfch, nbt * 4 * (size_t)C, dt, s);
    be->matmul_backward(m->dbtc, dw->fcw, dw->fcb, m->dfch, a->ln2, w->fcw, BT, C, 4 * C, dt, s);
    be->layernorm_backward(m->dresidual, dw->ln2w, dw->ln2b, m->dbtc, a->res2, w->ln2w,
                           a->ln2_mean, a->ln2_rstd, BT, C, dt, s);
    /* dresidual is now d(res2); the attention branch adds its part of d(residual_in). */
    be->matmul_backward(m->dbtc, dw->attprojw, dw->attprojb, m->dresidual, a->atty, w->attprojw,
                        BT, C, C, dt, s);
    be->attention_backward(m->dqkv, m->datt, m->dbtc, a->qkv, a->att, B, T, NH, NH, C / NH, dt, s);
    be->matmul_backward(m->dbtc, dw->qkvw, dw->qkvb, m->dqkv, a->ln1, w->qkvw, BT, C, 3 * C, dt, s);
    be->layernorm_backward(m->dresidual, dw->ln1w, dw->ln1b, m->dbtc, residual_in, w->ln1w,
                           a->ln1_mean, a->ln1_rstd, BT, C, dt, s);
    hook_end(m, l, ZO_GPT2_BACKWARD, s);
  }
  hook_begin(m, ZO_GPT2_EMBED, ZO_GPT2_BACKWARD, s);
  be->encoder_backward(m->dwte, m->dwpe, m->dresidual, m->inputs, B, T, C, dt, s);
  hook_end(m, ZO_GPT2_EMBED, ZO_GPT2_BACKWARD, s);
}

int zo_gpt2_mean_loss(struct zo_gpt2 *m, const int32_t *host_targets, int B, int T,
                      zo_stream_t s, double *loss) {
  const size_t n = (size_t)B * (size_t)T;
  int err = m->backend->memcpy_async(m->host_losses, m->losses, n * sizeof(float), ZO_COPY_D2H, s);
  if (!err) err = m->backend->stream_synchronize(s);
  if (err) return err;
  double sum = 0.0;
  size_t count = 0;
  for (size_t i = 0; i < n; i++) {
    if (host_targets[i] < 0) continue;
    sum += m->host_losses[i];
    count++;
  }
  *loss = count ? sum / (double)count : 0.0;
  return 0;
}

double zo_gpt2_flops_per_token(const struct zo_gpt2_config *cfg, int T) {
  /* 6 flops per matmul weight per token (forward 2, backward 4), plus causal
   * attention: QK^T and AV over on average T/2 keys, 2 flops each, x3. */
  const double C = cfg->n_embd, L = cfg->n_layer;
  double matmul_params = L * 12.0 * C * C + (double)cfg->padded_vocab_size * C;
  return 6.0 * matmul_params + 6.0 * L * (double)T * C;
}
