#!/usr/bin/python3
"""`zoffload eval` with a PEFT LoRA adapter against peft.PeftModel (issue 45,
part 3): for each model, a base made with transformers (weights moved off
their init) is saved, get_peft_model wraps it, every lora_A and lora_B is set
to random non-zero values (B = 0 would be the base exactly) and the adapter
is saved with PEFT's save_pretrained. Then:
  1. `zoffload eval --checkpoint BASE --adapter ADAPTER` gives PeftModel's
     mean loss (eval mode, float64) on the same windows within 1e-5
     relative; the base's own loss is another (so the check sees the
     adapter), and zoffload eval of the base alone gives it.
  2. The same through the config: lora.init_from = ADAPTER.
  3. In bf16 (bf16.enabled) the loss is nearer PeftModel's than a quarter
     of the way to the base's: the adapter's working-dtype copy applies.
  4. `zoffload sample --top-k 1 --adapter ADAPTER` (token ids: no
     tokenizer) generates what PeftModel's greedy `generate` does, up to the
     first near-tie of its top two logits (fp32 may pick either there); the
     base's greedy generation is another within that span (so the check
     sees the adapter), sample without the adapter generates the base's,
     and lora.init_from generates what --adapter does.
Models: a Llama with GQA (attention and MLP projections), the same with an
rsLoRA adapter, a Qwen2 (q/k/v biases; transformers 4.36 has no Qwen2, so a
Llama whose q/k/v carry biases is saved as model_type "qwen2": the same
arithmetic), a GPT-2 (Conv1D, fan_in_fan_out), a Llama whose head_dim (12)
is not hidden_size / heads (8) (transformers before 4.45 does not read
head_dim: the model is built as later ones build it, test_peft_adapter.py's
widen_heads).
Refusals, each naming what is wrong: an adapter whose tensors have another r
than its config, one naming a target module the model lacks (gate_proj on a
GPT-2), one made for a wider model, one whose base_model_name_or_path names
another model; eval and sample with lora.r and no adapter.
Eval has one placement (every parameter on the device, forward only): there
is no other placement to compare.

Usage: tests/hf/run.sh ZOFFLOAD REPO test_peft_eval.py (skips without peft:
scripts/install-hf.sh)
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zo_hf import check, default_dtype, hf_greedy, hf_mean_loss, main, random_tokens, rel  # noqa: E402

import torch  # noqa: E402

try:
    from peft import LoraConfig, get_peft_model
except ImportError:
    print("SKIP: peft not installed (scripts/install-hf.sh)")
    sys.exit(77)
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM  # noqa: E402

LOSS_RTOL = 1e-5
V, C, NH, NKV, I, L, TMAX, HEAD_DIM = 97, 32, 4, 2, 40, 2, 32, 12
B, T, NB = 2, 16, 3
PROMPT, N_NEW = [5, 17, 42, 3, 88, 61], 20  # within TMAX: generate's context never slides
ALL_LLAMA = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def perturb(model, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.1 if "norm" in n or "ln_" in n else 0.2))
    return model.eval()


def llama(seed, qkv_bias=False, head_dim=None):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=V, hidden_size=C, intermediate_size=I, num_hidden_layers=L, num_attention_heads=NH,
                      num_key_value_heads=NKV, max_position_embeddings=TMAX, rms_norm_eps=1e-6,
                      tie_word_embeddings=False, attention_bias=qkv_bias)
    model = LlamaForCausalLM(cfg)
    if head_dim:
        from test_peft_adapter import widen_heads
        widen_heads(model, head_dim)
    if qkv_bias:  # Qwen2: biases on q, k, v only
        for layer in model.model.layers:
            o = layer.self_attn.o_proj
            layer.self_attn.o_proj = torch.nn.Linear(o.in_features, o.out_features, bias=False)
            layer.self_attn.o_proj.weight.data.copy_(o.weight.data)
    return perturb(model, seed + 1)


def gpt2(seed):
    torch.manual_seed(seed)
    return perturb(GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=C, n_layer=L, n_head=NH, n_positions=TMAX)),
                   seed + 1)


def save_base(model, d, kind):
    """model's save_pretrained, its config.json made what zoffload reads for kind."""
    model.save_pretrained(d, safe_serialization=True)
    p = os.path.join(d, "config.json")
    with open(p) as f:
        cfg = json.load(f)
    if kind == "qwen2":
        cfg.update(model_type="qwen2", architectures=["Qwen2ForCausalLM"], attention_bias=False,
                   use_sliding_window=False)
    if kind == "llama-hd":
        cfg["head_dim"] = HEAD_DIM
    with open(p, "w") as f:
        json.dump(cfg, f)


