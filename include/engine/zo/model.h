/* A decoder-only transformer over zo_backend ops: tensor table, parameters,
 * gradients and activations in device-arena buffers, forward, backward and
 * loss. The architecture (GPT-2, Llama) is a description the model runs
 * (engine/model/arch.h: its tensor table, its buffers, its per-layer program over
 * the shared kernels); everything here -- the layout, the offload slots and
 * hooks, the chunked LM head, activation checkpointing -- is the same code
 * for every architecture.
 * Parameters are laid out block-major ([embeddings] [block 0] ... [block
 * L-1] [final norm, untied LM head]) so a transformer block is one
 * contiguous (offset, numel) range, and gradients share the parameters'
 * table. Linear weights are stored (out, in) (PyTorch nn.Linear); checkpoint
 * I/O converts to each architecture's Hugging Face layout. The vocabulary is
 * padded to a multiple of 64 for compute; padded rows of the embedding (and
 * LM head) are zero and padded logits never enter the softmax or the loss.
 * Offload: a layout (struct zo_model_layout) may replace the device copy of
 * the blocks' parameters with K block slots and the device gradients with G
 * block slots; an optional hooks table, called before and after every block
 * in both directions, then rebinds block l's views to a slot
 * (engine/sched.c). The head range (embeddings) and the tail range (final
 * norm, LM head) stay resident, except an untied embedding (on the host,
 * embed_params_host / embed_grads_host) and an untied head larger than a
 * block (in pieces through the slots, head_stream).
 * Memory savers: the LM head and cross-entropy run in chunks of rows, so
 * (B, T, Vp) logits never exist at once unless they fit the chunk; with
 * activation checkpointing the first ckpt_blocks blocks keep only their input
 * and backward recomputes each of them into one shared set of activation
 * buffers right before its backward (the same kernels in the same order, so
 * the results are bit-identical).
 * Mixed precision: the layout's dtype (F32, BF16 or F16) is the working dtype
 * of the parameters, the parameter slots, every activation and the backward
 * scratch; gradients of parameters (and their accumulator), normalization
 * statistics, losses and the optimizer's master weights and m, v are fp32.
 * Pointers declared void * below hold dtype elements, float * ones fp32. */
#ifndef ZO_MODEL_H
#define ZO_MODEL_H

#include "zo/arena.h"
#include "zo/backend.h"
#include "zo/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum zo_model_arch {
  ZO_ARCH_GPT2,  /* "gpt2": LayerNorm, learned positions, GELU MLP, tied head, biases */
  ZO_ARCH_LLAMA, /* "llama": RMSNorm, rotary positions, SwiGLU MLP, grouped-query
                  * attention, no biases, tied or untied head */
};

/* "gpt2", "llama". */
const char *zo_model_arch_name(enum zo_model_arch arch);

/* The Hugging Face family a model is (config.json's model_type), which the
 * architecture runs: GPT2 on ZO_ARCH_GPT2, the others on ZO_ARCH_LLAMA. Read
 * from config.json's model_type, written back as it (the registry,
 * engine/model/family.c); never guessed from the features once set. */
enum zo_model_family {
  ZO_FAMILY_UNSET,   /* zo_model_config_check fills it from the architecture and
                      * the features: a window makes a Mistral, q/k/v biases a
                      * Qwen2, q/k norms a Qwen3, else the architecture's own (a config without
                      * config.json) */
  ZO_FAMILY_GPT2,    /* "gpt2" */
  ZO_FAMILY_LLAMA,   /* "llama" */
  ZO_FAMILY_MISTRAL, /* "mistral": sliding_window (none: null) */
  ZO_FAMILY_QWEN2,   /* "qwen2": q/k/v biases */
  ZO_FAMILY_QWEN3,   /* "qwen3": per-head RMSNorm of q and k */
  ZO_FAMILY_PHI3,    /* "phi3": fused qkv_proj and gate_up_proj in its files, sliding_window */
  ZO_FAMILY_N
};

/* config.json's model_type of family f ("gpt2", "llama", "mistral", "qwen2", "qwen3";
 * "unset" for ZO_FAMILY_UNSET). */
const char *zo_model_family_name(enum zo_model_family f);

