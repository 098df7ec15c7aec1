#!/usr/bin/env bash
# The GPU check, written to succeed on its first run as ONE device call of at
# most 9 minutes on a machine that has the CUDA toolkit, CMake, Ninja and
# Python but none of our Debian libraries (they travel as .debs/, made by
# benchmarks/collect-debs.sh; the call names carry: [".debs"]):
#   1. preflight (20 s at most): driver, nvcc, cuBLASLt library and headers
#      and the toolkit's library directories, omp.h, CMake, Ninja, the
#      libraries (.debs/ holding every package benchmarks/debs.txt names,
#      or the system's), free GPU memory,
#      torch, CMake's version against CMakeLists.txt's cmake_minimum_required,
#      glibc against the newest libc6 the carried .debs depend on; stops with
#      one "PREFLIGHT FAILED:" line when the build cannot work. Without a GPU
#      it stops there with one "STOP: no GPU" line naming what is missing
#      (well within 90 s); ZO_CHECK_REHEARSE=1 goes on to build and rehearse
#      the GPU steps' plumbing instead, and runs the CPU tests that use the
#      carried libraries at run time (REHEARSE_CPU_TESTS below; what
#      benchmarks/rehearse-bare.sh runs in a clean Debian root).
#   2. unpack .debs/ into a private prefix and check that its libraries and
#      protoc-c resolve there; configure (sm_90) and build with the prefix's
#      library directories on LD_LIBRARY_PATH (protoc-c runs in the build).
#      Every run (tests, benchmarks) gets RUN_LD_LIBRARY_PATH: the prefix's
#      and the toolkit's library directories (the binaries also carry the
#      toolkit's in their RUNPATH).
#   3. the GPU op parity tests, first, with ZO_CUDA_SYNC=1 (a failing kernel
#      is named with its shapes); then test-gpu-train (placements bit-identical
#      on the GPU, GPU against CPU within tolerance, repeated runs bit-identical)
#      and test-gpu-nccl.
#   4. timings that fit the time left, most important first: bf16 GPT-2 124M
#      and a 1B Llama (configs/llama-1b.json), all on the GPU and with each
#      offload placement (tokens/s, TFLOP/s, overlap efficiency, from
#      zoffload bench step), the PyTorch peer (benchmarks/gpu_torch_peer.py:
#      fused AdamW on the GPU, FSDP2 CPU offload) side by side as ratios, and
#      the cuBLASLt GEMM throughput.
#      Each benchmark's time is estimated from its size (parameters, tokens,
#      placement: bench step builds two schedulers and initializes the
#      parameters twice, then runs 5 rounds of three step kinds); one that
#      the budget cannot fit, or that the budget cuts, is "not run: out of
#      time", never a failure.
#   5. a summary table: every line says what ran and what did not, and why.
# Every step's log, ctest's LastTest.log and the summary go to $OUT (or
# $BUILD/logs without $OUT). Never installs anything system-wide. Exits 0
# when at least one GPU step ran and everything that ran passed, 1 when a
# build, test or benchmark failed, 2 when the preflight failed, 3 when no
# GPU step ran (no GPU, or the budget ran out first): a check that could not
# check does not look green.
#   benchmarks/gpu_check.sh
# Environment: ZO_CHECK_BUILD (build dir, default build/gpu-check),
# ZO_CHECK_KEEP_BUILD=1 (reuse an existing build dir of the same generator:
# rehearsals), ZO_CHECK_REHEARSE=1 (without a GPU: build and rehearse), ZO_CHECK_BUDGET (seconds for everything, default 525),
# ZO_CHECK_BUILD_TIMEOUT (seconds for each build step, default 240),
# ZO_CHECK_GPT2_B (GPT-2 124M micro-batch, default 8, T = 1024),
# ZO_CHECK_FORCE_DEB_TOOLS=1 (use the carried make/pkgconf even when the
# machine has its own), ZO_CHECK_NVME_DIR (the optimizer-on-NVMe benchmark's
# directory, default $BUILD/nvme; without O_DIRECT there that row is "not
# run: no O_DIRECT under DIR: <reason>", benchmarks/nvme-direct.sh).
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD=${ZO_CHECK_BUILD:-$ROOT/build/gpu-check}
[[ $BUILD == /* ]] || BUILD=$ROOT/$BUILD
PREFIX=$BUILD-deps
NVME_DIR=${ZO_CHECK_NVME_DIR:-$BUILD/nvme} # the optimizer-on-NVMe benchmark's directory
LOGS=${OUT:-$BUILD/logs}
BUDGET=${ZO_CHECK_BUDGET:-525} # seconds for the whole script: under a 540 s call
RESERVE=15                     # kept back for the summary and the log copies
BUILD_MAX=${ZO_CHECK_BUILD_TIMEOUT:-240} # seconds for each of the two build steps at most
START=$(date +%s)
mkdir -p "$LOGS"

declare -a ROWS=()
RAN_GPU=0 # GPU steps that ran to an answer (pass or fail)
row() { ROWS+=("$(printf '%-48s %s' "$1" "$2")"); }
elapsed() { echo $(($(date +%s) - START)); }
left() { echo $((START + BUDGET - RESERVE - $(date +%s))); }
# step_timeout MAX: MAX seconds or what is left, whichever is less (>= 1).
step_timeout() {
  local l
  l=$(left)
  ((l > $1)) && l=$1
  ((l < 1)) && l=1
  echo "$l"
}
say() { printf '\n=== %s (t=%ds)\n' "$*" "$(elapsed)"; }
# A label as a file name that survives the trip back from the device: [A-Za-z0-9._-] only.
fname() { local f=${1//[^A-Za-z0-9._-]/_}; echo "${f//__/_}"; }
# ctest's LastTest.log of the run just finished, kept under a name of its own.
keep_lasttest() {
  local f
  for f in "$BUILD"/Testing/Temporary/LastTest*.log; do
    [[ -f $f ]] && cp "$f" "$LOGS/$1-$(basename "$f")"
  done
}

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

# version_ge A B: whether version A >= B (dotted numbers).
version_ge() { [[ $(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1) == "$2" ]]; }

# The newest libc6 version the .debs/ packages depend on ("libc6 (>= 2.34)" in
# Depends or Pre-Depends), from their control files; empty when none says.
debs_libc_need() {
  python3 - .debs/*.deb <<'PY'
import io, re, subprocess, sys, tarfile
need = []
for deb in sys.argv[1:]:
    data = open(deb, "rb").read()
    ctl = ""
    off = 8
    while data[:8] == b"!<arch>\n" and off < len(data):
        name = data[off:off + 16].decode().strip().rstrip("/")
        size = int(data[off + 48:off + 58].decode().strip())
        if name.startswith("control.tar"):
            try:
                with tarfile.open(fileobj=io.BytesIO(data[off + 60:off + 60 + size])) as t:
                    for m in t.getmembers():
                        if m.name.lstrip("./") == "control":
                            ctl = t.extractfile(m).read().decode(errors="replace")
            except tarfile.TarError:  # zstd: ask dpkg-deb where there is one
                try:
                    ctl = subprocess.run(["dpkg-deb", "-f", deb], capture_output=True, text=True).stdout
                except OSError:
                    pass
            break
        off += 60 + size + (size & 1)
    for m in re.finditer(r"(?m)^(?:Pre-)?Depends:(.*)$", ctl):
        need += re.findall(r"\blibc6 \(>= ([0-9.]+)", m.group(1))
key = lambda v: [int(x) for x in re.findall(r"[0-9]+", v)]
print(max(need, key=key) if need else "")
PY
}

# cuda_libdirs CUDA_HOME: CUDA_LIBDIRS, the toolkit's library directories
# (lib64, targets/*/lib) that hold libcublasLt.so.N and libcudart.so.N, joined
# by ':', and RUN_LD_LIBRARY_PATH with them first.
CUDA_LIBDIRS=""
cuda_libdirs() {
  local d
  CUDA_LIBDIRS=""
  for d in "$1"/lib64 "$1"/targets/*/lib; do
    [[ -d $d ]] || continue
    d=$(readlink -f "$d")
    [[ :$CUDA_LIBDIRS: == *":$d:"* ]] && continue
    compgen -G "$d/libcublasLt.so.[0-9]*" >/dev/null && compgen -G "$d/libcudart.so.[0-9]*" >/dev/null &&
      CUDA_LIBDIRS=${CUDA_LIBDIRS:+$CUDA_LIBDIRS:}$d
  done
  [[ -n $CUDA_LIBDIRS ]] && RUN_LD_LIBRARY_PATH=$CUDA_LIBDIRS${RUN_LD_LIBRARY_PATH:+:$RUN_LD_LIBRARY_PATH}
  return 0
}

# ---- 1. preflight ------------------------------------------------------------------------
GPU=""       # "name, total MiB, driver" when a GPU answers
NO_GPU=""    # why not, otherwise
GEN=Ninja
TORCH=""     # torch version when importable
preflight() {
  say "preflight"
  local fatal="" t0
  t0=$(date +%s)
  for d in /usr/local/cuda/bin /usr/local/nvidia/bin; do
    [[ -d $d && :$PATH: != *":$d:"* ]] && export PATH=$PATH:$d
  done
  printf '%-14s %s\n' host "$(uname -srm), $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM"
  # GPU and driver (not fatal: without one this is a rehearsal)
  local q
  if command -v nvidia-smi >/dev/null; then
    q=$(timeout 10 nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv,noheader,nounits 2>&1)
    if [[ $? -eq 0 && -n $q && $q != *"failed"* && $q != *"NVIDIA-SMI"* ]]; then
      q=${q%%$'\n'*}
      local name total free driver
      IFS=',' read -r name total free driver <<<"$q"
      GPU="$name, ${total// /} MiB, driver ${driver// /}"
      printf '%-14s %s (free %s MiB)\n' gpu "$GPU" "${free// /}"
      row "preflight: GPU" "$GPU, ${free// /} MiB free"
      if ((${free// /} < 60000)); then
        echo "warning: ${free// /} MiB free on the GPU; the 1B Llama all-on-GPU run wants about 40 GiB"
      fi
    else
      NO_GPU="nvidia-smi: ${q:0:100}"
    fi
  else
    NO_GPU="no nvidia-smi on PATH (no driver)"
  fi
  if [[ -n $NO_GPU ]]; then
    printf '%-14s none: %s\n' gpu "$NO_GPU"
    row "preflight: GPU" "none ($NO_GPU)"
  fi
  # nvcc, cuBLASLt
  local nvcc_v cuda_home inc lib
  if command -v nvcc >/dev/null; then
    nvcc_v=$(nvcc --version | grep -o 'release [0-9.]*')
    cuda_home=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
    printf '%-14s %s (%s)\n' nvcc "$nvcc_v" "$cuda_home"
    inc=$(ls "$cuda_home"/include/cublasLt.h "$cuda_home"/targets/*/include/cublasLt.h 2>/dev/null | head -n1)
    lib=$(ls "$cuda_home"/lib64/libcublasLt.so* "$cuda_home"/targets/*/lib/libcublasLt.so* 2>/dev/null | head -n1)
    printf '%-14s header %s, library %s\n' cuBLASLt "${inc:-MISSING}" "${lib:-MISSING}"
    cuda_libdirs "$cuda_home"
    printf '%-14s %s\n' "cuda libs" "${CUDA_LIBDIRS:-MISSING}"
    [[ -z $inc ]] && fatal="cublasLt.h not found under $cuda_home (CUDA toolkit without cuBLAS headers)"
    [[ -z $lib ]] && fatal="libcublasLt.so not found under $cuda_home"
    [[ -z $CUDA_LIBDIRS ]] && fatal="no directory under $cuda_home (lib64, targets/*/lib) holds both libcublasLt.so.N and libcudart.so.N"
    row "preflight: nvcc, cuBLASLt" "$nvcc_v; ${inc:+header ok}${lib:+, library ok}; run with ${CUDA_LIBDIRS:-NO library directory}"
  else
    fatal="nvcc not found (PATH, /usr/local/cuda/bin): the CUDA toolkit is needed to build"
  fi
  # omp.h with the host compiler nvcc uses
  if ! command -v gcc >/dev/null; then
    fatal="gcc not found (nvcc's host compiler)"
  elif ! printf '#include <omp.h>\nint main(void) { return omp_get_max_threads() < 1; }\n' |
      gcc -fopenmp -x c - -o "$LOGS/.omp-probe" 2>"$LOGS/omp-probe.log"; then
    fatal="gcc cannot compile with <omp.h> and -fopenmp (see omp-probe.log)"
  else
    printf '%-14s ok (%s)\n' omp.h "$(gcc -dumpfullversion 2>/dev/null)"
  fi
  rm -f "$LOGS/.omp-probe"
  [[ -s $LOGS/omp-probe.log ]] || rm -f "$LOGS/omp-probe.log"
  # CMake, Ninja (make as the fallback generator)
  if command -v cmake >/dev/null; then
    local cm_have cm_need
    cm_have=$(cmake --version | head -n1 | awk '{print $3}')
    cm_need=$(grep -m1 -oE 'cmake_minimum_required\(VERSION [0-9.]+' "$ROOT/CMakeLists.txt" | awk '{print $2}')
    printf '%-14s %s (CMakeLists.txt needs %s)\n' cmake "$cm_have" "${cm_need:-?}"
    if [[ -n $cm_need ]] && ! version_ge "$cm_have" "$cm_need"; then
      fatal="cmake $cm_have is older than the $cm_need CMakeLists.txt's cmake_minimum_required asks (put a newer cmake on PATH, e.g. pip install cmake)"
    fi
  else
    fatal="cmake not found"
  fi
  if command -v ninja >/dev/null; then
    printf '%-14s %s\n' ninja "$(ninja --version)"
  elif command -v make >/dev/null || compgen -G ".debs/make_*.deb" >/dev/null; then
    GEN="Unix Makefiles"
    echo "ninja          not found: using Unix Makefiles"
  else
    fatal="neither ninja nor make found"
  fi
  # The libraries: carried .debs/ or the system's
  local n_debs
  n_debs=$(compgen -G ".debs/*.deb" | wc -l)
  if ((n_debs > 0)); then
    printf '%-14s %d packages in .debs/\n' libraries "$n_debs"
    local p lack=""
    for p in $(bash benchmarks/collect-debs.sh --list); do
      compgen -G ".debs/${p}_*.deb" >/dev/null || lack="$lack $p"
    done
    if [[ -n $lack ]]; then
      fatal=".debs/ lacks${lack} (benchmarks/debs.txt names them): rerun benchmarks/collect-debs.sh"
    else
      printf '%-14s every package benchmarks/debs.txt names\n' ".debs/"
    fi
    local libc_have libc_need
    libc_have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
    libc_need=$(debs_libc_need)
    printf '%-14s %s here; the .debs need %s\n' glibc "${libc_have:-unknown}" "${libc_need:-nothing}"
    if [[ -n $libc_need ]] && ! version_ge "${libc_have:-0}" "$libc_need"; then
      fatal="glibc ${libc_have:-unknown} here, the carried .debs need libc6 >= $libc_need (run benchmarks/collect-debs.sh on a release with glibc <= ${libc_have:-this one})"
    fi
    row "preflight: libraries" "$n_debs .debs carried (need glibc ${libc_need:-any}, have ${libc_have:-?})"
  elif pkg-config --exists jansson 2>/dev/null && [[ -e /usr/include/x86_64-linux-gnu/openblas-openmp/cblas.h ]]; then
    echo "libraries      the system's (no .debs/)"
    row "preflight: libraries" "the system's (no .debs/)"
  else
    fatal="no .debs/ and no system jansson + OpenBLAS: run benchmarks/collect-debs.sh here and name carry: [\".debs\"] in the device call"
  fi
  # torch for the peer (not fatal)
  TORCH=$(timeout 15 python3 -c 'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "no-cuda")' 2>/dev/null)
  printf '%-14s %s\n' torch "${TORCH:-not importable}"
  row "preflight: torch (peer)" "${TORCH:-not importable: the peer rows will say so}"
  printf '%-14s %d s\n' preflight "$(($(date +%s) - t0))"
  if [[ -n $fatal ]]; then
    echo "PREFLIGHT FAILED: $fatal"
    row "preflight" "FAILED: $fatal"
    return 1
  fi
  row "preflight" "ok in $(($(date +%s) - t0)) s"
  return 0
}

