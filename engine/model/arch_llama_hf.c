/* config.json of the families the Llama architecture runs (model_type
 * "llama", "mistral", "qwen2" (q/k/v biases), "qwen3" (q/k norms) and "phi3"
 * (Mistral's window, resid_pdrop, no rotary scaling); the others are refused by
 * name in the registry, engine/model/family.c), read and written for
 * engine/model/arch_llama.c. Both dialects of transformers load: 4.x's
 * top-level "rope_theta" and "rope_scaling", 5.x's "rope_parameters"
 * ({"rope_type", "rope_theta", the scaling's keys}); a write carries both,
 * with equal values, so either line of transformers reads the model we
 * trained, and names the configuration's family (model_type and
 * "architectures" from the registry). Every key of the file is either read
 * here (implemented, or refused by name and value when its value asks for
 * mathematics the engine does not have) or in the list of keys that do not
 * change the forward, each with its reason: the keys every family shares,
 * then each family's own (its window keys); any other key is refused by
 * name: a new transformers field must be looked at before it can be
 * trained past. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "family.h"

/* Keys that do not change the mathematics of the forward or backward. */
struct ignored_key {
  const char *key, *why;
};
static const char *const GENERIC = "a PretrainedConfig setting of generation, outputs or bookkeeping";
static const struct ignored_key IGNORED[] = {
    {"architectures", "names the Python class"},
    {"torch_dtype", "the dtype the tensors were saved in: each tensor of the file carries its own"},
    {"dtype", "the dtype the tensors were saved in (transformers 5): each tensor carries its own"},
    {"transformers_version", "bookkeeping"},
    {"zoffload_version", "bookkeeping"},
    {"_name_or_path", "bookkeeping"},
    {"bos_token_id", "a token id for generation and the tokenizer"},
    {"eos_token_id", "a token id for generation and the tokenizer"},
    {"sep_token_id", "a token id for generation and the tokenizer"},
    {"decoder_start_token_id", "a token id for encoder-decoder generation"},
    {"use_cache", "the inference key/value cache: the same attention"},
    {"initializer_range", "the initialisation of new weights: a loaded model has its own"},
    {"pretraining_tp", "tensor-parallel slicing of the projections in pretraining: the same products"},
    {"output_attentions", GENERIC}, {"output_hidden_states", GENERIC}, {"return_dict", GENERIC},
    {"torchscript", GENERIC}, {"use_bfloat16", GENERIC}, {"tf_legacy_loss", GENERIC},
    {"chunk_size_feed_forward", "transformers' feed-forward chunking: the same products"},
    {"is_encoder_decoder", GENERIC}, {"tie_encoder_decoder", GENERIC}, {"cross_attention_hidden_size", GENERIC},
    {"max_length", GENERIC}, {"min_length", GENERIC}, {"do_sample", GENERIC}, {"early_stopping", GENERIC},
    {"num_beams", GENERIC}, {"num_beam_groups", GENERIC}, {"diversity_penalty", GENERIC},
    {"temperature", GENERIC}, {"top_k", GENERIC}, {"top_p", GENERIC}, {"typical_p", GENERIC},
    {"repetition_penalty", GENERIC}, {"length_penalty", GENERIC}, {"no_repeat_ngram_size", GENERIC},
    {"encoder_no_repeat_ngram_size", GENERIC}, {"bad_words_ids", GENERIC}, {"num_return_sequences", GENERIC},
    {"output_scores", GENERIC}, {"return_dict_in_generate", GENERIC}, {"forced_bos_token_id", GENERIC},
    {"forced_eos_token_id", GENERIC}, {"remove_invalid_values", GENERIC},
    {"exponential_decay_length_penalty", GENERIC}, {"suppress_tokens", GENERIC},
    {"begin_suppress_tokens", GENERIC}, {"finetuning_task", GENERIC},
    {"id2label", GENERIC}, {"label2id", GENERIC}, {"tokenizer_class", GENERIC}, {"prefix", GENERIC},
    {"problem_type", GENERIC}, {"task_specific_params", GENERIC}, {"chat_template", GENERIC},
    {"_attn_implementation_autoset", "which attention kernel transformers picked: the same mathematics"},
};

