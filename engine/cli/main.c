/* zoffload command line: the option table, its parser, the error helpers
 * the commands share (cli.h) and the dispatch to the commands: train, eval,
 * sample (cmd_train.c), plan (cmd_plan.c), bench (cmd_bench.c), config,
 * export, env, trace (cmd_tools.c), prepare (cmd_prepare.c), tokenizer
 * (tokenizer_cli.c); the usage texts are in usage.c.
 * Exit codes: 0 success, 1 runtime error (data, I/O, memory), 2 bad usage or
 * bad config. Only the CLI (and tests, benchmarks) calls exit(). Under an
 * MPI launcher (mpirun -np N) train and bench step run data parallel over
 * the N ranks; a rank that fails ends the whole job (MPI_Abort), because
 * the others may be waiting for it in a collective. The other commands run
 * in each process on its own. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zo/comm.h"
#include "zo/config.h"
#include "zo/env_vars.h"
#include "zo/nvme.h"

#include "cli.h"
#include "tokenizer_cli.h"

int cli_fail(int code, const char *what) {
  const char *msg = zo_last_error();
  const size_t n = what ? strlen(what) : 0;
  if (n && !strncmp(msg, what, n) && msg[n] == ':') what = NULL; /* the message names it already */
  fprintf(stderr, "zoffload: %s%s%s\n", what ? what : "", what ? ": " : "", msg);
  return code;
}

int cli_bad_usage(const char *usage, const char *fmt, const char *arg) {
  fprintf(stderr, "zoffload: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n%s", usage);
  return 2;
}

/* The communicator of train and bench step: MPI when started by an MPI
 * launcher (and built with MPI), else one process. NULL after printing why. */
zo_comm_t cli_job_comm(const char *what) {
  zo_comm_t c = zo_comm_init("auto");
  if (!c) cli_fail(1, what);
  return c;
}

/* A failed command of a job: over several ranks the others may wait for
 * this one in a collective, so the job ends here (MPI_Abort); with one rank
 * the message and the exit code as usual. */
int cli_job_fail(zo_comm_t comm, int code, const char *what) {
  if (zo_comm_size(comm) > 1) {
    fprintf(stderr, "zoffload: rank %d of %d: %s: %s (ending every rank)\n", zo_comm_rank(comm),
            zo_comm_size(comm), what, zo_last_error());
    zo_comm_abort(comm, code);
  }
  cli_fail(code, what);
  zo_comm_free(comm);
  return code;
}

/* Exit code for an engine error: config-level errors are usage errors. */
int cli_exit_code(int err) { return err == -EINVAL || err == -ENOTSUP ? 2 : 1; }

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