# ---- 2. dependencies, configure, build ---------------------------------------------------------
RUN_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} # the preflight puts the toolkit's, deps() the prefix's first
declare -a CMAKE_ARGS=()
deps() {
  CMAKE_ARGS=(-G "$GEN" -DZO_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release
              -DZO_WERROR=OFF -DZO_MPI=OFF)
  local arch_lib=usr/lib/x86_64-linux-gnu
  compgen -G ".debs/*.deb" >/dev/null || return 0
  say "unpacking .debs/ into $PREFIX"
  [[ $(uname -m) == x86_64 ]] || echo "warning: .debs/ holds amd64 packages, this is $(uname -m)"
  rm -rf "$PREFIX"
  mkdir -p "$PREFIX/bin"
  local n=0 f
  for f in .debs/*.deb; do
    case $(basename "$f") in
      # Only where the loader finds one (gcc's own may sit in a directory the
      # loader never reads, and libdnnl.so.2 needs it at run time).
      # (no `ldconfig -p | grep -q`: under pipefail grep's early exit fails the pipe)
      libgomp1_*) [[ $(ldconfig -p 2>/dev/null) == *"libgomp.so.1 "* ]] && continue ;;
    esac
    unpack_deb "$f" || { echo "cannot unpack $f"; return 1; }
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
  RUN_LD_LIBRARY_PATH="$libdirs${RUN_LD_LIBRARY_PATH:+:$RUN_LD_LIBRARY_PATH}"
  deps_resolve "$libdirs" || return 1
  [[ -x $PREFIX/usr/bin/protoc-c ]] && CMAKE_ARGS+=(-DZO_PROTOC_C="$PREFIX/usr/bin/protoc-c")
  # Pre-set find_path/find_library results: the top-level CMakeLists looks
  # for OpenBLAS only under /usr (NO_DEFAULT_PATH).
  CMAKE_ARGS+=(-DZO_CBLAS_INCLUDE="$PREFIX/usr/include/x86_64-linux-gnu/openblas-openmp"
               -DZO_OPENBLAS="$PREFIX/$arch_lib/openblas-openmp/libopenblas.so"
               -DZO_OPENBLAS_ROOT="$PREFIX/usr"
               -DZLIB_INCLUDE_DIR="$PREFIX/usr/include"
               -DZLIB_LIBRARY="$PREFIX/$arch_lib/libz.so"
               # gcc searches /usr/include/x86_64-linux-gnu by itself, never the
               # prefix's: hwloc.h includes hwloc/autogen/config.h from there.
               "-DCMAKE_C_FLAGS=-isystem $PREFIX/usr/include/x86_64-linux-gnu"
               "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$libdirs")
  # Tools the machine may lack: a wrapper so pkgconf finds its library.
  if [[ -x $PREFIX/usr/bin/pkgconf ]] && { ! command -v pkg-config >/dev/null || [[ ${ZO_CHECK_FORCE_DEB_TOOLS:-0} == 1 ]]; }; then
    printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
      "$PREFIX/$arch_lib" "$PREFIX/usr/bin/pkgconf" > "$PREFIX/bin/pkg-config"
    chmod +x "$PREFIX/bin/pkg-config"
    CMAKE_ARGS+=(-DPKG_CONFIG_EXECUTABLE="$PREFIX/bin/pkg-config")
    echo "using the carried pkgconf"
  fi
  if [[ $GEN == "Unix Makefiles" && -x $PREFIX/usr/bin/make ]] &&
     { ! command -v make >/dev/null || [[ ${ZO_CHECK_FORCE_DEB_TOOLS:-0} == 1 ]]; }; then
    CMAKE_ARGS+=(-DCMAKE_MAKE_PROGRAM="$PREFIX/usr/bin/make")
    echo "using the carried make"
  fi
  echo "$n packages unpacked"
  return 0
}

# deps_resolve LIBDIRS: every library zoffload links from the prefix, and
# protoc-c (which runs in the build), find what they need with LIBDIRS on
# LD_LIBRARY_PATH (libdnnl.so.2 needs libOpenCL.so.1, protoc-c libprotoc and
# libprotobuf); protoc-c answers --version. Names what is missing.
deps_resolve() {
  local arch_lib=$PREFIX/usr/lib/x86_64-linux-gnu f miss="" out
  for f in "$PREFIX/usr/bin/protoc-c" "$arch_lib/libdnnl.so.2" "$arch_lib/openblas-openmp/libopenblas.so.0" \
           "$arch_lib/libjansson.so.4" "$arch_lib/libpcre2-8.so.0" "$arch_lib/libutf8proc.so.2" \
           "$arch_lib/libprotobuf-c.so.1" "$arch_lib/libisal.so.2" "$PREFIX/lib/x86_64-linux-gnu/libz.so.1"; do
    if [[ ! -e $f ]]; then
      miss="$miss ${f#"$PREFIX"/} (absent)"
      continue
    fi
    out=$(LD_LIBRARY_PATH=$1 ldd "$f" 2>&1 | grep 'not found')
    [[ -n $out ]] && miss="$miss ${f#"$PREFIX"/} ($(awk '{print $1}' <<<"$out" | paste -sd, -) not found)"
  done
  if [[ -z $miss ]] && ! out=$(LD_LIBRARY_PATH=$1 "$PREFIX/usr/bin/protoc-c" --version 2>&1); then
    miss=" protoc-c --version: ${out:0:120}"
  fi
  if [[ -n $miss ]]; then
    echo "the carried libraries do not resolve:$miss"
    row "dependencies: libraries resolve" "FAILED:$miss"
    return 1
  fi
  echo "the carried libraries and protoc-c resolve in the prefix ($(LD_LIBRARY_PATH=$1 "$PREFIX/usr/bin/protoc-c" --version 2>&1 | head -n1))"
  return 0
}

build() {
  say "configure ($BUILD, $GEN)"
  local t0 ok=1 c0
  t0=$(date +%s)
  # A fresh build (its logs folder kept) unless a rehearsal asks to reuse one.
  [[ ${ZO_CHECK_KEEP_BUILD:-0} == 1 ]] ||
    find "$BUILD" -mindepth 1 -maxdepth 1 ! -name logs ! -name nvme -exec rm -rf {} + 2>/dev/null
  # The prefix's libraries on the loader path: protoc-c runs during the build.
  LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH timeout "$(step_timeout 120)" \
    cmake -S "$ROOT" -B "$BUILD" "${CMAKE_ARGS[@]}" >"$LOGS/configure.log" 2>&1 || ok=0
  tail -n 5 "$LOGS/configure.log"
  if ((!ok)); then
    cp "$BUILD"/CMakeFiles/CMakeConfigureLog.yaml "$LOGS/" 2>/dev/null
    row "configure" "FAILED (configure.log)"
    return 1
  fi
  grep -E '^(ZO_CBLAS_INCLUDE|ZO_OPENBLAS|ZO_DNNL_LIBRARY|ZO_PROTOC_C|ZLIB_LIBRARY[A-Z_]*|CMAKE_CUDA_ARCHITECTURES|ZO_HAVE_NCCL|CMAKE_CUDA_COMPILER):' \
    "$BUILD/CMakeCache.txt" | sed 's/^/  /'
  say "build: zo-kernels-cuda (timed alone)"
  c0=$(date +%s)
  LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH timeout "$(step_timeout "$BUILD_MAX")" \
    cmake --build "$BUILD" -j "$(nproc)" --target zo-kernels-cuda >"$LOGS/build-cuda.log" 2>&1 || ok=0
  tail -n 3 "$LOGS/build-cuda.log"
  row "build: CUDA backend (sm_90)" "$( ((ok)) && echo "ok, $(($(date +%s) - c0)) s on $(nproc) cores" || echo "FAILED (build-cuda.log)")"
  if ((ok)); then
    say "build: zoffload, the gpu tests and bench-gpu-gemm"
    LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH timeout "$(step_timeout "$BUILD_MAX")" cmake --build "$BUILD" -j "$(nproc)" \
      --target zoffload test-gpu-backend-ops test-gpu-train test-gpu-nccl bench-gpu-gemm >"$LOGS/build.log" 2>&1 || ok=0
    tail -n 3 "$LOGS/build.log"
    row "build: zoffload, tests, benchmarks" "$( ((ok)) && echo "ok, $(($(date +%s) - t0)) s with configure" || echo "FAILED (build.log)")"
  fi
  ((ok)) || return 1
  echo "libraries of zoffload:"
  LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH ldd "$BUILD/zoffload" 2>&1 | sed 's/ (0x[0-9a-f]*)$//' | sort -u |
    grep -E 'openblas|dnnl|OpenCL|jansson|pcre2|utf8proc|protobuf|uring|hwloc|isal|libz|gomp|cudart|cublas|nccl|not found' | sed 's/^/  /'
  local nf
  nf=$(LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH ldd "$BUILD/zoffload" 2>&1 | grep 'not found' | awk '{print $1}' | paste -sd, -)
  if [[ -n $nf ]]; then
    row "build: zoffload's libraries" "FAILED: $nf not found with RUN_LD_LIBRARY_PATH"
    return 1
  fi
  return 0
}

# ---- 3. tests on the GPU -------------------------------------------------------------------------
# ctest_step LABEL REGEX MAX [ENV...]: runs the tests, keeps the log and
# LastTest.log. A skip fails the step (a GPU is there), unless SKIP_OK=1.
SKIP_OK=0
ctest_step() {
  local label=$1 regex=$2 max=$3 name
  name=$(fname "$1")
  shift 3
  if (($(left) < 10)); then
    row "$label" "not run: out of time ($(left) s left)"
    return 0
  fi
  say "ctest -R '$regex' ${*:+(with $*)}"
  local out rc secs limit
  limit=$(step_timeout "$max")
  out=$(cd "$BUILD" && env "$@" LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH timeout "$limit" \
    ctest -R "$regex" --output-on-failure --timeout "$(step_timeout "$((max - 5))")" 2>&1)
  rc=$?
  # Cut by the script's budget (less than the step's own limit was left):
  # not run, not a failure; a test that overran its own limit fails.
  if ((limit < max)) && { ((rc == 124)) || grep -q "\*\*\*Timeout" <<<"$out"; }; then
    echo "$out" >"$LOGS/$name.log"
    keep_lasttest "$name"
    row "$label" "not run: out of time (the budget left $limit of its $max s; $name.log)"
    return 0
  fi
  RAN_GPU=$((RAN_GPU + 1))
  echo "$out" | tee "$LOGS/$name.log" | tail -n 25
  keep_lasttest "$name"
  secs=$(grep -oE 'test-gpu-[a-z-]+ \.+ *(\*\*\*)?[A-Za-z]+ +[0-9.]+ sec' <<<"$out" | sed -E 's/ \.+ */ /' | paste -sd, -)
  if ((rc == 0)) && grep -q "100% tests passed" <<<"$out" && ! grep -q "Not Run\|Skipped" <<<"$out"; then
    row "$label" "PASS ($secs)"
    return 0
  fi
  if grep -q "Skipped" <<<"$out" && ((rc == 0)); then
    local why
    why=$(grep -m1 '^SKIP' "$BUILD"/Testing/Temporary/LastTest.log 2>/dev/null)
    if ((SKIP_OK)); then
      row "$label" "skipped: ${why:-see $name.log}"
      return 0
    fi
    row "$label" "FAIL: skipped although a GPU answered nvidia-smi: ${why:-see $name.log}"
  elif ((rc == 124)); then
    row "$label" "FAIL: over its own limit of ${max} s ($name.log)"
  else
    row "$label" "FAIL (rc $rc: $secs; $name.log, $name-LastTest.log)"
  fi
  return 1
}

