/* The tokenizer (engine/text/tokenizer.c). The input's first NUL byte separates a
 * tokenizer.json, which is loaded (refusals are fine, crashes are not), from
 * a text. The text is encoded with whatever loaded and with two fixed
 * tokenizers (byte-level BPE with the GPT-2 pattern, added tokens and a BOS
 * template; SentencePiece-style with byte fallback and the Replace, ByteFallback,
 * Fuse, Strip decoders), each result decoded, and the text's bytes read as
 * ids are decoded too. */
#include "fuzz_common.h"

#include "zo/common.h"
#include "zo/tokenizer.h"

#define BYTES_VOCAB                                                                                              \
  "\"a\": 0, \"b\": 1, \"ab\": 2, \"c\": 3, \"abc\": 4, \"\xc4\xa0\": 5, \"\xc4\xa0" "a\": 6, \"\xc3\xaf\": 7, " \
  "\"<0x41>\": 8, \"<0xC3>\": 9, \"<0xA9>\": 10, \"<unk>\": 11, \"\xe2\x96\x81\": 12, \"\xe2\x96\x81" "a\": 13"

static const char *const fixed_json[2] = {
    "{\"added_tokens\": [{\"id\": 14, \"content\": \"<s>\", \"special\": true, \"normalized\": false,"
    " \"lstrip\": true, \"rstrip\": true}, {\"id\": 15, \"content\": \"ab c\", \"special\": false, \"normalized\": true,"
    " \"rstrip\": true}],"
    " \"normalizer\": {\"type\": \"NFKC\"},"
    " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"use_regex\": true},"
    " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}},"
    " {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [14]}}},"
    " \"decoder\": {\"type\": \"ByteLevel\"},"
    " \"model\": {\"type\": \"BPE\", \"vocab\": {" BYTES_VOCAB "}, \"merges\": [\"a b\", \"ab c\", \"\xc4\xa0 a\"]}}",
    "{\"added_tokens\": [{\"id\": 14, \"content\": \"<s>\", \"special\": true, \"normalized\": false}],"
    " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\xe2\x96\x81\"},"
    " {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xe2\x96\x81\"}]},"
    " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s+(?!\\\\S)|\\\\p{L}+\"},"
    " \"behavior\": \"MergedWithNext\", \"invert\": false},"
    " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\xe2\x96\x81\"},"
    " \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \","
    " \"start\": 1, \"stop\": 1}]},"
    " \"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": true, \"byte_fallback\": true,"
    " \"vocab\": {" BYTES_VOCAB "}, \"merges\": [\"a b\", \"ab c\", \"\xe2\x96\x81 a\"]}}",
};

static struct zo_tokenizer *fixed[2];

static void setup(void) {
  for (int i = 0; i < 2; i++) {
    char path[128], name[32];
    snprintf(name, sizeof name, "fixed%d.json", i);
    fuzz_path(name, path, sizeof path);
    fuzz_write(path, fixed_json[i], strlen(fixed_json[i]));
    if (zo_tokenizer_load(path, &fixed[i]) != 0) {
      fprintf(stderr, "fuzz-tokenizer: fixed tokenizer %d: %s\n", i, zo_last_error());
      abort();
    }
  }
}

static void exercise(const struct zo_tokenizer *tk, const char *text, size_t n) {
  int32_t *ids = NULL;
  size_t n_ids = 0, cap = 0;
  for (int sp = 0; sp < 2; sp++) {
    n_ids = 0;
    if (zo_tokenizer_encode(tk, text, n, sp, &ids, &n_ids, &cap) == 0) {
      char *out;
      size_t len;
      if (zo_tokenizer_decode(tk, ids, n_ids, sp, &out, &len) == 0) free(out);
    }
  }
  char *out;
  size_t len;
  int32_t raw[64];
  const size_t k = n / 4 < 64 ? n / 4 : 64;
  memcpy(raw, text, k * 4);
  for (size_t i = 0; i < k; i++) raw[i] %= (int32_t)(zo_tokenizer_vocab_size(tk) + 2);
  if (zo_tokenizer_decode(tk, raw, k, false, &out, &len) == 0) free(out);
  free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  if (!fixed[0]) setup();
  const uint8_t *z = memchr(data, 0, n);
  const char *text = z ? (const char *)z + 1 : (const char *)data;
  const size_t tn = z ? n - (size_t)(z - data) - 1 : n;
  if (z) {
    char path[128];
    fuzz_path("tokenizer.json", path, sizeof path);
    fuzz_write(path, data, (size_t)(z - data));
    struct zo_tokenizer *tk;
    if (zo_tokenizer_load(path, &tk) == 0) {
      exercise(tk, text, tn);
      zo_tokenizer_free(tk);
    }
  }
  exercise(fixed[0], text, tn);
  exercise(fixed[1], text, tn);
  return 0;
}
