"""``deepspeed.ops.lion``: DeepSpeed's Lion, a torch optimizer
(``c = b1 m + (1-b1) g; p = p (1 - lr wd) - lr sign(c); m = b2 m + (1-b2) g``)."""
from __future__ import annotations

from typing import Any

import torch


class DeepSpeedCPULion(torch.optim.Optimizer):
    def __init__(self, model_params: Any, lr: float = 1e-3, betas: Any = (0.9, 0.999),
                 weight_decay: float = 0, fp32_optimizer_states: bool = True) -> None:
        super().__init__(model_params, dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                m = self.state[p].setdefault("exp_avg", torch.zeros_like(p))
                c = m * b1 + p.grad * (1 - b1)
                p.mul_(1 - group["lr"] * group["weight_decay"]).add_(torch.sign(c), alpha=-group["lr"])
                m.mul_(b2).add_(p.grad, alpha=1 - b2)
        return loss


FusedLion = DeepSpeedCPULion
