"""One rank of the multi-rank torch adapter test (run under mpirun).

Trains the shared model at each requested stage on this rank's slice of the
global batch; rank 0 writes the final full params to OUT/stage{s}.pt.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402
import zero  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--stages", default="0,1,2,3")
    ap.add_argument("--gas", type=int, default=1)
    args = ap.parse_args()
    rank, world = zero.launcher_rank_and_size()
    for stage in [int(s) for s in args.stages.split(",")]:
        params, stats, _ = torch_model.train_zero(stage, rank, world, gas=args.gas)
        assert stats["world_size"] == world, stats
        if rank == 0:
            torch.save(params, os.path.join(args.out, f"stage{stage}.pt"))


if __name__ == "__main__":
    main()
