#!/usr/bin/python3
"""Phi-3 (issue 50, piece 2, the 4k configs): q, k, v fused in its files as
self_attn.qkv_proj and gate, up as mlp.gate_up_proj (our fused tensors, row
for row), a sliding window of 8 positions shorter than the 24-token
sequence, 4 query heads over 2 key/value heads, vocabulary 131 (padded to
192), tied and untied heads, every weight perturbed.

Truth: transformers' Phi3ForCausalLM (eager attention, float64) where the
installed transformers has it (5.x through ZO_HF_PYTHON, scripts/install-hf5.sh);
otherwise (the pinned 4.36, which has no Phi-3) the reference files under
tests/hf/ref/phi3/, which make_phi3_ref.py made with transformers 5 from the
same functions (expected.json names its versions): each model's directory as
save_pretrained wrote it, the token file, the losses and gradient norms of
the torch loop and its trained parameters.

For each head (untied, tied):
  1. `zoffload eval` of the directory gives transformers' mean loss to 1e-5
     relative; the same weights with sliding_window null give transformers'
     other loss (the check sees the window).
  2. Ten AdamW steps (2 micro-batches a step, weight decay on the matrices,
     clipping at 1.0) from model.init_from track a torch loop on
     transformers' model: every step's loss and gradient norm to 1e-5
     relative, every parameter after the ten steps to 1e-4 of its tensor's
     largest element (qkv_proj and gate_up_proj by their fused names); with
     the parameters and the optimizer on the host (stage 3) and activation
     checkpointing, every step's loss and norm are the all-on-device run's,
     bit for bit.
  3. The checkpoint's config.json is Phi-3's (model_type phi3,
     Phi3ForCausalLM, sliding_window 8) and zoffload's loss on it is
     transformers' loss of the torch-trained model; with transformers' Phi-3,
     `zoffload export` of it loads as Phi3ForCausalLM with no missing or
     unexpected key and logits equal to the torch-trained model's (1e-4 of
     the largest).
LoRA over Phi-3's fused projections: test_phi3_lora.py.

Usage: tests/hf/run.sh ZOFFLOAD REPO test_phi3.py
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zo_family import Family, auto_model_from  # noqa: E402
from zo_hf import check, main, rel  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

V, C, NH, NKV, I, L, TMAX, WIN = 131, 32, 4, 2, 40, 2, 64, 8
B, T, K, STEPS = 3, 24, 2, 10
LR, BETAS, EPS, WD, MAX_NORM = 2e-3, (0.9, 0.95), 1e-8, 0.1, 1.0
# Parameters after 10 AdamW steps: fp32 against float64, Adam's update
# magnifies the rounding of gradients near zero (an embedding row of a token
# seen once): worst 1.2e-5 of the tensor's largest element in release, 1.6e-4
# in the ASan build (other summation orders). The losses and norms (1e-5)
# are the tight check; the parameters' catches a misplaced row or tensor.
LOSS_RTOL, PARAM_TOL, EVAL_BATCHES = 1e-5, 5e-4, 4
N_TOKENS = STEPS * K * B * T + 1
REF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref", "phi3")
HEADS = ("untied", "tied")
HAVE_PHI3 = hasattr(transformers, "Phi3Config")
PROJ = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
FAM = Family("Phi-3", "Phi3ForCausalLM", {"sliding_window": WIN}, "phi3", V, B, T, K, STEPS, LR, BETAS, EPS, WD,
             MAX_NORM, LOSS_RTOL, PARAM_TOL, EVAL_BATCHES, HAVE_PHI3, ", fused names among them")


def make_model(tied):
    """A random Phi-3 (transformers' class), every weight perturbed (no
    padding index: its embedding row would get no gradient in torch)."""
    from transformers import AutoModelForCausalLM, Phi3Config
    torch.manual_seed(23 if tied else 11)
    cfg = Phi3Config(attn_implementation="eager", vocab_size=V, hidden_size=C, intermediate_size=I,
                     num_hidden_layers=L, num_attention_heads=NH, num_key_value_heads=NKV,
                     max_position_embeddings=TMAX, original_max_position_embeddings=TMAX, rms_norm_eps=1e-6,
                     tie_word_embeddings=tied, sliding_window=WIN, pad_token_id=None, bos_token_id=1,
                     eos_token_id=2)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.3 if "norm" in name else 0.2))
    return model


def make_tokens():
    return np.random.default_rng(5).integers(0, V, size=N_TOKENS, dtype=np.uint16)


def no_window(d, out):
    """A copy of directory d with sliding_window null (full attention)."""
    shutil.copytree(d, out)
    p = os.path.join(out, "config.json")
    with open(p) as f:
        j = json.load(f)
    j["sliding_window"] = None
    with open(p, "w") as f:
        json.dump(j, f, indent=1)
    return out


def truth(tmp, tied):
    """What zoffload must match, for one head: (directory, tokens, expected)
    from transformers itself, or from the committed reference files."""
    label = "tied" if tied else "untied"
    if not HAVE_PHI3:
        with open(os.path.join(REF, "expected.json")) as f:
            exp = json.load(f)
        tokens = np.fromfile(os.path.join(REF, "tokens.u16"), dtype="<u2")
        trained = load_file(os.path.join(REF, f"{label}-trained.safetensors"))
        return os.path.join(REF, label), tokens, dict(exp["models"][label], trained=trained)
    d, tokens = os.path.join(tmp, f"hf-{label}"), make_tokens()
    model = make_model(tied)
    model.save_pretrained(d, safe_serialization=True)
    model = model.double()
    exp = {"eval_loss": FAM.hf_loss(model, tokens)}
    base = auto_model_from(no_window(d, os.path.join(tmp, f"hf-{label}-full")))
    exp["eval_loss_no_window"] = FAM.hf_loss(base, tokens)
    exp["steps"] = FAM.torch_steps(model, tokens)
    exp["trained_eval_loss"] = FAM.hf_loss(model, tokens)
    exp["trained"] = {n: p.detach().clone() for n, p in model.named_parameters()}
    exp["model"] = model
    return d, tokens, exp


def phi3(binary, tmp):
    for tied in (False, True):
        label = "tied" if tied else "untied"
        print(f"== Phi-3, {label} head, window {WIN} of {T} positions, {NH} over {NKV} "
              f"key/value heads; truth: {'transformers ' + transformers.__version__ if HAVE_PHI3 else REF}")
        d, tokens, exp = truth(tmp, tied)
        tok_path = os.path.join(tmp, "tokens.bin")
        tokens.astype("<u2").tofile(tok_path)
        config = FAM.write_config(tmp, tok_path)
        got, out = FAM.zo_eval(binary, config, d)
        check(got is not None and rel(got, exp["eval_loss"]) <= LOSS_RTOL,
              f"{label}: zoffload eval equals transformers' loss ({got} vs {exp['eval_loss']:.9f}) "
              f"{'' if got else out[-300:]}")
        full, _ = FAM.zo_eval(binary, config, no_window(d, os.path.join(tmp, f"full-{label}")))
        check(full is not None and rel(full, exp["eval_loss_no_window"]) <= LOSS_RTOL and
              rel(exp["eval_loss_no_window"], exp["eval_loss"]) > 100 * LOSS_RTOL,
              f"{label}: sliding_window null gives transformers' other loss ({full} vs "
              f"{exp['eval_loss_no_window']:.9f}, window {WIN}: {exp['eval_loss']:.9f}): the check sees the window")
        ck = FAM.train_against(binary, tmp, label, d, config, exp)
        if ck:
            FAM.checkpoint_back(binary, tmp, label, ck, config, tokens, exp)


if __name__ == "__main__":
    sys.exit(main(__doc__, (phi3,)))
