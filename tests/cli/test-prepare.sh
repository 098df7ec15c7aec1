#!/usr/bin/env bash
# `zoffload prepare --tokenizer` without Python: a tokenizer learned by
# `zoffload tokenizer train`; the tokens of each document are what
# `zoffload tokenizer encode` gives for it, followed by the end-of-text id;
# the mask is 0 on a prompt's tokens and 1 on its completion's (and the
# end-of-text after it); every format holds the same ids (u16, u32, llmc,
# llmc32 headers); the output is the same with 1 and 2 threads; a whole
# document goes to val; ids beyond uint16 refused naming --format u32; bad
# JSON lines and missing fields refused naming file:line and the key;
# options that need --tokenizer refused without it; a masked file trains
# (train reads the mask beside it) and eval reports bits per byte.
# Usage: test-prepare.sh ZOFFLOAD_BINARY REPO_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1
cli_init prepare

# ids of a u16 file, one a line
u16() { od -An -v -t u2 -w2 "$1" | tr -d ' '; }
u32() { od -An -v -t u4 -w4 "$1" | tr -d ' '; }
bytes() { od -An -v -t u1 -w1 "$1" | tr -d ' '; }

# A corpus and a tokenizer.
for i in $(seq 1 60); do
  echo "Line $i of the corpus: the quick brown fox jumps over the lazy dog, $((i * 7)) times."
done >"$tmp/corpus.txt"
expect 0 "tokenizer train" tok -- tokenizer train --vocab-size 300 --out "$tmp/tok" "$tmp/corpus.txt"
eos=$("$bin" tokenizer encode --tokenizer "$tmp/tok" --special <<<"" | tr -d '\n' ; true)
eos=$(grep -o '"eos_token": *"[^"]*"' "$tmp/tok/tokenizer_config.json" | head -1)
# The end-of-text id, as prepare prints it.
printf 'a' >"$tmp/one.txt"
expect 0 "end-of-text id" eosid -- prepare --tokenizer "$tmp/tok" --val-fraction 0 --out-train "$tmp/one.bin" "$tmp/one.txt"
eos_id=$(sed -n 's/.*end-of-text id \([0-9]*\).*/\1/p' "$tmp/eosid.out")
[[ -n $eos_id ]] && ok || bad "no end-of-text id in: $(cat "$tmp/eosid.out")"

# Instruction data: 20 lines, the last one (5%) to val.
: >"$tmp/sft.jsonl"
for i in $(seq 1 20); do
  printf '{"prompt": "Question %d: what is %d + %d?\\n", "completion": "It is %d."}\n' "$i" "$i" "$i" $((2 * i)) >>"$tmp/sft.jsonl"
done
expect 0 "20 documents" sft -- prepare --tokenizer "$tmp/tok" --prompt-field prompt --completion-field completion \
  --out-train "$tmp/sft.bin" --out-val "$tmp/sft-val.bin" "$tmp/sft.jsonl"
# The expected ids and mask from `tokenizer encode`, line by line.
: >"$tmp/want.ids"
: >"$tmp/want.mask"
for i in $(seq 1 20); do
  p=$(printf 'Question %d: what is %d + %d?\n_' "$i" "$i" "$i")
  p=${p%_}
  c="It is $((2 * i))."
  pi=$(printf '%s' "$p" | "$bin" tokenizer encode --tokenizer "$tmp/tok" --special)
  ci=$(printf '%s' "$c" | "$bin" tokenizer encode --tokenizer "$tmp/tok")
  for id in $pi; do echo "$id" >>"$tmp/want.ids"; echo 0 >>"$tmp/want.mask"; done
  for id in $ci $eos_id; do echo "$id" >>"$tmp/want.ids"; echo 1 >>"$tmp/want.mask"; done
