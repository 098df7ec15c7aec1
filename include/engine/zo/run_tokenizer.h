/* The tokenizer a run carries (engine/text/run_tokenizer.c): which directory its
 * files come from (model.tokenizer, else model.init_from's directory), the
 * files copied with it into checkpoints and exports, and the one a
 * checkpoint or model directory holds for eval and sample. */
#ifndef ZO_RUN_TOKENIZER_H
#define ZO_RUN_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>

#include "zo/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* tokenizer.json, tokenizer_config.json, special_tokens_map.json,
 * generation_config.json: what checkpoints and exports copy (those present). */
#define ZO_TOKENIZER_N_FILES 4
extern const char *const zo_tokenizer_files[ZO_TOKENIZER_N_FILES];

/* The tokenizer.json of path: path itself when it is a file, path/tokenizer.json
 * when path is a directory holding one. Returns true and writes it, or false. */
bool zo_tokenizer_json_of(const char *path, char *json, size_t size);
/* The run's tokenizer.json: model.tokenizer (-ENOENT naming the key when it
 * holds none), else model.init_from's (the file's directory for a file) when
 * it has one, else "" (none). Returns 0 or -errno. */
int zo_run_tokenizer(const struct zo_config *cfg, char *json, size_t size);
/* Copies the tokenizer files into dir: json as tokenizer.json, and the other
 * three from json's directory where present, each atomically. Returns 0 or
 * -errno naming the file. */
int zo_tokenizer_copy_files(const char *json, const char *dir);
#ifdef __cplusplus
}
#endif
#endif /* ZO_RUN_TOKENIZER_H */
