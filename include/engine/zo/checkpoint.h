/* Checkpoints: a directory <checkpoint.dir>/checkpoint-<step>/ holding
 *   model.safetensors     Hugging Face GPT-2 names and layouts (Conv1D weights
 *                         (in, out), wte (V, C) without padding, tied head not
 *                         stored): loadable by transformers.GPT2LMHeadModel
 *   config.json           Hugging Face GPT2Config
 *   optimizer.safetensors AdamW m and v ("exp_avg", "exp_avg_sq"), fp32, flat
 *                         in our parameter-table order; AdamW8bit: per state
 *                         s in (exp_avg, exp_avg_sq) "s.code" (U8, the codes
 *                         of the 8-bit tensors), "s.absmax" (F32, their block
 *                         absmax) and "s.fp32" (F32, the m or v of the tensors
 *                         below min_8bit_size), each concatenated in table
 *                         order; metadata "optimizer" ("AdamW" or
 *                         "AdamW8bit"), "block_size", "min_8bit_size"
 *   trainer_state.json    step, data position, schedule, the settings the run's
 *                         mathematics depends on ("settings", zo/run_settings.h),
 *                         and the CRC32 of every other file, written last
 * A save writes a temporary directory, fsyncs every file, renames it into
 * place and fsyncs the parent, so a crash leaves the last checkpoint intact. A
 * load verifies every checksum first: a truncated or corrupt checkpoint is
 * refused, never half-loaded, and every trainer_state.json field is
 * range-checked. A save checks each parameter finite as it streams by (a
 * NaN or inf weight fails it with -ERANGE), and retention never removes
 * the checkpoint just written. */
#ifndef ZO_CHECKPOINT_H
#define ZO_CHECKPOINT_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "zo/model.h"
#include "zo/loss_scale.h"
#include "zo/optim_format.h"
#include "zo/state.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a run trains on, recorded in trainer_state.json ("data_train":
 * {"path", "bytes", "fingerprint"}; the tokenizer is "files"'s
 * tokenizer.json checksum), so that a resume on another data file or
 * tokenizer is refused unless told (zo_train_opts.allow_data_change). */
struct zo_run_inputs {
  bool data_known;        /* data_* recorded (false: a checkpoint from before these fields) */
  char data_path[PATH_MAX]; /* data.train as the run gave it */
  uint64_t data_bytes;    /* its size */
  uint32_t data_crc;      /* its zo_file_fingerprint (sampled) */
  bool tokenizer;         /* a tokenizer.json carried */
  uint32_t tokenizer_crc; /* its CRC32 (whole) */
};

struct zo_train_state {
  long step;                /* optimizer steps completed (applied or skipped) */
  long applied_steps;       /* of those, steps whose update was applied: AdamW's
                             * step count and the LR schedule's position */
  long skipped_steps;       /* fp16: steps skipped for a gradient overflow */
  uint64_t data_position;   /* training micro-batches consumed (global ones: all ranks' rows) */
  long batch_rows;          /* rows of one global micro-batch (ranks x per-rank B) when
                             * saved; 0 when the checkpoint does not say */
  int world_size;           /* data-parallel ranks of the run that saved it; 0 unknown */
  struct zo_loss_scaler scaler; /* fp16 loss scaler state (scale 1 when unused) */
  uint64_t seed;            /* engine.seed of the run */
  struct zo_run_inputs inputs; /* what the run trained on (a resume compares it with its own) */
};

/* The size and CRC32 of file path, for a run's inputs: whole (every byte)
 * or sampled (files over 64 MiB: 16 evenly spaced 64 KiB blocks, the first
 * and last included, so that a multi-GB token file costs 1 MiB of reads).
 * Returns 0 or -errno naming the file. */
int zo_file_fingerprint(const char *path, bool whole, uint64_t *bytes, uint32_t *crc);

/* Saves host copies of parameters (table order, m->table.numel floats), and
 * AdamW m and v (the canonical layout of format opt, zo/optim_format.h; NULL: fp32
 * AdamW, numel floats each) as checkpoint-<state->step> under dir, then
 * removes the oldest checkpoint-* directories beyond keep (0 = keep all).
 * Writes the final path to out_path (may be NULL). Returns 0 or -errno with a
 * message; on error the previous checkpoints are untouched. */
