#!/usr/bin/python3
"""LoRA against the full fine-tune, side by side on the CPU (issue 46,
piece 5): the step time and the bytes of

  zo_lora     zoffload train with a lora section (base frozen on the device)
  zo_full     zoffload train of every weight, the same model and batch
  peft        PEFT's get_peft_model on PyTorch eager, torch.optim.AdamW over
              the adapters (the same targets, r, alpha)
  torch_full  PyTorch eager fine-tuning every weight

on one transformers-made Llama (random weights: only time and bytes are
measured), micro-batch B x T, fp32 (or bf16 with --bf16: zoffload's bf16,
PyTorch under torch.autocast("cpu", bfloat16)), THREADS threads each. The
four run alternately for R rounds, so the machine's drift hits all alike;
each run's first step is warm-up and never counted; the table gives each
one's median step time and its ratio to zo_lora, and the bytes: zoffload's
planned device bytes (every tier but the host staging: what a GPU would
hold), PyTorch's parameters + gradients + optimizer state counted from its
tensors (the activations are not counted for PyTorch).

Usage: PYTHONPATH=build/hf-site /usr/bin/python3 benchmarks/lora_side_by_side.py
       [--rounds R] [--steps N] [--threads P] [--B B] [--T T] [--layers L] [--width C] [--bf16]
Measure quietly (nothing else running): the figures are ratios in one run.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_model(a, d):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.width, intermediate_size=a.width * 8 // 3 // 64 * 64,
                      num_hidden_layers=a.layers, num_attention_heads=a.width // 64,
                      num_key_value_heads=max(1, a.width // 256), max_position_embeddings=max(a.T, 512),
                      tie_word_embeddings=False)
    m = LlamaForCausalLM(cfg)
    m.save_pretrained(d, safe_serialization=True)
    return cfg


def zo_config(a, tmp, base, tokens, lora):
    cfg = {"train_micro_batch_size_per_gpu": a.B, "gradient_accumulation_steps": 1, "steps": a.steps + 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.0}},
           "model": {"init_from": base}, "bf16": {"enabled": a.bf16},
           "data": {"train": tokens, "format": "u16", "seq_len": a.T},
           "engine": {"device": "cpu", "threads": a.threads}, "log": {"every": 1}}
    if lora:
        cfg["lora"] = {"r": a.r, "alpha": 2 * a.r, "target_modules": TARGETS}
    path = os.path.join(tmp, f"zo-{'lora' if lora else 'full'}.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def run_zo(a, binary, config, metrics):
    """(median ms of the timed steps, planned device bytes)."""
    if os.path.exists(metrics):
        os.remove(metrics)
    r = subprocess.run([binary, "train", config, "--set", f"log.metrics_path={metrics}"], capture_output=True,
                       env=dict(os.environ, OMP_NUM_THREADS=str(a.threads)))
    out = (r.stdout + r.stderr).decode(errors="replace")
    if r.returncode != 0:
        sys.exit(f"zoffload train failed: {out[-600:]}")
    with open(metrics) as f:
        ms = [m["ms"] for m in map(json.loads, f) if "ms" in m]
    planned = re.search(r"device arena \S+ \S+ planned, \S+ \S+ peak \((\d+) bytes\)", out)
    return statistics.median(ms[1:]), int(planned.group(1)) if planned else 0


def torch_bytes(model, opt):
    n = 0
    for p in model.parameters():
        n += p.numel() * p.element_size()
        if p.requires_grad:
            n += p.numel() * 4  # its gradient, fp32
    for st in opt.state.values():
        n += sum(v.numel() * v.element_size() for v in st.values() if torch.is_tensor(v) and v.dim() > 0)
    return n


def run_torch(a, base, tokens, lora):
    """(median ms of the timed steps, parameters + gradients + optimizer bytes)."""
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(a.threads)
    model = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
    if lora:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=a.r, lora_alpha=2 * a.r, target_modules=TARGETS,
                                                 task_type="CAUSAL_LM"))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0)
    bt = a.B * a.T
    times = []
    for s in range(a.steps + 1):
        w = torch.from_numpy(tokens[s * bt:(s + 1) * bt + 1].astype(np.int64))
        x, y = w[:bt].view(a.B, a.T), w[1:].view(a.B, a.T)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times[1:]), torch_bytes(model, opt)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default="build/release/zoffload")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--B", type=int, default=4)
    p.add_argument("--T", type=int, default=256)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--r", type=int, default=16)
    p.add_argument("--bf16", action="store_true")
    a = p.parse_args()
    import peft
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}, "
          f"{a.threads} threads, B {a.B} x T {a.T}, {'bf16' if a.bf16 else 'fp32'}, r {a.r}, all seven projections")
    tmp = tempfile.mkdtemp(prefix="zo-lora-bench-")
    base = os.path.join(tmp, "base")
    cfg = make_model(a, base)
    rng = np.random.default_rng(1)
    tok = rng.integers(0, a.vocab, size=(a.steps + 2) * a.B * a.T + 1, dtype=np.uint16)
    tok_path = os.path.join(tmp, "tokens.bin")
    tok.astype("<u2").tofile(tok_path)
    print(f"model: Llama {cfg.num_hidden_layers} layers, width {cfg.hidden_size}, MLP {cfg.intermediate_size}, "
          f"vocab {cfg.vocab_size}, untied head")
    zl, zf = zo_config(a, tmp, base, tok_path, True), zo_config(a, tmp, base, tok_path, False)
    runs = {"zo_lora": [], "zo_full": [], "peft": [], "torch_full": []}
    nbytes = {}
    for r in range(a.rounds):
        for name in runs:
            if name.startswith("zo_"):
                ms, b = run_zo(a, a.binary, zl if name == "zo_lora" else zf, os.path.join(tmp, "m.jsonl"))
            else:
                ms, b = run_torch(a, base, tok, name == "peft")
            runs[name].append(ms)
            nbytes[name] = b
            print(f"round {r + 1}: {name:10s} {ms:9.1f} ms/step")
    ref = statistics.median(runs["zo_lora"])
    print(f"\n{'run':10s} {'median ms':>10s} {'vs zo_lora':>10s} {'bytes (MiB)':>12s}")
    for name, v in runs.items():
        m = statistics.median(v)
        print(f"{name:10s} {m:10.1f} {m / ref:9.2f}x {nbytes[name] / 2**20:12.1f}")
    print("bytes: zoffload's planned device arena (every device byte: weights, adapters' or full gradients, "
          "master, m, v, activations); PyTorch's parameters + gradients + AdamW state (no activations)")


if __name__ == "__main__":
    main()
