#!/usr/bin/env bash
# LoRA planned (issues 46 and 47, pieces 1 and 4): `zoffload plan` of Llama-3-8B
# (configs/llama-8b.json) with r = 16 on all seven projections, the bf16 base
# on the host streamed through 2 device slots, 1 x 2048 tokens with activation
# checkpointing, fits a 10 GiB CUDA device and 20 GiB of host; the adapters'
# bytes per category are the table's own count, computed here from the
# shapes (r (in + out) per module, 32 layers: 41943040 parameters, fp32):
# master weights, AdamW m and AdamW v exactly that many floats each, the
# gradients that plus their 8-byte sum of squares (arena-rounded); the base
# has none of them. The base on NVMe (piece 3): the same device bytes, a
# parameter file of the blocks' chunks, the planner ranking it when the host
# is too small. A tiny Llama's LoRA run, the base on the device, streamed
# from the host or read from NVMe, peaks at exactly the planned bytes on
# both tiers; its `bench step --json` with the base on NVMe reads the block
# loads' bytes and writes none, and on every placement measures exactly the
# bytes per step the plan predicts (`zoffload plan` prints them).
# Usage: test-lora-plan.sh ZOFFLOAD_BINARY REPO_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1
repo=$2
cli_init lora-plan
cli_prepare_text 200

lora8b=(--set lora.r=16 --set lora.alpha=32 --set lora.target_modules=all-linear --set bf16.enabled=true
        --set zero_optimization.stage=3 --set zero_optimization.offload_param.device=cpu
        --set zero_optimization.offload_param.buffer_count=2 --set zero_optimization.offload_optimizer.device=none
        --set activation_checkpointing.enabled=true --set train_micro_batch_size_per_gpu=1
        --set data.seq_len=2048 --set engine.gpu_memory_budget=10GiB)
expect 0 "frozen on the host, streamed through 2 device slots" plan8b -- plan "$repo/configs/llama-8b.json" "${lora8b[@]}"
# r (in + out) per module: q, k, v, o, gate, up, down of Llama-3-8B (GQA 8 of 32 heads of 128).
C=4096 KV=1024 I=14336 r=16
per_layer=$(( r * ((C + C) + (C + KV) + (C + KV) + (C + C) + 3 * (C + I)) ))
n=$(( 32 * per_layer ))
check "41943040 adapter parameters" "[[ $n -eq 41943040 ]]"
device=$(sed -n 's/^  exact bytes: device \([0-9]*\), host \([0-9]*\), nvme 0$/\1/p' "$tmp/plan8b.out")
host=$(sed -n 's/^  exact bytes: device \([0-9]*\), host \([0-9]*\), nvme 0$/\2/p' "$tmp/plan8b.out")
check "device bytes printed" "[[ -n '$device' ]]"
check "device <= 10 GiB ($device)" "(( ${device:-1} > 0 && ${device:-1} <= 10 * 1024 ** 3 ))"
check "host <= 20 GiB ($host)" "(( ${host:-1} > 0 && ${host:-1} <= 20 * 1024 ** 3 ))"
mib=$(awk -v b=$(( n * 4 )) 'BEGIN { printf "%.2f MiB", b / 1048576 }')
for cat in "master weights" "AdamW m" "AdamW v" "gradients"; do
  check "$cat: the adapters' $mib on the device, none on the host" \
    "grep -Eq '^  $cat +$mib +- +- *\$' '$tmp/plan8b.out'"
done
# The base in bf16 on the host: 2 bytes a parameter (8.03e9 parameters: 14.96 GiB).
check "the bf16 base on the host" "grep -Eq '^  parameters +[0-9.]+ GiB +14\\.96 GiB' '$tmp/plan8b.out'"

# The base on NVMe (issue 47, piece 3): the device bytes of the base streamed
# from the host; the host keeps the two ring buffers and the untied
# embedding (bf16) instead of the base; the parameter file holds the 32
# blocks, each block's chunks of at most sub_group_size (16777216) elements,
# each chunk rounded up to aio.block_size (1 MiB), in bf16.
expect 0 "frozen on NVMe (a read-only parameter file" plan8bnv -- plan "$repo/configs/llama-8b.json" "${lora8b[@]}" \
  --set zero_optimization.offload_param.device=nvme --set zero_optimization.offload_param.nvme_path="$tmp/nvme8b"
layer=$(( 2 * C * C + 2 * C * KV + 3 * C * I + 2 * C )) sub=16777216 mib=1048576
up() { echo $(( ($1 + mib - 1) / mib * mib )); }
block=$(( layer / sub * $(up $(( sub * 2 ))) + (layer % sub ? $(up $(( layer % sub * 2 ))) : 0) ))
nv_exact='^  exact bytes: device \([0-9]*\), host \([0-9]*\), nvme \([0-9]*\)$'
nv_dev=$(sed -n "s/$nv_exact/\1/p" "$tmp/plan8bnv.out")
nv_host=$(sed -n "s/$nv_exact/\2/p" "$tmp/plan8bnv.out")
nv_nvme=$(sed -n "s/$nv_exact/\3/p" "$tmp/plan8bnv.out")
check "base on NVMe: the streamed base's device bytes ($nv_dev == $device)" "[[ -n '$nv_dev' && '$nv_dev' == '$device' ]]"
check "base on NVMe: the file is the 32 blocks in bf16 ($nv_nvme == 32 x $block)" \
  "[[ '$nv_nvme' == $(( 32 * block )) ]]"
