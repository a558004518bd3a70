#!/usr/bin/env bash
# Regenerates the bindings from capi/include/zero_c.h into a temp file and
# fails on any difference from the committed zero-sys/src/bindings.rs.
set -euo pipefail
R="$TEST_SRCDIR/$TEST_WORKSPACE"
source "$R/bindings/rust/rust_env.sh"
fresh="$TEST_TMPDIR/bindings.rs"
ZERO_HEADER="$R/capi/include/zero_c.h" bash "$R/bindings/rust/zero-sys/regen.sh" "$fresh"
if ! diff -u "$R/bindings/rust/zero-sys/src/bindings.rs" "$fresh"; then
  echo "zero-sys/src/bindings.rs is stale: run bindings/rust/zero-sys/regen.sh and commit it" >&2
  exit 1
fi
echo "bindings up to date"
