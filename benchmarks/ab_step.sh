#!/usr/bin/env bash
# Two zoffload binaries side by side on the same `bench step`, alternating
# A B A B ... so that drift on the machine hits both: for a change to the
# scheduler measured against the commit before it (build the other commit
# in a git worktree). Prints each run's JSON line, then the mean step time
# of each and B / A.
#
#   benchmarks/ab_step.sh A_BIN B_BIN CONFIG [ROUNDS] [-- bench step args...]
#
# Example (the untied embedding on the host, 2026-12-04):
#   benchmarks/ab_step.sh /tmp/base/build/release/zoffload build/release/zoffload \
#     configs/llama-tiny.json 3 -- --set model.vocab_size=32000 ... --steps 5
set -euo pipefail
if [[ $# -lt 3 ]]; then
  echo "usage: $0 A_BIN B_BIN CONFIG [ROUNDS] [-- bench step args...]" >&2
  exit 2
fi
a=$1 b=$2 cfg=$3
shift 3
rounds=3
if [[ $# -gt 0 && $1 != -- ]]; then rounds=$1; shift; fi
if [[ $# -gt 0 && $1 == -- ]]; then shift; fi
for bin in "$a" "$b"; do
  [[ -x $bin ]] || { echo "$0: $bin: not an executable" >&2; exit 2; }
done
declare -A sum=([A]=0 [B]=0)
for ((r = 1; r <= rounds; r++)); do
  for side in A B; do
    bin=$a
    [[ $side == B ]] && bin=$b
    line=$("$bin" bench step "$cfg" "$@" --json | tail -1)
    echo "round $r $side ($bin): $line"
    ms=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["step_ms"])' "$line")
    sum[$side]=$(python3 -c "print(${sum[$side]} + $ms)")
  done
done
python3 - "${sum[A]}" "${sum[B]}" "$rounds" <<'PY'
import sys
a, b, n = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
print(f"mean step: A {a / n:.1f} ms, B {b / n:.1f} ms, B / A {b / a:.3f}")
PY