done
cat <(u16 "$tmp/sft.bin") <(u16 "$tmp/sft-val.bin") >"$tmp/got.ids"
cat <(bytes "$tmp/sft.bin.mask") <(bytes "$tmp/sft-val.bin.mask") >"$tmp/got.mask"
if cmp -s "$tmp/got.ids" "$tmp/want.ids"; then ok; else bad "prompt/completion ids differ from tokenizer encode"; diff "$tmp/got.ids" "$tmp/want.ids" | head -5; fi
if cmp -s "$tmp/got.mask" "$tmp/want.mask"; then ok; else bad "mask differs from the prompt/completion split"; fi
want_val=$(( $(grep -c . <(printf 'Question 20: what is 20 + 20?\n' | "$bin" tokenizer encode --tokenizer "$tmp/tok" --special | tr ' ' '\n' | grep .) ) ))
[[ $(u16 "$tmp/sft-val.bin" | wc -l) -gt $want_val ]] && ok || bad "val does not hold the whole last document"

# Same output with one thread; every format holds the same ids.
OMP_NUM_THREADS=1 "$bin" prepare --tokenizer "$tmp/tok" --prompt-field prompt --completion-field completion \
  --out-train "$tmp/t1.bin" --out-val "$tmp/t1-val.bin" "$tmp/sft.jsonl" >/dev/null 2>&1
cmp -s "$tmp/t1.bin" "$tmp/sft.bin" && cmp -s "$tmp/t1.bin.mask" "$tmp/sft.bin.mask" && ok || bad "1 thread differs from 2"
for fmt in u32 llmc llmc32; do
  expect 0 "prepared" "fmt-$fmt" -- prepare --tokenizer "$tmp/tok" --format $fmt --prompt-field prompt \
    --completion-field completion --val-fraction 0 --out-train "$tmp/$fmt.bin" "$tmp/sft.jsonl"
done
n=$(wc -l <"$tmp/want.ids")
u32 "$tmp/u32.bin" | cmp -s - "$tmp/want.ids" && ok || bad "u32 ids differ"
head -c 1024 "$tmp/llmc.bin" | od -An -t d4 -N 12 | tr -s ' ' | grep -q "20240520 1 $n" && ok || bad "llmc header"
head -c 1024 "$tmp/llmc32.bin" | od -An -t d4 -N 12 | tr -s ' ' | grep -q "20240801 7 $n" && ok || bad "llmc32 header"
tail -c +1025 "$tmp/llmc.bin" >"$tmp/llmc.payload"
u16 "$tmp/llmc.payload" | cmp -s - "$tmp/want.ids" && ok || bad "llmc payload differs"
cmp -s "$tmp/llmc.bin.mask" <(cat "$tmp/sft.bin.mask" "$tmp/sft-val.bin.mask") && ok || bad "llmc mask differs"

# Plain text at a separator: tokens of each piece + eos, no mask.
printf 'first doc\n%%\nsecond doc\n%%\n' >"$tmp/plain.txt"
expect 0 "2 documents" plain -- prepare --tokenizer "$tmp/tok" --separator $'\n%\n' --val-fraction 0 \
  --out-train "$tmp/plain.bin" "$tmp/plain.txt"
{ printf 'first doc' | "$bin" tokenizer encode --tokenizer "$tmp/tok" --special | tr ' ' '\n' | grep .; echo "$eos_id"
  printf 'second doc' | "$bin" tokenizer encode --tokenizer "$tmp/tok" --special | tr ' ' '\n' | grep .; echo "$eos_id"; } >"$tmp/plain.want"
u16 "$tmp/plain.bin" | cmp -s - "$tmp/plain.want" && [[ ! -e $tmp/plain.bin.mask ]] && ok || bad "plain text at a separator"

# Refusals.
printf '{"prompt": "a", "completion": "b"}\nnot json\n' >"$tmp/broken.jsonl"
expect 2 "broken.jsonl:2" badjson -- prepare --tokenizer "$tmp/tok" --prompt-field prompt --completion-field completion \
  --val-fraction 0 --out-train "$tmp/x.bin" "$tmp/broken.jsonl"
expect 2 'no key "body"' nofield -- prepare --tokenizer "$tmp/tok" --field body --val-fraction 0 --out-train "$tmp/x.bin" \
  "$tmp/sft.jsonl"
