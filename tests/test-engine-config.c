/* Config loading: defaults, every key, a table of malformed configs with the
 * error code and message each must give, --set overrides, dump/load round
 * trips, the shipped configs, the warning of the keys accepted without effect
 * and byte-size parsing. Config files are written
 * to a fresh temporary directory that is removed at the end. */
#include "zo/config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo_test.h"

#ifndef ZO_TEST_DIR
#define ZO_TEST_DIR "tests"
#endif

static char tmpdir[256];

#define EXPECT(cond) ZO_EXPECT(cond)

static bool streq(const char *a, const char *b) {
  return a && b && strcmp(a, b) == 0;
}

/* Writes text to tmpdir/name.json; path receives the file name. */
static void write_config(const char *name, const char *text, char *path, size_t cap) {
  snprintf(path, cap, "%s/%s.json", tmpdir, name);
  if (zo_test_write_file(path, text)) exit(1);
}

/* Loads text as a config file named name.json (text NULL: no file). */
static int load_text(struct zo_config *cfg, const char *name, const char *text,
                     const char *const *sets, int n_sets) {
  char path[512];
  if (!text) return zo_config_load(cfg, NULL, sets, n_sets);
  write_config(name, text, path, sizeof path);
  return zo_config_load(cfg, path, sets, n_sets);
}

/* load_text, with what the load wrote on stderr in *printed (malloc'd,
 * free it). */
static int load_capturing(struct zo_config *cfg, const char *text, const char *const *sets, int n_sets,
                          char **printed) {
  char path[512];
  snprintf(path, sizeof path, "%s/stderr.txt", tmpdir);
  FILE *f = fopen(path, "w+");
  const int saved = dup(STDERR_FILENO);
  if (!f || saved < 0) {
    perror(path);
    exit(1);
  }
  fflush(stderr);
  dup2(fileno(f), STDERR_FILENO);
  const int err = load_text(cfg, "capture", text, sets, n_sets);
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  const long n = ftell(f) >= 0 && fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  *printed = n >= 0 ? calloc((size_t)n + 1, 1) : NULL;
  if (!*printed || fseek(f, 0, SEEK_SET) != 0 || fread(*printed, 1, (size_t)n, f) != (size_t)n) {
    perror(path);
    exit(1);
  }
  fclose(f);
  return err;
}

static bool config_equal(const struct zo_config *a, const struct zo_config *b) {
  bool eq = true;
#define SAME(f) eq = eq && (a->f == b->f)
#define SAME_STR(f) eq = eq && streq(a->f, b->f)
  SAME(micro_batch); SAME(grad_accum); SAME(steps);
  SAME(optimizer.type); SAME(optimizer.lr); SAME(optimizer.betas[0]); SAME(optimizer.betas[1]);
  SAME(optimizer.eps); SAME(optimizer.weight_decay);
  SAME(scheduler.type); SAME(scheduler.warmup_min_lr); SAME(scheduler.warmup_max_lr);
  SAME(scheduler.warmup_num_steps); SAME(scheduler.warmup_type); SAME(scheduler.total_num_steps);
  SAME(scheduler.warmup_min_ratio); SAME(scheduler.cos_min_ratio);
  SAME(lr_schedule.kind); SAME(lr_schedule.lr); SAME(lr_schedule.min_lr);
  SAME(lr_schedule.warmup_steps); SAME(lr_schedule.total_steps);
  SAME(gradient_clipping); SAME(bf16);
  SAME(fp16.enabled); SAME(fp16.loss_scale); SAME(fp16.initial_scale_power);
  SAME(fp16.loss_scale_window); SAME(fp16.hysteresis); SAME(fp16.min_loss_scale);
  SAME(zero.stage);
  SAME(zero.offload_optimizer.device); SAME_STR(zero.offload_optimizer.nvme_path);
  SAME(zero.offload_optimizer.pin_memory); SAME(zero.offload_optimizer.buffer_count);
  SAME(zero.offload_param.device); SAME_STR(zero.offload_param.nvme_path);
  SAME(zero.offload_param.pin_memory); SAME(zero.offload_param.buffer_count);
  SAME(aio.block_size); SAME(aio.queue_depth); /* thread_count etc.: ignored, not dumped */
  SAME(activation_checkpointing.enabled); SAME(activation_checkpointing.number_checkpoints);
  SAME(activation_checkpointing.cpu_checkpointing);
  SAME(activation_checkpointing.partition_activations);
  SAME(model.spec.arch); SAME_STR(model.init_from); SAME(model.spec.n_layer); SAME(model.spec.n_head);
  SAME(model.spec.n_embd); SAME(model.spec.vocab_size); SAME(model.spec.padded_vocab_size);
  SAME(model.spec.max_seq_len);
  SAME_STR(data.train); SAME_STR(data.val); SAME(data.format); SAME(data.seq_len);
  SAME(data.shuffle);
  SAME(engine.device); SAME(engine.gpu_memory_budget); SAME(engine.host_memory_budget);
  SAME(engine.threads); SAME(engine.seed);
  SAME(log.every); SAME_STR(log.metrics_path);
  SAME_STR(checkpoint.dir); SAME(checkpoint.every); SAME(checkpoint.keep);
#undef SAME
#undef SAME_STR
  return eq;
}

/* ---- cases ------------------------------------------------------------------ */

