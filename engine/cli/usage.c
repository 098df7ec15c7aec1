/* The usage texts of zoffload and its commands, in one place (the
 * tokenizer's are in tokenizer_cli.c): `zoffload --help`, `zoffload
 * <command> --help`, and the text printed after a usage error. */
#include "cli.h"

const char *const cli_usage_main =
    "usage: zoffload <command> [options]\n"
    "\n"
    "commands:\n"
    "  train CONFIG    train a model (configs/tiny.json is the small real-text default)\n"
    "  eval CONFIG     validation loss of a checkpoint, forward only\n"
    "  sample CONFIG   generate text from a checkpoint\n"
    "  plan CONFIG     bytes per memory tier and category, and whether they fit\n"
    "  bench WHAT      benchmarks: adamw, nvme, step CONFIG, memory CONFIG, tokenize, calibrate\n"
    "  config CONFIG   print the effective config with defaults filled in\n"
    "  prepare         text or JSON lines -> token files (byte-level, or --tokenizer: BPE ids + loss masks)\n"
    "  trace summary FILE  per-step summary of a timeline written by --trace\n"
    "  export CHECKPOINT --out DIR  a weights-only Hugging Face directory of a checkpoint\n"
    "  env             version, build features, GPU, host memory, NUMA (for bug reports)\n"
    "  tokenizer train|encode|decode  Hugging Face tokenizer.json: learn one, encode, decode\n"
    "\n"
    "Every command taking CONFIG accepts --set key.path=value (repeatable).\n"
    "`zoffload <command> --help` describes a command.\n";

const char *const cli_usage_train =
    "usage: zoffload train CONFIG [--set key=value]... [--resume DIR|auto] [--overwrite] [--sample N]\n"
    "                      [--memory-report] [--trace FILE]\n"
    "  --set key=value   override a config key (JSON value, or a plain string)\n"
    "  --resume DIR      continue exactly from checkpoint directory DIR; 'auto' takes the\n"
    "                    latest checkpoint-<step> under checkpoint.dir\n"
    "  --allow-data-change  resume on another data.train or tokenizer than the checkpoint's\n"
    "                    (refused without it, naming both)\n"
    "  --resume-allow KEY  resume although setting KEY (model.rope_theta, precision,\n"
    "                    gradient_accumulation_steps, ...: docs/resume.md) differs from the checkpoint's;\n"
    "                    said in one line (repeatable). Without it such a resume is refused, naming both values\n"
    "  --overwrite       start a fresh run in a checkpoint.dir that holds another run's checkpoints\n"
    "                    (or a non-empty log.metrics_path): removes them first, saying so. Without it\n"
    "                    such a run is refused; a checkpoint.dir is locked by the run writing to it\n"
    "  SIGINT / SIGTERM  finish the step, save a checkpoint, exit 130 / 143; a second one exits at once\n"
    "  --sample N        generate N tokens after training (byte-level models print text)\n"
    "  --memory-report   print the memory plan (device, host, nvme) before anything is allocated;\n"
    "                    every run ends with the memory report (planned, peak, current)\n"
    "  --set engine.placement=auto  train the best plan of `zoffload plan CONFIG --auto` (DeepSpeed's\n"
    "                    \"auto\" micro-batch or accumulation: only their split); the chosen --set lines\n"
    "                    and the effective config are printed and written to checkpoint.dir/auto-config.json\n"
    "  --trace FILE      write a timeline of steps engine.trace.first_step .. + engine.trace.steps - 1\n"
    "                    (default 2, 3) as Chrome trace-event JSON (Perfetto, chrome://tracing):\n"
    "                    every stream's tasks, copies, NVMe requests, waits; CPU backend only.\n"
    "                    Same as --set engine.trace.path=FILE\n"
    "  under mpirun -np N: N data-parallel ranks on the CPU backend, train_micro_batch_size_per_gpu\n"
    "  rows each; the optimizer state is replicated on every rank at zero_optimization.stage 0 and\n"
    "  sharded over the ranks at stage >= 1 (each rank then saves its shard); rank 0 prints, logs\n"
    "  and saves the rest\n";

const char *const cli_usage_eval =
    "usage: zoffload eval CONFIG [--set key=value]... [--checkpoint DIR] [--batches N] [--random-init]\n"
    "  --checkpoint DIR  checkpoint directory or safetensors file (default: --set model.init_from=FILE\n"
    "                    when given, else the latest under checkpoint.dir, else the config's\n"
    "                    model.init_from); the weights used are named on stderr\n"
    "  --random-init     with none of those, use the seeded random initialisation (else refused)\n"
    "  --batches N       micro-batches of data.val to average (default: up to 20)\n";