/* Keys this file reads for every family; each is implemented or refused by value below. */
static const char *const READ[] = {
    "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling",
    "rope_parameters", "tie_word_embeddings", "hidden_act", "attention_dropout", "head_dim", "attention_bias",
    "mlp_bias", "layer_types", "partial_rotary_factor", "is_decoder", "add_cross_attention", "pruned_heads",
    "pad_token_id",
};

/* One family's keys beyond READ and IGNORED (NULL-terminated lists): the
 * window keys, where the families differ. */
struct family_keys {
  enum zo_model_family family;
  const char *const *read;
  const struct ignored_key *ignored;
};
/* (a macro, not a const object: a static initializer must be a constant expression in C17) */
#define QWEN2_WINDOWS \
  { "max_window_layers", "Qwen2's first layer with a sliding window: read only with use_sliding_window" }
/* Mistral: sliding_window, every layer (MistralConfig has no other window key). */
static const char *const MISTRAL_READ[] = {"sliding_window", NULL};
static const struct ignored_key MISTRAL_IGNORED[] = {{NULL, NULL}};
/* Qwen2: sliding_window used only with use_sliding_window (refused when it binds). */
static const char *const QWEN2_READ[] = {"sliding_window", "use_sliding_window", NULL};
static const struct ignored_key QWEN2_IGNORED[] = {QWEN2_WINDOWS, {NULL, NULL}};
/* Llama: LlamaConfig has no window; Qwen2's keys are read so that a window
 * asked of a llama is refused, not dropped. */
static const char *const LLAMA_READ[] = {"sliding_window", "use_sliding_window", NULL};
static const struct ignored_key LLAMA_IGNORED[] = {QWEN2_WINDOWS, {NULL, NULL}};
/* Qwen3: its windows (use_sliding_window true) are refused whatever their
 * length; sliding_window and max_window_layers are read only with it. */
static const char *const QWEN3_READ[] = {"sliding_window", "use_sliding_window", NULL};
static const struct ignored_key QWEN3_IGNORED[] = {
    {"max_window_layers", "Qwen3's first layer with a sliding window: read only with use_sliding_window"},
    {NULL, NULL}};
/* Phi-3: sliding_window as Mistral's (every layer), resid_pdrop (the
 * residual branches' dropout, model.hf_dropout); the 128k configs'
 * longrope scaling is refused in parse_rope, so its length key is inert. */
static const char *const PHI3_READ[] = {"sliding_window", "resid_pdrop", NULL};
static const struct ignored_key PHI3_IGNORED[] = {
    {"embd_pdrop", "Phi3Model builds no embedding dropout from it (transformers 5 never reads it)"},
    {"original_max_position_embeddings", "the pretraining length only the longrope scaling reads (refused)"},
    {NULL, NULL}};
static const struct family_keys FAMILY_KEYS[] = {
    {ZO_FAMILY_LLAMA, LLAMA_READ, LLAMA_IGNORED},
    {ZO_FAMILY_MISTRAL, MISTRAL_READ, MISTRAL_IGNORED},
    {ZO_FAMILY_QWEN2, QWEN2_READ, QWEN2_IGNORED},
    {ZO_FAMILY_QWEN3, QWEN3_READ, QWEN3_IGNORED},
    {ZO_FAMILY_PHI3, PHI3_READ, PHI3_IGNORED},
};