static int test_defaults(void) {
  int before = zo_test_n_expect_failed;
  struct zo_config c;
  EXPECT(zo_config_load(&c, NULL, NULL, 0) == 0);
  EXPECT(streq(c.path, ""));
  EXPECT(c.micro_batch == 1 && c.grad_accum == 1 && c.steps == 1000);
  EXPECT(c.optimizer.type == ZO_OPTIMIZER_ADAMW && c.optimizer.lr == 1e-3);
  EXPECT(c.optimizer.betas[0] == 0.9 && c.optimizer.betas[1] == 0.999);
  EXPECT(c.optimizer.eps == 1e-8 && c.optimizer.weight_decay == 0.01);
  EXPECT(c.scheduler.type == ZO_SCHEDULER_NONE);
  EXPECT(c.lr_schedule.kind == ZO_LR_CONSTANT && c.lr_schedule.lr == 1e-3);
  EXPECT(c.gradient_clipping == 0 && !c.bf16 && !c.fp16.enabled);
  EXPECT(c.fp16.loss_scale == 0 && c.fp16.initial_scale_power == 16);
  EXPECT(c.fp16.loss_scale_window == 1000 && c.fp16.hysteresis == 2 && c.fp16.min_loss_scale == 1);
  EXPECT(c.zero.stage == 0);
  EXPECT(c.zero.offload_optimizer.device == ZO_OFFLOAD_NONE && c.zero.offload_optimizer.pin_memory);
  EXPECT(streq(c.zero.offload_optimizer.nvme_path, ""));
  EXPECT(c.zero.offload_optimizer.buffer_count == 4);
  EXPECT(c.zero.offload_param.device == ZO_OFFLOAD_NONE && c.zero.offload_param.buffer_count == 5);
  EXPECT(c.aio.block_size == 1 << 20 && c.aio.queue_depth == 8 && c.aio.thread_count == 1);
  EXPECT(!c.aio.single_submit && c.aio.overlap_events);
  EXPECT(!c.activation_checkpointing.enabled && c.activation_checkpointing.number_checkpoints == 0);
  EXPECT(!c.activation_checkpointing.cpu_checkpointing);
  EXPECT(!c.activation_checkpointing.partition_activations);
  EXPECT(c.model.spec.arch == ZO_ARCH_GPT2 && streq(c.model.init_from, ""));
  EXPECT(c.model.spec.n_layer == 12 && c.model.spec.n_head == 12 && c.model.spec.n_embd == 768);
  EXPECT(c.model.spec.vocab_size == 50257 && c.model.spec.padded_vocab_size == 50304);
  EXPECT(c.model.spec.max_seq_len == 1024);
  EXPECT(streq(c.data.train, "") && streq(c.data.val, "") && c.data.format == ZO_DATA_LLMC);
  EXPECT(c.data.seq_len == 1024 && c.data.shuffle);
  EXPECT(c.engine.device == ZO_DEVICE_AUTO && c.engine.gpu_memory_budget == 0);
  EXPECT(c.engine.host_memory_budget == 0 && c.engine.threads == 0 && c.engine.seed == 1337);
  EXPECT(c.engine.grad_slots == 2);
  EXPECT(c.engine.schedule == ZO_SCHEDULE_AUTO);
  EXPECT(c.log.every == 10 && streq(c.log.metrics_path, ""));
  EXPECT(streq(c.checkpoint.dir, "") && c.checkpoint.every == 0 && c.checkpoint.keep == 3);
  zo_config_free(&c);
  zo_config_free(&c); /* zeroed: a second free is harmless */
  zo_config_free(NULL);

  /* An empty object is the defaults too, and data.seq_len follows max_seq_len. */
  const char *sets[] = {"model.max_seq_len=256"};
  EXPECT(load_text(&c, "empty-object", "{ }", sets, ZO_ARRAY_LEN(sets)) == 0);
  EXPECT(c.data.seq_len == 256 && c.model.spec.max_seq_len == 256);
  zo_config_free(&c);
  return zo_test_expect_failed_since(before);
}

static const char *every_key_json =
    "{\n"
    "  \"train_micro_batch_size_per_gpu\": 3,\n"
    "  \"gradient_accumulation_steps\": 5,\n"
    "  \"steps\": 777,\n"
    "  \"optimizer\": {\"type\": \"AdamW8bit\", \"params\": {\"lr\": 2.5e-4,\n"
    "    \"betas\": [0.8, 0.95], \"eps\": 1e-6, \"weight_decay\": 0.05}},\n"
    "  \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"warmup_num_steps\": 70,\n"
    "    \"warmup_type\": \"linear\", \"total_num_steps\": 700, \"warmup_min_ratio\": 0,\n"
    "    \"cos_min_ratio\": 0.05}},\n"
    "  \"gradient_clipping\": 0.5,\n"
    "  \"bf16\": {\"enabled\": true},\n"
    "  \"fp16\": {\"enabled\": false, \"loss_scale\": 128, \"initial_scale_power\": 12,\n"
    "    \"loss_scale_window\": 500, \"hysteresis\": 3, \"min_loss_scale\": 0.25},\n"
    "  \"zero_optimization\": {\"stage\": 3,\n"
    "    \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"/nvme/opt\",\n"
    "      \"pin_memory\": false, \"buffer_count\": 6},\n"
    "    \"offload_param\": {\"device\": \"cpu\", \"nvme_path\": \"/nvme/par\",\n"
    "      \"pin_memory\": false, \"buffer_count\": 7}},\n"
    "  \"aio\": {\"block_size\": \"2MiB\", \"queue_depth\": 32, \"thread_count\": 2,\n"
    "    \"single_submit\": true, \"overlap_events\": false},\n"
    "  \"activation_checkpointing\": {\"enabled\": true, \"number_checkpoints\": 2,\n"
    "    \"cpu_checkpointing\": true, \"partition_activations\": false},\n"
    "  \"model\": {\"arch\": \"gpt2\", \"init_from\": \"ckpt/model.safetensors\", \"n_layer\": 4,\n"
    "    \"n_head\": 6, \"n_embd\": 384, \"vocab_size\": 300, \"max_seq_len\": 512},\n"
    "  \"data\": {\"train\": \"tr.bin\", \"val\": \"va \\\"q\\\" \\u00e9.bin\",\n"
    "    \"format\": \"text\",\n"
    "    \"seq_len\": 256, \"shuffle\": false},\n"
    "  \"engine\": {\"device\": \"cpu\", \"gpu_memory_budget\": \"10GiB\",\n"
    "    \"host_memory_budget\": \"1.5GB\", \"threads\": 2, \"seed\": 9007199254740993},\n"
    "  \"log\": {\"every\": 5, \"metrics_path\": \"m.jsonl\"},\n"
    "  \"checkpoint\": {\"dir\": \"ck\", \"every\": 50, \"keep\": 0}\n"
    "}\n";

