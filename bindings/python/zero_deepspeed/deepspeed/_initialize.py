"""``deepspeed.initialize`` over zero.torch.initialize, and the top-level
functions beside it."""
from __future__ import annotations

import argparse
from typing import Any, Iterable, List, Optional

import torch

import zero.torch as _zt
from zero.comm import launched_by_mpi
from zero.errors import FailedPreconditionError, InvalidArgumentError, UnimplementedError
from zero.torch.ds_compat import DeepSpeedCompatEngine

from . import comm


def _check_ranks() -> None:
    """The runtime's ranks are MPI's (zero.Comm.default); the integrations'
    collectives are torch.distributed's. Both must be the same ranks, or
    every rank would train alone on its own data (a silent wrong result)."""
    world = comm.get_world_size()
    if world > 1 and not launched_by_mpi():
        raise FailedPreconditionError(
            f"deepspeed.initialize (zero's DeepSpeed layer), rank {comm.get_rank()}: torch.distributed "
            f"has {world} ranks but the process was not started by MPI (torchrun, `accelerate launch` "
            "or `deepspeed` start ranks the zero runtime cannot join). Launch with zero-launch, which "
            "takes the deepspeed and accelerate launchers' arguments (`zero-launch --num_gpus 2 "
            "train.py ...`, `zero-launch --num_processes 2 --use_deepspeed ...`), or with mpirun")
    if launched_by_mpi():
        from zero.comm import launcher_rank_and_size
        rank, size = launcher_rank_and_size()
        if comm.is_initialized() and (size != world or rank != comm.get_rank()):
            raise FailedPreconditionError(
                f"deepspeed.initialize (zero's DeepSpeed layer): MPI rank {rank} of {size} is "
                f"torch.distributed rank {comm.get_rank()} of {world}; RANK/WORLD_SIZE must be MPI's")


def _flatten(model_parameters: Optional[Iterable[Any]], config: Any) -> Optional[List[Any]]:
    """Params from a list of params or of param groups (DummyOptim's); a
    group whose hyperparameters differ from the config's optimizer is refused
    (the runtime has one set of hyperparameters for every param)."""
    if model_parameters is None:
        return None
    items = list(model_parameters)
    if not items or not isinstance(items[0], dict):
        return items
    from zero.engine import load_config
    opt = ((load_config(config) if config is not None else {}).get("optimizer") or {}).get("params") or {}
    out: List[Any] = []
    for n, group in enumerate(items):
        for key, value in group.items():
            if key in ("params", "name"):
                continue
            want = opt.get(key)
            if want != "auto" and value != want and not (isinstance(value, (tuple, list)) and list(value) == want):
                raise UnimplementedError(
                    f"deepspeed.initialize(model_parameters=...): param group {n} sets {key}={value!r}, "
                    f"the config's optimizer {key}={want!r}; zero's runtime applies one set of optimizer "
                    "hyperparameters to every param (per-group values are not supported)")
        out.extend(group["params"])
    return out


def _client_blocks(cfg: Any, optimizer: Any, lr_scheduler: Any) -> Any:
    """The config with the client optimizer's and scheduler's blocks (see
    _client_optim), and the optimizer's params."""
    from zero.engine import load_config

    from ._client_optim import optimizer_block, scheduler_block
    out = dict(load_config(cfg)) if cfg is not None else {}
    block, params = optimizer_block(optimizer)
    if "optimizer" in out:
        raise InvalidArgumentError(f"deepspeed.initialize(optimizer={type(optimizer).__name__}): the config "
                                   "has an \"optimizer\" block too; give one")
    out["optimizer"] = block
    if callable(lr_scheduler) and not hasattr(lr_scheduler, "step"):
        lr_scheduler = lr_scheduler(optimizer)  # as DeepSpeed: built on the optimizer
    if lr_scheduler is not None:
        if "scheduler" in out:
            raise InvalidArgumentError(
                f"deepspeed.initialize(lr_scheduler={type(lr_scheduler).__name__}): the config has a "
                "\"scheduler\" block too; give one")
        scheduler_block(lr_scheduler, optimizer)  # constant: the runtime's lr without a block
    return out, params


def _finite(config: Any) -> Any:
    """The config as a dict in JSON the runtime parses: the HF Trainer sets
    ``steps_per_print`` to ``inf`` (never print), which JSON cannot hold; it
    becomes the largest int32. Any other non-finite number is an error naming
    its key."""
    import math
    from zero.engine import load_config
    cfg = load_config(config) if not isinstance(config, dict) else dict(config)

    def clean(value: Any, key: str) -> Any:
        if isinstance(value, dict):
            return {k: clean(v, f"{key}.{k}" if key else k) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v, key) for v in value]
        if isinstance(value, float) and not math.isfinite(value):
            if key == "steps_per_print" and value > 0:
                return 2**31 - 1
            raise InvalidArgumentError(f"config key {key}: {value} is not a finite number")
        return value
    return clean(cfg, "")


