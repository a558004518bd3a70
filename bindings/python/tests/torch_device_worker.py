"""zero.torch on zero.Comm.nccl() (the NCCL-shaped stand-in under
ZERO_GPU_STANDIN=1) and on zero.Comm.mpi() (CPU), for torch_device_test.py:
run under mpirun, each rank saves both results for the test to compare."""
import argparse
import os
import sys

import torch

import zero
import zero.torch as zt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402


def train(comm, stage, dtype):
    cfg = torch_model.ds_config(stage, gas=2, world=comm.size)
    if dtype != "fp32":
        cfg[dtype] = {"enabled": True}
    model = torch_model.make_model()
    engine = zt.initialize(model, cfg, comm=comm)
    norms = []
    try:
        for x, y in torch_model.make_data(3):
            xs, ys = x.chunk(comm.size)[comm.rank], y.chunk(comm.size)[comm.rank]
            for xm, ym in zip(xs.chunk(2), ys.chunk(2)):
                out = engine(xm.to(engine.compute_dtype))
                engine.backward(torch_model.loss_fn(out.float(), ym))
                info = engine.step()
                if info.boundary:
                    norms.append(info.grad_norm)
        params = engine.full_state_dict()
        kind = engine.zero.device.type
    finally:
        engine.close()
    return params, norms, kind


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    assert os.environ.get("ZERO_GPU_STANDIN") == "1"
    result = {}
    rank = 0
    for stage in (1, 3):
        for dtype in ("fp32", "bf16"):
            with zero.Comm.nccl() as comm:
                rank = comm.rank
                dev, dn, kind = train(comm, stage, dtype)
                assert kind == "standin", kind
            with zero.Comm.mpi() as comm:
                cpu, cn, kind = train(comm, stage, dtype)
                assert kind == "cpu", kind
            result[f"{stage}_{dtype}"] = {"dev": dev, "cpu": cpu, "dn": dn, "cn": cn}
    torch.save(result, os.path.join(args.out, f"rank{rank}.pt"))
    print("worker done", rank, flush=True)


if __name__ == "__main__":
    sys.exit(main())
