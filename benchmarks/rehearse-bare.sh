#!/usr/bin/env bash
# The rehearsal of the first lent GPU run's build on a bare machine, here,
# from .debs/ alone (issue 51). It makes a clean Debian 12 root with
# mmdebstrap (minbase plus only gcc, g++, cmake, ninja-build and python3:
# what a lent machine has besides the CUDA toolkit, and none of the Debian
# development packages the build needs), fills .debs/ on this machine with
# benchmarks/collect-debs.sh, copies the working tree (tracked and untracked
# files git does not ignore; no build/) and .debs/ into the root, and runs
# benchmarks/gpu_check.sh's own path inside it with ZO_CHECK_REHEARSE=1 (its
# documented no-GPU mode): the preflight, .debs/ unpacked into the private
# prefix, configure and build (this machine's CUDA toolkit bind-mounted
# read-only, so the CUDA backend compiles for sm_90 as on the GPU), then its
# CPU steps (the GPU tests skip with their reason, `zoffload bench step` on
# the CPU backend gives its JSON).
# Inside the root: its own mount namespace (the bind mounts end with it, so
# nothing is left mounted even when the rehearsal is killed) and its own
# network namespace (no network, as on a lent machine). Afterwards, in the
# root, it proves the system's packages were not used: dpkg lists none of
# debs.txt's development packages nor protoc-c's or pkgconf's, every
# library and include path configure found lies under the prefix (or the
# toolkit), and with the runs' loader path every carried library of
# zoffload resolves under the prefix.
# Prints the timings and .debs/'s size; exits 0 only when the build and the
# CPU steps are green and the proof holds, 1 otherwise, 2 when it cannot run
# here (not root, no mmdebstrap/unshare/chroot).
#   benchmarks/rehearse-bare.sh      needs root and Debian's mirrors (network)
# Not part of scripts/test.sh: it needs the network and about 5 minutes on
# 2 cores (2 when .debs/ and the base are cached). The root's base is cached
# as .rehearse/base-bookworm.tar (git-ignored; remade when the package list
# below changes); every run unpacks it afresh into .rehearse/root.
# Environment:
# ZO_REHEARSE_MIRROR (default http://deb.debian.org/debian),
# ZO_REHEARSE_BUDGET (gpu_check.sh's ZO_CHECK_BUDGET inside, default 2400 s:
# this machine has 2 cores, a lent one 16).
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
IN_ROOT=/work/zoffload # where the tree lies inside the root
BASE_PKGS="gcc,g++,cmake,ninja-build,python3"
T0=$(date +%s)
since() { echo $(($(date +%s) - $1)); }
say() { printf '\n=== %s (t=%ds)\n' "$*" "$(since "$T0")"; }

# ---- inside the root ---------------------------------------------------------------------
# inside_before: what the root holds, and the proof that none of the
# development packages the build needs is installed.
inside_before() {
  say "the root: $(sed -n 's/^PRETTY_NAME="\(.*\)"$/\1/p' /etc/os-release), $(dpkg-query -W -f '${Status}\n' | grep -c 'install ok installed') packages"
  local t
  for t in gcc g++ cmake ninja python3 make pkg-config nvcc; do
    printf '  %-10s %s\n' "$t" "$(command -v "$t" >/dev/null && "$t" --version 2>&1 | head -n1 || echo 'not installed')"
  done
  local p bad="" base=""
  for p in $(bash benchmarks/collect-debs.sh --list); do
    dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || continue
    case $p in
      *-dev | protobuf-c-compiler | pkgconf* | libpkgconf3) bad="$bad $p" ;;
      *) base="$base $p" ;;
    esac
  done
  echo "debs.txt packages the root's base already has (runtime libraries gcc and minbase bring):${base:- none}"
  if [[ -n $bad ]]; then
    echo "REHEARSAL INVALID: the root has the system's$bad installed"
    return 1
  fi
  echo "none of debs.txt's development packages, protobuf-c-compiler or pkgconf is installed in the root (dpkg)"
  return 0
}

