#!/usr/bin/python3
"""Qwen3 (issue 50, piece 3): per-head RMSNorm of q and k before the rotary
embedding, head_dim 16 apart from hidden_size / num_attention_heads (8), 4
query heads over 2 key/value heads, vocabulary 131 (padded to 192), tied and
untied heads, every weight perturbed (the q/k norm weights off 1.0).

Truth: transformers' Qwen3ForCausalLM (eager attention, float64) where the
installed transformers has it (5.x through ZO_HF_PYTHON, scripts/install-hf5.sh);
otherwise (the pinned 4.36) the reference files under tests/hf/ref/qwen3/,
which make_qwen3_ref.py made with transformers 5 from the same functions
(expected.json names its versions): each model's directory as
save_pretrained wrote it, the token file, the losses and gradient norms of
the torch loop and its trained parameters.

For each head (untied, tied):
  1. `zoffload eval` of the directory gives transformers' mean loss to 1e-5
     relative; the same weights with q/k norm weights 1 give another loss
     (the check sees the norms).
  2. Ten AdamW steps (2 micro-batches a step, weight decay on the matrices,
     clipping at 1.0) from model.init_from track a torch loop on
     transformers' model: every step's loss and gradient norm to 1e-5
     relative, every parameter after the ten steps to 1e-4 of its tensor's
     largest element; with the parameters and the optimizer on the host
     (stage 3) and activation checkpointing, every step's loss and norm are
     the all-on-device run's, bit for bit.
  3. The checkpoint's config.json is Qwen3's (model_type qwen3,
     Qwen3ForCausalLM, head_dim 16, use_sliding_window false) and zoffload's
     loss on it is transformers' loss of the torch-trained model; with
     transformers' Qwen3, `zoffload export` of it loads as Qwen3ForCausalLM
     with no missing or unexpected key and logits equal to the torch-trained
     model's (1e-4 of the largest).
  4. LoRA: `zoffload train` with a lora section over all seven Qwen3
     projections runs two steps and writes an adapter holding each.

Usage: tests/hf/run.sh ZOFFLOAD REPO test_qwen3.py
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zo_family import Family, auto_model_from, zo_run  # noqa: E402
from zo_hf import check, main, rel  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

V, C, NH, NKV, HD, I, L, TMAX = 131, 32, 4, 2, 16, 40, 2, 64
B, T, K, STEPS = 3, 24, 2, 10
LR, BETAS, EPS, WD, MAX_NORM = 2e-3, (0.9, 0.95), 1e-8, 0.1, 1.0
LOSS_RTOL, PARAM_TOL, EVAL_BATCHES = 1e-5, 1e-4, 4
N_TOKENS = STEPS * K * B * T + 1
REF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref", "qwen3")
HEADS = ("untied", "tied")
HAVE_QWEN3 = hasattr(transformers, "Qwen3Config")
PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
FAM = Family("Qwen3", "Qwen3ForCausalLM", {"head_dim": HD, "use_sliding_window": False}, "qwen3", V, B, T, K, STEPS,
             LR, BETAS, EPS, WD, MAX_NORM, LOSS_RTOL, PARAM_TOL, EVAL_BATCHES, HAVE_QWEN3,
             "; q/k norms among them")


def make_model(tied):
    """A random Qwen3 (transformers' class), every weight perturbed."""
    from transformers import AutoModelForCausalLM, Qwen3Config
    torch.manual_seed(23 if tied else 11)
    cfg = Qwen3Config(attn_implementation="eager", vocab_size=V, hidden_size=C, intermediate_size=I,
                      num_hidden_layers=L, num_attention_heads=NH, num_key_value_heads=NKV, head_dim=HD,
                      max_position_embeddings=TMAX, rms_norm_eps=1e-6, tie_word_embeddings=tied,
                      use_sliding_window=False)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.3 if "norm" in name else 0.2))
    return model


def make_tokens():
    return np.random.default_rng(5).integers(0, V, size=N_TOKENS, dtype=np.uint16)


