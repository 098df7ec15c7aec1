#!/usr/bin/env bash
# What a run trains on, and its logs' write failures (issue 36 rows 8-10).
# A checkpoint records data.train (path, bytes, fingerprint) and carries the
# run's tokenizer: --resume auto on another data.train or another tokenizer
# is refused naming both unless --allow-data-change (then said, and the new
# data recorded); a resume without a tokenizer takes the checkpoint's and
# carries it on (also after retention removed the checkpoint it came from);
# a checkpoint from before the record resumes with a note. A metrics file
# on a full disk (/dev/full), a metrics file, TensorBoard event file or
# trace over the file-size limit (RLIMIT_FSIZE, as a filling disk): said
# once on stderr, the run trains every step and exits 0, the metrics file
# cut back to whole lines, no trace temporary left. export removes a killed
# export's temporary directory beside its --out.
# Usage: test-resume-inputs.sh ZOFFLOAD_BINARY REPO_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1
cli_init resume-inputs

cli_prepare_text 100
printf 'pack my box with five dozen liquor jugs! %.0s' $(seq 1 120) >"$tmp/other.txt"
"$bin" prepare --val-fraction 0 --out-train "$tmp/other.bin" "$tmp/other.txt" >/dev/null || exit 1
for i in $(seq 1 40); do echo "line $i: the quick brown fox jumps over the lazy dog $((i * 3))"; done >"$tmp/corpus.txt"
"$bin" tokenizer train --vocab-size 300 --out "$tmp/tokA" "$tmp/corpus.txt" >/dev/null || exit 1
"$bin" tokenizer train --vocab-size 290 --out "$tmp/tokB" "$tmp/corpus.txt" >/dev/null || exit 1

# config NAME [EXTRA-JSON-MEMBERS]: $tmp/NAME.json, a small model on train.bin.
config() {
  cat >"$tmp/$1.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "steps": 2,
 "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "vocab_size": 320, "max_seq_len": 32 ${2:-}},
 "data": {"train": "$tmp/train.bin", "format": "u16", "seq_len": 32},
 "engine": {"device": "cpu"}, "log": {"every": 100},
 "checkpoint": {"dir": "$tmp/ck", "every": 2, "keep": 1}}
JSON
}
config tok ", \"tokenizer\": \"$tmp/tokA\""
config notok

# ---- row 8: the data and tokenizer a checkpoint records ----
expect 0 "saved $tmp/ck/checkpoint-2" -- train "$tmp/tok.json"
check "data_train recorded" "grep -q '\"data_train\"' '$tmp/ck/checkpoint-2/trainer_state.json'"
check "train.bin's path recorded" "grep -q '$tmp/train.bin' '$tmp/ck/checkpoint-2/trainer_state.json'"
expect 2 "was trained on data.train $tmp/train.bin" dchange -- train "$tmp/tok.json" --resume auto --set steps=4 \
  --set data.train="$tmp/other.bin"
check "another data.train named" "grep -q 'this run.s data.train $tmp/other.bin is another file' '$tmp/dchange.out'"
check "the flag named" "grep -q -- '--allow-data-change' '$tmp/dchange.out'"
check "no checkpoint after a refused resume" "[[ ! -e $tmp/ck/checkpoint-4 ]]"
config tokb ", \"tokenizer\": \"$tmp/tokB\""
expect 2 "carries another tokenizer" tchange -- train "$tmp/tokb.json" --resume auto --set steps=4
check "the run's tokenizer named" "grep -q '$tmp/tokB/tokenizer.json' '$tmp/tchange.out'"
# A run without a tokenizer takes the checkpoint's, through retention (keep 1).
expect 0 "(the checkpoint's; copied into every checkpoint)" -- train "$tmp/notok.json" --resume auto --set steps=6
check "checkpoint-2 removed by keep 1" "[[ ! -e $tmp/ck/checkpoint-2 && -e $tmp/ck/checkpoint-6 ]]"
check "checkpoint-6 carries tokA" "cmp -s '$tmp/tokA/tokenizer.json' '$tmp/ck/checkpoint-6/tokenizer.json'"
# --allow-data-change: goes on, says so, records the new data.
expect 0 "note: data.train changed ($tmp/train.bin -> $tmp/other.bin)" -- train "$tmp/tok.json" --resume auto \
  --set steps=8 --set data.train="$tmp/other.bin" --allow-data-change
