/* The quantization section: transformers' BitsAndBytesConfig as its to_dict
 * writes it (config.json's quantization_config) loads with Hugging Face's
 * names and defaults; what is not built (LLM.int8, a storage other than
 * uint8, fp16 compute, fp32 modules on the host, unquantized block modules)
 * and 4-bit without LoRA are refused by name; the section dumps and reads
 * back; train's model setup refuses load_in_4bit by name until the quantized
 * base is built (issue 48). */
#include "zo/config.h"
#include "zo/hf.h"
#include "zo/train_setup.h"
#include "zo_test.h"

static char tmp_dir[256];

/* transformers 4.36.2's BitsAndBytesConfig(load_in_4bit=True,
 * bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True).to_dict(), the
 * compute dtype as its to_dict writes it (the torch dtype's name). */
#define HF_QUANT                                                                                   \
  "\"quantization\": {\"quant_method\": \"bitsandbytes\", \"load_in_8bit\": false, "              \
  "\"load_in_4bit\": true, \"llm_int8_threshold\": 6.0, \"llm_int8_skip_modules\": null, "       \
  "\"llm_int8_enable_fp32_cpu_offload\": false, \"llm_int8_has_fp16_weight\": false, "           \
  "\"bnb_4bit_quant_type\": \"nf4\", \"bnb_4bit_use_double_quant\": true, "                      \
  "\"bnb_4bit_compute_dtype\": \"float32\"}"

/* transformers 5.25's to_dict of the same (config.json's quantization_config
 * of a model saved 4-bit with bitsandbytes 0.50.2 on the CPU). */
#define HF5_QUANT                                                                                  \
  "\"quantization\": {\"_load_in_4bit\": true, \"_load_in_8bit\": false, \"bnb_4bit_compute_dtype\": "     \
  "\"float32\", \"bnb_4bit_quant_storage\": \"uint8\", \"bnb_4bit_quant_type\": \"nf4\", "                \
  "\"bnb_4bit_use_double_quant\": true, \"llm_int8_enable_fp32_cpu_offload\": false, "                   \
  "\"llm_int8_has_fp16_weight\": false, \"llm_int8_skip_modules\": null, \"llm_int8_threshold\": 6.0, "   \
  "\"load_in_4bit\": true, \"load_in_8bit\": false, \"quant_method\": \"bitsandbytes\"}"

static int load(const char *name, const char *json, struct zo_config *cfg) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s.json", tmp_dir, name);
  ZO_REQUIRE(zo_test_write_file(path, json) == 0);
  return zo_config_load_quiet(cfg, path, NULL, 0);
}

static int test_transformers_dict(void) {
  struct zo_config cfg;
  ZO_REQUIRE(load("hf", "{\"lora\": {\"r\": 8}, " HF_QUANT "}", &cfg) == 0);
  ZO_REQUIRE(cfg.quant.load_in_4bit && !cfg.quant.load_in_8bit);
  ZO_REQUIRE(cfg.quant.quant_type == ZO_QUANT_NF4 && cfg.quant.use_double_quant);
  ZO_REQUIRE(!cfg.quant.compute_bf16 && !strcmp(cfg.quant.quant_storage, "uint8"));
  ZO_REQUIRE(ZO_QUANT_BLOCKSIZE == 64); /* bitsandbytes' 4-bit default */
  zo_config_free(&cfg);
  ZO_REQUIRE(load("hf5", "{\"lora\": {\"r\": 8}, " HF5_QUANT "}", &cfg) == 0);
  ZO_REQUIRE(cfg.quant.load_in_4bit && cfg.quant.quant_type == ZO_QUANT_NF4 && cfg.quant.use_double_quant);
  zo_config_free(&cfg);
  return 0;
}

/* transformers' defaults: fp4, no double quantization, uint8 storage; the
 * "_load_in_4bit" spelling of later versions is accepted when it agrees. */
static int test_defaults(void) {
  struct zo_config cfg;
  ZO_REQUIRE(load("def", "{\"lora\": {\"r\": 4}, \"quantization\": {\"load_in_4bit\": true, "
                         "\"_load_in_4bit\": true, \"_load_in_8bit\": false}}", &cfg) == 0);
  ZO_REQUIRE(cfg.quant.quant_type == ZO_QUANT_FP4 && !cfg.quant.use_double_quant);
  ZO_REQUIRE(!strcmp(cfg.quant.quant_storage, "uint8") && !cfg.quant.compute_bf16);
  zo_config_free(&cfg);
  /* the LM head is never quantized: naming it changes nothing */
  ZO_REQUIRE(load("skip-head", "{\"lora\": {\"r\": 4}, \"quantization\": {\"load_in_4bit\": true, "
                               "\"llm_int8_skip_modules\": [\"lm_head\"]}}", &cfg) == 0);
  zo_config_free(&cfg);
  ZO_REQUIRE(load("off", "{}", &cfg) == 0);
  ZO_REQUIRE(!cfg.quant.load_in_4bit);
  zo_config_free(&cfg);
  return 0;
}

