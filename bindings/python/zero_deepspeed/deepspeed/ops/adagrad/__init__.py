"""``deepspeed.ops.adagrad``."""
from __future__ import annotations

from typing import Any

import torch


class DeepSpeedCPUAdagrad(torch.optim.Adagrad):
    """DeepSpeed's Adagrad (``g += wd p; v += g^2; p -= lr g / (sqrt(v) + eps)``)."""

    def __init__(self, model_params: Any, lr: float = 1e-2, eps: float = 1e-10,
                 weight_decay: float = 0, amsgrad: bool = False, fp32_optimizer_states: bool = True) -> None:
        super().__init__(model_params, lr=lr, eps=eps, weight_decay=weight_decay)
