/* The generic model (zo/model.h): device buffers carved from one arena, the
 * forward and backward drivers with their hooks, the chunked LM head with
 * cross-entropy, activation checkpointing, parameter upload and download.
 * What a layer computes comes from the architecture (engine/model/arch.h); this
 * file never names a tensor. Does not own optimizer state or data, and never
 * allocates device memory after init.
 * Backward keeps one residual-gradient buffer (scratch[0]): the norms'
 * backward ops accumulate into it, which is exactly the residual
 * connection's gradient. The LM head runs in row chunks (one chunk of logits
 * exists at a time); checkpointed blocks are recomputed with the forward's
 * own code (the architecture's block_forward).
 * Every carve is sized in the working dtype's element size (e) or fp32 (f),
 * by kind: working parameters and activations e, gradients, statistics,
 * losses, master weights, m, v and constants f. */
#include "zo/model.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo/cpu.h"
#include "zo/trace.h"
#include "arch.h"
#include "family.h"

const struct zo_arch *zo_arch_of(enum zo_model_arch arch) {
  switch (arch) {
  case ZO_ARCH_GPT2: return &zo_arch_gpt2;
  case ZO_ARCH_LLAMA: return &zo_arch_llama;
  }
  zo_abort(__FILE__, __LINE__, "unknown model architecture %d", (int)arch);
}

int zo_arch_hf_map(const struct zo_model_config *mc, struct zo_hf_tensor **out, int *n,
                   struct zo_tensor_table *table) {
  struct zo_model m;
  memset(&m, 0, sizeof m);
  m.cfg = *mc;
  m.arch = zo_arch_of(mc->arch);
  *out = NULL;
  int err = zo_model_build_table(&m.cfg, &m.table);
  if (err) return err;
  *n = m.arch->hf_tensors(&m, NULL);
  *out = calloc((size_t)*n + 1, sizeof **out);
  if (!*out) err = zo_error(-ENOMEM, "out of memory for the model's Hugging Face tensor map");
  else m.arch->hf_tensors(&m, *out);
  if (table && !err) *table = m.table;
  else zo_tensor_table_free(&m.table);
  return err;
}

const char *zo_model_arch_name(enum zo_model_arch arch) {
  return arch == ZO_ARCH_LLAMA ? "llama" : "gpt2";
}

int zo_model_config_check(struct zo_model_config *cfg) {
  if (cfg->arch != ZO_ARCH_GPT2 && cfg->arch != ZO_ARCH_LLAMA)
    return zo_error(-EINVAL, "model.arch = %d: must be \"gpt2\" or \"llama\"", (int)cfg->arch);
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
  int err = zo_arch_of(cfg->arch)->config_check(cfg);
  return err ? err : zo_family_check(cfg);
}

int zo_model_build_table(const struct zo_model_config *cfg, struct zo_tensor_table *t) {
  return zo_arch_of(cfg->arch)->build_table(cfg, t);
}

const struct zo_tensor_info *zo_tensor_table_find(const struct zo_tensor_table *t, const char *name) {
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

double zo_model_flops_per_token(const struct zo_model_config *cfg, int T) {
  return zo_arch_of(cfg->arch)->flops_per_token(cfg, T);
}

double zo_model_lora_flops_per_token(const struct zo_model_config *cfg, int T, size_t lora_numel) {
  /* The attention's part is linear in T: the count at T and 2T apart it. */
  const double f1 = zo_model_flops_per_token(cfg, T), attn = zo_model_flops_per_token(cfg, 2 * T) - f1;
  return attn + (f1 - attn) * 4.0 / 6.0 + 6.0 * (double)lora_numel;
}

const char *zo_model_describe(const struct zo_model_config *c, char *buf, size_t size) {
  char extra[128] = "";
  if (c->arch == ZO_ARCH_LLAMA)
    snprintf(extra, sizeof extra, ", %d key/value heads, MLP %d, %s head", c->n_kv_head, c->intermediate_size,
             c->tie_embeddings ? "tied" : "untied");
  if (c->arch == ZO_ARCH_LLAMA && c->sliding_window > 0)
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ", window %d", c->sliding_window);
  if (c->arch == ZO_ARCH_LLAMA && c->head_dim > 0 && c->head_dim * c->n_head != c->n_embd)
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ", head_dim %d", c->head_dim);
  if (c->arch == ZO_ARCH_LLAMA && c->qkv_bias)
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ", q/k/v biases");
  if (c->arch == ZO_ARCH_LLAMA && c->qk_norm)
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ", q/k norms");
  if (c->arch == ZO_ARCH_LLAMA && c->has_padding_idx)
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ", padding index %d", c->padding_idx);
  snprintf(buf, size, "%s, %d layers, %d heads, width %d, vocab %d (padded %d)%s", zo_arch_of(c->arch)->name,
           c->n_layer, c->n_head, c->n_embd, c->vocab_size, c->padded_vocab_size, extra);
  return buf;
}

/* ---- device layout -------------------------------------------------------- */

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

