"""One rank of torch_meta_test's mpirun case (world 3, stage 3).

Builds TinyGPT on the meta device (zero.torch.Init) and once eagerly with
torch's module defaults; initializes each with zero.torch at stage 3; rank 0
writes the meta model's full params right after initialize to
OUT/meta_init.pt; every rank trains both on its slice of the same global
batches and writes its losses to OUT/losses{rank}.json.
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rank, world = zero.launcher_rank_and_size()
    mb = GLOBAL_BATCH // world
    cfg = gpt_train.ds_config(3, world=world)
    cfg.update(train_batch_size=GLOBAL_BATCH, train_micro_batch_size_per_gpu=mb,
               steps_per_print=0)
    losses = {}
    for kind in ("meta", "eager"):
        if kind == "meta":
            with zt.Init():
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


if __name__ == "__main__":
    main()
