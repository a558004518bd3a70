"""``deepspeed.checkpoint.utils``."""
from __future__ import annotations

from typing import Any

import torch


def clone_tensors_for_torch_save(item: Any, device: Any = torch.device("cpu")) -> Any:
    """As DeepSpeed's: a copy of ``item`` with every tensor in it (nested
    lists, tuples, dicts) replaced by a detached clone on ``device``, so that
    ``torch.save`` writes only each tensor's own elements."""
    if torch.is_tensor(item):
        if isinstance(device, str):
            device = torch.device(device)
        if device == item.device:
            return item.detach().clone()
        return item.detach().to(device)
    if isinstance(item, list):
        return [clone_tensors_for_torch_save(v, device) for v in item]
    if isinstance(item, tuple):
        return tuple(clone_tensors_for_torch_save(v, device) for v in item)
    if isinstance(item, dict):
        return type(item)({k: clone_tensors_for_torch_save(v, device) for k, v in item.items()})
    return item