# ---- 4. timings -------------------------------------------------------------------------------------
declare -A TPS=() # label -> tokens/s, for the side-by-side
B124=${ZO_CHECK_GPT2_B:-8} # GPT-2 124M micro-batch (T = 1024), the same for the peer
BENCH_DEVICE=cuda          # cpu only for the rehearsal's parser check

# estimate CONFIG PLACEMENT STEPS [--set key=value]...: "NEED MAX" seconds
# for one `zoffload bench step` from the model's size: parameters N (from
# the config's shapes), tokens per step, the placement. Start-up builds two
# schedulers, each initializing N parameters (splitmix64 draws, about 21 ns
# each on one core, in parallel over half the cores) and its host pool; then
# 5 rounds of (configured, all-device, compute-only) steps, 2 warm-ups each
# in the first, and the optimizer timed alone 15 times. Rates are
# conservative for one H100/H200 (150 TFLOP/s of bf16 reached, PCIe at
# 20 GB/s, CPU AdamW at 1 G parameters/s); NEED is 1.3x, MAX 2.5x + 30 s.
estimate() {
  python3 - "$ROOT/$1" "$2" "$3" "$(nproc)" "${@:4}" <<'PY'
import json, sys
path, placement, steps, cores = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sets = dict(a.split("=", 1) for a in sys.argv[5:] if "=" in a)
cfg = json.load(open(path))
m = cfg.get("model", {})
def get(key, default=None, section=m, prefix="model."):
    return type(default or 0)(sets.get(prefix + key, section.get(key, default)))
L, C, V = get("n_layer"), get("n_embd"), get("vocab_size")
if m.get("arch", "gpt2") == "llama":
    H, KV, I = get("n_head"), get("num_key_value_heads", get("n_head")), get("intermediate_size")
    hd = C // H
    N = L * (C * C + 2 * C * KV * hd + C * C + 3 * C * I) + V * C * (1 if m.get("tie_word_embeddings") else 2)
else:
    N = L * 12 * C * C + V * C + get("max_seq_len", 1024) * C
B = int(sets.get("train_micro_batch_size_per_gpu", cfg.get("train_micro_batch_size_per_gpu", 1)))
K = int(sets.get("gradient_accumulation_steps", cfg.get("gradient_accumulation_steps", 1)))
T = int(sets.get("data.seq_len", cfg.get("data", {}).get("seq_len", 1024)))
tokens = B * T * K
step = 6.0 * N * tokens / 150e12
opt = 0.0
host_bytes = 4 * N  # the initialization's staging
if placement in ("opt-cpu", "opt-nvme", "params-cpu"):
    opt = N / 1e9
    step += opt + 6.0 * N / 20e9  # fp32 gradients down, bf16 parameters up
    host_bytes = 16 * N           # master weights, m, v, gradients
if placement == "opt-nvme":
    step += 12.0 * N / 2e9        # m and v through the disk
if placement == "params-cpu":
    step += K * 2 * 2.0 * N / 20e9  # parameters streamed in forward and backward
    host_bytes += 2 * N
startup = 2 * (N * 21e-9 / max(1, cores // 2) + host_bytes / 2e9)
est = 10 + startup + (5 * 3 * steps + 6) * step + 15 * opt
print(int(1.3 * est) + 1, int(2.5 * est) + 30)
PY
}

# bench NAME CONFIG PLACEMENT STEPS [--set ...]
bench() {
  local label=$1 cfg=$2 placement=$3 steps=$4 need max est
  shift 4
  est=$(estimate "$cfg" "$placement" "$steps" "$@") || est=""
  if [[ -z $est ]]; then
    row "$label" "FAIL: cannot estimate its time from $cfg"
    return 1
  fi
  need=${est% *}
  max=${est#* }
  # The NVMe tier without O_DIRECT would time the page cache: not run, with the reason.
  if [[ $placement == opt-nvme ]]; then
    local why drc
    mkdir -p "$NVME_DIR"
    why=$(bash "$ROOT/benchmarks/nvme-direct.sh" "$BUILD/zoffload" "$NVME_DIR" 2>&1)
    drc=$?
    if ((drc == 77)); then
      row "$label" "$why"
      return 0
    elif ((drc != 0)); then
      row "$label" "FAIL: $why"
      return 1
    fi
  fi
  if (($(left) < need)); then
    row "$label" "not run: out of time ($(left) s left, its size needs about $need s)"
    return 0
  fi
  local limit
  limit=$(step_timeout "$max")
  local -a sets=(--set "engine.device=$BENCH_DEVICE" --set bf16.enabled=true --set engine.gpu_memory_budget=0 "$@")
  case $placement in
    device) sets+=(--set zero_optimization.stage=0 --set zero_optimization.offload_optimizer.device=none
                   --set zero_optimization.offload_param.device=none) ;;
    opt-cpu) sets+=(--set zero_optimization.stage=2 --set zero_optimization.offload_optimizer.device=cpu
                    --set zero_optimization.offload_param.device=none) ;;
    params-cpu) sets+=(--set zero_optimization.stage=3 --set zero_optimization.offload_optimizer.device=cpu
                       --set zero_optimization.offload_param.device=cpu) ;;
    opt-nvme) sets+=(--set zero_optimization.stage=2 --set zero_optimization.offload_optimizer.device=nvme
                     --set "zero_optimization.offload_optimizer.nvme_path=$NVME_DIR"
                     --set zero_optimization.offload_param.device=none) ;;
  esac
  say "bench step $cfg ($placement)"
  local log="$LOGS/bench-$(fname "$label").log" out rc j
  out=$(LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH timeout "$limit" \
    "$BUILD/zoffload" bench step "$ROOT/$cfg" --steps "$steps" --json "${sets[@]}" 2>&1)
  rc=$?
  echo "$out" >"$log"
  tail -n 8 <<<"$out"
  j=$(grep -m1 '^{"backend"' <<<"$out")
  if [[ -z $j ]] && ((rc == 124)); then
    row "$label" "not run: out of time (stopped after $limit s; estimated $need-$max s; $(basename "$log"))"
    return 0
  fi
  [[ $BENCH_DEVICE == cuda ]] && RAN_GPU=$((RAN_GPU + 1))
  if [[ -z $j ]]; then
    row "$label" "FAIL: no result (rc $rc; $(basename "$log"))"
    return 1
  fi
  local line
  line=$(python3 - "$j" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
print(f"{j['tokens_per_s']:.0f} {j['tokens_per_s']:.0f} tok/s, {j['tflops']:.1f} TFLOP/s, overlap "
      f"efficiency {j['overlap_efficiency']:.2f}, {100 * j['device_step_ms'] / j['step_ms']:.0f}% of "
      f"all-on-GPU ({j['device_tokens_per_s']:.0f} tok/s)")
PY
)
  TPS[$label]=${line%% *}
  row "$label" "${line#* }"
  return 0
}

