#!/usr/bin/python3
"""Writes tests/reference/llama_tiny.safetensors and llama_tiny_tied.safetensors:
two tiny Llamas (grouped-query attention, rotary embeddings, RMSNorm, SwiGLU
MLP) with fixed random weights, one forward/backward (logits, loss, every
parameter's gradient) and ten AdamW steps with gradient clipping and 2-step
accumulation, all computed by PyTorch in fp32. Each file is a safetensors file
holding the initial parameters under their Hugging Face names and layouts plus
the results; tests/reference/README.md lists every tensor.

Run with Debian's python3 (python3-torch 1.13; no transformers needed):
    /usr/bin/python3 tests/reference/make_llama_reference.py
Options: --out-dir DIR (default: this folder), --check (also run the whole
computation in float64 and print how far fp32 is from it, to size the C test's
tolerances). tests/reference/llama_hf_check.py proves the model below is
transformers' LlamaForCausalLM (4.36) by comparing logits.

The model is written in plain torch ops so every convention is visible and
matches Hugging Face's LlamaForCausalLM exactly: nn.Linear weights (out, in)
without biases; RMSNorm weight * (x * rsqrt(mean(x^2) + eps)); rotary
embeddings in HF's rotate_half layout (the two halves of a head, not
interleaved pairs); kv head g serves query heads g*NH/NKV .. (g+1)*NH/NKV-1
(repeat_kv); causal softmax attention divided by sqrt(head_dim); MLP
down(silu(gate(x)) * up(x)); lm head untied, or tied to embed_tokens.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_common import compare, lr_at, make_tokens  # noqa: E402

FORMAT = "zoffload-llama-reference"
VERSION = "1"

# Odd sizes so that SIMD tails run and nothing is a power of two: C = 48 with
# 6 query heads of 8 over 2 kv heads (3 query heads per kv head), an MLP width
# of 76 (not a multiple of 8), V = 101 (not padded in these files: the C side
# pads if it wants to), T = 11 < max_position_embeddings. The tied variant has
# one layer, 3 kv heads (2 query heads per kv head) and lm_head = embed_tokens.
MODELS = {
    "llama_tiny": dict(num_hidden_layers=2, hidden_size=48, num_attention_heads=6, num_key_value_heads=2,
                       intermediate_size=76, vocab_size=101, max_position_embeddings=16, rms_norm_eps=1e-5,
                       rope_theta=10000.0, tie_word_embeddings=False, seed=1341,
                       max_norm=2.5),  # clips steps 4, 6-10; steps 1-3, 5 stay below it
    "llama_tiny_tied": dict(num_hidden_layers=1, hidden_size=48, num_attention_heads=6, num_key_value_heads=3,
                            intermediate_size=76, vocab_size=101, max_position_embeddings=16, rms_norm_eps=1e-5,
                            rope_theta=10000.0, tie_word_embeddings=True, seed=1356,
                            max_norm=1.5),  # clips steps 1, 5-10; steps 2-4 stay below it
}
B, T = 3, 11
# The seeds. AdamW's first step moves an element by lr * g / (|g| + eps): for
# an element whose gradient cancels to within ~1e-7 of zero by chance, fp32
# rounding decides the size of that step (seed 1337 had one gate_proj element
# that ends 1.3e-4 apart in fp32 and float64). These seeds are ones, among
# 1337..1360, whose final parameters are within 1e-5 of the float64 run, with
# every step's gradient norm at least 1% away from max_norm, so the reference
# measures the engine and not rounding luck.

# Training run: the GPT-2 reference's hyperparameters and schedule. Python
# doubles, written as such into the metadata, so a reader gets the exact values
# the optimizer used.
N_STEPS = 10
GRAD_ACCUM = 2
LR = 1e-2
MIN_LR = 1e-3
WARMUP_STEPS = 3
BETA1, BETA2 = 0.9, 0.95
EPS = 1e-8
WEIGHT_DECAY = 0.1


def head_dim(cfg):
    return cfg["hidden_size"] // cfg["num_attention_heads"]


def param_specs(cfg):
    """(name, shape, decay) in Hugging Face's module order and layouts:
    nn.Linear weights are (out_features, in_features). AdamW decays every 2-D
    tensor (embeddings, lm_head, projections), never the RMSNorm weights."""
    C, V, I = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    NH, NKV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg)
    specs = [("model.embed_tokens.weight", (V, C))]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        specs += [
            (p + "input_layernorm.weight", (C,)),
            (p + "self_attn.q_proj.weight", (NH * hd, C)),
            (p + "self_attn.k_proj.weight", (NKV * hd, C)),
            (p + "self_attn.v_proj.weight", (NKV * hd, C)),
            (p + "self_attn.o_proj.weight", (C, NH * hd)),
            (p + "post_attention_layernorm.weight", (C,)),
            (p + "mlp.gate_proj.weight", (I, C)),
            (p + "mlp.up_proj.weight", (I, C)),
            (p + "mlp.down_proj.weight", (C, I)),
        ]
    specs.append(("model.norm.weight", (C,)))
    if not cfg["tie_word_embeddings"]:
        specs.append(("lm_head.weight", (V, C)))
    return [(n, s, len(s) == 2) for n, s in specs]


def init_params(cfg, gen):
    """N(0, 0.02) for every matrix, embeddings included; RMSNorm weights
    1 + N(0, 0.1) so that loading them wrongly (or as ones) changes the output.
    Float64 tensors holding float32 values, so the float64 rerun of --check
    starts from exactly the parameters the file holds."""
    out = {}
    for name, shape, _ in param_specs(cfg):
        if len(shape) == 2:
            p = 0.02 * torch.randn(shape, generator=gen, dtype=torch.float64)
        else:
            p = 1.0 + 0.1 * torch.randn(shape, generator=gen, dtype=torch.float64)
        out[name] = p.float().double()
    return out


def rms_norm(x, w, eps):
    """LlamaRMSNorm: statistics in fp32 (here: in the run's dtype, fp32 or
    float64), normalise, then times the weight."""
    variance = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(variance + eps))


def rotate_half(x):
    """HF's layout: a head's first half pairs with its second half."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(cfg, Tq, dtype):
    """cos, sin of (Tq, head_dim): inv_freq = 1 / theta^(2i / head_dim) and
    angle(pos, i) = pos * inv_freq[i], repeated for both halves of the head."""
    hd = head_dim(cfg)
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2).to(dtype) / hd))
    pos = torch.arange(Tq, dtype=dtype)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def repeat_kv(x, n_rep):
    """(B, NKV, T, hd) -> (B, NKV * n_rep, T, hd): query head h reads kv head
    h // n_rep."""
    Bq, nkv, Tq, hd = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(Bq, nkv, n_rep, Tq, hd).reshape(Bq, nkv * n_rep, Tq, hd)


