#!/usr/bin/env bash
# Runs `cargo test --offline` over the Rust workspace (bindings/rust plus
# examples/rust) against the Bazel-built libzero_c.so, then `cargo doc` with
# warnings denied. Sources are copied out of the runfiles tree so cargo can
# write next to them (Cargo.lock checks, build-script outputs).
set -euo pipefail
R="$TEST_SRCDIR/$TEST_WORKSPACE"
source "$R/bindings/rust/rust_env.sh"

W="$TEST_TMPDIR/src"
mkdir -p "$W/bindings" "$W/examples" "$W/capi/include" "$TEST_TMPDIR/lib"
cp -rL "$R/bindings/rust" "$W/bindings/"
cp -rL "$R/examples/rust" "$W/examples/"
cp -L "$R/capi/include/zero_c.h" "$W/capi/include/"
# A private copy keeps the rpath baked into the test binaries stable.
# libzero_c.so for the linker, libzero_c.so.1 (the soname) for the loader.
cp -L "$R/capi/libzero_c.so" "$R/capi/libzero_c.so.1" "$TEST_TMPDIR/lib/"
export ZERO_LIB_DIR="$TEST_TMPDIR/lib"
export ZERO_HEADER="$W/capi/include/zero_c.h"

# The C example, for the bitwise Rust-vs-C test; required under Bazel.
if [ -n "${ZERO_C_EXAMPLE_RUNFILE:-}" ]; then
  export ZERO_C_EXAMPLE="$R/$ZERO_C_EXAMPLE_RUNFILE"
  export ZERO_REQUIRE_C_EXAMPLE=1
fi
# The mpirun test is required under Bazel too (mpirun is a test dependency).
export ZERO_REQUIRE_MPIRUN=1

# Under a sanitizer (tools/san_run.sh) the library is instrumented and its
# runtime must come first in every process that loads it: cargo's runner
# preloads it into the test binaries (and what they start) only, never into
# cargo or rustc. Doc tests that run are built and run by rustdoc, without
# the runner, so they run in the plain suite only.
doctests=()
if [ -n "${ZERO_TEST_PRELOAD:-}" ]; then
  export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="env LD_PRELOAD=$ZERO_TEST_PRELOAD"
  doctests=(--lib --bins --tests --examples)
fi

cd "$W/bindings/rust"
cargo --version
cargo test --offline --locked --workspace "${doctests[@]}" -- --test-threads=2
RUSTDOCFLAGS="-D warnings" cargo doc --offline --locked --workspace --no-deps
echo "cargo test and cargo doc passed"
