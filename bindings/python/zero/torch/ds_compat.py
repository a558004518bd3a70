"""The engine DeepSpeed's integrations (HF Trainer, accelerate) drive:
ZeroTorchEngine plus the DeepSpeedEngine names they call
(``set_gradient_accumulation_boundary``, ``_zero3_consolidated_16bit_state_dict``,
``register_post_step_hook``, ``config``) and the stage-3 param attributes
(``ds_numel``, ``ds_shape``, ``ds_id``, ``ds_status``, ``ds_tensor``).
``deepspeed.initialize`` of zero's DeepSpeed layer (bindings/python/zero_deepspeed,
docs/DEEPSPEED_COMPAT.md, "The deepspeed import name") makes it."""
from __future__ import annotations

import enum
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional

import torch

from ..errors import FailedPreconditionError
from .engine import ZeroTorchEngine
from .launch import _owner_of


class ZeroParamStatus(enum.Enum):
    """DeepSpeed's ``partition_parameters.ZeroParamStatus``."""
    AVAILABLE = 1      # the full value is in the param (gathered)
    NOT_AVAILABLE = 2  # released: a placeholder
    INFLIGHT = 3       # DeepSpeed: being gathered (zero gathers synchronously)


class DeepSpeedCompatEngine(ZeroTorchEngine):
    """ZeroTorchEngine with DeepSpeedEngine's names for its integrations."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._boundary_override: Optional[bool] = None
        self._post_step_hooks: List[Callable[..., Any]] = []

    _consolidating = False

    def _state_dict_value(self, p: torch.nn.Parameter) -> torch.Tensor:
        """Stage 3, as DeepSpeed: ``module.state_dict()`` is not collective
        and holds each param's partitioned form (an empty tensor; DeepSpeed's
        ``param.data`` outside a gather), so a rank may call it alone (the
        non-main ranks of ``save_pretrained(state_dict=None)`` in accelerate's
        save recipe). The full values come from
        :meth:`_zero3_consolidated_16bit_state_dict` (every rank) and
        GatheredParameters. Stages 0-2: the working values, as zero.torch."""
        if self.stage == 3 and not self._consolidating:
            return torch.empty(0, dtype=self.dtype, device=self._bridge.torch_device)
        return super()._state_dict_value(p)

    @property
    def config(self) -> Dict[str, Any]:
        """The DeepSpeed config as a dict (DeepSpeedEngine.config), with
        ``zero_optimization.stage`` as the runtime parsed it."""
        cfg = dict(self.zero.config)
        zo = dict(cfg.get("zero_optimization") or {}) if isinstance(
            cfg.get("zero_optimization"), dict) else {}
        zo["stage"] = self.stage
        cfg["zero_optimization"] = zo
        return cfg

    def save_16bit_model(self, *args: Any, **kwargs: Any) -> bool:
        """As ZeroTorchEngine's (stage 3 gathers for it)."""
        self._consolidating = True
        try:
            return super().save_16bit_model(*args, **kwargs)
        finally:
            self._consolidating = False

    def set_gradient_accumulation_boundary(self, is_boundary: bool) -> None:
        """As DeepSpeed: says whether the next backward ends an accumulation
        window. The caller (accelerate) then calls :meth:`step` only at the
        boundary; a backward before another micro-step ends the runtime's
        micro-step itself. The runtime runs the optimizer every
        ``gradient_accumulation_steps`` micro-steps: a boundary elsewhere
        (accelerate forces one at the end of a dataloader whose length the
        steps do not divide) is an error naming the micro-step, on every rank,
        rather than an update from part of a window."""
        self._boundary_override = bool(is_boundary)

    def backward(self, loss: torch.Tensor, retain_graph: bool = False,
                 scale_wrt_gas: bool = True) -> None:
        override = self._boundary_override
        if override is not None:
            gas = int(self.gradient_accumulation_steps)
            at = self.micro_steps + 1  # this backward's micro-step
            if (at % gas == 0) != override:
                raise FailedPreconditionError(
                    f"set_gradient_accumulation_boundary({override}) before micro-step "
                    f"{at} (rank {self.global_rank}): zero runs the optimizer every "
                    f"gradient_accumulation_steps={gas} micro-steps, so micro-step {at} "
                    f"{'is' if at % gas == 0 else 'is not'} a boundary; make the number of "
                    "micro-batches a multiple of gradient_accumulation_steps")
        super().backward(loss, retain_graph=retain_graph, scale_wrt_gas=scale_wrt_gas)
        if override is False:
            super().step()  # the caller skips step() inside the window

    # The optimizer view of a client optimizer (zero_deepspeed's
    # _client_optim): its lr is checked before every step.
    _client_view: Any = None

    def step(self) -> Any:
        if self._client_view is not None:
            self._client_view.check(self.get_lr()[0])
        info = super().step()
        if self._client_view is not None:
            self._client_view.stepped(self.get_lr()[0])
        self._boundary_override = None
        if info.boundary and not info.skipped:
            for hook in list(self._post_step_hooks):
                hook(self.module, self.optimizer)
        return info

    def register_post_step_hook(self, hook: Callable[..., Any]) -> None:
        """``hook(module, optimizer)`` runs after every applied optimizer
        step (not after an fp16 overflow skip)."""
        self._post_step_hooks.append(hook)

    def _zero3_consolidated_16bit_state_dict(
            self, exclude_frozen_parameters: bool = False) -> Optional[Dict[str, torch.Tensor]]:
        """COLLECTIVE. As DeepSpeed: the module's full state dict in the
        working dtype on the CPU on rank 0 (tied params shared), None on the
        other ranks; stage 3 only (else ValueError, as DeepSpeed)."""
        if self.stage != 3:
            raise ValueError("this function requires ZeRO-3 mode")
        self._check_open()
        self._consolidating = True
        try:
            state = self.module.state_dict()  # gathered by the state-dict hooks
        finally:
            self._consolidating = False
        frozen = {n for n, t in zip(self._names, self._trainable) if not t}
        if self.global_rank != 0:
            return None
        out: Dict[str, torch.Tensor] = OrderedDict()
        for k, v in state.items():
            if exclude_frozen_parameters and k in frozen:
                continue
            out[k] = v.detach().cpu()
        return out


