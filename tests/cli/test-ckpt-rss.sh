#!/usr/bin/env bash
# Checkpoints through the Infinity tier keep resident memory bounded: a
# Llama of 17M parameters with parameters, gradients and optimizer on NVMe
# (its checkpoint: a 65 MiB model.safetensors, a 130 MiB
# optimizer.safetensors) saves a checkpoint at every step and resumes from
# it with a peak resident set (the child's ru_maxrss) at most 40 MiB above
# both the planned device arena plus host pool and the same run without
# checkpoints (what the binary's libraries hold: ~200 MiB with the CUDA
# backend compiled in). Checksumming the files through a
# whole-file mapping, and loading the model and the states through the
# reader's mapping without dropping its pages, as before, peaked above that
# by the optimizer file (350 MiB against 206 MiB of pools, measured). The resumed run ends
# with model.safetensors and optimizer.safetensors byte-identical to an
# uninterrupted run's.
# Needs python3 (for the child's ru_maxrss); skipped (77) without it.
# Usage: test-ckpt-rss.sh ZOFFLOAD_BINARY REPO_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1
py=${ZO_HF_PYTHON:-python3}
command -v "$py" >/dev/null || { echo "SKIP: no $py to read the child's peak resident set"; exit 77; }
cli_init ckrss
cli_prepare_text
cat >"$tmp/c.json" <<JSON
{"train_micro_batch_size_per_gpu": 1, "steps": 2,
 "model": {"arch": "llama", "n_layer": 4, "n_head": 8, "num_key_value_heads": 8, "n_embd": 512,
           "intermediate_size": 2048, "vocab_size": 256, "max_seq_len": 32},
 "data": {"train": "$tmp/train.bin", "val": "$tmp/val.bin", "format": "u16", "seq_len": 16},
 "engine": {"device": "cpu"}, "log": {"every": 1},
 "checkpoint": {"every": 1, "keep": 2},
 "zero_optimization": {"stage": 3, "sub_group_size": 1000000,
                       "offload_optimizer": {"device": "nvme"},
                       "offload_param": {"device": "nvme", "buffer_count": 2}}}
JSON
# run NAME ARGS...: zoffload train into $tmp/NAME; prints "rc peak_KiB planned_bytes".
run() {
  local name=$1
  shift
  mkdir -p "$tmp/$name/nvme"
  "$py" - "$tmp/$name.log" "$bin" train "$tmp/c.json" --set checkpoint.dir="$tmp/$name/ck" \
    --set zero_optimization.offload_optimizer.nvme_path="$tmp/$name/nvme" \
    --set zero_optimization.offload_param.nvme_path="$tmp/$name/nvme" "$@" <<'PY'
import re, resource, subprocess, sys
r = subprocess.run(sys.argv[2:], capture_output=True, text=True)
open(sys.argv[1], "w").write(r.stdout + r.stderr)
m = re.search(r"device arena .*?\((\d+) bytes\).*host pool .*?\((\d+) bytes", r.stdout)
planned = int(m.group(1)) + int(m.group(2)) if m else 0
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, planned)
PY
}
# A sanitizer build (it cannot start under ulimit -v: its shadow memory is
# terabytes) keeps shadow and quarantined memory resident: the bound is not
# checked there, the runs and the resume's bits are.
sanitized=0
(ulimit -v 4000000; "$bin" --version) >/dev/null 2>&1 || sanitized=1
((sanitized)) && echo "note: a sanitizer build: peak resident sets printed, not bounded"
fail=0
# The same three steps with no checkpoint directory: the baseline.
read -r base_rc base_peak _ <<<"$(run base --set steps=3 --set checkpoint.dir=)"
((base_rc == 0)) || { echo "FAIL: the run without checkpoints exited $base_rc:"; tail -5 "$tmp/base.log"; exit 1; }
check() { # NAME "rc peak planned"
  local name=$1 rc peak planned
  read -r rc peak planned <<<"$2"
  local bound=$((planned / 1024 + 40 * 1024))
  ((base_peak + 40 * 1024 > bound)) && bound=$((base_peak + 40 * 1024))
  if ((rc != 0 || planned == 0)); then
    echo "FAIL: $name exited $rc (planned ${planned}):"; tail -5 "$tmp/$name.log"; fail=1
  elif ((sanitized)); then
    echo "ok: $name ran (peak $((peak / 1024)) MiB resident, not bounded in a sanitizer build)"
  elif ((peak > bound)); then
    echo "FAIL: $name peaked at $((peak / 1024)) MiB resident, over the bound $((bound / 1024)) MiB (planned pools $((planned >> 20)) MiB, without checkpoints $((base_peak / 1024)) MiB, + 40 MiB)"
    fail=1
  else
    echo "ok: $name peak $((peak / 1024)) MiB resident <= $((bound / 1024)) MiB (planned pools $((planned >> 20)) MiB, without checkpoints $((base_peak / 1024)) MiB, + 40 MiB)"
  fi
}
check save "$(run save)"
check resume "$(run save --set steps=3 --resume auto)"
check whole "$(run whole --set steps=3)"
ls "$tmp/save/ck/checkpoint-3/optimizer.safetensors" >/dev/null 2>&1 || { echo "FAIL: no checkpoint-3 after the resume"; fail=1; }
for f in model.safetensors optimizer.safetensors; do
  cmp -s "$tmp/save/ck/checkpoint-3/$f" "$tmp/whole/ck/checkpoint-3/$f" ||
    { echo "FAIL: the resumed run's $f differs from the uninterrupted run's"; fail=1; }
done
((fail == 0)) && echo "PASS: checkpoint save and resume through the tier$( ((sanitized)) || echo " within 40 MiB of the pools and of the run without checkpoints"), resume bit-identical"
exit $fail
