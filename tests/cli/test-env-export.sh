#!/usr/bin/env bash
# zoffload env (every section, --nvme-path's probe leaves nothing behind, a
# missing path is an error and is not created), the metrics JSONL's "time"
# field, the progress lines of loading (train and eval), the first evaluation
# and checkpoint writes, a static loss scale labelled static, and zoffload export: a tiny trained checkpoint exported in fp32
# (model.safetensors byte-identical to the checkpoint's, same eval loss),
# bf16 sharded by a tiny --max-shard-size (the index names every tensor's
# shard, total_size adds up, every tensor BF16, the same bf16 eval loss as
# the checkpoint) and fp16; checkpoint.save_optimizer = false (a weights-only
# final checkpoint: eval and export read it, resume refused); the refusals (non-empty --out, missing parent,
# bad --dtype). The safetensors headers are read with python3 when present.
# Usage: test-env-export.sh ZOFFLOAD_BINARY REPO_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1
cli_init envx

# ---- env ----
out=$("$bin" env 2>&1)
rc=$?
[[ $rc -eq 0 ]] && ok || bad "env exit $rc"
for want in "zoffload 0.1.0" "build features:" "CUDA backend" "NCCL" "MPI" "io_uring" "hwloc" "ISA-L" \
            "BLAS:" "CPU:" "AdamW8bit kernel" "GPU:" "driver" "MemAvailable" "MemTotal" "memlock limit" \
            "NUMA:" "nodes"; do
  [[ "$out" == *"$want"* ]] && ok || bad "env: no '$want' in its output"
done
if [[ "$out" == *"no GPU: "* || "$out" == *"free of"* ]]; then ok; else bad "env: neither 'no GPU: reason' nor a device"; fi
mkdir "$tmp/nv"
out=$("$bin" env --nvme-path "$tmp/nv" 2>&1)
[[ "$out" == *"NVMe path $tmp/nv:"* && "$out" == *"O_DIRECT"* && "$out" == *"free of"* && "$out" == *"NVMe tier"* ]] \
  && ok || { bad "env --nvme-path: no NVMe section"; echo "$out" | tail -5; }
left=$(ls -A "$tmp/nv")
[[ -z "$left" ]] && ok || bad "env --nvme-path left files behind: $left"
expect 1 "--nvme-path $tmp/missing/sub: No such file" -- env --nvme-path "$tmp/missing/sub"
[[ ! -e "$tmp/missing" ]] && ok || bad "env --nvme-path created a missing directory"
expect 2 "unknown option --bogus" -- env --bogus
expect 0 "usage: zoffload env" -- env --help

# ---- a tiny trained checkpoint, its metrics ----
cli_prepare_text
cat > "$tmp/c.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "steps": 4,
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 256, "max_seq_len": 32},
 "data": {"train": "$tmp/train.bin", "val": "$tmp/val.bin", "format": "u16", "seq_len": 16},
 "engine": {"device": "cpu"}, "log": {"every": 2, "metrics_path": "$tmp/m.jsonl"},
 "checkpoint": {"dir": "$tmp/ck", "every": 4, "keep": 1}}
JSON
t0=$(date +%s)
"$bin" train "$tmp/c.json" > "$tmp/train.out" 2>&1 || bad "train exit $?"
t1=$(date +%s)
# Progress lines: the first evaluation, each checkpoint write (bytes, MB/s).
grep -q "^  evaluated [0-9]* batches, [0-9]* tokens in [0-9.]* s, [0-9]* tok/s$" "$tmp/train.out" && ok \
  || bad "train: no progress line for the first evaluation"
grep -A1 "^saved $tmp/ck/checkpoint-4$" "$tmp/train.out" | grep -q "^  wrote [0-9.]* [KMG]*i*B in [0-9.]* s, [0-9.]* MB/s$" \
  && ok || { bad "train: no 'wrote ... MB/s' line after the save"; cat "$tmp/train.out"; }
ck=$tmp/ck/checkpoint-4
# Every metrics line carries "time", Unix seconds within the run.
n_lines=$(grep -c . "$tmp/m.jsonl")
n_time=0
while IFS= read -r line; do
  t=$(sed -n 's/.*"time": \([0-9][0-9]*\)\.[0-9]*}$/\1/p' <<<"$line")
  [[ -n "$t" && $t -ge $((t0 - 1)) && $t -le $((t1 + 1)) ]] && n_time=$((n_time + 1))
