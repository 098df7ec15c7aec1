/* trainer_state.json (engine/store/checkpoint.c's load path): the input replaces
 * the trainer_state.json of a valid checkpoint of a tiny GPT-2 (fp32 AdamW),
 * which is then loaded: step counts, data position, seed, loss scaler,
 * shard count and the CRC of every file are read and checked. The file is
 * not reachable on its own (static in checkpoint.c), hence the directory. */
#include "fuzz_common.h"
#include "zo/backend.h"
#include "zo/checkpoint.h"
#include "zo/model.h"

static struct zo_model *model;
static float *params, *adam_m, *adam_v;
static char ckpt[256];

static void setup(void) {
  struct zo_model_config mc = {.arch = ZO_ARCH_GPT2, .n_layer = 1, .n_head = 2, .n_embd = 8,
                               .vocab_size = 32, .max_seq_len = 8};
  if (zo_model_config_check(&mc) != 0) abort();
  model = zo_model_init_inference(&mc, zo_backend_cpu(), 1, 1);
  if (!model) abort();
  const size_t n = model->table.numel;
  params = calloc(n, sizeof *params);
  adam_m = calloc(n, sizeof *adam_m);
  adam_v = calloc(n, sizeof *adam_v);
  if (!params || !adam_m || !adam_v) abort();
  for (size_t i = 0; i < n; i++) params[i] = (float)i * 1e-3f;
  struct zo_train_state st = {.step = 3, .applied_steps = 3, .data_position = 3, .seed = 1337,
                              .batch_rows = 1, .world_size = 1};
  st.scaler.scale = 1.0;
  char dir[160];
  fuzz_path("ck", dir, sizeof dir);
  if (zo_checkpoint_save(dir, model, params, NULL, adam_m, adam_v, &st, 0, ckpt, sizeof ckpt) != 0) {
    fprintf(stderr, "fuzz-trainer-state: %s\n", zo_last_error());
    abort();
  }
  /* ZO_FUZZ_SEED_OUT=FILE: a copy of the valid trainer_state.json, the seed. */
  const char *out = getenv("ZO_FUZZ_SEED_OUT");
  if (out) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cp '%s/trainer_state.json' '%s'", ckpt, out);
    if (system(cmd) != 0) abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  if (!model) setup();
  char path[300];
  snprintf(path, sizeof path, "%s/trainer_state.json", ckpt);
  fuzz_write(path, data, n);
  struct zo_train_state st;
  zo_checkpoint_load(ckpt, model, params, adam_m, adam_v, &st);
  return 0;
}