int zo_model_head_rows(const struct zo_model_config *cfg, int B, int T, const struct zo_model_layout *lo) {
  const size_t BT = (size_t)B * (size_t)T, row = (size_t)cfg->padded_vocab_size * zo_dtype_size(lo->dtype);
  size_t rows = lo->head_chunk_rows > 0 ? (size_t)lo->head_chunk_rows : ZO_MODEL_HEAD_CHUNK_BYTES / row;
  if (rows < 1) rows = 1;
  return (int)(rows < BT ? rows : BT);
}

int zo_model_head_pieces(const struct zo_tensor_table *t, int *rows) {
  if (rows) *rows = 0;
  if (!t->embed_alone || t->n_tensors < 1 || t->n_layer < 1) return 1;
  const struct zo_tensor_info *h = &t->tensors[t->n_tensors - 1]; /* the untied head, (Vp, C) */
  const size_t Vp = (size_t)h->shape[0], C = (size_t)h->shape[1];
  if (C == 0 || Vp * C <= t->layer_numel) return 1;
  const size_t r = t->layer_numel / C / 64 * 64;
  if (r < 64) return 1;
  if (rows) *rows = (int)r;
  return (int)((Vp + r - 1) / r);
}

/* The architecture's buffer list, carved for BT positions; skip (may be -1)
 * is left out (the output of a checkpointed block, carved apart). */
static void carve_bufs(struct carver *c, void **out, const struct zo_arch_buf *bufs, int n, size_t BT,
                       size_t e, enum zo_mem_category cat, int skip) {
  for (int i = 0; i < n; i++) {
    if (i == skip) continue;
    void *p = carve(c, BT * bufs[i].per_token * (bufs[i].f32 ? sizeof(float) : e), bufs[i].name, cat);
    if (out) out[i] = p;
  }
}

/* Training keeps every block's activations; inference keeps one block's and
 * reuses them for all blocks (a block's input is only read before its output
 * buffer is written), and has no gradients or backward scratch. With
 * activation checkpointing the first n blocks share one set (recomputed in
 * backward) and each keeps only its output, which is the next block's input;
 * with ckpt_on_host those outputs alternate between two input buffers
 * (ckpt_in, the first being the embedding output) and leave for the host,
 * except the last one, block n's input, which stays like any kept activation.
 * The logits hold one LM-head chunk. m's pointer arrays may be absent
 * (planning): nothing is stored then. */
static void layout(struct zo_model *m, const struct zo_model_config *cfg, const struct zo_tensor_table *t,
                   struct carver *c, int B, int T, const struct zo_model_layout *lo) {
  const struct zo_arch *a = zo_arch_of(cfg->arch);
  const size_t C = (size_t)cfg->n_embd, BT = (size_t)B * (size_t)T;
  const size_t f = sizeof(float), e = zo_dtype_size(lo->dtype), n_params = t->numel;
  const size_t resident = n_params - (size_t)t->n_layer * t->layer_numel;
  const bool training = lo->training;
  const int n_ckpt = training ? lo->ckpt_blocks : 0;
  const bool on_host = n_ckpt > 0 && lo->ckpt_on_host;
  int piece_rows = 0;
  const int pieces = training ? zo_model_head_pieces(t, &piece_rows) : 1;
  const size_t streamed = zo_model_streamed_head_numel(t, lo);
  const size_t res_p = resident - streamed - (zo_model_embed_params_host(t, lo) ? t->layer_offset[0] : 0);
  m->params = carve(c, (lo->param_slots ? res_p : n_params) * e, "parameters", ZO_MEM_PARAMS);
  for (int k = 0; k < lo->param_slots; k++) {
    void *p = carve(c, t->layer_numel * e, "parameter slot", ZO_MEM_BUFFERS);
    if (m->param_slots) m->param_slots[k] = p;
  }
  if (training && lo->master && !lo->frozen) m->master = carve(c, n_params * f, "master weights", ZO_MEM_MASTER);
  if (training && !lo->frozen) {
    const size_t res_g = resident - streamed - (zo_model_embed_grads_host(t, lo) ? t->layer_offset[0] : 0);
    m->grads = carve(c, (lo->grad_slots ? res_g : n_params) * f, "gradients", ZO_MEM_GRADS);
    if (lo->grad_accum) m->grads_acc = carve(c, n_params * f, "gradient accumulator", ZO_MEM_GRADS);
    for (int k = 0; k < lo->grad_slots; k++) {
      float *p = carve(c, t->layer_numel * f, "gradient slot", ZO_MEM_BUFFERS);
      if (m->grad_slots) m->grad_slots[k] = p;
    }
    if (lo->optimizer) {
      m->adam_m = carve(c, n_params * f, "AdamW m", ZO_MEM_ADAM_M);
      m->adam_v = carve(c, n_params * f, "AdamW v", ZO_MEM_ADAM_V);
    }
  }
  struct zo_arch_const consts[ZO_MODEL_MAX_BUFS];
  const int n_consts = a->consts ? a->consts(cfg, consts) : 0;
  for (int i = 0; i < n_consts; i++) m->consts[i] = carve(c, consts[i].numel * f, consts[i].name, ZO_MEM_WORKSPACE);
  const enum zo_mem_category A = ZO_MEM_ACTIVATIONS, W = ZO_MEM_WORKSPACE;
  m->inputs = carve(c, BT * sizeof(int32_t), "input tokens", A);
  m->targets = carve(c, BT * sizeof(int32_t), "target tokens", A);
  m->encoded = carve(c, BT * C * e, on_host ? "checkpoint input buffer 0 (embedding)" : "activations (embedding)", A);
  m->ckpt_in[0] = on_host ? m->encoded : NULL;
  m->ckpt_in[1] = on_host && n_ckpt > 1 ? carve(c, BT * C * e, "checkpoint input buffer 1", A) : NULL;
  struct zo_arch_buf acts[ZO_MODEL_MAX_BUFS];
  const int n_acts = a->acts(cfg, T, acts), out = a->act_out;
  void *shared[ZO_MODEL_MAX_BUFS] = {0};
  if (n_ckpt > 0) carve_bufs(c, shared, acts, n_acts, BT, e, A, out);
  for (int l = 0; l < cfg->n_layer; l++) {
    void **mine = m->acts ? m->acts[l] : NULL;
    if (!training && l > 0) {
      if (mine) memcpy(mine, m->acts[0], (size_t)n_acts * sizeof *mine);
      continue;
    }
    if (l < n_ckpt) {
      if (mine) memcpy(mine, shared, (size_t)n_acts * sizeof *mine);
      void *o;
      if (on_host && l < n_ckpt - 1)
        o = m->ckpt_in[(l + 1) % 2];
      else
        o = carve(c, BT * C * e, "activations (checkpoint: block output)", A);
      if (mine) mine[out] = o;
    } else {
      carve_bufs(c, mine, acts, n_acts, BT, e, A, -1);
    }
  }
  struct zo_arch_buf fin[ZO_MODEL_MAX_BUFS];
  carve_bufs(c, m->fin, fin, a->fin(cfg, fin), BT, e, A, -1);
  const size_t rows = (size_t)zo_model_head_rows(cfg, B, T, lo);
  const size_t Vp = (size_t)cfg->padded_vocab_size;
  if (pieces > 1) {
    m->logits = carve(c, BT * Vp * e, "logits (every row: the LM head in pieces)", A);
    m->head_tmp = carve(c, rows * (size_t)piece_rows * e, "logits (one piece of a chunk)", A);
    m->head_dx = carve(c, rows * C * e, "backward scratch (an LM head piece's d(final output))", W);
  } else {
    m->logits = carve(c, rows * Vp * e, "logits (one LM-head chunk)", A);
  }
  m->losses = carve(c, BT * f, "losses", A);
  /* The backend's per-stream scratch (CUDA: cuBLASLt workspaces), so that
   * nothing on the device lives outside the plan; none on the CPU. */
  for (int k = 0; lo->stream_workspace && k < (training ? ZO_MODEL_STREAM_WORKSPACES : 1); k++)
    m->stream_workspaces[k] = carve(c, lo->stream_workspace, "workspace (stream scratch)", W);
  if (!training) return;
  struct zo_arch_buf scratch[ZO_MODEL_MAX_BUFS];
  carve_bufs(c, m->scratch, scratch, a->scratch(cfg, T, scratch), BT, e, W, -1);
}