done < "$tmp/m.jsonl"
[[ $n_lines -ge 5 && $n_time -eq $n_lines ]] && ok \
  || bad "metrics: $n_time of $n_lines lines carry a \"time\" in [$t0, $t1]: $(head -1 "$tmp/m.jsonl")"

# Loading prints its bytes and rate; a static fp16.loss_scale says so.
expect 0 "loaded $tmp/ck/checkpoint-4: " -- train "$tmp/c.json" --set steps=5 --resume "$tmp/ck/checkpoint-4" \
  --set checkpoint.dir="$tmp/ck5" --set log.metrics_path="$tmp/m5.jsonl"
out=$("$bin" train "$tmp/c.json" --set fp16.enabled=true --set fp16.loss_scale=128 --set checkpoint.dir="$tmp/ck16" \
  --set log.metrics_path="$tmp/m16.jsonl" 2>&1)
[[ "$out" == *"fp16: static loss scale 128"* && "$out" == *"scale 128 static, 0 skipped"* ]] && ok \
  || bad "fp16 with a static loss scale: not labelled static"

loss() { "$bin" eval "$tmp/c.json" "$@" 2>/dev/null | sed -n 's/^val loss \([0-9.]*\) .*/\1/p'; }

expect 0 "weights: $ck (step 4): loaded " -- eval "$tmp/c.json" --checkpoint "$ck"

# checkpoint.save_optimizer = false: the final checkpoint holds the weights
# only (an earlier one keeps the optimizer); eval and export read it, a
# resume is refused naming model.init_from.
cw=$tmp/ckw
expect 0 "saved $cw/checkpoint-4 (weights only: checkpoint.save_optimizer = false)" -- train "$tmp/c.json" \
  --set checkpoint.save_optimizer=false --set checkpoint.dir="$cw" --set checkpoint.every=2 --set checkpoint.keep=0 \
  --set log.metrics_path="$tmp/mw.jsonl"
[[ -f "$cw/checkpoint-2/optimizer.safetensors" && ! -e "$cw/checkpoint-4/optimizer.safetensors" && \
   -f "$cw/checkpoint-4/model.safetensors" ]] && ok || bad "save_optimizer=false: files $(ls "$cw"/checkpoint-*)"
grep -q '"weights_only": true' "$cw/checkpoint-4/trainer_state.json" && ok || bad "weights_only not recorded"
[[ "$(loss --checkpoint "$cw/checkpoint-4")" == "$(loss --checkpoint "$ck")" ]] && ok \
  || bad "eval of the weights-only checkpoint differs from the full one's"
expect 2 "holds the weights only (saved with checkpoint.save_optimizer = false)" -- train "$tmp/c.json" \
  --set checkpoint.dir="$cw" --set log.metrics_path="$tmp/mw.jsonl" --set steps=6 --resume auto
expect 0 "exported $tmp/xw: F32" -- export "$cw/checkpoint-4" --out "$tmp/xw"

# ---- export ----
expect 0 "exported $tmp/x32: F32 weights in 1 safetensors file" -- export "$ck" --out "$tmp/x32"
[[ -f "$tmp/x32/config.json" && -f "$tmp/x32/model.safetensors" && ! -e "$tmp/x32/model.safetensors.index.json" ]] \
  && ok || bad "export fp32: files: $(ls "$tmp/x32")"
cmp -s "$tmp/x32/model.safetensors" "$ck/model.safetensors" && ok \
  || bad "export fp32: model.safetensors differs from the checkpoint's"
ls "$tmp/x32" | grep -q optimizer && bad "export wrote optimizer state" || ok
a=$(loss --checkpoint "$ck")
b=$(loss --set model.init_from="$tmp/x32")
[[ -n "$a" && "$a" == "$b" ]] && ok || bad "eval: checkpoint $a, fp32 export $b"

