#!/usr/bin/env bash
# Every test, in parts, each run whatever the others did:
#   bazel   bazel test //... (C++, C ABI, MPI under mpirun -np 2/3/4, Python,
#           Rust); extra arguments go to it; ZERO_TEST_TARGETS replaces //...
#           (a trial of the script on a few targets)
#   pytest  the cases pytest skipped inside the Python py_tests (from their
#           logs: a py_test passes with skipped cases, so they are shown)
#   torch-current
#           tools/torch_current_tests.sh: zero.torch's Python tests (Hugging
#           Face models, the core at stages 0-3, activation checkpointing;
#           the list is in that script, with every *_current_torch*.py) on
#           current torch and transformers from PyPI, in the venv of
#           tools/install_current_torch.sh (made once, ~6 GB, several minutes;
#           kept after); ZERO_TEST_TORCH_CURRENT=0 leaves it out
#   cuda    tools/cuda_build_check.sh: the CUDA build, its GPU tests' cases
#           SKIPPED without a GPU (ZERO_TEST_CUDA=0 leaves it out)
#   asan    the C/C++ test binaries under AddressSanitizer + UBSan with leaks
#           checked (`tools/san_run.sh asan cc`; ZERO_TEST_ASAN=0 leaves it
#           out; tests/README.md, "Sanitizers", says what runs and why)
#   fuzz    every fuzz target for a short time (`tools/fuzz.sh run 10`:
#           libFuzzer + ASan/UBSan from the seed corpus; ZERO_TEST_FUZZ=0
#           leaves it out; the long runs are bench/fuzz_bench.sh)
# ZERO_TEST_ASAN_TARGETS replaces asan's `cc` (every C/C++ test binary) and
# ZERO_TEST_FUZZ_SECONDS the 10 s per fuzz target, for a trial too.
# One line per part, a part left out says so and why; the last line sums
# them: `total: N passed, N failed, N skipped` (bazel, asan and fuzz count
# targets, cuda, pytest and torch-current count test cases). A part that fails without a
# failed test to its name (a build error) counts as one failure.
# Each line of a part that ran ends with the part's wall time, `[T s]`, after
# its counts; a `wall:` line before the total gives the whole script's and,
# of that, what tools/install_deps.sh took (the rest is the parts'). The
# total line keeps its format: it is the last line, counts only.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
deps_s=$SECONDS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
parts=()
total_p=0 total_f=0 total_s=0

# The part that runs began at $started (bash's SECONDS); timed LINE adds
# its wall time since then to the summary.
started=$SECONDS
begin() { started=$SECONDS; }
timed() { parts+=("$1 [$((SECONDS - started)) s]"); }
# part NAME PASSED FAILED SKIPPED [NOTE]
part() {
  timed "$1: $2 passed, $3 failed, $4 skipped${5:+ ($5)}"
  total_p=$((total_p + $2)) total_f=$((total_f + $3)) total_s=$((total_s + $4))
}
not_run() { parts+=("$1: not run ($2)"); }
# Bazel's result lines: //pkg:target [(cached)] STATUS.
count() { grep -cE "^//[^ ]+ +(\(cached\) )?($1)" "$2" || true; }
FAILED_RE='FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD|INCOMPLETE'
PASSED_RE='PASSED|FLAKY'  # FLAKY: failed, then passed on a retry

# run NAME LOG CMD...: runs CMD with its output shown and kept in LOG; its
# exit status in $last.
last=0
run() {
  local name=$1 log=$2
  shift 2
  set +e
  "$@" 2>&1 | tee "$log"
  last=${PIPESTATUS[0]}
  set -e
  [ "$last" -eq 0 ] || { rc=$last; echo "test.sh: $name exited $last" >&2; }
}
# bazel_part NAME LOG EXIT: counts bazel's result lines.
bazel_part() {
  local p f s
  p=$(count "$PASSED_RE" "$2")
  f=$(count "$FAILED_RE" "$2")
  s=$(count SKIPPED "$2")
  if [ "$3" -ne 0 ] && [ "$f" -eq 0 ]; then
    part "$1" "$p" 1 "$s" "bazel exited $3 with no failed test: a build or analysis error"
  else
    part "$1" "$p" "$f" "$s"
  fi
}

# ---- bazel ----
begin
read -r -a targets <<<"${ZERO_TEST_TARGETS:-//...}"
run bazel "$tmp/bazel" bazel test "${targets[@]}" "$@"
bazel_part bazel "$tmp/bazel" "$last"