static bool key_known(enum zo_model_family family, const char *key) {
  for (size_t i = 0; i < sizeof READ / sizeof *READ; i++)
    if (strcmp(READ[i], key) == 0) return true;
  for (size_t i = 0; i < sizeof IGNORED / sizeof *IGNORED; i++)
    if (strcmp(IGNORED[i].key, key) == 0) return true;
  for (size_t f = 0; f < sizeof FAMILY_KEYS / sizeof *FAMILY_KEYS; f++) {
    if (FAMILY_KEYS[f].family != family) continue;
    for (const char *const *r = FAMILY_KEYS[f].read; *r; r++)
      if (strcmp(*r, key) == 0) return true;
    for (const struct ignored_key *g = FAMILY_KEYS[f].ignored; g->key; g++)
      if (strcmp(g->key, key) == 0) return true;
  }
  return false;
}

/* A short rendering of v for messages. */
static const char *json_brief(json_t *v, char *buf, size_t size) {
  char *s = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
  snprintf(buf, size, "%s", s ? s : "(missing)");
  free(s);
  if (strlen(buf) == size - 1 && size > 4) memcpy(buf + size - 4, "...", 4);
  return buf;
}

static int check_keys(json_t *j, const char *p, const struct zo_family *f) {
  const char *key;
  json_t *v;
  char val[96];
  json_object_foreach(j, key, v) {
    if (!key_known(f->family, key))
      return zo_error(-ENOTSUP, "%s: key \"%s\" (= %s) is not known to the Llama-family loader for model_type "
                                "\"%s\": it may change the model's mathematics, so it is refused rather than "
                                "ignored (the keys read and ignored are listed in engine/model/arch_llama_hf.c)",
                      p, key, json_brief(v, val, sizeof val), f->model_type);
  }
  return 0;
}

/* key of j: true, false, or absent or null (false). */
static int json_flag(json_t *j, const char *key, const char *p, bool *out) {
  json_t *v = json_object_get(j, key);
  char val[96];
  if (v && !json_is_null(v) && !json_is_boolean(v))
    return zo_error(-EINVAL, "%s: %s = %s: true, false or null is needed", p, key, json_brief(v, val, sizeof val));
  *out = json_is_true(v);
  return 0;
}

/* The scaling type of a rotary object (rope_type, or 4.x's older "type"; both
 * must agree), "default" when neither is given. */
static int rope_type_of(json_t *o, const char *p, const char *where, const char **out) {
  json_t *a = json_object_get(o, "rope_type"), *b = json_object_get(o, "type");
  char val[96];
  const bool bad_a = a && !json_is_string(a);
  if (bad_a || (b && !json_is_string(b)))
    return zo_error(-EINVAL, "%s: %s.%s = %s: a string is needed", p, where, bad_a ? "rope_type" : "type",
                    json_brief(bad_a ? a : b, val, sizeof val));
  if (a && b && strcmp(json_string_value(a), json_string_value(b)) != 0)
    return zo_error(-EINVAL, "%s: %s.rope_type \"%s\" and %s.type \"%s\" disagree", p, where,
                    json_string_value(a), where, json_string_value(b));
  *out = a ? json_string_value(a) : b ? json_string_value(b) : "default";
  return 0;
}

/* 4.x's rope_scaling and 5.x's rope_parameters in one file: two spellings of
 * one setting, which must agree (type and every scaling key either has). */
static int rope_agree(json_t *rp, json_t *rs, const char *p) {
  const char *tp, *ts;
  int err = rope_type_of(rp, p, "rope_parameters", &tp);
  if (!err) err = rope_type_of(rs, p, "rope_scaling", &ts);
  if (err) return err;
  char a[96], b[96];
  if (strcmp(tp, ts) != 0)
    return zo_error(-EINVAL, "%s: rope_parameters says rope_type \"%s\" and rope_scaling says \"%s\": two spellings "
                             "of one setting must agree", p, tp, ts);
  static const char *const keys[] = {"factor", "low_freq_factor", "high_freq_factor",
                                     "original_max_position_embeddings", "partial_rotary_factor"};
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
    json_t *x = json_object_get(rp, keys[i]), *y = json_object_get(rs, keys[i]);
    if ((x || y) && !json_equal(x, y) &&
        !(json_is_number(x) && json_is_number(y) && json_number_value(x) == json_number_value(y)))
      return zo_error(-EINVAL, "%s: rope_parameters.%s = %s and rope_scaling.%s = %s disagree", p, keys[i],
                      json_brief(x, a, sizeof a), keys[i], json_brief(y, b, sizeof b));
  }
  return 0;
}

