#!/usr/bin/env bash
# Installs the Debian packages zoffload needs to build, test and run its
# default job. Idempotent: when everything is present it touches nothing.
#   scripts/install-deps.sh              build + test + main-job dependencies
#   scripts/install-deps.sh --reference  also python3-torch and python3-jinja2
#                                        (transformers' chat templates; regenerating the
#                                        PyTorch reference vectors, benchmarks)
# Open MPI is optional for the build (ZO_MPI=AUTO builds without it) but CI
# installs it so that the data-parallel tests (ctest label mpi) run.
set -euo pipefail

pkgs=(build-essential cmake pkg-config git
      libopenblas-openmp-dev libdnnl-dev liburing-dev libhwloc-dev libjansson-dev zlib1g-dev libisal-dev
      libopenmpi-dev openmpi-bin
      libpcre2-dev libutf8proc-dev libprotobuf-c-dev protobuf-c-compiler
      fio
      fortunes)
if [[ "${1:-}" == "--reference" ]]; then
  pkgs+=(python3-torch python3-numpy python3-matplotlib python3-jinja2)
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