def unit_norms(d, out):
    """A copy of directory d with every q_norm / k_norm weight set to 1."""
    shutil.copytree(d, out)
    w = load_file(os.path.join(out, "model.safetensors"))
    for k in w:
        if k.endswith("q_norm.weight") or k.endswith("k_norm.weight"):
            w[k] = torch.ones_like(w[k])
    save_file(w, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    return out


def truth(tmp, tied):
    """What zoffload must match, for one head: (directory, tokens, expected)
    from transformers itself, or from the committed reference files."""
    label = "tied" if tied else "untied"
    if not HAVE_QWEN3:
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
    base = auto_model_from(unit_norms(d, os.path.join(tmp, f"hf-{label}-unit")))
    exp["eval_loss_unit_qk"] = FAM.hf_loss(base, tokens)
    exp["steps"] = FAM.torch_steps(model, tokens)
    exp["trained_eval_loss"] = FAM.hf_loss(model, tokens)
    exp["trained"] = {n: p.detach().clone() for n, p in model.named_parameters()}
    exp["model"] = model
    return d, tokens, exp


def qwen3(binary, tmp):
    for tied in (False, True):
        label = "tied" if tied else "untied"
        print(f"== Qwen3, {label} head, head_dim {HD} (hidden {C} / {NH} heads = {C // NH}), {NH} over {NKV} "
              f"key/value heads; truth: {'transformers ' + transformers.__version__ if HAVE_QWEN3 else REF}")
        d, tokens, exp = truth(tmp, tied)
        tok_path = os.path.join(tmp, "tokens.bin")
        tokens.astype("<u2").tofile(tok_path)
        config = FAM.write_config(tmp, tok_path)
        got, out = FAM.zo_eval(binary, config, d)
        check(got is not None and rel(got, exp["eval_loss"]) <= LOSS_RTOL,
              f"{label}: zoffload eval equals transformers' loss ({got} vs {exp['eval_loss']:.9f}) "
              f"{'' if got else out[-300:]}")
        unit, _ = FAM.zo_eval(binary, config, unit_norms(d, os.path.join(tmp, f"unit-{label}")))
        check(unit is not None and rel(unit, exp["eval_loss_unit_qk"]) <= LOSS_RTOL and
              rel(exp["eval_loss_unit_qk"], exp["eval_loss"]) > 100 * LOSS_RTOL,
              f"{label}: q/k norm weights of 1 give transformers' other loss ({unit} vs "
              f"{exp['eval_loss_unit_qk']:.9f}, perturbed {exp['eval_loss']:.9f}): the check sees the norms")
        ck = FAM.train_against(binary, tmp, label, d, config, exp)
        if ck:
            FAM.checkpoint_back(binary, tmp, label, ck, config, tokens, exp)


def lora(binary, tmp):
    print("== LoRA over Qwen3's seven projections")
    d = os.path.join(REF, "untied") if not HAVE_QWEN3 else os.path.join(tmp, "hf-untied")
    tok_path = os.path.join(tmp, "tokens.bin")
    ckdir = os.path.join(tmp, "ck-lora")
    config = FAM.write_config(tmp, tok_path, "lora.json", steps=2,
                          lora={"r": 4, "alpha": 8, "target_modules": list(PROJ)})
    rc, out = zo_run(binary, "train", config, "--set", f"model.init_from={d}", "--set", f"checkpoint.dir={ckdir}",
                     "--set", "checkpoint.every=2")
    check(rc == 0, f"zoffload train with a lora section runs on Qwen3 {out[-400:] if rc else ''}")
    if rc != 0:
        return
    w = load_file(os.path.join(ckdir, "checkpoint-2", "adapter_model.safetensors"))
    have = {p for p in PROJ for k in w if f".{p}.lora_A" in k}
    check(have == set(PROJ) and len(w) == 2 * len(PROJ) * L, f"the adapter holds A and B of every projection of "
          f"every layer ({len(w)} tensors; modules {sorted(have)})")


if __name__ == "__main__":
    sys.exit(main(__doc__, (qwen3, lora)))
