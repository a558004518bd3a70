# Sourced by the Bazel tests: finds the Rust toolchain from inside a test,
# where HOME is $TEST_TMPDIR and the rustup proxies would look there.
for d in "${ZERO_CARGO_BIN:-}" /root/.cargo/bin /usr/local/cargo/bin; do
  if [ -n "$d" ] && [ -x "$d/cargo" ]; then
    export PATH="$d:$PATH"
    break
  fi
done
if [ -z "${RUSTUP_HOME:-}" ]; then
  for d in /root/.rustup /usr/local/rustup; do
    if [ -d "$d/toolchains" ]; then export RUSTUP_HOME="$d"; break; fi
  done
fi
export CARGO_HOME="$TEST_TMPDIR/cargo_home"
export CARGO_TARGET_DIR="$TEST_TMPDIR/cargo_target"
export CARGO_TERM_COLOR=never
mkdir -p "$CARGO_HOME"
command -v cargo >/dev/null || { echo "cargo not found (set ZERO_CARGO_BIN)" >&2; exit 1; }
