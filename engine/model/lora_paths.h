/* adapter_config.json target_modules entries that are module paths (PEFT
 * 0.22's "all-linear" saves every matched module's full name). */
#ifndef ZO_ENGINE_LORA_PATHS_H
#define ZO_ENGINE_LORA_PATHS_H

#include "zo/lora.h"

#include <stddef.h>

/* Resolves paths[0..n) with PEFT's rule (a block module matches an entry
 * when its full name equals it or ends with "." + it) against family f's
 * n_layer blocks into *out: bits (1 << enum zo_lora_target) of the modules
 * covered in every block. named: the bits the list also names bare (they
 * cover every block). An entry matching no block module (lm_head, a
 * non-Linear, a layer past n_layer) is refused (-EINVAL); a module covered
 * in some blocks only is refused (-ENOTSUP: per-layer targets are not
 * built), naming the first block's path missing. file names the source in
 * messages. Returns 0 or -errno (-ENOMEM). */
int zo_lora_paths_targets(const char *const *paths, size_t n, enum zo_model_family f, int n_layer,
                          unsigned named, const char *file, unsigned *out);

#endif
