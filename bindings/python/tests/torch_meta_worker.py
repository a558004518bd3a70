"""One rank of torch_meta_test's mpirun case (world 3, stage 3).

Builds TinyGPT on the meta device (zero.torch.Init) and once eagerly with
torch's module defaults; initializes each with zero.torch at stage 3 (no
persistent params: every param sharded); rank 0 writes the meta model's full
params right after initialize to OUT/meta_init.pt; every rank trains both on
its slice of the same global batches and writes its losses to
OUT/losses{rank}.json. Then padding_model() (embeddings with padding_idx
whose padding rows straddle the ranks' shards) is initialized at stage 3 with
the whole-param paths of zero.Engine disabled, and rank 0 writes its full
params to OUT/padding_init.pt.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_train  # noqa: E402  (examples/python)
import zero  # noqa: E402
import zero.torch as zt  # noqa: E402

STEPS = 6
GLOBAL_BATCH = 12  # divisible by 3


def padding_model(padding: bool = True) -> torch.nn.Module:
    """Built on meta. Embeddings with padding_idx (the same names and sizes
    without it when padding is False, so the other rows get the same spec
    values). At world 3 without persistent params, "0.weight"'s 150 elements
    shard about 50 a rank and padding row 1 ([30, 60)) crosses a boundary."""
    with zt.Init(init_specs=True):
        return torch.nn.Sequential(
            torch.nn.Embedding(5, 30, padding_idx=1 if padding else None),
            torch.nn.Embedding(64, 24, padding_idx=63 if padding else None),
            torch.nn.Linear(24, 8))


def sharded_config(stage: int, world: int = 1) -> dict:
    cfg = gpt_train.ds_config(stage, world=world)
    cfg["steps_per_print"] = 0
    cfg["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    return cfg


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rank, world = zero.launcher_rank_and_size()
    mb = GLOBAL_BATCH // world
    cfg = sharded_config(3, world=world)
    cfg.update(train_batch_size=GLOBAL_BATCH, train_micro_batch_size_per_gpu=mb,
               steps_per_print=0)
    losses = {}
    for kind in ("meta", "eager"):
        if kind == "meta":
            with zt.Init(init_specs=True):
                model = gpt_train.TinyGPT()
            assert all(p.is_meta for p in model.parameters())
        else:
            model = gpt_train.make_model(0)
            torch.manual_seed(0)
            for m in model.modules():
                if hasattr(m, "reset_parameters"):
                    m.reset_parameters()
        engine = zt.initialize(model, cfg)
        try:
            assert engine.zero.world_size == world
            if kind == "meta":
                sd = engine.full_state_dict()  # collective
                if rank == 0:
                    torch.save(sd, os.path.join(args.out, "meta_init.pt"))
            out = []
            for x, y in gpt_train.batches(STEPS, global_batch=GLOBAL_BATCH):
                loss = engine(x[rank * mb:(rank + 1) * mb], y[rank * mb:(rank + 1) * mb])
                engine.backward(loss)
                engine.step()
                out.append(loss.item())
            losses[kind] = out
        finally:
            engine.destroy()
    with open(os.path.join(args.out, f"losses{rank}.json"), "w") as f:
        json.dump(losses, f)

    # Padding rows are written as ranges: a call that would hold a whole
    # param on this rank fails the run.
    def whole(*a, **k):
        raise AssertionError("padding_idx must not read or write a whole param")
    saved = {k: getattr(zero.Engine, k) for k in ("write_master", "read_master", "gather")}
    for k in saved:
        setattr(zero.Engine, k, whole)
    try:
        engine = zt.initialize(padding_model(), cfg)
    finally:
        for k, v in saved.items():
            setattr(zero.Engine, k, v)
    try:
        sd = engine.full_state_dict()  # collective
        if rank == 0:
            torch.save(sd, os.path.join(args.out, "padding_init.pt"))
    finally:
        engine.destroy()


if __name__ == "__main__":
    main()
