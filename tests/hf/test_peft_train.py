#!/usr/bin/python3
"""`zoffload train` with LoRA against PEFT + torch.optim.AdamW (issue 46,
pieces 1 and 2: a frozen base and the adapters trained, the base on the
device). For each model a base made with transformers (weights moved off
their init) is saved, get_peft_model wraps it and every lora_A and lora_B
gets random non-zero values (so both receive gradients from the first
step), saved with PEFT's save_pretrained: the run starts from that adapter
(lora.init_from) over the base (model.init_from). Then:
  1. Ten AdamW steps of two micro-batches each (gradient accumulation),
     clipping at a norm the gradients exceed on some steps, weight decay:
     every step's loss and gradient norm (over the adapters only) equal the
     PeftModel's trained in float64 by torch.optim.AdamW (every trainable
     tensor is 2-D: decay on all) with clip_grad_norm_ within 1e-5
     relative; the base's parameters never change (its loss after the run,
     adapter off, is the starting base's: `zoffload train --sample` is not
     needed for that, the base's file is never written).
  2. Activation checkpointing (every block recomputed) gives the same
     losses and norms bit for bit, and so do random stream delays
     (ZO_STREAM_DELAY_US): the events order the adapters' step; so does
     the base streamed from host RAM through one device slot (issue 47,
     piece 2) and the base read from a parameter file on NVMe through two
     (piece 3), with and without delays, in fp32 and bf16, and with 4
     micro-batches a step (fp32 and bf16) the device, host and NVMe bases
     agree bit for bit.
  3. bf16 (base and activations in bf16, the adapters with fp32 masters):
     the losses stay within 2% of the float64 run's, and differ from the
     fp32 run's (the working dtype applies).
  4. Checkpoints (piece 3): the run's checkpoint-10 is a PEFT adapter
     directory whose adapters equal PEFT's trained ones within 1e-4 of
     each tensor's largest element; PeftModel.from_pretrained loads it over
     the base and its loss is `zoffload eval --adapter CHECKPOINT`'s within
     1e-5, and so is eval's of the run's config (its latest checkpoint
     applied over model.init_from); 5 steps, then --resume auto to 10, give the same losses, norms
     and adapter and optimizer files, bit for bit, and so with the base on
     NVMe (reloaded into its parameter file); resuming over another
     base is refused naming both; the checkpoint given as a model is
     refused naming it.
  5. Export (piece 4): `export CHECKPOINT --adapter` writes the checkpoint's
     adapter (equal tensors) as a directory PeftModel loads; `--merge`
     writes the base with the adapters folded in, equal to PEFT's
     merge_and_unload within 1e-6 of each tensor's largest element, with
     the base's family in config.json; a LoRA checkpoint exported without
     either, and --merge of a plain model, are refused saying why.
  6. Refused by name: the optimizer offloaded with LoRA (also beside the
     base on NVMe),
     AdamW8bit, fp16, lora_dropout > 0.
Models: a Llama with GQA (all seven projections), a Qwen2 (q/k/v biases;
transformers 4.36 has no Qwen2, so a Llama whose q/k/v carry biases is
saved as model_type "qwen2": the same arithmetic), a GPT-2 (Conv1D,
fan_in_fan_out; c_attn, c_proj, c_fc).

Usage: tests/hf/run.sh ZOFFLOAD REPO test_peft_train.py (skips without peft:
scripts/install-hf.sh)
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zo_hf import check, default_dtype, main, random_tokens, rel, windows  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

try:
    from peft import LoraConfig, PeftModel, get_peft_model_state_dict
except ImportError:
    print("SKIP: peft not installed (scripts/install-hf.sh)")
    sys.exit(77)
from safetensors.torch import load_file  # noqa: E402
from test_peft_eval import ALL_LLAMA, gpt2, llama, make_adapter, save_base, zo_eval  # noqa: E402
from zo_hf import hf_mean_loss  # noqa: E402

V = 97
B, T, K, STEPS = 2, 16, 2, 10
LR, BETAS, EPS, WD = 2e-3, (0.9, 0.95), 1e-8, 0.1
LOSS_RTOL, BF16_RTOL, PARAM_TOL = 1e-5, 2e-2, 1e-4


def zo_run(binary, *args, env=None):
    r = subprocess.run([binary, *args], capture_output=True, env=env)
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace")


def write_config(tmp, name, tok_path, base_dir, ad_dir, metrics, max_norm, **extra):
    config = os.path.join(tmp, f"train-{name}.json")
    cfg = {"train_micro_batch_size_per_gpu": B, "gradient_accumulation_steps": K, "steps": STEPS,
           "optimizer": {"type": "AdamW", "params": {"lr": LR, "betas": list(BETAS), "eps": EPS,
                                                     "weight_decay": WD}},
           "gradient_clipping": max_norm,
           "model": {"init_from": base_dir},
           "lora": {"init_from": ad_dir},
           "data": {"train": tok_path, "val": tok_path, "format": "u16", "seq_len": T, "shuffle": False},
           "log": {"every": 1, "metrics_path": metrics},
           "engine": {"device": "cpu"}}
    cfg.update(extra)
    with open(config, "w") as f:
        json.dump(cfg, f, indent=1)
    return config


def zo_steps(binary, config, metrics, *extra, env=None):
    """[(loss, grad_norm)] of a `zoffload train` run, or None (and the output)."""
    if os.path.exists(metrics):
        os.remove(metrics)
    rc, out = zo_run(binary, "train", config, "--set", f"log.metrics_path={metrics}", *extra, env=env)
    if rc != 0:
        return None, out
    with open(metrics) as f:
        return [(m["loss"], m["grad_norm"]) for m in map(json.loads, f) if "loss" in m and "grad_norm" in m], out


def peft_steps(pm, tokens, max_norm):
    """STEPS AdamW steps of K micro-batches of the PeftModel pm (float64,
    trained in place): [(loss, grad_norm)]. The base's dropout is off, as the
    runs' model.dropout (0) says."""
    params = [p for p in pm.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, foreach=False)
    pm.train()
    for mod in pm.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    out = []
    batches = list(windows(tokens, STEPS * K, B, T))
    for s in range(STEPS):
        opt.zero_grad()
        total = 0.0
        for x, y in batches[s * K:(s + 1) * K]:
            with default_dtype(torch.float64):
                logits = pm(input_ids=x).logits
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)) / K
            loss.backward()
            total += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm).item()
        opt.step()
        out.append((total, norm))
    return out


