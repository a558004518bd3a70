"""``zero.torch.initialize``, as ``deepspeed.initialize``."""
from __future__ import annotations

from typing import Any, Iterable, Optional

import torch

from ..comm import Comm
from ..engine import ConfigLike
from ..errors import InvalidArgumentError, UnimplementedError
from .engine import ZeroTorchEngine


def _dataloader(engine: ZeroTorchEngine, training_data: Any,
                collate_fn: Any) -> Any:
    """As DeepSpeed's: micro batches of this rank's share (a
    DistributedSampler over the data-parallel ranks)."""
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    sampler = DistributedSampler(training_data, num_replicas=engine.world_size,
                                 rank=engine.global_rank)
    return DataLoader(training_data,
                      batch_size=engine.train_micro_batch_size_per_gpu(),
                      sampler=sampler, collate_fn=collate_fn)


def initialize(args: Any = None, model: Any = None, optimizer: Any = None,
               model_parameters: Optional[Iterable[torch.nn.Parameter]] = None,
               training_data: Any = None, lr_scheduler: Any = None,
               distributed_port: int = 29500, mpu: Any = None,
               dist_init_required: Optional[bool] = None,
               collate_fn: Any = None, config: Optional[ConfigLike] = None,
               config_params: Optional[ConfigLike] = None, *,
               comm: Optional[Comm] = None,
               overlap_grad_hooks: bool = True,
               init_fn: Any = None, pretrained: Any = None,
               init_seed: int = 0, wrap_policy: Any = None,
               device: Any = None, engine_class: Any = None) -> Any:
    """Moves ``model``'s state into a zero runtime, as ``deepspeed.initialize``.

    DeepSpeed's form (keywords, or ``args`` first)::

        engine, optimizer, dataloader, lr_scheduler = zero.torch.initialize(
            args=args, model=model, model_parameters=params,
            config="ds_config.json")   # or config_params=, or args.deepspeed_config

    returns ``(engine, optimizer, training_dataloader, lr_scheduler)``:
    ``optimizer`` is a view of the runtime's optimizer (None without an
    ``optimizer`` block), ``training_dataloader`` a DataLoader over
    ``training_data`` (None without it), ``lr_scheduler`` a view of the
    config's ``scheduler`` (None without one). The short form
    ``initialize(model, config)`` (a module first) returns the engine alone.

    Args:
        model: the module; every rank starts from rank 0's param and buffer
            values (broadcast, as DeepSpeed does: torch.distributed when
            initialized, else the runtime's communicator). Values are cast to
            the working dtype of the config (fp16/bf16).
        config / config_params / args.deepspeed_config: DeepSpeed ds_config
            (dict, path or JSON text); exactly one source.
        model_parameters: the params to train (default: every param with
            ``requires_grad``); the others are registered frozen.
        optimizer, lr_scheduler, mpu: client objects are refused (the runtime
            runs the optimizer and schedule of the config).
        comm: the ranks; default MPI when launched by mpirun, else one rank.
        overlap_grad_hooks: hand gradients over from autograd hooks as
            backward produces them (default); False hands them in after
            backward, in reverse registration order.
        wrap_policy: stage 3's gather units, as FSDP's auto-wrap policies:
            module classes, an int (min params per unit, bottom-up) or a
            callable ``(module, name) -> bool`` (see _wrap_units). Default:
            every module gathers its own params.
        init_fn, init_seed: models larger than one rank. Params built
            under ``zero.torch.Init()`` get their own init code's values
            (replayed one param at a time, see zero.torch.Init). Other params
            on the ``meta`` device (``device="meta"``,
            ``Init(init_specs=True)``) are never materialized whole: each is
            registered with an init spec
            (zero.InitSpec, seed ``init_seed``) inferred from its module as
            torch's defaults (see _meta_init_spec: Linear, Conv*, Embedding,
            LayerNorm/GroupNorm/BatchNorm; other module types raise naming
            the param), and each rank computes only the elements it holds.
            ``init_fn(name, offset, count) -> values`` instead fills every
            meta param (called during finalize for this rank's elements).
            Values come from the runtime's generator: same distributions as
            torch's, not the same numbers. Meta buffers not made under
            ``Init()`` are refused.
        device: where the runtime keeps the state: ``"cuda:N"`` (default:
            the model's GPU when its params are on one; then gathered params
            alias the runtime's device memory through DLPack), ``"cpu"``.
            A CPU model given ``"cuda:N"`` is moved there, as DeepSpeed's
            engine moves it. With ``ZERO_GPU_STANDIN=1`` (tests), ``"cuda"`` is
            the CPU stand-in and the model stays on the CPU.
        pretrained: a ``.safetensors`` file or a Hugging Face
            ``model.safetensors.index.json``, loaded after the params are
            registered (zero.Engine.load_safetensors; each rank reads only
            what it holds); every param must be in it.
        engine_class: a ZeroTorchEngine subclass to make (zero's DeepSpeed
            layer passes ds_compat.DeepSpeedCompatEngine).

    A failure leaves no engine behind and the module with its own tensors.
    """
    cls = ZeroTorchEngine if engine_class is None else engine_class
    if isinstance(args, torch.nn.Module):  # the short form: (model, config)
        if model is not None and config is not None:
            raise InvalidArgumentError(
                "initialize(model, config): config given twice")
        cfg = model if model is not None else config
        if cfg is None:
            cfg = config_params
        if cfg is None:
            raise InvalidArgumentError("initialize(model, config): no config")
        return cls(args, cfg, comm=comm,
                               model_parameters=model_parameters,
                               overlap_grad_hooks=overlap_grad_hooks,
                               init_fn=init_fn, pretrained=pretrained,
                               init_seed=init_seed, wrap_policy=wrap_policy,
                               device=device)
    if not isinstance(model, torch.nn.Module):
        raise InvalidArgumentError(
            f"initialize: model must be a torch.nn.Module, got {type(model).__name__}")
    if config is None:
        config = config_params
    elif config_params is not None:
        raise InvalidArgumentError(
            "initialize: give config or config_params, not both")
    args_cfg = getattr(args, "deepspeed_config", None) if args is not None else None
    if args_cfg is not None:
        if config is not None:
            raise InvalidArgumentError(
                "initialize: not sure how to proceed, given a DeepSpeed config "
                "both in args.deepspeed_config and in initialize(config=...)")
        config = args_cfg
    if config is None:
        raise InvalidArgumentError(
            "initialize: no DeepSpeed config: pass config=, config_params= or "
            "args.deepspeed_config")
    if optimizer is not None:
        raise UnimplementedError(
            "initialize(optimizer=...): client optimizers are not supported; the "
            "runtime runs the \"optimizer\" block of the config (Adam, AdamW, SGD)")
    if lr_scheduler is not None:
        raise UnimplementedError(
            "initialize(lr_scheduler=...): client schedulers are not supported; "
            "the runtime runs the \"scheduler\" block of the config")
    if mpu is not None:
        raise UnimplementedError("initialize(mpu=...): model parallelism")
    engine = cls(model, config, comm=comm,
                             model_parameters=model_parameters,
                             overlap_grad_hooks=overlap_grad_hooks,
                             init_fn=init_fn, pretrained=pretrained,
                             init_seed=init_seed, wrap_policy=wrap_policy,
                             device=device, _keep_originals=True)
    loader = None
    if training_data is not None:
        try:
            loader = _dataloader(engine, training_data, collate_fn)
        except BaseException:
            engine._undo_setup()
            raise
    engine._drop_originals()
    return engine, engine.optimizer, loader, engine.lr_scheduler
