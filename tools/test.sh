#!/usr/bin/env bash
# Every test: installs what the build needs, then bazel test //... (C++,
# C ABI, MPI under mpirun -np 2/3/4, Python, Rust), then the CUDA build, then
# the C/C++ test binaries under AddressSanitizer + UBSan with leaks checked
# (`tools/san_run.sh asan cc`; ZERO_TEST_ASAN=0 skips it; tests/README.md,
# "Sanitizers", says what runs and what does not, and why), then every fuzz
# target for a short time (`tools/fuzz.sh run 10`: libFuzzer + ASan/UBSan
# from the seed corpus; ZERO_TEST_FUZZ=0 skips it; the long runs are
# bench/fuzz_bench.sh).
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
count() { grep -cE "^//[^ ]+ +(\(cached\) )?($1)" "$2" || true; }
summary="bazel: $(count PASSED "$log") passed,\
 $(count 'FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD' "$log") failed, $(count SKIPPED "$log") skipped"
if [ "${ZERO_TEST_ASAN:-1}" != 0 ]; then
  alog=$(mktemp)
  trap 'rm -f "$log" "$alog"' EXIT
  set +e
  bash tools/san_run.sh asan cc 2>&1 | tee "$alog"
  arc=${PIPESTATUS[0]}
  set -e
  [ "$arc" -eq 0 ] || rc=$arc
  summary="$summary; asan: $(count PASSED "$alog") passed,\
 $(count 'FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD' "$alog") failed"
else
  summary="$summary; asan: skipped (ZERO_TEST_ASAN=0)"
fi
if [ "${ZERO_TEST_FUZZ:-1}" != 0 ]; then
  flog=$(mktemp)
  trap 'rm -f "$log" "${alog:-}" "$flog"' EXIT
  set +e
  bash tools/fuzz.sh run "${ZERO_TEST_FUZZ_SECONDS:-10}" 2>&1 | tee "$flog"
  frc=${PIPESTATUS[0]}
  set -e
  [ "$frc" -eq 0 ] || rc=$frc
  summary="$summary; fuzz: $(grep -c '"ok": true' "$flog" || true) passed,\
 $(grep -c '"ok": false' "$flog" || true) failed, $(grep -c '"skipped"' "$flog" || true) skipped"
else
  summary="$summary; fuzz: skipped (ZERO_TEST_FUZZ=0)"
fi
echo "$summary"
exit "$rc"