const char *const cli_usage_sample =
    "usage: zoffload sample CONFIG [--set key=value]... [--checkpoint DIR] [--prompt TEXT]\n"
    "                       [--tokens N] [--temperature T] [--top-k K] [--seed S] [--random-init]\n"
    "  --checkpoint DIR, --random-init: as for eval (the weights used are named on stderr)\n"
    "  defaults: --tokens 256 --temperature 0.8 --top-k 40 --seed engine.seed\n"
    "  --prompt TEXT is encoded with the model's tokenizer (the tokenizer.json beside the weights,\n"
    "  or model.tokenizer); a 256-byte vocabulary takes its bytes; with neither, TEXT is\n"
    "  comma-separated token ids\n";

const char *const cli_usage_plan =
    "usage: zoffload plan CONFIG [--set key=value]... [--ranks N] [--placements [--host-ram 24GiB,128GiB]]\n"
    "       zoffload plan CONFIG --auto [--set key=value]... [--nvme-path DIR] [--json]\n"
    "                    [--host-ram SIZE] [--nvme-free SIZE] [--backend cpu|cuda]\n"
    "  prints the bytes each tier (device, host, nvme) needs per category for the config's\n"
    "  placement, before anything is allocated, and whether each fits its budget\n"
    "  (engine.gpu_memory_budget, engine.host_memory_budget, free space on nvme_path).\n"
    "  Exit code 0 when it fits, 1 (with the changes that would fit) when not, also when this\n"
    "  machine's available memory (MemAvailable, the cgroup limit) cannot hold the host pool (train\n"
    "  refuses that too, before allocating)\n"
    "  --ranks N: the plan of each of N data-parallel ranks (mpirun -np N); with\n"
    "  zero_optimization.stage >= 1 the optimizer is sharded, so each rank's differs: the\n"
    "  largest rank's is printed in full, every rank's totals in one line each\n"
    "  --placements: one row per standard placement (all on the device, optimizer on cpu or\n"
    "  nvme, parameters on cpu too) with its device, host and NVMe bytes, whether the device\n"
    "  budget fits and whether the host pool fits each --host-ram size (default 24GiB,128GiB)\n"
    "  --auto: searches combined changes (micro-batch x accumulation at the same global batch,\n"
    "  activation checkpointing, bf16, optimizer and parameter placement on device/cpu/nvme,\n"
    "  parameter slots), keeps those that fit the device budget, the host budget (or what this\n"
    "  machine has available) and the NVMe directory's free space, and ranks them by predicted\n"
    "  step time (rates of `zoffload bench calibrate`, else defaults, said in the output); each\n"
    "  with its bytes per tier, bottleneck and --set lines. 8-bit optimizer states are suggested,\n"
    "  never chosen. --nvme-path DIR: where NVMe placements would live (default: the config's\n"
    "  nvme_path, else the working directory; none: no NVMe placements). --json: the last line\n"
    "  is a JSON list of the candidates that fit, best first.\n"
    "  For another machine than this one: --host-ram SIZE (its available host memory, instead of\n"
    "  MemAvailable and the cgroup limit), --nvme-free SIZE (its NVMe directory's free space; the\n"
    "  directory need not exist here), --backend cuda|cpu (its backend's memory model and rates:\n"
    "  with cuda on a machine without a GPU the device budget is engine.gpu_memory_budget)\n"
    "  Exit code 0 when a candidate fits, 1 when none does (naming the short tier and by how much)\n";

const char *const cli_usage_bench =
    "usage: zoffload bench adamw [--params N] [--threads T] [--reps R] [--optimizer AdamW|AdamW8bit] [--json]\n"
    "       zoffload bench nvme --path DIR [--bytes N] [--block N] [--queue-depth Q] [--json]\n"
    "       zoffload bench step CONFIG [--set key=value]... [--steps N] [--trace FILE] [--json]\n"
    "       zoffload bench memory CONFIG [--set key=value]... [--json]\n"
    "       zoffload bench tokenize [--tokenizer PATH] [--threads N] [--reps R] [FILE...]\n"
    "       zoffload bench calibrate [--nvme-path DIR] [--json]\n"
    "  adamw: CPU AdamW parameters/s against a loop with the same memory traffic\n"
    "         (default 64M parameters, 9 repetitions, all threads); AdamW8bit: the 8-bit update\n"
    "         and the fp32 one in the same run, their ratio, bytes moved and state bytes per param\n"
    "  nvme:  sequential write then read through the NVMe tier (default 1 GiB, 1 MiB\n"
    "         blocks, queue depth 32)\n"
    "  step:  step time with the config's placement vs everything on the device, and\n"
    "         overlap efficiency = step / max(compute alone, I/O alone, optimizer alone);\n"
    "         under mpirun -np N also tokens/s per rank and in total and the time in communication;\n"
    "         --trace FILE also times the configured steps with the timeline recording (the cost of\n"
    "         tracing, side by side) and writes the last round's timeline to FILE\n"
    "  memory: device bytes planned and measured (schedulers built, no step run) for fp32 all on\n"
    "         device (unchunked head from the plan, chunked head), bf16, + activation checkpointing,\n"
    "         + optimizer offload, + parameter offload, all combined\n"
    "  calibrate: the rates `plan --auto` predicts step time with (GEMM and attention FLOP/s at\n"
    "         model widths in fp32 and bf16, elementwise and copy GB/s, CPU AdamW fp32 and 8-bit\n"
    "         parameters/s, with --nvme-path the NVMe store's read and write GB/s), written to\n"
    "         $XDG_CACHE_HOME/zoffload (or ~/.cache/zoffload), one profile per machine and backend\n"
    "  --json makes the last line one JSON object (memory: one JSON object per row).\n";

