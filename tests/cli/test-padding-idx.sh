#!/usr/bin/env bash
# The embedding's padding index of a model defined in our config
# (model.pad_token_id, transformers' padding_idx): a tiny Llama trained from
# scratch on byte text where the padding token (32, the space) is frequent.
# Its row starts at zero (transformers' init) and, untied, stays exactly
# zero (no lookup gradient, so AdamW moves nothing and decays zero), while
# every other row trains; the parameters and optimizer on the host (stage 3:
# the embedding's gradient summed on the host) write the same model bytes;
# the checkpoint's config.json carries pad_token_id and eval reads it back;
# a resume with another index, an index past the vocabulary, a negative one
# and a GPT-2 with one are refused by name.
# Usage: test-padding-idx.sh ZOFFLOAD_BINARY REPO_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1
cli_init padding-idx
cli_prepare_text 200

cat >"$tmp/pad.json" <<EOF
{"train_micro_batch_size_per_gpu": 2, "steps": 3,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.1}},
 "model": {"arch": "llama", "n_layer": 2, "n_head": 4, "num_key_value_heads": 2, "n_embd": 32,
           "intermediate_size": 48, "vocab_size": 256, "max_seq_len": 32, "pad_token_id": 32},
 "data": {"train": "$tmp/train.bin", "val": "$tmp/val.bin", "format": "u16", "seq_len": 32, "shuffle": false},
 "engine": {"device": "cpu"}, "log": {"every": 1},
 "checkpoint": {"dir": "$tmp/ck", "every": 3}}
EOF

expect 0 "padding index 32" train -- train "$tmp/pad.json" --verbose
ck=$tmp/ck/checkpoint-3
check "config.json pad_token_id" "grep -q '\"pad_token_id\": 32' '$ck/config.json'"

# row ROW of model.embed_tokens.weight (fp32) in FILE: "zero" or "nonzero".
row_state() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
    t = h["model.embed_tokens.weight"]
    assert t["dtype"] == "F32", t
    cols, row = t["shape"][1], int(sys.argv[2])
    f.seek(8 + n + t["data_offsets"][0] + 4 * cols * row)
    x = struct.unpack(f"<{cols}f", f.read(4 * cols))
print("zero" if all(v == 0.0 and struct.pack("<f", v) == b"\0\0\0\0" for v in x) else "nonzero")
PY
}
check "padding row stays +0 after 3 steps" "[[ \$(row_state '$ck/model.safetensors' 32) == zero ]]"
check "another row trains" "[[ \$(row_state '$ck/model.safetensors' 101) == nonzero ]]"

expect 0 "" stage3 -- train "$tmp/pad.json" --set checkpoint.dir="$tmp/ck3" --set zero_optimization.stage=3 \
  --set zero_optimization.offload_optimizer.device=cpu --set zero_optimization.offload_param.device=cpu
check "stage 3 writes the all-on-device model bit for bit" \
  "cmp -s '$ck/model.safetensors' '$tmp/ck3/checkpoint-3/model.safetensors'"

expect 0 "val loss" -- eval "$tmp/pad.json" --checkpoint "$ck" --batches 2
expect 2 "model.pad_token_id: the checkpoint's 32, this run's 5" -- \
  train "$tmp/pad.json" --resume auto --set steps=6 --set model.pad_token_id=5
expect 2 "[0, 256)" -- train "$tmp/pad.json" --set model.pad_token_id=256 --set checkpoint.dir="$tmp/ck-bad"
expect 2 "model.pad_token_id" -- train "$tmp/pad.json" --set model.pad_token_id=-2 --set checkpoint.dir="$tmp/ck-bad"
expect 2 "GPT-2's embedding has no padding index" -- train "$tmp/pad.json" --set model.arch=gpt2 \
  --set model.num_key_value_heads=0 --set model.intermediate_size=0 --set checkpoint.dir="$tmp/ck-bad"
cli_report padding-idx
