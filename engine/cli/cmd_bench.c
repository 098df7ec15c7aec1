/* zoffload bench adamw|nvme|step|memory|tokenize|calibrate: what each
 * benchmark prints (the measurements are in bench.c, offload/nvme.c,
 * tokenizer_cli.c and plan/calibrate.c). Under an MPI launcher bench step
 * runs data parallel, and only rank 0 prints. */
#include <stdio.h>
#include <string.h>

#include "zo/autoplan.h"
#include "zo/bench.h"
#include "zo/nvme.h"
#include "zo/plan.h"
#include "zo/train.h"

#include "cli.h"
#include "tokenizer_cli.h"

static const int bench_calibrate_opts[] = {OPT_NVME_PATH, OPT_JSON, OPT_END};
static const int bench_adamw_opts[] = {OPT_PARAMS, OPT_THREADS, OPT_REPS, OPT_OPTIMIZER, OPT_JSON, OPT_END};
static const int bench_nvme_opts[] = {OPT_PATH, OPT_BYTES, OPT_BLOCK, OPT_QUEUE_DEPTH, OPT_JSON, OPT_END};
static const int bench_step_opts[] = {OPT_SET, OPT_STEPS, OPT_TRACE, OPT_JSON, OPT_END};
static const int bench_memory_opts[] = {OPT_SET, OPT_JSON, OPT_END};

static int bench_adamw(int argc, char **argv) {
  struct args a = {.params = 64l << 20, .threads = 0, .reps = 9};
  int r = cli_parse_args(argc, argv, cli_usage_bench, bench_adamw_opts, POS_NONE, &a);
  if (r) return r == 1 ? 0 : r;
  const long params = a.params, threads = a.threads, reps = a.reps;
  const bool json = a.json;
  if (a.optimizer && strcmp(a.optimizer, "AdamW8bit") == 0) {
    struct zo_bench_adamw8bit b8;
    if (zo_bench_adamw8bit_run((size_t)params, (int)threads, (int)reps, &b8)) return cli_fail(1, "bench adamw");
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
  if (zo_bench_adamw_run((size_t)params, (int)threads, (int)reps, &b)) return cli_fail(1, "bench adamw");
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
  int r = cli_parse_args(argc, argv, cli_usage_bench, bench_nvme_opts, POS_NONE, &a);
  if (r) return r == 1 ? 0 : r;
  const char *path = a.path;
  const size_t bytes = a.bytes, block = a.block;
  const long qd = a.queue_depth;
  const bool json = a.json;
  if (!path) return cli_bad_usage(cli_usage_bench, "%s", "bench nvme needs --path DIR");
  double w = 0, rd = 0;
  if (zo_nvme_bench(path, bytes, block, (int)qd, &w, &rd)) return cli_fail(1, "bench nvme");
  char b1[32], b2[32];
  printf("NVMe tier under %s: %s sequential, %s blocks, queue depth %ld\n", path, zo_format_bytes(bytes, b1),
         zo_format_bytes(block, b2), qd);
  printf("  write %.3f GB/s, read %.3f GB/s (CRC32C checked)\n", w, rd);
  if (json) printf("{\"bytes\": %zu, \"write_gb_s\": %.4f, \"read_gb_s\": %.4f}\n", bytes, w, rd);
  return 0;
}

static int bench_step(int argc, char **argv) {
  struct args a = {.steps = 5};
  int r = cli_parse_args(argc, argv, cli_usage_bench, bench_step_opts, POS_CONFIG, &a);
  if (r) return r == 1 ? 0 : r;
  const long steps = a.steps;
  const bool json = a.json;
  struct zo_config cfg;
  if ((r = cli_load_config(&a, &cfg))) return r;
  zo_comm_t comm = cli_job_comm("bench step");
  if (!comm) {
    zo_config_free(&cfg);
    return 1;
  }
  struct zo_bench_step b;
  int err = zo_train_model_config_lora(&cfg, &cfg.model.spec, NULL); /* bench step runs LoRA too */
  if (!err) err = zo_bench_step_run(&cfg, (int)steps, comm, &b);
  char where[400] = "";
  struct zo_placement pl;
  if (!err && zo_placement_from_config(&cfg, cfg.model.spec.n_layer, &pl) == 0)
    zo_placement_describe(&pl, where, sizeof where);
  /* The plan's prediction of the counters (one rank's run: the ranks' own
   * traffic is not predicted). */
  struct zo_plan plan;
  struct zo_plan_traffic tr;
  bool predicted = false;
  if (!err && zo_comm_size(comm) == 1) {
    err = zo_plan_build(&cfg, &cfg.model.spec, NULL, &plan);
    if (!err) err = zo_plan_traffic(&plan, plan.layer_major, &tr);
    predicted = !err;
  }
  const int B = cfg.micro_batch;
  zo_config_free(&cfg);
  if (err) return cli_job_fail(comm, cli_exit_code(err), "bench step");
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
  if (predicted)
    printf("  bytes per step predicted by the plan (%s): %llu host->device, %llu device->host, NVMe %llu read, "
           "%llu written\n", tr.exact ? "exact" : "approximate", (unsigned long long)tr.h2d,
           (unsigned long long)tr.d2h, (unsigned long long)tr.nvme_read, (unsigned long long)tr.nvme_write);
  char pred_json[256] = "";
  if (predicted)
    snprintf(pred_json, sizeof pred_json, ", \"predicted_h2d_bytes\": %llu, \"predicted_d2h_bytes\": %llu, "
             "\"predicted_nvme_read_bytes\": %llu, \"predicted_nvme_write_bytes\": %llu, "
             "\"predicted_bytes_exact\": %s", (unsigned long long)tr.h2d, (unsigned long long)tr.d2h,
             (unsigned long long)tr.nvme_read, (unsigned long long)tr.nvme_write, tr.exact ? "true" : "false");
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
           "\"d2h_bytes\": %llu, \"nvme_read_bytes\": %llu, \"nvme_write_bytes\": %llu%s%s}\n",
           b.backend, b.step_s * 1e3, b.device_step_s * 1e3, b.compute_s * 1e3, b.io_s * 1e3, b.optimizer_s * 1e3,
           b.overlap, b.tokens_per_s, b.device_tokens_per_s, b.tflops, b.device_tflops,
           (unsigned long long)b.h2d_bytes, (unsigned long long)b.d2h_bytes, (unsigned long long)b.nvme_read_bytes,
           (unsigned long long)b.nvme_write_bytes, pred_json, ranks_json);
  return 0;
}

