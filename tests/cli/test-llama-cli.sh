#!/usr/bin/env bash
# configs/llama-tiny.json through the command line, on the README's real
# text (Debian's fortunes, prepared by scripts/prepare-tiny.sh into a
# temporary directory): train 12 steps with checkpoints, resume to 18 and
# match a straight 18-step run step for step, validation loss falling at
# every checkpoint, eval equal to the run's last validation loss, sample
# (seeded, greedy), a resume refused for a different model, and sampling a
# 131072-token-context config. Skips (77) without the fortunes package.
# Usage: test-llama-cli.sh ZOFFLOAD_BINARY REPO_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1
repo=$2
config=$repo/configs/llama-tiny.json
cli_init llama-cli

if ! ls /usr/share/games/fortunes/* >/dev/null 2>&1; then
  echo "SKIP: no /usr/share/games/fortunes (apt-get install fortunes): the real text configs/llama-tiny.json trains on"
  exit 77
fi
if ! "$repo/scripts/prepare-tiny.sh" "$bin" "$tmp/data" >"$tmp/prepare.log" 2>&1; then
  cat "$tmp/prepare.log"
  echo "FAIL: scripts/prepare-tiny.sh"
  exit 1
fi

# run NAME ARGS...: zoffload ARGS with the data in $tmp; stdout in
# $tmp/NAME.out, stderr in $tmp/NAME.err.
run() {
  local name=$1
  shift
  "$bin" "$@" --set data.train="$tmp/data/train.bin" --set data.val="$tmp/data/val.bin" \
    --set log.every=6 --set checkpoint.every=6 >"$tmp/$name.out" 2>"$tmp/$name.err"
}

# expect CODE SUBSTRING NAME ARGS...: run, then check exit code and output.
expect() {
  local code=$1 want=$2 name=$3
  shift 3
  run "$name" "$@"
  local rc=$?
  if [[ $rc -ne $code || "$(cat "$tmp/$name.out" "$tmp/$name.err")" != *"$want"* ]]; then
    bad "zoffload $* -> exit $rc (want $code), output:"
    cat "$tmp/$name.out" "$tmp/$name.err" | head -8
    echo "  (wanted substring: $want)"
  else
    ok
  fi
}

# val_loss NAME STEP: the "step STEP: val loss X" of run NAME.
val_loss() {
  sed -n "s/^.*step $2: val loss \([0-9.]*\)$/\1/p" "$tmp/$1.out" | tail -1
}

ck=$tmp/ck
resumed=(--set checkpoint.dir="$ck" --set log.metrics_path="$ck/metrics.jsonl")
expect 0 "model: Llama, 4 layers, 6 heads, width 192, vocab 256 (padded 256), 2 key/value heads, MLP 512, untied head" \
  train12 train "$config" "${resumed[@]}" --set steps=12 --verbose
if grep -q "^saved $ck/checkpoint-12$" "$tmp/train12.out"; then ok; else bad "train did not save checkpoint-12"; fi
if grep -q "unclassified" "$tmp/train12.out"; then bad "memory report has unclassified bytes"; else ok; fi
grep -q "^memory report (planned before start-up" "$tmp/train12.out" && ok || bad "train --verbose printed no memory report"
expect 0 "resumed from $ck/checkpoint-12 at step 12" resume train "$config" "${resumed[@]}" --set steps=18 --resume auto
if [[ -d $ck/checkpoint-18 && -d $ck/checkpoint-12 && ! -d $ck/checkpoint-6 ]]; then ok; else
  bad "after the resume $ck holds $(ls "$ck" | tr '\n' ' ')(want checkpoint-12, checkpoint-18: keep 2)"
fi

# The resumed run is the straight one, step for step.
straight=$tmp/straight
expect 0 "saved $straight/checkpoint-18" straight train "$config" --set checkpoint.dir="$straight" \
  --set log.metrics_path="$straight/metrics.jsonl" --set steps=18
steps_of() { grep '"loss"' "$1" | sed 's/, "tokens_per_s.*//'; }
if [[ $(steps_of "$ck/metrics.jsonl" | wc -l) -eq 18 ]] &&
  diff <(steps_of "$ck/metrics.jsonl") <(steps_of "$straight/metrics.jsonl") >"$tmp/diff"; then
  ok
else
  bad "12 steps + resume to 18 differ from 18 straight steps (loss, lr, grad norm per step):"
  head -6 "$tmp/diff"
fi

# Validation loss falls at every checkpoint, by more than a nat over 18 steps.
v0=$(val_loss train12 0) v6=$(val_loss train12 6) v12=$(val_loss train12 12) v18=$(val_loss resume 18)
if awk -v a="$v0" -v b="$v6" -v c="$v12" -v d="$v18" 'BEGIN { exit !(a > b && b > c && c > d && d < a - 1) }'; then
  ok
else
  bad "validation loss at steps 0, 6, 12, 18: '$v0' '$v6' '$v12' '$v18' (want falling, by > 1 overall)"
fi
echo "llama-tiny: validation loss $v0 (step 0) -> $v6 -> $v12 -> $v18 (step 18, resumed at 12)"

# eval takes the latest checkpoint and the same validation windows as train.
expect 0 "over 20 batches" eval eval "$config" "${resumed[@]}"
ev=$(sed -n 's/^val loss \([0-9.]*\) over.*/\1/p' "$tmp/eval.out")
if awk -v a="$ev" -v b="$v18" 'BEGIN { d = a - b; exit !(a != "" && d < 5.1e-5 && d > -5.1e-5) }'; then ok; else
  bad "zoffload eval loss '$ev' is not the run's step-18 validation loss $v18"
fi

# sample: the prompt then 60 bytes; reproducible for a seed; greedy too.
expect 0 "The " sample sample "$config" "${resumed[@]}" --prompt "The " --tokens 60 --seed 3
run sample2 sample "$config" "${resumed[@]}" --prompt "The " --tokens 60 --seed 3
if cmp -s "$tmp/sample.out" "$tmp/sample2.out"; then ok; else bad "seeded samples differ"; fi
n=$(head -c -1 "$tmp/sample.out" | wc -c)
if [[ $n -eq 64 ]]; then ok; else bad "sample printed $n bytes, want 4 (prompt) + 60"; fi
run greedy1 sample "$config" "${resumed[@]}" --prompt "The " --tokens 30 --top-k 1 --seed 1
run greedy2 sample "$config" "${resumed[@]}" --prompt "The " --tokens 30 --top-k 1 --seed 2
if cmp -s "$tmp/greedy1.out" "$tmp/greedy2.out"; then ok; else bad "greedy samples depend on the seed"; fi

# A checkpoint of another model is refused as a config error (exit 2), naming both.
expect 2 "model.num_key_value_heads: the checkpoint's" kv3 train "$config" "${resumed[@]}" --set steps=20 --resume auto \
  --set model.num_key_value_heads=3
expect 2 "model.tie_word_embeddings: the checkpoint's false, this run's true" tied train "$config" "${resumed[@]}" --set steps=20 --resume auto \
  --set model.tie_word_embeddings=true
# Llama 3's context: sampling plans the text's length, not 131072 positions.
expect 0 "The " long sample "$config" --set checkpoint.dir="$tmp/none" --set model.max_seq_len=131072 \
  --prompt "The " --tokens 8 --random-init

cli_report
