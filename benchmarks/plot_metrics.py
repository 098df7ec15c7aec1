#!/usr/bin/python3
"""Draws the loss and throughput curves of one or several zoffload runs to a PNG.

Reads the metrics JSONL that `zoffload train` writes (log.metrics_path): one
object per optimizer step, {"step", "loss", "lr", "grad_norm", "tokens_per_s",
"ms", "time"}, and now and then {"step", "val_loss", "time"} ("time": Unix
seconds; older files lack it). Two panels sharing the x axis:
  top     training loss (raw, and a centred moving average from 100 steps on) and
          validation loss;
  bottom  throughput in tokens/s, with its median over the steps after the
          first (the first step includes warm-up).
Several files overlay their runs, one colour each (train loss solid, val loss
dashed with markers, median throughput dotted), named in the legend by
--label or by the shortest distinct tail of their paths. --x time puts the
wall-clock minutes since each run's first record on the x axis (records
without "time" are left out then).
A run resumed from a checkpoint appends steps it had already logged; the last
record of each step wins. Lines that are not JSON objects are skipped with a
warning.

Usage:  benchmarks/plot_metrics.py METRICS.jsonl [METRICS2.jsonl ...] [-o OUT.png]
            [--label NAME ...] [--title TEXT] [--x step|time]
        (default OUT: the first METRICS with .png for .jsonl, beside it)
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


def series(records, key, x="step"):
    """(xs, ys) of key over the records in step order; x "time": minutes since
    the run's first timed record, records without "time" left out."""
    t0 = min((r["time"] for r in records.values() if isinstance(r.get("time"), (int, float))), default=None)
    xs, ys = [], []
    for step in sorted(records):
        r = records[step]
        v = r.get(key)
        if not (isinstance(v, (int, float)) and math.isfinite(v)):
            continue
        if x == "time":
            t = r.get("time")
            if not isinstance(t, (int, float)) or t0 is None:
                continue
            xs.append((t - t0) / 60.0)
        else:
            xs.append(step)
        ys.append(float(v))
    return xs, ys


def run_labels(paths):
    """The shortest tails of the paths that tell them apart ("a/metrics.jsonl",
    "b/metrics.jsonl"), without the .jsonl suffix."""
    parts = [os.path.normpath(os.path.abspath(p)).split(os.sep) for p in paths]
    for k in range(1, max(len(q) for q in parts) + 1):
        names = ["/".join(q[-k:]) for q in parts]
        if len(set(names)) == len(names):
            break
    return [n[:-6] if n.endswith(".jsonl") else n for n in names]


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


