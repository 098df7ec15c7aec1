#!/usr/bin/env python3
"""PyTorch eager fp32 GPT-2 training-step benchmark on the CPU: the comparator
for zoffload's bench-train-step and llm.c's train_gpt2 (see README.md).

One step is what llm.c's train_gpt2.c times: forward, mean cross-entropy,
backward, AdamW (lr 1e-4, betas 0.9/0.999, eps 1e-8, weight decay 0), zero_grad.
Plain nn modules, weight-tied LM head, tanh GELU, causal attention through
F.scaled_dot_product_attention when this torch has it (2.0+), a masked softmax
otherwise. Random weights and random tokens: only time is measured.
Needs torch: run it with /usr/bin/python3 (Debian's torch), not the pyenv one.

Prints one line per step and, last, one machine-readable line:
  pytorch_eager ms_per_step=<median of timed steps> tokens_per_s=<B*T/median> ...
"""
import argparse
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, C, NH, max_T):
        super().__init__()
        self.NH = NH
        self.c_attn = nn.Linear(C, 3 * C)  # (3C, C)
        self.c_proj = nn.Linear(C, C)
        self.use_sdpa = hasattr(F, "scaled_dot_product_attention")
        if not self.use_sdpa:
            mask = torch.tril(torch.ones(max_T, max_T, dtype=torch.bool))
            self.register_buffer("mask", mask.view(1, 1, max_T, max_T), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.NH, C // self.NH).transpose(1, 2)  # (B, NH, T, hs)
        k = k.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        v = v.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, C, NH, max_T):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.attn = CausalSelfAttention(C, NH, max_T)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.c_proj(h)


class GPT(nn.Module):
    def __init__(self, V, max_T, L, NH, C):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(max_T, C)
        self.h = nn.ModuleList([Block(C, NH, max_T) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in GPT-2 and llm.c
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, idx):
        B, T = idx.shape
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--B", type=int, default=4, help="batch size (4)")
    p.add_argument("--T", type=int, default=256, help="sequence length (256)")
    p.add_argument("--steps", type=int, default=4, help="timed steps (4)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first (1)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (2)")
    p.add_argument("--vocab", type=int, default=50257, help="vocab size (50257)")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--channels", type=int, default=768)
    p.add_argument("--max-seq-len", type=int, default=1024)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--autocast", choices=["off", "bf16"], default="off",
                   help="off: fp32 eager (default); bf16: torch.autocast('cpu', bfloat16) "
                        "around forward and loss (oneDNN's bf16 kernels)")
    a = p.parse_args()
    if min(a.B, a.T, a.steps, a.threads) < 1 or a.warmup < 0 or a.T > a.max_seq_len:
        p.error("need B, T, steps, threads >= 1, warmup >= 0 and T <= max-seq-len")
    return a


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = GPT(a.vocab, a.max_seq_len, a.layers, a.heads, a.channels)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=0.0)
    n_total = a.warmup + a.steps
    tokens = torch.randint(0, a.vocab, (n_total, a.B, a.T + 1), dtype=torch.long)
    print(f"pytorch {torch.__version__} threads={torch.get_num_threads()} "
          f"params={n_params} B={a.B} T={a.T} "
          f"attention={'sdpa' if model.h[0].attn.use_sdpa else 'manual'} "
          f"autocast={a.autocast} GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '')}", flush=True)

    times_ms = []
    for step in range(n_total):
        x, y = tokens[step, :, :-1], tokens[step, :, 1:]
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt_ms = (time.perf_counter() - t0) * 1e3
        kind = "warmup" if step < a.warmup else "timed"
        print(f"step {step}: train loss {loss.item():.6f} (took {dt_ms:.3f} ms) [{kind}]",
              flush=True)
        if step >= a.warmup:
            times_ms.append(dt_ms)

    med = statistics.median(times_ms)
    print(f"pytorch_eager ms_per_step={med:.3f} tokens_per_s={a.B * a.T * 1e3 / med:.1f} "
          f"min_ms={min(times_ms):.3f} max_ms={max(times_ms):.3f} steps={a.steps} "
          f"warmup={a.warmup} threads={a.threads} B={a.B} T={a.T} torch={torch.__version__}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
