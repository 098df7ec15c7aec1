/* The planner that chooses (see zo/autoplan.h): candidates as "key=value"
 * overrides loaded like --set, bytes from zo_plan_build, time from
 * zo_cost_step. It allocates no tier and opens no data file. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo/autoplan.h"
#include "zo/fsutil.h"
#include "zo/train_setup.h"

/* The nearest existing ancestor of path is a directory where a directory
 * can be made (a probe made and removed: root passes access() anywhere). */
static bool dir_writable(const char *path) {
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s", path);
  for (;;) {
    struct stat st;
    if (stat(p, &st) == 0) {
      if (!S_ISDIR(st.st_mode)) return false;
      char probe[PATH_MAX + 32];
      snprintf(probe, sizeof probe, "%s/.zo-probe-XXXXXX", p);
      if (!mkdtemp(probe)) return false;
      rmdir(probe);
      return true;
    }
    char *slash = strrchr(p, '/');
    if (!slash) snprintf(p, sizeof p, ".");
    else if (slash == p) p[1] = '\0';
    else *slash = '\0';
  }
}

struct cand_spec {
  int B, K;
  int half;            /* switch fp32 -> bf16 */
  int ckpt;            /* 0 off, 1 on (device), 2 on with cpu_checkpointing */
  enum zo_offload_device opt, param;
  int slots;           /* offload_param.buffer_count (param offloaded) */
  int nvbufs;          /* offload_optimizer.buffer_count (optimizer on NVMe; 0: the config's) */
  int gslots;          /* engine.grad_slots (optimizer offloaded: gradients on the host) */
  bool eightbit;       /* suggestion: optimizer.type AdamW8bit */
};

struct search {
  const struct zo_autoplan_opts *o;
  const struct zo_config *base;
  struct zo_autoplan *a;
  int cap_fit, cap_suggest;
  double best_closest;
};

static const char *const offload_word[] = {"none", "cpu", "nvme"};

/* The overrides of spec s as "key=value": all of them in sets (applied), and
 * in the candidate those that differ from the base config (shown). */
static int spec_sets(const struct search *S, const struct cand_spec *s, char sets[][ZO_AUTOPLAN_SET_LEN], bool shown[]) {
  const struct zo_config *b = S->base;
  int n = 0;
#define ADD(differs, ...)                                \
  do {                                                   \
    snprintf(sets[n], ZO_AUTOPLAN_SET_LEN, __VA_ARGS__);                 \
    shown[n++] = (differs);                              \
  } while (0)
  ADD(s->B != b->micro_batch, "train_micro_batch_size_per_gpu=%d", s->B);
  ADD(s->K != b->grad_accum, "gradient_accumulation_steps=%d", s->K);
  if (s->half) ADD(!b->bf16, "bf16.enabled=true");
  ADD((s->ckpt > 0) != b->activation_checkpointing.enabled, "activation_checkpointing.enabled=%s",
      s->ckpt ? "true" : "false");
  if (s->ckpt)
    ADD((s->ckpt == 2) != b->activation_checkpointing.cpu_checkpointing, "activation_checkpointing.cpu_checkpointing=%s",
        s->ckpt == 2 ? "true" : "false");
  const int stage = s->param != ZO_OFFLOAD_NONE ? 3 : s->opt != ZO_OFFLOAD_NONE ? (b->zero.stage > 2 ? b->zero.stage : 2)
                                                                                : b->zero.stage;
  ADD(stage != b->zero.stage, "zero_optimization.stage=%d", stage);
  ADD(s->opt != b->zero.offload_optimizer.device, "zero_optimization.offload_optimizer.device=%s", offload_word[s->opt]);
  ADD(s->param != b->zero.offload_param.device, "zero_optimization.offload_param.device=%s", offload_word[s->param]);
  const char *dir = S->a->nvme_dir;
  if (s->opt == ZO_OFFLOAD_NVME)
    ADD(strcmp(dir, b->zero.offload_optimizer.nvme_path), "zero_optimization.offload_optimizer.nvme_path=%s", dir);
  if (s->param == ZO_OFFLOAD_NVME)
    ADD(strcmp(dir, b->zero.offload_param.nvme_path), "zero_optimization.offload_param.nvme_path=%s", dir);
  if (s->param != ZO_OFFLOAD_NONE)
    ADD(s->slots != b->zero.offload_param.buffer_count, "zero_optimization.offload_param.buffer_count=%d", s->slots);
  if (s->opt == ZO_OFFLOAD_NVME && s->nvbufs)
    ADD(s->nvbufs != b->zero.offload_optimizer.buffer_count, "zero_optimization.offload_optimizer.buffer_count=%d",
        s->nvbufs);
  if (s->opt != ZO_OFFLOAD_NONE && s->gslots)
    ADD(s->gslots != b->engine.grad_slots, "engine.grad_slots=%d", s->gslots);
  if (s->eightbit) ADD(true, "optimizer.type=AdamW8bit");
#undef ADD
  return n;
}

