/* What the zoffload command files share (engine/cli/, linked into the
 * zoffload executable only): the parsed options, the option parser and the
 * error helpers of main.c, the usage texts of usage.c and the commands.
 * A command takes argv with argv[0] its own name and returns the process
 * exit code: 0 success, 1 runtime error (data, I/O, memory), 2 bad usage or
 * bad config; it prints its own errors. */
#ifndef ZO_CLI_H
#define ZO_CLI_H

#include <stdbool.h>
#include <stddef.h>

#include "zo/comm.h"
#include "zo/config.h"

#define MAX_SETS 256

/* ---- the usage texts (usage.c) ------------------------------------------------ */

extern const char *const cli_usage_main, *const cli_usage_train, *const cli_usage_eval,
    *const cli_usage_sample, *const cli_usage_plan, *const cli_usage_bench, *const cli_usage_env,
    *const cli_usage_export, *const cli_usage_config, *const cli_usage_prepare, *const cli_usage_trace;

/* ---- options (main.c) ------------------------------------------------------- */

/* Every option of every command; each command allows a subset. */
enum opt {
  OPT_END = 0,
  OPT_SET = 1000, OPT_RESUME, OPT_SAMPLE, OPT_MEMORY_REPORT, OPT_CHECKPOINT, OPT_BATCHES, OPT_PROMPT,
  OPT_TOKENS, OPT_TEMPERATURE, OPT_TOP_K, OPT_SEED, OPT_OUT_TRAIN, OPT_OUT_VAL, OPT_VAL_FRACTION,
  OPT_JSON, OPT_STEPS, OPT_PARAMS, OPT_THREADS, OPT_REPS, OPT_OPTIMIZER, OPT_PATH, OPT_BYTES, OPT_BLOCK,
  OPT_QUEUE_DEPTH, OPT_PLACEMENTS, OPT_HOST_RAM, OPT_RANKS, OPT_TRACE, OPT_OVERWRITE, OPT_RANDOM_INIT,
  OPT_NVME_PATH, OPT_OUT, OPT_DTYPE, OPT_MAX_SHARD_SIZE, OPT_NVME_FREE, OPT_BACKEND,
  OPT_TOKENIZER, OPT_FIELD, OPT_PROMPT_FIELD, OPT_COMPLETION_FIELD, OPT_MESSAGES_FIELD, OPT_SEPARATOR,
  OPT_FORMAT, OPT_AUTO, OPT_ALLOW_DATA_CHANGE, OPT_RESUME_ALLOW, OPT_VERBOSE, OPT_ADAPTER,
  OPT_EXPORT_ADAPTER, OPT_MERGE, OPT_BASE,
};

enum positional { POS_CONFIG, POS_FILES, POS_NONE };

struct args {
  const char *config;
  const char *sets[MAX_SETS];
  int n_sets;
  const char *resume, *checkpoint, *adapter, *prompt, *out_train, *out_val, *optimizer, *path, *nvme_path, *out;
  enum zo_dtype dtype;   /* export --dtype */
  size_t max_shard_size; /* export --max-shard-size, bytes */
  long sample, batches, tokens, top_k, seed, steps, params, threads, reps, queue_depth, ranks;
  size_t bytes, block;
  bool memory_report, verbose, seed_given, json, placements, overwrite, random_init, autoplan, allow_data_change;
  bool export_adapter, merge; /* export --adapter (a flag there), --merge */
  const char *base;           /* export --merge --base DIR */
  size_t host_ram[8]; /* --host-ram sizes */
  size_t nvme_free;   /* plan --auto --nvme-free, bytes */
  const char *backend; /* plan --auto --backend cpu|cuda */
  int n_host_ram;
  double temperature, val_fraction;
  char trace_set[4200];      /* --trace FILE as "engine.trace.path=FILE" */
  const char *const *inputs; /* (n_inputs) text files for prepare */
  const char *tokenizer, *field, *prompt_field, *completion_field, *messages_field, *separator, *format;
  int n_inputs;
  const char *resume_allow[64]; /* train --resume-allow KEY (repeatable) */
  int n_resume_allow;
};

/* Parses argv[1..argc) with getopt_long, allowing the options listed in
 * `allowed` (terminated by OPT_END) plus --help. argv[0] names the command.
 * Returns 0, 1 for --help (printed), or 2 after printing a usage error. */
int cli_parse_args(int argc, char **argv, const char *usage, const int *allowed, enum positional positional,
               struct args *a);

/* Loads a->config with a->sets into cfg. Returns 0 or 2 after printing why. */
int cli_load_config(struct args *a, struct zo_config *cfg);

/* Whether a --set gave key (then it came from the command line). */
bool cli_set_on_command_line(const struct args *a, const char *key);

/* ---- errors (main.c) -------------------------------------------------------- */

/* Prints "zoffload: what: <zo_last_error()>" (what may be NULL); returns code. */
int cli_fail(int code, const char *what);

/* Prints "zoffload: " fmt (with arg) and the usage; returns 2. */
int cli_bad_usage(const char *usage, const char *fmt, const char *arg);

/* Exit code for an engine error: config-level errors are usage errors. */
int cli_exit_code(int err);

/* The communicator of train and bench step: MPI when started by an MPI
 * launcher (and built with MPI), else one process. NULL after printing why. */
zo_comm_t cli_job_comm(const char *what);

/* A failed command of a job: over several ranks the others may wait for
 * this one in a collective, so the job ends here (MPI_Abort); with one rank
 * the message and the exit code as usual. Frees comm. */
int cli_job_fail(zo_comm_t comm, int code, const char *what);

/* ---- the commands ------------------------------------------------------------ */

int cli_train(int argc, char **argv);   /* cmd_train.c */
int cli_eval(int argc, char **argv);    /* cmd_train.c */
int cli_sample(int argc, char **argv);  /* cmd_train.c */
int cli_plan(int argc, char **argv);    /* cmd_plan.c */
int cli_bench(int argc, char **argv);   /* cmd_bench.c */
int cli_prepare(int argc, char **argv); /* cmd_prepare.c */
int cli_config(int argc, char **argv);  /* cmd_tools.c */
int cli_env(int argc, char **argv);     /* cmd_tools.c */
int cli_export(int argc, char **argv);  /* cmd_tools.c */
int cli_trace(int argc, char **argv);   /* cmd_tools.c */

#endif /* ZO_CLI_H */