static int test_every_key(void) {
  int before = zo_test_n_expect_failed;
  struct zo_config c;
  EXPECT(load_text(&c, "every-key", every_key_json, NULL, 0) == 0);
  EXPECT(strstr(c.path, "every-key.json") != NULL);
  EXPECT(c.micro_batch == 3 && c.grad_accum == 5 && c.steps == 777);
  EXPECT(c.optimizer.type == ZO_OPTIMIZER_ADAMW8BIT && c.optimizer.lr == 2.5e-4);
  EXPECT(c.optimizer.betas[0] == 0.8 && c.optimizer.betas[1] == 0.95);
  EXPECT(c.optimizer.eps == 1e-6 && c.optimizer.weight_decay == 0.05);
  EXPECT(c.scheduler.type == ZO_SCHEDULER_WARMUP_COSINE_LR);
  EXPECT(c.scheduler.warmup_num_steps == 70 && c.scheduler.total_num_steps == 700);
  EXPECT(c.scheduler.warmup_type == ZO_WARMUP_LINEAR && c.scheduler.warmup_min_ratio == 0);
  EXPECT(c.scheduler.cos_min_ratio == 0.05);
  EXPECT(c.lr_schedule.kind == ZO_LR_WARMUP_COSINE && c.lr_schedule.lr == 2.5e-4);
  EXPECT(c.lr_schedule.min_lr == 2.5e-4 * 0.05);
  EXPECT(c.lr_schedule.warmup_steps == 70 && c.lr_schedule.total_steps == 700);
  EXPECT(c.gradient_clipping == 0.5 && c.bf16 && !c.fp16.enabled);
  EXPECT(c.fp16.loss_scale == 128 && c.fp16.initial_scale_power == 12);
  EXPECT(c.fp16.loss_scale_window == 500 && c.fp16.hysteresis == 3);
  EXPECT(c.fp16.min_loss_scale == 0.25);
  EXPECT(c.zero.stage == 3);
  EXPECT(c.zero.offload_optimizer.device == ZO_OFFLOAD_NVME);
  EXPECT(streq(c.zero.offload_optimizer.nvme_path, "/nvme/opt"));
  EXPECT(!c.zero.offload_optimizer.pin_memory && c.zero.offload_optimizer.buffer_count == 6);
  EXPECT(c.zero.offload_param.device == ZO_OFFLOAD_CPU);
  EXPECT(streq(c.zero.offload_param.nvme_path, "/nvme/par"));
  EXPECT(!c.zero.offload_param.pin_memory && c.zero.offload_param.buffer_count == 7);
  EXPECT(c.aio.block_size == 2 << 20 && c.aio.queue_depth == 32 && c.aio.thread_count == 2);
  EXPECT(c.aio.single_submit && !c.aio.overlap_events);
  EXPECT(c.activation_checkpointing.enabled && c.activation_checkpointing.number_checkpoints == 2);
  EXPECT(c.activation_checkpointing.cpu_checkpointing);
  EXPECT(!c.activation_checkpointing.partition_activations);
  EXPECT(c.model.spec.arch == ZO_ARCH_GPT2 && streq(c.model.init_from, "ckpt/model.safetensors"));
  EXPECT(c.model.spec.n_layer == 4 && c.model.spec.n_head == 6 && c.model.spec.n_embd == 384);
  EXPECT(c.model.spec.vocab_size == 300 && c.model.spec.padded_vocab_size == 320);
  EXPECT(c.model.spec.max_seq_len == 512);
  EXPECT(streq(c.data.train, "tr.bin") && streq(c.data.val, "va \"q\" \xc3\xa9.bin"));
  EXPECT(c.data.format == ZO_DATA_TEXT && c.data.seq_len == 256 && !c.data.shuffle);
  EXPECT(c.engine.device == ZO_DEVICE_CPU && c.engine.gpu_memory_budget == (size_t)10 << 30);
  EXPECT(c.engine.host_memory_budget == 1500000000 && c.engine.threads == 2);
  EXPECT(c.engine.seed == 9007199254740993ull);
  EXPECT(c.log.every == 5 && streq(c.log.metrics_path, "m.jsonl"));
  EXPECT(streq(c.checkpoint.dir, "ck") && c.checkpoint.every == 50 && c.checkpoint.keep == 0);
  zo_config_free(&c);
  return zo_test_expect_failed_since(before);
}

static int test_schedulers(void) {
  int before = zo_test_n_expect_failed;
  struct zo_config c;
  const char *wlr = "{\"optimizer\": {\"params\": {\"lr\": 5e-4}}, \"scheduler\": {\"type\": "
                    "\"WarmupLR\", \"params\": {\"warmup_min_lr\": 1e-5, \"warmup_max_lr\": 2e-3, "
                    "\"warmup_num_steps\": 50}}}";
  EXPECT(load_text(&c, "warmup-lr", wlr, NULL, 0) == 0);
  EXPECT(c.lr_schedule.kind == ZO_LR_WARMUP && c.lr_schedule.lr == 2e-3);
  EXPECT(c.lr_schedule.min_lr == 1e-5 && c.lr_schedule.warmup_steps == 50);
  zo_config_free(&c);

  /* Absent warmup_max_lr follows optimizer.params.lr; case-insensitive type. */
  const char *wdl = "{\"steps\": 300, \"optimizer\": {\"params\": {\"lr\": 5e-4}}, \"scheduler\": "
                    "{\"type\": \"warmupdecaylr\", \"params\": {\"warmup_num_steps\": 30}}}";
  EXPECT(load_text(&c, "warmup-decay", wdl, NULL, 0) == 0);
  EXPECT(c.scheduler.type == ZO_SCHEDULER_WARMUP_DECAY_LR);
  EXPECT(c.lr_schedule.kind == ZO_LR_WARMUP_DECAY && c.lr_schedule.lr == 5e-4);
  EXPECT(c.lr_schedule.min_lr == 0 && c.lr_schedule.warmup_steps == 30);
  EXPECT(c.lr_schedule.total_steps == 300 && c.scheduler.total_num_steps == 300);
  zo_config_free(&c);

  const char *wcl = "{\"steps\": 100, \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": "
                    "{\"warmup_num_steps\": 10}}}";
  EXPECT(load_text(&c, "warmup-cosine", wcl, NULL, 0) == 0);
  EXPECT(c.lr_schedule.kind == ZO_LR_WARMUP_COSINE && c.lr_schedule.lr == 1e-3);
  EXPECT(c.lr_schedule.min_lr == 1e-3 * 1e-4 && c.lr_schedule.total_steps == 100);
  EXPECT(fabs(zo_lr_at(&c.lr_schedule, 5) - 5e-4) < 1e-12);
  zo_config_free(&c);
  return zo_test_expect_failed_since(before);
}

