#!/usr/bin/env bash
# Crash soak: N trials, each a training run killed with SIGKILL at a random
# moment (after a random checkpoint k is announced, plus a random share of one
# step: steps, saves and start-up alike, a checkpoint every step), over three
# placements in turn: everything on the device, the optimizer state on NVMe,
# the parameters on the host. Each killed run is resumed (--resume auto, or
# started again when no checkpoint was published) to the end. A trial passes
# when
#   - every checkpoint the kill left is byte-identical to the same step of an
#     uninterrupted run of that placement (no lost or corrupted checkpoint),
#   - the resumed run ends with model.safetensors and optimizer.safetensors
#     byte-identical to the uninterrupted run's final checkpoint,
#   - after the resumed run no temporary checkpoint directory (.checkpoint-N.tmp-PID),
#     temporary file (*.tmp.PID) or NVMe swap directory (zoffload-nvme-*) is left.
# What the kill left (temporaries, swap directories; expected, the next run
# removes them) is counted and reported, as are the kills that landed inside
# a save (a temporary checkpoint directory was left).
# Usage: crash-soak.sh [-n TRIALS] [-s SEED] [-o RESULT_FILE] ZOFFLOAD_BINARY
#   CI runs 3 trials (ctest soak-crash-3); the full soak is
#   benchmarks/soak.sh (50+ trials, result under benchmarks/results/).
# Exit: 0 all trials passed, 1 otherwise.
set -uo pipefail
trials=3
seed=$$
result=""
while getopts "n:s:o:" opt; do
  case $opt in
    n) trials=$OPTARG ;;
    s) seed=$OPTARG ;;
    o) result=$OPTARG ;;
    *) echo "usage: $0 [-n TRIALS] [-s SEED] [-o RESULT_FILE] ZOFFLOAD_BINARY" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
bin=${1:?usage: $0 [-n TRIALS] [-s SEED] [-o RESULT_FILE] ZOFFLOAD_BINARY}
RANDOM=$seed
tmp=$(mktemp -d /tmp/zo-soak-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
unset ZO_FAULT ZO_FAULT_COUNTS
steps=8

# A model whose saves take a fair share of the run's time, so kills land in them.
printf 'It was the best of times, it was the worst of times. %.0s' $(seq 1 400) >"$tmp/text.txt"
"$bin" prepare --out-train "$tmp/train.bin" --out-val "$tmp/val.bin" --val-fraction 0.05 "$tmp/text.txt" >/dev/null || exit 1
cat >"$tmp/c.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "steps": $steps,
 "model": {"n_layer": 2, "n_head": 4, "n_embd": 64, "vocab_size": 512, "max_seq_len": 32},
 "data": {"train": "$tmp/train.bin", "format": "u16", "seq_len": 32},
 "engine": {"device": "cpu"}, "log": {"every": 1},
 "checkpoint": {"every": 1, "keep": 100}}
JSON

placements=(device opt-nvme params-host)
# The --set options of each placement (nvme_path is added per run).
declare -A psets=(
  [device]=""
  [opt-nvme]="zero_optimization.stage=2 zero_optimization.offload_optimizer.device=nvme aio.block_size=65536"
  [params-host]="zero_optimization.stage=3 zero_optimization.offload_optimizer.device=cpu zero_optimization.offload_param.device=cpu"
)

# args DIR PLACEMENT: the zoffload arguments of a run into DIR/ck (swap
# under DIR/nvme), in the array args.
args() {
  local dir=$1 p=$2
  args=(train "$tmp/c.json" --set checkpoint.dir="$dir/ck")
  for s in ${psets[$p]}; do args+=(--set "$s"); done
  [[ $p == opt-nvme ]] && args+=(--set "zero_optimization.offload_optimizer.nvme_path=$dir/nvme")
  mkdir -p "$dir/nvme"
}
# run DIR PLACEMENT [ARGS...]: that run, in the foreground.
run() {
  args "$1" "$2"
  shift 2
  "$bin" "${args[@]}" "$@"
}

leftovers() { # DIR: what a run left behind, one per line
  (cd "$1" && find ck nvme -mindepth 1 -maxdepth 2 \( -name '.checkpoint-*' -o -name '*.tmp*' -o -name 'zoffload-nvme-*' \) 2>/dev/null)
}

declare -A wall_ms
for p in "${placements[@]}"; do
  run "$tmp/warm-$p" "$p" >/dev/null 2>&1 # caches warm, so the timing below is a run's
  t0=$(date +%s%N)
  run "$tmp/base-$p" "$p" >"$tmp/base-$p.log" 2>&1 || { echo "FAIL: the uninterrupted $p run failed:"; tail -5 "$tmp/base-$p.log"; exit 1; }
  wall_ms[$p]=$((($(date +%s%N) - t0) / 1000000))
done

