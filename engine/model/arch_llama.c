/* Llama as an architecture description (engine/model/arch.h): RMSNorm, rotary
 * position embeddings in Hugging Face's rotate-half layout on q and k,
 * grouped-query causal attention (query head h reads key/value head
 * h / (NH / NKV)), biases on q, k and v when configured (Qwen2), an RMSNorm
 * of each head of q and k before the rotary embedding when configured
 * (Qwen3's q_norm and k_norm, one (hs) weight each), over a
 * sliding window of the last W positions when
 * configured (Mistral), a SwiGLU MLP, no biases, pre-norm residual blocks, a
 * final RMSNorm and an LM head tied to the token embedding or its own.
 * Table: model.embed_tokens.weight (Vp, C); per block the tensors of enum
 * below, q, k and v fused into one projection ((NH + 2 NKV) hs, C) and gate
 * and up into one ((2 I), C) so each is one GEMM; model.norm.weight;
 * lm_head.weight (Vp, C) when untied. Hugging Face stores q_proj, k_proj,
 * v_proj, gate_proj and up_proj apart (nn.Linear (out, in), no transpose):
 * each is a row range of a fused tensor here; Phi-3 stores qkv_proj and
 * gate_up_proj fused as we do. Rotary angles follow
 * transformers' LlamaRotaryEmbedding in float32 (inv_freq = 1 /
 * theta^(2i / hs), angle = position * inv_freq), with rope_scaling "llama3"
 * (Llama 3.1 and 3.2) applied to inv_freq; cos and sin are two constant
 * (maxT, hs / 2) tables. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "arch.h"
#include "family.h"
#include "linear.h"

/* The named slots of a block, in table order: the six every Llama-family
 * block has, then the optional ones (QKV_BIAS: Qwen2's, with cfg->qkv_bias;
 * Q_NORM, K_NORM: Qwen3's, with cfg->qk_norm). */
enum slot { IN_NORM, QKV, O_PROJ, POST_NORM, GATE_UP, DOWN, QKV_BIAS, Q_NORM, K_NORM, N_SLOTS };

/* Where each slot's tensor is in a block of configuration c: at[slot] its
 * index from the block's first tensor, -1 when the block has none; n the
 * block's tensors. Every use of a block tensor goes through it, so an
 * optional tensor may sit anywhere in the block. */
struct block_map {
  int at[N_SLOTS];
  int n;
};

static bool slot_present(const struct zo_model_config *c, enum slot s) {
  if (s == QKV_BIAS) return c->qkv_bias;
  return s == Q_NORM || s == K_NORM ? c->qk_norm : true;
}

static struct block_map block_map(const struct zo_model_config *c) {
  struct block_map b = {.n = 0};
  for (int s = 0; s < N_SLOTS; s++) b.at[s] = slot_present(c, (enum slot)s) ? b.n++ : -1;
  return b;
}

/* Tensors of one block. */
static int n_block(const struct zo_model_config *c) { return block_map(c).n; }

/* Table index of slot s of the block whose first tensor is first, -1 when absent. */
static int slot_tensor(const struct block_map *b, int first, enum slot s) {
  return b->at[s] < 0 ? -1 : first + b->at[s];
}
enum { EMBED = 0 };
/* Kept activations of one block; the last two only with q/k norms (q and k
 * before them, (NH + NKV) hs per token, and their rstd). */
enum { A_LN1, A_LN1_RSTD, A_QKV, A_ATTY, A_ATT, A_RES2, A_LN2, A_LN2_RSTD, A_GU, A_ACT, A_RES3, A_QK, A_QK_RSTD,
       N_ACTS };
/* Backward scratch. */
enum { S_DRESIDUAL, S_DBTC, S_DQKV, S_DGU, S_DACT, S_DATT, N_SCRATCH };
/* The final norm's buffers. */
enum { F_OUT, F_RSTD, N_FIN };
/* Constant tables. */
enum { C_COS, C_SIN, N_CONSTS };

/* head_dim, or n_embd / n_head where no check has filled it (callers may
 * hand an unchecked configuration to the planner's functions). */
