#!/usr/bin/env python3
"""ZeRO-Offload's delayed update beside its exact mode on the test GPT
(TinyGPT of examples/python/gpt_train.py, ``--offload_optimizer cpu`` and
``cpu_delayed``): the same seeded model and batches, the same AdamW and
steps, zero.torch on the CPU device at each ZeRO stage, on one rank or under
mpirun.

    bazel run //bench:delayed_update_gpt -- [--stages 1,2,3] [--steps 200]
        [--eval_at 10,50,200] [--dtype fp32]
    mpirun -np 2 python3 bench/delayed_update_gpt.py   # zero and examples/python on PYTHONPATH

The figure of merit is the evaluation loss (gpt_train.eval_loss: held-out
batches, plain torch) of the fp32 master after --eval_at steps: the model
each mode has trained, the same on every rank. The training losses of the
delayed mode are those of params one update behind, so they are reported
too but are not the comparison. Prints JSON lines on rank 0: one per
(stage, mode) with the evaluation losses, rank 0's mean training loss over
the last 10 % of steps and the seconds taken; then one summary per stage
with delayed / exact at each --eval_at step."""
from __future__ import annotations

import argparse
import json
import sys
import time

import gpt_train
import zero

MODES = ("cpu", "cpu_delayed")  # gpt_train.OFFLOAD: exact, delayed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stages", default="1,2,3")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--eval_at", default="10,50,200")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    a = ap.parse_args(argv)
    rank, world = zero.launcher_rank_and_size()
    eval_at = sorted({int(s) for s in a.eval_at.split(",") if int(s) <= a.steps} | {a.steps})
    for stage in (int(s) for s in a.stages.split(",")):
        got = {}
        for mode in MODES:
            t0 = time.time()
            evaluated = dict.fromkeys(eval_at, float("nan"))
            losses = gpt_train.train(stage, a.steps, rank, world, a.dtype, offload=mode,
                                     evaluated=evaluated)
            got[mode] = evaluated
            tail = max(1, a.steps // 10)
            if rank == 0:
                print(json.dumps({
                    "bench": "delayed_update_gpt", "mode": mode, "stage": stage,
                    "ranks": world, "dtype": a.dtype, "steps": a.steps,
                    "eval_loss": {str(k): round(v, 6) for k, v in evaluated.items()},
                    "first_train_loss": round(losses[0], 6),
                    "rank0_train_last10pct": round(sum(losses[-tail:]) / tail, 6),
                    "seconds": round(time.time() - t0, 2)}), flush=True)
        if rank == 0:
            exact, delayed = got["cpu"], got["cpu_delayed"]
            print(json.dumps({
                "summary": True, "bench": "delayed_update_gpt",
                "model": "examples/python/gpt_train.py TinyGPT", "stage": stage,
                "ranks": world, "dtype": a.dtype,
                "delayed_over_exact_eval_loss": {str(k): round(delayed[k] / exact[k], 4)
                                                 for k in eval_at}}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
