"""Element types of working params and gradients, and conversions.

numpy has no bfloat16: bf16 buffers are exposed as ``np.uint16`` views of
the raw bits; :func:`bf16_to_float32` and :func:`float32_to_bf16` convert,
and :func:`convert` converts between any two with the runtime's own
rounding (C ABI 1.8, ``zero_convert``).
"""
from __future__ import annotations

import enum

import numpy as np

from .errors import InvalidArgumentError


class DType(enum.IntEnum):
    """The C ``zero_dtype`` values."""

    F32 = 0
    F16 = 1
    BF16 = 2

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype of a buffer of this type (bf16: uint16 bits)."""
        return _NUMPY[self]

    @property
    def itemsize(self) -> int:
        return _NUMPY[self].itemsize

    @classmethod
    def parse(cls, value: "str | int | DType") -> "DType":
        """A DType from itself, its C value, or a name: ``"fp32"``/
        ``"float32"``, ``"fp16"``/``"float16"``, ``"bf16"``/``"bfloat16"``."""
        if isinstance(value, str):
            dt = _NAMES.get(value.lower())
            if dt is None:
                raise InvalidArgumentError(
                    f"unknown dtype {value!r}: use one of {sorted(_NAMES)}")
            return dt
        return cls(value)


_NUMPY = {
    DType.F32: np.dtype(np.float32),
    DType.F16: np.dtype(np.float16),
    DType.BF16: np.dtype(np.uint16),
}


_NAMES = {
    "fp32": DType.F32, "float32": DType.F32, "f32": DType.F32,
    "fp16": DType.F16, "float16": DType.F16, "f16": DType.F16,
    "bf16": DType.BF16, "bfloat16": DType.BF16,
}


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """Widens bf16 bits (a uint16 array) to a new float32 array (exact)."""
    bits = np.asarray(bits)
    if bits.dtype != np.uint16:
        raise TypeError(f"expected uint16 bf16 bits, got {bits.dtype}")
    return (bits.astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Rounds float32 values to bf16 bits (round to nearest even, NaN kept)."""
    f = np.ascontiguousarray(values, dtype=np.float32)
    u = f.view(np.uint32)
    rounded = (u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))) >> 16
    nan = np.isnan(f)
    out = rounded.astype(np.uint16)
    out[nan] = ((u[nan] >> 16) | np.uint32(0x40)).astype(np.uint16)
    return out



def dtype_of(values: np.ndarray) -> DType:
    """The DType of a host buffer: float32, float16, or uint16 (bf16 bits)."""
    for dt, npdt in _NUMPY.items():
        if np.asarray(values).dtype == npdt:
            return dt
    raise InvalidArgumentError(
        f"expected float32, float16 or uint16 (bf16 bits), got {np.asarray(values).dtype}")


def convert(values: np.ndarray, dtype: "str | int | DType",
            src_dtype: "str | int | DType | None" = None) -> np.ndarray:
    """``values`` (float32, float16, or bf16 bits as uint16; ``src_dtype``
    overrides what its numpy dtype says) as a new array of ``dtype``, with the
    runtime's own rounding (C ABI 1.8 ``zero_convert``, kernels/cast_math.h:
    round to nearest even, NaN kept, fp16 overflow to inf, subnormals kept)."""
    from . import _zero_c  # the extension loads on first use, as Engine's does

    src = np.ascontiguousarray(values)
    src_dt = dtype_of(src) if src_dtype is None else DType.parse(src_dtype)
    if src.dtype != _NUMPY[src_dt]:
        raise InvalidArgumentError(
            f"convert: values are {src.dtype}, not {_NUMPY[src_dt]} ({src_dt.name})")
    dst_dt = DType.parse(dtype)
    out = np.empty(src.shape, dtype=_NUMPY[dst_dt])
    _zero_c.convert(int(dst_dt), out.ctypes.data, int(src_dt), src.ctypes.data, src.size)
    return out
