#!/usr/bin/env bash
# The ABI cannot drift: libzero_c.so.1 provides everything recorded in
# capi/abi/libzero_c.abi (abidiff, tools/abi_baseline.sh --check), and the
# check itself tells compatible changes from incompatible ones. The policy is
# shown on small libraries built here from a toy zero_c.h: each change
# below is made to a copy of the header and library, recorded and compared
# with the same script and suppressions as the real one.
set -euo pipefail
check="$1"; lib="$2"; baseline="$3"; header="$4"; supp="$5"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok: $1"; }
bad() { fail=$((fail + 1)); echo "FAILED: $1"; }

# 1. The real library against the recorded baseline.
if out=$("$check" --check "$lib" "$baseline" "$header" "$supp" 2>&1); then
  ok "libzero_c.so.1 against $baseline"
else
  echo "$out"; bad "libzero_c.so.1 against $baseline"
fi
echo "$out" | tail -n 3
readelf -d "$lib" | grep 'SONAME.*\[libzero_c\.so\.1\]' >/dev/null && ok "soname libzero_c.so.1" \
  || bad "soname is not libzero_c.so.1"

# 2. The policy, on a toy ABI in the shape of zero_c.h.
cat > "$tmp/toy.h" <<'EOF'
#include <stddef.h>
#include <stdint.h>
#define ZERO_VERSION_MAJOR 1
typedef struct zero_engine zero_engine_t;
typedef enum zero_status {
  ZERO_OK = 0,
#ifdef ENUM_VALUE
  ZERO_BAD = 3,
#else
  ZERO_BAD = 1,
#endif
#ifdef ENUM_ADD
  ZERO_NEW = 2,
#endif
} zero_status;
typedef struct zero_thing {
  size_t struct_size;
  int32_t a;
#ifdef INSERT_MIDDLE
  int32_t inserted;
#endif
#ifdef RETYPE
  float b;
#else
  double b;
#endif
#ifdef APPEND
  int64_t appended;
#endif
} zero_thing;
zero_status zero_make(const zero_thing* t, zero_engine_t** out);
zero_status zero_use(zero_engine_t* e, zero_thing* t);
#ifndef REMOVE_FN
#ifdef PARAM_TYPE
int32_t zero_count(const zero_engine_t* e, int64_t n);
#else
int32_t zero_count(const zero_engine_t* e, int32_t n);
#endif
#endif
#ifdef ADD_FN
int32_t zero_added(int32_t x);
#endif
EOF
cat > "$tmp/toy.c" <<'EOF'
#include <stdlib.h>
#include "zero_c.h"
struct zero_engine {
  int32_t internal;
#ifdef INTERNAL
  double more_internal[4];  /* behind the opaque handle: free to change */
#endif
};
zero_status zero_make(const zero_thing* t, zero_engine_t** out) {
  *out = calloc(1, sizeof(**out)); (*out)->internal = t->a; return ZERO_OK;
}
zero_status zero_use(zero_engine_t* e, zero_thing* t) { t->a = e->internal; return ZERO_OK; }
#ifndef REMOVE_FN
#ifdef PARAM_TYPE
int32_t zero_count(const zero_engine_t* e, int64_t n) { return e->internal + (int32_t)n; }
#else
int32_t zero_count(const zero_engine_t* e, int32_t n) { return e->internal + n; }
#endif
#endif
#ifdef ADD_FN
int32_t zero_added(int32_t x) { return x; }
#endif
EOF
toy() {  # toy NAME SONAME_MAJOR [-DFLAGS...]: a library and its header in $tmp/NAME/
  local d="$tmp/$1" major="$2"; shift 2
  mkdir -p "$d/include"
  sed "s/^#define ZERO_VERSION_MAJOR 1/#define ZERO_VERSION_MAJOR $major/" "$tmp/toy.h" > "$d/include/zero_c.h"
  for f in "$@"; do sed -i "1i #define ${f#-D} 1" "$d/include/zero_c.h"; done
  (cd "$d" && cc -g -O0 -fPIC -shared -Iinclude -Wl,-soname,libzero_c.so.$major \
     -o libzero_c.so.$major "$tmp/toy.c")
}
toy base 1
"$check" --update "$tmp/base/libzero_c.so.1" "$tmp/base.abi" "$tmp/base/include/zero_c.h" "$supp" >/dev/null
expect() {  # expect pass|fail WHAT MAJOR [-DFLAGS...]
  local want="$1" what="$2" major="$3"; shift 3
  local name; name=$(echo "$what" | tr -c 'a-z0-9' _)
  toy "$name" "$major" "$@"
  local out rc=0
  out=$("$check" --check "$tmp/$name/libzero_c.so.$major" "$tmp/base.abi" \
        "$tmp/$name/include/zero_c.h" "$supp" 2>&1) || rc=$?
  if [ "$want" = pass ] && [ $rc -eq 0 ]; then ok "compatible, passes: $what"
  elif [ "$want" = fail ] && [ $rc -ne 0 ]; then
    # A failure must name the way out: the command that records a baseline.
    if echo "$out" | grep 'tools/abi_baseline.sh --update' >/dev/null; then ok "incompatible, fails: $what"
    else echo "$out"; bad "$what: failed without naming tools/abi_baseline.sh --update"; fi
  else
    echo "$out"; bad "$what: expected to $want, exit $rc"
  fi
}
expect pass "unchanged" 1
expect pass "a function added" 1 -DADD_FN
expect pass "a member appended to a struct_size struct" 1 -DAPPEND
expect pass "an enumerator added" 1 -DENUM_ADD
expect pass "the type behind an opaque handle changed" 1 -DINTERNAL
expect pass "all additions at once" 1 -DADD_FN -DAPPEND -DENUM_ADD -DINTERNAL
expect fail "a function removed" 1 -DREMOVE_FN
expect fail "a parameter retyped" 1 -DPARAM_TYPE
expect fail "a struct member retyped" 1 -DRETYPE
expect fail "a struct member inserted before the end" 1 -DINSERT_MIDDLE
expect fail "an enumerator's value changed" 1 -DENUM_VALUE
expect fail "a new major version against the old baseline" 2 -DREMOVE_FN
# The soname must follow ZERO_VERSION_MAJOR.
toy skew 1 && sed -i 's/^#define ZERO_VERSION_MAJOR 1/#define ZERO_VERSION_MAJOR 2/' "$tmp/skew/include/zero_c.h"
out=$("$check" --check "$tmp/skew/libzero_c.so.1" "$tmp/base.abi" "$tmp/skew/include/zero_c.h" \
      "$supp" 2>&1 || true)
if echo "$out" | grep "must be libzero_c.so.2" >/dev/null; then ok "soname behind ZERO_VERSION_MAJOR refused"
else bad "soname libzero_c.so.1 with ZERO_VERSION_MAJOR 2 accepted"; fi
# Without DWARF abidiff would compare symbol names only.
strip -g -o "$tmp/stripped.so" "$tmp/base/libzero_c.so.1"
out=$("$check" --check "$tmp/stripped.so" "$tmp/base.abi" "$tmp/base/include/zero_c.h" "$supp" \
      2>&1 || true)
if echo "$out" | grep "no debug info" >/dev/null; then ok "a library without debug info refused"
else bad "a stripped library was compared"; fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
