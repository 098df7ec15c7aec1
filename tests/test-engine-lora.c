/* LoRA's config section (PEFT's names) and its resolution (zo/lora.h): the
 * keys and their checks, target_modules per arch ("all-linear", PEFT's
 * defaults), the scale (rsLoRA), lora.init_from's adapter_config.json winning
 * and a conflicting config value refused, PEFT features not built refused by
 * name, the dump round trip, and training refusing LoRA until it is built. */
#include "zo/backend.h"
#include "zo/cpu.h"
#include "zo/config.h"
#include "zo/hf.h"
#include "zo/lora.h"
#include "zo/model.h"
#include "zo/sample.h"
#include "zo/train_setup.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo_test.h"

#include "../engine/model/lora_attach.h"

#define EXPECT(cond) ZO_EXPECT(cond)
#define BIT(t) (1u << (t))

static char tmpdir[256];
/* Models named by family alone, for zo_lora_resolve (the Llama family's
 * family left unset: resolved from the arch, as a config without config.json). */
static const struct zo_model_config LLAMA = {.arch = ZO_ARCH_LLAMA}, GPT2 = {.arch = ZO_ARCH_GPT2},
                                    PHI3 = {.arch = ZO_ARCH_LLAMA, .family = ZO_FAMILY_PHI3};

static int load(struct zo_config *c, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/c.json", tmpdir);
  if (zo_test_write_file(path, text)) return -EIO;
  return zo_config_load_quiet(c, path, NULL, 0);
}

static bool says(const char *needle) {
  if (strstr(zo_last_error(), needle)) return true;
  fprintf(stderr, "    message \"%s\" lacks \"%s\"\n", zo_last_error(), needle);
  return false;
}

/* A PEFT adapter directory: adapter_config.json of text, an empty
 * adapter_model.safetensors when with_weights. */
static const char *adapter(const char *name, const char *text, bool with_weights) {
  static char dir[512];
  char path[700];
  snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
  mkdir(dir, 0700);
  snprintf(path, sizeof path, "%s/adapter_config.json", dir);
  if (zo_test_write_file(path, text)) return NULL;
  snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
  if (with_weights && zo_test_write_file(path, "")) return NULL;
  return dir;
}

static int test_keys(void) {
  const int before = zo_test_n_expect_failed;
  struct zo_config c;
  struct zo_lora l;
  EXPECT(zo_config_load_quiet(&c, NULL, NULL, 0) == 0);
  EXPECT(c.lora.r == 0 && c.lora.alpha == 8 && c.lora.dropout == 0 && c.lora.target_modules == 0);
  EXPECT(zo_lora_resolve(&c.lora, &LLAMA, &l) == 0); /* off */
  zo_config_free(&c);

  EXPECT(load(&c, "{\"lora\": {\"r\": 16, \"alpha\": 32, \"dropout\": 0.05, \"use_rslora\": true,"
                  " \"target_modules\": [\"q_proj\", \"down_proj\"]}}") == 0);
  EXPECT(c.lora.r == 16 && c.lora.alpha == 32 && c.lora.dropout == 0.05 && c.lora.use_rslora);
  EXPECT(c.lora.target_modules == (BIT(ZO_LORA_Q_PROJ) | BIT(ZO_LORA_DOWN_PROJ)));
  EXPECT(zo_lora_resolve(&c.lora, &LLAMA, &l) == 1);
  EXPECT(l.r == 16 && l.scale == 32 / 4.0 && l.targets == c.lora.target_modules && !l.from_adapter);
  EXPECT(zo_lora_resolve(&c.lora, &GPT2, &l) == -EINVAL && says("\"q_proj\", \"down_proj\"") &&
         says("c_attn"));
  zo_config_free(&c);

  /* one name as a string; alpha / r without rsLoRA */
  EXPECT(load(&c, "{\"model\": {\"arch\": \"gpt2\"}, \"lora\": {\"r\": 4, \"alpha\": 16, "
                  "\"target_modules\": \"c_proj\"}}") == 0);
  EXPECT(zo_lora_resolve(&c.lora, &GPT2, &l) == 1 && l.scale == 4 && l.targets == BIT(ZO_LORA_C_PROJ));
  zo_config_free(&c);

  EXPECT(load(&c, "{\"lora\": {\"r\": 8, \"target_modules\": \"all-linear\"}}") == 0);
  EXPECT(zo_lora_resolve(&c.lora, &LLAMA, &l) == 1 && l.targets == zo_lora_family_targets(ZO_FAMILY_LLAMA));
  EXPECT(__builtin_popcount(l.targets) == 7 && l.scale == 1);
  EXPECT(zo_lora_resolve(&c.lora, &GPT2, &l) == 1 &&
         l.targets == (BIT(ZO_LORA_C_ATTN) | BIT(ZO_LORA_C_PROJ) | BIT(ZO_LORA_C_FC)));
  zo_config_free(&c);

  /* PEFT's default targets */
  EXPECT(load(&c, "{\"lora\": {\"r\": 8}}") == 0);
  EXPECT(zo_lora_resolve(&c.lora, &LLAMA, &l) == 1 &&
         l.targets == (BIT(ZO_LORA_Q_PROJ) | BIT(ZO_LORA_V_PROJ)));
  EXPECT(zo_lora_resolve(&c.lora, &GPT2, &l) == 1 && l.targets == BIT(ZO_LORA_C_ATTN));
  zo_config_free(&c);
  return zo_test_expect_failed_since(before);
}

