#!/usr/bin/env bash
# The long fuzz run: every libFuzzer target (tools/fuzz.sh; the hostfile
# target under atheris when installed) for RUNS executions each, ASan +
# UBSan, leaks checked; one JSON line per target
# {"target", "execs", "seconds", "execs_per_s", "corpus", "ok"} and a summary
# line. Fails on any crash, leak, timeout or out-of-memory (the input is
# left in fuzz-out/TARGET/; it becomes a regression input in
# tests/fuzz/regressions/TARGET/).
#   bash bench/fuzz_bench.sh [RUNS=10000000] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-10000000}"
shift || true
start=$(date +%s.%N)
rc=0
bash tools/fuzz.sh runs "$RUNS" "$@" || rc=$?
printf '{"bench": "fuzz_summary", "runs_per_target": %s, "seconds": %.1f, "ok": %s}\n' \
  "$RUNS" "$(echo "$(date +%s.%N) - $start" | bc)" "$([ $rc -eq 0 ] && echo true || echo false)"
exit $rc
