/* Forward-only uses of a model: evaluation (mean validation loss) and
 * sampling (autoregressive generation with temperature and top-k), on a
 * forward-only model (zo_model_init_layout with training false: no
 * gradients, one block's activations shared by all blocks) loaded from a
 * checkpoint, a Hugging Face directory or, only when asked for
 * (--random-init), the seeded init, in the config's precision; which one is
 * said on stderr. Eval and sample apply the lora section's PEFT adapter
 * (lora.init_from, --adapter) to it. Nothing here trains or offloads; the
 * generation loop is also what `train --sample N` runs on the trained model
 * (engine/train/train.c). Export is engine/train/export.c's. */
#include "zo/sample.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo/checkpoint.h"
#include "zo/cpu.h"
#include "zo/data.h"
#include "zo/fsutil.h"
#include "zo/hf.h"
#include "zo/lora.h"
#include "zo/model.h"
#include "zo/run_tokenizer.h"
#include "zo/state.h"
#include "zo/tokenizer.h"
#include "zo/train_setup.h"

#include "../model/arch.h"
#include "../model/lora_attach.h"

/* Bytes of text the trained targets of tg stand for: their decoding with
 * tk (special tokens skipped), one byte each for byte-level data (tk NULL,
 * vocabulary 256), 0 when neither is known. */
static int target_bytes(const struct zo_tokenizer *tk, int V, const int32_t *tg, size_t n, int32_t *scratch,
                        size_t *bytes) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (tg[i] >= 0) scratch[k++] = tg[i];
  if (!tk) {
    *bytes = V == 256 ? k : 0;
    return 0;
  }
  char *text;
  size_t len;
  if (zo_tokenizer_decode(tk, scratch, k, true, &text, &len)) return zo_error(-ENOMEM, "out of host memory");
  free(text);
  *bytes = len;
  return 0;
}

/* Mean loss over n micro-batches of d from position 0 (forward only), and
 * the bits per byte of the text the targets decode to (0 when unknown). */
static int eval_loss(struct zo_model *m, struct zo_data *d, int n, int32_t *in, int32_t *tg, zo_stream_t s,
                     const struct zo_tokenizer *tk, struct zo_eval_result *out) {
  double sum = 0.0, nats = 0.0;
  size_t bytes = 0, tokens = 0;
  const size_t BT = (size_t)m->B * (size_t)m->T;
  int32_t *scratch = malloc(BT * sizeof *scratch);
  if (!scratch) return zo_error(-ENOMEM, "out of host memory for evaluation batches");
  int err = 0;
  zo_data_seek(d, 0);
  for (int i = 0; i < n && !err; i++) {
    double l;
    size_t nb = 0, nv = 0;
    if ((err = zo_data_next(d, in, tg))) break;
    zo_model_forward(m, in, tg, m->B, m->T, s);
    if ((err = zo_model_mean_loss(m, tg, m->B, m->T, s, &l))) break;
    if ((err = target_bytes(tk, m->cfg.vocab_size, tg, BT, scratch, &nb))) break;
    for (size_t k = 0; k < BT; k++) nv += tg[k] >= 0;
    sum += l;
    nats += l * (double)nv;
    tokens += nv;
    bytes += nb;
  }
  free(scratch);
  if (err) return err;
  out->loss = sum / n;
  out->n_tokens = tokens;
  out->n_bytes = bytes;
  out->bits_per_byte = bytes ? nats / log(2.0) / (double)bytes : 0.0;
  out->loss_per_token = tokens ? nats / (double)tokens : 0.0;
  return 0;
}

int zo_eval_n_batches(const struct zo_data *d, int B, int T) {
  size_t n = zo_data_n_tokens(d) / ((size_t)B * (size_t)T);
  return n < 1 ? 1 : n > 20 ? 20 : (int)n;
}

/* splitmix64 for sampling: reproducible for a seed. */
static double uniform01(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

static int cmp_desc(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x < y) - (x > y);
}

