/* An architecture as a description the generic model runs (engine/model/model.c):
 * its configuration rules, its tensor table, the buffers it keeps per block
 * and for backward, its constant tables, its per-layer program over the
 * shared zo_backend kernels, its initialisation, and its Hugging Face names
 * and config.json. The scheduler, the offload tiers, the planner and the
 * checkpoint code see only struct zo_model and the table, never an
 * architecture. Private to the engine. */
#ifndef ZO_ENGINE_ARCH_H
#define ZO_ENGINE_ARCH_H

#include <jansson.h>

#include "zo/model.h"

/* A device buffer the model carves for the architecture. */
struct zo_arch_buf {
  const char *name; /* carve purpose, "activations (qkv)": the prefix decides the report category */
  size_t per_token; /* elements per (b, t) position */
  bool f32;         /* fp32 (statistics) rather than the working dtype */
};

/* A constant fp32 table (rotary angles), filled on the host and uploaded at init. */
struct zo_arch_const {
  const char *name;
  size_t numel;
};

/* One tensor of the Hugging Face checkpoint as a view of one of ours: rows
 * [row0, row0 + rows) of table tensor `tensor` (all its columns; the whole of
 * a 1-D tensor), stored transposed by Hugging Face when transpose (GPT-2's
 * Conv1D (in, out)). */
struct zo_hf_tensor {
  char name[ZO_TENSOR_NAME_MAX];
  int tensor;        /* table index */
  int row0, rows;    /* rows of our tensor */
  bool transpose;
  int ndim;
  int64_t shape[2];  /* the Hugging Face shape */
};

/* How one table tensor is initialised: rows [0, zero_from_row) get the kind,
 * the rest zero (padded vocabulary rows). A NORMAL tensor draws
 * 2 ceil(numel / 2) values of the splitmix64 stream, padded rows included,
 * so every tensor's draws start at a position known in advance and any
 * element range can be generated alone (zo_model_init_range). */
enum zo_init_kind { ZO_INIT_NORMAL, ZO_INIT_ONES, ZO_INIT_ZEROS };
struct zo_init_spec {
  enum zo_init_kind kind;
  double std;        /* NORMAL: standard deviation */
  int zero_from_row; /* rows from here on are zero (rows of a 1-D tensor: elements) */
  bool has_zero_row; /* row zero_row is zero too (the embedding's padding index, as
                      * transformers' _init_weights), its draws still consumed */
  int zero_row;
};

struct zo_arch {
  enum zo_model_arch id;
  const char *name; /* "GPT-2", "Llama": for messages */
  /* Validates cfg and fills its defaults. Returns 0 or -EINVAL with a message. */
  int (*config_check)(struct zo_model_config *cfg);
  /* The block-major parameter table (zo/tensor.h). Returns 0 or -errno. */
  int (*build_table)(const struct zo_model_config *cfg, struct zo_tensor_table *t);
  /* Buffers for sequence length T, written to out (at most
   * ZO_MODEL_MAX_BUFS); each returns its count. acts: what one block keeps
   * for backward, act_out among them its output (B, T, C). fin: the final
   * norm's, fin[0] its output (B, T, C). scratch: backward workspace,
   * scratch[0] the residual stream's gradient and scratch[1] a norm output's
   * gradient, both (B, T, C). */
  int (*acts)(const struct zo_model_config *cfg, int T, struct zo_arch_buf *out);
  int act_out;
  int (*fin)(const struct zo_model_config *cfg, struct zo_arch_buf *out);
  int (*scratch)(const struct zo_model_config *cfg, int T, struct zo_arch_buf *out);
  /* Constant tables (may be NULL: none); consts_fill writes table i to host. */
  int (*consts)(const struct zo_model_config *cfg, struct zo_arch_const *out);
  void (*consts_fill)(const struct zo_model_config *cfg, int i, float *host);
  /* The program, queued on s for a pass of shape (B, T):
   * embed_forward: m->inputs -> m->encoded. embed_backward: the embedding's
   * gradients from scratch[0]. block_forward: block l from its input
   * (zo_model_block_input) into its acts, the output only when output.
   * block_backward: scratch[0] holds d(output) and receives d(input) (the
   * residual stream: added to, not overwritten), the block's gradient views
   * accumulate. final_forward: x (the last block's output) -> fin[0].
   * final_backward: scratch[1] = d(fin[0]) -> scratch[0] (zeroed by the
   * caller, accumulated into) and the norm's gradients. */
  void (*embed_forward)(struct zo_model *m, int B, int T, zo_stream_t s);
  void (*embed_backward)(struct zo_model *m, int B, int T, zo_stream_t s);
  void (*block_forward)(struct zo_model *m, int l, int B, int T, bool output, zo_stream_t s);
  void (*block_backward)(struct zo_model *m, int l, int B, int T, zo_stream_t s);
  void (*final_forward)(struct zo_model *m, const void *x, int B, int T, zo_stream_t s);
  void (*final_backward)(struct zo_model *m, const void *x, int B, int T, zo_stream_t s);
  /* Table index of the LM head's weight (Vp, C): the embedding when tied. */
  int (*head_tensor)(const struct zo_model_config *cfg);
  /* Initialisation of table tensor i (in table order). */
  struct zo_init_spec (*init_tensor)(const struct zo_model_config *cfg, const struct zo_tensor_info *ti, int i);
  double (*flops_per_token)(const struct zo_model_config *cfg, int T);
  /* Hugging Face: the checkpoint's tensors as views of ours (out may be
   * NULL to count; at most 4 per table tensor); whether a tensor of a file
   * carries nothing of ours (attention-mask buffers, a tied head); another
   * spelling of a name to try on load (NULL: none); config.json. */
  int (*hf_tensors)(const struct zo_model *m, struct zo_hf_tensor *out);
  bool (*hf_ignored)(const struct zo_model_config *cfg, const char *name);
  const char *(*hf_alias)(const char *name, char *buf, size_t size);
  json_t *(*hf_config)(const struct zo_model_config *cfg);
  int (*hf_config_parse)(json_t *j, const char *path, struct zo_model_config *cfg);
};

