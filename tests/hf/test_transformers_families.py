#!/usr/bin/python3
"""The Llama-family variants against transformers (eager attention), with
whichever transformers is installed (the pinned 4.x, or a 5.x through
ZO_HF_PYTHON; docs/models.md): Mistral's sliding-window attention (with
head_dim 12, not hidden_size / heads = 8, where transformers reads head_dim)
and Qwen2's q/k/v biases (untied and tied heads; Qwen2 needs transformers
>= 4.37, skipped before).

For each, a randomly initialised model (vocabulary 317, not a multiple of
64; 6 query heads over 2 key/value heads; MLP width 43; every weight, bias
included, perturbed so the logits spread), saved with save_pretrained; for
Mistral its sliding_window (5) is much shorter than the training sequence
(24):
  1. `zoffload eval --checkpoint` gives transformers' mean loss to 1e-5
     relative; the same weights without the feature (full attention; zero
     biases) give another loss (so the check sees it); Mistral with a window
     of 1 (each position sees only itself) too.
  2. Ten AdamW steps (2 micro-batches a step, weight decay on the matrices,
     clipping at 1.0 that binds) from model.init_from track a torch loop on
     transformers' model: every step's loss and gradient norm to 1e-5
     relative, and every parameter after the ten steps (the checkpoint's
     model.safetensors) to 1e-4 of its tensor's largest element; with the
     parameters and the optimizer on the host (stage 3) every step's loss
     and norm are the all-on-device run's, bit for bit.
  3. The checkpoint's config.json is the family's (model_type,
     sliding_window) and transformers loads it with no missing or
     unexpected key, its loss equal to zoffload's on it.
  4. The family is named, not guessed from the features (issue 50, piece 1):
     `zoffload export` of a Mistral whose sliding_window is null writes
     model_type "mistral", MistralForCausalLM and sliding_window null (not
     "llama", and not an absent key MistralConfig would default to 4096), a
     Qwen2's "qwen2" and Qwen2ForCausalLM; transformers loads each export
     as that class with no missing or unexpected key and its loss.
  5. The embedding's padding index: a Llama (untied and tied) and, where
     this transformers has them, a Qwen2, a Qwen3 and a Phi-3 with
     pad_token_id PAD, which transformers builds as nn.Embedding's
     padding_idx (the row gets no gradient from the lookup; a tied head's
     gradient and weight decay still reach it), trained on tokens where
     every sixth is PAD: part 2's checks (losses, norms, every parameter,
     the stage-3 run bit for bit, the checkpoint's config.json carries
     pad_token_id), and `zoffload export` writes pad_token_id back.

Usage: tests/hf/run.sh ZOFFLOAD REPO test_transformers_families.py
"""
import inspect
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zo_hf import check, default_dtype, hf_mean_loss, main, random_tokens, rel, windows  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import AutoModelForCausalLM, MistralConfig  # noqa: E402

V, C, NH, NKV, I, L, TMAX, WINDOW = 317, 48, 6, 2, 43, 2, 64, 5
B, T, K, STEPS = 3, 24, 2, 10
LR, BETAS, EPS, WD, MAX_NORM = 2e-3, (0.9, 0.95), 1e-8, 0.1, 1.0
LOSS_RTOL, PARAM_TOL = 1e-5, 1e-4


def make_model(cls, zero_bias=False, **over):
    torch.manual_seed(11)
    kw = dict(vocab_size=V, hidden_size=C, intermediate_size=I, num_hidden_layers=L, num_attention_heads=NH,
              num_key_value_heads=NKV, max_position_embeddings=TMAX, rms_norm_eps=1e-6, tie_word_embeddings=False)
    kw.update(over)
    model = AutoModelForCausalLM.from_config(cls(attn_implementation="eager", **kw)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.1 if "norm" in name else 0.2))
            if zero_bias and name.endswith(".bias"):
                p.zero_()
    return model


def zo_run(binary, *args):
    r = subprocess.run([binary, *args], capture_output=True)
    out = (r.stdout + r.stderr).decode(errors="replace")
    return r.returncode, out


def zo_eval(binary, config, d, n):
    rc, out = zo_run(binary, "eval", config, "--checkpoint", d, "--batches", str(n))
    m = re.search(r"val loss (\S+) over", out)
    return float(m.group(1)) if rc == 0 and m else None, out.strip()


