#!/usr/bin/env bash
# Installs a current transformers 5.x, with the torch, numpy and safetensors
# it needs, into a virtual environment (default build/hf5-venv, or
# $ZO_HF5_VENV), beside the pinned 4.x of scripts/install-hf.sh, so the
# Hugging Face tests can run against both:
#   scripts/install-hf5.sh
#   ZO_HF_PYTHON=build/hf5-venv/bin/python ctest --test-dir build/release -R '^hf-'
# Needs PyPI (and python3-venv); no model hub is contacted. PyPI's Linux torch
# wheel pulls its CUDA libraries (about 2.5 GB); set PIP_INDEX_URL to a CPU
# wheel index where one is reachable. Idempotent: an environment whose
# transformers already imports as 5.x is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${ZO_HF5_VENV:-build/hf5-venv}
if [[ -x $venv/bin/python ]] &&
   "$venv/bin/python" -c 'import sys, torch, safetensors, transformers as t; sys.exit(int(t.__version__.split(".")[0]) < 5)' \
     2>/dev/null; then
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check 'transformers>=5' torch numpy safetensors
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$venv/bin/python" -c \
  'import torch, transformers; print(f"install-hf5: transformers {transformers.__version__}, torch {torch.__version__}")'
