#!/usr/bin/env bash
# The C example saves and resumes through the C ABI: on one rank the resumed
# run ends bitwise where the uninterrupted one ends; saved at 3 MPI ranks
# (stage 3) and resumed at 2 (stage 1) it ends within 1e-6 relative.
set -euo pipefail
bin="$1"; run_mpi="$2"; cli="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
compare() {  # compare A B TOL: max |a-b| / max |b| <= TOL over fp32 dumps
  /usr/bin/python3 - "$@" <<'PY'
import struct, sys
a, b, tol = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read(), float(sys.argv[3])
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
fa = struct.unpack("%df" % (len(a) // 4), a)
fb = struct.unpack("%df" % (len(b) // 4), b)
rel = max(abs(x - y) for x, y in zip(fa, fb)) / max(abs(y) for y in fb)
assert rel <= tol, "max rel diff %g > %g" % (rel, tol)
print("max rel diff %g <= %g" % (rel, tol))
PY
}
"$bin" --steps 30 --stage 2 --quiet --save-dir "$tmp/one" --save-at 15 --dump "$tmp/full1.bin" >/dev/null
"$bin" --steps 30 --stage 2 --quiet --resume "$tmp/one" --dump "$tmp/resumed1.bin" >/dev/null
cmp "$tmp/full1.bin" "$tmp/resumed1.bin"
echo "one rank: bitwise equal after resume"

"$run_mpi" 3 "$bin" --steps 30 --stage 3 --quiet --save-dir "$tmp/mpi" --save-at 15 --dump "$tmp/full3.bin" >/dev/null
"$cli" verify "$tmp/mpi"
"$run_mpi" 2 "$bin" --steps 30 --stage 1 --quiet --resume "$tmp/mpi" --dump "$tmp/resumed2.bin" >/dev/null
compare "$tmp/resumed2.bin" "$tmp/full3.bin" 1e-6
echo "2 passed, 0 failed"