static void describe(const struct cand_spec *s, const struct zo_plan *p, int base_nvbufs, char *buf, size_t size) {
  char par[48] = "", opt[40];
  if (s->param != ZO_OFFLOAD_NONE) snprintf(par, sizeof par, ", params %s (%d slots)", offload_word[s->param], p->placement.param_slots);
  if (s->opt == ZO_OFFLOAD_NVME && s->nvbufs && s->nvbufs != base_nvbufs)
    snprintf(opt, sizeof opt, "nvme (%d buffers)", s->nvbufs);
  else
    snprintf(opt, sizeof opt, "%s", s->opt == ZO_OFFLOAD_NONE ? "device" : offload_word[s->opt]);
  if (p->placement.frozen) /* LoRA: the adapters' optimizer is on the device; the base has none */
    snprintf(opt, sizeof opt, "LoRA, base %s", s->param == ZO_OFFLOAD_NONE  ? "on device"
                                                : s->param == ZO_OFFLOAD_NVME ? "on nvme"
                                                                              : "streamed");
  snprintf(buf, size, "%s%s, %s%s%s%s, micro-batch %d x %d%s",
           p->placement.dtype == ZO_BF16 ? "bf16" : p->placement.dtype == ZO_F16 ? "fp16" : "fp32",
           s->ckpt == 2 ? ", ckpt (cpu)" : s->ckpt ? ", ckpt" : "", p->placement.frozen ? "" : "optimizer ", opt, par,
           p->placement.grads_on_host && p->placement.grad_slots == 1 ? ", 1 grad slot" : "", s->B, s->K,
           s->eightbit ? ", AdamW8bit" : "");
}

