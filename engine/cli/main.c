/* zoffload command line: train, eval, sample, plan, bench, config, prepare,
 * trace, export, env.
 * Exit codes: 0 success, 1 runtime error (data, I/O, memory), 2 bad usage or
 * bad config. Only this file (and tests, benchmarks) calls exit(). Under an
 * MPI launcher (mpirun -np N) train and bench step run data parallel over
 * the N ranks; a rank that fails ends the whole job (MPI_Abort), because
 * the others may be waiting for it in a collective. The other commands run
 * in each process on its own. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zo/autoplan.h"
#include "zo/bench.h"
#include "zo/comm.h"
#include "zo/config.h"
#include "zo/data.h"
#include "zo/env.h"
#include "zo/launcher.h"
#include "zo/nvme.h"
#include "zo/plan.h"
#include "zo/prepare.h"
#include "zo/sample.h"
#include "zo/trace_file.h"
#include "zo/train.h"

#include "tokenizer_cli.h"

#define MAX_SETS 256

static const char *usage_main =
    "usage: zoffload <command> [options]\n"
    "\n"
    "commands:\n"
    "  train CONFIG    train a model (configs/tiny.json is the small real-text default)\n"
    "  eval CONFIG     validation loss of a checkpoint, forward only\n"
    "  sample CONFIG   generate text from a checkpoint\n"
    "  plan CONFIG     bytes per memory tier and category, and whether they fit\n"
    "  bench WHAT      benchmarks: adamw, nvme, step CONFIG, memory CONFIG, tokenize, calibrate\n"
    "  config CONFIG   print the effective config with defaults filled in\n"
    "  prepare         text or JSON lines -> token files (byte-level, or --tokenizer: BPE ids + loss masks)\n"
    "  trace summary FILE  per-step summary of a timeline written by --trace\n"
    "  export CHECKPOINT --out DIR  a weights-only Hugging Face directory of a checkpoint\n"
    "  env             version, build features, GPU, host memory, NUMA (for bug reports)\n"
    "  tokenizer train|encode|decode  Hugging Face tokenizer.json: learn one, encode, decode\n"
    "\n"
    "Every command taking CONFIG accepts --set key.path=value (repeatable).\n"
    "`zoffload <command> --help` describes a command.\n";

static const char *usage_train =
    "usage: zoffload train CONFIG [--set key=value]... [--resume DIR|auto] [--overwrite] [--sample N]\n"
    "                      [--memory-report] [--trace FILE]\n"
    "  --set key=value   override a config key (JSON value, or a plain string)\n"
    "  --resume DIR      continue exactly from checkpoint directory DIR; 'auto' takes the\n"
    "                    latest checkpoint-<step> under checkpoint.dir\n"
    "  --overwrite       start a fresh run in a checkpoint.dir that holds another run's checkpoints\n"
    "                    (or a non-empty log.metrics_path): removes them first, saying so. Without it\n"
    "                    such a run is refused; a checkpoint.dir is locked by the run writing to it\n"
    "  SIGINT / SIGTERM  finish the step, save a checkpoint, exit 130 / 143; a second one exits at once\n"
    "  --sample N        generate N tokens after training (byte-level models print text)\n"
    "  --memory-report   print the memory plan (device, host, nvme) before anything is allocated;\n"
    "                    every run ends with the memory report (planned, peak, current)\n"
    "  --set engine.placement=auto  train the best plan of `zoffload plan CONFIG --auto` (DeepSpeed's\n"
    "                    \"auto\" micro-batch or accumulation: only their split); the chosen --set lines\n"
    "                    and the effective config are printed and written to checkpoint.dir/auto-config.json\n"
    "  --trace FILE      write a timeline of steps engine.trace.first_step .. + engine.trace.steps - 1\n"
    "                    (default 2, 3) as Chrome trace-event JSON (Perfetto, chrome://tracing):\n"
    "                    every stream's tasks, copies, NVMe requests, waits; CPU backend only.\n"
    "                    Same as --set engine.trace.path=FILE\n"
    "  under mpirun -np N: N data-parallel ranks on the CPU backend, train_micro_batch_size_per_gpu\n"
    "  rows each; the optimizer state is replicated on every rank at zero_optimization.stage 0 and\n"
    "  sharded over the ranks at stage >= 1 (each rank then saves its shard); rank 0 prints, logs\n"
    "  and saves the rest\n";

static const char *usage_eval =
    "usage: zoffload eval CONFIG [--set key=value]... [--checkpoint DIR] [--batches N] [--random-init]\n"
    "  --checkpoint DIR  checkpoint directory or safetensors file (default: --set model.init_from=FILE\n"
    "                    when given, else the latest under checkpoint.dir, else the config's\n"
    "                    model.init_from); the weights used are named on stderr\n"
    "  --random-init     with none of those, use the seeded random initialisation (else refused)\n"
    "  --batches N       micro-batches of data.val to average (default: up to 20)\n";

static const char *usage_sample =
    "usage: zoffload sample CONFIG [--set key=value]... [--checkpoint DIR] [--prompt TEXT]\n"
    "                       [--tokens N] [--temperature T] [--top-k K] [--seed S] [--random-init]\n"
    "  --checkpoint DIR, --random-init: as for eval (the weights used are named on stderr)\n"
    "  defaults: --tokens 256 --temperature 0.8 --top-k 40 --seed engine.seed\n"
    "  for vocabularies other than 256 bytes, --prompt is comma-separated token ids\n";

static const char *usage_plan =
    "usage: zoffload plan CONFIG [--set key=value]... [--ranks N] [--placements [--host-ram 24GiB,128GiB]]\n"
    "       zoffload plan CONFIG --auto [--set key=value]... [--nvme-path DIR] [--json]\n"
    "                    [--host-ram SIZE] [--nvme-free SIZE] [--backend cpu|cuda]\n"
    "  prints the bytes each tier (device, host, nvme) needs per category for the config's\n"
    "  placement, before anything is allocated, and whether each fits its budget\n"
    "  (engine.gpu_memory_budget, engine.host_memory_budget, free space on nvme_path).\n"
    "  Exit code 0 when it fits, 1 (with the changes that would fit) when not, also when this\n"
    "  machine's available memory (MemAvailable, the cgroup limit) cannot hold the host pool (train\n"
    "  refuses that too, before allocating)\n"
    "  --ranks N: the plan of each of N data-parallel ranks (mpirun -np N); with\n"
    "  zero_optimization.stage >= 1 the optimizer is sharded, so each rank's differs: the\n"
    "  largest rank's is printed in full, every rank's totals in one line each\n"
    "  --placements: one row per standard placement (all on the device, optimizer on cpu or\n"
    "  nvme, parameters on cpu too) with its device, host and NVMe bytes, whether the device\n"
    "  budget fits and whether the host pool fits each --host-ram size (default 24GiB,128GiB)\n"
    "  --auto: searches combined changes (micro-batch x accumulation at the same global batch,\n"
    "  activation checkpointing, bf16, optimizer and parameter placement on device/cpu/nvme,\n"
    "  parameter slots), keeps those that fit the device budget, the host budget (or what this\n"
    "  machine has available) and the NVMe directory's free space, and ranks them by predicted\n"
    "  step time (rates of `zoffload bench calibrate`, else defaults, said in the output); each\n"
    "  with its bytes per tier, bottleneck and --set lines. 8-bit optimizer states are suggested,\n"
    "  never chosen. --nvme-path DIR: where NVMe placements would live (default: the config's\n"
    "  nvme_path, else the working directory; none: no NVMe placements). --json: the last line\n"
    "  is a JSON list of the candidates that fit, best first.\n"
    "  For another machine than this one: --host-ram SIZE (its available host memory, instead of\n"
    "  MemAvailable and the cgroup limit), --nvme-free SIZE (its NVMe directory's free space; the\n"
    "  directory need not exist here), --backend cuda|cpu (its backend's memory model and rates:\n"
    "  with cuda on a machine without a GPU the device budget is engine.gpu_memory_budget)\n"
    "  Exit code 0 when a candidate fits, 1 when none does (naming the short tier and by how much)\n";

static const char *usage_bench =
    "usage: zoffload bench adamw [--params N] [--threads T] [--reps R] [--optimizer AdamW|AdamW8bit] [--json]\n"
    "       zoffload bench nvme --path DIR [--bytes N] [--block N] [--queue-depth Q] [--json]\n"
    "       zoffload bench step CONFIG [--set key=value]... [--steps N] [--trace FILE] [--json]\n"
    "       zoffload bench memory CONFIG [--set key=value]... [--json]\n"
    "       zoffload bench tokenize [--tokenizer PATH] [--threads N] [--reps R] [FILE...]\n"
    "       zoffload bench calibrate [--nvme-path DIR] [--json]\n"
    "  adamw: CPU AdamW parameters/s against a loop with the same memory traffic\n"
    "         (default 64M parameters, 9 repetitions, all threads); AdamW8bit: the 8-bit update\n"
    "         and the fp32 one in the same run, their ratio, bytes moved and state bytes per param\n"
    "  nvme:  sequential write then read through the NVMe tier (default 1 GiB, 1 MiB\n"
    "         blocks, queue depth 32)\n"
    "  step:  step time with the config's placement vs everything on the device, and\n"
    "         overlap efficiency = step / max(compute alone, I/O alone, optimizer alone);\n"
    "         under mpirun -np N also tokens/s per rank and in total and the time in communication;\n"
    "         --trace FILE also times the configured steps with the timeline recording (the cost of\n"
    "         tracing, side by side) and writes the last round's timeline to FILE\n"
    "  memory: device bytes planned and measured (schedulers built, no step run) for fp32 all on\n"
    "         device (unchunked head from the plan, chunked head), bf16, + activation checkpointing,\n"
    "         + optimizer offload, + parameter offload, all combined\n"
    "  calibrate: the rates `plan --auto` predicts step time with (GEMM and attention FLOP/s at\n"
    "         model widths in fp32 and bf16, elementwise and copy GB/s, CPU AdamW fp32 and 8-bit\n"
    "         parameters/s, with --nvme-path the NVMe store's read and write GB/s), written to\n"
    "         $XDG_CACHE_HOME/zoffload (or ~/.cache/zoffload), one profile per machine and backend\n"
    "  --json makes the last line one JSON object (memory: one JSON object per row).\n";

static const char *usage_env =
    "usage: zoffload env [--nvme-path DIR]\n"
    "  the version and build features (CUDA architectures, NCCL, MPI, io_uring, hwloc, ISA-L),\n"
    "  the BLAS and its core type, the SIMD kernels this CPU gets, the GPU with its free memory\n"
    "  and driver, host memory and the memlock limit, NUMA nodes; paste it into bug reports\n"
    "  --nvme-path DIR   also DIR's file system and free space, whether O_DIRECT works there (a\n"
    "                    probe file is written and removed) and the NVMe tier's I/O engine\n";

static const char *usage_export =
    "usage: zoffload export CHECKPOINT --out DIR [--dtype fp32|bf16|fp16] [--max-shard-size 5GB]\n"
    "  writes the weights of CHECKPOINT (a checkpoint-<step> directory, checksums verified, or a\n"
    "  Hugging Face directory) to DIR as a Hugging Face model directory: config.json and\n"
    "  model.safetensors, or model-0000k-of-0000n.safetensors and model.safetensors.index.json\n"
    "  past --max-shard-size (default 5GB; GB = 1e9 bytes, GiB = 2^30). No optimizer state.\n"
    "  DIR must be new (only its last component is created) or empty.\n"
    "  --dtype  tensor dtype in the files (default fp32: the saved values exactly; bf16 and fp16\n"
    "           round to nearest even). Streamed tensor by tensor: a few MiB of host memory\n"
    "           whatever the model's size\n"
    "  load it with transformers' from_pretrained(DIR) or --set model.init_from=DIR\n";

static const char *usage_config = "usage: zoffload config CONFIG [--set key=value]...\n";

static const char *usage_prepare =
    "usage: zoffload prepare --out-train FILE [--out-val FILE] [--val-fraction F] TEXTFILE...\n"
    "  concatenates the text files' bytes into byte-level tokens (vocab 256) and writes\n"
    "  flat uint16 token files (data.format \"u16\"); the last F of the stream (default 0.05)\n"
    "  goes to --out-val\n"
    "   or: zoffload prepare --tokenizer PATH --out-train FILE [--out-val FILE] [--val-fraction F]\n"
    "                        [--format u16|u32|llmc|llmc32] [--separator STR]\n"
    "                        [--field KEY | --prompt-field KEY --completion-field KEY |\n"
    "                         --messages-field KEY] FILE...\n"
    "  encodes documents with a tokenizer (tokenizer.json, or a model directory holding it),\n"
    "  the tokenizer's end-of-text token after each: a text file is one document (or one per\n"
    "  piece between --separator STR, e.g. $'\\n%\\n'); *.jsonl files (or any file with a --*field\n"
    "  option) hold one JSON object a line: its --field (default \"text\") is the document, or\n"
    "  --prompt-field and --completion-field make instruction data: FILE.mask beside each output\n"
    "  trains only the completion tokens (and the end-of-text after them); --messages-field names a\n"
    "  list of {role, content} rendered with the tokenizer's chat template (tokenizer_config.json),\n"
    "  the assistant turns trained. The last F of the\n"
    "  documents (default 0.05) go to --out-val. --format u16 (default) refuses ids above 65535.\n"
    "  Threads: OMP_NUM_THREADS (default all)\n";

static int fail(int code, const char *what) {
  fprintf(stderr, "zoffload: %s%s%s\n", what ? what : "", what ? ": " : "", zo_last_error());
  return code;
}

static int bad_usage(const char *usage, const char *fmt, const char *arg) {
  fprintf(stderr, "zoffload: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n%s", usage);
  return 2;
}

/* The communicator of train and bench step: MPI when started by an MPI
 * launcher (and built with MPI), else one process. NULL after printing why. */
