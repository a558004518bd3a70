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
#   RANK_AS_LIMIT=6g bash bench/construct_bench.sh 2048 18 18
# RANK_AS_LIMIT caps each rank's address space (prlimit --as): a mode that
# does not fit (the old way at ~1B on a small machine) then fails with a
# construct_failed line instead of the OOM killer taking other processes;
# the script goes on. SKIP_SAFETENSORS=1 leaves out the safetensors mode.
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
hidden="${1:-1536}" layers="${2:-8}" vlayers="${3:-${2:-8}}" np="${4:-4}"
cd "$(dirname "$0")/.."
bazel build -c opt //bench:construct_bench >&2
bin="$(bazel info -c opt bazel-bin 2>/dev/null)/bench/construct_bench"
dir="$(mktemp -d "${TMPDIR:-/tmp}/construct_bench.XXXXXX")"
trap 'rm -rf "$dir"' EXIT
file="$dir/model.safetensors"
guard=()
if [ -n "${RANK_AS_LIMIT:-}" ]; then
  guard=(prlimit --as="$(numfmt --from=iec "${RANK_AS_LIMIT^^}")")
fi
run() {
  local t0 rc=0
  t0=$(date +%s.%N)
  mpirun -np "$np" --oversubscribe "${guard[@]}" "$bin" "$@" || rc=$?
  if [ "$rc" != 0 ]; then
    echo "{\"bench\": \"construct_run_failed\", \"args\": \"$*\", \"rc\": $rc, \"rank_as_limit\": \"${RANK_AS_LIMIT:-none}\", \"seconds\": $(echo "$(date +%s.%N) - $t0" | bc)}"
  fi
}
if [ -z "${SKIP_SAFETENSORS:-}" ]; then
  t0=$(date +%s.%N)
  "$bin" --mode write --hidden "$hidden" --layers "$layers" --file "$file"
  echo "{\"bench\": \"construct_write\", \"file_bytes\": $(stat -c %s "$file"), \"seconds\": $(echo "$(date +%s.%N) - $t0" | bc)}"
fi
run --mode spec --hidden "$hidden" --layers "$layers"
if [ -z "${SKIP_SAFETENSORS:-}" ]; then
  run --mode safetensors --hidden "$hidden" --layers "$layers" --file "$file"
  rm -f "$file"
fi
if [ "$vlayers" != "$layers" ]; then run --mode spec --hidden "$hidden" --layers "$vlayers"; fi
run --mode values --hidden "$hidden" --layers "$vlayers"
