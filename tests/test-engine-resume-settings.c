/* The resume's settings comparison (zo/run_settings.h; issue 52, class 4)
 * on configs alone, key by key: a config that differs from the base in one
 * setting is refused naming the key and both values, and goes on with
 * --resume-allow KEY (said in one line); a shape or the optimizer states'
 * format is refused even with the flag; the learning-rate schedule is said,
 * never refused. The lora section is compared here because zo_train refuses
 * LoRA before a resume gets to it. Keys another key governs ("unused": fp16's
 * scaling without fp16, AdamW8bit's block keys without it) are not compared; the
 * same config compares equal, and so do N ranks x B rows and 1 x N*B.
 * Every key of the table is covered by a case here or named where it is
 * (tests/cli/test-resume-settings.sh: model.init_from and the record's
 * round trip through trainer_state.json). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zo/config.h"
#include "zo/model.h"
#include "zo/run_settings.h"
#include "zo_test.h"

/* A tiny Llama; sets[] (NULL-terminated) on top. */
static struct zo_run_settings *settings_of(const char *const *sets, int n_ranks) {
  const char *all[24] = {"model.arch=llama",       "model.n_layer=1",    "model.n_head=2",
                         "model.num_key_value_heads=1", "model.n_embd=32", "model.intermediate_size=64",
                         "model.vocab_size=320",   "model.max_seq_len=32", "train_micro_batch_size_per_gpu=2"};
  int n = 9;
  for (int i = 0; sets && sets[i] && n < 24; i++) all[n++] = sets[i];
  struct zo_config cfg;
  if (zo_config_load(&cfg, NULL, all, n)) {
    fprintf(stderr, "config: %s\n", zo_last_error());
    return NULL;
  }
  struct zo_model_config mc = cfg.model.spec;
  struct zo_run_settings *s = NULL;
  if (zo_model_config_check(&mc) == 0) {
    mc.embd_pdrop = mc.attn_pdrop = mc.resid_pdrop = (float)cfg.model.dropout;
    if (zo_run_settings_of_run(&cfg, &mc, n_ranks, &s)) s = NULL;
  }
  zo_config_free(&cfg);
  return s;
}

enum verdict { REFUSE, FIXED, SAY, SAME };

struct rcase {
  const char *a[5], *b[5]; /* the checkpoint's sets, this run's */
  const char *key;         /* the key named */
  const char *was, *now;
  enum verdict v;
};