struct zo_model_config {
  enum zo_model_arch arch;
  enum zo_model_family family; /* the family arch runs (config.json's model_type) */
  int n_layer;
  int n_head;            /* NH, query heads */
  int n_kv_head;         /* NKV, key/value heads, dividing NH (llama's
                          * num_key_value_heads; 0 = n_head; gpt2: n_head) */
  int n_embd;            /* C, a multiple of n_head (head size C / NH) */
  int intermediate_size; /* MLP width I (llama, required; gpt2: 4C, 0 fills it) */
  int vocab_size;        /* V, real tokens */
  int padded_vocab_size; /* Vp, V rounded up to a multiple of 64 (filled by zo_model_config_check) */
  int max_seq_len;       /* maxT */
  double rms_norm_eps;   /* llama: RMSNorm epsilon (0 = 1e-5) */
  double rope_theta;     /* llama: rotary base (0 = 10000) */
  bool tie_embeddings;   /* llama: LM head = embedding (tie_word_embeddings);
                          * gpt2: always tied (filled true) */
  /* llama: rope_scaling "llama3" (Llama 3.1, 3.2), off when factor is 0 */
  double rope_scaling_factor;
  double rope_low_freq_factor, rope_high_freq_factor;
  int rope_original_max_seq_len; /* original_max_position_embeddings */
  /* llama: sliding-window attention (Mistral's sliding_window, from
   * config.json): position t attends to (t - W, t]; 0 = full causal */
  int sliding_window;
  /* llama: biases on the q, k and v projections (Qwen2 / Qwen2.5, from
   * config.json's model_type "qwen2") */
  bool qkv_bias;
  /* llama: RMSNorm of each head of q and k (weights (head_dim,), eps
   * rms_norm_eps) after the projection, before the rotary embedding (Qwen3,
   * from config.json's model_type "qwen3") */
  bool qk_norm;
  /* llama: the attention heads' width (config.json's head_dim; 0 = n_embd /
   * n_head, filled by zo_model_config_check) */
  int head_dim;
  /* llama: the embedding's padding index (config.json's pad_token_id, which
   * transformers' Llama-family models give nn.Embedding as padding_idx;
   * model.pad_token_id without config.json): its row gets no gradient from
   * the lookup (a tied head's still reaches it, and weight decay), and a
   * model initialised from scratch starts it at zero. In [0, vocab_size);
   * has_padding_idx false: none (the zero value; GPT-2 never has one). */
  bool has_padding_idx;
  int padding_idx;
  /* Dropout probabilities in [0, 1), training only (model.dropout; from a
   * Hugging Face config.json with model.hf_dropout: GPT-2's embd_pdrop,
   * attn_pdrop, resid_pdrop, Llama's attention_dropout): the embedding's
   * output, the attention output (before its projection), each residual
   * branch before its add. 0: no op runs. */
  float embd_pdrop, attn_pdrop, resid_pdrop;
};

/* The embedding's padding index of c for the encoder_backward op, -1 none. */
static inline int zo_model_padding_idx(const struct zo_model_config *c) {
  return c->has_padding_idx ? c->padding_idx : -1;
}

/* Memory categories of the planner (engine/plan/plan.c), shared by every tier. */
enum zo_mem_category {
  ZO_MEM_PARAMS,      /* working parameters */
  ZO_MEM_GRADS,       /* gradients and their accumulator */
  ZO_MEM_MASTER,      /* fp32 master weights */
  ZO_MEM_ADAM_M,      /* AdamW exp_avg */
  ZO_MEM_ADAM_V,      /* AdamW exp_avg_sq */
  ZO_MEM_ACTIVATIONS, /* activations kept for backward, logits, tokens, losses */
  ZO_MEM_WORKSPACE,   /* backward scratch, constant tables (rotary angles) */
  ZO_MEM_BUFFERS,     /* parameter / gradient slots and staging buffers */
  ZO_MEM_N_CATEGORIES
};

/* "parameters", "gradients", ... */
const char *zo_mem_category_name(enum zo_mem_category c);

/* What the device holds besides activations: the single description used by
 * both the planner and the allocation, so they cannot drift. */