/* A key whose value must be v_ok (or absent, or null) for the engine's mathematics. */
static int want_false(json_t *j, const char *p, const char *key, const char *what) {
  json_t *v = json_object_get(j, key);
  if (!v || json_is_null(v) || json_is_false(v)) return 0;
  char val[96];
  return zo_error(-ENOTSUP, "%s: %s = %s: %s", p, key, json_brief(v, val, sizeof val), what);
}

/* The rotary settings: 5.x's rope_parameters, else 4.x's rope_theta and
 * rope_scaling. A file with both must have them agree. */
static int parse_rope(json_t *j, const char *p, enum zo_model_family family, struct zo_model_config *cfg) {
  json_t *rp = json_object_get(j, "rope_parameters"), *rs = json_object_get(j, "rope_scaling");
  json_t *top_theta = json_object_get(j, "rope_theta");
  char val[160];
  if (rp && !json_is_null(rp) && !json_is_object(rp))
    return zo_error(-EINVAL, "%s: rope_parameters = %s: an object is needed", p, json_brief(rp, val, sizeof val));
  if (rs && !json_is_null(rs) && !json_is_object(rs))
    return zo_error(-EINVAL, "%s: rope_scaling = %s: an object or null is needed", p, json_brief(rs, val, sizeof val));
  if (json_is_object(rp) && json_object_get(rp, "full_attention"))
    return zo_error(-ENOTSUP, "%s: rope_parameters per layer type (%s): one set of rotary settings for every "
                              "layer is supported", p, json_brief(rp, val, sizeof val));
  if (json_is_object(rp) && json_is_object(rs)) {
    int err = rope_agree(rp, rs, p);
    if (err) return err;
  }
  json_t *src = json_is_object(rp) ? rp : json_is_object(rs) ? rs : NULL;
  const char *where = src == rp ? "rope_parameters" : "rope_scaling";
  char where_p[PATH_MAX + 32];
  snprintf(where_p, sizeof where_p, "%s: %s", p, where);
  double theta = 10000.0, inner = NAN;
  int err = zo_arch_json_positive(j, "rope_theta", p, theta, &theta);
  json_t *rp_theta = json_is_object(rp) ? json_object_get(rp, "rope_theta") : NULL;
  if (!err && rp_theta && !json_is_null(rp_theta))
    err = zo_arch_json_positive(rp, "rope_theta", where_p, NAN, &inner);
  if (err) return err;
  if (!isnan(inner) && json_is_number(top_theta) && json_number_value(top_theta) != inner)
    return zo_error(-EINVAL, "%s: rope_theta %g and rope_parameters.rope_theta %g disagree", p,
                    json_number_value(top_theta), inner);
  cfg->rope_theta = isnan(inner) ? theta : inner;
  if (!src) return 0;
  const char *type;
  double prf = 1.0;
  if ((err = rope_type_of(src, p, where, &type)) ||
      (err = zo_arch_json_positive(src, "partial_rotary_factor", where_p, 1.0, &prf)))
    return err;
  if (prf != 1.0)
    return zo_error(-ENOTSUP, "%s: %s.partial_rotary_factor = %g: rotary embedding over the whole head only", p,
                    where, prf);
  if (strcmp(type, "default") == 0) return 0; /* plain RoPE */
  if (family == ZO_FAMILY_PHI3)
    return zo_error(-ENOTSUP, "%s: %s type \"%s\" with model_type \"phi3\": Phi-3 without rotary scaling (the "
                              "4k configs) is implemented; longrope (\"su\", the 128k configs), yarn and the rest "
                              "are not", p, where, type);
  if (strcmp(type, "llama3") != 0)
    return zo_error(-ENOTSUP, "%s: %s type \"%s\" is not implemented: \"default\" and \"llama3\" are (linear, "
                              "dynamic, yarn, longrope and the rest are refused)", p, where, type);
  static const char *const llama3_keys[] = {"rope_type", "type", "factor", "low_freq_factor", "high_freq_factor",
                                            "original_max_position_embeddings", "rope_theta",
                                            "partial_rotary_factor"};
  const char *key;
  json_t *v;
  json_object_foreach(src, key, v) {
    bool ok = false;
    for (size_t i = 0; i < sizeof llama3_keys / sizeof *llama3_keys; i++) ok = ok || strcmp(key, llama3_keys[i]) == 0;
    if (!ok)
      return zo_error(-ENOTSUP, "%s: %s.%s = %s: not a key of the \"llama3\" scaling", p, where, key,
                      json_brief(v, val, sizeof val));
  }
  /* The llama3 scaling's four settings have no defaults (transformers
   * requires them): a missing one is refused naming it. */
  long old = 0;
  double factor, lo, hi;
  if ((err = zo_arch_json_positive(src, "factor", where_p, NAN, &factor)) ||
      (err = zo_arch_json_positive(src, "low_freq_factor", where_p, NAN, &lo)) ||
      (err = zo_arch_json_positive(src, "high_freq_factor", where_p, NAN, &hi)) ||
      (err = zo_arch_json_size(src, "original_max_position_embeddings", where_p, &old)))
    return err;
  if (!(hi > lo))
    return zo_error(-EINVAL, "%s: %s.high_freq_factor %g must exceed low_freq_factor %g (the scaling divides by "
                             "their difference)", p, where, hi, lo);
  cfg->rope_scaling_factor = factor;
  cfg->rope_low_freq_factor = lo;
  cfg->rope_high_freq_factor = hi;
  cfg->rope_original_max_seq_len = (int)old;
  return 0;
}

