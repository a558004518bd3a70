"""``deepspeed.runtime.sequence_parallel.ulysses_sp``: Ulysses (ALST)
sequence parallelism is not supported by zero; its names raise saying so."""
from __future__ import annotations

from typing import Any

from zero.errors import UnimplementedError

_WHY = ("Ulysses sequence parallelism (DeepSpeed ALST, parallelism_config sp_backend='deepspeed') "
        "is not supported by zero's DeepSpeed layer: zero shards over data-parallel ranks only; "
        "run with sp_size=1")


class UlyssesSPDataLoaderAdapter:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise UnimplementedError(f"UlyssesSPDataLoaderAdapter: {_WHY}")


class UlyssesSPAttentionHF:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise UnimplementedError(f"UlyssesSPAttentionHF: {_WHY}")

    @classmethod
    def register_with_transformers(cls, *args: Any, **kwargs: Any) -> Any:
        raise UnimplementedError(f"UlyssesSPAttentionHF.register_with_transformers: {_WHY}")
