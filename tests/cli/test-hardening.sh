#!/usr/bin/env bash
# Abnormal exits and limits through the command line (issue 18, part A):
# SIGTERM finishes the step, saves, removes the NVMe directory and exits
# 143, and the run resumes from that checkpoint; a second signal exits at
# once and still removes it; kill -9 leaves a locked-then-free NVMe
# directory and a half save that the next run removes with one line each;
# a second train on a locked directory is refused with the holder's pid;
# eval and sample name their weights or refuse random ones; ulimit -v, -f
# and absurd thread counts are refused with figures instead of hanging or
# dying. The C side: tests/test-engine-rundir.c.
# Usage: test-hardening.sh ZOFFLOAD_BINARY REPO_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1
cli_init hard
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT

# wait_for FILE PATTERN: until a line matches (at most 60 s).
wait_for() {
  for _ in $(seq 1 600); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

cli_prepare_text 400
# Steps of about 0.1 s, so that a signal lands inside one.
cat > "$tmp/run.json" <<JSON
{"train_micro_batch_size_per_gpu": 8, "steps": 100000,
 "model": {"n_layer": 4, "n_head": 4, "n_embd": 256, "vocab_size": 256, "max_seq_len": 64},
 "data": {"train": "$tmp/train.bin", "format": "u16", "seq_len": 64},
 "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "$tmp/nvme"}},
 "engine": {"device": "cpu"}, "log": {"every": 1},
 "checkpoint": {"dir": "$tmp/ck", "every": 0, "keep": 2}}
JSON
swap_dirs() { find "$tmp/nvme" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }

# SIGTERM after step 1: exit 143, checkpoint-N saved, no NVMe directory left.
"$bin" train "$tmp/run.json" > "$tmp/term.out" 2>&1 &
pid=$!
pids+=("$pid")
wait_for "$tmp/term.out" "^step 1/" || bad "train never reached step 1"
# A second run on the same checkpoint.dir: refused, naming the holder.
expect 1 "pid $pid on host" -- train "$tmp/run.json" --resume auto
kill -TERM "$pid"
wait "$pid"
rc=$?
[[ $rc -eq 143 ]] && ok || bad "SIGTERM: exit $rc, want 143"
grep -q "stopped by SIGTERM after step" "$tmp/term.out" && ok || bad "SIGTERM: no 'stopped by SIGTERM' line"
saved=$(sed -n 's|^saved .*/checkpoint-\([0-9]*\)$|\1|p' "$tmp/term.out" | tail -1)
[[ -n "$saved" && -d "$tmp/ck/checkpoint-$saved" ]] && ok || bad "SIGTERM: no checkpoint saved"
[[ $(swap_dirs) -eq 0 ]] && ok || bad "SIGTERM left an NVMe directory: $(ls "$tmp/nvme")"
expect 0 "resumed from $tmp/ck/checkpoint-$saved at step $saved" -- train "$tmp/run.json" --resume auto \
  --set steps=$((saved + 1))
[[ $(swap_dirs) -eq 0 ]] && ok || bad "the resumed run left an NVMe directory"

# Two signals: the second one exits at once, still removing the NVMe directory.
"$bin" train "$tmp/run.json" --resume auto > "$tmp/twice.out" 2>&1 &
pid=$!
pids+=("$pid")
wait_for "$tmp/twice.out" "^step $((saved + 3))/" || bad "train never reached step $((saved + 3))"
kill -TERM "$pid"
sleep 0.01
kill -TERM "$pid"
wait "$pid"
rc=$?
[[ $rc -eq 143 ]] && ok || bad "two SIGTERMs: exit $rc, want 143"
[[ $(swap_dirs) -eq 0 ]] && ok || bad "two SIGTERMs left an NVMe directory: $(ls "$tmp/nvme")"

# kill -9: the NVMe directory stays behind (its lock now free); a half save
# too. The next run removes both, one line each, and trains.
"$bin" train "$tmp/run.json" --resume auto > "$tmp/kill.out" 2>&1 &
pid=$!
pids+=("$pid")
wait_for "$tmp/kill.out" "^step $((saved + 2))/" || bad "train never reached step $((saved + 2))"
kill -9 "$pid"
wait "$pid" 2>/dev/null
[[ $(swap_dirs) -eq 1 ]] && ok || bad "kill -9 left $(swap_dirs) NVMe directories, want 1"
mkdir -p "$tmp/ck/.checkpoint-99.tmp-12345" && touch "$tmp/ck/.checkpoint-99.tmp-12345/model.safetensors"
out=$("$bin" train "$tmp/run.json" --resume auto --set steps=$((saved + 4)) 2>&1)
rc=$?
[[ $rc -eq 0 ]] && ok || bad "train after kill -9: exit $rc: $(echo "$out" | tail -2)"
[[ "$out" == *"removed $tmp/nvme/zoffload-run-"*"a run that was killed"* ]] && ok || bad "no line for the NVMe leftover"
[[ "$out" == *"removed $tmp/ck/.checkpoint-99.tmp-12345"* ]] && ok || bad "no line for the half save"
[[ $(swap_dirs) -eq 0 && ! -e "$tmp/ck/.checkpoint-99.tmp-12345" ]] && ok || bad "leftovers remain"

# A fresh run into that directory is refused; --overwrite starts over.
expect 1 "already holds another run's checkpoints" -- train "$tmp/run.json" --set steps=1
expect 0 "--overwrite: removing the" -- train "$tmp/run.json" --set steps=1 --overwrite

# Weights are named; none found is refused unless --random-init.
expect 0 "weights: $tmp/ck/checkpoint-1 (step 1)" -- eval "$tmp/run.json" --batches 1
expect 1 "--random-init" -- eval "$tmp/run.json" --set checkpoint.dir="$tmp/typo" --batches 1
expect 0 "weights: the seeded random initialisation" -- eval "$tmp/run.json" --set checkpoint.dir="$tmp/typo" \
  --batches 1 --random-init
expect 1 "no weights to use" -- sample "$tmp/run.json" --set checkpoint.dir="$tmp/typo" --tokens 4
# model.init_from on the command line wins over checkpoint.dir.
expect 0 "weights: $tmp/ck/checkpoint-1/model.safetensors" -- sample "$tmp/run.json" --tokens 4 \
  --set model.init_from="$tmp/ck/checkpoint-1/model.safetensors"

# Limits: refused with figures, never a hang or a crash.
# (A sanitizer build cannot even start under ulimit -v: its shadow memory is terabytes.)
if (ulimit -v 1000000; "$bin" --version) >/dev/null 2>&1; then
  out=$( (ulimit -v 1000000; timeout 60 "$bin" train "$tmp/run.json" --set checkpoint.dir="$tmp/ck-v" --set steps=1) 2>&1)
  rc=$?
  [[ $rc -eq 1 && "$out" == *"address-space limit (ulimit -v) is"* ]] && ok || bad "ulimit -v: exit $rc: $(echo "$out" | tail -1)"
else
  echo "skipped: the ulimit -v case (this binary cannot start under an address-space limit: a sanitizer build)"
fi
expect 2 "more than 4x the" -- train "$tmp/run.json" --set checkpoint.dir="$tmp/ck-t" --set engine.threads=100000
out=$(OMP_NUM_THREADS=100000 "$bin" train "$tmp/run.json" --set checkpoint.dir="$tmp/ck-t" 2>&1)
rc=$?
[[ $rc -eq 2 && "$out" == *"OMP_NUM_THREADS=100000"* ]] && ok || bad "OMP_NUM_THREADS=100000: exit $rc: $(echo "$out" | tail -1)"
# ulimit -f (in 1 KiB blocks) below a checkpoint's size: EFBIG, reported; no temporary left.
out=$( (ulimit -f 2000; "$bin" train "$tmp/run.json" --set checkpoint.dir="$tmp/ck-f" --set steps=1 \
  --set zero_optimization.stage=0 --set zero_optimization.offload_optimizer.device=none) 2>&1)
rc=$?
[[ $rc -eq 1 && "$out" == *"ulimit -f"* ]] && ok || bad "ulimit -f: exit $rc: $(echo "$out" | tail -1)"
left=$(find "$tmp/ck-f" -name '.checkpoint-*' | wc -l)
[[ $left -eq 0 ]] && ok || bad "ulimit -f left $left temporary directories"

cli_report
