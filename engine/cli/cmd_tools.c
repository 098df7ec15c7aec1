/* zoffload config, export, env and trace: the effective config, a
 * checkpoint as a Hugging Face directory, the build and machine report, and a
 * timeline's summary. */
#include <stdio.h>
#include <string.h>

#include "zo/env.h"
#include "zo/env_vars.h"
#include "zo/sample.h"
#include "zo/trace_file.h"
#include "zo/train.h"

#include "cli.h"

static const int set_opts[] = {OPT_SET, OPT_END};
static const int env_opts[] = {OPT_NVME_PATH, OPT_END};
static const int export_opts[] = {OPT_OUT, OPT_DTYPE, OPT_MAX_SHARD_SIZE, OPT_EXPORT_ADAPTER, OPT_MERGE, OPT_BASE, OPT_END};

int cli_config(int argc, char **argv) {
  struct args a = {0};
  int r = cli_parse_args(argc, argv, cli_usage_config, set_opts, POS_CONFIG, &a);
  if (r) return r == 1 ? 0 : r;
  struct zo_config cfg;
  if ((r = cli_load_config(&a, &cfg))) return r;
  int err = zo_config_dump(&cfg, stdout);
  zo_config_free(&cfg);
  return err ? cli_fail(1, "config") : 0;
}

int cli_env(int argc, char **argv) {
  struct args a = {0};
  int r = cli_parse_args(argc, argv, cli_usage_env, env_opts, POS_NONE, &a);
  if (r) return r == 1 ? 0 : r;
  int err = zo_env_report(stdout, a.nvme_path);
  if (err) return cli_fail(cli_exit_code(err), "env");
  /* The report names an invalid variable; the exit code says it too. */
  return zo_env_vars_check() ? cli_fail(2, "environment") : 0;
}

int cli_export(int argc, char **argv) {
  struct args a = {.dtype = ZO_F32, .max_shard_size = 5000000000};
  int r = cli_parse_args(argc, argv, cli_usage_export, export_opts, POS_FILES, &a);
  if (r) return r == 1 ? 0 : r;
  if (a.n_inputs != 1)
    return cli_bad_usage(cli_usage_export, "%s", a.n_inputs ? "give one CHECKPOINT" : "missing CHECKPOINT");
  if (!a.out) return cli_bad_usage(cli_usage_export, "%s", "missing --out DIR");
  if (a.export_adapter && a.merge) return cli_bad_usage(cli_usage_export, "%s", "give --adapter or --merge, not both");
  if (a.base && !a.merge && !a.export_adapter)
    return cli_bad_usage(cli_usage_export, "%s", "--base names the base of a LoRA adapter: use it with --merge or --adapter");
  if (a.export_adapter && (a.dtype != ZO_F32 || a.max_shard_size != 5000000000))
    return cli_bad_usage(cli_usage_export, "%s", "export --adapter writes the adapter in fp32 in one file, as PEFT "
                         "saves it: --dtype and --max-shard-size apply to full models (--merge)");
  const struct zo_export_opts o = {.out = a.out, .dtype = a.dtype,
                                   .max_shard_bytes = a.export_adapter ? 0 : a.max_shard_size,
                                   .adapter = a.export_adapter, .merge = a.merge, .base = a.base};
  struct zo_export_result res;
  int err = zo_export(a.inputs[0], &o, &res);
  if (err) return cli_fail(cli_exit_code(err), "export");
  char lb[32], wb[32], step[48] = "";
  if (res.step >= 0) snprintf(step, sizeof step, " (step %ld)", res.step);
  if (res.step >= 0) printf("checked %s%s: checksums and trainer state in %.2f s\n", a.inputs[0], step, res.load_s);
  const char *how = a.export_adapter ? "the PEFT adapter (fp32)"
                    : a.merge          ? "the base with the adapter merged, in host memory"
                                       : "streamed tensor by tensor";
  printf("exported %s: %s weights in %d safetensors file%s%s, %s in %.2f s (%.1f MB/s), %s from %s of %s\n", a.out, zo_dtype_name(a.dtype), res.n_files, res.n_files == 1 ? "" : "s",
         res.n_files > 1 ? " + model.safetensors.index.json" : "", zo_format_bytes(res.bytes, wb), res.save_s,
         (double)res.bytes / 1e6 / (res.save_s > 0 ? res.save_s : 1e-9), how, zo_format_bytes(res.load_bytes, lb),
         a.inputs[0]);
  if (res.tokenizer) printf("  with the tokenizer files beside the weights (tokenizer.json and its configs)\n");
  return 0;
}

int cli_trace(int argc, char **argv) {
  if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    fputs(cli_usage_trace, stdout);
    return 0;
  }
  if (argc != 3 || strcmp(argv[1], "summary") != 0)
    return cli_bad_usage(cli_usage_trace, "%s", "expected: trace summary FILE");
  int err = zo_trace_summary_print(argv[2], stdout);
  return err ? cli_fail(cli_exit_code(err), "trace summary") : 0;
}
