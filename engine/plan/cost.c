/* The cost model of one optimizer step (see zo/autoplan.h) and the rates it
 * reads: documented defaults, or this machine's profile written by
 * `zoffload bench calibrate`. Bytes moved come from the plan's traffic
 * (traffic.c: the byte counters' prediction), FLOPs from the
 * architecture's flops_per_token: this file adds rates and overlap, never
 * a byte count of its own. It measures nothing
 * (engine/cli/calibrate.c does). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo/autoplan.h"
#include "zo/fsutil.h"
#include "zo/optim_format.h"

void zo_cost_profile_defaults(struct zo_cost_profile *p, const char *backend) {
  memset(p, 0, sizeof *p);
  const bool cuda = backend && !strcmp(backend, "cuda");
  snprintf(p->backend, sizeof p->backend, "%s", cuda ? "cuda" : "cpu");
  snprintf(p->source, sizeof p->source, "defaults for the %s backend (no profile of this machine: run "
           "`zoffload bench calibrate` to measure its rates)", p->backend);
  p->widths[0] = 128, p->widths[1] = 512, p->widths[2] = 2048;
  p->seqs[0] = 128, p->seqs[1] = 512, p->seqs[2] = 2048;
  p->ref_widths[0] = cuda ? 512 : 128, p->ref_widths[1] = cuda ? 2048 : 512;
  for (int h = 0; h < 2; h++)
    for (int i = 0; i < ZO_COST_N_REF; i++) p->compute_scale[h][i] = 1.0;
  if (cuda) {
    /* A PCIe 4.0 x16 GPU of the A100 class, bf16 tensor cores; a server CPU. */
    const double f32[3] = {4e12, 11e12, 16e12}, f16[3] = {15e12, 80e12, 180e12};
    const double a32[3] = {2e12, 4e12, 5e12}, a16[3] = {6e12, 15e12, 20e12};
    memcpy(p->gemm_flops[0], f32, sizeof f32);
    memcpy(p->gemm_flops[1], f16, sizeof f16);
    memcpy(p->attn_flops[0], a32, sizeof a32);
    memcpy(p->attn_flops[1], a16, sizeof a16);
    p->mem_bw = 1.2e12;
    p->op_s = 6e-6;
    p->h2d_bw = 20e9, p->d2h_bw = 20e9;
    p->adamw_pps = 1.0e9, p->adamw8_pps = 1.5e9;
    p->dev_adamw_pps = 40e9;
    p->nvme_read_bw = 3e9, p->nvme_write_bw = 2e9;
    p->shared_cores = false;
    p->half_ok = true;
  } else {
    /* The CPU backend on 2 cores of a recent x86 (the development machine). */
    const double f32[3] = {30e9, 55e9, 65e9}, f16[3] = {25e9, 42e9, 50e9};
    const double a32[3] = {4e9, 8e9, 9e9}, a16[3] = {3e9, 6e9, 7e9};
    memcpy(p->gemm_flops[0], f32, sizeof f32);
    memcpy(p->gemm_flops[1], f16, sizeof f16);
    memcpy(p->attn_flops[0], a32, sizeof a32);
    memcpy(p->attn_flops[1], a16, sizeof a16);
    p->mem_bw = 6e9;
    p->op_s = 20e-6;
    p->h2d_bw = 5e9, p->d2h_bw = 5e9;
    p->adamw_pps = 250e6, p->adamw8_pps = 200e6;
    p->dev_adamw_pps = 250e6;
    p->nvme_read_bw = 1e9, p->nvme_write_bw = 1e9;
    p->shared_cores = true;
    p->half_ok = true;
  }
}

/* FNV-1a of the CPU model and core count: the same hostname on another
 * machine (a container image) gets another profile. */
static uint64_t machine_hash(char *model, size_t size) {
  snprintf(model, size, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof line, f)) {
      if (strncmp(line, "model name", 10) != 0) continue;
      const char *c = strchr(line, ':');
      if (!c) break;
      for (c++; *c == ' '; c++) {}
      snprintf(model, size, "%s", c);
      model[strcspn(model, "\n")] = '\0';
      break;
    }
    fclose(f);
  }
  char key[640];
  snprintf(key, sizeof key, "%s/%ld", model, sysconf(_SC_NPROCESSORS_ONLN));
  uint64_t h = 1469598103934665603ull;
  for (const char *s = key; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

int zo_cost_profile_path(const char *backend, char *buf, size_t size) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  char dir[4096];
  if (xdg && xdg[0]) snprintf(dir, sizeof dir, "%s/zoffload", xdg);
  else if (home && home[0]) snprintf(dir, sizeof dir, "%s/.cache/zoffload", home);
  else return zo_error(-ENOENT, "no cache directory: neither XDG_CACHE_HOME nor HOME is set");
  char host[128] = "host", model[256];
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "host");
  host[sizeof host - 1] = '\0';
  for (char *c = host; *c; c++)
    if (*c == '/') *c = '_';
  const uint64_t h = machine_hash(model, sizeof model);
  int n = snprintf(buf, size, "%s/profile-%s-%08llx-%s.json", dir, host, (unsigned long long)(h & 0xffffffffu),
                   backend);
  return n < 0 || (size_t)n >= size ? zo_error(-ENAMETOOLONG, "profile path too long") : 0;
}

