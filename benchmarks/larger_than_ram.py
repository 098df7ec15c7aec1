#!/usr/bin/env python3
"""A Llama whose training state does not fit in this machine's RAM, trained on
the CPU backend with parameters, gradients, master weights, m and v on NVMe
(the Infinity tier), beside fio on the same file system, in one run.

    benchmarks/larger_than_ram.py [--nvme-path DIR] [--steps 3] [--zoffload BIN]
                                  [--device-budget 3GiB] [--layers N] [--out FILE]

What it does, in order:
 1. Sizes the model: a Llama of width 2560 (20 heads, 4 key-value heads,
    SwiGLU 10240, byte-level vocabulary of the embedded corpus) with as many
    blocks as it takes for the full fp32 AdamW training state (parameters,
    gradients, master weights, m, v: 16 bytes per parameter, the working
    parameters being the master in fp32) to exceed MemTotal by >= 25%, and
    checks that the NVMe files fit the free space of --nvme-path.
 2. fio on the same directory: 1 MiB blocks, O_DIRECT, io_uring, queue depth
    32, one job, write then read of a 4 GiB file.
 3. Compute alone: `zoffload bench step` of the same shapes with 2 and 4
    blocks, everything on the device; the forward + backward time per block
    (the difference) extrapolated to the full depth.
 4. The run: `zoffload train` for --steps steps, sampling the process's
    /proc/PID/io (read_bytes, write_bytes: what reached the block layer, so
    the page cache cannot flatter it) and VmHWM / VmRSS every 0.1 s; the step
    boundaries come from the metrics file (its "time" and "ms").
 5. Per step: time, NVMe bytes read and written, achieved GB/s, peak resident
    memory; then the targets: peak RSS below device budget + host pool + 1 GiB,
    NVMe throughput during the step >= 0.8 of fio's (bytes moved over the time
    fio would need for them), step time <= 1.25 x max(compute alone, I/O alone)
    where I/O alone is the step's bytes at fio's rates.
Prints everything; the last line is a JSON summary. Needs fio and the
release build (scripts/build.sh). Not part of the test suite: it writes tens
of GB and takes several minutes.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GiB = 1 << 30


def parse_bytes(s):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B)?", s.strip(), re.I)
    if not m:
        sys.exit(f"larger_than_ram: bad size {s!r}: need e.g. 3GiB")
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    return int(float(m.group(1)) * mult)


def meminfo(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def fmt(b):
    return f"{b / GiB:.2f} GiB"


# Model shapes: only the number of blocks changes with the machine.
C, HEADS, KV, INTER, VOCAB, T = 2560, 20, 4, 10240, 256, 256


def block_params():
    hd = C // HEADS
    return (C * C + 2 * C * KV * hd + C * C) + 3 * C * INTER + 2 * C


def model_params(L):
    return L * block_params() + 2 * VOCAB * C + C


def config(L, nvme_dir, device_budget, data_dir, steps, metrics, host_budget):
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "steps": steps,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                                                  "weight_decay": 0.1}},
        "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 1, "cos_min_ratio": 0.1}},
        "gradient_clipping": 1.0,
        "zero_optimization": {
            "stage": 3,
            "sub_group_size": 50_000_000,
            "offload_optimizer": {"device": "nvme", "nvme_path": nvme_dir, "buffer_count": 4,
                                  "pin_memory": True},
            "offload_param": {"device": "nvme", "nvme_path": nvme_dir, "buffer_count": 3, "pin_memory": True},
        },
        "model": {"arch": "llama", "n_layer": L, "n_head": HEADS, "num_key_value_heads": KV, "n_embd": C,
                  "intermediate_size": INTER, "vocab_size": VOCAB, "max_seq_len": T, "rms_norm_eps": 1e-5,
                  "rope_theta": 10000.0, "tie_word_embeddings": False},
        # No validation set: each evaluation would stream every block from NVMe 20 times.
        "data": {"train": os.path.join(data_dir, "train.bin"), "format": "u16", "seq_len": T, "shuffle": True},
        "engine": {"device": "cpu", "seed": 1337, "gpu_memory_budget": device_budget,
                   **({"host_memory_budget": host_budget} if host_budget else {})},
        "log": {"every": 1, "metrics_path": metrics},
        "activation_checkpointing": {"enabled": True},
    }


def fio(path, rw, size):
    out = subprocess.run(["fio", "--name=ltr", f"--filename={path}", "--ioengine=io_uring", "--direct=1",
                          "--bs=1M", "--iodepth=32", "--numjobs=1", f"--rw={rw}", f"--size={size}",
                          "--output-format=json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["jobs"][0][rw]["bw_bytes"] / 1e9


def bench_compute(zoffload, L, tmp, data_dir):
    cfg = config(L, os.path.join(tmp, "nv-small"), "64GiB", data_dir, 1, "", None)
    cfg["zero_optimization"] = {"stage": 0}
    cfg.pop("log")
    p = os.path.join(tmp, f"compute-{L}.json")
    with open(p, "w") as f:
        json.dump(cfg, f)
    out = subprocess.run([zoffload, "bench", "step", p, "--steps", "1", "--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["compute_ms"] / 1e3


def proc_sample(pid):
    io = {}
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            k, v = line.split(":")
            io[k] = int(v)
    st = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmHWM", "VmRSS")):
                st[line.split(":")[0]] = int(line.split()[1]) * 1024
    return io["read_bytes"], io["write_bytes"], st.get("VmRSS", 0), st.get("VmHWM", 0)


def at(samples, t):
    """(read, write) bytes at time t, interpolated between samples."""
    prev = samples[0]
    for s in samples:
        if s[0] >= t:
            if s[0] == prev[0]:
                return s[1], s[2]
            w = (t - prev[0]) / (s[0] - prev[0])
            return prev[1] + w * (s[1] - prev[1]), prev[2] + w * (s[2] - prev[2])
        prev = s
    return samples[-1][1], samples[-1][2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nvme-path", default=os.path.join(ROOT, "runs", "larger-than-ram"))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--zoffload", default=os.path.join(ROOT, "build", "release", "zoffload"))
    ap.add_argument("--device-budget", default="3GiB")
    ap.add_argument("--host-budget", default=None, help="engine.host_memory_budget (default: the plan's)")
    ap.add_argument("--layers", type=int, default=0, help="blocks (default: enough to exceed RAM by 25%%)")
    ap.add_argument("--fio-size", default="4G")
    ap.add_argument("--skip-compute", action="store_true", help="skip the compute-alone measurement")
    args = ap.parse_args()

    if not shutil.which("fio"):
        sys.exit("larger_than_ram: fio not found: scripts/install-deps.sh installs it")
    if not os.access(args.zoffload, os.X_OK):
        sys.exit(f"larger_than_ram: {args.zoffload} not found: run scripts/build.sh first")
    os.makedirs(args.nvme_path, exist_ok=True)
    data_dir = os.path.join(ROOT, "data", "tiny")
    subprocess.run([os.path.join(ROOT, "scripts", "prepare-tiny.sh"), args.zoffload], check=True,
                   stdout=subprocess.DEVNULL)

    ram = meminfo("MemTotal")
    L = args.layers
    if not L:
        L = 1
        while 16 * model_params(L) < 1.25 * ram:
            L += 1
    n = model_params(L)
    state = 16 * n
    free = shutil.disk_usage(args.nvme_path).free
    print(f"machine: MemTotal {fmt(ram)}, MemAvailable {fmt(meminfo('MemAvailable'))}, "
          f"{os.cpu_count()} CPUs; NVMe path {args.nvme_path}: {fmt(free)} free")
    print(f"model: Llama, {L} blocks of {block_params() / 1e6:.1f}M, width {C}, SwiGLU {INTER}, "
          f"vocab {VOCAB}: {n / 1e9:.3f}B parameters")
    print(f"full fp32 AdamW training state: 16 B/param = {fmt(state)} = {state / ram:.2f} x MemTotal")

    tmp = tempfile.mkdtemp(prefix="ltr-", dir=args.nvme_path)
    try:
        metrics = os.path.join(tmp, "metrics.jsonl")
        cfg = config(L, tmp, args.device_budget, data_dir, args.steps, metrics, args.host_budget)
        cfg_path = os.path.join(tmp, "config.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=1)
        plan = subprocess.run([args.zoffload, "plan", cfg_path], capture_output=True, text=True)
        print("--- zoffload plan ---")
        print(plan.stdout.rstrip())
        if plan.returncode:
            print(plan.stderr.rstrip())
            sys.exit("larger_than_ram: the plan does not fit (above)")

        # fio, same file system, before the run.
        fpath = os.path.join(tmp, "fio.dat")
        fio_w = fio(fpath, "write", args.fio_size)
        fio_r = fio(fpath, "read", args.fio_size)
        os.unlink(fpath)
        print(f"fio (1 MiB, O_DIRECT, io_uring, QD32, {args.fio_size}): write {fio_w:.3f} GB/s, "
              f"read {fio_r:.3f} GB/s")

        compute = None
        if not args.skip_compute:
            c2 = bench_compute(args.zoffload, 2, tmp, data_dir)
            c4 = bench_compute(args.zoffload, 4, tmp, data_dir)
            per_block = (c4 - c2) / 2
            compute = c2 + per_block * (L - 2)
            print(f"compute alone (bench step, all on device, forward + backward): 2 blocks {c2:.2f} s, "
                  f"4 blocks {c4:.2f} s -> {per_block:.2f} s per block, {compute:.1f} s for {L} blocks")

        print(f"--- zoffload train ({args.steps} steps) ---")
        t_launch = time.time()
        proc = subprocess.Popen([args.zoffload, "train", cfg_path], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1)
        samples = []  # (time, read_bytes, write_bytes, rss, hwm)
        lines = []
        import threading

        def reader():
            for line in proc.stdout:
                lines.append(line)
                sys.stdout.write("  | " + line)
                sys.stdout.flush()

        th = threading.Thread(target=reader)
        th.start()
        while proc.poll() is None:
            try:
                r, w, rss, hwm = proc_sample(proc.pid)
                samples.append((time.time(), r, w, rss, hwm))
            except (FileNotFoundError, ProcessLookupError, ValueError):
                pass
            time.sleep(0.1)
        th.join()
        wall = time.time() - t_launch
        if proc.returncode:
            sys.exit(f"larger_than_ram: zoffload train exited {proc.returncode}")
        steps = [json.loads(l) for l in open(metrics) if '"loss"' in l]
        peak_rss = max(s[4] for s in samples)
        plan_dev = plan_host = None
        for line in lines:
            m = re.search(r"device arena (\S+ \S+) planned.*host pool (\S+ \S+) planned", line)
            if m:
                plan_dev, plan_host = m.group(1), m.group(2)
        m = re.search(r"host pool [^|]*?\((\d+) bytes", "".join(lines))
        print()
        print(f"{'step':>4} {'time s':>8} {'read GB':>9} {'write GB':>9} {'read GB/s':>10} "
              f"{'write GB/s':>11} {'of fio':>7} {'peak RSS':>10}")
        rows = []
        for s in steps:
            t1 = s["time"]
            t0 = t1 - s["ms"] / 1e3
            r0, w0 = at(samples, t0)
            r1, w1 = at(samples, t1)
            rb, wb = r1 - r0, w1 - w0
            dt = t1 - t0
            fio_time = rb / 1e9 / fio_r + wb / 1e9 / fio_w
            hwm = max((x[4] for x in samples if x[0] <= t1 + 0.2), default=0)
            rows.append({"step": s["step"], "s": dt, "read_bytes": rb, "write_bytes": wb,
                         "read_gbs": rb / dt / 1e9, "write_gbs": wb / dt / 1e9,
                         "of_fio": fio_time / dt, "io_alone_s": fio_time, "peak_rss": hwm})
            print(f"{s['step']:>4} {dt:8.1f} {rb / 1e9:9.2f} {wb / 1e9:9.2f} {rb / dt / 1e9:10.3f} "
                  f"{wb / dt / 1e9:11.3f} {fio_time / dt:7.2f} {fmt(hwm):>10}")
        print(f"run wall time {wall:.0f} s (init, the NVMe files' creation and the steps); "
              f"peak RSS {fmt(peak_rss)}")
        budget = parse_bytes(args.device_budget)
        host_pool = None
        mm = re.search(r"host pool \S+ \S+ planned, \S+ \S+ peak \((\d+) bytes", "".join(lines))
        if mm:
            host_pool = int(mm.group(1))
        # Steady state: the steps after the first (the first primes the pipelines).
        steady = rows[1:] if len(rows) > 1 else rows
        step_s = statistics.median(r["s"] for r in steady)
        of_fio = statistics.median(r["of_fio"] for r in steady)
        io_alone = statistics.median(r["io_alone_s"] for r in steady)
        summary = {"params": n, "layers": L, "state_bytes": state, "mem_total": ram,
                   "state_over_ram": state / ram, "fio_write_gbs": fio_w, "fio_read_gbs": fio_r,
                   "step_s": step_s, "io_alone_s": io_alone, "compute_alone_s": compute,
                   "nvme_of_fio": of_fio, "peak_rss": peak_rss, "device_budget": budget,
                   "host_pool_peak": host_pool, "steps": rows}
        print()
        print("targets (steady state: median of steps 2..N):")
        if host_pool is not None:
            lim = budget + host_pool + GiB
            print(f"  peak RSS {fmt(peak_rss)} vs device budget {fmt(budget)} + host pool {fmt(host_pool)} "
                  f"+ 1 GiB = {fmt(lim)}: {'met' if peak_rss < lim else 'NOT met'}")
        print(f"  NVMe throughput during the step {of_fio:.2f} of fio's (target >= 0.8): "
              f"{'met' if of_fio >= 0.8 else 'NOT met'}")
        if compute is not None:
            bound = max(compute, io_alone)
            print(f"  step {step_s:.1f} s vs 1.25 x max(compute alone {compute:.1f} s, I/O alone {io_alone:.1f} s)"
                  f" = {1.25 * bound:.1f} s: {'met' if step_s <= 1.25 * bound else 'NOT met'} "
                  f"(ratio {step_s / bound:.2f})")
        print(json.dumps(summary))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
