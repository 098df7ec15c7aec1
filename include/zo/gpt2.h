/* GPT-2 model: tensor table, parameters, gradients and activations in
 * device-arena buffers, forward, backward and loss over zo_backend ops.
 * Parameters are laid out block-major ([wte, wpe] [block 0] ... [block L-1]
 * [ln_f]) so a transformer block is one contiguous (offset, numel) range, and
 * gradients share the parameters' table. Linear weights are stored (out, in)
 * (PyTorch nn.Linear); checkpoint I/O transposes to Hugging Face's Conv1D.
 * The vocabulary is padded to a multiple of 64 for compute; padded rows of wte
 * are zero and padded logits never enter the softmax or the loss. Tied input
 * and output embedding, no dropout.
 * Offload: a layout (struct zo_gpt2_layout) may replace the device copy of
 * the blocks' parameters with K block slots and the device gradients with G
 * block slots; an optional hooks table, called before and after every block
 * in both directions, then rebinds m->blocks[l] / m->dblocks[l] to a slot
 * (engine/sched.c). The embeddings (wte, wpe) and ln_f always stay resident.
 * Memory savers: the LM head and cross-entropy run in chunks of rows, so
 * (B, T, Vp) logits never exist at once unless they fit the chunk; with
 * activation checkpointing the first ckpt_blocks blocks keep only their input
 * and backward recomputes each of them into one shared set of activation
 * buffers right before its backward (the same kernels in the same order, so
 * the results are bit-identical).
 * Mixed precision: the layout's dtype (F32, BF16 or F16) is the working dtype
 * of the parameters, the parameter slots, every activation and the backward
 * scratch; gradients of parameters (and their accumulator), layernorm
 * statistics, losses and the optimizer's master weights and m, v are fp32.
 * Pointers declared void * below hold dtype elements, float * ones fp32. */
#ifndef ZO_GPT2_H
#define ZO_GPT2_H

#include "zo/arena.h"
#include "zo/backend.h"
#include "zo/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct zo_gpt2_config {
  int n_layer;
  int n_head;
  int n_embd;            /* C, a multiple of n_head */
  int vocab_size;        /* V, real tokens */
  int padded_vocab_size; /* Vp, V rounded up to a multiple of 64 (filled by zo_gpt2_config_check) */
  int max_seq_len;       /* maxT */
};

/* Memory categories of the planner (engine/plan.c), shared by every tier. */
enum zo_mem_category {
  ZO_MEM_PARAMS,      /* working parameters */
  ZO_MEM_GRADS,       /* gradients and their accumulator */
  ZO_MEM_MASTER,      /* fp32 master weights (offloaded optimizer) */
  ZO_MEM_ADAM_M,      /* AdamW exp_avg */
  ZO_MEM_ADAM_V,      /* AdamW exp_avg_sq */
  ZO_MEM_ACTIVATIONS, /* activations kept for backward, logits, tokens, losses */
  ZO_MEM_WORKSPACE,   /* backward scratch */
  ZO_MEM_BUFFERS,     /* parameter / gradient slots and staging buffers */
  ZO_MEM_N_CATEGORIES
};

/* "parameters", "gradients", ... */
const char *zo_mem_category_name(enum zo_mem_category c);

/* What the device holds besides activations: the single description used by
 * both the planner and the allocation, so they cannot drift. */
struct zo_gpt2_layout {
  enum zo_dtype dtype; /* working dtype of parameters and activations: ZO_F32
                        * (the zero value), ZO_BF16 or ZO_F16 */
  bool training;   /* false: forward only, one block's activations shared */
  int param_slots; /* 0: every block's parameters on the device; K > 0: only
                    * the resident ranges (wte, wpe, ln_f) and K block slots */
  int grad_slots;  /* 0: a full gradient buffer; G > 0: resident ranges and
                    * G block gradient slots (gradients leave for the host) */
  bool grad_accum; /* a second full gradient buffer, the accumulator
                    * (gradient_accumulation_steps > 1 with grad_slots == 0) */
  bool optimizer;  /* AdamW m and v on the device (no optimizer offload) */
  bool master;     /* fp32 master weights on the device (table.numel): mixed
                    * precision with the optimizer on the device */
  int head_chunk_rows; /* rows of (B*T) per LM-head chunk; 0: as many as fit
                        * ZO_GPT2_HEAD_CHUNK_BYTES of logits (at least 1) */
  int ckpt_blocks;     /* activation checkpointing: blocks 0..ckpt_blocks-1 keep
                        * only their input and are recomputed in backward; 0 off
                        * (training only) */
  bool ckpt_on_host;   /* their inputs live in host memory: the hooks copy each
                        * out after the block's forward and back before its
                        * recompute, through two device input buffers */
};

