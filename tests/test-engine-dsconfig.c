/* DeepSpeed configs as their users write them: Hugging Face's ZeRO-2 and
 * ZeRO-3 examples load unchanged ("auto" values, keys without effect here,
 * listed in one warning); every unknown key in one error, with a suggestion
 * only when it is close; train_batch_size; the aliases (bf16: true,
 * gradient_checkpointing); a schedule that follows steps and data.epochs,
 * and the warning when an explicit total_num_steps does not. */
#include "zo/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zo_test.h"

static char tmpdir[256];

#define EXPECT(cond) ZO_EXPECT(cond)

/* Loads text as tmpdir/name.json with sets; *printed: what the load wrote on
 * stderr (malloc'd). */
static int load(struct zo_config *cfg, const char *name, const char *text, const char *const *sets, int n_sets,
                char **printed) {
  char path[512], errpath[512];
  snprintf(path, sizeof path, "%s/%s.json", tmpdir, name);
  snprintf(errpath, sizeof errpath, "%s/stderr.txt", tmpdir);
  FILE *f = fopen(path, "w");
  FILE *e = fopen(errpath, "w+");
  const int saved = dup(STDERR_FILENO);
  if (!f || !e || saved < 0) {
    perror(path);
    exit(1);
  }
  fputs(text, f);
  fclose(f);
  fflush(stderr);
  dup2(fileno(e), STDERR_FILENO);
  const int err = zo_config_load(cfg, path, sets, n_sets);
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  const long n = fseek(e, 0, SEEK_END) == 0 ? ftell(e) : -1;
  *printed = n >= 0 ? calloc((size_t)n + 1, 1) : NULL;
  if (!*printed || fseek(e, 0, SEEK_SET) != 0 || fread(*printed, 1, (size_t)n, e) != (size_t)n) {
    perror(errpath);
    exit(1);
  }
  fclose(e);
  return err;
}

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

/* The examples of the DeepSpeed integration page of the transformers
 * documentation (main_classes/deepspeed: "ZeRO-2 Example" ds_config_zero2.json
 * and "ZeRO-3 Example" ds_config_zero3.json), as published, with the "auto"
 * values the HF Trainer fills in. */
static const char ds_config_zero2[] =
    "{\n"
    "    \"fp16\": {\n"
    "        \"enabled\": \"auto\",\n"
    "        \"loss_scale\": 0,\n"
    "        \"loss_scale_window\": 1000,\n"
    "        \"initial_scale_power\": 16,\n"
    "        \"hysteresis\": 2,\n"
    "        \"min_loss_scale\": 1\n"
    "    },\n"
    "\n"
    "    \"optimizer\": {\n"
    "        \"type\": \"AdamW\",\n"
    "        \"params\": {\n"
    "            \"lr\": \"auto\",\n"
    "            \"betas\": \"auto\",\n"
    "            \"eps\": \"auto\",\n"
    "            \"weight_decay\": \"auto\"\n"
    "        }\n"
    "    },\n"
    "\n"
    "    \"scheduler\": {\n"
    "        \"type\": \"WarmupLR\",\n"
    "        \"params\": {\n"
    "            \"warmup_min_lr\": \"auto\",\n"
    "            \"warmup_max_lr\": \"auto\",\n"
    "            \"warmup_num_steps\": \"auto\"\n"
    "        }\n"
    "    },\n"
    "\n"
    "    \"zero_optimization\": {\n"
    "        \"stage\": 2,\n"
    "        \"offload_optimizer\": {\n"
    "            \"device\": \"cpu\",\n"
    "            \"pin_memory\": true\n"
    "        },\n"
    "        \"allgather_partitions\": true,\n"
    "        \"allgather_bucket_size\": 2e8,\n"
    "        \"overlap_comm\": true,\n"
    "        \"reduce_scatter\": true,\n"
    "        \"reduce_bucket_size\": 2e8,\n"
    "        \"contiguous_gradients\": true\n"
    "    },\n"
    "\n"
    "    \"gradient_accumulation_steps\": \"auto\",\n"
    "    \"gradient_clipping\": \"auto\",\n"
    "    \"steps_per_print\": 2000,\n"
    "    \"train_batch_size\": \"auto\",\n"
    "    \"train_micro_batch_size_per_gpu\": \"auto\",\n"
    "    \"wall_clock_breakdown\": false\n"
    "}\n";

