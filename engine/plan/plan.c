/* The memory planner (see zo/plan.h). Sizes come only from the layout
 * functions that also allocate (zo_sched_device_plan over zo_model_device_plan,
 * zo_sched_host_plan, zo_sched_nvme_plan), so 8-bit optimizer states count
 * their exact bytes on whichever tier holds them; this file adds budgets,
 * the table and the advice. It allocates nothing on any tier and opens no
 * file. */
#include "zo/plan.h"

#include "zo/fsutil.h"
#include "zo/lora.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

const char *zo_tier_name(enum zo_tier t) {
  static const char *names[ZO_N_TIERS] = {"device", "host", "nvme"};
  ZO_ASSERT((unsigned)t < ZO_N_TIERS);
  return names[t];
}


/* engine.schedule resolved into p->layer_major and p->schedule_why. The
 * layer-major order is not built yet: "auto" runs micro-batch-major and
 * says what layer-major would change; "layer_major" is refused by name. */
static int plan_schedule(const struct zo_config *cfg, struct zo_plan *p) {
  const int K = p->placement.grad_accum;
  const bool streams = p->placement.param_slots > 0;
  const enum zo_schedule_mode mode = cfg->engine.schedule;
  p->layer_major = false;
  if (mode == ZO_SCHEDULE_MICRO_BATCH_MAJOR) {
    snprintf(p->schedule_why, sizeof p->schedule_why, "engine.schedule = \"micro_batch_major\"");
    return 0;
  }
  if (!streams || K < 2) {
    const char *why = !streams ? "the blocks' parameters stay on the device (zero_optimization.offload_param.device "
                                 "none), so no block crosses per micro-batch"
                               : "one micro-batch per step (gradient_accumulation_steps 1): both orders are one";
    if (mode == ZO_SCHEDULE_LAYER_MAJOR)
      return zo_error(-EINVAL, "engine.schedule = \"layer_major\": %s; use \"auto\" or \"micro_batch_major\"", why);
    snprintf(p->schedule_why, sizeof p->schedule_why, "engine.schedule \"auto\": %s", why);
    return 0;
  }
  if (mode == ZO_SCHEDULE_LAYER_MAJOR)
    return zo_error(-ENOTSUP, "engine.schedule = \"layer_major\": the layer-major order is not built yet (each "
                              "block would load once per step instead of %d times); use \"auto\" or "
                              "\"micro_batch_major\", which run the micro-batch-major order", K);
  snprintf(p->schedule_why, sizeof p->schedule_why, "engine.schedule \"auto\": the parameters stream with %d "
           "micro-batches, so each block loads %d times per step each way; the layer-major order (once) is not "
           "built yet", K, K);
  return 0;
}

/* LoRA (the config's lora section on): the base frozen (placement.frozen,
 * checked by zo_placement_check_lora) and the adapters' device bytes by
 * category into lora. */
static int plan_lora(const struct zo_config *cfg, const struct zo_model_config *mc, struct zo_plan *p,
                     size_t lora[ZO_MEM_N_CATEGORIES]) {
  struct zo_lora l;
  const int on = zo_lora_resolve(&cfg->lora, mc, &l);
  if (on <= 0) return on;
  p->placement.frozen = true;
  int err = zo_placement_check_lora(&p->placement);
  struct zo_lora_table lt;
  if (err || (err = zo_lora_table_build(mc, &l, &lt))) return err;
  p->lora_numel = lt.numel;
  zo_lora_device_plan(&lt, p->B * p->T, p->placement.dtype, true, lora);
  zo_lora_table_free(&lt);
  return 0;
}

int zo_plan_build(const struct zo_config *cfg, const struct zo_model_config *mc, zo_backend_t backend,
                  struct zo_plan *p) {
  return zo_plan_build_rank(cfg, mc, backend, 0, 1, p);
}

