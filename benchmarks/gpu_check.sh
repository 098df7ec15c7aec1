#!/usr/bin/env bash
# GPU check for a lent machine that has only the CUDA toolkit (with gcc),
# CMake and Python: unpack the Debian packages carried in .debs/ (made by
# benchmarks/collect-debs.sh) into a private prefix, configure with the CUDA
# backend for sm_90, build, run the gpu-labelled tests (CUDA vs CPU op
# parity in every dtype, training on the GPU against the CPU and in every
# offload placement), the cuBLASLt GEMM throughput benchmark (its bf16 peak
# is the MFU denominator) and bf16 training throughput of GPT-2 124M and
# 350M all on the GPU, with the optimizer on the CPU, and with the
# parameters on the CPU too, and print a summary table. Everything fits in 8 minutes: each
# step's timeout is cut to what is left. Output also goes to $OUT/gpu_check.log
# when $OUT is set. Never installs anything system-wide; exits 0 unless the
# build or a test failed. Without a GPU the table says "no GPU" (rehearsal).
#   benchmarks/gpu_check.sh
# Environment: ZO_CHECK_BUILD (build dir, default build/gpu-check),
# ZO_CHECK_FORCE_DEB_TOOLS=1 (use the carried make/pkgconf even when the
# machine has its own: rehearses the bare-machine path).
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD=${ZO_CHECK_BUILD:-$ROOT/build/gpu-check}
PREFIX=$BUILD-deps
BUDGET=480   # seconds for the whole script
RESERVE=20   # kept back for the summary
START=$(date +%s)

declare -a ROWS=()
row() { ROWS+=("$(printf '%-34s %s' "$1" "$2")"); }
left() { echo $((START + BUDGET - RESERVE - $(date +%s))); }
# step_timeout MAX: MAX seconds or what is left, whichever is less (>= 1).
step_timeout() {
  local l
  l=$(left)
  ((l > $1)) && l=$1
  ((l < 1)) && l=1
  echo "$l"
}
say() { printf '\n=== %s (t=%ds)\n' "$*" $(($(date +%s) - START)); }

# Unpacks one .deb into $PREFIX: dpkg -x, or Python's ar + tar where there is no dpkg.
unpack_deb() {
  if command -v dpkg >/dev/null; then
    dpkg -x "$1" "$PREFIX"
  else
    python3 - "$1" "$PREFIX" <<'PY'
import io, sys, tarfile
deb, dest = sys.argv[1], sys.argv[2]
data = open(deb, "rb").read()
assert data[:8] == b"!<arch>\n", deb + ": not an ar archive"
off = 8
while off < len(data):
    name = data[off:off + 16].decode().strip().rstrip("/")
    size = int(data[off + 48:off + 58].decode().strip())
    body = data[off + 60:off + 60 + size]
    if name.startswith("data.tar"):
        tar = tarfile.open(fileobj=io.BytesIO(body))
        # Debian packages hold absolute symlinks, which the "data" filter refuses.
        if hasattr(tarfile, "fully_trusted_filter"):
            tar.extractall(dest, filter="fully_trusted")
        else:
            tar.extractall(dest)
        break
    off += 60 + size + (size & 1)
else:
    sys.exit(deb + ": no data.tar member (zstd-compressed .deb?)")
PY
  fi
}

