#!/usr/bin/python3
"""PEFT adapters whose target_modules are module paths: PEFT 0.22's
"all-linear" saves the full name of every matched module
("model.layers.0.self_attn.q_proj", ...; PEFT 0.8 saved the bare names).
For a Llama (GQA, all seven projections) and a GPT-2 (Conv1D; c_proj is
attention's and the MLP's), get_peft_model(target_modules="all-linear")
over a base saved with transformers, random non-zero factors, saved with
save_pretrained; then `zoffload eval --adapter` gives PeftModel's mean loss
(eval mode, float64) within 1e-5 relative for:
  1. the adapter as this PEFT saved it (full paths under PEFT >= 0.22,
     checked there; bare names before);
  2. its adapter_config.json rewritten with every block Linear's full name
     (the model's named_modules: what PEFT 0.22 writes), so CI's pinned PEFT
     checks the path form too;
  3. the same with the paths' block-relative suffixes ("self_attn.q_proj").
The adapter changes PEFT's loss (the check sees it).
Refusals, by name: a set covering a module in some blocks only (layer 1's
q_proj left out; GPT-2's attn.c_proj without mlp.c_proj), naming the first
missing path and layers_to_transform (per-layer targets are not built); a
path no block module has (layer 5 of a 2-layer model, model.embed_tokens).

Usage: tests/hf/run.sh ZOFFLOAD REPO test_peft_paths.py (skips without peft);
PEFT 0.22 live: ZO_HF_PYTHON=/work/hf5-venv/bin/python tests/hf/run.sh ...
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zo_hf import check, hf_mean_loss, main, random_tokens, rel  # noqa: E402

import torch  # noqa: E402

try:
    import peft
    from peft import LoraConfig
except ImportError:
    print("SKIP: peft not installed (scripts/install-hf.sh)")
    sys.exit(77)
from test_peft_eval import B, NB, T, V, gpt2, llama, make_adapter, rewrite, save_base, write_config, zo_eval  # noqa

LOSS_RTOL = 1e-5


def block_linears(model):
    """Full names of the blocks' Linear (and GPT-2 Conv1D) modules: all-linear
    without the head."""
    from transformers.pytorch_utils import Conv1D
    return sorted(n for n, m in model.named_modules()
                  if isinstance(m, (torch.nn.Linear, Conv1D)) and n.split(".")[-1] != "lm_head")


def suffixes(paths):
    """"model.layers.3.self_attn.q_proj" -> "self_attn.q_proj" (distinct)."""
    out = []
    for p in paths:
        parts = p.split(".")
        i = max(k for k, s in enumerate(parts) if s.isdigit())
        s = ".".join(parts[i + 1:])
        if s not in out:
            out.append(s)
    return out


def peft_is_022():
    return tuple(int(x) for x in peft.__version__.split(".")[:2]) >= (0, 22)


CASES = [
    ("llama", "Llama GQA, all-linear", lambda: llama(31), dict(r=4, lora_alpha=8)),
    ("gpt2", "GPT-2 (Conv1D), all-linear", lambda: gpt2(33), dict(r=4, lora_alpha=8, fan_in_fan_out=True)),
]


def paths(binary, tmp):
    _, tokens, tok_path = random_tokens(tmp, V, 4096)
    config = write_config(tmp, tok_path, "paths")
    for i, (kind, what, make, kw) in enumerate(CASES):
        print(f"== {what} (PEFT {peft.__version__})")
        base_dir, ad_dir = os.path.join(tmp, f"base-{i}"), os.path.join(tmp, f"adapter-{i}")
        model = make()
        full = block_linears(model)
        save_base(model, base_dir, kind)
        pm = make_adapter(model, LoraConfig(target_modules="all-linear", task_type="CAUSAL_LM", **kw), ad_dir,
                          200 + i)
        with open(os.path.join(ad_dir, "adapter_config.json")) as f:
            saved = json.load(f)["target_modules"]
        print(f"     saved target_modules: {sorted(saved)}")
        if peft_is_022():
            check(sorted(saved) == full, f"{what}: PEFT {peft.__version__} saves all-linear as the full paths")
        pm.double()
        want = hf_mean_loss(pm, tokens, NB, B, T)
        with pm.disable_adapter():
            want_base = hf_mean_loss(pm, tokens, NB, B, T)
        check(rel(want_base, want) > 100 * LOSS_RTOL,
              f"{what}: the adapter changes PEFT's loss ({want_base:.6f} -> {want:.6f}): the check sees it")
        forms = [("as saved", ad_dir),
                 ("full paths", rewrite(ad_dir, os.path.join(tmp, f"ad-full-{i}"),
                                        config=lambda c: c.update(target_modules=full))),
                 ("suffixes", rewrite(ad_dir, os.path.join(tmp, f"ad-suffix-{i}"),
                                      config=lambda c: c.update(target_modules=suffixes(full))))]
        for form, d in forms:
            got, out = zo_eval(binary, config, "--checkpoint", base_dir, "--adapter", d)
            print(f"     {form}: zoffload {got}, PEFT {want:.9f}")
            check(got is not None and rel(got, want) <= LOSS_RTOL,
                  f"{what}, target_modules {form}: zoffload eval --adapter equals PeftModel's loss "
                  f"({got} vs {want:.6f}){'' if got is not None else ': ' + out.strip()[-400:]}")
        refusals(binary, config, kind, base_dir, ad_dir, full, tmp, i)


def refusals(binary, config, kind, base_dir, ad_dir, full, tmp, i):
    def refused(what, targets, *needles):
        d = rewrite(ad_dir, os.path.join(tmp, f"ad-ref-{i}"), config=lambda c: c.update(target_modules=targets))
        got, out = zo_eval(binary, config, "--checkpoint", base_dir, "--adapter", d)
        ok = got is None and all(n in out for n in needles)
        check(ok, f"{what}: refused naming {', '.join(needles)}{'' if ok else ': ' + out.strip()[-400:]}")

    if kind == "llama":
        q1 = "model.layers.1.self_attn.q_proj"
        refused("q_proj in layer 0 only", [p for p in full if p != q1], q1, "\"q_proj\"", "layers_to_transform")
        refused("layer 0's modules only", [p for p in full if ".layers.1." not in p], q1, "layers_to_transform")
        refused("a layer past the model's 2", full + ["model.layers.5.self_attn.q_proj"],
                "\"model.layers.5.self_attn.q_proj\"", "lm_head")
        refused("the embedding", full + ["model.embed_tokens"], "\"model.embed_tokens\"")
    else:
        refused("attention's c_proj without the MLP's", [p for p in full if p.endswith("attn.c_attn") or
                                                         p.endswith("attn.c_proj")] + ["mlp.c_fc"],
                "transformer.h.0.mlp.c_proj", "\"c_proj\"", "layers_to_transform")


if __name__ == "__main__":
    sys.exit(main(__doc__, (paths,)))
