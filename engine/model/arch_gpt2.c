/* GPT-2 as an architecture description (engine/model/arch.h): LayerNorm with
 * bias, learned position embeddings, fused qkv projection with bias, causal
 * multi-head attention, GELU (tanh) MLP with biases, pre-norm residual
 * blocks, a final LayerNorm and an LM head tied to the token embedding.
 * Table: wte (Vp, C), wpe (maxT, C), per block the 12 tensors of enum below,
 * ln_f weight and bias. Hugging Face layout: Conv1D weights (in, out), so
 * every block matrix is a transposed view; wte without its padded rows; the
 * tied lm_head.weight is not stored. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "family.h"
#include "linear.h"

/* Block tensors, in table order. */
enum { LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB, LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB, N_BLOCK };
/* Resident tensors. */
enum { WTE = 0, WPE = 1 };
/* Kept activations of one block. */
enum { A_LN1, A_LN1_MEAN, A_LN1_RSTD, A_QKV, A_ATTY, A_ATT, A_RES2, A_LN2, A_LN2_MEAN, A_LN2_RSTD, A_FCH, A_FCH_GELU,
       A_RES3, N_ACTS };
/* Backward scratch. */
enum { S_DRESIDUAL, S_DBTC, S_DQKV, S_DFCH, S_DATT, N_SCRATCH };
/* The final norm's buffers. */
enum { F_LNF, F_MEAN, F_RSTD, N_FIN };

static int gpt2_config_check(struct zo_model_config *cfg) {
  if (cfg->n_kv_head != 0 && cfg->n_kv_head != cfg->n_head)
    return zo_error(-EINVAL, "model.num_key_value_heads = %d: GPT-2 has one key/value head per query head "
                             "(0 or model.n_head = %d)", cfg->n_kv_head, cfg->n_head);
  if (cfg->intermediate_size != 0 && cfg->intermediate_size != 4 * cfg->n_embd)
    return zo_error(-EINVAL, "model.intermediate_size = %d: GPT-2's MLP is 4 x n_embd = %d (or 0)",
                    cfg->intermediate_size, 4 * cfg->n_embd);
  if (cfg->has_padding_idx)
    return zo_error(-EINVAL, "model.pad_token_id = %d: GPT-2's embedding has no padding index (transformers' "
                             "GPT2Model trains every row): -1 (none) is valid for model.arch \"gpt2\"",
                    cfg->padding_idx);
  cfg->n_kv_head = cfg->n_head;
  cfg->intermediate_size = 4 * cfg->n_embd;
  cfg->tie_embeddings = true;
  return 0;
}

static int gpt2_build_table(const struct zo_model_config *cfg, struct zo_tensor_table *t) {
  const int L = cfg->n_layer, C = cfg->n_embd;
  int err = zo_arch_table_alloc(t, 4 + N_BLOCK * L, L);
  if (err) return err;
  size_t off = 0;
  char name[ZO_TENSOR_NAME_MAX];
  zo_arch_table_add(t, &off, "transformer.wte.weight", -1, cfg->padded_vocab_size, C);
  zo_arch_table_add(t, &off, "transformer.wpe.weight", -1, cfg->max_seq_len, C);
  t->head_tensors = 2;
  t->block_tensors = N_BLOCK;
  /* (suffix, rows in units of C, cols in units of C; 0: 1-D), in enum order */
  static const struct { const char *suffix; int rows_x, cols_x; } block[N_BLOCK] = {
      {"ln_1.weight", 1, 0},        {"ln_1.bias", 1, 0},      {"attn.c_attn.weight", 3, 1},
      {"attn.c_attn.bias", 3, 0},   {"attn.c_proj.weight", 1, 1}, {"attn.c_proj.bias", 1, 0},
      {"ln_2.weight", 1, 0},        {"ln_2.bias", 1, 0},      {"mlp.c_fc.weight", 4, 1},
      {"mlp.c_fc.bias", 4, 0},      {"mlp.c_proj.weight", 1, 4}, {"mlp.c_proj.bias", 1, 0},
  };
  for (int l = 0; l < L; l++) {
    t->layer_offset[l] = off;
    for (int i = 0; i < N_BLOCK; i++) {
      snprintf(name, sizeof name, "transformer.h.%d.%s", l, block[i].suffix);
      zo_arch_table_add(t, &off, name, l, block[i].rows_x * C, block[i].cols_x * C);
      t->tensors[t->n_tensors - 1].hf_transposed = block[i].cols_x > 0; /* Conv1D (in, out) */
    }
    if (l == 0) t->layer_numel = off - t->layer_offset[0];
  }
  zo_arch_table_add(t, &off, "transformer.ln_f.weight", -1, C, 0);
  zo_arch_table_add(t, &off, "transformer.ln_f.bias", -1, C, 0);
  t->numel = off;
  return 0;
}