check "base on NVMe: the host holds 2 ring buffers and the embedding ($nv_host <= 2 GiB)" \
  "(( ${nv_host:-0} >= 2 * block + 128256 * C * 2 && ${nv_host:-0} <= 2 * 1024 ** 3 ))"

# The planner chooses (issue 47, piece 4): Llama-3-8B LoRA on a 10 GiB CUDA
# device with 32 GiB of host: the base (16 GB in bf16) cannot stay on the
# device, so every candidate that fits streams it, the adapters' optimizer
# on the device, each with its predicted step time and tokens/s.
expect 0 "LoRA, base streamed" auto8b -- plan "$repo/configs/llama-8b.json" --auto --backend cuda --host-ram 32GiB \
  --set lora.r=16 --set lora.alpha=32 --set lora.target_modules=all-linear --set engine.gpu_memory_budget=10GiB \
  --set train_micro_batch_size_per_gpu=1 --set gradient_accumulation_steps=16 --set data.seq_len=2048
check "8B LoRA: candidates fit" "grep -Eq '^searched [0-9]+ candidates .*, [1-9][0-9]* fit' '$tmp/auto8b.out'"
check "8B LoRA: #1 streams the base with a predicted time" \
  "grep -Eq '^ +1 +[0-9.]+ +[0-9]+ .*LoRA, base streamed' '$tmp/auto8b.out'"
check "8B LoRA: no candidate keeps the base on the device" "! grep -q 'LoRA, base on device' '$tmp/auto8b.out'"

# With 8 GiB of host the base fits neither the device nor the host: every
# candidate that fits reads it from NVMe (piece 3).
expect 0 "LoRA, base on nvme" auto8bnv -- plan "$repo/configs/llama-8b.json" --auto --backend cuda --host-ram 8GiB \
  --nvme-path "$tmp" --set lora.r=16 --set lora.alpha=32 --set lora.target_modules=all-linear \
  --set engine.gpu_memory_budget=10GiB --set train_micro_batch_size_per_gpu=1 --set gradient_accumulation_steps=16 \
  --set data.seq_len=2048
check "8B LoRA, 8 GiB host: candidates fit" "grep -Eq '^searched [0-9]+ candidates .*, [1-9][0-9]* fit' '$tmp/auto8bnv.out'"
check "8B LoRA, 8 GiB host: every ranked candidate reads the base from NVMe" \
  "! grep -E '^ +[0-9]+ +[0-9.]+ +[0-9]+ ' '$tmp/auto8bnv.out' | grep -v -q 'LoRA, base on nvme'"

# A tiny Llama: planned == peak, base on the device, on the host and on NVMe.
cat >"$tmp/tiny.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "steps": 2,
 "model": {"arch": "llama", "n_layer": 2, "n_head": 2, "num_key_value_heads": 1, "n_embd": 32,
           "intermediate_size": 64, "vocab_size": 320, "max_seq_len": 32},
 "lora": {"r": 4, "target_modules": "all-linear"},
 "data": {"train": "$tmp/train.bin", "format": "u16", "seq_len": 32},
 "engine": {"device": "cpu"}, "log": {"every": 100}}
JSON
for where in device host nvme; do
  extra=()
  [[ $where == host ]] && extra=(--set zero_optimization.stage=3 --set zero_optimization.offload_param.device=cpu
                                 --set zero_optimization.offload_param.buffer_count=1)
  [[ $where == nvme ]] && extra=(--set zero_optimization.stage=3 --set zero_optimization.offload_param.device=nvme
                                 --set zero_optimization.offload_param.nvme_path="$tmp/nvme-tiny"
                                 --set zero_optimization.offload_param.buffer_count=2)
  for bf in false true; do
    expect 0 "memory: device arena" "tiny-$where-$bf" -- train "$tmp/tiny.json" "${extra[@]}" --set bf16.enabled=$bf
    line=$(grep '^memory:' "$tmp/tiny-$where-$bf.out")
    check "$where bf16=$bf: device planned == peak ($line)" \
      "[[ '$line' =~ device\ arena\ ([0-9.]+\ [KMG]?i?B)\ planned,\ ([0-9.]+\ [KMG]?i?B)\ peak ]] && [[ \${BASH_REMATCH[1]} == \${BASH_REMATCH[2]} ]]"
    check "$where bf16=$bf: host planned == peak" \
      "[[ '$line' =~ host\ pool\ ([0-9.]+\ [KMG]?i?B)\ planned,\ ([0-9.]+\ [KMG]?i?B)\ peak ]] && [[ \${BASH_REMATCH[1]} == \${BASH_REMATCH[2]} ]]"
  done
