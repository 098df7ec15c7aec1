#!/usr/bin/python3
"""Every config.json field of the Llama-family models the engine loads is
implemented or refused by name: run against whichever transformers is
installed (the pinned 4.x of scripts/install-hf.sh, or a 5.x through
ZO_HF_PYTHON; see docs/models.md).

  1. The walk: for each supported family's config class (LlamaConfig,
     MistralConfig, Qwen2Config, Qwen3Config and Phi3Config where transformers
     has them; Phi-3's rope_scaling is refused, so the llama3 value is not tried on it) every field (the class's __init__ parameters, its
     to_dict() and what save_pretrained writes) must be in IMPLEMENTED,
     REFUSED or IGNORED below; a field in none fails the test (a new
     transformers field must be looked at before a model using it trains).
     Each REFUSED field, set to a value that changes the mathematics, must
     make `zoffload eval` fail naming the field; each IMPLEMENTED field set
     to a non-default value must give transformers' loss; the config
     save_pretrained writes for the class's defaults (and each published
     config below, shrunk) must load or be refused naming its field.
  2. The dialects: a Llama with rope_theta 500000 and llama3 scaling, saved
     by this transformers, is evaluated by zoffload to transformers' loss;
     its config.json rewritten into the other dialect (4.x's top-level
     rope_theta / rope_scaling, 5.x's rope_parameters) gives the same loss;
     the theta-10000 model gives another loss (the check can fail).
  3. Export: `zoffload export` of that directory writes a config.json this
     transformers reads back as the same model (same loss).
  4. Families not implemented (qwen3_moe) are refused by model_type, and
     Phi-3's 128k configs (longrope) by the scaling's name;
     Qwen2's use_sliding_window is refused by name (Mistral's
     sliding_window and Qwen2's biases are implemented:
     test_transformers_families.py).
  5. Invalid and disagreeing values (issue 52, class 1): a transformers-made
     directory's config.json tampered (rope_scaling llama3 with
     rope_parameters default, rope_theta 0 or "1e4", rms_norm_eps "0.1",
     llama3 scaling without each of its four factors, and other wrong types
     and ranges) is refused, nonzero exit, naming the key, its value and the
     file; both spellings given and agreeing load to the one-spelling loss.
     GPT-2: n_embd and its alias hidden_size (and the other attribute_map
     pairs) must agree, the alias alone loads to transformers' loss;
     layer_norm_epsilon, activation_function and n_inner other than the
     engine's are refused by name.

Usage: tests/hf/run.sh ZOFFLOAD REPO test_hf_config_fields.py
"""
import inspect
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zo_hf import check, hf_mean_loss, main, random_tokens, rel  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402

LOSS_RTOL = 1e-5
V, C, NH, NKV, I, L, TMAX = 317, 32, 4, 2, 43, 2, 48
B, T, NB = 3, 20, 3

# Read by the engine and implemented (a non-default value is checked against
# transformers' loss where VALUES gives one).
IMPLEMENTED = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling",
               "rope_parameters", "tie_word_embeddings", "hidden_act", "attention_dropout", "head_dim",
               "model_type", "sliding_window", "use_sliding_window", "resid_pdrop", "pad_token_id"}
