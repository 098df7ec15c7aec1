"""Helpers shared by the transformers interoperability tests of tests/hf/:
the pass/fail tally, running the zoffload CLI, the engine's evaluation
windows, transformers' mean loss over them, greedy decoding, the training
run whose checkpoint the engine -> transformers parts check, the checks of
its safetensors file and of a greedy sample, random token files, and the
common main (argument, temporary directory, summary). tests/hf/run.sh has checked
that torch and transformers import before a test runs."""
import contextlib
import json
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
    (include/engine/zo/data.h, "Order", shuffle false): window i is
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
    eval_loss (engine/train/train.c) computed by transformers."""
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


def train_checkpoint(binary, config, model, b, t, steps, train_bin, val_bin, log_every, metrics_path, ckdir):
    """Writes config, a `zoffload train` config of model (a dict of model.*
    keys) on the u16 files train_bin and val_bin (micro-batch b of t tokens,
    shuffled, seed 1234; AdamW at 3e-3 with weight decay 0.1, warmup then
    cosine decay, clipping 1.0; one checkpoint, at the last step), trains it
    and returns that checkpoint's directory, or None after a failed check
    when it is missing."""
    cfg = {
        "train_micro_batch_size_per_gpu": b, "gradient_accumulation_steps": 1, "steps": steps,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "eps": 1e-8,
                                                  "weight_decay": 0.1}},
        "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 20,
                                                           "total_num_steps": steps,
                                                           "cos_min_ratio": 0.1}},
        "gradient_clipping": 1.0,
        "model": model,
        "data": {"train": train_bin, "val": val_bin, "format": "u16", "seq_len": t, "shuffle": True},
        "engine": {"device": "cpu", "seed": 1234},
        "log": {"every": log_every, "metrics_path": metrics_path},
        "checkpoint": {"dir": ckdir, "every": steps, "keep": 1},
    }
    with open(config, "w") as f:
        json.dump(cfg, f, indent=1)
    zo(binary, "train", config)
    ck = os.path.join(ckdir, f"checkpoint-{steps}")
    check(os.path.isdir(ck), f"zoffload train wrote {ck}")
    return ck if os.path.isdir(ck) else None


def check_safetensors_layout(st_path, want, arch, layout):
    """Checks that st_path holds exactly the tensors of want ({name: shape},
    the Hugging Face arch model's), in the shapes of want (layout names the
    linear layers' convention), all F32, with metadata format "pt"."""
    from safetensors import safe_open
    with safe_open(st_path, framework="pt") as f:
        meta = f.metadata() or {}
        keys = set(f.keys())
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in keys}
        dtypes = {f.get_slice(k).get_dtype() for k in keys}
    check(keys == set(want), f"model.safetensors holds exactly the {len(want)} HF {arch} tensors "
          f"(missing {sorted(set(want) - keys)}, extra {sorted(keys - set(want))})")
    bad = {k: (shapes[k], want[k]) for k in keys & set(want) if shapes[k] != want[k]}
    check(not bad, f"every tensor has the HF shape ({layout}); mismatches: {bad}")
    check(dtypes == {"F32"}, f"tensors are F32 (found {sorted(dtypes)})")
    check(meta.get("format") == "pt", f"safetensors metadata format is \"pt\" (found {meta})")


def check_greedy_sample(binary, config, ck, model, prompt, n_new, max_seq_len):
    """Checks that `zoffload sample --top-k 1` of checkpoint ck continues the
    text prompt with transformers' greedy continuation by model (up to a
    near-tie of its top two logits)."""
    out = zo(binary, "sample", config, "--checkpoint", ck, "--prompt", prompt, "--tokens", str(n_new),
             "--top-k", "1", "--temperature", "1", "--seed", "1", raw=True)
    got = list(out)
    hf_tokens, tie_at = hf_greedy(model, list(prompt.encode()), n_new, max_seq_len)
    hf_text = bytes(list(prompt.encode()) + hf_tokens)
    upto = len(prompt) + (n_new if tie_at is None else tie_at)
    print(f"     greedy sample: zoffload {bytes(got[:len(prompt) + n_new])!r}\n"
          f"                    transformers {hf_text!r}" + ("" if tie_at is None else f" (near-tie at {tie_at})"))
    check(bytes(got[:upto]) == hf_text[:upto],
          f"zoffload sample --top-k 1 generates transformers' greedy continuation ({upto - len(prompt)} tokens)")



def tiny_llama(seed, tie, V, C, I, L, NH, TMAX):
    """A transformers LlamaForCausalLM with seeded random weights moved off
    their init (norms by 0.1, the rest by 0.2 standard deviations)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=V, hidden_size=C, intermediate_size=I, num_hidden_layers=L,
                      num_attention_heads=NH, num_key_value_heads=NH, max_position_embeddings=TMAX,
                      rms_norm_eps=1e-6, tie_word_embeddings=tie)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.1 if "norm" in n else 0.2))
    return model

def random_tokens(tmp, vocab_size, n):
    """n uniform random token ids below vocab_size (numpy seed 5), written to
    tmp/hf-tokens.bin as u16; returns (the generator, the ids, the path)."""
    rng = np.random.default_rng(5)
    tokens = rng.integers(0, vocab_size, size=n, dtype=np.uint16)
    tok_path = os.path.join(tmp, "hf-tokens.bin")
    tokens.astype("<u2").tofile(tok_path)
    return rng, tokens, tok_path


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
