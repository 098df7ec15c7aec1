/* zoffload plan: the memory plan of a config per tier and category and
 * whether it fits (also per rank, per standard placement), or with --auto
 * the planner's ranked candidates. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "zo/autoplan.h"
#include "zo/plan.h"
#include "zo/train.h"

#include "cli.h"

static const int plan_opts[] = {OPT_SET,       OPT_PLACEMENTS, OPT_HOST_RAM, OPT_RANKS, OPT_AUTO,
                                OPT_NVME_PATH, OPT_NVME_FREE,  OPT_BACKEND,  OPT_JSON,  OPT_END};

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
    return cli_bad_usage(cli_usage_plan, "%s: no CUDA device here to read the free memory of: set the GPU's memory as "
                     "engine.gpu_memory_budget (e.g. --set engine.gpu_memory_budget=10GiB)", "--backend cuda");
  zo_cost_profile_load(&prof, cpu ? "cpu" : "cuda");
  struct zo_host_limit hl;
  zo_host_limit_read(&hl);
  if (a->n_host_ram > 1)
    return cli_bad_usage(cli_usage_plan, "--host-ram %s: --auto plans for one machine: give one size", "(several sizes)");
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
  if (err) return cli_fail(cli_exit_code(err), "plan --auto");
  zo_autoplan_print(&ap, &prof, a->json ? 0 : 10, stdout);
  if (a->json) zo_autoplan_print_json(&ap, cpu, stdout);
  const int fit = ap.n_fit;
  zo_autoplan_free(&ap);
  return fit ? 0 : 1;
}

int cli_plan(int argc, char **argv) {
  struct args a = {0};
  int r = cli_parse_args(argc, argv, cli_usage_plan, plan_opts, POS_CONFIG, &a);
  if (r) return r == 1 ? 0 : r;
  struct zo_config cfg;
  if ((r = cli_load_config(&a, &cfg))) return r;
  struct zo_model_config mc;
  struct zo_plan plan;
  bool lora;
  int err = zo_train_model_config_lora(&cfg, &mc, &lora);
  if (!err && lora && a.placements)
    err = zo_error(-ENOTSUP, "lora: plan --placements with LoRA adapters is not built yet (`zoffload plan` and "
                             "`plan --auto` are): remove the lora section or the option");
  if (!err) err = zo_train_check_threads(&cfg);
  /* plan --auto --backend X plans for X: only X is tried here (a CUDA plan
   * made without a GPU does not announce the CPU backend). */
  const char *dev = a.autoplan && a.backend ? a.backend : zo_device_name(cfg.engine.device);
  zo_backend_t be = err ? NULL : zo_backend_init(dev, cfg.engine.threads);
  if (!err && !a.autoplan && (a.nvme_free || a.backend)) {
    zo_config_free(&cfg);
    return cli_bad_usage(cli_usage_plan, "%s is an option of plan --auto", a.backend ? "--backend" : "--nvme-free");
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
    return err ? cli_fail(cli_exit_code(err), "plan") : 0;
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
    return cli_fail(cli_exit_code(err), "plan");
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
  if (err) return cli_fail(1, "plan does not fit");
  printf("fits\n");
  return 0;
}