#define LORA8 "lora.r=8"
static const struct rcase cases[] = {
    {{NULL}, {"model.rope_theta=500000"}, "model.rope_theta", "10000", "500000", REFUSE},
    {{NULL}, {"model.rms_norm_eps=1e-6"}, "model.rms_norm_eps", "1e-05", "1e-06", REFUSE},
    {{NULL}, {"model.sliding_window=16"}, "model.sliding_window", "0", "16", REFUSE},
    {{NULL}, {"model.pad_token_id=3"}, "model.pad_token_id", "none", "3", REFUSE},
    {{"model.pad_token_id=3"}, {"model.pad_token_id=5"}, "model.pad_token_id", "3", "5", REFUSE},
    {{NULL},
     {"model.rope_scaling.factor=8", "model.rope_scaling.low_freq_factor=1", "model.rope_scaling.high_freq_factor=4",
      "model.rope_scaling.original_max_position_embeddings=16"},
     "model.rope_scaling", "none",
     "llama3 factor 8, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 16", REFUSE},
    {{NULL}, {"model.dropout=0.1"}, "model.dropout", "0", "0.1", REFUSE},
    {{NULL}, {"bf16.enabled=true"}, "precision", "fp32", "bf16", REFUSE},
    {{"fp16.enabled=true"}, {"fp16.enabled=true", "fp16.loss_scale=128"}, "fp16.loss_scale", "0 (dynamic)", "128",
     REFUSE},
    {{"fp16.enabled=true"}, {"fp16.enabled=true", "fp16.loss_scale_window=500"}, "fp16.loss_scale_window", "1000",
     "500", REFUSE},
    {{"fp16.enabled=true"}, {"fp16.enabled=true", "fp16.hysteresis=4"}, "fp16.hysteresis", "2", "4", REFUSE},
    {{"fp16.enabled=true"}, {"fp16.enabled=true", "fp16.min_loss_scale=2"}, "fp16.min_loss_scale", "1", "2", REFUSE},
    {{NULL}, {"train_micro_batch_size_per_gpu=4"}, "micro_batch_rows", "2", "4", REFUSE},
    {{NULL}, {"gradient_accumulation_steps=2"}, "gradient_accumulation_steps", "1", "2", REFUSE},
    {{NULL}, {"data.seq_len=16"}, "data.seq_len", "32", "16", REFUSE},
    {{NULL}, {"data.shuffle=false"}, "data.shuffle", "true", "false", REFUSE},
    {{NULL}, {"data.format=u16"}, "data.format", "llmc", "u16", REFUSE},
    {{NULL}, {"optimizer.params.betas=[0.9,0.95]"}, "optimizer.params.betas", "[0.9, 0.999]", "[0.9, 0.95]", REFUSE},
    {{NULL}, {"optimizer.params.eps=1e-6"}, "optimizer.params.eps", "1e-08", "1e-06", REFUSE},
    {{NULL}, {"optimizer.params.weight_decay=0.1"}, "optimizer.params.weight_decay", "0.01", "0.1", REFUSE},
    {{NULL}, {"gradient_clipping=1"}, "gradient_clipping", "0", "1", REFUSE},
    {{NULL}, {LORA8}, "lora.r", "0", "8", REFUSE},
    {{LORA8}, {LORA8, "lora.alpha=16"}, "lora.alpha", "8", "16", REFUSE},
    {{LORA8}, {LORA8, "lora.dropout=0.05"}, "lora.dropout", "0", "0.05", REFUSE},
    {{LORA8}, {LORA8, "lora.target_modules=all-linear"}, "lora.target_modules", "q_proj, v_proj",
     "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj", REFUSE},
    {{LORA8}, {LORA8, "lora.use_rslora=true"}, "lora.use_rslora", "false", "true", REFUSE},
    {{NULL}, {"model.n_layer=2"}, "model.n_layer", "1", "2", FIXED},
    {{NULL}, {"model.n_head=4"}, "model.n_head", "2", "4", FIXED},
    {{NULL}, {"model.num_key_value_heads=2"}, "model.num_key_value_heads", "1", "2", FIXED},
    {{NULL}, {"model.n_embd=64"}, "model.n_embd", "32", "64", FIXED},
    {{NULL}, {"model.intermediate_size=128"}, "model.intermediate_size", "64", "128", FIXED},
    {{NULL}, {"model.vocab_size=384"}, "model.vocab_size", "320", "384", FIXED},
    {{NULL}, {"model.max_seq_len=64"}, "model.max_seq_len", "32", "64", FIXED},
    {{NULL}, {"model.head_dim=8"}, "model.head_dim", "16", "8", FIXED},
    {{NULL}, {"model.tie_word_embeddings=true"}, "model.tie_word_embeddings", "false", "true", FIXED},
    {{NULL}, {"model.qkv_bias=true"}, "model.qkv_bias", "false", "true", FIXED},
    {{NULL}, {"model.qk_norm=true"}, "model.qk_norm", "false", "true", FIXED},
    {{NULL}, {"model.arch=gpt2", "model.intermediate_size=0", "model.num_key_value_heads=0"}, "model.arch", "llama",
     "gpt2", FIXED},
    {{NULL}, {"optimizer.type=AdamW8bit"}, "optimizer.type", "AdamW", "AdamW8bit", FIXED},
    {{"optimizer.type=AdamW8bit"}, {"optimizer.type=AdamW8bit", "optimizer.params.block_size=128"},
     "optimizer.params.block_size", "256", "128", FIXED},
    {{"optimizer.type=AdamW8bit"}, {"optimizer.type=AdamW8bit", "optimizer.params.min_8bit_size=0"},
     "optimizer.params.min_8bit_size", "4096", "0", FIXED},
    {{NULL}, {"optimizer.params.lr=0.0005"}, "lr_schedule", "constant lr 0.001", "constant lr 0.0005", SAY},
    /* Governed by another key that is the same: not compared. */
    {{NULL}, {"fp16.loss_scale_window=500", "fp16.hysteresis=4"}, "fp16.loss_scale_window", NULL, NULL, SAME},
    {{NULL}, {"optimizer.params.block_size=128"}, "optimizer.params.block_size", NULL, NULL, SAME},
    /* What a resume may change without a word. */
    {{NULL}, {"steps=5000", "checkpoint.every=7", "log.every=3", "engine.threads=1"}, "steps", NULL, NULL, SAME},
};

