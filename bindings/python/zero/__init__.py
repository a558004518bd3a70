"""zero: ZeRO sharded data-parallel training state, from Python.

A thin layer over the runtime's C ABI (``zero_c.h``)::

    import zero
    with zero.Engine({"zero_optimization": {"stage": 2},
                      "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}) as eng:
        w = eng.register_param("w", np.zeros((4, 4), np.float32))
        eng.finalize()
        ...

``zero.torch`` (imported on demand) adapts PyTorch modules with a
DeepSpeed-shaped engine.
"""
from __future__ import annotations

import os as _os

try:
    from . import _zero_c
except ImportError as _err:
    from ._requirements import explain_import_error as _explain
    _msg = _explain(_err, _os.path.dirname(_os.path.abspath(__file__)))
    if _msg is None:
        raise
    raise ImportError(_msg) from None
from .comm import Comm, launched_by_mpi, launcher_rank_and_size
from .dtypes import DType, bf16_to_float32, convert, float32_to_bf16
from .engine import Engine, InitSpec, ParamInfo, StepInfo, load_config
from .device import Device, DeviceArray, DeviceKind
from .checkpoint import export_safetensors, reshard
from .estimate import estimate
from .errors import (AbortedError, CancelledError, DataLossError, FailedPreconditionError,
                     InternalError, InvalidArgumentError, IOError,
                     MismatchError, NotFoundError, OutOfMemoryError,
                     TimeoutError, UnimplementedError, ZeroError,
                     error_from_status)

_zero_c.set_error_factory(error_from_status)

__version__ = "1.0.0"

#: Version code of the header the extension was built against.
HEADER_VERSION: int = _zero_c.HEADER_VERSION


def version() -> int:
    """The loaded library's version code (major*10000 + minor*100 + patch)."""
    return _zero_c.version()


if version() // 10000 != HEADER_VERSION // 10000:
    raise ImportError(
        f"zero: libzero_c.so version {version()} does not match the header "
        f"{HEADER_VERSION} the extension was built against")

__all__ = [
    "Comm", "DType", "Device", "DeviceArray", "DeviceKind", "Engine", "InitSpec",
    "ParamInfo", "StepInfo", "load_config",
    "export_safetensors", "reshard", "estimate",
    "bf16_to_float32", "convert", "float32_to_bf16", "launched_by_mpi",
    "launcher_rank_and_size", "version",
    "ZeroError", "InvalidArgumentError", "FailedPreconditionError",
    "NotFoundError", "OutOfMemoryError", "TimeoutError", "IOError",
    "DataLossError", "UnimplementedError", "InternalError", "AbortedError",
    "MismatchError", "CancelledError", "error_from_status",
]
