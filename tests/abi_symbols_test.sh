#!/usr/bin/env bash
# libzero_c.so exports exactly the functions zero_c.h declares: nothing of
# the C++ core leaks, nothing declared is missing.
set -euo pipefail
lib="$1"; header="$2"
exported=$(nm -D --defined-only "$lib" | awk '$2 == "T" {print $3}' | sort)
declared=$(grep -oE 'ZERO_API [a-z0-9_ ]+\*? ?(zero_[a-z0-9_]+)\(' "$header" | grep -oE 'zero_[a-z0-9_]+\($' | tr -d '(' | sort)
other=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^zero_' || true)
fail=0
if [ -n "$other" ]; then echo "exported symbols outside zero_*:"; echo "$other"; fail=1; fi
if [ "$exported" != "$declared" ]; then
  echo "exported vs declared differ:"; diff <(echo "$exported") <(echo "$declared") || true; fail=1
fi
n=$(echo "$declared" | wc -l)
if [ "$n" -lt 20 ]; then echo "only $n declarations found: parser broken"; fail=1; fi
[ $fail -eq 0 ] && echo "1 passed, 0 failed ($n functions exported)" || echo "0 passed, 1 failed"
exit $fail
