#!/usr/bin/env bash
# CPU dry run of tools/device_check.sh (issue 15): with a fake nvcc and no
# GPU, the check's control flow holds: every step is capped by the deadline
# (ZERO_DEVICE_CHECK_SECONDS) so the whole check ends in time, a step with no
# time left prints FAILED, and GPU tests that cannot be built for want of
# GoogleTest print FAILED instead of being skipped silently.
set -uo pipefail
CHECK="$1"
T="${TEST_TMPDIR:-$(mktemp -d)}"
FAKE="$T/fake_nvcc"
cat > "$FAKE" <<'SH'
#!/usr/bin/env bash
# Sleeps FAKE_NVCC_SLEEP seconds, then "builds" the -o target: a program
# that exits 2 (no device), like the real binaries without a GPU.
sleep "${FAKE_NVCC_SLEEP:-0}"
out=""
while [ $# -gt 0 ]; do
  if [ "$1" = "-o" ]; then out="$2"; shift; fi
  shift
done
[ -n "$out" ] && printf '#!/bin/sh\nexit 2\n' > "$out" && chmod +x "$out"
exit 0
SH
chmod +x "$FAKE"
fail=0
check() {  # name, condition result
  if [ "$2" -eq 0 ]; then echo "ok: $1"; else echo "FAILED: $1"; fail=1; fi
}
run() {  # env... -> output in $T/out, rc in $rc, seconds in $secs
  local t0
  t0=$(date +%s)
  env -u OUT ZERO_DEVICE_CHECK_NVCC=1 NVCC="$FAKE" "$@" bash "$CHECK" > "$T/out" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  cat "$T/out"
}

# A: the build outlives the deadline: cut at it, FAILED, exit 1, in time.
run ZERO_DEVICE_CHECK_SECONDS=8 FAKE_NVCC_SLEEP=30
check "A: exit 1" $([ $rc -eq 1 ]; echo $?)
check "A: ended within the deadline (+3 s): ${secs}s" $([ "$secs" -ge 6 ] && [ "$secs" -le 11 ]; echo $?)
check "A: nvcc build reported failed" $(grep -q '"kind":"build","tool":"nvcc".*"ok":false' "$T/out"; echo $?)
check "A: summary failed" $(grep -q '"kind":"summary".*"failed":true' "$T/out"; echo $?)

# B: built, but no GoogleTest: the GPU tests are FAILED, not skipped.
run ZERO_DEVICE_CHECK_SECONDS=60 GTEST_HEADER=/nonexistent/gtest.h
check "B: exit 1" $([ $rc -eq 1 ]; echo $?)
check "B: missing gtest is FAILED" $(grep -q '"status":"FAILED","why":"no GoogleTest' "$T/out"; echo $?)

# C: the build leaves under 5 s: the next step is FAILED unrun.
run ZERO_DEVICE_CHECK_SECONDS=6 FAKE_NVCC_SLEEP=3 GTEST_HEADER="$FAKE"
check "C: exit 1" $([ $rc -eq 1 ]; echo $?)
check "C: no time left is FAILED" $(grep -q '"kind":"step","name":"cuda_kernels_test (nvcc)","status":"FAILED","why":"no time left' "$T/out"; echo $?)

# The default deadline leaves room for the command limit (10 min) and the
# machine's start: 8 minutes at most.
d=$(grep -oE 'ZERO_DEVICE_CHECK_SECONDS:-[0-9]+' "$CHECK" | grep -oE '[0-9]+$')
check "default deadline ${d}s <= 480" $([ "${d:-999}" -le 480 ]; echo $?)
# No step keeps a fixed timeout of its own outside the budget.
check "every timeout is budgeted" $(! grep -qE 'timeout [0-9]' "$CHECK"; echo $?)
exit $fail