/* A model struct for counting only: its pointers are written, nothing stored. */
static size_t plan_layout(const struct zo_model_config *cfg, const struct zo_tensor_table *t, int B, int T,
                          const struct zo_model_layout *lo, size_t by_category[ZO_MEM_N_CATEGORIES]) {
  struct zo_model m = {0};
  struct carver c = {0};
  layout(&m, cfg, t, &c, B, T, lo);
  if (by_category) memcpy(by_category, c.by_category, sizeof c.by_category);
  return c.total;
}

size_t zo_model_device_plan(const struct zo_model_config *cfg_in, int B, int T, const struct zo_model_layout *lo,
                            size_t by_category[ZO_MEM_N_CATEGORIES]) {
  struct zo_model_config cfg = *cfg_in;
  struct zo_tensor_table t;
  if (zo_model_config_check(&cfg) || zo_model_build_table(&cfg, &t)) return 0;
  const size_t total = plan_layout(&cfg, &t, B, T, lo, by_category);
  zo_tensor_table_free(&t);
  return total;
}

size_t zo_model_device_bytes(const struct zo_model_config *cfg, int B, int T, bool training) {
  const struct zo_model_layout lo = {.training = training};
  return zo_model_device_plan(cfg, B, T, &lo, NULL);
}

/* ---- views -------------------------------------------------------------------- */

/* Views of block l's tensors in a buffer whose element 0 is table element
 * origin, e bytes per element (a block's own buffer starts at its layer
 * offset: origin is then that offset). */
static void block_views(const struct zo_tensor_table *t, void **views, void *base, size_t origin, size_t e, int l) {
  for (int k = 0; k < t->block_tensors; k++) {
    const int i = zo_arch_block_tensor(t, l, k);
    views[i] = (char *)base + (t->tensors[i].offset - origin) * e;
  }
}

void zo_model_stream_workspace(struct zo_model *m, int k, zo_stream_t stream) {
  ZO_ASSERT(k >= 0 && k < ZO_MODEL_STREAM_WORKSPACES && stream);
  if (!m->backend->stream_set_workspace) return;
  ZO_ASSERT(m->stream_workspaces[k]);
  m->backend->stream_set_workspace(stream, m->stream_workspaces[k]);
}

