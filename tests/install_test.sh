#!/usr/bin/env bash
# The install layout works for a program built outside Bazel: tools/install.sh
# into a fresh prefix lays out include/, lib/ (libzero_c.so.M.m.p, the soname
# link libzero_c.so.1, the linker's libzero_c.so) and lib/pkgconfig/zero.pc;
# the C example compiled with `cc $(pkg-config --cflags --libs zero)` needs
# libzero_c.so.1, loads it from the prefix and trains bit for bit like the
# Bazel-built example, on one rank and on 3 MPI ranks; so does the example
# compiled against the 1.0 header (tests/abi_1_0).
set -euo pipefail
install_sh="$1"; lib="$2"; header="$3"; pc_in="$4"; src="$5"; ref="$6"; run_mpi="$7"; header_1_0="$8"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
prefix="$tmp/prefix"
pass=0
ok() { pass=$((pass + 1)); echo "ok: $1"; }
die() { echo "FAILED: $1"; echo "$pass passed, 1 failed"; exit 1; }

# --help documents every option the script takes (read from its case arms).
help=$(bash "$install_sh" --help) || die "--help failed"
opts=$(sed -n 's/^ *\(-[-a-z|-]*\))[^)]*$/\1/p' "$install_sh" | tr '|' '\n' | grep '^-' | sort -u)
[ -n "$opts" ] || die "found no options in $install_sh"
for o in $opts; do
  echo "$help" | grep -q -- "$o" || die "--help does not document $o"
done
bash "$install_sh" --lib "$lib" "$prefix" 2>/dev/null && die "--lib alone was accepted"
ok "--help documents $(echo $opts | tr '\n' ' ')"

bash "$install_sh" --lib "$lib" --header "$header" --pc-in "$pc_in" "$prefix"
v() { sed -n "s/^#define ZERO_VERSION_$1 \([0-9][0-9]*\).*/\1/p" "$header"; }
version="$(v MAJOR).$(v MINOR).$(v PATCH)"
L="$prefix/lib"
[ -f "$L/libzero_c.so.$version" ] && [ ! -L "$L/libzero_c.so.$version" ] || die "no $L/libzero_c.so.$version"
[ "$(readlink "$L/libzero_c.so.1")" = "libzero_c.so.$version" ] || die "libzero_c.so.1 -> $(readlink "$L/libzero_c.so.1")"
[ "$(readlink "$L/libzero_c.so")" = "libzero_c.so.1" ] || die "libzero_c.so -> $(readlink "$L/libzero_c.so")"
cmp -s "$header" "$prefix/include/zero_c.h" || die "installed header differs"
cmp -s "$lib" "$L/libzero_c.so.$version" || die "installed library differs"
ok "layout: include/zero_c.h, lib/libzero_c.so{,.1,.$version}, lib/pkgconfig/zero.pc"

export PKG_CONFIG_PATH="$L/pkgconfig"
[ "$(pkg-config --modversion zero)" = "$version" ] || die "pkg-config version $(pkg-config --modversion zero), header $version"
flags=$(pkg-config --cflags --libs zero)
echo "pkg-config --cflags --libs zero: $flags"
ok "pkg-config: zero $version"

# Outside Bazel: the compiler, pkg-config and the prefix, nothing else. (A
# sanitizer build of the library (--config=asan/tsan) needs its runtime
# first in the program, so the program is built with the same -fsanitize.)
san=""
readelf -d "$lib" | grep 'NEEDED.*libasan' > /dev/null && san="-fsanitize=address,undefined"
readelf -d "$lib" | grep 'NEEDED.*libtsan' > /dev/null && san="-fsanitize=thread"
flags="$san $flags"
app="$tmp/mlp_train_installed"
eval "cc -std=c99 -O2 -Wall -Wextra -pedantic -o \"\$app\" \"\$src\" $flags -lm"
readelf -d "$app" | grep 'NEEDED.*\[libzero_c\.so\.1\]' >/dev/null || die "the program does not need libzero_c.so.1"
export LD_LIBRARY_PATH="$L"
loaded=$(ldd "$app" | awk '$1 == "libzero_c.so.1" {print $3}')
[ "$(readlink -f "$loaded")" = "$(readlink -f "$L/libzero_c.so.$version")" ] || die "loads libzero_c.so.1 from '$loaded'"
ok "compiled and linked with pkg-config; needs libzero_c.so.1, loaded from the prefix"

n=0
for stage in 0 3; do
  cfg="$tmp/c$stage.json"
  echo "{\"train_micro_batch_size_per_gpu\": 1, \"steps_per_print\": 0,
    \"zero_optimization\": {\"stage\": $stage, \"reduce_bucket_size\": 300}}" > "$cfg"
  "$app" --config "$cfg" --steps 6 --quiet --dump "$tmp/inst_$stage.bin" > /dev/null
  env -u LD_LIBRARY_PATH "$ref" --config "$cfg" --steps 6 --quiet --dump "$tmp/ref_$stage.bin" > /dev/null
  cmp "$tmp/inst_$stage.bin" "$tmp/ref_$stage.bin" || die "stage $stage: installed build differs"
  "$run_mpi" 3 -x LD_LIBRARY_PATH "$app" --config "$cfg" --steps 6 --quiet --dump "$tmp/inst3_$stage.bin" > /dev/null
  env -u LD_LIBRARY_PATH "$run_mpi" 3 "$ref" --config "$cfg" --steps 6 --quiet --dump "$tmp/ref3_$stage.bin" > /dev/null
  cmp "$tmp/inst3_$stage.bin" "$tmp/ref3_$stage.bin" || die "stage $stage, 3 ranks: installed build differs"
  n=$((n + 2))
done
ok "$n trainings (stages 0 and 3, 1 and 3 ranks) bitwise equal to the Bazel build"

# An old client: the same program built against the 1.0 header, linked with
# the installed library's pkg-config flags, runs on it to the same bits.
old_app="$tmp/mlp_train_1_0"
eval "cc -std=c99 -O2 -o \"\$old_app\" -I\"$(dirname "$header_1_0")\" \"\$src\" $san $(pkg-config --libs zero) -lm"
"$old_app" --config "$tmp/c3.json" --steps 6 --quiet --dump "$tmp/old_3.bin" > /dev/null
cmp "$tmp/old_3.bin" "$tmp/ref_3.bin" || die "the 1.0 client on the installed library differs"
ok "a 1.0 client linked against the install trains to the same bits"

# Installing again over the same prefix (an upgrade) is fine.
bash "$install_sh" --lib "$lib" --header "$header" --pc-in "$pc_in" "$prefix" > /dev/null
"$app" --config "$tmp/c0.json" --steps 2 --quiet > /dev/null || die "reinstall broke the program"
ok "reinstall over the same prefix"
echo "$pass passed, 0 failed"