struct bad_case {
  const char *name;
  const char *json;        /* file text; NULL: no file; "@missing", "@dir": special paths */
  const char *sets[3];
  int err;                 /* expected return */
  const char *message;     /* expected substring of zo_last_error() */
  bool from_set;           /* message starts with "--set" instead of the file name */
};

static const struct bad_case bad_cases[] = {
  /* unknown keys at several depths, with the suggestion */
  {"unknown-top", "{\"stpes\": 10}", {0}, -EINVAL,
   "unknown key \"stpes\"; did you mean \"steps\"?", false},
  {"unknown-deep", "{\"optimizer\": {\"params\": {\"betas1\": [0.9, 0.9]}}}", {0}, -EINVAL,
   "unknown key \"optimizer.params.betas1\"; did you mean \"optimizer.params.betas\"?", false},
  {"unknown-depth4", "{\"zero_optimization\": {\"offload_optimizer\": {\"devcie\": \"cpu\"}}}",
   {0}, -EINVAL, "did you mean \"zero_optimization.offload_optimizer.device\"?", false},
  {"unknown-misplaced", "{\"threads\": 4}", {0}, -EINVAL,
   "unknown key \"threads\"; did you mean \"engine.threads\"?", false},
  {"unknown-section", "{\"optimiser\": {}}", {0}, -EINVAL,
   "unknown key \"optimiser\"; did you mean \"optimizer\"?", false},
  {"unknown-model", "{\"model\": {\"nlayer\": 2}}", {0}, -EINVAL,
   "unknown key \"model.nlayer\"; did you mean \"model.n_layer\"?", false},
  {"unknown-sched-param", "{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
   "{\"warmup_num_step\": 5}}}", {0}, -EINVAL,
   "did you mean \"scheduler.params.warmup_num_steps\"?", false},
  {"dotted-key", "{\"optimizer.params.lr\": 1}", {0}, -EINVAL, "contains '.'", false},
  /* wrong types */
  {"type-steps-string", "{\"steps\": \"100\"}", {0}, -EINVAL,
   "steps = \"100\": must be an integer >= 1", false},
  {"type-steps-fraction", "{\"steps\": 2.5}", {0}, -EINVAL,
   "steps = 2.5: must be an integer >= 1", false},
  {"type-section", "{\"optimizer\": 5}", {0}, -EINVAL, "optimizer = 5: must be an object", false},
  {"type-lr-string", "{\"optimizer\": {\"params\": {\"lr\": \"1e-3\"}}}", {0}, -EINVAL,
   "optimizer.params.lr = \"1e-3\": must be a number > 0", false},
  {"type-bool", "{\"bf16\": {\"enabled\": \"yes\"}}", {0}, -EINVAL,
   "bf16.enabled = \"yes\": must be true or false", false},
  {"type-string", "{\"data\": {\"train\": 7}}", {0}, -EINVAL,
   "data.train = 7: must be a string", false},
  {"type-betas-short", "{\"optimizer\": {\"params\": {\"betas\": [0.9]}}}", {0}, -EINVAL,
   "optimizer.params.betas = [0.9]: must be an array of 2 numbers, each in [0, 1)", false},
  /* out of range */
  {"range-threads", "{\"engine\": {\"threads\": -3}}", {0}, -EINVAL,
   "engine.threads = -3: must be an integer >= 0", false},
  {"enum-schedule", "{\"engine\": {\"schedule\": \"layer-major\"}}", {0}, -EINVAL,
   "engine.schedule = \"layer-major\": must be one of \"auto\", \"layer_major\", \"micro_batch_major\"", false},
  {"range-grad-slots", "{\"engine\": {\"grad_slots\": 3}}", {0}, -EINVAL,
   "engine.grad_slots = 3: must be an integer in [1, 2]", false},
  {"range-grad-slots-zero", "{\"engine\": {\"grad_slots\": 0}}", {0}, -EINVAL,
   "engine.grad_slots = 0: must be an integer in [1, 2]", false},
  {"range-stage", "{\"zero_optimization\": {\"stage\": 4}}", {0}, -EINVAL,
   "zero_optimization.stage = 4: must be an integer in [0, 3]", false},
  {"range-lr-zero", "{\"optimizer\": {\"params\": {\"lr\": 0}}}", {0}, -EINVAL,
   "optimizer.params.lr = 0: must be a number > 0", false},
  {"range-beta-one", "{\"optimizer\": {\"params\": {\"betas\": [0.9, 1.0]}}}", {0}, -EINVAL,
   "each in [0, 1)", false},
  {"range-n-layer", "{\"model\": {\"n_layer\": 0}}", {0}, -EINVAL,
   "model.n_layer = 0: must be an integer in [1, 1024]", false},
  {"range-scale-power", "{\"fp16\": {\"initial_scale_power\": 40}}", {0}, -EINVAL,
   "fp16.initial_scale_power = 40: must be an integer in [0, 32]", false},
  {"range-int-overflow", "{\"log\": {\"every\": 3000000000}}", {0}, -EINVAL,
   "log.every = 3000000000: must be an integer >= 1 and <= 2147483647", false},
  {"range-cos-ratio", "{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": "
   "{\"cos_min_ratio\": 1.5}}}", {0}, -EINVAL,
   "scheduler.params.cos_min_ratio = 1.5: must be a number in [0, 1]", false},
  /* byte sizes */
  {"bytes-words", "{\"engine\": {\"gpu_memory_budget\": \"10 gigs\"}}", {0}, -EINVAL,
   "engine.gpu_memory_budget = \"10 gigs\": must be a byte size such as \"10GiB\"", false},
  {"bytes-negative", "{\"engine\": {\"host_memory_budget\": -1}}", {0}, -EINVAL,
   "engine.host_memory_budget = -1: must be a byte size", false},
  {"bytes-below-min", "{\"aio\": {\"block_size\": \"1KiB\"}}", {0}, -EINVAL,
   "aio.block_size = \"1KiB\": must be a byte size", false},
  {"bytes-unaligned", "{\"aio\": {\"block_size\": 6000}}", {0}, -EINVAL,
   "aio.block_size = 6000: must be a multiple of 4096", false},
  /* enums */
  {"enum-arch", "{\"model\": {\"arch\": \"gpt3\"}}", {0}, -EINVAL,
   "model.arch = \"gpt3\": must be one of \"gpt2\", \"llama\"; did you mean \"gpt2\"?", false},
  {"enum-format", "{\"data\": {\"format\": \"bin\"}}", {0}, -EINVAL,
   "data.format = \"bin\": must be one of \"text\", \"llmc\", \"u16\", \"u32\"", false},
  {"enum-device", "{\"engine\": {\"device\": \"gpu\"}}", {0}, -EINVAL,
   "must be one of \"auto\", \"cpu\", \"cuda\"", false},
  {"enum-optimizer", "{\"optimizer\": {\"type\": \"SGD\"}}", {0}, -EINVAL,
   "optimizer.type = \"SGD\": must be one of \"AdamW\", \"AdamW8bit\"", false},
  {"enum-scheduler", "{\"scheduler\": {\"type\": \"OneCycle\"}}", {0}, -EINVAL,
   "scheduler.type = \"OneCycle\": must be one of \"none\", \"WarmupLR\"", false},
  {"enum-offload", "{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": "
   "{\"device\": \"disk\"}}}", {0}, -EINVAL, "must be one of \"none\", \"cpu\", \"nvme\"", false},
  /* file and syntax */
  {"syntax", "{\n  \"steps\": 10,\n  \"log\": {\"every\": }\n}\n", {0}, -EINVAL,
   "syntax-mark.json:3:20: JSON syntax error", false},
  {"syntax-trailing-comma", "{\"steps\": 10,}", {0}, -EINVAL, ":1:", false},
  {"duplicate-key", "{\"steps\": 10, \"steps\": 20}", {0}, -EINVAL, "duplicate", false},
  {"empty-file", "", {0}, -EINVAL, "empty file", false},
  {"blank-file", " \n\t\n", {0}, -EINVAL, "empty file", false},
  {"top-level-array", "[1, 2]", {0}, -EINVAL, "top level must be a JSON object", false},
  {"missing-file", "@missing", {0}, -ENOENT, "cannot open config: No such file", false},
  {"directory", "@dir", {0}, -EIO, "cannot read config", false},
  /* cross-field rules */
  {"bf16-and-fp16", "{\"bf16\": {\"enabled\": true}, \"fp16\": {\"enabled\": true}}", {0},
   -EINVAL, "bf16.enabled and fp16.enabled are both true", false},
  {"embd-head", "{\"model\": {\"n_embd\": 100, \"n_head\": 12}}", {0}, -EINVAL,
   "model.n_embd = 100 is not a multiple of model.n_head = 12: use n_embd 96 or 108", false},
  {"seq-len", "{\"data\": {\"seq_len\": 2048}}", {0}, -EINVAL,
   "data.seq_len = 2048 exceeds model.max_seq_len = 1024", false},
  {"nvme-no-path", "{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": "
   "{\"device\": \"nvme\"}}}", {0}, -EINVAL,
   "needs zero_optimization.offload_optimizer.nvme_path", false},
  {"offload-stage0", "{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"cpu\"}}}",
   {0}, -EINVAL, "needs zero_optimization.stage >= 1 (it is 0)", false},
  {"offload-param-stage2", "{\"zero_optimization\": {\"stage\": 2, \"offload_param\": "
   "{\"device\": \"cpu\"}}}", {0}, -EINVAL, "needs zero_optimization.stage = 3", false},
  {"warmup-over-total", "{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": "
   "{\"warmup_num_steps\": 500, \"total_num_steps\": 100}}}", {0}, -EINVAL,
   "scheduler.params.warmup_num_steps = 500 exceeds scheduler.params.total_num_steps = 100",
   false},
  {"warmup-log", "{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
   "{\"warmup_type\": \"log\"}}}", {0}, -ENOTSUP, "only \"linear\" warmup is supported", false},
  {"warmup-min-ratio", "{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": "
   "{\"warmup_min_ratio\": 0.1}}}", {0}, -ENOTSUP, "only 0 is supported", false},
  {"decay-min-lr", "{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
   "{\"warmup_min_lr\": 1e-5}}}", {0}, -ENOTSUP, "warmup_min_lr = 1e-05", false},
  {"sched-param-wrong-type", "{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
   "{\"cos_min_ratio\": 0.1}}}", {0}, -EINVAL,
   "scheduler.params.cos_min_ratio is not a parameter of WarmupLR, which takes warmup_min_lr",
   false},
  {"sched-params-no-type", "{\"scheduler\": {\"params\": {\"warmup_num_steps\": 5}}}", {0},
   -EINVAL, "scheduler.type is \"none\"", false},
  {"partition-activations", "{\"activation_checkpointing\": {\"partition_activations\": true}}",
   {0}, -ENOTSUP, "set it to false", false},
  {"too-many-checkpoints", "{\"model\": {\"n_layer\": 2}, \"activation_checkpointing\": "
   "{\"number_checkpoints\": 3}}", {0}, -EINVAL, "exceeds model.n_layer = 2", false},
  {"text-small-vocab", "{\"model\": {\"vocab_size\": 100}, \"data\": {\"format\": \"text\"}}", {0},
   -EINVAL, "set model.vocab_size >= 256", false},
  {"u16-big-vocab", "{\"model\": {\"vocab_size\": 128256}, \"data\": {\"format\": \"u16\"}}", {0},
   -EINVAL, "model.vocab_size = 128256 > 65536: use data.format \"u32\"", false},
  /* --set */
  {"set-no-equals", NULL, {"steps"}, -EINVAL, "--set \"steps\": expected key.path=value", true},
  {"set-no-key", NULL, {"=3"}, -EINVAL, "with a key before '='", true},
  {"set-bad-path", NULL, {"engine..threads=2"}, -EINVAL, "is not a key path", true},
  {"set-unknown", NULL, {"optimizer.params.betas1=0.9"}, -EINVAL,
   "--set: unknown key \"optimizer.params.betas1\"; did you mean \"optimizer.params.betas\"?",
   true},
  {"set-through-leaf", NULL, {"optimizer.params.lr.x=1"}, -EINVAL,
   "did you mean \"optimizer.params.lr\"?", true},
  {"set-bad-value", "{\"steps\": 10}", {"engine.threads=abc"}, -EINVAL,
   "--set: engine.threads = \"abc\": must be an integer >= 0", true},
  {"set-section-unknown", "{}", {"optimizer={\"lr\": 1}"}, -EINVAL,
   "--set: unknown key \"optimizer.lr\"; did you mean \"optimizer.params.lr\"?", true},
  {"set-later-wins", "{}", {"steps=5", "steps=-1"}, -EINVAL, "steps = -1", true},
  /* a key of an existing section is looked for in that section only (not
   * engine.trace.path, whose leaf is the same), else its keys are listed */
  {"set-in-section", "{}", {"lora.path=x"}, -EINVAL,
   "--set: unknown key \"lora.path\" (no key of lora is close to it; its keys: r, alpha, dropout", true},
  {"unknown-in-section", "{\"lora\": {\"init_frm\": \"x\"}}", {0}, -EINVAL,
   "unknown key \"lora.init_frm\"; did you mean \"lora.init_from\"?", false},
};

