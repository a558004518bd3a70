"""torch.nn.utils.clip_grad_* refused on params zero.torch manages (their
gradients live in the runtime, which clips by ``gradient_clipping``)."""
from __future__ import annotations

import functools
from typing import Any

import torch

from ..errors import FailedPreconditionError
from .launch import _owner_of


def _guard_clip(orig: Any, what: str) -> Any:
    """Wraps torch.nn.utils.clip_grad_* so that params zero.torch manages
    are refused: their gradients live in the runtime (handed over during
    backward), so torch would see none and clip nothing (and return 0)."""
    if getattr(orig, "_zero_guard", False):
        return orig

    @functools.wraps(orig)
    def wrapper(parameters, *args, **kwargs):
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        else:
            parameters = list(parameters)
        for p in parameters:
            owner = _owner_of(p)
            if owner is not None:
                e, i = owner
                raise FailedPreconditionError(
                    f"torch.nn.utils.{what}: param {e._names[i]!r} is managed by "
                    "zero.torch; its gradient lives in the runtime (handed over "
                    "during engine.backward), so torch sees none and would "
                    "clip nothing. Set \"gradient_clipping\": MAX_NORM in the "
                    "ds_config: the runtime clips by the global norm over all "
                    "ranks in engine.step() (engine.get_global_grad_norm() "
                    "reports the norm)")
        return orig(parameters, *args, **kwargs)

    wrapper._zero_guard = True  # type: ignore[attr-defined]
    return wrapper


def _install_clip_guards() -> None:
    import torch.nn.utils as nn_utils
    import torch.nn.utils.clip_grad as clip_mod
    for what in ("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_"):
        for mod in (nn_utils, clip_mod):
            orig = getattr(mod, what, None)
            if orig is not None:
                setattr(mod, what, _guard_clip(orig, what))