static int gpt2_acts(const struct zo_model_config *cfg, int T, struct zo_arch_buf *out) {
  const size_t C = (size_t)cfg->n_embd, NH = (size_t)cfg->n_head;
  const struct zo_arch_buf a[N_ACTS] = {
      [A_LN1] = {"activations (ln_1)", C, false},
      [A_LN1_MEAN] = {"activations (ln_1 mean)", 1, true},
      [A_LN1_RSTD] = {"activations (ln_1 rstd)", 1, true},
      [A_QKV] = {"activations (qkv)", 3 * C, false},
      [A_ATTY] = {"activations (attention out)", C, false},
      [A_ATT] = {"activations (attention probabilities)", NH * (size_t)T, false},
      [A_RES2] = {"activations (residual)", C, false},
      [A_LN2] = {"activations (ln_2)", C, false},
      [A_LN2_MEAN] = {"activations (ln_2 mean)", 1, true},
      [A_LN2_RSTD] = {"activations (ln_2 rstd)", 1, true},
      [A_FCH] = {"activations (mlp fc)", 4 * C, false},
      [A_FCH_GELU] = {"activations (mlp gelu)", 4 * C, false},
      [A_RES3] = {"activations (block output)", C, false},
  };
  memcpy(out, a, sizeof a);
  return N_ACTS;
}

static int gpt2_fin(const struct zo_model_config *cfg, struct zo_arch_buf *out) {
  const struct zo_arch_buf f[N_FIN] = {
      [F_LNF] = {"activations (ln_f)", (size_t)cfg->n_embd, false},
      [F_MEAN] = {"activations (ln_f mean)", 1, true},
      [F_RSTD] = {"activations (ln_f rstd)", 1, true},
  };
  memcpy(out, f, sizeof f);
  return N_FIN;
}

static int gpt2_scratch(const struct zo_model_config *cfg, int T, struct zo_arch_buf *out) {
  const size_t C = (size_t)cfg->n_embd, NH = (size_t)cfg->n_head;
  const struct zo_arch_buf s[N_SCRATCH] = {
      [S_DRESIDUAL] = {"backward scratch (residual grad)", C, false},
      [S_DBTC] = {"backward scratch (B,T,C)", C, false},
      [S_DQKV] = {"backward scratch (qkv grad)", 3 * C, false},
      [S_DFCH] = {"backward scratch (mlp grad)", 4 * C, false},
      [S_DATT] = {"backward scratch (attention grad)", NH * (size_t)T, false},
  };
  memcpy(out, s, sizeof s);
  return N_SCRATCH;
}

static void gpt2_embed_forward(struct zo_model *m, int B, int T, zo_stream_t s) {
  m->backend->encoder_forward(m->encoded, m->inputs, m->pv[WTE], m->pv[WPE], B, T, m->cfg.n_embd, m->dtype, s);
  zo_arch_dropout(m, m->encoded, m->encoded, (size_t)B * T * m->cfg.n_embd, ZO_DROP_EMBED, -1, s);
}

