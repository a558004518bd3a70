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
# A peer that arrives (its barrier passes the arrival gate of the others'
# all-gather) and then stops: the others wait inside the blocking
# collective, and must still time out (default mode: returned by the caller
# while the worker stays in MPI; direct mode: the watchdog ends the job).
start=$(date +%s)
out=$("$(dirname "$0")/run_mpi.sh" "$np" "$bin" --stuck-after-arrival 2>&1)
end=$(date +%s)
echo "$out"
survivors=$(echo "$out" | grep -c "DEADLINE_EXCEEDED: mpi communicator: all-gather timed out")
if [ "$survivors" -ne $((np - 1)) ]; then
  echo "stuck after arrival: expected $((np - 1)) ranks to report the timeout, got $survivors"
  exit 1
fi
if [ $((end - start)) -ge 50 ]; then
  echo "stuck after arrival: took $((end - start)) s"; exit 1
fi
# The same at medium sizes (an all-gather, then a broadcast rooted at the
# stopped peer on a second communicator), which default mode runs on the
# calling thread as a polled non-blocking call: each must time out on
# every other rank. Direct mode ends the job at the first timeout instead.
if [ "${ZERO_MPI_WATCHDOG:-}" != 1 ]; then
  start=$(date +%s)
  out=$("$(dirname "$0")/run_mpi.sh" "$np" "$bin" --stuck-medium 2>&1)
  end=$(date +%s)
  echo "$out"
  for what in "medium all-gather" "medium broadcast"; do
    n=$(echo "$out" | grep "$what after the peer stopped" |
        grep -c "DEADLINE_EXCEEDED: mpi communicator: ${what#medium } timed out")
    if [ "$n" -ne $((np - 1)) ]; then
      echo "stuck medium: expected $((np - 1)) ranks to report the $what timeout, got $n"
      exit 1
    fi
  done
  if [ $((end - start)) -ge 50 ]; then
    echo "stuck medium: took $((end - start)) s"; exit 1
  fi
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
echo "all passed"