static int test_bad_keys(void) {
  const int before = zo_test_n_expect_failed;
  struct zo_config c;
  EXPECT(load(&c, "{\"lora\": {\"r\": 8, \"lora_alpha\": 16}}") == -EINVAL && says("lora.lora_alpha"));
  EXPECT(load(&c, "{\"lora\": {\"r\": 8, \"target_modules\": [\"q_proj\", \"qkv\"]}}") == -EINVAL &&
         says("\"qkv\"") && says("all-linear"));
  EXPECT(load(&c, "{\"lora\": {\"r\": 8, \"target_modules\": [\"Q_PROJ\"]}}") == -EINVAL);
  EXPECT(load(&c, "{\"lora\": {\"r\": 8, \"target_modules\": 3}}") == -EINVAL);
  EXPECT(load(&c, "{\"lora\": {\"r\": -1}}") == -EINVAL && says("lora.r"));
  EXPECT(load(&c, "{\"lora\": {\"r\": 8, \"alpha\": 0}}") == -EINVAL && says("lora.alpha"));
  EXPECT(load(&c, "{\"lora\": {\"r\": 8, \"dropout\": 1}}") == -EINVAL && says("lora.dropout"));
  /* a key of a LoRA that is off */
  EXPECT(load(&c, "{\"lora\": {\"alpha\": 16}}") == -EINVAL && says("LoRA is off") && says("lora.alpha"));
  const char *sets[] = {"lora.r=4", "lora.target_modules=o_proj"};
  EXPECT(zo_config_load_quiet(&c, NULL, sets, 2) == 0 && c.lora.r == 4 &&
         c.lora.target_modules == BIT(ZO_LORA_O_PROJ));
  zo_config_free(&c);
  return zo_test_expect_failed_since(before);
}

/* zo_config_dump of a LoRA config loads back with the same lora values. */
static int round_trip(const char *text) {
  struct zo_config a, b;
  char path[512];
  if (load(&a, text)) return zo_test_fail("load: %s", zo_last_error());
  snprintf(path, sizeof path, "%s/dump.json", tmpdir);
  FILE *f = fopen(path, "w");
  if (!f || zo_config_dump(&a, f) || fclose(f)) return zo_test_fail("dump failed");
  int err = zo_config_load_quiet(&b, path, NULL, 0);
  if (err) return zo_test_fail("reload: %s", zo_last_error());
  bool same = a.lora.r == b.lora.r && a.lora.alpha == b.lora.alpha && a.lora.dropout == b.lora.dropout &&
              a.lora.target_modules == b.lora.target_modules && a.lora.use_rslora == b.lora.use_rslora &&
              !strcmp(a.lora.init_from, b.lora.init_from);
  /* with init_from, what was given matters (conflicts): the dump gives no more */
  if (a.lora.init_from[0])
    same = same && a.lora.r_set == b.lora.r_set && a.lora.alpha_set == b.lora.alpha_set &&
           a.lora.dropout_set == b.lora.dropout_set && a.lora.target_modules_set == b.lora.target_modules_set;
  zo_config_free(&a);
  zo_config_free(&b);
  return same ? 0 : zo_test_fail("lora section differs after dump and load of %s", text);
}

static int test_dump(void) {
  const char *dir = adapter("dumped", "{\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]}", true);
  char text[1024];
  snprintf(text, sizeof text, "{\"lora\": {\"init_from\": \"%s\", \"r\": 4}}", dir);
  int err = round_trip("{}") || round_trip("{\"lora\": {\"r\": 16, \"use_rslora\": true, \"target_modules\": "
                                           "[\"k_proj\", \"gate_proj\", \"up_proj\"]}}") ||
            round_trip("{\"lora\": {\"r\": 2, \"target_modules\": \"all-linear\"}}") || round_trip(text);
  return err ? 1 : 0;
}

static int test_init_from(void) {
  const int before = zo_test_n_expect_failed;
  struct zo_config c;
  struct zo_lora l;
  char text[1024];
  const char *dir = adapter("peft", "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 32, \"lora_dropout\": 0.1, "
                                    "\"target_modules\": [\"v_proj\", \"q_proj\"], \"bias\": \"none\", \"fan_in_fan_out\":"
                                    " false, \"use_rslora\": false, \"use_dora\": false, \"rank_pattern\": {}, "
                                    "\"modules_to_save\": null, \"task_type\": \"CAUSAL_LM\"}", true);
  /* the adapter's values win over the defaults */
  snprintf(text, sizeof text, "{\"lora\": {\"init_from\": \"%s\"}}", dir);
  EXPECT(load(&c, text) == 0);
  EXPECT(zo_lora_resolve(&c.lora, &LLAMA, &l) == 1);
  EXPECT(l.r == 4 && l.alpha == 32 && l.dropout == 0.1 && l.scale == 8 && l.from_adapter &&
         l.targets == (BIT(ZO_LORA_Q_PROJ) | BIT(ZO_LORA_V_PROJ)));
  zo_config_free(&c);
  /* equal values given: accepted; differing: refused by name */
  snprintf(text, sizeof text, "{\"lora\": {\"init_from\": \"%s\", \"r\": 4, \"alpha\": 32, "
                              "\"target_modules\": [\"q_proj\", \"v_proj\"]}}", dir);
  EXPECT(load(&c, text) == 0 && zo_lora_resolve(&c.lora, &LLAMA, &l) == 1);
  zo_config_free(&c);
  static const char *const conflicts[][2] = {{"\"r\": 8", "lora.r = 8"}, {"\"alpha\": 16", "lora.alpha = 16"},
                                             {"\"dropout\": 0", "lora.dropout = 0"},
                                             {"\"use_rslora\": true", "lora.use_rslora = true"},
                                             {"\"target_modules\": \"all-linear\"", "lora.target_modules"}};
  for (size_t i = 0; i < ZO_ARRAY_LEN(conflicts); i++) {
    snprintf(text, sizeof text, "{\"lora\": {\"init_from\": \"%s\", %s}}", dir, conflicts[i][0]);
    EXPECT(load(&c, text) == 0);
    EXPECT(zo_lora_resolve(&c.lora, &LLAMA, &l) == -EINVAL && says(conflicts[i][1]) &&
           says("adapter_config.json"));
    zo_config_free(&c);
  }
  /* a Llama adapter on GPT-2 */
  snprintf(text, sizeof text, "{\"lora\": {\"init_from\": \"%s\"}}", dir);
  EXPECT(load(&c, text) == 0 && zo_lora_resolve(&c.lora, &GPT2, &l) == -EINVAL && says("q_proj"));
  zo_config_free(&c);
  return zo_test_expect_failed_since(before);
}

