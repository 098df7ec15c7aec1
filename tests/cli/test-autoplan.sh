#!/usr/bin/env bash
# The planner that chooses, from the command line (planner only, nothing
# trains but one refused run): plan --auto prints a ranked table whose rows
# carry --set lines, --json ends with a JSON list whose first candidate, fed
# back as --set lines, plans to the same bytes and fits; a calibration
# profile in the cache directory is used and named; without one the output
# says the rates are defaults; a plan that fits nowhere exits 1 naming the
# short tier; bench calibrate writes a profile plan then names; train refuses a plan larger than the machine's available memory
# before allocating it, with the bytes and the changes that fit, and a missing
# data file before anything else.
# Usage: test-autoplan.sh ZOFFLOAD_BINARY REPO_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1
repo=$2
cli_init autoplan
export XDG_CACHE_HOME="$tmp/cache"

mkdir -p "$tmp/nvme"
# GPT-2 124M in 1 GiB of device: small enough for any test machine's memory, which plan checks too.
g15="$repo/configs/gpt2-124m.json"
expect 0 "defaults for the cpu backend" defaults -- plan "$g15" --auto --set engine.gpu_memory_budget=1GiB \
  --set engine.device=cpu --nvme-path "$tmp/nvme"
check ranked "grep -q '^    1 ' '$tmp/defaults.out' && grep -q '^      --set ' '$tmp/defaults.out'"
check bottleneck "grep -Eq '^    1 .*(compute|copies|CPU optimizer|NVMe)' '$tmp/defaults.out'"

# --json: the last line is the list, best first; the first candidate's sets plan to a fit.
expect 0 "predicted_step_ms" json -- plan "$g15" --auto --json --set engine.gpu_memory_budget=1GiB \
  --set engine.device=cpu --nvme-path "$tmp/nvme"
last=$(tail -1 "$tmp/json.out")
check json-list "[[ '$last' == '[{\"rank\": 1, '* ]]"
for key in sets predicted_step_ms device_bytes host_bytes nvme_bytes; do
  check "json-$key" "[[ '$last' == *'\"$key\": '* ]]"
