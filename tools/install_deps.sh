#!/usr/bin/env bash
# Installs every Debian package the build, tests, examples and benchmarks need.
# Idempotent: packages already present are skipped without touching apt.
set -euo pipefail

PKGS=(
  bazel-bootstrap bazel-platforms bazel-rules-java
  build-essential
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libabsl-dev nlohmann-json3-dev libhwy-dev liburing-dev libxxhash-dev
  libopenmpi-dev openmpi-bin
  slurm-wlm munge  # //tests:slurm_test starts its own controller, node daemon and munged
  python3-dev python3-numpy python3-pytest pybind11-dev python3-torch python3-venv python3-pip
  python3-matplotlib
  bindgen abigail-tools
  pkg-config bc
  clang libclang-rt-dev
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# PyPI packages Debian lacks: `safetensors` (checkpoint export test).
if ! /usr/bin/python3 -c "import safetensors" 2>/dev/null; then
  echo "install_deps: pip installing safetensors" >&2
  /usr/bin/python3 -m pip install -q --break-system-packages safetensors
fi
# `transformers` (the Hugging Face model tests): 4.45 is the last line that
# runs on Debian's torch 1.13.
if ! /usr/bin/python3 -c "import transformers" 2>/dev/null; then
  echo "install_deps: pip installing transformers 4.45" >&2
  /usr/bin/python3 -m pip install -q --break-system-packages 'transformers==4.45.*'
fi

# Host aliases of this machine for //tests:multihost_launch_test (several
# "nodes" on one machine, reached through tools/zero_launch_agent.sh).
for i in 1 2 3; do
  if ! grep -qE "^127\.0\.0\.$((i + 1))[[:space:]]+zero-host$i\$" /etc/hosts 2>/dev/null; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    echo "127.0.0.$((i + 1)) zero-host$i" | $SUDO tee -a /etc/hosts >/dev/null || \
      echo "install_deps: could not add zero-host$i to /etc/hosts" >&2
  fi
done
# `atheris` (libFuzzer for Python): the hostfile parser's fuzz target
# (tools/fuzz.sh; tests/fuzz/hostfile_fuzz.py). Optional: without it the
# long run reports the target skipped; the replay test needs only Python.
if ! /usr/bin/python3 -c "import atheris" 2>/dev/null; then
  echo "install_deps: pip installing atheris" >&2
  /usr/bin/python3 -m pip install -q --break-system-packages atheris ||
    echo "install_deps: atheris not installed (hostfile fuzzing skipped)" >&2
fi
