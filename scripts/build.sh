#!/usr/bin/env bash
# Configures and builds one preset (release by default) after making sure the
# Debian dependencies are installed. Usage: scripts/build.sh [release|debug|asan|tsan]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
scripts/install-deps.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