static zo_comm_t job_comm(const char *what) {
  zo_comm_t c = zo_comm_init("auto");
  if (!c) fail(1, what);
  return c;
}

/* A failed command of a job: over several ranks the others may wait for
 * this one in a collective, so the job ends here (MPI_Abort); with one rank
 * the message and the exit code as usual. */
static int job_fail(zo_comm_t comm, int code, const char *what) {
  if (zo_comm_size(comm) > 1) {
    fprintf(stderr, "zoffload: rank %d of %d: %s: %s (ending every rank)\n", zo_comm_rank(comm),
            zo_comm_size(comm), what, zo_last_error());
    zo_comm_abort(comm, code);
  }
  fail(code, what);
  zo_comm_free(comm);
  return code;
}

/* Exit code for an engine error: config-level errors are usage errors. */
static int exit_code(int err) { return err == -EINVAL || err == -ENOTSUP ? 2 : 1; }

static bool parse_int(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

static bool parse_double(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end) return false;
  *out = v;
  return true;
}

/* Every option of every command; each command allows a subset. */
enum opt {
  OPT_END = 0,
  OPT_SET = 1000, OPT_RESUME, OPT_SAMPLE, OPT_MEMORY_REPORT, OPT_CHECKPOINT, OPT_BATCHES, OPT_PROMPT,
  OPT_TOKENS, OPT_TEMPERATURE, OPT_TOP_K, OPT_SEED, OPT_OUT_TRAIN, OPT_OUT_VAL, OPT_VAL_FRACTION,
  OPT_JSON, OPT_STEPS, OPT_PARAMS, OPT_THREADS, OPT_REPS, OPT_OPTIMIZER, OPT_PATH, OPT_BYTES, OPT_BLOCK,
  OPT_QUEUE_DEPTH, OPT_PLACEMENTS, OPT_HOST_RAM, OPT_RANKS, OPT_TRACE, OPT_OVERWRITE, OPT_RANDOM_INIT,
  OPT_NVME_PATH, OPT_OUT, OPT_DTYPE, OPT_MAX_SHARD_SIZE, OPT_NVME_FREE, OPT_BACKEND,
  OPT_TOKENIZER, OPT_FIELD, OPT_PROMPT_FIELD, OPT_COMPLETION_FIELD, OPT_MESSAGES_FIELD, OPT_SEPARATOR,
  OPT_FORMAT, OPT_AUTO,
};

static const struct option all_options[] = {
    {"set", required_argument, NULL, OPT_SET},
    {"resume", required_argument, NULL, OPT_RESUME},
    {"sample", required_argument, NULL, OPT_SAMPLE},
    {"memory-report", no_argument, NULL, OPT_MEMORY_REPORT},
    {"checkpoint", required_argument, NULL, OPT_CHECKPOINT},
    {"batches", required_argument, NULL, OPT_BATCHES},
    {"prompt", required_argument, NULL, OPT_PROMPT},
    {"tokens", required_argument, NULL, OPT_TOKENS},
    {"temperature", required_argument, NULL, OPT_TEMPERATURE},
    {"top-k", required_argument, NULL, OPT_TOP_K},
    {"seed", required_argument, NULL, OPT_SEED},
    {"out-train", required_argument, NULL, OPT_OUT_TRAIN},
    {"out-val", required_argument, NULL, OPT_OUT_VAL},
    {"val-fraction", required_argument, NULL, OPT_VAL_FRACTION},
    {"json", no_argument, NULL, OPT_JSON},
    {"steps", required_argument, NULL, OPT_STEPS},
    {"params", required_argument, NULL, OPT_PARAMS},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"reps", required_argument, NULL, OPT_REPS},
    {"optimizer", required_argument, NULL, OPT_OPTIMIZER},
    {"path", required_argument, NULL, OPT_PATH},
    {"bytes", required_argument, NULL, OPT_BYTES},
    {"block", required_argument, NULL, OPT_BLOCK},
    {"queue-depth", required_argument, NULL, OPT_QUEUE_DEPTH},
    {"placements", no_argument, NULL, OPT_PLACEMENTS},
    {"host-ram", required_argument, NULL, OPT_HOST_RAM},
    {"ranks", required_argument, NULL, OPT_RANKS},
    {"trace", required_argument, NULL, OPT_TRACE},
    {"overwrite", no_argument, NULL, OPT_OVERWRITE},
    {"random-init", no_argument, NULL, OPT_RANDOM_INIT},
    {"nvme-path", required_argument, NULL, OPT_NVME_PATH},
    {"out", required_argument, NULL, OPT_OUT},
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {"max-shard-size", required_argument, NULL, OPT_MAX_SHARD_SIZE},
    {"tokenizer", required_argument, NULL, OPT_TOKENIZER},
    {"field", required_argument, NULL, OPT_FIELD},
    {"prompt-field", required_argument, NULL, OPT_PROMPT_FIELD},
    {"completion-field", required_argument, NULL, OPT_COMPLETION_FIELD},
    {"messages-field", required_argument, NULL, OPT_MESSAGES_FIELD},
    {"separator", required_argument, NULL, OPT_SEPARATOR},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"auto", no_argument, NULL, OPT_AUTO},
    {"nvme-free", required_argument, NULL, OPT_NVME_FREE},
    {"backend", required_argument, NULL, OPT_BACKEND},
};
#define N_OPTIONS (sizeof all_options / sizeof all_options[0])