/* Draws the next token from logits row (V real entries) with temperature and top-k. */
static int sample_token(const float *logits, int V, double temperature, int top_k, float *scratch,
                        uint64_t *rng) {
  float threshold = -INFINITY;
  if (top_k > 0 && top_k < V) {
    memcpy(scratch, logits, (size_t)V * sizeof(float));
    qsort(scratch, (size_t)V, sizeof(float), cmp_desc);
    threshold = scratch[top_k - 1];
  }
  double maxv = -INFINITY, sum = 0.0;
  for (int i = 0; i < V; i++)
    if (logits[i] >= threshold && logits[i] > maxv) maxv = logits[i];
  for (int i = 0; i < V; i++)
    sum += logits[i] >= threshold ? exp((logits[i] - maxv) / temperature) : 0.0;
  double r = uniform01(rng) * sum, acc = 0.0;
  int last = 0;
  for (int i = 0; i < V; i++) {
    if (logits[i] < threshold) continue;
    acc += exp((logits[i] - maxv) / temperature);
    last = i;
    if (acc >= r) return i;
  }
  return last;
}

/* Writes the text of the generated ids[0, n) that has not been written yet
 * (*done bytes were): all of it when final, else up to an incomplete UTF-8
 * sequence at the end (decoded as U+FFFD until its next token comes). */
static int write_text(const struct zo_tokenizer *tk, const int32_t *ids, size_t n, bool skip_special, bool final,
                      size_t *done, FILE *out) {
  char *text;
  size_t len;
  if (zo_tokenizer_decode(tk, ids, n, skip_special, &text, &len)) return zo_error(-ENOMEM, "out of host memory");
  size_t end = len;
  if (!final && end >= 3 && !memcmp(text + end - 3, "\xef\xbf\xbd", 3)) end -= 3;
  if (end > *done) {
    fwrite(text + *done, 1, end - *done, out);
    *done = end;
  }
  free(text);
  return 0;
}

int zo_sample_generate(struct zo_model *m, zo_stream_t s, int32_t *ctx, int n_ctx, int n_new,
                       double temperature, int top_k, uint64_t seed, FILE *out) {
  return zo_sample_generate_text(m, s, ctx, n_ctx, n_new, temperature, top_k, seed, NULL, false, out);
}

int zo_sample_generate_text(struct zo_model *m, zo_stream_t s, int32_t *ctx, int n_ctx, int n_new,
                            double temperature, int top_k, uint64_t seed, const struct zo_tokenizer *tk,
                            bool stop_at_eos, FILE *out) {
  int n_ctx0 = n_ctx; /* the first id of the document being written */
  const int32_t eos = tk ? zo_tokenizer_eos_id(tk) : -1;
  size_t done = 0;
  const int V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size, T = m->T;
  int32_t *window = calloc((size_t)T, sizeof *window);
  float *row = malloc((size_t)Vp * sizeof *row), *scratch = malloc((size_t)V * sizeof *scratch);
  void *raw = malloc((size_t)Vp * m->esize);
  int err = 0;
  if (!window || !row || !scratch || !raw) {
    err = zo_error(-ENOMEM, "out of host memory for sampling");
    goto out;
  }
  uint64_t rng = seed;
  for (int i = 0; i < n_new; i++) {
    int len = n_ctx < T ? n_ctx : T;
    memcpy(window, ctx + n_ctx - len, (size_t)len * sizeof *window);
    zo_model_forward(m, window, NULL, 1, len, s);
    /* The LM head runs in chunks; the last row is in the last one, in the
     * working dtype, widened here. */
    const void *last = zo_model_at(m, m->logits, (size_t)(len - 1 - m->head_row0) * (size_t)Vp);
    if ((err = m->backend->memcpy_async(raw, last, (size_t)Vp * m->esize, ZO_COPY_D2H, s)) ||
        (err = m->backend->stream_synchronize(s)))
      goto out;
    zo_cpu_cast(row, ZO_F32, raw, m->dtype, (size_t)Vp);
    int tok = sample_token(row, V, temperature, top_k, scratch, &rng);
    if (stop_at_eos && tok == eos) {
      /* Said on stderr after the text (stdout holds the text alone). */
      if (tk && (err = write_text(tk, ctx + n_ctx0, (size_t)(n_ctx - n_ctx0), true, true, &done, out))) goto out;
      fputc('\n', out);
      fflush(out);
      fprintf(stderr, "sample: stopped at the end-of-text token (id %d) after %d of %d tokens\n", eos, i, n_new);
      goto out;
    }
    ctx[n_ctx++] = tok;
    if (tk && tok == eos) {
      /* Going on past the end of a document: a blank line, then the next. */
      if ((err = write_text(tk, ctx + n_ctx0, (size_t)(n_ctx - 1 - n_ctx0), true, true, &done, out))) goto out;
      fputs("\n\n", out);
      n_ctx0 = n_ctx;
      done = 0;
    } else if (tk) {
      if ((err = write_text(tk, ctx + n_ctx0, (size_t)(n_ctx - n_ctx0), true, false, &done, out))) goto out;
    } else if (V == 256) {
      fputc(tok, out);
    } else {
      fprintf(out, "%s%d", i ? "," : "", tok);
    }
    fflush(out);
  }
  if (tk && (err = write_text(tk, ctx + n_ctx0, (size_t)(n_ctx - n_ctx0), true, true, &done, out))) goto out;
  fputc('\n', out);
out:
  free(window);
  free(raw);
  free(row);
  free(scratch);
  return err;
}