static double num(json_t *o, const char *key, double def) {
  json_t *v = json_object_get(o, key);
  return json_is_number(v) ? json_number_value(v) : def;
}

int zo_cost_profile_load(struct zo_cost_profile *p, const char *backend) {
  zo_cost_profile_defaults(p, backend);
  char path[4096];
  int err = zo_cost_profile_path(p->backend, path, sizeof path);
  if (err) return err;
  if (access(path, R_OK) != 0) {
    snprintf(p->source, sizeof p->source, "defaults for the %s backend (no profile at %s: run `zoffload bench "
             "calibrate` to measure this machine's rates)", p->backend, path);
    return zo_error(-ENOENT, "no profile %s", path);
  }
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root || !json_is_object(root)) {
    json_decref(root);
    snprintf(p->source, sizeof p->source, "defaults (the profile %s is malformed: rerun `zoffload bench "
             "calibrate`)", path);
    return zo_error(-EINVAL, "%s:%d: %s", path, je.line, root ? "not a JSON object" : je.text);
  }
  json_t *w = json_object_get(root, "widths"), *g32 = json_object_get(root, "gemm_flops_fp32"),
         *g16 = json_object_get(root, "gemm_flops_half");
  for (int i = 0; i < ZO_COST_N_WIDTHS; i++) {
    if (json_is_integer(json_array_get(w, (size_t)i))) p->widths[i] = (int)json_integer_value(json_array_get(w, (size_t)i));
    if (json_is_number(json_array_get(g32, (size_t)i))) p->gemm_flops[0][i] = json_number_value(json_array_get(g32, (size_t)i));
    if (json_is_number(json_array_get(g16, (size_t)i))) p->gemm_flops[1][i] = json_number_value(json_array_get(g16, (size_t)i));
  }
  /* attn_flops_*: a list at attn_seqs, or (profiles before 2026-12-04) one
   * figure for every length. */
  json_t *sq = json_object_get(root, "attn_seqs");
  for (int h = 0; h < 2; h++) {
    json_t *af = json_object_get(root, h ? "attn_flops_half" : "attn_flops_fp32");
    for (int i = 0; i < ZO_COST_N_SEQ; i++) {
      if (h == 0 && json_is_integer(json_array_get(sq, (size_t)i)))
        p->seqs[i] = (int)json_integer_value(json_array_get(sq, (size_t)i));
      if (json_is_number(af)) p->attn_flops[h][i] = json_number_value(af);
      else if (json_is_number(json_array_get(af, (size_t)i))) p->attn_flops[h][i] = json_number_value(json_array_get(af, (size_t)i));
    }
  }
  p->mem_bw = num(root, "mem_bw", p->mem_bw);
  /* compute_scale_half absent (profiles of the first reference steps,
   * fp32 only): the fp32 scale for both. */
  json_t *rw = json_object_get(root, "ref_widths"), *cs[2] = {json_object_get(root, "compute_scale"),
                                                              json_object_get(root, "compute_scale_half")};
  if (!cs[1]) cs[1] = cs[0];
  for (int i = 0; i < ZO_COST_N_REF; i++) {
    if (json_is_integer(json_array_get(rw, (size_t)i))) p->ref_widths[i] = (int)json_integer_value(json_array_get(rw, (size_t)i));
    for (int h = 0; h < 2; h++) {
      const double v = json_number_value(json_array_get(cs[h], (size_t)i)); /* 0 when absent */
      if (v > 0.05 && v < 20) p->compute_scale[h][i] = v;
    }
  }
  p->op_s = num(root, "op_s", p->op_s);
  p->h2d_bw = num(root, "h2d_bw", p->h2d_bw);
  p->d2h_bw = num(root, "d2h_bw", p->d2h_bw);
  p->adamw_pps = num(root, "adamw_params_per_s", p->adamw_pps);
  p->adamw8_pps = num(root, "adamw8bit_params_per_s", p->adamw8_pps);
  p->dev_adamw_pps = num(root, "device_adamw_params_per_s", p->dev_adamw_pps);
  p->nvme_read_bw = num(root, "nvme_read_bw", p->nvme_read_bw);
  p->nvme_write_bw = num(root, "nvme_write_bw", p->nvme_write_bw);
  json_t *m = json_object_get(root, "machine");
  if (json_is_string(m)) snprintf(p->machine, sizeof p->machine, "%s", json_string_value(m));
  p->half_ok = !json_is_false(json_object_get(root, "half_ok"));
  json_decref(root);
  p->measured = true;
  snprintf(p->source, sizeof p->source, "%s", path);
  return 0;
}


