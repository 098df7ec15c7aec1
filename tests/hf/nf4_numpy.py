#!/usr/bin/env python3
"""NF4 quantization in numpy alone, written from bitsandbytes' algorithm (not
from kernels/cpu/quant4.c): the independent round trip a QLoRA test uses to
make the dequantized base PEFT runs over (issue 48).

quantize_nf4(x, blocksize): x flat, widened to float32; per block of
blocksize elements absmax = max |x|; a full block scales by the float32
reciprocal of max(absmax, 1e-38), the partial last block divides by it (and
stores the clamped absmax); the scaled value, clamped to [-1, 1], takes the
code of the nearest NF4 value by float32 midpoints, a tie going to the lower
code (torch.bucketize). Codes pack two a byte, even element high, an odd
count padding with the code of 0.0. dequantize_nf4 gives values[code] *
absmax in float32.

Run as a script (ctest hf-nf4-numpy; exits 77, skipped, without numpy): the
codes and the dequantized floats of every NF4 file of tests/hf/ref/nf4
(bitsandbytes 0.50.2's own, tests/hf/make_nf4_ref.py) must be equal, bit for
bit; the double-quantized files are checked on their codes and on the
dequantization through their plain absmax. With --bnb (ctest
hf-nf4-numpy-bnb; ZO_BNB_PYTHON names an interpreter with torch and
bitsandbytes, skipped without them): Linear-shaped random weights in fp32 and
bf16, bitsandbytes' quantize_4bit / dequantize_4bit live against these.
"""
import os
import sys

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy not importable (ZO_HF_PYTHON names the interpreter, default /usr/bin/python3)")
    sys.exit(77)

# bitsandbytes.functional's NF4 table (QLoRA's 16 quantiles of N(0, 1)).
NF4 = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0], dtype=np.float32)
NF4_ZERO_CODE = 7


def quantize_nf4(x, blocksize=64):
    """(packed uint8, absmax float32) of x (any float array, taken flat)."""
    x = np.asarray(x, dtype=np.float32).reshape(-1)
    n = x.size
    nb = (n + blocksize - 1) // blocksize
    mids = ((NF4[1:] + NF4[:-1]) / np.float32(2)).astype(np.float32)
    codes = np.empty(n, np.uint8)
    absmax = np.empty(nb, np.float32)
    for b in range(nb):
        blk = x[b * blocksize:(b + 1) * blocksize]
        a = np.maximum(np.max(np.abs(blk)), np.float32(1e-38)).astype(np.float32)
        if blk.size == blocksize:
            s = blk * (np.float32(1) / a)
            absmax[b] = np.max(np.abs(blk))
        else:
            s = blk / a
            absmax[b] = a
        s = np.clip(s.astype(np.float32), np.float32(-1), np.float32(1))
        codes[b * blocksize:b * blocksize + blk.size] = np.searchsorted(mids, s, side="left")
    if n % 2:
        codes = np.concatenate([codes, np.array([NF4_ZERO_CODE], np.uint8)])
    packed = ((codes[0::2] << 4) | codes[1::2]).astype(np.uint8)
    return packed, absmax


def dequantize_nf4(packed, absmax, numel, blocksize=64):
    """float32 (numel,) from quantize_nf4's arrays."""
    codes = np.empty(2 * packed.size, np.uint8)
    codes[0::2] = packed >> 4
    codes[1::2] = packed & 15
    codes = codes[:numel]
    scale = np.repeat(absmax.astype(np.float32), blocksize)[:numel]
    return (NF4[codes] * scale).astype(np.float32)


def round_trip(x, blocksize=64):
    """x quantized and dequantized, float32, x's shape."""
    packed, absmax = quantize_nf4(x, blocksize)
    return dequantize_nf4(packed, absmax, np.asarray(x).size, blocksize).reshape(np.shape(x))


def read_ref(path):
    with open(path, "rb") as f:
        blob = f.read()
    text, data = blob.split(b"\n\n", 1)
    h = dict(line.split("=", 1) for line in text.decode().splitlines())
    n, nb = int(h["numel"]), int(h["n_blocks"])
    off = 0

    def take(dtype, count):
        nonlocal off
        a = np.frombuffer(data, dtype=dtype, count=count, offset=off)
        off += a.nbytes
        return a

    if h["dtype"] == "f32":
        x = take("<f4", n)
    else:
        raw = take("<u2", n).astype(np.uint32)
        x = (raw << 16).view(np.float32) if h["dtype"] == "bf16" else raw.astype(np.uint16).view(np.float16)
    r = {"h": h, "x": x.astype(np.float32), "packed": take(np.uint8, (n + 1) // 2), "absmax": take("<f4", nb)}
    if h["nested"] == "1":
        take(np.uint8, nb), take("<f4", int(h["n_blocks2"])), take("<f4", 256), take("<f4", 1)
    r["out"] = take("<f4", n)
    return r


def check(ref_dir):
    names = sorted(f for f in os.listdir(ref_dir) if f.startswith("nf4_") and f.endswith(".bin"))
    bad = 0
    for name in names:
        r = read_ref(os.path.join(ref_dir, name))
        bs, n = int(r["h"]["blocksize"]), int(r["h"]["numel"])
        packed, absmax = quantize_nf4(r["x"], bs)
        ok = np.array_equal(packed, r["packed"]) and np.array_equal(absmax.view(np.uint32),
                                                                    r["absmax"].view(np.uint32))
        out = dequantize_nf4(packed, absmax, n, bs)
        if r["h"]["nested"] == "0":
            ok = ok and np.array_equal(out.view(np.uint32), r["out"].view(np.uint32))
        print(f"{name}: {'equal' if ok else 'DIFFERENT'}")
        bad += not ok
    if not names:
        print(f"no nf4_*.bin in {ref_dir}")
        return 1
    return 1 if bad else 0


def check_bnb():
    try:
        import torch
        import bitsandbytes.functional as F
    except ImportError as e:
        print(f"SKIP: torch and bitsandbytes not importable ({e})")
        return 77
    torch.set_num_threads(1)
    rng = np.random.default_rng(4848)
    bad = 0
    for shape, dtype in [((96, 64), torch.float32), ((24, 128), torch.float32), ((40, 192), torch.bfloat16),
                         ((8, 64), torch.bfloat16)]:
        w = torch.from_numpy((rng.standard_normal(shape) * 0.05).astype(np.float32)).to(dtype)
        packed, st = F.quantize_4bit(w, blocksize=64, quant_type="nf4", compress_statistics=False)
        st.dtype = torch.float32
        out = F.dequantize_4bit(packed, st).reshape(-1).numpy()
        x = w.to(torch.float32).numpy()
        mine_packed, mine_absmax = quantize_nf4(x, 64)
        ok = (np.array_equal(mine_packed, packed.reshape(-1).numpy())
              and np.array_equal(mine_absmax, st.absmax.numpy().astype(np.float32))
              and np.array_equal(round_trip(x, 64).reshape(-1).view(np.uint32), out.view(np.uint32)))
        print(f"{tuple(shape)} {str(dtype)[6:]}: {'equal' if ok else 'DIFFERENT'}")
        bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    if "--bnb" in sys.argv[1:]:
        sys.exit(check_bnb())
    here = os.path.dirname(os.path.abspath(__file__))
    sys.exit(check(os.path.join(here, "ref", "nf4")))
