#!/usr/bin/env bash
# The recorded ABI of libzero_c.so.1 (capi/abi/libzero_c.abi, written by
# abidw) and the check that the library still provides it (abidiff).
#
#   tools/abi_baseline.sh --check     build //capi:libzero_c.so.1, compare
#   tools/abi_baseline.sh --update    build it and record it as the baseline
#   tools/abi_baseline.sh --check LIB BASELINE HEADER SUPPRESSIONS
#                                     (what //tests:abi_baseline_test runs)
#
# The check fails on an incompatible change: a function or variable removed,
# a parameter or return type changed, a struct member inserted before the end,
# retyped or removed, an enumerator's value changed. It passes on additions:
# new functions, members appended to struct_size-first structs, new
# enumerators, and any change to the C++ behind the opaque handles
# (capi/abi/internal.supp). An incompatible change needs a major version:
# ZERO_VERSION_MAJOR in zero_c.h and ZERO_ABI_MAJOR in capi/BUILD (the soname
# libzero_c.so.N), then a new baseline (--update). See "The C ABI" in
# docs/ARCHITECTURE.md.
set -euo pipefail

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] || usage
mode="$1"; shift
UPDATE_CMD="tools/abi_baseline.sh --update"

if [ $# -eq 0 ]; then
  root="$(cd "$(dirname "$0")/.." && pwd)"
  cd "$root"
  bazel build //capi:libzero_c.so.1 >&2
  lib="$(bazel info bazel-bin 2>/dev/null)/capi/libzero_c.so.1"
  baseline="capi/abi/libzero_c.abi"
  header="capi/include/zero_c.h"
  supp="capi/abi/internal.supp"
elif [ $# -eq 4 ]; then
  lib="$1"; baseline="$2"; header="$3"; supp="$4"
else
  usage
fi

soname_of() { readelf -d "$1" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p'; }
major=$(sed -n 's/^#define ZERO_VERSION_MAJOR \([0-9][0-9]*\).*/\1/p' "$header")
soname=$(soname_of "$lib")
[ -n "$major" ] || { echo "no ZERO_VERSION_MAJOR in $header"; exit 1; }
if [ "$soname" != "libzero_c.so.$major" ]; then
  echo "FAILED: $lib has soname '$soname' but $header says ZERO_VERSION_MAJOR $major:"
  echo "the soname must be libzero_c.so.$major (ZERO_ABI_MAJOR in capi/BUILD)."
  exit 1
fi
# abidw/abidiff read the types from DWARF; without it they would compare
# symbol names only and pass on any layout change.
if ! readelf -S "$lib" | grep '\.debug_info' >/dev/null; then
  echo "FAILED: $lib has no debug info (build zero_c.cc with -g, link with --strip=never)"
  exit 1
fi

case "$mode" in
  --update)
    # Types defined outside the public header (the C++ behind the handles)
    # are left out of the record; the check ignores them too ($supp).
    abidw --no-corpus-path --type-id-style hash --headers-dir "$(dirname "$header")" \
      --drop-private-types "$lib" > "$baseline.tmp"
    mv "$baseline.tmp" "$baseline"
    n=$(grep -c '<elf-symbol name=' "$baseline")
    echo "recorded $baseline: $soname, $n symbols"
    ;;
  --check)
    base_soname=$(grep -o "soname='[^']*'" "$baseline" | head -1 | cut -d"'" -f2)
    if [ "$base_soname" != "$soname" ]; then
      echo "FAILED: the baseline $baseline is for $base_soname, the library is $soname."
      echo "A new major version starts a new baseline: run"
      echo "  $UPDATE_CMD"
      exit 1
    fi
    report=$(mktemp); trap 'rm -f "$report"' EXIT
    rc=0
    abidiff --no-added-syms --fail-no-debug-info --suppressions "$supp" \
      "$baseline" "$lib" > "$report" 2>&1 || rc=$?
    if [ $rc -ne 0 ]; then
      cat "$report"
      echo
      echo "FAILED: $soname is not compatible with the ABI recorded in $baseline"
      echo "(abidiff exit $rc: 4 = changed, 8 = incompatible, 1/2 = error; report above)."
      echo "Either undo the change (append, never edit: convention 3 of zero_c.h), or,"
      echo "for a deliberate break, bump ZERO_VERSION_MAJOR and ZERO_ABI_MAJOR. If the"
      echo "baseline itself is stale (it predates merged additions), re-record it with"
      echo "  $UPDATE_CMD"
      exit 1
    fi
    # Additions pass; name them so the baseline gets refreshed.
    abidiff --fail-no-debug-info --suppressions "$supp" "$baseline" "$lib" > "$report" 2>&1 || true
    added=$(grep -oE "^  \[A\] 'function [^']*'" "$report" | sed "s/^  \[A\] //" || true)
    if [ -n "$added" ]; then
      echo "compatible; functions added since the baseline (record them with: $UPDATE_CMD):"
      echo "$added"
    fi
    n=$(grep -c '<elf-symbol name=' "$baseline")
    echo "1 passed, 0 failed ($soname provides the $n symbols of $baseline)"
    ;;
  *) usage ;;
esac
