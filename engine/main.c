/* zoffload command line: train, eval, sample, plan, bench, config, prepare.
 * Exit codes: 0 success, 1 runtime error (data, I/O, memory), 2 bad usage or
 * bad config. Only this file (and tests, benchmarks) calls exit(). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo/bench.h"
#include "zo/config.h"
#include "zo/data.h"
#include "zo/nvme.h"
#include "zo/plan.h"
#include "zo/train.h"

#define MAX_SETS 256

static const char *usage_main =
    "usage: zoffload <command> [options]\n"
    "\n"
    "commands:\n"
    "  train CONFIG    train a model (configs/tiny.json is the small real-text default)\n"
    "  eval CONFIG     validation loss of a checkpoint, forward only\n"
    "  sample CONFIG   generate text from a checkpoint\n"
    "  plan CONFIG     bytes per memory tier and category, and whether they fit\n"
    "  bench WHAT      benchmarks: adamw, nvme, step CONFIG\n"
    "  config CONFIG   print the effective config with defaults filled in\n"
    "  prepare         turn text files into uint16 token files (byte-level)\n"
    "\n"
    "Every command taking CONFIG accepts --set key.path=value (repeatable).\n"
    "`zoffload <command> --help` describes a command.\n";

static const char *usage_train =
    "usage: zoffload train CONFIG [--set key=value]... [--resume DIR|auto] [--sample N]\n"
    "                      [--memory-report]\n"
    "  --set key=value   override a config key (JSON value, or a plain string)\n"
    "  --resume DIR      continue exactly from checkpoint directory DIR; 'auto' takes the\n"
    "                    latest checkpoint-<step> under checkpoint.dir\n"
    "  --sample N        generate N tokens after training (byte-level models print text)\n"
    "  --memory-report   print the device and host memory plan before the first step\n";

static const char *usage_eval =
    "usage: zoffload eval CONFIG [--set key=value]... [--checkpoint DIR] [--batches N]\n"
    "  --checkpoint DIR  checkpoint directory or safetensors file (default: the latest\n"
    "                    under checkpoint.dir, else model.init_from, else the random init)\n"
    "  --batches N       micro-batches of data.val to average (default: up to 20)\n";

static const char *usage_sample =
    "usage: zoffload sample CONFIG [--set key=value]... [--checkpoint DIR] [--prompt TEXT]\n"
    "                       [--tokens N] [--temperature T] [--top-k K] [--seed S]\n"
    "  defaults: --tokens 256 --temperature 0.8 --top-k 40 --seed engine.seed\n"
    "  for vocabularies other than 256 bytes, --prompt is comma-separated token ids\n";

static const char *usage_plan =
    "usage: zoffload plan CONFIG [--set key=value]...\n"
    "  prints the bytes each tier (device, host, nvme) needs per category for the config's\n"
    "  placement, before anything is allocated, and whether each fits its budget\n"
    "  (engine.gpu_memory_budget, engine.host_memory_budget, free space on nvme_path).\n"
    "  Exit code 0 when it fits, 1 (with the changes that would fit) when not.\n";

static const char *usage_bench =
    "usage: zoffload bench adamw [--params N] [--threads T] [--reps R] [--optimizer AdamW] [--json]\n"
    "       zoffload bench nvme --path DIR [--bytes N] [--block N] [--queue-depth Q] [--json]\n"
    "       zoffload bench step CONFIG [--set key=value]... [--steps N] [--json]\n"
    "  adamw: CPU AdamW parameters/s against a loop with the same memory traffic\n"
    "         (default 64M parameters, 9 repetitions, all threads)\n"
    "  nvme:  sequential write then read through the NVMe tier (default 1 GiB, 1 MiB\n"
    "         blocks, queue depth 32)\n"
    "  step:  step time with the config's placement vs everything on the device, and\n"
    "         overlap efficiency = step / max(compute alone, I/O alone, optimizer alone)\n"
    "  --json makes the last line one JSON object.\n";

static const char *usage_config = "usage: zoffload config CONFIG [--set key=value]...\n";

static const char *usage_prepare =
    "usage: zoffload prepare --out-train FILE [--out-val FILE] [--val-fraction F] TEXTFILE...\n"
    "  concatenates the text files' bytes into byte-level tokens (vocab 256) and writes\n"
    "  flat uint16 token files; the last F of the stream (default 0.05) goes to --out-val\n";

static int fail(int code, const char *what) {
  fprintf(stderr, "zoffload: %s%s%s\n", what ? what : "", what ? ": " : "", zo_last_error());
  return code;
}

static int bad_usage(const char *usage, const char *fmt, const char *arg) {
  fprintf(stderr, "zoffload: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n%s", usage);
  return 2;
}

/* Exit code for an engine error: config-level errors are usage errors. */
static int exit_code(int err) { return err == -EINVAL || err == -ENOTSUP ? 2 : 1; }

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

