#!/usr/bin/env python3
"""The PyTorch peer of zoffload's GPU figures: one GPT-2 124M training step
(the model of configs/gpt2-124m.json: 12 layers, 12 heads, width 768, vocab
50257, context 1024; the same micro-batch B x T and accumulation count as
zoffload's run) in bf16 mixed precision (fp32 master weights, bf16 autocast)
with AdamW, in one of two modes:

  gpu          everything on the GPU, fused AdamW (torch.optim.AdamW(fused=True))
  cpu-offload  FSDP2 on one rank (fully_shard with CPUOffloadPolicy and a bf16
               MixedPrecisionPolicy): parameters, gradients and the AdamW
               update on the CPU, the forward and backward on the GPU

It prints one JSON line, {"peer": "torch", "mode": ..., "tokens_per_s": ...},
after warm-up steps, timing whole steps (synchronized). Without torch, CUDA
or a GPU it prints one line starting "torch-peer: SKIP:" and exits 77; an
error during the run prints "torch-peer: FAIL:" and exits 1. The model is
Hugging Face's GPT2LMHeadModel when transformers imports, else a minimal
GPT-2 of this file's own (same shapes, same FLOPs).

  python3 benchmarks/gpu_torch_peer.py --mode gpu --batch 8 --seq 1024 --steps 5
"""
import argparse
import json
import math
import os
import sys
import tempfile
import time


def skip(msg):
    print(f"torch-peer: SKIP: {msg}", flush=True)
    sys.exit(77)


def fail(msg):
    print(f"torch-peer: FAIL: {msg}", flush=True)
    sys.exit(1)


def build_model(torch, vocab, n_layer, n_head, n_embd, n_ctx):
    try:
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(vocab_size=vocab, n_positions=n_ctx, n_embd=n_embd, n_layer=n_layer,
                         n_head=n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        try:
            model = GPT2LMHeadModel(cfg, attn_implementation="sdpa")
        except TypeError:
            model = GPT2LMHeadModel(cfg)

        def loss_fn(m, x, y):
            return m(input_ids=x, labels=y).loss

        return model, loss_fn, "transformers GPT2LMHeadModel (sdpa)"
    except ImportError:
        pass
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd)
            self.attn = nn.Linear(n_embd, 3 * n_embd)
            self.proj = nn.Linear(n_embd, n_embd)
            self.ln_2 = nn.LayerNorm(n_embd)
            self.fc = nn.Linear(n_embd, 4 * n_embd)
            self.fc_proj = nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, n_embd)
            self.wpe = nn.Embedding(n_ctx, n_embd)
            self.h = nn.ModuleList(Block() for _ in range(n_layer))
            self.ln_f = nn.LayerNorm(n_embd)

        def forward(self, x):
            pos = torch.arange(x.shape[1], device=x.device)
            h = self.wte(x) + self.wpe(pos)
            for b in self.h:
                h = b(h)
            return self.ln_f(h) @ self.wte.weight.t()

    def loss_fn(m, x, y):
        logits = m(x)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1))

    return GPT(), loss_fn, "minimal GPT-2 (this file)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=["gpu", "cpu-offload"], required=True)
    ap.add_argument("--batch", type=int, default=8, help="micro-batch B")
    ap.add_argument("--seq", type=int, default=1024, help="sequence length T")
    ap.add_argument("--accum", type=int, default=1, help="micro-batches per step")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (after --warmup)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: default)")
    a = ap.parse_args()

    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        skip(f"torch is not importable ({type(e).__name__}: {e})")
    if not torch.cuda.is_available():
        skip(f"torch {torch.__version__} sees no CUDA device")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dev = torch.device("cuda", 0)
    torch.manual_seed(1337)
    vocab, n_layer, n_head, n_embd, n_ctx = 50257, 12, 12, 768, 1024
    model, loss_fn, what = build_model(torch, vocab, n_layer, n_head, n_embd, n_ctx)
    hp = dict(lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)

    if a.mode == "gpu":
        model = model.to(dev)
        opt = torch.optim.AdamW(model.parameters(), fused=True, **hp)
        autocast = lambda: torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    else:
        import torch.distributed as dist

        try:
            from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
        except ImportError:
            try:
                from torch.distributed._composable.fsdp import (CPUOffloadPolicy, MixedPrecisionPolicy,
                                                                fully_shard)
            except ImportError as e:
                skip(f"torch {torch.__version__} has no FSDP2 fully_shard/CPUOffloadPolicy ({e})")
        torch.cuda.set_device(dev)
        init_file = tempfile.NamedTemporaryFile(prefix="torch-peer-", delete=False).name
        os.unlink(init_file)
        dist.init_process_group("cpu:gloo,cuda:nccl", init_method=f"file://{init_file}", rank=0,
                                world_size=1)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        off = CPUOffloadPolicy(pin_memory=True)
        blocks = getattr(getattr(model, "transformer", model), "h")
        for b in blocks:
            fully_shard(b, mp_policy=mp, offload_policy=off)
        fully_shard(model, mp_policy=mp, offload_policy=off)
        # The parameters (DTensors) live on the CPU: the update runs there.
        opt = torch.optim.AdamW(model.parameters(), foreach=True, **hp)
        autocast = None
    model.train()

    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randint(0, vocab, (a.batch, a.seq), generator=g).to(dev)
    y = torch.randint(0, vocab, (a.batch, a.seq), generator=g).to(dev)

    def step():
        for _ in range(a.accum):
            if autocast:
                with autocast():
                    loss = loss_fn(model, x, y)
            else:
                loss = loss_fn(model, x, y)
            (loss / a.accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    try:
        for _ in range(a.warmup):
            step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            loss = step()
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / a.steps
    except Exception as e:
        fail(f"{a.mode}: {type(e).__name__}: {e}")
    lv = float(loss.detach().float().item())
    if not math.isfinite(lv):
        fail(f"{a.mode}: loss {lv}")
    tokens = a.batch * a.seq * a.accum
    print(json.dumps({
        "peer": "torch", "mode": a.mode, "tokens_per_s": round(tokens / dt, 1), "step_ms": round(dt * 1e3, 3),
        "B": a.batch, "T": a.seq, "accum": a.accum, "loss": round(lv, 4), "model": what,
        "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
        "peak_gpu_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
    }), flush=True)
    if a.mode == "cpu-offload":
        import torch.distributed as dist

        dist.destroy_process_group()


if __name__ == "__main__":
    main()