def make_adapter(model, lora_cfg, d, seed):
    """get_peft_model over model (in place), random factors, saved to d; the
    PeftModel (eval mode) is returned."""
    pm = get_peft_model(model, lora_cfg)
    torch.manual_seed(seed)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_A" in n or "lora_B" in n:
                p.copy_(torch.randn_like(p) * 0.2)
    pm.eval()
    pm.save_pretrained(d)
    return pm


def zo_eval(binary, config, *extra):
    """(loss or None, the whole output)."""
    r = subprocess.run([binary, "eval", config, "--batches", str(NB), *extra], capture_output=True)
    out = (r.stdout + r.stderr).decode(errors="replace")
    m = re.search(r"val loss (\S+) over", out)
    return (float(m.group(1)) if r.returncode == 0 and m else None), out


def zo_sample(binary, config, *extra):
    """(the generated token ids or None, the whole output) of greedy
    `zoffload sample` from PROMPT."""
    r = subprocess.run([binary, "sample", config, "--prompt", ",".join(map(str, PROMPT)), "--tokens", str(N_NEW),
                        "--top-k", "1", "--temperature", "1", "--seed", "1", *extra], capture_output=True)
    out = (r.stdout + r.stderr).decode(errors="replace")
    if r.returncode != 0:
        return None, out
    return [int(x) for x in r.stdout.decode().strip().split(",") if x], out


def peft_generate(pm):
    """PeftModel's greedy generate from PROMPT, N_NEW tokens (no end-of-text
    stop: zoffload without a tokenizer has none)."""
    with torch.no_grad(), default_dtype(next(pm.parameters()).dtype):
        out = pm.generate(input_ids=torch.tensor([PROMPT]), max_new_tokens=N_NEW, do_sample=False,
                          eos_token_id=V, pad_token_id=0)
    return [int(x) for x in out[0, len(PROMPT):]]


def greedy(binary, what, config, cfg_lora, base_dir, ad_dir, pm):
    """Check 4 of the docstring for one model (pm: its PeftModel, float64)."""
    want = peft_generate(pm)
    loop, tie = hf_greedy(pm, PROMPT, N_NEW, TMAX)
    with pm.disable_adapter():
        want_base = peft_generate(pm)
        _, tie_base = hf_greedy(pm, PROMPT, N_NEW, TMAX)
    upto = N_NEW if tie is None else tie
    upto_base = N_NEW if tie_base is None else tie_base
    check(len(want) == N_NEW and loop[:upto] == want[:upto],
          f"{what}: PeftModel's generate is the greedy loop of hf_greedy ({want} vs {loop})")
    span = min(upto, upto_base)
    check(want[:span] != want_base[:span],
          f"{what}: the adapter changes PEFT's greedy generation within the {span} tokens compared "
          f"({want_base} -> {want}): the check sees it")
    got, out = zo_sample(binary, config, "--checkpoint", base_dir, "--adapter", ad_dir)
    print(f"     greedy: zoffload {got}\n             PEFT     {want}" +
          ("" if tie is None else f" (near-tie at {tie})"))
    check(got is not None and got[:upto] == want[:upto],
          f"{what}: zoffload sample --top-k 1 --adapter generates PeftModel's greedy generate ({upto} tokens)"
          f"{'' if got is not None else ': ' + out.strip()[-400:]}")
    check("adapter: " + ad_dir in out, f"{what}: sample names the adapter on stderr")
    got_base, out = zo_sample(binary, config, "--checkpoint", base_dir)
    check(got_base is not None and got_base[:upto_base] == want_base[:upto_base],
          f"{what}: sample without the adapter generates the base's ({got_base} vs {want_base})")
    got2, out = zo_sample(binary, cfg_lora, "--checkpoint", base_dir)
    check(got2 is not None and got2 == got, f"{what}: sample with lora.init_from generates --adapter's ({got2})")


def write_config(tmp, tok_path, name, lora=None):
    config = os.path.join(tmp, f"eval-{name}.json")
    cfg = {"train_micro_batch_size_per_gpu": B, "data": {"train": tok_path, "val": tok_path, "format": "u16",
                                                         "seq_len": T},
           "engine": {"device": "cpu"}, "checkpoint": {"dir": os.path.join(tmp, "no-ck")}}
    if lora:
        cfg["lora"] = lora
    with open(config, "w") as f:
        json.dump(cfg, f)
    return config


