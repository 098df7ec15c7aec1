#!/usr/bin/python3
"""Checks that make_llama_reference.py's plain-torch Llama is Hugging Face's:
builds transformers' LlamaForCausalLM from each reference file's config, loads
the file's initial parameters by their Hugging Face names, and compares its
logits on ref.inputs with ref.logits (max |diff| / max |ref| <= 1e-5), its
loss with ref.loss (1e-5 relative) and its parameter gradients with grad.*
(1e-4 of each tensor's max |value|). The safetensors library reads the files,
so this also checks that the hand-written files are valid safetensors.

    /usr/bin/python3 tests/reference/llama_hf_check.py [FILE.safetensors...]

Default: llama_tiny.safetensors and llama_tiny_tied.safetensors beside this
script. Needs transformers (4.36) and safetensors: scripts/install-hf.sh puts
them into build/hf-site, which this script adds to sys.path itself (or
$ZO_HF_SITE), as tests/hf/run.sh does through PYTHONPATH. Without them it
prints the reason and exits 77 (skipped). Exit 1 on a mismatch.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SITE = os.environ.get("ZO_HF_SITE", os.path.join(REPO, "build", "hf-site"))
if os.path.isdir(SITE):
    sys.path.insert(0, SITE)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

try:
    import torch
    import torch.nn.functional as F
    from safetensors import safe_open
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:
    print(f"SKIP: {e} (install with scripts/install-hf.sh, into {SITE})")
    sys.exit(77)

LOGITS_TOL = 1e-5  # max |diff| / max |ref|
LOSS_TOL = 1e-5    # relative
GRAD_TOL = 1e-4    # max |diff| / max |ref| per tensor

HF_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "rope_theta",
           "tie_word_embeddings", "hidden_act", "attention_bias")
RESULT_PREFIXES = ("ref.", "grad.", "train.", "final.")


def rel_max(a, b):
    m = b.abs().max().item()
    d = (a - b).abs().max().item()
    return d / m if m > 0 else d


def check_file(path):
    """Returns the number of failed checks."""
    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    if meta.get("format") != "zoffload-llama-reference" or meta.get("version") != "1":
        print(f"{path}: not a zoffload Llama reference file (metadata {meta})")
        return 1
    cfg = json.loads(meta["config"])
    hf_cfg = LlamaConfig(**{k: cfg[k] for k in HF_KEYS}, attn_implementation="eager")
    torch.manual_seed(0)
    model = LlamaForCausalLM(hf_cfg).float()
    params = {k: v for k, v in tensors.items() if not k.startswith(RESULT_PREFIXES)}
    missing, unexpected = model.load_state_dict(params, strict=False)
    tied = cfg["tie_word_embeddings"]
    bad = 0
    if unexpected or set(missing) != ({"lm_head.weight"} if tied else set()):
        print(f"{path}: parameter names differ from transformers': missing {missing}, unexpected {unexpected}")
        bad += 1
    if tied and model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        print(f"{path}: lm_head is not tied to embed_tokens")
        bad += 1

    B, T, V = cfg["B"], cfg["T"], cfg["vocab_size"]
    inputs, targets = tensors["ref.inputs"].long(), tensors["ref.targets"].long()
    model.train(False)
    out = model(input_ids=inputs)
    logits = out.logits.reshape(B * T, V)
    loss = F.cross_entropy(logits, targets.reshape(-1))
    loss.backward()

    d_logits = rel_max(logits.detach(), tensors["ref.logits"])
    abs_logits = (logits.detach() - tensors["ref.logits"]).abs().max().item()
    d_loss = abs(loss.item() - tensors["ref.loss"].item()) / abs(tensors["ref.loss"].item())
    grads = {n: p.grad for n, p in model.named_parameters()}
    d_grads = max((rel_max(grads[n], tensors["grad." + n]), n) for n in params)
    ok_logits, ok_loss, ok_grads = d_logits <= LOGITS_TOL, d_loss <= LOSS_TOL, d_grads[0] <= GRAD_TOL
    print(f"{os.path.basename(path)}: transformers {transformers.__version__} LlamaForCausalLM "
          f"({cfg['num_hidden_layers']} layers, {cfg['num_attention_heads']} heads over "
          f"{cfg['num_key_value_heads']} kv heads, tied {tied}) vs the plain-torch reference:")
    print(f"  logits {d_logits:.2e} of max |logit| ({abs_logits:.2e} absolute) "
          f"{'ok' if ok_logits else 'FAIL'} (tolerance {LOGITS_TOL:g})")
    print(f"  loss   {d_loss:.2e} relative {'ok' if ok_loss else 'FAIL'} (tolerance {LOSS_TOL:g})")
    print(f"  grads  worst {d_grads[0]:.2e} ({d_grads[1]}) {'ok' if ok_grads else 'FAIL'} "
          f"(tolerance {GRAD_TOL:g})")
    return bad + (not ok_logits) + (not ok_loss) + (not ok_grads)


def main():
    torch.set_num_threads(1)
    paths = sys.argv[1:] or [os.path.join(HERE, n) for n in ("llama_tiny.safetensors",
                                                             "llama_tiny_tied.safetensors")]
    bad = sum(check_file(p) for p in paths)
    print("llama_hf_check: " + ("all match" if bad == 0 else f"{bad} checks FAILED"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