static int head_size(const struct zo_model_config *c) { return c->head_dim ? c->head_dim : c->n_embd / c->n_head; }
/* The attention output's width (o_proj's input): NH head_dim. */
static int att_width(const struct zo_model_config *c) { return c->n_head * head_size(c); }
static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }
static int qkv_rows(const struct zo_model_config *c) { return (c->n_head + 2 * c->n_kv_head) * head_size(c); }
/* q and k's part of a qkv row: (NH + NKV) hs. */
static int qk_width(const struct zo_model_config *c) { return (c->n_head + c->n_kv_head) * head_size(c); }

static int llama_config_check(struct zo_model_config *cfg) {
  if (cfg->n_kv_head == 0) cfg->n_kv_head = cfg->n_head;
  if (cfg->n_kv_head < 1 || cfg->n_head % cfg->n_kv_head != 0)
    return zo_error(-EINVAL, "model.num_key_value_heads = %d: must divide model.n_head = %d", cfg->n_kv_head,
                    cfg->n_head);
  if (cfg->head_dim == 0) cfg->head_dim = cfg->n_embd / cfg->n_head;
  if (cfg->head_dim < 2 || cfg->head_dim % 2 != 0)
    return zo_error(-EINVAL, "head_dim = %d (model.head_dim, else model.n_embd / model.n_head): the rotary "
                             "embedding needs an even head size", cfg->head_dim);
  if (cfg->intermediate_size < 1)
    return zo_error(-EINVAL, "model.intermediate_size = %d: Llama needs its MLP width (for example 11008 for "
                             "a 7B model)", cfg->intermediate_size);
  if (cfg->sliding_window < 0)
    return zo_error(-EINVAL, "sliding_window = %d: a window of at least one position, or 0 for none",
                    cfg->sliding_window);
  if (cfg->has_padding_idx && (cfg->padding_idx < 0 || cfg->padding_idx >= cfg->vocab_size))
    return zo_error(-EINVAL, "pad_token_id = %d (model.pad_token_id, or config.json's pad_token_id): the "
                             "embedding's padding index must be a token id in [0, %d), or none (-1 in "
                             "model.pad_token_id, null in config.json)", cfg->padding_idx, cfg->vocab_size);
  if (cfg->rms_norm_eps == 0.0) cfg->rms_norm_eps = 1e-5;
  if (cfg->rope_theta == 0.0) cfg->rope_theta = 10000.0;
  if (!(cfg->rms_norm_eps > 0.0) || !(cfg->rope_theta > 0.0))
    return zo_error(-EINVAL, "model.rms_norm_eps = %g, model.rope_theta = %g: both must be positive",
                    cfg->rms_norm_eps, cfg->rope_theta);
  if (cfg->rope_scaling_factor != 0.0 &&
      !(cfg->rope_scaling_factor >= 1.0 && cfg->rope_low_freq_factor > 0.0 &&
        cfg->rope_high_freq_factor > cfg->rope_low_freq_factor && cfg->rope_original_max_seq_len > 0))
    return zo_error(-EINVAL, "rope_scaling (llama3): factor %g >= 1, 0 < low_freq_factor %g < high_freq_factor "
                             "%g and original_max_position_embeddings %d > 0 are needed",
                    cfg->rope_scaling_factor, cfg->rope_low_freq_factor, cfg->rope_high_freq_factor,
                    cfg->rope_original_max_seq_len);
  return 0;
}