def write_config(tmp, tok_path, **extra):
    config = os.path.join(tmp, "mistral.json")
    cfg = {"train_micro_batch_size_per_gpu": B, "gradient_accumulation_steps": K, "steps": STEPS,
           "optimizer": {"type": "AdamW", "params": {"lr": LR, "betas": list(BETAS), "eps": EPS,
                                                     "weight_decay": WD}},
           "gradient_clipping": MAX_NORM,
           "model": {"arch": "llama"},
           "data": {"train": tok_path, "val": tok_path, "format": "u16", "seq_len": T, "shuffle": False},
           "engine": {"device": "cpu"}, "checkpoint": {"dir": os.path.join(tmp, "no-checkpoints"), "every": 0}}
    cfg.update(extra)
    with open(config, "w") as f:
        json.dump(cfg, f, indent=1)
    return config


def torch_steps(model, tokens):
    """STEPS AdamW steps of K micro-batches (the engine's unshuffled order):
    [(loss, grad_norm)], the model trained in place (float64)."""
    params = list(model.named_parameters())
    groups = [{"params": [p for _, p in params if p.dim() == 2], "weight_decay": WD},
              {"params": [p for _, p in params if p.dim() != 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS, foreach=False)
    out = []
    batches = list(windows(tokens, STEPS * K, B, T))
    for s in range(STEPS):
        opt.zero_grad()
        total = 0.0
        for x, y in batches[s * K:(s + 1) * K]:
            with default_dtype(torch.float64):  # transformers 4.36's float64 causal mask
                logits = model(input_ids=x).logits
            loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1)) / K
            loss.backward()
            total += loss.item()
        norm = torch.nn.utils.clip_grad_norm_([p for _, p in params], MAX_NORM).item()
        opt.step()
        out.append((total, norm))
    return out


def eval_against(binary, config, tokens, d, model, what):
    """Saves model to d; checks zoffload eval's loss is transformers'."""
    model.save_pretrained(d, safe_serialization=True)
    want = hf_mean_loss(model.double(), tokens, 4, B, T)
    got, out = zo_eval(binary, config, d, 4)
    print(f"     {what}: zoffload {got}, transformers {want:.9f}")
    check(got is not None and rel(got, want) <= LOSS_RTOL, f"{what}: zoffload eval equals transformers' loss "
          f"({got} vs {want:.6f}) {'' if got is not None else out}")
    return want


def mistral(binary, tmp):
    # head_dim apart from hidden_size / num_attention_heads (8) where this
    # transformers reads it (4.45 and later).
    hd = {"head_dim": 12} if "head_dim" in inspect.signature(MistralConfig.__init__).parameters else {}
    print(f"== Mistral, sliding_window {WINDOW} < seq_len {T}, {hd or 'head_dim 8'}")
    _, tokens, tok_path = random_tokens(tmp, V, STEPS * K * B * T + 1)
    config = write_config(tmp, tok_path)
    model = make_model(MistralConfig, sliding_window=WINDOW, **hd)
    want = eval_against(binary, config, tokens, os.path.join(tmp, "hf-mistral"), model, "window 5")
    want_full = hf_mean_loss(make_model(MistralConfig, sliding_window=None, **hd).double(), tokens, 4, B, T)
    check(rel(want_full, want) > 100 * LOSS_RTOL, f"full attention gives another loss ({want_full:.6f}): the check "
          f"sees the window")
    eval_against(binary, config, tokens, os.path.join(tmp, "hf-mistral-w1"),
                 make_model(MistralConfig, sliding_window=1, **hd), "window 1")
    train_and_export(binary, tmp, "mistral", os.path.join(tmp, "hf-mistral"), config, tokens, model,
                     dict({"model_type": "mistral", "sliding_window": WINDOW}, **hd))


def qwen2(binary, tmp):
    if not hasattr(transformers, "Qwen2Config"):
        print(f"== Qwen2: transformers {transformers.__version__} has no Qwen2 (4.37 and later): skipped")
        return
    from transformers import Qwen2Config
    _, tokens, tok_path = random_tokens(tmp, V, STEPS * K * B * T + 1)
    config = write_config(tmp, tok_path)
    for tied in (False, True):
        label = "tied" if tied else "untied"
        print(f"== Qwen2, q/k/v biases, {label} head")
        model = make_model(Qwen2Config, tie_word_embeddings=tied, use_sliding_window=False)
        want = eval_against(binary, config, tokens, os.path.join(tmp, f"hf-qwen2-{label}"), model, f"Qwen2 {label}")
        nobias = make_model(Qwen2Config, zero_bias=True, tie_word_embeddings=tied, use_sliding_window=False)
        want0 = hf_mean_loss(nobias.double(), tokens, 4, B, T)
        check(rel(want0, want) > 100 * LOSS_RTOL, f"zero biases give another loss ({want0:.6f}): the check sees them")
        if not tied:
            train_and_export(binary, tmp, "qwen2", os.path.join(tmp, f"hf-qwen2-{label}"), config, tokens, model,
                             {"model_type": "qwen2"})