const char *const cli_usage_env =
    "usage: zoffload env [--nvme-path DIR]\n"
    "  the version and build features (CUDA architectures, NCCL, MPI, io_uring, hwloc, ISA-L),\n"
    "  the BLAS and its core type, the SIMD kernels this CPU gets, the GPU with its free memory\n"
    "  and driver, host memory and the memlock limit, NUMA nodes; paste it into bug reports\n"
    "  --nvme-path DIR   also DIR's file system and free space, whether O_DIRECT works there (a\n"
    "                    probe file is written and removed) and the NVMe tier's I/O engine\n";

const char *const cli_usage_export =
    "usage: zoffload export CHECKPOINT --out DIR [--dtype fp32|bf16|fp16] [--max-shard-size 5GB]\n"
    "  writes the weights of CHECKPOINT (a checkpoint-<step> directory, checksums verified, or a\n"
    "  Hugging Face directory) to DIR as a Hugging Face model directory: config.json and\n"
    "  model.safetensors, or model-0000k-of-0000n.safetensors and model.safetensors.index.json\n"
    "  past --max-shard-size (default 5GB; GB = 1e9 bytes, GiB = 2^30). No optimizer state.\n"
    "  DIR must be new (only its last component is created) or empty.\n"
    "  --dtype  tensor dtype in the files (default fp32: the saved values exactly; bf16 and fp16\n"
    "           round to nearest even). Streamed tensor by tensor: a few MiB of host memory\n"
    "           whatever the model's size\n"
    "  load it with transformers' from_pretrained(DIR) or --set model.init_from=DIR\n";

const char *const cli_usage_config = "usage: zoffload config CONFIG [--set key=value]...\n";

const char *const cli_usage_prepare =
    "usage: zoffload prepare --out-train FILE [--out-val FILE] [--val-fraction F] TEXTFILE...\n"
    "  concatenates the text files' bytes into byte-level tokens (vocab 256) and writes\n"
    "  flat uint16 token files (data.format \"u16\"); the last F of the stream (default 0.05)\n"
    "  goes to --out-val\n"
    "   or: zoffload prepare --tokenizer PATH --out-train FILE [--out-val FILE] [--val-fraction F]\n"
    "                        [--format u16|u32|llmc|llmc32] [--separator STR]\n"
    "                        [--field KEY | --prompt-field KEY --completion-field KEY |\n"
    "                         --messages-field KEY] FILE...\n"
    "  encodes documents with a tokenizer (tokenizer.json, or a model directory holding it),\n"
    "  the tokenizer's end-of-text token after each: a text file is one document (or one per\n"
    "  piece between --separator STR, e.g. $'\\n%\\n'); *.jsonl files (or any file with a --*field\n"
    "  option) hold one JSON object a line: its --field (default \"text\") is the document, or\n"
    "  --prompt-field and --completion-field make instruction data: FILE.mask beside each output\n"
    "  trains only the completion tokens (and the end-of-text after them); --messages-field names a\n"
    "  list of {role, content} rendered with the tokenizer's chat template (tokenizer_config.json),\n"
    "  the assistant turns trained. The last F of the\n"
    "  documents (default 0.05) go to --out-val. --format u16 (default) refuses ids above 65535.\n"
    "  Threads: OMP_NUM_THREADS (default all)\n";
const char *const cli_usage_trace =
    "usage: zoffload trace summary FILE\n"
    "  per traced step: each track's busy and waiting time, the copy and NVMe time hidden\n"
    "  behind compute, the critical path, and the compute stream's longest waits (which task\n"
    "  on which stream it waited for)\n";
