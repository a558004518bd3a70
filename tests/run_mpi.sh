#!/usr/bin/env bash
# run_mpi.sh NP BINARY [ARGS...]: runs BINARY on NP ranks over shared memory.
set -euo pipefail
np="$1"; shift
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# mpirun's session directory, private to this job: OpenMPI names it by host
# name and PID, and PIDs repeat across the PID namespaces of sandboxed tests
# running at once (another checkout's, or --local_test_jobs > 1), which then
# shared one directory and failed ("File exists", PMIx out of resource).
# Short and under /tmp: PMIx puts its sockets there.
ompi_tmp=$(mktemp -d /tmp/zero-mpi.XXXXXX)
trap 'rm -rf "$ompi_tmp"' EXIT
# A job that outlives its budget is a hang: fail it instead.
rc=0
timeout --kill-after=10 240 mpirun -np "$np" --oversubscribe --bind-to none \
  --mca orte_tmpdir_base "$ompi_tmp" \
  --mca btl self,vader --mca btl_vader_single_copy_mechanism none "$@" || rc=$?
exit $rc
