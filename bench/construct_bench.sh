#!/usr/bin/env bash
# Stage-3 construction at NP MPI ranks, bf16, default bucket sizes: a
# GPT-shaped model (vocab 32000) built from init specs and from a
# safetensors file of it (written first, BF16), then the old way (every rank
# registers full fp32 values) at VALUES_LAYERS layers (the whole model per
# rank may not fit at LAYERS), and init specs at that size for the side by
# side. JSON lines from bench/construct_bench.cc; the summaries carry the
# largest per-rank peak RSS growth against 16Psi/W + the engine's buffers.
#
#   bash bench/construct_bench.sh [HIDDEN=1536] [LAYERS=8] [VALUES_LAYERS=LAYERS] [NP=4]
#   bash bench/construct_bench.sh 2048 18 6     # ~1B params (0.97B)
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
hidden="${1:-1536}" layers="${2:-8}" vlayers="${3:-${2:-8}}" np="${4:-4}"
cd "$(dirname "$0")/.."
bazel build -c opt //bench:construct_bench >&2
bin="$(bazel info -c opt bazel-bin 2>/dev/null)/bench/construct_bench"
dir="$(mktemp -d "${TMPDIR:-/tmp}/construct_bench.XXXXXX")"
trap 'rm -rf "$dir"' EXIT
file="$dir/model.safetensors"
run() { mpirun -np "$np" --oversubscribe "$bin" "$@"; }
t0=$(date +%s.%N)
"$bin" --mode write --hidden "$hidden" --layers "$layers" --file "$file"
echo "{\"bench\": \"construct_write\", \"file_bytes\": $(stat -c %s "$file"), \"seconds\": $(echo "$(date +%s.%N) - $t0" | bc)}"
run --mode spec --hidden "$hidden" --layers "$layers"
run --mode safetensors --hidden "$hidden" --layers "$layers" --file "$file"
rm -f "$file"
if [ "$vlayers" != "$layers" ]; then run --mode spec --hidden "$hidden" --layers "$vlayers"; fi
run --mode values --hidden "$hidden" --layers "$vlayers"