enum positional { POS_CONFIG, POS_FILES, POS_NONE };

struct args {
  const char *config;
  const char *sets[MAX_SETS];
  int n_sets;
  const char *resume, *checkpoint, *prompt, *out_train, *out_val, *optimizer, *path, *nvme_path, *out;
  enum zo_dtype dtype;   /* export --dtype */
  size_t max_shard_size; /* export --max-shard-size, bytes */
  long sample, batches, tokens, top_k, seed, steps, params, threads, reps, queue_depth, ranks;
  size_t bytes, block;
  bool memory_report, seed_given, json, placements, overwrite, random_init, autoplan;
  size_t host_ram[8]; /* --host-ram sizes */
  size_t nvme_free;   /* plan --auto --nvme-free, bytes */
  const char *backend; /* plan --auto --backend cpu|cuda */
  int n_host_ram;
  double temperature, val_fraction;
  char trace_set[4200];      /* --trace FILE as "engine.trace.path=FILE" */
  const char *const *inputs; /* (n_inputs) text files for prepare */
  const char *tokenizer, *field, *prompt_field, *completion_field, *messages_field, *separator, *format;
  int n_inputs;
};

/* Stores one option's value; returns 0 or 2 after printing a usage error. */
static int store_option(int id, const char *v, const char *usage, struct args *a) {
  switch (id) {
  case OPT_SET:
    if (a->n_sets == MAX_SETS) return bad_usage(usage, "too many --set options (max %s)", "256");
    a->sets[a->n_sets++] = v;
    return 0;
  case OPT_RESUME: a->resume = v; return 0;
  case OPT_TRACE:
    if (strlen(v) > sizeof a->trace_set - 32) return bad_usage(usage, "--trace %s: the path is too long", v);
    if (a->n_sets == MAX_SETS) return bad_usage(usage, "too many --set options (max %s)", "256");
    snprintf(a->trace_set, sizeof a->trace_set, "engine.trace.path=%s", v); /* a plain string */
    a->sets[a->n_sets++] = a->trace_set;
    return 0;
  case OPT_CHECKPOINT: a->checkpoint = v; return 0;
  case OPT_PROMPT: a->prompt = v; return 0;
  case OPT_OUT_TRAIN: a->out_train = v; return 0;
  case OPT_OUT_VAL: a->out_val = v; return 0;
  case OPT_PATH: a->path = v; return 0;
  case OPT_NVME_PATH: a->nvme_path = v; return 0;
  case OPT_OUT: a->out = v; return 0;
  case OPT_DTYPE:
    if (!strcmp(v, "fp32") || !strcmp(v, "float32")) a->dtype = ZO_F32;
    else if (!strcmp(v, "bf16") || !strcmp(v, "bfloat16")) a->dtype = ZO_BF16;
    else if (!strcmp(v, "fp16") || !strcmp(v, "float16")) a->dtype = ZO_F16;
    else return bad_usage(usage, "--dtype %s: valid: fp32, bf16, fp16", v);
    return 0;
  case OPT_MAX_SHARD_SIZE:
    return zo_parse_bytes(v, &a->max_shard_size) == 0 && a->max_shard_size > 0
               ? 0 : bad_usage(usage, "--max-shard-size %s: need a size such as 5GB or 500MiB", v);
  case OPT_TOKENIZER: a->tokenizer = v; return 0;
  case OPT_FIELD: a->field = v; return 0;
  case OPT_PROMPT_FIELD: a->prompt_field = v; return 0;
  case OPT_COMPLETION_FIELD: a->completion_field = v; return 0;
  case OPT_MESSAGES_FIELD: a->messages_field = v; return 0;
  case OPT_SEPARATOR: a->separator = v; return 0;
  case OPT_FORMAT: a->format = v; return 0;
  case OPT_MEMORY_REPORT: a->memory_report = true; return 0;
  case OPT_OVERWRITE: a->overwrite = true; return 0;
  case OPT_RANDOM_INIT: a->random_init = true; return 0;
  case OPT_JSON: a->json = true; return 0;
  case OPT_PLACEMENTS: a->placements = true; return 0;
  case OPT_AUTO: a->autoplan = true; return 0;
  case OPT_NVME_FREE:
    return zo_parse_bytes(v, &a->nvme_free) == 0 && a->nvme_free > 0
               ? 0 : bad_usage(usage, "--nvme-free %s: need a size such as 2TB or 500GiB", v);
  case OPT_BACKEND:
    if (strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0) return bad_usage(usage, "--backend %s: valid: cpu, cuda", v);
    a->backend = v;
    return 0;
  case OPT_HOST_RAM: {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    a->n_host_ram = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
      if (a->n_host_ram == 8 || zo_parse_bytes(tok, &a->host_ram[a->n_host_ram]) != 0 ||
          a->host_ram[a->n_host_ram] == 0)
        return bad_usage(usage, "--host-ram %s: need up to 8 comma-separated sizes such as 24GiB,128GiB", v);
      a->n_host_ram++;
    }
    return a->n_host_ram ? 0 : bad_usage(usage, "--host-ram %s: need sizes such as 24GiB,128GiB", v);
  }
  case OPT_OPTIMIZER:
    if (strcmp(v, "AdamW") != 0 && strcmp(v, "AdamW8bit") != 0)
      return bad_usage(usage, "--optimizer %s: valid: AdamW, AdamW8bit", v);
    a->optimizer = v;
    return 0;
  case OPT_SAMPLE:
    return parse_int(v, 0, 1 << 20, &a->sample) ? 0 : bad_usage(usage, "--sample %s: need an integer in [0, 1048576]", v);
  case OPT_BATCHES:
    return parse_int(v, 1, 1 << 20, &a->batches) ? 0 : bad_usage(usage, "--batches %s: need an integer in [1, 1048576]", v);
  case OPT_TOKENS:
    return parse_int(v, 1, 1 << 20, &a->tokens) ? 0 : bad_usage(usage, "--tokens %s: need an integer in [1, 1048576]", v);
  case OPT_TOP_K:
    return parse_int(v, 0, 1 << 30, &a->top_k) ? 0 : bad_usage(usage, "--top-k %s: need an integer >= 0", v);
  case OPT_SEED:
    a->seed_given = true;
    return parse_int(v, 0, __LONG_MAX__, &a->seed) ? 0 : bad_usage(usage, "--seed %s: need an integer >= 0", v);
  case OPT_STEPS:
    return parse_int(v, 1, 100000, &a->steps) ? 0 : bad_usage(usage, "--steps %s: need an integer in [1, 100000]", v);
  case OPT_PARAMS:
    return parse_int(v, 1, 1l << 34, &a->params) ? 0 : bad_usage(usage, "--params %s: need an integer in [1, 2^34]", v);
  case OPT_RANKS:
    return parse_int(v, 1, 65536, &a->ranks) ? 0 : bad_usage(usage, "--ranks %s: need an integer in [1, 65536]", v);
  case OPT_THREADS:
    return parse_int(v, 0, 4096, &a->threads) ? 0 : bad_usage(usage, "--threads %s: need an integer in [0, 4096]", v);
  case OPT_REPS:
    return parse_int(v, 1, 1000, &a->reps) ? 0 : bad_usage(usage, "--reps %s: need an integer in [1, 1000]", v);
  case OPT_QUEUE_DEPTH:
    return parse_int(v, 1, ZO_NVME_MAX_QUEUE_DEPTH, &a->queue_depth)
               ? 0 : bad_usage(usage, "--queue-depth %s: need an integer in [1, the store's maximum]", v);
  case OPT_BYTES:
    return zo_parse_bytes(v, &a->bytes) == 0 && a->bytes > 0 ? 0 : bad_usage(usage, "--bytes %s: need a size such as 512MiB", v);
  case OPT_BLOCK:
    return zo_parse_bytes(v, &a->block) == 0 && a->block > 0 ? 0 : bad_usage(usage, "--block %s: need a size such as 1MiB", v);
  case OPT_TEMPERATURE:
    if (!parse_double(v, &a->temperature) || !(a->temperature > 0) || a->temperature > 100)
      return bad_usage(usage, "--temperature %s: need a number in (0, 100]", v);
    return 0;
  case OPT_VAL_FRACTION:
    if (!parse_double(v, &a->val_fraction) || a->val_fraction < 0 || a->val_fraction >= 1)
      return bad_usage(usage, "--val-fraction %s: need a number in [0, 1)", v);
    return 0;
  }
  zo_abort(__FILE__, __LINE__, "option id %d has no handler", id);
}

/* Parses argv[1..argc) with getopt_long, allowing the options listed in
 * `allowed` (terminated by OPT_END) plus --help. argv[0] names the command.
 * Returns 0, 1 for --help (printed), or 2 after printing a usage error. */