struct zo_model_layout {
  enum zo_dtype dtype; /* working dtype of parameters and activations: ZO_F32
                        * (the zero value), ZO_BF16 or ZO_F16 */
  bool training;   /* false: forward only, one block's activations shared */
  bool frozen;     /* training a frozen base (LoRA, zo/lora.h): no gradient, accumulator,
                    * master or optimizer buffers; every gradient view is NULL, so the
                    * base's weight gradients and the embedding's backward are skipped */
  int param_slots; /* 0: every block's parameters on the device; K > 0: only
                    * the resident ranges (head, tail) and K block slots */
  int grad_slots;  /* 0: a full gradient buffer; G > 0: resident ranges and
                    * G block gradient slots (gradients leave for the host) */
  bool embed_params_host; /* training with param_slots, when the table's embedding is
                           * alone (zo_model_embed_params_host): its weights are not
                           * carved on the device; the hooks gather the micro-batch's
                           * rows on the host into encoded before the embedding runs */
  bool embed_grads_host; /* with grad_slots, when the table's embedding is alone
                          * (zo_model_embed_grads_host): its gradient is not carved on
                          * the device; the embedding's backward leaves d(embedding
                          * output) in embed_dout for the hooks to sum on the host */
  bool head_stream; /* training with param_slots and grad_slots, when the LM head is cut
                     * into pieces (zo_model_head_streamed): its weights and gradient are
                     * not carved on the device; the head hooks load each piece's weights
                     * into a parameter slot and take its gradient out of a gradient slot */
  bool grad_accum; /* a second full gradient buffer, the accumulator
                    * (gradient_accumulation_steps > 1 with grad_slots == 0) */
  bool optimizer;  /* AdamW m and v on the device (no optimizer offload) */
  bool master;     /* fp32 master weights on the device (table.numel): mixed
                    * precision with the optimizer on the device */
  int head_chunk_rows; /* rows of (B*T) per LM-head chunk; 0: as many as fit
                        * ZO_MODEL_HEAD_CHUNK_BYTES of logits (at least 1) */
  int ckpt_blocks;     /* activation checkpointing: blocks 0..ckpt_blocks-1 keep
                        * only their input and are recomputed in backward; 0 off
                        * (training only) */
  bool ckpt_on_host;   /* their inputs live in host memory: the hooks copy each
                        * out after the block's forward and back before its
                        * recompute, through two device input buffers */
  size_t stream_workspace; /* bytes of device scratch per stream that runs ops
                            * (zo_backend.stream_workspace_bytes: CUDA's cuBLASLt
                            * workspace; 0 on the CPU backend, which carves
                            * nothing): ZO_MODEL_STREAM_WORKSPACES of them
                            * (one forward-only) in the workspace category.
                            * zo_model_init_layout takes the backend's value. */
};

/* Workspaces a training model carves for the backend's op streams: the one
 * its passes run on (0) and the optimizer's (1). */
#define ZO_MODEL_STREAM_WORKSPACES 2

/* Whether layout lo keeps table t's embedding gradient off the device. */
static inline bool zo_model_embed_grads_host(const struct zo_tensor_table *t, const struct zo_model_layout *lo) {
  return lo->training && lo->embed_grads_host && lo->grad_slots > 0 && t->embed_alone;
}

/* Whether layout lo keeps table t's embedding weights off the device. */
static inline bool zo_model_embed_params_host(const struct zo_tensor_table *t, const struct zo_model_layout *lo) {
  return lo->training && lo->embed_params_host && lo->param_slots > 0 && t->embed_alone;
}

/* The LM head in vocabulary pieces: an untied head (the table's last
 * tensor, (Vp, C)) with more elements than a block is cut into pieces of
 * *rows vocabulary rows (a multiple of 64, at most a block's elements), so
 * that a piece's weights fit a parameter slot and its gradient a gradient
 * slot. Returns the number of pieces; 1: the head is whole (tied, or not
 * larger than a block). A training model with pieces computes the head the
 * same way on every placement: the logits of all B*T rows, piece by piece
 * (each a GEMM into a chunk, copied into its columns), the cross-entropy
 * over whole rows, then the pieces in reverse, each adding its part of
 * d(final output) and accumulating its weight gradient. */
int zo_model_head_pieces(const struct zo_tensor_table *t, int *rows);

/* Whether layout lo streams table t's LM head through the slots. */
static inline bool zo_model_head_streamed(const struct zo_tensor_table *t, const struct zo_model_layout *lo) {
  return lo->training && lo->head_stream && lo->param_slots > 0 && lo->grad_slots > 0 &&
         zo_model_head_pieces(t, NULL) > 1;
}

/* Elements of table t's LM head that layout lo streams (zo_model_head_streamed),
 * else 0: what the device and the resident staging do not hold. */
static inline size_t zo_model_streamed_head_numel(const struct zo_tensor_table *t, const struct zo_model_layout *lo) {
  return zo_model_head_streamed(t, lo) ? t->tensors[t->n_tensors - 1].numel : 0;
}

/* Bytes of logits one LM-head chunk may hold by default (64 MiB): for GPT-2's
 * padded vocabulary (50304) that is 333 rows of fp32. */
#define ZO_MODEL_HEAD_CHUNK_BYTES ((size_t)64 << 20)

/* Rows per LM-head chunk of the layout at micro-batch (B, T): head_chunk_rows
 * or the default, at most B*T. */
int zo_model_head_rows(const struct zo_model_config *cfg, int B, int T,
                       const struct zo_model_layout *layout);

/* Hooks called by zo_model_forward and zo_model_backward, in queue order on
 * the pass's stream, with l = ZO_MODEL_EMBED for the embedding, 0..n_layer-1
 * for the blocks and n_layer for the final norm + LM head + loss. Forward:
 * begin(EMBED), end(EMBED), begin(0), end(0), ..., begin(L), end(L).
 * Backward in reverse: begin(L), end(L), begin(L-1), ..., end(0),
 * begin(EMBED), end(EMBED). begin may queue waits and rebind block l's views
 * (zo_model_bind_block; in backward also its gradient views and the resident
 * gradient views) before the block's ops are queued; end runs after they are
 * queued. With activation checkpointing the recompute of a checkpointed
 * block runs inside its backward begin/end pair, so the parameters bound by
 * begin(l, BACKWARD) serve it; with ckpt_on_host the hooks also own the
 * input copies (zo_model_block_input): end(l, FORWARD) copies block l's
 * input out and begin(l, BACKWARD) makes it resident again before anything
 * reads it. */
