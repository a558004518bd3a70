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
#
# Then: PKG_CONFIG_PATH=PREFIX/lib/pkgconfig cc app.c $(pkg-config --cflags
# --libs zero), and PREFIX/lib on the loader's path (ldconfig, rpath or
# LD_LIBRARY_PATH). The library needs Debian's OpenMPI, Abseil, Highway,
# liburing and xxhash (tools/install_deps.sh). See "Installing" in README.md.
set -euo pipefail
lib="" header="" pc_in=""
while [ $# -gt 1 ]; do
  case "$1" in
    --lib) lib="$2"; shift 2 ;;
    --header) header="$2"; shift 2 ;;
    --pc-in) pc_in="$2"; shift 2 ;;
    *) break ;;
  esac
done
[ $# -eq 1 ] || { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
prefix="$1"
# `bazel run` starts in the runfiles tree: a relative prefix means the
# caller's directory.
case "$prefix" in
  /*) ;;
  *) prefix="${BUILD_WORKING_DIRECTORY:-$PWD}/$prefix" ;;
esac
if [ -z "$lib" ]; then
  root="$(cd "$(dirname "$0")/.." && pwd)"
  (cd "$root" && bazel build //capi:libzero_c.so.1 >&2)
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
