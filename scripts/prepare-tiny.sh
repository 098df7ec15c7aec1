#!/usr/bin/env bash
# Builds the tiny byte-level corpus used by the CPU demo config and the tests:
# data/tiny/train.bin and data/tiny/val.bin (flat uint16 tokens, one per byte)
# from the plain-text fortune files of Debian's `fortunes` package, sorted by
# name, the last 5% of the byte stream as val.
#
#   scripts/prepare-tiny.sh ZOFFLOAD_BINARY [OUT_DIR]     (OUT_DIR: data/tiny)
#
# Runs `zoffload prepare`; if the binary has no prepare command it converts
# with perl instead, byte for byte the same output. Skips the work when both
# outputs exist and are newer than every input. Exits 1 with a hint when the
# fortunes package is missing.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 ZOFFLOAD_BINARY [OUT_DIR]" >&2
  exit 2
fi
bin=$1
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out_dir=${2:-$repo/data/tiny}
fortunes=/usr/share/games/fortunes
val_fraction=0.05

# Plain-text files only: no .dat indexes, no .u8 symlinks, no symlinks at all.
mapfile -t inputs < <(find "$fortunes" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' 2>/dev/null | LC_ALL=C sort)
if [[ ${#inputs[@]} -eq 0 ]]; then
  echo "prepare-tiny: no fortune files in $fortunes: install them with 'apt-get install fortunes'" >&2
  exit 1
fi

train=$out_dir/train.bin
val=$out_dir/val.bin
up_to_date=1
for f in "$train" "$val"; do
  [[ -f $f ]] || up_to_date=0
done
if [[ $up_to_date -eq 1 ]]; then
  for f in "${inputs[@]}"; do
    if [[ ! $train -nt $f || ! $val -nt $f ]]; then
      up_to_date=0
      break
    fi
  done
fi
if [[ $up_to_date -eq 1 ]]; then
  echo "prepare-tiny: $train and $val are up to date"
  exit 0
fi

mkdir -p "$out_dir"
total=$(cat "${inputs[@]}" | wc -c)
# Same double arithmetic as zo_data_prepare: n_val = floor(total * fraction).
n_val=$(awk -v n="$total" -v f="$val_fraction" 'BEGIN { printf "%d", int(n * f) }')
n_train=$((total - n_val))

has_prepare=0
if "$bin" prepare --help >/dev/null 2>&1 || "$bin" --help 2>&1 | grep -qw prepare; then
  has_prepare=1
fi

if [[ $has_prepare -eq 1 ]]; then
  args=(prepare --out-train "$train" --out-val "$val")
  if "$bin" prepare --help 2>&1 | grep -q -- '--val-fraction'; then
    args+=(--val-fraction "$val_fraction")
  fi
  "$bin" "${args[@]}" "${inputs[@]}"
else
  echo "prepare-tiny: $bin has no 'prepare' command; converting with perl" >&2
  # Writes bytes [offset, offset+count) of the inputs' concatenation as uint16.
  slice_u16() {
    perl -e 'my ($off, $len) = splice(@ARGV, 0, 2); my $s = "";
             for my $f (@ARGV) { open(my $h, "<:raw", $f) or die "$f: $!"; local $/; $s .= <$h>; }
             binmode STDOUT;
             for (my $k = 0; $k < $len; $k += 65536) {
               my $n = $len - $k < 65536 ? $len - $k : 65536;
               print pack("v*", unpack("C*", substr($s, $off + $k, $n)));
             }' "$@"
  }
  tmp_train=$(mktemp "$train.tmp.XXXXXX")
  tmp_val=$(mktemp "$val.tmp.XXXXXX")
  trap 'rm -f "$tmp_train" "$tmp_val"' EXIT
  slice_u16 0 "$n_train" "${inputs[@]}" >"$tmp_train"
  slice_u16 "$n_train" "$n_val" "${inputs[@]}" >"$tmp_val"
  chmod 0644 "$tmp_train" "$tmp_val"
  sync "$tmp_train" "$tmp_val"
  mv -f "$tmp_train" "$train"
  mv -f "$tmp_val" "$val"
  sync "$out_dir"
  trap - EXIT
fi

# Whoever wrote them, the outputs must hold exactly the expected tokens.
got_train=$(($(wc -c <"$train") / 2))
got_val=$(($(wc -c <"$val") / 2))
if [[ $got_train -ne $n_train || $got_val -ne $n_val ]]; then
  echo "prepare-tiny: expected $n_train train and $n_val val tokens, got $got_train and $got_val" >&2
  exit 1
fi
echo "prepare-tiny: ${#inputs[@]} files, $total bytes -> $train ($n_train tokens), $val ($n_val tokens)"