# inside_after BUILD: what configure found (every library and include
# directory of zoffload's own lookups, pkg-config's included) lies under the
# prefix or the toolkit; with the runs' loader path every carried library of
# zoffload resolves under the prefix, none elsewhere, none missing.
inside_after() {
  local build=$1 prefix=$1-deps zo=$1/zoffload path key val n=0 bad="" carried
  carried='openblas|dnnl|OpenCL|jansson|pcre2|utf8proc|protobuf|uring|hwloc|isal|gfortran|quadmath|udev|libz\.'
  say "proof: what configure found, and zoffload's libraries"
  if [[ ! -x $zo ]]; then
    echo "no $zo (the build did not make it): nothing to prove"
    return 1
  fi
  while IFS='=' read -r key val; do
    n=$((n + 1))
    case $val in
      "$prefix"/* | /usr/local/cuda/*) ;;
      *) bad="$bad; configure took ${key%%:*}=$val, outside the prefix" ;;
    esac
  done < <(grep -E '^(pkgcfg_lib_[A-Za-z0-9_]+|ZO_[A-Z0-9_]+|ZLIB_[A-Z_]+):(FILEPATH|PATH|UNINITIALIZED)=/' \
             "$build/CMakeCache.txt" | grep -v -- '-NOTFOUND$')
  echo "configure: $n library and include paths (pkg-config's, ZO_*, ZLIB_*), each under the prefix or /usr/local/cuda"
  path=$(cat "$build/logs/run-ld-library-path.txt" 2>/dev/null) || {
    echo "no $build/logs/run-ld-library-path.txt (gpu_check.sh did not get past its dependencies)"
    return 1
  }
  while read -r lib _ where _; do
    [[ $lib =~ $carried ]] || continue
    printf '  %-20s %-80s system copy: %s\n' "$lib" "$where" \
      "$(ldconfig -p | awk -v l="$lib" '$1 == l && !n {print $NF; n = 1} END {if (!n) print "none"}')"
    [[ $where == "$prefix"/* ]] || bad="$bad; $lib resolves to $where, not under $prefix"
  done < <(LD_LIBRARY_PATH=$path ldd "$zo" 2>&1)
  val=$(LD_LIBRARY_PATH=$path ldd "$zo" 2>&1 | grep 'not found')
  [[ -z $val ]] || bad="$bad; not found with the runs' loader path: $val"
  if [[ -n $bad ]]; then
    echo "PROOF FAILED${bad}"
    return 1
  fi
  echo "every carried library of zoffload resolves under $prefix (the system copies are runtime libraries of the root's base)"
  return 0
}

inside() {
  cd "$IN_ROOT" || return 1
  inside_before || return 1
  local build=$IN_ROOT/build/gpu-check t rc
  t=$(date +%s)
  say "benchmarks/gpu_check.sh with ZO_CHECK_REHEARSE=1 (budget ${ZO_REHEARSE_BUDGET:-2400} s)"
  ZO_CHECK_REHEARSE=1 ZO_CHECK_BUDGET=${ZO_REHEARSE_BUDGET:-2400} ZO_CHECK_BUILD_TIMEOUT=1500 \
    ZO_CHECK_BUILD=$build bash benchmarks/gpu_check.sh
  rc=$?
  echo "gpu_check.sh: exit $rc in $(since "$t") s"
  # Exit 3 with the rehearsal's result row: built, and every CPU step passed.
  if ((rc != 3)) || ! grep -q '^result .*rehearsal only' "$build/logs/summary.txt"; then
    echo "REHEARSAL FAILED: gpu_check.sh exit $rc (3 with 'rehearsal only' means green; logs in $build/logs)"
    inside_after "$build"
    return 1
  fi
  inside_after "$build"
}

# ---- on this machine ---------------------------------------------------------------------
CACHE=$ROOT/.rehearse
R=$CACHE/root
MIRROR=${ZO_REHEARSE_MIRROR:-http://deb.debian.org/debian}
CUDA=""                                # the toolkit's real directory, bind-mounted
declare -a TIMES=()                    # "what|how long" for the table at the end
timed() { TIMES+=("$1|$2"); }

need() {
  if ! command -v "$1" >/dev/null; then
    echo "rehearse-bare: $1 not found ($2)" >&2
    exit 2
  fi
}

# collect: .debs/ filled on this machine; its size.
collect() {
  say ".debs/ (benchmarks/collect-debs.sh on this machine)"
  local t n size
  t=$(date +%s)
  if ! bash benchmarks/collect-debs.sh >"$CACHE/collect-debs.log" 2>&1; then
    tail -n 5 "$CACHE/collect-debs.log"
    echo "REHEARSAL FAILED: collect-debs.sh (.rehearse/collect-debs.log)"
    return 1
  fi
  n=$(compgen -G ".debs/*.deb" | wc -l)
  size="$(du -sh .debs | cut -f1) ($(du -sb .debs | cut -f1) bytes)"
  echo "$n packages, $size, in $(since "$t") s"
  timed ".debs/ ($n packages, $size)" "$(since "$t") s (collect-debs.sh; downloads only what is missing)"
}

# base: the root's base as a tar, made by mmdebstrap or taken from the cache.
base() {
  say "the root's base: Debian 12 minbase + $BASE_PKGS"
  local t stamp="bookworm minbase $BASE_PKGS $MIRROR" how=cached
  t=$(date +%s)
  if [[ -f $CACHE/base-bookworm.tar && $(cat "$CACHE/base-bookworm.stamp" 2>/dev/null) == "$stamp" ]]; then
    echo "cached: .rehearse/base-bookworm.tar"
  else
    how=mmdebstrap
    rm -rf "$CACHE/base-bookworm.tar" "$CACHE/base-bookworm.tar.part" "$CACHE/base-bookworm.stamp"
    # --format=tar: the .part name has no extension mmdebstrap would read a format from.
    if ! nice mmdebstrap --format=tar --variant=minbase --include="$BASE_PKGS" bookworm "$CACHE/base-bookworm.tar.part" \
        "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" \
        "deb ${MIRROR%/debian}/debian-security bookworm-security main" >"$CACHE/mmdebstrap.log" 2>&1; then
      tail -n 5 "$CACHE/mmdebstrap.log"
      echo "REHEARSAL FAILED: mmdebstrap (.rehearse/mmdebstrap.log)"
      return 1
    fi
    mv "$CACHE/base-bookworm.tar.part" "$CACHE/base-bookworm.tar"
    echo "$stamp" >"$CACHE/base-bookworm.stamp"
  fi
  echo "$(du -sh "$CACHE/base-bookworm.tar" | cut -f1) in $(since "$t") s"
  timed "root's base ($how)" "$(since "$t") s"
}

# fresh_root: the base unpacked afresh, the working tree (tracked and
# untracked files git does not ignore) and .debs/ copied in, the mount
# point for the toolkit.
fresh_root() {
  say "a fresh root in .rehearse/root: the base, the working tree, .debs/"
  local t
  t=$(date +%s)
  if findmnt -rn -o TARGET | grep -q "^$R/"; then
    echo "REHEARSAL FAILED: something is still mounted under $R"
    return 1
  fi
  if ! { rm -rf "$R" && mkdir -p "$R$IN_ROOT" && tar -xf "$CACHE/base-bookworm.tar" -C "$R"; }; then
    echo "REHEARSAL FAILED: cannot unpack the base into $R"
    return 1
  fi
  if ! git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do [[ -e $f ]] && printf '%s\0' "$f"; done |
      tar --null -T - -cf - | tar -xf - -C "$R$IN_ROOT"; then
    echo "REHEARSAL FAILED: cannot copy the working tree"
    return 1
  fi
  cp -r .debs "$R$IN_ROOT/.debs" || return 1
  CUDA=$(readlink -f /usr/local/cuda 2>/dev/null)
  if [[ -d $CUDA ]]; then
    mkdir -p "$R$CUDA"
    [[ $CUDA != /usr/local/cuda ]] && ln -sfn "$CUDA" "$R/usr/local/cuda"
    echo "CUDA toolkit: $CUDA, bind-mounted read-only"
  else
    CUDA=""
    echo "no CUDA toolkit here: the preflight inside will stop on nvcc"
  fi
  echo "in $(since "$t") s"
  timed "fresh root + working tree + .debs/" "$(since "$t") s"
}

# in_root: this script's --inside in the root, in its own mount namespace
# (the mounts end with it, however it ends) and network namespace (no network).
in_root() {
  say "inside the root (own mount and network namespaces, chroot)"
  local t rc
  t=$(date +%s)
  # The inner script is single-quoted: its variables are its own arguments.
  # shellcheck disable=SC2016
  unshare --mount --net --fork -- bash -c '
    set -e
    R=$1 CUDA=$2 IN_ROOT=$3
    mount --make-rprivate /
    mount -t proc proc "$R/proc"
    mount --rbind /dev "$R/dev"
    mount --rbind /sys "$R/sys"
    mount -o remount,bind,ro "$R/sys"
    mount -t tmpfs tmpfs "$R/tmp"
    if [[ -n $CUDA ]]; then
      mount --bind "$CUDA" "$R$CUDA"
      mount -o remount,bind,ro "$R$CUDA"
    fi
    exec chroot "$R" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      HOME=/root LANG=C.UTF-8 ${ZO_REHEARSE_BUDGET:+ZO_REHEARSE_BUDGET=$ZO_REHEARSE_BUDGET} \
      bash "$IN_ROOT/benchmarks/rehearse-bare.sh" --inside
  ' rehearse "$R" "$CUDA" "$IN_ROOT"
  rc=$?
  timed "inside: preflight, deps, build, CPU steps, proof" "$(since "$t") s on $(nproc) CPUs"
  if findmnt -rn -o TARGET | grep -q "^$R/"; then
    echo "REHEARSAL FAILED: mounts remain under $R"
    rc=1
  fi
  cp "$R$IN_ROOT/build/gpu-check/logs/summary.txt" "$CACHE/summary.txt" 2>/dev/null
  return "$rc"
}

host() {
  if (($(id -u) != 0)); then
    echo "rehearse-bare: must run as root (mmdebstrap, chroot, mounts), not uid $(id -u)" >&2
    return 2
  fi
  need mmdebstrap "apt-get install mmdebstrap"
  need unshare "util-linux"
  need chroot "coreutils"
  need git "the working tree is copied by git ls-files"
  mkdir -p "$CACHE"
  say "zoffload bare-machine rehearsal in $ROOT"
  echo "commit: $(git log -1 --format='%h %s' | cut -c1-100)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "host: $(uname -srm), $(nproc) CPUs"
  local rc=0 row
  collect && base && fresh_root && in_root || rc=1
  say "rehearsal timings"
  for row in "${TIMES[@]}" "total|$(since "$T0") s"; do
    printf '%-52s %s\n' "${row%%|*}" "${row#*|}"
  done
  if ((rc == 0)); then
    echo "REHEARSAL GREEN: built and ran gpu_check.sh's CPU steps from .debs/ alone"
    return 0
  fi
  echo "REHEARSAL FAILED (logs in .rehearse/root$IN_ROOT/build/gpu-check/logs)"
  return 1
}

# One compound command, read whole before it runs: editing this file during a
# rehearsal cannot change the rehearsal.
{
  if [[ ${1:-} == --inside ]]; then inside; else host; fi
  exit $?
}