/* Plans spec s; 1 when it fits, 0 when not, -1 when refused. */
static int try_spec(struct search *S, const struct cand_spec *s, struct zo_autoplan_candidate *out) {
  const struct zo_autoplan_opts *o = S->o;
  struct zo_autoplan *a = S->a;
  char sets[ZO_AUTOPLAN_MAX_SETS + 2][ZO_AUTOPLAN_SET_LEN]; /* every override spec_sets can make (14) */
  bool shown[ZO_AUTOPLAN_MAX_SETS + 2];
  const int n = spec_sets(S, s, sets, shown);
  const char *all[256 + ZO_AUTOPLAN_MAX_SETS + 2];
  int n_all = 0;
  for (int i = 0; i < o->n_sets && i < 256; i++) all[n_all++] = o->sets[i];
  for (int i = 0; i < n; i++) all[n_all++] = sets[i];
  struct zo_config cfg;
  int err = zo_config_load_quiet(&cfg, o->config_path, all, n_all);
  a->n_tried++;
  if (err) {
    a->n_refused++;
    return -1;
  }
  struct zo_plan p;
  err = zo_plan_build(&cfg, &a->model, o->backend, &p); /* its stream workspaces in the device bytes */
  zo_config_free(&cfg);
  if (err) {
    a->n_refused++;
    return -1;
  }
  memset(out, 0, sizeof *out);
  for (int i = 0; i < n; i++)
    if (shown[i] && out->n_sets < ZO_AUTOPLAN_MAX_SETS) memcpy(out->sets[out->n_sets++], sets[i], sizeof out->sets[0]);
  bool fits = true;
  for (int t = 0; t < ZO_N_TIERS; t++) {
    out->bytes[t] = p.total[t];
    if (a->budget[t] && p.total[t] > a->budget[t]) out->short_by[t] = p.total[t] - a->budget[t];
    if (out->short_by[t]) fits = false;
  }
  /* The CPU backend's device arena is host memory too. */
  if (o->cpu_backend && o->host_limit && p.total[ZO_TIER_DEVICE] + p.total[ZO_TIER_HOST] > o->host_limit) {
    const size_t over = p.total[ZO_TIER_DEVICE] + p.total[ZO_TIER_HOST] - o->host_limit;
    if (over > out->short_by[ZO_TIER_HOST]) out->short_by[ZO_TIER_HOST] = over;
    fits = false;
  }
  zo_cost_step(o->profile, &p, &out->cost);
  if (zo_plan_traffic(&p, p.layer_major, &out->traffic) != 0) {
    a->n_refused++;
    return -1;
  }
  out->tokens_per_s = (double)a->global_batch * a->T / out->cost.step_s;
  describe(s, &p, S->base->zero.offload_optimizer.buffer_count, out->what, sizeof out->what);
  return fits ? 1 : 0;
}

static int add(struct zo_autoplan_candidate **v, int *n, int *cap, const struct zo_autoplan_candidate *c) {
  if (*n == *cap) {
    const int nc = *cap ? 2 * *cap : 64;
    struct zo_autoplan_candidate *nv = realloc(*v, (size_t)nc * sizeof *nv);
    if (!nv) return zo_error(-ENOMEM, "plan --auto: out of memory for candidates");
    *v = nv, *cap = nc;
  }
  (*v)[(*n)++] = *c;
  return 0;
}

static void consider_closest(struct search *S, const struct zo_autoplan_candidate *c) {
  double shortfall = 0;
  for (int t = 0; t < ZO_N_TIERS; t++) shortfall += (double)c->short_by[t];
  if (!S->a->have_closest || shortfall < S->best_closest) {
    S->a->closest = *c;
    S->a->have_closest = true;
    S->best_closest = shortfall;
  }
}

static int cmp_cand(const void *x, const void *y) {
  const struct zo_autoplan_candidate *a = x, *b = y;
  if (a->cost.step_s != b->cost.step_s) return a->cost.step_s < b->cost.step_s ? -1 : 1;
  if (a->bytes[ZO_TIER_DEVICE] != b->bytes[ZO_TIER_DEVICE]) return a->bytes[ZO_TIER_DEVICE] < b->bytes[ZO_TIER_DEVICE] ? -1 : 1;
  return a->n_sets - b->n_sets;
}

/* Every combination, once fp32/AdamW (eightbit false) and once as suggestions. */
/* Spec s with two gradient slots, then (gradients on the host) one when two
 * do not fit; 1 fits, 0 not, -1 refused. */
static int try_gslots(struct search *S, struct cand_spec *s, struct zo_autoplan_candidate *c) {
  s->gslots = 2;
  int r = try_spec(S, s, c);
  if (r != 0 || s->opt == ZO_OFFLOAD_NONE) return r;
  s->gslots = 1;
  return try_spec(S, s, c);
}

/* zo_autoplan_opts.split_only: each micro-batch of mbs with the config's
 * placement, precision and checkpointing. */
