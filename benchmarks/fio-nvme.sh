#!/usr/bin/env bash
# The NVMe tier against fio on the same file system. Each round runs fio
# (io_uring, O_DIRECT, 1 MiB blocks, queue depth 32, one job) writing then
# reading a file, then bench-nvme doing the same through zo_nvme (block 1 MiB,
# queue depth 32, CRC32C included), side by side and in alternating order so
# that the machine's drift hits both alike. Prints GB/s (1e9 bytes/s) per round and a table of means
# and ratios (ours / fio); the target is >= 0.90 in both directions.
#   benchmarks/fio-nvme.sh DIR [BYTES] [ROUNDS] [BENCH_NVME]
# BYTES defaults to 2 GiB (a plain byte count or a K/M/G suffix), ROUNDS to 3,
# BENCH_NVME to build/benchmarks/bench-nvme. Needs fio (apt-get install fio)
# and python3. Exit 77 when fio is missing.
set -euo pipefail

dir=${1:?usage: $0 DIR [BYTES] [ROUNDS] [BENCH_NVME]}
bytes=${2:-2G}
rounds=${3:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
bench=${4:-$root/build/benchmarks/bench-nvme}

if ! command -v fio >/dev/null; then
  echo "fio not found: apt-get install fio" >&2
  exit 77
fi
[[ -x $bench ]] || { echo "bench-nvme not found at $bench: build it or pass its path" >&2; exit 1; }
mkdir -p "$dir"

# K/M/G suffixes are powers of 1024 for both tools.
nbytes=$(python3 -c '
import sys, re
m = re.fullmatch(r"(\d+)([kKmMgG]?)(i?B)?", sys.argv[1])
if not m: sys.exit("bad size: " + sys.argv[1])
print(int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()])' "$bytes")

file=$dir/fio-nvme.$$
trap 'rm -f "$file"' EXIT

# GB/s of one fio job; rw is write or read.
fio_gbs() {
  fio --name=nvme --filename="$file" --ioengine=io_uring --direct=1 --bs=1M --iodepth=32 \
      --numjobs=1 --rw="$1" --size="$nbytes" --output-format=json |
    python3 -c 'import json, sys; j = json.load(sys.stdin)["jobs"][0]
print("%.4f" % (j[sys.argv[1]]["bw_bytes"] / 1e9))' "$1"
}

printf '%-6s %12s %12s %12s %12s\n' round fio_write ours_write fio_read ours_read
fw=() ow=() fr=() or=()
run_fio() {
  rm -f "$file"
  w=$(fio_gbs write)
  rd=$(fio_gbs read)
  rm -f "$file"
}
run_ours() {
  out=$("$bench" --path "$dir" --bytes "$nbytes" --block 1M --qd 32 --json)
  json=$(tail -n 1 <<<"$out")
}
for ((r = 1; r <= rounds; r++)); do
  # Odd rounds run fio first, even rounds ours first: the disk's bursts and
  # write-back after a run then favour neither side.
  if ((r % 2)); then run_fio; run_ours; else run_ours; run_fio; fi
  ours_w=$(python3 -c 'import json, sys; print("%.4f" % json.loads(sys.argv[1])["write_gb_s"])' "$json")
  ours_r=$(python3 -c 'import json, sys; print("%.4f" % json.loads(sys.argv[1])["read_gb_s"])' "$json")
  printf '%-6s %12s %12s %12s %12s\n' "$r" "$w" "$ours_w" "$rd" "$ours_r"
  fw+=("$w") ow+=("$ours_w") fr+=("$rd") or+=("$ours_r")
done
head -n 1 <<<"$out"

python3 - "${fw[*]}" "${ow[*]}" "${fr[*]}" "${or[*]}" <<'EOF'
import statistics, sys
fw, ow, fr, orr = ([float(x) for x in a.split()] for a in sys.argv[1:5])
med = statistics.median
print()
print("ratio = ours / fio, paired within each round; medians are robust to the disk's bursts")
print("%-10s %10s %10s %18s %s" % ("direction", "fio GB/s", "ours GB/s", "median ratio", "per-round ratios"))
for name, f, o in (("write", fw, ow), ("read", fr, orr)):
    ratios = [b / a for a, b in zip(f, o)]
    r = med(ratios)
    print("%-10s %10.3f %10.3f %12.3f %-5s %s" % (name, med(f), med(o), r,
          "ok" if r >= 0.90 else "BELOW", " ".join("%.2f" % x for x in ratios)))
EOF
