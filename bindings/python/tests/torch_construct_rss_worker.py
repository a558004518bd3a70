"""One rank of torch_construct_rss_test (run under mpirun -np 1 and -np 3).

Measures this process's peak RSS growth while zero.torch.initialize builds a
stage-3 bf16 GPT-shaped model, once per mode, in this order:
  meta   the model built inside zero.torch.Init (params on the meta device;
         initialize replays the model's own init one param at a time, so a
         rank holds at most the largest param besides its share)
  eager  the model built by torch with real values on every rank, then
         initialized (the old way: each rank holds the whole model)
Before each mode the kernel's peak RSS (VmHWM) is reset through
/proc/self/clear_refs, so each peak is that mode's own; the communicator and
the imports exist before the first reset. Writes OUT/rss_{world}_{rank}.json:
per mode the peak growth, this rank's zero stats and the model's sizes.
"""
import argparse
import gc
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_train  # noqa: E402  (examples/python)
import zero  # noqa: E402
import zero.torch as zt  # noqa: E402

# ~26M params; the largest are the 4*DIM x DIM MLP matrices (1M elements).
SIZES = dict(ctx=32, dim=512, layers=8, heads=8)


def status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def reset_peak() -> int:
    """Resets VmHWM to the current RSS; returns that RSS in bytes."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return status_kb("VmRSS") * 1024


def config(world: int) -> dict:
    cfg = gpt_train.ds_config(3, world=world, dtype="bf16")
    cfg.update(train_batch_size=world, train_micro_batch_size_per_gpu=1)
    return cfg


def measure(mode: str, comm: "zero.Comm", world: int) -> dict:
    base = reset_peak()
    if mode == "meta":
        with zt.Init():
            model = gpt_train.TinyGPT(**SIZES)
    else:
        model = gpt_train.make_model(0, **SIZES)
    numel = [p.numel() for p in model.parameters()]
    engine = zt.initialize(model, config(world), comm=comm)
    peak = status_kb("VmHWM") * 1024 - base
    stats = engine.zero.stats()
    comm.barrier()  # every rank measured before any engine goes away
    engine.destroy()
    del engine, model
    return {"peak_growth_bytes": peak, "params": sum(numel),
            "largest_param": max(numel), "stats": stats}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    comm = zero.Comm.default()
    rank, world = comm.rank, comm.size
    out = {"world": world, "rank": rank}
    for mode in ("meta", "eager"):
        out[mode] = measure(mode, comm, world)
    with open(os.path.join(args.out, f"rss_{world}_{rank}.json"), "w") as f:
        json.dump(out, f)
    comm.close()


if __name__ == "__main__":
    main()
