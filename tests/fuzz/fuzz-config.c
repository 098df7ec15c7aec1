/* zo_config_load (engine/config/config.c): a config file and --set overrides. The
 * input's NUL bytes separate the file's text from up to 8 --set strings
 * ("key=value"). Every input must load or be refused with a message. */
#include "fuzz_common.h"
#include "zo/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  char *parts[9], *block, path[128];
  const int k = fuzz_split(data, n, parts, 9, &block);
  fuzz_write(fuzz_path("config.json", path, sizeof path), parts[0], strlen(parts[0]));
  struct zo_config cfg;
  const int err = zo_config_load(&cfg, path, (const char *const *)parts + 1, k - 1);
  if (err == 0) zo_config_free(&cfg);
  else if (!zo_last_error()[0]) abort(); /* every refusal says why */
  free(block);
  return 0;
}
