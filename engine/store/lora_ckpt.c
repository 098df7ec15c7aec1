/* A LoRA run's checkpoints (zo/lora_ckpt.h): the PEFT adapter directory
 * (lora_io.c's writer and reader) and the adapters' AdamW m, v, inside
 * zo/checkpoint.h's transaction (temporary directory, checksums,
 * trainer_state.json last, atomic rename, retention). */
#include "zo/lora_ckpt.h"

#include <errno.h>
#include <stdio.h>

#include "zo/safetensors.h"

static const char *const state_names[2] = {"exp_avg", "exp_avg_sq"};

static int write_optimizer(const char *dir, const struct zo_lora_table *t, const float *m, const float *v) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/%s", dir, ZO_LORA_OPTIM_FILE) >= (int)sizeof path)
    return zo_error(-ENAMETOOLONG, "%s/%s: path too long", dir, ZO_LORA_OPTIM_FILE);
  struct zo_st_writer *w = zo_st_writer_init();
  if (!w) return -ENOMEM;
  const int64_t shape[1] = {(int64_t)t->numel};
  int err = zo_st_writer_add(w, state_names[0], ZO_F32, 1, shape, m);
  if (!err) err = zo_st_writer_add(w, state_names[1], ZO_F32, 1, shape, v);
  if (!err) err = zo_st_writer_set_metadata(w, "optimizer", "AdamW");
  if (!err) err = zo_st_writer_write(w, path);
  zo_st_writer_free(w);
  return err;
}

int zo_lora_checkpoint_save(const char *dir, const struct zo_lora_table *t, const float *params, const float *adam_m,
                            const float *adam_v, const char *base, const struct zo_train_state *state,
                            const struct zo_checkpoint_opts *o, char *out_path, size_t out_size) {
  struct zo_checkpoint_txn x;
  int err = zo_checkpoint_begin(dir, state->step, &x);
  if (err) return err;
  struct zo_checkpoint_opts lo = *o;
  lo.lora = true;
  if (!(err = zo_lora_save(t, params, base, x.tmp)) && !(err = write_optimizer(x.tmp, t, adam_m, adam_v)))
    return zo_checkpoint_commit(&x, state, 0, NULL, &lo, out_path, out_size);
  zo_checkpoint_abort(&x);
  return err;
}

/* adapter_optimizer.safetensors's m and v (t->numel fp32 each). */
static int read_optimizer(const char *path, const struct zo_lora_table *t, float *m, float *v) {
  char p[PATH_MAX];
  if (snprintf(p, sizeof p, "%s/%s", path, ZO_LORA_OPTIM_FILE) >= (int)sizeof p)
    return zo_error(-ENAMETOOLONG, "%s/%s: path too long", path, ZO_LORA_OPTIM_FILE);
  struct zo_st_file *f = zo_st_open(p);
  if (!f) return -EINVAL;
  int err = zo_st_n_tensors(f) == 2 ? 0 : zo_error(-EINVAL, "%s: %d tensors, expected exp_avg and exp_avg_sq", p,
                                                   zo_st_n_tensors(f));
  for (int i = 0; i < 2 && !err; i++) {
    const struct zo_st_tensor *st = zo_st_find(f, state_names[i]);
    if (!st || st->dtype != ZO_F32 || st->numel != t->numel)
      err = zo_error(-EINVAL, "%s: %s must be F32 with the adapters' %zu elements: the checkpoint is of other "
                     "adapters (another lora.r or target_modules)", p, state_names[i], t->numel);
    else
      err = zo_st_read_f32(st, i == 0 ? m : v, t->numel);
  }
  zo_st_close(f);
  return err;
}

int zo_lora_checkpoint_load(const char *path, const struct zo_lora_table *t, float *params, float *adam_m,
                            float *adam_v, struct zo_train_state *state) {
  struct zo_train_state st = *state;
  int err = zo_checkpoint_load_io(path, NULL, NULL, NULL, false, &st);
  if (!err) err = zo_lora_load(t, path, params);
  if (!err) err = read_optimizer(path, t, adam_m, adam_v);
  if (!err) *state = st;
  return err;
}