# peer MODE LABEL MIN MAX
peer() {
  local mode=$1 label=$2 need=$3 max=$4
  if [[ -z $TORCH ]]; then
    row "$label" "not run: torch is not importable here"
    return 0
  fi
  if (($(left) < need)); then
    row "$label" "not run: out of time ($(left) s left, needs about $need s)"
    return 0
  fi
  say "PyTorch peer: $mode"
  local out rc j limit
  limit=$(step_timeout "$max")
  out=$(timeout "$limit" python3 "$ROOT/benchmarks/gpu_torch_peer.py" --mode "$mode" \
    --batch "$B124" --seq 1024 --steps 5 2>&1)
  rc=$?
  echo "$out" >"$LOGS/peer-$mode.log"
  tail -n 4 <<<"$out"
  j=$(grep -m1 '^{"peer"' <<<"$out")
  if [[ -z $j ]] && ((rc == 124)); then
    row "$label" "not run: out of time (stopped after $limit s; peer-$mode.log)"
    return 0
  fi
  if [[ -z $j ]]; then
    local why
    why=$(grep -m1 -E '^torch-peer: (SKIP|FAIL)' <<<"$out")
    row "$label" "${why:-FAIL (rc $rc$( ((rc == 124)) && echo ', out of time'); peer-$mode.log)}"
    [[ $why == *SKIP* ]] && return 0
    return 1
  fi
  local line
  line=$(python3 - "$j" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
print(f"{j['tokens_per_s']:.0f} {j['tokens_per_s']:.0f} tok/s, step {j['step_ms']:.1f} ms, "
      f"peak {j['peak_gpu_gib']} GiB on the GPU, torch {j['torch']}")
PY
)
  TPS[$label]=${line%% *}
  row "$label" "${line#* }"
  return 0
}

