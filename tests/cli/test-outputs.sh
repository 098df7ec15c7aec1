#!/usr/bin/env bash
# Hostile inputs and outputs of tokenizer train/decode, prepare, trace
# summary and export (issue 36): tokenizer train on an empty file is refused
# and on "a" gives a tokenizer that loads; duplicate and invalid UTF-8
# special tokens are refused; --out holding a tokenizer is refused unless
# --overwrite; decode refuses ids of 2^31 and more and words that are not
# ids, naming them. prepare refuses a FIFO or a symlink to /dev/null as an
# output and a directory as --out-val, leaving them (and the other
# outputs) untouched; refuses an output that is one of its inputs (by name
# or by hard link); replaces train and val together or neither (a failing
# fsync, with fault injection); removes a stale X.mask when X is rewritten without one;
# removes the temporary files of a dead prepare, not a live process's;
# refuses masks that train nothing, writing nothing. engine.trace.path onto
# a FIFO stops a run before step 1. trace summary streams (a ~50 MB trace
# in under 100 MB of RSS beyond a small one's) and refuses negative durations, duplicated
# events and overlapping steps. export refuses a checkpoint that lost its
# trainer_state.json (its checksums).
# Usage: test-outputs.sh ZOFFLOAD_BINARY REPO_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1
cli_init outputs

# ---- tokenizer train ----
: >"$tmp/empty.txt"
expect 2 "hold no text to learn from" -- tokenizer train --vocab-size 300 --out "$tmp/tk0" "$tmp/empty.txt"
printf 'a' >"$tmp/a.txt"
expect 0 "tokenizer train: 257 ids" -- tokenizer train --vocab-size 300 --out "$tmp/tka" "$tmp/a.txt"
[[ "$(printf 'a' | "$bin" tokenizer encode --tokenizer "$tmp/tka" 2>&1)" == "97" ]] && ok \
  || bad "the tokenizer trained on \"a\" does not encode a as 97"
for i in $(seq 1 40); do echo "line $i: the quick brown fox jumps over the lazy dog $((i * 3))"; done >"$tmp/corpus.txt"
expect 2 '--special "<a>" is given twice (1 and 2)' -- tokenizer train --vocab-size 300 --special "<a>" \
  --special "<a>" --out "$tmp/tkd" "$tmp/corpus.txt"
expect 2 "is not valid UTF-8" -- tokenizer train --vocab-size 300 --special $'<\xff>' --out "$tmp/tku" \
  "$tmp/corpus.txt"
[[ ! -e $tmp/tkd && ! -e $tmp/tku ]] && ok || bad "a refused tokenizer train created its --out"
expect 0 "tokenizer train" -- tokenizer train --vocab-size 300 --out "$tmp/tok" "$tmp/corpus.txt"
cp "$tmp/tok/tokenizer.json" "$tmp/tok.before"
expect 2 "$tmp/tok/tokenizer.json already exists: give --overwrite" -- tokenizer train --vocab-size 280 \
  --out "$tmp/tok" "$tmp/corpus.txt"
cmp -s "$tmp/tok/tokenizer.json" "$tmp/tok.before" && ok || bad "a refused train replaced tokenizer.json"
expect 0 "tokenizer train" -- tokenizer train --vocab-size 300 --overwrite --out "$tmp/tok" "$tmp/corpus.txt"

# ---- tokenizer decode ----
expect 2 '"4294967400" is not an id: ids are below 2^31' -- tokenizer decode --tokenizer "$tmp/tok" 4294967400
out=$(echo "104 abc 105" | "$bin" tokenizer decode --tokenizer "$tmp/tok" 2>&1)
rc=$?
[[ $rc -eq 2 && "$out" == *'stdin word 2 "abc" is not an id'* ]] && ok || bad "decode of '104 abc 105': $rc $out"
expect 2 "id 300 (word 2) is not in $tmp/tok (a vocabulary of 300 ids)" -- tokenizer decode --tokenizer "$tmp/tok" 104 300
out=$(printf '104\n 105 ' | "$bin" tokenizer decode --tokenizer "$tmp/tok" 2>&1)
[[ "$out" == "hi" ]] && ok || bad "decode of 104 105: '$out'"

