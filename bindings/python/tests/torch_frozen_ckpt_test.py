"""save_checkpoint(exclude_frozen_parameters=True), as DeepSpeed's: a
LoRA-style model (gpt_train's TinyGPT, every base param frozen, low-rank
adapters on each block's qkv and proj) saved at 2 thread ranks holds only
the adapters and their AdamW moments (the manifest lists exactly the
trainable params; the files are smaller than the frozen base alone). Loaded
with load_module_strict=False onto a freshly built base whose adapters start
elsewhere, training continues as the uninterrupted run does (losses and
adapters within 1e-6, the frozen base untouched), at stages 0-3 and at 2 and
3 thread ranks, and saved by 2 MPI processes, resumed by 3 (mpirun, stages 1
and 3); a strict load names the missing frozen params and says why.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

import gpt_train
import zero.torch as zt
from thread_ranks import on_ranks

ROWS = 6  # global batch: divisible by 2 and 3 ranks
STEPS, SAVED_AT, RANK = 6, 3, 2


class LoRALinear(torch.nn.Module):
    """``base(x) + x A^T B^T``: a frozen Linear and its trainable low-rank
    update, as PEFT's LoRA (scaling 1, no dropout)."""

    def __init__(self, base: torch.nn.Linear, rank: int) -> None:
        super().__init__()
        self.base = base
        self.lora_A = torch.nn.Parameter(torch.randn(rank, base.in_features) * 0.1)
        self.lora_B = torch.nn.Parameter(torch.randn(base.out_features, rank) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_A.t()) @ self.lora_B.t()


def adapted_model(adapter_seed: int) -> torch.nn.Module:
    """The frozen base (seed 0, the same every time) with adapters drawn from
    ``adapter_seed``."""
    model = gpt_train.make_model(seed=0)
    model.requires_grad_(False)
    torch.manual_seed(adapter_seed)
    for block in model.blocks:
        block.qkv = LoRALinear(block.qkv, RANK)
        block.proj = LoRALinear(block.proj, RANK)
    return model


def config(stage, world):
    return {"train_batch_size": ROWS, "train_micro_batch_size_per_gpu": ROWS // world,
            "steps_per_print": 0, "comm_timeout_seconds": 120,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "betas": [0.9, 0.999],
                                                      "eps": 1e-8, "weight_decay": 0.01}},
            "zero_optimization": {"stage": stage}}


DATA = gpt_train.batches(STEPS, global_batch=ROWS)


def train(engine, rank, world, steps):
    rows = ROWS // world
    losses = []
    for x, y in (DATA[s] for s in steps):
        loss = engine(x[rank * rows:(rank + 1) * rows], y[rank * rows:(rank + 1) * rows])
        engine.backward(loss)
        engine.step()
        losses.append(float(loss))
    return losses


def rank_run(model, stage, rank, world, comm, steps, save=None, load=None, strict=False,
             asynchronous=False):
    """One rank's part: (load,) train ``steps``, (save); its losses and the
    final full state."""
    engine = zt.initialize(model, config(stage, world), comm=comm)
    try:
        if load is not None:
            engine.load_checkpoint(load, load_module_strict=strict)
        losses = train(engine, rank, world, steps)
        if save is not None:
            engine.save_checkpoint(save, tag="adapters", exclude_frozen_parameters=True,
                                   asynchronous=asynchronous)
            engine.wait_checkpoint()
        return losses, engine.full_state_dict()
    finally:
        engine.close(keep_values=False)


def run(stage, world, steps, save=None, load=None, adapter_seed=1, strict=False,
        asynchronous=False):
    """Trains ``steps`` at ``world`` thread ranks; returns the losses
    (averaged over ranks) and rank 0's final full state."""
    models = [adapted_model(adapter_seed) for _ in range(world)]
    out = on_ranks(world, lambda rank, comm: rank_run(
        models[rank], stage, rank, world, comm, steps, save, load, strict, asynchronous))
    losses = [sum(r[0][i] for r in out) / world for i in range(len(steps))]
    return losses, out[0][1]


def names(trainable):
    model = adapted_model(1)
    return {n for n, p in model.named_parameters() if p.requires_grad == trainable}


@pytest.fixture(scope="module")
def uninterrupted():
    return {stage: run(stage, 2, range(STEPS)) for stage in range(4)}


CASES = [(stage, load_world, False) for stage in range(4) for load_world in (2, 3)]