static void gpt2_embed_backward(struct zo_model *m, int B, int T, zo_stream_t s) {
  /* The residual stream's gradient is not read after this. */
  zo_arch_dropout(m, m->scratch[S_DRESIDUAL], m->scratch[S_DRESIDUAL], (size_t)B * T * m->cfg.n_embd, ZO_DROP_EMBED,
                  -1, s);
  m->backend->encoder_backward(m->gv[WTE], m->gv[WPE], m->scratch[S_DRESIDUAL], m->inputs, B, T, m->cfg.n_embd,
                               -1, m->dtype, s);
}

/* Block l's forward from its input; without the output (res3) when
 * recomputing, since its backward does not read it. */
static void gpt2_block_forward(struct zo_model *m, int l, int B, int T, bool output, zo_stream_t s) {
  zo_backend_t be = m->backend;
  const int C = m->cfg.n_embd, NH = m->cfg.n_head, BT = B * T;
  const size_t nbt = (size_t)BT;
  const enum zo_dtype dt = m->dtype;
  const void *residual = zo_model_block_input(m, l);
  const int first = zo_arch_block_tensor(&m->table, l, 0);
  void *const *w = m->pv + first;
  void **a = m->acts[l];
  be->layernorm_forward(a[A_LN1], a[A_LN1_MEAN], a[A_LN1_RSTD], residual, w[LN1W], w[LN1B], BT, C, dt, s);
  zo_model_linear_forward(m, first + QKVW, first + QKVB, a[A_QKV], a[A_LN1], BT, C, 3 * C, s);
  be->attention_forward(a[A_ATTY], a[A_ATT], a[A_QKV], B, T, NH, NH, C / NH, dt, s);
  /* Dropout in place: what the next op read is what its backward reads. */
  zo_arch_dropout(m, a[A_ATTY], a[A_ATTY], nbt * (size_t)C, ZO_DROP_ATTN, l, s);
  zo_model_linear_forward(m, first + ATTPROJW, first + ATTPROJB, a[A_RES2], a[A_ATTY], BT, C, C, s);
  zo_arch_dropout(m, a[A_RES2], a[A_RES2], nbt * (size_t)C, ZO_DROP_RESID_ATTN, l, s);
  be->residual_forward(a[A_RES2], a[A_RES2], residual, nbt * (size_t)C, dt, s);
  be->layernorm_forward(a[A_LN2], a[A_LN2_MEAN], a[A_LN2_RSTD], a[A_RES2], w[LN2W], w[LN2B], BT, C, dt, s);
  zo_model_linear_forward(m, first + FCW, first + FCB, a[A_FCH], a[A_LN2], BT, C, 4 * C, s);
  be->gelu_forward(a[A_FCH_GELU], a[A_FCH], nbt * 4 * (size_t)C, dt, s);
  if (!output) return;
  zo_model_linear_forward(m, first + FCPROJW, first + FCPROJB, a[A_RES3], a[A_FCH_GELU], BT, 4 * C, C, s);
  zo_arch_dropout(m, a[A_RES3], a[A_RES3], nbt * (size_t)C, ZO_DROP_RESID_MLP, l, s);
  be->residual_forward(a[A_RES3], a[A_RES3], a[A_RES2], nbt * (size_t)C, dt, s);
}