/* Attention windows: Mistral's sliding_window (implemented: *window),
 * Qwen2's use_sliding_window (refused), 5.x's layer_types. A window no
 * shorter than max_position_embeddings never binds (the engine never runs
 * past that length): full attention, *window 0. */
static int parse_windows(json_t *j, const char *p, enum zo_model_family family, long maxT, int *window) {
  json_t *lt = json_object_get(j, "layer_types"), *sw = json_object_get(j, "sliding_window");
  char val[160];
  if (lt && !json_is_null(lt)) {
    size_t i;
    json_t *v;
    if (!json_is_array(lt))
      return zo_error(-EINVAL, "%s: layer_types = %s: a list is needed", p, json_brief(lt, val, sizeof val));
    json_array_foreach(lt, i, v) {
      const char *s = json_string_value(v);
      if (!s || strcmp(s, "full_attention") != 0)
        return zo_error(-ENOTSUP, "%s: layer_types[%zu] = %s: only \"full_attention\" layers are implemented", p,
                        i, json_brief(v, val, sizeof val));
    }
  }
  *window = 0;
  bool use_sw = false;
  int err = json_flag(j, "use_sliding_window", p, &use_sw);
  if (err) return err;
  if (use_sw && family == ZO_FAMILY_QWEN3)
    return zo_error(-ENOTSUP, "%s: use_sliding_window = true: Qwen3's sliding-window layers (sliding_window, "
                              "max_window_layers) are not implemented; false (every layer full attention) is", p);
  if (!sw || json_is_null(sw)) return 0;
  if (!json_is_integer(sw) || json_integer_value(sw) < 1)
    return zo_error(-EINVAL, "%s: sliding_window = %s: a positive integer or null is needed", p,
                    json_brief(sw, val, sizeof val));
  /* Qwen2 carries the key without using it unless told to, Llama never. */
  if (use_sw && json_integer_value(sw) < maxT)
    return zo_error(-ENOTSUP, "%s: use_sliding_window = true with sliding_window = %lld: Qwen2's per-layer "
                              "windows (max_window_layers) are not implemented", p, (long long)json_integer_value(sw));
  const bool windowed = family == ZO_FAMILY_MISTRAL || family == ZO_FAMILY_PHI3;
  if (windowed && json_integer_value(sw) < maxT) *window = (int)json_integer_value(sw);
  return 0;
}

