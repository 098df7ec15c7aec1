#!/usr/bin/env bash
# zoffload export streams: a GPT-2 Hugging Face directory of 114 MiB of fp32
# tensors (8 layers, width 512, vocabulary 8192, written here with numpy)
# exports with a peak resident set (the child's ru_maxrss) under 48 MiB above
# the same binary's export of a tiny model (its libraries: with CUDA compiled
# in they alone hold ~150 MiB), where loading the model once, as export did before, peaks at 2x the model
# (242 MiB measured); the fp32 export holds the source's tensors bit for bit,
# the bf16 export sharded at 20MB holds numpy's round-to-nearest-even of
# them, each shard under the limit, the index naming every tensor.
# Needs /usr/bin/python3 with numpy (scripts/install-deps.sh --reference);
# skipped (77) without it.
# Usage: test-export-stream.sh ZOFFLOAD_BINARY REPO_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1
py=${ZO_HF_PYTHON:-/usr/bin/python3}
if ! "$py" -c 'import numpy' 2>/dev/null; then
  echo "SKIP: $py has no numpy (scripts/install-deps.sh --reference installs python3-numpy)"
  exit 77
fi
cli_init xs
"$py" - "$bin" "$tmp" <<'PY'
import json, os, struct, subprocess, sys
import numpy as np
bin, tmp = sys.argv[1], sys.argv[2]
def write_model(src, L, C, V, T):
  """A GPT-2 Hugging Face directory of random fp32 tensors; returns (shapes, tensors, bytes)."""
  os.makedirs(src)
  shapes = [("transformer.wte.weight", (V, C)), ("transformer.wpe.weight", (T, C))]
  for l in range(L):
      p = f"transformer.h.{l}."
      shapes += [(p + "ln_1.weight", (C,)), (p + "ln_1.bias", (C,)), (p + "attn.c_attn.weight", (C, 3 * C)),
                 (p + "attn.c_attn.bias", (3 * C,)), (p + "attn.c_proj.weight", (C, C)), (p + "attn.c_proj.bias", (C,)),
                 (p + "ln_2.weight", (C,)), (p + "ln_2.bias", (C,)), (p + "mlp.c_fc.weight", (C, 4 * C)),
                 (p + "mlp.c_fc.bias", (4 * C,)), (p + "mlp.c_proj.weight", (4 * C, C)), (p + "mlp.c_proj.bias", (C,))]
  shapes += [("transformer.ln_f.weight", (C,)), ("transformer.ln_f.bias", (C,))]
  rng = np.random.default_rng(0)
  tensors = {n: (rng.standard_normal(int(np.prod(s)), dtype=np.float32) * 0.05).reshape(s) for n, s in shapes}
  hdr, off = {}, 0
  for n, s in shapes:
      hdr[n] = {"dtype": "F32", "shape": list(s), "data_offsets": [off, off + tensors[n].nbytes]}
      off += tensors[n].nbytes
  h = json.dumps(hdr).encode()
  h += b" " * (-len(h) % 8)
  with open(os.path.join(src, "model.safetensors"), "wb") as f:
      f.write(struct.pack("<Q", len(h)))
      f.write(h)
      for n, _ in shapes:
          f.write(tensors[n].tobytes())
  json.dump({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": L, "n_head": 8, "n_embd": C,
             "vocab_size": V, "n_positions": T, "n_ctx": T}, open(os.path.join(src, "config.json"), "w"))
  return shapes, tensors, off

src = os.path.join(tmp, "src")
shapes, tensors, off = write_model(src, 8, 512, 8192, 1024)
# The same binary exporting a model of a few hundred KiB: what the process
# holds whatever the model (libraries: with the CUDA backend compiled in,
# cuBLASLt and the runtime map ~150 MiB), the baseline of the bound below.
tiny = os.path.join(tmp, "tiny")
write_model(tiny, 1, 64, 256, 64)
model_mib = off / 2**20
errs = []

