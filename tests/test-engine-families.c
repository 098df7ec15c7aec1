/* The model_type registry and the family field (issue 50, piece 1), on
 * config.json files written here: each family read keeps its name through
 * the config.json the engine writes back (a Mistral without a window stays
 * "mistral" with sliding_window null, as transformers reads it: MistralConfig
 * would otherwise default to a 4096 window; a Qwen2 stays "qwen2" and
 * Qwen2ForCausalLM), written and read again it is the same family; the
 * families not built are refused by model_type naming what is missing;
 * each family's window keys are its own; a configuration whose features
 * contradict its family is refused naming the keys. transformers' side of
 * the round trip: tests/hf/test_transformers_families.py. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../engine/model/arch.h"
#include "zo/hf.h"
#include "zo/model.h"
#include "zo_test.h"

static char dir[512];

/* Writes text as dir/name/config.json; returns the folder in out. */
static int write_dir(const char *name, const char *text, char *out, size_t size) {
  char p[700];
  snprintf(out, size, "%s/%s", dir, name);
  snprintf(p, sizeof p, "%s/config.json", out);
  if (mkdir(out, 0700) != 0 && errno != EEXIST) return -1;
  return zo_test_write_file(p, text);
}

#define SHAPE                                                                                                        \
  "\"vocab_size\": 320, \"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 2, "                \
  "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"max_position_embeddings\": 64"

/* Reads config.json `text` (in folder name) into *cfg. */
static int read_config(const char *name, const char *text, struct zo_model_config *cfg) {
  char d[600];
  if (write_dir(name, text, d, sizeof d)) return -EIO;
  return zo_model_config_from_pretrained(d, 0, cfg);
}

/* cfg's config.json as the engine writes it, written to folder name and
 * read again into *back; the written object in *j (the caller's). */
static int round_trip(const struct zo_model_config *cfg, const char *name, json_t **j,
                      struct zo_model_config *back) {
  *j = zo_arch_of(cfg->arch)->hf_config(cfg);
  char *text = *j ? json_dumps(*j, JSON_INDENT(1)) : NULL;
  if (!text) return -ENOMEM;
  const int err = read_config(name, text, back);
  free(text);
  return err;
}

static const char *str_of(json_t *j, const char *key) { return json_string_value(json_object_get(j, key)); }
static const char *arch_of(json_t *j) { return json_string_value(json_array_get(json_object_get(j, "architectures"), 0)); }

/* A Mistral whose window never binds (null, or not shorter than
 * max_position_embeddings) is still a Mistral: full attention, and
 * model_type "mistral" with sliding_window null written back. */
static int test_mistral_without_window(void) {
  static const char *const windows[] = {"null", "64", "4096"};
  for (size_t i = 0; i < ZO_ARRAY_LEN(windows); i++) {
    char text[512], name[32];
    snprintf(text, sizeof text, "{\"model_type\": \"mistral\", " SHAPE ", \"sliding_window\": %s}", windows[i]);
    snprintf(name, sizeof name, "mistral-%zu", i);
    struct zo_model_config cfg, back;
    ZO_REQUIRE(read_config(name, text, &cfg) == 0);
    ZO_REQUIRE(cfg.family == ZO_FAMILY_MISTRAL && cfg.sliding_window == 0 && !cfg.qkv_bias);
    json_t *j = NULL;
    snprintf(name, sizeof name, "mistral-%zu-back", i);
    ZO_REQUIRE(round_trip(&cfg, name, &j, &back) == 0);
    ZO_REQUIRE(!strcmp(str_of(j, "model_type"), "mistral") && !strcmp(arch_of(j), "MistralForCausalLM"));
    ZO_REQUIRE(json_is_null(json_object_get(j, "sliding_window")));
    ZO_REQUIRE(back.family == ZO_FAMILY_MISTRAL && back.sliding_window == 0);
    json_decref(j);
  }
  return 0;
}