int zo_plan_build_rank(const struct zo_config *cfg, const struct zo_model_config *mc, zo_backend_t backend,
                       int rank, int n_ranks, struct zo_plan *p) {
  memset(p, 0, sizeof *p);
  p->model = *mc;
  p->B = cfg->micro_batch;
  p->T = cfg->data.seq_len;
  int err = zo_placement_from_config(cfg, mc->n_layer, &p->placement);
  if (err) return err;
  zo_placement_set_ranks(&p->placement, rank, n_ranks);
  p->backend = backend;
  p->placement.stream_workspace = backend ? backend->stream_workspace_bytes : 0;
  struct zo_tensor_table t;
  if ((err = zo_model_build_table(mc, &t))) return err;
  size_t lora[ZO_MEM_N_CATEGORIES] = {0};
  if ((err = plan_lora(cfg, mc, p, lora))) {
    zo_tensor_table_free(&t);
    return err;
  }
  p->total[ZO_TIER_DEVICE] = zo_sched_device_plan(&p->placement, mc, p->B, p->T, p->bytes[ZO_TIER_DEVICE]);
  for (int c = 0; c < ZO_MEM_N_CATEGORIES; c++) {
    p->bytes[ZO_TIER_DEVICE][c] += lora[c];
    p->total[ZO_TIER_DEVICE] += lora[c];
  }
  p->total[ZO_TIER_HOST] = zo_sched_host_plan(&p->placement, &t, p->B, p->T, p->bytes[ZO_TIER_HOST]);
  p->total[ZO_TIER_NVME] = zo_sched_nvme_plan(&p->placement, &t, p->bytes[ZO_TIER_NVME]);
  zo_tensor_table_free(&t);

  size_t free_b = 0, total_b = 0;
  if (cfg->engine.gpu_memory_budget) {
    p->budget[ZO_TIER_DEVICE] = cfg->engine.gpu_memory_budget;
    snprintf(p->budget_src[ZO_TIER_DEVICE], 64, "engine.gpu_memory_budget");
  } else if (backend && backend->mem_info(&free_b, &total_b) == 0) {
    p->budget[ZO_TIER_DEVICE] = free_b;
    snprintf(p->budget_src[ZO_TIER_DEVICE], 64, "free on %s", backend->name);
  }
  if (cfg->engine.host_memory_budget) {
    p->budget[ZO_TIER_HOST] = cfg->engine.host_memory_budget;
    snprintf(p->budget_src[ZO_TIER_HOST], 64, "engine.host_memory_budget");
  }
  if (p->placement.optimizer == ZO_OFFLOAD_NVME || p->placement.param_nvme) {
    /* The store creates the directory: its nearest existing ancestor's (0 when unknown). */
    if (zo_fs_free_bytes(p->placement.nvme_path, &p->budget[ZO_TIER_NVME]) != 0) p->budget[ZO_TIER_NVME] = 0;
    snprintf(p->budget_src[ZO_TIER_NVME], 64, "free on nvme_path");
  }
  for (int i = 0; i < ZO_N_TIERS; i++)
    p->fits[i] = p->budget[i] == 0 || p->total[i] <= p->budget[i];
  return plan_schedule(cfg, p);
}

bool zo_plan_fits(const struct zo_plan *p) {
  return p->fits[ZO_TIER_DEVICE] && p->fits[ZO_TIER_HOST] && p->fits[ZO_TIER_NVME];
}

static const char *cell(size_t n, char buf[32]) { return n ? zo_format_bytes(n, buf) : "-"; }