static int llama_build_table(const struct zo_model_config *cfg, struct zo_tensor_table *t) {
  const int L = cfg->n_layer, C = cfg->n_embd, I = cfg->intermediate_size;
  const struct block_map bm = block_map(cfg);
  const int nb = bm.n;
  int err = zo_arch_table_alloc(t, 3 + nb * L, L);
  if (err) return err;
  size_t off = 0;
  char name[ZO_TENSOR_NAME_MAX];
  zo_arch_table_add(t, &off, "model.embed_tokens.weight", -1, cfg->padded_vocab_size, C);
  t->head_tensors = 1;
  t->embed_alone = !cfg->tie_embeddings;
  t->block_tensors = nb;
  for (int l = 0; l < L; l++) {
    t->layer_offset[l] = off;
    const struct { const char *suffix; int rows, cols; } block[N_SLOTS] = {
        [IN_NORM] = {"input_layernorm.weight", C, 0},
        [QKV] = {"self_attn.qkv_proj.weight", qkv_rows(cfg), C},
        [O_PROJ] = {"self_attn.o_proj.weight", C, att_width(cfg)},
        [POST_NORM] = {"post_attention_layernorm.weight", C, 0},
        [GATE_UP] = {"mlp.gate_up_proj.weight", 2 * I, C},
        [DOWN] = {"mlp.down_proj.weight", C, I},
        [QKV_BIAS] = {"self_attn.qkv_proj.bias", qkv_rows(cfg), 0},
        [Q_NORM] = {"self_attn.q_norm.weight", head_size(cfg), 0},
        [K_NORM] = {"self_attn.k_norm.weight", head_size(cfg), 0},
    };
    for (int k = 0; k < nb; k++)
      for (int sl = 0; sl < N_SLOTS; sl++) {
        if (bm.at[sl] != k) continue;
        snprintf(name, sizeof name, "model.layers.%d.%s", l, block[sl].suffix);
        zo_arch_table_add(t, &off, name, l, block[sl].rows, block[sl].cols);
      }
    if (l == 0) t->layer_numel = off - t->layer_offset[0];
  }
  zo_arch_table_add(t, &off, "model.norm.weight", -1, C, 0);
  if (!cfg->tie_embeddings) zo_arch_table_add(t, &off, "lm_head.weight", -1, cfg->padded_vocab_size, C);
  t->numel = off;
  return 0;
}

static int llama_acts(const struct zo_model_config *cfg, int T, struct zo_arch_buf *out) {
  const size_t C = (size_t)cfg->n_embd, NH = (size_t)cfg->n_head, I = (size_t)cfg->intermediate_size;
  const struct zo_arch_buf a[N_ACTS] = {
      [A_LN1] = {"activations (input norm)", C, false},
      [A_LN1_RSTD] = {"activations (input norm rstd)", 1, true},
      [A_QKV] = {"activations (qkv, rotated)", (size_t)qkv_rows(cfg), false},
      [A_ATTY] = {"activations (attention out)", (size_t)att_width(cfg), false},
      [A_ATT] = {"activations (attention probabilities)", NH * (size_t)T, false},
      [A_RES2] = {"activations (residual)", C, false},
      [A_LN2] = {"activations (post-attention norm)", C, false},
      [A_LN2_RSTD] = {"activations (post-attention norm rstd)", 1, true},
      [A_GU] = {"activations (mlp gate, up)", 2 * I, false},
      [A_ACT] = {"activations (mlp swiglu)", I, false},
      [A_RES3] = {"activations (block output)", C, false},
      [A_QK] = {"activations (q, k before their norms)", (size_t)qk_width(cfg), false},
      [A_QK_RSTD] = {"activations (q, k norm rstd)", NH + (size_t)cfg->n_kv_head, true},
  };
  memcpy(out, a, sizeof a);
  return cfg->qk_norm ? N_ACTS : A_QK;
}

static int llama_fin(const struct zo_model_config *cfg, struct zo_arch_buf *out) {
  const struct zo_arch_buf f[N_FIN] = {
      [F_OUT] = {"activations (final norm)", (size_t)cfg->n_embd, false},
      [F_RSTD] = {"activations (final norm rstd)", 1, true},
  };
  memcpy(out, f, sizeof f);
  return N_FIN;
}

static int llama_scratch(const struct zo_model_config *cfg, int T, struct zo_arch_buf *out) {
  const size_t C = (size_t)cfg->n_embd, NH = (size_t)cfg->n_head, I = (size_t)cfg->intermediate_size;
  const struct zo_arch_buf s[N_SCRATCH] = {
      [S_DRESIDUAL] = {"backward scratch (residual grad)", C, false},
      [S_DBTC] = {"backward scratch (B,T,C)", max_sz(C, (size_t)att_width(cfg)), false},
      [S_DQKV] = {"backward scratch (qkv grad)", max_sz((size_t)qkv_rows(cfg), C), false},
      [S_DGU] = {"backward scratch (mlp gate, up grad)", 2 * I, false},
      [S_DACT] = {"backward scratch (mlp swiglu grad)", I, false},
      [S_DATT] = {"backward scratch (attention grad)", NH * (size_t)T, false},
  };
  memcpy(out, s, sizeof s);
  return N_SCRATCH;
}

