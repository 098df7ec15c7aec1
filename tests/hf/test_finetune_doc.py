#!/usr/bin/python3
"""docs/finetune.md's sections 3 ("Plan and train") and 4 ("Evaluate and
sample", up to the adapter subsection) run as written (issue 53, item 3),
and so does section 6 (LoRA: train an adapter, issue 46): its config with
"path/to/model" replaced, its commands with "checkpoint-1000" as
"checkpoint-2" (train runs 2 steps); the adapter export loads in
PeftModel.from_pretrained over the base and the merged export in
AutoModelForCausalLM, with the same logits.

The config is the doc's JSON block, read from the doc, with only
"path/to/model" replaced by a transformers-made Llama (with a tokenizer
learned by `zoffload tokenizer train`, as section 1 says) whose
max_position_embeddings (4096) is above the config default
model.max_seq_len (1024): the doc's seq_len 2048 must be taken from the
model. Every command line of the two sections runs in a fresh directory
holding data/sft.bin and data/sft-val.bin, in the doc's order, with one
change said here: train gets `--set steps=2` (the doc's 1000 steps would
take hours); eval gets `--batches 2`. Each must exit 0; train saves into
runs/sft (after the doc's `mkdir -p runs`), eval prints a loss, sample
prints the prompt and text.

Usage: tests/hf/run.sh ZOFFLOAD REPO test_finetune_doc.py
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zo_hf import check, main  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "finetune.md")


def config_of(sec):
    block = re.search(r"\n(    \{\n(?:    .*\n)*?    \})\n", sec).group(1)
    return "\n".join(ln[4:] for ln in block.splitlines())


def lora_section(text):
    """(config JSON text, [command lines]) of section 6."""
    s6 = text.split("## 6. LoRA", 1)[1].split("## What is checked", 1)[0]
    return config_of(s6), [re.sub(r"\s+#.*$", "", ln[4:]).strip() for ln in s6.splitlines()
                           if re.match(r"^    zoffload ", ln)]


def sections(text):
    """(config JSON text, [command lines]) of sections 3 and 4."""
    s3 = text.split("## 3. Plan and train", 1)[1].split("## 4.", 1)[0]
    s4 = text.split("## 4. Evaluate and sample", 1)[1].split("### With a PEFT", 1)[0]
    config = config_of(s3)
    cmds = []
    for sec in (s3, s4):
        for ln in sec.splitlines():
            if re.match(r"^    (zoffload|mkdir) ", ln):
                cmds.append(re.sub(r"\s+#.*$", "", ln[4:]).strip())
    return config, cmds


def run_doc_command(binary, work, cmd):
    """Runs a doc's `zoffload ...` line in work with the changes the
    docstring says (train 2 steps, eval 2 batches, checkpoint-1000 as
    checkpoint-2): (args, the CompletedProcess, stdout + stderr)."""
    args = [a.strip('"').replace("checkpoint-1000", "checkpoint-2")
            for a in re.findall(r'"[^"]*"|\S+', cmd.split(" ", 1)[1])]
    if args[0] == "train":
        args += ["--set", "steps=2"]
    if args[0] == "eval":
        args += ["--batches", "2"]
    r = subprocess.run([binary, *args], cwd=work, capture_output=True)
    return args, r, (r.stdout + r.stderr).decode(errors="replace")


def parts(binary, tmp):
    with open(DOC) as f:
        config_text, cmds = sections(f.read())
    check(len(cmds) >= 5 and cmds[0].startswith("mkdir -p runs"), f"the doc's commands: {cmds}")
    work = os.path.join(tmp, "work")
    os.makedirs(os.path.join(work, "data"))
    corpus = os.path.join(tmp, "corpus.txt")
    rng = np.random.default_rng(1)
    words = ["gpu", "memory", "haiku", "write", "about", "train", "model", "token", "the", "a", "of", "fast"]
    with open(corpus, "w") as f:
        for _ in range(3000):
            f.write(" ".join(rng.choice(words, size=8)) + ".\n")
    base = os.path.join(tmp, "model")
    r = subprocess.run([binary, "tokenizer", "train", "--vocab-size", "300", "--out", base, corpus],
                       capture_output=True)
    check(r.returncode == 0, f"section 1's tokenizer train: {r.stderr.decode(errors='replace')[-300:]}")
    with open(os.path.join(base, "tokenizer.json")) as f:
        vocab = len(json.load(f)["model"]["vocab"]) + 8
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(2)
    LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096)
                     ).save_pretrained(base, safe_serialization=True)
    fmt = json.loads(config_text)["data"]["format"]  # the doc's data.format decides the files' width
    check(fmt in ("u16", "u32"), f"the doc's data.format is a flat token format: {fmt}")
    for name, n in (("sft.bin", 2048 * 8 * 4 + 1000), ("sft-val.bin", 2048 * 8 * 2 + 1000)):
        ids = rng.integers(0, 300, size=n, dtype=np.uint32)
        ids.astype("<u4" if fmt == "u32" else "<u2").tofile(os.path.join(work, "data", name))
    check('"init_from": "path/to/model"' in config_text and '"seq_len": 2048' in config_text,
          "the doc's config names path/to/model and seq_len 2048")
    with open(os.path.join(work, "sft.json"), "w") as f:
        f.write(config_text.replace("path/to/model", base))
    for cmd in cmds:
        if cmd.split(" ", 1)[0] == "mkdir":
            os.makedirs(os.path.join(work, "runs"), exist_ok=True)
            check(cmd == "mkdir -p runs", f"`{cmd}`")
            continue
        args, r, out = run_doc_command(binary, work, cmd)
        ok = r.returncode == 0
        if args[0] == "train":
            ok = ok and os.path.isdir(os.path.join(work, "runs", "sft", "checkpoint-2"))
        if args[0] == "eval":
            ok = ok and re.search(r"val loss \d+\.\d+ over 2 batches", out) is not None
        if args[0] == "sample":
            ok = ok and r.stdout.decode(errors="replace").startswith("Write a haiku about GPUs.")
        check(ok, f"`zoffload {' '.join(args)}` as written (exit {r.returncode}): "
                  f"{'' if ok else out.strip()[-500:]}")
    lora(binary, work, base)


def lora(binary, work, base):
    """Section 6 in the same directory (its data prepared above)."""
    with open(DOC) as f:
        config_text, cmds = lora_section(f.read())
    check(len(cmds) == 6 and '"init_from": "path/to/model"' in config_text, f"section 6's commands: {cmds}")
    with open(os.path.join(work, "lora.json"), "w") as f:
        f.write(config_text.replace("path/to/model", base))
    for cmd in cmds:
        args, r, out = run_doc_command(binary, work, cmd)
        ok = r.returncode == 0
        if args[0] == "train":
            ok = ok and os.path.isfile(os.path.join(work, "runs", "lora", "checkpoint-2", "adapter_model.safetensors"))
        if args[0] == "sample":
            ok = ok and r.stdout.decode(errors="replace").startswith("Write a haiku about GPUs.")
        check(ok, f"`zoffload {' '.join(args)}` as written (exit {r.returncode}): {'' if ok else out.strip()[-500:]}")
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    ids = torch.tensor([[5, 9, 17, 3, 22, 8]])
    with torch.no_grad():
        pm = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), os.path.join(work, "lora-adapter"))
        merged = AutoModelForCausalLM.from_pretrained(os.path.join(work, "lora-merged"), torch_dtype=torch.float32)
        a, b = pm(input_ids=ids).logits, merged(input_ids=ids).logits
    err = ((a - b).abs().max() / a.abs().max()).item()
    check(err < 2e-2, f"section 6's exports load in PeftModel and AutoModelForCausalLM with the same logits (bf16 "
          f"merge: worst {err:.3g} of the largest)")


if __name__ == "__main__":
    sys.exit(main(__doc__, [parts]))
