/* zoffload prepare: text or JSON lines to token files, byte-level or with a
 * tokenizer (ids, loss masks of instruction data). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "zo/data.h"
#include "zo/prepare.h"

#include "cli.h"

static const int prepare_opts[] = {OPT_OUT_TRAIN, OPT_OUT_VAL, OPT_VAL_FRACTION, OPT_TOKENIZER, OPT_FIELD,
                                   OPT_PROMPT_FIELD, OPT_COMPLETION_FIELD, OPT_MESSAGES_FIELD, OPT_SEPARATOR,
                                   OPT_FORMAT, OPT_END};

static int prepare_tokenized(const struct args *a) {
  struct zo_prepare_opts o = {.tokenizer = a->tokenizer, .field = a->field, .prompt_field = a->prompt_field,
                              .completion_field = a->completion_field, .messages_field = a->messages_field,
                              .separator = a->separator, .format = ZO_DATA_U16, .out_train = a->out_train,
                              .out_val = a->out_val, .val_fraction = a->out_val ? a->val_fraction : 0.0,
                              .progress = true};
  o.jsonl = a->field || a->prompt_field || a->completion_field || a->messages_field;
  for (int k = 0; k < a->n_inputs && !o.jsonl; k++) o.jsonl = zo_prepare_is_jsonl_path(a->inputs[k]);
  if (o.jsonl && a->separator)
    return cli_bad_usage(cli_usage_prepare, "%s", "--separator is for text files; JSON lines hold one document a line");
  if (a->format && !strcmp(a->format, "llmc32")) {
    o.format = ZO_DATA_LLMC;
    o.wide_llmc = true;
  } else if (a->format && (zo_data_format_parse(a->format, &o.format) || o.format == ZO_DATA_TEXT)) {
    return cli_bad_usage(cli_usage_prepare, "--format %s: valid: u16, u32, llmc (uint16 ids), llmc32 (uint32 ids)",
                     a->format);
  }
  struct zo_prepare_result res;
  int err = zo_prepare_tokenized(a->inputs, a->n_inputs, &o, &res);
  if (err) return cli_fail(cli_exit_code(err), NULL); /* the message names prepare */
  printf("prepared %zu documents: %zu training tokens -> %s, %zu validation tokens (%zu documents) -> %s; "
         "vocabulary %zu, end-of-text id %d",
         res.n_docs, res.n_train, a->out_train, res.n_val, res.n_val_docs, a->out_val ? a->out_val : "(none)",
         res.vocab_size, (int)res.eos_id);
  if (res.masked)
    printf("; loss masks %s" ZO_DATA_MASK_SUFFIX "%s: %zu of %zu tokens trained", a->out_train,
           a->out_val ? " and the val's" : "", res.n_trained, res.n_train + res.n_val);
  printf("\n");
  return 0;
}

int cli_prepare(int argc, char **argv) {
  struct args a = {.val_fraction = 0.05};
  int r = cli_parse_args(argc, argv, cli_usage_prepare, prepare_opts, POS_FILES, &a);
  if (r) return r == 1 ? 0 : r;
  if (!a.tokenizer && (a.field || a.prompt_field || a.completion_field || a.messages_field || a.separator ||
                       a.format))
    return cli_bad_usage(cli_usage_prepare, "%s", "--field, --prompt-field, --completion-field, --messages-field, "
                                          "--separator and --format need --tokenizer PATH");
  if (a.tokenizer) {
    if (!a.out_train) return cli_bad_usage(cli_usage_prepare, "%s", "missing --out-train FILE");
    if (a.n_inputs == 0) return cli_bad_usage(cli_usage_prepare, "%s", "no input files");
    return prepare_tokenized(&a);
  }
  if (!a.out_train) return cli_bad_usage(cli_usage_prepare, "%s", "missing --out-train FILE");
  if (a.n_inputs == 0) return cli_bad_usage(cli_usage_prepare, "%s", "no input text files");
  if (!a.out_val && a.val_fraction > 0) return cli_bad_usage(cli_usage_prepare, "%s", "missing --out-val FILE (or --val-fraction 0)");
  size_t n_train = 0, n_val = 0;
  int err = zo_data_prepare(a.inputs, a.n_inputs, a.out_train, a.out_val, a.val_fraction, &n_train, &n_val);
  if (err) return cli_fail(err == -EINVAL ? 2 : 1, "prepare");
  printf("prepared %zu training tokens -> %s, %zu validation tokens -> %s\n", n_train, a.out_train, n_val,
         a.out_val ? a.out_val : "(none)");
  return 0;
}