CASES = [
    ("llama", "Llama GQA, all seven projections", lambda: llama(3),
     LoraConfig(r=4, lora_alpha=8, lora_dropout=0.1, target_modules=ALL_LLAMA, task_type="CAUSAL_LM")),
    ("llama", "Llama GQA, rsLoRA on k_proj, o_proj, up_proj", lambda: llama(5),
     LoraConfig(r=4, lora_alpha=6, use_rslora=True, target_modules=["k_proj", "o_proj", "up_proj"],
                task_type="CAUSAL_LM")),
    ("qwen2", "Qwen2 (q/k/v biases), all seven projections", lambda: llama(7, qkv_bias=True),
     LoraConfig(r=3, lora_alpha=16, target_modules=ALL_LLAMA, task_type="CAUSAL_LM")),
    ("gpt2", "GPT-2 (Conv1D), c_attn, c_proj, c_fc", lambda: gpt2(9),
     LoraConfig(r=4, lora_alpha=8, fan_in_fan_out=True, target_modules=["c_attn", "c_proj", "c_fc"],
                task_type="CAUSAL_LM")),
    ("llama-hd", "Llama head_dim 12 != 32/4, all seven projections", lambda: llama(11, head_dim=HEAD_DIM),
     LoraConfig(r=2, lora_alpha=4, target_modules=ALL_LLAMA, task_type="CAUSAL_LM")),
]


def exact(binary, tmp):
    _, tokens, tok_path = random_tokens(tmp, V, 4096)
    config = write_config(tmp, tok_path, "plain")
    for i, (kind, what, make, lora_cfg) in enumerate(CASES):
        print(f"== {what}")
        base_dir, ad_dir = os.path.join(tmp, f"base-{i}"), os.path.join(tmp, f"adapter-{i}")
        model = make()
        save_base(model, base_dir, kind)
        pm = make_adapter(model, lora_cfg, ad_dir, 100 + i)
        pm.double()
        want = hf_mean_loss(pm, tokens, NB, B, T)
        with pm.disable_adapter():
            want_base = hf_mean_loss(pm, tokens, NB, B, T)
        check(rel(want_base, want) > 100 * LOSS_RTOL,
              f"{what}: the adapter changes PEFT's loss ({want_base:.6f} -> {want:.6f}): the check sees it")
        got, out = zo_eval(binary, config, "--checkpoint", base_dir, "--adapter", ad_dir)
        print(f"     zoffload {got}, PEFT {want:.9f}")
        check(got is not None and rel(got, want) <= LOSS_RTOL,
              f"{what}: zoffload eval --adapter equals PeftModel's loss ({got} vs {want:.6f})"
              f"{'' if got is not None else ': ' + out.strip()[-400:]}")
        check("adapter: " + ad_dir in out, f"{what}: the adapter is named on stderr")
        got_base, out = zo_eval(binary, config, "--checkpoint", base_dir)
        check(got_base is not None and rel(got_base, want_base) <= LOSS_RTOL,
              f"{what}: without the adapter zoffload gives the base's loss ({got_base} vs {want_base:.6f})")
        got_bf, out = zo_eval(binary, config, "--checkpoint", base_dir, "--adapter", ad_dir,
                              "--set", "bf16.enabled=true")
        check(got_bf is not None and abs(got_bf - want) < abs(want_base - want) / 4,
              f"{what}: in bf16 the adapter applies too ({got_bf}: nearer PEFT's {want:.6f} than a quarter of the "
              f"way to the base's {want_base:.6f})")
        cfg2 = write_config(tmp, tok_path, f"lora-{i}", {"init_from": ad_dir})
        got2, out = zo_eval(binary, cfg2, "--checkpoint", base_dir)
        check(got2 == got, f"{what}: lora.init_from gives the same loss as --adapter ({got2} vs {got})")
        greedy(binary, what, config, cfg2, base_dir, ad_dir, pm)


def rewrite(src, dst, config=None, tensors=None):
    """A copy of adapter directory src in dst, adapter_config.json updated by
    config(dict), the tensors by tensors(dict)."""
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(src, "adapter_config.json")) as f:
        cfg = json.load(f)
    if config:
        config(cfg)
    with open(os.path.join(dst, "adapter_config.json"), "w") as f:
        json.dump(cfg, f)
    sd = {k: v.clone() for k, v in load_file(os.path.join(src, "adapter_model.safetensors")).items()}
    if tensors:
        tensors(sd)
    save_file(sd, os.path.join(dst, "adapter_model.safetensors"), metadata={"format": "pt"})
    return dst


