#!/usr/bin/python3
"""zoffload <-> Hugging Face transformers interoperability, end to end.

  engine -> transformers: trains a tiny byte-level GPT-2 with `zoffload train`,
     loads the final checkpoint directory with GPT2LMHeadModel.from_pretrained
     and checks
       1. the file: exactly the Hugging Face GPT-2 tensor names and shapes
          (Conv1D (in, out), wte (V, C), no lm_head), F32, metadata format "pt",
          config.json matching the run's model; transformers reports no missing
          or unexpected key and ties lm_head to wte;
       2. logits: transformers' logits on a fixed input equal those of an
          independent plain-torch GPT-2 forward over the raw safetensors
          (float64, so only the layout and conventions can differ);
       3. the engine: `zoffload eval` loss over the validation windows equals
          transformers' mean cross-entropy over the same windows (rebuilt from
          the token file by the rule of include/engine/zo/data.h, shuffle off) to 1e-5
          relative, and `zoffload sample --top-k 1` (greedy) generates the
          same bytes as transformers' argmax.
  transformers -> engine: a randomly initialised GPT2LMHeadModel (vocabulary
     317, not a multiple of 64; every weight perturbed so no bias is zero and no
     layernorm is the identity) saved with save_pretrained is evaluated by
     `zoffload eval` through model.init_from (the safetensors file, and the
     same weights in the hub's layout: no "transformer." prefix, with the
     h.N.attn.bias mask buffers) and --checkpoint (the directory); the loss
     must equal transformers' to 1e-5
     relative, and `zoffload train` from model.init_from starts at that loss.

Usage: PYTHONPATH=build/hf-site /usr/bin/python3 tests/hf/test_transformers_logits.py ZOFFLOAD [--keep]
(tests/hf/run.sh does this and skips when transformers is missing; see
scripts/install-hf.sh). Exit 0 when every check passes, 1 otherwise.
"""
import json
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zo_hf import (check, check_greedy_sample, check_safetensors_layout, eval_loss_cli,  # noqa: E402
                   hf_mean_loss, main, random_tokens, rel, train_checkpoint, train_step0_loss, zo)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

LOSS_RTOL = 1e-5   # engine fp32 loss vs transformers float64 loss
LOGIT_ATOL = 1e-9  # transformers float64 vs plain-torch float64 logits

# The engine -> transformers run: byte-level, head count not a power of two,
# head size 16, T < max_seq_len.
MODEL = dict(n_layer=2, n_head=3, n_embd=48, vocab_size=256, max_seq_len=64)
B, T, STEPS = 4, 32, 300  # about a second; enough for greedy text that is not all spaces
EVAL_BATCHES = 10