int zo_checkpoint_save(const char *dir, const struct zo_model *m, const float *params,
                       const struct zo_optim_format *opt, const void *adam_m, const void *adam_v,
                       const struct zo_train_state *state, int keep, char *out_path, size_t out_size);

/* The same, reading parameters, m and v through io (zo/state.h) as the
 * files are written: nothing of the state is copied whole. opt must not be
 * NULL. */
int zo_checkpoint_save_io(const char *dir, const struct zo_model *m, const struct zo_optim_format *opt,
                          const struct zo_state_io *io, const struct zo_train_state *state, int keep,
                          char *out_path, size_t out_size);
/* A weights-only checkpoint (checkpoint.save_optimizer = false): the same
 * without the optimizer file; trainer_state.json says "weights_only": true.
 * Eval, sample and export load it; a resume is refused, naming
 * model.init_from. */
int zo_checkpoint_save_weights_io(const char *dir, const struct zo_model *m, const struct zo_state_io *io,
                                  const struct zo_train_state *state, int keep, char *out_path, size_t out_size);

struct zo_run_settings;

/* What a save writes beside the state, and what it keeps. */
struct zo_checkpoint_opts {
  int keep;              /* checkpoints kept, the oldest beyond removed (0: all) */
  const char *tokenizer; /* the run's tokenizer.json (zo_run_tokenizer): it and the files beside it
                          * (zo_tokenizer_files) are copied in and listed with their checksums in
                          * trainer_state.json, so that the checkpoint is a whole Hugging Face model
                          * directory; NULL or "": none */
  const struct zo_run_settings *settings; /* recorded as trainer_state.json's "settings", which a
                                           * resume compares (zo/run_settings.h); NULL: none */
  bool lora;             /* a LoRA run's (zo/lora_ckpt.h): the PEFT adapter files and the adapters'
                          * optimizer file are checksummed instead of model.safetensors, config.json
                          * and optimizer.safetensors; trainer_state.json says "lora": true */
};
/* zo_checkpoint_save_io with options o; opt NULL: weights only, as
 * zo_checkpoint_save_weights_io. */
int zo_checkpoint_save_opts(const char *dir, const struct zo_model *m, const struct zo_optim_format *opt,
                            const struct zo_state_io *io, const struct zo_train_state *state,
                            const struct zo_checkpoint_opts *o, char *out_path, size_t out_size);

/* A checkpoint written in parts (data parallel with a sharded optimizer:
 * every rank writes its shard's optimizer file, rank 0 the rest):
 * begin (rank 0) makes the temporary directory next to the final one;
 * write_model (rank 0) writes model.safetensors and config.json through io;
 * write_optimizer writes tensors [t_lo, t_hi)'s m and v through io as shard
 * `shard` of n_shards (optimizer-<shard+1>-of-<n>.safetensors; n_shards 0:
 * the one optimizer.safetensors of all tensors) and returns its CRC32;
 * commit (rank 0, once every part is written) records the checksums (the
 * shards' given) with o's tokenizer files, writes trainer_state.json, renames the directory into
 * place atomically and removes checkpoints beyond o->keep (only ones of lower
 * steps: the one just written always stays); abort removes the temporary
 * directory, keeping the error that made the save fail as zo_last_error();
 * commit with n_shards -1 records a weights-only checkpoint (no optimizer
 * file written). Each returns 0 or -errno with a message naming the
 * checkpoint. A load reads either form, whatever the rank count. */
struct zo_checkpoint_txn {
  char dir[PATH_MAX], tmp[PATH_MAX], final[PATH_MAX];
};
int zo_checkpoint_begin(const char *dir, long step, struct zo_checkpoint_txn *x);
int zo_checkpoint_write_model(const struct zo_checkpoint_txn *x, const struct zo_model *m,
                              const struct zo_state_io *io);
int zo_checkpoint_write_optimizer(const struct zo_checkpoint_txn *x, const struct zo_model *m,
                                  const struct zo_optim_format *opt, const struct zo_state_io *io, int shard,
                                  int n_shards, int t_lo, int t_hi, uint32_t *crc);