void zo_plan_print(const struct zo_plan *p, FILE *out) {
  char a[32], b[32], c[32], line[400];
  fprintf(out, "plan: %s; micro-batch %d x %d, %d accumulation step%s\n",
          zo_model_describe(&p->model, line, sizeof line), p->B, p->T, p->placement.grad_accum,
          p->placement.grad_accum == 1 ? "" : "s");
  fprintf(out, "placement: %s\n", zo_placement_describe(&p->placement, line, sizeof line));
  fprintf(out, "schedule: %s (%s)\n", p->layer_major ? "layer-major" : "micro-batch-major", p->schedule_why);
  fprintf(out, "  %-16s %12s %12s %12s\n", "category", "device", "host", "nvme");
  for (int k = 0; k < ZO_SCHED_MEM_N_CATEGORIES; k++)
    fprintf(out, "  %-16s %12s %12s %12s\n", zo_sched_mem_category_name(k),
            cell(p->bytes[ZO_TIER_DEVICE][k], a), cell(p->bytes[ZO_TIER_HOST][k], b),
            cell(p->bytes[ZO_TIER_NVME][k], c));
  fprintf(out, "  %-16s %12s %12s %12s\n", "total", cell(p->total[ZO_TIER_DEVICE], a),
          cell(p->total[ZO_TIER_HOST], b), cell(p->total[ZO_TIER_NVME], c));
  fprintf(out, "  %-16s %12s %12s %12s\n", "budget", p->budget[0] ? zo_format_bytes(p->budget[0], a) : "none",
          p->budget[1] ? zo_format_bytes(p->budget[1], b) : "none",
          p->budget[2] ? zo_format_bytes(p->budget[2], c) : "none");
  fprintf(out, "  %-16s %12s %12s %12s\n", "fits", p->fits[0] ? "yes" : "NO", p->fits[1] ? "yes" : "NO",
          p->fits[2] ? "yes" : "NO");
  for (int i = 0; i < ZO_N_TIERS; i++)
    if (p->budget_src[i][0])
      fprintf(out, "  %s budget: %s\n", zo_tier_name((enum zo_tier)i), p->budget_src[i]);
  fprintf(out, "  exact bytes: device %zu, host %zu, nvme %zu\n", p->total[0], p->total[1], p->total[2]);
  struct zo_plan_traffic tr;
  if (zo_plan_traffic(p, p->layer_major, &tr) == 0)
    fprintf(out, "  bytes per step (predicted, %s): h2d %llu, d2h %llu, nvme read %llu, nvme write %llu\n",
            tr.exact ? "exact: bench step's counters equal them"
                     : "approximate: NVMe traffic from the files' sizes, or a placement not checked byte for byte",
            (unsigned long long)tr.h2d, (unsigned long long)tr.d2h, (unsigned long long)tr.nvme_read,
            (unsigned long long)tr.nvme_write);
}

static const char *const tier_title[ZO_N_TIERS] = {"device arena", "host pool", "nvme files"};

void zo_plan_report_print(const struct zo_plan *p, const struct zo_sched_mem *mem, FILE *out) {
  char a[32], b[32], c[32], d[32];
  fprintf(out, "memory report (%s): bytes per tier and category\n",
          mem ? "planned before start-up; peak and current measured in the allocators"
              : "plan only, nothing allocated yet");
  for (int i = 0; i < ZO_N_TIERS; i++) {
    fprintf(out, "  %-16s %12s %12s %12s\n", zo_tier_name((enum zo_tier)i), "planned", "peak", "current");
    for (int k = 0; k < ZO_SCHED_MEM_N_CATEGORIES; k++)
      fprintf(out, "    %-14s %12s %12s %12s\n", zo_sched_mem_category_name(k), cell(p->bytes[i][k], a),
              mem ? cell(mem->peak[i][k], b) : "?", mem ? cell(mem->current[i][k], c) : "?");
    fprintf(out, "    %-14s %12s %12s %12s\n", "total", cell(p->total[i], a),
            mem ? cell(mem->peak_total[i], b) : "?", mem ? cell(mem->used[i], c) : "?");
    if (!mem) continue;
    if (mem->unclassified[i])
      fprintf(out, "    %-14s %12s (carves no category claims: a bug in the report)\n", "unclassified",
              zo_format_bytes(mem->unclassified[i], a));
    if (i == ZO_TIER_NVME) {
      fprintf(out, "    %s: %s on disk (%zu bytes), plan %zu\n", tier_title[i], zo_format_bytes(mem->used[i], a),
              mem->used[i], p->total[i]);
      continue;
    }
    fprintf(out, "    %s: %s reserved, %s carved, %s free, peak %s (%zu bytes; plan %zu: %s)\n", tier_title[i],
            zo_format_bytes(mem->capacity[i], a), zo_format_bytes(mem->used[i], b),
            zo_format_bytes(mem->capacity[i] - mem->used[i], c), zo_format_bytes(mem->peak_total[i], d),
            mem->peak_total[i], p->total[i],
            mem->peak_total[i] == p->total[i] ? "equal"
            : mem->peak_total[i] < p->total[i] ? "below" : "ABOVE");
  }
  fprintf(out, "  fragmentation: cannot happen by construction: each tier is one reservation sized by "
               "this plan and carved once at start-up by a bump pointer, nothing is freed or "
               "allocated on the device after start-up%s\n",
          mem ? (mem->peak_total[ZO_TIER_DEVICE] <= mem->capacity[ZO_TIER_DEVICE] &&
                         mem->peak_total[ZO_TIER_DEVICE] == p->total[ZO_TIER_DEVICE]
                     ? " (device arena peak == plan)"
                     : " (device arena peak != plan: a bug)")
              : "");
}

