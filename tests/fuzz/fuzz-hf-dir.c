/* The Hugging Face directory readers (engine/store/hf_dir.c): the input's NUL byte
 * separates model.safetensors.index.json from config.json, both written into
 * a directory that also holds a valid shard of a tiny GPT-2. The index is
 * loaded into that model (weight_map, shard names, tensors found in the
 * shard or not), and the config parsed into a model config. */
#include "fuzz_common.h"

#include <sys/stat.h>

#include "zo/backend.h"
#include "zo/hf.h"
#include "zo/model.h"

static struct zo_model *model;
static float *params;
static char dir[128];

static void setup(void) {
  struct zo_model_config mc = {.arch = ZO_ARCH_GPT2, .n_layer = 1, .n_head = 2, .n_embd = 8,
                               .vocab_size = 32, .max_seq_len = 8};
  if (zo_model_config_check(&mc) != 0) abort();
  model = zo_model_init_inference(&mc, zo_backend_cpu(), 1, 1);
  if (!model) {
    fprintf(stderr, "fuzz-hf-dir: %s\n", zo_last_error());
    abort();
  }
  params = calloc(model->table.numel, sizeof *params);
  char shard_dir[160], from[200], to[200];
  fuzz_path("shard", shard_dir, sizeof shard_dir);
  if (!params || zo_model_save_pretrained(shard_dir, model, params) != 0) abort();
  fuzz_path("hf", dir, sizeof dir);
  snprintf(from, sizeof from, "%s/model.safetensors", shard_dir);
  snprintf(to, sizeof to, "%s/model-00001-of-00001.safetensors", dir);
  if (mkdir(dir, 0700) != 0 || rename(from, to) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  if (!model) setup();
  char *parts[2], *block, path[200];
  const int k = fuzz_split(data, n, parts, 2, &block);
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  fuzz_write(path, parts[0], strlen(parts[0]));
  zo_model_load_safetensors(dir, model, params);
  snprintf(path, sizeof path, "%s/config.json", dir);
  if (k > 1) {
    fuzz_write(path, parts[1], strlen(parts[1]));
    struct zo_model_config mc;
    zo_model_config_from_pretrained(dir, 2, &mc);
  }
  unlink(path);
  free(block);
  return 0;
}
