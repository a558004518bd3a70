#!/usr/bin/env bash
# CI step for the CUDA build (no GPU needed): compiles and links every target
# under --config=cuda, then runs the CUDA tests (tag "cuda"), which report
# each case SKIPPED when no device is visible. Prints how many cases ran and
# how many were skipped, so a skip is never mistaken for a pass.
#
#   tools/cuda_build_check.sh            # from anywhere inside the repo
#
# Exit status: 0 built and no test failed; 1 otherwise (including a missing
# CUDA toolkit: the CUDA build is part of CI, not optional).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "cuda_build_check: FAILED: no CUDA toolkit at /usr/local/cuda" >&2
  exit 1
fi

BAZEL="${BAZEL:-bazel}"
"$BAZEL" build --config=cuda //kernels/... //core/... //bench/...

mapfile -t TESTS < <("$BAZEL" query 'attr(tags, "\bcuda\b", tests(//...))' 2>/dev/null)
if [ "${#TESTS[@]}" -eq 0 ]; then
  echo "cuda_build_check: FAILED: no test tagged cuda found" >&2
  exit 1
fi
"$BAZEL" test --config=cuda "${TESTS[@]}"

# gtest prints one "[       OK ] Suite.Case (N ms)" or "[  SKIPPED ] ... (N ms)"
# per case; count them in each test's log.
testlogs="$("$BAZEL" info bazel-testlogs 2>/dev/null)"
ran=0
skipped=0
for t in "${TESTS[@]}"; do
  path="${t#//}"
  log="$testlogs/${path/://}/test.log"
  [ -f "$log" ] || continue
  r=$(grep -cE '^\[       OK \] .* \([0-9]+ ms\)$' "$log" || true)
  s=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$log" || true)
  echo "cuda_build_check: $t: $r passed, $s SKIPPED"
  ran=$((ran + r))
  skipped=$((skipped + s))
done
echo "cuda_build_check: OK: CUDA targets built and linked; test cases: $ran passed, $skipped SKIPPED (no GPU here when nonzero)"