/* The compute dtype is the run's: bfloat16 with bf16.enabled, float32
 * without; not given, it follows the run. */
static int test_compute_dtype(void) {
  struct zo_config cfg;
  ZO_REQUIRE(load("bf", "{\"bf16\": {\"enabled\": true}, \"lora\": {\"r\": 8}, \"quantization\": "
                        "{\"load_in_4bit\": true, \"bnb_4bit_compute_dtype\": \"bfloat16\"}}", &cfg) == 0);
  ZO_REQUIRE(cfg.quant.compute_bf16);
  zo_config_free(&cfg);
  ZO_REQUIRE(load("bf-run", "{\"bf16\": {\"enabled\": true}, \"lora\": {\"r\": 8}, \"quantization\": "
                            "{\"load_in_4bit\": true}}", &cfg) == 0);
  ZO_REQUIRE(cfg.quant.compute_bf16);
  zo_config_free(&cfg);
  return 0;
}

struct refusal {
  const char *name, *json;
  int err;
  const char *message;
};

#define LORA "\"lora\": {\"r\": 8}, "
static const struct refusal refusals[] = {
  {"int8", "{" LORA "\"quantization\": {\"load_in_8bit\": true}}", -ENOTSUP,
   "quantization.load_in_8bit = true: LLM.int8 (an 8-bit base) is not built"},
  {"int8-alias", "{" LORA "\"quantization\": {\"_load_in_8bit\": true}}", -ENOTSUP,
   "quantization._load_in_8bit = true: LLM.int8"},
  {"no-lora", "{\"quantization\": {\"load_in_4bit\": true}}", -EINVAL,
   "quantization.load_in_4bit = true without LoRA: the 4-bit base is frozen, so nothing would train"},
  {"storage", "{" LORA "\"quantization\": {\"load_in_4bit\": true, \"bnb_4bit_quant_storage\": \"bfloat16\"}}",
   -EINVAL, "quantization.bnb_4bit_quant_storage = \"bfloat16\": only \"uint8\" is built"},
  {"fp16-compute", "{" LORA "\"quantization\": {\"load_in_4bit\": true, \"bnb_4bit_compute_dtype\": \"float16\"}}",
   -EINVAL, "quantization.bnb_4bit_compute_dtype = \"float16\": fp16 compute is not built with LoRA"},
  {"bad-compute", "{" LORA "\"quantization\": {\"load_in_4bit\": true, \"bnb_4bit_compute_dtype\": \"int8\"}}",
   -EINVAL, "quantization.bnb_4bit_compute_dtype = \"int8\": must be \"float32\" or \"bfloat16\""},
  {"compute-vs-run", "{" LORA "\"quantization\": {\"load_in_4bit\": true, \"bnb_4bit_compute_dtype\": \"bfloat16\"}}",
   -EINVAL, "quantization.bnb_4bit_compute_dtype = \"bfloat16\" but the run computes in fp32 (bf16.enabled = false)"},
  {"quant-type", "{" LORA "\"quantization\": {\"load_in_4bit\": true, \"bnb_4bit_quant_type\": \"int4\"}}",
   -EINVAL, "quantization.bnb_4bit_quant_type = \"int4\": must be one of \"fp4\", \"nf4\""},
  {"cpu-offload", "{" LORA "\"quantization\": {\"load_in_4bit\": true, \"llm_int8_enable_fp32_cpu_offload\": true}}",
   -ENOTSUP, "quantization.llm_int8_enable_fp32_cpu_offload = true: modules kept in fp32 on the host are not built"},
  {"skip-modules", "{" LORA "\"quantization\": {\"load_in_4bit\": true, \"llm_int8_skip_modules\": [\"q_proj\"]}}",
   -EINVAL,
   "quantization.llm_int8_skip_modules = \"q_proj\": must be a list of names (or one name as a string) from \"lm_head\""},
  {"key-while-off", "{" LORA "\"quantization\": {\"bnb_4bit_quant_type\": \"nf4\"}}", -EINVAL,
   "quantization.bnb_4bit_quant_type is set but quantization.load_in_4bit is false"},
  {"alias-differs", "{" LORA "\"quantization\": {\"load_in_4bit\": true, \"_load_in_4bit\": false}}", -EINVAL,
   "quantization._load_in_4bit = false but load_in_4bit = true"},
  {"unknown", "{" LORA "\"quantization\": {\"load_in_4bit\": true, \"bnb_4bit_blocksize\": 128}}", -EINVAL,
   "unknown key \"quantization.bnb_4bit_blocksize\""},
  {"method", "{" LORA "\"quantization\": {\"load_in_4bit\": true, \"quant_method\": \"gptq\"}}", -EINVAL,
   "quantization.quant_method = \"gptq\": must be one of \"bitsandbytes\""},
};

static int test_refusals(void) {
  int failed = 0;
  for (size_t i = 0; i < ZO_ARRAY_LEN(refusals); i++) {
    const struct refusal *r = &refusals[i];
    struct zo_config cfg;
    const int err = load(r->name, r->json, &cfg);
    if (err != r->err || !strstr(zo_last_error(), r->message)) {
      fprintf(stderr, "refusal %s: got %d \"%s\", want %d with \"%s\"\n", r->name, err, zo_last_error(), r->err,
              r->message);
      failed++;
    }
    if (!err) zo_config_free(&cfg);
  }
  return failed ? 1 : 0;
}