/* Fills the context from a prompt: bytes for vocab 256, else token ids. */
static int parse_prompt(const char *prompt, int V, int32_t *ctx, int cap, int *n) {
  *n = 0;
  if (!prompt || !prompt[0]) {
    ctx[(*n)++] = V == 256 ? '\n' : 0;
    return 0;
  }
  if (V == 256) {
    for (const unsigned char *p = (const unsigned char *)prompt; *p && *n < cap; p++) ctx[(*n)++] = *p;
    return 0;
  }
  const char *p = prompt;
  while (*p && *n < cap) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0 || v >= V)
      return zo_error(-EINVAL, "--prompt: \"%s\" is not a comma-separated list of token ids below %d",
                      prompt, V);
    ctx[(*n)++] = (int32_t)v;
    p = *end == ',' ? end + 1 : end;
  }
  return 0;
}

/* The context from a prompt encoded with tk as transformers' tokenizer(prompt)
 * does (its special tokens added); an empty prompt is the beginning-of-text
 * token, else the end-of-text one (GPT-2 starts there). */
static int prompt_tokens(const struct zo_tokenizer *tk, const char *prompt, int V, int32_t *ctx, size_t cap,
                         int *n) {
  int32_t *ids = NULL;
  size_t n_ids = 0, ids_cap = 0;
  if (prompt && prompt[0] &&
      zo_tokenizer_encode(tk, prompt, strlen(prompt), true, &ids, &n_ids, &ids_cap))
    return zo_error(-ENOMEM, "out of host memory encoding the prompt");
  if (n_ids == 0) {
    const int32_t start = zo_tokenizer_bos_id(tk) >= 0 ? zo_tokenizer_bos_id(tk) : zo_tokenizer_eos_id(tk);
    if (start < 0) {
      free(ids);
      return zo_error(-EINVAL, "sample: an empty prompt needs a beginning- or end-of-text token, and the "
                               "tokenizer has neither: give --prompt TEXT");
    }
    ctx[0] = start;
    *n = 1;
    free(ids);
    return 0;
  }
  int err = 0;
  for (size_t k = 0; k < n_ids && !err; k++)
    if (ids[k] < 0 || ids[k] >= V)
      err = zo_error(-EINVAL, "--prompt: token id %d of the encoded prompt is outside the model's vocabulary of "
                              "%d: the tokenizer does not belong to this model", (int)ids[k], V);
  if (!err && n_ids > cap) err = zo_error(-EINVAL, "--prompt: %zu tokens, more than the %zu planned", n_ids, cap);
  if (!err) memcpy(ctx, ids, n_ids * sizeof *ids);
  *n = (int)n_ids;
  free(ids);
  return err;
}

/* Whether dir holds a PEFT adapter (a LoRA run's checkpoint). */
static bool is_adapter_dir(const char *dir) {
  char p[PATH_MAX + 32];
  return snprintf(p, sizeof p, "%s/adapter_config.json", dir) > 0 && access(p, F_OK) == 0;
}