/* Keys covered elsewhere: model.init_from and lora.init_from (their files'
 * fingerprints: the CLI test, and lora.init_from is LoRA's adapter
 * directory), model.hidden_act (follows model.arch), model.family (no config
 * key sets it alone: test_family_said). */
static const char *const elsewhere[] = {"model.init_from", "lora.init_from", "model.hidden_act", "model.family"};

/* compare(a, b) with allow (NULL: none): its result, the notes in *notes (malloc'd). */
static int compare(const struct zo_run_settings *a, const struct zo_run_settings *b, const char *allow, char **notes) {
  size_t n = 0;
  FILE *f = open_memstream(notes, &n);
  if (!f) return -ENOMEM;
  const char *const allowed[1] = {allow};
  const int err = zo_run_settings_compare(a, b, "ck", allowed, allow ? 1 : 0, f);
  fclose(f);
  return err;
}

static int check_case(const struct rcase *c) {
  struct zo_run_settings *a = settings_of(c->a, 1), *b = settings_of(c->b, 1);
  ZO_REQUIRE(a && b);
  char want[400], *notes = NULL;
  snprintf(want, sizeof want, "%s: the checkpoint's %s, this run's %s", c->key, c->was, c->now);
  int err = compare(a, b, NULL, &notes);
  if (c->v == SAME) {
    ZO_REQUIRE(err == 0 && notes[0] == '\0');
  } else if (c->v == SAY) {
    ZO_REQUIRE(err == 0 && strstr(notes, want));
  } else {
    ZO_REQUIRE(err == -EINVAL && strstr(zo_last_error(), want) && strstr(zo_last_error(), "ck was trained with"));
    ZO_REQUIRE(strstr(zo_last_error(), c->v == FIXED ? "can never change on resume" : "--resume-allow KEY"));
  }
  free(notes);
  notes = NULL;
  if (c->v == REFUSE || c->v == FIXED) {
    err = compare(a, b, c->key, &notes);
    if (c->v == REFUSE) ZO_REQUIRE(err == 0 && strstr(notes, want) && strstr(notes, "(--resume-allow given)"));
    else ZO_REQUIRE(err == -EINVAL && strstr(zo_last_error(), "it can never change on resume"));
    free(notes);
  }
  zo_run_settings_free(a);
  zo_run_settings_free(b);
  return 0;
}

static int test_each_key(void) {
  int failed = 0;
  for (size_t i = 0; i < ZO_ARRAY_LEN(cases); i++) {
    if (check_case(&cases[i])) {
      fprintf(stderr, "  case %zu (%s) failed\n", i, cases[i].key);
      failed++;
    }
  }
  return failed != 0;
}

static int test_every_key_covered(void) {
  for (int i = 0; i < zo_run_settings_n(); i++) {
    const char *k = zo_run_settings_key(i);
    bool seen = false;
    for (size_t c = 0; c < ZO_ARRAY_LEN(cases) && !seen; c++) seen = cases[c].v != SAME && !strcmp(cases[c].key, k);
    for (size_t e = 0; e < ZO_ARRAY_LEN(elsewhere) && !seen; e++) seen = !strcmp(elsewhere[e], k);
    if (!seen) fprintf(stderr, "  key %s has no case\n", k);
    ZO_REQUIRE(seen);
  }
  return 0;
}

/* The same config, and the same global micro-batch over other ranks. */
static int test_unchanged_compares_equal(void) {
  const char *const one[] = {"train_micro_batch_size_per_gpu=4", NULL}, *const two[] = {NULL};
  struct zo_run_settings *a = settings_of(one, 1), *b = settings_of(two, 2), *c = settings_of(one, 1);
  ZO_REQUIRE(a && b && c);
  char *notes = NULL;
  ZO_REQUIRE(compare(a, c, NULL, &notes) == 0 && notes[0] == '\0');
  free(notes);
  ZO_REQUIRE(compare(a, b, NULL, &notes) == 0 && notes[0] == '\0');
  free(notes);
  /* An allowed key that did not change is said. */
  ZO_REQUIRE(compare(a, c, "model.rope_theta", &notes) == 0 &&
             strstr(notes, "--resume-allow model.rope_theta: unchanged"));
  free(notes);
  zo_run_settings_free(a);
  zo_run_settings_free(b);
  zo_run_settings_free(c);
  return 0;
}