#define ZO_MODEL_EMBED (-1)
enum zo_model_phase { ZO_MODEL_FORWARD, ZO_MODEL_BACKWARD };
struct zo_model;
struct zo_model_hooks {
  void *ctx;
  void (*block_begin)(void *ctx, struct zo_model *m, int l, enum zo_model_phase phase,
                      zo_stream_t stream);
  void (*block_end)(void *ctx, struct zo_model *m, int l, enum zo_model_phase phase,
                    zo_stream_t stream);
  /* With the head in pieces (m->head_pieces > 1), around each piece p inside
   * unit n_layer: forward pieces 0..P-1 (after the final norm), backward
   * P-1..0 (after the cross-entropy, before the final norm's backward).
   * Before head_begin the model points head_w and head_g at piece p of the
   * head's views; a hook may rebind them (a slot). NULL: no call. */
  void (*head_begin)(void *ctx, struct zo_model *m, int p, enum zo_model_phase phase, zo_stream_t stream);
  void (*head_end)(void *ctx, struct zo_model *m, int p, enum zo_model_phase phase, zo_stream_t stream);
};

/* Buffers an architecture lists (engine/model/arch.h) and the model carves. */
#define ZO_MODEL_MAX_BUFS 16

struct zo_arch;

struct zo_model_adapters; /* engine/model/linear.h */

/* One micro-batch's state between the units of a pass (the model driver by
 * units, below): its tokens, losses, block inputs and residual gradient on
 * the device, and its dropout pass. The model's own buffers make its default
 * context (zo_model_default_ctx), the one zo_model_forward,
 * zo_model_forward_train and zo_model_backward drive; more contexts may
 * coexist (K micro-batches), each over device buffers the caller provides,
 * sized for the model's (B, T). Before a unit runs the model points its
 * working fields (inputs, targets, losses, encoded, each block's output,
 * scratch[0], the dropout pass) at the unit's context, so the architectures'
 * programs never name a context. Everything else is the model's and shared
 * by its contexts: the blocks' other kept activations (contexts interleave
 * only over checkpointed blocks, recomputed inside their backward, and not
 * with ckpt_on_host, whose hooks copy the default context's inputs), the
 * logits (a context's head backward follows its head forward with no other
 * context's head between), the other backward scratch, the parameters and
 * the gradients, which every context's units accumulate into. */
struct zo_model_ctx {
  int32_t *inputs;  /* (B, T) device token ids */
  int32_t *targets; /* (B, T) device target ids (-1: no loss) */
  float *losses;    /* (B, T) device, fp32: the head's per-token losses */
  void **block_in;  /* (n_layer + 1) device (B, T, C) working dtype each: [0] the
                     * embedding's output, [l] block l's input, [n_layer] the last
                     * block's output (the final norm's input); the host array is
                     * the context's (zo_model_ctx_init) */
  void *dresidual;  /* (B, T, C) device, working dtype: the residual stream's
                     * gradient between backward units (training models) */
  uint64_t pass;    /* the dropout masks' pass (zo_model_set_dropout) */
  int B, T;         /* the micro-batch's shape (zo_model_unit_embed_forward) */
  bool train;       /* a training pass: dropout applied, the whole head fused into
                     * its backward */
  bool has_targets; /* the pass copied targets and computes losses */
  bool head_done;   /* the head's backward has run for this pass */
};

