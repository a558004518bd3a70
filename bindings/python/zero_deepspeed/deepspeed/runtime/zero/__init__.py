"""``deepspeed.runtime.zero``."""
from __future__ import annotations

from typing import Any

from zero.torch import GatheredParameters  # noqa: F401

from . import partition_parameters  # noqa: F401
from .partition_parameters import Init, ZeroParamStatus  # noqa: F401


def register_external_parameter(module: Any, parameter: Any) -> None:
    """As DeepSpeed: a param used in ``module``'s forward that another module
    owns. zero.torch's stage 3 finds such params itself (their first use
    inside the forward registers them), so nothing needs recording."""