def forward(cfg, p, idx, targets=None):
    """LlamaForCausalLM.forward over a dict of HF-named parameters: logits
    (B, T, V) and, with targets, the mean cross-entropy over all B*T tokens."""
    C, V = cfg["hidden_size"], cfg["vocab_size"]
    NH, NKV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg)
    eps = cfg["rms_norm_eps"]
    Bq, Tq = idx.shape
    dtype = p["model.embed_tokens.weight"].dtype
    cos, sin = rope_cos_sin(cfg, Tq, dtype)  # (T, hd), broadcast over (B, heads)
    mask = torch.ones(Tq, Tq, dtype=torch.bool).tril()
    x = F.embedding(idx, p["model.embed_tokens.weight"])
    for l in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{l}."
        h = rms_norm(x, p[pre + "input_layernorm.weight"], eps)
        q = F.linear(h, p[pre + "self_attn.q_proj.weight"]).view(Bq, Tq, NH, hd).transpose(1, 2)
        k = F.linear(h, p[pre + "self_attn.k_proj.weight"]).view(Bq, Tq, NKV, hd).transpose(1, 2)
        v = F.linear(h, p[pre + "self_attn.v_proj.weight"]).view(Bq, Tq, NKV, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = repeat_kv(k, NH // NKV)
        v = repeat_kv(v, NH // NKV)
        att = (q @ k.transpose(2, 3)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().reshape(Bq, Tq, NH * hd)
        x = x + F.linear(y, p[pre + "self_attn.o_proj.weight"])
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        gate = F.linear(h, p[pre + "mlp.gate_proj.weight"])
        up = F.linear(h, p[pre + "mlp.up_proj.weight"])
        x = x + F.linear(F.silu(gate) * up, p[pre + "mlp.down_proj.weight"])
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else p["lm_head.weight"]
    logits = F.linear(x, head)
    if targets is None:
        return logits, None
    return logits, F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


def run(cfg, init, dtype, data, verbose):
    """Forward/backward on the reference batch, then the training run from the
    same initial parameters. Returns float64 numpy arrays and floats."""
    specs = param_specs(cfg)
    names = [n for n, _, _ in specs]
    params = {n: init[n].to(dtype).clone().requires_grad_(True) for n in names}
    res = {}

    logits, loss = forward(cfg, params, data["inputs"], data["targets"])
    loss.backward()
    res["logits"] = logits.detach().reshape(B * T, -1).double().numpy()
    res["loss"] = loss.item()
    res["grads"] = {n: params[n].grad.detach().double().numpy().copy() for n in names}

    for n in names:
        params[n].grad = None
    plist = [params[n] for n in names]
    groups = [
        {"params": [params[n] for n, _, d in specs if d], "weight_decay": WEIGHT_DECAY},
        {"params": [params[n] for n, _, d in specs if not d], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=LR, betas=(BETA1, BETA2), eps=EPS, foreach=False)
    res["step_losses"], res["lrs"], res["norms"] = [], [], []
    for step in range(1, N_STEPS + 1):
        opt.zero_grad(set_to_none=True)
        micro = []
        for k in range(GRAD_ACCUM):
            i = (step - 1) * GRAD_ACCUM + k
            _, loss = forward(cfg, params, data["train_inputs"][i], data["train_targets"][i])
            (loss / GRAD_ACCUM).backward()
            micro.append(loss.item())
        # the global L2 norm over all gradients, before clipping; torch scales
        # by min(1, max_norm / (norm + 1e-6))
        norm = torch.nn.utils.clip_grad_norm_(plist, cfg["max_norm"]).item()
        coef = min(1.0, cfg["max_norm"] / (norm + 1e-6))
        lr_t = lr_at(step, LR, MIN_LR, WARMUP_STEPS, N_STEPS)
        for g in opt.param_groups:
            g["lr"] = lr_t
        opt.step()
        res["step_losses"].append(sum(micro) / GRAD_ACCUM)
        res["lrs"].append(lr_t)
        res["norms"].append(norm)
        if verbose:
            print(f"  step {step:2d}: loss {res['step_losses'][-1]:.6f} (micro {micro[0]:.6f} {micro[1]:.6f})"
                  f" lr {lr_t:.6e} grad norm {norm:.5f} "
                  + (f"CLIPPED (coef {coef:.4f})" if coef < 1.0 else "not clipped"))
    res["final"] = {n: params[n].detach().double().numpy().copy() for n in names}
    return res


def metadata_config(cfg):
    """Every shape and hyperparameter: the model's under Hugging Face's
    config.json names, then the batch and the training run's."""
    model = {k: cfg[k] for k in ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads")}
    model["head_dim"] = head_dim(cfg)
    model.update({k: cfg[k] for k in ("intermediate_size", "vocab_size", "max_position_embeddings",
                                      "rms_norm_eps", "rope_theta", "tie_word_embeddings")})
    model.update(model_type="llama", hidden_act="silu", attention_bias=False)
    model.update(B=B, T=T, n_steps=N_STEPS, grad_accum=GRAD_ACCUM, lr=LR, min_lr=MIN_LR,
                 warmup_steps=WARMUP_STEPS, total_steps=N_STEPS, schedule="warmup_cosine", beta1=BETA1,
                 beta2=BETA2, eps=EPS, weight_decay=WEIGHT_DECAY, max_norm=cfg["max_norm"], seed=cfg["seed"])
    return model


def write_safetensors(path, tensors, metadata):
    """tensors: (name, numpy array of <f4 or <i4) in file order. Header: JSON
    with "__metadata__" first and the tensors in file order, padded with
    spaces so the data starts 8-byte aligned (as the safetensors library
    writes it)."""
    dtypes = {np.dtype("<f4"): "F32", np.dtype("<i4"): "I32"}
    header = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name, arr in tensors:
        arr = np.ascontiguousarray(arr)
        blob = arr.tobytes()
        header[name] = {"dtype": dtypes[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    blob = struct.pack("<Q", len(text)) + text + b"".join(blobs)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(blob)
    os.replace(tmp, path)
    return len(blob)


def file_tensors(cfg, init, data, res):
    f32 = lambda a: np.asarray(a, dtype="<f4")
    i32 = lambda a: np.asarray(a.numpy(), dtype="<i4")
    names = [n for n, _, _ in param_specs(cfg)]
    out = [(n, f32(init[n].numpy())) for n in names]
    out += [("ref.inputs", i32(data["inputs"])), ("ref.targets", i32(data["targets"])),
            ("ref.logits", f32(res["logits"])), ("ref.loss", f32([res["loss"]]))]
    out += [("grad." + n, f32(res["grads"][n])) for n in names]
    out += [("train.inputs", i32(data["train_inputs"])), ("train.targets", i32(data["train_targets"])),
            ("train.lr", f32(res["lrs"])), ("train.grad_norm", f32(res["norms"])),
            ("train.loss", f32(res["step_losses"]))]
    out += [("final." + n, f32(res["final"][n])) for n in names]
    return out


def rel(a, b):
    """worst |a - b| / |b| over paired scalars."""
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def make_one(name, cfg, out_dir, check):
    torch.manual_seed(cfg["seed"])
    gen = torch.Generator().manual_seed(cfg["seed"])
    specs = param_specs(cfg)
    init = init_params(cfg, gen)
    V = cfg["vocab_size"]
    inputs, targets = make_tokens(gen, 1, V, B, T, learnable=False)
    tr_in, tr_tg = make_tokens(gen, N_STEPS * GRAD_ACCUM, V, B, T, learnable=True)
    data = dict(inputs=inputs[0], targets=targets[0], train_inputs=tr_in, train_targets=tr_tg)

    n_params = sum(int(np.prod(s)) for _, s, _ in specs)
    print(f"{name}: {metadata_config(cfg)}\n  {n_params} parameters in {len(specs)} tensors")
    res = run(cfg, init, torch.float32, data, verbose=True)
    clipped = [i + 1 for i, n in enumerate(res["norms"]) if n + 1e-6 > cfg["max_norm"]]
    margin = min(abs(n - cfg["max_norm"]) / cfg["max_norm"] for n in res["norms"])
    print(f"  reference loss {res['loss']:.6f}; clipping (max_norm {cfg['max_norm']}) on steps {clipped}; "
          f"every norm >= {100 * margin:.1f}% away from max_norm")
    metadata = {"format": FORMAT, "version": VERSION,
                "config": json.dumps(metadata_config(cfg), separators=(", ", ": "))}
    path = os.path.join(out_dir, name + ".safetensors")
    nbytes = write_safetensors(path, file_tensors(cfg, init, data, res), metadata)
    print(f"  wrote {path} ({nbytes} bytes)")

    if check:
        ref = run(cfg, init, torch.float64, data, verbose=False)
        names = [n for n, _, _ in specs]
        print("  fp32 vs float64 (max |diff| / max |ref| per tensor; relative for scalars):")
        print(f"    logits {compare(res['logits'], ref['logits']):.2e}")
        print(f"    loss   {rel([res['loss']], [ref['loss']]):.2e}")
        worst = max((compare(res['grads'][n], ref['grads'][n]), n) for n in names)
        print(f"    grads  worst {worst[0]:.2e} ({worst[1]})")
        print(f"    step losses worst {rel(res['step_losses'], ref['step_losses']):.2e}")
        print(f"    grad norms worst {rel(res['norms'], ref['norms']):.2e}")
        worst = max((compare(res['final'][n], ref['final'][n]), n) for n in names)
        print(f"    final params worst {worst[0]:.2e} ({worst[1]}); worst absolute "
              f"{max(np.abs(res['final'][n] - ref['final'][n]).max() for n in names):.2e}")
        moved = max(np.abs(res['final'][n] - init[n].numpy()).max() for n in names)
        print(f"    largest parameter change over the run {moved:.2e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)  # reproducible reductions
    for name, cfg in MODELS.items():
        make_one(name, cfg, args.out_dir, args.check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