/* An adapter that needs what is not built is refused, naming it. */
static int test_init_from_refused(void) {
  const int before = zo_test_n_expect_failed;
  static const struct { const char *json; bool weights; int err; const char *says; } cases[] = {
      {"{\"r\": 4, \"target_modules\": [\"q_proj\"]}", false, -ENOENT, "adapter_model.safetensors"},
      {"{\"r\": 4, \"target_modules\": [\"q_proj\"], \"use_dora\": true}", true, -ENOTSUP, "use_dora"},
      {"{\"r\": 4, \"target_modules\": [\"q_proj\"], \"rank_pattern\": {\"q\": 2}}", true, -ENOTSUP,
       "rank_pattern"},
      {"{\"r\": 4, \"target_modules\": [\"q_proj\"], \"modules_to_save\": [\"lm_head\"]}", true, -ENOTSUP,
       "modules_to_save"},
      {"{\"r\": 4, \"target_modules\": [\"q_proj\"], \"bias\": \"all\"}", true, -ENOTSUP, "bias"},
      {"{\"r\": 4, \"target_modules\": \".*proj\"}", true, -ENOTSUP, "regular expression"},
      {"{\"r\": 4, \"target_modules\": [\"lm_head\"]}", true, -EINVAL, "lm_head"},
      {"{\"r\": 4, \"target_modules\": [\"q_proj\"], \"fan_in_fan_out\": true}", true, -EINVAL, "fan_in_fan_out"},
      {"{\"r\": 2.5, \"target_modules\": [\"q_proj\"]}", true, -EINVAL, "r = 2.5"},
      {"{\"r\": 4, \"peft_type\": \"IA3\", \"target_modules\": [\"q_proj\"]}", true, -ENOTSUP, "IA3"},
      {"[1]", true, -EINVAL, "not a JSON object"},
      /* issue 52, class 5: every key of the file known, the features not built refused */
      {"{\"r\": 4, \"target_modules\": [\"q_proj\"], \"made_up\": 1}", true, -EINVAL,
       "\"made_up\" is not a key of PEFT's LoraConfig"},
      {"{\"r\": 4, \"target_modules\": [\"q_proj\"], \"lora_bias\": true}", true, -ENOTSUP, "lora_bias"},
      {"{\"r\": 4, \"target_modules\": [\"q_proj\"], \"exclude_modules\": [\"k_proj\"]}", true, -ENOTSUP,
       "exclude_modules"},
      {"{\"r\": 4, \"target_modules\": [\"q_proj\"], \"target_parameters\": [\"w\"]}", true, -ENOTSUP,
       "target_parameters"},
      {"{\"r\": 4, \"target_modules\": [\"q_proj\"], \"trainable_token_indices\": [3]}", true, -ENOTSUP,
       "trainable_token_indices"},
      {"{\"r\": 4, \"target_modules\": [\"q_proj\"], \"use_qalora\": true}", true, -ENOTSUP, "use_qalora"},
      {"{\"r\": 4, \"target_modules\": [\"q_proj\"], \"init_lora_weights\": \"pissa\"}", true, -ENOTSUP,
       "init_lora_weights = \"pissa\" changes the base weights"},
      {"{\"r\": 4, \"target_modules\": [\"q_proj\"], \"task_type\": \"SEQ_CLS\"}", true, -ENOTSUP, "SEQ_CLS"},
  };
  for (size_t i = 0; i < ZO_ARRAY_LEN(cases); i++) {
    char name[32], text[1024];
    snprintf(name, sizeof name, "bad%zu", i);
    snprintf(text, sizeof text, "{\"lora\": {\"init_from\": \"%s\"}}", adapter(name, cases[i].json, cases[i].weights));
    struct zo_config c;
    struct zo_lora l;
    EXPECT(load(&c, text) == 0);
    int err = zo_lora_resolve(&c.lora, &LLAMA, &l);
    if (err != cases[i].err) fprintf(stderr, "    case %zu: %d, want %d\n", i, err, cases[i].err);
    EXPECT(err == cases[i].err && says(cases[i].says));
    zo_config_free(&c);
  }
  return zo_test_expect_failed_since(before);
}

/* Training with adapters is not built: refused, never run as a full fine-tune. */
static int test_train_refuses(void) {
  const int before = zo_test_n_expect_failed;
  struct zo_config c;
  struct zo_model_config mc;
  EXPECT(load(&c, "{\"model\": {\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 64, "
                  "\"max_seq_len\": 16}}") == 0);
  EXPECT(zo_train_model_config(&c, &mc) == 0);
  zo_config_free(&c);
  EXPECT(load(&c, "{\"model\": {\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 64, "
                  "\"max_seq_len\": 16}, \"lora\": {\"r\": 4}}") == 0);
  EXPECT(zo_train_model_config(&c, &mc) == -ENOTSUP && says("LoRA"));
  zo_config_free(&c);
  /* a bad adapter is reported as such first */
  EXPECT(load(&c, "{\"model\": {\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 64, "
                  "\"max_seq_len\": 16}, \"lora\": {\"r\": 4, \"target_modules\": \"q_proj\"}}") == 0);
  EXPECT(zo_train_model_config(&c, &mc) == -EINVAL && says("gpt2"));
  zo_config_free(&c);
  return zo_test_expect_failed_since(before);
}

/* eval and sample with a lora section (the base model never run alone in
 * the adapter's name): with lora.r and no adapter both are refused naming
 * the command (PEFT's fresh adapter is the base exactly); with
 * lora.init_from, or sample's opts->adapter over lora.r alone, both read the
 * adapter (this one's adapter_model.safetensors is empty: refused as a bad
 * file, never as "not built"). The weights come from a Hugging Face
 * directory zoffload wrote (zeros: every refusal comes before any pass). */