/* Bytes of logits one LM-head chunk may hold by default (64 MiB): for GPT-2's
 * padded vocabulary (50304) that is 333 rows. */
#define ZO_GPT2_HEAD_CHUNK_BYTES ((size_t)64 << 20)

/* Rows per LM-head chunk of the layout at micro-batch (B, T): head_chunk_rows
 * or the default, at most B*T. */
int zo_gpt2_head_rows(const struct zo_gpt2_config *cfg, int B, int T,
                      const struct zo_gpt2_layout *layout);

/* Hooks called by zo_gpt2_forward and zo_gpt2_backward, in queue order on the
 * pass's stream, with l = ZO_GPT2_EMBED for the embedding, 0..n_layer-1 for
 * the blocks and n_layer for ln_f + LM head + loss. Forward: begin(EMBED),
 * end(EMBED), begin(0), end(0), ..., begin(L), end(L). Backward in reverse:
 * begin(L), end(L), begin(L-1), ..., end(0), begin(EMBED), end(EMBED).
 * begin may queue waits and rebind m->blocks[l] (and in backward
 * m->dblocks[l] and the resident gradient views) before the block's ops are
 * queued; end runs after they are queued. With activation checkpointing the
 * recompute of a checkpointed block runs inside its backward begin/end pair,
 * so the parameters bound by begin(l, BACKWARD) serve it; with ckpt_on_host
 * the hooks also own the input copies (zo_gpt2_block_input): end(l, FORWARD)
 * copies block l's input out and begin(l, BACKWARD) makes it resident again
 * before anything reads it. */
#define ZO_GPT2_EMBED (-1)
enum zo_gpt2_phase { ZO_GPT2_FORWARD, ZO_GPT2_BACKWARD };
struct zo_gpt2;
struct zo_gpt2_hooks {
  void *ctx;
  void (*block_begin)(void *ctx, struct zo_gpt2 *m, int l, enum zo_gpt2_phase phase,
                      zo_stream_t stream);
  void (*block_end)(void *ctx, struct zo_gpt2 *m, int l, enum zo_gpt2_phase phase,
                    zo_stream_t stream);
};

/* Views of one transformer block inside a parameter buffer (working dtype)
 * or a gradient buffer (fp32). */
struct zo_gpt2_block {
  void *ln1w;     /* (C) */
  void *ln1b;     /* (C) */
  void *qkvw;     /* (3C, C) */
  void *qkvb;     /* (3C) */
  void *attprojw; /* (C, C) */
  void *attprojb; /* (C) */
  void *ln2w;     /* (C) */
  void *ln2b;     /* (C) */
  void *fcw;      /* (4C, C) */
  void *fcb;      /* (4C) */
  void *fcprojw;  /* (C, 4C) */
  void *fcprojb;  /* (C) */
};
#define ZO_GPT2_BLOCK_TENSORS 12

/* Activations of one block kept for backward (working dtype, statistics fp32). */
struct zo_gpt2_block_acts {
  void *ln1;       /* (B, T, C) */
  float *ln1_mean; /* (B, T) */
  float *ln1_rstd; /* (B, T) */
  void *qkv;       /* (B, T, 3C) */
  void *atty;      /* (B, T, C) */
  void *att;       /* (B, NH, T, T) */
  void *res2;      /* (B, T, C) residual after attention */
  void *ln2;       /* (B, T, C) */
  float *ln2_mean; /* (B, T) */
  float *ln2_rstd; /* (B, T) */
  void *fch;       /* (B, T, 4C) */
  void *fch_gelu;  /* (B, T, 4C) */
  void *res3;      /* (B, T, C) block output */
};