@pytest.mark.parametrize("stage,load_world,asynchronous", CASES + [(1, 3, True), (3, 2, True)])
def test_adapter_checkpoint_resumes_on_the_frozen_base(tmp_path, uninterrupted, stage,
                                                       load_world, asynchronous):
    first, _ = run(stage, 2, range(SAVED_AT), save=str(tmp_path), asynchronous=asynchronous)
    tag_dir = tmp_path / "adapters"
    with open(tag_dir / "manifest.json", encoding="utf-8") as f:
        manifest = json.load(f)
    assert manifest["frozen_params"] == "excluded"
    assert {p["name"] for p in manifest["params"]} == names(True)
    base = adapted_model(1)
    trainable = sum(p.numel() for p in base.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in base.parameters() if not p.requires_grad)
    files = sum(os.path.getsize(tag_dir / f["file"]) for f in manifest["files"])
    # master + exp_avg + exp_avg_sq of every trainable element, and section
    # indexes; the frozen base alone (fp32) would be 30x the adapters.
    assert 3 * 4 * trainable <= files < 4 * frozen, (files, trainable, frozen)

    second, state = run(stage, load_world, range(SAVED_AT, STEPS), load=str(tmp_path),
                        adapter_seed=2)  # adapters start elsewhere: loaded
    want_losses, want = uninterrupted[stage]
    loss_diff = max(abs(a - b) for a, b in zip(first + second, want_losses))
    weight_diff = max(float((state[n] - want[n]).abs().max()) for n in names(True))
    print(f"stage {stage}, loaded at {load_world} ranks, async {asynchronous}: "
          f"|loss - uninterrupted| {loss_diff:.2e}, |adapter - uninterrupted| {weight_diff:.2e}")
    assert loss_diff <= 1e-6 and weight_diff <= 1e-6, (loss_diff, weight_diff)
    for n in names(False):  # the base: built, never loaded, never trained
        assert torch.equal(state[n], base.state_dict()[n]), (stage, n)


def test_strict_load_names_the_frozen_params_it_lacks(tmp_path):
    run(1, 2, range(1), save=str(tmp_path))
    with pytest.raises(AssertionError) as e:  # on_ranks reports every rank's error
        run(1, 2, range(1), load=str(tmp_path), strict=True)
    text = str(e.value)
    assert "blocks.0.qkv.base.weight" in text and "exclude_frozen" in text
    assert "NotFound" in text or "missing" in text


def test_a_checkpoint_with_its_frozen_params_holds_them(tmp_path):
    """The default (DeepSpeed's too) saves the frozen params whole."""
    models = [adapted_model(1) for _ in range(2)]

    def body(rank, comm):
        engine = zt.initialize(models[rank], config(2, 2), comm=comm)
        try:
            engine.save_checkpoint(str(tmp_path), tag="all")
        finally:
            engine.close(keep_values=False)

    on_ranks(2, body)
    with open(tmp_path / "all" / "manifest.json", encoding="utf-8") as f:
        manifest = json.load(f)
    assert "frozen_params" not in manifest
    assert {p["name"] for p in manifest["params"]} == names(True) | names(False)
    assert len(manifest["files"]) == 2


def mpirun(np_, *args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.setdefault("OMPI_MCA_plm_rsh_agent", "")  # no ssh: one node
    cmd = [shutil.which("mpirun"), "-np", str(np_), "--oversubscribe", "--allow-run-as-root",
           "--mca", "btl", "self,vader", "-x", "PYTHONPATH",
           sys.executable, os.path.abspath(__file__), *map(str, args)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("stage", [1, 3])
def test_saved_at_2_mpi_ranks_resumed_at_3(tmp_path, uninterrupted, stage):
    """The same through MPI processes (mpirun -np 2, then -np 3)."""
    mpirun(2, "save", stage, tmp_path)
    mpirun(3, "load", stage, tmp_path)
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(3)]
    saving = [torch.load(tmp_path / f"saving_rank{r}.pt") for r in range(2)]
    first = [(a + b) / 2 for a, b in zip(*saving)]
    second = [sum(r["losses"][i] for r in results) / 3 for i in range(STEPS - SAVED_AT)]
    want_losses, want = uninterrupted[stage]
    assert max(abs(a - b) for a, b in zip(first + second, want_losses)) <= 1e-6
    for n in names(True):
        assert torch.allclose(results[0]["state"][n], want[n], rtol=0, atol=1e-6), (stage, n)
    base = adapted_model(1).state_dict()
    for n in names(False):
        assert torch.equal(results[0]["state"][n], base[n]), (stage, n)


def mpi_main(mode, stage, out):
    """Under mpirun: ``save`` trains the first steps and saves the adapters
    to ``out``; ``load`` resumes from it on the freshly built base. Each
    rank writes its losses (and rank 0 the final state) beside it."""
    import zero
    rank, world = zero.launcher_rank_and_size()
    if mode == "save":
        losses, _ = rank_run(adapted_model(1), stage, rank, world, None, range(SAVED_AT),
                             save=out)
        torch.save(losses, os.path.join(out, f"saving_rank{rank}.pt"))
        return
    losses, state = rank_run(adapted_model(2), stage, rank, world, None,
                             range(SAVED_AT, STEPS), load=out)
    torch.save({"losses": losses, "state": state if rank == 0 else None},
               os.path.join(out, f"rank{rank}.pt"))


if __name__ == "__main__":
    mpi_main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
