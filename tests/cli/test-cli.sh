#!/usr/bin/env bash
# The zoffload command line: help, exit codes (0 ok, 1 runtime error, 2 bad
# usage or config) and the message for each malformed input, then a short
# real training run, eval, sample and resume through the CLI.
# Usage: test-cli.sh ZOFFLOAD_BINARY REPO_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1
repo=$2
cli_init cli

# A small token file and a config using it.
cli_prepare_text
cat > "$tmp/ok.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "steps": 4,
 "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "vocab_size": 256, "max_seq_len": 32},
 "data": {"train": "$tmp/train.bin", "val": "$tmp/val.bin", "format": "u16", "seq_len": 16},
 "engine": {"device": "cpu"}, "log": {"every": 2, "metrics_path": "$tmp/m.jsonl"},
 "checkpoint": {"dir": "$tmp/ck", "every": 2, "keep": 1}}
JSON

expect 0 "usage: zoffload" -- --help
expect 0 "usage: zoffload train" -- train --help
expect 0 "usage: zoffload eval" -- eval --help
expect 0 "usage: zoffload sample" -- sample --help
expect 0 "usage: zoffload prepare" -- prepare --help
expect 2 "unknown command 'frobnicate'" -- frobnicate
expect 2 "missing CONFIG" -- train
expect 2 "unknown option --bogus" -- train "$tmp/ok.json" --bogus
expect 2 "--set needs a value" -- train "$tmp/ok.json" --set
expect 2 "No such file" -- train "$tmp/missing.json"
expect 2 "did you mean \"optimizer.type\"" -- train "$tmp/ok.json" --set optimiser.type=AdamW
expect 2 "engine.threads" -- train "$tmp/ok.json" --set engine.threads=-1
expect 2 "bf16.enabled and fp16.enabled are both true" -- train "$tmp/ok.json" --set bf16.enabled=true --set fp16.enabled=true
expect 0 "bf16 mixed precision" -- train "$tmp/ok.json" --set bf16.enabled=true --set checkpoint.dir="$tmp/ck-bf16" --set log.metrics_path="$tmp/m-bf16.jsonl"
expect 0 "fp16 mixed precision" -- train "$tmp/ok.json" --set fp16.enabled=true --set checkpoint.dir="$tmp/ck-fp16" --set log.metrics_path="$tmp/m-fp16.jsonl"
expect 0 "val loss" -- eval "$tmp/ok.json" --set bf16.enabled=true --set checkpoint.dir="$tmp/ck-bf16"
expect 2 "optimizer.params.block_size" -- train "$tmp/ok.json" --set optimizer.type=AdamW8bit --set optimizer.params.block_size=0
expect 2 "--temperature 0: need a number" -- sample "$tmp/ok.json" --temperature 0
expect 2 "--tokens x: need an integer" -- sample "$tmp/ok.json" --tokens x
expect 2 "missing --out-train" -- prepare "$tmp/text.txt"
expect 1 "data.train" -- train "$tmp/ok.json" --set data.train="$tmp/nope.bin"
printf 'abc' > "$tmp/short.bin"
expect 1 "too short" -- train "$tmp/ok.json" --set data.train="$tmp/short.bin" --set data.format=text
expect 1 "magic" -- train "$tmp/ok.json" --set data.format=llmc
expect 0 "\"train_micro_batch_size_per_gpu\": 2" -- config "$tmp/ok.json"
expect 0 "usage: zoffload plan" -- plan --help
expect 0 "usage: zoffload bench" -- bench --help
expect 0 "exact bytes: device" -- plan "$tmp/ok.json"
expect 1 "Changes that fit" -- plan "$tmp/ok.json" --set engine.gpu_memory_budget=200KiB
expect 1 "No single change fits" -- plan "$tmp/ok.json" --set engine.gpu_memory_budget=4KiB
# The placements table of a Llama 8B config (10 GiB budget): parameter offload
# fits the device with the config's 5 slots (the untied embedding on the host,
# the LM head streamed in pieces through the slots); the NVMe placements' host pools fit 24 GiB.
expect 0 "params cpu, optimizer nvme (stage 3)        5    5.74 GiB   21.57 GiB  115.87 GiB    fits          fits          fits" -- plan "$repo/configs/llama-8b.json" --placements
# The Infinity tier: parameters, gradients and optimizer on NVMe, the host a
# window of blocks (<= 16 GiB for 8B, <= 32 GiB for 70B).
expect 0 "params + optimizer on nvme (stage 3)        5    5.74 GiB   10.73 GiB  128.90 GiB    fits          fits          fits" -- plan "$repo/configs/llama-8b.json" --placements
# Llama-3-70B (its config: cpu checkpointing, one gradient slot): 9.03 GiB device, 24.50 GiB host.
expect 1 "exact bytes: device 9694392320, host 26310615040, nvme 1257757474816" -- plan "$repo/configs/llama-70b.json"
expect 0 "host 64.00 GiB" -- plan "$repo/configs/llama-8b.json" --placements --host-ram 64GiB
expect 2 "--host-ram 24XB: need" -- plan "$repo/configs/llama-8b.json" --placements --host-ram 24XB
# Per-rank plans: a sharded optimizer halves the host's master weights (474.84 MiB alone).
expect 0 "master weights              -   238.25 MiB" -- plan "$repo/configs/gpt2-124m.json" --ranks 2 --set zero_optimization.stage=1 --set zero_optimization.offload_optimizer.device=cpu
expect 0 "rank 1 of 2: device" -- plan "$repo/configs/gpt2-124m.json" --ranks 2 --set zero_optimization.stage=1 --set zero_optimization.offload_optimizer.device=cpu
expect 2 "--ranks 0: need" -- plan "$repo/configs/gpt2-124m.json" --ranks 0
expect 1 "offload_param.buffer_count=15" -- plan "$repo/configs/llama-8b.json" --set zero_optimization.offload_param.buffer_count=16
expect 1 "the plan needs" -- train "$tmp/ok.json" --set engine.gpu_memory_budget=4KiB
expect 2 "offload_param.device = \"nvme\"" -- train "$tmp/ok.json" --set zero_optimization.stage=3 --set zero_optimization.offload_param.device=nvme --set zero_optimization.offload_param.nvme_path=/tmp
expect 0 "params_per_s" -- bench adamw --params 100000 --reps 3 --json
expect 0 "overlap efficiency" -- bench step "$tmp/ok.json" --steps 2 --set zero_optimization.stage=2 --set zero_optimization.offload_optimizer.device=cpu
expect 0 "host pool" -- train "$tmp/ok.json" --set zero_optimization.stage=3 --set zero_optimization.offload_optimizer.device=cpu --set zero_optimization.offload_param.device=cpu --set checkpoint.dir="$tmp/ck-off" --set log.metrics_path="$tmp/m-off.jsonl"