/* checkpoint.dir's latest checkpoint into path when it is a LoRA run's
 * (its adapter, over model.init_from's base), else "". */
static void latest_adapter(const struct zo_config *cfg, char *path, size_t size) {
  const char *dir = cfg->checkpoint.dir && cfg->checkpoint.dir[0] ? cfg->checkpoint.dir : NULL;
  if (!dir || zo_checkpoint_latest(dir, path, size) != 0 || !is_adapter_dir(path)) path[0] = '\0';
}

/* Which weights a forward-only model loads, in this order: the explicit
 * checkpoint; model.init_from when the command line gave it; the latest
 * checkpoint under checkpoint.dir unless it is a LoRA run's (an adapter); model.init_from from the config; the
 * seeded init, only when w->random_init allows it. Writes the path to load
 * ("" for the seeded init) and says which on stderr. */
static int choose_weights(const struct zo_config *cfg, const struct zo_weights *w, char *path, size_t size) {
  const char *init = cfg->model.init_from && cfg->model.init_from[0] ? cfg->model.init_from : NULL;
  const char *dir = cfg->checkpoint.dir && cfg->checkpoint.dir[0] ? cfg->checkpoint.dir : NULL;
  path[0] = '\0';
  if (w->checkpoint) {
    snprintf(path, size, "%s", w->checkpoint);
  } else if (init && w->init_from_explicit) {
    snprintf(path, size, "%s", init);
  } else if (dir && zo_checkpoint_latest(dir, path, size) == 0 && !is_adapter_dir(path)) {
  } else if ((path[0] = '\0', init)) {
    snprintf(path, size, "%s", init);
  } else if (!w->random_init) {
    if (dir)
      return zo_error(-ENOENT, "no weights to use: no checkpoint-<step> under checkpoint.dir %s and no "
                               "model.init_from; give --checkpoint DIR or --set model.init_from=FILE, or "
                               "--random-init for the seeded random initialisation", dir);
    return zo_error(-ENOENT, "no weights to use: checkpoint.dir and model.init_from are empty; give --checkpoint "
                             "DIR or --set model.init_from=FILE, or --random-init for the seeded random "
                             "initialisation");
  }
  return 0;
}

/* Prints which weights were loaded: the checkpoint and its step, a model
 * file or directory, or the seeded init; for a file, its fp32 bytes and the
 * load rate. */
static void say_weights(const char *path, const struct zo_train_state *st, bool checkpoint, uint64_t seed,
                        size_t nbytes, double s) {
  char b[32];
  if (!path[0]) {
    fprintf(stderr, "weights: the seeded random initialisation (engine.seed %llu, --random-init)\n",
            (unsigned long long)seed);
    return;
  }
  if (checkpoint) fprintf(stderr, "weights: %s (step %ld)", path, st->step);
  else fprintf(stderr, "weights: %s", path);
  fprintf(stderr, ": loaded %s in %.2f s, %.1f MB/s\n", zo_format_bytes(nbytes, b), s,
          (double)nbytes / 1e6 / (s > 0 ? s : 1e-9));
}

/* The parameters of path into m through io: one of our checkpoints (its
 * checksums verified, the step into st) or a Hugging Face directory or file. */
static int load_path(const char *path, const struct zo_model *m, const struct zo_state_io *io,
                     struct zo_train_state *st, bool *is_checkpoint) {
  char file[PATH_MAX + 32];
  *is_checkpoint = false;
  if (snprintf(file, sizeof file, "%s/trainer_state.json", path) > 0 && access(file, F_OK) == 0) {
    *is_checkpoint = true;
    return zo_checkpoint_load_io(path, m, NULL, io, false, st);
  }
  snprintf(file, sizeof file, "%s/model.safetensors", path);
  return zo_model_load_safetensors_io(access(file, F_OK) == 0 ? file : path, m, io);
}

/* The run's lora section: the config's, with lora.init_from replaced by
 * w->adapter (eval or sample --adapter DIR; a different config value is
 * named in a note). */
