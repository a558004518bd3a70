#!/usr/bin/env bash
# zero.torch's Python tests on a current torch: the test files of the
# bindings/python py_tests listed below, under pytest with the venv of
# tools/install_current_torch.sh (torch, transformers, accelerate and
# DeepSpeed from PyPI; installed once, then kept), importing `zero` from the
# py_test's Bazel runfiles: the same extension (built for Debian's CPython
# 3.11, which the venv is made from) and files the py_test runs with Debian's
# torch 1.13. Ends with one line:
#   torch_current_tests: N passed, N failed, N skipped (torch V, transformers V)
# and exits non-zero when a case failed or the venv or the build did.
#
# Usage: tools/torch_current_tests.sh [BAZEL FLAGS...]
set -uo pipefail
cd "$(dirname "$0")/.."

# The tests: a py_test of //bindings/python, or NAME::K to run only the
# cases pytest's `-k K` selects (kept to about 5 minutes on 2 cores). Chosen
# for what a torch or transformers release breaks: Hugging Face models
# (Init's replay of their init code, training, activation checkpointing,
# export), zero.torch's core at stages 0-3 (hooks, stage 3's gathers and
# releases, checkpoints, 16-bit saves), and activation checkpointing at
# stage 3 (torch's recomputation), and the peak RSS of building a model
# under zero.torch.Init (torch's meta kernels and allocator).
TESTS=(
  torch_hf_test
  torch_test
  "torch_api_test::activation_checkpointing"
  torch_construct_rss_test
  # zero's DeepSpeed layer against the real DeepSpeed and accelerate (the
  # whole set, about 20 minutes: pytest bindings/python/tests/deepspeed_compat
  # in the venv): every name, one Trainer run and one accelerate launch.
  deepspeed_compat/test_deepspeed_compat_names
  "deepspeed_compat/test_deepspeed_compat_trainer::stage3-gas2-gpt2"
  "deepspeed_compat/test_deepspeed_compat_accelerate::launch_flags"
)
# Tests that need the current torch (Trainer, accelerate with DeepSpeed's
# API) are named *_current_torch*.py: every such file in bindings/python/tests
# runs here, with its own py_test's runfiles when it has one, else
# torch_hf_test's (its imports then come from the source tree's tests/).
HOST=torch_hf_test
for f in bindings/python/tests/*_current_torch*.py; do
  [ -e "$f" ] && TESTS+=("$(basename "$f" .py)")
done

fail() {
  echo "torch_current_tests: 0 passed, 1 failed, 0 skipped ($1)"
  exit 1
}

venv=$(bash tools/install_current_torch.sh) || fail "tools/install_current_torch.sh failed"
PY="$venv/bin/python"
versions=$("$PY" -c 'import torch, transformers; print("torch", torch.__version__ + ", transformers", transformers.__version__)' 2>/dev/null) ||
  fail "the venv at $venv does not import torch and transformers"

have=$(bazel query 'kind(py_test, //bindings/python:all)' 2>/dev/null) ||
  fail "bazel query of //bindings/python failed"
targets=("//bindings/python:$HOST")
for t in "${TESTS[@]}"; do
  name=${t%%::*}
  grep -qx "//bindings/python:$name" <<<"$have" && targets+=("//bindings/python:$name")
done
bazel build "$@" "${targets[@]}" >&2 || fail "bazel build of the py_tests failed"
bin=$(bazel info "$@" bazel-bin 2>/dev/null) || fail "bazel info failed"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0 skipped=0
count() { grep -oE "[0-9]+ $1" <<<"$2" | awk '{n += $1} END {print n + 0}'; }
for t in "${TESTS[@]}"; do
  name=${t%%::*} k=""
  [ "$name" = "$t" ] || k=${t#*::}
  if grep -qx "//bindings/python:$name" <<<"$have"; then
    root="$bin/bindings/python/$name.runfiles/zero"
    file="$root/bindings/python/tests/$name.py"
  else
    root="$bin/bindings/python/$HOST.runfiles/zero"
    file="$PWD/bindings/python/tests/$name.py"
  fi
  log="$tmp/${name//\//_}.log"
  echo "torch_current_tests: $name${k:+ (-k $k)}" >&2
  # From an empty directory, as in the py_test's sandbox: the repository
  # root holds no `zero` to import by accident.
  (cd "$tmp" && PYTHONPATH="$root/bindings/python:$root/bindings/python/tests:$root/examples/python:$root" \
    timeout 1200 "$PY" -m pytest -q -rs -p no:cacheprovider "$file" ${k:+-k "$k"}) 2>&1 |
    tee "$log" >&2
  line=$(grep -E '^=* ?[0-9]+ [a-z]+(, [0-9]+ [a-z]+)* in [0-9.]+s' "$log" | tail -1 || true)
  if [ -z "$line" ]; then
    echo "torch_current_tests: $name: no pytest summary (crashed or timed out)" >&2
    failed=$((failed + 1))
    continue
  fi
  p=$(count passed "$line") f=$(count failed "$line") e=$(count 'errors?' "$line")
  s=$(count skipped "$line")
  passed=$((passed + p)) failed=$((failed + f + e)) skipped=$((skipped + s))
  [ "$p" -gt 0 ] || [ "$f" -gt 0 ] || { echo "torch_current_tests: $name ran no case" >&2; failed=$((failed + 1)); }
done
echo "torch_current_tests: $passed passed, $failed failed, $skipped skipped ($versions)"
[ "$failed" -eq 0 ]