static int test_malformed(void) {
  int before = zo_test_n_expect_failed;
  size_t n_cases = sizeof bad_cases / sizeof bad_cases[0];
  EXPECT(n_cases >= 30);
  for (size_t i = 0; i < n_cases; i++) {
    const struct bad_case *bc = &bad_cases[i];
    char path[512] = "";
    int n_sets = 0;
    while (n_sets < 3 && bc->sets[n_sets]) n_sets++;
    if (bc->json && strcmp(bc->json, "@missing") == 0) {
      snprintf(path, sizeof path, "%s/does-not-exist.json", tmpdir);
    } else if (bc->json && strcmp(bc->json, "@dir") == 0) {
      snprintf(path, sizeof path, "%s", tmpdir);
    } else if (bc->json) {
      write_config(strcmp(bc->name, "syntax") == 0 ? "syntax-mark" : bc->name, bc->json, path,
                   sizeof path);
    }
    struct zo_config c;
    memset(&c, 0xab, sizeof c);
    int err = zo_config_load(&c, path[0] ? path : NULL, bc->sets, n_sets);
    const char *msg = zo_last_error();
    bool ok = err == bc->err && strstr(msg, bc->message) != NULL;
    if (ok && bc->from_set) ok = strncmp(msg, "--set", 5) == 0;
    if (ok && !bc->from_set) ok = strncmp(msg, path, strlen(path)) == 0;
    if (!ok) {
      fprintf(stderr, "bad case %s: got %d \"%s\", want %d with \"%s\"\n", bc->name, err, msg,
              bc->err, bc->message);
      zo_test_n_expect_failed++;
    }
    /* A failed load leaves nothing to free. */
    EXPECT(c.path == NULL && c.data.train == NULL && c.model.init_from == NULL);
    zo_config_free(&c);
  }

  /* The exact format of an unknown-key message, and file:line:column of a syntax error. */
  struct zo_config c;
  char path[512], want[640];
  write_config("x", "{\"optimizer\": {\"params\": {\"betas1\": 1}}}", path, sizeof path);
  EXPECT(zo_config_load(&c, path, NULL, 0) == -EINVAL);
  snprintf(want, sizeof want,
           "%s: unknown key \"optimizer.params.betas1\"; did you mean \"optimizer.params.betas\"?",
           path);
  EXPECT(streq(zo_last_error(), want));
  write_config("y", "{\n  \"steps\": 10,\n  \"log\": {\"every\": }\n}\n", path, sizeof path);
  EXPECT(zo_config_load(&c, path, NULL, 0) == -EINVAL);
  snprintf(want, sizeof want, "%s:3:", path);
  EXPECT(strncmp(zo_last_error(), want, strlen(want)) == 0);
  EXPECT(strstr(zo_last_error(), "JSON syntax error") != NULL);
  return zo_test_expect_failed_since(before);
}

