"""Uneven inputs under zero.torch's Join, one rank: the training both
torch_join_test.py (thread ranks) and its mpirun case (this file as the
program) run.

    torch_join_worker.py --stages 0,1,2,3 --counts 4,3,2 [--gas 2]

runs, at each stage, Join (rank r trains counts[r] micro-batches) and the
reference (every rank runs max(counts) micro-steps; past its count a rank's
loss is multiplied by 0, so it hands in zero gradients after a real
forward), and exits non-zero unless both end with the same bits.
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402
import zero  # noqa: E402
import zero.torch as zt  # noqa: E402


def micro_batches(rank: int, world: int, gas: int, n: int):
    """This rank's first n micro-batches of torch_model's global batches."""
    out = []
    for x, y in torch_model.make_data(-(-n // gas)):
        out += zip(x.chunk(world)[rank].chunk(gas), y.chunk(world)[rank].chunk(gas))
    return out[:n]


def train(stage: int, rank: int, world: int, counts, gas: int = 1, mode: str = "join",
          comm=None, model=None):
    """(full fp32 params, shadow micro-steps, seconds). mode "join": rank r
    trains counts[r] micro-batches inside engine.join(); "zeros": every rank
    runs max(counts), with its loss times 0 past counts[r]; "full": every
    rank trains max(counts) micro-batches. Thread ranks pass `model`, made
    beforehand (torch_model.make_model seeds torch's one global generator)."""
    longest = max(counts)
    mine = counts[rank] if mode == "join" else longest
    data = micro_batches(rank, world, gas, longest)
    engine = zt.initialize(torch_model.make_model() if model is None else model,
                           torch_model.ds_config(stage, gas, world), comm=comm)
    try:
        t0 = time.perf_counter()
        with engine.join(enable=(mode == "join")) as join:
            for k, (x, y) in enumerate(data[:mine]):
                loss = torch_model.loss_fn(engine(x), y)
                if mode == "zeros" and k >= counts[rank]:
                    loss = loss * 0.0
                engine.backward(loss)
                engine.step()
        seconds = time.perf_counter() - t0
        assert engine.micro_steps == longest, (engine.micro_steps, longest)
        assert engine.global_steps == longest // gas, engine.global_steps
        return engine.full_state_dict(), join.shadow_steps, seconds
    finally:
        # keep_values=False: nothing collective after the state dict (a
        # stage-3 close gathers every param again; not what is tested here).
        engine.close(keep_values=False)


def bits_equal(a, b) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k].view(torch.int32), b[k].view(torch.int32)) for k in a)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stages", default="0,1,2,3")
    ap.add_argument("--counts", required=True)
    ap.add_argument("--gas", type=int, default=1)
    args = ap.parse_args()
    rank, world = zero.launcher_rank_and_size()
    counts = [int(c) for c in args.counts.split(",")]
    assert len(counts) == world, (counts, world)
    for stage in [int(s) for s in args.stages.split(",")]:
        got, shadow, seconds = train(stage, rank, world, counts, args.gas, "join")
        want, _, _ = train(stage, rank, world, counts, args.gas, "zeros")
        assert shadow == max(counts) - counts[rank], shadow
        assert bits_equal(got, want), f"stage {stage} rank {rank}: Join != zero gradients"
        print(f"rank {rank} stage {stage}: {shadow} shadow micro-steps, "
              f"equal bit for bit, {seconds:.2f} s", flush=True)


if __name__ == "__main__":
    main()