# A real run, then eval, sample, resume.
expect 0 "saved $tmp/ck/checkpoint-4" -- train "$tmp/ok.json"
expect 0 "val loss" -- eval "$tmp/ok.json"
expect 0 "" -- sample "$tmp/ok.json" --tokens 20 --prompt "the "
if [[ -d "$tmp/ck/checkpoint-2" ]]; then
  echo "FAIL: checkpoint.keep=1 left checkpoint-2"
  fail=$((fail + 1))
else
  pass=$((pass + 1))
fi
expect 0 "resumed from $tmp/ck/checkpoint-4 at step 4" -- train "$tmp/ok.json" --set steps=6 --resume auto
expect 1 "no checkpoint-<step>" -- train "$tmp/ok.json" --set checkpoint.dir="$tmp/empty" --resume auto
a=$("$bin" sample "$tmp/ok.json" --tokens 30 --seed 5 2>/dev/null)
b=$("$bin" sample "$tmp/ok.json" --tokens 30 --seed 5 2>/dev/null)
if [[ "$a" == "$b" && -n "$a" ]]; then pass=$((pass + 1)); else echo "FAIL: seeded sample differs"; fail=$((fail + 1)); fi
lines=$(grep -c '"loss"' "$tmp/m.jsonl")
if [[ $lines -eq 6 ]]; then pass=$((pass + 1)); else echo "FAIL: metrics has $lines step lines, want 6"; fail=$((fail + 1)); fi

cli_report
