#!/usr/bin/env bash
# A resume refuses what changes the model (issue 52, class 4): a checkpoint
# records the settings its run's mathematics depends on (trainer_state.json's
# "settings"); --resume with another model.rope_theta, rms_norm_eps,
# sliding_window, rope scaling, dropout, precision, accumulation, micro-batch
# rows, sequence, AdamW hyper-parameter or model.init_from of the same
# shapes is refused naming the key and both values (exit 2, nothing
# trained, no checkpoint written) unless --resume-allow KEY (then said in
# one line, and the next checkpoint records the new value); a shape is
# refused for good. An unchanged resume continues bit for bit (the
# uninterrupted run's weights); more steps and another learning rate go on
# (the schedule's change said). A checkpoint from before the record is
# compared on its config.json's model. --resume-allow's misuses are refused.
# Usage: test-resume-settings.sh ZOFFLOAD_BINARY REPO_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1
cli_init resume-settings
cli_prepare_text 100

# config NAME CKDIR [EXTRA-MODEL-MEMBERS]: $tmp/NAME.json, a tiny Llama on train.bin.
config() {
  cat >"$tmp/$1.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "steps": 2,
 "model": {"arch": "llama", "n_layer": 1, "n_head": 2, "num_key_value_heads": 1, "n_embd": 32,
           "intermediate_size": 64, "vocab_size": 320, "max_seq_len": 32 ${3:-}},
 "data": {"train": "$tmp/train.bin", "format": "u16", "seq_len": 32},
 "engine": {"device": "cpu"}, "log": {"every": 100},
 "checkpoint": {"dir": "$2", "every": 2, "keep": 0}}
JSON
}
config run "$tmp/ck"
ck2=$tmp/ck/checkpoint-2
expect 0 "saved $ck2" -- train "$tmp/run.json"
check "settings recorded" "grep -q '\"model.rope_theta\": \"10000\"' '$ck2/trainer_state.json'"

# refused NAME WAS NOW SET...: a resume to step 4 with SET is exit 2 naming
# NAME with both values and the flag, and writes nothing.
refused() {
  local key=$1 was=$2 now=$3
  shift 3
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  expect 2 "$key: the checkpoint's $was, this run's $now" "r-$key" -- train "$tmp/run.json" --resume auto \
    --set steps=4 "${sets[@]}"
  check "$key: the flag named" "grep -q -- '--resume-allow KEY' '$tmp/r-$key.out'"
  check "$key: nothing trained" "! grep -q 'step 3/4' '$tmp/r-$key.out' && [[ ! -e $tmp/ck/checkpoint-4 ]]"
}
refused model.rope_theta 10000 500000 model.rope_theta=500000
refused model.rms_norm_eps 1e-05 1e-06 model.rms_norm_eps=1e-6
refused model.sliding_window 0 16 model.sliding_window=16
refused model.rope_scaling none "llama3 factor 8, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 16" \
  model.rope_scaling.factor=8 model.rope_scaling.low_freq_factor=1 model.rope_scaling.high_freq_factor=4 \
  model.rope_scaling.original_max_position_embeddings=16
refused model.dropout 0 0.1 model.dropout=0.1
refused precision fp32 bf16 bf16.enabled=true
refused precision fp32 fp16 fp16.enabled=true
refused gradient_accumulation_steps 1 2 gradient_accumulation_steps=2
refused micro_batch_rows 2 1 train_micro_batch_size_per_gpu=1
refused data.seq_len 32 16 data.seq_len=16
refused optimizer.params.weight_decay 0.01 0.1 optimizer.params.weight_decay=0.1
refused optimizer.params.betas "[0.9, 0.999]" "[0.9, 0.95]" 'optimizer.params.betas=[0.9,0.95]'
refused gradient_clipping 0 1 gradient_clipping=1
# Two at once: both named.
expect 2 "model.rms_norm_eps: the checkpoint's 1e-05, this run's 1e-06" two -- train "$tmp/run.json" --resume auto \
  --set steps=4 --set model.rope_theta=500000 --set model.rms_norm_eps=1e-6
check "both named" "grep -q 'model.rope_theta: the checkpoint.s 10000, this run.s 500000' '$tmp/two.out'"
# A shape: never, whatever the flag.
expect 2 "model.n_layer can never change on resume" -- train "$tmp/run.json" --resume auto --set steps=4 \
  --set model.n_layer=2
expect 2 "--resume-allow model.n_layer: it can never change on resume" -- train "$tmp/run.json" --resume auto \
  --set steps=4 --set model.n_layer=2 --resume-allow model.n_layer