static int parse_args(int argc, char **argv, const char *usage, const int *allowed,
                      enum positional positional, struct args *a) {
  struct option opts[N_OPTIONS + 2];
  int n = 0;
  opts[n++] = (struct option){"help", no_argument, NULL, 'h'};
  for (const int *id = allowed; *id != OPT_END; id++)
    for (size_t k = 0; k < N_OPTIONS; k++)
      if (all_options[k].val == *id) opts[n++] = all_options[k];
  opts[n] = (struct option){0};
  opterr = 0;
  optind = 0; /* GNU: restart the scan for this argv */
  for (;;) {
    int c = getopt_long(argc, argv, ":h", opts, NULL);
    if (c == -1) break;
    if (c == 'h') {
      fputs(usage, stdout);
      return 1;
    }
    if (c == ':') return bad_usage(usage, "%s needs a value", argv[optind - 1]);
    if (c == '?') return bad_usage(usage, "unknown option %s", argv[optind - 1]);
    int err = store_option(c, optarg, usage, a);
    if (err) return err;
  }
  const int n_pos = argc - optind;
  if (positional == POS_FILES) {
    a->inputs = (const char *const *)argv + optind;
    a->n_inputs = n_pos;
    return 0;
  }
  if (positional == POS_NONE && n_pos > 0) return bad_usage(usage, "unexpected argument %s", argv[optind]);
  if (positional == POS_CONFIG) {
    if (n_pos == 0) return bad_usage(usage, "%s", "missing CONFIG");
    if (n_pos > 1) return bad_usage(usage, "unexpected argument %s", argv[optind + 1]);
    a->config = argv[optind];
  }
  return 0;
}

static int load_config(struct args *a, struct zo_config *cfg) {
  int err = zo_config_load(cfg, a->config, a->sets, a->n_sets);
  return err ? fail(2, NULL) : 0;
}

static const int train_opts[] = {OPT_SET, OPT_RESUME, OPT_OVERWRITE, OPT_SAMPLE, OPT_MEMORY_REPORT, OPT_TRACE,
                                 OPT_END};
static const int eval_opts[] = {OPT_SET, OPT_CHECKPOINT, OPT_BATCHES, OPT_RANDOM_INIT, OPT_END};
static const int sample_opts[] = {OPT_SET, OPT_CHECKPOINT, OPT_PROMPT, OPT_TOKENS, OPT_TEMPERATURE,
                                  OPT_TOP_K, OPT_SEED, OPT_RANDOM_INIT, OPT_END};

/* Whether a --set gave key (then it came from the command line). */
static bool set_on_command_line(const struct args *a, const char *key) {
  const size_t n = strlen(key);
  for (int i = 0; i < a->n_sets; i++)
    if (!strncmp(a->sets[i], key, n) && a->sets[i][n] == '=') return true;
  return false;
}
static const int set_opts[] = {OPT_SET, OPT_END};
static const int plan_opts[] = {OPT_SET,       OPT_PLACEMENTS, OPT_HOST_RAM, OPT_RANKS, OPT_AUTO,
                                OPT_NVME_PATH, OPT_NVME_FREE,  OPT_BACKEND,  OPT_JSON,  OPT_END};
static const int bench_calibrate_opts[] = {OPT_NVME_PATH, OPT_JSON, OPT_END};
static const int prepare_opts[] = {OPT_OUT_TRAIN, OPT_OUT_VAL, OPT_VAL_FRACTION, OPT_TOKENIZER, OPT_FIELD,
                                   OPT_PROMPT_FIELD, OPT_COMPLETION_FIELD, OPT_MESSAGES_FIELD, OPT_SEPARATOR,
                                   OPT_FORMAT, OPT_END};
static const int bench_adamw_opts[] = {OPT_PARAMS, OPT_THREADS, OPT_REPS, OPT_OPTIMIZER, OPT_JSON, OPT_END};
static const int bench_nvme_opts[] = {OPT_PATH, OPT_BYTES, OPT_BLOCK, OPT_QUEUE_DEPTH, OPT_JSON, OPT_END};
static const int bench_step_opts[] = {OPT_SET, OPT_STEPS, OPT_TRACE, OPT_JSON, OPT_END};
static const int bench_memory_opts[] = {OPT_SET, OPT_JSON, OPT_END};
static const int env_opts[] = {OPT_NVME_PATH, OPT_END};
static const int export_opts[] = {OPT_OUT, OPT_DTYPE, OPT_MAX_SHARD_SIZE, OPT_END};

static const char *device_arg(enum zo_device d);

/* engine.placement = "auto", or DeepSpeed's "auto" micro-batch or
 * accumulation: the planner's best candidate (only the batch split when the
 * placement is the config's) replaces cfg, whose effective config is printed
 * and written to checkpoint.dir/auto-config.json. Returns 0 or an exit code. */
static int train_auto(struct args *a, struct zo_config *cfg) {
  const bool placement = cfg->engine.placement == ZO_PLACEMENT_AUTO;
  if (!placement && !cfg->micro_batch_auto && !cfg->grad_accum_auto) return 0;
  zo_backend_t be = zo_backend_init(device_arg(cfg->engine.device), cfg->engine.threads);
  const bool cpu = !be || !strcmp(be->name, "cpu");
  struct zo_cost_profile prof;
  zo_cost_profile_load(&prof, cpu ? "cpu" : "cuda");
  struct zo_host_limit hl;
  zo_host_limit_read(&hl);
  /* Under an MPI launcher every rank must choose alike: the search then
   * depends on the config and the profile only (not on free memory read at
   * slightly different moments), and only rank 0 prints and writes. */
  int rank, size; /* size 0: a launcher that gives the rank only, so maybe several */
  const int launched = zo_launcher_rank_env(&rank, &size);
  if (launched < 0) return fail(2, "train");
  const bool ranks = launched && size != 1, lead = rank == 0;
  FILE *out = lead ? stdout : NULL;
  const struct zo_autoplan_opts o = {.config_path = a->config, .sets = a->sets, .n_sets = a->n_sets,
                                     .backend = ranks ? NULL : be, .profile = &prof,
                                     .host_limit = ranks ? 0 : hl.limit, .cpu_backend = cpu};
  struct zo_autoplan ap;
  int err = zo_autoplan_search(&o, &ap);
  if (err) return fail(exit_code(err), "train: engine.placement = \"auto\"");
  const struct zo_autoplan_candidate *best = NULL;
  for (int i = 0; i < ap.n_fit && !best; i++) {
    bool batch_only = true;
    for (int k = 0; k < ap.fit[i].n_sets; k++)
      batch_only = batch_only && (!strncmp(ap.fit[i].sets[k], "train_micro_batch_size_per_gpu=", 31) ||
                                  !strncmp(ap.fit[i].sets[k], "gradient_accumulation_steps=", 28));
    if (placement || batch_only) best = &ap.fit[i];
  }
  if (!best) {
    zo_autoplan_print(&ap, &prof, 5, stderr);
    zo_autoplan_free(&ap);
    fprintf(stderr, "zoffload: train: no candidate of the planner fits (above)\n");
    return 1;
  }
  if (out)
    fprintf(out, "auto plan (%s): %s, predicted %.1f ms per step, %.0f tokens/s (rates: %s)\n",
         placement ? "engine.placement = \"auto\"" : "\"auto\" micro-batch", best->what, best->cost.step_s * 1e3,
         best->tokens_per_s, prof.measured ? prof.source : "defaults");
  /* The chosen overrides after the user's, and the placement fixed. */
  static char chosen[ZO_AUTOPLAN_MAX_SETS][ZO_AUTOPLAN_SET_LEN];
  for (int k = 0; k < best->n_sets && a->n_sets < MAX_SETS - 1; k++) {
    memcpy(chosen[k], best->sets[k], sizeof chosen[k]);
    a->sets[a->n_sets++] = chosen[k];
    if (out) fprintf(out, "  --set %s\n", chosen[k]);
  }
  if (placement) a->sets[a->n_sets++] = "engine.placement=config";
  zo_autoplan_free(&ap);
  zo_config_free(cfg);
  err = zo_config_load_quiet(cfg, a->config, a->sets, a->n_sets);
  if (err) return fail(2, NULL);
  /* Fixed micro-batch and accumulation in the written config. */
  cfg->micro_batch_auto = cfg->grad_accum_auto = false;
  const char *dir = cfg->checkpoint.dir;
  char path[4200] = "";
  if (!out) return 0;
  if (dir && dir[0] && (mkdir(dir, 0755) == 0 || errno == EEXIST)) snprintf(path, sizeof path, "%s/auto-config.json", dir);
  FILE *f = path[0] ? fopen(path, "w") : NULL;
  printf("effective config%s%s%s:\n", f ? " (also written to " : "", f ? path : "", f ? ")" : "");
  zo_config_dump(cfg, stdout);
  if (f) {
    const int werr = zo_config_dump(cfg, f);
    if (fclose(f) != 0 || werr) fprintf(stderr, "zoffload: warning: could not write %s\n", path);
  } else if (dir && dir[0]) {
    fprintf(stderr, "zoffload: warning: could not write %s/auto-config.json: %s\n", dir, strerror(errno));
  }
  return 0;
}