static int test_eval_lora(void) {
  const int before = zo_test_n_expect_failed;
  const struct zo_model_config mc0 = {.arch = ZO_ARCH_GPT2, .n_layer = 2, .n_head = 2, .n_embd = 16,
                                      .vocab_size = 64, .max_seq_len = 16};
  struct zo_model_config mc = mc0;
  EXPECT(zo_model_config_check(&mc) == 0);
  struct zo_model *m = zo_model_init(&mc, zo_backend_cpu(), 1, 8);
  EXPECT(m != NULL);
  if (!m) return zo_test_expect_failed_since(before);
  float *zeros = calloc(m->table.numel, sizeof *zeros);
  char model[512], cfgtext[2048];
  snprintf(model, sizeof model, "%s/base", tmpdir);
  EXPECT(zeros && zo_model_save_pretrained(model, m, zeros) == 0);
  free(zeros);
  zo_model_free(m);
  const char *ad = adapter("eval-adapter", "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, "
                                           "\"target_modules\": [\"c_attn\"], \"fan_in_fan_out\": true}", true);
  EXPECT(ad != NULL);
  const char *const lora[2] = {"\"r\": 4", "\"init_from\": \"%s\""};
  for (int k = 0; k < 2 && ad; k++) {
    char section[700];
    snprintf(section, sizeof section, lora[k], ad);
    snprintf(cfgtext, sizeof cfgtext, "{\"data\": {\"train\": \"%s/none.bin\", \"seq_len\": 8}, "
             "\"engine\": {\"device\": \"cpu\"}, \"lora\": {%s}}", tmpdir, section);
    struct zo_config c;
    EXPECT(load(&c, cfgtext) == 0);
    struct zo_eval_result r;
    EXPECT(zo_eval(&c, model, 1, &r) != 0 && !says("not built"));
    if (k == 0) EXPECT(says("lora.r = 4 without lora.init_from") && says("--adapter"));
    else EXPECT(says("adapter_model.safetensors"));
    struct zo_sample_opts o = {.checkpoint = model, .prompt = "1 2", .n_tokens = 1, .temperature = 1.0, .top_k = 1};
    EXPECT(zo_sample(&c, &o, stdout) != 0 && !says("not built"));
    if (k == 0) EXPECT(says("lora.r = 4 without lora.init_from: sample") && says("--adapter"));
    else EXPECT(says("adapter_model.safetensors"));
    o.adapter = ad; /* --adapter DIR: lora.init_from for the run, the adapter read */
    EXPECT(zo_sample(&c, &o, stdout) != 0 && says("adapter_model.safetensors") && !says("not built"));
    zo_config_free(&c);
  }
  return zo_test_expect_failed_since(before);
}

/* Adapters attached to a model: every module on the tensor the
 * architecture's map fuses it into (q, k, v on qkv at rows 0, NH hd,
 * (NH + NKV) hd; gate, up on gate_up at 0, I), A and B at the table's
 * offsets of the device buffer holding the uploaded values, the scale;
 * the adapters' arena peak is zo_lora_device_plan's bytes (fp32 and bf16
 * models); detach clears m->adapters. */
static int test_attach(void) {
  const int before = zo_test_n_expect_failed;
  enum { L = 2, NH = 4, NKV = 2, C = 32, I = 48, HD = 12, R = 3, B = 2, T = 8 };
  struct zo_model_config mc = {.arch = ZO_ARCH_LLAMA, .n_layer = L, .n_head = NH, .n_kv_head = NKV, .n_embd = C,
                               .intermediate_size = I, .head_dim = HD, .vocab_size = 64, .max_seq_len = 16,
                               .rope_theta = 1e4};
  EXPECT(zo_model_config_check(&mc) == 0);
  struct zo_lora l = {.r = R, .alpha = 6, .targets = zo_lora_family_targets(ZO_FAMILY_LLAMA), .scale = 2};
  struct zo_lora_table t;
  EXPECT(zo_lora_table_build(&mc, &l, &t) == 0);
  float *p = zo_test_xmalloc(t.numel * sizeof *p);
  for (size_t i = 0; i < t.numel; i++) p[i] = (float)i * 0.25f; /* exact in bf16 below 256 */
  for (int bf = 0; bf < 2; bf++) {
    const struct zo_model_layout lo = {.training = false, .dtype = bf ? ZO_BF16 : ZO_F32};
    struct zo_model *m = zo_model_init_layout(&mc, zo_backend_cpu(), B, T, &lo);
    EXPECT(m != NULL);
    if (!m) break;
    struct zo_lora_device *d = NULL;
    EXPECT(zo_lora_attach(m, &t, p, &d) == 0 && m->adapters == &d->ad);
    if (!d) {
      zo_model_free(m);
      break;
    }
    EXPECT(d->arena.peak == zo_lora_device_plan(&t, B * T, lo.dtype, false, NULL) && d->arena.peak == d->arena.capacity);
    int seen = 0;
    for (int k = 0; k < m->table.n_tensors; k++) {
      const char *name = m->table.tensors[k].name;
      for (int a = d->ad.first[k]; a < d->ad.first[k + 1]; a++, seen++) {
        const struct zo_linear_adapter *x = &d->ad.list[a];
        const int j = a - d->ad.first[k];
        const struct zo_lora_module *mod = NULL;
        for (int q = 0; q < t.n_modules; q++)
          if ((char *)x->a == (char *)d->wparams + t.modules[q].a_off * m->esize) mod = &t.modules[q];
        EXPECT(mod && x->b == (char *)d->wparams + mod->b_off * m->esize && x->out == mod->out &&
               x->row0 == mod->row0 && x->r == R && x->scale == 2.0f);
        if (strstr(name, "qkv")) EXPECT(x->row0 == (j == 0 ? 0 : j == 1 ? NH * HD : (NH + NKV) * HD));
        else if (strstr(name, "gate_up")) EXPECT(x->row0 == (j == 0 ? 0 : I));
        else EXPECT(x->row0 == 0 && d->ad.first[k + 1] - d->ad.first[k] == 1);
        if (mod && bf) {
          float back;
          zo_cpu_cast(&back, ZO_F32, x->b, ZO_BF16, 1);
          EXPECT(back == p[mod->b_off]);
        } else if (mod) {
          EXPECT(memcmp(x->a, p + mod->a_off, (size_t)R * (size_t)mod->in * sizeof *p) == 0);
        }
      }
    }
    EXPECT(seen == t.n_modules && d->ad.frozen_base);
    zo_lora_detach(m, d);
    EXPECT(m->adapters == NULL);
    zo_model_free(m);
  }
  free(p);
  zo_lora_table_free(&t);
  return zo_test_expect_failed_since(before);
}

