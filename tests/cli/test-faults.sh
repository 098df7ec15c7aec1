#!/usr/bin/env bash
# Faults injected on purpose (zo/fault.h, ZO_FAULT=op:N:kind) at several
# points of a training step and of a checkpoint save, with the optimizer
# state on NVMe: every NVMe block read and write, and every write, fsync and
# rename of the checkpoint writer. For each case: the run stops with exit 1
# and an error naming the injected errno (a short transfer is resumed and the
# run succeeds); every checkpoint left is byte-identical to the same step of
# an uninterrupted run (none corrupted, no half-written one); no temporary
# file or directory and no NVMe swap directory remains; and a resume from the
# last checkpoint (or a fresh run, when none was written) ends with
# model.safetensors and optimizer.safetensors byte-identical to the
# uninterrupted run's. Prints the matrix fault x point -> outcome.
# Skipped (77) when the binary was built without ZO_FAULT_INJECTION (Release).
# Usage: test-faults.sh ZOFFLOAD_BINARY REPO_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1
cli_init faults
unset ZO_FAULT ZO_FAULT_COUNTS

cli_prepare_text
# checkpoint.dir and nvme_path come from --set in each run.
cat >"$tmp/c.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "steps": 6,
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 16, "vocab_size": 256, "max_seq_len": 32},
 "data": {"train": "$tmp/train.bin", "val": "$tmp/val.bin", "format": "u16", "seq_len": 16},
 "engine": {"device": "cpu"}, "log": {"every": 1},
 "checkpoint": {"every": 2, "keep": 10},
 "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}}
JSON

# run NAME [ARGS...]: zoffload train into $tmp/NAME (checkpoints: ck, swap: nvme),
# with the placement's --set options in extra.
extra=()
run() {
  local name=$1
  shift
  mkdir -p "$tmp/$name/nvme"
  "$bin" train "$tmp/c.json" --set checkpoint.dir="$tmp/$name/ck" \
    --set zero_optimization.offload_optimizer.nvme_path="$tmp/$name/nvme" "${extra[@]}" "$@"
}

out=$(ZO_FAULT=write:1:eio run probe 2>&1)
if [[ $out != *"fault injected"* ]]; then
  echo "SKIP: $bin was built without fault injection (configure with -DZO_FAULT_INJECTION=ON; on by default in Debug and sanitizer builds)"
  exit 77
fi

# The uninterrupted run, and the call counts the points below were placed by.
counts=$(ZO_FAULT_COUNTS=1 run base 2>&1 >/dev/null | grep "fault calls") || { echo "FAIL: the uninterrupted run failed"; exit 1; }
# The points below were placed in a run that made these calls in all. Calls
# added since at start-up (a probe of checkpoint.dir, a lock file) shift
# them: each op's surplus is added to its points; fewer calls than placed
# means the layout changed and the points have to be placed again.
declare -A placed=([nvme-read]=152 [nvme-write]=117 [write]=102 [fsync]=30 [rename]=15)
declare -A shift_by
for op in "${!placed[@]}"; do
  got=$(grep -o " $op=[0-9]*" <<<"$counts" | cut -d= -f2)
  shift_by[$op]=$((${got:-0} - placed[$op]))
  if ((shift_by[$op] < 0)); then
    echo "FAIL: the uninterrupted run made ${got:-no} $op calls, fewer than the ${placed[$op]} the points assume: place them again"
    echo "  (ZO_FAULT=nvme-read:1+:log,nvme-write:1+:log,write:1+:log,fsync:1+:log,rename:1+:log shows every call)"
    exit 1
  fi
done

# op:N  point (what the Nth call is in the uninterrupted run; each step
# also writes and reads one gradient chunk per block first)  kinds
cases=(
  "nvme-write:1|init: first master-weight block|eio enospc short"
  "nvme-write:22|step 1 update, mid-state|eio enospc short"
  "nvme-write:83|step 4 update, last block before save 4|eio enospc"
  "nvme-write:102|step 6 update|eio short"
  "nvme-read:3|init: state read back|eio short"
  "nvme-read:29|step 2 update|eio short"
  "nvme-read:49|save 2: optimizer state read|eio short"
  "nvme-read:96|save 4: optimizer state read|eio"
  "nvme-read:132|step 6 update|eio"
  "write:1|save 2: model.safetensors header|eio enospc short"
  "write:20|save 2: model.safetensors tensors|eio enospc short"
  "write:30|save 2: config.json|eio"
  "write:66|save 4: optimizer.safetensors|eio enospc short"
  "write:102|save 6: trainer_state.json (last write)|enospc short"
  "write:35+|save 4 on: the disk stays full|enospc"
  "fsync:1|save 2: model.safetensors|eio"
  "fsync:15|save 4: optimizer.safetensors|eio"
  "fsync:29|save 6: temp directory before publishing|eio"
  "fsync:30|save 6: parent after publishing|eio"
  "rename:1|save 2: model.safetensors into the temp dir|eio"
  "rename:10|save 4: publishing the directory|eio"
  "rename:14|save 6: trainer_state.json|eio"
  "rename:15|save 6: publishing the directory|eio"
)
declare -A errtext=([eio]="Input/output error" [enospc]="No space left on device")

