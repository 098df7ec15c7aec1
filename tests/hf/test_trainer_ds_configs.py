#!/usr/bin/python3
"""transformers' stock DeepSpeed configs train with only a model and data
added (issue 53, item 1). ds_config_zero2.json and ds_config_zero3.json here
are the Hugging Face documentation's "ZeRO-2 Example" and "ZeRO-3 Example"
as published ("auto" batch sizes, as the Trainer fills them in).

For a transformers-made Llama with grouped-query attention, and a Qwen2
(q/k/v biases) where this transformers has one (4.37 and later):
  1. `zoffload train CONFIG --set model.init_from=DIR --set data.train=...`
     trains 2 steps (exit 0) with the config's own placement; the "auto"
     micro-batch and accumulation resolve to a split of the Trainer's
     default batch of 8 sequences, said in one line naming the "auto" keys
     and the model; nothing says that no candidate fits (before: "searched
     84 candidates ..., 36 fit" and then "no candidate of the planner
     fits").
  2. The step-1 training loss equals transformers' loss of the model on the
     run's first 8 sequences within 1e-4 relative (the split does not change
     the mathematics: every split's mean is the same batch's mean).
  3. Without data the run is refused naming data.train before the
     planner's search (before: the default GPT-2 124M was searched first).

Usage: tests/hf/run.sh ZOFFLOAD REPO test_trainer_ds_configs.py
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zo_hf import check, hf_logits, main, random_tokens, rel, windows  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
V, C, NH, NKV, I, L, TMAX = 97, 32, 4, 2, 40, 2, 64
T = 16
GLOBAL = 8  # the Trainer's per_device_train_batch_size default x accumulation 1
LOSS_RTOL = 1e-4


def make(kind, seed):
    torch.manual_seed(seed)
    kw = dict(vocab_size=V, hidden_size=C, intermediate_size=I, num_hidden_layers=L, num_attention_heads=NH,
              num_key_value_heads=NKV, max_position_embeddings=TMAX, rms_norm_eps=1e-6,
              tie_word_embeddings=False)
    if kind == "llama":
        from transformers import LlamaConfig as Cfg, LlamaForCausalLM as M
    else:
        from transformers import Qwen2Config as Cfg, Qwen2ForCausalLM as M
        kw["use_sliding_window"] = False
    model = M(Cfg(**kw)).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.1 if "norm" in n else 0.2))
    return model


def first_batch_loss(model, tokens):
    """transformers' mean loss over the run's first GLOBAL sequences, the
    engine's unshuffled stream (zo_hf.windows): any split of them into
    micro-batches has the same mean."""
    x, y = next(windows(tokens, 1, GLOBAL, T))
    logits = hf_logits(model.double(), x)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1)).item()


def train(binary, config, d, tok_path):
    r = subprocess.run([binary, "train", config, "--set", f"model.init_from={d}", "--set", f"data.train={tok_path}",
                        "--set", "data.format=u16", "--set", "data.shuffle=false", "--set", f"data.seq_len={T}", "--set", "steps=2",
                        "--set", "checkpoint.dir=", "--set", "log.every=1", "--set", "engine.device=cpu"],
                       capture_output=True)
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace")


def parts(binary, tmp):
    _, tokens, tok_path = random_tokens(tmp, V, 8192)
    kinds = ["llama"] + (["qwen2"] if hasattr(transformers, "Qwen2Config") else [])
    if len(kinds) == 1:
        print(f"== Qwen2: transformers {transformers.__version__} has no Qwen2 (4.37 and later): skipped")
    for kind in kinds:
        model = make(kind, 11)
        d = os.path.join(tmp, kind)
        model.save_pretrained(d, safe_serialization=True)
        want = first_batch_loss(model, tokens)
        for stage in (2, 3):
            name = f"ds_config_zero{stage}.json"
            config = os.path.join(HERE, name)
            rc, out = train(binary, config, d, tok_path)
            line = [ln for ln in out.splitlines() if ln.startswith("auto plan (")]
            check(rc == 0 and re.search(r"^step 2/2 ", out, re.M) is not None,
                  f"{kind}, {name}: trains 2 steps with only the model and data added (exit {rc}): "
                  f"{'' if rc == 0 else out.strip()[-600:]}")
            check(len(line) == 1 and "train_micro_batch_size_per_gpu, gradient_accumulation_steps = \"auto\"" in line[0]
                  and f"{GLOBAL} sequences a step" in line[0] and ("Llama" in line[0]),
                  f"{kind}, {name}: one line names the \"auto\" keys, the model and the split: {line}")
            check("no candidate of the planner fits" not in out, f"{kind}, {name}: no contradiction")
            m = re.search(r"^step 1/2 \| loss (\S+)", out, re.M)
            got = float(m.group(1)) if m else float("nan")
            check(m is not None and rel(got, want) <= LOSS_RTOL,
                  f"{kind}, {name}: step 1 loss {got} equals transformers' {want:.5f} on the first {GLOBAL} sequences")
    r = subprocess.run([binary, "train", os.path.join(HERE, "ds_config_zero3.json"), "--set",
                        f"model.init_from={os.path.join(tmp, 'llama')}"], capture_output=True)
    out = (r.stdout + r.stderr).decode(errors="replace")
    check(r.returncode != 0 and "data.train: no training data given" in out and "auto plan" not in out,
          f"no data: refused naming data.train before the search (exit {r.returncode}): {out.strip()[-300:]}")


if __name__ == "__main__":
    sys.exit(main(__doc__, [parts]))