gemm() {
  if (($(left) < 40)); then
    row "gemm bf16 (bench-gpu-gemm)" "not run: out of time ($(left) s left)"
    return 0
  fi
  say "bench-gpu-gemm (bf16 and fp32 cuBLASLt, N = B*T = 8192)"
  local out rc peak limit
  limit=$(step_timeout 60)
  out=$(LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH timeout "$limit" \
    "$BUILD/benchmarks/bench-gpu-gemm" --device cuda --N 8192 --iters 20 2>&1)
  rc=$?
  echo "$out" >"$LOGS/bench-gpu-gemm.log"
  peak=$(grep -m1 '^zoffload gemm_peak ' <<<"$out" | grep -oE 'tflops=[0-9.]+' | cut -d= -f2)
  if [[ -z $peak ]] && ((rc == 124)); then
    row "gemm bf16 peak (bench-gpu-gemm)" "not run: out of time (stopped after $limit s)"
    return 0
  fi
  RAN_GPU=$((RAN_GPU + 1))
  if [[ -n $peak ]]; then
    row "gemm bf16 peak (bench-gpu-gemm)" "$peak TFLOP/s (cuBLASLt at GPT-2 shapes)"
  else
    row "gemm bf16 peak (bench-gpu-gemm)" "FAIL (rc $rc; bench-gpu-gemm.log)"
    return 1
  fi
}