main() {
  local status=0
  say "zoffload gpu_check in $ROOT"
  echo "host: $(uname -srm), $(nproc) CPUs; cmake $(cmake --version | head -n1 | awk '{print $3}')"
  if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export PATH=/usr/local/cuda/bin:$PATH
  fi
  echo "nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'not found')"

  # ---- device ------------------------------------------------------------------
  local gpu="no GPU"
  if command -v nvidia-smi >/dev/null; then
    local q qrc
    q=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1)
    qrc=$?
    q=${q%%$'\n'*}
    if [[ $qrc -eq 0 && -n "$q" ]]; then
      gpu="$q"
    else
      gpu="no GPU (nvidia-smi: ${q:0:60})"
    fi
  else
    gpu="no GPU (no nvidia-smi)"
  fi
  echo "device: $gpu"
  row "device" "$gpu"

  # ---- dependencies from .debs/ --------------------------------------------------
  local -a cmake_args=(-DZO_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release
                       -DZO_WERROR=OFF)
  local arch_lib=usr/lib/x86_64-linux-gnu
  if compgen -G ".debs/*.deb" >/dev/null; then
    say "unpacking .debs/ into $PREFIX"
    [[ $(uname -m) == x86_64 ]] || echo "warning: .debs/ holds amd64 packages, this is $(uname -m)"
    rm -rf "$PREFIX"
    mkdir -p "$PREFIX/bin"
    local n=0 f
    for f in .debs/*.deb; do
      case $(basename "$f") in
        # (no `ldconfig -p | grep -q`: under pipefail grep's early exit fails the pipe)
        libgomp1_*) [[ $(ldconfig -p 2>/dev/null) == *"libgomp.so.1 "* ||
                       $(gcc -print-file-name=libgomp.so.1 2>/dev/null) == /* ]] && continue ;;
      esac
      unpack_deb "$f" || { echo "cannot unpack $f"; status=1; }
      n=$((n + 1))
    done
    # Absolute symlinks (libz.so -> /lib/...) must point into the prefix.
    local l t
    while IFS= read -r l; do
      t=$(readlink "$l")
      [[ $t == /* && -e "$PREFIX$t" ]] && ln -sfn "$PREFIX$t" "$l"
    done < <(find "$PREFIX" -type l)
    # .pc files say prefix=/usr; make them say the prefix.
    local pc
    for pc in "$PREFIX/$arch_lib/pkgconfig"/*.pc "$PREFIX/usr/share/pkgconfig"/*.pc; do
      [[ -f $pc ]] && sed -i -e "s|=/usr|=$PREFIX/usr|g" -e "s|-I/usr|-I$PREFIX/usr|g" \
                             -e "s|-L/usr|-L$PREFIX/usr|g" "$pc"
    done
    export PKG_CONFIG_PATH="$PREFIX/$arch_lib/pkgconfig:$PREFIX/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    export CMAKE_PREFIX_PATH="$PREFIX/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
    local libdirs="$PREFIX/$arch_lib/openblas-openmp:$PREFIX/$arch_lib:$PREFIX/lib/x86_64-linux-gnu"
    RUN_LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # Pre-set find_path/find_library results: the top-level CMakeLists looks
    # for OpenBLAS only under /usr (NO_DEFAULT_PATH).
    cmake_args+=(-DZO_CBLAS_INCLUDE="$PREFIX/usr/include/x86_64-linux-gnu/openblas-openmp"
                 -DZO_OPENBLAS="$PREFIX/$arch_lib/openblas-openmp/libopenblas.so"
                 -DZO_OPENBLAS_ROOT="$PREFIX/usr"
                 -DZLIB_INCLUDE_DIR="$PREFIX/usr/include"
                 -DZLIB_LIBRARY="$PREFIX/$arch_lib/libz.so"
                 "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$libdirs")
    # Tools the machine may lack: a wrapper so pkgconf finds its library.
    if [[ -x $PREFIX/usr/bin/pkgconf ]] && { ! command -v pkg-config >/dev/null || [[ ${ZO_CHECK_FORCE_DEB_TOOLS:-0} == 1 ]]; }; then
      printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
        "$PREFIX/$arch_lib" "$PREFIX/usr/bin/pkgconf" > "$PREFIX/bin/pkg-config"
      chmod +x "$PREFIX/bin/pkg-config"
      cmake_args+=(-DPKG_CONFIG_EXECUTABLE="$PREFIX/bin/pkg-config")
      echo "using the carried pkgconf"
    fi
    if [[ -x $PREFIX/usr/bin/make ]] && { ! command -v make >/dev/null || [[ ${ZO_CHECK_FORCE_DEB_TOOLS:-0} == 1 ]]; }; then
      cmake_args+=(-DCMAKE_MAKE_PROGRAM="$PREFIX/usr/bin/make")
      echo "using the carried make"
    fi
    row "dependencies" "$n .debs unpacked into ${PREFIX#$ROOT/}"
  else
    RUN_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
    row "dependencies" "system (no .debs/)"
  fi

  # ---- configure and build ---------------------------------------------------------
  say "configure ($BUILD)"
  local t0 t1 ok=1
  t0=$(date +%s)
  rm -rf "$BUILD"
  timeout "$(step_timeout 120)" cmake -S "$ROOT" -B "$BUILD" -G "Unix Makefiles" "${cmake_args[@]}" \
    || ok=0
  if ((ok)); then
    grep -E '^(ZO_CBLAS_INCLUDE|ZO_OPENBLAS|ZLIB_LIBRARY[A-Z_]*|(JANSSON|ISAL|LIBURING|HWLOC)_LIBDIR|CMAKE_CUDA_ARCHITECTURES):' \
      "$BUILD/CMakeCache.txt" | sed 's/^/  /'
    say "build: zo-kernels-cuda (timed alone)"
    local c0 c1
    c0=$(date +%s)
    timeout "$(step_timeout 200)" cmake --build "$BUILD" -j "$(nproc)" --target zo-kernels-cuda || ok=0
    c1=$(date +%s)
    row "build: CUDA backend (sm_90)" "$( ((ok)) && echo "ok, $((c1 - c0)) s on $(nproc) cores" || echo FAILED)"
  fi
  if ((ok)); then
    say "build: tests and benchmarks"
    timeout "$(step_timeout 200)" cmake --build "$BUILD" -j "$(nproc)" \
      --target zoffload test-gpu-backend-ops test-gpu-train test-gpu-nccl bench-gpu-gemm || ok=0
  fi
  t1=$(date +%s)
  row "configure + build" "$( ((ok)) && echo "ok, $((t1 - t0)) s" || echo "FAILED (see log)")"
  if ((!ok)); then
    status=1
  else
    echo "libraries of zoffload and test-gpu-backend-ops:"
    LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH ldd "$BUILD/zoffload" \
      "$BUILD/tests/test-gpu-backend-ops" 2>&1 | sed 's/ (0x[0-9a-f]*)$//' | sort -u \
      | grep -E 'openblas|jansson|uring|hwloc|isal|libz|gfortran|cudart|cublas|not found' | sed 's/^/ /'
  fi

  # ---- GPU parity tests ----------------------------------------------------------------
  if ((ok)); then
    say "ctest -L gpu"
    local out rc
    out=$(cd "$BUILD" && LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH timeout "$(step_timeout 150)" \
      ctest -L gpu --output-on-failure --timeout "$(step_timeout 140)" 2>&1)
    rc=$?
    echo "$out"
    if grep -q "(Skipped)" <<<"$out" && ! grep -q "Passed" <<<"$out"; then
      local why
      why=$(LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH "$BUILD/tests/test-gpu-backend-ops" 2>&1 | grep -m1 SKIP)
      if [[ $gpu == "no GPU"* ]]; then
        row "gpu ops parity (ctest -L gpu)" "SKIP, no GPU: ${why#SKIP: }"
      else # nvidia-smi sees a GPU that the backend cannot use (driver older than the toolkit?)
        row "gpu ops parity (ctest -L gpu)" "FAIL, GPU present but skipped: ${why#SKIP: }"
        status=1
      fi
    elif ((rc == 0)) && grep -q "100% tests passed" <<<"$out"; then
      local secs
      secs=$(grep -oE 'test-gpu-[a-z-]+ \.+ +Passed +[0-9.]+ sec' <<<"$out" | sed -E 's/ \.+ +Passed +/ /' | paste -sd, -)
      row "gpu tests (ctest -L gpu)" "PASS ($secs)"
    else
      row "gpu ops parity (ctest -L gpu)" "FAIL (rc $rc, see log)"
      status=1
    fi
  else
    row "gpu ops parity (ctest -L gpu)" "not run (build failed)"
  fi

  # ---- cuBLASLt GEMM throughput ----------------------------------------------------------
  local layers="qkv attn.proj mlp.fc mlp.proj lm_head"
  if ((ok)); then
    say "bench-gpu-gemm (bf16 and fp32 cuBLASLt, N = B*T = 8192)"
    local gout grc
    gout=$(LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH timeout "$(step_timeout 120)" \
      "$BUILD/benchmarks/bench-gpu-gemm" --device cuda --N 8192 --iters 20 2>&1)
    grc=$?
    echo "$gout"
    local L line
    for L in $layers; do
      line=$(grep -m1 "^zoffload gemm .*dtype=bf16.*layer=$L " <<<"$gout")
      if [[ -n $line ]]; then
        local shape fwd bwd
        shape=$(grep -oE 'C=[0-9]+ OC=[0-9]+' <<<"$line")
        fwd=$(grep -oE 'fwd_tflops=[0-9.]+' <<<"$line" | cut -d= -f2)
        bwd=$(grep -oE 'bwd_tflops=[0-9.]+' <<<"$line" | cut -d= -f2)
        row "gemm bf16 $L ($shape)" "fwd $fwd / bwd $bwd TFLOP/s"
      elif ((grc == 77)); then
        row "gemm $L" "no GPU"
      else
        row "gemm $L" "FAIL (rc $grc)"
      fi
    done
  else
    for L in $layers; do row "gemm $L" "not run"; done
  fi

  # ---- training throughput on the GPU ----------------------------------------------------
  # zoffload bench step: bf16, synthetic tokens, the configured placement and
  # the all-on-GPU one side by side; MFU against the bf16 GEMM peak measured
  # above in this run.
  local peak
  peak=$(grep -m1 '^zoffload gemm_peak ' <<<"${gout:-}" | grep -oE 'tflops=[0-9.]+' | cut -d= -f2)
  [[ -n $peak ]] && row "bf16 GEMM peak (MFU denominator)" "$peak TFLOP/s"
  local model placement
  for model in 124m 350m; do
    for placement in device opt-cpu params-cpu; do
      local label="train GPT-2 $model bf16, $placement"
      if ((!ok)); then
        row "$label" "not run"
        continue
      fi
      local -a sets=(--set engine.device=cuda --set bf16.enabled=true)
      case $placement in
        opt-cpu) sets+=(--set zero_optimization.stage=2 --set zero_optimization.offload_optimizer.device=cpu) ;;
        params-cpu) sets+=(--set zero_optimization.stage=3 --set zero_optimization.offload_optimizer.device=cpu
                           --set zero_optimization.offload_param.device=cpu) ;;
      esac
      say "bench step configs/gpt2-$model.json ($placement)"
      local bout brc bj
      bout=$(LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH timeout "$(step_timeout 90)" \
        "$BUILD/zoffload" bench step "$ROOT/configs/gpt2-$model.json" --steps 3 --json "${sets[@]}" 2>&1)
      brc=$?
      echo "$bout"
      bj=$(grep -m1 '^{"backend"' <<<"$bout")
      if [[ -n $bj ]]; then
        row "$label" "$(python3 - "$bj" "${peak:-0}" <<'PY'
import json, sys
j = json.loads(sys.argv[1]); peak = float(sys.argv[2])
mfu = f", MFU {100 * j['tflops'] / peak:.1f}%" if peak > 0 else ""
print(f"{j['tokens_per_s']:.0f} tok/s, {j['tflops']:.1f} TFLOP/s{mfu}; "
      f"{100 * j['device_step_ms'] / j['step_ms']:.0f}% of all-on-GPU ({j['backend']})")
PY
)"
      else
        row "$label" "no result (rc $brc$( ((brc == 124)) && echo ', out of time'))"
        [[ $gpu == "no GPU"* ]] || status=1
      fi
    done
  done

  # ---- summary ---------------------------------------------------------------------------------
  row "total time" "$(($(date +%s) - START)) s of ${BUDGET} s"
  printf '\n=== zoffload gpu_check summary\n'
  printf '%s\n' "${ROWS[@]}"
  return $status
}

if [[ -n "${OUT:-}" ]]; then
  mkdir -p "$OUT"
  main "$@" 2>&1 | tee "$OUT/gpu_check.log"
  exit "${PIPESTATUS[0]}"
else
  main "$@"
fi
