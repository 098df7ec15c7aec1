#!/usr/bin/env bash
# Side-by-side CPU training-step benchmark: zoffload's bench-train-step, llm.c's
# train_gpt2.c (CPU reference) and PyTorch eager fp32, on GPT-2 124M shapes.
# Runs them alternately (ours, llm.c, pytorch, ...) for R rounds so that the
# machine's drift (up to 2x within minutes) hits all of them alike, then prints
# per-round figures and a table of medians with each one's ratio to ours.
# PyTorch runs twice: as installed, and with glibc malloc told to keep freed
# memory (the role jemalloc/tcmalloc play in PyTorch's CPU tuning guide): on
# these VMs eager mode otherwise faults in every large activation afresh each
# step. A missing implementation is skipped with the reason and the fix.
# Every run gets OMP_NUM_THREADS=THREADS; the first step of each run is warm-up
# and never counted. --setup-llmc builds the llm.c side (never committed).
# bf16 rows: zoffload's `bench step` with bf16.enabled (ours_bf16; the same
# GPT-2 124M shapes, synthetic tokens, its median step) beside PyTorch eager
# under torch.autocast("cpu", bfloat16) (pytorch_bf16, with the malloc tuning
# as pytorch_tuned_bf16); their ratio column is against ours_bf16.
# See benchmarks/README.md for methodology and recorded results.
set -u

usage() {
  cat <<EOF
usage: benchmarks/compare_cpu.sh [--rounds R] [--steps N] [--threads P] [--B B] [--T T]
                                 [--only ours,llmc,pytorch,pytorch_tuned,ours_bf16,pytorch_bf16,pytorch_tuned_bf16]
       benchmarks/compare_cpu.sh --setup-llmc
  --rounds R    alternating rounds (default 3)
  --steps N     timed steps per run, after 1 warm-up step (default 3)
  --threads P   OpenMP / torch threads (default 2)
  --B, --T      batch size and sequence length (default 4, 256)
  --only LIST   comma-separated subset of ours,llmc,pytorch,pytorch_tuned,ours_bf16,
                pytorch_bf16,pytorch_tuned_bf16 (default all)
  --setup-llmc  with llm.c's sources copied into LLMC_DIR, write the benchmark
                main, build train_gpt2 with llm.c's Makefile flags and generate
                a random-weight gpt2_124M.bin and token shards (README.md)
environment: BUILD_DIR (default build/release), LLMC_DIR (default .ref-bench/llmc),
             PYTHON (default /usr/bin/python3), CC (default gcc)
EOF
}

ROUNDS=3 STEPS=3 THREADS=2 B=4 T=256 SETUP=0
ONLY="ours,llmc,pytorch,pytorch_tuned,ours_bf16,pytorch_bf16,pytorch_tuned_bf16"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=${2-}; shift 2 ;;
    --steps) STEPS=${2-}; shift 2 ;;
    --threads) THREADS=${2-}; shift 2 ;;
    --B) B=${2-}; shift 2 ;;
    --T) T=${2-}; shift 2 ;;
    --only) ONLY=${2-}; shift 2 ;;
    --setup-llmc) SETUP=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "compare_cpu.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
