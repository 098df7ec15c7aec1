"""Helpers shared by the transformers interoperability tests of tests/hf/:
the pass/fail tally, running the zoffload CLI, the engine's evaluation
windows, transformers' mean loss over them, greedy decoding and the common
main (argument, temporary directory, summary). tests/hf/run.sh has checked
that torch and transformers import before a test runs."""
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

failures = []
passes = 0


def check(ok, what):
    global passes
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if ok:
        passes += 1
    else:
        failures.append(what)


def zo(binary, *args, raw=False):
    """Runs zoffload; returns stdout (bytes when raw), exits the test on a
    non-zero code."""
    r = subprocess.run([binary, *args], capture_output=True)
    if r.returncode != 0:
        print(f"FAIL zoffload {' '.join(args)} -> exit {r.returncode}\n"
              f"{r.stdout.decode(errors='replace')}{r.stderr.decode(errors='replace')}", flush=True)
        sys.exit(1)
    return r.stdout if raw else r.stdout.decode(errors="replace")


def eval_loss_cli(binary, config, *extra, fatal=True):
    """(loss, n_batches) printed by `zoffload eval`; with fatal=False a
    failing run returns (None, its message) instead of ending the test."""
    if not fatal:
        r = subprocess.run([binary, "eval", config, *extra], capture_output=True)
        if r.returncode != 0:
            return None, f"exit {r.returncode}: {(r.stdout + r.stderr).decode(errors='replace').strip()}"
    out = zo(binary, "eval", config, *extra)
    m = re.search(r"val loss (\S+) over (\d+) batches", out)
    if not m:
        print(f"FAIL cannot parse `zoffload eval` output:\n{out}")
        sys.exit(1)
    return float(m.group(1)), int(m.group(2))


def train_step0_loss(binary, config, *extra):
    """The step-0 validation loss `zoffload train` prints (4 decimals) for a
    one-step run without a checkpoint."""
    out = zo(binary, "train", config, "--set", "steps=1", "--set", "checkpoint.every=0", *extra)
    m = re.search(r"step 0: val loss (\S+)", out)
    return float(m.group(1)) if m else float("nan")


def windows(tokens, n_batches, b, t):
    """Micro-batches 0..n_batches-1 of the engine's unshuffled stream
    (include/zo/data.h, "Order", shuffle false): window i is
    tokens[(i*B*T + k) mod N] for k = 0..B*T; inputs are rows of T, targets
    the same shifted by one token."""
    n, bt = len(tokens), b * t
    for i in range(n_batches):
        idx = (i * bt + np.arange(bt + 1)) % n
        w = torch.from_numpy(tokens[idx].astype(np.int64))
        yield w[:bt].view(b, t), w[1:].view(b, t)


@contextlib.contextmanager
def default_dtype(dtype):
    """torch's default dtype set to dtype for the block: transformers 4.36
    builds Llama's causal mask with torch.full(..., finfo(model dtype).min)
    in the default dtype, which overflows for a float64 model otherwise."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def hf_logits(model, ids):
    """model(input_ids=ids).logits in float64, without autograd."""
    with torch.no_grad(), default_dtype(next(model.parameters()).dtype):
        return model(input_ids=ids).logits.double()


def hf_mean_loss(model, tokens, n_batches, b, t):
    """Mean over micro-batches of the mean token cross-entropy: the engine's
    eval_loss (engine/train.c) computed by transformers."""
    total = 0.0
    for x, y in windows(tokens, n_batches, b, t):
        logits = hf_logits(model, x)
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
    return total / n_batches


def hf_greedy(model, prompt, n_new, max_seq_len, tie=1e-4):
    """transformers' greedy continuation of prompt (token ids) by n_new
    tokens over a sliding window of max_seq_len, and the first step whose
    top two logits are within tie (fp32 may pick either), or None."""
    ctx, tie_at = list(prompt), None
    for step in range(n_new):
        lg = hf_logits(model, torch.tensor([ctx[-max_seq_len:]]))[0, -1]
        top2 = lg.topk(2)
        if tie_at is None and (top2.values[0] - top2.values[1]).item() < tie:
            tie_at = step
        ctx.append(int(top2.indices[0]))
    return ctx[len(prompt):], tie_at


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def main(doc, parts):
    """Runs parts(binary, tmp) in order over one temporary directory (kept
    with --keep) and prints the tally. Returns the exit code."""
    import transformers
    args = [a for a in sys.argv[1:] if a != "--keep"]
    if len(args) != 1:
        print(doc)
        return 2
    binary = os.path.abspath(args[0])
    torch.set_num_threads(min(4, os.cpu_count() or 1))
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # "Loading checkpoint shards"
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, numpy {np.__version__}")
    tmp = tempfile.mkdtemp(prefix="zo-hf-")
    os.environ.setdefault("HF_HOME", os.path.join(tmp, "hf-home"))
    try:
        for part in parts:
            part(binary, tmp)
    finally:
        if "--keep" in sys.argv:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passes} passed, {len(failures)} failed")
    for f in failures:
        print(f"  FAIL {f}")
    return 1 if failures else 0
