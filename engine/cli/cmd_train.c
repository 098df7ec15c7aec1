/* zoffload train, eval and sample: the commands that run a model of a
 * config. Under an MPI launcher (mpirun -np N) train runs data parallel over
 * the N ranks; a rank that fails ends the whole job (MPI_Abort), because the
 * others may be waiting for it in a collective. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "zo/autoplan.h"
#include "zo/sample.h"
#include "zo/train.h"

#include "cli.h"

static const int train_opts[] = {OPT_SET, OPT_RESUME, OPT_OVERWRITE, OPT_SAMPLE, OPT_MEMORY_REPORT, OPT_TRACE,
                                 OPT_END};
static const int eval_opts[] = {OPT_SET, OPT_CHECKPOINT, OPT_BATCHES, OPT_RANDOM_INIT, OPT_END};
static const int sample_opts[] = {OPT_SET, OPT_CHECKPOINT, OPT_PROMPT, OPT_TOKENS, OPT_TEMPERATURE,
                                  OPT_TOP_K, OPT_SEED, OPT_RANDOM_INIT, OPT_END};
/* engine.placement = "auto", or DeepSpeed's "auto" micro-batch or
 * accumulation: the planner's best candidate (only the batch split when the
 * placement is the config's) replaces cfg, whose effective config is printed
 * and written to checkpoint.dir/auto-config.json. Returns 0 or an exit code. */
static int train_auto(struct args *a, struct zo_config *cfg) {
  const bool placement = cfg->engine.placement == ZO_PLACEMENT_AUTO;
  if (!placement && !cfg->micro_batch_auto && !cfg->grad_accum_auto) return 0;
  zo_backend_t be = zo_backend_init(zo_device_name(cfg->engine.device), cfg->engine.threads);
  const bool cpu = !be || !strcmp(be->name, "cpu");
  struct zo_cost_profile prof;
  zo_cost_profile_load(&prof, cpu ? "cpu" : "cuda");
  struct zo_host_limit hl;
  zo_host_limit_read(&hl);
  /* Under an MPI launcher every rank must choose alike: the search then
   * depends on the config and the profile only (not on free memory read at
   * slightly different moments), and only rank 0 prints and writes. */
  const char *size_s = getenv("OMPI_COMM_WORLD_SIZE") ? getenv("OMPI_COMM_WORLD_SIZE") : getenv("PMI_SIZE");
  const char *rank_s = getenv("OMPI_COMM_WORLD_RANK") ? getenv("OMPI_COMM_WORLD_RANK") : getenv("PMI_RANK");
  const bool ranks = size_s && atoi(size_s) > 1, lead = !rank_s || atoi(rank_s) == 0;
  FILE *out = lead ? stdout : NULL;
  const struct zo_autoplan_opts o = {.config_path = a->config, .sets = a->sets, .n_sets = a->n_sets,
                                     .backend = ranks ? NULL : be, .profile = &prof,
                                     .host_limit = ranks ? 0 : hl.limit, .cpu_backend = cpu};
  struct zo_autoplan ap;
  int err = zo_autoplan_search(&o, &ap);
  if (err) return cli_fail(cli_exit_code(err), "train: engine.placement = \"auto\"");
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
  const bool was = zo_config_set_quiet(true);
  err = zo_config_load(cfg, a->config, a->sets, a->n_sets);
  zo_config_set_quiet(was);
  if (err) return cli_fail(2, NULL);
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

int cli_train(int argc, char **argv) {
  struct args a = {0};
  int r = cli_parse_args(argc, argv, cli_usage_train, train_opts, POS_CONFIG, &a);
  if (r) return r == 1 ? 0 : r;
  struct zo_config cfg;
  if ((r = cli_load_config(&a, &cfg))) return r;
  if ((r = train_auto(&a, &cfg))) {
    zo_config_free(&cfg);
    return r;
  }
  zo_comm_t comm = cli_job_comm("train");
  if (!comm) {
    zo_config_free(&cfg);
    return 1;
  }
  if (a.overwrite && a.resume) {
    zo_config_free(&cfg);
    zo_comm_free(comm);
    return cli_bad_usage(cli_usage_train, "%s", "--overwrite starts a fresh run: it cannot go with --resume");
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
                               .random_init = a.random_init};
  /* Without data.val the loss is measured on data.train: the line says so. */
  const bool on_train = !cfg.data.val || !cfg.data.val[0];
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
                             .random_init = a.random_init};
  int err = zo_sample(&cfg, &o, stdout);
  zo_config_free(&cfg);
  return err ? cli_fail(cli_exit_code(err), "sample") : 0;
}
