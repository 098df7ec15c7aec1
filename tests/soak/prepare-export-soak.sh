#!/usr/bin/env bash
# Crash soak of prepare and export (issue 36 item 3): N trials each, every
# one a SIGKILL at a random moment of the job (0 to 1.2x its measured
# duration).
#   prepare: the outputs (train, val) hold an older prepare's tokens; after
#     the kill they must be the old pair or the new pair (never one of each,
#     never a torn file); the temporaries the kill left (*.tmp.PID) are
#     counted, and a rerun must remove them and write the new pair.
#   export: the output directory after the kill must be absent, empty or a
#     whole export (byte-identical to an uninterrupted one); anything else is
#     counted as torn. The next export to it must give the whole export and
#     remove the killed one's temporary (OUT.tmp.PID).
# Usage: prepare-export-soak.sh [-n TRIALS] [-s SEED] [-o RESULT_FILE] ZOFFLOAD_BINARY
# Exit: 0 every trial passed, 1 otherwise.
set -uo pipefail
trials=20
seed=$$
result=""
while getopts "n:s:o:" opt; do
  case $opt in
    n) trials=$OPTARG ;;
    s) seed=$OPTARG ;;
    o) result=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
bin=$(realpath "$1")
[[ -n $result ]] && result=$(realpath -m "$result")
RANDOM=$seed
tmp=$(mktemp -d /tmp/zo-pe-soak-XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1

for i in $(seq 1 3000); do echo "line $i: the quick brown fox jumps over the lazy dog $((i * 3)) pack my box"; done >base.txt
for k in $(seq 1 20); do cat base.txt; done >in.txt
"$bin" tokenizer train --vocab-size 300 --out tok base.txt >/dev/null || exit 1
prep() { "$bin" prepare --tokenizer tok --separator $'\n' --val-fraction "$1" --out-train out/t.bin --out-val out/v.bin in.txt; }
mkdir out
prep 0.2 >/dev/null 2>&1 && cp out/t.bin old.t && cp out/v.bin old.v || exit 1
t0=$(date +%s%N)
prep 0.1 >/dev/null 2>&1 && cp out/t.bin new.t && cp out/v.bin new.v || exit 1
prep_ms=$((($(date +%s%N) - t0) / 1000000))

# A checkpoint to export: 4 layers of 256 (a few MB).
"$bin" prepare --val-fraction 0 --out-train bytes.bin base.txt >/dev/null || exit 1
cat >c.json <<JSON
{"train_micro_batch_size_per_gpu": 2, "steps": 1,
 "model": {"n_layer": 4, "n_head": 4, "n_embd": 256, "vocab_size": 256, "max_seq_len": 32},
 "data": {"train": "$tmp/bytes.bin", "format": "u16", "seq_len": 32},
 "engine": {"device": "cpu"}, "checkpoint": {"dir": "$tmp/ck", "every": 1}}
JSON
"$bin" train c.json >/dev/null || exit 1
t0=$(date +%s%N)
"$bin" export ck/checkpoint-1 --out ref >/dev/null || exit 1
export_ms=$((($(date +%s%N) - t0) / 1000000))

# kill_at MS CMD...: runs CMD, SIGKILLs it after MS ms (if still running).
kill_at() {
  local ms=$1
  shift
  "$@" >/dev/null 2>&1 &
  local pid=$!
  sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}

fail=0 p_old=0 p_new=0 p_left=0 e_absent=0 e_whole=0 e_torn=0 e_left=0 p_reused=0
for trial in $(seq 1 "$trials"); do
  cp old.t out/t.bin && cp old.v out/v.bin
  # zoffload itself, not a shell function's subshell, takes the SIGKILL.
  kill_at $((RANDOM % (prep_ms * 12 / 10 + 1))) "$bin" prepare --tokenizer tok --separator $'\n' --val-fraction 0.1 \
    --out-train out/t.bin --out-val out/v.bin in.txt
  if cmp -s out/t.bin old.t && cmp -s out/v.bin old.v; then p_old=$((p_old + 1))
  elif cmp -s out/t.bin new.t && cmp -s out/v.bin new.v; then p_new=$((p_new + 1))
  else
    echo "trial $trial: prepare left a mismatched or torn pair"
    fail=$((fail + 1))
  fi
  ls out | grep -q '\.tmp\.' && p_left=$((p_left + 1))
  # A leftover whose pid a live process took since (pid reuse) is kept by
  # design (zo_atomic_sweep_stale): counted, removed here.
  for f in out/*.tmp.*; do
    [[ -e $f ]] || continue
    kill -0 "${f##*.}" 2>/dev/null && { p_reused=$((p_reused + 1)); rm -f "$f"; }
  done
  if ! prep 0.1 >rerun.out 2>&1 || ! cmp -s out/t.bin new.t || ! cmp -s out/v.bin new.v || ls out | grep -q '\.tmp\.'; then
    echo "trial $trial: the rerun of prepare did not write the new pair and remove the leftovers:"
    tail -3 rerun.out; ls out
    fail=$((fail + 1))
  fi
  rm -rf ex
  kill_at $((RANDOM % (export_ms * 12 / 10 + 1))) "$bin" export ck/checkpoint-1 --out ex
  ls | grep -q '^ex\.tmp\.' && e_left=$((e_left + 1))
  if [[ ! -e ex || -z $(ls -A ex 2>/dev/null) ]]; then e_absent=$((e_absent + 1))
  elif diff -rq ex ref >/dev/null; then e_whole=$((e_whole + 1))
  else
    e_torn=$((e_torn + 1))
  fi
  rm -rf ex
  "$bin" export ck/checkpoint-1 --out ex >/dev/null 2>&1 && diff -rq ex ref >/dev/null && ! ls | grep -q '^ex\.tmp\.' \
    || { echo "trial $trial: the export after the kill differs or left the temporary"; fail=$((fail + 1)); }
done
[[ $e_torn -gt 0 ]] && fail=$((fail + e_torn))
summary="prepare-export crash soak: $trials trials each (seed $seed; prepare ~${prep_ms} ms, export ~${export_ms} ms)
prepare: $p_old old pair, $p_new new pair, 0 mismatched allowed; $p_left kills left temporaries, all removed by the rerun but $p_reused whose pid a live process had taken (kept by design)
export: $e_absent absent or empty, $e_whole whole, $e_torn torn (partial directory); $e_left kills left a temporary, all removed by the next export
failures: $fail"
echo "$summary"
[[ -n $result ]] && echo "$summary" >"$result"
[[ $fail -eq 0 ]]
