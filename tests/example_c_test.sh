#!/usr/bin/env bash
# The C example trains: its final loss is at least 5x below its first, on
# one rank and on 3 MPI ranks at stage 3 (same numbers up to rounding).
set -euo pipefail
bin="$1"; run_mpi="$2"
check() {
  python3 - "$1" <<'PY'
import json, sys
r = json.loads([l for l in sys.argv[1].splitlines() if l.startswith("{")][-1])
assert r["final_loss"] * 5 < r["first_loss"], r
print("loss %.4f -> %.4f at stage %d world %d" % (r["first_loss"], r["final_loss"], r["stage"], r["world"]))
PY
}
check "$("$bin" --steps 40 --quiet)"
check "$("$run_mpi" 3 "$bin" --steps 40 --stage 3 --quiet)"
echo "2 passed, 0 failed"
