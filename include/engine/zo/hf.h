/* Hugging Face model directories and safetensors files (engine/store/hf_dir.c):
 * each architecture's names and layouts (GPT-2: Conv1D weights (in, out),
 * wte (V, C) without padding, tied head not stored; Llama: q/k/v and
 * gate/up as separate tensors, lm_head.weight when untied) and its
 * config.json, loadable by transformers. Loads take one safetensors file, a
 * directory holding model.safetensors, or the shards that
 * model.safetensors.index.json names, tensors in F32, BF16 or F16. Our own
 * checkpoints (optimizer states, trainer state, checksums) are zo/checkpoint.h.
 * Every function is synchronous; messages go to zo_last_error(). */
#ifndef ZO_HF_H
#define ZO_HF_H

#include "zo/model.h"
#include "zo/state.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads the model config of a checkpoint directory's config.json, or of a
 * safetensors file's shapes (n_head cannot be inferred: it is taken from
 * n_head). A tied model whose files hold an lm_head.weight with other values
 * than the embedding: a Llama comes back untied (one note on stderr, as
 * transformers 5 loads it), a GPT-2 is refused. Returns 0 or -errno with a
 * message. */
int zo_model_config_from_pretrained(const char *path, int n_head, struct zo_model_config *cfg);

/* Loads a Hugging Face checkpoint of m's architecture (any of the forms
 * above; GPT-2 names with or without the "transformer." prefix) into host
 * params laid out by m's table. Every tensor must be present with the expected shape: a
 * mismatch names the tensor and both shapes. Returns 0 or -errno. */
int zo_model_load_safetensors(const char *path, const struct zo_model *m, float *params);
/* The same, writing the parameters through io, piece by piece. */
int zo_model_load_safetensors_io(const char *path, const struct zo_model *m, const struct zo_state_io *io);

/* Writes host params as the architecture's Hugging Face model.safetensors
 * (atomically) and config.json beside it in dir. Returns 0 or -errno. */
int zo_model_save_pretrained(const char *dir, const struct zo_model *m, const float *params);
/* The same, reading the parameters through io. */
int zo_model_save_pretrained_io(const char *dir, const struct zo_model *m, const struct zo_state_io *io);

struct zo_hf_save_opts {
  enum zo_dtype dtype;    /* of the tensors in the files: ZO_F32, ZO_BF16 or ZO_F16 (rounded to nearest even);
                             config.json's torch_dtype says it */
  size_t max_shard_bytes; /* bytes of tensor data a file; 0: one model.safetensors */
};
/* The same with a dtype and shards: past max_shard_bytes the tensors go, in
 * order, to model-0000k-of-0000n.safetensors files as transformers splits
 * them (a tensor larger than the limit alone in its file), named by
 * model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map"}).
 * Each file is written atomically and streamed: a tensor at a time through
 * io, converted in 1 MiB pieces. Files of an earlier save in dir are left
 * alone: give an empty directory. Returns 0 or -errno. */
int zo_model_save_pretrained_opts(const char *dir, const struct zo_model *m, const struct zo_state_io *io,
                                  const struct zo_hf_save_opts *opts);

/* Exports the Hugging Face checkpoint at src_path (any of the load's forms,
 * its tensors in F32, BF16 or F16) of model cfg to dir as
 * zo_model_save_pretrained_opts would write it from a model of o->dtype
 * loaded from it (the same files, byte for byte: each value is rounded once,
 * to nearest even, to o->dtype), without a model: tensor by tensor from the
 * mapped source files, in pieces of ZO_ST_FILL_CHUNK bytes through a few MiB
 * of buffers, whatever the model's size. Missing, misshapen and unexpected
 * tensors are refused by name before anything is written. *read_bytes: the
 * source tensors' bytes. Returns 0 or -errno with a message. */
int zo_model_export_pretrained(const char *src_path, const char *dir, const struct zo_model_config *cfg,
                               const struct zo_hf_save_opts *o, size_t *read_bytes);
#ifdef __cplusplus
}
#endif
#endif /* ZO_HF_H */
