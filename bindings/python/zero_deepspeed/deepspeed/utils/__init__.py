"""``deepspeed.utils``: logger, groups and the ZeRO-3 leaf-module marks."""
from __future__ import annotations

import logging
from typing import Any, List, Sequence, Type, Union

import torch

from . import groups  # noqa: F401

logger = logging.getLogger("DeepSpeed")
if not logger.handlers:
    _h = logging.StreamHandler()
    _h.setFormatter(logging.Formatter("[%(asctime)s] [%(levelname)s] [zero-deepspeed] %(message)s"))
    logger.addHandler(_h)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def log_dist(message: str, ranks: Sequence[int] = (0,), level: int = logging.INFO) -> None:
    from .. import comm
    if -1 in ranks or comm.get_rank() in ranks:
        logger.log(level, f"[Rank {comm.get_rank()}] {message}")


def _classes(leaf_module_classes: Sequence[Union[Type[Any], str]], model: torch.nn.Module) -> List[Any]:
    names = {c for c in leaf_module_classes if isinstance(c, str)}
    types = tuple(c for c in leaf_module_classes if not isinstance(c, str))
    return [m for m in model.modules()
            if (types and isinstance(m, types)) or type(m).__name__ in names]


def _mark(model: torch.nn.Module, leaf_module_classes: Sequence[Union[Type[Any], str]],
          raise_if_not_found: bool, leaf: bool) -> List[torch.nn.Module]:
    found = _classes(leaf_module_classes, model)
    if raise_if_not_found and not found:
        raise ValueError(f"No modules of type {list(leaf_module_classes)} found in model {type(model).__name__}")
    for m in found:
        m._z3_leaf = leaf
    return found


def set_z3_leaf_modules(model: torch.nn.Module, leaf_module_classes: Sequence[Union[Type[Any], str]],
                        raise_if_not_found: bool = True) -> List[torch.nn.Module]:
    """As DeepSpeed: marks the modules of these classes (or class names) as
    ZeRO-3 leaves, gathered whole for their forward and backward (MoE
    blocks, whose experts run data-dependently). zero.torch makes each leaf a
    stage-3 gather unit (initialize's wrap_policy) when the engine is built."""
    return _mark(model, leaf_module_classes, raise_if_not_found, True)


def unset_z3_leaf_modules(model: torch.nn.Module, leaf_module_classes: Sequence[Union[Type[Any], str]],
                          raise_if_not_found: bool = True) -> List[torch.nn.Module]:
    return _mark(model, leaf_module_classes, raise_if_not_found, False)


def z3_leaf_module(module: torch.nn.Module) -> bool:
    return bool(getattr(module, "_z3_leaf", False))


def get_z3_leaf_modules(model: torch.nn.Module) -> List[torch.nn.Module]:
    return [m for m in model.modules() if z3_leaf_module(m)]


def z3_leaf_parameter(param: torch.Tensor) -> bool:
    return bool(getattr(param, "ds_z3_leaf_module", False))
