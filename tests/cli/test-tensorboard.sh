#!/usr/bin/env bash
# log.tensorboard_dir: the event files a run writes read back with
# TensorBoard's own loader (event_file_loader checks both CRC32Cs of every
# record; EventAccumulator) hold the same tags, steps and values as the
# metrics JSONL (float32, as TensorBoard stores them; tokens/s and ms within
# the JSONL's printed rounding); the first event is file_version
# "brain.Event:2"; a record with a flipped byte is dropped (the CRC is
# checked); a resume adds a second file and the directory reads as steps
# 1..N; a run killed with SIGKILL keeps every step its JSONL has; a bad
# directory is refused naming the key. The reader parts need TensorBoard in
# build/hf-site (scripts/install-hf.sh) and are skipped (77) without it,
# after the C-side checks.
# Usage: test-tensorboard.sh ZOFFLOAD_BINARY REPO_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1
repo=$2
site=${ZO_HF_SITE:-$repo/build/hf-site}
py=${ZO_HF_PYTHON:-/usr/bin/python3}
cli_init tb
pid=""
trap '[[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT

cli_prepare_text
cat > "$tmp/c.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "steps": 4,
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 256, "max_seq_len": 32},
 "data": {"train": "$tmp/train.bin", "val": "$tmp/val.bin", "format": "u16", "seq_len": 16},
 "engine": {"device": "cpu"}, "eval": {"every": 2},
 "log": {"every": 2, "metrics_path": "$tmp/m.jsonl", "tensorboard_dir": "$tmp/tb/run1"},
 "checkpoint": {"dir": "$tmp/ck", "every": 4, "keep": 1}}
JSON
out=$("$bin" train "$tmp/c.json" 2>&1) || bad "train exit $?: $(tail -3 <<<"$out")"
f1=$(ls "$tmp/tb/run1"/events.out.tfevents.* 2>/dev/null)
[[ $(wc -w <<<"$f1") -eq 1 ]] && ok || bad "run1: event files: $(ls -A "$tmp/tb/run1" 2>&1)"
[[ "$out" == *"tensorboard: $f1"* ]] && ok || bad "train does not print the event file's path"
# The file's name: events.out.tfevents.<unix seconds>.<host>.<pid>
[[ "$(basename "$f1")" =~ ^events\.out\.tfevents\.[0-9]{10}\.$(hostname)\.[0-9]+$ ]] && ok \
  || bad "event file name: $(basename "$f1")"
"$bin" train "$tmp/c.json" --set steps=6 --resume "$tmp/ck/checkpoint-4" --set checkpoint.dir="$tmp/ck" \
  >/dev/null 2>&1 || bad "resume exit $?"
[[ $(ls "$tmp/tb/run1" | wc -l) -eq 2 ]] && ok || bad "resume: $(ls "$tmp/tb/run1" | wc -l) event files, want 2"

# A bad directory: refused before step 1, naming the key.
touch "$tmp/file"
for d in "$tmp/file" "$tmp/file/sub"; do
  out=$("$bin" train "$tmp/c.json" --set log.tensorboard_dir="$d" --set checkpoint.dir= --set log.metrics_path= 2>&1)
  rc=$?
  [[ $rc -ne 0 && "$out" == *"log.tensorboard_dir"*"$tmp/file"* && "$out" != *"step 1/"* ]] && ok \
    || bad "log.tensorboard_dir=$d: exit $rc: $(tail -2 <<<"$out")"
done

# A run killed with SIGKILL: its event file holds every step of its JSONL.
"$bin" train "$tmp/c.json" --set steps=100000 --set eval.every=0 --set checkpoint.dir= \
  --set log.metrics_path="$tmp/mk.jsonl" --set log.tensorboard_dir="$tmp/tb/killed" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  [[ -f "$tmp/mk.jsonl" && $(grep -c . "$tmp/mk.jsonl") -ge 3 ]] && break
  sleep 0.1
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
pid=""
[[ $(grep -c . "$tmp/mk.jsonl") -ge 3 ]] && ok || bad "the run to kill logged $(grep -c . "$tmp/mk.jsonl") steps"

if ! PYTHONPATH="$site" "$py" -c 'from tensorboard.backend.event_processing import event_accumulator' 2>/dev/null; then
  echo "$pass passed, $fail failed"
  echo "SKIP: TensorBoard's reader is not in $site (scripts/install-hf.sh installs it): event files not read back"
  [[ $fail -eq 0 ]] && exit 77
  exit 1
fi

PYTHONPATH="$site" "$py" - "$tmp" <<'PY' && ok || bad "the event files read back by TensorBoard differ from the JSONL"
import glob, json, math, os, shutil, sys
import numpy as np
from tensorboard.backend.event_processing import event_accumulator, event_file_loader
tmp = sys.argv[1]
errs = []
f32 = lambda x: float(np.float32(x))