static int search_split(struct search *S, const int *mbs, int n_mb) {
  const struct zo_config *b = S->base;
  struct zo_autoplan *a = S->a;
  const int ckpt = !b->activation_checkpointing.enabled ? 0 : b->activation_checkpointing.cpu_checkpointing ? 2 : 1;
  for (int i = 0; i < n_mb; i++) {
    if (a->global_batch % mbs[i]) continue;
    struct cand_spec s = {.B = mbs[i], .K = a->global_batch / mbs[i], .ckpt = ckpt,
                          .opt = b->zero.offload_optimizer.device, .param = b->zero.offload_param.device,
                          .slots = b->zero.offload_param.buffer_count};
    struct zo_autoplan_candidate c;
    const int r = try_spec(S, &s, &c);
    if (r < 0) continue;
    int err = r == 1 ? add(&a->fit, &a->n_fit, &S->cap_fit, &c) : 0;
    if (r != 1) consider_closest(S, &c);
    if (err) return err;
  }
  return 0;
}

static int search_all(struct search *S, bool eightbit) {
  const struct zo_config *b = S->base;
  struct zo_autoplan *a = S->a;
  const int G = a->global_batch;
  int mbs[16], n_mb = 0;
  for (int B = 1; B <= G && n_mb < 15; B *= 2)
    if (G % B == 0) mbs[n_mb++] = B;
  bool have = false;
  for (int i = 0; i < n_mb; i++) have = have || mbs[i] == b->micro_batch;
  if (!have) mbs[n_mb++] = b->micro_batch;
  if (S->o->split_only) return search_split(S, mbs, n_mb);
  const bool nv = a->nvme_dir[0] != '\0';
  const bool lora = b->lora.r > 0 || (b->lora.init_from && b->lora.init_from[0]);
  const int n_half = !b->bf16 && !b->fp16.enabled && S->o->profile->half_ok ? 2 : 1;
  static const enum zo_offload_device places[][2] = {
      {ZO_OFFLOAD_NONE, ZO_OFFLOAD_NONE}, {ZO_OFFLOAD_CPU, ZO_OFFLOAD_NONE}, {ZO_OFFLOAD_NVME, ZO_OFFLOAD_NONE},
      {ZO_OFFLOAD_CPU, ZO_OFFLOAD_CPU},   {ZO_OFFLOAD_NVME, ZO_OFFLOAD_CPU}, {ZO_OFFLOAD_CPU, ZO_OFFLOAD_NVME},
      {ZO_OFFLOAD_NVME, ZO_OFFLOAD_NVME},
      {ZO_OFFLOAD_NONE, ZO_OFFLOAD_CPU}, /* LoRA: the frozen base streamed, the adapters' optimizer on the device */
      {ZO_OFFLOAD_NONE, ZO_OFFLOAD_NVME}, /* LoRA: the frozen base read from NVMe */
  };
  for (int i = 0; i < n_mb; i++)
    for (int h = 0; h < n_half; h++)
      for (int ck = 0; ck < 3; ck++)
        for (size_t pi = 0; pi < sizeof places / sizeof places[0]; pi++) {
          struct cand_spec s = {.B = mbs[i], .K = G / mbs[i], .half = h, .ckpt = ck, .opt = places[pi][0],
                                .param = places[pi][1], .eightbit = eightbit};
          if (!nv && (s.opt == ZO_OFFLOAD_NVME || s.param == ZO_OFFLOAD_NVME)) continue;
          /* The base alone on NVMe is LoRA's only: a full fine-tune's search stays as it was. */
          if (!lora && s.opt == ZO_OFFLOAD_NONE && s.param == ZO_OFFLOAD_NVME) continue;
          struct zo_autoplan_candidate c;
          int r = -1;
          /* The most parameter slots (4 .. 1) that fit, each with two
           * gradient slots or else one, then with the optimizer on NVMe the
           * most staging buffers (the config's .. 2). */
          const int nv_hi = s.opt == ZO_OFFLOAD_NVME ? b->zero.offload_optimizer.buffer_count : 0;
          for (s.nvbufs = nv_hi; r != 1 && s.nvbufs >= (nv_hi ? 2 : 0); s.nvbufs--) {
            if (s.param == ZO_OFFLOAD_NONE) {
              r = try_gslots(S, &s, &c);
            } else {
              for (s.slots = 4; s.slots >= 1; s.slots--)
                if ((r = try_gslots(S, &s, &c)) != 0) break;
            }
            if (r < 0 || !nv_hi) break;
          }
          if (r < 0) continue;
          int err = 0;
          if (r == 1 && !eightbit) err = add(&a->fit, &a->n_fit, &S->cap_fit, &c);
          else if (r == 1) {
            snprintf(c.note, sizeof c.note, "8-bit optimizer states (AdamW8bit): a different update, "
                     "not chosen automatically");
            err = add(&a->suggest, &a->n_suggest, &S->cap_suggest, &c);
          } else if (!eightbit) {
            consider_closest(S, &c);
          }
          if (err) return err;
        }
  return 0;
}