static struct zo_config_lora run_lora(const struct zo_config *cfg, const struct zo_weights *w, char *latest,
                                      size_t size) {
  struct zo_config_lora lc = cfg->lora;
  latest_adapter(cfg, latest, size);
  if (!w->adapter && latest[0]) {
    fprintf(stderr, "note: applying the run's latest checkpoint %s (a LoRA adapter) over the base; --adapter DIR "
            "picks another\n", latest);
    lc.init_from = latest;
  }
  if (!w->adapter) return lc;
  if (lc.init_from && lc.init_from[0] && strcmp(lc.init_from, w->adapter))
    fprintf(stderr, "note: --adapter %s replaces the config's lora.init_from = %s\n", w->adapter, lc.init_from);
  lc.init_from = (char *)w->adapter;
  return lc;
}

/* The lora section checked against the loaded model mc: 0 (off) or 1
 * with *l (a PEFT adapter directory to apply), else refused: a fresh
 * adapter (lora.r without lora.init_from: PEFT's init has B = 0, the base
 * model exactly, which is never what an eval or a sample of an adapter
 * means). cmd names the command ("eval", "sample") in the refusal. */
static int resolve_lora(const struct zo_config_lora *lc, const struct zo_model_config *mc, const char *cmd,
                        struct zo_lora *l) {
  const int err = zo_lora_resolve(lc, mc, l);
  if (err <= 0) return err;
  if (!l->from_adapter)
    return zo_error(-EINVAL, "lora.r = %d without lora.init_from: %s would apply a freshly initialised adapter "
                             "(lora_B = 0: the base model exactly); give the adapter with --adapter DIR or "
                             "lora.init_from = a PEFT adapter directory, or remove the lora section to %s the base",
                    lc->r, cmd, cmd);
  return 1;
}

/* The adapter of lc.init_from read for m (its tensors' names and shapes
 * checked against the table m's config gives, its base against the weights
 * at path) and attached. */
static int attach_adapter(struct zo_model *m, const struct zo_lora *l, const char *dir, const char *path,
                          struct zo_lora_device **out) {
  struct zo_lora_table t;
  int err = zo_lora_check_base(l, dir, path);
  if (!err) err = zo_lora_table_build(&m->cfg, l, &t);
  if (err) return err;
  float *host = malloc((t.numel ? t.numel : 1) * sizeof *host);
  err = host ? zo_lora_load(&t, dir, host) : zo_error(-ENOMEM, "out of host memory for the adapter");
  if (!err) err = zo_lora_attach(m, &t, host, out);
  if (!err)
    fprintf(stderr, "adapter: %s (r %d, scale %g, %d modules, %zu parameters)\n", dir, l->r, l->scale,
            t.n_modules, t.numel);
  free(host);
  zo_lora_table_free(&t);
  return err;
}

/* The model's weights from path, or the seeded init, through a staging io. */
static int load_weights(const struct zo_config *cfg, struct zo_model *m, const char *path) {
  /* Parameters stream into the device through a small staging buffer
   * (rounded to the working dtype on the way): no host copy of the model,
   * and the device is never written from the host. */
  struct zo_state_io io;
  int err = zo_state_io_model(&io, m);
  struct zo_train_state st = {0};
  bool is_checkpoint = false;
  const double t0 = zo_time_s();
  if (!err && path[0]) {
    err = load_path(path, m, &io, &st, &is_checkpoint);
  } else if (!err) {
    const size_t n = m->table.numel, per = io.stage_bytes / sizeof(float);
    for (size_t i = 0; i < n && !err; i += per) {
      const size_t k = n - i < per ? n - i : per;
      zo_model_init_range(m, cfg->engine.seed, i, io.stage, k);
      err = io.write(io.ctx, ZO_STATE_PARAMS, i * sizeof(float), io.stage, k * sizeof(float));
    }
  }
  if (!err)
    say_weights(path, &st, is_checkpoint, cfg->engine.seed, m->table.numel * sizeof(float), zo_time_s() - t0);
  zo_state_io_free(&io);
  return err;
}

/* A forward-only model loaded from the weights choose_weights picks, with
 * the lora section's adapter attached (*lora, NULL when none); cmd names the
 * command in messages. */