static const struct option all_options[] = {
    {"set", required_argument, NULL, OPT_SET},
    {"resume", required_argument, NULL, OPT_RESUME},
    {"sample", required_argument, NULL, OPT_SAMPLE},
    {"memory-report", no_argument, NULL, OPT_MEMORY_REPORT},
    {"verbose", no_argument, NULL, OPT_VERBOSE},
    {"checkpoint", required_argument, NULL, OPT_CHECKPOINT},
    {"adapter", required_argument, NULL, OPT_ADAPTER},
    {"adapter", no_argument, NULL, OPT_EXPORT_ADAPTER}, /* export's: a flag (the table is filtered per command) */
    {"merge", no_argument, NULL, OPT_MERGE},
    {"base", required_argument, NULL, OPT_BASE},
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
    {"allow-data-change", no_argument, NULL, OPT_ALLOW_DATA_CHANGE},
    {"resume-allow", required_argument, NULL, OPT_RESUME_ALLOW},
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

/* Stores one option's value; returns 0 or 2 after printing a usage error. */
static int store_option(int id, const char *v, const char *usage, struct args *a) {
  switch (id) {
  case OPT_SET:
    if (a->n_sets == MAX_SETS) return cli_bad_usage(usage, "too many --set options (max %s)", "256");
    a->sets[a->n_sets++] = v;
    return 0;
  case OPT_RESUME: a->resume = v; return 0;
  case OPT_TRACE:
    if (strlen(v) > sizeof a->trace_set - 32) return cli_bad_usage(usage, "--trace %s: the path is too long", v);
    if (a->n_sets == MAX_SETS) return cli_bad_usage(usage, "too many --set options (max %s)", "256");
    snprintf(a->trace_set, sizeof a->trace_set, "engine.trace.path=%s", v); /* a plain string */
    a->sets[a->n_sets++] = a->trace_set;
    return 0;
  case OPT_CHECKPOINT: a->checkpoint = v; return 0;
  case OPT_ADAPTER: a->adapter = v; return 0;
  case OPT_EXPORT_ADAPTER: a->export_adapter = true; return 0;
  case OPT_MERGE: a->merge = true; return 0;
  case OPT_BASE: a->base = v; return 0;
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
    else return cli_bad_usage(usage, "--dtype %s: valid: fp32, bf16, fp16", v);
    return 0;
  case OPT_MAX_SHARD_SIZE:
    return zo_parse_bytes(v, &a->max_shard_size) == 0 && a->max_shard_size > 0
               ? 0 : cli_bad_usage(usage, "--max-shard-size %s: need a size such as 5GB or 500MiB", v);
  case OPT_TOKENIZER: a->tokenizer = v; return 0;
  case OPT_FIELD: a->field = v; return 0;
  case OPT_PROMPT_FIELD: a->prompt_field = v; return 0;
  case OPT_COMPLETION_FIELD: a->completion_field = v; return 0;
  case OPT_MESSAGES_FIELD: a->messages_field = v; return 0;
  case OPT_SEPARATOR: a->separator = v; return 0;
  case OPT_FORMAT: a->format = v; return 0;
  case OPT_MEMORY_REPORT: a->memory_report = true; return 0;
  case OPT_VERBOSE: a->verbose = true; return 0;
  case OPT_OVERWRITE: a->overwrite = true; return 0;
  case OPT_ALLOW_DATA_CHANGE: a->allow_data_change = true; return 0;
  case OPT_RESUME_ALLOW:
    if (a->n_resume_allow == (int)(sizeof a->resume_allow / sizeof a->resume_allow[0]))
      return cli_bad_usage(usage, "too many --resume-allow options (max %s)", "64");
    a->resume_allow[a->n_resume_allow++] = v;
    return 0;
  case OPT_RANDOM_INIT: a->random_init = true; return 0;
  case OPT_JSON: a->json = true; return 0;
  case OPT_PLACEMENTS: a->placements = true; return 0;
  case OPT_AUTO: a->autoplan = true; return 0;
  case OPT_NVME_FREE:
    return zo_parse_bytes(v, &a->nvme_free) == 0 && a->nvme_free > 0
               ? 0 : cli_bad_usage(usage, "--nvme-free %s: need a size such as 2TB or 500GiB", v);
  case OPT_BACKEND:
    if (strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0) return cli_bad_usage(usage, "--backend %s: valid: cpu, cuda", v);
    a->backend = v;
    return 0;
  case OPT_HOST_RAM: {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    a->n_host_ram = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
      if (a->n_host_ram == 8 || zo_parse_bytes(tok, &a->host_ram[a->n_host_ram]) != 0 ||
          a->host_ram[a->n_host_ram] == 0)
        return cli_bad_usage(usage, "--host-ram %s: need up to 8 comma-separated sizes such as 24GiB,128GiB", v);
      a->n_host_ram++;
    }
    return a->n_host_ram ? 0 : cli_bad_usage(usage, "--host-ram %s: need sizes such as 24GiB,128GiB", v);
  }
  case OPT_OPTIMIZER:
    if (strcmp(v, "AdamW") != 0 && strcmp(v, "AdamW8bit") != 0)
      return cli_bad_usage(usage, "--optimizer %s: valid: AdamW, AdamW8bit", v);
    a->optimizer = v;
    return 0;
  case OPT_SAMPLE:
    return parse_int(v, 0, 1 << 20, &a->sample) ? 0 : cli_bad_usage(usage, "--sample %s: need an integer in [0, 1048576]", v);
  case OPT_BATCHES:
    return parse_int(v, 1, 1 << 20, &a->batches) ? 0 : cli_bad_usage(usage, "--batches %s: need an integer in [1, 1048576]", v);
  case OPT_TOKENS:
    return parse_int(v, 1, 1 << 20, &a->tokens) ? 0 : cli_bad_usage(usage, "--tokens %s: need an integer in [1, 1048576]", v);
  case OPT_TOP_K:
    return parse_int(v, 0, 1 << 30, &a->top_k) ? 0 : cli_bad_usage(usage, "--top-k %s: need an integer >= 0", v);
  case OPT_SEED:
    a->seed_given = true;
    return parse_int(v, 0, __LONG_MAX__, &a->seed) ? 0 : cli_bad_usage(usage, "--seed %s: need an integer >= 0", v);
  case OPT_STEPS:
    return parse_int(v, 1, 100000, &a->steps) ? 0 : cli_bad_usage(usage, "--steps %s: need an integer in [1, 100000]", v);
  case OPT_PARAMS:
    return parse_int(v, 1, 1l << 34, &a->params) ? 0 : cli_bad_usage(usage, "--params %s: need an integer in [1, 2^34]", v);
  case OPT_RANKS:
    return parse_int(v, 1, 65536, &a->ranks) ? 0 : cli_bad_usage(usage, "--ranks %s: need an integer in [1, 65536]", v);
  case OPT_THREADS:
    return parse_int(v, 0, 4096, &a->threads) ? 0 : cli_bad_usage(usage, "--threads %s: need an integer in [0, 4096]", v);
  case OPT_REPS:
    return parse_int(v, 1, 1000, &a->reps) ? 0 : cli_bad_usage(usage, "--reps %s: need an integer in [1, 1000]", v);
  case OPT_QUEUE_DEPTH:
    return parse_int(v, 1, ZO_NVME_MAX_QUEUE_DEPTH, &a->queue_depth)
               ? 0 : cli_bad_usage(usage, "--queue-depth %s: need an integer in [1, the store's maximum]", v);
  case OPT_BYTES:
    return zo_parse_bytes(v, &a->bytes) == 0 && a->bytes > 0 ? 0 : cli_bad_usage(usage, "--bytes %s: need a size such as 512MiB", v);
  case OPT_BLOCK:
    return zo_parse_bytes(v, &a->block) == 0 && a->block > 0 ? 0 : cli_bad_usage(usage, "--block %s: need a size such as 1MiB", v);
  case OPT_TEMPERATURE:
    if (!parse_double(v, &a->temperature) || !(a->temperature > 0) || a->temperature > 100)
      return cli_bad_usage(usage, "--temperature %s: need a number in (0, 100]", v);
    return 0;
  case OPT_VAL_FRACTION:
    if (!parse_double(v, &a->val_fraction) || a->val_fraction < 0 || a->val_fraction >= 1)
      return cli_bad_usage(usage, "--val-fraction %s: need a number in [0, 1)", v);
    return 0;
  }
  zo_abort(__FILE__, __LINE__, "option id %d has no handler", id);
}