static void gpt2_block_backward(struct zo_model *m, int l, int B, int T, zo_stream_t s) {
  zo_backend_t be = m->backend;
  const int C = m->cfg.n_embd, NH = m->cfg.n_head, BT = B * T;
  const size_t nbt = (size_t)BT;
  const enum zo_dtype dt = m->dtype;
  const int first = zo_arch_block_tensor(&m->table, l, 0);
  void *const *w = m->pv + first;
  float *const *dw = m->gv + first;
  void *const *a = m->acts[l];
  void *const *sc = m->scratch;
  const void *residual_in = zo_model_block_input(m, l);
  /* dresidual holds d(res3) here; the MLP branch adds its part of d(res2).
   * A branch's dropout sends its mask through a copy (the free (B,T,C) or
   * qkv scratch): dresidual itself goes on undropped. */
  const void *dmlp = zo_arch_dropout(m, sc[S_DBTC], sc[S_DRESIDUAL], nbt * (size_t)C, ZO_DROP_RESID_MLP, l, s);
  zo_model_linear_backward(m, first + FCPROJW, first + FCPROJB, sc[S_DFCH], dmlp, a[A_FCH_GELU], BT, 4 * C, C, s);
  be->gelu_backward(sc[S_DFCH], a[A_FCH], sc[S_DFCH], nbt * 4 * (size_t)C, dt, s);
  zo_model_linear_backward(m, first + FCW, first + FCB, sc[S_DBTC], sc[S_DFCH], a[A_LN2], BT, C, 4 * C, s);
  be->layernorm_backward(sc[S_DRESIDUAL], dw[LN2W], dw[LN2B], sc[S_DBTC], a[A_RES2], w[LN2W], a[A_LN2_MEAN],
                         a[A_LN2_RSTD], BT, C, dt, s);
  /* dresidual is now d(res2); the attention branch adds its part of d(residual_in). */
  const void *dattn = zo_arch_dropout(m, sc[S_DQKV], sc[S_DRESIDUAL], nbt * (size_t)C, ZO_DROP_RESID_ATTN, l, s);
  zo_model_linear_backward(m, first + ATTPROJW, first + ATTPROJB, sc[S_DBTC], dattn, a[A_ATTY], BT, C, C, s);
  zo_arch_dropout(m, sc[S_DBTC], sc[S_DBTC], nbt * (size_t)C, ZO_DROP_ATTN, l, s);
  be->attention_backward(sc[S_DQKV], sc[S_DATT], sc[S_DBTC], a[A_QKV], a[A_ATT], B, T, NH, NH, C / NH, dt, s);
  zo_model_linear_backward(m, first + QKVW, first + QKVB, sc[S_DBTC], sc[S_DQKV], a[A_LN1], BT, C, 3 * C, s);
  be->layernorm_backward(sc[S_DRESIDUAL], dw[LN1W], dw[LN1B], sc[S_DBTC], residual_in, w[LN1W], a[A_LN1_MEAN],
                         a[A_LN1_RSTD], BT, C, dt, s);
}

/* ln_f: the last two tensors of the table. */
static void gpt2_final_forward(struct zo_model *m, const void *x, int B, int T, zo_stream_t s) {
  const int n = m->table.n_tensors;
  m->backend->layernorm_forward(m->fin[F_LNF], m->fin[F_MEAN], m->fin[F_RSTD], x, m->pv[n - 2], m->pv[n - 1], B * T,
                                m->cfg.n_embd, m->dtype, s);
}

static void gpt2_final_backward(struct zo_model *m, const void *x, int B, int T, zo_stream_t s) {
  const int n = m->table.n_tensors;
  m->backend->layernorm_backward(m->scratch[S_DRESIDUAL], m->gv[n - 2], m->gv[n - 1], m->scratch[S_DBTC], x,
                                 m->pv[n - 2], m->fin[F_MEAN], m->fin[F_RSTD], B * T, m->cfg.n_embd, m->dtype, s);
}

static int gpt2_head_tensor(const struct zo_model_config *cfg) {
  (void)cfg;
  return WTE;
}

/* GPT-2's: N(0, 0.02) for matrices and embeddings, N(0, 0.02 / sqrt(2 L))
 * for the residual projections, unit LayerNorm weights, zero biases, zero
 * padded vocabulary rows (their logits are never used and their gradients
 * are zero, so they stay zero through training). */
static struct zo_init_spec gpt2_init_tensor(const struct zo_model_config *cfg, const struct zo_tensor_info *ti,
                                            int i) {
  const int rows = ti->ndim == 2 ? ti->shape[0] : (int)ti->numel;
  if (ti->ndim == 2) {
    const bool proj = strstr(ti->name, "c_proj.weight") != NULL;
    return (struct zo_init_spec){.kind = ZO_INIT_NORMAL, .std = proj ? 0.02 / sqrt(2.0 * cfg->n_layer) : 0.02,
                                 .zero_from_row = i == WTE ? cfg->vocab_size : rows};
  }
  const char *leaf = strrchr(ti->name, '.');
  return (struct zo_init_spec){.kind = strcmp(leaf, ".weight") == 0 ? ZO_INIT_ONES : ZO_INIT_ZEROS,
                               .zero_from_row = rows};
}

