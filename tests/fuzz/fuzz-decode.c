/* `zoffload tokenizer decode` reading ids from stdin (engine/cli/
 * tokenizer_cli.c): the input is stdin; a tokenizer trained once (256 bytes
 * and a few merges) decodes what parses. The command exits 0 (ids decoded)
 * or 2 (a word that is not an id below 2^31, or an id the tokenizer does
 * not have, refused by name); never anything else, never a crash. */
#include "fuzz_common.h"

#include "zo/common.h"
#include "zo/tokenizer.h"

#include "../../engine/cli/tokenizer_cli.h"

static char tok_dir[128], in_path[128];

static void setup(void) {
  char corpus[128];
  fuzz_path("corpus.txt", corpus, sizeof corpus);
  static const char text[] = "the quick brown fox jumps over the lazy dog; the dog sleeps, the fox runs.\n";
  fuzz_write(corpus, text, sizeof text - 1);
  fuzz_path("tok", tok_dir, sizeof tok_dir);
  const char *files[] = {corpus};
  const struct zo_tokenizer_train_opts o = {.vocab_size = 280};
  if (zo_tokenizer_train(files, 1, &o, tok_dir, NULL) != 0) {
    fprintf(stderr, "fuzz-decode: %s\n", zo_last_error());
    abort();
  }
  fuzz_path("stdin.txt", in_path, sizeof in_path);
  if (!freopen("/dev/null", "w", stdout)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  if (!tok_dir[0]) setup();
  fuzz_write(in_path, data, n);
  if (!freopen(in_path, "r", stdin)) abort();
  char *argv[] = {"tokenizer", "decode", "--tokenizer", tok_dir, NULL};
  const int rc = zo_cli_tokenizer(4, argv);
  if (rc != 0 && rc != 2) abort();
  return 0;
}
