#!/usr/bin/python3
"""A LoRA run larger than its device (issue 47, piece 5), on the CPU backend:
the frozen base on the device against the same run with the base streamed
from host RAM through parameter slots under an engine.gpu_memory_budget
smaller than the base, side by side: `zoffload bench step --json` (median
step time, bytes per step host to device and back), the planned device and
host bytes, and the process's peak RSS (wait4's rusage of the child). The two
run alternately for R rounds (the machine's drift hits both alike).

Usage: PYTHONPATH=build/hf-site /usr/bin/python3 benchmarks/lora_stream.py [--rounds 3] [--bf16]
Measure quietly (nothing else running).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import torch


def make_base(a, d):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    m = LlamaForCausalLM(LlamaConfig(vocab_size=a.vocab, hidden_size=a.width, intermediate_size=a.width * 8 // 3 // 64 * 64,
                                     num_hidden_layers=a.layers, num_attention_heads=a.width // 64,
                                     num_key_value_heads=max(1, a.width // 256), max_position_embeddings=max(512, a.T),
                                     tie_word_embeddings=False))
    m.save_pretrained(d, safe_serialization=True)
    return sum(p.numel() for p in m.parameters())


def bench(a, config, extra):
    """(bench step's JSON, the child's own peak RSS in bytes, from wait4)."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([a.binary, "bench", "step", config, "--steps", str(a.steps), "--json", *extra],
                                stdout=out, stderr=subprocess.STDOUT,
                                env=dict(os.environ, OMP_NUM_THREADS=str(a.threads)))
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    if proc.returncode != 0:
        sys.exit(f"bench step failed: {text[-800:]}")
    return json.loads(text.strip().splitlines()[-1]), ru.ru_maxrss * 1024


def planned(a, config, extra):
    r = subprocess.run([a.binary, "plan", config, *extra], capture_output=True)
    out = r.stdout.decode()
    for ln in out.splitlines():
        if ln.strip().startswith("exact bytes:"):
            return ln.strip()
    return out.strip().splitlines()[-1] if out.strip() else "(plan failed)"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default="build/release/zoffload")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--B", type=int, default=1)
    p.add_argument("--T", type=int, default=256)
    p.add_argument("--K", type=int, default=4)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--bf16", action="store_true")
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="zo-lora-stream-")
    base = os.path.join(tmp, "base")
    n = make_base(a, base)
    e = 2 if a.bf16 else 4
    cfg = {"train_micro_batch_size_per_gpu": a.B, "gradient_accumulation_steps": a.K, "steps": 10,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, "bf16": {"enabled": a.bf16},
           "model": {"init_from": base}, "lora": {"r": 16, "alpha": 32, "target_modules": "all-linear"},
           "data": {"train": "unused.bin", "format": "u16", "seq_len": a.T},
           "activation_checkpointing": {"enabled": True},
           "engine": {"device": "cpu", "threads": a.threads}}
    config = os.path.join(tmp, "lora.json")
    with open(config, "w") as f:
        json.dump(cfg, f)
    streamed = ["--set", "zero_optimization.stage=3", "--set", "zero_optimization.offload_param.device=cpu",
                "--set", "zero_optimization.offload_param.buffer_count=2"]
    # The device budget: what the streamed run plans, which must be less than the base alone.
    budget = int(planned(a, config, streamed).split("device ")[1].split(",")[0])
    if budget >= n * e:
        sys.exit(f"the streamed run plans {budget} device bytes, not less than the base's {n * e}: use a larger model")
    streamed += ["--set", f"engine.gpu_memory_budget={budget}"]
    runs = {"base on device": [], "base streamed": []}
    last = {}
    print(f"Llama {a.layers} layers, width {a.width}, vocab {a.vocab}: {n / 1e6:.1f} M parameters "
          f"({n * e / 2**20:.1f} MiB in {'bf16' if a.bf16 else 'fp32'}); LoRA r 16 all seven projections; "
          f"micro-batch {a.B} x {a.T}, {a.K} accumulation steps, {a.threads} threads, activation checkpointing; "
          f"the streamed run's device budget {budget / 2**20:.1f} MiB (its plan: less than the base alone)")
    for r in range(a.rounds):
        for name in runs:
            extra = streamed if name == "base streamed" else []
            js, rss = bench(a, config, extra)
            runs[name].append(js["step_ms"])
            last[name] = (js, rss, planned(a, config, extra))
            print(f"round {r + 1}: {name:15s} {js['step_ms']:9.1f} ms/step")
    ref = statistics.median(runs["base on device"])
    print(f"\n{'run':15s} {'median ms':>10s} {'vs device':>10s} {'h2d/step':>12s} {'d2h/step':>10s}  planned")
    for name, v in runs.items():
        js, rss, pl = last[name]
        m = statistics.median(v)
        print(f"{name:15s} {m:10.1f} {m / ref:9.2f}x {js['h2d_bytes']:12d} {js['d2h_bytes']:10d}  {pl}")
    print("peak RSS of each bench step process (wait4; the CPU backend's device arena is host memory too): "
          + ", ".join(f"{k} {v[1] / 2**20:.0f} MiB" for k, v in last.items()))


if __name__ == "__main__":
    main()