static const char ds_config_zero3[] =
    "{\n"
    "    \"fp16\": {\n"
    "        \"enabled\": \"auto\",\n"
    "        \"loss_scale\": 0,\n"
    "        \"loss_scale_window\": 1000,\n"
    "        \"initial_scale_power\": 16,\n"
    "        \"hysteresis\": 2,\n"
    "        \"min_loss_scale\": 1\n"
    "    },\n"
    "\n"
    "    \"optimizer\": {\n"
    "        \"type\": \"AdamW\",\n"
    "        \"params\": {\n"
    "            \"lr\": \"auto\",\n"
    "            \"betas\": \"auto\",\n"
    "            \"eps\": \"auto\",\n"
    "            \"weight_decay\": \"auto\"\n"
    "        }\n"
    "    },\n"
    "\n"
    "    \"scheduler\": {\n"
    "        \"type\": \"WarmupLR\",\n"
    "        \"params\": {\n"
    "            \"warmup_min_lr\": \"auto\",\n"
    "            \"warmup_max_lr\": \"auto\",\n"
    "            \"warmup_num_steps\": \"auto\"\n"
    "        }\n"
    "    },\n"
    "\n"
    "    \"zero_optimization\": {\n"
    "        \"stage\": 3,\n"
    "        \"offload_optimizer\": {\n"
    "            \"device\": \"cpu\",\n"
    "            \"pin_memory\": true\n"
    "        },\n"
    "        \"offload_param\": {\n"
    "            \"device\": \"cpu\",\n"
    "            \"pin_memory\": true\n"
    "        },\n"
    "        \"overlap_comm\": true,\n"
    "        \"contiguous_gradients\": true,\n"
    "        \"sub_group_size\": 1e9,\n"
    "        \"reduce_bucket_size\": \"auto\",\n"
    "        \"stage3_prefetch_bucket_size\": \"auto\",\n"
    "        \"stage3_param_persistence_threshold\": \"auto\",\n"
    "        \"stage3_max_live_parameters\": 1e9,\n"
    "        \"stage3_max_reuse_distance\": 1e9,\n"
    "        \"stage3_gather_16bit_weights_on_model_save\": true\n"
    "    },\n"
    "\n"
    "    \"gradient_accumulation_steps\": \"auto\",\n"
    "    \"gradient_clipping\": \"auto\",\n"
    "    \"steps_per_print\": 2000,\n"
    "    \"train_batch_size\": \"auto\",\n"
    "    \"train_micro_batch_size_per_gpu\": \"auto\",\n"
    "    \"wall_clock_breakdown\": false\n"
    "}\n";

/* Both load unchanged; "auto" is the documented default; the keys without
 * effect come in one warning line that names each. */