def worst(a, b, i):
    return max(rel(x[i], y[i]) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")


def case(binary, tmp, tokens, tok_path, name, kind, build, lora_cfg, max_norm):
    print(f"== {name}")
    model = build()
    base_dir, ad_dir = os.path.join(tmp, f"base-{name}"), os.path.join(tmp, f"adapter-{name}")
    save_base(model, base_dir, kind)
    pm = make_adapter(model, lora_cfg, ad_dir, seed=11)
    metrics = os.path.join(tmp, f"metrics-{name}.jsonl")
    config = write_config(tmp, name, tok_path, base_dir, ad_dir, metrics, max_norm)
    got, out = zo_steps(binary, config, metrics)
    check(got is not None and len(got) == STEPS, f"{name}: zoffload train with the adapter runs "
          f"{out[-400:] if got is None else ''}")
    if got is None:
        return
    check("lora: r " in out and "the base frozen on the device" in out, f"{name}: the run says it trains LoRA")
    ref = peft_steps(pm.double(), tokens, max_norm)
    wl, wn = worst(got, ref, 0), worst(got, ref, 1)
    clipped = sum(1 for _, n in ref if n > max_norm)
    print(f"     losses {[round(x[0], 6) for x in got]}\n     PEFT   {[round(x[0], 6) for x in ref]}\n"
          f"     norms  {[round(x[1], 4) for x in got]}\n     PEFT   {[round(x[1], 4) for x in ref]}\n"
          f"     clipping binds on {clipped} of {STEPS} steps")
    print(f"     rel loss {[f'{rel(x[0], y[0]):.1e}' for x, y in zip(got, ref)]}\n"
          f"     rel norm {[f'{rel(x[1], y[1]):.1e}' for x, y in zip(got, ref)]}")
    check(0 < clipped < STEPS, f"{name}: clipping binds on some steps, not all ({clipped})")
    check(wl <= LOSS_RTOL and wn <= LOSS_RTOL, f"{name}: every step's loss and adapter gradient norm equal "
          f"PEFT + AdamW's (worst rel {wl:.3g}, {wn:.3g})")
    check(rel(ref[-1][0], ref[0][0]) > 100 * LOSS_RTOL, f"{name}: training moves the loss ({ref[0][0]:.5f} -> "
          f"{ref[-1][0]:.5f}): the check sees the updates")

    ck, out = zo_steps(binary, config, metrics, "--set", "activation_checkpointing.enabled=true")
    check(ck == got, f"{name}: activation checkpointing gives the same losses and norms, bit for bit "
          f"{out[-300:] if ck is None else ''}")
    host = ["--set", "zero_optimization.stage=3", "--set", "zero_optimization.offload_param.device=cpu",
            "--set", "zero_optimization.offload_param.buffer_count=1"]
    hs, out = zo_steps(binary, config, metrics, *host)
    check(hs == got and "frozen on the host, streamed through 1 device slots" in out, f"{name}: the base "
          f"streamed from the host (one slot) gives the same losses and norms, bit for bit {out[-300:]}")
    env = dict(os.environ, ZO_STREAM_DELAY_US="200")
    hd, out = zo_steps(binary, config, metrics, *host, env=env)
    check(hd == got, f"{name}: ... and so with random stream delays {out[-300:] if hd is None else ''}")
    dl, out = zo_steps(binary, config, metrics, env=env)
    check(dl == got, f"{name}: random stream delays give the same losses and norms, bit for bit "
          f"{out[-300:] if dl is None else ''}")
    nvme = nvme_sets(tmp, name)
    ns, out = zo_steps(binary, config, metrics, *nvme)
    check(ns == got and "frozen on NVMe (a read-only parameter file" in out, f"{name}: the base read from NVMe "
          f"(two slots) gives the same losses and norms, bit for bit {out[-300:]}")
    nd, out = zo_steps(binary, config, metrics, *nvme, env=env)
    check(nd == got, f"{name}: ... and so with random stream delays {out[-300:] if nd is None else ''}")
    checkpoints(binary, tmp, name, config, metrics, got, pm, build, base_dir, tokens)
    bf, out = zo_steps(binary, config, metrics, "--set", "bf16.enabled=true")
    bh, out_h = zo_steps(binary, config, metrics, "--set", "bf16.enabled=true", *host)
    check(bh == bf, f"{name}: bf16 with the base streamed from the host equals bf16 on the device, bit for bit "
          f"{out_h[-300:] if bh is None else ''}")
    bn, out_n = zo_steps(binary, config, metrics, "--set", "bf16.enabled=true", *nvme)
    check(bn == bf, f"{name}: bf16 with the base on NVMe equals bf16 on the device, bit for bit "
          f"{out_n[-300:] if bn is None else ''}")
    for prec in ("false", "true"):  # accumulation 4: the three places of the base agree, fp32 and bf16
        k4 = ["--set", "gradient_accumulation_steps=4", "--set", f"bf16.enabled={prec}"]
        d4, out = zo_steps(binary, config, metrics, *k4)
        h4, out_h = zo_steps(binary, config, metrics, *k4, *host)
        n4, out_n = zo_steps(binary, config, metrics, *k4, *nvme)
        check(d4 is not None and len(d4) == STEPS and h4 == d4 and n4 == d4 and d4 != (bf if prec == "true" else got),
              f"{name}: 4 micro-batches a step, bf16 {prec}: the base on the host and on NVMe give the device's "
              f"losses and norms, bit for bit {(out + out_h + out_n)[-400:]}")
    wb = worst(bf, ref, 0)
    check(bf is not None and wb <= BF16_RTOL and bf != got, f"{name}: bf16 losses within {BF16_RTOL} of PEFT's "
          f"float64 ones and not fp32's (worst rel {wb:.3g}) {out[-300:] if bf is None else ''}")


def nvme_sets(tmp, name):
    """The frozen base on NVMe: a parameter file under tmp, two slots."""
    return ["--set", "zero_optimization.stage=3", "--set", "zero_optimization.offload_param.device=nvme",
            "--set", f"zero_optimization.offload_param.nvme_path={os.path.join(tmp, 'nvme-' + name)}",
            "--set", "zero_optimization.offload_param.buffer_count=2"]


def same_files(a, b, names):
    for n in names:
        with open(os.path.join(a, n), "rb") as f, open(os.path.join(b, n), "rb") as g:
            if f.read() != g.read():
                return False
    return True


def checkpoints(binary, tmp, name, config, metrics, got, pm, build, base_dir, tokens):
    """Check 4 of the docstring; pm has been trained by peft_steps, build()
    makes its base again (transformers 4.36 cannot load a "qwen2" directory)."""
    ckdir = os.path.join(tmp, f"ck-{name}")
    full, out = zo_steps(binary, config, metrics, "--set", f"checkpoint.dir={ckdir}", "--set", "checkpoint.every=5")
    ck = os.path.join(ckdir, f"checkpoint-{STEPS}")
    check(full == got and os.path.isfile(os.path.join(ck, "adapter_model.safetensors")),
          f"{name}: a run saving checkpoints trains the same and writes {ck} {out[-300:] if full is None else ''}")
    if full != got or not os.path.isdir(ck):
        return
    mine, want = load_file(os.path.join(ck, "adapter_model.safetensors")), get_peft_model_state_dict(pm)
    worst_p, worst_n = 0.0, None
    for k, v in want.items():
        g = mine.get(k)
        e = float("inf") if g is None else ((g.double() - v.double()).abs().max() / v.double().abs().max()).item()
        if e > worst_p:
            worst_p, worst_n = e, k
    check(set(mine) == set(want) and worst_p <= PARAM_TOL, f"{name}: the checkpoint's adapters equal PEFT's after "
          f"{STEPS} steps (worst {worst_p:.3g} of the tensor's largest element, {worst_n})")
    loaded = PeftModel.from_pretrained(build().double(), ck).eval()
    want_l = hf_mean_loss(loaded, tokens, 3, B, T)
    got_l, out = zo_eval(binary, config, "--checkpoint", base_dir, "--adapter", ck)
    check(got_l is not None and rel(got_l, want_l) <= LOSS_RTOL, f"{name}: PeftModel loads the checkpoint and its "
          f"loss is zoffload eval --adapter's ({got_l} vs {want_l:.6f}) {out[-300:] if got_l is None else ''}")
    got_d, out = zo_eval(binary, config, "--set", f"checkpoint.dir={ckdir}")
    check(got_d == got_l and "latest checkpoint" in out, f"{name}: eval of the run's config applies its latest "
          f"checkpoint as the adapter over model.init_from ({got_d}) {out[-300:] if got_d is None else ''}")
    exports(binary, tmp, name, ck, build, base_dir)
    rdir = os.path.join(tmp, f"ck-{name}-resume")
    a, out_a = zo_steps(binary, config, metrics, "--set", f"checkpoint.dir={rdir}", "--set", "checkpoint.every=5",
                        "--set", "steps=5")
    b, out_b = zo_steps(binary, config, metrics, "--set", f"checkpoint.dir={rdir}", "--set", "checkpoint.every=5",
                        "--resume", "auto")
    rck = os.path.join(rdir, f"checkpoint-{STEPS}")
    check(a is not None and b is not None and a + b == got and os.path.isdir(rck) and
          same_files(ck, rck, ["adapter_model.safetensors", "adapter_optimizer.safetensors"]),
          f"{name}: 5 steps, then --resume auto to {STEPS}, give the uninterrupted run's losses, norms, adapters and "
          f"optimizer state, bit for bit {(out_a + out_b)[-400:]}")
    ndir = os.path.join(tmp, f"ck-{name}-resume-nvme")
    nvme = nvme_sets(tmp, name)
    a, out_a = zo_steps(binary, config, metrics, "--set", f"checkpoint.dir={ndir}", "--set", "checkpoint.every=5",
                        "--set", "steps=5", *nvme)
    b, out_b = zo_steps(binary, config, metrics, "--set", f"checkpoint.dir={ndir}", "--set", "checkpoint.every=5",
                        "--resume", "auto", *nvme)
    nck = os.path.join(ndir, f"checkpoint-{STEPS}")
    check(a is not None and b is not None and a + b == got and os.path.isdir(nck) and
          same_files(ck, nck, ["adapter_model.safetensors", "adapter_optimizer.safetensors"]),
          f"{name}: with the base on NVMe, 5 steps, then --resume auto (the base read from model.init_from into the "
          f"parameter file again) to {STEPS}, give the uninterrupted run's losses, norms, adapters and optimizer "
          f"state, bit for bit {(out_a + out_b)[-400:]}")
    other = os.path.join(tmp, f"base-{name}-other")
    save_base(gpt2(99) if name == "gpt2" else llama(99, qkv_bias=name == "qwen2"), other, name)
    rc, out = zo_run(binary, "train", config, "--set", f"checkpoint.dir={rdir}", "--resume", "auto", "--set",
                     f"steps={STEPS + 2}", "--set", f"model.init_from={other}")
    check(rc == 2 and "model.init_from" in out and other in out and base_dir in out,
          f"{name}: resuming over another base is refused naming both (exit {rc}): {out.strip()[-300:]}")
    rc, out = zo_run(binary, "eval", config, "--checkpoint", ck)
    check(rc == 2 and "is a PEFT adapter" in out and "not a model" in out, f"{name}: the checkpoint given as a model "
          f"is refused naming it (exit {rc}): {out.strip()[-200:]}")


def exports(binary, tmp, name, ck, build, base_dir):
    """Check 5 of the docstring."""
    ad = os.path.join(tmp, f"export-{name}-adapter")
    rc, out = zo_run(binary, "export", ck, "--adapter", "--out", ad)
    same = rc == 0 and load_file(os.path.join(ad, "adapter_model.safetensors")).keys() == \
        load_file(os.path.join(ck, "adapter_model.safetensors")).keys()
    if same:
        a, b = load_file(os.path.join(ad, "adapter_model.safetensors")), load_file(os.path.join(ck, "adapter_model.safetensors"))
        same = all(torch.equal(a[k], b[k]) for k in a)
    check(same, f"{name}: export --adapter writes the checkpoint's adapter (equal tensors) {out.strip()[-300:]}")
    if rc == 0:
        pm = PeftModel.from_pretrained(build().double(), ad)
        check(sum(1 for n, _ in pm.named_parameters() if "lora_" in n) > 0, f"{name}: PeftModel loads the export")
    mg = os.path.join(tmp, f"export-{name}-merged")
    rc, out = zo_run(binary, "export", ck, "--merge", "--out", mg)
    check(rc == 0, f"{name}: export --merge runs {out.strip()[-300:]}")
    if rc != 0:
        return
    want = {k: v.double() for k, v in PeftModel.from_pretrained(build().double(), ck).merge_and_unload().state_dict().items()}
    got = load_file(os.path.join(mg, "model.safetensors"))
    missing = [k for k in got if k not in want]
    worst_m, worst_k = 0.0, None
    for k, v in got.items():
        if k in want:
            e = ((v.double() - want[k]).abs().max() / want[k].abs().max().clamp_min(1e-30)).item()
            if e > worst_m:
                worst_m, worst_k = e, k
    params = {n for n, _ in build().named_parameters()}
    check(not missing and params - set(got) <= {"lm_head.weight"} and worst_m <= 1e-6,
          f"{name}: export --merge equals PEFT's merge_and_unload (worst {worst_m:.3g} of the tensor's largest "
          f"element, {worst_k}; unknown {missing[:3]}, missing {sorted(params - set(got))[:3]})")
    with open(os.path.join(mg, "config.json")) as f:
        check(json.load(f).get("model_type") == name, f"{name}: the merged model's config.json is the base's family")
    rc, out = zo_run(binary, "export", ck, "--out", os.path.join(tmp, f"export-{name}-plain"))
    check(rc == 2 and "--adapter" in out and "--merge" in out, f"{name}: export of a LoRA checkpoint without "
          f"--adapter or --merge says which (exit {rc}): {out.strip()[-200:]}")
    rc, out = zo_run(binary, "export", base_dir, "--merge", "--out", os.path.join(tmp, f"export-{name}-nolora"))
    check(rc == 2 and "not a LoRA run's checkpoint" in out, f"{name}: export --merge of a model without an adapter "
          f"is refused (exit {rc}): {out.strip()[-200:]}")


def refusals(binary, tmp, tok_path):
    print("== refused by name")
    model = llama(21)
    base_dir, ad_dir = os.path.join(tmp, "base-refuse"), os.path.join(tmp, "adapter-refuse")
    save_base(model, base_dir, "llama")
    make_adapter(model, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"], task_type="CAUSAL_LM"), ad_dir, 3)
    metrics = os.path.join(tmp, "metrics-refuse.jsonl")
    config = write_config(tmp, "refuse", tok_path, base_dir, ad_dir, metrics, 1.0)
    for extra, want in [
        (["zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu"],
         "zero_optimization.offload_optimizer"),
        (["zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=nvme",
          "zero_optimization.offload_optimizer.nvme_path=/tmp", "zero_optimization.offload_param.device=nvme"],
         "zero_optimization.offload_optimizer"),
        (["zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
          "zero_optimization.offload_param.device=nvme", "zero_optimization.offload_param.nvme_path=/tmp"],
         "zero_optimization.offload_optimizer"),
        (["optimizer.type=AdamW8bit"], "AdamW8bit"),
        (["fp16.enabled=true"], "fp16.enabled"),
        (["checkpoint.save_optimizer=false"], "checkpoint.save_optimizer"),
    ]:
        args = [a for e in extra for a in ("--set", e)]
        rc, out = zo_run(binary, "train", config, *args)
        check(rc == 2 and want in out and "lora" in out.lower(), f"train with LoRA and {' '.join(extra)} is refused naming "
              f"{want} (exit {rc}): {out.strip()[-200:]}")
    d2 = os.path.join(tmp, "adapter-dropout")
    make_adapter(llama(21), LoraConfig(r=2, lora_alpha=4, lora_dropout=0.1, target_modules=["q_proj"],
                                       task_type="CAUSAL_LM"), d2, 3)
    rc, out = zo_run(binary, "train", config, "--set", f"lora.init_from={d2}")
    check(rc != 0 and "lora_dropout" in out, f"train with lora_dropout 0.1 is refused by name (exit {rc}): "
          f"{out.strip()[-200:]}")


def run(binary, tmp):
    _, tokens, tok_path = random_tokens(tmp, V, 4000)
    case(binary, tmp, tokens, tok_path, "llama", "llama", lambda: llama(3),
         LoraConfig(r=4, lora_alpha=8, target_modules=ALL_LLAMA, task_type="CAUSAL_LM"), 3.0)
    case(binary, tmp, tokens, tok_path, "qwen2", "qwen2", lambda: llama(7, qkv_bias=True),
         LoraConfig(r=3, lora_alpha=6, use_rslora=True, target_modules=["q_proj", "k_proj", "v_proj", "down_proj"],
                    task_type="CAUSAL_LM"), 3.0)
    case(binary, tmp, tokens, tok_path, "gpt2", "gpt2", lambda: gpt2(9),
         LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn", "c_proj", "c_fc"], fan_in_fan_out=True,
                    task_type="CAUSAL_LM"), 1.9)
    refusals(binary, tmp, tok_path)


if __name__ == "__main__":
    sys.exit(main(__doc__, [run]))