/* Parses argv[1..argc) with getopt_long, allowing the options listed in
 * `allowed` (terminated by OPT_END) plus --help. argv[0] names the command.
 * Returns 0, 1 for --help (printed), or 2 after printing a usage error. */
int cli_parse_args(int argc, char **argv, const char *usage, const int *allowed,
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
    if (c == ':') return cli_bad_usage(usage, "%s needs a value", argv[optind - 1]);
    if (c == '?') return cli_bad_usage(usage, "unknown option %s", argv[optind - 1]);
    int err = store_option(c, optarg, usage, a);
    if (err) return err;
  }
  const int n_pos = argc - optind;
  if (positional == POS_FILES) {
    a->inputs = (const char *const *)argv + optind;
    a->n_inputs = n_pos;
    return 0;
  }
  if (positional == POS_NONE && n_pos > 0) return cli_bad_usage(usage, "unexpected argument %s", argv[optind]);
  if (positional == POS_CONFIG) {
    if (n_pos == 0) return cli_bad_usage(usage, "%s", "missing CONFIG");
    if (n_pos > 1) return cli_bad_usage(usage, "unexpected argument %s", argv[optind + 1]);
    a->config = argv[optind];
  }
  return 0;
}

int cli_load_config(struct args *a, struct zo_config *cfg) {
  int err = zo_config_load(cfg, a->config, a->sets, a->n_sets);
  return err ? cli_fail(2, NULL) : 0;
}

/* Whether a --set gave key (then it came from the command line). */
bool cli_set_on_command_line(const struct args *a, const char *key) {
  const size_t n = strlen(key);
  for (int i = 0; i < a->n_sets; i++)
    if (!strncmp(a->sets[i], key, n) && a->sets[i][n] == '=') return true;
  return false;
}

int main(int argc, char **argv) {
  /* Before any output: redirected to a file or a pipe, stdout would be
   * fully buffered, a long run would show nothing for minutes and a killed
   * job would lose its log. */
  if (!isatty(STDOUT_FILENO)) setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    fputs(cli_usage_main, stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    fputs(cli_usage_main, stdout);
    return 0;
  }
  /* Past ulimit -f a write fails with EFBIG and is reported; the default
   * action would kill the process mid-write without a word. */
  signal(SIGXFSZ, SIG_IGN);
  if (!strcmp(cmd, "--version")) {
    puts("zoffload 0.1.0");
    return 0;
  }
  if (!strcmp(cmd, "env")) return cli_env(argc - 1, argv + 1); /* reports an invalid variable */
  /* Before any config is read or a run directory locked: a bad value would
   * otherwise surface at the first GEMM, mid-run. */
  if (zo_env_vars_check()) return cli_fail(2, "environment");
  if (!strcmp(cmd, "train")) return cli_train(argc - 1, argv + 1);
  if (!strcmp(cmd, "eval")) return cli_eval(argc - 1, argv + 1);
  if (!strcmp(cmd, "sample")) return cli_sample(argc - 1, argv + 1);
  if (!strcmp(cmd, "config")) return cli_config(argc - 1, argv + 1);
  if (!strcmp(cmd, "plan")) return cli_plan(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench")) return cli_bench(argc - 1, argv + 1);
  if (!strcmp(cmd, "prepare")) return cli_prepare(argc - 1, argv + 1);
  if (!strcmp(cmd, "trace")) return cli_trace(argc - 1, argv + 1);
  if (!strcmp(cmd, "export")) return cli_export(argc - 1, argv + 1);
  if (!strcmp(cmd, "tokenizer")) return zo_cli_tokenizer(argc - 1, argv + 1);
  fprintf(stderr, "zoffload: unknown command '%s'\n%s", cmd, cli_usage_main);
  return 2;
}