static int test_set_overrides(void) {
  int before = zo_test_n_expect_failed;
  struct zo_config c;
  const char *file = "{\"steps\": 10, \"log\": {\"every\": 5}, \"model\": {\"vocab_size\": 256},"
                     " \"scheduler\": {\"type\": \"WarmupLR\"}}";
  const char *sets[] = {
    "steps=123",
    "steps=124",                            /* the later --set wins */
    "optimizer.params.lr=3e-4",             /* number */
    "optimizer.params.betas=[0.9,0.95]",    /* array */
    "bf16.enabled=true",                    /* boolean */
    "data.train=data/x.bin",                /* not JSON: a string */
    "data.val=\"quoted.bin\"",              /* a JSON string */
    "model.init_from=123",                  /* string key: the text as is */
    "engine.device=CPU",                    /* enum, case-insensitive */
    "engine.gpu_memory_budget=10GiB",       /* byte size */
    "engine.host_memory_budget=1048576",    /* byte size as a number */
    "zero_optimization.offload_optimizer={\"device\": \"cpu\", \"buffer_count\": 2}", /* object */
    "zero_optimization.stage=2",
    "log.every=null",                       /* back to the default */
    "scheduler=null",                       /* removes the file's scheduler */
    "checkpoint.dir=",                      /* empty string */
    "model.n_embd=64",
    "model.n_head=4",
  };
  int n_sets = (int)(sizeof sets / sizeof sets[0]);
  EXPECT(load_text(&c, "set-base", file, sets, n_sets) == 0);
  EXPECT(c.steps == 124 && c.optimizer.lr == 3e-4);
  EXPECT(c.optimizer.betas[0] == 0.9 && c.optimizer.betas[1] == 0.95);
  EXPECT(c.bf16 && streq(c.data.train, "data/x.bin") && streq(c.data.val, "quoted.bin"));
  EXPECT(streq(c.model.init_from, "123") && c.engine.device == ZO_DEVICE_CPU);
  EXPECT(c.engine.gpu_memory_budget == (size_t)10 << 30 && c.engine.host_memory_budget == 1 << 20);
  EXPECT(c.zero.stage == 2 && c.zero.offload_optimizer.device == ZO_OFFLOAD_CPU);
  EXPECT(c.zero.offload_optimizer.buffer_count == 2 && c.zero.offload_optimizer.pin_memory);
  EXPECT(c.log.every == 10 && c.scheduler.type == ZO_SCHEDULER_NONE);
  EXPECT(c.lr_schedule.kind == ZO_LR_CONSTANT && c.lr_schedule.lr == 3e-4);
  EXPECT(streq(c.checkpoint.dir, "") && c.model.spec.vocab_size == 256);
  EXPECT(c.model.spec.n_embd == 64 && c.model.spec.n_head == 4);
  zo_config_free(&c);

  /* --set without a file, and a section replaced whole. */
  const char *model_sets[] = {"model={\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 64}"};
  EXPECT(zo_config_load(&c, NULL, model_sets, ZO_ARRAY_LEN(model_sets)) == 0);
  EXPECT(c.model.spec.n_layer == 2 && c.model.spec.n_head == 2 && c.model.spec.n_embd == 64);
  EXPECT(c.model.spec.vocab_size == 50257);
  zo_config_free(&c);

  /* A --set fixes what the file got wrong. */
  const char *bad_embd = "{\"model\": {\"n_embd\": 100, \"n_head\": 3}}";
  EXPECT(load_text(&c, "set-fix", bad_embd, NULL, 0) == -EINVAL);
  const char *fix[] = {"model.n_head=5"};
  EXPECT(load_text(&c, "set-fix", bad_embd, fix, ZO_ARRAY_LEN(fix)) == 0);
  EXPECT(c.model.spec.n_head == 5);
  zo_config_free(&c);
  return zo_test_expect_failed_since(before);
}