class _DsAttributeUnsupported(AttributeError):
    """An attribute zero's DeepSpeed layer names but cannot give (an
    AttributeError, so ``hasattr`` stays False)."""


def _stage3_owner(p: torch.Tensor, name: str) -> Any:
    owner = _owner_of(p)
    if owner is None or owner[0].stage != 3:
        raise AttributeError(f"'{type(p).__name__}' object has no attribute '{name}'")
    return owner


def _ds_numel(p: torch.Tensor) -> int:
    e, i = _stage3_owner(p, "ds_numel")
    return int(e.zero.param(e._ids[i]).numel)


def _ds_shape(p: torch.Tensor) -> torch.Size:
    e, i = _stage3_owner(p, "ds_shape")
    return torch.Size(e.zero.param(e._ids[i]).shape)


def _ds_id(p: torch.Tensor) -> int:
    e, i = _stage3_owner(p, "ds_id")
    return int(e._ids[i])


def _ds_status(p: torch.Tensor) -> ZeroParamStatus:
    e, i = _stage3_owner(p, "ds_status")
    return ZeroParamStatus.AVAILABLE if e._gather_count[i] > 0 else ZeroParamStatus.NOT_AVAILABLE


def _ds_tensor(p: torch.Tensor) -> torch.Tensor:
    e, i = _stage3_owner(p, "ds_tensor")
    raise _DsAttributeUnsupported(
        f"ds_tensor of param {e._names[i]!r}: zero's DeepSpeed layer does not expose a "
        "rank's partition (the runtime owns it); use deepspeed.zero.GatheredParameters "
        "for the full value")


_DS_ATTRIBUTES = {"ds_numel": _ds_numel, "ds_shape": _ds_shape, "ds_id": _ds_id,
                  "ds_status": _ds_status, "ds_tensor": _ds_tensor}


def install_stage3_param_attributes() -> None:
    """Gives ``torch.nn.Parameter`` DeepSpeed's stage-3 attributes as
    properties that exist only on params of a live stage-3 zero engine
    (``hasattr`` is False on any other param). Properties on the class, not
    a subclass per param: stage 3's guard recognises params by
    ``type(a) is torch.nn.Parameter``. Idempotent."""
    for name, fn in _DS_ATTRIBUTES.items():
        if not isinstance(getattr(torch.nn.Parameter, name, None), property):
            setattr(torch.nn.Parameter, name, property(fn))
