#!/usr/bin/python3
"""Sharded Hugging Face directories (issue 52, class 3): the index's
weight_map is the truth.

A tiny random Llama saved by transformers with save_pretrained(max_shard_size=
...) (several model-0000k-of-0000n.safetensors and
model.safetensors.index.json):

  1. untampered: `zoffload eval` equals transformers' loss within 1e-5;
  2. a tensor also present, with other values, in a shard the index does not
     assign it to (it used to be read from whichever shard opened first: a
     changed loss, exit 0): refused naming the tensor and both files;
  3. a tensor moved to another shard, the index unchanged: refused naming
     the tensor and both files;
  4. the index lists a tensor twice: refused naming the tensor and both
     files;
  5. a shard the index names is missing: refused naming the file;
  6. a weight_map entry naming a tensor no shard holds: refused naming it
     and its shard;
  7. a shard holds a tensor the index does not list: refused naming both.

Each refusal: nonzero exit, no loss.

Usage: tests/hf/run.sh ZOFFLOAD REPO test_hf_shards.py
"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zo_hf import check, hf_mean_loss, main, random_tokens, rel, tiny_llama  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

LOSS_RTOL = 1e-5
V, C, NH, I, L, TMAX = 97, 32, 4, 40, 2, 32
B, T, NB = 2, 16, 3
INDEX = "model.safetensors.index.json"
VICTIM = "model.layers.0.self_attn.q_proj.weight"


def sharded_dir(tmp):
    model = tiny_llama(7, False, V, C, I, L, NH, TMAX)
    d = os.path.join(tmp, "sharded")
    model.save_pretrained(d, safe_serialization=True, max_shard_size="20KB")
    return d


def weight_map(d):
    with open(os.path.join(d, INDEX)) as f:
        return json.load(f)["weight_map"]


def rewrite(d, shard, edit):
    """Rewrites d/shard with edit(tensors) (a dict changed in place)."""
    p = os.path.join(d, shard)
    sd = {k: v.clone() for k, v in load_file(p).items()}  # not views of the file rewritten below
    edit(sd)
    save_file(sd, p, metadata={"format": "pt"})


def copy_of(src, tmp, name):
    d = os.path.join(tmp, name)
    shutil.copytree(src, d)
    return d


def other_shard(wm, name):
    return next(s for s in sorted(set(wm.values())) if s != wm[name])


def zo_eval(binary, config, d):
    """(loss or None, exit code, the whole output)."""
    r = subprocess.run([binary, "eval", config, "--checkpoint", d, "--batches", str(NB)], capture_output=True)
    out = (r.stdout + r.stderr).decode(errors="replace")
    m = re.search(r"val loss (\S+) over", out)
    return (float(m.group(1)) if r.returncode == 0 and m else None), r.returncode, out


def refused(binary, config, d, what, *needles):
    got, rc, out = zo_eval(binary, config, d)
    last = out.strip()[-400:]
    check(got is None and rc != 0 and all(n in out for n in needles),
          f"{what}: refused (exit {rc}) naming {', '.join(needles)}: {last}")


def shard_parts(binary, tmp):
    from transformers import LlamaForCausalLM
    _, tokens, tok_path = random_tokens(tmp, V, 4096)
    config = os.path.join(tmp, "eval.json")
    with open(config, "w") as f:
        json.dump({"train_micro_batch_size_per_gpu": B, "model": {"arch": "llama"},
                   "data": {"train": tok_path, "val": tok_path, "format": "u16", "seq_len": T},
                   "engine": {"device": "cpu"}, "checkpoint": {"dir": os.path.join(tmp, "no-ck")}}, f)
    d = sharded_dir(tmp)
    wm = weight_map(d)
    shards = sorted(set(wm.values()))
    check(len(shards) >= 3, f"save_pretrained(max_shard_size=20KB) wrote {len(shards)} shards and their index")

    # 1. Untampered.
    hf = LlamaForCausalLM.from_pretrained(d, torch_dtype=torch.float64, attn_implementation="eager").eval()
    want = hf_mean_loss(hf, tokens, NB, B, T)
    got, rc, out = zo_eval(binary, config, d)
    check(got is not None and rel(got, want) <= LOSS_RTOL,
          f"untampered: zoffload eval {got} equals transformers' {want:.6f} (exit {rc}) {out.strip()[-200:]}")

    home, away = wm[VICTIM], other_shard(wm, VICTIM)

    # 2. Present in two shards, other values in the one not assigned.
    d2 = copy_of(d, tmp, "twice")
    torch.manual_seed(8)
    rewrite(d2, away, lambda sd: sd.__setitem__(VICTIM, torch.randn(C, C)))
    refused(binary, config, d2, "a tensor in two shards", VICTIM, away, home)

    # 3. Moved to another shard, the index unchanged.
    d3 = copy_of(d, tmp, "moved")
    victim = load_file(os.path.join(d3, home))[VICTIM].clone()
    rewrite(d3, home, lambda sd: sd.pop(VICTIM))
    rewrite(d3, away, lambda sd: sd.__setitem__(VICTIM, victim))
    refused(binary, config, d3, "a tensor in a shard the index does not assign it to", VICTIM, away, home)

    # 4. Listed twice in the index (the second time naming another shard).
    d4 = copy_of(d, tmp, "listed-twice")
    p = os.path.join(d4, INDEX)
    with open(p) as f:
        text = f.read()
    entry = f'"{VICTIM}": "{home}"'
    check(entry in text, f"the index holds {entry}")
    with open(p, "w") as f:
        f.write(text.replace(entry, f'{entry},\n    "{VICTIM}": "{away}"'))
    refused(binary, config, d4, "a tensor listed twice in the index", VICTIM, INDEX, home, away)

    # 5. A shard the index names is missing.
    d5 = copy_of(d, tmp, "missing-shard")
    os.remove(os.path.join(d5, away))
    refused(binary, config, d5, "a missing shard", away)

    # 6. A weight_map entry naming a tensor no shard holds.
    d6 = copy_of(d, tmp, "phantom")
    with open(os.path.join(d6, INDEX)) as f:
        j = json.load(f)
    j["weight_map"]["model.layers.0.self_attn.phantom.weight"] = home
    with open(os.path.join(d6, INDEX), "w") as f:
        json.dump(j, f)
    refused(binary, config, d6, "a weight_map entry no shard holds", "model.layers.0.self_attn.phantom.weight", home)

    # 7. A shard holds a tensor the index does not list (a name the model uses).
    d7 = copy_of(d, tmp, "unlisted")
    with open(os.path.join(d7, INDEX)) as f:
        j = json.load(f)
    del j["weight_map"][VICTIM]
    with open(os.path.join(d7, INDEX), "w") as f:
        json.dump(j, f)
    refused(binary, config, d7, "a shard's tensor the index does not list", VICTIM, home)


if __name__ == "__main__":
    sys.exit(main(__doc__, (shard_parts,)))