static int test_hf_examples(void) {
  int before = zo_test_n_expect_failed;
  struct zo_config c;
  char *printed;
  EXPECT(load(&c, "ds_config_zero2", ds_config_zero2, NULL, 0, &printed) == 0);
  EXPECT(c.zero.stage == 2 && c.zero.offload_optimizer.device == ZO_OFFLOAD_CPU);
  /* "auto" micro-batch: the Trainer's per_device_train_batch_size default, 8 */
  EXPECT(!c.fp16.enabled && !c.bf16 && c.micro_batch == 8 && c.grad_accum == 1 && c.train_batch_size == 0);
  /* the other "auto" values: the Trainer's TrainingArguments defaults (learning_rate 5e-5,
   * adam betas (0.9, 0.999), eps 1e-8, weight_decay 0, max_grad_norm 1.0, warmup 0) */
  EXPECT(c.optimizer.lr == 5e-5 && c.optimizer.betas[0] == 0.9 && c.optimizer.betas[1] == 0.999 &&
         c.optimizer.eps == 1e-8 && c.optimizer.weight_decay == 0 && c.gradient_clipping == 1.0);
  EXPECT(c.scheduler.type == ZO_SCHEDULER_WARMUP_LR && c.scheduler.warmup_min_lr == 0 &&
         c.scheduler.warmup_max_lr == 5e-5 && c.scheduler.warmup_num_steps == 0);
  /* one line says what each "auto" became */
  EXPECT(strstr(printed, "ds_config_zero2.json: \"auto\" as the Hugging Face Trainer's defaults: "
                         "train_micro_batch_size_per_gpu = 8, gradient_accumulation_steps = 1, train_batch_size = "
                         "micro-batch x accumulation, optimizer.params.lr = 5e-05, ") &&
         strstr(printed, "optimizer.params.weight_decay = 0.0, ") && strstr(printed, "gradient_clipping = 1.0, ") &&
         strstr(printed, "fp16.enabled = false (train chooses the split of micro-batch x accumulation)\n"));
  EXPECT(count_lines(printed) == 2 && strstr(printed, "ds_config_zero2.json: 7 DeepSpeed keys are accepted") &&
         strstr(printed, "zero_optimization.allgather_bucket_size = 200000000.0") &&
         strstr(printed, "zero_optimization.contiguous_gradients = true") &&
         strstr(printed, "steps_per_print = 2000") && strstr(printed, "wall_clock_breakdown = false") &&
         !strstr(printed, "overlap_comm")); /* stage 2 with the optimizer on the host: in use */
  if (zo_test_n_expect_failed > before) fprintf(stderr, "printed: %s", printed);
  free(printed);
  zo_config_free(&c);

  EXPECT(load(&c, "ds_config_zero3", ds_config_zero3, NULL, 0, &printed) == 0);
  EXPECT(c.zero.stage == 3 && c.zero.offload_optimizer.device == ZO_OFFLOAD_CPU &&
         c.zero.offload_param.device == ZO_OFFLOAD_CPU && c.zero.offload_param.pin_memory);
  EXPECT(count_lines(printed) == 2 && strstr(printed, "ds_config_zero3.json: 10 DeepSpeed keys are accepted") &&
         strstr(printed, "zero_optimization.stage3_prefetch_bucket_size = \"auto\"") &&
         strstr(printed, "zero_optimization.stage3_gather_16bit_weights_on_model_save = true") &&
         strstr(printed, "zero_optimization.sub_group_size = 1000000000.0")); /* no NVMe: unused */
  if (zo_test_n_expect_failed > before) fprintf(stderr, "printed: %s", printed);
  free(printed);
  zo_config_free(&c);
  return zo_test_expect_failed_since(before);
}

/* Every unknown key in one error; a suggestion only for a close one. */
static int test_unknown_keys(void) {
  int before = zo_test_n_expect_failed;
  struct zo_config c;
  char *printed;
  EXPECT(load(&c, "typos",
              "{\"stpes\": 10, \"zero_optimization\": {\"stgae\": 2, \"banana_split\": 1}, "
              "\"optimizer\": {\"params\": {\"foo\": 1}}}",
              NULL, 0, &printed) == -EINVAL);
  const char *msg = zo_last_error();
  EXPECT(strstr(msg, "typos.json: 4 unknown keys: "));
  EXPECT(strstr(msg, "\"stpes\" (did you mean \"steps\"?)"));
  EXPECT(strstr(msg, "\"zero_optimization.stgae\" (did you mean \"zero_optimization.stage\"?)"));
  EXPECT(strstr(msg, "\"zero_optimization.banana_split\", ") || strstr(msg, "\"zero_optimization.banana_split\"."));
  EXPECT(strstr(msg, "\"optimizer.params.foo\"") && !strstr(msg, "\"optimizer.params.foo\" (did"));
  free(printed);
  zo_config_free(&c);
  /* one far from everything: no suggestion */
  EXPECT(load(&c, "far", "{\"xyzzy\": 1}", NULL, 0, &printed) == -EINVAL);
  EXPECT(strstr(zo_last_error(), "unknown key \"xyzzy\" (no valid key is close to it"));
  free(printed);
  zo_config_free(&c);
  return zo_test_expect_failed_since(before);
}

