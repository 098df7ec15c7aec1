#!/usr/bin/python3
"""The dynamic quantization maps of the 8-bit AdamW, as bitsandbytes builds
them (bitsandbytes/functional.py, create_dynamic_map with its defaults
max_exponent_bits=7, total_bits=8), for tests/test-offload-adamw8bit.c.

Run with Debian's python (torch 1.13) and torch's scalar CPU kernels:
  ATEN_CPU_CAPABILITY=default /usr/bin/python3 adamw8bit_ref.py [--hex]
It prints, per map, the FNV-1a 64 hash of the 256 float32 bit patterns
(little-endian) that the C test asserts, and with --hex the values.
torch's AVX2/AVX-512 linspace rounds some entries 1 ulp differently (12 to
45 of them here), so the capability is pinned; nothing is written to disk.
"""
import os
import struct
import sys

import torch


def create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8):
    # bitsandbytes' construction, with its defaults (additional_items is 0).
    data = []
    non_sign_bits = total_bits - 1
    for i in range(max_exponent_bits):
        fraction_items = int(2 ** (i + non_sign_bits - max_exponent_bits) + 1 if signed
                             else 2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1)
        boundaries = torch.linspace(0.1, 1, fraction_items)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
        if signed:
            data += (-(10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
    data.append(0)
    data.append(1.0)
    assert len(data) == 2 ** total_bits
    data.sort()
    return torch.Tensor(data)


def fnv1a64(raw):
    h = 0xcbf29ce484222325
    for byte in raw:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    if os.environ.get("ATEN_CPU_CAPABILITY") != "default":
        sys.exit("run with ATEN_CPU_CAPABILITY=default (see the docstring)")
    for signed in (True, False):
        values = create_dynamic_map(signed).tolist()
        raw = b"".join(struct.pack("<f", v) for v in values)
        print(f"{'signed' if signed else 'unsigned'}: 0x{fnv1a64(raw):016x}")
        if "--hex" in sys.argv:
            print(" ".join(float(v).hex() for v in values))


if __name__ == "__main__":
    main()