static int llama_consts(const struct zo_model_config *cfg, struct zo_arch_const *out) {
  const size_t n = (size_t)cfg->max_seq_len * (size_t)(head_size(cfg) / 2);
  out[C_COS] = (struct zo_arch_const){"workspace (rotary cos)", n};
  out[C_SIN] = (struct zo_arch_const){"workspace (rotary sin)", n};
  return N_CONSTS;
}

/* inv_freq as transformers computes it in float32, then Llama 3's
 * frequency-dependent scaling when configured (its _compute_llama3_parameters). */
static float inv_freq(const struct zo_model_config *c, int i) {
  const int hs = head_size(c);
  const float f = 1.0f / powf((float)c->rope_theta, (float)(2 * i) / (float)hs);
  if (c->rope_scaling_factor == 0.0) return f;
  const double factor = c->rope_scaling_factor, lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor;
  const double old = c->rope_original_max_seq_len;
  const double low_wavelen = old / lo, high_wavelen = old / hi, wavelen = 2.0 * M_PI / (double)f;
  if (wavelen < high_wavelen) return f;
  if (wavelen > low_wavelen) return (float)((double)f / factor);
  const double smooth = (old / wavelen - lo) / (hi - lo);
  return (float)((1.0 - smooth) * (double)f / factor + smooth * (double)f);
}

static void llama_consts_fill(const struct zo_model_config *cfg, int which, float *host) {
  const int h2 = head_size(cfg) / 2;
  for (int i = 0; i < h2; i++) {
    const float f = inv_freq(cfg, i);
    for (int t = 0; t < cfg->max_seq_len; t++) {
      const float angle = (float)t * f; /* float32, as torch's outer product */
      host[(size_t)t * (size_t)h2 + (size_t)i] = (float)(which == C_COS ? cos((double)angle) : sin((double)angle));
    }
  }
}

static void llama_embed_forward(struct zo_model *m, int B, int T, zo_stream_t s) {
  /* With the weights on the host the hooks gathered the rows into encoded. */
  if (!m->layout.embed_params_host)
    m->backend->encoder_forward(m->encoded, m->inputs, m->pv[EMBED], NULL, B, T, m->cfg.n_embd, m->dtype, s);
  zo_arch_dropout(m, m->encoded, m->encoded, (size_t)B * T * m->cfg.n_embd, ZO_DROP_EMBED, -1, s);
}

static void llama_embed_backward(struct zo_model *m, int B, int T, zo_stream_t s) {
  /* The residual stream's gradient is not read after this. */
  zo_arch_dropout(m, m->scratch[S_DRESIDUAL], m->scratch[S_DRESIDUAL], (size_t)B * T * m->cfg.n_embd, ZO_DROP_EMBED,
                  -1, s);
  if (m->layout.embed_grads_host) { /* summed on the host by the hooks */
    m->embed_dout = m->scratch[S_DRESIDUAL];
    return;
  }
  m->backend->encoder_backward(m->gv[EMBED], NULL, m->scratch[S_DRESIDUAL], m->inputs, B, T, m->cfg.n_embd,
                               zo_model_padding_idx(&m->cfg), m->dtype, s);
}

/* Qwen3's q_norm and k_norm over the heads inside the qkv rows (in place in
 * A_QKV, v untouched), q and k kept as they were in A_QK for the backward. */
static void qk_norm_forward(struct zo_model *m, const void *wq, const void *wk, void *const *a, int BT, zo_stream_t s) {
  zo_backend_t be = m->backend;
  const struct zo_model_config *c = &m->cfg;
  const int NH = c->n_head, NKV = c->n_kv_head, hs = head_size(c), Q = qkv_rows(c), QK = qk_width(c);
  const size_t e = zo_dtype_size(m->dtype), k_off = (size_t)NH * hs * e;
  const float eps = (float)c->rms_norm_eps;
  ZO_ASSERT(be->memcpy2d_async(a[A_QK], (size_t)QK * e, a[A_QKV], (size_t)Q * e, (size_t)QK * e, (size_t)BT, s) == 0);
  float *rstd = a[A_QK_RSTD];
  be->rmsnorm_heads_forward(a[A_QKV], rstd, a[A_QK], wq, eps, BT, NH, hs, Q, QK, m->dtype, s);
  be->rmsnorm_heads_forward((char *)a[A_QKV] + k_off, rstd + (size_t)BT * NH, (const char *)a[A_QK] + k_off, wk, eps,
                            BT, NKV, hs, Q, QK, m->dtype, s);
}

