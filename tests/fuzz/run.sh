#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/fuzz-*.c) with clang, ASan and
# UBSan in build/fuzz, replays every committed regression input
# (tests/fuzz/regressions/<target>/), then fuzzes each target for SECONDS
# from its committed seed corpus (tests/fuzz/corpus/<target>/; new inputs go
# to build/fuzz/corpus/, not into the tree). Prints one line per target:
# seconds, executions, corpus size, crashes; a crash's input is kept as
# build/fuzz/crashes/<target>-crash-<sha1>: add it to regressions/ with the fix.
# Skips (exit 0, with the reason printed) where clang or its libFuzzer
# runtime is missing. scripts/test.sh runs it with 20 s per target; the
# long run: tests/fuzz/run.sh 3600 benchmarks/results/fuzz-<date>.txt
# Usage: tests/fuzz/run.sh [SECONDS_PER_TARGET (20)] [RESULT_FILE]
set -uo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-20}
result=${2:-}
jobs=$(nproc)
((jobs > 2)) && jobs=2

if ! command -v clang >/dev/null; then
  echo "fuzz: skipped: clang is not installed (Debian: clang)"
  exit 0
fi
probe=$(mktemp -d)
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' >"$probe/p.c"
if ! clang -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" 2>"$probe/err"; then
  echo "fuzz: skipped: clang cannot link libFuzzer with ASan+UBSan: $(head -1 "$probe/err")"
  rm -rf "$probe"
  exit 0
fi
rm -rf "$probe"

# Warnings stay warnings here: clang's -Wpass-failed on the OpenMP SIMD
# kernels is not what this build checks.
CC=clang cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZO_CUDA=OFF -DZO_MPI=OFF \
  -DZO_NCCL=OFF -DZO_FUZZ=ON -DZO_WERROR=OFF -DZO_SANITIZE=address,undefined >/dev/null || exit 1
targets=()
for src in tests/fuzz/fuzz-*.c; do
  t=$(basename "$src" .c)
  targets+=("$t")
done
cmake --build build/fuzz -j "$jobs" --target "${targets[@]}" >build/fuzz/build.log 2>&1 ||
  { tail -30 build/fuzz/build.log; echo "fuzz: build failed"; exit 1; }

export OMP_NUM_THREADS=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p build/fuzz/crashes
fail=0
lines=()
for t in "${targets[@]}"; do
  exe=build/fuzz/fuzz/$t
  name=${t#fuzz-}
  reg=tests/fuzz/regressions/$name
  if compgen -G "$reg/*" >/dev/null; then
    if ! "$exe" -runs=1 "$reg"/* >build/fuzz/$t-regressions.log 2>&1; then
      tail -20 build/fuzz/$t-regressions.log
      lines+=("$(printf '%-22s regression inputs FAIL (build/fuzz/%s-regressions.log)' "$t" "$t")")
      fail=1
      continue
    fi
  fi
  work=build/fuzz/corpus/$name
  mkdir -p "$work"
  log=build/fuzz/$t.log
  "$exe" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="build/fuzz/crashes/$t-" "$work" "tests/fuzz/corpus/$name" >"$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  crashes=$(grep -c '^artifact_prefix\|Test unit written to' "$log")
  size=$(ls "$work" | wc -l)
  line=$(printf '%-22s %6d s  %10s executions  corpus %5d  crashes %d' "$t" "$secs" "${execs:-?}" "$size" "$crashes")
  if ((rc != 0)); then
    line+="  FAIL (exit $rc; $log)"
    grep -m3 'ERROR\|runtime error\|Test unit written' "$log"
    fail=1
  fi
  lines+=("$line")
done
echo "fuzz: clang $(clang -dumpversion), ASan+UBSan, ${secs} s per target:"
printf '  %s\n' "${lines[@]}"
if [[ -n $result ]]; then
  {
    echo "# tests/fuzz/run.sh $secs ($(date -u +%Y-%m-%d), clang $(clang -dumpversion), ASan+UBSan, $(uname -sr))"
    printf '%s\n' "${lines[@]}"
  } >"$result"
fi
exit $fail
