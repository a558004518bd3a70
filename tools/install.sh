#!/usr/bin/env bash
# Installs zero's C ABI under a prefix:
#
#   PREFIX/include/zero_c.h
#   PREFIX/lib/libzero_c.so.M.m.p          the library (soname libzero_c.so.M)
#   PREFIX/lib/libzero_c.so.M -> ...M.m.p  what programs load (the soname)
#   PREFIX/lib/libzero_c.so   -> ...so.M   what the linker finds (-lzero_c)
#   PREFIX/lib/pkgconfig/zero.pc           pkg-config --cflags --libs zero
#
#   bash tools/install.sh PREFIX           builds //capi:libzero_c.so.1 first
#   bazel run //:install -- PREFIX         the same through Bazel
#   bash tools/install.sh --lib bazel-bin/capi/libzero_c.so.1 \
#     --header capi/include/zero_c.h --pc-in capi/zero.pc.in PREFIX
#                                          from a built tree, without Bazel
#
# Options (the three go together; without them the script builds):
#   --lib FILE      the built library to install (its soname must be
#                   libzero_c.so.<ZERO_VERSION_MAJOR of the header>)
#   --header FILE   zero_c.h (the version comes from its ZERO_VERSION_*)
#   --pc-in FILE    the pkg-config template, capi/zero.pc.in
#   -h, --help      this text
#
# Then: PKG_CONFIG_PATH=PREFIX/lib/pkgconfig cc app.c $(pkg-config --cflags
# --libs zero), and PREFIX/lib on the loader's path (ldconfig, rpath or
# LD_LIBRARY_PATH). Rust: ZERO_PREFIX=PREFIX or the same PKG_CONFIG_PATH
# (bindings/rust/README.md). The library needs Debian's OpenMPI, Abseil,
# Highway, liburing and xxhash (tools/install_deps.sh). See "Installing the
# C library" in README.md.
set -euo pipefail
usage() { sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit "$1"; }
lib="" header="" pc_in=""
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage 0 ;;
    --lib|--header|--pc-in)
      [ $# -ge 2 ] || { echo "install: $1 needs a value" >&2; usage 2; }
      case "$1" in
        --lib) lib="$2" ;;
        --header) header="$2" ;;
        --pc-in) pc_in="$2" ;;
      esac
      shift 2 ;;
    -*) echo "install: unknown option $1" >&2; usage 2 ;;
    *) break ;;
  esac
done
[ $# -eq 1 ] || usage 2
if [ -n "$lib$header$pc_in" ] && { [ -z "$lib" ] || [ -z "$header" ] || [ -z "$pc_in" ]; }; then
  echo "install: --lib, --header and --pc-in go together" >&2
  exit 2
fi
prefix="$1"
# `bazel run` starts in the runfiles tree: a relative prefix means the
# caller's directory.
case "$prefix" in
  /*) ;;
  *) prefix="${BUILD_WORKING_DIRECTORY:-$PWD}/$prefix" ;;
esac
if [ -z "$lib" ]; then
  root="$(cd "$(dirname "$0")/.." && pwd)"
  (cd "$root" && bazel build //capi:libzero_c.so.1 //capi:libzero_c.so >&2)
  lib="$(cd "$root" && bazel info bazel-bin 2>/dev/null)/capi/libzero_c.so.1"
  header="$root/capi/include/zero_c.h"
  pc_in="$root/capi/zero.pc.in"
fi

v() { sed -n "s/^#define ZERO_VERSION_$1 \([0-9][0-9]*\).*/\1/p" "$header"; }
major=$(v MAJOR) minor=$(v MINOR) patch=$(v PATCH)
version="$major.$minor.$patch"
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ "$soname" != "libzero_c.so.$major" ]; then
  echo "install: $lib has soname '$soname', expected libzero_c.so.$major (zero_c.h $version)" >&2
  exit 1
fi

mkdir -p "$prefix/include" "$prefix/lib/pkgconfig"
install -m 0644 "$header" "$prefix/include/zero_c.h"
install -m 0755 "$lib" "$prefix/lib/libzero_c.so.$version"
ln -sfn "libzero_c.so.$version" "$prefix/lib/libzero_c.so.$major"
ln -sfn "libzero_c.so.$major" "$prefix/lib/libzero_c.so"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" "$pc_in" \
  > "$prefix/lib/pkgconfig/zero.pc"
chmod 0644 "$prefix/lib/pkgconfig/zero.pc"
echo "installed zero $version ($soname) under $prefix"
