/* `prepare`'s JSON-lines reader (engine/text/prepare.c): the input's first
 * byte picks the form (a text field, a prompt and a completion field, or
 * chat messages rendered with a chat template), the rest is the .jsonl file,
 * prepared with a tokenizer trained once (its config given a chat
 * template). Refusals are fine, crashes are not; what is written holds as
 * many mask bytes as tokens, trains at least one of them, and the counts
 * agree with the files. */
#include <sys/stat.h>

#include "fuzz_common.h"

#include "zo/common.h"
#include "zo/prepare.h"
#include "zo/tokenizer.h"

static char tok_dir[128], in_path[128], out_path[128], mask_path[160];

static void setup(void) {
  char corpus[128], cfg[192];
  fuzz_path("corpus.txt", corpus, sizeof corpus);
  static const char text[] = "user: what is two plus two?\nassistant: it is four.\nthe quick brown fox\n";
  fuzz_write(corpus, text, sizeof text - 1);
  fuzz_path("tok", tok_dir, sizeof tok_dir);
  const char *files[] = {corpus};
  const struct zo_tokenizer_train_opts o = {.vocab_size = 300};
  if (zo_tokenizer_train(files, 1, &o, tok_dir, NULL) != 0) {
    fprintf(stderr, "fuzz-prepare: %s\n", zo_last_error());
    abort();
  }
  static const char config[] =
      "{\"eos_token\": \"<|endoftext|>\", \"bos_token\": \"<|endoftext|>\", \"chat_template\": \"{% for m in "
      "messages %}{{ m['role'] }}: {{ m['content'] }}\\n{% endfor %}{% if add_generation_prompt %}assistant: "
      "{% endif %}\"}";
  snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", tok_dir);
  fuzz_write(cfg, config, sizeof config - 1);
  fuzz_path("in.jsonl", in_path, sizeof in_path);
  fuzz_path("out.bin", out_path, sizeof out_path);
  snprintf(mask_path, sizeof mask_path, "%s.mask", out_path);
}

static long long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  if (!tok_dir[0]) setup();
  if (n < 1) return 0;
  const int form = data[0] % 3;
  fuzz_write(in_path, data + 1, n - 1);
  remove(out_path);
  remove(mask_path);
  struct zo_prepare_opts o = {.tokenizer = tok_dir, .jsonl = true, .format = ZO_DATA_U16, .out_train = out_path};
  if (form == 1) {
    o.prompt_field = "prompt";
    o.completion_field = "completion";
  } else if (form == 2) {
    o.messages_field = "messages";
  }
  const char *paths[] = {in_path};
  struct zo_prepare_result r;
  if (zo_prepare_tokenized(paths, 1, &o, &r) != 0) {
    if (file_size(out_path) >= 0 || file_size(mask_path) >= 0) abort(); /* a refusal writes nothing */
    return 0;
  }
  if (file_size(out_path) != (long long)(2 * r.n_train) || r.n_val != 0 || r.n_trained > r.n_train) abort();
  if (r.masked != (form != 0) || file_size(mask_path) != (r.masked ? (long long)r.n_train : -1)) abort();
  if (r.masked && r.n_trained == 0) abort();
  return 0;
}
