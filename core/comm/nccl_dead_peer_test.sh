#!/usr/bin/env bash
# Two MPI ranks on one GPU: rank 1 never joins NCCL; rank 0 must time out.
set -euo pipefail
BIN="$1"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Both ranks would write the same gtest files; the log carries the result.
unset TEST_PREMATURE_EXIT_FILE XML_OUTPUT_FILE
exec timeout 120 mpirun -np 2 --oversubscribe --mca btl self,vader \
  "$BIN" --gtest_filter='NcclDeadPeer.*'