int zo_autoplan_search(const struct zo_autoplan_opts *o, struct zo_autoplan *a) {
  memset(a, 0, sizeof *a);
  struct zo_config base;
  /* The caller loaded it already and its warnings were printed then. */
  int err = zo_config_load_quiet(&base, o->config_path, o->sets, o->n_sets);
  if (err) return err;
  if ((err = zo_train_model_config_lora(&base, &a->model, NULL))) goto out;
  a->global_batch = base.micro_batch * base.grad_accum;
  a->T = base.data.seq_len;
  a->steps = base.data.epochs > 0 ? 0 : base.steps;
  a->memlock = o->memlock;
  size_t free_b = 0, total_b = 0;
  if (base.engine.gpu_memory_budget && !o->cpu_backend && base.engine.gpu_memory_budget > ZO_CUDA_CONTEXT_MARGIN) {
    /* A GPU's size given as the budget: the CUDA context (and cuBLASLt's
     * handle, the kernels' modules) takes its part before the arena. */
    char m[32];
    a->budget[ZO_TIER_DEVICE] = base.engine.gpu_memory_budget - ZO_CUDA_CONTEXT_MARGIN;
    snprintf(a->budget_src[ZO_TIER_DEVICE], sizeof a->budget_src[0],
             "engine.gpu_memory_budget less %s for the CUDA context (docs/offload.md)",
             zo_format_bytes(ZO_CUDA_CONTEXT_MARGIN, m));
  } else if (base.engine.gpu_memory_budget) {
    a->budget[ZO_TIER_DEVICE] = base.engine.gpu_memory_budget;
    snprintf(a->budget_src[ZO_TIER_DEVICE], sizeof a->budget_src[0], "engine.gpu_memory_budget");
  } else if (o->backend && o->backend->mem_info(&free_b, &total_b) == 0) {
    a->budget[ZO_TIER_DEVICE] = free_b;
    snprintf(a->budget_src[ZO_TIER_DEVICE], sizeof a->budget_src[0], "free on %s", o->backend->name);
  }
  /* The smaller of the configured budget and what the machine gives: train
   * refuses a plan over either. */
  if (base.engine.host_memory_budget && !(o->host_limit && o->host_limit < base.engine.host_memory_budget)) {
    a->budget[ZO_TIER_HOST] = base.engine.host_memory_budget;
    snprintf(a->budget_src[ZO_TIER_HOST], sizeof a->budget_src[0], "engine.host_memory_budget");
  } else if (o->host_limit) {
    a->budget[ZO_TIER_HOST] = o->host_limit;
    snprintf(a->budget_src[ZO_TIER_HOST], sizeof a->budget_src[0], "%s%s%s",
             o->host_given ? "given by --host-ram" : "available on this machine",
             base.engine.host_memory_budget ? ", below engine.host_memory_budget" : "",
             o->cpu_backend ? ", shared with the CPU backend's device arena" : "");
  }
  const char *dir = o->nvme_path && o->nvme_path[0] ? o->nvme_path
                    : base.zero.offload_optimizer.nvme_path[0] ? base.zero.offload_optimizer.nvme_path
                    : base.zero.offload_param.nvme_path[0] ? base.zero.offload_param.nvme_path
                                                           : ".";
  const char *from = o->nvme_path && o->nvme_path[0] ? "--nvme-path"
                     : base.zero.offload_optimizer.nvme_path[0] ? "offload_optimizer.nvme_path"
                     : base.zero.offload_param.nvme_path[0] ? "offload_param.nvme_path"
                                                            : "the working directory";
  char abs[PATH_MAX];
  const char *full = realpath(dir, abs) ? abs : dir;
  if (!strcmp(dir, "none")) {
    snprintf(a->nvme_why, sizeof a->nvme_why, "not considered (--nvme-path none)");
  } else if (strlen(full) >= sizeof a->nvme_dir) {
    snprintf(a->nvme_why, sizeof a->nvme_why, "not considered: %.300s... (%s): the path is too long", full, from);
  } else if (o->nvme_free || dir_writable(dir)) { /* --nvme-free: another machine's directory */
    /* Absolute: the --set lines hold wherever the run is started from. */
    snprintf(a->nvme_dir, sizeof a->nvme_dir, "%.511s", full);
    a->budget[ZO_TIER_NVME] = o->nvme_free;
    if (!o->nvme_free && zo_fs_free_bytes(dir, &a->budget[ZO_TIER_NVME]) != 0) a->budget[ZO_TIER_NVME] = 0;
    snprintf(a->budget_src[ZO_TIER_NVME], sizeof a->budget_src[0], "%s under %.500s (%s)",
             o->nvme_free ? "given free space" : "free", dir, from);
    snprintf(a->nvme_why, sizeof a->nvme_why, "%.500s (%s)", dir, from);
  } else {
    snprintf(a->nvme_why, sizeof a->nvme_why, "not considered: %.500s (%s) is not writable", dir, from);
  }
  struct search S = {.o = o, .base = &base, .a = a};
  if ((err = search_all(&S, false))) goto out;
  if (base.optimizer.type != ZO_OPTIMIZER_ADAMW8BIT && !o->split_only && (err = search_all(&S, true))) goto out;
  if (a->n_fit) qsort(a->fit, (size_t)a->n_fit, sizeof *a->fit, cmp_cand);
  if (a->n_suggest) qsort(a->suggest, (size_t)a->n_suggest, sizeof *a->suggest, cmp_cand);
  /* Suggestions worth a user's thought: faster than the best plan, or the
   * only ones that fit. */
  int keep = 0;
  for (int i = 0; i < a->n_suggest && keep < 3; i++)
    if (!a->n_fit || a->suggest[i].cost.step_s < 0.95 * a->fit[0].cost.step_s) a->suggest[keep++] = a->suggest[i];
  a->n_suggest = keep;
out:
  zo_config_free(&base);
  if (err) zo_autoplan_free(a);
  return err;
}

