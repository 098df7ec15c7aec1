/* The chat-template interpreter (engine/text/chat_template.c, what
 * `prepare --messages-field` runs on a tokenizer_config.json's
 * chat_template): the input is the template, then, NUL-separated, the
 * messages as role/content pairs (at most 8 messages; the first byte of an
 * odd part count's last string picks add_generation_prompt). Hostile
 * templates must be refused by the interpreter's limits (nesting depth,
 * output size, loop iterations, working space) or rendered: never a crash,
 * a hang, unbounded memory, or an output whose length is not its bytes. */
#include "fuzz_common.h"

#include <errno.h>

#include "zo/chat_template.h"
#include "zo/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  char *parts[18], *block;
  const int np = fuzz_split(data, n, parts, 18, &block);
  struct zo_chat_message msgs[8];
  size_t nm = 0;
  for (int i = 1; i + 1 < np && nm < 8; i += 2) msgs[nm++] = (struct zo_chat_message){parts[i], parts[i + 1]};
  const bool gen = np % 2 == 0 && np > 1 && parts[np - 1][0] != '\0';
  char *out = NULL;
  size_t len = 0;
  const int rc = zo_chat_render(np > 0 ? parts[0] : "", msgs, nm, gen, "<s>", "</s>", &out, &len);
  if (rc == 0 && (!out || strlen(out) > len)) abort(); /* content has no NUL: strlen == len unless it renders one */
  if (rc != 0 && rc != -ENOTSUP && rc != -EINVAL && rc != -ENOMEM && rc != -E2BIG) abort();
  free(out);
  free(block);
  return 0;
}