/* Dumps cfg, loads the dump, and checks the config and the text are unchanged. */
static void check_round_trip(const struct zo_config *cfg, const char *name) {
  char path[512], path2[512];
  snprintf(path, sizeof path, "%s/%s.dump.json", tmpdir, name);
  snprintf(path2, sizeof path2, "%s/%s.dump2.json", tmpdir, name);
  FILE *f = fopen(path, "w");
  EXPECT(f != NULL && zo_config_dump(cfg, f) == 0);
  if (f) fclose(f);
  struct zo_config back;
  if (!EXPECT(zo_config_load(&back, path, NULL, 0) == 0)) {
    fprintf(stderr, "round trip of %s\n", name);
    return;
  }
  if (!EXPECT(config_equal(cfg, &back))) fprintf(stderr, "round trip of %s differs\n", name);
  f = fopen(path2, "w");
  EXPECT(f != NULL && zo_config_dump(&back, f) == 0);
  if (f) fclose(f);
  zo_config_free(&back);

  char a[8192] = "", b[8192] = "";
  f = fopen(path, "r");
  size_t na = f ? fread(a, 1, sizeof a - 1, f) : 0;
  if (f) fclose(f);
  f = fopen(path2, "r");
  size_t nb = f ? fread(b, 1, sizeof b - 1, f) : 0;
  if (f) fclose(f);
  EXPECT(na > 0 && na == nb && memcmp(a, b, na) == 0);
}

static int test_round_trip(void) {
  int before = zo_test_n_expect_failed;
  struct zo_config c;
  EXPECT(zo_config_load(&c, NULL, NULL, 0) == 0);
  check_round_trip(&c, "defaults");
  zo_config_free(&c);

  EXPECT(load_text(&c, "rt-every-key", every_key_json, NULL, 0) == 0);
  check_round_trip(&c, "every-key");
  zo_config_free(&c);

  const char *odd[] = {
    "optimizer.params.lr=0.1", "optimizer.params.eps=3.0000000000000004e-08",
    "optimizer.params.betas=[0, 0.30000000000000004]", "engine.gpu_memory_budget=12345",
    "engine.host_memory_budget=3KiB", "aio.block_size=\"1.5MiB\"", "engine.seed=0",
    "scheduler.type=WarmupLR", "scheduler.params.warmup_min_lr=1e-7",
    "model.init_from=a\\\"b\tc\x01", "fp16.enabled=true", "fp16.loss_scale=1e300",
  };
  EXPECT(zo_config_load(&c, NULL, odd, (int)(sizeof odd / sizeof odd[0])) == 0);
  EXPECT(streq(c.model.init_from, "a\\\"b\tc\x01") && c.aio.block_size == 3 << 19);
  check_round_trip(&c, "odd-values");
  zo_config_free(&c);

  const char *decay[] = {"scheduler.type=WarmupDecayLR", "scheduler.params.warmup_max_lr=0.02",
                         "scheduler.params.warmup_num_steps=10", "steps=20"};
  EXPECT(zo_config_load(&c, NULL, decay, ZO_ARRAY_LEN(decay)) == 0);
  check_round_trip(&c, "decay");
  zo_config_free(&c);

  /* The dump leaves out the scheduler when it is "none". */
  EXPECT(zo_config_load(&c, NULL, NULL, 0) == 0);
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  EXPECT(mem != NULL && zo_config_dump(&c, mem) == 0);
  if (mem) fclose(mem);
  EXPECT(text && strstr(text, "\"scheduler\"") == NULL);
  EXPECT(text && strstr(text, "\"train_micro_batch_size_per_gpu\": 1,") != NULL);
  EXPECT(text && strstr(text, "\"block_size\": \"1MiB\"") != NULL);
  free(text);
  zo_config_free(&c);
  return zo_test_expect_failed_since(before);
}

static int test_shipped_configs(void) {
  int before = zo_test_n_expect_failed;
  struct zo_config c;
  EXPECT(zo_config_load(&c, ZO_TEST_DIR "/../configs/tiny.json", NULL, 0) == 0);
  const struct zo_model_config *m = &c.model.spec;
  long params = 12L * m->n_layer * m->n_embd * m->n_embd +
                (long)(m->padded_vocab_size + m->max_seq_len) * m->n_embd;
  EXPECT(params > 1500000 && params < 4000000);
  EXPECT(m->vocab_size == 256 && c.data.format == ZO_DATA_U16 && c.data.seq_len <= m->max_seq_len);
  EXPECT(c.scheduler.type == ZO_SCHEDULER_WARMUP_COSINE_LR && c.gradient_clipping == 1.0);
  EXPECT(streq(c.data.train, "data/tiny/train.bin") && streq(c.checkpoint.dir, "runs/tiny"));
  EXPECT(c.log.every == 10);
  check_round_trip(&c, "tiny");
  zo_config_free(&c);

  EXPECT(zo_config_load(&c, ZO_TEST_DIR "/../configs/gpt2-124m.json", NULL, 0) == 0);
  EXPECT(c.model.spec.n_layer == 12 && c.model.spec.n_head == 12 && c.model.spec.n_embd == 768);
  EXPECT(c.model.spec.vocab_size == 50257 && c.model.spec.max_seq_len == 1024);
  check_round_trip(&c, "gpt2-124m");
  zo_config_free(&c);
  return zo_test_expect_failed_since(before);
}

