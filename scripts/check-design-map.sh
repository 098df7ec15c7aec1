#!/usr/bin/env bash
# docs/DESIGN.md's file map covers every source file: each .c, .h and .cu
# under kernels/, offload/ and engine/ is named there (a .cuh by its .cu's
# name, an op file of cuda/ by its op's name in the map's list). Run by
# scripts/test.sh; exits 1 naming the files the map misses.
# Usage: scripts/check-design-map.sh
set -euo pipefail
cd "$(dirname "$0")/.."
missing=0
while IFS= read -r f; do
  b=$(basename "$f")
  stem=${b%.*}
  case "$f" in
    kernels/cuda/*.cu | kernels/cuda/*.cuh) grep -qw -- "$stem" docs/DESIGN.md && continue ;;
    *) grep -qF -- "$b" docs/DESIGN.md && continue
       # a header beside its .c: "name.c/.h"
       [[ $b == *.h ]] && grep -qF -- "$stem.c/.h" docs/DESIGN.md && continue ;;
  esac
  echo "check-design-map: $f is not in docs/DESIGN.md's map"
  missing=1
done < <(git ls-files kernels offload engine | grep -E '\.(c|h|cu|cuh)$')
((missing)) && exit 1
echo "check-design-map: ok"