static int test_aliases(void) {
  int before = zo_test_n_expect_failed;
  struct zo_config c;
  char *printed;
  EXPECT(load(&c, "bf16", "{\"bf16\": true, \"gradient_checkpointing\": true}", NULL, 0, &printed) == 0);
  EXPECT(c.bf16 && !c.fp16.enabled && c.activation_checkpointing.enabled);
  EXPECT(printed[0] == '\0');
  free(printed);
  zo_config_free(&c);
  const char *sets[] = {"fp16=true", "gradient_checkpointing=true"};
  EXPECT(load(&c, "fp16", "{}", sets, 2, &printed) == 0);
  EXPECT(c.fp16.enabled && c.activation_checkpointing.enabled);
  free(printed);
  zo_config_free(&c);
  EXPECT(load(&c, "both", "{\"gradient_checkpointing\": true, \"activation_checkpointing\": {\"enabled\": false}}",
              NULL, 0, &printed) == -EINVAL);
  EXPECT(strstr(zo_last_error(), "gradient_checkpointing and activation_checkpointing.enabled are both set"));
  free(printed);
  zo_config_free(&c);
  return zo_test_expect_failed_since(before);
}

/* train_batch_size = micro-batch x accumulation x ranks (1 rank here). */
static int test_train_batch_size(void) {
  int before = zo_test_n_expect_failed;
  struct zo_config c;
  char *printed;
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("PMI_SIZE");
  unsetenv("PMIX_SIZE");
  EXPECT(load(&c, "tbs1", "{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4}", NULL, 0,
              &printed) == 0);
  EXPECT(c.micro_batch == 4 && c.grad_accum == 8);
  free(printed);
  zo_config_free(&c);
  EXPECT(load(&c, "tbs2", "{\"train_batch_size\": 32, \"gradient_accumulation_steps\": 2}", NULL, 0, &printed) == 0);
  EXPECT(c.micro_batch == 16 && c.grad_accum == 2);
  free(printed);
  zo_config_free(&c);
  EXPECT(load(&c, "tbs3", "{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": \"auto\", "
                          "\"gradient_accumulation_steps\": \"auto\"}", NULL, 0, &printed) == 0);
  EXPECT(c.micro_batch == 32 && c.grad_accum == 1);
  free(printed);
  zo_config_free(&c);
  EXPECT(load(&c, "tbs-bad", "{\"train_batch_size\": 30, \"train_micro_batch_size_per_gpu\": 4, "
                             "\"gradient_accumulation_steps\": 2}", NULL, 0, &printed) == -EINVAL);
  EXPECT(strstr(zo_last_error(), "train_batch_size = 30 but train_micro_batch_size_per_gpu 4 x "
                                  "gradient_accumulation_steps 2 = 8"));
  free(printed);
  zo_config_free(&c);
  EXPECT(load(&c, "tbs-odd", "{\"train_batch_size\": 30, \"train_micro_batch_size_per_gpu\": 4}", NULL, 0,
              &printed) == -EINVAL);
  EXPECT(strstr(zo_last_error(), "train_batch_size = 30 is not a multiple of train_micro_batch_size_per_gpu = 4"));
  free(printed);
  zo_config_free(&c);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  EXPECT(load(&c, "tbs-ranks", "{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4}", NULL, 0,
              &printed) == 0);
  EXPECT(c.grad_accum == 4);
  unsetenv("OMPI_COMM_WORLD_SIZE");
  free(printed);
  zo_config_free(&c);
  return zo_test_expect_failed_since(before);
}

/* total_num_steps follows steps (also set after loading, for data.epochs);
 * an explicit one that differs is warned about once. */