struct args {
  const char *config;
  const char *sets[MAX_SETS];
  int n_sets;
  const char *resume, *checkpoint, *prompt, *out_train, *out_val;
  long sample, batches, tokens, top_k, seed;
  bool memory_report, seed_given;
  double temperature, val_fraction;
  const char *inputs[4096];
  int n_inputs;
};

/* An option taking a value: allowed for this command and followed by one. */
static int need_value(const char *allowed, char letter, const char *o, const char *v, const char *usage) {
  if (!strchr(allowed, letter)) return bad_usage(usage, "unknown option %s", o);
  if (!v) return bad_usage(usage, "%s needs a value", o);
  return 0;
}

/* Parses the options a command allows (letters in `allowed`). Returns 0,
 * 1 for --help (printed), or 2 after printing a usage error. */
static int parse_args(int argc, char **argv, const char *usage, const char *allowed, bool positional,
                      struct args *a) {
  for (int i = 0; i < argc; i++) {
    const char *o = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    int r;
    if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
      fputs(usage, stdout);
      return 1;
    } else if (!strcmp(o, "--set")) {
      if ((r = need_value(allowed, 's', o, v, usage))) return r;
      i++;
      if (a->n_sets == MAX_SETS) return bad_usage(usage, "too many --set options (max %s)", "256");
      a->sets[a->n_sets++] = v;
    } else if (!strcmp(o, "--resume")) {
      if ((r = need_value(allowed, 'r', o, v, usage))) return r;
      i++;
      a->resume = v;
    } else if (!strcmp(o, "--sample")) {
      if ((r = need_value(allowed, 'n', o, v, usage))) return r;
      i++;
      if (!parse_int(v, 0, 1 << 20, &a->sample)) return bad_usage(usage, "--sample %s: need an integer in [0, 1048576]", v);
    } else if (!strcmp(o, "--memory-report")) {
      if (!strchr(allowed, 'm')) return bad_usage(usage, "unknown option %s", o);
      a->memory_report = true;
    } else if (!strcmp(o, "--checkpoint")) {
      if ((r = need_value(allowed, 'c', o, v, usage))) return r;
      i++;
      a->checkpoint = v;
    } else if (!strcmp(o, "--batches")) {
      if ((r = need_value(allowed, 'b', o, v, usage))) return r;
      i++;
      if (!parse_int(v, 1, 1 << 20, &a->batches)) return bad_usage(usage, "--batches %s: need an integer in [1, 1048576]", v);
    } else if (!strcmp(o, "--prompt")) {
      if ((r = need_value(allowed, 'p', o, v, usage))) return r;
      i++;
      a->prompt = v;
    } else if (!strcmp(o, "--tokens")) {
      if ((r = need_value(allowed, 'p', o, v, usage))) return r;
      i++;
      if (!parse_int(v, 1, 1 << 20, &a->tokens)) return bad_usage(usage, "--tokens %s: need an integer in [1, 1048576]", v);
    } else if (!strcmp(o, "--temperature")) {
      if ((r = need_value(allowed, 'p', o, v, usage))) return r;
      i++;
      if (!parse_double(v, &a->temperature) || !(a->temperature > 0) || a->temperature > 100)
        return bad_usage(usage, "--temperature %s: need a number in (0, 100]", v);
    } else if (!strcmp(o, "--top-k")) {
      if ((r = need_value(allowed, 'p', o, v, usage))) return r;
      i++;
      if (!parse_int(v, 0, 1 << 30, &a->top_k)) return bad_usage(usage, "--top-k %s: need an integer >= 0", v);
    } else if (!strcmp(o, "--seed")) {
      if ((r = need_value(allowed, 'p', o, v, usage))) return r;
      i++;
      if (!parse_int(v, 0, __LONG_MAX__, &a->seed)) return bad_usage(usage, "--seed %s: need an integer >= 0", v);
      a->seed_given = true;
    } else if (!strcmp(o, "--out-train")) {
      if ((r = need_value(allowed, 'o', o, v, usage))) return r;
      i++;
      a->out_train = v;
    } else if (!strcmp(o, "--out-val")) {
      if ((r = need_value(allowed, 'o', o, v, usage))) return r;
      i++;
      a->out_val = v;
    } else if (!strcmp(o, "--val-fraction")) {
      if ((r = need_value(allowed, 'o', o, v, usage))) return r;
      i++;
      if (!parse_double(v, &a->val_fraction) || a->val_fraction < 0 || a->val_fraction >= 1)
        return bad_usage(usage, "--val-fraction %s: need a number in [0, 1)", v);
    } else if (o[0] == '-' && o[1] == '-') {
      return bad_usage(usage, "unknown option %s", o);
    } else if (positional) {
      if (a->n_inputs == 4096) return bad_usage(usage, "too many input files (max %s)", "4096");
      a->inputs[a->n_inputs++] = o;
    } else if (!a->config) {
      a->config = o;
    } else {
      return bad_usage(usage, "unexpected argument %s", o);
    }
  }
  if (!positional && !a->config) return bad_usage(usage, "%s", "missing CONFIG");
  return 0;
}