def load_jsonl(p):
    return [json.loads(l) for l in open(p) if l.strip()]

def events(path):
    # The legacy loader parses the records as written (the newer one migrates
    # simple_value into tensors).
    return list(event_file_loader.LegacyEventFileLoader(path).Load())

# The first event of every file is the file version; the rest are summaries.
files = sorted(glob.glob(os.path.join(tmp, "tb", "run1", "events.out.tfevents.*")))
for f in files:
    ev = events(f)
    if not ev or ev[0].file_version != "brain.Event:2":
        errs.append(f"{f}: first event {ev[:1]}")
    if any(not e.HasField("summary") for e in ev[1:]):
        errs.append(f"{f}: an event after the first has no summary")

# Every scalar of the JSONL, as (tag, step) -> value.
want = {}
tags = {"loss": "train/loss", "lr": "train/lr", "grad_norm": "train/grad_norm", "loss_scale": "train/loss_scale",
        "skipped": "train/skipped", "tokens_per_s": "train/tokens_per_s", "ms": "train/ms", "val_loss": "val/loss",
        "comm_ms": "train/comm_ms"}  # comm_ms: over MPI ranks only
def add(rows, into):
    for r in rows:
        for k, tag in tags.items():
            if k in r:
                v = r[k]
                into[(tag, r["step"])] = float("nan") if v is None else float(v)

add(load_jsonl(os.path.join(tmp, "m.jsonl")), want)
acc = event_accumulator.EventAccumulator(os.path.join(tmp, "tb", "run1"), size_guidance={event_accumulator.SCALARS: 0})
acc.Reload()
got = {}
for tag in acc.Tags()["scalars"]:
    for s in acc.Scalars(tag):
        if (tag, s.step) in got:
            errs.append(f"{tag} step {s.step} twice")
        got[(tag, s.step)] = s.value
if set(got) != set(want):
    errs.append(f"tags/steps: only in TensorBoard {sorted(set(got) - set(want))[:5]}, "
                f"only in the JSONL {sorted(set(want) - set(got))[:5]}")
steps = sorted({s for (t, s) in got if t == "train/loss"})
if steps != list(range(1, 7)):
    errs.append(f"train/loss steps {steps}, want 1..6")
if sorted({s for (t, s) in got if t == "val/loss"}) != [2, 4, 6]:
    errs.append(f"val/loss steps {sorted({s for (t, s) in got if t == 'val/loss'})}")
for k in sorted(set(got) & set(want)):
    g, w = got[k], want[k]
    if k[0] in ("train/tokens_per_s", "train/ms", "train/comm_ms"):
        # The JSONL prints these rounded (%.1f, %.2f).
        if abs(g - w) > 0.051 + 1e-6 * abs(w):
            errs.append(f"{k}: TensorBoard {g}, JSONL {w}")
    elif not (g == f32(w) or (math.isnan(w) and not math.isfinite(g))):
        errs.append(f"{k}: TensorBoard {g!r}, JSONL {w!r} (float32 {f32(w)!r})")

# The killed run: every step of its JSONL is in its event file.
kf = glob.glob(os.path.join(tmp, "tb", "killed", "events.out.tfevents.*"))
kj = load_jsonl(os.path.join(tmp, "mk.jsonl"))
if len(kf) != 1:
    errs.append(f"killed run: {len(kf)} event files")
else:
    kwant, kgot = {}, {}
    add(kj, kwant)
    for e in events(kf[0])[1:]:
        for v in e.summary.value:
            kgot[(v.tag, e.step)] = v.simple_value
    missing = [k for k in kwant if k not in kgot]
    if missing or len(kj) < 3:
        errs.append(f"killed run: {len(kj)} JSONL steps, missing from the event file: {missing[:5]}")
    wrong = [k for k in kwant if k in kgot and k[0] == "train/loss" and kgot[k] != f32(kwant[k])]
    if wrong:
        errs.append(f"killed run: train/loss differs at {wrong[:5]}")

# A flipped byte in a record's data: the reader stops there (CRC checked).
f = files[0]
n_before = len(events(f))
bad = os.path.join(tmp, "corrupt.tfevents")
shutil.copy(f, bad)
data = bytearray(open(bad, "rb").read())
first_len = int.from_bytes(data[0:8], "little")
off = 8 + 4 + first_len + 4 + 8 + 4 + 3   # the third byte of the second record's data
data[off] ^= 0x40
open(bad, "wb").write(bytes(data))
n_after = len(events(bad))
if n_after != 1 or n_before < 4:
    errs.append(f"corrupt record: {n_after} events read of {n_before} (want 1: the first only)")

print(f"tensorboard: {len(got)} scalars over {len(files)} files equal the JSONL; killed run: {len(kj)} steps kept")
for e in errs:
    print("  " + e)
sys.exit(1 if errs else 0)
PY

cli_report
