#!/usr/bin/env bash
# Installs a current PyTorch from PyPI plus DeepSpeed, accelerate and
# transformers into a virtual environment outside the repository, for the
# Python tests on current torch (tools/torch_current_tests.sh, a part of
# tools/test.sh) and the peer benchmarks in bench/
# (bench/host_overhead_bench.py). Idempotent: a venv whose marker file names
# the same package set is left alone (pip's own cache keeps the wheels).
#
# The versions are pinned: the tests ran on exactly these; a newer release is
# a deliberate bump here (the marker changes, so the venv is brought to it).
#
# The venv is made from /usr/bin/python3 (Debian's CPython 3.11) so that zero's
# Python extension built by Bazel against that interpreter (_zero_c) also
# imports there. The PyPI Linux torch wheel runs on the CPU (its CUDA libraries
# are loaded only when a GPU is present); DeepSpeed then runs with
# DS_ACCELERATOR=cpu. Needs several minutes and ~6 GB of disk.
#
# Usage: tools/install_current_torch.sh [VENV_DIR]
# VENV_DIR: else $ZERO_TORCH_CURRENT_VENV, else /opt/zero-venvs/torch-current
# (or ~/.cache/zero-venvs/torch-current where /opt/zero-venvs cannot be made).
# Prints the venv's path on stdout; progress goes to stderr.
set -euo pipefail

VENV="${1:-${ZERO_TORCH_CURRENT_VENV:-/opt/zero-venvs/torch-current}}"
if ! mkdir -p "$(dirname "$VENV")" 2>/dev/null || [ ! -w "$(dirname "$VENV")" ]; then
  VENV="${XDG_CACHE_HOME:-$HOME/.cache}/zero-venvs/torch-current"
  mkdir -p "$(dirname "$VENV")"
fi
PY=/usr/bin/python3
TORCH="torch==2.15.0"
DEEPSPEED="deepspeed==0.19.8"
REST="accelerate==1.16.0 transformers==5.25.0 pytest"
PKGS="$TORCH $DEEPSPEED $REST"
MARKER="$VENV/.zero-installed"

if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$PKGS" ] && \
   "$VENV/bin/python" -c "import torch, deepspeed, transformers, pytest" >/dev/null 2>&1; then
  echo "install_current_torch: $VENV ready ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null))" >&2
  echo "$VENV"
  exit 0
fi

{
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
  "${PIP[@]}" --upgrade pip setuptools wheel
  "${PIP[@]}" "$TORCH" numpy
  # DeepSpeed's setup.py imports torch: build it against the torch just
  # installed. DS_BUILD_OPS=0 leaves its C++ ops to JIT (CPU Adam builds on
  # first use).
  DS_BUILD_OPS=0 "${PIP[@]}" --no-build-isolation "$DEEPSPEED"
  # shellcheck disable=SC2086  # REST is a list of requirements
  "${PIP[@]}" $REST
} >&2
echo "$PKGS" > "$MARKER"
"$VENV/bin/python" -c 'import sys, torch, deepspeed, transformers; print("install_current_torch: python", sys.version.split()[0], "torch", torch.__version__, "deepspeed", deepspeed.__version__, "transformers", transformers.__version__)' >&2
echo "$VENV"