[[ ! -e $tmp/x.bin && -z $(ls "$tmp" | grep '\.tmp\.') ]] && ok || bad "a refused prepare left files: $(ls "$tmp")"
expect 2 "need --tokenizer" notok -- prepare --field text --out-train "$tmp/x.bin" "$tmp/sft.jsonl"
expect 2 "go together" half -- prepare --tokenizer "$tmp/tok" --prompt-field prompt --out-train "$tmp/x.bin" "$tmp/sft.jsonl"
expect 2 "valid: u16, u32" badfmt -- prepare --tokenizer "$tmp/tok" --format text --out-train "$tmp/x.bin" "$tmp/sft.jsonl"
echo '{"messages": [{"role": "user", "content": "hi"}]}' >"$tmp/chat.jsonl"
expect 2 "no chat_template" nochat -- prepare --tokenizer "$tmp/tok" --messages-field messages --val-fraction 0 \
  --out-train "$tmp/x.bin" "$tmp/chat.jsonl"
# A tokenizer with ids above 65535: the end-of-text token moved to id 70000.
mkdir -p "$tmp/big" && cp "$tmp/tok/tokenizer_config.json" "$tmp/big/"
sed "s/\"<|endoftext|>\": $eos_id/\"<|endoftext|>\": 70000/; s/\"id\": $eos_id,/\"id\": 70000,/" \
  "$tmp/tok/tokenizer.json" >"$tmp/big/tokenizer.json"
if grep -q 70000 "$tmp/big/tokenizer.json"; then
  expect 1 "use --format u32" wide -- prepare --tokenizer "$tmp/big" --val-fraction 0 --out-train "$tmp/x.bin" "$tmp/plain.txt"
  expect 0 "prepared" wide32 -- prepare --tokenizer "$tmp/big" --format u32 --val-fraction 0 --out-train "$tmp/w.bin" \
    "$tmp/plain.txt"
else
  bad "could not make a tokenizer with a wide id"
fi

# The masked file trains (its mask found beside it), eval reports bits per byte.
cat >"$tmp/cfg.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "steps": 3,
 "model": {"arch": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 16, "vocab_size": 320, "max_seq_len": 32,
           "tokenizer": "$tmp/tok"},
 "data": {"train": "$tmp/sft.bin", "val": "$tmp/sft-val.bin", "format": "u16", "seq_len": 16},
 "engine": {"device": "cpu"}, "checkpoint": {"dir": "$tmp/run", "every": 3}}
JSON
expect 0 "step 3/3" train -- train "$tmp/cfg.json"
[[ -f $tmp/run/checkpoint-3/tokenizer.json && -f $tmp/run/checkpoint-3/tokenizer_config.json ]] && ok ||
  bad "the checkpoint has no tokenizer files"
grep -q '"tokenizer.json"' "$tmp/run/checkpoint-3/trainer_state.json" && ok || bad "tokenizer.json not listed with a checksum"
expect 0 "bits per byte" eval -- eval "$tmp/cfg.json"
expect 0 "Question" sample -- sample "$tmp/cfg.json" --prompt "Question" --tokens 5
expect 2 "vocab_size is 100" smallvocab -- train "$tmp/cfg.json" --set model.vocab_size=100 --set checkpoint.dir="$tmp/run2"

# A tokenizer this build cannot read that came with model.init_from: noted,
# carried into the checkpoints, the sample in ids; given as model.tokenizer: refused.
cp -r "$tmp/run/checkpoint-3" "$tmp/unigram" && rm "$tmp/unigram/trainer_state.json"
sed -i 's/"type": "BPE"/"type": "Unigram"/' "$tmp/unigram/tokenizer.json"
expect 0 "is not usable here" unusable -- train "$tmp/cfg.json" --set model.tokenizer= --set model.init_from="$tmp/unigram" \
  --set checkpoint.dir="$tmp/run3" --sample 3
grep -q "Unigram" "$tmp/run3/checkpoint-3/tokenizer.json" && ok || bad "the unusable tokenizer was not carried"
expect 2 "Unigram" unusable2 -- train "$tmp/cfg.json" --set model.tokenizer="$tmp/unigram" --set checkpoint.dir="$tmp/run4"

cli_report test-prepare
