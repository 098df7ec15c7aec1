#!/usr/bin/env bash
# Installs Hugging Face transformers (and the few packages it imports) and
# TensorBoard's event-file reader into a
# project-local folder for Debian's /usr/bin/python3, keeping Debian's torch
# (python3-torch 1.13) and numpy: nothing system-wide is replaced. Used by the
# transformers interoperability test (tests/hf/) and docs/huggingface.md.
#   scripts/install-hf.sh            install into build/hf-site (or $ZO_HF_SITE)
# Then:  PYTHONPATH=build/hf-site /usr/bin/python3 -c 'import transformers'
# Idempotent: when the pinned versions are already there it touches nothing.
# Needs PyPI only; no model hub is contacted (the test runs with
# HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1).
set -euo pipefail
cd "$(dirname "$0")/.."
site=${ZO_HF_SITE:-build/hf-site}
py=/usr/bin/python3

# Debian's torch and numpy (python3-torch, python3-numpy).
scripts/install-deps.sh --reference

# transformers 4.36.2 is the last line tested here against torch 1.13 (later
# 4.4x releases drop torch < 2 piece by piece). Every package is pinned and
# installed without dependency resolution so pip never pulls a torch or numpy
# of its own; the list below is transformers' and huggingface-hub's import-time
# requirements, closed over (numpy and torch come from Debian).
pins=(
  transformers==4.36.2
  tokenizers==0.15.2
  safetensors==0.4.2
  huggingface-hub==0.20.3
  regex==2023.12.25
  tqdm==4.66.1
  filelock==3.13.1
  fsspec==2023.12.2
  packaging==23.2
  PyYAML==6.0.1
  typing-extensions==4.9.0
  requests==2.31.0
  urllib3==2.1.0
  idna==3.6
  certifi==2023.11.17
  charset-normalizer==3.3.2
  # PEFT for tests/hf/test_peft_adapter.py: 0.8.2 has use_rslora (0.7.1 has not)
  # and runs on torch 1.13 with transformers 4.36.2; accelerate and psutil
  # are its import-time requirements.
  peft==0.8.2
  accelerate==0.25.0
  psutil==5.9.7
  # TensorBoard's own event-file reader, for tests/cli/test-tensorboard.sh:
  # its import-time requirements (numpy from Debian).
  tensorboard==2.14.0
  protobuf==4.24.4
  absl-py==2.0.0
  six==1.16.0
)

stamp="$site/.zo-pins"
want=$(printf '%s\n' "${pins[@]}")
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] &&
   PYTHONPATH="$site" "$py" -c 'import transformers, safetensors, tensorboard, peft' 2>/dev/null; then
  exit 0
fi

if ! "$py" -m pip --version >/dev/null 2>&1; then
  echo "install-hf: $py has no pip; installing python3-pip" >&2
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
fi

echo "install-hf: installing transformers 4.36.2 and its dependencies into $site"
rm -rf "$site"
mkdir -p "$site"
# --target bypasses Debian's externally-managed-environment guard on purpose:
# the packages go to $site only and are seen through PYTHONPATH.
"$py" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --only-binary=:all: \
  --target "$site" "${pins[@]}"
printf '%s\n' "${pins[@]}" > "$stamp"

HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$site" "$py" - <<'PY'
import numpy, torch, transformers, safetensors, tokenizers, peft
from transformers import GPT2LMHeadModel  # noqa: F401  (fails here if an import is missing)
from tensorboard.backend.event_processing import event_accumulator  # noqa: F401
print(f"install-hf: transformers {transformers.__version__}, safetensors {safetensors.__version__}, "
      f"tokenizers {tokenizers.__version__}, torch {torch.__version__}, numpy {numpy.__version__}")
PY
