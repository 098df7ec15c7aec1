#!/usr/bin/env bash
# Configures and builds one preset (release by default) after making sure the
# Debian dependencies are installed. Usage: scripts/build.sh [release|debug|asan|tsan]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
scripts/install-deps.sh
# scripts/run.sh configures release without CUDA on a machine without a GPU;
# a full build goes back to the default (ZO_CUDA=AUTO, or the environment's).
cuda=()
if [[ $preset == release || $preset == debug ]]; then cuda=(-DZO_CUDA="${ZO_CUDA:-AUTO}"); fi
cmake --preset "$preset" "${cuda[@]}" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
