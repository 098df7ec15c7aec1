"""What test_qwen3.py and test_phi3.py (and test_phi3_lora.py) share: the
float64 truth loops on transformers' model (eval loss, AdamW steps), the
zoffload runs (eval, train, export) and the checks of a trained family
against them. A Family holds one test's shape and optimizer constants and
names its transformers class; each test keeps its own model, its truth and
its family-specific check (the q/k norms, the window)."""
import json
import os
import re
import subprocess
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file

from zo_hf import check, default_dtype, rel, windows


def zo_run(binary, *args):
    r = subprocess.run([binary, *args], capture_output=True)
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace")


def metrics_of(path):
    with open(path) as f:
        return [(m["loss"], m["grad_norm"]) for m in map(json.loads, f) if "loss" in m and "grad_norm" in m]


def auto_model_from(d):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64, attn_implementation="eager").eval()


@dataclass
class Family:
    name: str          # "Qwen3": messages
    cls: str           # "Qwen3ForCausalLM": the export's reloaded class
    config_want: dict  # config.json keys the checkpoint must carry, beside model_type and tie_word_embeddings
    model_type: str
    V: int
    B: int
    T: int
    K: int
    STEPS: int
    LR: float
    BETAS: tuple
    EPS: float
    WD: float
    MAX_NORM: float
    LOSS_RTOL: float
    PARAM_TOL: float
    EVAL_BATCHES: int
    have: bool = field(default=False)  # the installed transformers has the family
    params_note: str = ""              # what the parameter check's message adds

    def hf_loss(self, model, tokens):
        total = 0.0
        with torch.no_grad():
            for x, y in windows(tokens, self.EVAL_BATCHES, self.B, self.T):
                with default_dtype(torch.float64):
                    logits = model(input_ids=x).logits.double()
                total += F.cross_entropy(logits.reshape(-1, self.V), y.reshape(-1)).item()
        return total / self.EVAL_BATCHES

    def torch_steps(self, model, tokens):
        """STEPS AdamW steps of K micro-batches (the engine's unshuffled order)
        on the float64 model, trained in place: [(loss, grad_norm)]."""
        params = list(model.named_parameters())
        groups = [{"params": [p for _, p in params if p.dim() == 2], "weight_decay": self.WD},
                  {"params": [p for _, p in params if p.dim() != 2], "weight_decay": 0.0}]
        opt = torch.optim.AdamW(groups, lr=self.LR, betas=self.BETAS, eps=self.EPS, foreach=False)
        out, batches = [], list(windows(tokens, self.STEPS * self.K, self.B, self.T))
        for s in range(self.STEPS):
            opt.zero_grad()
            total = 0.0
            for x, y in batches[s * self.K:(s + 1) * self.K]:
                with default_dtype(torch.float64):
                    logits = model(input_ids=x).logits
                loss = F.cross_entropy(logits.reshape(-1, self.V), y.reshape(-1)) / self.K
                loss.backward()
                total += loss.item()
            norm = torch.nn.utils.clip_grad_norm_([p for _, p in params], self.MAX_NORM).item()
            opt.step()
            out.append((total, norm))
        return out

    def zo_eval(self, binary, config, d):
        rc, out = zo_run(binary, "eval", config, "--checkpoint", d, "--batches", str(self.EVAL_BATCHES))
        m = re.search(r"val loss (\S+) over", out)
        return (float(m.group(1)) if rc == 0 and m else None), out.strip()

    def write_config(self, tmp, tok_path, name="train.json", **extra):
        config = os.path.join(tmp, name)
        cfg = {"train_micro_batch_size_per_gpu": self.B, "gradient_accumulation_steps": self.K, "steps": self.STEPS,
               "optimizer": {"type": "AdamW", "params": {"lr": self.LR, "betas": list(self.BETAS), "eps": self.EPS,
                                                         "weight_decay": self.WD}},
               "gradient_clipping": self.MAX_NORM, "model": {"arch": "llama"},
               "data": {"train": tok_path, "val": tok_path, "format": "u16", "seq_len": self.T, "shuffle": False},
               "engine": {"device": "cpu"}, "checkpoint": {"dir": os.path.join(tmp, "no-checkpoints"), "every": 0}}
        cfg.update(extra)
        with open(config, "w") as f:
            json.dump(cfg, f, indent=1)
        return config

    def train_against(self, binary, tmp, label, d, config, exp):
        """Trains from d and checks every step and parameter against exp; the
        parameters and optimizer on the host with activation checkpointing
        must give the all-on-device run's losses and norms bit for bit.
        Returns the last checkpoint's directory, or None."""
        metrics, ckdir = os.path.join(tmp, f"metrics-{label}.jsonl"), os.path.join(tmp, f"ck-{label}")
        rc, out = zo_run(binary, "train", config, "--set", f"model.init_from={d}", "--set",
                         f"log.metrics_path={metrics}", "--set", "log.every=1", "--set", f"checkpoint.dir={ckdir}",
                         "--set", f"checkpoint.every={self.STEPS}")
        check(rc == 0, f"{label}: zoffload train runs {out[-400:] if rc else ''}")
        if rc != 0:
            return None
        steps, ref = metrics_of(metrics), exp["steps"]
        m3 = os.path.join(tmp, f"metrics-{label}-stage3.jsonl")
        rc3, out3 = zo_run(binary, "train", config, "--set", f"model.init_from={d}", "--set",
                           f"log.metrics_path={m3}", "--set", "log.every=1", "--set",
                           f"checkpoint.dir={ckdir}-stage3", "--set", "checkpoint.every=0",
                           "--set", "zero_optimization.stage=3",
                           "--set", "zero_optimization.offload_optimizer.device=cpu",
                           "--set", "zero_optimization.offload_param.device=cpu",
                           "--set", "activation_checkpointing.enabled=true")
        check(rc3 == 0 and metrics_of(m3) == steps, f"{label}: parameters and optimizer on the host with "
              f"activation checkpointing give the same losses and norms, bit for bit {out3[-300:] if rc3 else ''}")
        ok = len(steps) == self.STEPS
        worst_l = max(rel(a[0], b[0]) for a, b in zip(steps, ref)) if ok else float("inf")
        worst_n = max(rel(a[1], b[1]) for a, b in zip(steps, ref)) if ok else float("inf")
        print(f"     losses {[round(x[0], 6) for x in steps]}\n     torch  {[round(x[0], 6) for x in ref]}\n"
              f"     clipping binds on {sum(1 for _, n in ref if n > self.MAX_NORM)} of {self.STEPS} steps")
        check(worst_l <= self.LOSS_RTOL and worst_n <= self.LOSS_RTOL, f"{label}: every step's loss and gradient "
              f"norm track torch (worst rel {worst_l:.3g}, {worst_n:.3g})")
        ck = os.path.join(ckdir, f"checkpoint-{self.STEPS}")
        got_w = load_file(os.path.join(ck, "model.safetensors"))
        worst, worst_name = 0.0, None
        for name, p in exp["trained"].items():
            g = got_w.get(name)
            if g is None:
                worst, worst_name = float("inf"), name + " (missing)"
                break
            e = ((g.double() - p.double()).abs().max() / p.double().abs().max()).item()
            if e > worst:
                worst, worst_name = e, name
        check(worst <= self.PARAM_TOL, f"{label}: every parameter after {self.STEPS} steps equals torch's (worst "
              f"{worst:.3g} of the tensor's largest element, {worst_name}; {len(exp['trained'])} tensors"
              f"{self.params_note})")
        return ck

    def checkpoint_back(self, binary, tmp, label, ck, config, tokens, exp):
        """The checkpoint's config.json is the family's, its loss is the
        torch-trained model's, and (where transformers has the family) its
        export reloads as the family's class with the same logits."""
        with open(os.path.join(ck, "config.json")) as f:
            hc = json.load(f)
        want = {"model_type": self.model_type, "architectures": [self.cls], **self.config_want,
                "tie_word_embeddings": label == "tied"}
        got = {k: hc.get(k) for k in want}
        check(got == want, f"{label}: the checkpoint's config.json is {self.name}'s: {got}")
        got_l, out = self.zo_eval(binary, config, ck)
        want_l = exp["trained_eval_loss"]
        check(got_l is not None and rel(got_l, want_l) <= self.LOSS_RTOL, f"{label}: zoffload's loss on its "
              f"checkpoint is transformers' on the torch-trained model ({got_l} vs {want_l:.9f}) "
              f"{'' if got_l else out[-300:]}")
        if "model" not in exp:
            print(f"     {label}: transformers {transformers.__version__} has no {self.name}: the export's reload "
                  f"is checked with transformers 5 only")
            return
        exp_dir = os.path.join(tmp, f"export-{label}")
        rc, out = zo_run(binary, "export", ck, "--out", exp_dir)
        check(rc == 0, f"{label}: zoffload export {out[-300:] if rc else ''}")
        if rc != 0:
            return
        from transformers import AutoModelForCausalLM
        back, info = AutoModelForCausalLM.from_pretrained(exp_dir, dtype=torch.float64, output_loading_info=True,
                                                          attn_implementation="eager")
        lost = {k: v for k, v in info.items() if v}
        x, _ = next(windows(tokens, 1, self.B, self.T))
        with torch.no_grad():
            a, b = back.eval()(input_ids=x).logits, exp["model"](input_ids=x).logits
        err = ((a - b).abs().max() / b.abs().max()).item()
        check(type(back).__name__ == self.cls and not lost and err <= self.PARAM_TOL,
              f"{label}: transformers loads the export as {type(back).__name__}, no missing/unexpected keys {lost}, "
              f"logits equal to the torch-trained model's (worst {err:.3g} of the largest)")