static int cmd_train(int argc, char **argv) {
  struct args a = {0};
  int r = parse_args(argc, argv, usage_train, train_opts, POS_CONFIG, &a);
  if (r) return r == 1 ? 0 : r;
  struct zo_config cfg;
  if ((r = load_config(&a, &cfg))) return r;
  if ((r = train_auto(&a, &cfg))) {
    zo_config_free(&cfg);
    return r;
  }
  zo_comm_t comm = job_comm("train");
  if (!comm) {
    zo_config_free(&cfg);
    return 1;
  }
  if (a.overwrite && a.resume) {
    zo_config_free(&cfg);
    zo_comm_free(comm);
    return bad_usage(usage_train, "%s", "--overwrite starts a fresh run: it cannot go with --resume");
  }
  int sig = 0;
  struct zo_train_opts opts = {.resume = a.resume, .sample_tokens = (int)a.sample,
                               .memory_report = a.memory_report, .comm = comm, .overwrite = a.overwrite,
                               .stop_signal = &sig};
  int err = zo_train(&cfg, &opts);
  zo_config_free(&cfg);
  if (err && sig) {
    /* Stopped on request, after saving: the shell's convention for death by that signal. */
    fprintf(stderr, "zoffload: train: %s\n", zo_last_error());
    zo_comm_free(comm);
    return 128 + sig;
  }
  if (err) return job_fail(comm, exit_code(err), "train");
  zo_comm_free(comm);
  return 0;
}

static int cmd_eval(int argc, char **argv) {
  struct args a = {0};
  int r = parse_args(argc, argv, usage_eval, eval_opts, POS_CONFIG, &a);
  if (r) return r == 1 ? 0 : r;
  struct zo_config cfg;
  if ((r = load_config(&a, &cfg))) return r;
  struct zo_eval_result res;
  const struct zo_weights w = {.checkpoint = a.checkpoint,
                               .init_from_explicit = set_on_command_line(&a, "model.init_from"),
                               .random_init = a.random_init};
  /* Without data.val the loss is measured on data.train: the line says so. */
  const bool on_train = !cfg.data.val || !cfg.data.val[0];
  int err = zo_eval_weights(&cfg, &w, a.batches ? (int)a.batches : cfg.eval.steps, &res);
  zo_config_free(&cfg);
  if (err) return fail(exit_code(err), "eval");
  char d[32], t[32];
  printf("%s loss %.6f over %d batches%s | device %s (training would plan %s)\n", on_train ? "train" : "val",
         res.loss, res.n_batches, on_train ? " of data.train (no data.val: this measured the training data)" : "",
         zo_format_bytes(res.device_bytes, d), zo_format_bytes(res.train_device_bytes, t));
  printf("  loss per token %.6f over %zu trained targets; ", res.loss_per_token, res.n_tokens);
  if (res.n_bytes)
    printf("%.6f bits per byte (%zu tokens, %zu bytes of text: %.3f bytes per token%s)\n", res.bits_per_byte,
           res.n_tokens, res.n_bytes, (double)res.n_bytes / (double)res.n_tokens,
           res.has_tokenizer ? "" : "; byte-level data");
  else
    printf("bits per byte unknown: no tokenizer (set model.tokenizer) and not byte-level data\n");
  return 0;
}

static int cmd_sample(int argc, char **argv) {
  struct args a = {.tokens = 256, .temperature = 0.8, .top_k = 40};
  int r = parse_args(argc, argv, usage_sample, sample_opts, POS_CONFIG, &a);
  if (r) return r == 1 ? 0 : r;
  struct zo_config cfg;
  if ((r = load_config(&a, &cfg))) return r;
  struct zo_sample_opts o = {.checkpoint = a.checkpoint, .prompt = a.prompt, .n_tokens = (int)a.tokens,
                             .temperature = a.temperature, .top_k = (int)a.top_k,
                             .seed = a.seed_given ? (uint64_t)a.seed : cfg.engine.seed,
                             .init_from_explicit = set_on_command_line(&a, "model.init_from"),
                             .random_init = a.random_init};
  int err = zo_sample(&cfg, &o, stdout);
  zo_config_free(&cfg);
  return err ? fail(exit_code(err), "sample") : 0;
}

static const char *device_arg(enum zo_device d) {
  return d == ZO_DEVICE_CPU ? "cpu" : d == ZO_DEVICE_CUDA ? "cuda" : "auto";
}

/* plan --auto: the ranked candidates; exit 1 when none fits. */
static int plan_auto(const struct args *a, zo_backend_t be, size_t gpu_budget) {
  struct zo_cost_profile prof;
  /* --backend: plan for that backend's memory model and rates whatever this
   * machine has (a CUDA plan made on a laptop: the device budget is then
   * engine.gpu_memory_budget). */
  const bool here_cpu = !be || !strcmp(be->name, "cpu");
  const bool cpu = a->backend ? !strcmp(a->backend, "cpu") : here_cpu;
  if (cpu != here_cpu) be = NULL;
  if (!cpu && !be && !gpu_budget)
    return bad_usage(usage_plan, "%s: no CUDA device here to read the free memory of: set the GPU's memory as "
                     "engine.gpu_memory_budget (e.g. --set engine.gpu_memory_budget=10GiB)", "--backend cuda");
  zo_cost_profile_load(&prof, cpu ? "cpu" : "cuda");
  struct zo_host_limit hl;
  zo_host_limit_read(&hl);
  if (a->n_host_ram > 1)
    return bad_usage(usage_plan, "--host-ram %s: --auto plans for one machine: give one size", "(several sizes)");
  /* --host-ram: the host memory the machine to plan for has available,
   * instead of this one's (MemAvailable, the cgroup limit, RLIMIT_MEMLOCK). */
  const bool given_ram = a->n_host_ram == 1;
  const struct zo_autoplan_opts o = {.config_path = a->config, .sets = a->sets, .n_sets = a->n_sets,
                                     .nvme_path = a->nvme_path, .backend = be, .profile = &prof,
                                     .host_limit = given_ram ? a->host_ram[0] : hl.limit, .cpu_backend = cpu,
                                     .memlock = given_ram ? 0 : hl.memlock, .nvme_free = a->nvme_free,
                                     .host_given = given_ram};
  struct zo_autoplan ap;
  int err = zo_autoplan_search(&o, &ap);
  if (err) return fail(exit_code(err), "plan --auto");
  zo_autoplan_print(&ap, &prof, a->json ? 0 : 10, stdout);
  if (a->json) zo_autoplan_print_json(&ap, cpu, stdout);
  const int fit = ap.n_fit;
  zo_autoplan_free(&ap);
  return fit ? 0 : 1;
}

static int cmd_plan(int argc, char **argv) {
  struct args a = {0};
  int r = parse_args(argc, argv, usage_plan, plan_opts, POS_CONFIG, &a);
  if (r) return r == 1 ? 0 : r;
  struct zo_config cfg;
  if ((r = load_config(&a, &cfg))) return r;
  struct zo_model_config mc;
  struct zo_plan plan;
  int err = zo_train_model_config(&cfg, &mc);
  if (!err) err = zo_train_check_threads(&cfg);
  zo_backend_t be = err ? NULL : zo_backend_init(device_arg(cfg.engine.device), cfg.engine.threads);
  if (!err && !a.autoplan && (a.nvme_free || a.backend)) {
    zo_config_free(&cfg);
    return bad_usage(usage_plan, "%s is an option of plan --auto", a.backend ? "--backend" : "--nvme-free");
  }
  if (!err && a.autoplan) {
    const size_t gpu_budget = cfg.engine.gpu_memory_budget;
    zo_config_free(&cfg);
    return plan_auto(&a, be, gpu_budget);
  }
  if (!err && a.placements) {
    const size_t gib = (size_t)1 << 30;
    const size_t def_ram[2] = {24 * gib, 128 * gib};
    err = zo_plan_placements_print(&cfg, &mc, be, a.n_host_ram ? a.host_ram : def_ram, a.n_host_ram ? a.n_host_ram : 2,
                                   stdout);
    zo_config_free(&cfg);
    return err ? fail(exit_code(err), "plan") : 0;
  }
  const int ranks = a.ranks > 0 ? (int)a.ranks : 1;
  int worst = 0;
  size_t worst_host = 0;
  for (int k = 0; k < ranks && !err; k++) {
    if ((err = zo_plan_build_rank(&cfg, &mc, be, k, ranks, &plan))) break;
    const size_t h = plan.total[ZO_TIER_HOST] + plan.total[ZO_TIER_NVME];
    if (ranks > 1) {
      char d[32], hb[32], nb[32];
      printf("rank %d of %d: device %s, host %s, nvme %s\n", k, ranks, zo_format_bytes(plan.total[ZO_TIER_DEVICE], d),
             zo_format_bytes(plan.total[ZO_TIER_HOST], hb), zo_format_bytes(plan.total[ZO_TIER_NVME], nb));
    }
    if (k == 0 || h > worst_host) {
      worst = k;
      worst_host = h;
    }
  }
  if (!err && ranks > 1) {
    printf("rank %d of %d in full (host and NVMe bytes per machine: the ranks on it together):\n", worst, ranks);
    err = zo_plan_build_rank(&cfg, &mc, be, worst, ranks, &plan);
  }
  if (err) {
    zo_config_free(&cfg);
    return fail(exit_code(err), "plan");
  }
  zo_plan_print(&plan, stdout);
  err = zo_plan_check(&cfg, &plan);
  /* What train would refuse on this machine (one rank per machine). */
  if (!err && ranks == 1) {
    struct zo_host_limit hl;
    zo_host_limit_read(&hl);
    const bool cpu = !be || !strcmp(be->name, "cpu");
    char need[32], have[32];
    const size_t n = plan.total[ZO_TIER_HOST] + (cpu ? plan.total[ZO_TIER_DEVICE] : 0);
    if (hl.limit)
      printf("  this machine: %s of host memory needed%s, %s available (%s)\n", zo_format_bytes(n, need),
             cpu ? " (host pool + the CPU backend's device arena)" : "", zo_format_bytes(hl.limit, have), hl.limit_src);
    err = zo_host_machine_check(&cfg, &plan, cpu);
  }
  zo_config_free(&cfg);
  if (err) return fail(1, "plan does not fit");
  printf("fits\n");
  return 0;
}