struct zo_model {
  struct zo_model_config cfg;
  const struct zo_arch *arch;   /* the architecture's description */
  zo_backend_t backend;
  struct zo_tensor_table table; /* parameters; gradients use the same offsets */
  int B, T;                     /* activation shapes were planned for (B, T) */
  bool training;                /* false: no gradients, one block's activations reused */
  struct zo_model_layout layout;
  enum zo_dtype dtype;          /* layout.dtype: parameters and activations */
  size_t esize;                 /* bytes of one dtype element */
  size_t head_numel;            /* elements of the head range [0, layer_offset[0]) */
  size_t tail_numel;            /* elements of the tail range after the last block */
  size_t res_phead;             /* the head range's parameter elements on the device: head_numel,
                                 * or 0 (zo_model_embed_params_host) */
  size_t res_ghead;             /* the head range's gradient elements on the device: head_numel,
                                 * or 0 (zo_model_embed_grads_host) */
  size_t res_tail;              /* the tail range's elements on the device with slots: tail_numel,
                                 * or without the LM head (zo_model_head_streamed) */
  int head_pieces;              /* zo_model_head_pieces for a training model, else 1 */
  int head_piece_rows;          /* vocabulary rows per piece (head_pieces > 1) */
  void *head_w;                 /* the current piece's weights (working dtype) */
  float *head_g;                /* and its gradient */
  void *head_tmp;               /* (head_rows, head_piece_rows) one piece's logits of a row chunk */
  void *head_dx;                /* (head_rows, C) one piece's part of d(final output) */
  void *embed_dout;             /* zo_model_embed_grads_host: d(embedding output) (B, T, C),
                                 * working dtype, complete after the embedding's backward */
  /* params: device (table.numel), or with param_slots the resident ranges
   * only, (head_numel + tail_numel): head then tail. grads likewise with
   * grad_slots. */
  void *params;                 /* working dtype */
  float *grads;
  float *grads_acc;             /* device (table.numel) accumulator, or NULL */
  float *master;                /* device (table.numel) fp32 master weights when
                                 * layout.master, else NULL */
  void **param_slots;           /* (layout.param_slots) device, layer_numel each */
  float **grad_slots;           /* (layout.grad_slots) device, layer_numel each */
  float *adam_m, *adam_v;       /* device (table.numel) when layout.optimizer */
  const struct zo_model_hooks *hooks; /* NULL: no hooks */
  const struct zo_model_adapters *adapters; /* LoRA on the projections (engine/model/linear.h);
                                 * NULL: none */
  /* Views, by table index: pv[i] tensor i's parameters (working dtype), gv[i]
   * its gradient (fp32); a block's entries follow zo_model_bind_block. */
  void **pv;                    /* (table.n_tensors) */
  float **gv;                   /* (table.n_tensors) */
  /* activations (device, working dtype unless the architecture says fp32);
   * inputs, targets, encoded, losses, each block's output (acts[l][arch
   * act_out]) and scratch[0] point at the bound context's (ctx) */
  int32_t *inputs;              /* (B, T) */
  int32_t *targets;             /* (B, T) */
  void *encoded;                /* (B, T, C) the embedding's output, block 0's input */
  void ***acts;                 /* (n_layer) x (arch n_acts) a block's kept buffers;
                                 * checkpointed blocks share one set, except
                                 * their own output (arch act_out) */
  void *ckpt_in[2];             /* (B, T, C) each, ckpt_on_host: the inputs of
                                 * checkpointed block l live in ckpt_in[l % 2]
                                 * (ckpt_in[0] is encoded) */
  void *fin[ZO_MODEL_MAX_BUFS]; /* the final norm's buffers (arch n_fin): fin[0] its
                                 * output (B, T, C), then its statistics */
  void *consts[ZO_MODEL_MAX_BUFS]; /* the architecture's constant tables (arch n_consts) */
  int head_rows;                /* rows per LM-head chunk (zo_model_head_rows) */
  int head_row0;                /* first row of (B*T) that logits holds now */
  struct zo_model_ctx ctx0;     /* the default context: the model's own buffers */
  struct zo_model_ctx *ctx;     /* the context the working fields point at now */
  struct {                      /* dropout (training forward and backward only) */
    bool active;                /* the bound context's train */
    uint64_t seed;              /* the run's engine.seed: Philox's key */
    uint64_t pass;              /* the bound context's pass */
  } drop;
  void *logits;                 /* (head_rows, Vp): the last chunk computed, rows
                                 * head_row0.. of (B*T); dlogits after backward.
                                 * With head pieces (B*T, Vp), every row (head_row0 0) */
  float *losses;                /* (B, T) fp32 */
  /* backward scratch (device, arch n_scratch buffers): scratch[0] is the
   * residual stream's gradient (B, T, C), scratch[1] the gradient of a
   * normalization's output (B, T, C) */
  void *scratch[ZO_MODEL_MAX_BUFS];
  /* (layout.stream_workspace bytes each, device) for stream_set_workspace:
   * [0] the passes' stream, [1] the optimizer's (training); NULL when the
   * backend needs none */
  void *stream_workspaces[ZO_MODEL_STREAM_WORKSPACES];
  struct zo_arena arena;        /* owns all device memory above */
  float *host_losses;           /* (B, T) host copy for mean_loss */
};

/* Validates shapes for cfg->arch and fills defaults (padded_vocab_size,
 * n_kv_head, intermediate_size, eps, theta, tie). Returns 0 or -EINVAL with a
 * message naming the field and what would be valid. */
int zo_model_config_check(struct zo_model_config *cfg);

/* Builds the parameter table (Hugging Face names, our layout). Returns 0 or -errno. */
int zo_model_build_table(const struct zo_model_config *cfg, struct zo_tensor_table *table);

