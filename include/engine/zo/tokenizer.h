/* Hugging Face tokenizers in C: reads a tokenizer.json and encodes and decodes
 * exactly as the `tokenizers` library (0.15) does, for byte-level BPE (GPT-2,
 * Llama 3, Qwen) and SentencePiece-style BPE (Llama 2, TinyLlama, Mistral).
 * Whatever a tokenizer.json holds that this library does not implement
 * (another model type, normalizer, pre-tokenizer, decoder or option value) is
 * refused by name at load, never approximated. A loaded tokenizer is
 * immutable: every function below may be called from several threads on one
 * handle at once. */
#ifndef ZO_TOKENIZER_H
#define ZO_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct zo_tokenizer;

/* path: a tokenizer.json, or a directory holding one (then
 * tokenizer_config.json beside it is read for eos/bos/chat_template when
 * present). Returns 0 or -errno with zo_error naming the file, the JSON key
 * and what is supported; anything unsupported is refused by name, never
 * approximated. On success *out owns the tokenizer (zo_tokenizer_free). */
int zo_tokenizer_load(const char *path, struct zo_tokenizer **out);
/* Frees tk; NULL is accepted. */
void zo_tokenizer_free(struct zo_tokenizer *tk);
/* Highest id + 1, added tokens included. */
size_t zo_tokenizer_vocab_size(const struct zo_tokenizer *tk);
/* Encodes text[0, n) exactly as tokenizers' Tokenizer.encode(text,
 * add_special_tokens=add_special); appends to *ids (grown with realloc;
 * *n_ids, *cap updated). Invalid UTF-8 is not an error: each maximal invalid
 * subpart is read as one U+FFFD, as Rust's from_utf8_lossy and Python's
 * bytes.decode("utf-8", "replace") do, so the ids are the reference's for
 * that repaired text. Returns 0 or -errno (-ENOMEM). Safe to call from
 * several threads on one tk; each thread keeps a cache of encoded words. */
int zo_tokenizer_encode(const struct zo_tokenizer *tk, const char *text, size_t n, bool add_special,
                        int32_t **ids, size_t *n_ids, size_t *cap);
/* Decodes exactly as tokenizers' decode(ids, skip_special_tokens=skip_special);
 * *out malloc'd, NUL-terminated, *len bytes. An id outside the vocabulary is
 * skipped, as the reference does. Returns 0 or -ENOMEM. */
int zo_tokenizer_decode(const struct zo_tokenizer *tk, const int32_t *ids, size_t n, bool skip_special,
                        char **out, size_t *len);
/* The id of a vocabulary or added token, -1 when absent. */
int32_t zo_tokenizer_token_to_id(const struct zo_tokenizer *tk, const char *token);
/* The token string of id (owned by tk), NULL when absent. */
const char *zo_tokenizer_id_to_token(const struct zo_tokenizer *tk, int32_t id);
/* tokenizer_config.json's eos_token, else the first of "<|endoftext|>",
 * "<|end_of_text|>", "</s>" present; -1 none. */
int32_t zo_tokenizer_eos_id(const struct zo_tokenizer *tk);
/* Likewise bos_token, "<|begin_of_text|>", "<s>"; -1 none. */
int32_t zo_tokenizer_bos_id(const struct zo_tokenizer *tk);
/* tokenizer_config.json's chat_template string (owned by tk), NULL none. */
const char *zo_tokenizer_chat_template(const struct zo_tokenizer *tk);

/* `zoffload tokenizer train`: learns a byte-level BPE vocabulary. */
struct zo_tokenizer_train_opts {
  size_t vocab_size;            /* ids in all: 256 bytes + merges + special tokens */
  const char *pattern;          /* split pattern: "llama3" (default when NULL) or "gpt2" */
  const char *const *specials;  /* special tokens after "<|endoftext|>" (the eos and bos), may be NULL */
  size_t n_specials;
  size_t min_frequency;         /* a pair seen fewer times is not merged (0: 2) */
};

/* Reads files[0, n_files) (invalid UTF-8 repaired as by encode), splits them
 * with the pattern, learns merges by pair frequency (ties: the smaller pair
 * of ids) until opts->vocab_size ids or no pair is frequent enough, and
 * writes out_dir/tokenizer.json (loadable by tokenizers >= 0.13 and by
 * zo_tokenizer_load) and out_dir/tokenizer_config.json (eos and bos
 * "<|endoftext|>", PreTrainedTokenizerFast, so transformers' AutoTokenizer
 * loads the directory), creating out_dir. *n_vocab (may be NULL): the ids
 * written. Returns 0 or -errno with zo_error naming the file. */
int zo_tokenizer_train(const char *const *files, size_t n_files, const struct zo_tokenizer_train_opts *opts,
                       const char *out_dir, size_t *n_vocab);

#ifdef __cplusplus
}
#endif
#endif /* ZO_TOKENIZER_H */
