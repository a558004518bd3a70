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
# steps_per_print: one line with step, scale, norm, lr, skips, samples/s.
"$bin" --steps 20 | grep -E '^\[zero\] step=20 loss_scale=1 grad_norm=[0-9.e+-]+ lr=0.01 skipped=0 samples/s=[0-9.]+$' \
  || { echo "no steps_per_print line"; exit 1; }
check "$("$run_mpi" 3 "$bin" --steps 40 --stage 3 --quiet)"
echo "3 passed, 0 failed"