/* The dropout masks of the next zo_model_forward_train and its backward
 * (the default context's pass; another context's is its pass field):
 * Philox4x32-10 keyed by seed, counter (element, pass, layer, site), so the
 * masks depend on nothing but these (not on placement, recomputation or the
 * backend). pass: the micro-batch's number in the run, e.g. ((step - 1) *
 * grad_accum + k) * n_ranks + rank, so a resumed run draws the same. */
void zo_model_set_dropout(struct zo_model *m, uint64_t seed, uint64_t pass);

/* Device bytes the model needs for parameters, gradients, activations and
 * scratch at micro-batch (B, T); training false: for zo_model_init_inference.
 * 0 when cfg is invalid. */
size_t zo_model_device_bytes(const struct zo_model_config *cfg, int B, int T, bool training);

/* Device bytes of a layout at micro-batch (B, T), exactly what
 * zo_model_init_layout carves; by_category (may be NULL) receives the bytes of
 * each enum zo_mem_category. 0 when cfg is invalid. */
size_t zo_model_device_plan(const struct zo_model_config *cfg, int B, int T,
                            const struct zo_model_layout *layout,
                            size_t by_category[ZO_MEM_N_CATEGORIES]);

/* Creates an fp32 training model with device buffers for micro-batch (B, T)
 * (T <= max_seq_len), parameters zeroed. Returns NULL with zo_last_error() set. */
struct zo_model *zo_model_init(const struct zo_model_config *cfg, zo_backend_t backend, int B, int T);
/* The same with an offload layout; the arena is sized by zo_model_device_plan.
 * With param_slots the blocks' views are unset until a hook binds them. */
struct zo_model *zo_model_init_layout(const struct zo_model_config *cfg, zo_backend_t backend, int B,
                                      int T, const struct zo_model_layout *layout);
/* A forward-only fp32 model (eval, sample): no gradients or backward scratch,
 * and one block's activations shared by all blocks, so it needs far less
 * device memory. zo_model_zero_grad and zo_model_backward must not be called
 * on it. (zo_model_init_layout with training false gives one in another
 * dtype.) */
struct zo_model *zo_model_init_inference(const struct zo_model_config *cfg, zo_backend_t backend,
                                         int B, int T);
/* Frees the model and its device memory. Accepts NULL. */
void zo_model_free(struct zo_model *m);

/* Fills host buffer params (table.numel) with the architecture's
 * initialisation from seed (GPT-2's: N(0, 0.02) for weights and embeddings,
 * N(0, 0.02/sqrt(2 n_layer)) for the residual projections, zero biases, unit
 * norm weights), padded vocabulary rows zero. Deterministic for a seed. */
void zo_model_init_params(const struct zo_model *m, float *params, uint64_t seed);
/* Table elements [first, first + numel) of that initialisation into dst,
 * identical to the same range of zo_model_init_params: a model too large for
 * one host copy is initialised piece by piece. */
void zo_model_init_range(const struct zo_model *m, uint64_t seed, size_t first, float *dst, size_t numel);
/* Elements per parallel piece of zo_model_init_range (odd, so that pieces
 * start on both elements of Box-Muller pairs). */
#define ZO_MODEL_INIT_PIECE ((size_t)65521)
/* zo_model_init_range for the (checked) config mc and its table t, without a
 * model, drawn in pieces of `piece` elements on OpenMP's threads (0: one
 * piece on the calling thread, the serial draw). The bits do not depend on
 * piece or the thread count: every piece's stream position is known in
 * advance (engine/model_init.c). */
void zo_model_init_table_range(const struct zo_model_config *mc, const struct zo_tensor_table *t, uint64_t seed,
                               size_t first, float *dst, size_t numel, size_t piece);

/* Gives stream workspace k of the model (0: for the stream the passes run
 * on, 1: the optimizer's, training only) with the backend's
 * stream_set_workspace, so the stream's scratch is inside the device plan;
 * nothing on a backend without one (CPU). Call before queuing ops on it. */
void zo_model_stream_workspace(struct zo_model *m, int k, zo_stream_t stream);

/* Vocabulary rows of piece p of m's LM head (m->head_pieces > 1): head_piece_rows,
 * fewer for the last piece. */
int zo_model_piece_rows(const struct zo_model *m, int p);

/* Points block l's parameter views at a block's parameters starting at
 * params_base (device, layer_numel elements of the working dtype) and its
 * gradient views at grads_base (fp32); NULL leaves a view as it is. */
void zo_model_bind_block(struct zo_model *m, int l, void *params_base, float *grads_base);
/* Points the resident gradient views at head (head_numel elements; NULL:
 * none, the embedding's gradient summed on the host) and tail (tail_numel
 * elements). */
void zo_model_bind_resident_grads(struct zo_model *m, float *head, float *tail);
/* Elements of m->grads: the whole table, or with gradient slots the
 * resident ranges' on the device (res_ghead + tail_numel). */