static struct zo_model *load_inference(const struct zo_config *cfg, const struct zo_weights *w, int B, int T,
                                      const char *cmd, zo_backend_t *be_out, char *path,
                                      struct zo_lora_device **lora) {
  struct zo_model_config mc;
  path[0] = '\0';
  *lora = NULL;
  if (choose_weights(cfg, w, path, PATH_MAX)) return NULL;
  char latest[PATH_MAX];
  const struct zo_config_lora lc = run_lora(cfg, w, latest, sizeof latest);
  if (path[0]) {
    if (zo_model_config_from_pretrained(path, cfg->model.spec.n_head, &mc)) return NULL;
  } else {
    struct zo_config base = *cfg; /* shallow: the lora section is checked below, against mc */
    memset(&base.lora, 0, sizeof base.lora);
    if (zo_train_model_config(&base, &mc)) return NULL;
  }
  struct zo_lora l;
  const int on = resolve_lora(&lc, &mc, cmd, &l);
  if (on < 0) return NULL;
  if (T > mc.max_seq_len) T = mc.max_seq_len;
  zo_backend_t be = zo_train_backend(cfg, NULL);
  if (!be) return NULL;
  /* Inference runs in the config's precision, like training would. */
  const struct zo_model_layout lo = {
      .training = false, .dtype = cfg->bf16 ? ZO_BF16 : cfg->fp16.enabled ? ZO_F16 : ZO_F32};
  struct zo_model *m = zo_model_init_layout(&mc, be, B, T, &lo);
  if (!m) return NULL;
  int err = load_weights(cfg, m, path);
  if (!err && on) err = attach_adapter(m, &l, lc.init_from, path, lora);
  if (err) {
    zo_model_free(m);
    return NULL;
  }
  *be_out = be;
  return m;
}

/* The tokenizer beside the weights at path (a checkpoint or model directory
 * holding tokenizer.json), else the run's (zo_run_tokenizer); *tk NULL when
 * there is none. Says which on stderr. Returns 0 or -errno. */
static int load_tokenizer(const struct zo_config *cfg, const char *path, struct zo_tokenizer **tk) {
  char json[PATH_MAX];
  *tk = NULL;
  struct stat st;
  const bool dir = path[0] && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
  const bool dir_tok = dir && zo_tokenizer_json_of(path, json, sizeof json);
  if (!dir_tok) {
    int err = zo_run_tokenizer(cfg, json, sizeof json);
    if (err) return err;
  }
  if (!json[0]) return 0;
  int err = zo_tokenizer_load(json, tk);
  if (err && cfg->model.tokenizer && cfg->model.tokenizer[0] && !dir_tok)
    return zo_error(err, "model.tokenizer %s: %s", json, zo_last_error());
  if (err) {
    /* One that came with the weights or model.init_from: go on without it. */
    fprintf(stderr, "note: tokenizer %s is not usable here (%s): ids, not text\n", json, zo_last_error());
    *tk = NULL;
    return 0;
  }
  fprintf(stderr, "tokenizer: %s (%zu ids)\n", json, zo_tokenizer_vocab_size(*tk));
  return 0;
}

int zo_eval(const struct zo_config *cfg, const char *checkpoint, int n_batches,
            struct zo_eval_result *out) {
  const struct zo_weights w = {.checkpoint = checkpoint};
  return zo_eval_weights(cfg, &w, n_batches, out);
}

