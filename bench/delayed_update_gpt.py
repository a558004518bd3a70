#!/usr/bin/env python3
"""ZeRO-Offload's delayed update beside its exact mode on the test GPT
(TinyGPT of examples/python/gpt_train.py, ``--offload_optimizer cpu`` and
``cpu_delayed``): the same seeded model and batches, the same AdamW and
steps, zero.torch on the CPU device at each ZeRO stage, on one rank or under
mpirun; beside plain torch AdamW run by each rule (gpt_train.train_torch,
exact and ``delayed``), the independent reference.

    bazel run //bench:delayed_update_gpt -- [--stages 1,2,3] [--steps 200]
        [--eval_at 10,50,200] [--lr 3e-3] [--dtype fp32]
    mpirun -np 2 python3 bench/delayed_update_gpt.py   # zero and examples/python on PYTHONPATH

The figure of merit is the evaluation loss (gpt_train.eval_loss: held-out
batches, plain torch) of the fp32 master after --eval_at steps: the model
each mode has trained, the same on every rank. (The delayed mode's training
losses are those of params one update behind.) --lr replaces gpt_train.LR
(the config's and the torch reference's). Prints JSON lines on rank 0: one
per (stage, mode) and per torch rule with the evaluation losses, rank 0's
mean training loss over the last 10 % of steps and the seconds taken; then a
summary per stage: delayed / exact, and each zero mode / its torch rule, at
each --eval_at step."""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Dict, List

import gpt_train
import zero

MODES = ("cpu", "cpu_delayed")  # gpt_train.OFFLOAD: exact, delayed


def line(rank: int, what: Dict, evaluated: Dict[int, float], losses: List[float],
         t0: float) -> None:
    if rank != 0:
        return
    tail = max(1, len(losses) // 10)
    print(json.dumps({**what, "eval_loss": {str(k): round(v, 6) for k, v in evaluated.items()},
                      "first_train_loss": round(losses[0], 6),
                      "rank0_train_last10pct": round(sum(losses[-tail:]) / tail, 6),
                      "seconds": round(time.time() - t0, 2)}), flush=True)


def ratios(a: Dict[int, float], b: Dict[int, float]) -> Dict[str, float]:
    return {str(k): round(a[k] / b[k], 4) for k in a}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stages", default="1,2,3")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--eval_at", default="10,50,200")
    ap.add_argument("--lr", type=float, default=gpt_train.LR)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    a = ap.parse_args(argv)
    gpt_train.LR = a.lr
    rank, world = zero.launcher_rank_and_size()
    eval_at = sorted({int(s) for s in a.eval_at.split(",") if int(s) <= a.steps} | {a.steps})
    head = {"bench": "delayed_update_gpt", "ranks": world, "dtype": a.dtype, "lr": a.lr,
            "steps": a.steps}
    ref = {}
    if rank == 0:  # one process: the global batch, as zero's ranks together
        for delayed in (False, True):
            t0 = time.time()
            ref[delayed] = dict.fromkeys(eval_at, float("nan"))
            losses = gpt_train.train_torch(a.steps, delayed, ref[delayed])
            line(rank, {**head, "mode": "torch_delayed" if delayed else "torch"}, ref[delayed],
                 losses, t0)
    for stage in (int(s) for s in a.stages.split(",")):
        got = {}
        for mode in MODES:
            t0 = time.time()
            got[mode] = dict.fromkeys(eval_at, float("nan"))
            losses = gpt_train.train(stage, a.steps, rank, world, a.dtype, offload=mode,
                                     evaluated=got[mode])
            line(rank, {**head, "mode": mode, "stage": stage}, got[mode], losses, t0)
        if rank == 0:
            print(json.dumps({
                **head, "summary": True, "model": "examples/python/gpt_train.py TinyGPT",
                "stage": stage,
                "delayed_over_exact": ratios(got["cpu_delayed"], got["cpu"]),
                "exact_over_torch": ratios(got["cpu"], ref[False]),
                "delayed_over_torch_delayed": ratios(got["cpu_delayed"], ref[True]),
                "torch_delayed_over_torch": ratios(ref[True], ref[False])}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
