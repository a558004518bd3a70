"""A client torch optimizer and lr scheduler given to ``deepspeed.initialize``
(what the HF Trainer passes when ds_config has no ``optimizer`` or
``scheduler`` block) as the config blocks the runtime runs.

The runtime holds one set of optimizer hyperparameters for every param and
computes the lr of each step itself (zero_engine_lr_for_step); the C ABI has
no per-param weight decay and no lr given at step time. So a client
optimizer is accepted when all its param groups agree, and a client
scheduler when it is one of the HF schedules the config's schedulers compute
exactly; anything else is refused naming what differs."""
from __future__ import annotations

import functools
from typing import Any, Dict, List, Tuple

import torch

from zero.errors import InvalidArgumentError, UnimplementedError

# torch class -> (config type, hyperparameters read from the param groups)
_KINDS = {
    torch.optim.AdamW: ("AdamW", ("lr", "betas", "eps", "weight_decay")),
    torch.optim.Adam: ("Adam", ("lr", "betas", "eps", "weight_decay")),
    torch.optim.SGD: ("SGD", ("lr", "momentum", "dampening", "weight_decay", "nesterov")),
}
# Flags the runtime does not implement: each must be at this value.
_MUST = {"amsgrad": False, "maximize": False, "differentiable": False}


def _value(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return v.item()
    if isinstance(v, tuple):
        return [_value(x) for x in v]
    return v


def optimizer_block(optimizer: Any) -> Tuple[Dict[str, Any], List[Any]]:
    """The config ``optimizer`` block of a client optimizer, and its params."""
    kind = _KINDS.get(type(optimizer))
    if kind is None:
        raise UnimplementedError(
            f"deepspeed.initialize(optimizer={type(optimizer).__module__}.{type(optimizer).__name__}): "
            "zero's DeepSpeed layer maps only torch.optim.AdamW, Adam and SGD onto the runtime's optimizer; give no "
            "optimizer and put an \"optimizer\" block in the config (Adam, AdamW, SGD, Lion, Adagrad)")
    name, keys = kind
    groups = optimizer.param_groups
    first = groups[0]
    for n, group in enumerate(groups):
        for key, want in _MUST.items():
            if group.get(key, want) != want:
                raise UnimplementedError(
                    f"deepspeed.initialize(optimizer={name}): param group {n} sets {key}={group[key]!r}; "
                    f"zero's runtime implements only {key}={want!r}")
        for key in keys + ("initial_lr",):
            if _value(group.get(key)) != _value(first.get(key)):
                raise UnimplementedError(
                    f"deepspeed.initialize(optimizer={name}): param group {n} has "
                    f"{key}={_value(group.get(key))!r}, param group 0 {key}={_value(first.get(key))!r}; "
                    "zero's runtime applies one set of optimizer hyperparameters to every param (no "
                    "per-group values, e.g. the HF Trainer's no-decay group of biases and norms when "
                    "weight_decay > 0). Use weight_decay=0, or one param group")
    params = {key: _value(first[key]) for key in keys if key in first}
    if "initial_lr" in first:  # a scheduler built on it already set lr to its step-0 value
        params["lr"] = _value(first["initial_lr"])
    if name == "Adam":
        params["adam_w_mode"] = False  # torch's Adam adds weight decay to the gradient (L2)
    return {"type": name, "params": params}, [p for g in groups for p in g["params"]]


def scheduler_block(scheduler: Any, optimizer: Any) -> None:
    """Accepts a client scheduler the runtime's constant lr equals (HF's
    constant schedule); refuses any other naming it. The config's schedulers
    apply their value of step t-1 at update t (DeepSpeed's: the scheduler
    steps after the update), HF's LambdaLR its value of step t, so HF's
    warmup and decay schedules are one step ahead of any config block."""
    name = type(scheduler).__name__
    if getattr(scheduler, "optimizer", None) is not optimizer:
        raise InvalidArgumentError(
            f"deepspeed.initialize(lr_scheduler={name}): the scheduler does not drive the optimizer given")
    lambdas = getattr(scheduler, "lr_lambdas", None) or [None]
    if getattr(scheduler, "last_epoch", 0) == 0 and \
            isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR) and all(map(_constant, lambdas)):
        return
    raise UnimplementedError(
        f"deepspeed.initialize(lr_scheduler={name}): zero's runtime computes the lr of each step itself "
        "and cannot take a client scheduler's lr; it takes the HF Trainer's \"constant\" schedule only "
        "(its \"linear\" and other warmup/decay schedules run one step ahead of the config's schedulers). "
        "Otherwise give no scheduler and add a \"scheduler\" block to the config (WarmupLR, WarmupDecayLR, "
        "WarmupCosineLR)")


def _constant(lr_lambda: Any) -> bool:
    """HF's constant schedule (or constant with 0 warmup steps), unstepped."""
    if getattr(lr_lambda, "__name__", "") == "_get_constant_lambda" \
            and getattr(lr_lambda, "__module__", "").startswith("transformers."):
        return True
    return isinstance(lr_lambda, functools.partial) \
        and getattr(lr_lambda.func, "__name__", "") == "_get_constant_schedule_with_warmup_lr_lambda" \
        and getattr(lr_lambda.func, "__module__", "").startswith("transformers.") \
        and lr_lambda.keywords.get("num_warmup_steps") == 0

class ClientOptimizerView:
    """What ``deepspeed.initialize`` returns for a client optimizer: the
    engine's optimizer with lasting ``param_groups`` (an lr scheduler built
    on it after initialize keeps its ``initial_lr`` there). The engine checks
    before each step that the group's lr is the lr the runtime applies: a
    different one (a scheduler's) is refused, as the C ABI takes no lr at
    step time."""

    def __init__(self, inner: Any, lr: float) -> None:
        self._inner = inner
        group = dict(inner.param_groups[0])
        group["lr"] = lr
        self.param_groups = [group]
        self._lr = lr

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def check(self, step_lr: float) -> None:
        got = self.param_groups[0]["lr"]
        if got != self._lr:
            raise UnimplementedError(
                f"zero's DeepSpeed layer: optimizer.param_groups[0]['lr'] was set to {got!r}, the runtime "
                f"applies {step_lr!r} at this step; it computes each step's lr from the config's schedule "
                "and cannot take an lr set on the optimizer (an lr scheduler built on the optimizer "
                "deepspeed.initialize returned, e.g. the HF Trainer's when ds_config has no \"scheduler\" "
                "block). Add a \"scheduler\" block (WarmupLR, WarmupDecayLR, WarmupCosineLR)")

    def stepped(self, next_lr: float) -> None:
        self.param_groups[0]["lr"] = self._lr = next_lr
