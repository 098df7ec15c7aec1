#!/usr/bin/python3
"""docs/finetune.md end to end: from a Hugging Face model directory to a
fine-tuned one, for a tiny Llama and a tiny GPT-2 created here with
transformers, with a byte-level BPE tokenizer learned by
`zoffload tokenizer train` from Debian's fortunes.

  1. tokenizer: `zoffload tokenizer train --vocab-size 384` on fortune files;
     transformers' AutoTokenizer loads the directory.
  2. base model: LlamaForCausalLM / GPT2LMHeadModel with that vocabulary,
     random weights, save_pretrained plus the tokenizer's files: the
     directory a user downloads.
  3. prepare: instruction data as JSON lines (prompt = a fortune's first
     line, completion = the rest) with `zoffload prepare --tokenizer BASE
     --prompt-field --completion-field`: the token file must equal
     transformers' tokenizer(prompt) + tokenizer(completion,
     add_special_tokens=False) + [eos] per line, and the mask 0 exactly on
     the prompt tokens; plain text cut with --separator must equal
     tokenizer(document) + [eos] per document.
  4. plan and train from model.init_from = BASE on the masked data: the
     loss falls, checkpoints hold the tokenizer files.
  5. eval: loss per token and bits per byte; the byte count must equal the
     UTF-8 length of transformers' decoding of the trained targets of the
     same windows, and bits per byte the summed loss / ln 2 / bytes.
  6. sample --prompt with --top-k 1 prints text; export; AutoTokenizer and
     AutoModelForCausalLM load the export, and transformers' greedy
     continuation of the same prompt (stopping at end-of-text) decodes to
     the text zoffload printed (compared up to the first near-tie of the
     top two logits, where fp32 may pick either).

Usage: PYTHONPATH=build/hf-site /usr/bin/python3 tests/hf/test_finetune.py ZOFFLOAD [--keep]
(tests/hf/run.sh ZOFFLOAD REPO test_finetune.py; ctest -R hf-finetune).
"""
import glob
import json
import math
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zo_hf  # noqa: E402
from zo_hf import check, rel, zo  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from transformers import (AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel,  # noqa: E402
                          LlamaConfig, LlamaForCausalLM)

FORTUNES = "/usr/share/games/fortunes"
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
VOCAB = 384
B, T, STEPS = 8, 64, 80
PROMPT = "Q:\tWhat is"
N_NEW = 24


def fortune_files():
    files = sorted(f for f in glob.glob(os.path.join(FORTUNES, "*"))
                   if os.path.isfile(f) and not os.path.islink(f) and not f.endswith((".dat", ".u8")))
    return files


def fortunes(files, n):
    out = []
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as h:
            for piece in h.read().split("\n%\n"):
                piece = piece.strip("\n")
                if piece.count("\n") >= 1 and len(piece) < 400:
                    out.append(piece)
        if len(out) >= n:
            break
    return out[:n]


def read_u16(path):
    return np.fromfile(path, dtype="<u2").astype(np.int64)


def tokenizer_step(binary, tmp, files):
    print("== 1. zoffload tokenizer train")
    tok_dir = os.path.join(tmp, "tokenizer")
    zo(binary, "tokenizer", "train", "--vocab-size", str(VOCAB), "--out", tok_dir, *files[:4])
    tok = AutoTokenizer.from_pretrained(tok_dir)
    check(len(tok) <= VOCAB and tok.eos_token_id is not None,
          f"AutoTokenizer loads it: {len(tok)} ids, eos {tok.eos_token!r} = {tok.eos_token_id}")
    return tok_dir, tok


def base_model(arch, tok, tok_dir, tmp):
    torch.manual_seed(5)
    V = len(tok)
    common = dict(vocab_size=V, bos_token_id=tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id,
                  eos_token_id=tok.eos_token_id)
    if arch == "llama":
        cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, max_position_embeddings=T, tie_word_embeddings=False, **common)
        model = LlamaForCausalLM(cfg)
    else:
        cfg = GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=T, resid_pdrop=0.0, embd_pdrop=0.0,
                         attn_pdrop=0.0, **common)
        model = GPT2LMHeadModel(cfg)
    base = os.path.join(tmp, f"{arch}-base")
    model.save_pretrained(base, safe_serialization=True)
    tok.save_pretrained(base)
    # The tokenizer trained by zoffload, byte for byte, as a hub download has it.
    for name in ("tokenizer.json", "tokenizer_config.json"):
        src = os.path.join(tok_dir, name)
        if os.path.exists(src):
            with open(src, "rb") as a, open(os.path.join(base, name), "wb") as b:
                b.write(a.read())
    return base


