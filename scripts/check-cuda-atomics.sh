#!/usr/bin/env bash
# Keeps the CUDA backend's reductions deterministic: a float atomicAdd sums
# in whatever order the blocks reach it, so a gradient, loss or norm built
# with one differs in its last bits from run to run (and test-gpu-train
# demands bit-identical runs and resumes). Every reduction sums per-chunk
# partials in a fixed order instead (rmsnorm.cu, layernorm.cu, matmul.cu,
# sumsq.cu) or gives each output one owner (encoder.cu).
# Fails on any atomicAdd-family call (atomicAdd, atomicAdd_block,
# atomicAdd_system, unsafeAtomicAdd) in kernels/cuda/*.cu and *.cuh outside
# comments, unless the line matches an entry of the allow-list below, which
# names the file, a pattern of the line and why the sum is exact or its
# order does not matter (integer counters, for example). The check reads
# text, not types, so it flags integer atomics too: allow them here with the
# reason. Not caught: hand-written atomicCAS loops and cuda::atomic_ref;
# review those.
# Run by scripts/test.sh before the build; exits 1 naming file:line.
# Usage: scripts/check-cuda-atomics.sh [DIR]   (default kernels/cuda)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-kernels/cuda}

# file|extended regex of the line|reason. Empty today: no kernel needs one.
allow=(
  # "kernels/cuda/example.cu|atomicAdd\(&n_found, 1\)|int counter: integer sums are exact in any order"
)

allowed() { # file line
  local e f re
  for e in "${allow[@]+"${allow[@]}"}"; do
    f=${e%%|*}
    re=${e#*|}
    re=${re%%|*}
    [[ $1 == "$f" && $2 =~ $re ]] && return 0
  done
  return 1
}

shopt -s nullglob
files=("$dir"/*.cu "$dir"/*.cuh)
if ((${#files[@]} == 0)); then
  echo "check-cuda-atomics: no .cu or .cuh files under $dir" >&2
  exit 1
fi
bad=0
for f in "${files[@]}"; do
  in_comment=0
  n=0
  while IFS= read -r line || [[ -n $line ]]; do
    n=$((n + 1))
    code=$line
    # Block comments (house style: /* ... */ and " * " continuation lines).
    if ((in_comment)); then
      [[ $code == *'*/'* ]] || continue
      code=${code#*'*/'}
      in_comment=0
    fi
    while [[ $code == *'/*'* ]]; do
      if [[ ${code#*'/*'} == *'*/'* ]]; then
        local_rest=${code#*'/*'}
        code="${code%%'/*'*} ${local_rest#*'*/'}"
      else
        code=${code%%'/*'*}
        in_comment=1
      fi
    done
    code=${code%%//*}
    [[ $code =~ (^|[^A-Za-z0-9_])(unsafeAtomicAdd|atomicAdd(_block|_system)?)[[:space:]]*\( ]] || continue
    allowed "$f" "$line" && continue
    echo "$f:$n: ${BASH_REMATCH[2]} outside the allow-list (sum partials in a fixed order instead, or allow it in scripts/check-cuda-atomics.sh with the reason): ${line#"${line%%[![:space:]]*}"}" >&2
    bad=1
  done <"$f"
done
if ((bad)); then
  echo "check-cuda-atomics: FAILED: nondeterministic atomics in $dir" >&2
  exit 1
fi
echo "check-cuda-atomics: ok (${#files[@]} files, ${#allow[@]} allowed entries)"