side_by_side() {
  local a=${TPS["zoffload GPT-2 124M, all on GPU"]:-} b=${TPS["torch GPT-2 124M, all on GPU"]:-}
  local c=${TPS["zoffload GPT-2 124M, optimizer on cpu"]:-} d=${TPS["torch GPT-2 124M, FSDP2 CPU offload"]:-}
  # pair LABEL ZO TORCH: the ratio, or why there is none.
  pair() {
    if [[ -n $2 && -n $3 ]]; then
      row "$1" "zoffload $2 / torch $3 tok/s = $(python3 -c 'import sys; print(f"{float(sys.argv[1]) / float(sys.argv[2]):.2f}x")' "$2" "$3")"
    else
      local miss=""
      [[ -z $2 ]] && miss=zoffload
      [[ -z $3 ]] && miss="${miss:+$miss and }torch"
      row "$1" "not computed: no $miss figure (its row above says why)"
    fi
  }
  pair "side by side: all on GPU" "$a" "$b"
  pair "side by side: optimizer on the CPU" "$c" "$d"
}

# ---- the run -------------------------------------------------------------------------------------------
# what_not_run REASON LABEL...: one row per step that did not run.
what_not_run() {
  local why=$1 l
  shift
  for l in "$@"; do row "$l" "not run: $why"; done
}