/* zoffload config's dump reads back as the same section; with 4-bit off
 * the section is left out. */
static int test_dump_round_trip(void) {
  struct zo_config cfg, back;
  char path[512];
  ZO_REQUIRE(load("dump", "{\"lora\": {\"r\": 8}, " HF_QUANT "}", &cfg) == 0);
  snprintf(path, sizeof path, "%s/dumped.json", tmp_dir);
  FILE *f = fopen(path, "w");
  ZO_REQUIRE(f);
  ZO_REQUIRE(zo_config_dump(&cfg, f) == 0);
  ZO_REQUIRE(fclose(f) == 0);
  ZO_REQUIRE(zo_config_load_quiet(&back, path, NULL, 0) == 0);
  ZO_REQUIRE(back.quant.load_in_4bit && back.quant.quant_type == ZO_QUANT_NF4 && back.quant.use_double_quant);
  ZO_REQUIRE(!strcmp(back.quant.compute_dtype, "float32") && !strcmp(back.quant.quant_storage, "uint8"));
  zo_config_free(&back);
  zo_config_free(&cfg);

  ZO_REQUIRE(load("dump-off", "{}", &cfg) == 0);
  char *text = NULL;
  size_t n = 0;
  f = open_memstream(&text, &n);
  ZO_REQUIRE(f);
  ZO_REQUIRE(zo_config_dump(&cfg, f) == 0);
  ZO_REQUIRE(fclose(f) == 0);
  ZO_REQUIRE(!strstr(text, "quantization"));
  free(text);
  zo_config_free(&cfg);
  return 0;
}

/* Every command's model setup (train, plan, eval, sample, bench) refuses
 * 4-bit by name while the quantized base is not built. */
static int test_setup_refuses(void) {
  struct zo_config cfg;
  ZO_REQUIRE(load("setup", "{\"model\": {\"n_layer\": 2, \"n_embd\": 64, \"n_head\": 2}, \"lora\": {\"r\": 8}, "
                           "\"quantization\": {\"load_in_4bit\": true, \"bnb_4bit_quant_type\": \"nf4\"}}", &cfg) == 0);
  struct zo_model_config mc;
  bool on = false;
  ZO_REQUIRE(zo_train_model_config_lora(&cfg, &mc, &on) == -ENOTSUP);
  ZO_REQUIRE(strstr(zo_last_error(), "quantization.load_in_4bit = true (QLoRA, nf4)"));
  ZO_REQUIRE(strstr(zo_last_error(), "not built yet"));
  zo_config_free(&cfg);
  return 0;
}

/* A checkpoint transformers saved with bitsandbytes 4-bit (config.json's
 * quantization_config, as transformers 5.25 + bitsandbytes 0.50.2 write it on
 * the CPU) is refused by name for Llama and GPT-2 alike: its packed weights
 * do not load. */
static int test_quantized_checkpoint_refused(void) {
  static const char *const bodies[] = {
      "{\"model_type\": \"llama\", \"vocab_size\": 64, \"hidden_size\": 64, \"intermediate_size\": 128, "
      "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1, ",
      "{\"model_type\": \"gpt2\", \"vocab_size\": 64, \"n_embd\": 64, \"n_layer\": 1, \"n_head\": 2, "
      "\"n_positions\": 32, "};
  for (int i = 0; i < 2; i++) {
    char dir[512], path[600], json[2048];
    snprintf(dir, sizeof dir, "%s/bnb-%d", tmp_dir, i);
    ZO_REQUIRE(mkdir(dir, 0700) == 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    /* HF5_QUANT's object, its closing brace included, then the file's */
    snprintf(json, sizeof json, "%s\"quantization_config\": {%s}", bodies[i], strchr(HF5_QUANT, '{') + 1);
    ZO_REQUIRE(zo_test_write_file(path, json) == 0);
    struct zo_model_config mc;
    ZO_REQUIRE(zo_model_config_from_pretrained(dir, 2, &mc) == -ENOTSUP);
    ZO_REQUIRE(strstr(zo_last_error(), "quantization_config (quant_method \"bitsandbytes\", load_in_4bit): a "
                                       "checkpoint saved quantized"));
  }
  return 0;
}

int main(void) {
  static const struct zo_test tests[] = {
      ZO_TEST(transformers_dict), ZO_TEST(defaults),       ZO_TEST(compute_dtype),
      ZO_TEST(refusals),          ZO_TEST(dump_round_trip), ZO_TEST(setup_refuses),
      ZO_TEST(quantized_checkpoint_refused),
  };
  if (zo_test_mkdtemp(tmp_dir, sizeof tmp_dir, "config-quant")) return 1;
  struct zo_test_counts counts = zo_test_run(tests, ZO_ARRAY_LEN(tests));
  zo_test_rmtree(tmp_dir);
  return zo_test_report(counts);
}
