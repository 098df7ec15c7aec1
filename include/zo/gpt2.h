/* GPT-2 model: tensor table, parameters, gradients and activations in
 * device-arena buffers, forward, backward and loss over zo_backend ops.
 * Parameters are laid out block-major ([wte, wpe] [block 0] ... [block L-1]
 * [ln_f]) so a transformer block is one contiguous (offset, numel) range, and
 * gradients share the parameters' table. Linear weights are stored (out, in)
 * (PyTorch nn.Linear); checkpoint I/O transposes to Hugging Face's Conv1D.
 * The vocabulary is padded to a multiple of 64 for compute; padded rows of wte
 * are zero and padded logits never enter the softmax or the loss. Tied input
 * and output embedding, no dropout. */
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

/* Views of one transformer block inside a parameter (or gradient) buffer. */
struct zo_gpt2_block {
  float *ln1w;     /* (C) */
  float *ln1b;     /* (C) */
  float *qkvw;     /* (3C, C) */
  float *qkvb;     /* (3C) */
  float *attprojw; /* (C, C) */
  float *attprojb; /* (C) */
  float *ln2w;     /* (C) */
  float *ln2b;     /* (C) */
  float *fcw;      /* (4C, C) */
  float *fcb;      /* (4C) */
  float *fcprojw;  /* (C, 4C) */
  float *fcprojb;  /* (C) */
};
#define ZO_GPT2_BLOCK_TENSORS 12

/* Activations of one block kept for backward. */
struct zo_gpt2_block_acts {
  float *ln1;      /* (B, T, C) */
  float *ln1_mean; /* (B, T) */
  float *ln1_rstd; /* (B, T) */
  float *qkv;      /* (B, T, 3C) */
  float *atty;     /* (B, T, C) */
  float *att;      /* (B, NH, T, T) */
  float *res2;     /* (B, T, C) residual after attention */
  float *ln2;      /* (B, T, C) */
  float *ln2_mean; /* (B, T) */
  float *ln2_rstd; /* (B, T) */
  float *fch;      /* (B, T, 4C) */
  float *fch_gelu; /* (B, T, 4C) */
  float *res3;     /* (B, T, C) block output */
};

struct zo_gpt2 {
  struct zo_gpt2_config cfg;
  zo_backend_t backend;
  struct zo_tensor_table table; /* parameters; gradients use the same offsets */
  int B, T;                     /* activation shapes were planned for (B, T) */
  bool training;                /* false: no gradients, one block's activations reused */
  float *params;                /* device (table.numel) */
  float *grads;                 /* device (table.numel) */
  float *wte, *wpe, *lnfw, *lnfb;       /* views into params */
  float *dwte, *dwpe, *dlnfw, *dlnfb;   /* views into grads */
  struct zo_gpt2_block *blocks;  /* (n_layer) views into params */
  struct zo_gpt2_block *dblocks; /* (n_layer) views into grads */
  /* activations (device) */
  int32_t *inputs;               /* (B, T) */
  int32_t *targets;              /* (B, T) */
  float *encoded;                /* (B, T, C) */
  struct zo_gpt2_block_acts *acts; /* (n_layer) */
  float *lnf, *lnf_mean, *lnf_rstd; /* (B,T,C), (B,T), (B,T) */
  float *logits;                 /* (B, T, Vp); holds dlogits after backward */
  float *losses;                 /* (B, T) */
  /* backward scratch (device) */
  float *dresidual;              /* (B, T, C) */
  float *dbtc;                   /* (B, T, C) */
  float *dqkv;                   /* (B, T, 3C) */
  float *dfch;                   /* (B, T, 4C) */
  float *datt;                   /* (B, NH, T, T) */
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

/* Creates a model with device buffers for micro-batch (B, T) (T <= max_seq_len),
 * parameters zeroed. Returns NULL with zo_last_error() set. */
struct zo_gpt2 *zo_gpt2_init(const struct zo_gpt2_config *cfg, zo_backend_t backend, int B, int T);
/* A forward-only model (eval, sample): no gradients or backward scratch, and
 * one block's activations shared by all blocks, so it needs far less device
 * memory. zo_gpt2_zero_grad and zo_gpt2_backward must not be called on it. */
struct zo_gpt2 *zo_gpt2_init_inference(const struct zo_gpt2_config *cfg, zo_backend_t backend,
                                       int B, int T);
/* Frees the model and its device memory. Accepts NULL. */
void zo_gpt2_free(struct zo_gpt2 *m);

/* Fills host buffer params (table.numel) with GPT-2's initialisation from seed:
 * N(0, 0.02) for weights and embeddings, N(0, 0.02/sqrt(2 n_layer)) for the
 * two residual projections, zero biases, unit layernorm weights, zero padded
 * wte rows. Deterministic for a seed. */
void zo_gpt2_init_params(const struct zo_gpt2 *m, float *params, uint64_t seed);

/* Host <-> device parameter copies (synchronous). Return 0 or -errno. */
int zo_gpt2_upload_params(struct zo_gpt2 *m, const float *host_params);
int zo_gpt2_download_params(const struct zo_gpt2 *m, float *host_params);

/* Queues the forward pass on stream. inputs, targets: host (B, T) token ids,
 * copied to the device on stream (the host buffers must stay valid until the
 * stream is synchronized); targets NULL skips the loss. B, T must not exceed
 * the planned shapes. */
void zo_gpt2_forward(struct zo_gpt2 *m, const int32_t *inputs, const int32_t *targets, int B,
                     int T, zo_stream_t stream);

/* Queues zeroing of the gradient buffer. */
void zo_gpt2_zero_grad(struct zo_gpt2 *m, zo_stream_t stream);

/* Queues the backward pass of the last forward (which must have had targets):
 * gradients of (dloss * sum of per-token losses) are ACCUMULATED into
 * m->grads. For the mean over B*T tokens and K accumulation steps pass
 * dloss = 1 / (B*T*K). Overwrites logits with dlogits. */
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
