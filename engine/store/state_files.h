/* Helpers shared by the two writers and readers of state directories: our
 * checkpoints (engine/store/checkpoint.c) and Hugging Face model directories
 * (engine/store/hf_dir.c). Private to the engine. */
#ifndef ZO_ENGINE_STATE_FILES_H
#define ZO_ENGINE_STATE_FILES_H

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo/fsutil.h"
#include "zo/model.h"
#include "zo/optim_format.h"
#include "zo/state.h"

/* dir/name into out; -ENAMETOOLONG (with a message) when it does not fit. */
static inline int join(char *out, size_t size, const char *dir, const char *name) {
  int n = snprintf(out, size, "%s/%s", dir, name);
  if (n < 0 || (size_t)n >= size) return zo_error(-ENAMETOOLONG, "path too long: %s/%s", dir, name);
  return 0;
}

/* Writes j as indented JSON and a newline to path, atomically. */
static inline int write_json(const char *path, json_t *j) {
  char *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  if (!text) return zo_error(-ENOMEM, "%s: out of memory formatting JSON", path);
  size_t n = strlen(text);
  text[n] = '\n';
  int err = zo_write_file_atomic(path, text, n + 1);
  free(text);
  return err;
}

/* Fills io over host buffers: params (table order) and, when given, m and v
 * in format opt's canonical layout (NULL: fp32, numel floats each). */
static inline int with_memory_io(const struct zo_model *m, const struct zo_optim_format *opt,
                                 const float *params, const void *adam_m, const void *adam_v,
                                 struct zo_state_mem *mem, struct zo_state_io *io) {
  const size_t sb = opt ? zo_optim_state_nbytes(opt, &m->table) : m->table.numel * sizeof(float);
  *mem = (struct zo_state_mem){.parts = {(void *)(uintptr_t)params, (void *)(uintptr_t)adam_m,
                                         (void *)(uintptr_t)adam_v},
                               .nbytes = {m->table.numel * sizeof(float), sb, sb}};
  return zo_state_io_memory(io, mem, &m->table);
}

#endif /* ZO_ENGINE_STATE_FILES_H */
