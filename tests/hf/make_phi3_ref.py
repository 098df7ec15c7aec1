#!/usr/bin/env python3
"""Writes tests/hf/ref/phi3/, the truth test_phi3.py uses where the
installed transformers has no Phi-3 (the pinned 4.36): run it with
transformers 5 (scripts/install-hf5.sh), from the same functions the test
uses with transformers' Phi-3 itself:
  untied/, tied/      each model's directory as save_pretrained writes it
                      (config.json, model.safetensors, float32)
  tokens.u16          the token file (little-endian u16)
  <head>-trained.safetensors  the parameters after the torch loop's ten steps
                      (float32 of the float64 loop)
  expected.json       the versions that made them, and per head the eval loss,
                      the loss with sliding_window null, every step's loss and
                      gradient norm, the trained model's eval loss.
Usage: ZO_HF_PYTHON-style: build/hf5-venv/bin/python tests/hf/make_phi3_ref.py
"""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_phi3 as q  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402


def main():
    if not q.HAVE_PHI3:
        sys.exit(f"transformers {transformers.__version__} has no Phi-3: run with transformers 5")
    torch.set_num_threads(min(4, os.cpu_count() or 1))
    shutil.rmtree(q.REF, ignore_errors=True)
    os.makedirs(q.REF)
    q.make_tokens().astype("<u2").tofile(os.path.join(q.REF, "tokens.u16"))
    out = {"made_by": "tests/hf/make_phi3_ref.py", "transformers": transformers.__version__,
           "torch": torch.__version__, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for tied in (False, True):
            label = "tied" if tied else "untied"
            d, _, exp = q.truth(tmp, tied)
            shutil.copytree(d, os.path.join(q.REF, label))
            save_file({k: v.float().contiguous() for k, v in exp["trained"].items()},
                      os.path.join(q.REF, f"{label}-trained.safetensors"), metadata={"format": "pt"})
            out["models"][label] = {k: exp[k] for k in ("eval_loss", "eval_loss_no_window", "steps",
                                                         "trained_eval_loss")}
    with open(os.path.join(q.REF, "expected.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {q.REF} with transformers {transformers.__version__}, torch {torch.__version__}")


if __name__ == "__main__":
    main()