def plain_gpt2_logits(w, idx, n_layer, n_head, eps=1e-5):
    """GPT-2 forward written from the Hugging Face file layout alone: Conv1D
    weights (in, out) used as x @ W + b, GELU tanh approximation, causal
    attention scaled by 1/sqrt(head size), lm head tied to wte."""
    bsz, t = idx.shape
    x = w["transformer.wte.weight"][idx] + w["transformer.wpe.weight"][:t]
    c = x.shape[-1]
    hs = c // n_head
    mask = torch.ones(t, t, dtype=torch.bool).tril()

    def ln(v, name):
        return F.layer_norm(v, (c,), w[name + ".weight"], w[name + ".bias"], eps)

    def conv1d(v, name):
        return v @ w[name + ".weight"] + w[name + ".bias"]

    for layer in range(n_layer):
        p = f"transformer.h.{layer}."
        q, k, v = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn").split(c, dim=-1)
        q, k, v = (z.view(bsz, t, n_head, hs).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(bsz, t, c)
        x = x + conv1d(y, p + "attn.c_proj")
        h = F.gelu(conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc"), approximate="tanh")
        x = x + conv1d(h, p + "mlp.c_proj")
    return ln(x, "transformer.ln_f") @ w["transformer.wte.weight"].T


def expected_shapes(cfg):
    c, v, tmax = cfg["n_embd"], cfg["vocab_size"], cfg["max_seq_len"]
    s = {"transformer.wte.weight": (v, c), "transformer.wpe.weight": (tmax, c),
         "transformer.ln_f.weight": (c,), "transformer.ln_f.bias": (c,)}
    for layer in range(cfg["n_layer"]):
        p = f"transformer.h.{layer}."
        s.update({p + "ln_1.weight": (c,), p + "ln_1.bias": (c,),
                  p + "attn.c_attn.weight": (c, 3 * c), p + "attn.c_attn.bias": (3 * c,),
                  p + "attn.c_proj.weight": (c, c), p + "attn.c_proj.bias": (c,),
                  p + "ln_2.weight": (c,), p + "ln_2.bias": (c,),
                  p + "mlp.c_fc.weight": (c, 4 * c), p + "mlp.c_fc.bias": (4 * c,),
                  p + "mlp.c_proj.weight": (4 * c, c), p + "mlp.c_proj.bias": (c,)})
    return s


def corpus(n_bytes):
    """Deterministic English-like text: learnable in a few steps, every
    window different."""
    rng = random.Random(20240520)
    words = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge "
             "boxing matches and packed jugs of liquor sit in my box near the old mill").split()
    out = []
    size = 0
    while size < n_bytes:
        s = " ".join(rng.choice(words) for _ in range(rng.randint(4, 12)))
        s = s[0].upper() + s[1:] + rng.choice([". ", "! ", "? ", ".\n"])
        out.append(s)
        size += len(s)
    return "".join(out)


def engine_to_transformers(binary, tmp):
    print("== engine -> transformers")
    text = os.path.join(tmp, "corpus.txt")
    with open(text, "w") as f:
        f.write(corpus(40000))
    train_bin, val_bin = os.path.join(tmp, "train.bin"), os.path.join(tmp, "val.bin")
    zo(binary, "prepare", "--out-train", train_bin, "--out-val", val_bin, "--val-fraction", "0.15", text)
    ckdir = os.path.join(tmp, "ck")
    config = os.path.join(tmp, "tiny.json")
    ck = train_checkpoint(binary, config, dict(arch="gpt2", **MODEL), B, T, STEPS, train_bin, val_bin, 10,
                          os.path.join(tmp, "metrics.jsonl"), ckdir)
    if ck is None:
        return

    # 1. The file and config.json.
    st_path = os.path.join(ck, "model.safetensors")
    check_safetensors_layout(st_path, expected_shapes(MODEL), "GPT-2", "Conv1D (in, out)")
    with open(os.path.join(ck, "config.json")) as f:
        hc = json.load(f)
    got = {k: hc.get(k) for k in ("model_type", "n_layer", "n_head", "n_embd", "vocab_size", "n_positions")}
    exp = {"model_type": "gpt2", "n_layer": MODEL["n_layer"], "n_head": MODEL["n_head"],
           "n_embd": MODEL["n_embd"], "vocab_size": MODEL["vocab_size"], "n_positions": MODEL["max_seq_len"]}
    check(got == exp, f"config.json describes the model: {got}")

    model, info = GPT2LMHeadModel.from_pretrained(ck, torch_dtype=torch.float32, output_loading_info=True)
    model.eval()
    lost = {k: v for k, v in info.items() if v}
    check(not lost, f"from_pretrained reports no missing/unexpected/mismatched keys {lost}")
    check(model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(),
          "lm_head is tied to transformer.wte")

    # 2. Logits: transformers vs the plain forward, float64, on a fixed input.
    g = torch.Generator().manual_seed(7)
    idx = torch.randint(0, MODEL["vocab_size"], (2, MODEL["max_seq_len"]), generator=g)
    raw = {k: v.double() for k, v in load_file(st_path).items()}
    ref = plain_gpt2_logits(raw, idx, MODEL["n_layer"], MODEL["n_head"])
    model64 = GPT2LMHeadModel.from_pretrained(ck, torch_dtype=torch.float64).eval()
    with torch.no_grad():
        hf64 = model64(input_ids=idx).logits
        hf32 = model(input_ids=idx).logits
    d64 = (hf64 - ref).abs().max().item()
    d32 = (hf32.double() - ref).abs().max().item()
    print(f"     logits (2 x {MODEL['max_seq_len']} x {MODEL['vocab_size']}): max |hf64 - plain64| = {d64:.3g}, "
          f"max |hf32 - plain64| = {d32:.3g}, max |logit| = {ref.abs().max().item():.3g}")
    check(d64 <= LOGIT_ATOL, f"transformers float64 logits equal the plain GPT-2 forward ({d64:.3g} <= {LOGIT_ATOL})")
    check(d32 <= 1e-4, f"transformers float32 logits equal it to fp32 rounding ({d32:.3g} <= 1e-4)")

    # 3a. The engine's eval loss vs transformers over the same windows.
    val = np.fromfile(val_bin, dtype="<u2")
    z_loss, n = eval_loss_cli(binary, config, "--checkpoint", ck, "--batches", str(EVAL_BATCHES))
    hf_loss64 = hf_mean_loss(model64, val, n, B, T)
    hf_loss32 = hf_mean_loss(model, val, n, B, T)
    r = rel(z_loss, hf_loss64)
    print(f"     eval over {n} x ({B} x {T}) tokens of val.bin ({len(val)} tokens): zoffload {z_loss:.6f}, "
          f"transformers float64 {hf_loss64:.9f}, float32 {hf_loss32:.9f}; relative diff {r:.3g}")
    check(n == EVAL_BATCHES and r <= LOSS_RTOL,
          f"zoffload eval loss equals transformers' (rel {r:.3g} <= {LOSS_RTOL})")
    # The same windows, wrapping past the end of the file (N not a multiple of B*T).
    wrap = len(val) // (B * T) + 2
    z_wrap, n = eval_loss_cli(binary, config, "--checkpoint", ck, "--batches", str(wrap))
    hf_wrap = hf_mean_loss(model64, val, n, B, T)
    r = rel(z_wrap, hf_wrap)
    print(f"     eval over {n} batches (wraps the file): zoffload {z_wrap:.6f}, transformers {hf_wrap:.9f}; "
          f"relative diff {r:.3g}")
    check(r <= LOSS_RTOL, f"zoffload eval loss equals transformers' past the file's end (rel {r:.3g})")

    # 3b. Greedy generation: the engine's argmax token == transformers' argmax.
    check_greedy_sample(binary, config, ck, model64, "The quick ", 40, MODEL["max_seq_len"])


def transformers_to_engine(binary, tmp):
    print("== transformers -> engine (model.init_from)")
    V, n_layer, n_head, C, tmax = 317, 2, 4, 32, 48
    torch.manual_seed(11)
    hcfg = GPT2Config(vocab_size=V, n_positions=tmax, n_embd=C, n_layer=n_layer, n_head=n_head,
                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(hcfg).eval()
    # 0.2, not 0.02: a near-uniform model hides layout errors (a swapped or
    # transposed tensor moves the loss by less than the tolerance).
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.1 if "ln_" in name else 0.2))
    hfdir = os.path.join(tmp, "hf-model")
    model.save_pretrained(hfdir, safe_serialization=True)
    st_path = os.path.join(hfdir, "model.safetensors")
    check(os.path.isfile(st_path), "save_pretrained wrote model.safetensors")

    bt, b, t, n_batches = 3 * 20, 3, 20, 4
    _, tokens, tok_path = random_tokens(tmp, V, n_batches * bt + 1)
    config = os.path.join(tmp, "from-hf.json")
    cfg = {"train_micro_batch_size_per_gpu": b,
           "model": {"arch": "gpt2", "init_from": st_path, "n_layer": n_layer, "n_head": n_head, "n_embd": C,
                     "vocab_size": V, "max_seq_len": tmax},
           "data": {"train": tok_path, "val": tok_path, "format": "u16", "seq_len": t},
           "engine": {"device": "cpu"}, "checkpoint": {"dir": os.path.join(tmp, "none")}}
    with open(config, "w") as f:
        json.dump(cfg, f, indent=1)
    # The layout of the GPT-2 files published on the Hugging Face hub
    # (openai-community/gpt2 and its siblings): names without "transformer.",
    # and the attention mask buffers h.N.attn.bias (1, 1, n_positions,
    # n_positions) stored beside the weights (older files also
    # h.N.attn.masked_bias); transformers ignores those buffers on load.
    hub_path = os.path.join(tmp, "hub-layout.safetensors")
    sd = {k[len("transformer."):]: v.contiguous() for k, v in model.state_dict().items()
          if k.startswith("transformer.")}
    for layer in range(n_layer):
        sd[f"h.{layer}.attn.bias"] = torch.ones(tmax, tmax).tril().view(1, 1, tmax, tmax)
        sd[f"h.{layer}.attn.masked_bias"] = torch.tensor(-1e4)
    save_file(sd, hub_path, metadata={"format": "pt"})

    hf_loss = hf_mean_loss(model.double(), tokens, n_batches, b, t)
    for label, args in (("model.init_from = the safetensors file", ["--set", f"model.init_from={st_path}"]),
                        ("--checkpoint = the save_pretrained directory", ["--checkpoint", hfdir]),
                        ("model.init_from = a hub-layout file (no prefix, attn.bias buffers)",
                         ["--set", f"model.init_from={hub_path}"])):
        z_loss, n = eval_loss_cli(binary, config, *args, "--batches", str(n_batches), fatal=False)
        if z_loss is None:
            check(False, f"zoffload eval loads a transformers-saved model ({label}): {n}")
            continue
        r = rel(z_loss, hf_loss)
        print(f"     V={V}, {n} x ({b} x {t}) random tokens, {label}: zoffload {z_loss:.6f}, "
              f"transformers float64 {hf_loss:.9f}; relative diff {r:.3g}")
        check(n == n_batches and r <= LOSS_RTOL,
              f"zoffload eval of a transformers-saved model ({label}) equals transformers' loss (rel {r:.3g})")
    # Training starts from the transformers weights: its step-0 validation loss
    # (printed with 4 decimals, over the same 4 windows) is transformers' loss.
    z0 = train_step0_loss(binary, config)
    print(f"     zoffload train from model.init_from: step 0 val loss {z0:.4f}, transformers {hf_loss:.9f}")
    check(abs(z0 - hf_loss) <= 5.1e-5, "zoffload train starts from the transformers weights (step-0 val loss)")


if __name__ == "__main__":
    sys.exit(main(__doc__, (engine_to_transformers, transformers_to_engine)))