static int bench_adamw(int argc, char **argv) {
  struct args a = {.params = 64l << 20, .threads = 0, .reps = 9};
  int r = parse_args(argc, argv, usage_bench, bench_adamw_opts, POS_NONE, &a);
  if (r) return r == 1 ? 0 : r;
  const long params = a.params, threads = a.threads, reps = a.reps;
  const bool json = a.json;
  if (a.optimizer && strcmp(a.optimizer, "AdamW8bit") == 0) {
    struct zo_bench_adamw8bit b8;
    if (zo_bench_adamw8bit_run((size_t)params, (int)threads, (int)reps, &b8)) return fail(1, "bench adamw");
    printf("AdamW8bit vs AdamW fp32: %zu params, block %zu, %d threads, median of %d rounds\n", b8.n, b8.block,
           b8.threads, b8.reps);
    printf("  zo_adamw8bit_update: %8.2f ms  %8.1f Mparams/s  %6.2f GB/s (%.3f B/param moved)\n",
           b8.adamw8bit_s * 1e3, b8.params_per_s * 1e-6, b8.bytes_per_param * b8.params_per_s * 1e-9,
           b8.bytes_per_param);
    printf("  zo_adamw_update:     %8.2f ms  %8.1f Mparams/s  %6.2f GB/s (%.3f B/param moved)\n",
           b8.adamw_s * 1e3, b8.fp32_params_per_s * 1e-6, b8.fp32_bytes_per_param * b8.fp32_params_per_s * 1e-9,
           b8.fp32_bytes_per_param);
    printf("  8-bit / fp32 speed: %.3f (median of per-round ratios); 8-bit traffic loop / 8-bit: %.3f\n",
           b8.speedup, b8.yardstick_ratio);
    printf("  m + v at rest (host, NVMe): %.4f B/param (fp32: 8)\n", b8.state_bytes_per_param);
    if (json)
      printf("{\"params\": %zu, \"threads\": %d, \"block_size\": %zu, \"params_per_s\": %.1f, "
             "\"fp32_params_per_s\": %.1f, \"speedup_vs_fp32\": %.4f, \"bytes_per_param\": %.4f, "
             "\"fp32_bytes_per_param\": %.1f, \"state_bytes_per_param\": %.4f, "
             "\"fp32_state_bytes_per_param\": 8.0, \"yardstick_ratio\": %.4f}\n",
             b8.n, b8.threads, b8.block, b8.params_per_s, b8.fp32_params_per_s, b8.speedup, b8.bytes_per_param,
             b8.fp32_bytes_per_param, b8.state_bytes_per_param, b8.yardstick_ratio);
    return 0;
  }
  struct zo_bench_adamw b;
  if (zo_bench_adamw_run((size_t)params, (int)threads, (int)reps, &b)) return fail(1, "bench adamw");
  char buf[32];
  printf("AdamW fp32: %zu params (%s per pass at 28 B/param), %d threads, median of %d reps\n", b.n,
         zo_format_bytes((size_t)(28.0 * (double)b.n), buf), b.threads, b.reps);
  printf("  yardstick (same traffic): %8.2f ms  %8.1f Mparams/s  %6.2f GB/s\n", b.yardstick_s * 1e3,
         (double)b.n / b.yardstick_s * 1e-6, 28.0 * (double)b.n / b.yardstick_s * 1e-9);
  printf("  zo_adamw_update:          %8.2f ms  %8.1f Mparams/s  %6.2f GB/s\n", b.adamw_s * 1e3,
         b.params_per_s * 1e-6, 28.0 * (double)b.n / b.adamw_s * 1e-9);
  printf("  AdamW / yardstick speed: %.3f (median of back-to-back pairs)\n", b.ratio);
  if (json)
    printf("{\"params\": %zu, \"threads\": %d, \"params_per_s\": %.1f, \"yardstick_params_per_s\": %.1f, "
           "\"ratio\": %.4f}\n", b.n, b.threads, b.params_per_s, (double)b.n / b.yardstick_s, b.ratio);
  return 0;
}

static int bench_nvme(int argc, char **argv) {
  struct args a = {.bytes = (size_t)1 << 30, .block = (size_t)1 << 20, .queue_depth = 32};
  int r = parse_args(argc, argv, usage_bench, bench_nvme_opts, POS_NONE, &a);
  if (r) return r == 1 ? 0 : r;
  const char *path = a.path;
  const size_t bytes = a.bytes, block = a.block;
  const long qd = a.queue_depth;
  const bool json = a.json;
  if (!path) return bad_usage(usage_bench, "%s", "bench nvme needs --path DIR");
  double w = 0, rd = 0;
  if (zo_nvme_bench(path, bytes, block, (int)qd, &w, &rd)) return fail(1, "bench nvme");
  char b1[32], b2[32];
  printf("NVMe tier under %s: %s sequential, %s blocks, queue depth %ld\n", path, zo_format_bytes(bytes, b1),
         zo_format_bytes(block, b2), qd);
  printf("  write %.3f GB/s, read %.3f GB/s (CRC32C checked)\n", w, rd);
  if (json) printf("{\"bytes\": %zu, \"write_gb_s\": %.4f, \"read_gb_s\": %.4f}\n", bytes, w, rd);
  return 0;
}

static int bench_step(int argc, char **argv) {
  struct args a = {.steps = 5};
  int r = parse_args(argc, argv, usage_bench, bench_step_opts, POS_CONFIG, &a);
  if (r) return r == 1 ? 0 : r;
  const long steps = a.steps;
  const bool json = a.json;
  struct zo_config cfg;
  if ((r = load_config(&a, &cfg))) return r;
  zo_comm_t comm = job_comm("bench step");
  if (!comm) {
    zo_config_free(&cfg);
    return 1;
  }
  struct zo_bench_step b;
  int err = zo_train_model_config(&cfg, &cfg.model.spec);
  if (!err) err = zo_bench_step_run(&cfg, (int)steps, comm, &b);
  char where[400] = "";
  struct zo_placement pl;
  if (!err && zo_placement_from_config(&cfg, cfg.model.spec.n_layer, &pl) == 0)
    zo_placement_describe(&pl, where, sizeof where);
  const int B = cfg.micro_batch;
  zo_config_free(&cfg);
  if (err) return job_fail(comm, exit_code(err), "bench step");
  const bool lead = zo_comm_rank(comm) == 0;
  zo_comm_free(comm);
  if (!lead) return 0;
  printf("step (%s, %s backend), medians over %d alternating rounds of %d steps:\n", where, b.backend, b.rounds,
         b.steps);
  printf("  configured placement %.1f ms, all on device %.1f ms (ratio %.3f)\n", b.step_s * 1e3,
         b.device_step_s * 1e3, b.step_s / b.device_step_s);
  printf("  configured placement %.0f tokens/s, %.3f TFLOP/s; all on device %.0f tokens/s, %.3f TFLOP/s\n",
         b.tokens_per_s, b.tflops, b.device_tokens_per_s, b.device_tflops);
  printf("  alone: compute %.1f ms, I/O %.1f ms, optimizer %.1f ms\n", b.compute_s * 1e3, b.io_s * 1e3,
         b.optimizer_s * 1e3);
  printf("  overlap efficiency (step / slowest alone): %.3f\n", b.overlap);
  printf("  bytes per step: %.1f MiB host->device, %.1f MiB device->host, NVMe %.1f MiB read, %.1f MiB written\n",
         (double)b.h2d_bytes / 1048576.0, (double)b.d2h_bytes / 1048576.0, (double)b.nvme_read_bytes / 1048576.0,
         (double)b.nvme_write_bytes / 1048576.0);
  if (b.traced)
    printf("  traced: %.1f ms per step, %+.1f%% against untraced (median of per-round ratios); timeline of the "
           "last round written\n", b.traced_step_s * 1e3, b.trace_overhead * 100.0);
  char ranks_json[64 + 48 * ZO_BENCH_MAX_RANKS] = "";
  if (b.ranks > 1) {
    printf("  data parallel over %d ranks (micro-batch %d per rank, global %d): %.0f tokens/s in total\n", b.ranks,
           B, B * b.ranks, b.total_tokens_per_s);
    size_t o = (size_t)snprintf(ranks_json, sizeof ranks_json, ", \"ranks\": %d, \"total_tokens_per_s\": %.1f, "
                                "\"rank_tokens_per_s\": [", b.ranks, b.total_tokens_per_s);
    for (int q = 0; q < b.ranks && q < ZO_BENCH_MAX_RANKS; q++) {
      printf("    rank %d: %.0f tokens/s, %.1f ms per step in communication (gradient and loss sums, waits "
             "included)\n", q, b.rank_tokens_per_s[q], b.rank_comm_s[q] * 1e3);
      o += (size_t)snprintf(ranks_json + o, sizeof ranks_json - o, "%s%.1f", q ? ", " : "", b.rank_tokens_per_s[q]);
    }
    o += (size_t)snprintf(ranks_json + o, sizeof ranks_json - o, "], \"rank_comm_ms\": [");
    for (int q = 0; q < b.ranks && q < ZO_BENCH_MAX_RANKS; q++)
      o += (size_t)snprintf(ranks_json + o, sizeof ranks_json - o, "%s%.3f", q ? ", " : "", b.rank_comm_s[q] * 1e3);
    snprintf(ranks_json + o, sizeof ranks_json - o, "]");
  }
  if (json)
    printf("{\"backend\": \"%s\", \"step_ms\": %.3f, \"device_step_ms\": %.3f, \"compute_ms\": %.3f, "
           "\"io_ms\": %.3f, \"optimizer_ms\": %.3f, \"overlap_efficiency\": %.4f, \"tokens_per_s\": %.1f, "
           "\"device_tokens_per_s\": %.1f, \"tflops\": %.4f, \"device_tflops\": %.4f, \"h2d_bytes\": %llu, "
           "\"d2h_bytes\": %llu, \"nvme_read_bytes\": %llu, \"nvme_write_bytes\": %llu%s}\n",
           b.backend, b.step_s * 1e3, b.device_step_s * 1e3, b.compute_s * 1e3, b.io_s * 1e3, b.optimizer_s * 1e3,
           b.overlap, b.tokens_per_s, b.device_tokens_per_s, b.tflops, b.device_tflops,
           (unsigned long long)b.h2d_bytes, (unsigned long long)b.d2h_bytes, (unsigned long long)b.nvme_read_bytes,
           (unsigned long long)b.nvme_write_bytes, ranks_json);
  return 0;
}

