#!/usr/bin/env python3
"""Writes the NF4/FP4 reference files of tests/test-kernels-quant4.c from
bitsandbytes' own quantize_4bit / dequantize_4bit on the CPU (the truth of
kernels/cpu/quant4.c), and with --check compares fresh bitsandbytes results
against the committed files instead of writing them.

Usage: python3 tests/hf/make_nf4_ref.py [--check] [OUT_DIR]
(default OUT_DIR tests/hf/ref/nf4). Needs torch and bitsandbytes (exits 77,
skipped, without them); made with bitsandbytes 0.50.2, torch 2.15.0 (both
recorded in every file) on an AVX-512 x86-64. --check is the ctest
hf-nf4-bitsandbytes (ZO_BNB_PYTHON names the interpreter): the arrays must
be the committed ones, a different bitsandbytes or torch included.

File format (little-endian), one case per file NAME.bin:
  a text header of "key=value" lines ending with an empty line: format
  (zoq4ref1), quant_type (nf4|fp4), dtype (f32|bf16|f16), blocksize, numel,
  n_blocks, nested (0|1), n_blocks2, dequant_path (native|fallback: which
  bitsandbytes CPU dequantizer made `out`, its C kernel or, for an odd last
  dimension, torch), bitsandbytes, torch, torch_cpu_capability;
  then the arrays back to back:
  x        (numel) the input, in dtype (2 bytes per element for bf16/f16)
  packed   ((numel + 1) / 2) uint8, the 4-bit codes
  absmax   (n_blocks) f32, the per-block absmax before double quantization
  if nested:
    qabsmax (n_blocks) uint8, absmax2 (n_blocks2) f32, code (256) f32,
    offset (1) f32
  out      (numel) f32, dequantize_4bit of (packed, state) with the state's
           dtype set to float32
"""
import os
import sys

try:
    import numpy as np
    import torch

    import bitsandbytes
    import bitsandbytes.functional as F
    from bitsandbytes.backends.default.ops import _get_4bit_quantize_bounds
