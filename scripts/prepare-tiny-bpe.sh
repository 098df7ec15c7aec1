#!/usr/bin/env bash
# Builds the demo corpus of scripts/run.sh and configs/tiny-bpe.json from the
# plain-text fortune files of Debian's `fortunes` package (sorted by name):
#   OUT_DIR/tokenizer/   a byte-level BPE vocabulary of 2048 learned from them
#                        (`zoffload tokenizer train`: tokenizer.json and
#                        tokenizer_config.json, loadable by transformers)
#   OUT_DIR/train.bin, OUT_DIR/val.bin
#                        flat uint16 tokens: every fortune (the files are cut
#                        at their "%" lines) encoded with it and followed by
#                        the end-of-text token; the last 5% of the fortunes
#                        are the val split (`zoffload prepare --tokenizer`)
#
#   scripts/prepare-tiny-bpe.sh ZOFFLOAD_BINARY [OUT_DIR]   (OUT_DIR: data/tiny-bpe)
#
# Skips the work when the outputs exist and are newer than every input.
# Exits 1 with a hint when the fortunes package is missing.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 ZOFFLOAD_BINARY [OUT_DIR]" >&2
  exit 2
fi
bin=$1
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out_dir=${2:-$repo/data/tiny-bpe}
fortunes=/usr/share/games/fortunes
vocab=2048

mapfile -t inputs < <(find "$fortunes" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' 2>/dev/null | LC_ALL=C sort)
if [[ ${#inputs[@]} -eq 0 ]]; then
  echo "prepare-tiny-bpe: no fortune files in $fortunes: install them with 'apt-get install fortunes'" >&2
  exit 1
fi

tok=$out_dir/tokenizer
train=$out_dir/train.bin
val=$out_dir/val.bin
up_to_date=1
for f in "$tok/tokenizer.json" "$train" "$val"; do
  [[ -f $f ]] || up_to_date=0
done
if [[ $up_to_date -eq 1 ]]; then
  for f in "${inputs[@]}"; do
    if [[ ! $tok/tokenizer.json -nt $f || ! $train -nt $tok/tokenizer.json || ! $val -nt $tok/tokenizer.json ]]; then
      up_to_date=0
      break
    fi
  done
fi
if [[ $up_to_date -eq 1 ]]; then
  echo "prepare-tiny-bpe: $tok, $train and $val are up to date"
  exit 0
fi

mkdir -p "$out_dir"
rm -rf "$tok"
"$bin" tokenizer train --vocab-size "$vocab" --out "$tok" "${inputs[@]}"
"$bin" prepare --tokenizer "$tok" --separator $'\n%\n' --val-fraction 0.05 --out-train "$train" --out-val "$val" \
  "${inputs[@]}"