void zo_model_bind_block(struct zo_model *m, int l, void *params_base, float *grads_base) {
  ZO_ASSERT(l >= 0 && l < m->cfg.n_layer);
  const size_t off = m->table.layer_offset[l];
  if (params_base) block_views(&m->table, m->pv, params_base, off, m->esize, l);
  if (grads_base) block_views(&m->table, (void **)m->gv, grads_base, off, sizeof(float), l);
}

/* The resident tensors' views into a head buffer and a tail buffer (e bytes
 * per element; head holds table elements [0, head_numel), tail the tail range). */
static void resident_views(const struct zo_model *m, void **views, void *head, void *tail, size_t e) {
  const struct zo_tensor_table *t = &m->table;
  const size_t tail_off = t->numel - m->tail_numel;
  for (int i = 0; i < t->n_tensors; i++) {
    const struct zo_tensor_info *ti = &t->tensors[i];
    if (ti->layer >= 0) continue;
    if (ti->offset < m->head_numel)
      views[i] = head ? (char *)head + ti->offset * e : NULL;
    else if (ti->offset - tail_off >= m->res_tail) /* the LM head streamed through the slots */
      views[i] = NULL;
    else
      views[i] = (char *)tail + (ti->offset - tail_off) * e;
  }
}

void zo_model_bind_resident_grads(struct zo_model *m, float *head, float *tail) {
  resident_views(m, (void **)m->gv, head, tail, sizeof(float));
}

size_t zo_model_grads_numel(const struct zo_model *m) {
  if (m->layout.frozen) return 0;
  return m->layout.grad_slots ? m->res_ghead + m->res_tail : m->table.numel;
}

/* ---- init and free ---------------------------------------------------------------- */

/* The default context over the carved buffers, bound. */
static void default_ctx(struct zo_model *m) {
  struct zo_model_ctx *c = &m->ctx0;
  c->inputs = m->inputs;
  c->targets = m->targets;
  c->losses = m->losses;
  c->block_in[0] = m->encoded;
  for (int l = 0; l < m->cfg.n_layer; l++) c->block_in[l + 1] = m->acts[l][m->arch->act_out];
  c->dresidual = m->training ? m->scratch[0] : NULL;
  m->ctx = c;
}