/* Every built family keeps its model_type and class through a write and a read. */
static int test_round_trip(void) {
  static const struct {
    const char *text, *type, *arch;
    enum zo_model_family family;
    int window;
    bool bias, qk_norm;
  } cases[] = {
      {"{\"model_type\": \"llama\", " SHAPE "}", "llama", "LlamaForCausalLM", ZO_FAMILY_LLAMA, 0, false, false},
      {"{\"model_type\": \"mistral\", " SHAPE ", \"sliding_window\": 16}", "mistral", "MistralForCausalLM",
       ZO_FAMILY_MISTRAL, 16, false, false},
      {"{\"model_type\": \"qwen2\", " SHAPE ", \"use_sliding_window\": false, \"sliding_window\": 16, "
       "\"max_window_layers\": 2}", "qwen2", "Qwen2ForCausalLM", ZO_FAMILY_QWEN2, 0, true, false},
      {"{\"model_type\": \"qwen3\", " SHAPE ", \"head_dim\": 12, \"use_sliding_window\": false, \"sliding_window\": "
       "null, \"max_window_layers\": 2, \"layer_types\": [\"full_attention\", \"full_attention\"]}", "qwen3",
       "Qwen3ForCausalLM", ZO_FAMILY_QWEN3, 0, false, true},
      {"{\"model_type\": \"phi3\", " SHAPE ", \"sliding_window\": 16, \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, "
       "\"original_max_position_embeddings\": 64, \"rope_scaling\": null}", "phi3", "Phi3ForCausalLM", ZO_FAMILY_PHI3,
       16, false, false},
      {"{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 320, "
       "\"n_positions\": 64}", "gpt2", "GPT2LMHeadModel", ZO_FAMILY_GPT2, 0, false, false},
  };
  for (size_t i = 0; i < ZO_ARRAY_LEN(cases); i++) {
    struct zo_model_config cfg, back;
    char name[32];
    snprintf(name, sizeof name, "family-%zu", i);
    ZO_REQUIRE(read_config(name, cases[i].text, &cfg) == 0);
    ZO_REQUIRE(cfg.family == cases[i].family && cfg.sliding_window == cases[i].window && cfg.qkv_bias == cases[i].bias);
    ZO_REQUIRE(cfg.qk_norm == cases[i].qk_norm);
    ZO_REQUIRE(!strcmp(zo_model_family_name(cfg.family), cases[i].type));
    json_t *j = NULL;
    snprintf(name, sizeof name, "family-%zu-back", i);
    ZO_REQUIRE(round_trip(&cfg, name, &j, &back) == 0);
    ZO_REQUIRE(!strcmp(str_of(j, "model_type"), cases[i].type) && !strcmp(arch_of(j), cases[i].arch));
    ZO_REQUIRE(back.family == cfg.family && back.sliding_window == cfg.sliding_window && back.qkv_bias == cfg.qkv_bias);
    ZO_REQUIRE(back.qk_norm == cfg.qk_norm && back.head_dim == cfg.head_dim);
    json_decref(j);
  }
  return 0;
}

/* Known families not built: refused by model_type, naming what is missing
 * and the ones built; an unknown type names the ones built. */
static int test_refused_by_name(void) {
  static const struct { const char *type, *why; } cases[] = {
      {"qwen3_moe", "mixture-of-experts MLPs (mlp.experts, mlp.gate)"},
      {"mixtral", "mixture-of-experts MLPs (block_sparse_moe)"},
      {"gemma", "GeGLU"}, {"gemma2", "soft-capping"}, {"gemma3", "q/k norms"}, {"gemma3_text", "q/k norms"},
      {"falcon", NULL},
  };
  for (size_t i = 0; i < ZO_ARRAY_LEN(cases); i++) {
    char text[512], want[128];
    snprintf(text, sizeof text, "{\"model_type\": \"%s\", " SHAPE "}", cases[i].type);
    snprintf(want, sizeof want, "model_type \"%s\" is not supported", cases[i].type);
    struct zo_model_config cfg;
    ZO_REQUIRE(read_config(cases[i].type, text, &cfg) == -ENOTSUP);
    const char *msg = zo_last_error();
    ZO_REQUIRE(strstr(msg, want) && strstr(msg, "\"gpt2\", \"llama\", \"mistral\", \"qwen2\", \"qwen3\" or \"phi3\"") &&
               strstr(msg, "config.json"));
    ZO_REQUIRE(!cases[i].why || strstr(msg, cases[i].why));
  }
  return 0;
}

/* The window keys are each family's: a Mistral has only sliding_window
 * (use_sliding_window and max_window_layers are Qwen2's, refused by name);
 * Qwen2 reads use_sliding_window and ignores max_window_layers; a Llama
 * carrying Qwen2's keys is read as before (a binding window refused). */
