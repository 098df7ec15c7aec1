#!/usr/bin/python3
"""zoffload <-> Hugging Face transformers interoperability for model.arch
"llama", end to end (test_transformers_logits.py does the same for GPT-2).

  engine -> transformers, for an untied byte-level Llama (6 query heads over
     2 key/value heads, MLP width 75, rope_theta 50000, rms_norm_eps 1e-6) and
     a tied one (4 heads over 1, width 53): `zoffload train` on real text
     (Debian's fortune files, what configs/tiny.json trains on), then the last
     checkpoint directory is checked:
       1. the file: exactly the Hugging Face Llama tensor names and shapes
          (q_proj, k_proj, v_proj and gate_proj, up_proj apart, nn.Linear
          (out, in), lm_head.weight only when untied), F32, metadata format
          "pt", config.json describing the run's model;
          LlamaForCausalLM.from_pretrained reports no missing or unexpected
          key, and ties lm_head to embed_tokens exactly when the run did;
       2. logits: transformers' on a fixed input equal an independent float64
          plain-torch Llama forward over the raw safetensors;
       3. the engine: `zoffload eval` loss equals transformers' mean
          cross-entropy over the same validation windows to 1e-5 relative,
          and `zoffload sample --top-k 1` generates transformers' greedy
          continuation of a prompt, both longer than max_seq_len (the
          window slides).
  transformers -> engine: a randomly initialised LlamaForCausalLM (vocabulary
     317, not a multiple of 64; 4 heads over 2; MLP width 43; every weight
     perturbed, so no norm is the identity and the logits spread; PERTURB)
     saved with save_pretrained as one model.safetensors, sharded into
     several files (max_shard_size, with model.safetensors.index.json), in
     bfloat16, in float16, and tied, is evaluated by `zoffload eval` through
     model.init_from and through --checkpoint: the loss must equal
     transformers' on the same file to 1e-5 relative (bf16 and fp16 too: the
     engine widens them exactly), the bf16 file's loss must be the fp32
     model's to BF16_RTOL, `zoffload sample --top-k 1` generates
     transformers' greedy continuation, and `zoffload train` from
     model.init_from starts at that loss.

Why the logits tolerances are not GPT-2's 1e-9: transformers 4.36's Llama
rounds to float32 inside a float64 model (LlamaRMSNorm normalises in float32,
the eager attention's softmax runs in float32, the rotary tables are the
float32 cos and sin of float32 angles, and LlamaForCausalLM returns
logits.float()), so its float64 logits agree with a float64 forward to
float32 rounding: LOGIT_RTOL64 of the largest logit (1.4e-7 to 3e-7 measured).
Layout or convention errors (q/k/v or gate/up order, rotate-half against
interleaved pairs, which key/value head a query head reads) move logits by
order one. The plain forward computes the rotary angles as transformers and
the engine define them (float32 inv_freq, float32 position * inv_freq), their
cos and sin and everything else in float64.

Usage: PYTHONPATH=build/hf-site /usr/bin/python3 tests/hf/test_transformers_llama.py ZOFFLOAD [--keep]
(tests/hf/run.sh ZOFFLOAD REPO test_transformers_llama.py does this and skips
when transformers is missing; ctest -R hf-transformers-llama). Exit 0 when
every check passes, 1 otherwise.
"""
import copy
import glob
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zo_hf import (check, check_greedy_sample, check_safetensors_layout, eval_loss_cli,  # noqa: E402
                   hf_greedy, hf_logits, hf_mean_loss, main, random_tokens, rel, train_checkpoint,
                   train_step0_loss, zo)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

