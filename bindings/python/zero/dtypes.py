"""Element types of working params and gradients, and bf16 helpers.

numpy has no bfloat16: bf16 buffers are exposed as ``np.uint16`` views of
the raw bits; :func:`bf16_to_float32` and :func:`float32_to_bf16` convert.
"""
from __future__ import annotations

import enum

import numpy as np


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


_NUMPY = {
    DType.F32: np.dtype(np.float32),
    DType.F16: np.dtype(np.float16),
    DType.BF16: np.dtype(np.uint16),
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