for v in "$ROUNDS" "$STEPS" "$THREADS" "$B" "$T"; do
  case "$v" in ''|*[!0-9]*|0) echo "compare_cpu.sh: counts must be positive integers" >&2; exit 2 ;; esac
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-build/release}
LLMC_DIR=${LLMC_DIR:-.ref-bench/llmc}
PYTHON=${PYTHON:-/usr/bin/python3}
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$ROOT/$BUILD_DIR" ;; esac
case "$LLMC_DIR" in /*) ;; *) LLMC_DIR="$ROOT/$LLMC_DIR" ;; esac
OURS_BIN="$BUILD_DIR/benchmarks/bench-train-step"
ZOFFLOAD_BIN="$BUILD_DIR/zoffload"
LLMC_BIN="$LLMC_DIR/train_gpt2"
LLMC_SOURCES="train_gpt2.c llmc/utils.h llmc/tokenizer.h llmc/dataloader.h llmc/rand.h"
# llm.c's Makefile for train_gpt2 with gcc on Linux, plus -fgnu89-inline: its
# llmc/utils.h helpers are C99 `inline` without an external definition, which
# gcc 12 fails to link wherever it does not inline a call. Linkage only.
LLMC_CFLAGS="-Ofast -Wno-unused-result -Wno-ignored-pragmas -Wno-unknown-attributes -march=native -fopenmp -DOMP -fgnu89-inline"
export OMP_NUM_THREADS=$THREADS
# mmap_max=0: large blocks come from the heap, not fresh mmaps; trim_threshold
# 64 GiB: free() never returns them to the kernel, so pages stay faulted in.
PYTORCH_TUNED_MALLOC="glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"

# setup_llmc: the uncommitted llm.c side. train_gpt2.c stays byte-for-byte
# upstream; bench_main.c includes it with -DTESTING (as llm.c's test_gpt2.c
# does) and times upstream's own step with B, T, steps from the command line.
setup_llmc() {
  local f missing=""
  for f in $LLMC_SOURCES; do [ -f "$LLMC_DIR/$f" ] || missing="$missing $f"; done
  if [ -n "$missing" ]; then
    echo "setup-llmc: missing in $LLMC_DIR:$missing" >&2
    echo "copy them from karpathy/llm.c (tested at commit db2454f88f1c), e.g.:" >&2
    echo "  git clone https://github.com/karpathy/llm.c /tmp/llm.c && mkdir -p $LLMC_DIR/llmc &&" >&2
    echo "  (cd /tmp/llm.c && cp train_gpt2.c $LLMC_DIR/ && cp llmc/utils.h llmc/tokenizer.h llmc/dataloader.h llmc/rand.h $LLMC_DIR/llmc/)" >&2
    return 1
  fi
  cat >"$LLMC_DIR/bench_main.c" <<'EOF'
/*
Benchmark driver for llm.c's train_gpt2.c, written by zoffload's
benchmarks/compare_cpu.sh --setup-llmc; never committed. train_gpt2.c is
included unmodified with TESTING defined (upstream's main dropped, as in llm.c's
test_gpt2.c). This main runs upstream's training step verbatim and times it as
upstream does; differences from upstream's main: B, T and the step count come
from argv (upstream: B=4, T=64, 41 steps), and there are no validation-loss or
sampling passes (outside upstream's timed region anyway) and no tokenizer.
usage: ./train_gpt2 [B=4] [T=256] [steps=4]; step 0 is the warm-up.
*/
#define TESTING
#include "train_gpt2.c"

int main(int argc, char** argv) {
    int B = argc > 1 ? atoi(argv[1]) : 4;
    int T = argc > 2 ? atoi(argv[2]) : 256;
    int steps = argc > 3 ? atoi(argv[3]) : 4;
    if (B <= 0 || T <= 0 || steps <= 0) {
        fprintf(stderr, "usage: %s [B] [T] [steps]\n", argv[0]);
        return 2;
    }
    GPT2 model;
    gpt2_build_from_checkpoint(&model, "gpt2_124M.bin");
    if (T > model.config.max_seq_len) {
        fprintf(stderr, "T=%d exceeds max_seq_len=%d\n", T, model.config.max_seq_len);
        return 2;
    }
    DataLoader train_loader;
    dataloader_init(&train_loader, "dev/data/tinyshakespeare/tiny_shakespeare_train.bin", B, T, 0, 1, 1);
    printf("train dataset num_batches: %zu\n", train_loader.num_tokens / (B*T));
#ifdef OMP
    printf("B=%d T=%d steps=%d omp_max_threads=%d\n", B, T, steps, omp_get_max_threads());
#endif
    struct timespec start, end;
    for (int step = 0; step < steps; step++) {
        clock_gettime(CLOCK_MONOTONIC, &start);
        dataloader_next_batch(&train_loader);
        gpt2_forward(&model, train_loader.inputs, train_loader.targets, B, T);
        gpt2_zero_grad(&model);
        gpt2_backward(&model);
        gpt2_update(&model, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, step+1);
        clock_gettime(CLOCK_MONOTONIC, &end);
        double time_elapsed_s = (end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9;
        printf("step %d: train loss %f (took %f ms)\n", step, model.mean_loss, time_elapsed_s * 1000);
        fflush(stdout);
    }
    dataloader_free(&train_loader);
    gpt2_free(&model);
    return 0;
}
EOF
  # shellcheck disable=SC2086 # LLMC_CFLAGS is a flag list
  (cd "$LLMC_DIR" && ${CC:-gcc} $LLMC_CFLAGS bench_main.c -lm -lgomp -o train_gpt2) || return 1
  echo "built $LLMC_BIN ($LLMC_CFLAGS)"
  # llm.c's formats: model header [20240326, 3, maxT, V, L, NH, C, Vp] then fp32
  # params in its order (wte padded to Vp rows); shard header [20240520, 1, n]
  # then uint16 tokens. Random GPT-2-style init: only time is measured.
  "$PYTHON" - "$LLMC_DIR" <<'EOF' || return 1
import os, sys
import numpy as np
out = sys.argv[1]
maxT, V, Vp, L, NH, C = 1024, 50257, 50304, 12, 12, 768
rng = np.random.default_rng(1337)
def header(vals):
    h = np.zeros(256, dtype=np.int32); h[:len(vals)] = vals; return h.tobytes()
std, pstd = 0.02, 0.02 / np.sqrt(2 * L)
normal = lambda shape, s: rng.normal(0.0, s, size=shape).astype(np.float32)
full = lambda shape, v: np.full(shape, v, dtype=np.float32)
wte = normal((Vp, C), std); wte[V:] = 0.0
tensors = [wte, normal((maxT, C), std), full((L, C), 1), full((L, C), 0),
           normal((L, 3 * C, C), std), full((L, 3 * C), 0), normal((L, C, C), pstd),
           full((L, C), 0), full((L, C), 1), full((L, C), 0), normal((L, 4 * C, C), std),
           full((L, 4 * C), 0), normal((L, C, 4 * C), pstd), full((L, C), 0),
           full((C,), 1), full((C,), 0)]
with open(os.path.join(out, "gpt2_124M.bin"), "wb") as f:
    f.write(header([20240326, 3, maxT, V, L, NH, C, Vp]))
    for t in tensors: f.write(t.tobytes())
print("wrote gpt2_124M.bin:", sum(t.size for t in tensors), "params")
d = os.path.join(out, "dev", "data", "tinyshakespeare"); os.makedirs(d, exist_ok=True)
for name, n in (("train", 1 << 20), ("val", 1 << 16)):
    with open(os.path.join(d, f"tiny_shakespeare_{name}.bin"), "wb") as f:
        f.write(header([20240520, 1, n]))
        f.write(rng.integers(0, V, size=n, dtype=np.uint16).tobytes())
print("wrote token shards in", d)
EOF
  echo "llm.c ready: (cd $LLMC_DIR && OMP_NUM_THREADS=2 ./train_gpt2 4 256 4)"
}

