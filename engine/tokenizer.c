/* Hugging Face tokenizer.json loader, encoder and decoder (see zo/tokenizer.h).
 * Skeleton: every entry point refuses with -ENOTSUP until the implementation
 * lands; the interface is fixed so that callers can link against it now. */
#include "zo/tokenizer.h"

#include <errno.h>
#include <stdlib.h>

#include "zo/common.h"

struct zo_tokenizer {
  size_t vocab_size;
};

int zo_tokenizer_load(const char *path, struct zo_tokenizer **out) {
  *out = NULL;
  return zo_error(-ENOTSUP, "%s: tokenizer.json loading is not implemented yet", path);
}

void zo_tokenizer_free(struct zo_tokenizer *tk) { free(tk); }

size_t zo_tokenizer_vocab_size(const struct zo_tokenizer *tk) { return tk->vocab_size; }

int zo_tokenizer_encode(const struct zo_tokenizer *tk, const char *text, size_t n, bool add_special,
                        int32_t **ids, size_t *n_ids, size_t *cap) {
  return zo_error(-ENOTSUP, "tokenizer encode is not implemented yet");
}

int zo_tokenizer_decode(const struct zo_tokenizer *tk, const int32_t *ids, size_t n, bool skip_special,
                        char **out, size_t *len) {
  *out = NULL;
  *len = 0;
  return zo_error(-ENOTSUP, "tokenizer decode is not implemented yet");
}

int32_t zo_tokenizer_token_to_id(const struct zo_tokenizer *tk, const char *token) { return -1; }
const char *zo_tokenizer_id_to_token(const struct zo_tokenizer *tk, int32_t id) { return NULL; }
int32_t zo_tokenizer_eos_id(const struct zo_tokenizer *tk) { return -1; }
int32_t zo_tokenizer_bos_id(const struct zo_tokenizer *tk) { return -1; }
const char *zo_tokenizer_chat_template(const struct zo_tokenizer *tk) { return NULL; }
