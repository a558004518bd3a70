"""``deepspeed.runtime.utils``: the helpers the integrations import."""
from __future__ import annotations

from typing import Any, Callable, Optional


def move_to_device(item: Any, device: Any, criterion_func: Optional[Callable[[Any], bool]] = None) -> Any:
    """As DeepSpeed's: tensors in (nested lists, tuples, dicts of) ``item``
    moved to ``device``; with ``criterion_func``, only the items it accepts,
    by changing their storage in place (``item.data``); others are left."""
    if criterion_func is not None and criterion_func(item):
        device_copy = item.to(device)
        item.data = device_copy.data
        return item
    if isinstance(item, list):
        return [move_to_device(v, device, criterion_func) for v in item]
    if isinstance(item, tuple):
        return tuple(move_to_device(v, device, criterion_func) for v in item)
    if isinstance(item, dict):
        return {k: move_to_device(v, device, criterion_func) for k, v in item.items()}
    if criterion_func is not None:
        return item
    return item.to(device)
