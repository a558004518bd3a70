#!/usr/bin/env bash
# The crate as a dependency of a new user's project: tools/install.sh lays
# the library out under a prefix; `cargo new` outside the workspace, a path
# dependency on `zero` alone and the three-line build.rs of
# bindings/rust/README.md ("Use it from your own project"); zero-sys finds
# the library through pkg-config (then ZERO_PREFIX) with no bazel-bin in
# sight; the binary carries the prefix as its rpath, loads the library from
# there without LD_LIBRARY_PATH, and trains at 2 ranks under mpirun to the
# f64 reference (outside_crate/main.rs).
set -euo pipefail
R="$TEST_SRCDIR/$TEST_WORKSPACE"
source "$R/bindings/rust/rust_env.sh"
pass=0
ok() { pass=$((pass + 1)); echo "ok: $1"; }
die() { echo "FAILED: $1"; echo "$pass passed, 1 failed"; exit 1; }

prefix="$TEST_TMPDIR/prefix"
bash "$R/tools/install.sh" --lib "$R/capi/libzero_c.so.1" --header "$R/capi/include/zero_c.h" \
  --pc-in "$R/capi/zero.pc.in" "$prefix"
# The crates, copied where a user keeps them (no repository around them).
src="$TEST_TMPDIR/vendor"
mkdir -p "$src/bindings" "$src/examples"
cp -rL "$R/bindings/rust" "$src/bindings/"
cp -rL "$R/examples/rust" "$src/examples/"
rm -rf "$src/bindings/rust/outside_crate"

cd "$TEST_TMPDIR"
cargo new --offline --vcs none --name trainer trainer > /dev/null 2>&1 || cargo new --vcs none --name trainer trainer
cd trainer
cat >> Cargo.toml <<TOML
zero = { path = "$src/bindings/rust/zero" }
TOML
cp "$R/bindings/rust/outside_crate/main.rs" src/main.rs
cp "$R/bindings/rust/outside_crate/build.rs" build.rs
grep -q '^\[dependencies\]' Cargo.toml || die "cargo new wrote no [dependencies]"
[ "$(sed -n '/^\[dependencies\]/,$p' Cargo.toml | grep -c '=')" = 1 ] || die "more than one dependency"
ok "cargo new outside the workspace, one dependency: zero"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
unset ZERO_LIB_DIR ZERO_PREFIX LD_LIBRARY_PATH
cargo build --offline 2>&1 | tail -3
bin="target/debug/trainer"
[ -x "$CARGO_TARGET_DIR/debug/trainer" ] && bin="$CARGO_TARGET_DIR/debug/trainer"
runpath=$(readelf -d "$bin" | sed -n 's/.*R\(UN\)\{0,1\}PATH.*\[\(.*\)\]/\2/p')
echo "rpath: $runpath"
case ":$runpath:" in
  *":$(readlink -f "$prefix/lib"):"*|*":$prefix/lib:"*) ;;
  *) die "the binary's rpath '$runpath' lacks $prefix/lib" ;;
esac
case "$runpath" in *bazel-bin*|*/bin/capi*) die "the rpath names Bazel's output: $runpath" ;; esac
loaded=$(ldd "$bin" | awk '$1 == "libzero_c.so.1" {print $3}')
[ "$(readlink -f "$loaded")" = "$(readlink -f "$prefix/lib/libzero_c.so.1")" ] \
  || die "loads libzero_c.so.1 from '$loaded'"
ok "built through pkg-config; rpath $runpath; loads the prefix's library"

out=$("$R/tests/run_mpi.sh" 2 "$bin")
echo "$out"
[ "$(echo "$out" | grep -c 'within .* of the f64 reference')" = 2 ] || die "no training report"
ok "2 ranks under mpirun trained stages 1 and 3 to the f64 reference"

# ZERO_PREFIX alone finds it too (no pkg-config path).
unset PKG_CONFIG_PATH
touch build.rs
ZERO_PREFIX="$prefix" cargo build --offline 2>&1 | tail -1
ok "ZERO_PREFIX"
# Nothing set: a clear error naming what to set, not a link failure.
cargo clean --offline -p zero-sys > /dev/null 2>&1 || true
if err=$(cargo build --offline 2>&1); then die "built with no library to find"; fi
echo "$err" | grep -q "libzero_c.so not found" || { echo "$err" | tail -20; die "no clear error"; }
ok "without a library: 'libzero_c.so not found' naming ZERO_PREFIX / PKG_CONFIG_PATH / ZERO_LIB_DIR"
echo "$pass passed, 0 failed"
