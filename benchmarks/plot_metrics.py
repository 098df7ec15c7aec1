#!/usr/bin/python3
"""Draws the loss and throughput curves of a zoffload run to a PNG.

Reads the metrics JSONL that `zoffload train` writes (log.metrics_path): one
object per optimizer step, {"step", "loss", "lr", "grad_norm", "tokens_per_s",
"ms"}, and now and then {"step", "val_loss"}. Two panels sharing the step axis:
  top     training loss (raw, and a centred moving average from 100 steps on) and
          validation loss;
  bottom  throughput in tokens/s, with its median over the steps after the
          first (the first step includes warm-up).
A run resumed from a checkpoint appends steps it had already logged; the last
record of each step wins. Lines that are not JSON objects are skipped with a
warning.

Usage:  benchmarks/plot_metrics.py METRICS.jsonl [-o OUT.png] [--title TEXT]
        (default OUT: METRICS with .png for .jsonl, beside it)
Needs matplotlib (Debian: python3-matplotlib; scripts/install-deps.sh --reference).
"""
import argparse
import json
import math
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402


def read_metrics(path):
    """Returns (train, val): dicts step -> record, the last record of a step winning."""
    train, val, bad = {}, {}, 0
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
                step = int(rec["step"])
            except (ValueError, KeyError, TypeError):
                bad += 1
                if bad <= 3:
                    print(f"plot_metrics: {path}:{n}: skipped (not a metrics record)", file=sys.stderr)
                continue
            if "val_loss" in rec:
                val[step] = rec
            if "loss" in rec or "tokens_per_s" in rec:
                train[step] = rec
    if bad > 3:
        print(f"plot_metrics: {path}: {bad} lines skipped in all", file=sys.stderr)
    return train, val


def series(records, key):
    xs, ys = [], []
    for step in sorted(records):
        v = records[step].get(key)
        if isinstance(v, (int, float)) and math.isfinite(v):
            xs.append(step)
            ys.append(float(v))
    return xs, ys


def centered_mean(ys, window):
    """Moving average over a centred window (shrinking at the ends): no lag,
    unlike an exponential average, so it sits on the raw curve."""
    h = window // 2
    prefix = [0.0]
    for y in ys:
        prefix.append(prefix[-1] + y)
    out = []
    for i in range(len(ys)):
        lo, hi = max(0, i - h), min(len(ys), i + h + 1)
        out.append((prefix[hi] - prefix[lo]) / (hi - lo))
    return out


def human(v, _pos=None):
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{suffix}"
    return f"{v:.3g}"


def plot(train, val, out, title):
    fig, (ax_loss, ax_tps) = plt.subplots(2, 1, figsize=(9, 7.5), sharex=True,
                                          gridspec_kw={"height_ratios": [3, 2]})
    fig.suptitle(title, fontsize=11)

    xs, ys = series(train, "loss")
    vx, vy = series(val, "val_loss")
    if xs:
        smooth = len(xs) >= 100
        ax_loss.plot(xs, ys, color="tab:blue", lw=1.0, alpha=0.35 if smooth else 1.0,
                     label=f"train loss (last {ys[-1]:.4f} at step {xs[-1]})")
        if smooth:
            window = 2 * (len(xs) // 100) + 1
            ax_loss.plot(xs, centered_mean(ys, window), color="tab:blue", lw=1.8,
                         label=f"train loss, mean over {window} steps")
    if vx:
        ax_loss.plot(vx, vy, color="tab:orange", lw=1.5, marker="o", ms=4,
                     label=f"val loss (last {vy[-1]:.4f} at step {vx[-1]})")
    if not xs and not vx:
        ax_loss.text(0.5, 0.5, "no loss records", ha="center", va="center", transform=ax_loss.transAxes)
    ax_loss.set_ylabel("loss (nats/token)")
    ax_loss.grid(True, alpha=0.3)
    if xs or vx:
        ax_loss.legend(loc="upper right", fontsize=9)

    tx, ty = series(train, "tokens_per_s")
    if tx:
        ax_tps.plot(tx, ty, color="tab:green", lw=1.0, marker="." if len(tx) <= 60 else None,
                    label="tokens/s")
        steady = ty[1:] if len(ty) > 1 else ty
        med = statistics.median(steady)
        ax_tps.axhline(med, color="tab:gray", ls="--", lw=1.0,
                       label=f"median {med:,.0f} tokens/s" + (" (after step 1)" if len(ty) > 1 else ""))
        ax_tps.set_ylim(0, max(ty) * 1.12)
        ax_tps.legend(loc="best", fontsize=9, framealpha=0.9)
    else:
        ax_tps.text(0.5, 0.5, "no throughput records", ha="center", va="center", transform=ax_tps.transAxes)
    ax_tps.yaxis.set_major_formatter(FuncFormatter(human))
    ax_tps.set_ylabel("throughput (tokens/s)")
    ax_tps.set_xlabel("optimizer step")
    ax_tps.grid(True, alpha=0.3)
    ax_tps.xaxis.set_major_locator(MaxNLocator(integer=True))

    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Plot loss and throughput curves of a zoffload metrics JSONL file.")
    ap.add_argument("metrics", help="metrics JSONL written by zoffload train (log.metrics_path)")
    ap.add_argument("-o", "--out", help="output PNG (default: METRICS with .png for .jsonl)")
    ap.add_argument("--title", help="figure title (default: the metrics path and step range)")
    args = ap.parse_args(argv)

    try:
        train, val = read_metrics(args.metrics)
    except OSError as e:
        print(f"plot_metrics: {e}", file=sys.stderr)
        return 1
    if not train and not val:
        print(f"plot_metrics: {args.metrics}: no metrics records", file=sys.stderr)
        return 1
    out = args.out or (os.path.splitext(args.metrics)[0] + ".png")
    steps = sorted(set(train) | set(val))
    title = args.title or f"{args.metrics}  (steps {steps[0]}-{steps[-1]})"
    plot(train, val, out, title)
    print(f"plot_metrics: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