struct zo_gpt2 {
  struct zo_gpt2_config cfg;
  zo_backend_t backend;
  struct zo_tensor_table table; /* parameters; gradients use the same offsets */
  int B, T;                     /* activation shapes were planned for (B, T) */
  bool training;                /* false: no gradients, one block's activations reused */
  struct zo_gpt2_layout layout;
  enum zo_dtype dtype;          /* layout.dtype: parameters and activations */
  size_t esize;                 /* bytes of one dtype element */
  size_t head_numel;            /* elements of the embedding range [0, layer_offset[0]) */
  size_t tail_numel;            /* elements of the ln_f range at the end of the table */
  /* params: device (table.numel), or with param_slots the resident ranges
   * only, (head_numel + tail_numel): embeddings then ln_f. grads likewise
   * with grad_slots. */
  void *params;                 /* working dtype */
  float *grads;
  float *grads_acc;             /* device (table.numel) accumulator, or NULL */
  float *master;                /* device (table.numel) fp32 master weights when
                                 * layout.master, else NULL */
  void **param_slots;           /* (layout.param_slots) device, layer_numel each */
  float **grad_slots;           /* (layout.grad_slots) device, layer_numel each */
  float *adam_m, *adam_v;       /* device (table.numel) when layout.optimizer */
  const struct zo_gpt2_hooks *hooks; /* NULL: no hooks */
  void *wte, *wpe, *lnfw, *lnfb;        /* views into params */
  float *dwte, *dwpe, *dlnfw, *dlnfb;   /* views into grads */
  struct zo_gpt2_block *blocks;  /* (n_layer) views into params */
  struct zo_gpt2_block *dblocks; /* (n_layer) views into grads (fp32) */
  /* activations (device, working dtype unless noted) */
  int32_t *inputs;               /* (B, T) */
  int32_t *targets;              /* (B, T) */
  void *encoded;                 /* (B, T, C) */
  struct zo_gpt2_block_acts *acts; /* (n_layer); checkpointed blocks point at one
                                    * shared set, except res3, their own output */
  void *ckpt_in[2];              /* (B, T, C) each, ckpt_on_host: the inputs of
                                  * checkpointed block l live in ckpt_in[l % 2]
                                  * (ckpt_in[0] is encoded) */
  void *lnf;                     /* (B, T, C) */
  float *lnf_mean, *lnf_rstd;    /* (B, T) each, fp32 */
  int head_rows;                 /* rows per LM-head chunk (zo_gpt2_head_rows) */
  int head_row0;                 /* first row of (B*T) that logits holds now */
  bool head_done;                /* forward_train already ran the head's backward */
  void *logits;                  /* (head_rows, Vp): the last chunk computed, rows
                                  * head_row0.. of (B*T); dlogits after backward */
  float *losses;                 /* (B, T) fp32 */
  /* backward scratch (device, working dtype) */
  void *dresidual;               /* (B, T, C) */
  void *dbtc;                    /* (B, T, C) */
  void *dqkv;                    /* (B, T, 3C) */
  void *dfch;                    /* (B, T, 4C) */
  void *datt;                    /* (B, NH, T, T) */
  struct zo_arena arena;         /* owns all device memory above */
  float *host_losses;            /* (B, T) host copy for mean_loss */
};

/* Validates shapes and fills padded_vocab_size. Returns 0 or -EINVAL with a
 * message naming the field and what would be valid. */
int zo_gpt2_config_check(struct zo_gpt2_config *cfg);

/* Builds the parameter table (Hugging Face names, our layout). Returns 0 or -errno. */
int zo_gpt2_build_table(const struct zo_gpt2_config *cfg, struct zo_tensor_table *table);

/* Device bytes the model needs for parameters, gradients, activations and
 * scratch at micro-batch (B, T); training false: for zo_gpt2_init_inference.
 * 0 when cfg is invalid. */
size_t zo_gpt2_device_bytes(const struct zo_gpt2_config *cfg, int B, int T, bool training);

/* Device bytes of a layout at micro-batch (B, T), exactly what
 * zo_gpt2_init_layout carves; by_category (may be NULL) receives the bytes of
 * each enum zo_mem_category. 0 when cfg is invalid. */
size_t zo_gpt2_device_plan(const struct zo_gpt2_config *cfg, int B, int T,
                           const struct zo_gpt2_layout *layout,
                           size_t by_category[ZO_MEM_N_CATEGORIES]);

/* Creates an fp32 model with device buffers for micro-batch (B, T)
 * (T <= max_seq_len), parameters zeroed. Returns NULL with zo_last_error() set. */
struct zo_gpt2 *zo_gpt2_init(const struct zo_gpt2_config *cfg, zo_backend_t backend, int B, int T);
/* The same with an offload layout; the arena is sized by zo_gpt2_device_plan.
 * With param_slots the blocks' views are unset until a hook binds them. */
struct zo_gpt2 *zo_gpt2_init_layout(const struct zo_gpt2_config *cfg, zo_backend_t backend, int B,
                                    int T, const struct zo_gpt2_layout *layout);
/* A forward-only fp32 model (eval, sample): no gradients or backward scratch,
 * and one block's activations shared by all blocks, so it needs far less
 * device memory. zo_gpt2_zero_grad and zo_gpt2_backward must not be called on
 * it. (zo_gpt2_init_layout with training false gives one in another dtype.) */
struct zo_gpt2 *zo_gpt2_init_inference(const struct zo_gpt2_config *cfg, zo_backend_t backend,
                                       int B, int T);
