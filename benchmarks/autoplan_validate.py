#!/usr/bin/env python3
"""The planner's cost model against measurements (issue 23 item 5).

For two model sizes, `zoffload plan CONFIG --auto --json` predicts the step
time of every candidate that fits; this script picks a spread of them
(placements x activation checkpointing x precision x micro-batch), times each
with `zoffload bench step` (the same candidate's --set lines), and prints
predicted against measured step time, the median absolute error and whether
the candidate ranked first is within 10% of the fastest measured.
Targets: median |error| <= 20%, the first-ranked within 10% of the fastest.
Not in the default test suite (minutes). Rates: `zoffload bench calibrate` is
run first into a private cache directory (--no-calibrate: use the cache of
XDG_CACHE_HOME as it is, or the defaults).

usage: benchmarks/autoplan_validate.py [--bin build/release/zoffload] [--steps 3]
       [--per-model 12] [--sizes small,medium] [--nvme-path DIR] [--out FILE]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

# Two sizes built from configs/tiny.json by --set (real training shapes; the
# data files are not read by bench step).
SIZES = {
    "small": ["model.n_layer=4", "model.n_embd=192", "model.n_head=4", "model.max_seq_len=128",
              "data.seq_len=128", "train_micro_batch_size_per_gpu=16", "gradient_accumulation_steps=1"],
    "medium": ["model.n_layer=6", "model.n_embd=384", "model.n_head=6", "model.max_seq_len=256",
               "data.seq_len=256", "train_micro_batch_size_per_gpu=8", "gradient_accumulation_steps=1"],
}


def run(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        sys.exit("failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stderr[-2000:]))
    return p


def features(c):
    """(placement, checkpointing, precision, micro-batch) of a candidate from its description."""
    w = c["what"]
    prec = w.split(",")[0]
    ck = "ckpt (cpu)" if "ckpt (cpu)" in w else "ckpt" if ", ckpt" in w else "no ckpt"
    opt = w.split("optimizer ")[1].split(",")[0]
    par = "params " + w.split("params ")[1].split(" (")[0] if "params " in w else ""
    mb = w.split("micro-batch ")[1].split(",")[0]
    return ("optimizer %s%s" % (opt, ", " + par if par else ""), ck, prec, mb)


def pick(cands, n):
    """A spread, best-ranked first within each step: every placement; every
    checkpointing x precision pair; every micro-batch split; then any
    combination not timed yet."""
    chosen, keys = [], set()

    def take(c):
        chosen.append(c)
        keys.add(features(c))

    for part in ((0,), (1, 2), (3,), (0, 1, 2, 3)):
        seen = {tuple(features(c)[i] for i in part) for c in chosen}
        for c in cands:
            if len(chosen) == n:
                return chosen
            k = tuple(features(c)[i] for i in part)
            if k in seen or features(c) in keys:
                continue
            seen.add(k)
            take(c)
    return chosen


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/release/zoffload")
    ap.add_argument("--config", default="configs/tiny.json")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--per-model", type=int, default=12)
    ap.add_argument("--sizes", default="small,medium")
    ap.add_argument("--nvme-path", default=None)
    ap.add_argument("--no-calibrate", action="store_true")
    ap.add_argument("--calibrations", type=int, default=3, help="calibration runs; each rate the best")
    ap.add_argument("--label", default="")
    ap.add_argument("--out", default=None, help="also write the table to FILE")
    a = ap.parse_args()

    env = dict(os.environ)
    tmp = tempfile.mkdtemp(prefix="zo-autoplan-")
    nvme = a.nvme_path or os.path.join(tmp, "nvme")
    os.makedirs(nvme, exist_ok=True)
    lines = []

    def say(s=""):
        print(s, flush=True)
        lines.append(s)

    try:
        if not a.no_calibrate:
            # Several calibrations, each rate the best of them: on a shared
            # machine one run may fall on a busy moment.
            env["XDG_CACHE_HOME"] = os.path.join(tmp, "cache")
            best = None
            scales = []
            for i in range(a.calibrations):
                p = run([a.bin, "bench", "calibrate", "--nvme-path", nvme], env)
                path = p.stdout.strip().splitlines()[-1].split("wrote ", 1)[1]
                prof = json.load(open(path))
                scales.append(prof.get("compute_scale", [1.0, 1.0]) + prof.get("compute_scale_half", [1.0, 1.0]))
                if best is None:
                    best = prof
                    continue
                for k, v in prof.items():
                    if k.startswith("compute_scale"):
                        continue  # a ratio of a step to the run's own rates: the median of the runs, below
                    if isinstance(v, list) and (k.startswith("gemm") or k.startswith("attn_flops")):
                        best[k] = [max(x, y) for x, y in zip(best[k], v)]
                    elif k == "op_s":
                        best[k] = min(best[k], v)
                    elif isinstance(v, float) and k != "op_s":
                        best[k] = max(best[k], v)
            med = [statistics.median(x) for x in zip(*scales)]
            best["compute_scale"], best["compute_scale_half"] = med[:2], med[2:]
            with open(path, "w") as f:
                json.dump(best, f, indent=2)
            say("calibration: zoffload bench calibrate --nvme-path %s, %d runs, each rate the best:" %
                (nvme, a.calibrations))
            say("  GEMM GFLOP/s at widths %s: fp32 %s, bf16 %s" % (
                best["widths"], " ".join("%.1f" % (x * 1e-9) for x in best["gemm_flops_fp32"]),
                " ".join("%.1f" % (x * 1e-9) for x in best["gemm_flops_half"])))
            say("  attention GFLOP/s at sequence lengths %s: fp32 %s, bf16 %s" % (
                best["attn_seqs"], " ".join("%.1f" % (x * 1e-9) for x in best["attn_flops_fp32"]),
                " ".join("%.1f" % (x * 1e-9) for x in best["attn_flops_half"])))
            say("  elementwise %.2f GB/s, %.1f us per op, copies %.2f / %.2f GB/s" % (
                best["mem_bw"] * 1e-9, best["op_s"] * 1e6, best["h2d_bw"] * 1e-9, best["d2h_bw"] * 1e-9))
            say("  reference steps at widths %s: measured / predicted compute fp32 %s, bf16 %s (median of the runs)" % (
                best["ref_widths"], " ".join("%.3f" % x for x in best["compute_scale"]),
                " ".join("%.3f" % x for x in best["compute_scale_half"])))
            say("  AdamW %.0f / %.0f Mparams/s (fp32 / 8-bit), NVMe read %.2f write %.2f GB/s" % (
                best["adamw_params_per_s"] * 1e-6, best["adamw8bit_params_per_s"] * 1e-6,
                best["nvme_read_bw"] * 1e-9, best["nvme_write_bw"] * 1e-9))
        errors, firsts = [], []
        for size in a.sizes.split(","):
            base = SIZES[size]
            sets = sum((["--set", s] for s in base), [])
            p = run([a.bin, "plan", a.config, "--auto", "--json", "--nvme-path", nvme] + sets, env)
            cands = json.loads(p.stdout.strip().splitlines()[-1])
            chosen = pick(cands, a.per_model)
            say()
            say("%s model (%s): %d candidates fit, %d timed with bench step --steps %d" %
                (size, " ".join(base[:3]), len(cands), len(chosen), a.steps))
            say("| rank | candidate | predicted ms | measured ms | error |")
            say("|---:|---|---:|---:|---:|")
            rows = []
            for c in chosen:
                cs = sum((["--set", s] for s in base + c["sets"]), [])
                q = run([a.bin, "bench", "step", a.config, "--steps", str(a.steps), "--json"] + cs, env)
                if q.returncode != 0:
                    say("| %d | %s | %.1f | failed: %s | |" % (c["rank"], c["what"], c["predicted_step_ms"],
                                                             q.stderr.strip().splitlines()[-1][:80]))
                    continue
                m = json.loads(q.stdout.strip().splitlines()[-1])["step_ms"]
                err = (c["predicted_step_ms"] - m) / m
                rows.append((c, m, err))
                errors.append(abs(err))
                say("| %d | %s | %.1f | %.1f | %+.1f%% |" % (c["rank"], c["what"], c["predicted_step_ms"], m, 100 * err))
            if rows:
                # The model's shape apart from the machine's speed of the moment:
                # predictions scaled by one factor (the median measured / predicted).
                k = statistics.median(m / c["predicted_step_ms"] for c, m, _ in rows)
                scaled = [abs(c["predicted_step_ms"] * k - m) / m for c, m, _ in rows]
                say("scaled by %.3f (median measured / predicted): median |error| %.1f%%" %
                    (k, 100 * statistics.median(scaled)))
                best_pred = min(rows, key=lambda r: r[0]["predicted_step_ms"])
                fastest = min(rows, key=lambda r: r[1])
                gap = best_pred[1] / fastest[1] - 1
                firsts.append(gap)
                say("first-ranked of those timed: %s, measured %.1f ms; fastest measured: %s, %.1f ms (%+.1f%%)" %
                    (best_pred[0]["what"], best_pred[1], fastest[0]["what"], fastest[1], 100 * gap))
        say()
        if errors:
            med = statistics.median(errors)
            ok_err = med <= 0.20
            ok_first = all(g <= 0.10 for g in firsts)
            say("median |error| %.1f%% over %d candidates (target <= 20%%: %s); first-ranked within 10%% of the "
                "fastest measured: %s" % (100 * med, len(errors), "met" if ok_err else "NOT met",
                                           "met" if ok_first else "NOT met"))
        if a.out:
            with open(a.out, "w") as f:
                if a.label:
                    f.write(a.label + "\n\n")
                f.write("\n".join(lines) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