void zo_autoplan_free(struct zo_autoplan *a) {
  if (!a) return;
  free(a->fit);
  free(a->suggest);
  a->fit = a->suggest = NULL;
  a->n_fit = a->n_suggest = 0;
}

/* ---- output ------------------------------------------------------------------------ */

static const char *cell(size_t n, char buf[32]) { return n ? zo_format_bytes(n, buf) : "-"; }

static void print_row(const struct zo_autoplan_candidate *c, int rank, bool cpu, FILE *out) {
  char d[32], h[32], n[32];
  fprintf(out, "  %3d %10.1f %10.0f  %-13s %11s %11s %11s  %s\n", rank, c->cost.step_s * 1e3, c->tokens_per_s,
          zo_bottleneck_name(c->cost.bottleneck, cpu), cell(c->bytes[ZO_TIER_DEVICE], d),
          cell(c->bytes[ZO_TIER_HOST], h), cell(c->bytes[ZO_TIER_NVME], n), c->what);
  fprintf(out, "      ");
  if (!c->n_sets) fprintf(out, "(the config as it is)");
  for (int i = 0; i < c->n_sets; i++) fprintf(out, "%s--set %s", i ? " " : "", c->sets[i]);
  fprintf(out, "\n");
}

/* The best candidate's NVMe state traffic, and what the layer-major order
 * (not built yet) would predict for it, its K checkpointed inputs per block
 * against the tier's budget. */
