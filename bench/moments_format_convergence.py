#!/usr/bin/env python3
"""Adam's moments as fp32, bf16 and 8-bit blocks (``optimizer.moments_format``,
docs/ARCHITECTURE.md "Optimizer state formats") on the GPT of
examples/python/gpt_train.py, at several seeds (model init and batch order):
per seed and format the final training loss (mean of the last ``--window``
steps) and the loss on held-out text the model never trains on; then each
format's mean over the seeds against fp32's, beside fp32's own spread over
the seeds (the run-to-run noise a format's gap is judged against). JSON
lines; exit 0 when every format's mean final and held-out losses are within
``--bound`` (1 %) of fp32's. Not a test (minutes):

    bazel run //bench:moments_format_convergence -- --steps 300 --seeds 0,1,2
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Dict, List, Tuple

import torch

import gpt_train
import zero.torch as ds

# Text outside gpt_train.TEXT: a byte model trained on that paragraph is
# scored on English it has not memorised.
HELD_OUT = (b"Data parallel training keeps a full copy of the model on every "
            b"device and averages the gradients after each backward pass. The "
            b"optimizer then updates every copy the same way, so the states are "
            b"replicated as many times as there are devices. ") * 2
FORMATS = ("fp32", "bf16", "8bit")
# The 8-bit codes (kernels/moments_format_math.h): exp_avg sign + E4M3,
# exp_avg_sq 3-bit binades with 5 mantissa bits over the top 3, relative to
# each 64-element block's absmax. Earlier figures: "minifloat_e4m3_e5m3"
# (exp_avg_sq 3 mantissa bits throughout); rows without q8_map: the
# bitsandbytes-style base-10 dynamic maps.
Q8_MAP = "minifloat_e4m3_v_e5m3_top3_m5"


def held_out_batches(n: int = 8) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    data = torch.tensor(list(HELD_OUT), dtype=torch.long)
    ctx, out = gpt_train.CTX, []
    for b in range(n):
        starts = [(b * gpt_train.GLOBAL_BATCH + i) * 7 % (len(data) - ctx - 1)
                  for i in range(gpt_train.GLOBAL_BATCH)]
        out.append((torch.stack([data[s:s + ctx] for s in starts]),
                    torch.stack([data[s + 1:s + ctx + 1] for s in starts])))
    return out


def train(fmt: str, seed: int, a) -> Tuple[List[float], float]:
    model = gpt_train.make_model(seed)
    cfg = gpt_train.ds_config(a.stage, 1, a.dtype)
    cfg["optimizer"]["moments_format"] = fmt
    cfg["optimizer"]["params"]["lr"] = a.lr
    engine, _, _, _ = ds.initialize(model=model, model_parameters=model.parameters(),
                                    config=cfg)
    try:
        losses = []
        for x, y in gpt_train.batches(a.steps, seed=100 + seed):
            loss = engine(x, y)
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
        with torch.no_grad():
            held = [engine(x, y).item() for x, y in held_out_batches()]
        return losses, sum(held) / len(held)
    finally:
        engine.destroy()


def mean(xs: List[float]) -> float:
    return sum(xs) / len(xs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--lr", type=float, default=gpt_train.LR)
    ap.add_argument("--stage", type=int, default=2)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--bound", type=float, default=0.01)
    ap.add_argument("--formats", default=",".join(FORMATS),
                    help="comma-separated, fp32 always included (the baseline)")
    a = ap.parse_args(argv)
    formats = ["fp32"] + [f for f in FORMATS if f != "fp32" and f in a.formats.split(",")]
    seeds = [int(s) for s in a.seeds.split(",")]
    final: Dict[str, List[float]] = {f: [] for f in formats}
    held: Dict[str, List[float]] = {f: [] for f in formats}
    for seed in seeds:
        for f in formats:
            curve, h = train(f, seed, a)
            final[f].append(mean(curve[-a.window:]))
            held[f].append(h)
            print(json.dumps({"bench": "moments_format_convergence", "format": f, "seed": seed,
                              "stage": a.stage, "dtype": a.dtype, "steps": a.steps, "lr": a.lr,
                              "first_loss": round(curve[0], 5),
                              "final_loss": round(final[f][-1], 5),
                              "held_out_loss": round(h, 5),
                              "every_50": [round(x, 4) for x in curve[::50]],
                              **({"q8_map": Q8_MAP} if f == "8bit" else {})}), flush=True)
    ok = True
    for f in formats:
        rel_final = mean(final[f]) / mean(final["fp32"]) - 1.0
        rel_held = mean(held[f]) / mean(held["fp32"]) - 1.0
        within = abs(rel_final) <= a.bound and abs(rel_held) <= a.bound
        ok = ok and within
        print(json.dumps({
            "bench": "moments_format_convergence", "summary": True, "format": f,
            "seeds": seeds, "steps": a.steps, "lr": a.lr,
            "mean_final_loss": round(mean(final[f]), 5),
            "mean_held_out_loss": round(mean(held[f]), 5),
            "final_over_fp32_minus_1": round(rel_final, 5),
            "held_out_over_fp32_minus_1": round(rel_held, 5),
            # fp32's own spread over the seeds, relative to its mean.
            "spread_over_seeds": round((max(final[f]) - min(final[f])) / mean(final[f]), 5),
            "held_out_spread_over_seeds": round((max(held[f]) - min(held[f])) / mean(held[f]), 5),
            "within_bound": within, **({"q8_map": Q8_MAP} if f == "8bit" else {})}),
              flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