check "other.bin recorded" "grep -q '$tmp/other.bin' '$tmp/ck/checkpoint-8/trainer_state.json'"
expect 2 "--allow-data-change" -- train "$tmp/tok.json" --allow-data-change --bogus
# A checkpoint from before the record: a one-line note.
if command -v python3 >/dev/null; then
  python3 - "$tmp/ck/checkpoint-8/trainer_state.json" <<'PY'
import json, sys
p = sys.argv[1]
j = json.load(open(p))
del j["data_train"]
json.dump(j, open(p, "w"))
PY
  expect 0 "records no data.train (saved before checkpoints recorded it): not compared" -- train "$tmp/tok.json" \
    --resume auto --set steps=10
fi

# ---- export (item 3): written beside OUT and renamed; a killed export's temporary removed ----
mkdir -p "$tmp/ex.tmp.999999" && echo torn >"$tmp/ex.tmp.999999/config.json"
last=$(ls -d "$tmp"/ck/checkpoint-* | sort -t- -k2 -n | tail -1)
expect 0 "removed 1 leftover(s) of a killed export beside $tmp/ex" -- export "$last" --out "$tmp/ex"
check "the killed export's temporary removed" "[[ ! -e $tmp/ex.tmp.999999 && -s $tmp/ex/model.safetensors ]]"
check "no temporary of this export left" "[[ -z \$(ls -d '$tmp'/ex.tmp.* 2>/dev/null) ]]"

# ---- rows 9-10: log writes that fail ----
rm -rf "$tmp/ck"
expect 0 "log.metrics_path /dev/full cannot be written (No space left on device)" full -- train "$tmp/notok.json" \
  --set steps=4 --set log.metrics_path=/dev/full
check "said once" "[[ \$(grep -c 'cannot be written' '$tmp/full.out') -eq 1 ]]"
check "trained to the end and saved" "[[ -e $tmp/ck/checkpoint-4 ]]"
rm -rf "$tmp/ck"
# limited RUN-ARGS...: zoffload under a 2 KiB file-size limit (SIGXFSZ
# ignored: the write fails with EFBIG), no checkpoint.dir; output in $tmp/lim.out.
limited() {
  (trap '' XFSZ; ulimit -f 2; "$bin" train "$tmp/notok.json" --set checkpoint.dir='""' --set steps=40 "$@" 2>&1) \
    | cat >"$tmp/lim.out"
  return "${PIPESTATUS[0]}"
}
limited --set log.metrics_path="$tmp/m.jsonl"
rc=$?
check "metrics over the limit: exit 0" "[[ $rc -eq 0 ]]"
check "metrics over the limit: said once" \
  "[[ \$(grep -c 'log.metrics_path $tmp/m.jsonl cannot be written (File too large)' '$tmp/lim.out') -eq 1 ]]"
check "metrics over the limit: trained every step" "grep -q 'step 40/40' '$tmp/lim.out'"
check "metrics cut back to whole lines" "[[ -s $tmp/m.jsonl && \$(tail -c 1 '$tmp/m.jsonl' | od -An -c | tr -d ' ') == '\\n' ]]"
check "every metrics line whole" "! grep -qv '}\$' '$tmp/m.jsonl'"
mkdir "$tmp/tb"
limited --set log.tensorboard_dir="$tmp/tb"
rc=$?
check "tensorboard over the limit: exit 0" "[[ $rc -eq 0 ]]"
check "tensorboard over the limit: said once" "[[ \$(grep -c 'log.tensorboard_dir $tmp/tb cannot be written' '$tmp/lim.out') -eq 1 ]]"
check "tensorboard over the limit: trained every step" "grep -q 'step 40/40' '$tmp/lim.out'"
mkdir "$tmp/tr"
limited --trace "$tmp/tr/trace.json" --set engine.trace.first_step=2
rc=$?
check "trace over the limit: exit 0" "[[ $rc -eq 0 ]]"
check "trace over the limit: said" "grep -q 'engine.trace.path $tmp/tr/trace.json cannot be written' '$tmp/lim.out'"
check "trace over the limit: trained every step" "grep -q 'step 40/40' '$tmp/lim.out'"
check "no trace temporary left" "[[ -z \$(ls -A '$tmp/tr') ]]"

echo "resume-inputs: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