done
sets=()
first=${last#*\"sets\": [}
first=${first%%]*}
IFS=',' read -ra items <<<"$first"
for it in "${items[@]}"; do
  it=${it# }
  it=${it#\"}
  it=${it%\"}
  sets+=(--set "$it")
done
dev=${last#*\"device_bytes\": }
dev=${dev%%,*}
expect 0 "fits" replan -- plan "$g15" --set engine.gpu_memory_budget=1GiB --set engine.device=cpu "${sets[@]}"
check replan-bytes "grep -q 'exact bytes: device $dev,' '$tmp/replan.out'"

# A profile in the cache directory is read and named (the defaults name where it would be).
path=$(grep -o 'no profile at [^:]*' "$tmp/defaults.out" | head -1)
path=${path#no profile at }
check profile-path "[[ '$path' == '$XDG_CACHE_HOME/zoffload/profile-'*'-cpu.json' ]]"
mkdir -p "$(dirname "$path")"
cat >"$path" <<'EOF'
{"machine": "test", "backend": "cpu", "widths": [256, 1024, 2048],
 "gemm_flops_fp32": [1e11, 1e11, 1e11], "gemm_flops_half": [1e11, 1e11, 1e11],
 "attn_flops_fp32": 1e10, "attn_flops_half": 1e10, "mem_bw": 5e9, "op_s": 1e-5, "h2d_bw": 5e9,
 "d2h_bw": 5e9, "adamw_params_per_s": 3e8, "adamw8bit_params_per_s": 3e8,
 "device_adamw_params_per_s": 3e8, "nvme_read_bw": 1e9, "nvme_write_bw": 1e9, "half_ok": true}
EOF
expect 0 "rates: $path" profile -- plan "$g15" --auto --set engine.device=cpu \
  --set engine.gpu_memory_budget=1GiB --nvme-path none
# A malformed profile: the defaults, and the output says why.
echo '{"gemm' >"$path"
expect 0 "is malformed" badprofile -- plan "$g15" --auto --set engine.device=cpu \
  --set engine.gpu_memory_budget=1GiB --nvme-path none

# bench calibrate measures this machine into the cache directory: every rate positive, the
# reference steps' scale a ratio near 1 (0.05..20 is what a load accepts), and plan names it.
rm -f "$path"
expect 0 "wrote $path" calibrate -- bench calibrate --nvme-path "$tmp/nvme"
python3 - "$path" >"$tmp/calibrate.check" 2>&1 <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
for k in ("gemm_flops_fp32", "gemm_flops_half", "attn_flops_fp32", "attn_flops_half", "compute_scale",
          "compute_scale_half"):
    assert len(p[k]) >= 2 and all(x > 0 for x in p[k]), k
assert all(0.05 < x < 20 for x in p["compute_scale"] + p["compute_scale_half"]), p["compute_scale"]
for k in ("mem_bw", "op_s", "h2d_bw", "d2h_bw", "adamw_params_per_s", "nvme_read_bw", "nvme_write_bw"):
    assert p[k] > 0, k
print("profile ok")
PY
check calibrate-profile "grep -q 'profile ok' '$tmp/calibrate.check' || { cat '$tmp/calibrate.check'; false; }"
expect 0 "rates: $path" calibrated -- plan "$g15" --auto --set engine.device=cpu \
  --set engine.gpu_memory_budget=1GiB --nvme-path none

# Fits nowhere: exit 1, the short tier and by how much.
expect 1 "no candidate fits" nowhere -- plan "$repo/configs/llama-8b.json" --auto --set engine.device=cpu \
  --set engine.gpu_memory_budget=1GiB --set engine.host_memory_budget=4GiB --nvme-path none
check nowhere-tier "grep -q 'host needs .* over its budget of 4.00 GiB' '$tmp/nowhere.out'"

# Another machine's plan (--host-ram, --nvme-free, --backend cuda): the issue's Llama-3-8B case,
# a 10 GiB GPU, 32 GiB of host, a 2 TB drive whose directory does not exist here.
w8=(plan "$repo/configs/llama-8b.json" --auto --set engine.gpu_memory_budget=10GiB --nvme-path "$tmp/absent/zo"
  --nvme-free 2TB --backend cuda)
expect 0 "given free space under $tmp/absent/zo" whatif -- "${w8[@]}" --set engine.host_memory_budget=32GiB \
  --host-ram 32GiB
check whatif-ranked "grep -q '^    1 ' '$tmp/whatif.out' && grep -q 'defaults for the cuda backend' '$tmp/whatif.out'"
# A card's size as the budget: the CUDA context's margin is left out of it; the run's time is printed.
check whatif-context "grep -q 'device budget 9.50 GiB engine.gpu_memory_budget less 512.00 MiB for the CUDA context' '$tmp/whatif.out'"
check whatif-runtime "grep -Eq '^  #1 for the config.s [0-9]+ steps: [0-9.]+ (s|min|h) predicted$' '$tmp/whatif.out'"
check whatif-untouched "[[ ! -e '$tmp/absent' ]]"
# 10 GiB of host leaves the parameters on NVMe only (Llama-3-8B's bf16 working copy is 15 GiB;
# the untied embedding's and the streamed LM head's, 0.98 GiB each, are in the host pool: 9 GiB fits nothing).
expect 0 "given by --host-ram" whatif8 -- "${w8[@]}" --host-ram 10GiB
check whatif8-params "grep '^    1 ' '$tmp/whatif8.out' | grep -q 'params nvme'"
check whatif8-noncpu "! grep -E '^    [0-9]+ ' '$tmp/whatif8.out' | head -4 | grep -q 'params cpu'"
expect 2 "engine.gpu_memory_budget" whatif-nobudget -- plan "$repo/configs/tiny.json" --auto --backend cuda \
  --set engine.device=cpu
expect 2 "is an option of plan --auto" whatif-noauto -- plan "$repo/configs/llama-8b.json" --nvme-free 1TB
expect 2 "valid: cpu, cuda" whatif-badbackend -- plan "$repo/configs/llama-8b.json" --auto --backend rocm
expect 2 "--nvme-free 2XB: need a size" whatif-badfree -- plan "$repo/configs/llama-8b.json" --auto --nvme-free 2XB
expect 2 "give one size" whatif-tworam -- plan "$repo/configs/llama-8b.json" --auto --host-ram 16GiB,32GiB \
  --set engine.device=cpu

# train: a missing data file is named before anything is allocated.
expect 1 "data.train = $tmp/missing.bin" missing -- train "$repo/configs/tiny.json" --set engine.device=cpu \
  --set data.train="$tmp/missing.bin" --set checkpoint.dir= --set log.metrics_path=
# train: a plan larger than the machine's available memory is refused with the bytes.
printf 'some text for a data file' >"$tmp/data.txt"
expect 1 "of host memory" host -- train "$repo/configs/llama-8b.json" --set engine.device=cpu \
  --set engine.gpu_memory_budget=100TiB --set data.train="$tmp/data.txt" --set data.val= \
  --set checkpoint.dir= --set log.metrics_path=
check host-bytes "grep -q 'but this machine gives' '$tmp/host.out' && grep -q 'plan CONFIG --auto' '$tmp/host.out'"

# train with engine.placement = "auto": the chosen --set lines and the effective config,
# written to the run directory, which loads back as is.
head -c 6000 "$repo/README.md" >"$tmp/text.txt"
expect 0 'auto plan (engine.placement = "auto")' trainauto -- train "$repo/configs/tiny.json" \
  --set engine.placement=auto --set steps=1 --set engine.device=cpu --set data.train="$tmp/text.txt" \
  --set data.format=text --set data.val= --set checkpoint.dir="$tmp/run" --set log.metrics_path= --set log.every=1
check auto-config "[[ -s '$tmp/run/auto-config.json' ]] && grep -q '\"placement\": \"config\"' '$tmp/run/auto-config.json'"
expect 0 '"train_micro_batch_size_per_gpu"' reload -- config "$tmp/run/auto-config.json"
# DeepSpeed's "auto" micro-batch with train_batch_size: only the split is chosen, product kept.
expect 0 'auto plan (train_micro_batch_size_per_gpu, gradient_accumulation_steps = "auto")' mbauto -- train "$repo/configs/tiny.json" --set train_micro_batch_size_per_gpu=auto \
  --set gradient_accumulation_steps=auto --set train_batch_size=16 --set steps=1 --set engine.device=cpu \
  --set data.train="$tmp/text.txt" --set data.format=text --set data.val= --set checkpoint.dir= --set log.metrics_path=
check mbauto-product "grep -Eq 'micro-batch (1 x 16|2 x 8|4 x 4|8 x 2|16 x 1)' '$tmp/mbauto.out' && ! grep -q 'offload_optimizer.device=' '$tmp/mbauto.out'"

cli_report test-autoplan
