#!/usr/bin/env bash
# The long soak: tests/soak_main (stage 3, live budget, NVMe optimizer state,
# save + load + export every EVERY steps) on 3 MPI ranks for STEPS steps;
# one JSON line per rank with RSS (start, after warm-up, end, peak, drift at
# the same point of each cycle) and open fds, the same bounds as
# //tests:soak_test (RSS drift <= 512 KiB, fds unchanged), then a check that
# nothing temporary was left.
#   bash bench/soak.sh [STEPS=60000] [EVERY=100]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS="${1:-60000}"; EVERY="${2:-100}"
bazel build //tests:soak_main >&2
dir=$(mktemp -d /tmp/zero_soak.XXXXXX)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/ck" "$dir/nv" "$dir/ex"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$(date +%s.%N)
rc=0
mpirun -np 3 --oversubscribe --bind-to none --mca btl self,vader \
  --mca btl_vader_single_copy_mechanism none \
  bazel-bin/tests/soak_main --steps "$STEPS" --every "$EVERY" --sample "$EVERY" \
  --warmup $((STEPS / 10)) --ckpt "$dir/ck" --nvme "$dir/nv" \
  --export "$dir/ex/model.safetensors" | grep '^{' || rc=$?
secs=$(echo "$(date +%s.%N) - $start" | bc)
left=$(cd "$dir" && find ck ex nv -mindepth 1 -maxdepth 1 | sort | tr '\n' ' ')
clean=false; [ "$left" = "ck/a ck/b ck/latest ex/model.safetensors " ] && clean=true
printf '{"bench": "soak_summary", "np": 3, "steps": %s, "every": %s, "seconds": %.1f, "step_ms": %.3f, "exit": %s, "no_temp_files": %s}\n' \
  "$STEPS" "$EVERY" "$secs" "$(echo "$secs * 1000 / $STEPS" | bc -l)" "$rc" "$clean"
[ "$rc" -eq 0 ] && [ "$clean" = true ]
