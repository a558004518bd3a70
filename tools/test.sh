#!/usr/bin/env bash
# Every test: installs what the build needs, then bazel test //... (C++,
# C ABI, MPI under mpirun -np 2/3/4, Python, Rust), then the CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
bazel test //... "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
# The CUDA build compiles and links without a GPU; its GPU tests report
# themselves SKIPPED (counted) rather than passed.
[ "$rc" -eq 0 ] && { bash tools/cuda_build_check.sh || rc=$?; }
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log" || true)
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log" || true)
skipped=$(grep -cE '^//[^ ]+ +SKIPPED' "$log" || true)
echo "bazel: $passed passed, $failed failed, $skipped skipped"
exit "$rc"