int zo_cost_profile_save(const struct zo_cost_profile *p, const char *path) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash && slash != dir) {
    *slash = '\0';
    int err = zo_mkdir_p(dir, 0755);
    if (err) return err;
  }
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return zo_error(-ENOMEM, "%s: out of host memory", path);
  fprintf(f, "{\n  \"machine\": \"%s\",\n  \"backend\": \"%s\",\n  \"widths\": [%d, %d, %d],\n", p->machine,
          p->backend, p->widths[0], p->widths[1], p->widths[2]);
  fprintf(f, "  \"gemm_flops_fp32\": [%.6g, %.6g, %.6g],\n  \"gemm_flops_half\": [%.6g, %.6g, %.6g],\n",
          p->gemm_flops[0][0], p->gemm_flops[0][1], p->gemm_flops[0][2], p->gemm_flops[1][0], p->gemm_flops[1][1],
          p->gemm_flops[1][2]);
  fprintf(f, "  \"attn_seqs\": [%d, %d, %d],\n  \"attn_flops_fp32\": [%.6g, %.6g, %.6g],\n"
          "  \"attn_flops_half\": [%.6g, %.6g, %.6g],\n", p->seqs[0], p->seqs[1], p->seqs[2], p->attn_flops[0][0],
          p->attn_flops[0][1], p->attn_flops[0][2], p->attn_flops[1][0], p->attn_flops[1][1], p->attn_flops[1][2]);
  fprintf(f, "  \"ref_widths\": [%d, %d],\n  \"compute_scale\": [%.6g, %.6g],\n  \"compute_scale_half\": [%.6g, %.6g],\n",
          p->ref_widths[0], p->ref_widths[1], p->compute_scale[0][0], p->compute_scale[0][1], p->compute_scale[1][0],
          p->compute_scale[1][1]);
  fprintf(f, "  \"mem_bw\": %.6g,\n  \"op_s\": %.6g,\n  \"h2d_bw\": %.6g,\n"
          "  \"d2h_bw\": %.6g,\n  \"adamw_params_per_s\": %.6g,\n  \"adamw8bit_params_per_s\": %.6g,\n"
          "  \"device_adamw_params_per_s\": %.6g,\n  \"nvme_read_bw\": %.6g,\n  \"nvme_write_bw\": %.6g,\n"
          "  \"half_ok\": %s\n}\n",
          p->mem_bw, p->op_s, p->h2d_bw, p->d2h_bw, p->adamw_pps, p->adamw8_pps,
          p->dev_adamw_pps, p->nvme_read_bw, p->nvme_write_bw, p->half_ok ? "true" : "false");
  const bool bad = ferror(f) != 0;
  if (fclose(f) != 0 || bad) {
    free(buf);
    return zo_error(-ENOMEM, "%s: out of host memory", path);
  }
  const int err = zo_write_file_atomic(path, buf, len);
  free(buf);
  return err;
}

const char *zo_bottleneck_name(enum zo_bottleneck b, bool cpu_backend) {
  switch (b) {
  case ZO_BOTTLENECK_COMPUTE: return cpu_backend ? "compute" : "GPU compute";
  case ZO_BOTTLENECK_PCIE: return cpu_backend ? "copies" : "PCIe";
  case ZO_BOTTLENECK_OPTIMIZER: return "CPU optimizer";
  case ZO_BOTTLENECK_NVME: return "NVMe";
  }
  return "?";
}

/* A rate measured at n ascending points w (model widths, sequence lengths)
 * at x: log-linear between them, the end's rate beyond either end. */
static double rate_at(const int *w, const double *g, int n, double x) {
  if (x <= w[0]) return g[0];
  for (int i = 1; i < n; i++) {
    if (x > w[i]) continue;
    const double a = log(x / w[i - 1]) / log((double)w[i] / w[i - 1]);
    return g[i - 1] + a * (g[i] - g[i - 1]);
  }
  return g[n - 1];
}

