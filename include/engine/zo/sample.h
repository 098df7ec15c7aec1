/* Forward-only uses of a trained or imported model (engine/train/sample.c):
 * validation loss and text generation on a forward-only model (no
 * gradients, one block's activations shared by all blocks) in the config's
 * precision, loaded from one of our checkpoints, a Hugging Face directory
 * (zo/hf.h) or the seeded init, and the export of a checkpoint's weights as
 * a Hugging Face directory. One process; no offload. */
#ifndef ZO_SAMPLE_H
#define ZO_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "zo/config.h"
#include "zo/model.h"

#ifdef __cplusplus
extern "C" {
#endif

struct zo_data;

struct zo_eval_result {
  double loss;               /* mean validation loss over the batches */
  double bits_per_byte;      /* summed loss / ln 2 / bytes of the targets' text (the run's tokenizer
                                decodes them; 1 byte each for byte-level data), 0 when unknown */
  double loss_per_token;     /* summed loss / n_tokens (loss is the mean of the batches' means) */
  size_t n_tokens;           /* targets evaluated (masked ones not counted) */
  size_t n_bytes;            /* bytes of text they decode to, 0 when unknown */
  bool has_tokenizer;        /* a tokenizer was found (eval: for the bytes) */
  int n_batches;             /* micro-batches evaluated */
  size_t device_bytes;       /* device arena bytes the evaluation used */
  size_t train_device_bytes; /* what training the same config plans, for comparison */
};

/* The weights eval and sample load, first found: checkpoint; model.init_from
 * when init_from_explicit (given on the command line, it wins over
 * checkpoint.dir); the latest checkpoint under checkpoint.dir;
 * model.init_from; the seeded init, only with random_init (else -ENOENT
 * saying what was looked for). Which one is printed on stderr ("weights:
 * PATH (step N)"). */
struct zo_weights {
  const char *checkpoint;  /* checkpoint directory or model file, NULL: see above */
  bool init_from_explicit; /* model.init_from came from the command line */
  bool random_init;        /* the seeded init is allowed when nothing else is there */
  const char *adapter;     /* --adapter DIR: a PEFT adapter directory, lora.init_from for this
                            * run (it wins over the config's, with a note on stderr); NULL: none */
};

/* Validation loss of the weights w picks over n_batches micro-batches of
 * data.val (data.train when val is empty), with a forward-only model.
 * Returns 0 or -errno. */
int zo_eval_weights(const struct zo_config *cfg, const struct zo_weights *w, int n_batches,
                    struct zo_eval_result *out);
/* The same with only an explicit checkpoint (NULL: as zo_weights says, no random init). */
int zo_eval(const struct zo_config *cfg, const char *checkpoint, int n_batches,
            struct zo_eval_result *out);

struct zo_sample_opts {
  const char *checkpoint; /* as struct zo_weights's */
  bool init_from_explicit; /* as struct zo_weights's */
  bool random_init;        /* as struct zo_weights's */
  const char *adapter;     /* as struct zo_weights's */
  const char *prompt;     /* text, encoded with the tokenizer beside the weights or the run's
                             (model.tokenizer, model.init_from's); without one byte-level text for
                             vocab 256, else comma-separated token ids */
  int n_tokens;           /* tokens to generate */
  double temperature;     /* > 0 */
  int top_k;              /* 0 = whole vocabulary */
  uint64_t seed;
};

/* Generates text (vocab 256: bytes written as text; otherwise token ids) to
 * out from the weights opts picks, with the lora section's PEFT adapter
 * (lora.init_from, or opts->adapter) applied when there is one. Returns 0
 * or -errno. */
int zo_sample(const struct zo_config *cfg, const struct zo_sample_opts *opts, FILE *out);

/* Micro-batches of B x T tokens a validation pass averages over d (B: the
 * global micro-batch's rows): as many as d holds, at least 1, at most 20. */
int zo_eval_n_batches(const struct zo_data *d, int B, int T);

/* Autoregressive generation from m (parameters loaded; forward on stream s)
 * with a sliding window of the model's T tokens: appends n_new tokens drawn
 * with temperature (> 0) and top_k (0: whole vocabulary) from a splitmix64
 * stream of seed to ctx (room for n_ctx + n_new), writing each to out as it
 * is drawn (vocab 256: the byte; else comma-separated ids), then a newline.
 * Synchronizes s after every token. Returns 0 or -errno. */
int zo_sample_generate(struct zo_model *m, zo_stream_t s, int32_t *ctx, int n_ctx, int n_new,
                       double temperature, int top_k, uint64_t seed, FILE *out);

struct zo_tokenizer;
/* zo_sample_generate writing text: with tk the tokens are decoded as they come
 * (an incomplete UTF-8 sequence held back until its last byte, special
 * tokens skipped); with stop_at_eos generation ends at the tokenizer's
 * end-of-text token (not written), as transformers' generate does, else an
 * end-of-text is written as a blank line and generation goes on. tk NULL:
 * as zo_sample_generate. Returns 0 or -errno. */
int zo_sample_generate_text(struct zo_model *m, zo_stream_t s, int32_t *ctx, int n_ctx, int n_new,
                            double temperature, int top_k, uint64_t seed, const struct zo_tokenizer *tk,
                            bool stop_at_eos, FILE *out);

struct zo_export_opts {
  const char *out;        /* the Hugging Face directory to write: new (only its last component is
                             created) or empty */
  enum zo_dtype dtype;    /* of the exported tensors: ZO_F32, ZO_BF16 or ZO_F16 */
  size_t max_shard_bytes; /* tensor bytes a file, 0: one model.safetensors */
  bool adapter;           /* a LoRA run's checkpoint or a PEFT adapter directory, written as a PEFT
                           * adapter directory (fp32) */
  bool merge;             /* the same merged into its base: a whole Hugging Face model */
  const char *base;       /* the adapter's base (a Hugging Face directory); NULL: adapter_config.json's
                           * base_model_name_or_path */
};

struct zo_export_result {
  long step;          /* of the checkpoint, -1 for a Hugging Face directory */
  size_t load_bytes;  /* bytes of the source tensors read */
  size_t bytes;       /* bytes of every file written */
  int n_files;        /* safetensors files written (1: not sharded) */
  double load_s;      /* checking a checkpoint (checksums, trainer state), 0 for a Hugging Face directory */
  double save_s;      /* the streamed copy */
  bool tokenizer;     /* the tokenizer files beside the weights were copied */
};

/* Writes the weights of path (one of our checkpoint directories, its
 * checksums verified, or a Hugging Face directory) to o->out as a weights-only
 * Hugging Face directory (zo_model_save_pretrained_opts: o->dtype, sharded
 * past o->max_shard_bytes, config.json), loadable by transformers and by
 * model.init_from. A checkpoint is checked as a load checks it, then the
 * tensors are streamed from the source files to the output's
 * (zo_model_export_pretrained): no model is built, host memory stays at a
 * few MiB of buffers whatever the model's size, and the files are those a
 * model of o->dtype loaded from the checkpoint would write. On error what
 * was written in o->out is removed. Returns 0 or -errno. */
/* A LoRA run's checkpoint or a PEFT adapter directory (adapter_config.json)
 * needs o->adapter (the adapter, read against its base's shapes, written as
 * PEFT writes it, with the run's tokenizer files) or o->merge (the base's
 * weights in host memory, fp32, with W + scale B A folded in for every
 * adapter, written as above, with the tokenizer files of the run or else of
 * the base). */
int zo_export(const char *path, const struct zo_export_opts *o, struct zo_export_result *res);

#ifdef __cplusplus
}
#endif
#endif /* ZO_SAMPLE_H */
