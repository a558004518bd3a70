#!/usr/bin/env bash
# Every test: installs what the build needs, then bazel test //... (C++,
# C ABI, MPI under mpirun -np 2/3/4, Python, Rust).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
bazel test //... "$@"
