/* The token-file readers (engine/text/data.c): the llm.c shard header (magic,
 * version, token count against the file size) and every format's checks at
 * open, then a few micro-batches of whatever opened. */
#include "fuzz_common.h"
#include "zo/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  char path[128];
  fuzz_write(fuzz_path("tokens.bin", path, sizeof path), data, n);
  size_t n_tokens, width;
  zo_data_read_llmc_header(path, &n_tokens, &width);
  static const enum zo_data_format fmts[] = {ZO_DATA_LLMC, ZO_DATA_U16, ZO_DATA_U32, ZO_DATA_TEXT};
  for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
    struct zo_data *d = zo_data_open(path, fmts[i], 300, 1, 4, i % 2 == 0, 7);
    if (!d) continue;
    int32_t in[4], tg[4];
    for (int b = 0; b < 3; b++)
      if (zo_data_next(d, in, tg) != 0) abort(); /* the file did not change */
    for (int k = 0; k < 4; k++)
      if (in[k] < 0 || in[k] >= 300 || tg[k] < 0 || tg[k] >= 300) abort();
    zo_data_close(d);
  }
  return 0;
}
