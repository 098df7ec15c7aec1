"""Pieces shared by the reference generators of tests/reference/
(make_reference.py for GPT-2, make_llama_reference.py for Llama): the
engine's learning-rate schedule, the token batches the references train on
and the fp32-vs-float64 comparison. Plain torch and numpy; changing anything
here changes the committed reference files, which the generators must
reproduce byte for byte."""
import math

import numpy as np
import torch


def lr_at(step, lr, min_lr, warmup, total):
    """zo_lr_at for ZO_LR_WARMUP_COSINE (include/offload/zo/adamw.h), 1-based step."""
    if step <= warmup:
        return lr * step / warmup
    if step >= total:
        return min_lr
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * (step - warmup) / (total - warmup)))


def make_tokens(gen, n, V, B, T, learnable):
    """n (B, T) batches of token ids in [0, V): inputs and targets shifted by
    one. learnable: each sequence follows next = (5 * cur + 3) mod V with 10%
    random tokens, so the training loss falls visibly in ten steps; otherwise
    uniform. Token V-1 occurs in every batch as an input and as a target, so
    the last real vocabulary row is exercised."""
    toks = torch.randint(0, V, (n, B, T + 1), generator=gen)
    if learnable:
        noise = torch.rand((n, B, T + 1), generator=gen) < 0.1
        for t in range(1, T + 1):
            toks[:, :, t] = torch.where(noise[:, :, t], toks[:, :, t], (5 * toks[:, :, t - 1] + 3) % V)
    toks[:, 0, 3] = V - 1
    toks[:, 1, 7] = V - 1
    return toks[:, :, :T].contiguous(), toks[:, :, 1:].contiguous()


def compare(a, b):
    """max |a - b| / max |b| (0 when b is all zero)."""
    a, b = np.asarray(a), np.asarray(b)
    m = np.abs(b).max()
    return float(np.abs(a - b).max() / m) if m > 0 else float(np.abs(a - b).max())
