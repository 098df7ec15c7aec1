#!/usr/bin/env bash
# Whether the NVMe-tier benchmark can measure the disk under DIR: O_DIRECT
# must work there (`zoffload env --nvme-path DIR` probes it). Without it the
# tier falls back to buffered I/O, and a timing would measure the page cache,
# not the drive: benchmarks/gpu_check.sh reports its optimizer-on-NVMe row as
# "not run: <reason>" instead of running it or failing.
#   benchmarks/nvme-direct.sh ZOFFLOAD DIR
# Prints "O_DIRECT under DIR" and exits 0 when it works; prints
# "not run: no O_DIRECT under DIR: <the probe's reason>" and exits 77 (a
# skip) when it does not; exits 1 naming the problem when it cannot tell (no
# such directory, zoffload failing). tests/cli/test-nvme-direct.sh tests it
# on a ramfs, which refuses O_DIRECT.
set -uo pipefail
if (($# != 2)); then
  echo "usage: benchmarks/nvme-direct.sh ZOFFLOAD DIR" >&2
  exit 2
fi
bin=$1 dir=$2
if [[ ! -d $dir ]]; then
  echo "nvme-direct: $dir is not a directory" >&2
  exit 1
fi
out=$("$bin" env --nvme-path "$dir" 2>&1)
rc=$?
line=$(grep -m1 '^  O_DIRECT ' <<<"$out")
if ((rc != 0)) || [[ -z $line ]]; then
  echo "nvme-direct: zoffload env --nvme-path $dir exited $rc without an O_DIRECT line: $(tail -n 3 <<<"$out")" >&2
  exit 1
fi
answer=$(sed -E 's/^  O_DIRECT +//' <<<"$line")
if [[ $answer == yes ]]; then
  echo "O_DIRECT under $dir"
  exit 0
fi
why=${answer#no: }
echo "not run: no O_DIRECT under $dir: ${why% (the NVMe tier falls back*} (a buffered run would time the page cache, not the drive)"
exit 77