/* pad_token_id: every family here builds nn.Embedding(vocab, hidden,
 * padding_idx=pad_token_id), so it is the embedding's padding index, not
 * only a token id for generation. null or absent: none. transformers would
 * take a negative id as counted from the end; refused here. */
static int parse_padding(json_t *j, const char *p, long V, struct zo_model_config *cfg) {
  json_t *v = json_object_get(j, "pad_token_id");
  char val[96];
  if (!v || json_is_null(v)) return 0;
  if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= V)
    return zo_error(-EINVAL, "%s: pad_token_id = %s: the embedding's padding index (transformers' padding_idx) "
                             "must be a token id in [0, %ld) (vocab_size %ld), or null for none",
                    p, json_brief(v, val, sizeof val), V, V);
  cfg->has_padding_idx = true;
  cfg->padding_idx = (int)json_integer_value(v);
  return 0;
}

int zo_llama_hf_config_parse(json_t *j, const char *p, struct zo_model_config *cfg) {
  json_t *mt = json_object_get(j, "model_type");
  char mval[96];
  if (mt && !json_is_string(mt))
    return zo_error(-EINVAL, "%s: model_type = %s: a string is needed", p, json_brief(mt, mval, sizeof mval));
  const char *type = mt ? json_string_value(mt) : "llama";
  const struct zo_family *f = zo_family_find(type);
  if (!f || f->refusal) return zo_family_refuse(p, type);
  if (f->arch != ZO_ARCH_LLAMA)
    return zo_error(-EINVAL, "%s: model_type \"%s\" runs on model.arch \"%s\", not on the Llama loader", p, type,
                    zo_model_arch_name(f->arch));
  int err = check_keys(j, p, f);
  if (err) return err;
  long L = 0, NH = 0, NKV = 0, C = 0, I = 0, V = 0, maxT = 0;
  if (!err) err = zo_arch_json_size(j, "num_hidden_layers", p, &L);
  if (!err) err = zo_arch_json_size(j, "num_attention_heads", p, &NH);
  if (!err) err = zo_arch_json_size(j, "hidden_size", p, &C);
  if (!err) err = zo_arch_json_size(j, "intermediate_size", p, &I);
  if (!err) err = zo_arch_json_size(j, "vocab_size", p, &V);
  if (!err) err = zo_arch_json_size(j, "max_position_embeddings", p, &maxT);
  if (err) return err;
  json_t *nkv = json_object_get(j, "num_key_value_heads");
  if (nkv && !json_is_null(nkv) && (err = zo_arch_json_size(j, "num_key_value_heads", p, &NKV))) return err;
  if (!nkv || json_is_null(nkv)) NKV = NH;
  /* head_dim apart from hidden_size / num_attention_heads: q, k, v and
   * o_proj's input are num_attention_heads x head_dim wide. */
  json_t *hd = json_object_get(j, "head_dim");
  char hval[64];
  if (hd && !json_is_null(hd) &&
      (!json_is_integer(hd) || json_integer_value(hd) < 2 || json_integer_value(hd) % 2 != 0 ||
       json_integer_value(hd) > 65536))
    return zo_error(-EINVAL, "%s: head_dim = %s: an even positive integer (the rotary embedding pairs its "
                             "halves) or null is needed", p, json_brief(hd, hval, sizeof hval));
  if ((err = want_false(j, p, "attention_bias",
                        f->family == ZO_FAMILY_QWEN3 ? "Qwen3's q/k/v and o_proj biases are not implemented"
                                                     : "Llama layers here have no biases")) ||
      (err = want_false(j, p, "mlp_bias", "Llama layers here have no biases")) ||
      (err = want_false(j, p, "is_decoder", "an encoder-decoder's decoder is not implemented")) ||
      (err = want_false(j, p, "add_cross_attention", "cross-attention is not implemented")))
    return err;
  json_t *ph = json_object_get(j, "pruned_heads");
  if (ph && !json_is_null(ph) && !(json_is_object(ph) && json_object_size(ph) == 0))
    return zo_error(-ENOTSUP, "%s: pruned_heads: models with pruned attention heads are not implemented", p);
  double prf = 1.0;
  if ((err = zo_arch_json_positive(j, "partial_rotary_factor", p, 1.0, &prf))) return err;
  if (prf != 1.0)
    return zo_error(-ENOTSUP, "%s: partial_rotary_factor = %g: rotary embedding over the whole head only", p, prf);
  const char *act = json_string_value(json_object_get(j, "hidden_act"));
  if (json_object_get(j, "hidden_act") && (!act || strcmp(act, "silu") != 0))
    return zo_error(-ENOTSUP, "%s: hidden_act \"%s\": only \"silu\" (SwiGLU) is supported", p,
                    act ? act : "(not a string)");
  int window = 0;
  if ((err = parse_windows(j, p, f->family, maxT, &window))) return err;
  *cfg = (struct zo_model_config){.arch = ZO_ARCH_LLAMA, .family = f->family, .n_layer = (int)L, .n_head = (int)NH, .n_kv_head = (int)NKV,
                                  .n_embd = (int)C, .intermediate_size = (int)I, .vocab_size = (int)V,
                                  .max_seq_len = (int)maxT, .sliding_window = window,
                                  .head_dim = json_is_integer(hd) ? (int)json_integer_value(hd) : 0,
                                  .qkv_bias = f->family == ZO_FAMILY_QWEN2,
                                  .qk_norm = f->family == ZO_FAMILY_QWEN3};
  /* Hugging Face applies it to the attention probabilities; ours to the
   * attention output (the same expected value, another mask granularity). */
  if ((err = zo_arch_json_prob(j, "attention_dropout", p, &cfg->attn_pdrop))) return err;
  /* Phi-3's resid_pdrop: the output of each residual branch, as ours. */
  if (f->family == ZO_FAMILY_PHI3 && (err = zo_arch_json_prob(j, "resid_pdrop", p, &cfg->resid_pdrop))) return err;
  double eps = 1e-5;
  bool tie = false;
  if ((err = zo_arch_json_positive(j, "rms_norm_eps", p, eps, &eps)) ||
      (err = json_flag(j, "tie_word_embeddings", p, &tie)))
    return err;
  cfg->rms_norm_eps = eps;
  cfg->tie_embeddings = tie;
  if ((err = parse_padding(j, p, V, cfg))) return err;
  return parse_rope(j, p, f->family, cfg);
}