static int test_family_keys(void) {
  struct zo_model_config cfg;
  static const char *const qwen_keys[] = {"use_sliding_window", "max_window_layers"};
  for (size_t i = 0; i < ZO_ARRAY_LEN(qwen_keys); i++) {
    char text[512], name[32];
    snprintf(text, sizeof text, "{\"model_type\": \"mistral\", " SHAPE ", \"%s\": false}", qwen_keys[i]);
    snprintf(name, sizeof name, "mistral-key-%zu", i);
    ZO_REQUIRE(read_config(name, text, &cfg) == -ENOTSUP);
    ZO_REQUIRE(strstr(zo_last_error(), qwen_keys[i]) && strstr(zo_last_error(), "model_type \"mistral\""));
  }
  ZO_REQUIRE(read_config("qwen2-keys", "{\"model_type\": \"qwen2\", " SHAPE ", \"max_window_layers\": 1, "
                                       "\"use_sliding_window\": false}", &cfg) == 0);
  ZO_REQUIRE(read_config("llama-keys", "{\"model_type\": \"llama\", " SHAPE ", \"max_window_layers\": 1, "
                                       "\"use_sliding_window\": false, \"sliding_window\": 16}", &cfg) == 0);
  ZO_REQUIRE(cfg.family == ZO_FAMILY_LLAMA && cfg.sliding_window == 0);
  ZO_REQUIRE(read_config("llama-window", "{\"model_type\": \"llama\", " SHAPE ", \"use_sliding_window\": true, "
                                         "\"sliding_window\": 16}", &cfg) == -ENOTSUP);
  ZO_REQUIRE(strstr(zo_last_error(), "use_sliding_window"));
  /* Qwen3: use_sliding_window true refused even with a window that never
   * binds; layer_types other than full_attention, attention_bias refused. */
  ZO_REQUIRE(read_config("qwen3-window", "{\"model_type\": \"qwen3\", " SHAPE ", \"use_sliding_window\": true, "
                                         "\"sliding_window\": 4096}", &cfg) == -ENOTSUP);
  ZO_REQUIRE(strstr(zo_last_error(), "use_sliding_window = true: Qwen3's sliding-window layers"));
  ZO_REQUIRE(read_config("qwen3-types", "{\"model_type\": \"qwen3\", " SHAPE ", \"layer_types\": "
                                        "[\"full_attention\", \"sliding_attention\"]}", &cfg) == -ENOTSUP);
  ZO_REQUIRE(strstr(zo_last_error(), "layer_types[1]"));
  ZO_REQUIRE(read_config("qwen3-bias", "{\"model_type\": \"qwen3\", " SHAPE ", \"attention_bias\": true}", &cfg) ==
             -ENOTSUP);
  ZO_REQUIRE(strstr(zo_last_error(), "attention_bias = true: Qwen3's q/k/v and o_proj biases"));
  ZO_REQUIRE(read_config("qwen3-moe-key", "{\"model_type\": \"qwen3\", " SHAPE ", \"num_experts\": 8}", &cfg) ==
             -ENOTSUP);
  ZO_REQUIRE(strstr(zo_last_error(), "key \"num_experts\"") && strstr(zo_last_error(), "model_type \"qwen3\""));
  /* Phi-3: resid_pdrop read; its 128k configs' longrope (and llama3, which
   * no Phi-3 has) refused by name; Qwen2's window keys are not Phi-3's. */
  ZO_REQUIRE(read_config("phi3-drop", "{\"model_type\": \"phi3\", " SHAPE ", \"resid_pdrop\": 0.25}", &cfg) == 0);
  ZO_REQUIRE(cfg.resid_pdrop == 0.25f && cfg.family == ZO_FAMILY_PHI3);
  ZO_REQUIRE(read_config("phi3-longrope", "{\"model_type\": \"phi3\", " SHAPE ", \"rope_scaling\": {\"type\": "
                                          "\"longrope\", \"short_factor\": [1], \"long_factor\": [2]}}", &cfg) == -ENOTSUP);
  ZO_REQUIRE(strstr(zo_last_error(), "type \"longrope\" with model_type \"phi3\""));
  ZO_REQUIRE(read_config("phi3-llama3", "{\"model_type\": \"phi3\", " SHAPE ", \"rope_scaling\": {\"rope_type\": "
                                        "\"llama3\", \"factor\": 8, \"low_freq_factor\": 1, \"high_freq_factor\": 4, "
                                        "\"original_max_position_embeddings\": 16}}", &cfg) == -ENOTSUP);
  ZO_REQUIRE(strstr(zo_last_error(), "type \"llama3\" with model_type \"phi3\""));
  ZO_REQUIRE(read_config("phi3-qwen-key", "{\"model_type\": \"phi3\", " SHAPE ", \"use_sliding_window\": false}",
                         &cfg) == -ENOTSUP);
  ZO_REQUIRE(strstr(zo_last_error(), "key \"use_sliding_window\"") && strstr(zo_last_error(), "model_type \"phi3\""));
  return 0;
}