static double gpt2_flops_per_token(const struct zo_model_config *cfg, int T) {
  /* 6 flops per matmul weight per token (forward 2, backward 4), plus causal
   * attention: QK^T and AV over on average T/2 keys, 2 flops each, x3. */
  const double C = cfg->n_embd, L = cfg->n_layer;
  double matmul_params = L * 12.0 * C * C + (double)cfg->padded_vocab_size * C;
  return 6.0 * matmul_params + 6.0 * L * (double)T * C;
}

/* Every tensor is one Hugging Face tensor of the same name: block matrices
 * transposed (Conv1D), wte without its padded rows. */
static int gpt2_hf_tensors(const struct zo_model *m, struct zo_hf_tensor *out) {
  const struct zo_tensor_table *t = &m->table;
  for (int i = 0; out && i < t->n_tensors; i++) {
    const struct zo_tensor_info *ti = &t->tensors[i];
    struct zo_hf_tensor *h = &out[i];
    snprintf(h->name, sizeof h->name, "%s", ti->name);
    h->tensor = i;
    h->row0 = 0;
    h->rows = i == WTE ? m->cfg.vocab_size : ti->shape[0];
    h->transpose = ti->hf_transposed;
    h->ndim = ti->ndim;
    h->shape[0] = h->transpose ? ti->shape[1] : h->rows;
    h->shape[1] = h->transpose ? ti->shape[0] : ti->shape[1];
  }
  return t->n_tensors;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The tied head and Hugging Face's attention-mask buffers (the causal mask
 * "h.N.attn.bias" and "h.N.attn.masked_bias" in the published GPT-2 files)
 * carry no weights of ours. */
static bool gpt2_hf_ignored(const struct zo_model_config *cfg, const char *name) {
  (void)cfg;
  return strcmp(name, "lm_head.weight") == 0 || ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
}

/* The published GPT-2 files name tensors without the "transformer." prefix. */
static const char *gpt2_hf_alias(const char *name, char *buf, size_t size) {
  if (strncmp(name, "transformer.", 12) == 0) return name + 12;
  snprintf(buf, size, "transformer.%s", name);
  return buf;
}

static json_t *gpt2_hf_config(const struct zo_model_config *c) {
  const struct zo_family *f = zo_family_of(ZO_FAMILY_GPT2);
  return json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:n, s:s, s:f, s:f, s:f, s:f, "
                   "s:f, s:b, s:s, s:s}",
                   "architectures", f->architecture, "model_type", f->model_type, "vocab_size", c->vocab_size,
                   "n_positions", c->max_seq_len, "n_ctx", c->max_seq_len, "n_embd", c->n_embd, "n_layer",
                   c->n_layer, "n_head", c->n_head, "n_inner", "activation_function", "gelu_new", "resid_pdrop",
                   0.0, "embd_pdrop", 0.0, "attn_pdrop", 0.0, "layer_norm_epsilon", 1e-5, "initializer_range",
                   0.02, "tie_word_embeddings", 1, "torch_dtype", "float32", "zoffload_version", "0.1.0");
}

/* GPT2Config's key or its attribute_map alias (hidden_size for n_embd and
 * the like): transformers takes either; both given must agree. */
static int gpt2_size(json_t *j, const char *key, const char *alias, const char *p, long *out) {
  json_t *a = json_object_get(j, key), *b = json_object_get(j, alias);
  if (a && b && !json_equal(a, b)) {
    char *x = json_dumps(a, JSON_ENCODE_ANY | JSON_COMPACT), *y = json_dumps(b, JSON_ENCODE_ANY | JSON_COMPACT);
    int err = zo_error(-EINVAL, "%s: %s = %s and %s = %s disagree (two spellings of one GPT2Config setting)", p, key,
                       x ? x : "?", alias, y ? y : "?");
    free(x);
    free(y);
    return err;
  }
  return zo_arch_json_size(j, a || !b ? key : alias, p, out);
}