static int load_config(struct args *a, struct zo_config *cfg) {
  int err = zo_config_load(cfg, a->config, a->sets, a->n_sets);
  return err ? fail(2, NULL) : 0;
}

static int cmd_train(int argc, char **argv) {
  struct args a = {0};
  int r = parse_args(argc, argv, usage_train, "srnm", false, &a);
  if (r) return r == 1 ? 0 : r;
  struct zo_config cfg;
  if ((r = load_config(&a, &cfg))) return r;
  struct zo_train_opts opts = {.resume = a.resume, .sample_tokens = (int)a.sample,
                               .memory_report = a.memory_report};
  int err = zo_train(&cfg, &opts);
  zo_config_free(&cfg);
  return err ? fail(exit_code(err), "train") : 0;
}

static int cmd_eval(int argc, char **argv) {
  struct args a = {0};
  int r = parse_args(argc, argv, usage_eval, "scb", false, &a);
  if (r) return r == 1 ? 0 : r;
  struct zo_config cfg;
  if ((r = load_config(&a, &cfg))) return r;
  struct zo_eval_result res;
  int err = zo_eval(&cfg, a.checkpoint, (int)a.batches, &res);
  zo_config_free(&cfg);
  if (err) return fail(exit_code(err), "eval");
  char d[32], t[32];
  printf("val loss %.6f over %d batches | device %s (training would plan %s)\n", res.loss, res.n_batches,
         zo_format_bytes(res.device_bytes, d), zo_format_bytes(res.train_device_bytes, t));
  return 0;
}

static int cmd_sample(int argc, char **argv) {
  struct args a = {.tokens = 256, .temperature = 0.8, .top_k = 40};
  int r = parse_args(argc, argv, usage_sample, "scp", false, &a);
  if (r) return r == 1 ? 0 : r;
  struct zo_config cfg;
  if ((r = load_config(&a, &cfg))) return r;
  struct zo_sample_opts o = {.checkpoint = a.checkpoint, .prompt = a.prompt, .n_tokens = (int)a.tokens,
                             .temperature = a.temperature, .top_k = (int)a.top_k,
                             .seed = a.seed_given ? (uint64_t)a.seed : cfg.engine.seed};
  int err = zo_sample(&cfg, &o, stdout);
  zo_config_free(&cfg);
  return err ? fail(exit_code(err), "sample") : 0;
}

static const char *device_arg(enum zo_device d) {
  return d == ZO_DEVICE_CPU ? "cpu" : d == ZO_DEVICE_CUDA ? "cuda" : "auto";
}