LOSS_RTOL = 1e-5      # engine fp32 loss vs transformers' (float64 weights) loss
LOGIT_RTOL64 = 1e-6   # max |hf64 - plain64| / max |plain64| (see above)
LOGIT_RTOL32 = 1e-5   # max |hf32 - plain64| / max |plain64|, fp32 through and through
# bf16 keeps 8 significant bits: every weight moves by up to 2^-9 of itself,
# which moved the transformers -> engine model's loss by at most 2.5e-4
# relative over seeds 0..11 (about 1e-4 for the model used).
BF16_RTOL = 1e-3
# The transformers -> engine model's matrices get N(0, 0.2) added (ten times
# transformers' initializer_range): at 0.02 the model is so near uniform
# that its loss on random tokens hardly depends on the layout (reading the
# rotary pairs interleaved moved it by 1e-6, under LOSS_RTOL); at 0.2 every
# layout error tried (q/k rows interleaved, k and v or gate and up swapped,
# query heads on the wrong key/value head) moved it by 6e-4 or more over
# seeds 0..11, and the greedy continuation below sees the logits themselves.
PERTURB = 0.2

# The engine -> transformers runs: byte-level, T < max_seq_len, head size 8.
MODELS = {
    "untied": dict(n_layer=2, n_head=6, num_key_value_heads=2, n_embd=48, intermediate_size=75,
                   vocab_size=256, max_seq_len=64, tie_word_embeddings=False, rms_norm_eps=1e-6,
                   rope_theta=50000.0),
    "tied": dict(n_layer=2, n_head=4, num_key_value_heads=1, n_embd=32, intermediate_size=53,
                 vocab_size=256, max_seq_len=64, tie_word_embeddings=True, rms_norm_eps=1e-5,
                 rope_theta=10000.0),
}
B, T, STEPS = 4, 32, 600  # two seconds each; greedy text that is not all spaces
EVAL_BATCHES = 10


def debian_text(min_bytes):
    """Real English text shipped by Debian, in name order, until min_bytes:
    the plain-text fortune files (Debian's fortunes package, what
    scripts/prepare-tiny.sh makes configs/tiny.json's data from), else the
    licence texts every Debian system has (base-files)."""
    for pattern in ("/usr/share/games/fortunes/*", "/usr/share/common-licenses/*"):
        files = sorted(f for f in glob.glob(pattern)
                       if os.path.isfile(f) and not os.path.islink(f) and not f.endswith((".dat", ".u8")))
        out, size = [], 0
        for f in files:
            out.append(f)
            size += os.path.getsize(f)
            if size >= min_bytes:
                return out
    print("FAIL no Debian text found (apt-get install fortunes)")
    sys.exit(1)


