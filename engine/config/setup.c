/* The setup train, eval, sample, plan, bench and calibrate share (see
 * zo/train_setup.h): the thread-count check, the backend of engine.device
 * and the model shapes of a config. */
#include "zo/train_setup.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "zo/env_vars.h"
#include "zo/hf.h"
#include "zo/lora.h"

/* engine.threads beyond 4x the hardware threads is refused: libgomp crashes
 * on 100000, and no such count helps. The environment (OMP_NUM_THREADS with
 * the same bound, ZO_CPU_GEMM, ...) is checked by zo_env_vars_check. */
int zo_train_check_threads(const struct zo_config *cfg) {
  const long hw = sysconf(_SC_NPROCESSORS_ONLN) > 0 ? sysconf(_SC_NPROCESSORS_ONLN) : 1, most = 4 * hw;
  if (cfg->engine.threads > most)
    return zo_error(-EINVAL, "engine.threads = %d: more than 4x the %ld hardware threads here; use 0 (one per "
                             "core) or at most %ld", cfg->engine.threads, hw, most);
  return zo_env_vars_check();
}

/* engine.device, "auto" taking CUDA when a GPU answers (zo_backend_init
 * prints one line when it falls back to the CPU). */
zo_backend_t zo_train_backend(const struct zo_config *cfg, zo_comm_t comm) {
  if (zo_train_check_threads(cfg)) return NULL;
  if (cfg->engine.threads > 0 || !comm || zo_comm_local_size(comm) <= 1 || getenv("OMP_NUM_THREADS"))
    return zo_backend_init(zo_device_name(cfg->engine.device), cfg->engine.threads);
  const long per = sysconf(_SC_NPROCESSORS_ONLN) / zo_comm_local_size(comm);
  return zo_backend_init(zo_device_name(cfg->engine.device), per >= 1 ? (int)per : 1);
}

int zo_train_model_config_lora(const struct zo_config *cfg, struct zo_model_config *mc, bool *lora_on) {
  if (lora_on) *lora_on = false;
  *mc = cfg->model.spec;
  const bool init = cfg->model.init_from && cfg->model.init_from[0];
  if (init) {
    int err = zo_model_config_from_pretrained(cfg->model.init_from, cfg->model.spec.n_head, mc);
    if (err) return zo_error(err, "model.init_from: %s", zo_last_error());
  }
  if (cfg->model.hf_dropout && !init)
    return zo_error(-EINVAL, "model.hf_dropout = true takes the dropout rates of model.init_from's config.json, "
                             "and model.init_from is not set: set it, or set model.dropout");
  if (!cfg->model.hf_dropout) mc->embd_pdrop = mc->attn_pdrop = mc->resid_pdrop = (float)cfg->model.dropout;
  if (cfg->data.seq_len > mc->max_seq_len)
    return zo_error(-EINVAL, "data.seq_len = %d exceeds the model's max_seq_len = %d%s%s%s: lower data.seq_len",
                    cfg->data.seq_len, mc->max_seq_len, init ? " (the length of model.init_from " : "",
                    init ? cfg->model.init_from : "", init ? ")" : "");
  int err = zo_model_config_check(mc);
  if (err) return err;
  /* LoRA: resolved (the adapter directory and targets checked). */
  struct zo_lora lora;
  err = zo_lora_resolve(&cfg->lora, mc, &lora);
  if (err < 0) return err;
  if (lora_on) *lora_on = err > 0;
  if (cfg->quant.load_in_4bit)
    return zo_error(-ENOTSUP, "quantization.load_in_4bit = true (QLoRA, %s%s): the section is read and checked, "
                    "but the base quantized at load and training over it are not built yet (issue 48 pieces 3-4; "
                    "docs/STATUS.md); remove the quantization section to train LoRA over the %s base",
                    zo_config_quant_type_names[cfg->quant.quant_type],
                    cfg->quant.use_double_quant ? " with double quantization" : "", cfg->bf16 ? "bf16" : "fp32");
  return 0;
}

int zo_train_model_config(const struct zo_config *cfg, struct zo_model_config *mc) {
  bool on;
  const int err = zo_train_model_config_lora(cfg, mc, &on);
  if (err || !on) return err;
  return zo_error(-ENOTSUP, "lora: bench memory and bench calibrate with LoRA adapters are not built yet (train, "
                            "plan, plan --auto and bench step are): remove the lora section here");
}
