#!/usr/bin/env bash
# Text inputs and their messages (issue 36 rows 17, 19): 10 MB of spaces
# then "x" encodes (once PCRE2's match limit; Hugging Face tokenizers gives
# the same ids up to 4 MB, where Oniguruma itself still matches) to 10
# million space ids and the x; prepare's messages carry one "prepare:"; a
# missing tokenizer.json or checkpoint names the file without jansson's
# ":-1:-1:"; a JSONL file with a UTF-8 byte-order mark prepares as without
# it; a FIFO input is named as a FIFO.
# Usage: test-text-inputs.sh ZOFFLOAD_BINARY REPO_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1
cli_init text-inputs

for i in $(seq 1 40); do echo "line $i: the quick brown fox jumps over the lazy dog $((i * 3))"; done >"$tmp/corpus.txt"
"$bin" tokenizer train --vocab-size 300 --out "$tmp/tok" "$tmp/corpus.txt" >/dev/null || exit 1

# ---- row 17: a 10 MB run of spaces ----
head -c 10000000 /dev/zero | tr '\0' ' ' >"$tmp/spaces.txt"
printf 'x' >>"$tmp/spaces.txt"
"$bin" tokenizer encode --tokenizer "$tmp/tok" "$tmp/spaces.txt" >"$tmp/spaces.ids" 2>"$tmp/spaces.err"
rc=$?
check "10 MB of spaces encode" "[[ $rc -eq 0 ]]"
[[ $rc -eq 0 ]] || cat "$tmp/spaces.err"
check "10 million space ids then x" \
  "[[ \$(tr ' ' '\\n' <'$tmp/spaces.ids' | sort | uniq -c | tr -s ' ' | sed 's/^ //' | tr '\\n' ,) == '1 120,10000000 32,' ]]"

# ---- row 19: messages ----
expect 1 "zoffload: prepare: cannot read text file" missing -- prepare --val-fraction 0 --out-train "$tmp/o.bin" \
  "$tmp/nonexistent.txt"
check "one prepare: prefix" "! grep -q 'prepare: prepare:' '$tmp/missing.out'"
printf 'abc' >"$tmp/in.txt"
expect 2 "is the input" same -- prepare --val-fraction 0 --out-train "$tmp/in.txt" "$tmp/in.txt"
check "one prepare: prefix (same file)" "! grep -q 'prepare: prepare:' '$tmp/same.out'"
mkdir "$tmp/notok"
expect 1 "No such file or directory" notok -- tokenizer encode --tokenizer "$tmp/notok" "$tmp/in.txt"
check "no :-1:-1: for a missing tokenizer.json" "! grep -q -- ':-1' '$tmp/notok.out'"
mkdir "$tmp/nockpt"
"$bin" export "$tmp/nockpt" --out "$tmp/ex" >"$tmp/nockpt.out" 2>&1
check "no :-1: for a directory without checkpoint files" "! grep -q -- ':-1' '$tmp/nockpt.out'"
printf '{"text": "hello there"}\n{"text": "general kenobi"}\n' >"$tmp/plain.jsonl"
printf '\xef\xbb\xbf{"text": "hello there"}\n{"text": "general kenobi"}\n' >"$tmp/bom.jsonl"
expect 0 "prepared" -- prepare --tokenizer "$tmp/tok" --val-fraction 0 --out-train "$tmp/plain.bin" "$tmp/plain.jsonl"
expect 0 "prepared" -- prepare --tokenizer "$tmp/tok" --val-fraction 0 --out-train "$tmp/bom.bin" "$tmp/bom.jsonl"
check "a BOM changes no token" "cmp -s '$tmp/plain.bin' '$tmp/bom.bin'"
mkfifo "$tmp/fifo"
expect 2 "input '$tmp/fifo' is a FIFO" -- prepare --tokenizer "$tmp/tok" --val-fraction 0 --out-train "$tmp/f.bin" \
  "$tmp/fifo"
expect 2 "input '$tmp/fifo' is a FIFO" -- prepare --val-fraction 0 --out-train "$tmp/f.bin" "$tmp/fifo"

echo "text-inputs: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