/* dqkv's q and k columns hold d(normed q, k) and receive d(q, k) (overwritten). */
static void qk_norm_backward(struct zo_model *m, const void *wq, const void *wk, float *dwq, float *dwk,
                             void *const *a, void *dqkv, int BT, zo_stream_t s) {
  zo_backend_t be = m->backend;
  const struct zo_model_config *c = &m->cfg;
  const int NH = c->n_head, NKV = c->n_kv_head, hs = head_size(c), Q = qkv_rows(c), QK = qk_width(c);
  const size_t k_off = (size_t)NH * hs * zo_dtype_size(m->dtype);
  const float *rstd = a[A_QK_RSTD];
  be->rmsnorm_heads_backward(dqkv, dwq, dqkv, a[A_QK], wq, rstd, BT, NH, hs, Q, QK, m->dtype, s);
  be->rmsnorm_heads_backward((char *)dqkv + k_off, dwk, (char *)dqkv + k_off, (const char *)a[A_QK] + k_off, wk,
                             rstd + (size_t)BT * NH, BT, NKV, hs, Q, QK, m->dtype, s);
}

static void llama_block_forward(struct zo_model *m, int l, int B, int T, bool output, zo_stream_t s) {
  zo_backend_t be = m->backend;
  const struct zo_model_config *c = &m->cfg;
  const int C = c->n_embd, NH = c->n_head, NKV = c->n_kv_head, hs = head_size(c), I = c->intermediate_size;
  const int BT = B * T, Q = qkv_rows(c);
  const float eps = (float)c->rms_norm_eps;
  const size_t nbt = (size_t)BT;
  const enum zo_dtype dt = m->dtype;
  const void *x = zo_model_block_input(m, l);
  const int first = zo_arch_block_tensor(&m->table, l, 0);
  const struct block_map bm = block_map(c);
  void *const *w = m->pv + first;
  void **a = m->acts[l];
  be->rmsnorm_forward(a[A_LN1], a[A_LN1_RSTD], x, w[bm.at[IN_NORM]], eps, BT, C, dt, s);
  zo_model_linear_forward(m, slot_tensor(&bm, first, QKV), slot_tensor(&bm, first, QKV_BIAS), a[A_QKV], a[A_LN1], BT,
                          C, Q, s);
  if (c->qk_norm) qk_norm_forward(m, w[bm.at[Q_NORM]], w[bm.at[K_NORM]], a, BT, s);
  be->rope_forward(a[A_QKV], m->consts[C_COS], m->consts[C_SIN], B, T, NH, NKV, hs, dt, s);
  if (c->sliding_window > 0 && c->sliding_window < T) /* its backward is attention_backward's */
    be->attention_window_forward(a[A_ATTY], a[A_ATT], a[A_QKV], B, T, NH, NKV, hs, c->sliding_window, dt, s);
  else
    be->attention_forward(a[A_ATTY], a[A_ATT], a[A_QKV], B, T, NH, NKV, hs, dt, s);
  /* Dropout in place: what the next op read is what its backward reads. */
  zo_arch_dropout(m, a[A_ATTY], a[A_ATTY], nbt * (size_t)att_width(c), ZO_DROP_ATTN, l, s);
  zo_model_linear_forward(m, slot_tensor(&bm, first, O_PROJ), -1, a[A_RES2], a[A_ATTY], BT, att_width(c), C, s);
  zo_arch_dropout(m, a[A_RES2], a[A_RES2], nbt * (size_t)C, ZO_DROP_RESID_ATTN, l, s);
  be->residual_forward(a[A_RES2], a[A_RES2], x, nbt * (size_t)C, dt, s);
  be->rmsnorm_forward(a[A_LN2], a[A_LN2_RSTD], a[A_RES2], w[bm.at[POST_NORM]], eps, BT, C, dt, s);
  zo_model_linear_forward(m, slot_tensor(&bm, first, GATE_UP), -1, a[A_GU], a[A_LN2], BT, C, 2 * I, s);
  be->swiglu_forward(a[A_ACT], a[A_GU], nbt, I, dt, s);
  if (!output) return;
  zo_model_linear_forward(m, slot_tensor(&bm, first, DOWN), -1, a[A_RES3], a[A_ACT], BT, I, C, s);
  zo_arch_dropout(m, a[A_RES3], a[A_RES3], nbt * (size_t)C, ZO_DROP_RESID_MLP, l, s);
  be->residual_forward(a[A_RES3], a[A_RES3], a[A_RES2], nbt * (size_t)C, dt, s);
}