expect 0 "+ model.safetensors.index.json" -- export "$ck" --out "$tmp/xbf" --dtype bf16 --max-shard-size 20KB
n_shards=$(ls "$tmp/xbf"/model-*-of-*.safetensors 2>/dev/null | wc -l)
[[ $n_shards -ge 2 && -f "$tmp/xbf/model.safetensors.index.json" && ! -e "$tmp/xbf/model.safetensors" ]] && ok \
  || bad "export bf16 sharded: files: $(ls "$tmp/xbf")"
grep -q '"torch_dtype": "bfloat16"' "$tmp/xbf/config.json" && ok || bad "export bf16: config.json torch_dtype"
a=$(loss --set bf16.enabled=true --checkpoint "$ck")
b=$(loss --set bf16.enabled=true --set model.init_from="$tmp/xbf")
[[ -n "$a" && "$a" == "$b" ]] && ok || bad "bf16 eval: checkpoint $a, bf16 export $b"
expect 0 "F16 weights in 1 safetensors file" -- export "$ck" --out "$tmp/x16" --dtype fp16

if command -v python3 >/dev/null; then
  # check_dir DIR DTYPE MAX_SHARD: headers, dtypes, index coverage and total_size.
  check_dir() {
    python3 - "$@" <<'PY'
import json, os, struct, sys
d, dtype, max_shard = sys.argv[1], sys.argv[2], int(sys.argv[3])
def header(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return {k: v for k, v in json.loads(f.read(n)).items() if k != "__metadata__"}
idx = os.path.join(d, "model.safetensors.index.json")
files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
heads = {f: header(os.path.join(d, f)) for f in files}
errs = []
for f, h in heads.items():
    data = sum(v["data_offsets"][1] - v["data_offsets"][0] for v in h.values())
    if len(files) > 1 and data > max_shard and len(h) > 1:
        errs.append(f"{f}: {data} bytes of {len(h)} tensors over the shard size {max_shard}")
    errs += [f"{f}: {k} is {v['dtype']}" for k, v in h.items() if v["dtype"] != dtype]
if os.path.exists(idx):
    j = json.load(open(idx))
    wm = j["weight_map"]
    names = {k for h in heads.values() for k in h}
    if set(wm) != names: errs.append(f"index names {len(wm)} tensors, the shards hold {len(names)}")
    errs += [f"index: {k} -> {f}, not there" for k, f in wm.items() if k not in heads.get(f, {})]
    total = sum(v["data_offsets"][1] - v["data_offsets"][0] for h in heads.values() for v in h.values())
    if j["metadata"]["total_size"] != total: errs.append(f"total_size {j['metadata']['total_size']} != {total}")
print("\n".join(errs))
sys.exit(1 if errs else 0)
PY
  }
  check_dir "$tmp/x32" F32 0 && ok || bad "export fp32: headers"
  check_dir "$tmp/xbf" BF16 20000 && ok || bad "export bf16: headers and index"
  check_dir "$tmp/x16" F16 0 && ok || bad "export fp16: headers"
else
  echo "note: no python3: the safetensors headers are not checked"
fi

expect 1 "--out $tmp/xbf is not empty" -- export "$ck" --out "$tmp/xbf"
expect 1 "its parent directory does not exist" -- export "$ck" --out "$tmp/nope/x"
[[ ! -e "$tmp/nope" ]] && ok || bad "export created a missing parent"
# A corrupt checkpoint is refused (checksums) and leaves no --out behind.
cp -r "$ck" "$tmp/corrupt" && printf 'x' | dd of="$tmp/corrupt/model.safetensors" bs=1 seek=200 conv=notrunc 2>/dev/null
expect 1 "checksum mismatch" -- export "$tmp/corrupt" --out "$tmp/xc"
[[ ! -e "$tmp/xc" ]] && ok || bad "a failed export left $tmp/xc behind"
expect 2 "--dtype int8: valid: fp32, bf16, fp16" -- export "$ck" --out "$tmp/y" --dtype int8
expect 2 "missing --out DIR" -- export "$ck"
expect 2 "missing CHECKPOINT" -- export --out "$tmp/y"
expect 2 "--max-shard-size x: need a size" -- export "$ck" --out "$tmp/y" --max-shard-size x
expect 2 "export takes a checkpoint directory" -- export "$ck/model.safetensors" --out "$tmp/y"
expect 0 "usage: zoffload export" -- export --help

cli_report