size_t zo_model_grads_numel(const struct zo_model *m);

/* Host <-> device parameter copies (synchronous), full layouts only: host
 * params are fp32 (table.numel); upload rounds them to the working dtype (and
 * sets the fp32 master when the layout has one, which download then reads;
 * otherwise download widens the working copy). Conversions go through a
 * small host staging buffer, chunk by chunk. Return 0 or -errno. */
int zo_model_upload_params(struct zo_model *m, const float *host_params);
int zo_model_download_params(const struct zo_model *m, float *host_params);

/* Queues the forward pass on stream. inputs, targets: host (B, T) token ids,
 * copied to the device on stream (the host buffers must stay valid until the
 * stream is synchronized); targets NULL skips the loss. B, T must not exceed
 * the planned shapes. The LM head runs in chunks: afterwards logits holds the
 * last chunk, rows head_row0..B*T-1 (so always the last row, for sampling;
 * all rows when head_rows >= B*T). */
void zo_model_forward(struct zo_model *m, const int32_t *inputs, const int32_t *targets, int B,
                      int T, zo_stream_t stream);

/* Queues the forward pass and, chunk by chunk, the LM head's backward: each
 * chunk's logits, losses and dlogits (in place, scaled by dloss), then its
 * rows of the final norm's output gradient and its part of the head weight's
 * gradient (accumulated), then the final norm's backward; zo_model_backward
 * then starts at the last block. The same arithmetic as zo_model_forward
 * followed by zo_model_backward (bit-identical), without computing the logits
 * twice. Hooks run in the same order (the unit-L backward pair right after
 * the forward). Training models only. */
void zo_model_forward_train(struct zo_model *m, const int32_t *inputs, const int32_t *targets, int B,
                            int T, float dloss, zo_stream_t stream);

/* Device address of block l's input (the embedding output or block l-1's
 * output) in the context bound now, (B, T, C) of the working dtype. */
void *zo_model_block_input(struct zo_model *m, int l);

/* ---- the model driver by units ----
 * A pass is a sequence of units over a context (struct zo_model_ctx): the
 * embedding's forward, block 0..L-1's forwards, the head's forward (the
 * final norm, then the LM head: eval's logits and losses, or a training
 * pass's head pieces' logits), the head's backward (losses, dlogits, the
 * head's and the final norm's gradients, d(last block's output) into the
 * context's residual gradient), block L-1..0's backwards (a checkpointed
 * block recomputed first), the embedding's backward. zo_model_forward,
 * zo_model_forward_train and zo_model_backward are these loops over the
 * default context; a caller may run the same units itself, in another
 * order over several contexts within the limits struct zo_model_ctx names.
 * Each unit calls the hooks around itself (l = ZO_MODEL_EMBED, 0..L-1, L
 * as zo_model_forward does), queues on stream s, and runs with the model's
 * shape limits (B <= m->B, T <= m->T). */

/* The default context: the model's own buffers. */
struct zo_model_ctx *zo_model_default_ctx(struct zo_model *m);
/* Makes c a context of m over the default context's buffers, with a block
 * input array of its own (n_layer + 1 pointers, host); the caller then
 * points any of its buffers at its own (zo_model_ctx_place_block_inputs for
 * the block inputs). Returns 0 or -ENOMEM. */
int zo_model_ctx_init(struct zo_model *m, struct zo_model_ctx *c);
/* Frees c's block input array (not its device buffers). Accepts a zeroed c. */
void zo_model_ctx_free(struct zo_model_ctx *c);
/* Bytes of device memory n_layer + 1 block inputs of m take (B, T, C each,
 * working dtype, each rounded up as the arena rounds). */
size_t zo_model_ctx_block_inputs_bytes(const struct zo_model *m);
/* Points c's block inputs at consecutive pieces of buf (device,
 * zo_model_ctx_block_inputs_bytes(m) bytes, owned by the caller). */
void zo_model_ctx_place_block_inputs(const struct zo_model *m, struct zo_model_ctx *c, void *buf);

/* The embedding's forward: copies the host tokens (targets NULL: no loss)
 * into c (the host buffers must stay valid until the stream has run the
 * copy), records the pass's shape and whether it trains (train: dropout,
 * a training model only), then the lookup into c's block input 0. */
void zo_model_unit_embed_forward(struct zo_model *m, struct zo_model_ctx *c, const int32_t *inputs,
                                 const int32_t *targets, int B, int T, bool train, zo_stream_t stream);
/* Block l's forward: c's block input l to its block input l + 1. */
void zo_model_unit_block_forward(struct zo_model *m, struct zo_model_ctx *c, int l, zo_stream_t stream);
/* The final norm and the LM head's forward (unit n_layer): eval: the
 * logits chunk by chunk and with targets the losses; training: the head
 * pieces' logits (a whole head runs fused in zo_model_unit_head_backward). */
