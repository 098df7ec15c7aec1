#!/usr/bin/env bash
# benchmarks/nvme-direct.sh, which gpu_check.sh asks before its
# optimizer-on-NVMe benchmark: on a file system without O_DIRECT (a ramfs,
# mounted in a private user and mount namespace) it says "not run: no
# O_DIRECT under DIR: <reason>" and exits 77, a skip, never a failure; where
# O_DIRECT works (the truth: Python's os.open with O_DIRECT in the same
# directory) it says so and exits 0; a missing directory exits 1 naming it.
# Skipped (77, with the reason) where no ramfs can be mounted here (no
# unshare, or user namespaces refused): the other checks run first.
# Usage: test-nvme-direct.sh ZOFFLOAD_BINARY REPO_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1
repo=$2
probe="$repo/benchmarks/nvme-direct.sh"
cli_init nvdirect

# python3 DIR: "yes", or "no: <errno name>" (O_DIRECT, one aligned 4 KiB write).
truth() {
  python3 - "$1" <<'PY'
import errno, mmap, os, sys
path = os.path.join(sys.argv[1], ".truth-probe")
try:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_DIRECT, 0o600)
except OSError as e:
    print("no:", errno.errorcode.get(e.errno, e.errno))
    sys.exit(0)
try:
    buf = mmap.mmap(-1, 4096)  # page-aligned
    buf.write(b"\x5a" * 4096)
    os.write(fd, buf)
    print("yes")
except OSError as e:
    print("no:", errno.errorcode.get(e.errno, e.errno))
finally:
    os.close(fd)
    os.unlink(path)
PY
}

# A directory here: the probe agrees with Python.
mkdir -p "$tmp/disk"
want=$(truth "$tmp/disk")
out=$(bash "$probe" "$bin" "$tmp/disk" 2>&1)
rc=$?
if [[ $want == yes ]]; then
  check "O_DIRECT works under $tmp/disk (python): exit 0" "[[ $rc -eq 0 && \"\$out\" == \"O_DIRECT under $tmp/disk\" ]]"
else
  check "no O_DIRECT under $tmp/disk (python: $want): exit 77" "[[ $rc -eq 77 && \"\$out\" == 'not run: no O_DIRECT under '* ]]"
fi
[[ -z $(ls -A "$tmp/disk") ]] && ok || bad "the probe left files in $tmp/disk: $(ls -A "$tmp/disk")"

# A missing directory: exit 1, named.
out=$(bash "$probe" "$bin" "$tmp/missing" 2>&1)
rc=$?
check "missing directory: exit 1 naming it" "[[ $rc -eq 1 && \"\$out\" == *'$tmp/missing is not a directory'* ]]"
[[ ! -e $tmp/missing ]] && ok || bad "the probe created $tmp/missing"

# A ramfs (no O_DIRECT on any kernel) in a private mount namespace.
mkdir -p "$tmp/ram"
if ! command -v unshare >/dev/null || ! unshare -rm sh -c "mount -t ramfs none '$tmp/ram'" 2>"$tmp/unshare.err"; then
  cli_report nvme-direct || exit 1
  echo "SKIP: cannot mount a ramfs in a user namespace here ($(command -v unshare >/dev/null && head -c 200 "$tmp/unshare.err" || echo 'no unshare')): the no-O_DIRECT case is untested"
  exit 77
fi
out=$(unshare -rm bash -c '
  mount -t ramfs none "$1" || exit 90
  python3 -c "
import os, sys
try:
    os.close(os.open(sys.argv[1] + \"/.t\", os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600))
    print(\"truth: yes\")
except OSError as e:
    print(\"truth: no\", e.strerror)
" "$1"
  bash "$2" "$3" "$1"
  echo "rc=$?"' nvdirect "$tmp/ram" "$probe" "$bin" 2>&1)
echo "$out" | sed 's/^/  ramfs: /'
check "ramfs: python cannot open O_DIRECT there (the condition holds)" "[[ \"\$out\" == *'truth: no'* ]]"
check "ramfs: not run with the reason" \
  "[[ \"\$out\" == *'not run: no O_DIRECT under $tmp/ram: open: Invalid argument'* ]]"
check "ramfs: exit 77 (a skip)" "[[ \"\$out\" == *'rc=77'* ]]"
cli_report nvme-direct