static struct zo_model *init(const struct zo_model_config *cfg_in, zo_backend_t backend, int B, int T,
                             const struct zo_model_layout *lo) {
  const bool training = lo->training;
  struct zo_model_config cfg = *cfg_in;
  if (zo_model_config_check(&cfg)) return NULL;
  if (B < 1 || T < 1 || T > cfg.max_seq_len) {
    zo_error(-EINVAL, "micro-batch shape B=%d T=%d: need B >= 1 and 1 <= T <= model.max_seq_len = %d", B, T,
             cfg.max_seq_len);
    return NULL;
  }
  struct zo_model *m = calloc(1, sizeof *m);
  if (!m) {
    zo_error(-ENOMEM, "out of host memory allocating the model");
    return NULL;
  }
  m->cfg = cfg;
  m->arch = zo_arch_of(cfg.arch);
  m->backend = backend;
  m->B = B;
  m->T = T;
  m->training = training;
  m->layout = *lo;
  m->layout.stream_workspace = backend->stream_workspace_bytes;
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
  m->head_rows = zo_model_head_rows(&cfg, B, T, &m->layout);
  if (zo_model_build_table(&cfg, &m->table)) goto out_free;
  const int L = cfg.n_layer, NT = m->table.n_tensors;
  m->head_numel = m->table.layer_offset[0];
  m->tail_numel = m->table.numel - m->head_numel - (size_t)L * m->table.layer_numel;
  m->layout.embed_grads_host = zo_model_embed_grads_host(&m->table, &m->layout);
  m->res_ghead = m->layout.embed_grads_host ? 0 : m->head_numel;
  m->layout.embed_params_host = zo_model_embed_params_host(&m->table, &m->layout);
  m->res_phead = m->layout.embed_params_host ? 0 : m->head_numel;
  m->layout.head_stream = zo_model_head_streamed(&m->table, &m->layout);
  m->head_pieces = training ? zo_model_head_pieces(&m->table, &m->head_piece_rows) : 1;
  m->res_tail = m->tail_numel - zo_model_streamed_head_numel(&m->table, &m->layout);
  m->acts = calloc((size_t)L, sizeof *m->acts);
  void **act_store = calloc((size_t)L * ZO_MODEL_MAX_BUFS, sizeof *act_store);
  m->pv = calloc((size_t)NT, sizeof *m->pv);
  m->gv = calloc((size_t)NT, sizeof *m->gv);
  m->host_losses = calloc((size_t)B * (size_t)T, sizeof(float));
  m->ctx0.block_in = calloc((size_t)L + 1, sizeof *m->ctx0.block_in);
  m->param_slots = calloc((size_t)lo->param_slots + 1, sizeof *m->param_slots);
  m->grad_slots = calloc((size_t)lo->grad_slots + 1, sizeof *m->grad_slots);
  if (m->acts) m->acts[0] = act_store; /* owns the store (zo_model_free) */
  if (!m->acts || !act_store || !m->pv || !m->gv || !m->host_losses || !m->param_slots || !m->grad_slots ||
      !m->ctx0.block_in) {
    free(m->acts ? NULL : act_store);
    zo_error(-ENOMEM, "out of host memory allocating the model");
    goto out_free;
  }
  for (int l = 0; l < L; l++) m->acts[l] = act_store + (size_t)l * ZO_MODEL_MAX_BUFS;
  const size_t planned = plan_layout(&cfg, &m->table, B, T, &m->layout, NULL);
  if (zo_arena_init(&m->arena, backend, planned, "device")) goto out_free;
  struct carver c = {.arena = &m->arena};
  layout(m, &cfg, &m->table, &c, B, T, &m->layout);
  if (c.err) goto out_free;
  default_ctx(m);

  const bool pslots = m->layout.param_slots > 0, gslots = m->layout.grad_slots > 0;
  const size_t n_par = pslots ? m->res_phead + m->res_tail : m->table.numel;
  const size_t tail_off = m->table.numel - m->tail_numel;
  resident_views(m, m->pv, m->res_phead || !pslots ? m->params : NULL,
                 zo_model_at(m, m->params, pslots ? m->res_phead : tail_off), m->esize);
  if (!pslots)
    for (int l = 0; l < L; l++) block_views(&m->table, m->pv, m->params, 0, m->esize, l);
  if (backend->memset_async(m->params, 0, n_par * m->esize, NULL)) goto out_free;
  if (m->master && backend->memset_async(m->master, 0, m->table.numel * sizeof(float), NULL)) goto out_free;
  if (training && !m->layout.frozen) {
    const size_t n_grad = zo_model_grads_numel(m);
    zo_model_bind_resident_grads(m, m->res_ghead || !gslots ? m->grads : NULL,
                                 m->grads + (gslots ? m->res_ghead : tail_off));
    if (!gslots)
      for (int l = 0; l < L; l++) block_views(&m->table, (void **)m->gv, m->grads, 0, sizeof(float), l);
    if (backend->memset_async(m->grads, 0, n_grad * sizeof(float), NULL)) goto out_free;
  }
  /* Constant tables: computed on the host, uploaded once. */
  struct zo_arch_const consts[ZO_MODEL_MAX_BUFS];
  const int n_consts = m->arch->consts ? m->arch->consts(&cfg, consts) : 0;
  for (int i = 0; i < n_consts; i++) {
    float *host = malloc(consts[i].numel * sizeof *host);
    if (!host) {
      zo_error(-ENOMEM, "out of host memory for %s", consts[i].name);
      goto out_free;
    }
    m->arch->consts_fill(&cfg, i, host);
    int err = backend->memcpy_async(m->consts[i], host, consts[i].numel * sizeof *host, ZO_COPY_H2D, NULL);
    if (!err) err = backend->stream_synchronize(NULL);
    free(host);
    if (err) goto out_free;
  }
  if (backend->stream_synchronize(NULL)) goto out_free;
  return m;

out_free:
  zo_model_free(m);
  return NULL;
}

struct zo_model *zo_model_init(const struct zo_model_config *cfg, zo_backend_t backend, int B, int T) {
  const struct zo_model_layout lo = {.training = true};
  return init(cfg, backend, B, T, &lo);
}

struct zo_model *zo_model_init_layout(const struct zo_model_config *cfg, zo_backend_t backend, int B, int T,
                                      const struct zo_model_layout *layout) {
  return init(cfg, backend, B, T, layout);
}

struct zo_model *zo_model_init_inference(const struct zo_model_config *cfg, zo_backend_t backend, int B, int T) {
  const struct zo_model_layout lo = {.training = false};
  return init(cfg, backend, B, T, &lo);
}

void zo_model_free(struct zo_model *m) {
  if (!m) return;
  zo_arena_free(&m->arena);
  zo_tensor_table_free(&m->table);
  if (m->acts) free(m->acts[0]);
  free(m->acts);
  zo_model_ctx_free(&m->ctx0);
  free(m->pv);
  free(m->gv);
  free(m->host_losses);
  free(m->param_slots);
  free(m->grad_slots);
  free(m);
}

/* ---- parameter copies ------------------------------------------------------------- */

/* Elements per host staging chunk of a converting upload or download. */
#define ZO_MODEL_STAGE_NUMEL ((size_t)1 << 20)

int zo_model_upload_params(struct zo_model *m, const float *host_params) {
  ZO_ASSERT(m->layout.param_slots == 0);
  zo_backend_t be = m->backend;
  const size_t n = m->table.numel;
  int err = 0;
  if (m->master) err = be->memcpy_async(m->master, host_params, n * sizeof(float), ZO_COPY_H2D, NULL);
  if (!err && m->dtype == ZO_F32)
    err = be->memcpy_async(m->params, host_params, n * sizeof(float), ZO_COPY_H2D, NULL);
  if (err || m->dtype == ZO_F32) return err ? err : be->stream_synchronize(NULL);
  void *stage = malloc(ZO_MODEL_STAGE_NUMEL * m->esize);
  if (!stage) return zo_error(-ENOMEM, "out of host memory staging the parameter upload");
  for (size_t i = 0; i < n && !err; i += ZO_MODEL_STAGE_NUMEL) {
    const size_t k = n - i < ZO_MODEL_STAGE_NUMEL ? n - i : ZO_MODEL_STAGE_NUMEL;
    zo_cpu_cast(stage, m->dtype, host_params + i, ZO_F32, k);
    err = be->memcpy_async(zo_model_at(m, m->params, i), stage, k * m->esize, ZO_COPY_H2D, NULL);
    if (!err) err = be->stream_synchronize(NULL); /* before the stage is rewritten */
  }
  free(stage);
  return err;
}

