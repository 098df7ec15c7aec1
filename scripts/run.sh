#!/usr/bin/env bash
# The README's main-job command: installs dependencies, builds, prepares the
# embedded real-text data set (Debian's fortunes), trains configs/tiny.json on
# the CPU backend (CUDA when a GPU and a CUDA-enabled build are present) and
# prints a generated sample. Extra arguments go to `zoffload train`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh release
scripts/prepare-tiny.sh build/release/zoffload
# configs/tiny.json's checkpoint.dir is runs/tiny: zoffload creates only its last component.
mkdir -p runs
build/release/zoffload train configs/tiny.json --sample 400 "$@"
