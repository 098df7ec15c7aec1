#!/usr/bin/python3
"""Draws one step of a zoffload timeline as a Gantt chart, a row per track.

Reads the Chrome trace-event JSON that `zoffload train --trace FILE` or
`zoffload bench step CONFIG --trace FILE` writes: one thread (tid) per track
(compute, h2d, d2h, optim, nvme_io, reduce, block_gather, host, nvme), spans
and waits as complete events ("X", cat "op" or "wait"), NVMe requests as
async events (cat "nvme"), each traced step as an "X" event of cat "step".
Spans are coloured by what they do (GEMMs and attention, other compute ops,
copies, optimizer, NVMe, collectives), waits are drawn hatched and grey;
NVMe requests in flight at once are stacked in lanes. The title gives the
step time and each busy track's share of it.

Usage:  benchmarks/plot_trace.py TRACE.json [-o OUT.png] [--step N] [--title TEXT]
        (default OUT: TRACE with .png for .json; default step: the last traced)
Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

KINDS = [  # (label, colour, test on the span's name)
    ("GEMM / attention", "#1f77b4", lambda n: n.startswith(("matmul", "attention"))),
    ("other compute ops", "#9ecae1", lambda n: n.endswith(("_forward", "_backward")) or n in ("cast", "memset")),
    ("host <-> device copies", "#ff7f0e", lambda n: n.startswith(("copy", "load ", "grads out", "save input"))),
    ("optimizer", "#2ca02c", lambda n: n.startswith(("adamw", "norm", "accumulate", "sumsq"))),
    ("NVMe", "#d62728", lambda n: n.startswith("nvme")),
    ("collectives", "#9467bd", lambda n: n.startswith(("allreduce", "reduce", "exchange", "gather"))),
]
OTHER = ("other", "#7f7f7f")
ORDER = ["compute", "h2d", "d2h", "optim", "nvme_io", "nvme", "reduce", "block_gather", "host"]


def kind_of(name):
    for label, colour, test in KINDS:
        if test(name):
            return label, colour
    return OTHER


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("-o", "--out")
    ap.add_argument("--step", type=int, help="step number to draw (default: the last traced)")
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    with open(args.trace) as f:
        events = json.load(f)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    steps = [e for e in events if e.get("ph") == "X" and e.get("cat") == "step"]
    if not steps:
        sys.exit(f"{args.trace}: no traced step (no event of cat \"step\")")
    step = steps[-1] if args.step is None else next((s for s in steps if s["args"]["step"] == args.step), None)
    if step is None:
        sys.exit(f"{args.trace}: no step {args.step}; traced: {[s['args']['step'] for s in steps]}")
    lo, hi = step["ts"], step["ts"] + step["dur"]
    rows = {}  # track name -> list of (t0, t1, colour, hatch)
    busy = {}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("op", "wait"):
            continue
        t0, t1 = max(e["ts"], lo), min(e["ts"] + e["dur"], hi)
        if t1 <= t0:
            continue
        track = names.get(e["tid"], str(e["tid"]))
        if e["cat"] == "wait":
            rows.setdefault(track, []).append((t0, t1, "#d9d9d9", "///"))
        else:
            rows.setdefault(track, []).append((t0, t1, kind_of(e["name"])[1], None))
            busy[track] = busy.get(track, 0.0) + (t1 - t0)
    # NVMe requests: async begin/end pairs, stacked in lanes
    opened, lanes = {}, []
    for e in sorted((e for e in events if e.get("cat") == "nvme"), key=lambda e: e["ts"]):
        if e["ph"] == "b":
            opened[e["id"]] = e
        elif e["ph"] == "e" and e["id"] in opened:
            b = opened.pop(e["id"])
            t0, t1 = max(b["ts"], lo), min(e["ts"], hi)
            if t1 <= t0:
                continue
            for lane in lanes:
                if lane[-1][1] <= t0:
                    lane.append((t0, t1))
                    break
            else:
                lanes.append([(t0, t1)])
    for i, lane in enumerate(lanes):
        rows[f"nvme requests {i}" if len(lanes) > 1 else "nvme requests"] = [
            (a, b, KINDS[4][1], None) for a, b in lane]
    def rank(r):
        head, last = r.split()[0], r.split()[-1]
        return (ORDER.index(head) if head in ORDER else len(ORDER), int(last) if last.isdigit() else -1, r)

    order = sorted(rows, key=rank)
    fig, ax = plt.subplots(figsize=(14, 0.45 * len(order) + 1.6))
    for y, track in enumerate(order):
        for t0, t1, colour, hatch in rows[track]:
            ax.broken_barh([((t0 - lo) / 1e3, (t1 - t0) / 1e3)], (y - 0.38, 0.76), facecolors=colour,
                           edgecolor="none" if hatch is None else "#969696", hatch=hatch, linewidth=0)
    ax.set_yticks(range(len(order)))
    ax.set_yticklabels(order)
    ax.invert_yaxis()
    ax.set_xlim(0, (hi - lo) / 1e3)
    ax.set_xlabel("ms from the step's start")
    dur = (hi - lo) / 1e3
    shares = ", ".join(f"{t} {100 * busy[t] / (hi - lo):.0f}%" for t in order if busy.get(t))
    ax.set_title(f"{args.title + ': ' if args.title else ''}step {step['args']['step']}, {dur:.1f} ms "
                 f"(busy: {shares})", fontsize=10)
    handles = [Patch(color=c, label=l) for l, c, _ in KINDS] + [
        Patch(facecolor="#d9d9d9", hatch="///", edgecolor="#969696", label="wait")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=7, fontsize=8, frameon=False)
    fig.tight_layout()
    out = args.out or os.path.splitext(args.trace)[0] + ".png"
    fig.savefig(out, dpi=110)
    print(f"{out}: step {step['args']['step']}, {dur:.1f} ms, {len(order)} tracks")


if __name__ == "__main__":
    main()