static void llama_block_backward(struct zo_model *m, int l, int B, int T, zo_stream_t s) {
  zo_backend_t be = m->backend;
  const struct zo_model_config *c = &m->cfg;
  const int C = c->n_embd, NH = c->n_head, NKV = c->n_kv_head, hs = head_size(c), I = c->intermediate_size;
  const int BT = B * T, Q = qkv_rows(c);
  const size_t nbt = (size_t)BT;
  const enum zo_dtype dt = m->dtype;
  const int first = zo_arch_block_tensor(&m->table, l, 0);
  const struct block_map bm = block_map(c);
  void *const *w = m->pv + first;
  float *const *dw = m->gv + first;
  void *const *a = m->acts[l];
  void *const *sc = m->scratch;
  const void *x = zo_model_block_input(m, l);
  /* dresidual holds d(res3); the MLP branch adds its part of d(res2). A
   * branch's dropout sends its mask through a copy (the free (B,T,C) or qkv
   * scratch): dresidual itself goes on undropped. */
  const void *dmlp = zo_arch_dropout(m, sc[S_DBTC], sc[S_DRESIDUAL], nbt * (size_t)C, ZO_DROP_RESID_MLP, l, s);
  zo_model_linear_backward(m, slot_tensor(&bm, first, DOWN), -1, sc[S_DACT], dmlp, a[A_ACT], BT, I, C, s);
  be->swiglu_backward(sc[S_DGU], a[A_GU], sc[S_DACT], nbt, I, dt, s);
  zo_model_linear_backward(m, slot_tensor(&bm, first, GATE_UP), -1, sc[S_DBTC], sc[S_DGU], a[A_LN2], BT, C, 2 * I, s);
  be->rmsnorm_backward(sc[S_DRESIDUAL], dw[bm.at[POST_NORM]], sc[S_DBTC], a[A_RES2], w[bm.at[POST_NORM]],
                       a[A_LN2_RSTD], BT, C, dt, s);
  /* dresidual is now d(res2); the attention branch adds its part of d(x). */
  const void *dattn = zo_arch_dropout(m, sc[S_DQKV], sc[S_DRESIDUAL], nbt * (size_t)C, ZO_DROP_RESID_ATTN, l, s);
  zo_model_linear_backward(m, slot_tensor(&bm, first, O_PROJ), -1, sc[S_DBTC], dattn, a[A_ATTY], BT, att_width(c), C,
                           s);
  zo_arch_dropout(m, sc[S_DBTC], sc[S_DBTC], nbt * (size_t)att_width(c), ZO_DROP_ATTN, l, s);
  be->attention_backward(sc[S_DQKV], sc[S_DATT], sc[S_DBTC], a[A_QKV], a[A_ATT], B, T, NH, NKV, hs, dt, s);
  be->rope_backward(sc[S_DQKV], m->consts[C_COS], m->consts[C_SIN], B, T, NH, NKV, hs, dt, s);
  if (c->qk_norm)
    qk_norm_backward(m, w[bm.at[Q_NORM]], w[bm.at[K_NORM]], dw[bm.at[Q_NORM]], dw[bm.at[K_NORM]], a, sc[S_DQKV], BT,
                     s);
  zo_model_linear_backward(m, slot_tensor(&bm, first, QKV), slot_tensor(&bm, first, QKV_BIAS), sc[S_DBTC], sc[S_DQKV],
                           a[A_LN1], BT, C, Q, s);
  be->rmsnorm_backward(sc[S_DRESIDUAL], dw[bm.at[IN_NORM]], sc[S_DBTC], x, w[bm.at[IN_NORM]], a[A_LN1_RSTD], BT, C,
                       dt, s);
}