/* Vocabularies above 65536 (Llama 3's 128256) need uint32 ids: "u32", or
 * "llmc", whose header says which width its shard holds. */
static int test_wide_vocab(void) {
  int before = zo_test_n_expect_failed;
  struct zo_config c;
  const char *u32[] = {"model.vocab_size=128256", "data.format=u32"};
  EXPECT(zo_config_load(&c, NULL, u32, ZO_ARRAY_LEN(u32)) == 0);
  EXPECT(c.data.format == ZO_DATA_U32 && c.model.spec.vocab_size == 128256);
  check_round_trip(&c, "u32");
  zo_config_free(&c);
  const char *llmc[] = {"model.vocab_size=128256", "data.format=llmc"};
  EXPECT(zo_config_load(&c, NULL, llmc, ZO_ARRAY_LEN(llmc)) == 0);
  EXPECT(c.data.format == ZO_DATA_LLMC);
  zo_config_free(&c);
  return zo_test_expect_failed_since(before);
}

static int test_parse_bytes(void) {
  int before = zo_test_n_expect_failed;
  static const struct { const char *text; size_t bytes; } good[] = {
    {"0", 0}, {"1048576", 1048576}, {"512MiB", (size_t)512 << 20}, {"10GiB", (size_t)10 << 30},
    {"1.5GB", 1500000000}, {"1.5GiB", (size_t)3 << 29}, {"4K", 4096}, {"4KB", 4000},
    {"4kib", 4096}, {"2M", (size_t)2 << 20}, {"3MB", 3000000}, {"1T", (size_t)1 << 40},
    {"2TB", 2000000000000}, {"1TiB", (size_t)1 << 40}, {"7B", 7}, {"10 GiB", (size_t)10 << 30},
    {" 8g ", (size_t)8 << 30}, {"0.5KiB", 512}, {"0.1KB", 100}, {"1.0001KiB", 1024},
    {"18446744073709551615", SIZE_MAX},
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    size_t n = 12345;
    int err = zo_parse_bytes(good[i].text, &n);
    if (!EXPECT(err == 0 && n == good[i].bytes))
      fprintf(stderr, "zo_parse_bytes(\"%s\") = %d, %zu\n", good[i].text, err, n);
  }
  static const char *const bad[] = {
    "", " ", "GiB", "-1", "+1", "1.5", "1.5B", "1e9", "10 gigs", "1GiBs", "1 2", "0x10",
    ".5GiB", "1.GiB", "18446744073709551616", "17179869184GiB", "99999999999999999999999", "1Q",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    size_t n = 12345;
    int err = zo_parse_bytes(bad[i], &n);
    if (!EXPECT(err == -EINVAL && n == 12345 && strstr(zo_last_error(), "not a byte size")))
      fprintf(stderr, "zo_parse_bytes(\"%s\") = %d, %zu\n", bad[i], err, n);
  }
  return zo_test_expect_failed_since(before);
}

/* aio.thread_count, single_submit and overlap_events are DeepSpeed's and do
 * nothing here: set, each loads with one warning line naming it, its value
 * and why; unset (or null), nothing, as for the keys in use. */
static int test_ignored_keys(void) {
  int before = zo_test_n_expect_failed;
  struct zo_config c;
  char *printed;
  const char *thread_count[] = {"aio.thread_count=4"};
  EXPECT(load_capturing(&c, NULL, thread_count, ZO_ARRAY_LEN(thread_count), &printed) == 0);
  EXPECT(c.aio.thread_count == 4);
  EXPECT(streq(printed, "zoffload: warning: --set: aio.thread_count = 4 is accepted for DeepSpeed compatibility "
                        "and has no effect: zoffload's NVMe tier submits from one io_uring per store\n"));
  free(printed);
  /* The effective config leaves the ignored keys out, so it reloads quietly. */
  char *dumped = NULL;
  size_t dumped_len = 0;
  FILE *mem = open_memstream(&dumped, &dumped_len);
  EXPECT(mem != NULL && zo_config_dump(&c, mem) == 0);
  if (mem) fclose(mem);
  EXPECT(dumped && strstr(dumped, "\"queue_depth\"") && !strstr(dumped, "thread_count") &&
         !strstr(dumped, "single_submit") && !strstr(dumped, "overlap_events"));
  free(dumped);
  zo_config_free(&c);

  EXPECT(load_capturing(&c, "{\"aio\": {\"single_submit\": true}}", NULL, 0, &printed) == 0);
  EXPECT(c.aio.single_submit);
  EXPECT(strstr(printed, "capture.json: aio.single_submit = true is accepted for DeepSpeed compatibility") &&
         strchr(printed, '\n') == printed + strlen(printed) - 1);
  free(printed);
  zo_config_free(&c);

  const char *unset[] = {"aio.block_size=4096", "aio.queue_depth=4", "aio.overlap_events=false",
                         "aio.overlap_events=null"};
  EXPECT(load_capturing(&c, NULL, unset, ZO_ARRAY_LEN(unset), &printed) == 0);
  EXPECT(c.aio.overlap_events && c.aio.queue_depth == 4);
  EXPECT(streq(printed, ""));
  free(printed);
  zo_config_free(&c);
  return zo_test_expect_failed_since(before);
}

int main(void) {
  if (zo_test_mkdtemp(tmpdir, sizeof tmpdir, "config")) return 1;
  static const struct zo_test tests[] = {
      ZO_TEST(defaults),
      ZO_TEST(every_key),
      ZO_TEST(schedulers),
      ZO_TEST(malformed),
      ZO_TEST(set_overrides),
      ZO_TEST(round_trip),
      ZO_TEST(shipped_configs),
      ZO_TEST(wide_vocab),
      ZO_TEST(ignored_keys),
      ZO_TEST(parse_bytes),
  };
  struct zo_test_counts counts = zo_test_run(tests, sizeof tests / sizeof tests[0]);
  zo_test_rmtree(tmpdir);
  return zo_test_report(counts);
}