def train_and_export(binary, tmp, name, d, config, tokens, model, want_config):
    """Ten steps from model's save d against torch on model (float64, trained in place), then the
    checkpoint back through transformers."""
    print(f"== {name}: {STEPS} AdamW steps of {K} micro-batches from model.init_from against torch")
    metrics = os.path.join(tmp, f"metrics-{name}.jsonl")
    ckdir = os.path.join(tmp, f"ck-{name}")
    rc, out = zo_run(binary, "train", config, "--set", f"model.init_from={d}", "--set", f"log.metrics_path={metrics}",
                     "--set", "log.every=1", "--set", f"checkpoint.dir={ckdir}", "--set", f"checkpoint.every={STEPS}")
    check(rc == 0, f"zoffload train runs {out[-300:] if rc else ''}")
    if rc != 0:
        return
    steps = []
    with open(metrics) as f:
        for line in f:
            m = json.loads(line)
            if "loss" in m and "grad_norm" in m:
                steps.append((m["loss"], m["grad_norm"]))
    # The same steps with the optimizer and the parameters on the host
    # (stage 3): bit for bit the all-on-device run's.
    m3 = os.path.join(tmp, f"metrics-{name}-stage3.jsonl")
    rc3, out3 = zo_run(binary, "train", config, "--set", f"model.init_from={d}", "--set", f"log.metrics_path={m3}",
                       "--set", "log.every=1", "--set", f"checkpoint.dir={ckdir}-stage3", "--set", "checkpoint.every=0",
                       "--set", "zero_optimization.stage=3", "--set", "zero_optimization.offload_optimizer.device=cpu",
                       "--set", "zero_optimization.offload_param.device=cpu")
    steps3 = []
    if rc3 == 0:
        with open(m3) as f:
            steps3 = [(m["loss"], m["grad_norm"]) for m in map(json.loads, f) if "loss" in m and "grad_norm" in m]
    check(rc3 == 0 and steps3 == steps, f"parameters and optimizer on the host give the same losses and norms, "
          f"bit for bit {out3[-300:] if rc3 else ''}")
    ref = torch_steps(model, tokens)  # model is float64 here
    worst_l = max(rel(a[0], b[0]) for a, b in zip(steps, ref)) if len(steps) == STEPS else float("inf")
    worst_n = max(rel(a[1], b[1]) for a, b in zip(steps, ref)) if len(steps) == STEPS else float("inf")
    clipped = sum(1 for _, n in ref if n > MAX_NORM)
    print(f"     losses {[round(x[0], 6) for x in steps]}\n     torch  {[round(x[0], 6) for x in ref]}\n"
          f"     clipping binds on {clipped} of {STEPS} steps")
    check(worst_l <= LOSS_RTOL and worst_n <= LOSS_RTOL, f"every step's loss and gradient norm track torch "
          f"(worst rel {worst_l:.3g}, {worst_n:.3g})")
    ck = os.path.join(ckdir, f"checkpoint-{STEPS}")
    got_w = load_file(os.path.join(ck, "model.safetensors"))
    worst, worst_name = 0.0, None
    for name, p in model.named_parameters():
        g = got_w.get(name)
        if g is None:
            worst, worst_name = float("inf"), name + " (missing)"
            break
        e = ((g.double() - p.detach()).abs().max() / p.detach().abs().max()).item()
        if e > worst:
            worst, worst_name = e, name
    check(worst <= PARAM_TOL, f"every parameter after {STEPS} steps equals torch's (worst {worst:.3g} of the "
          f"tensor's largest element, {worst_name})")

    print("== the checkpoint as transformers reads it")
    with open(os.path.join(ck, "config.json")) as f:
        hc = json.load(f)
    got_c = {k: hc.get(k) for k in want_config}
    check(got_c == want_config, f"config.json is the family's: {got_c}")
    back, info = AutoModelForCausalLM.from_pretrained(ck, torch_dtype=torch.float64, output_loading_info=True,
                                                      attn_implementation="eager")
    lost = {k: v for k, v in info.items() if v}
    check(not lost, f"from_pretrained reports no missing/unexpected keys {lost}")
    want_ck = hf_mean_loss(back.eval(), tokens, 4, B, T)
    got_ck, out = zo_eval(binary, config, ck, 4)
    check(got_ck is not None and rel(got_ck, want_ck) <= LOSS_RTOL,
          f"transformers and zoffload agree on the trained checkpoint ({got_ck} vs {want_ck:.6f})")