done
# bench step --json with the base on NVMe, 3 blocks through 2 slots, 2
# micro-batches: 2 + 2 x 2 x (3 - 2) = 6 block loads a step, each read from
# the parameter file (9280 fp32 parameters a block: q 32 x 32, k and v
# 16 x 32, o 32 x 32, gate, up, down 3 x 32 x 64, two norms of 32), nothing
# written; out only the losses (2 x 2 x 32 floats) and the adapters' fp64
# sum of squares.
expect 0 '"nvme_write_bytes": 0,' bench-nvme -- bench step "$tmp/tiny.json" --json --steps 2 --set model.n_layer=3 \
  --set zero_optimization.stage=3 --set zero_optimization.offload_param.device=nvme \
  --set zero_optimization.offload_param.nvme_path="$tmp/nvme-bench" --set zero_optimization.offload_param.buffer_count=2
bench_json=$(tail -1 "$tmp/bench-nvme.out")
check "bench step, base on NVMe: 6 blocks read a step, none written, 520 bytes out ($bench_json)" \
  "python3 -c 'import json, sys; j = json.loads(sys.argv[1]); sys.exit(0 if (j[\"nvme_read_bytes\"], j[\"nvme_write_bytes\"], j[\"d2h_bytes\"]) == (6 * 9280 * 4, 0, 520) else 1)' '$bench_json'"
# The plan's prediction of the byte counters (issue 47): bench step's
# measured bytes per step equal its predicted_* exactly, and `zoffload plan`
# prints the same prediction, for the base on the device, streamed from the
# host and read from NVMe (max_in_cpu keeping block 0 in host memory: 9280
# elements), fp32 and bf16, 2 micro-batches.
same='import json, sys; j = json.loads(sys.argv[1]); k = ("h2d_bytes", "d2h_bytes", "nvme_read_bytes", "nvme_write_bytes"); sys.exit(0 if j["predicted_bytes_exact"] and all(j[x] == j["predicted_" + x] for x in k) else 1)'
for where in device host nvme nvme-cpu; do
  extra=()
  [[ $where == host ]] && extra=(--set zero_optimization.stage=3 --set zero_optimization.offload_param.device=cpu
                                 --set zero_optimization.offload_param.buffer_count=2)
  [[ $where == nvme* ]] && extra=(--set zero_optimization.stage=3 --set zero_optimization.offload_param.device=nvme
                                  --set zero_optimization.offload_param.nvme_path="$tmp/nvme-pred"
                                  --set zero_optimization.offload_param.buffer_count=2)
  [[ $where == nvme-cpu ]] && extra+=(--set zero_optimization.offload_param.max_in_cpu=9280)
  for bf in false true; do
    name=pred-$where-$bf
    expect 0 '"predicted_h2d_bytes"' "$name" -- bench step "$tmp/tiny.json" --json --steps 2 --set model.n_layer=3 \
      --set bf16.enabled=$bf "${extra[@]}"
    j=$(tail -1 "$tmp/$name.out")
    check "bench step, base on $where, bf16=$bf: measured == predicted bytes ($j)" \
      "python3 -c '$same' '$j'"
    expect 0 "bytes per step (predicted, exact" "plan-$name" -- plan "$tmp/tiny.json" --set model.n_layer=3 \
      --set bf16.enabled=$bf "${extra[@]}"
    want=$(python3 -c 'import json, sys; j = json.loads(sys.argv[1]); print("h2d %d, d2h %d, nvme read %d, nvme write %d" % tuple(j["predicted_" + x] for x in ("h2d_bytes", "d2h_bytes", "nvme_read_bytes", "nvme_write_bytes")))' "$j")
    check "plan, base on $where, bf16=$bf: prints bench step's prediction ($want)" "grep -qF '$want' '$tmp/plan-$name.out'"
  done
done

# engine.placement = "auto" trains a LoRA run with the planner's choice.
expect 0 "lora: r 4" auto-train -- train "$tmp/tiny.json" --set engine.placement=auto
# The cost model: a LoRA step (no base weight gradients) is predicted
# cheaper than the full fine-tune of the same model and batch.
# (the candidate that changes nothing: the config's own placement and split)
as_is='import json, sys; print([c["predicted_step_ms"] for c in json.loads(sys.stdin.read().splitlines()[-1]) if not c["sets"]][0])'
lora_ms=$("$bin" plan "$tmp/tiny.json" --auto --json 2>/dev/null | python3 -c "$as_is" 2>/dev/null)
grep -v '"lora"' "$tmp/tiny.json" >"$tmp/tiny-full.json"
full_ms=$("$bin" plan "$tmp/tiny-full.json" --auto --json 2>/dev/null | python3 -c "$as_is" 2>/dev/null)
check "LoRA predicted cheaper than the full fine-tune ($lora_ms < $full_ms ms)" \
  "[[ -n '$lora_ms' && -n '$full_ms' ]] && python3 -c 'import sys; sys.exit(0 if $lora_ms < $full_ms else 1)'"
cli_report lora-plan