static void print_schedule(const struct zo_autoplan *a, const struct zo_autoplan_candidate *c, FILE *out) {
  char b[2][32];
  if (c->cost.nvme_s > 0)
    fprintf(out, "  #1's NVMe: %.1f s of reads and writes per step, %.1f s of them the optimizer state (master, m, "
            "v)\n", c->cost.nvme_s, c->cost.nvme_state_s);
  if (c->cost.layer_major_s <= 0) return;
  const int t = c->cost.layer_major_ckpt_tier;
  const size_t need = c->bytes[t] + c->cost.layer_major_ckpt_extra;
  fprintf(out, "  #1 runs micro-batch-major; the layer-major order (not built yet) would predict %.1f ms a step, "
          "keeping %s more checkpointed inputs on the %s (%s in all: %s)\n", c->cost.layer_major_s * 1e3,
          zo_format_bytes(c->cost.layer_major_ckpt_extra, b[0]), zo_tier_name((enum zo_tier)t),
          zo_format_bytes(need, b[1]), !a->budget[t] || need <= a->budget[t] ? "fits" : "over budget");
}

/* The whole run's predicted time for candidate c: steps x its step. */
static void print_run_time(const struct zo_autoplan *a, const struct zo_autoplan_candidate *c, FILE *out) {
  if (a->steps <= 0) {
    fprintf(out, "  the run's length: data.epochs sets its steps at start-up (from data.train's size)\n");
    return;
  }
  const double s = c->cost.step_s * (double)a->steps;
  if (s < 120) fprintf(out, "  #1 for the config's %ld steps: %.1f s predicted\n", a->steps, s);
  else if (s < 7200) fprintf(out, "  #1 for the config's %ld steps: %.1f min predicted\n", a->steps, s / 60);
  else fprintf(out, "  #1 for the config's %ld steps: %.1f h predicted\n", a->steps, s / 3600);
}

