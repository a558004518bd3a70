#!/usr/bin/env python3
"""Muon's loss curve beside AdamW's on the test GPT (TinyGPT of
examples/python/gpt_train.py): same model (seed 0), same data (seed 1), same
steps, zero.torch at one ZeRO stage on one rank or under mpirun.

    bazel run //bench:muon_loss_bench -- [--stage 2] [--steps 200]
        [--adam_lr 3e-3] [--muon_lr 0.02] [--weight_decay 0.0]
    mpirun -np 2 python3 bench/muon_loss_bench.py --stage 3   # zero on PYTHONPATH

Muon puts the blocks' Linear weights on Muon (DeepSpeed's rule: 2-D, not an
embedding; the head is tied to the token embedding, so AdamW), the rest on
AdamW at adam_lr; the AdamW run uses adam_lr for everything. Prints JSON
lines on rank 0: one per (optimizer, step) with the step's training loss
(mean over ranks), then a summary with each curve's mean loss over the last
10 % of steps and the ratio muon/adamw."""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Dict, List

import numpy as np

import gpt_train
import zero
import zero.torch as ds


def config(args: argparse.Namespace, world: int, muon: bool) -> Dict:
    cfg = gpt_train.ds_config(args.stage, world)
    params = {"lr": args.adam_lr, "betas": [0.9, 0.999], "eps": 1e-8,
              "weight_decay": args.weight_decay}
    if muon:
        params.update({"muon_lr": args.muon_lr, "adam_lr": args.adam_lr,
                       "momentum": 0.95, "nesterov": True, "ns_steps": 5})
    cfg["optimizer"] = {"type": "Muon" if muon else "AdamW", "params": params}
    return cfg


def run(args: argparse.Namespace, comm: zero.Comm, muon: bool) -> List[float]:
    rank, world = comm.rank, comm.size
    model = gpt_train.make_model(seed=0)
    engine, _, _, _ = ds.initialize(model=model, model_parameters=model.parameters(),
                                    config=config(args, world, muon), comm=comm)
    losses = []
    try:
        for x, y in gpt_train.batches(args.steps, seed=1):
            loss = engine(x.chunk(world)[rank], y.chunk(world)[rank])
            engine.backward(loss)
            engine.step()
            v = comm.allreduce_sum(np.array([loss.item()], dtype=np.float32))
            losses.append(float(v[0]) / world)
    finally:
        engine.destroy()
    return losses


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stage", type=int, default=2)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--adam_lr", type=float, default=gpt_train.LR)
    p.add_argument("--muon_lr", type=float, default=0.02)
    p.add_argument("--weight_decay", type=float, default=0.0)
    args = p.parse_args()
    comm = zero.Comm.default()
    curves = {}
    for name in ("adamw", "muon"):
        t0 = time.time()
        curves[name] = run(args, comm, name == "muon")
        if comm.rank == 0:
            for step, loss in enumerate(curves[name], 1):
                print(json.dumps({"optimizer": name, "stage": args.stage, "ranks": comm.size,
                                  "step": step, "loss": round(loss, 6)}))
            print(json.dumps({"optimizer": name, "seconds": round(time.time() - t0, 2)}),
                  file=sys.stderr)
    if comm.rank == 0:
        tail = max(1, args.steps // 10)
        last = {k: sum(v[-tail:]) / tail for k, v in curves.items()}
        print(json.dumps({"summary": True, "model": "examples/python/gpt_train.py TinyGPT",
                          "stage": args.stage, "ranks": comm.size, "steps": args.steps,
                          "adam_lr": args.adam_lr, "muon_lr": args.muon_lr,
                          "weight_decay": args.weight_decay,
                          "first_loss": curves["adamw"][0],
                          "adamw_last10pct": round(last["adamw"], 6),
                          "muon_last10pct": round(last["muon"], 6),
                          "muon_over_adamw": round(last["muon"] / last["adamw"], 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