static int cmd_plan(int argc, char **argv) {
  struct args a = {0};
  int r = parse_args(argc, argv, usage_plan, "s", false, &a);
  if (r) return r == 1 ? 0 : r;
  struct zo_config cfg;
  if ((r = load_config(&a, &cfg))) return r;
  struct zo_gpt2_config mc;
  struct zo_plan plan;
  int err = zo_train_model_config(&cfg, &mc);
  zo_backend_t be = err ? NULL : zo_backend_init(device_arg(cfg.engine.device), cfg.engine.threads);
  if (!err) err = zo_plan_build(&cfg, &mc, be, &plan);
  if (err) {
    zo_config_free(&cfg);
    return fail(exit_code(err), "plan");
  }
  zo_plan_print(&plan, stdout);
  err = zo_plan_check(&cfg, &plan);
  zo_config_free(&cfg);
  if (err) return fail(1, "plan does not fit");
  printf("fits\n");
  return 0;
}

static int bench_adamw(int argc, char **argv) {
  long params = 64l << 20, threads = 0, reps = 9;
  bool json = false;
  for (int i = 0; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(o, "--json")) { json = true; continue; }
    if (!v) return bad_usage(usage_bench, "%s needs a value", o);
    i++;
    if (!strcmp(o, "--params") && parse_int(v, 1, 1l << 34, &params)) continue;
    if (!strcmp(o, "--threads") && parse_int(v, 0, 4096, &threads)) continue;
    if (!strcmp(o, "--reps") && parse_int(v, 1, 1000, &reps)) continue;
    if (!strcmp(o, "--optimizer") && !strcmp(v, "AdamW")) continue;
    return bad_usage(usage_bench, "bad option or value: %s", o);
  }
  struct zo_bench_adamw b;
  if (zo_bench_adamw_run((size_t)params, (int)threads, (int)reps, &b)) return fail(1, "bench adamw");
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
  const char *path = NULL;
  size_t bytes = (size_t)1 << 30, block = (size_t)1 << 20;
  long qd = 32;
  bool json = false;
  for (int i = 0; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(o, "--json")) { json = true; continue; }
    if (!v) return bad_usage(usage_bench, "%s needs a value", o);
    i++;
    if (!strcmp(o, "--path")) { path = v; continue; }
    if (!strcmp(o, "--bytes") && zo_parse_bytes(v, &bytes) == 0) continue;
    if (!strcmp(o, "--block") && zo_parse_bytes(v, &block) == 0) continue;
    if (!strcmp(o, "--queue-depth") && parse_int(v, 1, ZO_NVME_MAX_QUEUE_DEPTH, &qd)) continue;
    return bad_usage(usage_bench, "bad option or value: %s", o);
  }
  if (!path) return bad_usage(usage_bench, "%s", "bench nvme needs --path DIR");
  double w = 0, r = 0;
  if (zo_nvme_bench(path, bytes, block, (int)qd, &w, &r)) return fail(1, "bench nvme");
  char b1[32], b2[32];
  printf("NVMe tier under %s: %s sequential, %s blocks, queue depth %ld\n", path, zo_format_bytes(bytes, b1),
         zo_format_bytes(block, b2), qd);
  printf("  write %.3f GB/s, read %.3f GB/s (CRC32C checked)\n", w, r);
  if (json) printf("{\"bytes\": %zu, \"write_gb_s\": %.4f, \"read_gb_s\": %.4f}\n", bytes, w, r);
  return 0;
}

