"""``deepspeed.utils.groups``: zero's ranks are all data-parallel (no tensor,
pipeline, expert or sequence parallelism), so every data-parallel query is the
whole world and the others are one rank; asking for a sequence-parallel group
(Ulysses) raises saying it is unsupported."""
from __future__ import annotations

from typing import Any

import torch.distributed as dist

from zero.errors import UnimplementedError


def _world() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _get_data_parallel_group() -> Any:
    return dist.group.WORLD if dist.is_initialized() else None


def _get_data_parallel_world_size() -> int:
    return _world()


def _get_data_parallel_rank() -> int:
    return _rank()


def _get_model_parallel_world_size() -> int:
    return 1


def _get_model_parallel_rank() -> int:
    return 0


def _get_expert_parallel_world_size(group_name: str = "") -> int:
    return 1


def _get_sequence_parallel_world_size() -> int:
    return 1


def _get_sequence_parallel_rank() -> int:
    return 0


def _get_sequence_data_parallel_world_size() -> int:
    return _world()


def _get_sequence_data_parallel_rank() -> int:
    return _rank()


def _get_sequence_parallel_group() -> Any:
    raise UnimplementedError(
        "deepspeed.utils.groups._get_sequence_parallel_group: Ulysses sequence parallelism "
        "is not supported by zero's DeepSpeed layer")


def _get_sequence_data_parallel_group() -> Any:
    return _get_data_parallel_group()
