#!/usr/bin/env bash
# Keeps the dependency direction kernels <- offload <- engine true at the
# #include level: a file under kernels/ includes no offload or engine header,
# a file under offload/ no engine header, and a public header (include/zo/)
# none of a layer above its own. Every public header has its layer in the
# table below; a header missing from it fails the check, so a new header
# has to be placed on purpose (an entry without a header only warns). Relative includes
# ("../../engine/x.h") are resolved and judged by the folder they land in.
# engine/, tests/ and benchmarks/ may include anything. Run by
# scripts/test.sh before the build; exits 1 naming file:line and the include.
# Usage: scripts/check-layers.sh
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A rank=([kernels]=0 [offload]=1 [engine]=2 [top]=3)

# The layer of each public header: where its implementation lives.
declare -A header=(
  [adamw8bit.h]=kernels     # kernels/cpu/ops_adamw8bit.c, kernels/qmap.c
  [adamw_hparams.h]=kernels # types only
  [backend.h]=kernels
  [common.h]=kernels        # kernels/common.c (zo-common)
  [cpu.h]=kernels           # kernels/cpu/
  [adamw.h]=offload
  [arena.h]=offload
  [comm.h]=offload
  [dcomm.h]=offload
  [fault.h]=offload       # offload/fault.c; engine/fsutil.c calls it too
  [host.h]=offload
  [nvme.h]=offload
  [topology.h]=offload
  [trace.h]=kernels         # kernels/trace.c
  [philox.h]=kernels        # header-only: dropout masks (kernels/cpu, kernels/cuda)
  [autoplan.h]=engine     # engine/autoplan.c, cost.c, calibrate.c
  [bench.h]=engine
  [checkpoint.h]=engine
  [config.h]=engine
  [data.h]=engine
  [prepare.h]=engine
  [chat_template.h]=engine
  [run_tokenizer.h]=engine
  [env.h]=engine           # engine/env.c
  [fsutil.h]=engine
  [hf.h]=engine
  [loss_scale.h]=engine
  [model.h]=engine
  [optim_format.h]=engine   # engine/sched/
  [plan.h]=engine
  [safetensors.h]=engine
  [sample.h]=engine
  [sched.h]=engine
  [state.h]=engine
  [tensor.h]=engine
  [tokenizer.h]=engine      # engine/tokenizer*.c
  [trace_file.h]=engine     # engine/trace.c
  [tensorboard.h]=engine    # engine/tensorboard.c
  [train.h]=engine
)

fail=0
for h in include/zo/*.h; do
  if [[ -z "${header[$(basename "$h")]:-}" ]]; then
    echo "$h: not in the layer table of scripts/check-layers.sh (add it as kernels, offload or engine)"
    fail=1
  fi
done
for name in "${!header[@]}"; do
  [[ -f include/zo/$name ]] || echo "check-layers: warning: table entry zo/$name names no header in include/zo/"
done

# The layer of repository path p (relative to the root), "" outside the tree.
layer_of_path() {
  case "$1" in
    include/zo/*) echo "${header[${1#include/zo/}]:-unknown}" ;;
    kernels/*) echo kernels ;;
    offload/*) echo offload ;;
    engine/*) echo engine ;;
    *) echo top ;;
  esac
}

n_files=0
while IFS= read -r -d '' f; do
  n_files=$((n_files + 1))
  own=$(layer_of_path "$f")
  [[ $own == unknown ]] && continue # reported above
  while IFS=: read -r line text; do
    inc=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^>"]+)[>"].*/\1/' <<<"$text")
    if [[ $inc == zo/* ]]; then
      target=include/$inc
    elif [[ $text =~ \"  ]]; then
      # A quoted include is looked up beside the including file first.
      target=$(realpath -m --relative-to=. "$(dirname "$f")/$inc")
      [[ -e $target || $inc == */* ]] || continue # found on the include path: not ours
    else
      continue # <system header>
    fi
    to=$(layer_of_path "$target")
    if [[ $to == unknown ]]; then
      echo "$f:$line: includes \"$inc\": no such public header in the layer table"
      fail=1
    elif ((rank[$to] > rank[$own])); then
      echo "$f:$line: $own file includes \"$inc\" ($to layer): kernels <- offload <- engine"
      fail=1
    fi
  done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' "$f" || true)
done < <(find kernels offload include/zo -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0)

if ((fail)); then
  echo "check-layers: FAILED"
  exit 1
fi
echo "check-layers: ok ($n_files files, ${#header[@]} public headers)"
