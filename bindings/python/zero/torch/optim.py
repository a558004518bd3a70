"""zero.torch's optimizer and lr scheduler: read-only views of the
runtime's, which run inside ZeroTorchEngine.step()."""
from __future__ import annotations

import math
import weakref
from typing import TYPE_CHECKING, Any, Dict, List

from ..errors import UnimplementedError

if TYPE_CHECKING:
    from .engine import ZeroTorchEngine


class _LrSchedule:
    """The runtime's learning-rate schedule (core/optim/lr_schedule.cc, as
    DeepSpeed's runtime/lr_schedules.py) computed from the config, so the lr
    of the *next* optimizer step is known before it runs."""

    def __init__(self, config: Dict[str, Any]) -> None:
        opt = config.get("optimizer") or {}
        self.lr = float((opt.get("params") or {}).get("lr", 1e-3))
        sched = config.get("scheduler")
        self.type = None if not sched else sched.get("type")
        p = (sched or {}).get("params") or {}

        def num(key: str, default: float) -> float:
            v = p.get(key, default)
            return default if v == "auto" else float(v)

        self.warmup_num_steps = int(num("warmup_num_steps", 1000))
        self.warmup_type = p.get("warmup_type", "log")
        self.total_num_steps = int(num("total_num_steps", -1))
        self.warmup_min_ratio = num("warmup_min_ratio", 0.0)
        self.cos_min_ratio = num("cos_min_ratio", 0.0001)
        self.warmup_min_lr = num("warmup_min_lr", 0.0)
        self.warmup_max_lr = (self.lr if p.get("warmup_max_lr") == "auto"
                              else num("warmup_max_lr", 0.001))

    def _gamma(self, it: int, warmup: int) -> float:
        if self.warmup_type == "log":
            return math.log(it + 1) / math.log(warmup)
        return it / warmup

    def lr_at(self, it: int) -> float:
        """LrAt(last_batch_iteration)."""
        warmup = max(2, self.warmup_num_steps)
        if self.type in ("WarmupLR", "WarmupDecayLR"):
            if it < 0:
                return self.warmup_min_lr
            if it < warmup:
                gamma = self._gamma(it, warmup)
            elif self.type == "WarmupLR":
                gamma = 1.0
            else:
                gamma = max(0.0, (self.total_num_steps - it) /
                            max(1.0, float(self.total_num_steps - warmup)))
            return self.warmup_min_lr + (self.warmup_max_lr - self.warmup_min_lr) * gamma
        if self.type == "WarmupCosineLR":
            if it < 0:
                return 0.0
            if it < warmup:
                ratio = (self.warmup_min_ratio + self._gamma(it, warmup) *
                         (1.0 - self.warmup_min_ratio))
            else:
                real_last = it - warmup + 1
                real_total = self.total_num_steps - warmup
                ratio = (1.0 + math.cos(math.pi * real_last / real_total)) / 2.0
                ratio = max(0.0, self.cos_min_ratio + (1.0 - self.cos_min_ratio) * ratio)
            return self.lr * ratio
        return self.lr

    def lr_for_step(self, t: int) -> float:
        """The lr of 0-based optimizer step t (DeepSpeed steps its scheduler
        after each optimizer step)."""
        return self.lr_at(t - 1)


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
        self.type: str = engine._lr_schedule.type or ""

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