/* Frees the model and its device memory. Accepts NULL. */
void zo_gpt2_free(struct zo_gpt2 *m);

/* Fills host buffer params (table.numel) with GPT-2's initialisation from seed:
 * N(0, 0.02) for weights and embeddings, N(0, 0.02/sqrt(2 n_layer)) for the
 * two residual projections, zero biases, unit layernorm weights, zero padded
 * wte rows. Deterministic for a seed. */
void zo_gpt2_init_params(const struct zo_gpt2 *m, float *params, uint64_t seed);

/* Points m->blocks[l] at a block's parameters starting at params_base (device,
 * layer_numel elements of the working dtype) and m->dblocks[l] at grads_base
 * (fp32); NULL leaves a view as it is. */
void zo_gpt2_bind_block(struct zo_gpt2 *m, int l, void *params_base, float *grads_base);
/* Points the resident gradient views (dwte, dwpe, dlnfw, dlnfb) at head
 * (head_numel elements) and tail (tail_numel elements). */
void zo_gpt2_bind_resident_grads(struct zo_gpt2 *m, float *head, float *tail);

/* Host <-> device parameter copies (synchronous), full layouts only: host
 * params are fp32 (table.numel); upload rounds them to the working dtype (and
 * sets the fp32 master when the layout has one, which download then reads;
 * otherwise download widens the working copy). Conversions go through a
 * small host staging buffer, chunk by chunk. Return 0 or -errno. */
int zo_gpt2_upload_params(struct zo_gpt2 *m, const float *host_params);
int zo_gpt2_download_params(const struct zo_gpt2 *m, float *host_params);

/* Queues the forward pass on stream. inputs, targets: host (B, T) token ids,
 * copied to the device on stream (the host buffers must stay valid until the
 * stream is synchronized); targets NULL skips the loss. B, T must not exceed
 * the planned shapes. The LM head runs in chunks: afterwards logits holds the
 * last chunk, rows head_row0..B*T-1 (so always the last row, for sampling;
 * all rows when head_rows >= B*T). */
void zo_gpt2_forward(struct zo_gpt2 *m, const int32_t *inputs, const int32_t *targets, int B,
                     int T, zo_stream_t stream);

/* Queues the forward pass and, chunk by chunk, the LM head's backward: each
 * chunk's logits, losses and dlogits (in place, scaled by dloss), then its
 * rows of d(ln_f) and its part of dwte (accumulated), then ln_f's backward;
 * zo_gpt2_backward then starts at the last block. The same arithmetic as
 * zo_gpt2_forward followed by zo_gpt2_backward (bit-identical), without
 * computing the logits twice. Hooks run in the same order (the unit-L
 * backward pair right after the forward). Training models only. */
void zo_gpt2_forward_train(struct zo_gpt2 *m, const int32_t *inputs, const int32_t *targets, int B,
                           int T, float dloss, zo_stream_t stream);

/* Device address of block l's input (the embedding output or block l-1's
 * output), (B, T, C) of the working dtype. */
void *zo_gpt2_block_input(struct zo_gpt2 *m, int l);

/* Device address of element i of a working-dtype buffer p of m. */
static inline void *zo_gpt2_at(const struct zo_gpt2 *m, void *p, size_t i) {
  return (char *)p + i * m->esize;
}

/* Queues zeroing of the gradient buffer (m->grads, whichever its size). */
void zo_gpt2_zero_grad(struct zo_gpt2 *m, zo_stream_t stream);

/* Queues the backward pass of the last forward (which must have had targets):
 * gradients of (dloss * sum of per-token losses) are ACCUMULATED into
 * m->grads. For the mean over B*T tokens and K accumulation steps pass
 * dloss = 1 / (B*T*K). Recomputes the LM head's logits chunk by chunk
 * (unless zo_gpt2_forward_train did the head) and leaves dlogits of the last
 * chunk in logits. */
void zo_gpt2_backward(struct zo_gpt2 *m, int B, int T, float dloss, zo_stream_t stream);

/* Synchronizes stream, then returns the mean per-token loss of the last
 * forward over tokens whose target is not -1. Returns 0 or -errno. */
int zo_gpt2_mean_loss(struct zo_gpt2 *m, const int32_t *host_targets, int B, int T,
                      zo_stream_t stream, double *loss);

/* Training FLOPs per token (6 * matmul params + attention), for TFLOP/s. */
double zo_gpt2_flops_per_token(const struct zo_gpt2_config *cfg, int T);

#ifdef __cplusplus
}
#endif
#endif /* ZO_GPT2_H */
