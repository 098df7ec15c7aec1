#!/usr/bin/env python3
"""CPU 4-bit GEMM side by side (issue 48 piece 2): zoffload's matmul_q4_forward
(benchmarks/bench-q4-gemm.c) against bitsandbytes' CPU `bnb.matmul_4bit` over
the same kind of weight (NF4, blocks of 64, double-quantized absmax), and
torch's matmul over the weight dequantized to the compute dtype (the roofline
peer: the same GEMM with nothing to dequantize). Median of --reps timed calls
after one warm-up, --threads threads for everyone, on Llama-ish shapes.

  /work/hf5-venv/bin/python benchmarks/q4_gemm.py --bench build/release/benchmarks/bench-q4-gemm

Weights and inputs are random: only time counts (the bits are tested in
tests/test-kernels-q4-gemm.c). Prints one line per (program, shape, dtype).
"""
import argparse
import statistics
import subprocess
import time

import torch

SHAPES = [(512, 4096, 4096), (512, 4096, 14336), (512, 14336, 4096)]


def timed(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def line(prog, op, dt, n, c, oc, threads, s):
    return (f"{prog} op={op} dt={dt} N={n} C={c} OC={oc} threads={threads} "
            f"ms={s * 1e3:.2f} gflops={2.0 * n * c * oc / s * 1e-9:.1f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True, help="path of bench-q4-gemm")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dtypes", default="bf16,fp32")
    args = ap.parse_args()
    import bitsandbytes as bnb
    import bitsandbytes.functional as F
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__} bitsandbytes {bnb.__version__} threads={args.threads} reps={args.reps}",
          flush=True)
    for dts in args.dtypes.split(","):
        dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dts]
        for n, c, oc in SHAPES:
            out = subprocess.run([args.bench, "--N", str(n), "--C", str(c), "--OC", str(oc), "--dt", dts,
                                  "--threads", str(args.threads), "--reps", str(args.reps)],
                                 check=True, capture_output=True, text=True,
                                 env={"OMP_NUM_THREADS": str(args.threads), "PATH": "/usr/bin:/bin"}).stdout
            print(out.strip(), flush=True)
            g = torch.Generator().manual_seed(48)
            w = (torch.rand(oc, c, generator=g) - 0.5) * 0.1
            x = (torch.rand(n, c, generator=g) - 0.5).to(dt)
            qw, qs = F.quantize_4bit(w.to(dt), blocksize=64, compress_statistics=True, quant_type="nf4")
            wd = F.dequantize_4bit(qw, qs).to(dt)
            with torch.no_grad():
                s = timed(lambda: bnb.matmul_4bit(x, qw.t(), quant_state=qs), args.reps)
                print(line("bitsandbytes", "matmul_4bit", dts, n, c, oc, args.threads, s), flush=True)
                s = timed(lambda: x @ wd.t(), args.reps)
                print(line("torch", "dense_matmul", dts, n, c, oc, args.threads, s), flush=True)


if __name__ == "__main__":
    main()
