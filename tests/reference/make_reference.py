#!/usr/bin/python3
"""Writes tests/reference/gpt2_tiny.bin: a tiny GPT-2 with fixed random weights,
one forward/backward (logits, loss, every parameter's gradient) and ten AdamW
steps with gradient clipping and 2-step accumulation, all computed by PyTorch
in fp32. The layout of the file is documented in tests/reference/README.md; the
parameter order and layout are zoffload's (engine/model/arch_gpt2.c), not PyTorch's.

Run with Debian's python3 (python3-torch):  /usr/bin/python3 make_reference.py
Options: --out PATH, --check (also run the whole computation in float64 and
print how far fp32 is from it, to size the C test's tolerances), --dump-acts
PATH (save the fp32 forward activations of the reference batch as .npz, to
locate a mismatch in the C engine).

The model is written in plain torch ops so every convention is visible:
Linear weights (out, in), LayerNorm eps 1e-5, GELU tanh approximation, causal
softmax attention with scale 1/sqrt(head_size), lm head tied to wte, no dropout.
"""
import argparse
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_common import compare, lr_at, make_tokens  # noqa: E402

MAGIC = b"ZOGPT2RF"
VERSION = 1
NAME_MAX = 64  # ZO_TENSOR_NAME_MAX

# Shapes chosen to catch mistakes: V not a multiple of 64 (padded to 128), a
# head count that is not a power of two, head size 12 and C = 36 (not multiples
# of 8 or 16, so SIMD remainders run), T < max_seq_len (wpe rows T.. unused).
CFG = dict(n_layer=2, n_head=3, n_embd=36, vocab_size=101, max_seq_len=16)
B, T = 3, 11
SEED = 1337

# Training run.
N_STEPS = 10
GRAD_ACCUM = 2
LR = 1e-2
MIN_LR_FRAC = 0.1
WARMUP_STEPS = 3
BETA1, BETA2 = 0.9, 0.95
EPS = 1e-8
WEIGHT_DECAY = 0.1
MAX_NORM = 1.2  # clips steps 1, 3, 6-10; steps 2, 4, 5 stay below it


def f32(x):
    """x rounded to float32, as the C side reads it from the header."""
    return float(np.float32(x))


def padded_vocab(v):
    return (v + 63) // 64 * 64


def param_specs(cfg):
    """(name, shape, decay) in zoffload's buffer order (gpt2_build_table):
    [wte (Vp, C), wpe (maxT, C)], per block the tensors of its block enum
    in declaration order, then ln_f. Shapes are our layout: Linear (out, in)."""
    C, L = cfg["n_embd"], cfg["n_layer"]
    Vp, maxT = padded_vocab(cfg["vocab_size"]), cfg["max_seq_len"]
    specs = [("transformer.wte.weight", (Vp, C)), ("transformer.wpe.weight", (maxT, C))]
    for l in range(L):
        h = f"transformer.h.{l}."
        specs += [
            (h + "ln_1.weight", (C,)),              # ln1w
            (h + "ln_1.bias", (C,)),                # ln1b
            (h + "attn.c_attn.weight", (3 * C, C)),  # qkvw
            (h + "attn.c_attn.bias", (3 * C,)),      # qkvb
            (h + "attn.c_proj.weight", (C, C)),      # attprojw
            (h + "attn.c_proj.bias", (C,)),          # attprojb
            (h + "ln_2.weight", (C,)),              # ln2w
            (h + "ln_2.bias", (C,)),                # ln2b
            (h + "mlp.c_fc.weight", (4 * C, C)),     # fcw
            (h + "mlp.c_fc.bias", (4 * C,)),         # fcb
            (h + "mlp.c_proj.weight", (C, 4 * C)),   # fcprojw
            (h + "mlp.c_proj.bias", (C,)),           # fcprojb
        ]
    specs += [("transformer.ln_f.weight", (C,)), ("transformer.ln_f.bias", (C,))]
    return [(n, s, len(s) >= 2) for n, s in specs]


def init_params(cfg, gen):
    """GPT-2 initialisation, then small random perturbations of biases and
    layernorm parameters so that loading them wrongly changes the output and
    their gradients are exercised. Padded wte rows are zero. Returns float64
    tensors in buffer order (rounded to float32 values)."""
    V, L = cfg["vocab_size"], cfg["n_layer"]
    out = {}
    for name, shape, _ in param_specs(cfg):
        if name.endswith("wte.weight"):
            p = torch.zeros(shape, dtype=torch.float64)
            p[:V] = torch.randn((V, shape[1]), generator=gen, dtype=torch.float64) * 0.02
        elif name.endswith("c_proj.weight"):
            p = torch.randn(shape, generator=gen, dtype=torch.float64) * (0.02 / math.sqrt(2 * L))
        elif len(shape) == 2:
            p = torch.randn(shape, generator=gen, dtype=torch.float64) * 0.02
        elif ".ln_" in name and name.endswith(".weight"):
            p = 1.0 + 0.1 * torch.randn(shape, generator=gen, dtype=torch.float64)
        elif ".ln_" in name:
            p = 0.05 * torch.randn(shape, generator=gen, dtype=torch.float64)
        else:  # linear biases
            p = 0.02 * torch.randn(shape, generator=gen, dtype=torch.float64)
        out[name] = p.float().double()
    return out


