#!/usr/bin/python3
"""Training with a loss mask (a token file's PATH.mask, include/engine/zo/data.h)
against PyTorch's cross-entropy with ignore_index.

A randomly initialised GPT-2 (transformers, every weight perturbed so the
logits spread) trains one step from model.init_from on random tokens whose
mask trains about 40% of the targets, with 2 micro-batches of 3 rows
(gradient accumulation) whose trained-target counts differ. The reference
is one PyTorch batch of those 6 rows, labels -100 where masked,
F.cross_entropy(..., ignore_index=-100) (the mean over the trained targets
of the whole step): the engine's step-1 loss must equal it to 1e-6 relative
and its gradient norm (before clipping; metrics "grad_norm") to 1e-5.
Three steps must give the same losses and norms, bit for bit, with the
optimizer and gradients on the host (zero_optimization stage 2,
offload_optimizer cpu), with the optimizer on NVMe, and with parameters on
the host too (stage 3, offload_param cpu); when mpirun is there, 3 ranks
each reading 1 of the 3 rows of every micro-batch must give torch's step-1
loss and norm (the mean is global over the ranks). A mask of all ones must
give the step's unmasked loss (the file without its mask), and targets
masked in one step leave the gradient untouched: changing the token of a
masked target's position changes nothing.

Usage: PYTHONPATH=build/hf-site /usr/bin/python3 tests/hf/test_masked_loss.py ZOFFLOAD [--keep]
(tests/hf/run.sh ZOFFLOAD REPO test_masked_loss.py; ctest -R hf-masked-loss).
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zo_hf  # noqa: E402
from zo_hf import check, rel  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

V, N_LAYER, N_HEAD, C, TMAX = 97, 2, 4, 32, 32
B, T, K = 3, 16, 2


def metrics_steps(path):
    """[(loss, grad_norm)] of every step."""
    out = []
    with open(path) as f:
        for line in f:
            m = json.loads(line)
            if "loss" in m:
                out.append((m["loss"], m["grad_norm"]))
    return out


def run_steps(binary, tmp, name, config, *extra, ranks=1):
    metrics = os.path.join(tmp, f"{name}.jsonl")
    run_dir = os.path.join(tmp, f"run-{name}")
    args = [binary, "train", config, "--set", f"log.metrics_path={metrics}", "--set", f"checkpoint.dir={run_dir}",
            *extra]
    env = None
    if ranks > 1:
        args = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), *args]
        # Open MPI's own allocations outlive MPI_Finalize: under AddressSanitizer
        # the ranks run without leak checks, as scripts/test.sh runs the mpi label.
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = ":".join(x for x in (env.get("ASAN_OPTIONS", ""), "detect_leaks=0") if x)
    r = subprocess.run(args, capture_output=True, env=env)
    if r.returncode != 0:
        print(f"FAIL {' '.join(args)} -> exit {r.returncode}\n{r.stdout.decode(errors='replace')}"
              f"{r.stderr.decode(errors='replace')}", flush=True)
        return [(float("nan"), float("nan"))] * 3
    return metrics_steps(metrics)


def run_step(binary, tmp, name, config, *extra, ranks=1):
    """(loss, grad_norm) of step 1."""
    return run_steps(binary, tmp, name, config, *extra, ranks=ranks)[0]


def reference(model, tokens, mask):
    """Loss and gradient norm of one step over K micro-batches of B rows:
    one batch of K*B rows, labels -100 where the target is masked."""
    bt = B * T
    xs, ys = [], []
    for i in range(K):
        w = torch.from_numpy(tokens[i * bt:i * bt + bt + 1].astype(np.int64))
        mk = torch.from_numpy(mask[i * bt:i * bt + bt + 1].astype(np.int64))
        y = w[1:].clone()
        y[mk[1:] == 0] = -100
        xs.append(w[:bt].view(B, T))
        ys.append(y.view(B, T))
    x, y = torch.cat(xs), torch.cat(ys)
    model.zero_grad()
    logits = model(input_ids=x).logits.double()
    loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1), ignore_index=-100)
    loss.backward()
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters() if p.grad is not None))
    return loss.item(), norm.item()


def masked_loss(binary, tmp):
    print("== one step with a loss mask against F.cross_entropy(ignore_index)")
    torch.manual_seed(3)
    hcfg = GPT2Config(vocab_size=V, n_positions=TMAX, n_embd=C, n_layer=N_LAYER, n_head=N_HEAD,
                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(hcfg).double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.1 if "ln_" in name else 0.2))
    hfdir = os.path.join(tmp, "hf-model")
    model.float().save_pretrained(hfdir, safe_serialization=True)
    model.double()

    rng = np.random.default_rng(7)
    n = K * B * T + 1 + 5
    tokens = rng.integers(0, V, size=n).astype("<u2")
    mask = (rng.random(n) < 0.4).astype(np.uint8)
    # Micro-batch 0 trains many more targets than micro-batch 1: a mean of
    # per-micro-batch means would differ from the step's mean.
    mask[1:B * T // 2] = 1
    tok_path = os.path.join(tmp, "tokens.bin")
    tokens.tofile(tok_path)
    mask.tofile(tok_path + ".mask")
    plain_path = os.path.join(tmp, "plain.bin")
    tokens.tofile(plain_path)
    ones_path = os.path.join(tmp, "ones.bin")
    tokens.tofile(ones_path)
    np.ones(n, np.uint8).tofile(ones_path + ".mask")

    config = os.path.join(tmp, "masked.json")
    cfg = {"train_micro_batch_size_per_gpu": B, "gradient_accumulation_steps": K, "steps": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
           "model": {"arch": "gpt2", "init_from": hfdir, "n_layer": N_LAYER, "n_head": N_HEAD, "n_embd": C,
                     "vocab_size": V, "max_seq_len": TMAX},
           "data": {"train": tok_path, "format": "u16", "seq_len": T, "shuffle": False},
           "engine": {"device": "cpu"}, "checkpoint": {"every": 0}}
    with open(config, "w") as f:
        json.dump(cfg, f, indent=1)

    ref_loss, ref_norm = reference(model, tokens, mask)
    loss, norm = run_step(binary, tmp, "device", config)
    print(f"     loss {loss:.9f} (torch {ref_loss:.9f}), grad norm {norm:.9f} (torch {ref_norm:.9f}); "
          f"{int(mask[1:K * B * T + 1].sum())} of {K * B * T} targets trained")
    check(rel(loss, ref_loss) < 1e-6, f"masked loss = torch's ignore_index mean ({rel(loss, ref_loss):.2e})")
    check(rel(norm, ref_norm) < 1e-5, f"masked gradient norm = torch's ({rel(norm, ref_norm):.2e})")
    placements = (
        ("optimizer and gradients on the host", "host",
         ["--set", "zero_optimization.stage=2", "--set", "zero_optimization.offload_optimizer.device=cpu"]),
        ("optimizer on NVMe (a directory here)", "nvme",
         ["--set", "zero_optimization.stage=2", "--set", "zero_optimization.offload_optimizer.device=nvme",
          "--set", f"zero_optimization.offload_optimizer.nvme_path={os.path.join(tmp, 'nvme')}"]),
        ("parameters on the host too", "params",
         ["--set", "zero_optimization.stage=3", "--set", "zero_optimization.offload_optimizer.device=cpu",
          "--set", "zero_optimization.offload_param.device=cpu"]),
    )
    three = run_steps(binary, tmp, "device3", config, "--set", "steps=3")
    for label, name, extra in placements:
        got = run_steps(binary, tmp, name, config, "--set", "steps=3", *extra)
        check(got == three and len(got) == 3, f"{label}: the same losses and norms over 3 steps ({got[-1]!r})")
    with open(binary, "rb") as f:
        tsan = b"__tsan_init" in f.read()
    if tsan:
        # scripts/test.sh runs no MPI job under ThreadSanitizer (Open MPI is not instrumented).
        print("     (a ThreadSanitizer build: the rank case is not run)")
    elif shutil.which("mpirun") and "mpi" in subprocess.run([binary, "env"], capture_output=True,
                                                             text=True).stdout.lower():
        l2, n2 = run_step(binary, tmp, "ranks", config, "--set", "train_micro_batch_size_per_gpu=%d" % 1,
                          ranks=3)
        check(rel(l2, ref_loss) < 1e-6 and rel(n2, ref_norm) < 1e-5,
              f"3 ranks of 1 row: the global mean over the ranks ({l2!r}, {n2!r})")
    else:
        print("     (no MPI build or no mpirun: the rank case is not run)")

    l_plain, n_plain = run_step(binary, tmp, "plain", config, "--set", f"data.train={plain_path}")
    l_ones, n_ones = run_step(binary, tmp, "ones", config, "--set", f"data.train={ones_path}")
    check(rel(l_ones, l_plain) < 1e-7 and rel(n_ones, n_plain) < 1e-6,
          f"a mask of all ones trains as no mask ({l_ones!r} vs {l_plain!r})")

    # A masked target's token changes only inputs after it, never a loss term
    # through its own target: change the last token of the step, masked.
    t2 = tokens.copy()
    m2 = mask.copy()
    last = K * B * T
    m2[last] = 0
    t2[last] = (int(t2[last]) + 1) % V
    a_path = os.path.join(tmp, "a.bin")
    b_path = os.path.join(tmp, "b.bin")
    tokens.tofile(a_path)
    m2.tofile(a_path + ".mask")
    t2.tofile(b_path)
    m2.tofile(b_path + ".mask")
    la, na = run_step(binary, tmp, "a", config, "--set", f"data.train={a_path}")
    lb, nb = run_step(binary, tmp, "b", config, "--set", f"data.train={b_path}")
    check(la == lb and na == nb, "a masked target's token does not enter the loss or the gradient")


if __name__ == "__main__":
    sys.exit(zo_hf.main(__doc__, [masked_loss]))