void zo_model_unit_head_forward(struct zo_model *m, struct zo_model_ctx *c, zo_stream_t stream);
/* The head's backward (unit n_layer): the losses, dlogits scaled by dloss,
 * the head's and the final norm's gradients (accumulated), and c's residual
 * gradient set to d(block input n_layer). After zo_model_unit_head_forward
 * of the same context; a training model only. */
void zo_model_unit_head_backward(struct zo_model *m, struct zo_model_ctx *c, float dloss, zo_stream_t stream);
/* Block l's backward: a checkpointed block recomputed from its input, then
 * c's residual gradient from d(output) to d(input), the block's gradients
 * accumulated. */
void zo_model_unit_block_backward(struct zo_model *m, struct zo_model_ctx *c, int l, zo_stream_t stream);
/* The embedding's backward from c's residual gradient (nothing for a
 * frozen base). */
void zo_model_unit_embed_backward(struct zo_model *m, struct zo_model_ctx *c, zo_stream_t stream);

/* ---- the layer-major order, everything on the device (engine/model/layer_major.c) ----
 * Reachable from tests only (issue 49, piece 2; engine.schedule =
 * layer_major stays refused). */

/* Elements of fp32 device memory zo_model_train_layer_major needs apart for
 * K micro-batches: (K - 1) head ranges (head_numel each) with a tied head,
 * whose gradient there has the head's and the lookup's parts; else 0. */
size_t zo_model_layer_major_head_grads_numel(const struct zo_model *m, int K);

/* A training step's forward and backward for K micro-batches in the
 * layer-major order over contexts cs[0..K-1] (distinct, each over block
 * inputs of its own; their dropout passes as the caller set them): the
 * embedding for all K, block l's forward for all K before block l + 1's,
 * then micro-batch by micro-batch the head's forward and backward, the
 * blocks' backward from the last for all K, the embedding's backward for all
 * K. inputs[k], targets[k]: host (B, T) tokens of micro-batch k (valid until
 * the stream has run). dloss scales every micro-batch's losses (the loss
 * scale included). Leaves the K micro-batches' gradient summed in today's
 * order and bits (each micro-batch's computed from zero, the first into the
 * accumulator, the others added in micro-batch order) in m->grads_acc (K >
 * 1; needs layout.grad_accum) or m->grads (K = 1), overwriting it; m->grads
 * is scratch for K > 1. head_grads: device fp32 scratch of
 * zo_model_layer_major_head_grads_numel(m, K) elements (NULL when 0). All on
 * the device: no slots, no hooks, every block checkpointed on the device, no
 * frozen base, the head whole; anything else is refused with -ENOTSUP
 * naming it (nothing queued). Queues on stream s; returns 0 or -errno. */
int zo_model_train_layer_major(struct zo_model *m, struct zo_model_ctx *cs, int K, const int32_t *const *inputs,
                               const int32_t *const *targets, int B, int T, float dloss, float *head_grads,
                               zo_stream_t s);

/* Device address of element i of a working-dtype buffer p of m. */
static inline void *zo_model_at(const struct zo_model *m, void *p, size_t i) {
  return (char *)p + i * m->esize;
}

/* Queues zeroing of the gradient buffer (m->grads, whichever its size). */
void zo_model_zero_grad(struct zo_model *m, zo_stream_t stream);

/* Queues the backward pass of the last forward (which must have had targets):
 * gradients of (dloss * sum of per-token losses) are ACCUMULATED into
 * m->grads. For the mean over B*T tokens and K accumulation steps pass
 * dloss = 1 / (B*T*K). Recomputes the LM head's logits chunk by chunk
 * (unless zo_model_forward_train did the head) and leaves dlogits of the last
 * chunk in logits. */
void zo_model_backward(struct zo_model *m, int B, int T, float dloss, zo_stream_t stream);

/* Synchronizes stream, then returns the mean per-token loss of the last
 * forward over tokens whose target is not -1. Returns 0 or -errno. */
int zo_model_mean_loss(struct zo_model *m, const int32_t *host_targets, int B, int T,
                       zo_stream_t stream, double *loss);

/* Training FLOPs per token (6 * matmul params + attention), for TFLOP/s. */
double zo_model_flops_per_token(const struct zo_model_config *cfg, int T);
/* The same for LoRA over a frozen base with lora_numel adapter parameters:
 * no weight-gradient GEMM of the base (4 of the 6 FLOPs a matmul parameter
 * and token), the adapters' 6 a parameter and token. */
double zo_model_lora_flops_per_token(const struct zo_model_config *cfg, int T, size_t lora_numel);

/* One line such as "GPT-2 12 layers, 12 heads, width 768, vocab 50257" into
 * buf; returns buf. */
const char *zo_model_describe(const struct zo_model_config *cfg, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* ZO_MODEL_H */