def plot(runs, out, title, x="step"):
    """runs: [(label, train, val)]; one colour each when there are several."""
    fig, (ax_loss, ax_tps) = plt.subplots(2, 1, figsize=(9, 7.5), sharex=True,
                                          gridspec_kw={"height_ratios": [3, 2]})
    fig.suptitle(title, fontsize=11)
    several = len(runs) > 1
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    at = "min" if x == "time" else "step"
    any_loss = any_tps = False
    for i, (label, train, val) in enumerate(runs):
        c_train = colours[i % len(colours)] if several else "tab:blue"
        c_val = colours[i % len(colours)] if several else "tab:orange"
        c_tps = colours[i % len(colours)] if several else "tab:green"
        name = f"{label}: " if several else ""
        xs, ys = series(train, "loss", x)
        vx, vy = series(val, "val_loss", x)
        if xs:
            smooth = len(xs) >= 100
            ax_loss.plot(xs, ys, color=c_train, lw=1.0, alpha=0.35 if smooth else 1.0,
                         label=None if smooth and several else
                         f"{name}train loss (last {ys[-1]:.4f} at {at} {xs[-1]:.4g})")
            if smooth:
                window = 2 * (len(xs) // 100) + 1
                ax_loss.plot(xs, centered_mean(ys, window), color=c_train, lw=1.8,
                             label=f"{name}train loss, mean over {window} steps (last {ys[-1]:.4f})")
        if vx:
            ax_loss.plot(vx, vy, color=c_val, lw=1.5, marker="o", ms=4, ls="--" if several else "-",
                         label=f"{name}val loss (last {vy[-1]:.4f} at {at} {vx[-1]:.4g})")
        any_loss = any_loss or bool(xs or vx)
        tx, ty = series(train, "tokens_per_s", x)
        if tx:
            ax_tps.plot(tx, ty, color=c_tps, lw=1.0, marker="." if len(tx) <= 60 else None,
                        label=f"{label}" if several else "tokens/s")
            steady = ty[1:] if len(ty) > 1 else ty
            med = statistics.median(steady)
            ax_tps.axhline(med, color=c_tps if several else "tab:gray", ls=":" if several else "--", lw=1.0,
                           label=f"{name}median {med:,.0f} tokens/s" + (" (after step 1)" if len(ty) > 1 else ""))
            any_tps = True
    if not any_loss:
        ax_loss.text(0.5, 0.5, "no loss records", ha="center", va="center", transform=ax_loss.transAxes)
    ax_loss.set_ylabel("loss (nats/token)")
    ax_loss.grid(True, alpha=0.3)
    if any_loss:
        ax_loss.legend(loc="upper right", fontsize=8 if several else 9)
    if any_tps:
        ax_tps.set_ylim(0, max(max(series(t, "tokens_per_s", x)[1], default=0) for _, t, _ in runs) * 1.12)
        ax_tps.legend(loc="best", fontsize=8 if several else 9, framealpha=0.9)
    else:
        ax_tps.text(0.5, 0.5, "no throughput records", ha="center", va="center", transform=ax_tps.transAxes)
    ax_tps.yaxis.set_major_formatter(FuncFormatter(human))
    ax_tps.set_ylabel("throughput (tokens/s)")
    ax_tps.set_xlabel("wall-clock minutes since the run's first record" if x == "time" else "optimizer step")
    ax_tps.grid(True, alpha=0.3)
    if x == "step":
        ax_tps.xaxis.set_major_locator(MaxNLocator(integer=True))

    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Plot loss and throughput curves of zoffload metrics JSONL files; "
                                             "several files overlay their runs.")
    ap.add_argument("metrics", nargs="+", help="metrics JSONL written by zoffload train (log.metrics_path)")
    ap.add_argument("-o", "--out", help="output PNG (default: the first METRICS with .png for .jsonl)")
    ap.add_argument("--label", action="append", help="legend name of each run, in order (repeat; default: "
                                                      "the distinct tails of the paths)")
    ap.add_argument("--title", help="figure title (default: the metrics path(s) and step range)")
    ap.add_argument("--x", choices=("step", "time"), default="step",
                    help="x axis: optimizer step (default) or wall-clock minutes (the records' \"time\")")
    args = ap.parse_args(argv)
    if args.label and len(args.label) != len(args.metrics):
        print(f"plot_metrics: {len(args.label)} --label for {len(args.metrics)} files", file=sys.stderr)
        return 2

    labels = args.label or run_labels(args.metrics)
    runs, steps = [], set()
    for path, label in zip(args.metrics, labels):
        try:
            train, val = read_metrics(path)
        except OSError as e:
            print(f"plot_metrics: {e}", file=sys.stderr)
            return 1
        if not train and not val:
            print(f"plot_metrics: {path}: no metrics records", file=sys.stderr)
            return 1
        if args.x == "time" and not any("time" in r for r in list(train.values()) + list(val.values())):
            print(f"plot_metrics: {path}: no \"time\" in its records (written before zoffload logged it): "
                  "use --x step", file=sys.stderr)
            return 1
        runs.append((label, train, val))
        steps |= set(train) | set(val)
    out = args.out or (os.path.splitext(args.metrics[0])[0] + ".png")
    steps = sorted(steps)
    what = args.metrics[0] if len(runs) == 1 else f"{len(runs)} runs"
    title = args.title or f"{what}  (steps {steps[0]}-{steps[-1]})"
    plot(runs, out, title, args.x)
    print(f"plot_metrics: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