/* model.norm.weight: the first tensor after the blocks. */
static int norm_tensor(const struct zo_model *m) {
  return zo_arch_block_tensor(&m->table, m->cfg.n_layer, 0);
}

static void llama_final_forward(struct zo_model *m, const void *x, int B, int T, zo_stream_t s) {
  m->backend->rmsnorm_forward(m->fin[F_OUT], m->fin[F_RSTD], x, m->pv[norm_tensor(m)], (float)m->cfg.rms_norm_eps,
                              B * T, m->cfg.n_embd, m->dtype, s);
}

static void llama_final_backward(struct zo_model *m, const void *x, int B, int T, zo_stream_t s) {
  const int nt = norm_tensor(m);
  m->backend->rmsnorm_backward(m->scratch[S_DRESIDUAL], m->gv[nt], m->scratch[S_DBTC], x, m->pv[nt], m->fin[F_RSTD],
                               B * T, m->cfg.n_embd, m->dtype, s);
}

static int llama_head_tensor(const struct zo_model_config *cfg) {
  return cfg->tie_embeddings ? EMBED : 1 + n_block(cfg) * cfg->n_layer + 1;
}

/* N(0, 0.02) for every matrix (transformers' initializer_range), unit norm
 * weights, padded vocabulary rows (embedding, untied head) zero. */
static struct zo_init_spec llama_init_tensor(const struct zo_model_config *cfg, const struct zo_tensor_info *ti,
                                             int i) {
  const struct block_map bm = block_map(cfg);
  const bool bias = i >= 1 && i < 1 + bm.n * cfg->n_layer && bm.at[QKV_BIAS] >= 0 && (i - 1) % bm.n == bm.at[QKV_BIAS];
  if (bias) return (struct zo_init_spec){.kind = ZO_INIT_ZEROS, .zero_from_row = (int)ti->numel};
  if (ti->ndim != 2) return (struct zo_init_spec){.kind = ZO_INIT_ONES, .zero_from_row = (int)ti->numel};
  const bool vocab = i == EMBED || (!cfg->tie_embeddings && i == llama_head_tensor(cfg));
  return (struct zo_init_spec){.kind = ZO_INIT_NORMAL, .std = 0.02,
                               .zero_from_row = vocab ? cfg->vocab_size : ti->shape[0],
                               .has_zero_row = i == EMBED && cfg->has_padding_idx, .zero_row = cfg->padding_idx};
}

static double llama_flops_per_token(const struct zo_model_config *c, int T) {
  const double C = c->n_embd, L = c->n_layer, I = c->intermediate_size;
  const double A = att_width(c); /* C unless head_dim says otherwise */
  const double per_layer = C * qkv_rows(c) + C * A + 3.0 * C * I;
  const double matmul_params = L * per_layer + (double)c->padded_vocab_size * C;
  return 6.0 * matmul_params + 6.0 * L * (double)T * A;
}

static void hf_add(struct zo_hf_tensor *out, int *n, const char *name, int tensor, int row0, int rows, int cols) {
  if (out) {
    struct zo_hf_tensor *h = &out[*n];
    snprintf(h->name, sizeof h->name, "%s", name);
    h->tensor = tensor;
    h->row0 = row0;
    h->rows = rows;
    h->transpose = false;
    h->ndim = cols > 0 ? 2 : 1;
    h->shape[0] = rows;
    h->shape[1] = cols > 0 ? cols : 0;
  }
  (*n)++;
}