# ---- pytest's skips inside the py_tests that ran ----
# pytest -q ends its log with "N passed, M skipped in Ts" (or "=== ... ===").
# Its time is the reading of the logs: the cases ran in the bazel part's.
begin
flags=()
for a in "$@"; do [ "${a#-}" = "$a" ] || flags+=("$a"); done
testlogs=$(bazel info "${flags[@]}" bazel-testlogs 2>/dev/null || echo bazel-testlogs)
py_p=0 py_f=0 py_s=0 py_targets=0 skipped_in=()
n() { grep -oE "[0-9]+ $1" <<<"$line" | grep -oE '^[0-9]+' || echo 0; }
while read -r t; do
  log="$testlogs/${t#//}"
  log="${log/://}/test.log"
  [ -f "$log" ] || continue
  line=$(grep -E '^=* ?[0-9]+ [a-z]+(, [0-9]+ [a-z]+)* in [0-9.]+s' "$log" | tail -1 || true)
  [ -n "$line" ] || continue
  py_targets=$((py_targets + 1))
  py_p=$((py_p + $(n passed))) py_f=$((py_f + $(n failed)))
  s=$(n skipped)
  py_s=$((py_s + s))
  [ "$s" -eq 0 ] || skipped_in+=("${t#//} $s")
done < <(grep -oE '^//[^ ]+' "$tmp/bazel" | sort -u)
if [ "$py_targets" -gt 0 ]; then
  # Cases, not targets: only the skips add to the total (the passes and
  # failures are counted by their targets above).
  where=""
  [ ${#skipped_in[@]} -eq 0 ] || where="; skipped in: $(IFS=,; echo "${skipped_in[*]}")"
  timed "pytest: $py_s skipped in $py_targets pytest targets ($py_p cases passed, $py_f failed)$where"
  total_s=$((total_s + py_s))
else
  not_run pytest "no py_test ran in this bazel run"
fi

# ---- zero.torch on current torch (PyPI) ----
if [ "${ZERO_TEST_TORCH_CURRENT:-1}" != 0 ]; then
  begin
  run torch-current "$tmp/torch_current" bash tools/torch_current_tests.sh "${flags[@]}"
  line=$(grep -E '^torch_current_tests: [0-9]+ passed' "$tmp/torch_current" | tail -1 || true)
  if [ -n "$line" ]; then
    p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '^[0-9]+')
    f=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '^[0-9]+')
    s=$(grep -oE '[0-9]+ skipped' <<<"$line" | grep -oE '^[0-9]+')
    versions=${line#*skipped (}
    part torch-current "$p" "$f" "$s" "test cases; ${versions%)}"
  else
    part torch-current 0 1 0 "tools/torch_current_tests.sh ended without its summary: see above"
  fi
else
  not_run torch-current "ZERO_TEST_TORCH_CURRENT=0"
fi

# ---- the CUDA build (no GPU needed) ----
if [ "${ZERO_TEST_CUDA:-1}" != 0 ]; then
  begin
  run cuda "$tmp/cuda" bash tools/cuda_build_check.sh
  line=$(grep -E '^cuda_build_check: OK: ' "$tmp/cuda" | tail -1 || true)
  if [ "$last" -eq 0 ] && [ -n "$line" ]; then
    p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '^[0-9]+')
    s=$(grep -oE '[0-9]+ SKIPPED' <<<"$line" | grep -oE '^[0-9]+')
    part cuda "$p" 0 "$s" "test cases; skipped: no GPU here"
  else
    part cuda 0 1 0 "the CUDA build or a CUDA test failed: see above"
  fi
else
  not_run cuda "ZERO_TEST_CUDA=0"
fi

# ---- ASan + UBSan ----
if [ "${ZERO_TEST_ASAN:-1}" != 0 ]; then
  begin
  read -r -a asan_targets <<<"${ZERO_TEST_ASAN_TARGETS:-cc}"
  run asan "$tmp/asan" bash tools/san_run.sh asan "${asan_targets[@]}"
  bazel_part asan "$tmp/asan" "$last"
else
  not_run asan "ZERO_TEST_ASAN=0"
fi

# ---- fuzzing ----
if [ "${ZERO_TEST_FUZZ:-1}" != 0 ]; then
  begin
  run fuzz "$tmp/fuzz" bash tools/fuzz.sh run "${ZERO_TEST_FUZZ_SECONDS:-10}"
  p=$(grep -c '"ok": true' "$tmp/fuzz" || true)
  f=$(grep -c '"ok": false' "$tmp/fuzz" || true)
  s=$(grep -c '"skipped"' "$tmp/fuzz" || true)
  if [ "$last" -ne 0 ] && [ "$f" -eq 0 ]; then
    part fuzz "$p" 1 "$s" "tools/fuzz.sh failed before a target did: see above"
  else
    part fuzz "$p" "$f" "$s"
  fi
else
  not_run fuzz "ZERO_TEST_FUZZ=0"
fi

printf '%s\n' "${parts[@]}"
echo "wall: $SECONDS s (tools/install_deps.sh $deps_s s of it)"
echo "total: $total_p passed, $total_f failed, $total_s skipped"
[ "$total_f" -eq 0 ] || [ "$rc" -ne 0 ] || rc=1
exit "$rc"