if [ "$SETUP" = 1 ]; then setup_llmc; exit; fi

LOG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/compare_cpu.XXXXXX")
want() { case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

IMPLS=""
if want ours; then
  if [ -x "$OURS_BIN" ]; then IMPLS="$IMPLS ours"
  else
    echo "skip zoffload: $OURS_BIN not found;" \
         "build it: cmake --preset release && cmake --build --preset release --target bench-train-step"
  fi
fi
if want llmc; then
  if [ -x "$LLMC_BIN" ] && [ -f "$LLMC_DIR/gpt2_124M.bin" ]; then IMPLS="$IMPLS llmc"
  else
    echo "skip llm.c: $LLMC_BIN or its gpt2_124M.bin not found; copy llm.c's sources into" \
         "$LLMC_DIR and run benchmarks/compare_cpu.sh --setup-llmc (README.md, 'llm.c reference')"
  fi
fi
if want ours_bf16; then
  if [ -x "$ZOFFLOAD_BIN" ]; then IMPLS="$IMPLS ours_bf16"
  else
    echo "skip zoffload bf16: $ZOFFLOAD_BIN not found;" \
         "build it: cmake --preset release && cmake --build --preset release --target zoffload"
  fi
fi
for impl in pytorch pytorch_tuned pytorch_bf16 pytorch_tuned_bf16; do
  want "$impl" || continue
  if "$PYTHON" -c 'import torch' >/dev/null 2>&1; then IMPLS="$IMPLS $impl"
  else echo "skip $impl: $PYTHON cannot import torch (Debian: apt-get install python3-torch)"
  fi
done
[ -n "$IMPLS" ] || { echo "nothing to run"; exit 1; }

label() {
  case "$1" in
    ours) echo "zoffload" ;;
    llmc) echo "llm.c train_gpt2.c" ;;
    pytorch) echo "pytorch eager fp32" ;;
    pytorch_tuned) echo "pytorch eager +malloc" ;;
    ours_bf16) echo "zoffload bf16" ;;
    pytorch_bf16) echo "pytorch autocast bf16" ;;
    pytorch_tuned_bf16) echo "pytorch bf16 +malloc" ;;
  esac
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) exit 1;
  if (NR % 2) printf "%.3f\n", a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }

