#!/usr/bin/env bash
# Re-runs bindings/gen_abi_tables.py on capi/include/zero_c.h and fails, with
# a diff, if any checked-in generated table differs (as
# //bindings/rust:bindings_fresh_test does for the bindgen output).
set -euo pipefail
R="$TEST_SRCDIR/$TEST_WORKSPACE"
if ! python3 "$R/bindings/gen_abi_tables.py" --root "$R" --check; then
  echo "generated ABI tables are stale: run python3 bindings/gen_abi_tables.py and commit them" >&2
  exit 1
fi
