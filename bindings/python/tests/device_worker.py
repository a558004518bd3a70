"""Training through zero.Engine on a device, for device_test.py.

train() is the shared loop: a two-layer linear model whose gradients the
host computes from the gathered weights (copied down from a DeviceArray, or
read from the numpy view of a CPU engine), written back through
grad_buffer. Run as a script under mpirun (ZERO_GPU_STANDIN=1) it trains on
zero.Comm.nccl() and on zero.Comm.mpi() (CPU) and saves both results.
"""
import argparse
import os
import sys

import numpy as np

import zero

SHAPES = {"w1": (6, 5), "b1": (5,), "w2": (5, 3)}


def config(stage, dtype="fp32", gas=1):
    cfg = {"zero_optimization": {"stage": stage, "reduce_bucket_size": 20,
                                 "stage3_param_persistence_threshold": 0,
                                 "stage3_max_live_parameters": 100},
           "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},
           "gradient_accumulation_steps": gas, "gradient_clipping": 1.0,
           "steps_per_print": 0}
    if dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    return cfg


def host(a):
    """Host float32 values of a gathered view or DeviceArray."""
    v = a.numpy() if isinstance(a, zero.DeviceArray) else np.array(a)
    return zero.bf16_to_float32(v) if v.dtype == np.uint16 else v.astype(np.float32)


def train(eng, rank, steps=4):
    """Trains `eng` (finalized with SHAPES) for `steps` micro-steps on
    rank-dependent data; returns the final fp32 masters and step norms."""
    rng = np.random.default_rng(100 + rank)
    norms = []
    for _ in range(steps):
        x = rng.standard_normal((4, 6)).astype(np.float32)
        y = rng.standard_normal((4, 3)).astype(np.float32)
        w = {n: host(eng.gather(n)) for n in SHAPES}
        h = x @ w["w1"] + w["b1"]
        err = (h @ w["w2"] - y) / len(x)
        grads = {"w2": h.T @ err, "b1": (err @ w["w2"].T).sum(0),
                 "w1": x.T @ (err @ w["w2"].T)}
        for n in reversed(list(SHAPES)):
            eng.release(n)
        for n in reversed(list(SHAPES)):
            eng.set_grad(n, grads[n].astype(np.float32))
        info = eng.step()
        norms.append(info.grad_norm)
    return {n: eng.read_master(n) for n in SHAPES}, norms


def build(cfg, comm, device=None):
    eng = zero.Engine(cfg, comm=comm, device=device)
    rng = np.random.default_rng(7)
    for n, s in SHAPES.items():
        eng.register_param(n, rng.standard_normal(s).astype(np.float32) * 0.3)
    eng.finalize()
    return eng


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--stages", default="0,1,2,3")
    args = ap.parse_args()
    assert os.environ.get("ZERO_GPU_STANDIN") == "1"
    out = {}
    for stage in [int(s) for s in args.stages.split(",")]:
        for dtype in ("fp32", "bf16"):
            with zero.Comm.nccl() as comm:
                with build(config(stage, dtype), comm) as eng:
                    assert eng.device.type == "standin", eng.device
                    assert isinstance(eng.gather("w1"), zero.DeviceArray)
                    eng.release("w1")
                    dev, dn = train(eng, comm.rank)
                    rank = comm.rank
            with zero.Comm.mpi() as comm:
                with build(config(stage, dtype), comm) as eng:
                    cpu, cn = train(eng, comm.rank)
            for n in SHAPES:
                out[f"{stage}_{dtype}_{n}_dev"] = dev[n]
                out[f"{stage}_{dtype}_{n}_cpu"] = cpu[n]
            out[f"{stage}_{dtype}_norms_dev"] = np.array(dn)
            out[f"{stage}_{dtype}_norms_cpu"] = np.array(cn)
    np.savez(os.path.join(args.out, f"rank{rank}.npz"), **out)
    print("worker done", rank, flush=True)


if __name__ == "__main__":
    sys.exit(main())