# ---- prepare: outputs that are not regular files, or inputs ----
printf 'the quick brown fox jumps over the lazy dog. %.0s' $(seq 1 50) >"$tmp/text.txt"
mkfifo "$tmp/fifo"
expect 2 "output $tmp/fifo is a FIFO" -- prepare --val-fraction 0 --out-train "$tmp/fifo" "$tmp/text.txt"
[[ -p $tmp/fifo ]] && ok || bad "prepare replaced a FIFO"
ln -s /dev/null "$tmp/null"
expect 2 "is a character device" -- prepare --tokenizer "$tmp/tok" --val-fraction 0 --out-train "$tmp/null" \
  "$tmp/text.txt"
[[ -L $tmp/null && -c /dev/null ]] && ok || bad "prepare replaced a symlink to /dev/null"
echo "old train" >"$tmp/t.bin"
mkdir "$tmp/vdir"
expect 1 "output $tmp/vdir is a directory" -- prepare --val-fraction 0.1 --out-train "$tmp/t.bin" \
  --out-val "$tmp/vdir" "$tmp/text.txt"
expect 1 "output $tmp/vdir is a directory" -- prepare --tokenizer "$tmp/tok" --val-fraction 0.1 \
  --out-train "$tmp/t.bin" --out-val "$tmp/vdir" "$tmp/text.txt"
[[ "$(cat "$tmp/t.bin")" == "old train" && -d $tmp/vdir ]] && ok || bad "a refused prepare replaced the train output"
cp "$tmp/text.txt" "$tmp/in.txt"
expect 2 "is the input '$tmp/in.txt'" -- prepare --val-fraction 0 --out-train "$tmp/in.txt" "$tmp/in.txt"
ln "$tmp/in.txt" "$tmp/hard.txt"
expect 2 "output '$tmp/hard.txt' is the input '$tmp/in.txt'" -- prepare --tokenizer "$tmp/tok" --val-fraction 0 \
  --out-train "$tmp/hard.txt" "$tmp/in.txt"
cmp -s "$tmp/in.txt" "$tmp/text.txt" && ok || bad "prepare overwrote its input"

# The set: a failing fsync of the val output (fault injection builds only:
# Debug, sanitizers) leaves the train output as it was too.
echo "old val" >"$tmp/v.bin"
out=$(ZO_FAULT=fsync:2+:eio "$bin" prepare --val-fraction 0.1 --out-train "$tmp/t.bin" --out-val "$tmp/v.bin" \
  "$tmp/text.txt" 2>&1)