fail=0
n=0
matrix=()
base=base
run_cases() {
for c in "${cases[@]}"; do
  IFS='|' read -r at point kinds <<<"$c"
  op=${at%%:*}
  nth=${at#*:}
  at="$op:$((${nth%+} + shift_by[$op]))${nth//[0-9]/}"
  for kind in $kinds; do
    n=$((n + 1))
    name=case$n
    spec="$at:$kind"
    out=$(ZO_FAULT=$spec run "$name" 2>&1)
    rc=$?
    why=()
    [[ $out == *"fault injected"* ]] || why+=("the fault never fired")
    last=$(grep "^zoffload: train:" <<<"$out" | tail -1)
    if [[ $kind == short ]]; then
      ((rc == 0)) || why+=("exit $rc after a short transfer (want 0): $last")
    else
      ((rc == 1)) || why+=("exit $rc (want 1)")
      [[ ${last,,} == *"${errtext[$kind],,}"* ]] || why+=("error does not name '${errtext[$kind]}': ${last:-<none>}")
    fi
    # No checkpoint corrupted: each one left equals the uninterrupted run's.
    saved=""
    for d in "$tmp/$name"/ck/checkpoint-*; do
      [[ -d $d ]] || continue
      s=${d##*/}
      saved+="${s#checkpoint-} "
      for f in model.safetensors optimizer.safetensors config.json trainer_state.json; do
        cmp -s "$d/$f" "$tmp/$base/ck/$s/$f" || why+=("$s/$f differs from the uninterrupted run's")
      done
    done
    left=$(cd "$tmp/$name" && find ck nvme -mindepth 1 \( -name '.checkpoint-*' -o -name '*.tmp*' -o -name 'zoffload-nvme-*' \) 2>/dev/null | tr '\n' ' ')
    [[ -z $left ]] || why+=("left behind: $left")
    # Resume (or start again) and end where the uninterrupted run ended.
    if [[ ! -d $tmp/$name/ck/checkpoint-6 ]]; then
      if [[ -n $saved ]]; then
        rout=$(run "$name" --resume auto 2>&1)
      else
        rout=$(run "$name" 2>&1)
      fi
      (($? == 0)) || why+=("the resumed run failed: $(tail -1 <<<"$rout")")
    fi
    for f in model.safetensors optimizer.safetensors; do
      cmp -s "$tmp/$name/ck/checkpoint-6/$f" "$tmp/$base/ck/checkpoint-6/$f" ||
        why+=("after resuming, checkpoint-6/$f is not the uninterrupted run's")
    done
    if ((${#why[@]})); then
      outcome="FAIL: $(printf '%s; ' "${why[@]}")"
      fail=$((fail + 1))
      echo "--- $spec output:"
      tail -5 <<<"$out"
    elif [[ $kind == short ]]; then
      outcome="resumed transfer, run completed, identical"
    else
      outcome="exit 1, kept ${saved:-none}, clean, resume identical"
    fi
    matrix+=("$(printf '%-18s %-48s %s' "$spec" "$point" "$outcome")")
  done
done
}
run_cases

# The Infinity tier: parameters, gradients and optimizer on NVMe (stage 3).
# Its I/O runs on three streams, so the Nth call is some block of the step
# named, whichever file it belongs to: each fault must still stop the run
# with the error (or resume a short transfer), keep every checkpoint and
# resume to the uninterrupted run's bits.
extra=(--set zero_optimization.stage=3 --set zero_optimization.offload_param.device=nvme
  --set zero_optimization.offload_param.buffer_count=2)
base=inf-base
inf_counts=$(ZO_FAULT_COUNTS=1 run "$base" 2>&1 >/dev/null | grep "fault calls") ||
  { echo "FAIL: the uninterrupted Infinity-tier run failed"; exit 1; }
declare -A inf_need=([nvme-read]=150 [nvme-write]=120)
for op in nvme-read nvme-write; do
  got=$(grep -o " $op=[0-9]*" <<<"$inf_counts" | cut -d= -f2)
  ((${got:-0} >= inf_need[$op])) ||
    { echo "FAIL: the Infinity-tier run made ${got:-no} $op calls, fewer than the ${inf_need[$op]} the points assume"; exit 1; }
  shift_by[$op]=0
done
cases=(
  "nvme-write:5|init: parameter and state files|eio short"
  "nvme-write:30|step 2: gradients, parameters or state|eio enospc short"
  "nvme-read:30|step 2: parameter ring, gradients or state|eio short"
  "nvme-read:110|step 4 on: a read|eio"
)
run_cases

# A disk too small for the tier's files: refused before step 1, naming the
# bytes needed and free (needs root to mount a 1 MiB tmpfs; skipped otherwise).
mkdir -p "$tmp/small"
if mount -t tmpfs -o size=1m zo-faults-small "$tmp/small" 2>/dev/null; then
  out=$("$bin" train "$tmp/c.json" --set checkpoint.dir="$tmp/small-ck" "${extra[@]}" \
    --set zero_optimization.offload_optimizer.nvme_path="$tmp/small" 2>&1)
  rc=$?
  umount "$tmp/small"
  n=$((n + 1))
  if ((rc == 1)) && [[ $out == *"on the nvme tier but free on nvme_path allows 1.00 MiB"* && $out != *"step 1/"* ]]; then
    matrix+=("$(printf '%-18s %-48s %s' "nvme_path 1 MiB" "Infinity tier: files larger than the disk" "exit 1 before step 1, bytes needed and free")")
  else
    fail=$((fail + 1))
    matrix+=("$(printf '%-18s %-48s %s' "nvme_path 1 MiB" "Infinity tier: files larger than the disk" "FAIL: exit $rc: $(tail -1 <<<"$out")")")
  fi
else
  echo "(the disk-too-small case is skipped: mounting a 1 MiB tmpfs needs root)"
fi

echo "fault matrix (optimizer on NVMe, then the Infinity tier, 6 steps, a checkpoint every 2; uninterrupted: $counts; Infinity: $inf_counts):"
printf '%-18s %-48s %s\n' "fault" "point" "outcome"
printf '%s\n' "${matrix[@]}"
echo "$((n - fail)) of $n cases passed"
((fail == 0))