/* A byte count for the savings table, or a dash. */
static const char *mem_cell(size_t n, bool have, char buf[32]) {
  if (!have) return "-";
  return zo_format_bytes(n, buf);
}

static int bench_memory(int argc, char **argv) {
  struct args a = {0};
  int r = parse_args(argc, argv, usage_bench, bench_memory_opts, POS_CONFIG, &a);
  if (r) return r == 1 ? 0 : r;
  struct zo_config cfg;
  if ((r = load_config(&a, &cfg))) return r;
  struct zo_bench_memory_row rows[ZO_BENCH_MEMORY_ROWS];
  int err = zo_train_model_config(&cfg, &cfg.model.spec);
  if (!err) err = zo_bench_memory_run(&cfg, rows);
  const int B = cfg.micro_batch, T = cfg.data.seq_len;
  char desc[200];
  zo_model_describe(&cfg.model.spec, desc, sizeof desc);
  zo_config_free(&cfg);
  if (err) return fail(exit_code(err), "bench memory");
  const size_t base = rows[0].device_planned;
  printf("device memory, %s, micro-batch %d x %d (measured: scheduler built, no step;\n"
         "saved: planned bytes against the first row)\n", desc, B, T);
  printf("  %-40s %12s %12s %12s %7s %12s %12s  %s\n", "configuration", "device plan", "measured", "arena free",
         "saved", "host plan", "measured", "note");
  for (int i = 0; i < ZO_BENCH_MEMORY_ROWS; i++) {
    const struct zo_bench_memory_row *w = &rows[i];
    const bool planned = w->status != ZO_BENCH_MEMORY_NOT_IMPLEMENTED;
    const bool measured = w->status == ZO_BENCH_MEMORY_MEASURED;
    char dp[32], dm[32], df[32], hp[32], hm[32], saved[16] = "-";
    if (planned && base)
      snprintf(saved, sizeof saved, "%.1f%%", 100.0 * (1.0 - (double)w->device_planned / (double)base));
    printf("  %-40s %12s %12s %12s %7s %12s %12s  %s\n", w->name, mem_cell(w->device_planned, planned, dp),
           measured ? mem_cell(w->device_measured, true, dm)
                    : w->status == ZO_BENCH_MEMORY_PLANNED_ONLY ? "planned only" : "not implemented",
           mem_cell(w->device_free, measured, df), saved, mem_cell(w->host_planned, planned, hp),
           mem_cell(w->host_measured, measured, hm), measured ? (w->device_measured == w->device_planned
                                                                     ? "measured == plan" : "measured != plan")
                                                              : w->reason);
  }
  for (int i = 0; i < ZO_BENCH_MEMORY_ROWS; i++)
    if (rows[i].sets[0]) printf("  %s: %s\n", rows[i].name, rows[i].sets);
  if (a.json) {
    static const char *const status[] = {"measured", "planned only", "not implemented"};
    for (int i = 0; i < ZO_BENCH_MEMORY_ROWS; i++) {
      const struct zo_bench_memory_row *w = &rows[i];
      const bool planned = w->status != ZO_BENCH_MEMORY_NOT_IMPLEMENTED;
      const bool measured = w->status == ZO_BENCH_MEMORY_MEASURED;
      char dp[24] = "null", dm[24] = "null", df[24] = "null", hp[24] = "null", hm[24] = "null";
      if (planned) snprintf(dp, sizeof dp, "%zu", w->device_planned);
      if (planned) snprintf(hp, sizeof hp, "%zu", w->host_planned);
      if (measured) snprintf(dm, sizeof dm, "%zu", w->device_measured);
      if (measured) snprintf(df, sizeof df, "%zu", w->device_free);
      if (measured) snprintf(hm, sizeof hm, "%zu", w->host_measured);
      printf("{\"row\": \"%s\", \"status\": \"%s\", \"B\": %d, \"T\": %d, \"device_planned\": %s, "
             "\"device_measured\": %s, \"device_arena_free\": %s, \"host_planned\": %s, \"host_measured\": %s, "
             "\"sets\": \"%s\", \"reason\": \"%s\"}\n",
             w->name, status[w->status], B, T, dp, dm, df, hp, hm, w->sets, measured ? "" : w->reason);
    }
  }
  return 0;
}

static int bench_calibrate(int argc, char **argv) {
  struct args a = {0};
  int r = parse_args(argc, argv, usage_bench, bench_calibrate_opts, POS_NONE, &a);
  if (r) return r == 1 ? 0 : r;
  zo_backend_t be = zo_backend_init("auto", 0);
  if (!be) return fail(1, "bench calibrate");
  struct zo_cost_profile p;
  char path[4096];
  int err = zo_calibrate_run(be, a.nvme_path, &p);
  if (!err) err = zo_cost_profile_path(p.backend, path, sizeof path);
  if (!err) err = zo_cost_profile_save(&p, path);
  if (err) return fail(1, "bench calibrate");
  printf("calibrated %s (%s backend):\n", p.machine, p.backend);
  for (int i = 0; i < ZO_COST_N_WIDTHS; i++)
    printf("  GEMM width %4d: fp32 %8.1f GFLOP/s, bf16 %8.1f GFLOP/s\n", p.widths[i], p.gemm_flops[0][i] * 1e-9,
           p.gemm_flops[1][i] * 1e-9);
  for (int i = 0; i < ZO_COST_N_SEQ; i++)
    printf("  attention T %4d: fp32 %8.1f GFLOP/s, bf16 %8.1f GFLOP/s\n", p.seqs[i], p.attn_flops[0][i] * 1e-9,
           p.attn_flops[1][i] * 1e-9);
  printf("  elementwise %.2f GB/s, %.1f us per op\n", p.mem_bw * 1e-9, p.op_s * 1e6);
  for (int i = 0; i < ZO_COST_N_REF; i++)
    printf("  reference step, width %4d: forward + backward measured / predicted from these rates: fp32 %.3f, "
           "bf16 %.3f\n", p.ref_widths[i], p.compute_scale[0][i], p.compute_scale[1][i]);
  printf("  copies: host->device %.2f GB/s, device->host %.2f GB/s\n", p.h2d_bw * 1e-9, p.d2h_bw * 1e-9);
  printf("  CPU AdamW: fp32 %.1f Mparams/s, 8-bit %.1f Mparams/s\n", p.adamw_pps * 1e-6, p.adamw8_pps * 1e-6);
  if (a.nvme_path)
    printf("  NVMe under %s: read %.2f GB/s, write %.2f GB/s\n", a.nvme_path, p.nvme_read_bw * 1e-9,
           p.nvme_write_bw * 1e-9);
  else
    printf("  NVMe: not measured (give --nvme-path DIR); the default %.2f / %.2f GB/s stays\n",
           p.nvme_read_bw * 1e-9, p.nvme_write_bw * 1e-9);
  printf("wrote %s\n", path);
  if (a.json) printf("{\"profile\": \"%s\"}\n", path);
  return 0;
}

