"""The small torch model, data and config shared by the torch adapter tests
and the multi-rank worker: Linear/LayerNorm/GELU stack, MSE loss (a mean)."""
from __future__ import annotations

from typing import Dict, List, Tuple

import torch

IN, HIDDEN, OUT = 16, 32, 4
GLOBAL_BATCH = 16     # divisible by 1, 2 and 4 ranks
STEPS = 5
LR, BETAS, EPS, WEIGHT_DECAY = 1e-2, (0.9, 0.999), 1e-8, 0.01


def make_model() -> torch.nn.Module:
    """The model with seed-0 initial values; the first LayerNorm's weight is
    frozen (registered with trainable=0)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(IN, HIDDEN),
        torch.nn.LayerNorm(HIDDEN),
        torch.nn.GELU(),
        torch.nn.Linear(HIDDEN, HIDDEN),
        torch.nn.LayerNorm(HIDDEN),
        torch.nn.GELU(),
        torch.nn.Linear(HIDDEN, OUT),
    )
    model[1].weight.requires_grad_(False)
    return model


def make_data(steps: int = STEPS) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    """`steps` global batches (inputs, targets), seed 1."""
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(GLOBAL_BATCH, IN, generator=g),
             torch.randn(GLOBAL_BATCH, OUT, generator=g)) for _ in range(steps)]


def ds_config(stage: int, gas: int = 1, world: int = 1) -> Dict:
    return {
        "train_micro_batch_size_per_gpu": GLOBAL_BATCH // (gas * world),
        "gradient_accumulation_steps": gas,
        "steps_per_print": 0,
        "comm_timeout_seconds": 120,  # a failing rank ends the test, not a hang
        "optimizer": {"type": "AdamW",
                      "params": {"lr": LR, "betas": list(BETAS), "eps": EPS,
                                 "weight_decay": WEIGHT_DECAY}},
        "zero_optimization": {"stage": stage},
    }


def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(out, target)


def train_reference(gas: int = 1, steps: int = STEPS) -> Dict[str, torch.Tensor]:
    """Plain single-process torch: AdamW on each full global batch (split
    into `gas` micro-batches whose losses are divided by gas)."""
    model = make_model()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS,
                            weight_decay=WEIGHT_DECAY)
    for x, y in make_data(steps):
        opt.zero_grad()
        for xm, ym in zip(x.chunk(gas), y.chunk(gas)):
            (loss_fn(model(xm), ym) / gas).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def _train_steps(engine, batches, rank: int, world: int, gas: int) -> list:
    """Runs `batches` (global) on this rank's slice; returns the StepInfos."""
    infos = []
    for x, y in batches:
        xs, ys = x.chunk(world)[rank], y.chunk(world)[rank]
        for xm, ym in zip(xs.chunk(gas), ys.chunk(gas)):
            loss = loss_fn(engine(xm), ym)
            engine.backward(loss)
            infos.append(engine.step())
    return infos


def train_zero(stage: int, rank: int = 0, world: int = 1, gas: int = 1,
               comm=None, overlap_grad_hooks: bool = True, steps: int = STEPS,
               wrap_policy=None):
    """zero.torch on this rank's slice of each global batch; returns
    (full fp32 params by name, engine stats, list of StepInfo)."""
    import zero.torch as zt

    model = make_model()
    engine = zt.initialize(model, ds_config(stage, gas, world), comm=comm,
                           overlap_grad_hooks=overlap_grad_hooks,
                           wrap_policy=wrap_policy)
    try:
        infos = _train_steps(engine, make_data(steps), rank, world, gas)
        params = engine.full_state_dict()
        stats = engine.stats()
    finally:
        engine.close()
    return params, stats, infos


RESUME_STEPS, SAVE_AT = 6, 3


def train_zero_resumed(stage: int, ckpt_dir: str, rank: int = 0,
                       world: int = 1):
    """Trains SAVE_AT steps and saves (default tag, client_state), then a new
    model (other initial values) and engine load the checkpoint and train on
    to RESUME_STEPS. Returns (full fp32 params, what load_checkpoint
    returned, whether stages 0-2 params kept their storage over the load)."""
    import zero.torch as zt

    data = make_data(RESUME_STEPS)
    with zt.initialize(make_model(), ds_config(stage, 1, world)) as engine:
        _train_steps(engine, data[:SAVE_AT], rank, world, 1)
        engine.save_checkpoint(ckpt_dir, client_state={"step": SAVE_AT})
    model = make_model()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # the checkpoint must overwrite every value
    with zt.initialize(model, ds_config(stage, 1, world)) as engine:
        ptrs = [p.data_ptr() for p in model.parameters()]
        loaded = engine.load_checkpoint(ckpt_dir)
        kept = ptrs == [p.data_ptr() for p in model.parameters()]
        assert engine.global_steps == SAVE_AT
        _train_steps(engine, data[SAVE_AT:], rank, world, 1)
        params = engine.full_state_dict()
    return params, loaded, kept


def assert_params_close(got: Dict[str, torch.Tensor],
                        want: Dict[str, torch.Tensor], rtol: float = 1e-5) -> None:
    """Each tensor within rtol relative to its largest reference magnitude."""
    assert sorted(got) == sorted(want)
    for name in want:
        g = got[name].to(torch.float32)
        w = want[name].to(torch.float32)
        assert g.shape == w.shape, name
        err = (g - w).abs().max().item()
        scale = max(w.abs().max().item(), 1e-30)
        assert err <= rtol * scale, f"{name}: max abs err {err} vs scale {scale}"