def export_keeps_family(binary, tmp):
    print("== export keeps the family: Mistral without a window, Qwen2")
    _, tokens, _ = random_tokens(tmp, V, 4 * B * T + 1)
    cases = [("mistral", MistralConfig, {"sliding_window": None}, "MistralForCausalLM",
              {"model_type": "mistral", "sliding_window": None})]
    if hasattr(transformers, "Qwen2Config"):
        cases.append(("qwen2", transformers.Qwen2Config, {"use_sliding_window": False}, "Qwen2ForCausalLM",
                      {"model_type": "qwen2"}))
    else:
        print(f"     Qwen2: transformers {transformers.__version__} has no Qwen2 (4.37 and later): skipped")
    for name, cls, over, arch, want_config in cases:
        d, out = os.path.join(tmp, f"family-{name}"), os.path.join(tmp, f"family-{name}-export")
        model = make_model(cls, **over)
        model.save_pretrained(d, safe_serialization=True)
        want = hf_mean_loss(model.double(), tokens, 4, B, T)
        rc, msg = zo_run(binary, "export", d, "--out", out)
        check(rc == 0, f"{name}: zoffload export {msg[-300:] if rc else ''}")
        if rc != 0:
            continue
        with open(os.path.join(out, "config.json")) as f:
            hc = json.load(f)
        got_c = {k: hc.get(k, "(absent)") for k in want_config}
        check(got_c == want_config and hc.get("architectures") == [arch],
              f"{name}: the export's config.json names the family: {got_c}, architectures {hc.get('architectures')}")
        back, info = AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float64, output_loading_info=True,
                                                          attn_implementation="eager")
        lost = {k: v for k, v in info.items() if v}
        got = hf_mean_loss(back.eval(), tokens, 4, B, T)
        check(type(back).__name__ == arch and not lost and rel(got, want) <= LOSS_RTOL,
              f"{name}: transformers loads the export as {type(back).__name__}, no missing/unexpected keys {lost}, "
              f"loss {got:.9f} vs {want:.9f}")


PAD = 7


def padding(binary, tmp):
    _, tokens, _ = random_tokens(tmp, V, STEPS * K * B * T + 1)
    tokens = tokens.copy()
    tokens[::6] = PAD
    tok_path = os.path.join(tmp, "hf-tokens-pad.bin")
    tokens.astype("<u2").tofile(tok_path)
    config = write_config(tmp, tok_path)
    from transformers import LlamaConfig
    cases = [("llama", LlamaConfig, False, {}), ("llama", LlamaConfig, True, {})]
    for name, over in (("qwen2", {"use_sliding_window": False}), ("qwen3", {"use_sliding_window": False}),
                       ("phi3", {"sliding_window": None})):
        cls = getattr(transformers, {"qwen2": "Qwen2Config", "qwen3": "Qwen3Config", "phi3": "Phi3Config"}[name],
                      None)
        if cls is None:
            print(f"== padding index, {name}: transformers {transformers.__version__} has none: skipped")
            continue
        cases.append((name, cls, False, over))
    for name, cls, tied, over in cases:
        label = f"{name}-pad-{'tied' if tied else 'untied'}"
        print(f"== {label}: pad_token_id {PAD}, {int((tokens == PAD).sum())} of {len(tokens)} tokens")
        model = make_model(cls, pad_token_id=PAD, tie_word_embeddings=tied, **over)
        check(model.model.embed_tokens.padding_idx == PAD, f"{label}: transformers builds nn.Embedding with "
              f"padding_idx {model.model.embed_tokens.padding_idx}")
        d = os.path.join(tmp, f"hf-{label}")
        eval_against(binary, config, tokens, d, model, label)
        out = os.path.join(tmp, f"export-{label}")
        rc, msg = zo_run(binary, "export", d, "--out", out)
        hc = {}
        if rc == 0:
            with open(os.path.join(out, "config.json")) as f:
                hc = json.load(f)
        check(rc == 0 and hc.get("pad_token_id") == PAD, f"{label}: export writes pad_token_id back "
              f"({hc.get('pad_token_id', '(absent)')}) {msg[-300:] if rc else ''}")
        train_and_export(binary, tmp, label, d, config, tokens, model, {"model_type": name, "pad_token_id": PAD})


if __name__ == "__main__":
    sys.exit(main(__doc__, (mistral, qwen2, export_keeps_family, padding)))