except ImportError as e:  # the ctest hf-nf4-bitsandbytes skips (77) without them
    print(f"SKIP: bitsandbytes' CPU quantization not importable ({e}); "
          "pip install torch bitsandbytes (made with bitsandbytes 0.50.2, torch 2.15)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))


def tie_values(quant_type):
    """Every decision boundary of the 4-bit map exactly, and the floats on each
    side of it, with a 1.0 first so that the block's absmax is 1 (the scaled
    value is then the input itself)."""
    bounds, _ = _get_4bit_quantize_bounds(quant_type, torch.device("cpu"))
    b = bounds.numpy().astype(np.float32)
    up = np.nextafter(b, np.float32(2))
    dn = np.nextafter(b, np.float32(-2))
    vals = np.concatenate([[1.0, 0.0, -0.0, -1.0], b, up, dn, -b]).astype(np.float32)
    return vals


def make_input(rng, numel, blocksize, quant_type, scale=1.0):
    x = (rng.standard_normal(numel) * scale).astype(np.float32)
    ties = tie_values(quant_type)
    # block 0: the ties at absmax 1; block 1: the same at absmax 2 (exact).
    k = len(ties)
    x[:k] = ties
    x[k:blocksize] = np.clip(x[k:blocksize], -0.999, 0.999)  # absmax stays 1
    if numel >= 2 * blocksize:
        x[blocksize : blocksize + k] = 2 * ties
        x[blocksize + k : 2 * blocksize] = 2 * np.clip(x[blocksize + k : 2 * blocksize], -0.999, 0.999)
    if numel >= 3 * blocksize:
        x[2 * blocksize : 3 * blocksize] = 0  # an all-zero block
    if numel >= 4 * blocksize:
        # subnormals: absmax under 1e-38 (torch's clamp) and a mix
        sub = rng.standard_normal(blocksize).astype(np.float32) * np.float32(1e-40)
        x[3 * blocksize : 4 * blocksize] = sub
    if numel >= 5 * blocksize:
        x[4 * blocksize : 5 * blocksize] *= np.float32(3e-38)
    return x


def tail_ties(x, blocksize, quant_type):
    """The partial last block at absmax 3: every boundary times 3 in float32
    and its neighbours, where bitsandbytes' division x / 3 and the
    reciprocal multiplication of full blocks round to different sides."""
    bounds, _ = _get_4bit_quantize_bounds(quant_type, torch.device("cpu"))
    b3 = (bounds.numpy().astype(np.float32) * np.float32(3)).astype(np.float32)
    vals = np.concatenate([[3.0], b3, np.nextafter(b3, np.float32(9)), np.nextafter(b3, np.float32(-9))])
    vals = vals.astype(np.float32)
    full = len(x) // blocksize * blocksize
    assert len(x) - full == len(vals)
    x[full:] = vals
    split = np.sum(np.searchsorted(bounds.numpy(), vals / np.float32(3), side="left")
                   != np.searchsorted(bounds.numpy(), vals * (np.float32(1) / np.float32(3)), side="left"))
    assert split > 0, "no element where division and reciprocal disagree"


def to_torch(x, dtype):
    t = torch.from_numpy(x.copy())
    return t.to({"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dtype])


def run_case(name, rng, numel, blocksize, quant_type, nested, dtype="f32", shape2d=True, scale=1.0,
             absmax_scale=None, tail=False):
    x = make_input(rng, numel, blocksize, quant_type, scale)
    if tail:
        tail_ties(x, blocksize, quant_type)
    if absmax_scale is not None:
        # spread the block absmax over decades so the nested 8-bit map is exercised
        nb = numel // blocksize
        s = absmax_scale(rng, nb)
        s[:2] = 1  # keep the tie blocks exact
        x[: nb * blocksize] *= np.repeat(s, blocksize).astype(np.float32)
    t = to_torch(x, dtype)
    if shape2d:
        # a Linear's (out, in) with `in` a multiple of blocksize: bitsandbytes'
        # native dequantizer indexes absmax row by row (n / blocksize per
        # row), the flat layout only when rows hold whole blocks
        assert numel % (2 * blocksize) == 0
        t = t.reshape(-1, 2 * blocksize)
    torch.set_num_threads(1)
    packed, st = F.quantize_4bit(t, blocksize=blocksize, quant_type=quant_type, compress_statistics=nested)
    # the absmax before compression: quantize again without (same first step)
    _, st_plain = F.quantize_4bit(t, blocksize=blocksize, quant_type=quant_type, compress_statistics=False)
    st.dtype = torch.float32  # dequantize to f32 whatever the input's dtype
    out = F.dequantize_4bit(packed, st).reshape(-1)
    last = t.shape[-1]
    path = "fallback" if last % 2 else "native"
    n_blocks = st_plain.absmax.numel()
    hdr = {
        "format": "zoq4ref1",
        "quant_type": quant_type,
        "dtype": dtype,
        "blocksize": blocksize,
        "numel": numel,
        "n_blocks": n_blocks,
        "nested": int(nested),
        "n_blocks2": st.state2.absmax.numel() if nested else 0,
        "dequant_path": path,
        "bitsandbytes": bitsandbytes.__version__,
        "torch": torch.__version__,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    parts = []
    xin = t.reshape(-1)
    if dtype == "f32":
        parts.append(xin.numpy().astype("<f4").tobytes())
    else:
        parts.append(xin.view(torch.int16).numpy().astype("<i2").tobytes())
    parts.append(packed.reshape(-1).numpy().astype(np.uint8).tobytes())
    parts.append(st_plain.absmax.numpy().astype("<f4").tobytes())
    if nested:
        parts.append(st.absmax.numpy().astype(np.uint8).tobytes())
        parts.append(st.state2.absmax.numpy().astype("<f4").tobytes())
        parts.append(st.state2.code.numpy().astype("<f4").tobytes())
        parts.append(np.array([st.offset.item()], "<f4").tobytes())
    parts.append(out.numpy().astype("<f4").tobytes())
    text = "".join(f"{k}={v}\n" for k, v in hdr.items()) + "\n"
    return name, text.encode() + b"".join(parts)


def decades(rng, nb):
    return np.float32(10.0) ** rng.uniform(-3, 1, nb).astype(np.float32)


def cases():
    rng = np.random.default_rng(48)
    yield run_case("nf4_bs64", rng, 64 * 12, 64, "nf4", False)
    yield run_case("nf4_bs64_dq", rng, 64 * 300, 64, "nf4", True, absmax_scale=decades)
    yield run_case("fp4_bs64", rng, 64 * 12, 64, "fp4", False)
    yield run_case("fp4_bs256_dq", rng, 256 * 40, 256, "fp4", True, absmax_scale=decades)
    yield run_case("nf4_bs256", rng, 256 * 6, 256, "nf4", False)
    yield run_case("fp4_bs256", rng, 256 * 6, 256, "fp4", False)
    yield run_case("nf4_bs128_bf16_dq", rng, 128 * 40, 128, "nf4", True, dtype="bf16")
    yield run_case("fp4_bs32_f16", rng, 32 * 20, 32, "fp4", False, dtype="f16")
    # odd numel, 1-D: a partial last block (division, clamped absmax), a pad nibble
    yield run_case("nf4_bs64_odd", rng, 64 * 5 + 37, 64, "nf4", True, shape2d=False)
    yield run_case("fp4_bs64_odd", rng, 64 * 5 + 37, 64, "fp4", False, shape2d=False)
    # the partial last block's division, on its decision boundaries
    yield run_case("nf4_bs64_tail", rng, 64 * 2 + 46, 64, "nf4", False, shape2d=False, tail=True)
    yield run_case("fp4_bs64_tail", rng, 64 * 2 + 46, 64, "fp4", True, shape2d=False, tail=True)


def main():
    args = [a for a in sys.argv[1:] if a != "--check"]
    check = "--check" in sys.argv[1:]
    out_dir = args[0] if args else os.path.join(HERE, "ref", "nf4")
    os.makedirs(out_dir, exist_ok=True)
    bad = 0
    for name, blob in cases():
        path = os.path.join(out_dir, name + ".bin")
        if check:
            with open(path, "rb") as f:
                old = f.read()
            # the versions may differ; the arrays must not
            same = old.split(b"\n\n", 1)[1] == blob.split(b"\n\n", 1)[1]
            print(f"{name}: {'same' if same else 'DIFFERENT'}")
            bad += not same
        else:
            with open(path, "wb") as f:
                f.write(blob)
            print(f"wrote {path} ({len(blob)} bytes)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
