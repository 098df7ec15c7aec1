#!/usr/bin/env bash
# Downloads (never installs) the Debian packages zoffload's build links
# against, with their runtime libraries, into .debs/ at the repository root,
# so that benchmarks/gpu_check.sh can build on a machine that has only the
# CUDA toolkit, CMake and Python (it unpacks them into a private prefix).
# .debs/ is git-ignored: the device call that runs gpu_check.sh names it,
# carry: [".debs"] (about 40 MB of the call's 64 MiB).
# Run on a Debian/Ubuntu amd64 machine whose release matches the target's
# glibc or is older (these are bookworm builds: glibc 2.36).
#   benchmarks/collect-debs.sh            download what is missing from .debs/
#   benchmarks/collect-debs.sh --update   apt-get update first
#   benchmarks/collect-debs.sh --list     print the packages, download nothing
# The list is benchmarks/debs.txt's (one row per CMake lookup);
# scripts/check-debs-list.py fails when a lookup has no row there.
# libgomp1, make and pkgconf are included but gpu_check.sh uses them only
# where the target lacks them (every gcc install brings a libgomp.so.1).
# Not included: gcc itself, which nvcc needs anyway.
set -euo pipefail

cd "$(dirname "$0")/.."
# The packages: benchmarks/debs.txt's second column (what CMake requires,
# and what those libraries and protoc-c need at link and run time), each once.
mapfile -t pkgs < <(sed -e 's/#.*//' benchmarks/debs.txt |
  awk -F'|' 'NF >= 2 { n = split($2, a, " "); for (i = 1; i <= n; i++) if (a[i] != "-" && !seen[a[i]]++) print a[i] }')
if ((${#pkgs[@]} == 0)); then
  echo "collect-debs: no packages in benchmarks/debs.txt" >&2
  exit 1
fi
if [[ "${1:-}" == "--list" ]]; then
  printf '%s\n' "${pkgs[@]}"
  exit 0
fi
if [[ "${1:-}" == "--update" ]]; then
  apt-get update -qq
fi
mkdir -p .debs
cd .debs
for p in "${pkgs[@]}"; do
  if compgen -G "${p}_*.deb" >/dev/null; then
    echo "collect-debs: have $(ls "${p}"_*.deb | head -n1)"
    continue
  fi
  # apt-get download fetches the candidate version of this machine's sources.
  apt-get download -q "$p" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true
  if ! compgen -G "${p}_*.deb" >/dev/null; then
    echo "collect-debs: failed to download $p (try --update)" >&2
    exit 1
  fi
  echo "collect-debs: got $(ls "${p}"_*.deb | head -n1)"
done
du -sh . | awk '{print "collect-debs: .debs/ holds " $1}'
