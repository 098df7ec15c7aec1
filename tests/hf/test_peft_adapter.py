"""PEFT adapter directories both ways: PEFT (get_peft_model, LoRA with
non-zero B) saves an adapter for a tiny Llama (GQA), a tiny Llama whose
head_dim (12) is not hidden_size / heads (8), and a tiny GPT-2 (Conv1D,
fan_in_fan_out); zoffload reads it as lora.init_from (zo_lora_resolve,
zo_lora_load: its adapter table, built from the architecture's tensor map,
must have PEFT's every shape) and writes it back (zo_lora_save, what
`export --adapter` will write); the copy has the same tensors of the same
shapes, and peft.PeftModel.from_pretrained loads it with every adapter weight
bit-identical, the same scale, and identical logits. A transformers that does
not read head_dim (before 4.45) gets the head_dim model as later ones build
it: its attention projections replaced by Linears of head_dim heads.
Usage: test_peft_adapter.py TEST_ENGINE_LORA_BINARY (run by tests/hf/run.sh;
skips without peft: scripts/install-hf.sh)."""
import inspect
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
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM


HEAD_DIM = 12  # llama-hd: not hidden_size / heads = 8


def widen_heads(model, hd):
    """What transformers 4.45 and later build for config head_dim = hd: q, k,
    v of hd-wide heads, o_proj from NH hd; rotary tables of hd."""
    for layer in model.model.layers:
        a = layer.self_attn
        a.head_dim, a.hidden_size = hd, a.num_heads * hd
        C = a.q_proj.in_features
        a.q_proj = torch.nn.Linear(C, a.num_heads * hd, bias=False)
        a.k_proj = torch.nn.Linear(C, a.num_key_value_heads * hd, bias=False)
        a.v_proj = torch.nn.Linear(C, a.num_key_value_heads * hd, bias=False)
        a.o_proj = torch.nn.Linear(a.num_heads * hd, C, bias=False)
        for lin in (a.q_proj, a.k_proj, a.v_proj, a.o_proj):
            torch.nn.init.normal_(lin.weight, std=0.02)
        a._init_rope()


def make(arch):
    """The model and its shape for the converter: L NH NKV C I head_dim (0: C / NH)."""
    torch.manual_seed(0)
    if arch in ("llama", "llama-hd"):
        kw = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16)
        if arch == "llama":
            return LlamaForCausalLM(LlamaConfig(**kw)), (2, 4, 2, 32, 48, 0)
        if "head_dim" in inspect.signature(LlamaConfig.__init__).parameters:
            return LlamaForCausalLM(LlamaConfig(head_dim=HEAD_DIM, **kw)), (2, 4, 2, 32, 48, HEAD_DIM)
        model = LlamaForCausalLM(LlamaConfig(**kw))
        widen_heads(model, HEAD_DIM)
        return model, (2, 4, 2, 32, 48, HEAD_DIM)
    cfg = GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=16)
    return GPT2LMHeadModel(cfg), (2, 4, 4, 32, 128, 0)


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
    out = subprocess.run([binary, "--roundtrip", "llama" if arch == "llama-hd" else arch, *map(str, shape), src, dst],
                         capture_output=True, text=True)
    if out.returncode != 0:
        print(f"FAIL {arch}: zoffload cannot read PEFT's adapter: {out.stderr.strip()}")
        return False
    peft_shapes = {k: tuple(v.shape) for k, v in load_file(os.path.join(src, "adapter_model.safetensors")).items()}
    our_shapes = {k: tuple(v.shape) for k, v in load_file(os.path.join(dst, "adapter_model.safetensors")).items()}
    shapes_ok = peft_shapes == our_shapes
    if not shapes_ok:
        print(f"FAIL {arch}: shapes differ: PEFT {sorted(peft_shapes.items())}, zoffload {sorted(our_shapes.items())}")
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
    print(f"{arch}: {len(a)} adapter tensors, zoffload: {out.stdout.strip()}; shapes equal {shapes_ok}, "
          f"weights equal {ok}, scales equal {scale_ok}, max |logit diff| {(got - want).abs().max().item():.3g}")
    return shapes_ok and ok and scale_ok and torch.equal(got, want) and len(a) > 0


def main():
    binary = sys.argv[1]
    print(f"peft {peft.__version__}, torch {torch.__version__}")
    cases = [
        ("llama", LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM",
                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                             "down_proj"])),
        ("llama", LoraConfig(r=2, lora_alpha=16, use_rslora=True, task_type="CAUSAL_LM",
                             target_modules=["v_proj", "down_proj"])),
        ("llama-hd", LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM",
                                target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                "down_proj"])),
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