GPU_STEPS=("gpu op parity (ZO_CUDA_SYNC=1)" "gpu training tests" "gpu nccl test (one rank)"
           "zoffload GPT-2 124M, all on GPU"
           "zoffload GPT-2 124M, optimizer on cpu" "zoffload GPT-2 124M, params + optimizer on cpu"
           "torch GPT-2 124M, all on GPU" "torch GPT-2 124M, FSDP2 CPU offload"
           "zoffload Llama 1B, all on GPU" "zoffload Llama 1B, optimizer on cpu"
           "zoffload Llama 1B, params + optimizer on cpu" "zoffload GPT-2 124M, optimizer on nvme"
           "gemm bf16 peak (bench-gpu-gemm)")

# The CPU tests that use each carried library at run time: jansson
# (config), PCRE2 and utf8proc (tokenizer), ISA-L and liburing (NVMe),
# OpenBLAS and oneDNN (bf16 GEMMs).
REHEARSE_CPU_TESTS=(test-engine-config test-engine-tokenizer test-offload-nvme test-kernels-cpu-mixed)
rehearse_cpu_tests() {
  local label="rehearsal: CPU tests on the carried libraries" out
  say "build and run ${REHEARSE_CPU_TESTS[*]}"
  if ! LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH timeout "$(step_timeout "$BUILD_MAX")" \
      cmake --build "$BUILD" -j "$(nproc)" --target "${REHEARSE_CPU_TESTS[@]}" >"$LOGS/build-cpu-tests.log" 2>&1; then
    tail -n 5 "$LOGS/build-cpu-tests.log"
    row "$label" "FAIL: build (build-cpu-tests.log)"
    return 1
  fi
  local regex
  regex="^($(IFS='|'; echo "${REHEARSE_CPU_TESTS[*]}"))\$"
  out=$(cd "$BUILD" && LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH timeout "$(step_timeout 300)" \
    ctest -R "$regex" --output-on-failure --timeout 280 2>&1)
  echo "$out" | tee "$LOGS/rehearsal-ctest-cpu.log" | tail -n 8
  keep_lasttest "rehearsal-ctest-cpu"
  if grep -q "100% tests passed, 0 tests failed out of ${#REHEARSE_CPU_TESTS[@]}\$" <<<"$out"; then
    local skipped
    skipped=$(grep -oE '[a-z0-9-]+ \(Skipped\)' <<<"$out" | awk '{print $1}' | paste -sd' ' -)
    row "$label" "PASS (${#REHEARSE_CPU_TESTS[@]}: ${REHEARSE_CPU_TESTS[*]}${skipped:+; skipped: $skipped})"
    return 0
  fi
  row "$label" "FAIL (rehearsal-ctest-cpu.log)"
  return 1
}