if [[ $out == *"fault injected"* ]]; then
  [[ "$(cat "$tmp/t.bin")" == "old train" && "$(cat "$tmp/v.bin")" == "old val" ]] && ok \
    || bad "a prepare whose val output failed replaced the train output: $out"
  left=$(cd "$tmp" && ls ./*.tmp.* 2>/dev/null)
  [[ -z $left ]] && ok || bad "temporary files left by a failed prepare: $left"
else
  echo "(no fault injection in $bin: the fsync case not run)"
fi

# ---- prepare: stale masks, leftovers of a dead prepare ----
for i in $(seq 1 6); do
  printf '{"prompt": "Q%d? ", "completion": "A%d."}\n' "$i" "$i"
done >"$tmp/sft.jsonl"
expect 0 "loss masks" -- prepare --tokenizer "$tmp/tok" --prompt-field prompt --completion-field completion \
  --val-fraction 0 --out-train "$tmp/x.bin" "$tmp/sft.jsonl"
[[ -f $tmp/x.bin.mask ]] && ok || bad "no mask written"
expect 0 "prepared" -- prepare --tokenizer "$tmp/tok" --val-fraction 0 --out-train "$tmp/x.bin" "$tmp/text.txt"
[[ ! -e $tmp/x.bin.mask ]] && ok || bad "a stale mask stayed beside a file rewritten without one"
expect 0 "loss masks" -- prepare --tokenizer "$tmp/tok" --prompt-field prompt --completion-field completion \
  --val-fraction 0 --out-train "$tmp/x.bin" "$tmp/sft.jsonl"
expect 0 "prepared" -- prepare --val-fraction 0 --out-train "$tmp/x.bin" "$tmp/text.txt"
[[ ! -e $tmp/x.bin.mask ]] && ok || bad "a stale mask stayed beside a byte-level file"
dead=30000
while kill -0 "$dead" 2>/dev/null || [[ -e /proc/$dead ]]; do dead=$((dead + 1)); done
sleep 300 &
live=$!
for f in "y.bin.tmp.$dead" "y.bin.mask.tmp.$dead" "y-val.bin.tmp.$dead" "y.bin.tmp.$live"; do
  echo leftover >"$tmp/$f"
done
expect 0 "prepared" -- prepare --val-fraction 0.1 --out-train "$tmp/y.bin" --out-val "$tmp/y-val.bin" "$tmp/text.txt"
left=$(cd "$tmp" && ls y*.tmp.* 2>/dev/null | tr '\n' ' ')
[[ "$left" == "y.bin.tmp.$live " ]] && ok || bad "leftovers after prepare: '$left' (want only y.bin.tmp.$live)"
kill "$live"
wait "$live" 2>/dev/null

# ---- prepare: masks that train nothing ----
python3 - "$tmp/tok/tokenizer_config.json" <<'PY'
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c["chat_template"] = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
json.dump(c, open(p, "w"))
PY
printf '{"messages": [{"role": "user", "content": "hi"}]}\n%.0s' 1 2 >"$tmp/chat.jsonl"
expect 2 "train no token: 0 of" zero -- prepare --tokenizer "$tmp/tok" --messages-field messages --val-fraction 0 \
  --out-train "$tmp/z.bin" "$tmp/chat.jsonl"
grep -q "'$tmp/z.bin'" "$tmp/zero.out" && ok || bad "the zero-mask refusal does not name the file"
[[ ! -e $tmp/z.bin && ! -e $tmp/z.bin.mask ]] && ok || bad "a zero mask was written"

# ---- a tiny run: --trace onto a FIFO, export of a checkpoint without trainer_state.json ----
"$bin" prepare --out-train "$tmp/train.bin" --val-fraction 0 "$tmp/text.txt" >/dev/null || bad "prepare"
cat >"$tmp/c.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "steps": 2,
 "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "vocab_size": 256, "max_seq_len": 16},
 "data": {"train": "$tmp/train.bin", "format": "u16", "seq_len": 8},
 "engine": {"device": "cpu"}, "log": {"every": 1, "metrics_path": "$tmp/m.jsonl"},
 "checkpoint": {"dir": "$tmp/ck", "every": 2, "keep": 1}}
JSON
expect 2 "engine.trace.path $tmp/fifo is a device, FIFO or socket" trace -- train "$tmp/c.json" --trace "$tmp/fifo" \
  --set checkpoint.dir="$tmp/ck-fifo" --set log.metrics_path="$tmp/m-fifo.jsonl"
grep -q "^step 1" "$tmp/trace.out" && bad "a run with a FIFO as trace path trained" || ok
[[ -p $tmp/fifo ]] && ok || bad "the trace replaced a FIFO"
"$bin" train "$tmp/c.json" >"$tmp/train.out" 2>&1 || bad "train: $(tail -3 "$tmp/train.out")"
expect 0 "exported" -- export "$tmp/ck/checkpoint-2" --out "$tmp/x-ok"
cp -r "$tmp/ck/checkpoint-2" "$tmp/checkpoint-2"
rm "$tmp/checkpoint-2/trainer_state.json"
expect 2 "a checkpoint without trainer_state.json" -- export "$tmp/checkpoint-2" --out "$tmp/x-bad"
mv "$tmp/checkpoint-2" "$tmp/renamed"
expect 2 "it holds optimizer state" -- export "$tmp/renamed" --out "$tmp/x-bad"
[[ ! -e $tmp/x-bad ]] && ok || bad "a refused export created its --out"

# ---- trace summary: streamed and validated ----
# gen N_STEPS SPANS_PER_TRACK [dup|neg|steps]: a trace of 3 tracks, each
# span followed by a gap, on one line as the writer writes it.
gen() {
  python3 - "$@" <<'PY'
import sys
steps, per, bad = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else ""
w = sys.stdout.write
w('{"traceEvents": [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "zoffload"}}')
for t, n in enumerate(["compute", "h2d", "optim"]):
    w(', {"name": "thread_name", "ph": "M", "pid": 1, "tid": %d, "args": {"name": "%s"}}' % (t, n))
step_us = per * 10.0
for s in range(steps):
    t0 = s * step_us
    w(', {"name": "step %d", "cat": "step", "ph": "X", "ts": %.3f, "dur": %.3f, "pid": 1, "tid": 3, "args": {"step": %d}}'
      % (s + 1, t0, step_us, s + 1))
    for t in range(3):
        for k in range(per):
            seq = s * per + k + 1
            dur = -0.1 if bad == "neg" and s == 0 and k == 3 else 6.0
            ev = (', {"name": "op", "cat": "op", "ph": "X", "ts": %.3f, "dur": %.3f, "pid": 1, "tid": %d,'
                  ' "args": {"index": %d, "bytes": 4096, "flops": 1000000, "seq": %d}}' % (t0 + k * 10.0, dur, t, k, seq))
            w(ev)
            if bad == "dup" and s == 0 and k == 5:
                w(ev)
if bad == "steps":
    w(', {"name": "step 9", "cat": "step", "ph": "X", "ts": 5.0, "dur": 20.0, "pid": 1, "tid": 3, "args": {"step": 9}}')
w('], "displayTimeUnit": "ms", "otherData": {"clock": "test", "dropped_events": 0}}')
PY
}
gen 2 10 >"$tmp/small.json"
expect 0 "compute" summary -- trace summary "$tmp/small.json"
grep -q "compute .* 60% " "$tmp/summary.out" && ok || bad "summary: compute not 60% busy: $(cat "$tmp/summary.out")"
gen 2 10 dup >"$tmp/dup.json"
expect 2 "track compute runs \"op\" [50.000, 56.000) us and \"op\" [50.000, 56.000) us at once" -- trace summary \
  "$tmp/dup.json"
gen 2 10 neg >"$tmp/neg.json"
expect 2 "has a negative duration (-0.1 us)" -- trace summary "$tmp/neg.json"
gen 2 10 steps >"$tmp/steps.json"
expect 2 "overlap" -- trace summary "$tmp/steps.json"
gen 4 28000 >"$tmp/big.json"
size=$(stat -c %s "$tmp/big.json")
# max RSS (kB) of trace summary FILE (the CUDA build alone starts at about
# 200 MB); under ASan without its quarantine of freed memory (256 MB)
rss_of() {
  ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0 /usr/bin/time -v "$bin" trace summary "$1" >"$tmp/rss.out" 2>"$tmp/rss.time" || echo "exit $? on $1" >>"$tmp/rss.fail"
  sed -n 's/.*Maximum resident set size (kbytes): //p' "$tmp/rss.time"
}
base=$(rss_of "$tmp/small.json")
rss=$(rss_of "$tmp/big.json")
echo "trace summary: max RSS ${base} kB on a small trace, ${rss} kB on a $((size / 1000000)) MB one"
[[ ! -e $tmp/rss.fail && $size -gt 40000000 ]] && ok || bad "trace summary of the big trace: $(cat "$tmp/rss.fail"), $size bytes"
# (not `ldd | grep -q`: under pipefail, grep's early exit can kill ldd with
# SIGPIPE and make the test think it is not a TSan build)
if [[ $(ldd "$bin" 2>/dev/null) == *libtsan* ]]; then
  echo "(ThreadSanitizer build: its shadow memory grows with the heap; the RSS bound not checked)"
else
  [[ -n $rss && -n $base && $((rss - base)) -lt 100000 ]] && ok \
    || bad "trace summary of a $size-byte trace took $rss kB of RSS, $((rss - base)) kB more than a small one's (> 100 MB)"
fi

cli_report outputs
