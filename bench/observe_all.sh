#!/usr/bin/env bash
# Where the time and the bytes go, per ZeRO stage, in one command:
# the model's compute alone, each stage's collectives alone and the full step
# (with its breakdown and memory measured beside estimated) at 2 and 4 ranks,
# the collectives against raw MPI, then the pictures.
#   bash bench/observe_all.sh [OUT=bench/figures] [STEPS=3]
# Writes OUT/step_parts.jsonl, OUT/collectives.jsonl and OUT/*.png
# (bench/plot.py). Sizes are kept small (a ~1.2M-param GPT, collectives to
# 1M elements) so that it finishes in a few minutes on 2 shared cores.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-bench/figures}"
STEPS="${2:-3}"
mkdir -p "$OUT"
bazel build -c opt //bench:collectives_bench //bench:torch_gpt_bench >&2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
: > "$OUT/collectives.jsonl"
for np in 2 4; do
  mpirun -np "$np" --oversubscribe --bind-to none --mca btl self,vader \
    bazel-bin/bench/collectives_bench 1048576 | grep '^{' >> "$OUT/collectives.jsonl"
done
modes=compute_only
for s in 0 1 2 3; do modes="$modes,comm_only$s,zero$s"; done
bazel-bin/bench/torch_gpt_bench --ranks 2,4 --modes "$modes" --observe \
  --dim 192 --layers 3 --heads 6 --ctx 64 --steps "$STEPS" --warmup 1 --repeat 1 \
  --bucket 200000 > "$OUT/step_parts.jsonl"
/usr/bin/python3 bench/plot.py "$OUT"
