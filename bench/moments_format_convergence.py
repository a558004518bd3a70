#!/usr/bin/env python3
"""Adam's moments as fp32, bf16 and 8-bit blocks (``optimizer.moments_format``,
docs/ARCHITECTURE.md "Optimizer state formats") on the GPT of
examples/python/gpt_train.py: the same seeded model and batches, the same
steps; prints each format's loss curve summary as JSON lines and whether the
final loss (mean of the last ``--window`` steps) is within ``--bound`` (1 %)
of fp32's. Not a test: bazel run //bench:moments_format_convergence.

    bazel run //bench:moments_format_convergence -- --steps 300 --stage 2
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import List

import torch

import gpt_train
import zero.torch as ds


def train(fmt: str, stage: int, steps: int, dtype: str) -> List[float]:
    torch.manual_seed(0)
    model = gpt_train.make_model()
    cfg = gpt_train.ds_config(stage, 1, dtype)
    cfg["optimizer"]["moments_format"] = fmt
    engine, _, _, _ = ds.initialize(model=model, model_parameters=model.parameters(),
                                    config=cfg)
    try:
        losses = []
        for x, y in gpt_train.batches(steps):
            loss = engine(x, y)
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
        return losses
    finally:
        engine.destroy()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--stage", type=int, default=2)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--bound", type=float, default=0.01)
    a = ap.parse_args(argv)
    curves = {f: train(f, a.stage, a.steps, a.dtype) for f in ("fp32", "bf16", "8bit")}
    final = {f: sum(c[-a.window:]) / len(c[-a.window:]) for f, c in curves.items()}
    ok = True
    for f, c in curves.items():
        rel = final[f] / final["fp32"] - 1.0
        within = abs(rel) <= a.bound
        ok = ok and within
        print(json.dumps({"bench": "moments_format_convergence", "format": f,
                          "stage": a.stage, "dtype": a.dtype, "steps": a.steps,
                          "first_loss": round(c[0], 5), "final_loss": round(final[f], 5),
                          "final_over_fp32_minus_1": round(rel, 5),
                          "within_bound": within,
                          "every_25": [round(x, 4) for x in c[::25]]}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