# run_one IMPL LOG: runs one benchmark process; prints its median ms/step.
run_one() {
  case "$1" in
    ours)
      "$OURS_BIN" --B "$B" --T "$T" --steps "$STEPS" --threads "$THREADS" >"$2" 2>&1 || return 1
      sed -n 's/^zoffload .*ms_per_step=\([0-9.eE+-]*\).*/\1/p' "$2" | tail -n 1 ;;
    llmc)
      # step 0 is the warm-up (first touch of activations, grads, m, v)
      (cd "$LLMC_DIR" && ./train_gpt2 "$B" "$T" $((STEPS + 1))) >"$2" 2>&1 || return 1
      sed -n 's/^step \([0-9]*\): .*took \([0-9.]*\) ms.*/\1 \2/p' "$2" |
        awk '$1 > 0 {print $2}' | median ;;
    ours_bf16)
      # bench step: its own warm-up, then the median of its timed rounds
      "$ZOFFLOAD_BIN" bench step "$ROOT/configs/gpt2-124m.json" --set bf16.enabled=true \
        --set train_micro_batch_size_per_gpu="$B" --set data.seq_len="$T" \
        --set engine.device=cpu --json >"$2" 2>&1 || return 1
      sed -n 's/.*"step_ms": *\([0-9.eE+-]*\).*/\1/p' "$2" | tail -n 1 ;;
    pytorch|pytorch_tuned|pytorch_bf16|pytorch_tuned_bf16)
      local autocast=off tunables=""
      case "$1" in *_bf16) autocast=bf16 ;; esac
      case "$1" in pytorch_tuned*) tunables=$PYTORCH_TUNED_MALLOC ;; esac
      GLIBC_TUNABLES=$tunables "$PYTHON" "$ROOT/benchmarks/bench_pytorch.py" --autocast "$autocast" \
        --B "$B" --T "$T" --steps "$STEPS" --warmup 1 --threads "$THREADS" >"$2" 2>&1 || return 1
      sed -n 's/^pytorch_eager .*ms_per_step=\([0-9.eE+-]*\).*/\1/p' "$2" | tail -n 1 ;;
  esac
}

echo "compare_cpu: B=$B T=$T threads=$THREADS rounds=$ROUNDS timed steps/run=$STEPS" \
     "(+1 warm-up) impls:$IMPLS; logs in $LOG_DIR"
echo "host: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')," \
     "load: $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"
for r in $(seq 1 "$ROUNDS"); do
  line="round $r:"
  for impl in $IMPLS; do
    log="$LOG_DIR/$impl.round$r.log"
    ms=$(run_one "$impl" "$log")
    if [ -z "$ms" ]; then
      echo "  $(label "$impl") failed or printed no result in round $r; tail of $log:"
      tail -n 5 "$log" | sed 's/^/    /'
      continue
    fi
    echo "$r $ms" >>"$LOG_DIR/$impl.ms"
    line="$line $(label "$impl")=${ms}ms"
  done
  echo "$line (load $(cut -d' ' -f1 /proc/loadavg))"
done

# Ratios are taken within each round (impl / ours of the same round) and the
# median of those is reported: that is what cancels the drift.
echo
printf '%-22s %14s %12s %14s\n' "implementation" "ms/step (med)" "tokens/s" "ratio vs ours"
for impl in $IMPLS; do
  [ -s "$LOG_DIR/$impl.ms" ] || { printf '%-22s %14s\n' "$(label "$impl")" "no result"; continue; }
  ms=$(cut -d' ' -f2 "$LOG_DIR/$impl.ms" | median)
  tps=$(awk -v ms="$ms" -v n=$((B * T)) 'BEGIN {printf "%.1f", n * 1000 / ms}')
  base=ours
  case "$impl" in *_bf16) base=ours_bf16 ;; esac
  if [ -s "$LOG_DIR/$base.ms" ]; then
    ratio=$(awk 'NR == FNR {ours[$1] = $2; next} ($1 in ours) {print $2 / ours[$1]}' \
              "$LOG_DIR/$base.ms" "$LOG_DIR/$impl.ms" | median)
    ratio=${ratio:-n/a}
  else
    ratio="n/a"
  fi
  printf '%-22s %14s %12s %14s\n' "$(label "$impl")" "$ms" "$tps" "$ratio"
done
echo "(ratio = that implementation's ms/step / ours (bf16 rows: / zoffload bf16), median over rounds;" \
     "> 1 means ours is faster)"
echo "cpu flags (bf16/amx): $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E 'avx512_bf16|amx' | tr '\n' ' ')"
echo "ONEDNN_MAX_CPU_ISA=${ONEDNN_MAX_CPU_ISA:-unset} ZO_CPU_GEMM=${ZO_CPU_GEMM:-unset}"