# Without a GPU: the CPU tests above, then what can be checked of the GPU steps' plumbing (the tests
# skip with their reason, LastTest.log is kept, the peer says why it cannot
# run, bench step's JSON parses on the CPU backend), then stop.
rehearse() {
  local status=0 out why
  rehearse_cpu_tests || status=1
  say "rehearsal: the gpu tests skip without a GPU (ctest, LastTest.log kept)"
  out=$(cd "$BUILD" && LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH timeout "$(step_timeout 60)" \
    ctest -R '^test-gpu-' --output-on-failure --timeout 50 2>&1)
  echo "$out" | tee "$LOGS/rehearsal-ctest-gpu.log" | tail -n 8
  keep_lasttest "rehearsal-ctest-gpu"
  why=$(LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH "$BUILD/tests/test-gpu-backend-ops" 2>&1 | grep -m1 '^SKIP')
  local n_skip
  n_skip=$(grep -c "(Skipped)" <<<"$out")
  if ((n_skip >= 3)); then
    row "rehearsal: ctest -R test-gpu-" "$n_skip tests skipped as they must without a GPU (${why:-no reason printed})"
  else
    row "rehearsal: ctest -R test-gpu-" "FAIL: expected 3 skips (rehearsal-ctest-gpu.log)"
    status=1
  fi
  peer gpu "rehearsal: torch peer without a GPU" 1 60
  BENCH_DEVICE=cpu
  bench "rehearsal: bench step JSON (CPU backend)" configs/tiny.json device 1 || status=1
  BENCH_DEVICE=cuda
  say "stop: no GPU ($NO_GPU); every step from here needs one"
  what_not_run "no GPU ($NO_GPU)" "${GPU_STEPS[@]}"
  return $status
}

main() {
  local status=0
  say "zoffload gpu_check in $ROOT (budget $BUDGET s; logs in $LOGS)"
  echo "commit: $(git -C "$ROOT" log -1 --format='%h %s' 2>/dev/null | cut -c1-100)"
  if ! preflight; then
    what_not_run "the preflight failed" "build" "${GPU_STEPS[@]}"
    return 2
  fi
  if [[ -n $NO_GPU && ${ZO_CHECK_REHEARSE:-0} != 1 ]]; then
    echo "STOP: no GPU ($NO_GPU); nothing here can be checked on one (ZO_CHECK_REHEARSE=1 builds and rehearses)"
    what_not_run "no GPU ($NO_GPU)" "build" "${GPU_STEPS[@]}"
    return 3
  fi
  if ! deps; then
    row "dependencies" "FAILED: unpacking .debs/ or resolving its libraries (gpu_check.log)"
    what_not_run "dependencies failed" "${GPU_STEPS[@]}"
    return 1
  fi
  # For reruns by hand and benchmarks/rehearse-bare.sh's proof: the loader path every run gets.
  echo "$RUN_LD_LIBRARY_PATH" >"$LOGS/run-ld-library-path.txt"
  if ! build; then
    what_not_run "the build failed" "${GPU_STEPS[@]}"
    return 1
  fi
  if [[ -n $NO_GPU ]]; then
    rehearse || return 1
    row "result" "no GPU step ran (rehearsal only): exit 3"
    return 3
  fi
  # The ops first, synchronized after every op: a failure names its kernel.
  ctest_step "gpu op parity (ZO_CUDA_SYNC=1)" '^test-gpu-backend-ops$' 150 ZO_CUDA_SYNC=1 || status=1
  ctest_step "gpu training tests" '^test-gpu-train$' 200 || status=1
  SKIP_OK=1 # without NCCL next to the toolkit the build has no device collectives
  ctest_step "gpu nccl test (one rank)" '^test-gpu-nccl$' 40 || status=1
  SKIP_OK=0
  local ll="configs/llama-1b.json" llsets=(--set gradient_accumulation_steps=4 --set data.seq_len=2048)
  local gsets=(--set train_micro_batch_size_per_gpu="$B124" --set data.seq_len=1024 --set gradient_accumulation_steps=1)
  bench "zoffload GPT-2 124M, all on GPU" configs/gpt2-124m.json device 3 "${gsets[@]}" || status=1
  bench "zoffload GPT-2 124M, optimizer on cpu" configs/gpt2-124m.json opt-cpu 2 "${gsets[@]}" || status=1
  peer gpu "torch GPT-2 124M, all on GPU" 30 90 || status=1
  peer cpu-offload "torch GPT-2 124M, FSDP2 CPU offload" 40 120 || status=1
  bench "zoffload GPT-2 124M, params + optimizer on cpu" configs/gpt2-124m.json params-cpu 2 "${gsets[@]}" || status=1
  bench "zoffload Llama 1B, all on GPU" "$ll" device 1 "${llsets[@]}" || status=1
  bench "zoffload Llama 1B, optimizer on cpu" "$ll" opt-cpu 1 "${llsets[@]}" || status=1
  bench "zoffload Llama 1B, params + optimizer on cpu" "$ll" params-cpu 1 "${llsets[@]}" || status=1
  bench "zoffload GPT-2 124M, optimizer on nvme" configs/gpt2-124m.json opt-nvme 2 "${gsets[@]}" || status=1
  gemm || status=1
  side_by_side
  if ((status == 0 && RAN_GPU == 0)); then
    row "result" "no GPU step ran (every one out of time): exit 3"
    return 3
  fi
  return $status
}

summary() {
  row "total time" "$(elapsed) s of ${BUDGET} s"
  {
    printf '\n=== zoffload gpu_check summary (%s)\n' "${GPU:-no GPU}"
    printf '%s\n' "${ROWS[@]}"
  } | tee "$LOGS/summary.txt"
}

# Everything to the terminal and to gpu_check.log.
exec > >(tee "$LOGS/gpu_check.log") 2>&1
TEE=$!
main "$@"
rc=$?
summary
exec >&- 2>&-
wait "$TEE" 2>/dev/null
exit $rc