/* The keys of GPT2Config whose other values change the mathematics: the
 * engine's LayerNorm epsilon 1e-5, GELU's tanh approximation, an MLP four
 * times the width. */
static int gpt2_fixed_keys(json_t *j, const char *p, long C) {
  double eps = 1e-5;
  int err = zo_arch_json_positive(j, "layer_norm_epsilon", p, eps, &eps);
  if (err) return err;
  if (eps != 1e-5) return zo_error(-ENOTSUP, "%s: layer_norm_epsilon = %g: only 1e-05 is implemented", p, eps);
  json_t *act = json_object_get(j, "activation_function");
  const char *a = json_string_value(act);
  if (act && !json_is_null(act) && (!a || (strcmp(a, "gelu_new") != 0 && strcmp(a, "gelu_pytorch_tanh") != 0)))
    return zo_error(-ENOTSUP, "%s: activation_function = %s: \"gelu_new\" (GELU, tanh approximation) is "
                              "implemented", p, a ? a : "(not a string)");
  json_t *inner = json_object_get(j, "n_inner");
  if (inner && !json_is_null(inner) && (!json_is_integer(inner) || json_integer_value(inner) != 4 * C)) {
    char *v = json_dumps(inner, JSON_ENCODE_ANY | JSON_COMPACT);
    err = zo_error(-ENOTSUP, "%s: n_inner = %s: null or %ld (4 x n_embd) is needed, other MLP widths are not "
                             "implemented", p, v ? v : "?", 4 * C);
    free(v);
  }
  return err;
}

static int gpt2_hf_config_parse(json_t *j, const char *p, struct zo_model_config *cfg) {
  long L = 0, NH = 0, C = 0, V = 0, maxT = 0;
  int err = gpt2_size(j, "n_layer", "num_hidden_layers", p, &L);
  if (!err) err = gpt2_size(j, "n_head", "num_attention_heads", p, &NH);
  if (!err) err = gpt2_size(j, "n_embd", "hidden_size", p, &C);
  if (!err) err = zo_arch_json_size(j, "vocab_size", p, &V);
  if (!err) err = gpt2_size(j, "n_positions", "max_position_embeddings", p, &maxT);
  if (!err) err = gpt2_fixed_keys(j, p, C);
  if (err) return err;
  *cfg = (struct zo_model_config){.arch = ZO_ARCH_GPT2, .family = ZO_FAMILY_GPT2, .n_layer = (int)L,
                                  .n_head = (int)NH, .n_embd = (int)C,
                                  .vocab_size = (int)V, .max_seq_len = (int)maxT};
  if (!err) err = zo_arch_json_prob(j, "embd_pdrop", p, &cfg->embd_pdrop);
  if (!err) err = zo_arch_json_prob(j, "attn_pdrop", p, &cfg->attn_pdrop);
  if (!err) err = zo_arch_json_prob(j, "resid_pdrop", p, &cfg->resid_pdrop);
  return err;
}

const struct zo_arch zo_arch_gpt2 = {
    .id = ZO_ARCH_GPT2,
    .name = "GPT-2",
    .config_check = gpt2_config_check,
    .build_table = gpt2_build_table,
    .acts = gpt2_acts,
    .act_out = A_RES3,
    .fin = gpt2_fin,
    .scratch = gpt2_scratch,
    .embed_forward = gpt2_embed_forward,
    .embed_backward = gpt2_embed_backward,
    .block_forward = gpt2_block_forward,
    .block_backward = gpt2_block_backward,
    .final_forward = gpt2_final_forward,
    .final_backward = gpt2_final_backward,
    .head_tensor = gpt2_head_tensor,
    .init_tensor = gpt2_init_tensor,
    .flops_per_token = gpt2_flops_per_token,
    .hf_tensors = gpt2_hf_tensors,
    .hf_ignored = gpt2_hf_ignored,
    .hf_alias = gpt2_hf_alias,
    .hf_config = gpt2_hf_config,
    .hf_config_parse = gpt2_hf_config_parse,
};
