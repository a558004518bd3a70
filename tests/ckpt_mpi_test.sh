#!/usr/bin/env bash
# Saves a checkpoint with 4 MPI ranks (stage 3) and resumes it with 3 (stage 1).
set -euo pipefail
run_mpi="$1"; bin="$2"
dir="${TEST_TMPDIR:-/tmp}/ckpt_mpi"
rm -rf "$dir"
"$run_mpi" 4 "$bin" save "$dir"
"$run_mpi" 3 "$bin" load "$dir"