static int test_schedule_follows_steps(void) {
  int before = zo_test_n_expect_failed;
  struct zo_config c;
  char *printed;
  static const char cosine[] = "{\"steps\": 200, \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": "
                               "{\"warmup_num_steps\": 20, \"cos_min_ratio\": 0.1}}}";
  const char *steps30[] = {"steps=30"};
  EXPECT(load(&c, "follow", cosine, steps30, 1, &printed) == 0);
  EXPECT(c.scheduler.total_num_steps == 30 && c.lr_schedule.total_steps == 30 && printed[0] == '\0');
  free(printed);
  zo_config_free(&c);

  static const char fixed[] = "{\"steps\": 200, \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": "
                              "{\"warmup_num_steps\": 20, \"total_num_steps\": 200, \"cos_min_ratio\": 0.1}}}";
  EXPECT(load(&c, "fixed", fixed, steps30, 1, &printed) == 0);
  EXPECT(c.lr_schedule.total_steps == 200);
  EXPECT(count_lines(printed) == 1 &&
         strstr(printed, "zoffload: warning: --set: scheduler.params.total_num_steps = 200 but the run has 30 "
                         "steps: the run ends at lr 0.000993, before the WarmupCosineLR schedule reaches 0.0001"));
  if (zo_test_n_expect_failed > before) fprintf(stderr, "printed: %s", printed);
  free(printed);
  zo_config_free(&c);
  EXPECT(load(&c, "fixed-same", fixed, NULL, 0, &printed) == 0 && printed[0] == '\0');
  free(printed);
  zo_config_free(&c);

  /* data.epochs: steps come later, from the file */
  static const char epochs[] = "{\"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 2, "
                               "\"model\": {\"max_seq_len\": 16}, \"data\": {\"epochs\": 3}, \"scheduler\": "
                               "{\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_num_steps\": 2}}}";
  EXPECT(load(&c, "epochs", epochs, NULL, 0, &printed) == 0 && printed[0] == '\0');
  /* 1001 tokens: (1001 - 1) / (4 x 16) = 15 micro-batches an epoch, 45 in 3, 23 steps of 2 */
  EXPECT(zo_config_steps_for_epochs(&c, 1001, 1) == 23);
  EXPECT(zo_config_steps_for_epochs(&c, 1001, 2) == 11); /* 7 per epoch over 2 ranks, 21 / 2 */
  EXPECT(zo_config_steps_for_epochs(&c, 70, 1) == 2); /* one micro-batch an epoch, 3 in all */
  EXPECT(zo_config_set_steps(&c, 23) == 0 && c.steps == 23 && c.scheduler.total_num_steps == 23 &&
         c.lr_schedule.total_steps == 23);
  EXPECT(zo_config_set_steps(&c, 1) == -EINVAL && strstr(zo_last_error(), "warmup_num_steps = 2 exceeds"));
  free(printed);
  zo_config_free(&c);
  const char *both[] = {"steps=10"};
  EXPECT(load(&c, "epochs-steps", epochs, both, 1, &printed) == -EINVAL);
  EXPECT(strstr(zo_last_error(), "steps = 10 and data.epochs = 3 are both set"));
  free(printed);
  zo_config_free(&c);
  return zo_test_expect_failed_since(before);
}

/* The effective config of an "auto" and epochs config reloads to itself,
 * quietly. */
static int test_dump_reloads(void) {
  int before = zo_test_n_expect_failed;
  struct zo_config c, d;
  char *printed;
  EXPECT(load(&c, "dump-src", "{\"train_batch_size\": 8, \"data\": {\"epochs\": 2}, \"eval\": {\"every\": 5}, "
                              "\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"warmup_num_steps\": "
                              "\"auto\"}}}", NULL, 0, &printed) == 0);
  free(printed);
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  EXPECT(mem && zo_config_dump(&c, mem) == 0);
  if (mem) fclose(mem);
  EXPECT(text && !strstr(text, "\"steps\": 1000") && !strstr(text, "total_num_steps"));
  EXPECT(load(&d, "dump", text ? text : "{}", NULL, 0, &printed) == 0 && printed[0] == '\0');
  EXPECT(d.micro_batch == 8 && d.data.epochs == 2 && d.eval.every == 5 && !d.scheduler.total_num_steps_set &&
         d.scheduler.warmup_num_steps == 0);
  free(printed);
  free(text);
  zo_config_free(&c);
  zo_config_free(&d);
  return zo_test_expect_failed_since(before);
}

int main(void) {
  if (zo_test_mkdtemp(tmpdir, sizeof tmpdir, "dsconfig")) return 1;
  static const struct zo_test tests[] = {
      ZO_TEST(hf_examples),  ZO_TEST(unknown_keys),          ZO_TEST(aliases),
      ZO_TEST(train_batch_size), ZO_TEST(schedule_follows_steps), ZO_TEST(dump_reloads),
  };
  struct zo_test_counts counts = zo_test_run(tests, ZO_ARRAY_LEN(tests));
  zo_test_rmtree(tmpdir);
  return zo_test_report(counts);
}
