/* zoffload train, eval and sample: the commands that run a model of a
 * config. Under an MPI launcher (mpirun -np N) train runs data parallel over
 * the N ranks; a rank that fails ends the whole job (MPI_Abort), because the
 * others may be waiting for it in a collective. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "zo/autoplan.h"
#include "zo/host_check.h"
#include "zo/sample.h"
#include "zo/train.h"

#include "cli.h"

static const int train_opts[] = {OPT_SET,         OPT_RESUME,     OPT_OVERWRITE,         OPT_SAMPLE,
                                 OPT_MEMORY_REPORT, OPT_VERBOSE, OPT_TRACE, OPT_ALLOW_DATA_CHANGE,
                                 OPT_RESUME_ALLOW, OPT_END};
static const int eval_opts[] = {OPT_SET, OPT_CHECKPOINT, OPT_ADAPTER, OPT_BATCHES, OPT_RANDOM_INIT, OPT_END};
static const int sample_opts[] = {OPT_SET,   OPT_CHECKPOINT, OPT_ADAPTER,     OPT_PROMPT, OPT_TOKENS,
                                  OPT_TEMPERATURE, OPT_TOP_K, OPT_SEED, OPT_RANDOM_INIT, OPT_END};

int cli_train(int argc, char **argv) {
  struct args a = {0};
  int r = cli_parse_args(argc, argv, cli_usage_train, train_opts, POS_CONFIG, &a);
  if (r) return r == 1 ? 0 : r;
  struct zo_config cfg;
  if ((r = cli_load_config(&a, &cfg))) return r;
  /* The data before anything (the planner's search included). */
  int err = zo_host_check_data(&cfg);
  if (err) {
    zo_config_free(&cfg);
    return cli_fail(cli_exit_code(err), "train");
  }
  /* engine.placement = "auto", DeepSpeed's "auto" micro-batch or accumulation:
   * the planner's choice replaces cfg (printed, and written to the run directory). */
  const struct zo_autoplan_apply_opts ao = {.config_path = a.config, .sets = a.sets, .n_sets = a.n_sets,
                                            .out = stdout, .err = stderr};
  struct zo_autoplan_applied applied;
  err = zo_autoplan_apply(&cfg, &ao, &applied);
  if (err) {
    zo_config_free(&cfg);
    return applied.reload_failed ? cli_fail(2, NULL) : cli_fail(cli_exit_code(err), "train");
  }
  zo_comm_t comm = cli_job_comm("train");
  if (!comm) {
    zo_config_free(&cfg);
    return 1;
  }
  if (a.n_resume_allow && !a.resume) {
    zo_config_free(&cfg);
    zo_comm_free(comm);
    return cli_bad_usage(cli_usage_train, "--resume-allow %s allows a change on resume: it needs --resume",
                         a.resume_allow[0]);
  }
  if (a.overwrite && a.resume) {
    zo_config_free(&cfg);
    zo_comm_free(comm);
    return cli_bad_usage(cli_usage_train, "%s", "--overwrite starts a fresh run: it cannot go with --resume");
  }
  int sig = 0;
  struct zo_train_opts opts = {.resume = a.resume, .sample_tokens = (int)a.sample,
                               .memory_report = a.memory_report, .verbose = a.verbose, .comm = comm, .overwrite = a.overwrite,
                               .allow_data_change = a.allow_data_change, .resume_allow = a.resume_allow,
                               .n_resume_allow = a.n_resume_allow, .stop_signal = &sig};
  err = zo_train(&cfg, &opts);
  if (err == -ENOMEM && !strncmp(zo_last_error(), "the plan needs", 14)) {
    /* A plan that does not fit: what the planner's search finds. */
    char msg[2048], advice[1024];
    snprintf(msg, sizeof msg, "%s", zo_last_error());
    if (zo_autoplan_advice(&cfg, &ao, advice, sizeof advice) == 0 && advice[0])
      zo_error(err, "%s. %s", msg, advice);
    else
      zo_error(err, "%s", msg);
  }
  zo_config_free(&cfg);
  if (err && sig) {
    /* Stopped on request, after saving: the shell's convention for death by that signal. */
    fprintf(stderr, "zoffload: train: %s\n", zo_last_error());
    zo_comm_free(comm);
    return 128 + sig;
  }
  if (err) return cli_job_fail(comm, cli_exit_code(err), "train");
  zo_comm_free(comm);
  return 0;
}

int cli_eval(int argc, char **argv) {
  struct args a = {0};
  int r = cli_parse_args(argc, argv, cli_usage_eval, eval_opts, POS_CONFIG, &a);
  if (r) return r == 1 ? 0 : r;
  struct zo_config cfg;
  if ((r = cli_load_config(&a, &cfg))) return r;
  struct zo_eval_result res;
  const struct zo_weights w = {.checkpoint = a.checkpoint,
                               .init_from_explicit = cli_set_on_command_line(&a, "model.init_from"),
                               .random_init = a.random_init, .adapter = a.adapter};
  /* Without data.val the loss is measured on data.train: the line says so. */
  const bool on_train = !cfg.data.val || !cfg.data.val[0];
  /* A half-precision evaluation says so: its loss differs from fp32 in the third digit. */
  const char *half = cfg.bf16 ? "bf16" : cfg.fp16.enabled ? "fp16" : NULL;
  int err = zo_eval_weights(&cfg, &w, a.batches ? (int)a.batches : cfg.eval.steps, &res);
  zo_config_free(&cfg);
  if (err) return cli_fail(cli_exit_code(err), "eval");
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
  if (half)
    printf("  ran in %s (%s.enabled): weights and activations in %s, sums in fp32; an fp32 evaluation "
           "(--set %s.enabled=false) differs in about the third digit\n", half, half, half, half);
  return 0;
}

int cli_sample(int argc, char **argv) {
  struct args a = {.tokens = 256, .temperature = 0.8, .top_k = 40};
  int r = cli_parse_args(argc, argv, cli_usage_sample, sample_opts, POS_CONFIG, &a);
  if (r) return r == 1 ? 0 : r;
  struct zo_config cfg;
  if ((r = cli_load_config(&a, &cfg))) return r;
  struct zo_sample_opts o = {.checkpoint = a.checkpoint, .prompt = a.prompt, .n_tokens = (int)a.tokens,
                             .temperature = a.temperature, .top_k = (int)a.top_k,
                             .seed = a.seed_given ? (uint64_t)a.seed : cfg.engine.seed,
                             .init_from_explicit = cli_set_on_command_line(&a, "model.init_from"),
                             .random_init = a.random_init, .adapter = a.adapter};
  int err = zo_sample(&cfg, &o, stdout);
  zo_config_free(&cfg);
  return err ? cli_fail(cli_exit_code(err), "sample") : 0;
}
