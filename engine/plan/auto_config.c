/* train's automatic choice (zo_autoplan_apply): what engine.placement =
 * "auto" and DeepSpeed's "auto" micro-batch or accumulation do before
 * training. The planner's best candidate (zo_autoplan_search; only a batch
 * split when the placement is the config's) replaces the config, reloaded
 * quietly with the user's --set lines and the chosen ones after them; the
 * choice, its --set lines and the effective config are printed, and the
 * config is written to checkpoint.dir/auto-config.json. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "zo/autoplan.h"
#include "zo/launcher.h"

/* The fastest fitting candidate: with engine.placement = "auto" any one,
 * else the search held the config's placement and varied only the split
 * (zo_autoplan_opts.split_only). NULL when none. */
static const struct zo_autoplan_candidate *autoplan_pick(const struct zo_autoplan *ap) {
  return ap->n_fit ? &ap->fit[0] : NULL;
}

/* What is "auto" in cfg, as the config names it, for messages. */
static const char *auto_what(const struct zo_config *cfg, char *buf, size_t size) {
  snprintf(buf, size, "%s%s%s%s%s = \"auto\"", cfg->engine.placement == ZO_PLACEMENT_AUTO ? "engine.placement" : "",
           cfg->engine.placement == ZO_PLACEMENT_AUTO && cfg->micro_batch_auto ? ", " : "",
           cfg->micro_batch_auto ? "train_micro_batch_size_per_gpu" : "",
           (cfg->engine.placement == ZO_PLACEMENT_AUTO || cfg->micro_batch_auto) && cfg->grad_accum_auto ? ", " : "",
           cfg->grad_accum_auto ? "gradient_accumulation_steps" : "");
  return buf;
}

/* The effective config on out and in checkpoint.dir/auto-config.json (a
 * warning on stderr when it cannot be written there). */
static void autoplan_write_config(const struct zo_config *cfg, FILE *out) {
  const char *dir = cfg->checkpoint.dir;
  char path[4200] = "";
  if (dir && dir[0] && (mkdir(dir, 0755) == 0 || errno == EEXIST)) snprintf(path, sizeof path, "%s/auto-config.json", dir);
  FILE *f = path[0] ? fopen(path, "w") : NULL;
  fprintf(out, "effective config%s%s%s:\n", f ? " (also written to " : "", f ? path : "", f ? ")" : "");
  zo_config_dump(cfg, out);
  if (f) {
    const int werr = zo_config_dump(cfg, f);
    if (fclose(f) != 0 || werr) fprintf(stderr, "zoffload: warning: could not write %s\n", path);
  } else if (dir && dir[0]) {
    fprintf(stderr, "zoffload: warning: could not write %s/auto-config.json: %s\n", dir, strerror(errno));
  }
}

/* Reloads cfg quietly from o's config file with o's --set lines, then the
 * chosen ones, then (placement) engine.placement=config. */
static int autoplan_reload(struct zo_config *cfg, const struct zo_autoplan_apply_opts *o,
                           const struct zo_autoplan_candidate *best, bool placement) {
  const char **sets = malloc(((size_t)o->n_sets + ZO_AUTOPLAN_MAX_SETS + 1) * sizeof *sets);
  if (!sets) return zo_error(-ENOMEM, "engine.placement = \"auto\": out of memory for the --set lines");
  int n = 0;
  for (int k = 0; k < o->n_sets; k++) sets[n++] = o->sets[k];
  for (int k = 0; k < best->n_sets; k++) sets[n++] = best->sets[k];
  if (placement) sets[n++] = "engine.placement=config";
  zo_config_free(cfg);
  const int err = zo_config_load_quiet(cfg, o->config_path, sets, n);
  free(sets);
  return err;
}

/* What a search on cfg's backend needs: the backend (NULL: none answered),
 * whether it is the CPU's, this machine's rates for it and its host limits. */
static zo_backend_t search_setup(const struct zo_config *cfg, struct zo_cost_profile *prof, struct zo_host_limit *hl,
                                 bool *cpu) {
  zo_backend_t be = zo_backend_init(zo_device_name(cfg->engine.device), cfg->engine.threads);
  *cpu = !be || !strcmp(be->name, "cpu");
  zo_cost_profile_load(prof, *cpu ? "cpu" : "cuda");
  zo_host_limit_read(hl);
  return be;
}

