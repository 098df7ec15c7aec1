#!/usr/bin/env bash
# Writes the outputs a behaviour-preserving refactor must leave unchanged into
# OUTDIR: `zoffload plan` for every config in configs/ (plain, --placements,
# and a 10 GiB device budget), `zoffload config` of each, and the metrics JSONL
# of a fixed-seed 20-step run of configs/tiny.json and configs/llama-tiny.json
# with the time fields removed. Compare two trees' outputs with diff -r.
# Usage: scripts/guard-outputs.sh BINARY OUTDIR
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "$1"); out=$2
mkdir -p "$out"
[[ -f data/tiny/train.bin ]] || scripts/prepare-tiny.sh "$bin" >/dev/null
for c in configs/*.json; do
  n=$(basename "$c" .json)
  "$bin" plan "$c" >"$out/plan-$n.txt" 2>&1 || echo "exit $?" >>"$out/plan-$n.txt"
  "$bin" plan "$c" --placements >"$out/plan-placements-$n.txt" 2>&1 || echo "exit $?" >>"$out/plan-placements-$n.txt"
  "$bin" plan "$c" --set engine.gpu_memory_budget=10GiB >"$out/plan-10gib-$n.txt" 2>&1 || echo "exit $?" >>"$out/plan-10gib-$n.txt"
  "$bin" config "$c" >"$out/config-$n.txt" 2>&1 || echo "exit $?" >>"$out/config-$n.txt"
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for c in tiny llama-tiny; do
  "$bin" train configs/$c.json --set steps=20 --set log.every=1 --set engine.threads=2 \
    --set checkpoint.dir="$tmp/$c" --set log.metrics_path="$tmp/$c/metrics.jsonl" --set checkpoint.every=10 \
    >/dev/null 2>&1
  python3 -c '
import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l)
    for k in list(r):
        if "time" in k or k.endswith("_s") or k.endswith("_ms") or "per_s" in k or "tokens_per" in k or k in ("elapsed","wall","ms"): r.pop(k)
    print(json.dumps(r,sort_keys=True))' "$tmp/$c/metrics.jsonl" >"$out/metrics-$c.jsonl"
done
echo "guard-outputs: $(ls "$out" | wc -l) files in $out"
