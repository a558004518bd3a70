#!/usr/bin/env bash
# CPU Adam, NVMe step and NVMe scale benchmarks at sizes that finish in about
# two minutes on a small machine. JSON lines on stdout.
#   bash bench/offload_bench.sh [DIR]   DIR: where the NVMe files go (default /tmp)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir="$(mktemp -d "${1:-/tmp}/zero_offload_bench.XXXXXX")"
trap 'rm -rf "$dir"' EXIT
bazel build -c opt //bench:cpu_adam_bench //bench:nvme_step_bench //bench:nvme_scale_bench >&2
bazel-bin/bench/cpu_adam_bench 50000000 5
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  /usr/bin/python3 bench/torch_adam.py 50000000 3
else
  echo '{"bench":"cpu_adam","kernel":"torch_adam","skipped":"python3-torch not installed"}'
fi
bazel-bin/bench/nvme_step_bench "$dir" 25e6 4e6 3 4 1
bazel-bin/bench/nvme_step_bench "$dir" 25e6 4e6 3 4 0
bazel-bin/bench/nvme_scale_bench "$dir" "${ZERO_SCALE_PARAMS:-1e8}" 2