int zo_model_download_params(const struct zo_model *m, float *host_params) {
  ZO_ASSERT(m->layout.param_slots == 0);
  zo_backend_t be = m->backend;
  const size_t n = m->table.numel;
  if (m->master || m->dtype == ZO_F32) {
    int err = be->memcpy_async(host_params, m->master ? m->master : m->params, n * sizeof(float), ZO_COPY_D2H,
                               NULL);
    return err ? err : be->stream_synchronize(NULL);
  }
  void *stage = malloc(ZO_MODEL_STAGE_NUMEL * m->esize);
  if (!stage) return zo_error(-ENOMEM, "out of host memory staging the parameter download");
  int err = 0;
  for (size_t i = 0; i < n && !err; i += ZO_MODEL_STAGE_NUMEL) {
    const size_t k = n - i < ZO_MODEL_STAGE_NUMEL ? n - i : ZO_MODEL_STAGE_NUMEL;
    err = be->memcpy_async(stage, (const char *)m->params + i * m->esize, k * m->esize, ZO_COPY_D2H, NULL);
    if (!err) err = be->stream_synchronize(NULL);
    if (!err) zo_cpu_cast(host_params + i, ZO_F32, stage, m->dtype, k);
  }
  free(stage);
  return err;
}

/* ---- forward and backward ---------------------------------------------------------- */

/* The hooks, and the block index the ops queued between them carry on the
 * timeline (zo/trace.h). */
static void hook_begin(struct zo_model *m, int l, enum zo_model_phase ph, zo_stream_t s) {
  if (m->hooks && m->hooks->block_begin) m->hooks->block_begin(m->hooks->ctx, m, l, ph, s);
  zo_trace_scope(l);
}

static void hook_end(struct zo_model *m, int l, enum zo_model_phase ph, zo_stream_t s) {
  zo_trace_scope(-1);
  if (m->hooks && m->hooks->block_end) m->hooks->block_end(m->hooks->ctx, m, l, ph, s);
}

void *zo_model_block_input(struct zo_model *m, int l) {
  ZO_ASSERT(l >= 0 && l < m->cfg.n_layer);
  return l == 0 ? m->encoded : m->acts[l - 1][m->arch->act_out];
}

/* ---- contexts ---------------------------------------------------------------------- */

struct zo_model_ctx *zo_model_default_ctx(struct zo_model *m) { return &m->ctx0; }

int zo_model_ctx_init(struct zo_model *m, struct zo_model_ctx *c) {
  const size_t n = (size_t)m->cfg.n_layer + 1;
  *c = m->ctx0;
  c->block_in = malloc(n * sizeof *c->block_in);
  if (!c->block_in) return zo_error(-ENOMEM, "out of host memory for a model context");
  memcpy(c->block_in, m->ctx0.block_in, n * sizeof *c->block_in);
  c->head_done = false;
  return 0;
}

void zo_model_ctx_free(struct zo_model_ctx *c) {
  free(c->block_in);
  c->block_in = NULL;
}

size_t zo_model_ctx_block_inputs_bytes(const struct zo_model *m) {
  const size_t one = (size_t)m->B * (size_t)m->T * (size_t)m->cfg.n_embd * m->esize;
  return ((size_t)m->cfg.n_layer + 1) * zo_arena_round(one);
}

void zo_model_ctx_place_block_inputs(const struct zo_model *m, struct zo_model_ctx *c, void *buf) {
  const size_t one = zo_arena_round((size_t)m->B * (size_t)m->T * (size_t)m->cfg.n_embd * m->esize);
  for (int l = 0; l <= m->cfg.n_layer; l++) c->block_in[l] = (char *)buf + (size_t)l * one;
}

/* Points the model's working fields at c's buffers (the architectures'
 * programs read those), and its dropout at c's pass. The block outputs are
 * rebound only when the context changes. */
static void ctx_bind(struct zo_model *m, struct zo_model_ctx *c) {
  m->drop.active = c->train;
  m->drop.pass = c->pass;
  if (m->ctx == c) return;
  /* The hooks copy the checkpointed inputs of the model's own buffers. */
  ZO_ASSERT(c == &m->ctx0 || !m->layout.ckpt_on_host);
  m->inputs = c->inputs;
  m->targets = c->targets;
  m->losses = c->losses;
  m->encoded = c->block_in[0];
  for (int l = 0; l < m->cfg.n_layer; l++) m->acts[l][m->arch->act_out] = c->block_in[l + 1];
  if (m->training) m->scratch[0] = c->dresidual;
  m->ctx = c;
}

/* ---- units ------------------------------------------------------------------------- */