# Run through a small python3 that reports its child's peak resident set: a
# child forked from this process would start with these tensors resident.
RUN = ("import resource, subprocess, sys\n"
       "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
       "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
       "sys.stderr.write(r.stdout[-300:] + r.stderr[-300:])\n")

def export(out, *args, source=None):
    """Runs the export; returns its peak resident set in MiB."""
    r = subprocess.run([sys.executable, "-c", RUN, bin, "export", source or src, "--out", out, *args],
                       capture_output=True, text=True)
    rc, kib = r.stdout.split()
    if rc != "0":
        errs.append(f"export {' '.join(args)}: exit {rc}: {r.stderr}")
    return int(kib) / 1024

def read_dir(d):
    """name -> (dtype, shape, raw bytes), and each file's tensor bytes."""
    out, sizes = {}, {}
    for fn in sorted(os.listdir(d)):
        if not fn.endswith(".safetensors"):
            continue
        with open(os.path.join(d, fn), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            hd = json.loads(f.read(n))
            data = f.read()
        hd.pop("__metadata__", None)
        sizes[fn] = 0
        for k, v in hd.items():
            a, b = v["data_offsets"]
            out[k] = (v["dtype"], tuple(v["shape"]), data[a:b])
            sizes[fn] += b - a
    return out, sizes

# fp32: the peak resident set of the export process, and the tensors bit for bit.
x32 = os.path.join(tmp, "x32")
base_mib = export(os.path.join(tmp, "xtiny"), source=tiny)
peak_mib = export(x32)
# ThreadSanitizer keeps shadow memory for every page the export touches
# (the mapped source included): the bound holds for release and ASan builds.
with open(bin, "rb") as f:
    tsan = b"__tsan_init" in f.read()
if tsan:
    print(f"note: a ThreadSanitizer build: peak resident {peak_mib:.1f} MiB printed, not bounded")
elif peak_mib > base_mib + 48:
    errs.append(f"export of a {model_mib:.0f} MiB model peaked at {peak_mib:.0f} MiB resident (bound: the "
                f"{base_mib:.0f} MiB of a tiny model's export + 48 MiB)")
got, _ = read_dir(x32)
want_names = {n for n, _ in shapes}
if set(got) != want_names:
    errs.append(f"fp32 export: names differ: {sorted(set(got) ^ want_names)[:4]}")
for n, s in shapes:
    g = got.get(n)
    if g and (g[0] != "F32" or g[1] != s or g[2] != tensors[n].tobytes()):
        errs.append(f"fp32 export: {n} differs ({g[0]}, {g[1]})")

# bf16 in 20 MB shards: numpy's round to nearest even of every value.
xbf = os.path.join(tmp, "xbf")
export(xbf, "--dtype", "bf16", "--max-shard-size", "20MB")
got, sizes = read_dir(xbf)
if len(sizes) < 3:
    errs.append(f"bf16 export: {len(sizes)} shards")
for fn, nb in sizes.items():
    if nb > 20_000_000:
        errs.append(f"bf16 export: {fn} holds {nb} bytes of tensors, over 20MB")
idx = json.load(open(os.path.join(xbf, "model.safetensors.index.json")))
if set(idx["weight_map"]) != set(got):
    errs.append("bf16 export: the index does not name every tensor")
for n, s in shapes:
    g = got.get(n)
    u = tensors[n].reshape(-1).view(np.uint32).astype(np.uint64)
    rne = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    if not g or g[0] != "BF16" or g[1] != s or g[2] != rne.tobytes():
        errs.append(f"bf16 export: {n} differs from numpy's rounding")
print(f"export of a {model_mib:.0f} MiB model: peak resident {peak_mib:.1f} MiB (a tiny model's: {base_mib:.1f} MiB); fp32 bit-exact, "
      f"bf16 in {len(sizes)} shards rounded as numpy rounds")
for e in errs:
    print("FAIL: " + e)
sys.exit(1 if errs else 0)
PY