/* The rotary settings in one dialect's object (rope_scaling: NULL without
 * scaling). */
static json_t *rope_object(const struct zo_model_config *c, bool with_theta) {
  json_t *o = json_object();
  if (!o) return NULL;
  int err = 0;
  if (with_theta) err |= json_object_set_new(o, "rope_theta", json_real(c->rope_theta));
  if (c->rope_scaling_factor == 0.0) {
    err |= json_object_set_new(o, "rope_type", json_string("default"));
  } else {
    err |= json_object_set_new(o, "rope_type", json_string("llama3"));
    err |= json_object_set_new(o, "factor", json_real(c->rope_scaling_factor));
    err |= json_object_set_new(o, "low_freq_factor", json_real(c->rope_low_freq_factor));
    err |= json_object_set_new(o, "high_freq_factor", json_real(c->rope_high_freq_factor));
    err |= json_object_set_new(o, "original_max_position_embeddings",
                               json_integer(c->rope_original_max_seq_len));
  }
  if (err) {
    json_decref(o);
    return NULL;
  }
  return o;
}

/* The family's own keys: Qwen2 and Qwen3 without windows
 * (use_sliding_window), a Mistral's window or null (none: MistralConfig's
 * default is 4096), Phi-3's window. */
static int family_keys_set(json_t *j, const struct zo_model_config *c, enum zo_model_family family) {
  if (family == ZO_FAMILY_QWEN3)
    return json_object_set_new(j, "use_sliding_window", json_false()) ||
           json_object_set_new(j, "sliding_window", json_null()) ||
           json_object_set_new(j, "max_window_layers", json_integer(c->n_layer));
  if (family == ZO_FAMILY_QWEN2)
    return json_object_set_new(j, "use_sliding_window", json_false()) ||
           json_object_set_new(j, "max_window_layers", json_integer(c->n_layer));
  if (family == ZO_FAMILY_PHI3)
    return json_object_set_new(j, "sliding_window",
                               c->sliding_window > 0 ? json_integer(c->sliding_window) : json_null()) ||
           json_object_set_new(j, "resid_pdrop", json_real(0.0)) ||
           json_object_set_new(j, "embd_pdrop", json_real(0.0)) ||
           json_object_set_new(j, "original_max_position_embeddings", json_integer(c->max_seq_len));
  if (family == ZO_FAMILY_MISTRAL)
    return json_object_set_new(j, "sliding_window",
                               c->sliding_window > 0 ? json_integer(c->sliding_window) : json_null());
  return 0;
}

