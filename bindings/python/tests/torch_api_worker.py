"""One rank of the multi-rank zero.torch API tests (run under mpirun).

    broadcast OUT [--dist]: ranks start from different weights and buffers;
        after initialize every rank holds rank 0's (through the runtime's
        communicator, or torch.distributed with --dist); trains stage 2 and 3;
        rank 0 writes OUT/broadcast_stage{s}.pt.
    fail OUT STAGE WHERE: rank 1 fails at step 2 — WHERE "forward": its
        model raises inside engine(x) and the script catches it and goes on
        (a skipped step); "uncaught": an exception outside zero escapes the
        script. Every rank must end promptly (the job is aborted), naming
        rank 1 and the exception.
    gpt OUT: the GPT example under torch DDP (gloo), and the example's own
        main() (zero.torch) at stages 0-3 with and without
        --activation_checkpointing; every rank writes OUT/gpt_rank{r}.json
        with its losses; checks the stage-3 state_dict against the fp32
        masters at this world size.
"""
import contextlib
import io
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_train  # noqa: E402
import torch_model  # noqa: E402
import zero  # noqa: E402
import zero.torch as zt  # noqa: E402

STEPS = 5


def init_dist(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)


def broadcast(out, rank, world, dist):
    if dist:
        init_dist(rank, world)
    for stage in (2, 3):
        model = torch_model.make_model()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(float(rank))  # rank 0 keeps the reference values
        model.register_buffer("stat", torch.full((3,), float(rank) + 0.25))
        model.register_buffer("count", torch.tensor([rank * 2 ** 40 + 7]))
        model.register_buffer("flag", torch.tensor([rank == 0, rank == 1]))
        engine = zt.initialize(model, torch_model.ds_config(stage, 1, world))
        assert torch.equal(model.stat, torch.full((3,), 0.25)), model.stat
        assert model.count.item() == 7, model.count
        assert model.flag.tolist() == [True, False], model.flag
        want = dict(torch_model.make_model().named_parameters())
        for name, v in engine.full_state_dict().items():
            assert torch.equal(v, want[name].detach()), (rank, name)
        torch_model._train_steps(engine, torch_model.make_data(), rank, world, 1)
        params = engine.full_state_dict()
        engine.close()
        if rank == 0:
            torch.save(params, os.path.join(out, f"broadcast_stage{stage}.pt"))


def gpt(out, rank, world):
    init_dist(rank, world)
    model = gpt_train.make_model()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=gpt_train.LR, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=0.0)
    result = {"ddp": []}
    for x, y in gpt_train.batches(STEPS):
        opt.zero_grad()
        loss = ddp(x.chunk(world)[rank], y.chunk(world)[rank])
        loss.backward()
        opt.step()
        result["ddp"].append(loss.item())
    # The example as a script: its own main(), DeepSpeed's API throughout.
    for stage in range(4):
        for ac in (False, True):
            argv = ["--stage", str(stage), "--steps", str(STEPS), "--json"]
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                assert gpt_train.main(argv + ["--activation_checkpointing"] * ac) == 0
            line = json.loads(printed.getvalue())
            assert line["rank"] == rank
            result[f"zero{stage}" + "_ac" * ac] = line["losses"]
    # Stage 3 at this world size: the module's state dict is the runtime's.
    model = gpt_train.make_model()
    engine, _, _, _ = zt.initialize(model=model, config=gpt_train.ds_config(3, world))
    x, y = gpt_train.batches(1)[0]
    engine.backward(engine(x.chunk(world)[rank], y.chunk(world)[rank]))
    engine.step()
    sd = model.state_dict()
    for name, v in engine.full_state_dict().items():
        assert torch.equal(sd[name], v), name
    engine.destroy()
    with open(os.path.join(out, f"gpt_rank{rank}.json"), "w") as f:
        json.dump(result, f)


def fail(out, rank, world, stage, where):
    model = torch_model.make_model()
    engine = zt.initialize(model, torch_model.ds_config(stage, 1, world))
    boom = {"on": False}

    def hook(module, inputs):
        if boom["on"]:
            raise ValueError("bad batch on purpose")

    model[0].register_forward_pre_hook(hook)
    for step, (x, y) in enumerate(torch_model.make_data(6)):
        xs, ys = x.chunk(world)[rank], y.chunk(world)[rank]
        if rank == 1 and step == 2:
            if where == "uncaught":
                raise RuntimeError("data loader died")
            boom["on"] = True
        try:
            loss = torch_model.loss_fn(engine(xs), ys)
        except ValueError:
            boom["on"] = False
            continue  # "skip this batch": the ranks would pair steps wrongly
        engine.backward(loss)
        engine.step()
    engine.close()


def main():
    mode, out = sys.argv[1], sys.argv[2]
    rank, world = zero.launcher_rank_and_size()
    if mode == "fail":
        fail(out, rank, world, int(sys.argv[3]), sys.argv[4])
    elif mode == "broadcast":
        broadcast(out, rank, world, "--dist" in sys.argv)
    else:
        gpt(out, rank, world)


if __name__ == "__main__":
    main()