extern const struct zo_arch zo_arch_gpt2;
extern const struct zo_arch zo_arch_llama;

/* The Llama family's config.json (engine/model/arch_llama_hf.c): parse
 * (both transformers dialects; every key read, ignored with a reason or
 * refused by name) and write (both dialects' rotary keys). */
int zo_llama_hf_config_parse(json_t *j, const char *path, struct zo_model_config *cfg);
json_t *zo_llama_hf_config(const struct zo_model_config *cfg);

/* The description of arch (aborts on an unknown value: a broken contract). */
const struct zo_arch *zo_arch_of(enum zo_model_arch arch);
/* The Hugging Face tensor map of mc's architecture (hf_tensors over a model
 * that holds only mc and its table), allocated into *out (n entries; free
 * it). table, when not NULL, receives the tensor table the map indexes
 * (free it with zo_tensor_table_free); else it is freed here. 0 or -errno. */
int zo_arch_hf_map(const struct zo_model_config *mc, struct zo_hf_tensor **out, int *n,
                   struct zo_tensor_table *table);

/* Shared by the descriptions. */

/* Dropout sites; with the layer they make the Philox counter's site word. */
enum zo_drop_site { ZO_DROP_EMBED = 1, ZO_DROP_ATTN = 2, ZO_DROP_RESID_ATTN = 3, ZO_DROP_RESID_MLP = 4 };
/* Dropout of n dt elements at (site, layer) with the site's probability, out
 * = dropped inp, when a training pass is active and the probability is
 * non-zero: returns out. Otherwise queues nothing and returns inp. The
 * backward calls it on the gradient with the same site and layer. */
const void *zo_arch_dropout(const struct zo_model *m, void *out, const void *inp, size_t n, enum zo_drop_site site,
                            int layer, zo_stream_t s);

/* Appends a tensor to t at *offset (elements); cols 0 makes it 1-D. */
void zo_arch_table_add(struct zo_tensor_table *t, size_t *offset, const char *name, int layer, int rows,
                       int cols);
/* Allocates t's arrays for n_tensors tensors and n_layer layers. Returns 0 or -ENOMEM. */
int zo_arch_table_alloc(struct zo_tensor_table *t, int n_tensors, int n_layer);
/* Reads the integer key of j (path for the message). Returns 0 or -EINVAL. */
int zo_arch_json_int(json_t *j, const char *key, const char *path, long *out);
/* Reads the required key of j, a positive integer that fits an int, into
 * *out. Returns 0 or -EINVAL naming key, value and file. */
int zo_arch_json_size(json_t *j, const char *key, const char *path, long *out);
/* Reads key of j, a positive finite JSON number, into *out; absent or null:
 * def (NAN: the key is required). Returns 0 or -EINVAL naming key, value and
 * file. */
int zo_arch_json_positive(json_t *j, const char *key, const char *path, double def, double *out);
/* Reads the optional dropout probability key of j into *out (absent or
 * null: 0). Returns 0 or -EINVAL outside [0, 1). */
int zo_arch_json_prob(json_t *j, const char *key, const char *path, float *out);

/* Table index of block l's tensor k (k counts from the block's first). */
static inline int zo_arch_block_tensor(const struct zo_tensor_table *t, int l, int k) {
  return t->head_tensors + l * t->block_tensors + k;
}

/* The LM head (engine/model/model_head.c), for engine/model/model.c between unit
 * n_layer's hooks, after the final norm's forward. A pass without backward:
 * every row's logits (kept whole with pieces, the last row chunk's without)
 * and with targets the losses. */
void zo_model_head_forward(struct zo_model *m, int B, int T, bool targets, zo_stream_t s);
/* A training pass's forward part: the pieces' logits (a whole head runs fused
 * in zo_model_head_backward). */
void zo_model_head_forward_train(struct zo_model *m, int B, int T, zo_stream_t s);
/* The losses, dlogits (dloss applied), d(final output) into scratch[1] and
 * the head weight's gradient (accumulated). */
void zo_model_head_backward(struct zo_model *m, int B, int T, float dloss, zo_stream_t s);

#endif /* ZO_ENGINE_ARCH_H */