int zo_eval_weights(const struct zo_config *cfg, const struct zo_weights *w, int n_batches,
                    struct zo_eval_result *out) {
  const char *path = cfg->data.val && cfg->data.val[0] ? cfg->data.val : cfg->data.train;
  if (!path || !path[0]) return zo_error(-EINVAL, "data.val and data.train are both empty: nothing to evaluate");
  zo_backend_t be;
  const int B = cfg->micro_batch, T = cfg->data.seq_len;
  char wpath[PATH_MAX];
  struct zo_lora_device *lora;
  struct zo_model *m = load_inference(cfg, w, B, T, "eval", &be, wpath, &lora);
  if (!m) return zo_last_error()[0] && strstr(zo_last_error(), "no weights to use") ? -ENOENT : -EINVAL;
  struct zo_tokenizer *tk = NULL;
  int err = load_tokenizer(cfg, wpath, &tk);
  out->has_tokenizer = tk != NULL;
  zo_stream_t s = NULL;
  int32_t *in = malloc((size_t)B * (size_t)m->T * sizeof *in), *tg = malloc((size_t)B * (size_t)m->T * sizeof *tg);
  struct zo_data *d = zo_data_open(path, (enum zo_data_format)cfg->data.format, m->cfg.vocab_size, B, m->T,
                                   false, cfg->engine.seed);
  if (err) goto out;
  if (!d) {
    err = zo_error(-EIO, "%s", zo_last_error());
    goto out;
  }
  if (!in || !tg) {
    err = zo_error(-ENOMEM, "out of host memory for evaluation batches");
    goto out;
  }
  if ((err = be->stream_create(&s))) goto out;
  zo_model_stream_workspace(m, 0, s);
  if (n_batches <= 0) n_batches = zo_eval_n_batches(d, B, m->T);
  out->n_batches = n_batches;
  if ((err = eval_loss(m, d, n_batches, in, tg, s, tk, out))) goto out;
  out->device_bytes = m->arena.peak + (lora ? lora->arena.peak : 0);
  out->train_device_bytes = zo_model_device_bytes(&m->cfg, B, m->T, true);
out:
  if (s) be->stream_destroy(s);
  zo_data_close(d);
  free(in);
  free(tg);
  zo_tokenizer_free(tk);
  zo_lora_detach(m, lora);
  zo_model_free(m);
  return err;
}

int zo_sample(const struct zo_config *cfg, const struct zo_sample_opts *opts, FILE *out) {
  zo_backend_t be;
  /* Prompt tokens (at most one per byte, plus the tokenizer's few special
   * tokens, or the one start token) plus the new ones. */
  const size_t cap = (opts->prompt ? strlen(opts->prompt) : 0) + 8 + (size_t)opts->n_tokens;
  /* The window is the model's context, or less when the whole text is
   * shorter: a Llama 3 context (131072) would plan NH * T * T attention
   * probabilities, hundreds of GiB, for a few tokens. load_inference clamps
   * to the loaded model's max_seq_len (the checkpoint's, not the config's). */
  const struct zo_weights w = {.checkpoint = opts->checkpoint, .init_from_explicit = opts->init_from_explicit,
                               .random_init = opts->random_init, .adapter = opts->adapter};
  char wpath[PATH_MAX];
  struct zo_lora_device *lora;
  struct zo_model *m = load_inference(cfg, &w, 1, cap < INT_MAX ? (int)cap : INT_MAX, "sample", &be, wpath, &lora);
  if (!m) return zo_last_error()[0] && strstr(zo_last_error(), "no weights to use") ? -ENOENT : -EINVAL;
  struct zo_tokenizer *tk = NULL;
  int err = load_tokenizer(cfg, wpath, &tk), n_ctx = 0;
  zo_stream_t s = NULL;
  int32_t *ctx = malloc(cap * sizeof *ctx);
  if (err) goto out;
  if (!ctx) {
    err = zo_error(-ENOMEM, "out of host memory for sampling");
    goto out;
  }
  if (tk) {
    err = prompt_tokens(tk, opts->prompt, m->cfg.vocab_size, ctx, cap - (size_t)opts->n_tokens, &n_ctx);
  } else {
    err = parse_prompt(opts->prompt, m->cfg.vocab_size, ctx, (int)cap, &n_ctx);
  }
  if (err) goto out;
  if ((err = be->stream_create(&s))) goto out;
  zo_model_stream_workspace(m, 0, s);
  if (opts->prompt && (tk || m->cfg.vocab_size == 256)) fputs(opts->prompt, out);
  err = zo_sample_generate_text(m, s, ctx, n_ctx, opts->n_tokens, opts->temperature, opts->top_k, opts->seed, tk,
                                true, out);
out:
  if (s) be->stream_destroy(s);
  free(ctx);
  zo_tokenizer_free(tk);
  zo_lora_detach(m, lora);
  zo_model_free(m);
  return err;
}
