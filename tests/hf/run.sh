#!/usr/bin/env bash
# Runs a transformers interoperability test (test_transformers_logits.py for
# GPT-2, the default, or test_transformers_llama.py) with Debian's python3 and
# the project-local transformers that scripts/install-hf.sh installs; exits 77
# (skip) when either is missing.
# Usage: tests/hf/run.sh ZOFFLOAD_BINARY [REPO_DIR [TEST.py [ARG...]]]
# (ARGs follow the binary on TEST.py's command line.)
# Environment: ZO_HF_SITE (default REPO_DIR/build/hf-site), ZO_HF_PYTHON
# (default /usr/bin/python3).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:?usage: run.sh ZOFFLOAD_BINARY [REPO_DIR [TEST.py]]}
repo=${2:-$(cd "$here/../.." && pwd)}
test=${3:-test_transformers_logits.py}
site=${ZO_HF_SITE:-$repo/build/hf-site}
py=${ZO_HF_PYTHON:-/usr/bin/python3}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"

if ! "$py" -c 'import torch, numpy, safetensors, transformers' >/dev/null 2>&1; then
  echo "SKIP: transformers not installed (scripts/install-hf.sh)"
  exit 77
fi
exec "$py" "$here/$test" "$bin" "${@:4}"
