"""zero.torch's optimizer and lr scheduler: read-only views of the
runtime's, which run inside ZeroTorchEngine.step()."""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Dict, List

from ..errors import UnimplementedError

if TYPE_CHECKING:
    from .engine import ZeroTorchEngine


class ZeroOptimizer:
    """``initialize``'s optimizer: a read-only view of the runtime's
    optimizer (it runs inside :meth:`ZeroTorchEngine.step`). ``param_groups``
    holds one group: the trainable params, the lr of the next step and the
    config's hyperparameters; writing into it changes nothing."""

    def __init__(self, engine: "ZeroTorchEngine") -> None:
        self._engine = weakref.proxy(engine)
        opt = engine.zero.config.get("optimizer") or {}
        self.type: str = opt.get("type", "")
        self._hyper = {k: (tuple(v) if isinstance(v, list) else v)
                       for k, v in (opt.get("params") or {}).items()}

    @property
    def param_groups(self) -> List[Dict[str, Any]]:
        e = self._engine
        group = dict(self._hyper)
        group["params"] = [p for p, t in zip(e._params, e._trainable) if t]
        group["lr"] = e.get_lr()[0]
        return [group]

    def get_lr(self) -> List[float]:
        return self._engine.get_lr()

    @property
    def loss_scale(self) -> float:
        return self._engine.loss_scale

    cur_scale = loss_scale

    @property
    def overflow(self) -> bool:
        """As DeepSpeed's ZeRO optimizers: whether the last optimizer step
        was skipped for a non-finite gradient (fp16 overflow)."""
        info = self._engine.last_step_info
        return bool(info is not None and info.boundary and info.skipped)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._engine.zero_grad(set_to_none)

    def step(self, closure: Any = None) -> None:
        raise UnimplementedError(
            "zero.torch optimizer.step(): the runtime's optimizer runs inside "
            "engine.step() at the gradient-accumulation boundary; call that")

    def state_dict(self) -> Dict[str, Any]:
        raise UnimplementedError(
            "zero.torch optimizer.state_dict(): the optimizer states are sharded "
            "in the runtime; use engine.save_checkpoint()")

    def __repr__(self) -> str:
        return f"<zero.torch.ZeroOptimizer {self.type} (runs in engine.step())>"


class ZeroLRScheduler:
    """``initialize``'s lr_scheduler: a view of the runtime's schedule (the
    ``scheduler`` block of the config), stepped by :meth:`ZeroTorchEngine.step`
    after each optimizer step as DeepSpeed's engine does."""

    def __init__(self, engine: "ZeroTorchEngine") -> None:
        self._engine = weakref.proxy(engine)
        self.type: str = (engine.zero.config.get("scheduler") or {}).get("type") or ""

    @property
    def last_batch_iteration(self) -> int:
        return self._engine.global_steps - 1

    def get_lr(self) -> List[float]:
        """The lr the next optimizer step uses."""
        return self._engine.get_lr()

    def get_last_lr(self) -> List[float]:
        """As DeepSpeed: the lr the last scheduler step set, which the next
        optimizer step uses."""
        return self._engine.get_lr()

    def step(self, *args: Any, **kwargs: Any) -> None:
        raise UnimplementedError(
            "zero.torch lr_scheduler.step(): the engine steps the schedule after "
            "each optimizer step (inside engine.step()), as DeepSpeed's engine "
            "does with a scheduler from the config; do not step it yourself")

    def state_dict(self) -> Dict[str, Any]:
        return {"last_batch_iteration": self.last_batch_iteration}

    def __repr__(self) -> str:
        return f"<zero.torch.ZeroLRScheduler {self.type}>"
