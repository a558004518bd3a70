#!/usr/bin/env bash
# Installs a current PyTorch from PyPI plus DeepSpeed (and accelerate/transformers)
# into a virtual environment outside the repository, for the peer benchmarks in
# bench/ (bench/host_overhead_bench.py). Idempotent: a venv whose marker file
# names the same package set is left alone.
#
# The venv is made from /usr/bin/python3 (Debian's CPython 3.11) so that zero's
# Python extension built by Bazel against that interpreter (_zero_c) also
# imports there. The PyPI Linux torch wheel runs on the CPU (its CUDA libraries
# are loaded only when a GPU is present); DeepSpeed then runs with
# DS_ACCELERATOR=cpu. Needs several minutes and ~5 GB of disk.
#
# Usage: tools/install_current_torch.sh [VENV_DIR]   (default /opt/zero-venvs/torch-current)
set -euo pipefail

VENV="${1:-${ZERO_TORCH_CURRENT_VENV:-/opt/zero-venvs/torch-current}}"
PY=/usr/bin/python3
PKGS="torch deepspeed accelerate transformers"
MARKER="$VENV/.zero-installed"

if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$PKGS" ] && \
   "$VENV/bin/python" -c "import torch, deepspeed" 2>/dev/null; then
  echo "install_current_torch: $VENV ready ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))" >&2
  exit 0
fi

mkdir -p "$(dirname "$VENV")"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
"${PIP[@]}" --upgrade pip setuptools wheel
"${PIP[@]}" torch numpy
# DeepSpeed's setup.py imports torch: build it against the torch just installed.
# DS_BUILD_OPS=0 leaves its C++ ops to JIT (CPU Adam builds on first use).
DS_BUILD_OPS=0 "${PIP[@]}" --no-build-isolation deepspeed
"${PIP[@]}" accelerate transformers pytest
echo "$PKGS" > "$MARKER"
"$VENV/bin/python" -c 'import sys, torch, deepspeed; print("install_current_torch: python", sys.version.split()[0], "torch", torch.__version__, "deepspeed", deepspeed.__version__)' >&2
