#!/usr/bin/env bash
# Environment values (issue 52, class 6): an invalid ZO_CPU_GEMM,
# ZO_CUDA_GEMM, ZO_CUDA_SYNC, ZO_STREAM_DELAY_US or OMP_NUM_THREADS is
# refused at start-up by train and eval with exit 2 and a message naming the
# variable, its value and the valid values, before a checkpoint directory, its
# lock or an NVMe run directory exists; `zoffload env` prints its whole report
# with the invalid value named and exits 2 instead of aborting. Before the
# check an invalid ZO_CPU_GEMM aborted (SIGABRT) at the first bf16 GEMM, after
# the run directory was created and locked.
# Usage: test-env-vars.sh ZOFFLOAD_BINARY REPO_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1
cli_init envvars

cli_prepare_text 100
cat > "$tmp/run.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "steps": 1, "bf16": true,
 "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "vocab_size": 256, "max_seq_len": 16},
 "data": {"train": "$tmp/train.bin", "val": "$tmp/val.bin", "format": "u16", "seq_len": 16},
 "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "$tmp/nvme"}},
 "engine": {"device": "cpu"}, "checkpoint": {"dir": "$tmp/ck", "every": 0}}
JSON
mkdir -p "$tmp/nvme"

# A valid run first: the checkpoint eval reads (and proof that the config trains).
expect 0 "saved $tmp/ck/checkpoint-1" -- train "$tmp/run.json"
listing() { (cd "$tmp" && find ck nvme | sort); }
before=$(listing)

# VAR=VALUE WANT...: train (in a new checkpoint.dir) and eval refuse with exit 2
# and every WANT substring, creating nothing.
refuse() {
  local assign=$1 out rc cmd
  shift
  for cmd in train eval; do
    local args=(train "$tmp/run.json" --set checkpoint.dir="$tmp/ck-new")
    [[ $cmd == eval ]] && args=(eval "$tmp/run.json" --checkpoint "$tmp/ck/checkpoint-1")
    out=$(env "$assign" "$bin" "${args[@]}" 2>&1)
    rc=$?
    local miss=""
    for w in "$@"; do [[ "$out" == *"$w"* ]] || miss+=" [$w]"; done
    if [[ $rc -eq 2 && -z $miss ]]; then ok; else
      bad "$assign zoffload $cmd: exit $rc (want 2), missing:$miss; output: $(echo "$out" | tail -3)"
    fi
    [[ ! -e "$tmp/ck-new" ]] && ok || bad "$assign zoffload $cmd created $tmp/ck-new: $(ls -A "$tmp/ck-new")"
    rm -rf "$tmp/ck-new"
    [[ "$(listing)" == "$before" ]] && ok || bad "$assign zoffload $cmd changed ck/ or nvme/: $(diff <(echo "$before") <(listing))"
  done
  # env: the whole report (its last section, NUMA, printed), the value named, exit 2.
  out=$(env "$assign" "$bin" env 2>&1)
  rc=$?
  [[ $rc -eq 2 && "$out" == *"INVALID"*"$1"* && "$out" == *"NUMA:"* ]] && ok ||
    bad "$assign zoffload env: exit $rc (want 2 and the report naming it): $(echo "$out" | tail -3)"
}

refuse ZO_CPU_GEMM=onednnn "ZO_CPU_GEMM=onednnn" "auto (default), onednn, fallback"
refuse ZO_CUDA_GEMM=cublas "ZO_CUDA_GEMM=cublas" "auto (default), fallback"
refuse ZO_CUDA_SYNC=yes "ZO_CUDA_SYNC=yes" "0 (default), 1"
refuse ZO_STREAM_DELAY_US=2ms "ZO_STREAM_DELAY_US=2ms" "from 0 to 1000000"
refuse OMP_NUM_THREADS=four "OMP_NUM_THREADS=four" "need a thread count from 1 to"

# The env report with every variable valid says so and exits 0; the bf16
# GEMM line names a kernel.
out=$(ZO_CPU_GEMM=fallback "$bin" env 2>&1)
rc=$?
[[ $rc -eq 0 && "$out" == *"variables        valid"* && "$out" == *"bf16 GEMM        fallback"* ]] && ok ||
  bad "ZO_CPU_GEMM=fallback zoffload env: exit $rc: $(echo "$out" | grep -m2 'GEMM\|variables')"
# Empty means unset.
expect 0 "val loss" -- eval "$tmp/run.json" --checkpoint "$tmp/ck/checkpoint-1"
out=$(ZO_CPU_GEMM= "$bin" eval "$tmp/run.json" --checkpoint "$tmp/ck/checkpoint-1" 2>&1)
[[ $? -eq 0 ]] && ok || bad "ZO_CPU_GEMM= (empty) eval: $(echo "$out" | tail -2)"

cli_report