def _leaf_policy(model: Any) -> Any:
    """Stage 3's gather units with deepspeed.utils.set_z3_leaf_modules' marks:
    as DeepSpeed, a leaf gathers its whole subtree at once (no hooks inside
    it); every other module stays a unit of its own (zero.torch's default)."""
    if not isinstance(model, torch.nn.Module):
        return None
    leaves = [m for m in model.modules() if getattr(m, "_z3_leaf", False)]
    if not leaves:
        return None
    inner = {id(c) for leaf in leaves for c in leaf.modules() if c is not leaf}
    return lambda module, name: id(module) not in inner


def initialize(args: Any = None, model: Optional[torch.nn.Module] = None, optimizer: Any = None,
               model_parameters: Optional[Iterable[Any]] = None, training_data: Any = None,
               lr_scheduler: Any = None, distributed_port: int = 29500, mpu: Any = None,
               dist_init_required: Optional[bool] = None, collate_fn: Any = None, config: Any = None,
               mesh_param: Any = None, config_params: Any = None) -> Any:
    """As ``deepspeed.initialize``: ``(engine, optimizer, dataloader,
    lr_scheduler)``, the engine a zero.torch DeepSpeedCompatEngine over MPI's
    ranks (zero-launch). The runtime runs the config's ``optimizer`` and
    ``scheduler`` blocks; a client torch AdamW/Adam/SGD and an HF Trainer
    schedule become those blocks where the runtime computes them exactly
    (_client_optim), anything else is refused naming what differs."""
    if mesh_param is not None:
        raise UnimplementedError("deepspeed.initialize(mesh_param=...): model/sequence parallel meshes")
    if optimizer is None and lr_scheduler is not None:
        what = "<callable>" if not hasattr(lr_scheduler, "step") else type(lr_scheduler).__name__
        raise UnimplementedError(
            f"deepspeed.initialize(lr_scheduler={what}) without a client optimizer: zero's runtime runs the "
            "config's schedule on its own optimizer: add a \"scheduler\" block (WarmupLR, WarmupDecayLR or "
            "WarmupCosineLR, \"auto\" values are filled by the Trainer)")
    comm.init_distributed(distributed_port=distributed_port, dist_init_required=dist_init_required)
    _check_ranks()
    cfg = config if config is not None else config_params
    if cfg is None and args is not None:
        cfg = getattr(args, "deepspeed_config", None)
    if config is not None and config_params is not None:
        raise InvalidArgumentError("deepspeed.initialize: give config or config_params, not both")
    if optimizer is not None:
        cfg, client_params = _client_blocks(cfg, optimizer, lr_scheduler)
        if model_parameters is None:
            model_parameters = client_params
    params = _flatten(model_parameters, cfg)
    if cfg is not None and args is not None and getattr(args, "deepspeed_config", None) is not None \
            and (config is not None or config_params is not None):
        raise InvalidArgumentError(
            "deepspeed.initialize: not sure how to proceed, given a DeepSpeed config both in "
            "args.deepspeed_config and in initialize(config=...)")
    out = _zt.initialize(model=model, model_parameters=params, training_data=training_data,
                         mpu=mpu, collate_fn=collate_fn,
                         config=None if cfg is None else _finite(cfg),
                         wrap_policy=_leaf_policy(model), engine_class=DeepSpeedCompatEngine)
    if optimizer is None:
        return out
    from ._client_optim import ClientOptimizerView
    engine = out[0]
    engine._client_view = ClientOptimizerView(engine.optimizer, engine.get_lr()[0])
    return (engine, engine._client_view) + tuple(out[2:])


def tp_model_init(model: torch.nn.Module, tp_size: int, dtype: Any, config: Any = None, **kwargs: Any) -> Any:
    """DeepSpeed's AutoTP: tensor parallelism is not supported by zero."""
    raise UnimplementedError(
        f"deepspeed.tp_model_init(tp_size={tp_size}): tensor parallelism (AutoTP, "
        "tensor_parallel.autotp_size) is not supported by zero's DeepSpeed layer; zero shards over "
        "data-parallel ranks only")


def add_config_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """As DeepSpeed's: --deepspeed and --deepspeed_config."""
    group = parser.add_argument_group("DeepSpeed", "DeepSpeed configurations")
    group.add_argument("--deepspeed", default=False, action="store_true",
                       help="Enable DeepSpeed (zero's DeepSpeed layer)")
    group.add_argument("--deepspeed_config", default=None, type=str, help="DeepSpeed json configuration file.")
    return parser


__all__ = ["initialize", "tp_model_init", "add_config_arguments", "InvalidArgumentError"]
