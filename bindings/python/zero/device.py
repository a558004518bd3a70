"""Where an engine keeps its state, and buffers on a device.

An engine on the CPU hands out numpy views of its memory. An engine on a
GPU (``Engine(..., device="cuda:0")``, or on :meth:`zero.Comm.nccl`) hands
out :class:`DeviceArray` objects instead: device pointers that the host must
not read. They speak DLPack (``__dlpack__``/``__dlpack_device__``), so
``torch.from_dlpack(a)`` is a CUDA tensor over the same memory (no copy);
:meth:`DeviceArray.numpy` and :meth:`DeviceArray.copy_from` move bytes
through the engine (``zero_engine_copy``), ordered after its device work.

The CPU stand-in for a GPU (``ZERO_GPU_STANDIN=1``, docs/ARCHITECTURE.md)
takes the same path with DLPack device type 12 (kDLExtDev): no framework
accepts it as host memory, and a host read of its pointer is SIGSEGV.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING, Any, Optional, Tuple

import numpy as np

from . import _zero_c
from .dtypes import DType, float32_to_bf16

if TYPE_CHECKING:  # pragma: no cover
    from .engine import Engine


class DeviceKind(enum.IntEnum):
    """The C ``zero_device_kind`` values."""

    CPU = 0
    CUDA = 1
    STANDIN = 2


#: DLPack's DLDeviceType values used here.
KDLCPU, KDLCUDA, KDLEXTDEV = 1, 2, 12


@dataclasses.dataclass(frozen=True)
class Device:
    """An engine's device (``zero_device_info``)."""

    kind: DeviceKind
    index: int
    host_accessible: bool
    dlpack_device_type: int

    @classmethod
    def from_c(cls, d: dict) -> "Device":
        return cls(DeviceKind(d["kind"]), int(d["ordinal"]), bool(d["host_accessible"]),
                   int(d["dlpack_device_type"]))

    @property
    def type(self) -> str:
        """``"cpu"``, ``"cuda"`` or ``"standin"`` (torch's ``device.type``)."""
        return self.kind.name.lower()

    def __str__(self) -> str:
        return "cpu" if self.kind == DeviceKind.CPU else f"{self.type}:{self.index}"


def parse_device(device: str) -> Tuple[str, int]:
    """``"cpu"``, ``"cuda"``, ``"cuda:N"`` (also ``"standin"``) as (kind, ordinal)."""
    from .errors import InvalidArgumentError

    if not isinstance(device, str):
        device = str(device)  # a torch.device
    kind, _, idx = device.partition(":")
    if kind not in ("cpu", "cuda", "standin"):
        raise InvalidArgumentError(
            f"device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'")
    try:
        ordinal = int(idx) if idx else 0
    except ValueError:
        raise InvalidArgumentError(f"device {device!r}: bad index {idx!r}") from None
    if ordinal < 0:
        raise InvalidArgumentError(f"device {device!r}: negative index")
    return kind, ordinal


# DLPack dtype (code, bits) per zero dtype: bf16 is DLPack's bfloat16
# (code 4), not numpy's uint16 stand-in.
_DLPACK_DTYPE = {DType.F32: (2, 32), DType.F16: (2, 16), DType.BF16: (4, 16)}


class DeviceArray:
    """A param's working copy or gradient buffer in device memory.

    Valid until the matching ``release`` / ``grad_ready`` (as the numpy views
    of a CPU engine). The host cannot read it: ``np.asarray(a)`` raises;
    read it with :meth:`numpy`, write it with :meth:`copy_from`, or hand it
    to a framework through DLPack.
    """

    __slots__ = ("_engine", "ptr", "shape", "dtype", "device", "writable")

    def __init__(self, engine: "Engine", ptr: int, shape: Tuple[int, ...], dtype: DType,
                 device: Device, writable: bool) -> None:
        self._engine = engine
        #: The device address (``data_ptr``).
        self.ptr = int(ptr)
        self.shape = tuple(int(s) for s in shape)
        #: The zero dtype (:class:`zero.DType`).
        self.dtype = dtype
        self.device = device
        self.writable = writable

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def data_ptr(self) -> int:
        return self.ptr

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (self.device.dlpack_device_type, self.device.index)

    def __dlpack__(self, stream: Optional[Any] = None, **kwargs: Any) -> Any:
        # Nothing to order on `stream`: gather and grad_buffer return after the
        # engine's device work is complete (docs/ARCHITECTURE.md, "Devices").
        code, bits = _DLPACK_DTYPE[self.dtype]
        return _zero_c.dlpack_capsule(self.ptr, list(self.shape), code, bits,
                                      self.device.dlpack_device_type, self.device.index, self)

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError(
            f"DeviceArray on {self.device}: device memory cannot be read by the host; "
            "use .numpy() (a copy) or DLPack (torch.from_dlpack)")

    def numpy(self) -> np.ndarray:
        """A new host array with the values (bf16 as uint16 bits)."""
        out = np.empty(self.shape, dtype=self.dtype.numpy)
        self._engine._c.copy(out.ctypes.data, self.ptr, self.nbytes)
        return out

    def copy_from(self, values: Any) -> None:
        """Writes host ``values`` (reshaped to this shape, cast to its dtype;
        float32 into bf16 rounds to nearest even) into the device buffer."""
        if not self.writable:
            raise TypeError("DeviceArray.copy_from: a gathered param is read-only "
                            "(gather(..., writable=True) to write it)")
        src = np.asarray(values)
        if self.dtype == DType.BF16 and src.dtype != np.uint16:
            src = float32_to_bf16(src)
        src = np.ascontiguousarray(src.reshape(self.shape), dtype=self.dtype.numpy)
        self._engine._c.copy(self.ptr, src.ctypes.data, self.nbytes)

    def __repr__(self) -> str:
        return (f"<zero.DeviceArray {self.dtype.name} shape={self.shape} on {self.device} "
                f"at 0x{self.ptr:x}>")
