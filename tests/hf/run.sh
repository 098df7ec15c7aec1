#!/usr/bin/env bash
# Runs a transformers interoperability test (test_transformers_logits.py for
# GPT-2, the default, or test_transformers_llama.py) with Debian's python3 and
# the project-local transformers that scripts/install-hf.sh installs; exits 77
# (skip) when either is missing.
# Usage: tests/hf/run.sh ZOFFLOAD_BINARY [REPO_DIR [TEST.py [ARG...]]]
# (ARGs follow the binary on TEST.py's command line.)
# Environment: ZO_HF_PYTHON (default /usr/bin/python3) and ZO_HF_SITE (the
# pinned transformers' folder, default REPO_DIR/build/hf-site, put first on
# PYTHONPATH). A ZO_HF_PYTHON given without ZO_HF_SITE uses its own
# transformers alone: ZO_HF_PYTHON=build/hf5-venv/bin/python (made by
# scripts/install-hf5.sh) runs a test against transformers 5.x.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:?usage: run.sh ZOFFLOAD_BINARY [REPO_DIR [TEST.py]]}
repo=${2:-$(cd "$here/../.." && pwd)}
test=${3:-test_transformers_logits.py}
py=${ZO_HF_PYTHON:-/usr/bin/python3}
if [[ -n ${ZO_HF_PYTHON:-} && -z ${ZO_HF_SITE:-} ]]; then
  site=""
else
  site=${ZO_HF_SITE:-$repo/build/hf-site}
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if [[ -n $site ]]; then export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"; fi

if ! "$py" -c 'import torch, numpy, safetensors, transformers' >/dev/null 2>&1; then
  echo "SKIP: transformers not installed (scripts/install-hf.sh)"
  exit 77
fi
exec "$py" "$here/$test" "$bin" "${@:4}"
