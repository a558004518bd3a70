#!/usr/bin/env bash
# Beyond one node: per mode (plain stage 3, HYBRID_SHARD, hpZ, qwZ, qgZ
# int8/int4, qwZ+qgZ+hpZ) at 2 "nodes" x 2 ranks — host aliases of this
# machine driven by zero-launch through tools/zero_launch_agent.sh, TCP
# between the nodes, shared memory inside — step time, inter- and
# intra-node bytes per step and the final loss against plain stage 3. JSON
# lines on stdout (and in OUT.jsonl), a plot in OUT.svg.
#
#   bash bench/multinode_bench.sh [STEPS=50] [OUT=/tmp/multinode_bench]
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-50}"
out="${2:-/tmp/multinode_bench}"
bazel build -c opt //tests:multihost_main >&2
main="$(bazel info -c opt bazel-bin 2>/dev/null)/tests/multihost_main"
hf="$(mktemp)"
for i in 1 2; do
  h="zero-host$i"
  getent ahostsv4 "$h" | grep -q "^127\.0\.0\.$((i + 1)) " || h="127.0.0.$((i + 1))"
  echo "$h slots=2" >> "$hf"
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
python3 tools/zero_launch.py --hostfile "$hf" --launch_agent tools/zero_launch_agent.sh \
  --launcher_args "--mca oob_tcp_if_include lo --mca routed direct --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca btl_vader_single_copy_mechanism none --oversubscribe --bind-to none" \
  "$main" --nodes 2,2 --bench "$steps" 2>/dev/null | grep '"bench":"multinode"' | tee "$out.jsonl"
rm -f "$hf"
python3 bench/plot_multinode.py "$out.jsonl" "$out.svg"
echo "plot: $out.svg" >&2
