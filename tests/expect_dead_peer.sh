#!/usr/bin/env bash
# The job with a stuck rank must end (not hang) and every surviving rank
# must have reported a timeout naming the cause.
set -uo pipefail
np="$1"; bin="$2"
start=$(date +%s)
out=$("$(dirname "$0")/run_mpi.sh" "$np" "$bin" --dead-peer 2>&1)
end=$(date +%s)
echo "$out"
survivors=$(echo "$out" | grep -c "DEADLINE_EXCEEDED: mpi communicator: .* timed out")
if [ "$survivors" -ne $((np - 1)) ]; then
  echo "expected $((np - 1)) ranks to report the timeout, got $survivors"; exit 1
fi
if [ $((end - start)) -ge 50 ]; then
  echo "took $((end - start)) s: the stuck rank was waited for"; exit 1
fi
# A peer that exits without MPI_Finalize: mpirun ends the job (non-zero)
# at once rather than leaving the survivors waiting.
start=$(date +%s)
if "$(dirname "$0")/run_mpi.sh" "$np" "$bin" --exit-early >/dev/null 2>&1; then
  echo "a job whose rank died must not succeed"; exit 1
fi
end=$(date +%s)
if [ $((end - start)) -ge 50 ]; then
  echo "the job with a dead rank took $((end - start)) s"; exit 1
fi
echo "2 passed, 0 failed"