static struct zo_model_config llama(int L, int NH, int NKV, int C, int I, int V) {
  struct zo_model_config mc = {.arch = ZO_ARCH_LLAMA, .n_layer = L, .n_head = NH, .n_kv_head = NKV, .n_embd = C,
                               .intermediate_size = I, .vocab_size = V, .max_seq_len = 64, .rope_theta = 5e5};
  if (zo_model_config_check(&mc)) fprintf(stderr, "    %s\n", zo_last_error());
  return mc;
}

/* Llama-3-8B, r = 16 on all seven projections: PEFT's
 * print_trainable_parameters gives 41,943,040. */
static int test_table_8b(void) {
  const int before = zo_test_n_expect_failed;
  struct zo_model_config mc = llama(32, 32, 8, 4096, 14336, 128256);
  struct zo_lora l = {.r = 16, .alpha = 32, .targets = zo_lora_family_targets(ZO_FAMILY_LLAMA), .scale = 2};
  struct zo_lora_table t;
  EXPECT(zo_lora_table_build(&mc, &l, &t) == 0);
  EXPECT(t.numel == 41943040 && t.n_modules == 32 * 7);
  const struct zo_lora_module *k = &t.modules[7 * 31 + 1], *up = &t.modules[7 * 31 + 5];
  EXPECT(!strcmp(k->peft, "base_model.model.model.layers.31.self_attn.k_proj") && k->in == 4096 &&
         k->out == 1024 && k->row0 == 4096 && k->layer == 31);
  EXPECT(!strcmp(up->base, "model.layers.31.mlp.up_proj.weight") && up->row0 == 14336 && up->out == 14336);
  EXPECT(t.modules[0].a_off == 0 && t.modules[0].b_off == 16 * 4096 && t.modules[1].a_off == 2 * 16 * 4096);
  zo_lora_table_free(&t);
  return zo_test_expect_failed_since(before);
}

static int test_table_gpt2(void) {
  const int before = zo_test_n_expect_failed;
  struct zo_model_config mc = {.arch = ZO_ARCH_GPT2, .n_layer = 2, .n_head = 2, .n_embd = 8, .vocab_size = 64,
                               .max_seq_len = 16};
  EXPECT(zo_model_config_check(&mc) == 0);
  struct zo_lora l = {.r = 2, .alpha = 4, .targets = 1u << ZO_LORA_C_PROJ, .scale = 2};
  struct zo_lora_table t;
  EXPECT(zo_lora_table_build(&mc, &l, &t) == 0 && t.n_modules == 4); /* c_proj: attn and mlp, as PEFT */
  EXPECT(!strcmp(t.modules[1].peft, "base_model.model.transformer.h.0.mlp.c_proj") && t.modules[1].in == 32 &&
         t.modules[1].out == 8);
  zo_lora_table_free(&t);
  l.targets = zo_lora_family_targets(ZO_FAMILY_GPT2);
  EXPECT(zo_lora_table_build(&mc, &l, &t) == 0 && t.n_modules == 8);
  EXPECT(!strcmp(t.modules[0].peft, "base_model.model.transformer.h.0.attn.c_attn") && t.modules[0].out == 24);
  EXPECT(t.numel == 2 * (size_t)2 * ((8 + 24) + (8 + 8) + (8 + 32) + (32 + 8)));
  zo_lora_table_free(&t);
  l.targets = 1u << ZO_LORA_Q_PROJ;
  EXPECT(zo_lora_table_build(&mc, &l, &t) == -EINVAL);
  return zo_test_expect_failed_since(before);
}

/* A Llama whose head_dim (12) is not n_embd / n_head (8), with GQA: every
 * projection's shape and fused rows as Hugging Face's (q (NH hd, C), k and
 * v (NKV hd, C) after q in the fused qkv, o (C, NH hd)), computed here from
 * the config, not from the model's tensor map. */
static int test_table_head_dim(void) {
  const int before = zo_test_n_expect_failed;
  enum { L = 2, NH = 4, NKV = 2, C = 32, I = 48, HD = 12, R = 4 };
  struct zo_model_config mc = {.arch = ZO_ARCH_LLAMA, .n_layer = L, .n_head = NH, .n_kv_head = NKV, .n_embd = C,
                               .intermediate_size = I, .head_dim = HD, .vocab_size = 64, .max_seq_len = 16,
                               .rope_theta = 1e4};
  EXPECT(zo_model_config_check(&mc) == 0);
  struct zo_lora l = {.r = R, .alpha = 8, .targets = zo_lora_family_targets(ZO_FAMILY_LLAMA), .scale = 2};
  struct zo_lora_table t;
  EXPECT(zo_lora_table_build(&mc, &l, &t) == 0 && t.n_modules == L * 7);
  const struct {
    const char *path;
    int in, out, row0;
  } want[7] = {{"self_attn.q_proj", C, NH * HD, 0},         {"self_attn.k_proj", C, NKV * HD, NH * HD},
               {"self_attn.v_proj", C, NKV * HD, (NH + NKV) * HD}, {"self_attn.o_proj", NH * HD, C, 0},
               {"mlp.gate_proj", C, I, 0},                  {"mlp.up_proj", C, I, I},
               {"mlp.down_proj", I, C, 0}};
  size_t numel = 0;
  for (int i = 0; i < t.n_modules && i < L * 7; i++) {
    const struct zo_lora_module *m = &t.modules[i];
    char base[ZO_LORA_NAME_MAX];
    snprintf(base, sizeof base, "model.layers.%d.%s.weight", i / 7, want[i % 7].path);
    EXPECT(!strcmp(m->base, base) && m->layer == i / 7);
    EXPECT(m->in == want[i % 7].in && m->out == want[i % 7].out && m->row0 == want[i % 7].row0);
    if (m->in != want[i % 7].in || m->out != want[i % 7].out || m->row0 != want[i % 7].row0)
      fprintf(stderr, "    %s: in %d out %d row0 %d, want %d %d %d\n", m->base, m->in, m->out, m->row0,
              want[i % 7].in, want[i % 7].out, want[i % 7].row0);
    EXPECT(m->a_off == numel && m->b_off == numel + (size_t)R * (size_t)m->in);
    numel += (size_t)R * (size_t)(want[i % 7].in + want[i % 7].out);
  }
  EXPECT(t.numel == numel);
  zo_lora_table_free(&t);
  return zo_test_expect_failed_since(before);
}

