/* What every command that builds a model from a config does first
 * (engine/train/setup.c): train, eval, sample, plan, bench and calibrate
 * check the thread counts, pick the backend and derive the model shapes
 * here, so that none of them reaches into another's file for it. */
#ifndef ZO_TRAIN_SETUP_H
#define ZO_TRAIN_SETUP_H

#include "zo/comm.h"
#include "zo/config.h"
#include "zo/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The model shapes of cfg: model.* or, with model.init_from, the file's
 * (n_head from the config); checked against data.seq_len, the lora section
 * resolved. Returns 0 or -errno; with LoRA on, -ENOTSUP (bench memory and
 * calibrate do not handle adapters yet). */
int zo_train_model_config(const struct zo_config *cfg, struct zo_model_config *mc);
/* The same for the commands that handle LoRA (train, plan, plan --auto,
 * bench step, eval and sample's callers): 0
 * with LoRA off or on (*lora_on, may be NULL, says which). */
int zo_train_model_config_lora(const struct zo_config *cfg, struct zo_model_config *mc, bool *lora_on);

/* The backend of engine.device for this rank: with engine.threads 0,
 * OMP_NUM_THREADS unset and several ranks of comm (may be NULL) on this
 * machine, OpenMP gets the machine's cores divided among them (each would
 * otherwise start one thread per core). NULL with zo_last_error() set. */
zo_backend_t zo_train_backend(const struct zo_config *cfg, zo_comm_t comm);
/* -EINVAL with a message when engine.threads asks for more than 4x the
 * hardware threads or an environment variable is invalid (zo_env_vars_check:
 * OMP_NUM_THREADS, ZO_CPU_GEMM, ...); zo_train_backend and zo_train check it
 * first. Else 0. */
int zo_train_check_threads(const struct zo_config *cfg);

#ifdef __cplusplus
}
#endif
#endif /* ZO_TRAIN_SETUP_H */
