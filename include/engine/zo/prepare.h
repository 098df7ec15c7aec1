/* `zoffload prepare --tokenizer`: text or JSON-lines documents -> token files
 * (engine/text/prepare.c). Each document is encoded with the tokenizer (its
 * special tokens added, as transformers' tokenizer(text) does) and followed
 * by the tokenizer's end-of-text token. Instruction data (a prompt and a
 * completion field, or chat messages rendered with the tokenizer's chat
 * template) also gets a loss mask beside each output (PATH.mask, zo/data.h):
 * 0 on the prompt's tokens, 1 on the completion's (and its end-of-text
 * token; for chat, what each assistant message adds to the rendering), so
 * training learns the completions only. */
#ifndef ZO_PREPARE_H
#define ZO_PREPARE_H

#include "zo/data.h"

#ifdef __cplusplus
extern "C" {
#endif

struct zo_atomic_file; /* zo/fsutil.h */

struct zo_prepare_opts {
  const char *tokenizer;        /* tokenizer.json or a directory holding it */
  bool jsonl;                   /* inputs are JSON lines (else plain text) */
  const char *field;            /* JSON lines: the text field (NULL: "text") */
  const char *prompt_field;     /* JSON lines: instruction data, with completion_field; NULL: none */
  const char *completion_field;
  const char *messages_field;   /* JSON lines: the chat form, a list of {role, content} rendered with
                                   the tokenizer's chat template; assistant turns trained */
  const char *separator;        /* plain text: documents end at each occurrence; NULL: one per file */
  enum zo_data_format format;   /* ZO_DATA_U16, ZO_DATA_U32 or ZO_DATA_LLMC */
  bool wide_llmc;               /* llmc with uint32 ids (version 7) */
  const char *out_train, *out_val; /* out_val NULL: everything to out_train */
  double val_fraction;          /* of the documents (whole ones, the last), in [0, 1) */
  bool progress;                /* a progress line on stderr */
};

struct zo_prepare_result {
  size_t n_docs, n_val_docs;
  size_t n_train, n_val; /* tokens written */
  size_t n_trained;      /* tokens whose mask is 1 (all without a mask) */
  size_t vocab_size;
  int32_t eos_id;
  bool masked;           /* masks were written */
};

/* Encodes the documents of paths (in order; OpenMP threads over batches of
 * documents, the output independent of their number) into o->out_train and
 * o->out_val, each written atomically with its mask. A token id the chosen
 * width cannot hold (uint16: > 65535) is refused (-ERANGE) naming the id,
 * the document and the format to use; a JSON line that does not parse or
 * lacks the field is refused naming file:line and the key. Returns 0 or
 * -errno; on error no output or temporary file is left. */
int zo_prepare_tokenized(const char *const *paths, int n_paths, const struct zo_prepare_opts *o,
                         struct zo_prepare_result *res);
/* The outputs of a prepare (outs[0, n_outs), NULL entries skipped), checked
 * before any work: each absent in an existing directory or a regular file
 * (zo_output_check), as is its PATH.mask; no two the same file; none the
 * same file (inode) as an input. The temporary files a killed prepare left
 * beside them (PATH.tmp.PID, PATH.mask.tmp.PID of dead pids) are removed.
 * Returns 0 or -errno naming the path. */
int zo_prepare_check_outputs(const char *const *outs, int n_outs, const char *const *inputs, int n_inputs);
/* Publishes a prepare's outputs as a set (zo_atomic_files_commit): files[0,
 * n) all or none; without masks (masked false) the PATH.mask of each of
 * outs[0, n_outs) (NULL skipped) is removed with them, so that a stale mask
 * never applies to new tokens. Returns 0 or -errno. */
int zo_prepare_commit_outputs(struct zo_atomic_file *const *files, int n, const char *const *outs, int n_outs,
                              bool masked);
/* Whether a file name says JSON lines (.jsonl, .ndjson). */
bool zo_prepare_is_jsonl_path(const char *path);

#ifdef __cplusplus
}
#endif
#endif /* ZO_PREPARE_H */
