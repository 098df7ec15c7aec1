#!/usr/bin/env bash
# The README's main-job command: installs dependencies, builds the zoffload
# binary alone (not the tests and benchmarks: scripts/build.sh builds those;
# the CUDA backend only when a GPU is present), prepares the embedded
# real-text data set (Debian's fortunes: a 2048-token BPE vocabulary learned
# from them by `zoffload tokenizer train`, the fortunes encoded with it by
# `zoffload prepare`: scripts/prepare-tiny-bpe.sh), trains configs/tiny-bpe.json
# (on the GPU when there is one, else on the CPU backend) and prints a
# generated sample as text. No Python anywhere.
# Extra arguments go to `zoffload train`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# Without a GPU the CUDA objects (minutes of nvcc on a small machine) would
# never run, even where the toolkit is installed.
cuda=OFF
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  cuda=AUTO
fi
cmake --preset release -DZO_CUDA="$cuda" >/dev/null
cmake --build --preset release --target zoffload -j "$(nproc)"
scripts/prepare-tiny-bpe.sh build/release/zoffload
# configs/tiny-bpe.json's checkpoint.dir is runs/tiny-bpe: zoffload creates only its last component.
mkdir -p runs
build/release/zoffload train configs/tiny-bpe.json --sample 200 "$@"