/* Phi-3's module names (issue 50, piece 2): qkv_proj, o_proj, gate_up_proj,
 * down_proj; "all-linear" is those four; no default (PEFT has none); the
 * Llama family's separate names are refused on Phi-3 (PEFT finds no such
 * module) and Phi-3's fused ones on a Llama, in the config and in an
 * adapter_config.json. */
static int test_phi3_targets(void) {
  const int before = zo_test_n_expect_failed;
  const unsigned fused = BIT(ZO_LORA_QKV_PROJ) | BIT(ZO_LORA_O_PROJ) | BIT(ZO_LORA_GATE_UP_PROJ) |
                         BIT(ZO_LORA_DOWN_PROJ);
  struct zo_config c;
  struct zo_lora l;
  EXPECT(zo_lora_family_targets(ZO_FAMILY_PHI3) == fused);
  EXPECT(load(&c, "{\"lora\": {\"r\": 8, \"target_modules\": \"all-linear\"}}") == 0);
  EXPECT(zo_lora_resolve(&c.lora, &PHI3, &l) == 1 && l.targets == fused);
  zo_config_free(&c);
  EXPECT(load(&c, "{\"lora\": {\"r\": 8}}") == 0); /* PEFT 0.22 has no default for phi3 */
  EXPECT(zo_lora_resolve(&c.lora, &PHI3, &l) == -EINVAL && says("lora.target_modules: no target_modules given") &&
         says("phi3") && says("\"o_proj\", \"down_proj\", \"qkv_proj\", \"gate_up_proj\", or \"all-linear\""));
  zo_config_free(&c);
  EXPECT(load(&c, "{\"lora\": {\"r\": 8, \"target_modules\": [\"qkv_proj\", \"gate_up_proj\"]}}") == 0);
  EXPECT(c.lora.target_modules == (BIT(ZO_LORA_QKV_PROJ) | BIT(ZO_LORA_GATE_UP_PROJ)));
  EXPECT(zo_lora_resolve(&c.lora, &PHI3, &l) == 1 && l.targets == c.lora.target_modules);
  EXPECT(zo_lora_resolve(&c.lora, &LLAMA, &l) == -EINVAL && says("\"qkv_proj\", \"gate_up_proj\"") &&
         says("llama model") && says("\"q_proj\""));
  zo_config_free(&c);
  static const char *const separate[] = {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"};
  for (size_t i = 0; i < ZO_ARRAY_LEN(separate); i++) {
    char text[256], quoted[32];
    snprintf(text, sizeof text, "{\"lora\": {\"r\": 8, \"target_modules\": [\"o_proj\", \"%s\"]}}", separate[i]);
    snprintf(quoted, sizeof quoted, "\"%s\"", separate[i]);
    EXPECT(load(&c, text) == 0);
    EXPECT(zo_lora_resolve(&c.lora, &PHI3, &l) == -EINVAL && says(quoted) && says("phi3 model") &&
           says("its modules are \"o_proj\", \"down_proj\", \"qkv_proj\", \"gate_up_proj\"") &&
           says("lora.target_modules"));
    zo_config_free(&c);
  }
  const char *dir = adapter("phi3-on-llama", "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, "
                                             "\"target_modules\": [\"qkv_proj\", \"down_proj\"]}", true);
  char text[700];
  snprintf(text, sizeof text, "{\"lora\": {\"init_from\": \"%s\"}}", dir);
  EXPECT(load(&c, text) == 0);
  EXPECT(zo_lora_resolve(&c.lora, &PHI3, &l) == 1 && l.targets == (BIT(ZO_LORA_QKV_PROJ) | BIT(ZO_LORA_DOWN_PROJ)));
  EXPECT(zo_lora_resolve(&c.lora, &LLAMA, &l) == -EINVAL && says("adapter_config.json") && says("qkv_proj"));
  zo_config_free(&c);
  return zo_test_expect_failed_since(before);
}

/* PEFT 0.22's all-linear saves full module paths: on a 2-block Phi-3 the
 * fused modules' paths in both blocks are qkv_proj and down_proj; a block
 * left out, and a path Phi-3's blocks lack (Llama's q_proj), are refused
 * by name. (The Llama and GPT-2 forms: hf-peft-paths, against PEFT.) */
static int test_phi3_paths(void) {
  const int before = zo_test_n_expect_failed;
  const struct zo_model_config phi3 = {.arch = ZO_ARCH_LLAMA, .family = ZO_FAMILY_PHI3, .n_layer = 2};
  static const struct {
    const char *name, *targets;
    int want;
    const char *says;
  } cases[] = {
      {"phi3-paths", "\"model.layers.0.self_attn.qkv_proj\", \"model.layers.1.self_attn.qkv_proj\", "
                     "\"layers.0.mlp.down_proj\", \"layers.1.mlp.down_proj\"", 1, NULL},
      {"phi3-suffix", "\"self_attn.qkv_proj\", \"mlp.down_proj\"", 1, NULL},
      {"phi3-partial", "\"model.layers.0.self_attn.qkv_proj\", \"mlp.down_proj\"", -ENOTSUP,
       "model.layers.1.self_attn.qkv_proj"},
      {"phi3-q", "\"self_attn.qkv_proj\", \"mlp.down_proj\", \"model.layers.0.self_attn.q_proj\"", -EINVAL,
       "\"model.layers.0.self_attn.q_proj\""},
  };
  for (size_t i = 0; i < ZO_ARRAY_LEN(cases); i++) {
    char text[700];
    snprintf(text, sizeof text, "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [%s]}",
             cases[i].targets);
    const char *dir = adapter(cases[i].name, text, true);
    struct zo_config c;
    struct zo_lora l;
    snprintf(text, sizeof text, "{\"lora\": {\"init_from\": \"%s\"}}", dir);
    EXPECT(load(&c, text) == 0);
    const int got = zo_lora_resolve(&c.lora, &phi3, &l);
    EXPECT(got == cases[i].want);
    if (got == 1) EXPECT(l.targets == (BIT(ZO_LORA_QKV_PROJ) | BIT(ZO_LORA_DOWN_PROJ)));
    if (cases[i].says) EXPECT(says(cases[i].says) && says("adapter_config.json"));
    zo_config_free(&c);
  }
  return zo_test_expect_failed_since(before);
}

/* Phi-3 with GQA and head_dim (12) apart from n_embd / n_head (8): one
 * adapter over each fused projection's whole output, as PEFT wraps the
 * Linear qkv_proj ((NH + 2 NKV) hd, C) and gate_up_proj (2 I, C), at row 0
 * of our fused tensors; shapes from the config, not from the tensor map.
 * Phi-3-mini-4k (32 layers, 3072 wide, 8192 MLP), r = 16, all-linear:
 * 16 (3072 + 9216 + 3072 + 3072 + 3072 + 16384 + 8192 + 3072) per layer. */
static int test_table_phi3(void) {
  const int before = zo_test_n_expect_failed;
  enum { L = 2, NH = 4, NKV = 2, C = 32, I = 40, HD = 12, R = 3 };
  struct zo_model_config mc = {.arch = ZO_ARCH_LLAMA, .family = ZO_FAMILY_PHI3, .n_layer = L, .n_head = NH,
                               .n_kv_head = NKV, .n_embd = C, .intermediate_size = I, .head_dim = HD,
                               .vocab_size = 64, .max_seq_len = 16, .rope_theta = 1e4, .sliding_window = 8};
  EXPECT(zo_model_config_check(&mc) == 0);
  struct zo_lora l = {.r = R, .alpha = 6, .targets = zo_lora_family_targets(ZO_FAMILY_PHI3), .scale = 2};
  struct zo_lora_table t;
  EXPECT(zo_lora_table_build(&mc, &l, &t) == 0 && t.n_modules == L * 4);
  const struct {
    const char *path;
    int in, out;
  } want[4] = {{"self_attn.qkv_proj", C, (NH + 2 * NKV) * HD}, {"self_attn.o_proj", NH * HD, C},
               {"mlp.gate_up_proj", C, 2 * I}, {"mlp.down_proj", I, C}};
  size_t numel = 0;
  for (int i = 0; i < t.n_modules && i < L * 4; i++) {
    const struct zo_lora_module *m = &t.modules[i];
    char base[ZO_LORA_NAME_MAX], peft[ZO_LORA_NAME_MAX];
    snprintf(base, sizeof base, "model.layers.%d.%s.weight", i / 4, want[i % 4].path);
    snprintf(peft, sizeof peft, "base_model.model.model.layers.%d.%s", i / 4, want[i % 4].path);
    EXPECT(!strcmp(m->base, base) && !strcmp(m->peft, peft) && m->layer == i / 4);
    EXPECT(m->in == want[i % 4].in && m->out == want[i % 4].out && m->row0 == 0);
    EXPECT(m->a_off == numel && m->b_off == numel + (size_t)R * (size_t)m->in);
    numel += (size_t)R * (size_t)(want[i % 4].in + want[i % 4].out);
  }
  EXPECT(t.numel == numel);
  zo_lora_table_free(&t);
  l.targets = BIT(ZO_LORA_Q_PROJ);
  EXPECT(zo_lora_table_build(&mc, &l, &t) == -EINVAL && says("phi3"));

  struct zo_model_config mini = {.arch = ZO_ARCH_LLAMA, .family = ZO_FAMILY_PHI3, .n_layer = 32, .n_head = 32,
                                 .n_kv_head = 32, .n_embd = 3072, .intermediate_size = 8192, .vocab_size = 32064,
                                 .max_seq_len = 4096, .rope_theta = 1e4, .sliding_window = 2047};
  EXPECT(zo_model_config_check(&mini) == 0);
  l = (struct zo_lora){.r = 16, .alpha = 32, .targets = zo_lora_family_targets(ZO_FAMILY_PHI3), .scale = 2};
  EXPECT(zo_lora_table_build(&mini, &l, &t) == 0 && t.n_modules == 32 * 4);
  EXPECT(t.numel == (size_t)32 * 16 * (3072 + 9216 + 3072 + 3072 + 3072 + 16384 + 8192 + 3072));
  zo_lora_table_free(&t);
  return zo_test_expect_failed_since(before);
}

/* A: uniform in [-1/sqrt(in), 1/sqrt(in)] (mean 0, variance bound^2 / 3), by seed; B: zero. */
static int test_init(void) {
  const int before = zo_test_n_expect_failed;
  struct zo_model_config mc = llama(2, 4, 2, 64, 96, 128);
  struct zo_lora l = {.r = 8, .alpha = 16, .targets = zo_lora_family_targets(ZO_FAMILY_LLAMA), .scale = 2};
  struct zo_lora_table t;
  EXPECT(zo_lora_table_build(&mc, &l, &t) == 0);
  float *p = zo_test_xmalloc(t.numel * sizeof *p), *q = zo_test_xmalloc(t.numel * sizeof *q);
  zo_lora_init(&t, 1337, p);
  zo_lora_init(&t, 1337, q);
  EXPECT(memcmp(p, q, t.numel * sizeof *p) == 0);
  zo_lora_init(&t, 1338, q);
  EXPECT(memcmp(p, q, t.modules[0].b_off * sizeof *p) != 0);
  for (int i = 0; i < t.n_modules; i++) {
    const struct zo_lora_module *m = &t.modules[i];
    const double bound = 1 / sqrt((double)m->in);
    const size_t n = (size_t)l.r * (size_t)m->in;
    double sum = 0, sq = 0, most = 0;
    for (size_t j = 0; j < n; j++) {
      const double a = p[m->a_off + j];
      sum += a, sq += a * a, most = fmax(most, fabs(a));
    }
    EXPECT(most <= bound && most > 0.9 * bound);
    EXPECT(fabs(sum / n) < 4 * bound / sqrt(3.0 * n));                  /* 4 sigma */
    EXPECT(fabs(sq / n / (bound * bound / 3) - 1) < 4 * sqrt(0.8 / n)); /* var(u^2) = 4/45 b^4 */
    bool zero = true;
    for (size_t j = 0; j < (size_t)m->out * (size_t)l.r; j++) zero = zero && p[m->b_off + j] == 0;
    EXPECT(zero);
    if (i > 0) EXPECT(p[m->a_off] != p[t.modules[i - 1].a_off]);
  }
  free(p), free(q);
  zo_lora_table_free(&t);
  return zo_test_expect_failed_since(before);
}

/* zo_lora_save writes a PEFT directory that lora.init_from resolves and
 * zo_lora_load reads back bit for bit; a mismatched file is refused by name. */
static int test_save_load(void) {
  const int before = zo_test_n_expect_failed;
  struct zo_model_config mc = llama(2, 4, 2, 32, 48, 128);
  struct zo_lora l = {.r = 4, .alpha = 8, .dropout = 0.05, .use_rslora = true,
                      .targets = (1u << ZO_LORA_K_PROJ) | (1u << ZO_LORA_DOWN_PROJ), .scale = 4};
  struct zo_lora_table t;
  EXPECT(zo_lora_table_build(&mc, &l, &t) == 0);
  float *p = zo_test_xmalloc(t.numel * sizeof *p), *q = zo_test_xmalloc(t.numel * sizeof *q);
  zo_rng_seed(5);
  for (size_t i = 0; i < t.numel; i++) p[i] = zo_rng_float(-1, 1);
  char dir[512];
  snprintf(dir, sizeof dir, "%s/saved", tmpdir);
  mkdir(dir, 0700);
  EXPECT(zo_lora_save(&t, p, "tiny-llama", dir) == 0);
  struct zo_config_lora c = {.init_from = dir, .alpha = 8};
  struct zo_lora back;
  EXPECT(zo_lora_resolve(&c, &LLAMA, &back) == 1);
  EXPECT(back.r == 4 && back.alpha == 8 && back.dropout == 0.05 && back.use_rslora && back.targets == l.targets &&
         back.scale == 4);
  EXPECT(zo_lora_load(&t, dir, q) == 0 && memcmp(p, q, t.numel * sizeof *p) == 0);
  /* another rank, other targets: refused by tensor name */
  struct zo_lora_table u;
  struct zo_lora l2 = l;
  l2.r = 2;
  EXPECT(zo_lora_table_build(&mc, &l2, &u) == 0);
  EXPECT(zo_lora_load(&u, dir, q) == -EINVAL && says("k_proj.lora_A.weight") && says("[4, 32]"));
  zo_lora_table_free(&u);
  l2 = l, l2.targets |= 1u << ZO_LORA_Q_PROJ;
  EXPECT(zo_lora_table_build(&mc, &l2, &u) == 0);
  EXPECT(zo_lora_load(&u, dir, q) == -EINVAL && says("q_proj.lora_A.weight"));
  zo_lora_table_free(&u);
  l2 = l, l2.targets = 1u << ZO_LORA_K_PROJ;
  EXPECT(zo_lora_table_build(&mc, &l2, &u) == 0);
  EXPECT(zo_lora_load(&u, dir, q) == -ENOTSUP && says("down_proj"));
  zo_lora_table_free(&u);
  /* a non-finite weight: refused naming the tensor and the element (issue 52, class 5) */
  p[t.modules[1].b_off + 5] = NAN;
  EXPECT(zo_lora_save(&t, p, "tiny-llama", dir) == 0);
  EXPECT(zo_lora_load(&t, dir, q) == -EINVAL && says(".lora_B.weight[") && says("] = nan: an adapter's weights must "
                                                                                  "be finite"));
  free(p), free(q);
  zo_lora_table_free(&t);
  return zo_test_expect_failed_since(before);
}

/* tests/hf/test_peft_adapter.py's converter: reads the PEFT adapter SRC
 * (lora.init_from) for a model of ARCH L NH NKV C I HEAD_DIM (0: C / NH)
 * and writes it back with zo_lora_save to DST. */
static int roundtrip(char **argv) {
  const bool gpt2 = !strcmp(argv[2], "gpt2");
  struct zo_model_config mc = {.arch = gpt2 ? ZO_ARCH_GPT2 : ZO_ARCH_LLAMA, .n_layer = atoi(argv[3]),
                               .n_head = atoi(argv[4]), .n_kv_head = atoi(argv[5]), .n_embd = atoi(argv[6]),
                               .intermediate_size = atoi(argv[7]), .head_dim = atoi(argv[8]), .vocab_size = 64,
                               .max_seq_len = 16};
  struct zo_config_lora c = {.init_from = argv[9], .alpha = 8};
  struct zo_lora l;
  struct zo_lora_table t;
  int err = zo_model_config_check(&mc);
  if (!err) err = zo_lora_resolve(&c, &mc, &l) == 1 ? 0 : -EINVAL;
  if (!err) err = zo_lora_table_build(&mc, &l, &t);
  float *p = err ? NULL : zo_test_xmalloc(t.numel * sizeof *p);
  if (!err) err = zo_lora_load(&t, argv[9], p);
  if (!err) err = zo_lora_save(&t, p, "tiny", argv[10]);
  if (err) fprintf(stderr, "roundtrip: %s\n", zo_last_error());
  else printf("r %d scale %.17g modules %d numel %zu\n", l.r, l.scale, t.n_modules, t.numel);
  free(p);
  if (p) zo_lora_table_free(&t);
  return err ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc == 11 && !strcmp(argv[1], "--roundtrip")) return roundtrip(argv);
  if (zo_test_mkdtemp(tmpdir, sizeof tmpdir, "lora")) return 1;
  static const struct zo_test tests[] = {
      ZO_TEST(keys), ZO_TEST(bad_keys), ZO_TEST(dump), ZO_TEST(init_from), ZO_TEST(init_from_refused),
      ZO_TEST(train_refuses), ZO_TEST(eval_lora), ZO_TEST(attach), ZO_TEST(table_8b), ZO_TEST(table_gpt2),
      ZO_TEST(table_head_dim), ZO_TEST(phi3_targets), ZO_TEST(phi3_paths), ZO_TEST(table_phi3), ZO_TEST(init), ZO_TEST(save_load),
  };
  struct zo_test_counts counts = zo_test_run(tests, ZO_ARRAY_LEN(tests));
  zo_test_rmtree(tmpdir);
  return zo_test_report(counts);
}
