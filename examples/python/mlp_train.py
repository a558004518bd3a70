"""Trains the MLP of examples/c/mlp_train.c through zero.Engine, bit for bit.

    python3 mlp_train.py [--config ds_config.json] [--stage S] [--steps N]
                         [--hidden H] [--dump FILE] [--quiet]

Same data, initial values, arithmetic (double precision, the C loop order:
every sum is accumulated in the same sequence, elementwise numpy ops are
exact IEEE operations, tanh/sin come from libm through `math`) and config as
the C program, so the final params are bitwise equal to the C run's. Under
mpirun every rank takes its slice of each global batch.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Dict, List, Optional

import numpy as np

import zero

IN, OUT, N_SAMPLES, GLOBAL_BATCH = 16, 4, 240, 48
NAMES = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
MASK64 = (1 << 64) - 1


class SplitMix64:
    """splitmix64; uniform(-1, 1) as the C example computes it."""

    def __init__(self, seed: int) -> None:
        self.s = seed

    def next(self) -> int:
        self.s = (self.s + 0x9E3779B97F4A7C15) & MASK64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def uniform(self) -> float:
        return float(self.next() >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0


def make_data():
    """Inputs (seed 7, row-major) and targets, as float64 arrays."""
    rng = SplitMix64(7)
    x = np.empty((N_SAMPLES, IN), np.float64)
    t = np.empty((N_SAMPLES, OUT), np.float64)
    for i in range(N_SAMPLES):
        for a in range(IN):
            x[i, a] = rng.uniform()
        for j in range(OUT):
            s = 0.0
            for a in range(IN):
                s += x[i, a] * float(((a + j) % 5) - 2)
            t[i, j] = math.sin(0.3 * s)
    return x, t


def make_params(hidden: int) -> List[np.ndarray]:
    """Initial values (seed 42): uniform(-1, 1) / sqrt(fan_in) as float32."""
    rng = SplitMix64(42)
    shapes = [(hidden, IN), (hidden,), (OUT, hidden), (OUT,)]
    fan_in = [IN, IN, hidden, hidden]
    out = []
    for shape, fan in zip(shapes, fan_in):
        n = int(np.prod(shape))
        vals = [rng.uniform() / math.sqrt(float(fan)) for _ in range(n)]
        out.append(np.array(vals, np.float64).astype(np.float32).reshape(shape))
    return out


def default_config(stage: int, quiet: bool) -> Dict:
    """The DeepSpeed JSON equal to the C example's zero_config: stage, lr
    1e-2, everything else default (AdamW, no weight decay)."""
    return {"zero_optimization": {"stage": stage},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
            "steps_per_print": 0 if quiet else 10}


def as_f64(view: np.ndarray, dtype: zero.DType) -> np.ndarray:
    if dtype == zero.DType.BF16:
        return zero.bf16_to_float32(view).astype(np.float64)
    return view.astype(np.float64)


def store(buf: np.ndarray, values: np.ndarray, dtype: zero.DType) -> None:
    """(float)v, then the working dtype (round to nearest even)."""
    f32 = values.astype(np.float32)
    if dtype == zero.DType.BF16:
        buf[...] = zero.float32_to_bf16(f32).reshape(buf.shape)
    else:
        buf[...] = f32.reshape(buf.shape).astype(buf.dtype)


def train(config: Dict, steps: int = 30, hidden: int = 32,
          comm: Optional[zero.Comm] = None, quiet: bool = True) -> Dict:
    """Runs the example; returns final fp32 params by name and losses."""
    x, t = make_data()
    with zero.Engine(config, comm=comm) as eng:
        rank, world = eng.rank, eng.world_size
        if GLOBAL_BATCH % world:
            raise ValueError(f"world size {world} must divide {GLOBAL_BATCH}")
        dtype = eng.dtype
        ids = [eng.register_param(n, p) for n, p in zip(NAMES, make_params(hidden))]
        eng.finalize()
        local = GLOBAL_BATCH // world
        gas = 1
        losses = []
        t0 = time.perf_counter()
        for s in range(steps):
            scale = eng.loss_scale
            w1, b1, w2, b2 = (as_f64(eng.gather(i), dtype) for i in ids)
            g = [np.zeros(w1.shape), np.zeros(b1.shape), np.zeros(w2.shape),
                 np.zeros(b2.shape)]
            rows = [(s * GLOBAL_BATCH + rank * local + m) % N_SAMPLES
                    for m in range(local)]
            h = np.empty((local, hidden))
            dy = np.empty((local, OUT))
            loss = 0.0
            for m, row in enumerate(rows):  # forward
                z = b1.copy()
                for a in range(IN):
                    z += w1[:, a] * x[row, a]
                h[m] = [math.tanh(v) for v in z]
                y = b2.copy()
                for j in range(hidden):
                    y += w2[:, j] * h[m, j]
                dy[m] = y - t[row]
                for k in range(OUT):
                    loss += 0.5 * dy[m, k] * dy[m, k]
            loss /= local
            for m, row in enumerate(rows):  # backward of the mean loss
                d = dy[m] / local
                g[3] += d
                g[2] += d[:, None] * h[m][None, :]
                dsum = np.zeros(hidden)
                for k in range(OUT):
                    dsum += dy[m, k] / local * w2[k]
                dh = dsum * (1.0 - h[m] * h[m])
                g[1] += dh
                g[0] += dh[:, None] * x[row][None, :]
            for i in ids:
                eng.release(i)
            for i in reversed(range(4)):  # last layer first, as autograd
                buf = eng.grad_buffer(ids[i])
                store(buf, g[i] * scale / gas, dtype)
                eng.grad_ready(ids[i])
            eng.report_samples(GLOBAL_BATCH)
            info = eng.step()
            lsum = eng.comm.allreduce_sum(np.array([loss], np.float32))
            losses.append(float(lsum[0]) / world)
            if not quiet and rank == 0 and (s % 10 == 0 or s == steps - 1):
                print(f"step {s} loss {losses[-1]:.6f} lr {info.lr:.3g} "
                      f"grad_norm {info.grad_norm:.4g}"
                      + (" (skipped: overflow)" if info.skipped else ""))
        step_ms = (time.perf_counter() - t0) / steps * 1e3
        params = {n: eng.read_master(i) for n, i in zip(NAMES, ids)}  # collective
        stats = eng.stats()
    return {"params": params, "losses": losses, "stats": stats,
            "step_ms": step_ms, "rank": rank}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config")
    ap.add_argument("--stage", type=int, default=0)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--dump")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    config = (zero.load_config(args.config) if args.config
              else default_config(args.stage, args.quiet))
    r = train(config, args.steps, args.hidden, quiet=args.quiet)
    st = r["stats"]
    if r["rank"] == 0:
        print(json.dumps({
            "example": "mlp_train.py", "stage": st["stage"],
            "world": st["world_size"], "params": st["trainable_numel"],
            "first_loss": round(r["losses"][0], 6),
            "final_loss": round(r["losses"][-1], 6),
            "step_ms": round(r["step_ms"], 3),
            "model_state_bytes_per_rank": st["master_bytes"] + st["optimizer_bytes"]
            + st["grad_bytes"] + st["param_bytes"]}))
        if args.dump:
            with open(args.dump, "wb") as f:
                for n in NAMES:
                    f.write(r["params"][n].astype(np.float32).tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