pass=0
fail=0
in_save=0
killed_after_end=0
left_tmp=0
left_swap=0
no_ckpt=0
lines=()
for ((t = 1; t <= trials; t++)); do
  p=${placements[$(((t - 1) % ${#placements[@]}))]}
  d=$tmp/t$t
  # A random moment: after checkpoint k (0: from the start) is announced,
  # k uniform in 0..steps-1, plus a uniform share of one step-and-save
  # interval, so kills spread over start-up, steps and saves alike.
  k=$((RANDOM % steps))
  interval_ms=$((wall_ms[$p] / (steps + 1) + 1))
  delay_ms=$(((RANDOM * 32768 + RANDOM) % interval_ms))
  args "$d" "$p"
  # stdbuf: "saved" lines reach the log as they are printed; it execs, so
  # $! is zoffload itself.
  : >"$d.log" # exists before the poll below reads it
  stdbuf -oL "$bin" "${args[@]}" >"$d.log" 2>&1 &
  pid=$!
  if ((k > 0)); then
    while kill -0 "$pid" 2>/dev/null && ! grep -q "^saved .*/checkpoint-$k\$" "$d.log"; do sleep 0.002; done
  fi
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  why=()
  left=$(leftovers "$d")
  n_tmp=$(grep -c '^ck/[^/]*$' <<<"$left")
  n_swap=$(grep -c 'zoffload-nvme-' <<<"$left")
  left_tmp=$((left_tmp + n_tmp))
  left_swap=$((left_swap + n_swap))
  grep -q '\.checkpoint-.*\.tmp-' <<<"$left" && in_save=$((in_save + 1))
  kept=""
  for c in "$d"/ck/checkpoint-*; do
    [[ -d $c ]] || continue
    s=${c##*/}
    kept+="${s#checkpoint-} "
    for f in model.safetensors optimizer.safetensors config.json trainer_state.json; do
      cmp -s "$c/$f" "$tmp/base-$p/ck/$s/$f" || why+=("$s/$f left by the kill differs from the uninterrupted run's")
    done
  done
  if [[ -d $d/ck/checkpoint-$steps ]]; then
    # Nothing left to train; the run that finds the leftovers removes them
    # (it may report that the checkpoint is already at the last step).
    killed_after_end=$((killed_after_end + 1))
    run "$d" "$p" --resume auto >/dev/null 2>&1
  elif [[ -n $kept ]]; then
    rout=$(run "$d" "$p" --resume auto 2>&1) || why+=("resume failed: $(tail -1 <<<"$rout")")
  else
    no_ckpt=$((no_ckpt + 1))
    rout=$(run "$d" "$p" 2>&1) || why+=("the new run failed: $(tail -1 <<<"$rout")")
  fi
  for f in model.safetensors optimizer.safetensors; do
    cmp -s "$d/ck/checkpoint-$steps/$f" "$tmp/base-$p/ck/checkpoint-$steps/$f" ||
      why+=("final $f differs from the uninterrupted run's")
  done
  after=$(leftovers "$d" | tr '\n' ' ')
  [[ -z $after ]] || why+=("left after the resumed run: $after")
  line=$(printf 'trial %3d  %-11s kill %4d ms after checkpoint %d  checkpoints left: %-18s temporaries left: %d  swap dirs left: %d' \
    "$t" "$p" "$delay_ms" "$k" "${kept:-none}" "$n_tmp" "$n_swap")
  if ((${#why[@]})); then
    fail=$((fail + 1))
    line+="  FAIL: $(printf '%s; ' "${why[@]}")"
  else
    pass=$((pass + 1))
    line+="  ok"
  fi
  echo "$line"
  lines+=("$line")
  rm -rf "$d" "$d.log"
done

summary="crash soak: $trials trials (seed $seed; placements ${placements[*]}; $steps steps, a checkpoint every step; uninterrupted runs: $(for p in "${placements[@]}"; do printf '%s %d ms ' "$p" "${wall_ms[$p]}"; done))
  passed: $pass, failed: $fail
  kills inside a save (temporary checkpoint directory left): $in_save
  kills before the first checkpoint: $no_ckpt; after the last one was published: $killed_after_end
  left by the kills (removed by the next run): $left_tmp temporaries, $left_swap NVMe swap directories
  lost or corrupted checkpoints: $(grep -c 'left by the kill differs\|final .* differs' <<<"$(printf '%s\n' "${lines[@]}")")
  leftovers after the resumed runs: $(grep -c 'left after the resumed run' <<<"$(printf '%s\n' "${lines[@]}")") trials"
echo "$summary"
if [[ -n $result ]]; then
  {
    echo "# tests/soak/crash-soak.sh -n $trials -s $seed ($(date -u +%Y-%m-%d), $(uname -sr), $(nproc) CPUs)"
    printf '%s\n' "${lines[@]}"
    echo "$summary"
  } >"$result"
fi
((fail == 0))