VALUES = {"pad_token_id": 3, "rms_norm_eps": 1e-3, "rope_theta": 123456.0, "num_key_value_heads": 1, "tie_word_embeddings": True,
          "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 16}}
# Refused by name when set to a value that changes the mathematics.
REFUSED = {"attention_bias": True, "mlp_bias": True, "partial_rotary_factor": 0.5,
           "hidden_act": "gelu", "head_dim": 7, "is_decoder": True, "add_cross_attention": True,
           "pruned_heads": {"0": [1]}, "layer_types": ["sliding_attention", "full_attention"],
           "quantization_config": {"quant_method": "bitsandbytes"},
           "pad_token_id": V}  # past the vocabulary (transformers' nn.Embedding refuses it too)
# Read by the engine and refused in part (REFUSED gives the refused value).
IMPLEMENTED_IN_PART = {"hidden_act", "head_dim", "layer_types", "sliding_window", "rope_scaling", "rope_parameters",
                       "pad_token_id"}
# Fields that do not change the forward (the reason is engine/model/arch_llama_hf.c's).
IGNORED = {"architectures", "torch_dtype", "dtype", "transformers_version", "_name_or_path", "bos_token_id",
           "eos_token_id", "sep_token_id", "decoder_start_token_id", "use_cache",
           "initializer_range", "pretraining_tp", "max_window_layers", "output_attentions",
           "output_hidden_states", "return_dict", "torchscript", "use_bfloat16", "tf_legacy_loss",
           "chunk_size_feed_forward", "is_encoder_decoder", "tie_encoder_decoder", "cross_attention_hidden_size",
           "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
           "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
           "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
           "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
           "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
           "suppress_tokens", "begin_suppress_tokens", "finetuning_task", "id2label", "label2id",
           "tokenizer_class", "prefix", "problem_type", "task_specific_params", "chat_template",
           "_attn_implementation_autoset", "embd_pdrop", "original_max_position_embeddings"}
# Python-side attributes transformers keeps that are never written to config.json.
NOT_IN_FILE = {"self", "kwargs", "_commit_hash", "_attn_implementation_internal", "_attn_implementation",
               "attn_implementation", "name_or_path", "num_labels", "_output_attentions", "base_config_key",
               "sub_configs", "base_model_tp_plan", "base_model_pp_plan", "keys_to_ignore_at_inference",
               "attribute_map", "has_no_defaults_at_init", "_experts_implementation", "experts_implementation"}

# Published configs (their mathematics-bearing fields), shrunk to the tiny
# shapes: whether each loads (None) or is refused naming a field.
PUBLISHED = {
    "Llama-3.1-8B": ({"model_type": "llama", "rope_theta": 500000.0, "tie_word_embeddings": False,
                      "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 16, "rope_type": "llama3"},
                      "attention_bias": False, "mlp_bias": False, "pretraining_tp": 1, "head_dim": C // NH}, None),
    "Llama-3.2-1B": ({"model_type": "llama", "rope_theta": 500000.0, "tie_word_embeddings": True,
                      "rope_scaling": {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 16, "rope_type": "llama3"}}, None),
    "Llama-2-7b": ({"model_type": "llama", "rope_theta": 10000.0, "rope_scaling": None, "pretraining_tp": 1}, None),
    "Mistral-7B-v0.1": ({"model_type": "mistral", "sliding_window": 16, "rope_theta": 10000.0}, None),
    "Qwen2 windows": ({"model_type": "llama", "use_sliding_window": True, "sliding_window": 16,
                       "max_window_layers": 1}, "use_sliding_window"),
    "Mistral-7B-v0.3": ({"model_type": "mistral", "sliding_window": None, "rope_theta": 1000000.0}, None),
    "CodeLlama (linear)": ({"model_type": "llama", "rope_scaling": {"type": "linear", "factor": 2.0}}, "linear"),
    "dynamic NTK": ({"model_type": "llama", "rope_scaling": {"type": "dynamic", "factor": 2.0}}, "dynamic"),
    "yarn": ({"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                       "original_max_position_embeddings": 16}}, "yarn"),
    "Qwen2.5-7B": ({"model_type": "qwen2", "use_sliding_window": False, "sliding_window": 16,
                    "max_window_layers": 28, "rope_theta": 1000000.0}, None),
    "Qwen3-8B": ({"model_type": "qwen3", "head_dim": 128, "use_sliding_window": False, "sliding_window": None,
                  "max_window_layers": 36, "rope_theta": 1000000.0}, None),
    "Qwen3 windows": ({"model_type": "qwen3", "use_sliding_window": True, "sliding_window": 4096},
                      "use_sliding_window"),
    "Qwen3-30B-A3B": ({"model_type": "qwen3_moe"}, "qwen3_moe"),
    "Phi-3-mini-4k": ({"model_type": "phi3", "sliding_window": 16, "rope_scaling": None, "resid_pdrop": 0.0,
                       "embd_pdrop": 0.0, "original_max_position_embeddings": TMAX}, None),
    "Phi-3-mini-128k": ({"model_type": "phi3", "sliding_window": 16,
                         "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4},
                         "original_max_position_embeddings": 16}, "longrope"),
}

VERSION = tuple(int(x) for x in transformers.__version__.split(".")[:2])
TF5 = VERSION >= (5, 0)
LLAMA3 = VERSION >= (4, 43)  # transformers' first line with rope_type "llama3"
if not LLAMA3:
    del VALUES["rope_scaling"]


def family_classes():
    from transformers import LlamaConfig, MistralConfig
    out = {"llama": LlamaConfig, "mistral": MistralConfig}
    if hasattr(transformers, "Qwen2Config"):  # transformers >= 4.37
        out["qwen2"] = transformers.Qwen2Config
    if hasattr(transformers, "Qwen3Config"):  # transformers >= 4.51
        out["qwen3"] = transformers.Qwen3Config
    if hasattr(transformers, "Phi3Config"):  # transformers >= 4.40
        out["phi3"] = transformers.Phi3Config
    return out


def fields_of(cls, tmp):
    """The field names a config class has: __init__'s parameters, to_dict()'s
    keys and the keys save_pretrained writes for the defaults."""
    names = set(inspect.signature(cls.__init__).parameters)
    cfg = cls()
    names |= set(cfg.to_dict())
    d = os.path.join(tmp, f"fields-{cls.__name__}")
    cfg.save_pretrained(d)
    with open(os.path.join(d, "config.json")) as f:
        names |= set(json.load(f))
    return names - NOT_IN_FILE


def tiny_config(cls, **over):
    kw = dict(vocab_size=V, hidden_size=C, intermediate_size=I, num_hidden_layers=L, num_attention_heads=NH,
              num_key_value_heads=NKV, max_position_embeddings=TMAX, rms_norm_eps=1e-6)
    if cls.__name__ in ("MistralConfig", "Qwen2Config", "Qwen3Config", "Phi3Config"):
        kw["sliding_window"] = None
    if cls.__name__ == "Phi3Config":  # its default pad_token_id 32000 is past the vocabulary
        kw.update(pad_token_id=None, bos_token_id=1, eos_token_id=2)
    kw.update(over)
    return cls(attn_implementation="eager", **kw)


def make_model(cls, d, **over):
    """A randomly initialised, perturbed model of config class cls (over
    applied), saved to d; returns the float64 model."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(11)
    model = AutoModelForCausalLM.from_config(tiny_config(cls, **over)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.1 if "norm" in name else 0.2))
    model.save_pretrained(d, safe_serialization=True)
    return model.double()


def eval_config(tmp, tok_path):
    config = os.path.join(tmp, "from-hf.json")
    cfg = {"train_micro_batch_size_per_gpu": B, "model": {"arch": "llama"},
           "data": {"train": tok_path, "val": tok_path, "format": "u16", "seq_len": T},
           "engine": {"device": "cpu"}, "checkpoint": {"dir": os.path.join(tmp, "no-checkpoints")}}
    with open(config, "w") as f:
        json.dump(cfg, f)
    return config


def zo_eval(binary, config, d):
    """(loss, None) or (None, the error message)."""
    import re
    r = subprocess.run([binary, "eval", config, "--checkpoint", d, "--batches", str(NB)], capture_output=True)
    out = (r.stdout + r.stderr).decode(errors="replace")
    m = re.search(r"val loss (\S+) over", out)
    return (float(m.group(1)), None) if r.returncode == 0 and m else (None, out.strip())


def edit_config(d, fn):
    p = os.path.join(d, "config.json")
    with open(p) as f:
        j = json.load(f)
    fn(j)
    with open(p, "w") as f:
        json.dump(j, f, indent=1)


def to_dialect(j, five):
    """Rewrites config.json dict j's rotary keys into 5.x's rope_parameters
    (five) or 4.x's top-level rope_theta / rope_scaling."""
    rp = dict(j.pop("rope_parameters", None) or {})
    rs = j.pop("rope_scaling", None)
    theta = j.pop("rope_theta", rp.get("rope_theta", 10000.0))
    scaling = rs or ({k: v for k, v in rp.items() if k != "rope_theta"}
                     if rp.get("rope_type", "default") != "default" else None)
    if five:
        j["rope_parameters"] = dict(scaling or {"rope_type": "default"}, rope_theta=theta)
    else:
        j["rope_theta"], j["rope_scaling"] = theta, scaling


def walk(binary, tmp):
    print("== the fields of each family's config class")
    _, tokens, tok_path = random_tokens(tmp, V, NB * B * T + 1)
    config = eval_config(tmp, tok_path)
    for family, cls in family_classes().items():
        fields = fields_of(cls, tmp)
        unknown = sorted(f for f in fields if f not in IMPLEMENTED | set(REFUSED) | IGNORED)
        check(not unknown, f"{cls.__name__}: every field is implemented, refused or ignored with a reason "
              f"({len(fields)} fields; unclassified: {unknown})")
        base = os.path.join(tmp, f"walk-{family}")
        hf = make_model(cls, base)
        want = hf_mean_loss(hf, tokens, NB, B, T)
        got, msg = zo_eval(binary, config, base)
        check(got is not None and rel(got, want) <= LOSS_RTOL,
              f"{family}: the defaults save_pretrained writes load, loss {got} vs transformers' {want:.6f} {msg or ''}")
        for field, value in sorted(REFUSED.items()):
            d = os.path.join(tmp, f"refused-{family}-{field}")
            shutil.copytree(base, d)
            edit_config(d, lambda j: j.__setitem__(field, value))
            got, msg = zo_eval(binary, config, d)
            check(got is None and field in (msg or ""), f"{family}: {field} = {json.dumps(value)} is refused by "
                  f"name: {(msg or 'loaded').splitlines()[-1][:200]}")
        values = dict(VALUES)
        if "head_dim" in inspect.signature(cls.__init__).parameters:  # transformers reads it (4.45 and later)
            values["head_dim"] = 16  # hidden_size / num_attention_heads is 8
        if family == "phi3":  # refused for Phi-3 (the Phi-3-mini-128k row below)
            values.pop("rope_scaling", None)
        for field, value in sorted(values.items()):
            d = os.path.join(tmp, f"value-{family}-{field}")
            hf = make_model(cls, d, **{field: value})
            want = hf_mean_loss(hf, tokens, NB, B, T)
            got, msg = zo_eval(binary, config, d)
            check(got is not None and rel(got, want) <= LOSS_RTOL,
                  f"{family}: {field} = {json.dumps(value)} gives transformers' loss ({got} vs {want:.6f}) "
                  f"{msg or ''}")
    print("== published configs, shrunk")
    for name, (fields, refused) in PUBLISHED.items():
        d = os.path.join(tmp, "published-" + name.replace(" ", "_").replace("(", "").replace(")", ""))
        base = os.path.join(tmp, "walk-" + fields["model_type"])
        if not os.path.isdir(base):
            if refused is None:
                print(f"     {name}: transformers {transformers.__version__} has no {fields['model_type']}: skipped")
                continue
            base = os.path.join(tmp, "walk-llama")
        shutil.copytree(base, d)
        edit_config(d, lambda j: [j.pop(k, None) for k in ("rope_theta", "rope_scaling", "rope_parameters")]
                    and j.update(fields))
        got, msg = zo_eval(binary, config, d)
        if refused is None:
            check(got is not None, f"{name}: loads ({msg or got})")
        else:
            check(got is None and refused in (msg or ""), f"{name}: refused naming {refused}: "
                  f"{(msg or 'loaded').splitlines()[-1][:200]}")


def dialects(binary, tmp):
    print("== rotary settings in both config.json dialects, and export")
    from transformers import LlamaConfig
    _, tokens, tok_path = random_tokens(tmp, V, NB * B * T + 1)
    config = eval_config(tmp, tok_path)
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16} if LLAMA3 else None
    over = {"rope_parameters": dict(scaling, rope_theta=500000.0)} if TF5 else \
        {"rope_theta": 500000.0, "rope_scaling": scaling}
    d = os.path.join(tmp, "dialect-native")
    hf = make_model(LlamaConfig, d, **over)
    with open(os.path.join(d, "config.json")) as f:
        native = json.load(f)
    print(f"     transformers {transformers.__version__} writes: rope_theta {native.get('rope_theta')}, "
          f"rope_scaling {native.get('rope_scaling')}, rope_parameters {native.get('rope_parameters')}")
    want = hf_mean_loss(hf, tokens, NB, B, T)
    plain = make_model(LlamaConfig, os.path.join(tmp, "dialect-plain"))
    want_plain = hf_mean_loss(plain, tokens, NB, B, T)
    check(rel(want, want_plain) > 10 * LOSS_RTOL, f"theta 500000 with llama3 scaling changes transformers' loss "
          f"({want:.6f} against {want_plain:.6f}): the checks below can fail")
    for label, five in (("as saved", None), ("4.x dialect", False), ("5.x dialect", True)):
        dd = d if five is None else os.path.join(tmp, f"dialect-{label[:3]}")
        if five is not None:
            shutil.copytree(d, dd)
            edit_config(dd, lambda j: to_dialect(j, five))
        got, msg = zo_eval(binary, config, dd)
        check(got is not None and rel(got, want) <= LOSS_RTOL,
              f"config.json {label}: zoffload eval {got} equals transformers' {want:.6f} {msg or ''}")
    out = os.path.join(tmp, "dialect-export")
    r = subprocess.run([binary, "export", d, "--out", out], capture_output=True)
    check(r.returncode == 0, f"zoffload export {d}: {(r.stdout + r.stderr).decode(errors='replace').strip()[-200:]}")
    if r.returncode == 0:
        from transformers import LlamaForCausalLM
        back = LlamaForCausalLM.from_pretrained(out, torch_dtype=torch.float64, attn_implementation="eager").eval()
        got = hf_mean_loss(back, tokens, NB, B, T)
        check(rel(got, want) <= LOSS_RTOL, f"transformers {transformers.__version__} reads the export as the same "
              f"model: loss {got:.6f} vs {want:.6f}")


LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 16}


def without(d, key):
    return {k: v for k, v in d.items() if k != key}


# (what, edit of the 4.x-dialect config.json dict, the texts the refusal must hold besides "config.json").
INVALID = [
    ("rope_scaling llama3, rope_parameters default",
     lambda j: j.update(rope_parameters={"rope_type": "default", "rope_theta": j["rope_theta"]}),
     ["rope_parameters", "rope_scaling", "\"default\"", "\"llama3\""]),
    ("rope_scaling llama3, rope_parameters llama3 with another factor",
     lambda j: j.update(rope_parameters=dict(LLAMA3_SCALING, factor=4.0, rope_theta=j["rope_theta"])),
     ["rope_parameters.factor", "rope_scaling.factor", "4.0", "8.0"]),
    ("rope_type and type disagree", lambda j: j["rope_scaling"].update(type="linear"),
     ["rope_type", "type", "\"llama3\"", "\"linear\""]),
    ("rope_theta 0", lambda j: j.update(rope_theta=0), ["rope_theta", "= 0"]),
    ("rope_theta -1", lambda j: j.update(rope_theta=-1.0), ["rope_theta", "= -1"]),
    ("rope_theta a string", lambda j: j.update(rope_theta="1e4"), ["rope_theta", '"1e4"']),
    ("rope_parameters.rope_theta a string",
     lambda j: j.update(rope_parameters=dict(j["rope_scaling"], rope_theta="1e4")),
     ["rope_parameters", "rope_theta", '"1e4"']),
    ("rms_norm_eps a string", lambda j: j.update(rms_norm_eps="0.1"), ["rms_norm_eps", '"0.1"']),
    ("rms_norm_eps 0", lambda j: j.update(rms_norm_eps=0), ["rms_norm_eps", "= 0"]),
    ("pad_token_id -1", lambda j: j.update(pad_token_id=-1), ["pad_token_id", "= -1", f"[0, {V})"]),
    ("pad_token_id a string", lambda j: j.update(pad_token_id="3"), ["pad_token_id", '"3"', f"[0, {V})"]),
    ("pad_token_id 1.5", lambda j: j.update(pad_token_id=1.5), ["pad_token_id", "1.5", f"[0, {V})"]),
    ("llama3 high_freq_factor not above low_freq_factor",
     lambda j: j["rope_scaling"].update(high_freq_factor=1.0), ["high_freq_factor", "low_freq_factor"]),
    ("llama3 factor a string", lambda j: j["rope_scaling"].update(factor="8"), ["factor", '"8"']),
    ("num_hidden_layers 0", lambda j: j.update(num_hidden_layers=0), ["num_hidden_layers", "= 0"]),
    ("hidden_size 32.0", lambda j: j.update(hidden_size=32.0), ["hidden_size", "32.0"]),
    ("max_position_embeddings a string", lambda j: j.update(max_position_embeddings="48"),
     ["max_position_embeddings", '"48"']),
    ("tie_word_embeddings a string", lambda j: j.update(tie_word_embeddings="true"),
     ["tie_word_embeddings", '"true"']),
    ("partial_rotary_factor a string", lambda j: j.update(partial_rotary_factor="0.5"),
     ["partial_rotary_factor", '"0.5"']),
    ("attention_dropout a string", lambda j: j.update(attention_dropout="0.1"), ["attention_dropout", '"0.1"']),
    ("model_type a number", lambda j: j.update(model_type=5), ["model_type = 5"]),
] + [(f"llama3 scaling without {k}", lambda j, k=k: j.update(rope_scaling=without(j["rope_scaling"], k)),
      [f"rope_scaling: \"{k}\"", "(missing)"])
     for k in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")]


def invalid_values(binary, tmp):
    print("== invalid and disagreeing config.json values (issue 52, class 1)")
    from transformers import LlamaConfig
    _, _, tok_path = random_tokens(tmp, V, NB * B * T + 1)
    config = eval_config(tmp, tok_path)
    d = os.path.join(tmp, "invalid-base")
    make_model(LlamaConfig, d, rope_theta=500000.0)
    edit_config(d, lambda j: j.update(rope_theta=500000.0, rope_scaling=dict(LLAMA3_SCALING)))
    edit_config(d, lambda j: (j.pop("rope_parameters", None), to_dialect(j, False)))
    base, msg = zo_eval(binary, config, d)
    check(base is not None, f"the untampered llama3 config.json (4.x dialect) loads: {msg or base}")
    both = os.path.join(tmp, "invalid-both-agree")
    shutil.copytree(d, both)
    edit_config(both, lambda j: j.update(rope_parameters=dict(j["rope_scaling"], rope_theta=j["rope_theta"])))
    got, msg = zo_eval(binary, config, both)
    check(got is not None and base is not None and rel(got, base) <= 1e-7,
          f"both spellings given and agreeing: loss {got} equals the one-spelling loss {base} {msg or ''}")
    for i, (what, edit, needles) in enumerate(INVALID):
        dd = os.path.join(tmp, f"invalid-{i}")
        shutil.copytree(d, dd)
        edit_config(dd, edit)
        r = subprocess.run([binary, "eval", config, "--checkpoint", dd, "--batches", str(NB)], capture_output=True)
        out = (r.stdout + r.stderr).decode(errors="replace").strip()
        want = needles + [os.path.join(dd, "config.json")]
        missing = [n for n in want if n not in out]
        check(r.returncode != 0 and not missing and "val loss" not in out,
              f"{what}: refused (exit {r.returncode}) naming {', '.join(needles)} and the file"
              f"{' (missing: ' + ', '.join(missing) + ')' if missing else ''}: {out[-300:]}")


GPT2_INVALID = [
    ("hidden_size disagreeing with n_embd", lambda j: j.update(hidden_size=64), ["n_embd = 32", "hidden_size = 64"]),
    ("num_hidden_layers disagreeing with n_layer", lambda j: j.update(num_hidden_layers=3),
     ["n_layer = 1", "num_hidden_layers = 3"]),
    ("n_layer a string", lambda j: j.update(n_layer="1"), ['n_layer', '"1"']),
    ("n_head 0", lambda j: j.update(n_head=0), ["n_head", "= 0"]),
    ("layer_norm_epsilon 1e-3", lambda j: j.update(layer_norm_epsilon=1e-3), ["layer_norm_epsilon", "0.001"]),
    ("layer_norm_epsilon a string", lambda j: j.update(layer_norm_epsilon="1e-5"), ["layer_norm_epsilon", '"1e-5"']),
    ("activation_function relu", lambda j: j.update(activation_function="relu"), ["activation_function", "relu"]),
    ("n_inner 7", lambda j: j.update(n_inner=7), ["n_inner = 7"]),
    ("resid_pdrop a string", lambda j: j.update(resid_pdrop="0.1"), ["resid_pdrop", '"0.1"']),
]


def gpt2_invalid(binary, tmp):
    print("== GPT-2 config.json: aliases and fixed settings (issue 52, class 1)")
    from transformers import GPT2Config, GPT2LMHeadModel
    _, tokens, tok_path = random_tokens(tmp, V, NB * B * T + 1)
    config = eval_config(tmp, tok_path)
    with open(config) as f:
        j = json.load(f)
    j["model"]["arch"] = "gpt2"
    with open(config, "w") as f:
        json.dump(j, f)
    torch.manual_seed(12)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=C, n_layer=1, n_head=NH, n_positions=TMAX)).eval()
    d = os.path.join(tmp, "gpt2-base")
    model.save_pretrained(d, safe_serialization=True)
    want = hf_mean_loss(model.double(), tokens, NB, B, T)
    alias = os.path.join(tmp, "gpt2-alias")
    shutil.copytree(d, alias)
    edit_config(alias, lambda j: j.update(hidden_size=j.pop("n_embd"), num_hidden_layers=j.pop("n_layer")))
    for label, dd in (("untampered", d), ("hidden_size and num_hidden_layers for n_embd and n_layer", alias)):
        got, msg = zo_eval(binary, config, dd)
        check(got is not None and rel(got, want) <= LOSS_RTOL,
              f"GPT-2 {label}: zoffload eval {got} equals transformers' {want:.6f} {msg or ''}")
    for i, (what, edit, needles) in enumerate(GPT2_INVALID):
        dd = os.path.join(tmp, f"gpt2-invalid-{i}")
        shutil.copytree(d, dd)
        edit_config(dd, edit)
        r = subprocess.run([binary, "eval", config, "--checkpoint", dd, "--batches", str(NB)], capture_output=True)
        out = (r.stdout + r.stderr).decode(errors="replace").strip()
        missing = [n for n in needles + [os.path.join(dd, "config.json")] if n not in out]
        check(r.returncode != 0 and not missing and "val loss" not in out,
              f"GPT-2 {what}: refused (exit {r.returncode}) naming {', '.join(needles)} and the file"
              f"{' (missing: ' + ', '.join(missing) + ')' if missing else ''}: {out[-300:]}")


if __name__ == "__main__":
    sys.exit(main(__doc__, (walk, dialects, invalid_values, gpt2_invalid)))
