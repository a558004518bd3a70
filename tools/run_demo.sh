#!/usr/bin/env bash
# The main job: trains the C example MLP on 4 MPI ranks of this machine at
# ZeRO stages 0-3 (stage 0 = DDP) and prints, per stage, loss, step time and
# model-state memory per rank: the CPU counterpart of DDP vs ZeRO-2 vs ZeRO-3.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
NP="${NP:-4}"
HIDDEN="${HIDDEN:-16384}"
LR="${LR:-1e-3}"
STEPS="${STEPS:-60}"
bazel build -c opt //examples/c:mlp_train >&2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
results=()
for stage in 0 1 2 3; do
  echo "== stage $stage on $NP ranks ==" >&2
  line=$(mpirun -np "$NP" --oversubscribe --bind-to none --mca btl self,vader \
    bazel-bin/examples/c/mlp_train --stage "$stage" --hidden "$HIDDEN" \
    --steps "$STEPS" --lr "$LR" | tee /dev/stderr | grep '^{')
  results+=("$line")
done
printf '%s\n' "${results[@]}" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
base = rows[0]["model_state_bytes_per_rank"]
print()
print("stage  ranks  params    first loss  final loss  step ms  model states/rank  vs stage 0")
for r in rows:
    m = r["model_state_bytes_per_rank"]
    print("%5d  %5d  %8d  %10.4f  %10.4f  %7.2f  %14.2f MiB  %9.2fx" % (
        r["stage"], r["world"], r["params"], r["first_loss"], r["final_loss"],
        r["step_ms"], m / 2**20, m / base))
'
