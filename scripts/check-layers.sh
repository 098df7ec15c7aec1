#!/usr/bin/env bash
# Keeps the dependency direction kernels <- offload <- engine true at the
# #include level: a file under kernels/ includes no offload or engine header,
# a file under offload/ no engine header, and a public header none of a layer
# above its own. A public header's layer is the folder it is in
# (include/kernels/zo, include/offload/zo, include/engine/zo); no table is
# kept by hand. Relative includes ("../../engine/x.h") are resolved and judged
# by the folder they land in.
# engine/, tests/ and benchmarks/ may include anything. Run by
# scripts/test.sh before the build; exits 1 naming file:line and the include.
# Usage: scripts/check-layers.sh
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A rank=([kernels]=0 [offload]=1 [engine]=2 [top]=3)

# A public header's layer is its folder: include/kernels/zo, include/offload/zo,
# include/engine/zo (each library target adds only its own layer's folder to the
# include path, so the compiler refuses the rest too). A header anywhere else
# fails the check.
fail=0
while IFS= read -r -d '' h; do
  case "$h" in
    include/kernels/zo/* | include/offload/zo/* | include/engine/zo/*) ;;
    *) echo "$h: a public header belongs in include/kernels/zo, include/offload/zo or include/engine/zo"; fail=1 ;;
  esac
done < <(find include -type f -name '*.h' -print0)

# Where "zo/NAME" resolves: the layer folder holding it ("" when none does).
header_path() {
  local l
  for l in kernels offload engine; do
    [[ -f include/$l/$1 ]] && { echo "include/$l/$1"; return; }
  done
}

# The layer of repository path p (relative to the root).
layer_of_path() {
  case "$1" in
    include/kernels/*) echo kernels ;;
    include/offload/*) echo offload ;;
    include/engine/*) echo engine ;;
    kernels/*) echo kernels ;;
    offload/*) echo offload ;;
    engine/*) echo engine ;;
    *) echo top ;;
  esac
}

n_files=0
while IFS= read -r -d '' f; do
  n_files=$((n_files + 1))
  own=$(layer_of_path "$f")
  while IFS=: read -r line text; do
    inc=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^>"]+)[>"].*/\1/' <<<"$text")
    if [[ $inc == zo/* ]]; then
      target=$(header_path "$inc")
      if [[ -z $target ]]; then
        echo "$f:$line: includes \"$inc\": no such public header in include/{kernels,offload,engine}/zo"
        fail=1
        continue
      fi
    elif [[ $text =~ \"  ]]; then
      # A quoted include is looked up beside the including file first.
      target=$(realpath -m --relative-to=. "$(dirname "$f")/$inc")
      [[ -e $target || $inc == */* ]] || continue # found on the include path: not ours
    else
      continue # <system header>
    fi
    to=$(layer_of_path "$target")
    if ((rank[$to] > rank[$own])); then
      echo "$f:$line: $own file includes \"$inc\" ($to layer): kernels <- offload <- engine"
      fail=1
    fi
  done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' "$f" || true)
done < <(find kernels offload include -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0)

if ((fail)); then
  echo "check-layers: FAILED"
  exit 1
fi
echo "check-layers: ok ($n_files files)"
