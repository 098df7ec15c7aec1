#!/usr/bin/env bash
# The timeline of one GPT-2 124M step in each standard placement on the CPU
# backend: all on the device, optimizer on cpu (stage 2), optimizer on NVMe
# (stage 2), parameters and optimizer on cpu (stage 3). For each it runs
# `zoffload bench step --trace` (the traced step time next to the untraced
# one, in the same rounds), prints `zoffload trace summary` of the last
# traced step and draws it with benchmarks/plot_trace.py into OUTDIR.
# Usage: benchmarks/trace_timelines.sh [ZOFFLOAD] [OUTDIR] [NVME_DIR]
#   defaults: build/release/zoffload, docs/img, a temporary directory under
#   the working directory's file system. B, T, STEPS from the environment
#   (default 4, 256, 2). The trace files themselves go to TRACE_DIR (default
#   a new directory under /tmp, printed), too large to commit. Needs python3-matplotlib for the pictures (installed
#   here when missing, through apt-get, as root).
set -euo pipefail
cd "$(dirname "$0")/.."
Z=${1:-build/release/zoffload}
OUT=${2:-docs/img}
NVME=${3:-$(mktemp -d "$PWD/.trace-nvme.XXXXXX")}
B=${B:-4} T=${T:-256} STEPS=${STEPS:-2}
TRACE_DIR=${TRACE_DIR:-$(mktemp -d /tmp/zoffload-traces.XXXXXX)}
mkdir -p "$OUT" "$NVME" "$TRACE_DIR"
trap 'rm -rf "$NVME"/zoffload-nvme-* ; [[ -z "${3:-}" ]] && rm -rf "$NVME"' EXIT
if ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  if [[ $(id -u) == 0 ]]; then apt-get install -y -q python3-matplotlib >/dev/null
  else echo "trace_timelines.sh: python3-matplotlib is missing; pictures will be skipped" >&2; fi
fi
common=(--set train_micro_batch_size_per_gpu="$B" --set data.seq_len="$T" --set engine.device=cpu --steps "$STEPS")
declare -a names=(device optimizer-cpu optimizer-nvme params-cpu)
declare -A sets=(
  [device]=""
  [optimizer-cpu]="--set zero_optimization.stage=2 --set zero_optimization.offload_optimizer.device=cpu"
  [optimizer-nvme]="--set zero_optimization.stage=2 --set zero_optimization.offload_optimizer.device=nvme --set zero_optimization.offload_optimizer.nvme_path=$NVME"
  [params-cpu]="--set zero_optimization.stage=3 --set zero_optimization.offload_optimizer.device=cpu --set zero_optimization.offload_param.device=cpu"
)
echo "GPT-2 124M, B=$B T=$T, $STEPS steps per round, CPU backend, $(nproc) cores, $(date -u +%FT%TZ); traces in $TRACE_DIR"
for n in "${names[@]}"; do
  echo
  echo "== $n: $Z bench step configs/gpt2-124m.json ${common[*]} ${sets[$n]} --trace $TRACE_DIR/trace-$n.json"
  # shellcheck disable=SC2086
  "$Z" bench step configs/gpt2-124m.json "${common[@]}" ${sets[$n]} --trace "$TRACE_DIR/trace-$n.json" 2>&1 |
    grep -v '^zoffload: device auto'
  "$Z" trace summary "$TRACE_DIR/trace-$n.json" | awk -v s="step $STEPS:" '$0 ~ "^step " {p = index($0, s) == 1} p'
  if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    /usr/bin/python3 benchmarks/plot_trace.py "$TRACE_DIR/trace-$n.json" -o "$OUT/timeline-$n.png" --title "GPT-2 124M, $n"
  fi
done
