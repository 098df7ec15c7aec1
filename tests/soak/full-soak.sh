#!/usr/bin/env bash
# The full crash soak (not run by CI): 60 kill -9 trials (tests/soak/crash-soak.sh)
# with the release binary, the result written to
# benchmarks/results/soak-<date>.txt. Usage: tests/soak/full-soak.sh [TRIALS] [BINARY]
set -euo pipefail
cd "$(dirname "$0")/../.."
trials=${1:-60}
bin=${2:-build/release/zoffload}
[[ -x $bin ]] || scripts/build.sh release
exec bash tests/soak/crash-soak.sh -n "$trials" -s 18 -o "benchmarks/results/soak-$(date -u +%Y-%m-%d).txt" "$bin"
