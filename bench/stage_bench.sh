#!/usr/bin/env bash
# Step time, model-state memory and traffic per ZeRO stage at 2 and 4 ranks
# (the C example MLP), as JSON lines with the traffic formula ratio.
#   bash bench/stage_bench.sh [HIDDEN] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
HIDDEN="${1:-4096}"; STEPS="${2:-30}"
bazel build -c opt //examples/c:mlp_train >&2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for np in 2 4; do
  for stage in 0 1 2 3; do
    mpirun -np "$np" --oversubscribe --bind-to none --mca btl self,vader \
      bazel-bin/examples/c/mlp_train --stage "$stage" --hidden "$HIDDEN" \
      --steps "$STEPS" --lr 1e-3 --quiet | grep '^{' | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
W, psi = r["world"], r["params"]
formula = (3 if r["stage"] == 3 else 2) * psi * (W - 1) / W
print(json.dumps({"bench": "stage", "stage": r["stage"], "world": W, "params": psi,
                  "step_ms": r["step_ms"], "model_state_bytes_per_rank": r["model_state_bytes_per_rank"],
                  "sent_elems_per_step": r["sent_elems_per_step"],
                  "traffic_vs_formula": round(r["sent_elems_per_step"] / formula, 4)}))'
  done
done