class GPT2:
    """Functional GPT-2 over a dict of parameters in zoffload's layout."""

    def __init__(self, cfg, params):
        self.cfg = cfg
        self.p = params

    def forward(self, idx, targets=None, acts=None):
        cfg, p = self.cfg, self.p
        C, NH, V = cfg["n_embd"], cfg["n_head"], cfg["vocab_size"]
        hs = C // NH
        Bq, Tq = idx.shape
        wte = p["transformer.wte.weight"][:V]  # padded rows never enter
        x = wte[idx] + p["transformer.wpe.weight"][:Tq]
        save = (lambda k, v: acts.__setitem__(k, v.detach().clone())) if acts is not None else (
            lambda k, v: None)
        save("encoded", x)
        mask = torch.ones(Tq, Tq, dtype=torch.bool).tril()
        for l in range(cfg["n_layer"]):
            h = f"transformer.h.{l}."
            ln1 = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps=1e-5)
            qkv = F.linear(ln1, p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"])
            q, k, v = qkv.split(C, dim=2)
            q = q.view(Bq, Tq, NH, hs).transpose(1, 2)
            k = k.view(Bq, Tq, NH, hs).transpose(1, 2)
            v = v.view(Bq, Tq, NH, hs).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            atty = (att @ v).transpose(1, 2).contiguous().view(Bq, Tq, C)
            attproj = F.linear(atty, p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"])
            res2 = x + attproj
            ln2 = F.layer_norm(res2, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps=1e-5)
            fch = F.linear(ln2, p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"])
            fch_gelu = F.gelu(fch, approximate="tanh")
            fcproj = F.linear(fch_gelu, p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"])
            x = res2 + fcproj
            for name, val in (("ln1", ln1), ("qkv", qkv), ("att", att), ("atty", atty),
                              ("res2", res2), ("ln2", ln2), ("fch", fch),
                              ("fch_gelu", fch_gelu), ("res3", x)):
                save(f"h{l}.{name}", val)
        lnf = F.layer_norm(x, (C,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"],
                           eps=1e-5)
        logits = lnf @ wte.t()
        save("lnf", lnf)
        save("logits", logits)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
        return logits, loss


def run(cfg, init, dtype, data, verbose):
    """Forward/backward on the reference batch, then the training run. Returns
    a dict of float64 numpy arrays / floats."""
    V = cfg["vocab_size"]
    names = [n for n, _, _ in param_specs(cfg)]
    decay = {n: d for n, _, d in param_specs(cfg)}
    params = {n: init[n].to(dtype).clone().requires_grad_(True) for n in names}
    model = GPT2(cfg, params)
    res = {}

    logits, loss = model.forward(data["inputs"], data["targets"])
    loss.backward()
    res["logits"] = logits.detach().double().numpy()
    res["loss"] = loss.item()
    res["grads"] = {n: params[n].grad.detach().double().numpy().copy() for n in names}

    # Training run from the same initial parameters.
    for n in names:
        params[n].grad = None
    plist = [params[n] for n in names]
    groups = [
        {"params": [params[n] for n in names if decay[n]], "weight_decay": WEIGHT_DECAY},
        {"params": [params[n] for n in names if not decay[n]], "weight_decay": 0.0},
    ]
    lr, min_lr = f32(LR), f32(LR * MIN_LR_FRAC)
    opt = torch.optim.AdamW(groups, lr=lr, betas=(f32(BETA1), f32(BETA2)), eps=f32(EPS),
                            foreach=False)
    step_losses, lrs, norms, coefs = [], [], [], []
    for step in range(1, N_STEPS + 1):
        opt.zero_grad(set_to_none=True)
        micro = []
        for k in range(GRAD_ACCUM):
            i = (step - 1) * GRAD_ACCUM + k
            _, loss = model.forward(data["train_inputs"][i], data["train_targets"][i])
            (loss / GRAD_ACCUM).backward()
            micro.append(loss.item())
        norm = torch.nn.utils.clip_grad_norm_(plist, f32(MAX_NORM)).item()
        coef = min(1.0, f32(MAX_NORM) / (norm + 1e-6))
        lr_t = lr_at(step, lr, min_lr, WARMUP_STEPS, N_STEPS)
        for g in opt.param_groups:
            g["lr"] = lr_t
        opt.step()
        step_losses.append(sum(micro) / GRAD_ACCUM)
        lrs.append(lr_t)
        norms.append(norm)
        coefs.append(coef)
        if verbose:
            print(f"step {step:2d}: loss {step_losses[-1]:.6f} (micro {micro[0]:.6f} {micro[1]:.6f})"
                  f" lr {lr_t:.6e} grad norm {norm:.5f} "
                  + (f"CLIPPED (coef {coef:.4f})" if coef < 1.0 else "not clipped"))
    res["step_losses"] = step_losses
    res["lrs"] = lrs
    res["norms"] = norms
    res["final"] = {n: params[n].detach().double().numpy().copy() for n in names}
    return res


def write_file(path, cfg, specs, init, data, res):
    V, Vp = cfg["vocab_size"], padded_vocab(cfg["vocab_size"])
    hdr = struct.pack("<8s" + "i" * 14 + "f" * 8,
                      MAGIC, VERSION,
                      cfg["n_layer"], cfg["n_head"], cfg["n_embd"], V, Vp, cfg["max_seq_len"],
                      B, T, N_STEPS, GRAD_ACCUM, WARMUP_STEPS, N_STEPS, len(specs),
                      f32(LR), f32(LR * MIN_LR_FRAC), f32(BETA1), f32(BETA2), f32(EPS),
                      f32(WEIGHT_DECAY), f32(MAX_NORM), 0.0)
    assert len(hdr) == 96
    chunks = [hdr]
    for name, shape, dec in specs:
        nm = name.encode()
        assert len(nm) < NAME_MAX
        dims = list(shape) + [1] * (2 - len(shape))
        chunks.append(struct.pack(f"<{NAME_MAX}s4i", nm, len(shape), dims[0], dims[1], int(dec)))

    def flat(d):
        return np.concatenate([d[n].reshape(-1) for n, _, _ in specs]).astype("<f4").tobytes()

    chunks.append(flat({n: init[n].numpy() for n in init}))
    chunks.append(data["inputs"].numpy().astype("<i4").tobytes())
    chunks.append(data["targets"].numpy().astype("<i4").tobytes())
    chunks.append(res["logits"].astype("<f4").tobytes())
    chunks.append(np.array([res["loss"]], "<f4").tobytes())
    chunks.append(flat(res["grads"]))
    chunks.append(data["train_inputs"].numpy().astype("<i4").tobytes())
    chunks.append(data["train_targets"].numpy().astype("<i4").tobytes())
    chunks.append(np.array(res["lrs"], "<f4").tobytes())
    chunks.append(np.array(res["norms"], "<f4").tobytes())
    chunks.append(np.array(res["step_losses"], "<f4").tobytes())
    chunks.append(flat(res["final"]))
    chunks.append(b"ZOGPT2END\0\0\0\0\0\0\0")
    blob = b"".join(chunks)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(blob)
    os.replace(tmp, path)
    return len(blob)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "gpt2_tiny.bin"))
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--dump-acts", metavar="PATH")
    args = ap.parse_args()

    torch.manual_seed(SEED)
    torch.set_num_threads(1)  # reproducible reductions
    gen = torch.Generator().manual_seed(SEED)
    cfg = dict(CFG)
    specs = param_specs(cfg)
    init = init_params(cfg, gen)
    V = cfg["vocab_size"]
    inputs, targets = make_tokens(gen, 1, V, B, T, learnable=False)
    tr_in, tr_tg = make_tokens(gen, N_STEPS * GRAD_ACCUM, V, B, T, learnable=True)
    data = dict(inputs=inputs[0], targets=targets[0], train_inputs=tr_in, train_targets=tr_tg)

    print(f"config {cfg}, padded vocab {padded_vocab(V)}, B={B} T={T}, "
          f"{sum(int(np.prod(s)) for _, s, _ in specs)} parameters in {len(specs)} tensors")
    res = run(cfg, init, torch.float32, data, verbose=True)
    print(f"reference loss {res['loss']:.6f}")
    clipped = [i + 1 for i, n in enumerate(res["norms"]) if n + 1e-6 > f32(MAX_NORM)]
    print(f"clipping (max_norm {MAX_NORM}) triggered on steps {clipped}")
    nbytes = write_file(args.out, cfg, specs, init, data, res)
    print(f"wrote {args.out} ({nbytes} bytes)")

    if args.dump_acts:
        acts = {}
        params = {n: init[n].float() for n, _, _ in specs}
        GPT2(cfg, params).forward(data["inputs"], data["targets"], acts=acts)
        np.savez(args.dump_acts, **{k: v.numpy() for k, v in acts.items()})
        print(f"wrote activations to {args.dump_acts}")

    if args.check:
        ref = run(cfg, init, torch.float64, data, verbose=False)
        print("fp32 vs float64 (max |diff| / max |ref| per tensor; relative for losses):")
        print(f"  logits {compare(res['logits'], ref['logits']):.2e}")
        print(f"  loss   {abs(res['loss'] - ref['loss']) / ref['loss']:.2e}")
        print(f"  grads  worst {max(compare(res['grads'][n], ref['grads'][n]) for n, _, _ in specs):.2e}")
        print(f"  step losses worst "
              f"{max(abs(a - b) / b for a, b in zip(res['step_losses'], ref['step_losses'])):.2e}")
        worst = max((compare(res['final'][n], ref['final'][n]), n) for n, _, _ in specs)
        print(f"  final params worst {worst[0]:.2e} ({worst[1]}); worst absolute "
              f"{max(np.abs(res['final'][n] - ref['final'][n]).max() for n, _, _ in specs):.2e}")
        moved = max(np.abs(res['final'][n] - init[n].numpy()).max() for n, _, _ in specs)
        print(f"  largest parameter change over the run {moved:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
