#!/usr/bin/env python3
"""Writes tests/hf/ref/phi3-lora/, the truth test_phi3_lora.py uses where
the installed transformers has no Phi-3 or no peft (the pinned 4.36): run
it with transformers 5 and peft (scripts/install-hf5.sh, then pip install
peft into that environment), from the same functions the test uses live,
over the committed base tests/hf/ref/phi3/untied and its tokens.u16:
  adapter/                 PEFT's adapter directory (save_pretrained), its
                           base_model_name_or_path made repository-relative
  trained.safetensors      PEFT's adapter after the ten AdamW steps (float32
                           of the float64 loop)
  expected.json            the versions that made them; the eval losses of
                           the base and of the adapter, PeftModel's greedy
                           tokens (and near-tie step), every step's loss and
                           gradient norm, the trained model's eval loss.
Usage: build/hf5-venv/bin/python tests/hf/make_phi3_lora_ref.py
"""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_phi3_lora as q  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402


def main():
    if not q.LIVE:
        sys.exit(f"transformers {transformers.__version__} without Phi-3, or no peft: run with transformers 5 and peft")
    torch.set_num_threads(min(4, os.cpu_count() or 1))
    shutil.rmtree(q.REF, ignore_errors=True)
    os.makedirs(q.REF)
    with tempfile.TemporaryDirectory() as tmp:
        ad, _, exp = q.truth(tmp)
        out_ad = os.path.join(q.REF, "adapter")
        os.makedirs(out_ad)
        for n in ("adapter_config.json", "adapter_model.safetensors"):
            shutil.copy(os.path.join(ad, n), out_ad)
    p = os.path.join(out_ad, "adapter_config.json")
    with open(p) as f:
        cfg = json.load(f)
    cfg["base_model_name_or_path"] = "tests/hf/ref/phi3/untied"
    with open(p, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    save_file({k: v.float().contiguous() for k, v in exp["trained"].items()},
              os.path.join(q.REF, "trained.safetensors"), metadata={"format": "pt"})
    out = {"made_by": "tests/hf/make_phi3_lora_ref.py", "transformers": transformers.__version__,
           "peft": q.peft.__version__, "torch": torch.__version__}
    out.update({k: exp[k] for k in ("eval_loss", "base_eval_loss", "greedy", "tie_at", "steps", "trained_eval_loss")})
    with open(os.path.join(q.REF, "expected.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {q.REF} with transformers {transformers.__version__}, peft {q.peft.__version__}")


if __name__ == "__main__":
    main()