int zo_checkpoint_commit(const struct zo_checkpoint_txn *x, const struct zo_train_state *state, int n_shards,
                         const uint32_t *shard_crcs, const struct zo_checkpoint_opts *o, char *out_path,
                         size_t out_size);
void zo_checkpoint_abort(const struct zo_checkpoint_txn *x);
/* The optimizer file name of shard (0-based) of n_shards (0: the one file). */
void zo_checkpoint_shard_name(int shard, int n_shards, char *buf, size_t size);

/* Loads a checkpoint directory saved by zo_checkpoint_save into host buffers
 * laid out by m's table (adam_m, adam_v may be NULL to skip the optimizer).
 * The model's config must match the checkpoint's; every file's checksum is
 * verified before anything is copied. Returns 0 or -errno with a message
 * naming the file and the problem. */
int zo_checkpoint_load(const char *path, const struct zo_model *m, float *params, float *adam_m,
                       float *adam_v, struct zo_train_state *state);
/* The same for the optimizer format opt (NULL: fp32 AdamW): adam_m, adam_v
 * (may be NULL) receive the canonical layout. A checkpoint of another format
 * (fp32 states into an AdamW8bit run, 8-bit ones into AdamW, another
 * block_size or min_8bit_size) is refused with -EINVAL naming both; states
 * are never converted. Returns 0 or -errno with a message. */
int zo_checkpoint_load_optim(const char *path, const struct zo_model *m, float *params,
                             const struct zo_optim_format *opt, void *adam_m, void *adam_v,
                             struct zo_train_state *state);
/* The same, writing parameters (and with optimizer m and v, in format opt,
 * not NULL) through io. m NULL: a LoRA run's checkpoint (zo/lora_ckpt.h),
 * its trainer state and checksums checked, nothing loaded; a LoRA
 * checkpoint given with m, or another with m NULL, is refused naming it. Every checksum and the optimizer file's format are
 * checked before anything is written; an error later (a tensor of the wrong
 * shape) leaves the state partly written. io NULL (optimizer false): the
 * checks only (trainer_state.json, every checksum, the model's config against
 * m->cfg; m needs no parameters) and state; nothing is loaded. Returns 0 or
 * -errno. */
int zo_checkpoint_load_io(const char *path, const struct zo_model *m, const struct zo_optim_format *opt,
                          const struct zo_state_io *io, bool optimizer, struct zo_train_state *state);

/* A directory without trainer_state.json that is a checkpoint of ours all
 * the same (named checkpoint-<step>, or holding optimizer.safetensors or its
 * shards): its files' checksums are lost, so readers of weights (export)
 * refuse it (-EINVAL, naming path and why) instead of using unchecked
 * weights. 0 for a directory with trainer_state.json or a Hugging Face
 * directory. */
int zo_checkpoint_refuse_unchecked(const char *path);

/* The steps of the checkpoint-<step> directories under dir, ascending, in a
 * malloc'd array (*steps, free() it; NULL when none). A missing dir has
 * none. Returns 0 or -errno. */
int zo_checkpoint_list(const char *dir, long **steps, int *n);

/* Removes what killed runs leave under dir, one line each on log (may be
 * NULL): .checkpoint-N.tmp-PID (a save cut short), .checkpoint-N.prune-PID
 * (a removal cut short) and checkpoint-N directories missing
 * trainer_state.json or a file it lists (half removed by an older
 * version's retention). The caller holds dir's run lock (zo_dir_lock), so
 * no live run owns them. Returns 0 or -errno. */
int zo_checkpoint_clean_leftovers(const char *dir, FILE *log);

/* Removes every checkpoint-N directory under dir (train --overwrite), one
 * line each on log (may be NULL). Returns 0 or -errno. */
int zo_checkpoint_remove_all(const char *dir, FILE *log);

/* Finds the checkpoint-<step> directory with the highest step under dir.
 * Returns 0 and writes its path, -ENOENT when there is none. */
int zo_checkpoint_latest(const char *dir, char *out_path, size_t out_size);

#ifdef __cplusplus
}
#endif
#endif /* ZO_CHECKPOINT_H */