/* The family (config.json's model_type) recorded and compared: a Mistral
 * without a window resumed as a Llama, the same mathematics, is said, not
 * refused; the same family says nothing. */
static struct zo_run_settings *settings_of_family(enum zo_model_family family) {
  const char *const all[] = {"model.arch=llama", "model.n_layer=1", "model.n_head=2", "model.n_embd=32",
                             "model.intermediate_size=64", "model.vocab_size=320", "model.max_seq_len=32"};
  struct zo_config cfg;
  if (zo_config_load(&cfg, NULL, all, (int)ZO_ARRAY_LEN(all))) return NULL;
  struct zo_model_config mc = cfg.model.spec;
  mc.family = family;
  struct zo_run_settings *s = NULL;
  if (zo_model_config_check(&mc) || zo_run_settings_of_run(&cfg, &mc, 1, &s)) s = NULL;
  zo_config_free(&cfg);
  return s;
}

static int test_family_said(void) {
  struct zo_run_settings *a = settings_of_family(ZO_FAMILY_MISTRAL), *b = settings_of_family(ZO_FAMILY_UNSET),
                         *c = settings_of_family(ZO_FAMILY_MISTRAL);
  ZO_REQUIRE(a && b && c);
  char *notes = NULL;
  ZO_REQUIRE(compare(a, b, NULL, &notes) == 0 &&
             strstr(notes, "resumed with a change: model.family: the checkpoint's mistral, this run's llama"));
  free(notes);
  ZO_REQUIRE(compare(a, c, NULL, &notes) == 0 && notes[0] == '\0');
  free(notes);
  /* A checkpoint whose record has no model.family (saved before checkpoints
   * named the family) resumes: the key is not compared, and said so. */
  char dir[512], path[600];
  ZO_REQUIRE(zo_test_mkdtemp(dir, sizeof dir, "family") == 0);
  snprintf(path, sizeof path, "%s/trainer_state.json", dir);
  FILE *f = fopen(path, "w");
  ZO_REQUIRE(f);
  fprintf(f, "{\"settings\": {");
  for (int i = 0, n = 0; i < zo_run_settings_n(); i++)
    if (strcmp(zo_run_settings_key(i), "model.family") != 0 && zo_run_settings_value(a, i))
      fprintf(f, "%s\"%s\": \"%s\"", n++ ? ", " : "", zo_run_settings_key(i), zo_run_settings_value(a, i));
  fprintf(f, "}}\n");
  ZO_REQUIRE(fclose(f) == 0);
  struct zo_run_settings *old = NULL;
  ZO_REQUIRE(zo_run_settings_of_checkpoint(dir, 2, &old) == 0);
  ZO_REQUIRE(compare(old, b, NULL, &notes) == 0 && strstr(notes, "records no model.family") &&
             !strstr(notes, "resumed with a change"));
  free(notes);
  zo_run_settings_free(old);
  ZO_REQUIRE(unlink(path) == 0 && rmdir(dir) == 0);
  zo_run_settings_free(a);
  zo_run_settings_free(b);
  zo_run_settings_free(c);
  return 0;
}

/* --resume-allow with a key that is not in the table, or that is only said. */
static int test_allow_misuse(void) {
  struct zo_run_settings *a = settings_of(NULL, 1);
  ZO_REQUIRE(a);
  char *notes = NULL;
  ZO_REQUIRE(compare(a, a, "model.rope_thta", &notes) == -EINVAL);
  ZO_REQUIRE(strstr(zo_last_error(), "not a setting a resume compares") && strstr(zo_last_error(), "model.rope_theta"));
  free(notes);
  ZO_REQUIRE(compare(a, a, "lr_schedule", &notes) == -EINVAL && strstr(zo_last_error(), "never refused"));
  free(notes);
  zo_run_settings_free(a);
  return 0;
}

int main(void) {
  static const struct zo_test tests[] = {
      ZO_TEST(each_key),
      ZO_TEST(every_key_covered),
      ZO_TEST(unchanged_compares_equal),
      ZO_TEST(allow_misuse),
      ZO_TEST(family_said),
  };
  return zo_test_report(zo_test_run(tests, ZO_ARRAY_LEN(tests)));
}