void zo_model_unit_embed_forward(struct zo_model *m, struct zo_model_ctx *c, const int32_t *inputs,
                                 const int32_t *targets, int B, int T, bool train, zo_stream_t s) {
  ZO_ASSERT(B >= 1 && B <= m->B && T >= 1 && T <= m->T);
  ZO_ASSERT(!train || m->training);
  zo_backend_t be = m->backend;
  const size_t nbt = (size_t)B * (size_t)T;
  c->B = B;
  c->T = T;
  c->train = train;
  c->has_targets = targets != NULL;
  c->head_done = false;
  ctx_bind(m, c);
  ZO_ASSERT(be->memcpy_async(m->inputs, inputs, nbt * sizeof(int32_t), ZO_COPY_H2D, s) == 0);
  if (targets) ZO_ASSERT(be->memcpy_async(m->targets, targets, nbt * sizeof(int32_t), ZO_COPY_H2D, s) == 0);
  ZO_ASSERT(m->hooks || (m->layout.param_slots == 0 && !m->layout.ckpt_on_host));
  hook_begin(m, ZO_MODEL_EMBED, ZO_MODEL_FORWARD, s);
  m->arch->embed_forward(m, B, T, s);
  hook_end(m, ZO_MODEL_EMBED, ZO_MODEL_FORWARD, s);
}

void zo_model_unit_block_forward(struct zo_model *m, struct zo_model_ctx *c, int l, zo_stream_t s) {
  ZO_ASSERT(l >= 0 && l < m->cfg.n_layer);
  ctx_bind(m, c);
  hook_begin(m, l, ZO_MODEL_FORWARD, s);
  m->arch->block_forward(m, l, c->B, c->T, true, s);
  hook_end(m, l, ZO_MODEL_FORWARD, s);
}

void zo_model_unit_head_forward(struct zo_model *m, struct zo_model_ctx *c, zo_stream_t s) {
  const int L = m->cfg.n_layer;
  ctx_bind(m, c);
  hook_begin(m, L, ZO_MODEL_FORWARD, s);
  m->arch->final_forward(m, c->block_in[L], c->B, c->T, s);
  if (c->train)
    zo_model_head_forward_train(m, c->B, c->T, s);
  else
    zo_model_head_forward(m, c->B, c->T, c->has_targets, s);
  hook_end(m, L, ZO_MODEL_FORWARD, s);
}

void zo_model_unit_head_backward(struct zo_model *m, struct zo_model_ctx *c, float dloss, zo_stream_t s) {
  ZO_ASSERT(m->training && c->has_targets);
  const int C = m->cfg.n_embd, L = m->cfg.n_layer;
  ctx_bind(m, c);
  hook_begin(m, L, ZO_MODEL_BACKWARD, s);
  zo_model_head_backward(m, c->B, c->T, dloss, s);
  ZO_ASSERT(m->backend->memset_async(c->dresidual, 0, (size_t)c->B * (size_t)c->T * (size_t)C * m->esize, s) == 0);
  m->arch->final_backward(m, c->block_in[L], c->B, c->T, s);
  hook_end(m, L, ZO_MODEL_BACKWARD, s);
  c->head_done = true;
}

void zo_model_unit_block_backward(struct zo_model *m, struct zo_model_ctx *c, int l, zo_stream_t s) {
  ZO_ASSERT(m->training && l >= 0 && l < m->cfg.n_layer);
  ctx_bind(m, c);
  hook_begin(m, l, ZO_MODEL_BACKWARD, s);
  /* A checkpointed block's activations are recomputed from its input with
   * the forward's kernels, so backward sees the same bits. */
  if (l < m->layout.ckpt_blocks) m->arch->block_forward(m, l, c->B, c->T, false, s);
  m->arch->block_backward(m, l, c->B, c->T, s);
  hook_end(m, l, ZO_MODEL_BACKWARD, s);
}

void zo_model_unit_embed_backward(struct zo_model *m, struct zo_model_ctx *c, zo_stream_t s) {
  ZO_ASSERT(m->training);
  ctx_bind(m, c);
  hook_begin(m, ZO_MODEL_EMBED, ZO_MODEL_BACKWARD, s);
  if (!m->layout.frozen) m->arch->embed_backward(m, c->B, c->T, s); /* a frozen embedding has nothing to learn */
  hook_end(m, ZO_MODEL_EMBED, ZO_MODEL_BACKWARD, s);
}

/* ---- today's passes: the units in order over the default context ------------------- */

void zo_model_set_dropout(struct zo_model *m, uint64_t seed, uint64_t pass) {
  m->drop.seed = seed;
  m->ctx0.pass = pass;
  if (m->ctx == &m->ctx0) m->drop.pass = pass;
}

const void *zo_arch_dropout(const struct zo_model *m, void *out, const void *inp, size_t n, enum zo_drop_site site,
                            int layer, zo_stream_t s) {
  const float p = site == ZO_DROP_EMBED ? m->cfg.embd_pdrop : site == ZO_DROP_ATTN ? m->cfg.attn_pdrop
                                                                                    : m->cfg.resid_pdrop;
  if (!m->drop.active || p <= 0.0f) return inp;
  ZO_ASSERT(layer >= -1 && layer < (1 << 15) && m->drop.pass < ((uint64_t)1 << 44));
  /* [pass: 44 bits][layer + 1: 16][site: 4] */
  const uint64_t word = m->drop.pass << 20 | (uint64_t)(layer + 1) << 4 | (uint64_t)site;
  m->backend->dropout(out, inp, n, p, m->drop.seed, word, m->dtype, s);
  return out;
}