json_t *zo_llama_hf_config(const struct zo_model_config *c) {
  const int hs = c->head_dim ? c->head_dim : c->n_embd / c->n_head;
  const enum zo_model_family family = zo_family_resolve(c);
  const struct zo_family *f = zo_family_of(family);
  json_t *j = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:b, s:s, s:b, s:b, "
                        "s:f, s:f, s:s, s:s}",
                        "architectures", f->architecture, "model_type", f->model_type, "vocab_size", c->vocab_size,
                        "hidden_size", c->n_embd, "intermediate_size", c->intermediate_size, "num_hidden_layers",
                        c->n_layer, "num_attention_heads", c->n_head, "num_key_value_heads", c->n_kv_head,
                        "head_dim", hs, "max_position_embeddings", c->max_seq_len, "rms_norm_eps",
                        c->rms_norm_eps, "rope_theta", c->rope_theta, "tie_word_embeddings", c->tie_embeddings,
                        "hidden_act", "silu", "attention_bias", 0, "mlp_bias", 0, "attention_dropout", 0.0,
                        "initializer_range", 0.02, "torch_dtype", "float32", "zoffload_version", "0.1.0");
  if (!j) return NULL;
  /* The embedding's padding index, null for none: written for every family,
   * since an absent key takes the config class's default (Phi3Config's
   * 32000). */
  if (json_object_set_new(j, "pad_token_id", c->has_padding_idx ? json_integer(c->padding_idx) : json_null()) ||
      family_keys_set(j, c, family)) {
    json_decref(j);
    return NULL;
  }
  /* transformers 4.x reads rope_theta and rope_scaling, 5.x rope_parameters. */
  json_t *rs = c->rope_scaling_factor == 0.0 ? json_null() : rope_object(c, false);
  if (json_object_set_new(j, "rope_scaling", rs) || json_object_set_new(j, "rope_parameters", rope_object(c, true))) {
    json_decref(j);
    return NULL;
  }
  return j;
}