expect 2 "--resume-allow model.rope_thta: not a setting a resume compares; one of: model.rms_norm_eps" -- \
  train "$tmp/run.json" --resume auto --set steps=4 --resume-allow model.rope_thta
expect 2 "--resume-allow lr_schedule: a change of it is never refused" -- train "$tmp/run.json" --resume auto \
  --set steps=4 --resume-allow lr_schedule
expect 2 "it needs --resume" -- train "$tmp/run.json" --set steps=4 --resume-allow model.rope_theta

# Unchanged, more steps and another lr: goes on, bit for bit the uninterrupted run.
config straight "$tmp/ck-straight"
expect 0 "saved $tmp/ck-straight/checkpoint-4" -- train "$tmp/straight.json" --set steps=4
cp -r "$tmp/ck" "$tmp/ck-lr"
expect 0 "resumed from $ck2 at step 2" same -- train "$tmp/run.json" --resume auto --set steps=4
check "no settings note on an unchanged resume" "! grep -q 'resumed with a change' '$tmp/same.out'"
check "resumed = uninterrupted (model.safetensors)" \
  "cmp -s '$tmp/ck/checkpoint-4/model.safetensors' '$tmp/ck-straight/checkpoint-4/model.safetensors'"
expect 0 "note: resumed with a change: lr_schedule: the checkpoint's constant lr 0.001, this run's constant lr 0.0005" -- \
  train "$tmp/run.json" --resume "$tmp/ck-lr/checkpoint-2" --set checkpoint.dir="$tmp/ck-lr" --set steps=4 \
  --set optimizer.params.lr=0.0005

# --resume-allow: said, trained, and recorded from then on.
expect 0 "note: resumed with a change: model.rope_theta: the checkpoint's 10000, this run's 500000 (--resume-allow given)" \
  allow -- train "$tmp/run.json" --resume "$tmp/ck/checkpoint-4" --set steps=6 --set model.rope_theta=500000 \
  --resume-allow model.rope_theta
check "trained after the allowed change" "[[ -e $tmp/ck/checkpoint-6 ]]"
check "the new value recorded" "grep -q '\"model.rope_theta\": \"500000\"' '$tmp/ck/checkpoint-6/trainer_state.json'"
expect 0 "note: --resume-allow model.rope_theta: unchanged (500000)" -- train "$tmp/run.json" --resume auto \
  --set steps=6 --set model.rope_theta=500000 --resume-allow model.rope_theta
expect 2 "model.rope_theta: the checkpoint's 500000, this run's 10000" -- train "$tmp/run.json" --resume auto --set steps=8

# model.init_from of the same shapes: compared by its files, not its path.
config other "$tmp/ck-other"
expect 0 "saved $tmp/ck-other/checkpoint-2" -- train "$tmp/other.json" --set engine.seed=7
config base "$tmp/ck-base" ", \"init_from\": \"$ck2\""
expect 0 "saved $tmp/ck-base/checkpoint-2" -- train "$tmp/base.json"
cp -r "$ck2" "$tmp/moved"
expect 0 "resumed from $tmp/ck-base/checkpoint-2 at step 2" -- train "$tmp/base.json" --resume auto --set steps=3 \
  --set checkpoint.every=3 --set model.init_from="$tmp/moved"
expect 2 "model.init_from: the checkpoint's $ck2 (fingerprint" inito -- train "$tmp/base.json" \
  --resume "$tmp/ck-base/checkpoint-2" \
  --set steps=4 --set model.init_from="$tmp/ck-other/checkpoint-2"
check "the run's init_from named" "grep -q 'this run.s $tmp/ck-other/checkpoint-2 (fingerprint' '$tmp/inito.out'"

# A checkpoint from before the record: the model from its config.json, a note for the rest.
python3 - "$tmp/ck-lr/checkpoint-4/trainer_state.json" <<'PY' || bad "python3 could not edit trainer_state.json"
import json, sys
p = sys.argv[1]
j = json.load(open(p))
del j["settings"]
json.dump(j, open(p, "w"))
PY
expect 2 "model.rope_theta: the checkpoint's 10000, this run's 500000" old -- train "$tmp/run.json" \
  --resume "$tmp/ck-lr/checkpoint-4" --set checkpoint.dir="$tmp/ck-lr" --set steps=6 --set model.rope_theta=500000
expect 0 "records no model.dropout, model.init_from, precision" -- train "$tmp/run.json" \
  --resume "$tmp/ck-lr/checkpoint-4" --set checkpoint.dir="$tmp/ck-lr" --set steps=6
cli_report resume-settings
