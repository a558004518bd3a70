#!/usr/bin/env bash
# Regenerates the raw Rust bindings from the C ABI header with Debian's
# bindgen CLI, then formats them with rustfmt.
#
#   regen.sh          rewrite src/bindings.rs next to this script
#   regen.sh OUT      write to OUT instead (the freshness test does this)
#
# ZERO_HEADER overrides the header path (default: capi/include/zero_c.h of
# the repository this script lives in).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
header="${ZERO_HEADER:-$here/../../../capi/include/zero_c.h}"
out="${1:-$here/src/bindings.rs}"

command -v bindgen >/dev/null || { echo "regen.sh: bindgen not found (apt-get install bindgen)" >&2; exit 1; }
command -v rustfmt >/dev/null || { echo "regen.sh: rustfmt not found" >&2; exit 1; }

tmp="$(mktemp --suffix=.rs)"
trap 'rm -f "$tmp"' EXIT

# Only the zero_* API; core::ffi types so the crate needs no libc crate;
# C enums as integer constants (a Rust enum would be UB on unknown values).
bindgen "$header" \
  --allowlist-function 'zero_.*' \
  --allowlist-type 'zero_.*' \
  --allowlist-var 'ZERO_.*' \
  --use-core \
  --ctypes-prefix core::ffi \
  --size_t-is-usize \
  --no-prepend-enum-name \
  --no-rustfmt-bindings \
  -o "$tmp"
rustfmt --edition 2021 "$tmp"
cp "$tmp" "$out"