def refusals(binary, tmp):
    _, _, tok_path = random_tokens(tmp, V, 4096)
    config = write_config(tmp, tok_path, "refusals")
    base_dir, ad_dir = os.path.join(tmp, "base-ref"), os.path.join(tmp, "adapter-ref")
    model = llama(21)
    save_base(model, base_dir, "llama")
    make_adapter(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "down_proj"],
                                   task_type="CAUSAL_LM"), ad_dir, 22)
    got, out = zo_eval(binary, config, "--checkpoint", base_dir, "--adapter", ad_dir)
    check(got is not None, f"the unchanged adapter runs {'' if got is not None else out.strip()[-300:]}")

    def refused(what, d, *needles, cfg=config, extra=()):
        got, out = zo_eval(binary, cfg, "--checkpoint", base_dir, *(("--adapter", d) if d else ()), *extra)
        ok = got is None and all(n in out for n in needles)
        check(ok, f"{what}: refused naming {', '.join(needles)}{'' if ok else ': ' + out.strip()[-400:]}")

    # r = 4 in the tensors, 8 in the config
    d = rewrite(ad_dir, os.path.join(tmp, "ad-r"), config=lambda c: c.update(r=8))
    refused("r 8 in adapter_config.json, 4 in the tensors", d, "adapter_model.safetensors",
            "layers.0.self_attn.q_proj.lora_A.weight", "[4, 32]", "[8, 32]")
    # a module the model lacks
    d = rewrite(ad_dir, os.path.join(tmp, "ad-target"), config=lambda c: c.update(target_modules=["c_attn"]))
    refused("target module c_attn on a Llama", d, "adapter_config.json", "c_attn", "q_proj")
    # an adapter made for a wider model (hidden 48)
    wide_dir = os.path.join(tmp, "adapter-wide")
    torch.manual_seed(23)
    wide = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=48, intermediate_size=I, num_hidden_layers=L,
                                        num_attention_heads=NH, num_key_value_heads=NKV,
                                        max_position_embeddings=TMAX))
    make_adapter(wide, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "down_proj"], task_type="CAUSAL_LM"),
                 wide_dir, 24)
    refused("an adapter of a hidden-48 model", wide_dir, "layers.0.self_attn.q_proj.lora_A.weight", "[4, 48]",
            "[4, 32]")
    # an adapter of a deeper model: a tensor of layer 2 the model lacks
    d = rewrite(ad_dir, os.path.join(tmp, "ad-deep"), tensors=lambda sd: sd.update(
        {k.replace("layers.0.", "layers.2."): v.clone() for k, v in list(sd.items()) if "layers.0." in k}))
    refused("an adapter with layer 2 on a 2-layer model", d, "adapter_model.safetensors", "layers.2.", "not a LoRA factor")
    # another base model by name
    d = rewrite(ad_dir, os.path.join(tmp, "ad-name"),
                config=lambda c: c.update(base_model_name_or_path="meta-llama/Llama-2-7b-hf"))
    refused("base_model_name_or_path of another model", d, "base_model_name_or_path", "meta-llama/Llama-2-7b-hf",
            base_dir)
    # the same base by name (its directory, or a hub id ending in its name) runs
    for name in (base_dir, "someone/" + os.path.basename(base_dir)):
        d = rewrite(ad_dir, os.path.join(tmp, "ad-same"), config=lambda c: c.update(base_model_name_or_path=name))
        got, out = zo_eval(binary, config, "--checkpoint", base_dir, "--adapter", d)
        check(got is not None, f"base_model_name_or_path {name} is the base: runs "
              f"{'' if got is not None else out.strip()[-300:]}")
    # lora.r without an adapter: refused (PEFT's fresh adapter is the base exactly)
    refused("lora.r without lora.init_from", None, "lora.r = 4", "lora.init_from", "--adapter",
            cfg=write_config(tmp, tok_path, "fresh", {"r": 4}))
    # --adapter replaces the config's lora.init_from, with a note
    cfg_other = write_config(tmp, tok_path, "other", {"init_from": wide_dir})
    got, out = zo_eval(binary, cfg_other, "--checkpoint", base_dir, "--adapter", ad_dir)
    check(got is not None and f"--adapter {ad_dir} replaces the config's lora.init_from = {wide_dir}" in out,
          f"--adapter wins over lora.init_from, with a note {'' if got is not None else out.strip()[-300:]}")
    # sample with lora.r and no adapter: refused as eval is, naming sample
    r = subprocess.run([binary, "sample", write_config(tmp, tok_path, "fresh-sample", {"r": 4}), "--checkpoint",
                        base_dir, "--prompt", "1,2", "--tokens", "1"], capture_output=True)
    out = (r.stdout + r.stderr).decode(errors="replace")
    check(r.returncode != 0 and "lora.r = 4 without lora.init_from: sample" in out and "--adapter" in out,
          f"sample with lora.r and no adapter refused by name: {out.strip()[-300:]}")
    # sample's --adapter replaces the config's lora.init_from too, with the note
    r = subprocess.run([binary, "sample", cfg_other, "--checkpoint", base_dir, "--adapter", ad_dir, "--prompt", "1,2",
                        "--tokens", "1"], capture_output=True)
    out = (r.stdout + r.stderr).decode(errors="replace")
    check(r.returncode == 0 and f"--adapter {ad_dir} replaces the config's lora.init_from = {wide_dir}" in out,
          f"sample --adapter wins over lora.init_from, with a note: {out.strip()[-300:]}")

if __name__ == "__main__":
    sys.exit(main(__doc__, (exact, refusals)))