static int bench_step(int argc, char **argv) {
  struct args a = {0};
  long steps = 5;
  bool json = false;
  char *rest[MAX_SETS * 2 + 2];
  int n_rest = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = true;
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc && parse_int(argv[i + 1], 1, 100000, &steps)) i++;
    else if (n_rest < MAX_SETS * 2) rest[n_rest++] = argv[i];
  }
  int r = parse_args(n_rest, rest, usage_bench, "s", false, &a);
  if (r) return r == 1 ? 0 : r;
  struct zo_config cfg;
  if ((r = load_config(&a, &cfg))) return r;
  struct zo_bench_step b;
  int err = zo_train_model_config(&cfg, &cfg.model.gpt2);
  if (!err) err = zo_bench_step_run(&cfg, (int)steps, &b);
  char where[200] = "";
  struct zo_placement pl;
  if (!err && zo_placement_from_config(&cfg, cfg.model.gpt2.n_layer, &pl) == 0)
    zo_placement_describe(&pl, where, sizeof where);
  zo_config_free(&cfg);
  if (err) return fail(exit_code(err), "bench step");
  printf("step (%s), mean of %d steps after 2 warm-up:\n", where, b.steps);
  printf("  configured placement %.1f ms, all on device %.1f ms (ratio %.3f)\n", b.step_s * 1e3,
         b.device_step_s * 1e3, b.step_s / b.device_step_s);
  printf("  alone: compute %.1f ms, I/O %.1f ms, optimizer %.1f ms\n", b.compute_s * 1e3, b.io_s * 1e3,
         b.optimizer_s * 1e3);
  printf("  overlap efficiency (step / slowest alone): %.3f\n", b.overlap);
  if (json)
    printf("{\"step_ms\": %.3f, \"device_step_ms\": %.3f, \"compute_ms\": %.3f, \"io_ms\": %.3f, "
           "\"optimizer_ms\": %.3f, \"overlap_efficiency\": %.4f}\n", b.step_s * 1e3, b.device_step_s * 1e3,
           b.compute_s * 1e3, b.io_s * 1e3, b.optimizer_s * 1e3, b.overlap);
  return 0;
}

static int cmd_bench(int argc, char **argv) {
  if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
    fputs(usage_bench, argc < 1 ? stderr : stdout);
    return argc < 1 ? 2 : 0;
  }
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(usage_bench, stdout);
      return 0;
    }
  if (!strcmp(argv[0], "adamw")) return bench_adamw(argc - 1, argv + 1);
  if (!strcmp(argv[0], "nvme")) return bench_nvme(argc - 1, argv + 1);
  if (!strcmp(argv[0], "step")) return bench_step(argc - 1, argv + 1);
  return bad_usage(usage_bench, "unknown benchmark '%s'", argv[0]);
}

static int cmd_config(int argc, char **argv) {
  struct args a = {0};
  int r = parse_args(argc, argv, usage_config, "s", false, &a);
  if (r) return r == 1 ? 0 : r;
  struct zo_config cfg;
  if ((r = load_config(&a, &cfg))) return r;
  int err = zo_config_dump(&cfg, stdout);
  zo_config_free(&cfg);
  return err ? fail(1, "config") : 0;
}

static int cmd_prepare(int argc, char **argv) {
  struct args a = {.val_fraction = 0.05};
  int r = parse_args(argc, argv, usage_prepare, "o", true, &a);
  if (r) return r == 1 ? 0 : r;
  if (!a.out_train) return bad_usage(usage_prepare, "%s", "missing --out-train FILE");
  if (a.n_inputs == 0) return bad_usage(usage_prepare, "%s", "no input text files");
  if (!a.out_val && a.val_fraction > 0) return bad_usage(usage_prepare, "%s", "missing --out-val FILE (or --val-fraction 0)");
  size_t n_train = 0, n_val = 0;
  int err = zo_data_prepare(a.inputs, a.n_inputs, a.out_train, a.out_val, a.val_fraction, &n_train, &n_val);
  if (err) return fail(err == -EINVAL ? 2 : 1, "prepare");
  printf("prepared %zu training tokens -> %s, %zu validation tokens -> %s\n", n_train, a.out_train, n_val,
         a.out_val ? a.out_val : "(none)");
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fputs(usage_main, stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    fputs(usage_main, stdout);
    return 0;
  }
  if (!strcmp(cmd, "--version")) {
    puts("zoffload 0.1.0");
    return 0;
  }
  if (!strcmp(cmd, "train")) return cmd_train(argc - 2, argv + 2);
  if (!strcmp(cmd, "eval")) return cmd_eval(argc - 2, argv + 2);
  if (!strcmp(cmd, "sample")) return cmd_sample(argc - 2, argv + 2);
  if (!strcmp(cmd, "config")) return cmd_config(argc - 2, argv + 2);
  if (!strcmp(cmd, "plan")) return cmd_plan(argc - 2, argv + 2);
  if (!strcmp(cmd, "bench")) return cmd_bench(argc - 2, argv + 2);
  if (!strcmp(cmd, "prepare")) return cmd_prepare(argc - 2, argv + 2);
  fprintf(stderr, "zoffload: unknown command '%s'\n%s", cmd, usage_main);
  return 2;
}