static int llama_hf_tensors(const struct zo_model *m, struct zo_hf_tensor *out) {
  const struct zo_model_config *c = &m->cfg;
  const int C = c->n_embd, V = c->vocab_size, I = c->intermediate_size, hs = head_size(c);
  const int q = c->n_head * hs, kv = c->n_kv_head * hs;
  const struct block_map bm = block_map(c);
  /* Phi-3's files hold q, k, v and gate, up fused, in our row order (its
   * attention slices q, k, v in turn; gate, up = gate_up.chunk(2)). */
  const bool phi3 = zo_family_resolve(c) == ZO_FAMILY_PHI3;
  int n = 0;
  char name[ZO_TENSOR_NAME_MAX];
  hf_add(out, &n, "model.embed_tokens.weight", EMBED, 0, V, C);
  for (int l = 0; l < c->n_layer; l++) {
    const int b = zo_arch_block_tensor(&m->table, l, 0);
#define NAME(s) (snprintf(name, sizeof name, "model.layers.%d.%s", l, s), name)
#define AT(s) slot_tensor(&bm, b, s)
    hf_add(out, &n, NAME("input_layernorm.weight"), AT(IN_NORM), 0, C, 0);
    if (phi3) {
      hf_add(out, &n, NAME("self_attn.qkv_proj.weight"), AT(QKV), 0, q + 2 * kv, C);
    } else {
      hf_add(out, &n, NAME("self_attn.q_proj.weight"), AT(QKV), 0, q, C);
      hf_add(out, &n, NAME("self_attn.k_proj.weight"), AT(QKV), q, kv, C);
      hf_add(out, &n, NAME("self_attn.v_proj.weight"), AT(QKV), q + kv, kv, C);
    }
    if (bm.at[QKV_BIAS] >= 0) {
      hf_add(out, &n, NAME("self_attn.q_proj.bias"), AT(QKV_BIAS), 0, q, 0);
      hf_add(out, &n, NAME("self_attn.k_proj.bias"), AT(QKV_BIAS), q, kv, 0);
      hf_add(out, &n, NAME("self_attn.v_proj.bias"), AT(QKV_BIAS), q + kv, kv, 0);
    }
    if (bm.at[Q_NORM] >= 0) {
      hf_add(out, &n, NAME("self_attn.q_norm.weight"), AT(Q_NORM), 0, hs, 0);
      hf_add(out, &n, NAME("self_attn.k_norm.weight"), AT(K_NORM), 0, hs, 0);
    }
    hf_add(out, &n, NAME("self_attn.o_proj.weight"), AT(O_PROJ), 0, C, att_width(c));
    hf_add(out, &n, NAME("post_attention_layernorm.weight"), AT(POST_NORM), 0, C, 0);
    if (phi3) {
      hf_add(out, &n, NAME("mlp.gate_up_proj.weight"), AT(GATE_UP), 0, 2 * I, C);
    } else {
      hf_add(out, &n, NAME("mlp.gate_proj.weight"), AT(GATE_UP), 0, I, C);
      hf_add(out, &n, NAME("mlp.up_proj.weight"), AT(GATE_UP), I, I, C);
    }
    hf_add(out, &n, NAME("mlp.down_proj.weight"), AT(DOWN), 0, C, I);
#undef AT
#undef NAME
  }
  hf_add(out, &n, "model.norm.weight", norm_tensor(m), 0, C, 0);
  if (!c->tie_embeddings) hf_add(out, &n, "lm_head.weight", llama_head_tensor(c), 0, V, C);
  return n;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Older files store the rotary inv_freq buffers; tied models may store
 * lm_head.weight (a copy of the embedding). */
static bool llama_hf_ignored(const struct zo_model_config *cfg, const char *name) {
  return ends_with(name, ".rotary_emb.inv_freq") || (cfg->tie_embeddings && strcmp(name, "lm_head.weight") == 0);
}

const struct zo_arch zo_arch_llama = {
    .id = ZO_ARCH_LLAMA,
    .name = "Llama",
    .config_check = llama_config_check,
    .build_table = llama_build_table,
    .acts = llama_acts,
    .act_out = A_RES3,
    .fin = llama_fin,
    .scratch = llama_scratch,
    .consts = llama_consts,
    .consts_fill = llama_consts_fill,
    .embed_forward = llama_embed_forward,
    .embed_backward = llama_embed_backward,
    .block_forward = llama_block_forward,
    .block_backward = llama_block_backward,
    .final_forward = llama_final_forward,
    .final_backward = llama_final_backward,
    .head_tensor = llama_head_tensor,
    .init_tensor = llama_init_tensor,
    .flops_per_token = llama_flops_per_token,
    .hf_tensors = llama_hf_tensors,
    .hf_ignored = llama_hf_ignored,
    .hf_config = zo_llama_hf_config,
    .hf_config_parse = zo_llama_hf_config_parse,
};