int zo_autoplan_advice(const struct zo_config *cfg, const struct zo_autoplan_apply_opts *o, char *buf, size_t size) {
  buf[0] = '\0';
  struct zo_cost_profile prof;
  struct zo_host_limit hl;
  bool cpu;
  zo_backend_t be = search_setup(cfg, &prof, &hl, &cpu);
  const struct zo_autoplan_opts so = {.config_path = o->config_path, .sets = o->sets, .n_sets = o->n_sets,
                                      .backend = be, .profile = &prof, .host_limit = hl.limit, .cpu_backend = cpu};
  struct zo_autoplan ap;
  int err = zo_autoplan_search(&so, &ap);
  if (err) return err;
  const struct zo_autoplan_candidate *c = autoplan_pick(&ap);
  size_t len = 0;
  if (!c) {
    snprintf(buf, size, "zoffload plan --auto finds no combination that fits either (%d tried): raise the budget or "
             "use a smaller model", ap.n_tried);
  } else {
    int n = snprintf(buf, size, "zoffload plan --auto finds %d combination%s that fit; the fastest predicted "
                     "(%s, %.1f ms a step):", ap.n_fit, ap.n_fit == 1 ? "" : "s", c->what, c->cost.step_s * 1e3);
    len = n > 0 ? (size_t)n : 0;
    for (int k = 0; k < c->n_sets && len < size; k++) {
      n = snprintf(buf + len, size - len, " --set %s", c->sets[k]);
      if (n > 0) len += (size_t)n;
    }
    if (len < size) snprintf(buf + len, size - len, " (or --set engine.placement=auto to train it)");
  }
  zo_autoplan_free(&ap);
  return 0;
}

int zo_autoplan_apply(struct zo_config *cfg, const struct zo_autoplan_apply_opts *o, struct zo_autoplan_applied *res) {
  *res = (struct zo_autoplan_applied){0};
  const bool placement = cfg->engine.placement == ZO_PLACEMENT_AUTO;
  if (!placement && !cfg->micro_batch_auto && !cfg->grad_accum_auto) return 0;
  struct zo_cost_profile prof;
  struct zo_host_limit hl;
  bool cpu;
  zo_backend_t be = search_setup(cfg, &prof, &hl, &cpu);
  /* Under an MPI launcher every rank must choose alike: the search then
   * depends on the config and the profile only (not on free memory read at
   * slightly different moments), and only rank 0 prints and writes. */
  int rank, size; /* size 0: a launcher that gives the rank only, so maybe several */
  const int launched = zo_launcher_rank_env(&rank, &size);
  if (launched < 0) return launched;
  const bool ranks = launched && size != 1, lead = rank == 0;
  FILE *out = lead ? o->out : NULL;
  const struct zo_autoplan_opts so = {.config_path = o->config_path, .sets = o->sets, .n_sets = o->n_sets,
                                      .backend = ranks ? NULL : be, .profile = &prof,
                                      .host_limit = ranks ? 0 : hl.limit, .cpu_backend = cpu,
                                      .split_only = !placement};
  struct zo_autoplan ap;
  int err = zo_autoplan_search(&so, &ap);
  if (err) {
    char why[1024], what[128];
    snprintf(why, sizeof why, "%s", zo_last_error());
    return zo_error(err, "planning %s: %s", auto_what(cfg, what, sizeof what), why);
  }
  const struct zo_autoplan_candidate *found = autoplan_pick(&ap);
  if (!found) {
    zo_autoplan_print(&ap, &prof, 5, o->err);
    zo_autoplan_free(&ap);
    return zo_error(-ENOSPC, "no candidate of the planner fits (above)");
  }
  char what[128], model[512];
  if (out)
    fprintf(out, "auto plan (%s) for %s: %s, predicted %.1f ms per step, %.0f tokens/s (rates: %s); %d sequences a "
                 "step (%s)\n",
            auto_what(cfg, what, sizeof what), zo_model_describe(&ap.model, model, sizeof model), found->what,
            found->cost.step_s * 1e3, found->tokens_per_s,
            prof.measured ? prof.source : "defaults", ap.global_batch,
            cfg->train_batch_size ? "train_batch_size"
                                  : "micro-batch x accumulation; \"auto\" is 8 x 1, the Hugging Face Trainer's defaults");
  /* The chosen overrides after the user's, and the placement fixed. */
  for (int k = 0; k < found->n_sets && out; k++) fprintf(out, "  --set %s\n", found->sets[k]);
  err = autoplan_reload(cfg, o, found, placement);
  zo_autoplan_free(&ap);
  if (err) {
    res->reload_failed = true;
    return err;
  }
  res->chosen = true;
  /* Fixed micro-batch and accumulation in the written config. */
  cfg->micro_batch_auto = cfg->grad_accum_auto = false;
  if (out) autoplan_write_config(cfg, out);
  return 0;
}