/* Re-plans a variant; true when it fits. A device budget the backend gave
 * (its free memory) holds for the variant too: without it every variant
 * would fit the device. */
static bool variant_fits(const struct zo_config *cfg, const struct zo_plan *p, struct zo_plan *out) {
  if (zo_plan_build(cfg, &p->model, p->backend, out) != 0) return false;
  if (!out->budget[ZO_TIER_DEVICE] && p->budget[ZO_TIER_DEVICE]) {
    out->budget[ZO_TIER_DEVICE] = p->budget[ZO_TIER_DEVICE];
    out->fits[ZO_TIER_DEVICE] = out->total[ZO_TIER_DEVICE] <= out->budget[ZO_TIER_DEVICE];
  }
  return zo_plan_fits(out);
}

static void add_variant(char *msg, size_t size, size_t *len, const struct zo_plan *v, const char *sets) {
  char a[32], b[32];
  if (*len >= size) return;
  int n = snprintf(msg + *len, size - *len, "\n    %s (device %s, host %s)", sets,
                   zo_format_bytes(v->total[ZO_TIER_DEVICE], a), zo_format_bytes(v->total[ZO_TIER_HOST], b));
  if (n > 0) *len += (size_t)n;
}

int zo_plan_check(const struct zo_config *cfg, const struct zo_plan *p) {
  if (zo_plan_fits(p)) return 0;
  char msg[1000], a[32], b[32];
  size_t len = 0;
  for (int i = 0; i < ZO_N_TIERS && len < sizeof msg; i++) {
    if (p->fits[i]) continue;
    /* The three largest categories of the tier. */
    int top[3] = {-1, -1, -1};
    for (int k = 0; k < ZO_SCHED_MEM_N_CATEGORIES; k++) {
      for (int r = 0; r < 3; r++) {
        if (top[r] < 0 || p->bytes[i][k] > p->bytes[i][top[r]]) {
          for (int q = 2; q > r; q--) top[q] = top[q - 1];
          top[r] = k;
          break;
        }
      }
    }
    zo_format_bytes(p->total[i], a);
    zo_format_bytes(p->budget[i], b);
    /* Figures that round alike ("needs 30.00 MiB but allows 30.00 MiB") are given in bytes. */
    if (!strcmp(a, b)) {
      snprintf(a, sizeof a, "%zu bytes", p->total[i]);
      snprintf(b, sizeof b, "%zu bytes", p->budget[i]);
    }
    int n = snprintf(msg + len, sizeof msg - len, "%sthe plan needs %s on the %s tier but %s allows %s; largest:",
                     len ? "; " : "", a, zo_tier_name((enum zo_tier)i), p->budget_src[i], b);
    if (n > 0) len += (size_t)n;
    for (int r = 0; r < 3 && len < sizeof msg; r++) {
      if (top[r] < 0 || p->bytes[i][top[r]] == 0) continue;
      n = snprintf(msg + len, sizeof msg - len, "%s %s %s", r ? "," : "", zo_sched_mem_category_name(top[r]),
                   zo_format_bytes(p->bytes[i][top[r]], a));
      if (n > 0) len += (size_t)n;
    }
  }
  size_t before = len;
  if (len < sizeof msg) {
    int n = snprintf(msg + len, sizeof msg - len, ". Changes that fit:");
    if (n > 0) len += (size_t)n;
  }
  const size_t mark = len;
  struct zo_config v;
  struct zo_plan vp;
  const int stage = cfg->zero.stage < 2 ? 2 : cfg->zero.stage;
  if (cfg->zero.offload_optimizer.device == ZO_OFFLOAD_NONE) {
    v = *cfg;
    v.zero.stage = stage;
    v.zero.offload_optimizer.device = ZO_OFFLOAD_CPU;
    if (variant_fits(&v, p, &vp)) {
      char sets[160];
      snprintf(sets, sizeof sets, "--set zero_optimization.stage=%d --set zero_optimization.offload_optimizer.device=cpu", stage);
      add_variant(msg, sizeof msg, &len, &vp, sets);
    }
    if (cfg->zero.offload_optimizer.nvme_path[0]) {
      v.zero.offload_optimizer.device = ZO_OFFLOAD_NVME;
      if (variant_fits(&v, p, &vp)) {
        char sets[160];
        snprintf(sets, sizeof sets, "--set zero_optimization.stage=%d --set zero_optimization.offload_optimizer.device=nvme", stage);
        add_variant(msg, sizeof msg, &len, &vp, sets);
      }
    }
  }
  if (cfg->zero.offload_optimizer.device == ZO_OFFLOAD_NVME) {
    /* NVMe too small: the host may hold the optimizer instead. */
    v = *cfg;
    v.zero.offload_optimizer.device = ZO_OFFLOAD_CPU;
    if (variant_fits(&v, p, &vp))
      add_variant(msg, sizeof msg, &len, &vp, "--set zero_optimization.offload_optimizer.device=cpu");
  }
  if (cfg->zero.offload_param.device == ZO_OFFLOAD_NONE) {
    v = *cfg;
    v.zero.stage = 3;
    v.zero.offload_param.device = ZO_OFFLOAD_CPU;
    if (v.zero.offload_optimizer.device == ZO_OFFLOAD_NONE) v.zero.offload_optimizer.device = ZO_OFFLOAD_CPU;
    if (variant_fits(&v, p, &vp)) {
      char sets[200];
      snprintf(sets, sizeof sets, "--set zero_optimization.stage=3 --set zero_optimization.offload_param.device=cpu%s",
               cfg->zero.offload_optimizer.device == ZO_OFFLOAD_NONE
                   ? " --set zero_optimization.offload_optimizer.device=cpu" : "");
      add_variant(msg, sizeof msg, &len, &vp, sets);
    }
  }
  if (cfg->zero.offload_param.device != ZO_OFFLOAD_NONE) {
    /* Fewer parameter slots: the most that fit (prefetch depth costs device memory). */
    for (int k = cfg->zero.offload_param.buffer_count - 1; k >= 2; k--) {
      v = *cfg;
      v.zero.offload_param.buffer_count = k;
      if (variant_fits(&v, p, &vp)) {
        char sets[160];
        snprintf(sets, sizeof sets, "--set zero_optimization.offload_param.buffer_count=%d", k);
        add_variant(msg, sizeof msg, &len, &vp, sets);
        break;
      }
    }
  }
  if (!cfg->activation_checkpointing.enabled) {
    v = *cfg;
    v.activation_checkpointing.enabled = true;
    v.activation_checkpointing.number_checkpoints = 0;
    if (variant_fits(&v, p, &vp)) add_variant(msg, sizeof msg, &len, &vp, "--set activation_checkpointing.enabled=true");
  }
  for (int d = 2; d <= cfg->micro_batch; d *= 2) {
    if (cfg->micro_batch % d) break;
    v = *cfg;
    v.micro_batch = cfg->micro_batch / d;
    v.grad_accum = cfg->grad_accum * d;
    if (variant_fits(&v, p, &vp)) {
      char sets[160];
      snprintf(sets, sizeof sets, "--set train_micro_batch_size_per_gpu=%d --set gradient_accumulation_steps=%d",
               v.micro_batch, v.grad_accum);
      add_variant(msg, sizeof msg, &len, &vp, sets);
      break;
    }
  }
  if (len != mark && len < sizeof msg)
    snprintf(msg + len, sizeof msg - len, "; `zoffload plan CONFIG --auto` ranks combined changes by predicted "
             "time and --set engine.placement=auto trains its best");
  if (len == mark) {
    len = before;
    snprintf(msg + len, sizeof msg - len, ". No single change fits (tried offloading the optimizer, the "
             "parameters, fewer parameter slots, activation checkpointing and smaller micro-batches); `zoffload "
             "plan CONFIG --auto` searches combined changes and --set engine.placement=auto trains its best");
  }
  return zo_error(-ENOMEM, "%s", msg);
}

