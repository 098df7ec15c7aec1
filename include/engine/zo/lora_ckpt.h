/* A LoRA run's checkpoint: <checkpoint.dir>/checkpoint-<step>/ holding
 *   adapter_config.json, adapter_model.safetensors   the trained adapters as
 *                         a PEFT adapter directory (zo_lora_save: fp32,
 *                         base_model_name_or_path = model.init_from), which
 *                         PeftModel.from_pretrained, `zoffload eval/sample
 *                         --adapter` and `export --adapter/--merge` read
 *   adapter_optimizer.safetensors   AdamW's m and v of the adapters
 *                         ("exp_avg", "exp_avg_sq", fp32, flat in the
 *                         adapter table's order)
 *   trainer_state.json    as every checkpoint's (zo/checkpoint.h), with
 *                         "lora": true; its "settings" record model.init_from's
 *                         fingerprint, so a resume over another base is
 *                         refused naming both
 * and the run's tokenizer files; no model.safetensors (the base is frozen:
 * model.init_from holds it). Written and committed as zo/checkpoint.h's
 * transactions (atomic, checksummed, retention). */
#ifndef ZO_LORA_CKPT_H
#define ZO_LORA_CKPT_H

#include "zo/checkpoint.h"
#include "zo/lora.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_LORA_OPTIM_FILE "adapter_optimizer.safetensors"

/* Saves t's adapters (params) and their m, v (t->numel floats each, host)
 * as checkpoint-<state->step> under dir, base naming the base model
 * (adapter_config.json's base_model_name_or_path), with o's tokenizer,
 * settings and retention (o->lora is implied). Returns 0 or -errno; on
 * error earlier checkpoints are untouched. */
int zo_lora_checkpoint_save(const char *dir, const struct zo_lora_table *t, const float *params, const float *adam_m,
                            const float *adam_v, const char *base, const struct zo_train_state *state,
                            const struct zo_checkpoint_opts *o, char *out_path, size_t out_size);

/* Loads a LoRA checkpoint of t (checked first: trainer_state.json, every
 * checksum; then the adapter's names and shapes, zo_lora_load) into params,
 * adam_m, adam_v (t->numel floats each) and state. Returns 0 or -errno
 * naming the file. */
int zo_lora_checkpoint_load(const char *path, const struct zo_lora_table *t, float *params, float *adam_m,
                            float *adam_v, struct zo_train_state *state);

#ifdef __cplusplus
}
#endif
#endif /* ZO_LORA_CKPT_H */