/* One step of plan p in the layer-major order (lm) or the micro-batch-major
 * one. Layer-major (parameter slots, K > 1): every block checkpointed and
 * recomputed; each streamed block and LM head piece crosses once forward and
 * once backward per step, its gradient leaves the device once (accumulated
 * there), the gradient file on NVMe is written once and read once by the
 * update. The K micro-batches' tokens, losses, host embedding rows and
 * checkpointed inputs cross per micro-batch in either order. */
static void cost_order(const struct zo_cost_profile *r, const struct zo_plan *p, bool lm, struct zo_cost *c) {
  memset(c, 0, sizeof *c);
  const struct zo_model_config *mc = &p->model;
  const struct zo_placement *pl = &p->placement;
  struct zo_tensor_table t;
  if (zo_model_build_table(mc, &t) != 0) return;
  const int half = pl->dtype != ZO_F32;
  const double e = (double)zo_dtype_size(pl->dtype), K = pl->grad_accum, BT = (double)p->B * p->T;
  const double C = mc->n_embd, L = mc->n_layer, Vp = mc->padded_vocab_size, N = (double)t.numel;

  /* FLOPs per token split into the part linear in T (attention) and the
   * rest (matmuls) from the architecture's own count at T and 2T. */
  const double f1 = zo_model_flops_per_token(mc, p->T), f2 = zo_model_flops_per_token(mc, 2 * p->T);
  const double attn = f2 - f1, mm = f1 - attn, head = 6.0 * Vp * C;
  const double ck = lm ? 1.0 : pl->ckpt_blocks / L; /* recomputed forward of the checkpointed blocks: 2 of 6 */
  const double Kx = lm ? 1.0 : K; /* times a streamed block crosses each way per step */
  /* LoRA (a frozen base): no weight-gradient GEMM of the base (2 of the 6
   * FLOPs a parameter and token), the adapters' own (6 a parameter and
   * token, as a trained weight's), their optimizer over their parameters only. */
  const bool frozen = pl->frozen;
  const double Nopt = frozen ? (double)p->lora_numel : N;
  const double mm_run = frozen ? zo_model_lora_flops_per_token(mc, p->T, p->lora_numel) - attn : mm;
  const double gemm = (mm_run + ck * (mm - head) / 3.0) * BT, att = attn * (1.0 + ck / 3.0) * BT;
  /* Elementwise traffic: about 40 activations of width C per block and token
   * (norms, residuals, GELU/SwiGLU, their gradients) and the attention
   * probabilities (NH x T per token, written, read twice), stored in the
   * compute dtype; the logits' softmax in fp32. */
  const double ew = BT * (L * (40.0 * C * e * (1.0 + ck / 3.0) + 3.0 * mc->n_head * (double)p->T * e) +
                          3.0 * Vp * 4.0);
  /* About 15 ops per block forward, 20 backward, each with a fixed cost. */
  const double ops = L * (35.0 + 15.0 * ck) + 10.0;
  const double gemm_r = rate_at(r->widths, r->gemm_flops[half], ZO_COST_N_WIDTHS, C);
  const double attn_r = rate_at(r->seqs, r->attn_flops[half], ZO_COST_N_SEQ, p->T);
  /* Scaled by what a reference step of about this width measured against
   * the same sum (calibrate's reference steps; 1 with the defaults). */
  const double scale = rate_at(r->ref_widths, r->compute_scale[half], ZO_COST_N_REF, C);
  c->compute_s = K * scale * (gemm / gemm_r + att / attn_r + ew / r->mem_bw + ops * r->op_s);

  /* The bytes the step moves (traffic.c, the counters' prediction) at the
   * copy streams' rates. */
  const bool offloaded = pl->optimizer != ZO_OFFLOAD_NONE;
  struct zo_plan_traffic tr;
  if (zo_plan_traffic(p, lm, &tr) != 0) {
    zo_tensor_table_free(&t);
    return;
  }
  c->h2d_s = (double)tr.h2d / r->h2d_bw;
  c->d2h_s = (double)tr.d2h / r->d2h_bw;
  const struct zo_model_layout lo = zo_placement_layout(pl);
  const double shead = (double)zo_model_streamed_head_numel(&t, &lo); /* a streamed LM head's elements */

  const double n8 = frozen ? 0.0 : (double)zo_optim_numel_8bit(&pl->opt, &t), n32 = Nopt - n8;
  if (offloaded) {
    /* The update, the norm's sum of squares, the rounded working copy, and
     * the host's accumulation of the micro-batches' gradients. */
    c->optimizer_s = n32 / r->adamw_pps + n8 / r->adamw8_pps + N * 4.0 / r->mem_bw +
                     (half ? N * (4.0 + e) / r->mem_bw : 0.0) +
                     (pl->grads_on_host && K > 1 && !lm ? (K - 1) * N * 12.0 / r->mem_bw : 0.0);
  } else {
    c->optimizer_s = r->shared_cores ? n32 / r->adamw_pps + n8 / r->adamw8_pps : Nopt / r->dev_adamw_pps;
  }
  /* NVMe: the rates over traffic.c's bytes, at the step's end (the
   * updates: state, gradients read, parameters written; nothing for a
   * frozen base) and during the micro-batches (slot loads, gradient writes
   * and their read-back for accumulation). */
  const double st = (double)tr.nvme_state;
  const double rbw = r->nvme_read_bw > 0 ? r->nvme_read_bw : 1e9, wbw = r->nvme_write_bw > 0 ? r->nvme_write_bw : 1e9;
  const double nv_end = (double)tr.nvme_read_end / rbw + (double)tr.nvme_write_end / wbw;
  const double nv_run = (double)(tr.nvme_read - tr.nvme_read_end) / rbw + (double)(tr.nvme_write - tr.nvme_write_end) / wbw;
  c->nvme_s = nv_end + nv_run;
  c->nvme_state_s = st / rbw + st / wbw;

  /* Overlap. The optimizer stream updates unit by unit in forward order and
   * the next step's forward waits for each unit only, so the optimizer (and
   * the NVMe chunks it reads and writes) hides behind the first forward; the
   * copy streams run beside the compute stream. On the CPU backend every
   * stream but the NVMe I/O runs on the same cores: their work adds up. */
  const double fwd1 = c->compute_s / K / 3.0;
  if (r->shared_cores) {
    /* Measured (benchmarks/results/autoplan-validate-*): the updates' NVMe
     * I/O is not hidden behind the next forward on 2 shared cores, only
     * beside the optimizer's own work; the micro-batches' I/O is, up to the
     * compute's length. */
    const double run = nv_run > c->compute_s ? nv_run - c->compute_s : 0.0;
    c->step_s = c->compute_s + c->h2d_s + c->d2h_s + (nv_end > c->optimizer_s ? nv_end : c->optimizer_s) + run;
  } else {
    const double tail = c->nvme_s > c->optimizer_s ? c->nvme_s : c->optimizer_s;
    double s = c->compute_s + (tail > fwd1 ? tail - fwd1 : 0.0);
    /* One gradient slot: each block's backward waits for the previous
     * block's gradients to be copied out. */
    if (pl->grads_on_host && pl->grad_slots == 1) s += Kx * (L * (double)t.layer_numel + shead) * 4.0 / r->d2h_bw;
    if (c->h2d_s > s) s = c->h2d_s;
    if (c->d2h_s > s) s = c->d2h_s;
    c->step_s = s;
  }
  double worst = c->compute_s;
  c->bottleneck = ZO_BOTTLENECK_COMPUTE;
  const double pcie = r->shared_cores ? c->h2d_s + c->d2h_s : (c->h2d_s > c->d2h_s ? c->h2d_s : c->d2h_s);
  if (pcie > worst) worst = pcie, c->bottleneck = ZO_BOTTLENECK_PCIE;
  if (c->optimizer_s > worst) worst = c->optimizer_s, c->bottleneck = ZO_BOTTLENECK_OPTIMIZER;
  if (c->nvme_s > worst) c->bottleneck = ZO_BOTTLENECK_NVME;
  zo_tensor_table_free(&t);
}

void zo_cost_step(const struct zo_cost_profile *r, const struct zo_plan *p, struct zo_cost *c) {
  cost_order(r, p, p->layer_major, c);
  const struct zo_placement *pl = &p->placement;
  if (p->layer_major || !pl->param_slots || pl->grad_accum < 2) return;
  struct zo_cost lm;
  cost_order(r, p, true, &lm);
  c->layer_major_s = lm.step_s;
  const double in = (double)p->B * p->T * p->model.n_embd * (double)zo_dtype_size(pl->dtype); /* one input */
  c->layer_major_ckpt_extra = (size_t)(((double)pl->grad_accum * p->model.n_layer - pl->ckpt_blocks) * in);
  c->layer_major_ckpt_tier = pl->ckpt_cpu ? ZO_TIER_HOST : ZO_TIER_DEVICE;
}
