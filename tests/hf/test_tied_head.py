#!/usr/bin/python3
"""A tied model's files that also hold a separate lm_head.weight (issue 52,
class 2): config.json says tie_word_embeddings true, model.safetensors holds
model.embed_tokens.weight and an lm_head.weight with other values.

transformers disagrees with itself here: 4.36 loads lm_head.weight into the
shared tensor (input and output embeddings both become the file's head),
4.54 to 4.57 reportedly tie after loading (the head is dropped; transformers PR 42612), 5.x loads the two untied
with a warning. zoffload follows 5.x and says so in one line:

  1. Llama, different values: `zoffload eval` prints the note naming the
     file and both tensors, and its loss equals transformers' loss of the
     untied model (5.x's result; under 4.x the same model is built with
     tie_word_embeddings=False, and its embeddings are checked to be the
     file's two tensors) within 1e-5; the loss differs from the tied
     model's (the check can fail). `zoffload export` writes the untied
     model: transformers reads it back to the same loss.
  2. Llama, lm_head.weight equal to the embedding: tied, no note, the tied
     model's loss.
  3. GPT-2 (tied only here), different values: refused naming the file and
     both tensors.

Usage: tests/hf/run.sh ZOFFLOAD REPO test_tied_head.py
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zo_hf import check, hf_mean_loss, main, random_tokens, rel, tiny_llama  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

LOSS_RTOL = 1e-5
V, C, NH, I, L, TMAX = 97, 32, 4, 40, 2, 32
B, T, NB = 2, 16, 3
FIVE = int(transformers.__version__.split(".")[0]) >= 5
NOTE = "lm_head.weight differs from model.embed_tokens.weight"


def with_head(d, head_of):
    """Rewrites d/model.safetensors with lm_head.weight = head_of(tensors)."""
    p = os.path.join(d, "model.safetensors")
    sd = {k: v.clone() for k, v in load_file(p).items()}  # not views of the file rewritten below
    sd["lm_head.weight"] = head_of(sd).contiguous()
    save_file(sd, p, metadata={"format": "pt"})
    return sd


def llama_dir(tmp, name):
    model = tiny_llama(3, True, V, C, I, L, NH, TMAX)
    d = os.path.join(tmp, name)
    model.save_pretrained(d, safe_serialization=True)
    return d


def eval_config(tmp, tok_path, arch):
    config = os.path.join(tmp, f"eval-{arch}.json")
    with open(config, "w") as f:
        json.dump({"train_micro_batch_size_per_gpu": B, "model": {"arch": arch},
                   "data": {"train": tok_path, "val": tok_path, "format": "u16", "seq_len": T},
                   "engine": {"device": "cpu"}, "checkpoint": {"dir": os.path.join(tmp, "no-ck")}}, f)
    return config


def zo_eval(binary, config, d):
    """(loss or None, the whole output)."""
    import re
    r = subprocess.run([binary, "eval", config, "--checkpoint", d, "--batches", str(NB)], capture_output=True)
    out = (r.stdout + r.stderr).decode(errors="replace")
    m = re.search(r"val loss (\S+) over", out)
    return (float(m.group(1)) if r.returncode == 0 and m else None), out


def load(d, **kw):
    from transformers import LlamaForCausalLM
    return LlamaForCausalLM.from_pretrained(d, torch_dtype=torch.float64, attn_implementation="eager",
                                            **kw).eval()


def llama_parts(binary, tmp):
    _, tokens, tok_path = random_tokens(tmp, V, 4096)
    config = eval_config(tmp, tok_path, "llama")

    # 1. A separate head with other values.
    d = llama_dir(tmp, "llama-head")
    torch.manual_seed(4)
    sd = with_head(d, lambda sd: torch.randn(V, C) * 0.3)
    untied = load(d) if FIVE else load(d, tie_word_embeddings=False)
    check(torch.equal(untied.get_output_embeddings().weight.float(), sd["lm_head.weight"]) and
          torch.equal(untied.get_input_embeddings().weight.float(), sd["model.embed_tokens.weight"]),
          f"transformers {transformers.__version__}: the untied model's head is the file's lm_head.weight and "
          "its embedding the file's model.embed_tokens.weight")
    want = hf_mean_loss(untied, tokens, NB, B, T)
    tied_loss = hf_mean_loss(load(d, tie_word_embeddings=True) if not FIVE else untied, tokens, NB, B, T)
    got, out = zo_eval(binary, config, d)
    check(got is not None and rel(got, want) <= LOSS_RTOL,
          f"untied: zoffload eval {got} equals transformers' untied loss {want:.6f}")
    if not FIVE:
        check(rel(want, tied_loss) > 1e-3, f"the check can fail: transformers {transformers.__version__}'s own "
              f"tied load gives {tied_loss:.6f}, the untied model {want:.6f}")
    note = [ln for ln in out.splitlines() if NOTE in ln]
    check(len(note) == 1 and "model.safetensors" in note[0] and "loaded untied" in note[0],
          f"one note naming the file and both tensors: {note or out.strip()[-300:]}")

    out_dir = os.path.join(tmp, "llama-head-export")
    r = subprocess.run([binary, "export", d, "--out", out_dir], capture_output=True)
    check(r.returncode == 0, f"zoffload export: {(r.stdout + r.stderr).decode(errors='replace').strip()[-200:]}")
    if r.returncode == 0:
        with open(os.path.join(out_dir, "config.json")) as f:
            tie = json.load(f).get("tie_word_embeddings")
        back = hf_mean_loss(load(out_dir), tokens, NB, B, T)
        check(tie is False and rel(back, want) <= LOSS_RTOL,
              f"the export says tie_word_embeddings {tie} and transformers reads it back to {back:.6f} "
              f"(want false, {want:.6f})")

    # 2. A head with the embedding's values: tied, nothing said.
    d2 = llama_dir(tmp, "llama-same")
    with_head(d2, lambda sd: sd["model.embed_tokens.weight"].clone())
    want2 = hf_mean_loss(load(d2), tokens, NB, B, T)
    got2, out2 = zo_eval(binary, config, d2)
    check(got2 is not None and rel(got2, want2) <= LOSS_RTOL and NOTE not in out2,
          f"same values: tied, zoffload eval {got2} equals transformers' {want2:.6f}, no note")


def gpt2_part(binary, tmp):
    from transformers import GPT2Config, GPT2LMHeadModel
    _, _, tok_path = random_tokens(tmp, V, 4096)
    torch.manual_seed(5)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=C, n_layer=1, n_head=NH, n_positions=TMAX))
    d = os.path.join(tmp, "gpt2-head")
    model.save_pretrained(d, safe_serialization=True)
    with_head(d, lambda sd: torch.randn(V, C))
    got, out = zo_eval(binary, eval_config(tmp, tok_path, "gpt2"), d)
    check(got is None and "lm_head.weight differs from transformer.wte.weight" in out and
          "model.safetensors" in out, f"GPT-2 with a different lm_head.weight refused: {out.strip()[-300:]}")


if __name__ == "__main__":
    sys.exit(main(__doc__, (llama_parts, gpt2_part)))