def prepare_step(binary, tmp, arch, base, tok, docs):
    print(f"== 3. {arch}: zoffload prepare (instruction JSON lines, plain text)")
    jl = os.path.join(tmp, "instruct.jsonl")
    pairs = []
    with open(jl, "w") as f:
        for d in docs:
            first, rest = d.split("\n", 1)
            pairs.append((first + "\n", rest))
            f.write(json.dumps({"prompt": first + "\n", "completion": rest}) + "\n")
    train = os.path.join(tmp, f"{arch}-train.bin")
    val = os.path.join(tmp, f"{arch}-val.bin")
    out = zo(binary, "prepare", "--tokenizer", base, "--prompt-field", "prompt", "--completion-field",
             "completion", "--out-train", train, "--out-val", val, "--val-fraction", "0.1", jl)
    print("     " + out.strip())
    eos = tok.eos_token_id
    ids, mask = [], []
    for p, c in pairs:
        a = tok(p)["input_ids"]
        b = tok(c, add_special_tokens=False)["input_ids"] + [eos]
        ids += a + b
        mask += [0] * len(a) + [1] * len(b)
    got = np.concatenate([read_u16(train), read_u16(val)])
    got_mask = np.concatenate([np.fromfile(train + ".mask", np.uint8), np.fromfile(val + ".mask", np.uint8)])
    check(got.tolist() == ids, f"prepared tokens = transformers' tokenizer per line + eos ({len(ids)} tokens)")
    check(got_mask.tolist() == mask, f"mask 0 exactly on the prompt tokens ({int(got_mask.sum())} trained)")

    # The chat form with a ChatML template (tokenizer_config.json's
    # chat_template): equal to apply_chat_template(tokenize=True) + eos, the
    # trained tokens exactly each assistant turn's "content<|im_end|>\n".
    chat_dir = os.path.join(tmp, f"{arch}-chat-tokenizer")
    os.makedirs(chat_dir, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(base, name), "rb") as a_, open(os.path.join(chat_dir, name), "wb") as b_:
            b_.write(a_.read())
    with open(os.path.join(chat_dir, "tokenizer_config.json")) as f:
        tc = json.load(f)
    tc["chat_template"] = CHATML
    with open(os.path.join(chat_dir, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f)
    chat_tok = AutoTokenizer.from_pretrained(chat_dir)
    cj = os.path.join(tmp, "chat.jsonl")
    convs = []
    with open(cj, "w") as f:
        for p, c in pairs[:40]:
            conv = [{"role": "user", "content": p.strip()}, {"role": "assistant", "content": c},
                    {"role": "user", "content": "Another one?"}, {"role": "assistant", "content": "No."}]
            convs.append(conv)
            f.write(json.dumps({"messages": conv}) + "\n")
    chat_bin = os.path.join(tmp, f"{arch}-chat.bin")
    zo(binary, "prepare", "--tokenizer", chat_dir, "--messages-field", "messages", "--val-fraction", "0",
       "--out-train", chat_bin, cj)
    want, trained = [], []
    for conv in convs:
        want += chat_tok.apply_chat_template(conv, tokenize=True) + [eos]
        trained += [m["content"] + "<|im_end|>\n" for m in conv if m["role"] == "assistant"]
    got, gm = read_u16(chat_bin), np.fromfile(chat_bin + ".mask", np.uint8)
    check(got.tolist() == want, f"chat form = apply_chat_template(tokenize=True) + eos ({len(want)} tokens)")
    got_trained = chat_tok.decode(got[gm == 1].tolist(), clean_up_tokenization_spaces=False)
    check(got_trained == "".join(trained), "chat mask: exactly the assistant turns (content<|im_end|>\\n) trained")

    text = os.path.join(tmp, "plain.txt")
    with open(text, "w") as f:
        f.write("\n%\n".join(docs[:20]))
    plain = os.path.join(tmp, f"{arch}-plain.bin")
    zo(binary, "prepare", "--tokenizer", base, "--separator", "\n%\n", "--val-fraction", "0", "--out-train", plain,
       text)
    want = []
    for d in docs[:20]:
        want += tok(d)["input_ids"] + [eos]
    check(read_u16(plain).tolist() == want and not os.path.exists(plain + ".mask"),
          "plain text cut at --separator = tokenizer(document) + eos, no mask")
    return train, val


def eval_reference(base_tok, model, val, n_batches):
    """(mean of batch means, bytes of the trained targets' text, summed nats)
    over the engine's unshuffled val windows, masked targets ignored."""
    tokens, mask = read_u16(val), np.fromfile(val + ".mask", np.uint8)
    n, bt = len(tokens), B * T
    means, nbytes, nats = [], 0, 0.0
    for i in range(n_batches):
        idx = (i * bt + np.arange(bt + 1)) % n
        w = torch.from_numpy(tokens[idx])
        y = w[1:].clone()
        y[torch.from_numpy(mask[idx][1:]) == 0] = -100
        logits = zo_hf.hf_logits(model, w[:bt].view(B, T)).reshape(bt, -1)
        loss = F.cross_entropy(logits, y, ignore_index=-100, reduction="sum").item()
        nv = int((y >= 0).sum())
        means.append(loss / nv)
        nats += loss
        nbytes += len(base_tok.decode(y[y >= 0].tolist(), skip_special_tokens=True,
                                      clean_up_tokenization_spaces=False).encode("utf-8"))
    return sum(means) / len(means), nbytes, nats


def finetune(binary, tmp, arch, tok_dir, tok, docs):
    print(f"== 2. {arch}: a base model directory (transformers, random weights, the tokenizer's files)")
    base = base_model(arch, tok, tok_dir, tmp)
    train, val = prepare_step(binary, tmp, arch, base, tok, docs)

    print(f"== 4. {arch}: plan, train from model.init_from on the masked data")
    run = os.path.join(tmp, f"{arch}-run")
    cfg = {"train_micro_batch_size_per_gpu": B, "steps": STEPS,
           "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.0}},
           "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5}},
           "model": {"arch": arch, "init_from": base},
           "data": {"train": train, "val": val, "format": "u16", "seq_len": T, "shuffle": True},
           "engine": {"device": "cpu", "seed": 1}, "log": {"every": 10, "metrics_path": os.path.join(run, "m.jsonl")},
           "eval": {"every": 0}, "checkpoint": {"dir": run, "every": STEPS}}
    config = os.path.join(tmp, f"{arch}.json")
    with open(config, "w") as f:
        json.dump(cfg, f, indent=1)
    os.makedirs(run, exist_ok=True)
    zo(binary, "plan", config)
    zo(binary, "train", config)
    losses = [json.loads(line)["loss"] for line in open(os.path.join(run, "m.jsonl")) if '"loss"' in line]
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    check(last < first - 1.0, f"the masked loss falls: {first:.3f} -> {last:.3f} (means of the first and last 5 steps)")
    ckpt = os.path.join(run, f"checkpoint-{STEPS}")
    check(all(os.path.isfile(os.path.join(ckpt, f)) for f in ("tokenizer.json", "tokenizer_config.json")),
          "the checkpoint holds tokenizer.json and tokenizer_config.json")

    print(f"== 5. {arch}: eval, loss per token and bits per byte")
    out = zo(binary, "eval", config, "--batches", "2")
    m = re.search(r"val loss (\S+) over (\d+) batches", out)
    mb = re.search(r"(\S+) bits per byte \((\d+) tokens, (\d+) bytes", out)
    print("     " + out.strip().replace("\n", "\n     "))
    export = os.path.join(tmp, f"{arch}-export")
    zo(binary, "export", ckpt, "--out", export)
    hf_tok = AutoTokenizer.from_pretrained(export)
    model = AutoModelForCausalLM.from_pretrained(export).double().eval()
    if m and mb:
        ref_loss, ref_bytes, ref_nats = eval_reference(hf_tok, model, val, int(m.group(2)))
        bpb = float(mb.group(1))
        check(rel(float(m.group(1)), ref_loss) < 1e-5, f"eval loss = transformers' masked mean ({ref_loss:.6f})")
        mt = re.search(r"loss per token (\S+) over (\d+) trained targets", out)
        check(mt is not None and int(mt.group(2)) == int(mb.group(2)) and
              rel(float(mt.group(1)), ref_nats / int(mt.group(2))) < 1e-5,
              f"loss per token = transformers' summed masked loss / trained targets ({mt.group(0) if mt else out!r})")
        check(int(mb.group(3)) == ref_bytes, f"bytes of the targets' text = transformers' decoding ({ref_bytes})")
        check(rel(bpb, ref_nats / math.log(2) / ref_bytes) < 1e-5,
              f"bits per byte = summed loss / ln 2 / bytes ({ref_nats / math.log(2) / ref_bytes:.6f})")
    else:
        check(False, "eval prints the loss and bits per byte")

    print(f"== 6. {arch}: sample, export, transformers loads and generates the same text")
    text = zo(binary, "sample", config, "--checkpoint", ckpt, "--prompt", PROMPT, "--tokens", str(N_NEW),
              "--top-k", "1").rstrip("\n")
    print(f"     zoffload sample: {text!r}")
    check(all(os.path.isfile(os.path.join(export, f)) for f in ("tokenizer.json", "tokenizer_config.json",
                                                                "config.json", "model.safetensors")),
          "the export holds the weights, config.json and the tokenizer files")
    prompt_ids = hf_tok(PROMPT)["input_ids"]
    gen, tie_at = zo_hf.hf_greedy(model, prompt_ids, N_NEW, T)
    hit_eos = hf_tok.eos_token_id in gen
    if hit_eos:
        gen = gen[:gen.index(hf_tok.eos_token_id)]
    if tie_at is None:
        # sample says on stderr when it stopped at the end-of-text token (and only then)
        r = subprocess.run([binary, "sample", config, "--checkpoint", ckpt, "--prompt", PROMPT, "--tokens",
                            str(N_NEW), "--top-k", "1"], capture_output=True)
        note = [ln for ln in r.stderr.decode(errors="replace").splitlines() if "stopped at the end-of-text" in ln]
        check(len(note) == (1 if hit_eos else 0) and (not hit_eos or
              f"(id {hf_tok.eos_token_id}) after {len(gen)} of {N_NEW} tokens" in note[0]),
              f"sample says it stopped at the end-of-text token exactly when greedy decoding met it "
              f"(transformers: {'at token ' + str(len(gen)) if hit_eos else 'not within ' + str(N_NEW)}): {note}")
    n_cmp = len(gen) if tie_at is None else tie_at
    want = PROMPT + hf_tok.decode(gen[:n_cmp], skip_special_tokens=True, clean_up_tokenization_spaces=False)
    check(text.startswith(want) and (tie_at is not None or text == PROMPT + hf_tok.decode(
        gen, skip_special_tokens=True, clean_up_tokenization_spaces=False)),
        f"transformers' greedy text = zoffload sample's ({n_cmp} tokens compared{'' if tie_at is None else ', tie'})")
    with torch.no_grad():
        g = AutoModelForCausalLM.from_pretrained(export).eval().generate(
            torch.tensor([prompt_ids]), max_new_tokens=N_NEW, do_sample=False,
            pad_token_id=hf_tok.eos_token_id)[0, len(prompt_ids):].tolist()
    if hf_tok.eos_token_id in g:
        g = g[:g.index(hf_tok.eos_token_id)]
    check(g[:n_cmp] == gen[:n_cmp], "model.generate(do_sample=False) on the export gives the same tokens")


def main_parts(binary, tmp):
    try:
        import jinja2  # noqa: F401  (transformers' apply_chat_template)
    except ImportError:
        print("SKIP: jinja2 not installed (python3-jinja2: scripts/install-deps.sh --reference)")
        sys.exit(77)
    files = fortune_files()
    if not files:
        print("SKIP: no fortune files (apt-get install fortunes)")
        sys.exit(77)
    r = subprocess.run([binary, "tokenizer", "--help"], capture_output=True)
    if r.returncode != 0:
        print("FAIL zoffload has no `tokenizer` command")
        sys.exit(1)
    tok_dir, tok = tokenizer_step(binary, tmp, files)
    docs = fortunes(files, 400)
    for arch in ("llama", "gpt2"):
        finetune(binary, tmp, arch, tok_dir, tok, docs)


if __name__ == "__main__":
    sys.exit(zo_hf.main(__doc__, [main_parts]))