static int cmd_bench(int argc, char **argv) {
  if (argc < 2) return bad_usage(usage_bench, "%s", "missing WHAT (adamw, nvme, step or memory)");
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    fputs(usage_bench, stdout);
    return 0;
  }
  if (!strcmp(argv[1], "adamw")) return bench_adamw(argc - 1, argv + 1);
  if (!strcmp(argv[1], "nvme")) return bench_nvme(argc - 1, argv + 1);
  if (!strcmp(argv[1], "step")) return bench_step(argc - 1, argv + 1);
  if (!strcmp(argv[1], "memory")) return bench_memory(argc - 1, argv + 1);
  if (!strcmp(argv[1], "tokenize")) return zo_cli_bench_tokenize(argc - 1, argv + 1);
  if (!strcmp(argv[1], "calibrate")) return bench_calibrate(argc - 1, argv + 1);
  return bad_usage(usage_bench, "unknown benchmark '%s'", argv[1]);
}

static int cmd_config(int argc, char **argv) {
  struct args a = {0};
  int r = parse_args(argc, argv, usage_config, set_opts, POS_CONFIG, &a);
  if (r) return r == 1 ? 0 : r;
  struct zo_config cfg;
  if ((r = load_config(&a, &cfg))) return r;
  int err = zo_config_dump(&cfg, stdout);
  zo_config_free(&cfg);
  return err ? fail(1, "config") : 0;
}

static int cmd_prepare_tokenized(const struct args *a) {
  struct zo_prepare_opts o = {.tokenizer = a->tokenizer, .field = a->field, .prompt_field = a->prompt_field,
                              .completion_field = a->completion_field, .messages_field = a->messages_field,
                              .separator = a->separator, .format = ZO_DATA_U16, .out_train = a->out_train,
                              .out_val = a->out_val, .val_fraction = a->out_val ? a->val_fraction : 0.0,
                              .progress = true};
  o.jsonl = a->field || a->prompt_field || a->completion_field || a->messages_field;
  for (int k = 0; k < a->n_inputs && !o.jsonl; k++) o.jsonl = zo_prepare_is_jsonl_path(a->inputs[k]);
  if (o.jsonl && a->separator)
    return bad_usage(usage_prepare, "%s", "--separator is for text files; JSON lines hold one document a line");
  if (a->format && !strcmp(a->format, "llmc32")) {
    o.format = ZO_DATA_LLMC;
    o.wide_llmc = true;
  } else if (a->format && (zo_data_format_parse(a->format, &o.format) || o.format == ZO_DATA_TEXT)) {
    return bad_usage(usage_prepare, "--format %s: valid: u16, u32, llmc (uint16 ids), llmc32 (uint32 ids)",
                     a->format);
  }
  struct zo_prepare_result res;
  int err = zo_prepare_tokenized(a->inputs, a->n_inputs, &o, &res);
  if (err) return fail(exit_code(err), NULL); /* the message names prepare */
  printf("prepared %zu documents: %zu training tokens -> %s, %zu validation tokens (%zu documents) -> %s; "
         "vocabulary %zu, end-of-text id %d",
         res.n_docs, res.n_train, a->out_train, res.n_val, res.n_val_docs, a->out_val ? a->out_val : "(none)",
         res.vocab_size, (int)res.eos_id);
  if (res.masked)
    printf("; loss masks %s" ZO_DATA_MASK_SUFFIX "%s: %zu of %zu tokens trained", a->out_train,
           a->out_val ? " and the val's" : "", res.n_trained, res.n_train + res.n_val);
  printf("\n");
  return 0;
}

static int cmd_prepare(int argc, char **argv) {
  struct args a = {.val_fraction = 0.05};
  int r = parse_args(argc, argv, usage_prepare, prepare_opts, POS_FILES, &a);
  if (r) return r == 1 ? 0 : r;
  if (!a.tokenizer && (a.field || a.prompt_field || a.completion_field || a.messages_field || a.separator ||
                       a.format))
    return bad_usage(usage_prepare, "%s", "--field, --prompt-field, --completion-field, --messages-field, "
                                          "--separator and --format need --tokenizer PATH");
  if (a.tokenizer) {
    if (!a.out_train) return bad_usage(usage_prepare, "%s", "missing --out-train FILE");
    if (a.n_inputs == 0) return bad_usage(usage_prepare, "%s", "no input files");
    return cmd_prepare_tokenized(&a);
  }
  if (!a.out_train) return bad_usage(usage_prepare, "%s", "missing --out-train FILE");
  if (a.n_inputs == 0) return bad_usage(usage_prepare, "%s", "no input text files");
  if (!a.out_val && a.val_fraction > 0) return bad_usage(usage_prepare, "%s", "missing --out-val FILE (or --val-fraction 0)");
  size_t n_train = 0, n_val = 0;
  int err = zo_data_prepare(a.inputs, a.n_inputs, a.out_train, a.out_val, a.val_fraction, &n_train, &n_val);
  if (err) return fail(err == -EINVAL ? 2 : 1, "prepare");
  printf("prepared %zu training tokens -> %s, %zu validation tokens -> %s\n", n_train, a.out_train, n_val,
         a.out_val ? a.out_val : "(none)");
  return 0;
}

static int cmd_env(int argc, char **argv) {
  struct args a = {0};
  int r = parse_args(argc, argv, usage_env, env_opts, POS_NONE, &a);
  if (r) return r == 1 ? 0 : r;
  int err = zo_env_report(stdout, a.nvme_path);
  return err ? fail(exit_code(err), "env") : 0;
}

static int cmd_export(int argc, char **argv) {
  struct args a = {.dtype = ZO_F32, .max_shard_size = 5000000000};
  int r = parse_args(argc, argv, usage_export, export_opts, POS_FILES, &a);
  if (r) return r == 1 ? 0 : r;
  if (a.n_inputs != 1)
    return bad_usage(usage_export, "%s", a.n_inputs ? "give one CHECKPOINT" : "missing CHECKPOINT");
  if (!a.out) return bad_usage(usage_export, "%s", "missing --out DIR");
  const struct zo_export_opts o = {.out = a.out, .dtype = a.dtype, .max_shard_bytes = a.max_shard_size};
  struct zo_export_result res;
  int err = zo_export(a.inputs[0], &o, &res);
  if (err) return fail(exit_code(err), "export");
  char lb[32], wb[32], step[48] = "";
  if (res.step >= 0) snprintf(step, sizeof step, " (step %ld)", res.step);
  if (res.step >= 0) printf("checked %s%s: checksums and trainer state in %.2f s\n", a.inputs[0], step, res.load_s);
  printf("exported %s: %s weights in %d safetensors file%s%s, %s in %.2f s (%.1f MB/s), streamed tensor by "
         "tensor from %s of %s\n", a.out, zo_dtype_name(a.dtype), res.n_files, res.n_files == 1 ? "" : "s",
         res.n_files > 1 ? " + model.safetensors.index.json" : "", zo_format_bytes(res.bytes, wb), res.save_s,
         (double)res.bytes / 1e6 / (res.save_s > 0 ? res.save_s : 1e-9), zo_format_bytes(res.load_bytes, lb),
         a.inputs[0]);
  if (res.tokenizer) printf("  with the tokenizer files beside the weights (tokenizer.json and its configs)\n");
  return 0;
}

static const char *usage_trace =
    "usage: zoffload trace summary FILE\n"
    "  per traced step: each track's busy and waiting time, the copy and NVMe time hidden\n"
    "  behind compute, the critical path, and the compute stream's longest waits (which task\n"
    "  on which stream it waited for)\n";

static int cmd_trace(int argc, char **argv) {
  if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    fputs(usage_trace, stdout);
    return 0;
  }
  if (argc != 3 || strcmp(argv[1], "summary") != 0)
    return bad_usage(usage_trace, "%s", "expected: trace summary FILE");
  int err = zo_trace_summary_print(argv[2], stdout);
  return err ? fail(exit_code(err), "trace summary") : 0;
}

int main(int argc, char **argv) {
  /* Before any output: redirected to a file or a pipe, stdout would be
   * fully buffered, a long run would show nothing for minutes and a killed
   * job would lose its log. */
  if (!isatty(STDOUT_FILENO)) setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    fputs(usage_main, stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    fputs(usage_main, stdout);
    return 0;
  }
  /* Past ulimit -f a write fails with EFBIG and is reported; the default
   * action would kill the process mid-write without a word. */
  signal(SIGXFSZ, SIG_IGN);
  if (!strcmp(cmd, "--version")) {
    puts("zoffload 0.1.0");
    return 0;
  }
  if (!strcmp(cmd, "train")) return cmd_train(argc - 1, argv + 1);
  if (!strcmp(cmd, "eval")) return cmd_eval(argc - 1, argv + 1);
  if (!strcmp(cmd, "sample")) return cmd_sample(argc - 1, argv + 1);
  if (!strcmp(cmd, "config")) return cmd_config(argc - 1, argv + 1);
  if (!strcmp(cmd, "plan")) return cmd_plan(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
  if (!strcmp(cmd, "prepare")) return cmd_prepare(argc - 1, argv + 1);
  if (!strcmp(cmd, "trace")) return cmd_trace(argc - 1, argv + 1);
  if (!strcmp(cmd, "env")) return cmd_env(argc - 1, argv + 1);
  if (!strcmp(cmd, "export")) return cmd_export(argc - 1, argv + 1);
  if (!strcmp(cmd, "tokenizer")) return zo_cli_tokenizer(argc - 1, argv + 1);
  fprintf(stderr, "zoffload: unknown command '%s'\n%s", cmd, usage_main);
  return 2;
}
