"""PEFT adapter directories both ways: PEFT (get_peft_model, LoRA with
non-zero B) saves an adapter for a tiny Llama (GQA) and a tiny GPT-2 (Conv1D,
fan_in_fan_out); zoffload reads it as lora.init_from (zo_lora_resolve,
zo_lora_load) and writes it back (zo_lora_save, what `export --adapter` will
write); peft.PeftModel.from_pretrained loads that copy with every adapter
weight bit-identical, the same scale, and identical logits.
Usage: test_peft_adapter.py TEST_ENGINE_LORA_BINARY (run by tests/hf/run.sh;
skips without peft: scripts/install-hf.sh)."""
import os
import subprocess
import sys
import tempfile

import torch

try:
    import peft
    from peft import LoraConfig, PeftModel, get_peft_model
except ImportError:
    print("SKIP: peft not installed (scripts/install-hf.sh)")
    sys.exit(77)
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM


def make(arch):
    torch.manual_seed(0)
    if arch == "llama":
        cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16)
        return LlamaForCausalLM(cfg), (2, 4, 2, 32, 48)
    cfg = GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=16)
    return GPT2LMHeadModel(cfg), (2, 4, 4, 32, 128)


def case(binary, arch, lora_cfg, tmp):
    base, shape = make(arch)
    state = {k: v.clone() for k, v in base.state_dict().items()}
    model = get_peft_model(base, lora_cfg)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name or "lora_A" in name:
                p.copy_(torch.randn_like(p))  # non-zero B: the adapter changes the output
    model.eval()
    src, dst = os.path.join(tmp, arch + "-src"), os.path.join(tmp, arch + "-dst")
    model.save_pretrained(src)
    os.makedirs(dst)
    out = subprocess.run([binary, "--roundtrip", arch, *map(str, shape), src, dst], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"FAIL {arch}: {out.stderr}")
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = model(ids).logits
    fresh, _ = make(arch)
    fresh.load_state_dict(state)
    loaded = PeftModel.from_pretrained(fresh, dst)
    loaded.eval()
    with torch.no_grad():
        got = loaded(ids).logits
    a = {k: v for k, v in model.state_dict().items() if "lora_" in k}
    b = {k: v for k, v in loaded.state_dict().items() if "lora_" in k}
    ok = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    scale_ok = all(m.scaling == n.scaling for m, n in zip(model.modules(), loaded.modules()) if hasattr(m, "scaling"))
    print(f"{arch}: {len(a)} adapter tensors, zoffload: {out.stdout.strip()}; weights equal {ok}, "
          f"scales equal {scale_ok}, max |logit diff| {(got - want).abs().max().item():.3g}")
    return ok and scale_ok and torch.equal(got, want) and len(a) > 0


def main():
    binary = sys.argv[1]
    print(f"peft {peft.__version__}, torch {torch.__version__}")
    cases = [
        ("llama", LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM",
                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                             "down_proj"])),
        ("llama", LoraConfig(r=2, lora_alpha=16, use_rslora=True, task_type="CAUSAL_LM",
                             target_modules=["v_proj", "down_proj"])),
        ("gpt2", LoraConfig(r=4, lora_alpha=8, task_type="CAUSAL_LM", fan_in_fan_out=True,
                            target_modules=["c_attn", "c_proj", "c_fc"])),
    ]
    ok = True
    for i, (arch, cfg) in enumerate(cases):
        with tempfile.TemporaryDirectory(prefix=f"zo-peft{i}-") as tmp:
            ok = case(binary, arch, cfg, tmp) and ok
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