/* A configuration without config.json: the family from its features, as
 * before (a window: Mistral; q/k/v biases: Qwen2); features that contradict
 * a family are refused naming the key. */
static int test_family_of_features(void) {
  const struct zo_model_config base = {.arch = ZO_ARCH_LLAMA, .n_layer = 1, .n_head = 2, .n_embd = 16,
                                       .intermediate_size = 32, .vocab_size = 100, .max_seq_len = 32};
  struct zo_model_config c = base;
  ZO_REQUIRE(zo_model_config_check(&c) == 0 && c.family == ZO_FAMILY_LLAMA);
  c = base;
  c.sliding_window = 8;
  ZO_REQUIRE(zo_model_config_check(&c) == 0 && c.family == ZO_FAMILY_MISTRAL);
  c = base;
  c.qkv_bias = true;
  ZO_REQUIRE(zo_model_config_check(&c) == 0 && c.family == ZO_FAMILY_QWEN2);
  c = base;
  c.qk_norm = true;
  ZO_REQUIRE(zo_model_config_check(&c) == 0 && c.family == ZO_FAMILY_QWEN3);
  c = base;
  c.family = ZO_FAMILY_QWEN3;
  ZO_REQUIRE(zo_model_config_check(&c) == -EINVAL && strstr(zo_last_error(), "model.qk_norm = false"));
  c = base;
  c.family = ZO_FAMILY_LLAMA;
  c.qk_norm = true;
  ZO_REQUIRE(zo_model_config_check(&c) == -EINVAL && strstr(zo_last_error(), "model.qk_norm = true"));
  c = base;
  c.family = ZO_FAMILY_MISTRAL; /* named: kept without a window */
  ZO_REQUIRE(zo_model_config_check(&c) == 0 && c.family == ZO_FAMILY_MISTRAL);
  c = base;
  c.family = ZO_FAMILY_LLAMA;
  c.qkv_bias = true;
  ZO_REQUIRE(zo_model_config_check(&c) == -EINVAL && strstr(zo_last_error(), "model.qkv_bias"));
  c = base;
  c.family = ZO_FAMILY_QWEN2;
  ZO_REQUIRE(zo_model_config_check(&c) == -EINVAL && strstr(zo_last_error(), "model.qkv_bias = false"));
  c = base;
  c.family = ZO_FAMILY_LLAMA;
  c.sliding_window = 8;
  ZO_REQUIRE(zo_model_config_check(&c) == -EINVAL && strstr(zo_last_error(), "model.sliding_window"));
  c = base;
  c.family = ZO_FAMILY_PHI3; /* Phi-3's window is Mistral's */
  c.sliding_window = 8;
  ZO_REQUIRE(zo_model_config_check(&c) == 0 && c.family == ZO_FAMILY_PHI3);
  c = base;
  c.family = ZO_FAMILY_GPT2;
  ZO_REQUIRE(zo_model_config_check(&c) == -EINVAL && strstr(zo_last_error(), "\"gpt2\""));
  c = base;
  c.qkv_bias = true;
  c.sliding_window = 8;
  ZO_REQUIRE(zo_model_config_check(&c) == -EINVAL && strstr(zo_last_error(), "no family has both"));
  return 0;
}

int main(void) {
  if (zo_test_mkdtemp(dir, sizeof dir, "families")) return 1;
  static const struct zo_test tests[] = {
      ZO_TEST(mistral_without_window), ZO_TEST(round_trip), ZO_TEST(refused_by_name), ZO_TEST(family_keys),
      ZO_TEST(family_of_features),
  };
  const int rc = zo_test_report(zo_test_run(tests, ZO_ARRAY_LEN(tests)));
  zo_test_rmtree(dir);
  return rc;
}