/* ---- the placements table ------------------------------------------------ */

struct placement_row {
  const char *name;
  int stage;
  enum zo_offload_device optimizer, param;
};

static const struct placement_row placement_rows[] = {
    {"all on the device", 0, ZO_OFFLOAD_NONE, ZO_OFFLOAD_NONE},
    {"optimizer on cpu (stage 2)", 2, ZO_OFFLOAD_CPU, ZO_OFFLOAD_NONE},
    {"optimizer on nvme (stage 2)", 2, ZO_OFFLOAD_NVME, ZO_OFFLOAD_NONE},
    {"params + optimizer on cpu (stage 3)", 3, ZO_OFFLOAD_CPU, ZO_OFFLOAD_CPU},
    {"params cpu, optimizer nvme (stage 3)", 3, ZO_OFFLOAD_NVME, ZO_OFFLOAD_CPU},
    {"params + optimizer on nvme (stage 3)", 3, ZO_OFFLOAD_NVME, ZO_OFFLOAD_NVME},
};

int zo_plan_placements_print(const struct zo_config *cfg, const struct zo_model_config *mc, zo_backend_t backend,
                             const size_t *host_ram, int n_ram, FILE *out) {
  char desc[200], a[32], b[32], c[32];
  struct zo_plan p0;
  int err = zo_plan_build(cfg, mc, backend, &p0);
  if (err) return err;
  const size_t dev_budget = p0.budget[ZO_TIER_DEVICE];
  fprintf(out, "placements for %s, micro-batch %d x %d, %s%s%s\n", zo_model_describe(mc, desc, sizeof desc),
          cfg->micro_batch, cfg->data.seq_len,
          p0.placement.dtype == ZO_BF16 ? "bf16" : p0.placement.dtype == ZO_F16 ? "fp16" : "fp32",
          p0.placement.opt.eightbit ? ", AdamW8bit" : ", AdamW",
          p0.placement.ckpt_blocks ? ", activation checkpointing" : "");
  fprintf(out, "device budget %s (%s); host: the pool's bytes against each RAM size (leave room for the OS); "
               "nvme: bytes of the state files\n",
          dev_budget ? zo_format_bytes(dev_budget, a) : "unlimited", dev_budget ? p0.budget_src[ZO_TIER_DEVICE] : "none");
  fprintf(out, "  %-38s %6s %11s %11s %11s %7s", "placement", "slots", "device", "host", "nvme", "device");
  for (int r = 0; r < n_ram; r++) {
    char h[40];
    snprintf(h, sizeof h, "host %s", zo_format_bytes(host_ram[r], a));
    fprintf(out, " %13s", h);
  }
  fprintf(out, "\n");
  for (size_t i = 0; i < sizeof placement_rows / sizeof placement_rows[0]; i++) {
    const struct placement_row *row = &placement_rows[i];
    struct zo_config v = *cfg;
    v.zero.stage = row->stage;
    v.zero.offload_optimizer.device = row->optimizer;
    v.zero.offload_param.device = row->param;
    /* The table reports NVMe bytes needed, not free space: any path plans. */
    if (row->optimizer == ZO_OFFLOAD_NVME && (!v.zero.offload_optimizer.nvme_path || !v.zero.offload_optimizer.nvme_path[0]))
      v.zero.offload_optimizer.nvme_path = (char *)".";
    struct zo_plan vp;
    int slots = 0;
    if (row->param != ZO_OFFLOAD_NONE) {
      /* The most parameter slots (up to buffer_count, at least 2) that fit the device. */
      for (slots = cfg->zero.offload_param.buffer_count < 2 ? 2 : cfg->zero.offload_param.buffer_count; slots > 2;
           slots--) {
        v.zero.offload_param.buffer_count = slots;
        if (zo_plan_build(&v, mc, backend, &vp) == 0 && vp.fits[ZO_TIER_DEVICE]) break;
      }
      v.zero.offload_param.buffer_count = slots;
    }
    if ((err = zo_plan_build(&v, mc, backend, &vp))) {
      fprintf(out, "  %-38s not plannable: %s\n", row->name, zo_last_error());
      continue;
    }
    char sl[16] = "-";
    if (slots) snprintf(sl, sizeof sl, "%d", slots);
    fprintf(out, "  %-38s %6s %11s %11s %11s %7s", row->name, sl, zo_format_bytes(vp.total[ZO_TIER_DEVICE], a),
            zo_format_bytes(vp.total[ZO_TIER_HOST], b),
            vp.total[ZO_TIER_NVME] ? zo_format_bytes(vp.total[ZO_TIER_NVME], c) : "-",
            vp.fits[ZO_TIER_DEVICE] ? "fits" : "NO");
    for (int r = 0; r < n_ram; r++)
      fprintf(out, " %13s", !vp.fits[ZO_TIER_DEVICE] ? "-" : vp.total[ZO_TIER_HOST] <= host_ram[r] ? "fits" : "NO");
    fprintf(out, "\n");
  }
  return 0;
}
