"""``deepspeed.ops.adam``: DeepSpeedCPUAdam and FusedAdam as torch optimizers
with DeepSpeed's arguments and update (Adam with bias correction; decoupled
weight decay when ``adamw_mode``). The zero runtime runs its own optimizer from
the config's ``optimizer`` block; ``deepspeed.initialize`` refuses a client
optimizer, these included, with a message saying so."""
from __future__ import annotations

from typing import Any

import torch

from zero.errors import UnimplementedError


class DeepSpeedCPUAdam(torch.optim.AdamW):
    def __init__(self, model_params: Any, lr: float = 1e-3, bias_correction: bool = True,
                 betas: Any = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0,
                 amsgrad: bool = False, adamw_mode: bool = True, fp32_optimizer_states: bool = True) -> None:
        if not bias_correction:
            raise UnimplementedError(f"{type(self).__name__}(bias_correction=False)")
        if not adamw_mode and weight_decay != 0:
            raise UnimplementedError(
                f"{type(self).__name__}(adamw_mode=False, weight_decay={weight_decay}): L2 "
                "weight decay; the runtime's Adam with adam_w_mode false does it from the config")
        # With weight_decay 0, Adam and AdamW are the same update.
        super().__init__(model_params, lr=lr, betas=tuple(betas), eps=eps,
                         weight_decay=weight_decay, amsgrad=amsgrad)
        self.adam_w_mode = adamw_mode


class FusedAdam(DeepSpeedCPUAdam):
    def __init__(self, params: Any, lr: float = 1e-3, bias_correction: bool = True,
                 betas: Any = (0.9, 0.999), eps: float = 1e-8, adam_w_mode: bool = True,
                 weight_decay: float = 0.0, amsgrad: bool = False, set_grad_none: bool = True) -> None:
        super().__init__(params, lr=lr, bias_correction=bias_correction, betas=betas, eps=eps,
                         weight_decay=weight_decay, amsgrad=amsgrad, adamw_mode=adam_w_mode)
