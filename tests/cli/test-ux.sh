#!/usr/bin/env bash
# What a DeepSpeed or Hugging Face user meets first: a schedule that follows
# the run (steps, data.epochs, the warning for an explicit total_num_steps
# that differs), evaluation on its own cadence (eval.every, eval.steps) and
# eval saying when it measured the training data, one
# message for every unknown key, and configured paths with a typo that do
# not become trees of directories (checkpoint.dir, nvme_path).
# Usage: test-ux.sh ZOFFLOAD_BINARY REPO_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1
cli_init ux

# count NAME PATTERN WANT: lines of $tmp/NAME.out matching PATTERN.
count() {
  local n
  n=$(grep -c -- "$2" "$tmp/$1.out")
  if [[ $n -ne $3 ]]; then
    echo "FAIL: $1: $n lines match '$2', want $3"
    fail=$((fail + 1))
  else
    pass=$((pass + 1))
  fi
}

cli_prepare_text
cat >"$tmp/c.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "steps": 8,
 "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 2, "total_num_steps": 8}},
 "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "vocab_size": 256, "max_seq_len": 32},
 "data": {"train": "$tmp/train.bin", "val": "$tmp/val.bin", "format": "u16", "seq_len": 16},
 "engine": {"device": "cpu"}, "log": {"every": 1}}
JSON

# 1. The schedule: an explicit total_num_steps that the run does not reach is
# warned about, once; without it the schedule follows steps.
expect 0 "scheduler.params.total_num_steps = 8 but the run has 3 steps" short -- train "$tmp/c.json" --set steps=3
count short "total_num_steps = 8 but" 1
expect 0 "step 3/3" follows -- train "$tmp/c.json" --set steps=3 --set scheduler.params.total_num_steps=null
count follows "total_num_steps" 0
# data.epochs: steps from the file: ceil(epochs x micro-batches of 2 x 16 an epoch / accumulation 2).
ntok=$("$bin" train "$tmp/c.json" --set steps=1 2>&1 | sed -n 's/.*train\.bin (\([0-9]*\) tokens).*/\1/p')
per_epoch=$(( (ntok - 1) / 32 ))
expect 0 "data.epochs 0.01: $(( (per_epoch + 199) / 200 )) steps" epochs -- train "$tmp/c.json" --set steps=null \
  --set data.epochs=0.01 --set gradient_accumulation_steps=2 --set scheduler.params.total_num_steps=null
expect 2 "steps = 8 and data.epochs = 1 are both set" both -- train "$tmp/c.json" --set data.epochs=1
# eval.every: a validation loss every 2 steps, without checkpoints; eval.steps batches each.
expect 0 "step 2: val loss" every -- train "$tmp/c.json" --set steps=6 --set eval.every=2 --set eval.steps=1 \
  --set scheduler.params.total_num_steps=null
count every "val loss" 4 # step 0, 2, 4, 6
expect 0 "no data.val" noval -- train "$tmp/c.json" --set steps=2 --set eval.every=1 --set data.val=\"\" \
  --set scheduler.params.total_num_steps=null
# zoffload eval without data.val measures data.train and says so; eval.steps is its default batch count.
expect 0 "train loss" evaltrain -- eval "$tmp/c.json" --random-init --set data.val=\"\" --set eval.steps=2
count evaltrain "over 2 batches of data.train (no data.val: this measured the training data)" 1
expect 0 "val loss" evalval -- eval "$tmp/c.json" --random-init --batches 1

# 2. Every unknown key in one message.
cat >"$tmp/typos.json" <<JSON
{"stpes": 10, "optimizer": {"params": {"lr": 1e-3, "betas1": [0.9, 0.9]}}, "xyzzy": 1}
JSON
expect 2 "3 unknown keys" typos -- config "$tmp/typos.json"
count typos 'did you mean "steps"' 1
count typos 'did you mean "optimizer.params.betas"' 1

# 7. A typo in a parent directory is an error naming it, and creates nothing.
expect 1 "its parent $tmp/typo does not exist" ckdir -- train "$tmp/c.json" --set steps=1 \
  --set checkpoint.dir="$tmp/typo/ck"
[[ ! -e $tmp/typo ]] && pass=$((pass + 1)) || { echo "FAIL: $tmp/typo was created"; fail=$((fail + 1)); }
expect 0 "saved $tmp/ck/checkpoint-1" ckok -- train "$tmp/c.json" --set steps=1 --set checkpoint.dir="$tmp/ck"
expect 1 "its parent $tmp/nvmetypo does not exist" nvme -- train "$tmp/c.json" --set steps=1 \
  --set zero_optimization.stage=2 --set zero_optimization.offload_optimizer.device=nvme \
  --set zero_optimization.offload_optimizer.nvme_path="$tmp/nvmetypo/swap"
[[ ! -e $tmp/nvmetypo ]] && pass=$((pass + 1)) || { echo "FAIL: $tmp/nvmetypo was created"; fail=$((fail + 1)); }

cli_report test-ux
