#!/bin/bash
# Data-parallel scaling on the CPU backend, side by side in one run:
# one process with micro-batch 16 against mpirun -np 2 with 8 per rank (the
# same global batch), for ZeRO stage 0 (all on the device), 1 and 2 with the
# optimizer on cpu (stage 2 with overlap_comm on and off) and 3 with the
# parameters on cpu too. Prints zoffload bench step's lines per run.
# usage: benchmarks/dp_scaling.sh [ZOFFLOAD] [CONFIG] [STEPS]
set -euo pipefail
Z=${1:-build/release/zoffload}
C=${2:-configs/tiny.json}
STEPS=${3:-4}
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
OPT="--set zero_optimization.offload_optimizer.device=cpu"
declare -a NAMES=("stage 0, all on device" "stage 1, optimizer cpu" "stage 2, optimizer cpu"
                  "stage 2, optimizer cpu, overlap_comm false" "stage 3, optimizer and parameters cpu")
declare -a SETS=("" "--set zero_optimization.stage=1 $OPT" "--set zero_optimization.stage=2 $OPT"
                 "--set zero_optimization.stage=2 $OPT --set zero_optimization.overlap_comm=false"
                 "--set zero_optimization.stage=3 $OPT --set zero_optimization.offload_param.device=cpu")
for i in "${!NAMES[@]}"; do
  echo "== ${NAMES[$i]}"
  # shellcheck disable=SC2086
  echo "-- one process, micro-batch 16"
  $Z bench step "$C" --steps "$STEPS" --set train_micro_batch_size_per_gpu=16 ${SETS[$i]} 2>&1 |
    grep -E "configured placement [0-9.]+ tokens/s" || true
  echo "-- mpirun -np 2, micro-batch 8 each"
  # shellcheck disable=SC2086
  mpirun -np 2 --bind-to none "$Z" bench step "$C" --steps "$STEPS" --set train_micro_batch_size_per_gpu=8 ${SETS[$i]} 2>&1 |
    grep -E "in total|rank [0-9]:" || true
done