void zo_autoplan_print(const struct zo_autoplan *a, const struct zo_cost_profile *r, int top, FILE *out) {
  char desc[200], b[3][32];
  const bool cpu = r->shared_cores;
  fprintf(out, "auto plan: %s; %d sequences of %d tokens per step (micro-batch x accumulation held constant)\n",
          zo_model_describe(&a->model, desc, sizeof desc), a->global_batch, a->T);
  fprintf(out, "rates: %s\n", r->source);
  for (int t = 0; t < ZO_N_TIERS; t++)
    fprintf(out, "  %-6s budget %s%s%s\n", zo_tier_name((enum zo_tier)t),
            a->budget[t] ? zo_format_bytes(a->budget[t], b[t]) : "none", a->budget[t] ? " " : "",
            a->budget[t] ? a->budget_src[t] : "");
  fprintf(out, "  nvme placements: %s\n", a->nvme_why);
  if (a->memlock && a->memlock != SIZE_MAX)
    fprintf(out, "  memlock limit %s: a pinned host pool above it stays pageable (slower copies; ulimit -l)\n",
            zo_format_bytes(a->memlock, b[0]));
  fprintf(out, "searched %d candidates (%d refused by the engine: placements it cannot run), %d fit\n", a->n_tried,
          a->n_refused, a->n_fit);
  if (a->n_fit) {
    fprintf(out, "  %3s %10s %10s  %-13s %11s %11s %11s  %s\n", "#", "step ms", "tokens/s", "bottleneck", "device",
            "host", "nvme", "candidate");
    const int n = top > 0 && top < a->n_fit ? top : a->n_fit;
    for (int i = 0; i < n; i++) print_row(&a->fit[i], i + 1, cpu, out);
    if (n < a->n_fit) fprintf(out, "  ... %d more (--json lists all)\n", a->n_fit - n);
    print_run_time(a, &a->fit[0], out);
    print_schedule(a, &a->fit[0], out);
  } else if (a->have_closest) {
    const struct zo_autoplan_candidate *c = &a->closest;
    fprintf(out, "no candidate fits. The closest (%s) is short:", c->what);
    for (int t = 0; t < ZO_N_TIERS; t++) {
      if (!c->short_by[t]) continue;
      fprintf(out, " %s needs %s", zo_tier_name((enum zo_tier)t), zo_format_bytes(c->bytes[t], b[0]));
      if (t == ZO_TIER_HOST && cpu) /* the CPU backend's device arena is host memory too */
        fprintf(out, " + the CPU backend's device arena %s", zo_format_bytes(c->bytes[ZO_TIER_DEVICE], b[0]));
      fprintf(out, ", %s over its budget of %s;", zo_format_bytes(c->short_by[t], b[1]),
              zo_format_bytes(a->budget[t], b[2]));
    }
    fprintf(out, " raise that budget%s or use a smaller model\n",
            a->nvme_dir[0] ? "" : ", give --nvme-path DIR (a writable directory on a large drive)");
  } else {
    fprintf(out, "no candidate could be planned\n");
  }
  if (a->n_suggest) {
    fprintf(out, "suggested, not chosen (they change the mathematics beyond rounding):\n");
    for (int i = 0; i < a->n_suggest; i++) {
      print_row(&a->suggest[i], i + 1, cpu, out);
      fprintf(out, "      note: %s\n", a->suggest[i].note);
    }
  }
}

void zo_autoplan_print_json(const struct zo_autoplan *a, bool cpu_backend, FILE *out) {
  fputc('[', out);
  for (int i = 0; i < a->n_fit; i++) {
    const struct zo_autoplan_candidate *c = &a->fit[i];
    fprintf(out, "%s{\"rank\": %d, \"what\": \"%s\", \"sets\": [", i ? ", " : "", i + 1, c->what);
    for (int k = 0; k < c->n_sets; k++) {
      fprintf(out, "%s\"", k ? ", " : "");
      for (const char *s = c->sets[k]; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', out);
        fputc(*s, out);
      }
      fputc('"', out);
    }
    fprintf(out, "], \"predicted_step_ms\": %.3f, \"tokens_per_s\": %.1f, \"bottleneck\": \"%s\", "
                 "\"compute_ms\": %.3f, \"h2d_ms\": %.3f, \"d2h_ms\": %.3f, \"optimizer_ms\": %.3f, \"nvme_ms\": %.3f, "
                 "\"device_bytes\": %zu, \"host_bytes\": %zu, \"nvme_bytes\": %zu, \"predicted_h2d_bytes\": %llu, "
                 "\"predicted_d2h_bytes\": %llu, \"predicted_nvme_read_bytes\": %llu, "
                 "\"predicted_nvme_write_bytes\": %llu, \"predicted_bytes_exact\": %s}",
            c->cost.step_s * 1e3, c->tokens_per_s, zo_bottleneck_name(c->cost.bottleneck, cpu_backend),
            c->cost.compute_s * 1e3, c->cost.h2d_s * 1e3, c->cost.d2h_s * 1e3, c->cost.optimizer_s * 1e3,
            c->cost.nvme_s * 1e3, c->bytes[ZO_TIER_DEVICE], c->bytes[ZO_TIER_HOST], c->bytes[ZO_TIER_NVME],
            (unsigned long long)c->traffic.h2d, (unsigned long long)c->traffic.d2h,
            (unsigned long long)c->traffic.nvme_read, (unsigned long long)c->traffic.nvme_write,
            c->traffic.exact ? "true" : "false");
  }
  fputs("]\n", out);
}