def plain_llama_logits(w, idx, c):
    """Llama forward written from the Hugging Face file layout alone, in
    float64: nn.Linear weights (out, in) used as x @ W.T, RMSNorm times the
    weight, rotary embedding on q and k in rotate-half layout (pair i with
    i + hs/2), query head h reading key/value head h // (NH / NKV), causal
    softmax scaled by 1/sqrt(hs), SwiGLU silu(gate) * up, no biases, lm_head
    tied to embed_tokens unless the file has one."""
    bsz, t = idx.shape
    C, NH, NKV = c["n_embd"], c["n_head"], c["num_key_value_heads"]
    hs, eps = C // NH, c["rms_norm_eps"]
    inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, hs, 2).float() / hs))
    angle = torch.outer(torch.arange(t, dtype=torch.float32), inv_freq).double()
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
    mask = torch.ones(t, t, dtype=torch.bool).tril()

    def rms(v, name):
        return w[name] * v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)

    def rope(v):
        return v * cos + torch.cat([-v[..., hs // 2:], v[..., :hs // 2]], -1) * sin

    def heads(v, n):
        return v.view(bsz, t, n, hs).transpose(1, 2)

    x = w["model.embed_tokens.weight"][idx]
    for layer in range(c["n_layer"]):
        p = f"model.layers.{layer}."
        h = rms(x, p + "input_layernorm.weight")
        q = rope(heads(h @ w[p + "self_attn.q_proj.weight"].T, NH))
        k = rope(heads(h @ w[p + "self_attn.k_proj.weight"].T, NKV)).repeat_interleave(NH // NKV, dim=1)
        v = heads(h @ w[p + "self_attn.v_proj.weight"].T, NKV).repeat_interleave(NH // NKV, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(bsz, t, C)
        x = x + y @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, p + "post_attention_layernorm.weight")
        g, u = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (F.silu(g) * u) @ w[p + "mlp.down_proj.weight"].T
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return rms(x, "model.norm.weight") @ head.T


def expected_shapes(c):
    C, V, I = c["n_embd"], c["vocab_size"], c["intermediate_size"]
    hs = C // c["n_head"]
    q, kv = c["n_head"] * hs, c["num_key_value_heads"] * hs
    s = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    if not c["tie_word_embeddings"]:
        s["lm_head.weight"] = (V, C)
    for layer in range(c["n_layer"]):
        p = f"model.layers.{layer}."
        s.update({p + "input_layernorm.weight": (C,), p + "self_attn.q_proj.weight": (q, C),
                  p + "self_attn.k_proj.weight": (kv, C), p + "self_attn.v_proj.weight": (kv, C),
                  p + "self_attn.o_proj.weight": (C, C), p + "post_attention_layernorm.weight": (C,),
                  p + "mlp.gate_proj.weight": (I, C), p + "mlp.up_proj.weight": (I, C),
                  p + "mlp.down_proj.weight": (C, I)})
    return s


def hf_config_of(c):
    """The config.json values a run of model c must write."""
    return {"model_type": "llama", "num_hidden_layers": c["n_layer"], "num_attention_heads": c["n_head"],
            "num_key_value_heads": c["num_key_value_heads"], "hidden_size": c["n_embd"],
            "intermediate_size": c["intermediate_size"], "vocab_size": c["vocab_size"],
            "max_position_embeddings": c["max_seq_len"], "tie_word_embeddings": c["tie_word_embeddings"],
            "rms_norm_eps": c["rms_norm_eps"], "rope_theta": c["rope_theta"], "hidden_act": "silu"}


def engine_run(binary, tmp, label, c, train_bin, val_bin):
    print(f"== engine -> transformers: {label} Llama, {c['n_head']} heads over {c['num_key_value_heads']}, "
          f"MLP {c['intermediate_size']}")
    ckdir = os.path.join(tmp, f"ck-{label}")
    config = os.path.join(tmp, f"llama-{label}.json")
    ck = train_checkpoint(binary, config, dict(arch="llama", **c), B, T, STEPS, train_bin, val_bin, 100,
                          os.path.join(tmp, f"metrics-{label}.jsonl"), ckdir)
    if ck is None:
        return

    # 1. The file and config.json.
    st_path = os.path.join(ck, "model.safetensors")
    check_safetensors_layout(st_path, expected_shapes(c), "Llama", "nn.Linear (out, in)")
    with open(os.path.join(ck, "config.json")) as f:
        hc = json.load(f)
    exp = hf_config_of(c)
    got = {k: hc.get(k) for k in exp}
    check(got == exp, f"config.json describes the model: {got}")

    model, info = LlamaForCausalLM.from_pretrained(ck, torch_dtype=torch.float32, output_loading_info=True)
    model.eval()
    lost = {k: v for k, v in info.items() if v}
    check(not lost, f"from_pretrained reports no missing/unexpected/mismatched keys {lost}")
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    check(tied == c["tie_word_embeddings"], f"lm_head is {'' if tied else 'not '}tied to embed_tokens")

    # 2. Logits: transformers vs the plain forward on a fixed input.
    g = torch.Generator().manual_seed(7)
    idx = torch.randint(0, c["vocab_size"], (2, c["max_seq_len"]), generator=g)
    raw = {k: v.double() for k, v in load_file(st_path).items()}
    ref = plain_llama_logits(raw, idx, c)
    model64 = LlamaForCausalLM.from_pretrained(ck, torch_dtype=torch.float64).eval()
    top = ref.abs().max().item()
    d64 = (hf_logits(model64, idx) - ref).abs().max().item() / top
    d32 = (hf_logits(model, idx) - ref).abs().max().item() / top
    print(f"     logits (2 x {c['max_seq_len']} x {c['vocab_size']}), max |logit| {top:.3g}: "
          f"max |hf64 - plain64| / max = {d64:.3g}, max |hf32 - plain64| / max = {d32:.3g}")
    check(d64 <= LOGIT_RTOL64, f"transformers float64 logits equal the plain Llama forward "
          f"({d64:.3g} <= {LOGIT_RTOL64})")
    check(d32 <= LOGIT_RTOL32, f"transformers float32 logits equal it to fp32 rounding ({d32:.3g} <= {LOGIT_RTOL32})")

    # 3a. The engine's eval loss vs transformers over the same windows.
    val = np.fromfile(val_bin, dtype="<u2")
    z_loss, n = eval_loss_cli(binary, config, "--checkpoint", ck, "--batches", str(EVAL_BATCHES))
    hf_loss = hf_mean_loss(model64, val, n, B, T)
    r = rel(z_loss, hf_loss)
    print(f"     eval over {n} x ({B} x {T}) tokens of val.bin ({len(val)} tokens): zoffload {z_loss:.6f}, "
          f"transformers {hf_loss:.9f}; relative diff {r:.3g}")
    check(n == EVAL_BATCHES and r <= LOSS_RTOL, f"zoffload eval loss equals transformers' (rel {r:.3g} <= {LOSS_RTOL})")

    # 3b. Greedy generation: the engine's argmax token == transformers' argmax,
    # prompt and continuation longer than max_seq_len (a sliding window).
    check_greedy_sample(binary, config, ck, model64,
                        "Real programmers don't comment their code. It was hard to write, ", 40, c["max_seq_len"])


def engine_to_transformers(binary, tmp):
    text = debian_text(200_000)
    train_bin, val_bin = os.path.join(tmp, "train.bin"), os.path.join(tmp, "val.bin")
    print(zo(binary, "prepare", "--out-train", train_bin, "--out-val", val_bin, "--val-fraction", "0.15",
             *text).strip() + f" (from {', '.join(text)})")
    for label, c in MODELS.items():
        engine_run(binary, tmp, label, c, train_bin, val_bin)


def transformers_to_engine(binary, tmp):
    print("== transformers -> engine (model.init_from, --checkpoint)")
    V, n_layer, NH, NKV, C, I, tmax = 317, 2, 4, 2, 32, 43, 48
    models = {}
    for tie in (False, True):
        torch.manual_seed(11)
        hcfg = LlamaConfig(vocab_size=V, hidden_size=C, intermediate_size=I, num_hidden_layers=n_layer,
                           num_attention_heads=NH, num_key_value_heads=NKV, max_position_embeddings=tmax,
                           rms_norm_eps=1e-6, rope_theta=20000.0, tie_word_embeddings=tie,
                           attn_implementation="eager")
        model = LlamaForCausalLM(hcfg).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.add_(torch.randn_like(p) * (0.1 if "norm" in name else PERTURB))
        models[tie] = model
    saves = {}  # label -> save_pretrained directory
    d = os.path.join(tmp, "hf-single")
    models[False].save_pretrained(d, safe_serialization=True)
    check(os.path.isfile(os.path.join(d, "model.safetensors")), "save_pretrained wrote model.safetensors")
    saves["one file"] = d
    d = os.path.join(tmp, "hf-sharded")
    models[False].save_pretrained(d, safe_serialization=True, max_shard_size="40KB")
    shards = sorted(glob.glob(os.path.join(d, "model-*-of-*.safetensors")))
    check(len(shards) >= 3 and os.path.isfile(os.path.join(d, "model.safetensors.index.json"))
          and not os.path.exists(os.path.join(d, "model.safetensors")),
          f"save_pretrained(max_shard_size=40KB) wrote {len(shards)} shards and their index")
    saves["sharded"] = d
    for label, dtype, st, name in (("bf16", torch.bfloat16, "BF16", "bfloat16"),
                                   ("fp16", torch.float16, "F16", "float16")):
        d = os.path.join(tmp, f"hf-{label}")
        copy.deepcopy(models[False]).to(dtype).save_pretrained(d, safe_serialization=True)
        with safe_open(os.path.join(d, "model.safetensors"), framework="pt") as f:
            dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}
        with open(os.path.join(d, "config.json")) as f:
            j = json.load(f)
            tdt = j.get("torch_dtype", j.get("dtype"))  # transformers 5 writes "dtype"
        check(dtypes == {st} and tdt == name, f"the {label} save holds {st} tensors ({sorted(dtypes)}), "
              f"torch_dtype {tdt}")
        saves[label] = d
    d = os.path.join(tmp, "hf-tied")
    models[True].save_pretrained(d, safe_serialization=True)
    with safe_open(os.path.join(d, "model.safetensors"), framework="pt") as f:
        check("lm_head.weight" not in f.keys(), "the tied save has no lm_head.weight")
    saves["tied"] = d

    bt, b, t, n_batches = 3 * 20, 3, 20, 4
    rng, tokens, tok_path = random_tokens(tmp, V, n_batches * bt + 1)
    # Nothing about the model but its architecture: with model.init_from or
    # --checkpoint every hyperparameter comes from config.json.
    config = os.path.join(tmp, "from-hf.json")
    cfg = {"train_micro_batch_size_per_gpu": b, "model": {"arch": "llama"},
           "data": {"train": tok_path, "val": tok_path, "format": "u16", "seq_len": t},
           "engine": {"device": "cpu"}, "checkpoint": {"dir": os.path.join(tmp, "no-checkpoints")}}
    with open(config, "w") as f:
        json.dump(cfg, f, indent=1)

    fp32_loss = hf_mean_loss(models[False].double(), tokens, n_batches, b, t)
    for label, d in saves.items():
        hf = LlamaForCausalLM.from_pretrained(d, torch_dtype=torch.float64).eval()
        hf_loss = hf_mean_loss(hf, tokens, n_batches, b, t)
        print(f"     {label}: transformers on {os.path.basename(d)} (float64) {hf_loss:.9f}")
        if label == "bf16":
            r = rel(hf_loss, fp32_loss)
            check(r <= BF16_RTOL, f"the bf16 file is the fp32 model to bf16 rounding (loss rel {r:.3g} <= "
                  f"{BF16_RTOL})")
        for how, args in (("model.init_from", ["--set", f"model.init_from={d}"]),
                          ("--checkpoint", ["--checkpoint", d])):
            z_loss, n = eval_loss_cli(binary, config, *args, "--batches", str(n_batches), fatal=False)
            if z_loss is None:
                check(False, f"zoffload eval loads the {label} save through {how}: {n}")
                continue
            r = rel(z_loss, hf_loss)
            print(f"     V={V}, {n} x ({b} x {t}) random tokens, {label} via {how}: zoffload {z_loss:.6f}; "
                  f"relative diff {r:.3g}")
            check(n == n_batches and r <= LOSS_RTOL,
                  f"zoffload eval of the {label} save via {how} equals transformers' loss (rel {r:.3g})")
        # Greedy decoding over random prompt tokens (ids in and out for V != 256).
        prompt = [int(v) for v in rng.integers(0, V, size=12)]
        out = zo(binary, "sample", config, "--checkpoint", d, "--prompt", ",".join(map(str, prompt)),
                 "--tokens", "24", "--top-k", "1", "--temperature", "1", "--seed", "1")
        got = [int(v) for v in out.strip().split(",")]
        want, tie_at = hf_greedy(hf, prompt, 24, tmax)
        upto = 24 if tie_at is None else tie_at
        check(got[:upto] == want[:upto], f"zoffload sample --top-k 1 on the {label} save generates transformers' "
              f"greedy continuation ({upto} tokens{'' if tie_at is None else ', up to a near-tie'})")
        # Training starts from the file's weights: its step-0 validation loss
        # (printed with 4 decimals, over the same 4 windows) is transformers'.
        # Its checkpoint goes elsewhere: eval and sample would take the latest
        # checkpoint of checkpoint.dir over model.init_from.
        z0 = train_step0_loss(binary, config, "--set", f"model.init_from={d}",
                              "--set", f"checkpoint.dir={os.path.join(tmp, 'train-' + os.path.basename(d))}")
        print(f"     zoffload train from the {label} save: step 0 val loss {z0:.4f}")
        check(abs(z0 - hf_loss) <= 5.1e-5, f"zoffload train starts from the {label} save's weights (step-0 val loss)")


if __name__ == "__main__":
    sys.exit(main(__doc__, (engine_to_transformers, transformers_to_engine)))
