#!/usr/bin/python3
"""Reference vectors for zo_adamw_update: 3 steps of torch.optim.AdamW
(foreach=False, the single-tensor path) on two tensors, written to
adamw_torch.bin beside this script and read by tests/test-offload-adamw.c.

Run with Debian's python (torch 1.13.1): /usr/bin/python3 adamw_torch.py
Every hyperparameter is a float32 value, because zo_adamw_hparams holds floats
and PyTorch does its scalar math on Python doubles: with float-exact inputs
both sides form the same scalars.

Layout, little-endian:
  char magic[8] = "ZOADAMW1"; u32 n_tensors, n_steps
  per step:   f32 lr, beta1, beta2, eps, grad_scale
  per tensor: u32 n, u32 decay, f32 weight_decay, i32 t0 (steps already taken)
  per tensor: f32 p0[n], m0[n], v0[n]
  per step, per tensor: f32 g[n] (before grad_scale), p[n], m[n], v[n] after the step
"""
import os
import struct

import numpy as np
import torch

F32 = np.float32
STEPS = [  # lr, beta1, beta2, eps, grad_scale (clip coefficient folded into g)
    (1e-3, 0.9, 0.999, 1e-8, 1.0),
    (6e-4, 0.9, 0.999, 1e-8, 0.7317),
    (2.5e-3, 0.9, 0.999, 1e-8, 0.25),
]
TENSORS = [  # n, decay, weight_decay, t0 (t0 > 0: start from random m, v)
    (1031, 1, 0.1, 0),
    (333, 0, 0.1, 9),
]


def f32(x):
    return float(F32(x))


def main():
    rng = np.random.default_rng(1234)
    steps = [tuple(f32(x) for x in s) for s in STEPS]
    params, opts, out = [], [], bytearray()
    out += b"ZOADAMW1" + struct.pack("<II", len(TENSORS), len(steps))
    for s in steps:
        out += struct.pack("<5f", *s)
    for n, decay, wd, t0 in TENSORS:
        out += struct.pack("<IIfi", n, decay, f32(wd), t0)

    inits = []
    for n, decay, wd, t0 in TENSORS:
        p0 = (rng.standard_normal(n) * 0.02).astype(F32)
        m0 = np.zeros(n, F32)
        v0 = np.zeros(n, F32)
        if t0 > 0:
            m0 = (rng.standard_normal(n) * 1e-3).astype(F32)
            v0 = (rng.random(n) * 1e-5).astype(F32)
        inits.append((p0, m0, v0))
        p = torch.nn.Parameter(torch.from_numpy(p0.copy()))
        lr, b1, b2, eps, _ = steps[0]
        # AdamW with weight_decay=0 is how PyTorch users turn decay off per group.
        opt = torch.optim.AdamW([p], lr=lr, betas=(b1, b2), eps=eps,
                                weight_decay=f32(wd) if decay else 0.0, foreach=False)
        if t0 > 0:
            opt.state[p] = {"step": torch.tensor(float(t0)),
                            "exp_avg": torch.from_numpy(m0.copy()),
                            "exp_avg_sq": torch.from_numpy(v0.copy())}
        params.append(p)
        opts.append(opt)
    for p0, m0, v0 in inits:
        out += p0.tobytes() + m0.tobytes() + v0.tobytes()

    for lr, b1, b2, eps, gs in steps:
        for (n, _, _, _), p, opt in zip(TENSORS, params, opts):
            g = (rng.standard_normal(n) * 10.0 ** rng.uniform(-5, 0, n)).astype(F32)
            g[::97] = 0.0
            p.grad = torch.from_numpy(g.copy()).mul_(gs)
            for group in opt.param_groups:
                group["lr"], group["betas"], group["eps"] = lr, (b1, b2), eps
            opt.step()
            st = opt.state[p]
            out += g.tobytes() + p.detach().numpy().tobytes()
            out += st["exp_avg"].numpy().tobytes() + st["exp_avg_sq"].numpy().tobytes()

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "adamw_torch.bin")
    with open(path, "wb") as f:
        f.write(out)
    print(f"wrote {path}: {len(out)} bytes, torch {torch.__version__}")


if __name__ == "__main__":
    main()