/* A byte count for the savings table, or a dash. */
static const char *mem_cell(size_t n, bool have, char buf[32]) {
  if (!have) return "-";
  return zo_format_bytes(n, buf);
}

static int bench_memory(int argc, char **argv) {
  struct args a = {0};
  int r = cli_parse_args(argc, argv, cli_usage_bench, bench_memory_opts, POS_CONFIG, &a);
  if (r) return r == 1 ? 0 : r;
  struct zo_config cfg;
  if ((r = cli_load_config(&a, &cfg))) return r;
  struct zo_bench_memory_row rows[ZO_BENCH_MEMORY_ROWS];
  int err = zo_train_model_config(&cfg, &cfg.model.spec);
  if (!err) err = zo_bench_memory_run(&cfg, rows);
  const int B = cfg.micro_batch, T = cfg.data.seq_len;
  char desc[200];
  zo_model_describe(&cfg.model.spec, desc, sizeof desc);
  zo_config_free(&cfg);
  if (err) return cli_fail(cli_exit_code(err), "bench memory");
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
  int r = cli_parse_args(argc, argv, cli_usage_bench, bench_calibrate_opts, POS_NONE, &a);
  if (r) return r == 1 ? 0 : r;
  zo_backend_t be = zo_backend_init("auto", 0);
  if (!be) return cli_fail(1, "bench calibrate");
  struct zo_cost_profile p;
  char path[4096];
  int err = zo_calibrate_run(be, a.nvme_path, &p);
  if (!err) err = zo_cost_profile_path(p.backend, path, sizeof path);
  if (!err) err = zo_cost_profile_save(&p, path);
  if (err) return cli_fail(1, "bench calibrate");
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

int cli_bench(int argc, char **argv) {
  if (argc < 2) return cli_bad_usage(cli_usage_bench, "%s", "missing WHAT (adamw, nvme, step or memory)");
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    fputs(cli_usage_bench, stdout);
    return 0;
  }
  if (!strcmp(argv[1], "adamw")) return bench_adamw(argc - 1, argv + 1);
  if (!strcmp(argv[1], "nvme")) return bench_nvme(argc - 1, argv + 1);
  if (!strcmp(argv[1], "step")) return bench_step(argc - 1, argv + 1);
  if (!strcmp(argv[1], "memory")) return bench_memory(argc - 1, argv + 1);
  if (!strcmp(argv[1], "tokenize")) return zo_cli_bench_tokenize(argc - 1, argv + 1);
  if (!strcmp(argv[1], "calibrate")) return bench_calibrate(argc - 1, argv + 1);
  return cli_bad_usage(cli_usage_bench, "unknown benchmark '%s'", argv[1]);
}