void zo_model_forward(struct zo_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                      zo_stream_t s) {
  struct zo_model_ctx *c = &m->ctx0;
  zo_model_unit_embed_forward(m, c, inputs, targets, B, T, false, s);
  for (int l = 0; l < m->cfg.n_layer; l++) zo_model_unit_block_forward(m, c, l, s);
  zo_model_unit_head_forward(m, c, s);
}

void zo_model_forward_train(struct zo_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                            float dloss, zo_stream_t s) {
  ZO_ASSERT(m->training && targets);
  struct zo_model_ctx *c = &m->ctx0;
  zo_model_unit_embed_forward(m, c, inputs, targets, B, T, true, s);
  for (int l = 0; l < m->cfg.n_layer; l++) zo_model_unit_block_forward(m, c, l, s);
  zo_model_unit_head_forward(m, c, s);
  zo_model_unit_head_backward(m, c, dloss, s);
}

void zo_model_zero_grad(struct zo_model *m, zo_stream_t s) {
  ZO_ASSERT(m->training);
  if (m->layout.frozen) return;
  ZO_ASSERT(m->backend->memset_async(m->grads, 0, zo_model_grads_numel(m) * sizeof(float), s) == 0);
}

void zo_model_backward(struct zo_model *m, int B, int T, float dloss, zo_stream_t s) {
  ZO_ASSERT(m->training);
  ZO_ASSERT(B >= 1 && B <= m->B && T >= 1 && T <= m->T);
  struct zo_model_ctx *c = &m->ctx0;
  c->B = B;
  c->T = T;
  if (!c->head_done) zo_model_unit_head_backward(m, c, dloss, s);
  c->head_done = false;
  for (int l = m->cfg.n_layer - 1; l >= 0; l--) zo_model_unit_block_backward(m, c, l, s);
  zo_model_unit_embed_backward(m, c, s);
}

int zo_model_mean_loss(struct zo_model *m, const int32_t *host_targets, int B, int T, zo_stream_t s,
                       double *loss) {
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

/* ---- shared by the architectures ------------------------------------------------------ */

int zo_arch_table_alloc(struct zo_tensor_table *t, int n_tensors, int n_layer) {
  memset(t, 0, sizeof *t);
  t->tensors = calloc((size_t)n_tensors, sizeof *t->tensors);
  t->layer_offset = calloc((size_t)n_layer, sizeof *t->layer_offset);
  if (!t->tensors || !t->layer_offset) {
    zo_tensor_table_free(t);
    return zo_error(-ENOMEM, "out of host memory building the parameter table");
  }
  t->n_layer = n_layer;
  return 0;
}

void zo_arch_table_add(struct zo_tensor_table *t, size_t *offset, const char *name, int layer, int rows, int cols) {
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

/* v rendered for a message into buf. */
static const char *json_value_str(json_t *v, char *buf, size_t size) {
  char *d = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
  snprintf(buf, size, "%s", d ? d : "(missing)");
  free(d);
  return buf;
}

int zo_arch_json_prob(json_t *j, const char *key, const char *path, float *out) {
  json_t *v = json_object_get(j, key);
  *out = 0.0f;
  if (!v || json_is_null(v)) return 0;
  const double p = json_is_number(v) ? json_number_value(v) : -1.0;
  char val[64];
  if (!(p >= 0.0 && p < 1.0))
    return zo_error(-EINVAL, "%s: \"%s\" = %s: a probability in [0, 1) (a JSON number) is needed", path, key,
                    json_value_str(v, val, sizeof val));
  *out = (float)p;
  return 0;
}

int zo_arch_json_size(json_t *j, const char *key, const char *path, long *out) {
  json_t *v = json_object_get(j, key);
  char val[64];
  if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > INT_MAX)
    return zo_error(-EINVAL, "%s: \"%s\" = %s: a positive integer (a JSON number, at most %d) is needed", path,
                    key, json_value_str(v, val, sizeof val), INT_MAX);
  *out = (long)json_integer_value(v);
  return 0;
}

int zo_arch_json_positive(json_t *j, const char *key, const char *path, double def, double *out) {
  json_t *v = json_object_get(j, key);
  char val[64];
  if ((!v || json_is_null(v)) && !isnan(def)) {
    *out = def;
    return 0;
  }
  const double x = json_is_number(v) ? json_number_value(v) : NAN;
  if (!(x > 0.0 && isfinite(x)))
    return zo_error(-EINVAL, "%s: \"%s\" = %s: a positive finite JSON number is needed%s", path, key,
                    json_value_str(v, val, sizeof val), isnan(def) ? " (it has no default)" : "");
  *out = x;
  return 0;
}

int zo_arch_json_int(json_t *j, const char *key, const char *path, long *out) {
  json_t *v = json_object_get(j, key);
  if (!json_is_integer(v)) return zo_error(-EINVAL, "%s: \"%s\" is missing or not an integer", path, key);
  *out = (long)json_integer_value(v);
  return 0;
}
