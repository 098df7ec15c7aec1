/* The settings of a training run that change its mathematics, as a
 * checkpoint records them (trainer_state.json's "settings": one string per
 * key) and a resume compares them (engine/store/run_settings.c): the model's
 * config (shapes, activation, norm epsilon, rotary base and scaling, sliding
 * window, dropout, model.init_from's files), the precision and fp16 loss
 * scaling, the batch (rows of a global micro-batch, accumulation, sequence,
 * order), the optimizer's hyper-parameters, gradient clipping and the lora
 * section. One table says, per key, whether a resume that changes it is
 * refused for good (the shapes, the optimizer states' format), refused
 * unless --resume-allow KEY (said in one line when allowed), or only said
 * (the learning-rate schedule). Steps, logging, checkpointing, evaluation,
 * placement, offload, threads and the device are not compared. */
#ifndef ZO_RUN_SETTINGS_H
#define ZO_RUN_SETTINGS_H

#include <stdio.h>

#include "zo/config.h"
#include "zo/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One value string per key of the table; NULL: not recorded (a checkpoint
 * from before the record). Opaque; zo_run_settings_free frees it. */
struct zo_run_settings;

/* The settings of a run of cfg whose model is mc (zo_train_model_config's:
 * model.init_from's config.json applied) over n_ranks data-parallel ranks.
 * Reads the files of model.init_from (their fingerprint) and lora.init_from.
 * Returns 0 with *out set (free it), or -errno with a message. */
int zo_run_settings_of_run(const struct zo_config *cfg, const struct zo_model_config *mc, int n_ranks,
                           struct zo_run_settings **out);

/* The settings checkpoint directory path was trained with: its
 * trainer_state.json's "settings"; a checkpoint from before that record
 * gives the model's keys from its config.json (n_head: the run's, for a bare
 * file) and the batch rows from "batch_rows", the other keys NULL. Returns
 * 0 with *out set (free it), or -errno with a message. */
int zo_run_settings_of_checkpoint(const char *path, int n_head, struct zo_run_settings **out);

void zo_run_settings_free(struct zo_run_settings *s);

/* The table: zo_run_settings_n() keys, key i's name, and s's value of it
 * (NULL: not recorded). For writing the record (engine/store/checkpoint.c). */
int zo_run_settings_n(void);
const char *zo_run_settings_key(int i);
const char *zo_run_settings_value(const struct zo_run_settings *s, int i);

/* Compares the checkpoint's settings (was, of checkpoint path) with this
 * run's (now). Keys allowed[0..n_allowed) (--resume-allow) must each be a
 * key whose change can be allowed. A changed key refused for good, or
 * refusable and not allowed, is -EINVAL naming every such key with both
 * values and what to do. Each allowed change, each said change, each key
 * the checkpoint did not record and each allowed key that did not change is
 * one line on notes (NULL: none, for the ranks that do not print). Returns
 * 0 or -EINVAL with a message. */
int zo_run_settings_compare(const struct zo_run_settings *was, const struct zo_run_settings *now, const char *path,
                            const char *const *allowed, int n_allowed, FILE *notes);

#ifdef __cplusplus
}
#endif
#endif /* ZO_RUN_SETTINGS_H */
