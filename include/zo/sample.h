/* Forward-only uses of a trained or imported model (engine/sample.c):
 * validation loss and text generation on a forward-only model (no
 * gradients, one block's activations shared by all blocks) in the config's
 * precision, loaded from one of our checkpoints, a Hugging Face directory
 * (zo/hf.h) or the seeded init. One process; no offload. */
#ifndef ZO_SAMPLE_H
#define ZO_SAMPLE_H

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
  int n_batches;             /* micro-batches evaluated */
  size_t device_bytes;       /* device arena bytes the evaluation used */
  size_t train_device_bytes; /* what training the same config plans, for comparison */
};

/* Validation loss of the checkpoint (NULL: latest under checkpoint.dir, or
 * model.init_from, or the random init) over n_batches micro-batches of
 * data.val (data.train when val is empty), with a forward-only model.
 * Returns 0 or -errno. */
int zo_eval(const struct zo_config *cfg, const char *checkpoint, int n_batches,
            struct zo_eval_result *out);

struct zo_sample_opts {
  const char *checkpoint; /* as for zo_eval */
  const char *prompt;     /* byte-level text for vocab 256, else comma-separated token ids */
  int n_tokens;           /* tokens to generate */
  double temperature;     /* > 0 */
  int top_k;              /* 0 = whole vocabulary */
  uint64_t seed;
};

/* Generates text (vocab 256: bytes written as text; otherwise token ids) to
 * out. Returns 0 or -errno. */
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

#ifdef __cplusplus
}
#endif
#endif /* ZO_SAMPLE_H */
