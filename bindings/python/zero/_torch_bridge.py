"""How zero.torch's tensors meet the runtime's buffers, per device.

- host (the CPU device): numpy views, aliased by ``torch.from_numpy``.
- cuda: :class:`zero.DeviceArray` aliased by ``torch.from_dlpack`` (a CUDA
  tensor over the runtime's memory, no copy). The runtime's work is done
  when gather / grad_buffer / step return (docs/ARCHITECTURE.md, "Layers");
  torch's work is ordered the other way with an event on torch's current
  stream, waited for before the runtime reads what torch wrote (gradients)
  or overwrites what torch may still be reading (params, at step).
- standin: the CPU stand-in for a GPU (``ZERO_GPU_STANDIN=1``) under a CPU
  build of torch, which cannot hold a tensor on it: values are copied
  through the runtime (``DeviceArray.numpy`` / ``copy_from``) and params
  are refreshed after each optimizer step. The tests run zero.torch's device
  path on it; the aliasing itself needs a GPU.
"""
from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from .device import DeviceArray, DeviceKind
from .dtypes import DType


def _from_numpy(view: np.ndarray, dtype: DType) -> torch.Tensor:
    if dtype == DType.BF16:
        return torch.from_numpy(view.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(view)


class Bridge:
    """Host memory: every buffer is a numpy view torch aliases."""

    #: Params alias the runtime's working copy (no refresh after a step).
    aliases = True
    #: The torch device params live on.
    torch_device = torch.device("cpu")

    def tensor(self, buf: Any, dtype: DType) -> torch.Tensor:
        """A tensor over (or, without aliasing, a copy of) an engine buffer."""
        return _from_numpy(buf, dtype)

    def write(self, buf: Any, dtype: DType, value: torch.Tensor) -> None:
        """Copies ``value`` into the engine buffer ``buf``."""
        with torch.no_grad():
            self.tensor(buf, dtype).copy_(value.reshape(buf.shape))

    def address(self, buf: Any) -> int:
        return int(buf.ctypes.data)

    def torch_done(self) -> None:
        """Waits for torch's queued work on this device (nothing on the CPU)."""


class ViewCache:
    """Torch tensors over the runtime's host buffers, a few per param, made
    again only when the runtime hands out an address not seen recently: a
    step takes no new view objects (numpy array, ``_View``, tensor) for
    buffers whose addresses repeat (no per-step Python allocation of
    views). Stage 3's gathered buffers come from a pool, so a param may
    land at one of a few addresses: up to ``ways`` are kept per param. Only
    for a bridge that aliases host memory: a copying bridge's tensor is a
    snapshot, and a cached one would go stale."""

    def __init__(self, engine: Any, bridge: Bridge, count: int, ways: int = 4) -> None:
        self._engine = engine
        self._bridge = bridge
        self._ways = ways
        #: Per param: [(address, tensor)], most recently used first (the
        #: gradient hand-in reads the first entry itself, see _hand_in).
        self.slots: list = [[] for _ in range(count)]
        #: Views made (the first sight of an address), for tests and benches.
        self.made = 0

    def tensor(self, i: int, pid: int, address: int) -> torch.Tensor:
        slot = self.slots[i]
        for k, (a, t) in enumerate(slot):
            if a == address:
                if k:
                    slot.insert(0, slot.pop(k))
                return t
        engine = self._engine
        info = engine.param(pid)
        t = self._bridge.tensor(engine._view(address, info, readonly=False), info.dtype)
        slot.insert(0, (address, t))
        del slot[self._ways:]
        self.made += 1
        return t

    def clear(self) -> None:
        """Drops every view (the runtime is closing: the addresses die)."""
        self.slots = [[] for _ in self.slots]


class GatherPool:
    """Torch-owned host memory for stage 3's gathered copies, reused from
    one gather to the next instead of allocated fresh (a fresh copy per
    gather faulted in new pages, about 7K minor faults per pass
    over a 7M-param model, ~10 ms of the training thread's CPU). When torch
    computes in the runtime's dtype the runtime gathers straight into a
    buffer (:meth:`take`, ``zero_engine_gather_into``: no copy out of the
    runtime's buffer; a prefetched param is copied once from its prefetch
    buffer); fp16 on the CPU, computed in fp32, is copied and cast
    (:meth:`copy`).

    Torch-owned memory is still needed: autograd may keep a view of a gathered param
    (``weight.t()`` saved by ``F.linear``) past its release, and the
    runtime frees or reuses its own gathered buffer at release. A buffer is
    taken back only when nothing else references it: each is a numpy array
    that ``torch.from_numpy`` tensors reference (a tensor's storage holds a
    reference to the array until the last tensor or view over it dies), so
    at release, once the param has left it, a reference count above the
    pool's own means a tensor over it still lives (a saved view): the
    buffer is left to that holder and the next gather gets a fresh one.
    A buffer in the pool is written again only by a later gather, so a
    saved view never sees another param's or a later step's bytes. Free
    buffers are kept per shape (a block's gathers reuse the previous
    block's); at most what was gathered at once is kept."""

    def __init__(self, count: int, dtype: torch.dtype) -> None:
        # bf16: numpy has no bfloat16; the array is int16, viewed by torch.
        self._np_dtype = {torch.float32: np.float32, torch.float64: np.float64,
                          torch.float16: np.float16, torch.bfloat16: np.int16}[dtype]
        self._bf16 = dtype == torch.bfloat16
        self._free: Dict[Tuple[int, ...], List[np.ndarray]] = {}
        # Per param: the array its gathered copy lives in (None: released).
        self._held: List[Optional[np.ndarray]] = [None] * count
        #: Buffers allocated (a pool miss), for tests and benches.
        self.made = 0
        #: Buffers left to a tensor that outlived its param's release.
        self.kept_by_views = 0

    def copy(self, i: int, src: torch.Tensor) -> torch.Tensor:
        """A torch-owned tensor holding ``src``'s values (cast to the pool's
        dtype), for param i until :meth:`give_back`."""
        t, _, _ = self.take(i, tuple(src.shape))
        t.copy_(src)
        return t

    def take(self, i: int, shape: Tuple[int, ...]) -> Tuple[torch.Tensor, int, int]:
        """A free buffer of ``shape`` for param i until :meth:`give_back`:
        the torch tensor over it, its address and its bytes, for the runtime
        to gather into (``zero_engine_gather_into``)."""
        free = self._free.get(shape)
        arr = free.pop() if free else None
        if arr is None:
            arr = np.empty(shape, dtype=self._np_dtype)
            self.made += 1
        t = torch.from_numpy(arr)
        if self._bf16:
            t = t.view(torch.bfloat16)
        self._held[i] = arr
        return t, int(arr.ctypes.data), int(arr.nbytes)

    def held(self, i: int) -> Tuple[int, int]:
        """Address and bytes of param i's buffer (it holds one)."""
        arr = self._held[i]
        return int(arr.ctypes.data), int(arr.nbytes)

    def give_back(self, i: int) -> None:
        """Param i no longer holds its copy (``p.data`` moved away): the
        buffer returns to the pool unless a tensor over it still lives."""
        arr = self._held[i]
        if arr is None:
            return
        self._held[i] = None
        # References: `arr` here and getrefcount's argument. Any more is a
        # live torch storage over it (torch.from_numpy's reference).
        if sys.getrefcount(arr) > 2:
            self.kept_by_views += 1
            return
        self._free.setdefault(arr.shape, []).append(arr)

    def free_bytes(self) -> int:
        """Bytes in the pool's free buffers."""
        return sum(a.nbytes for arrs in self._free.values() for a in arrs)

    def clear(self) -> None:
        self._free = {}
        self._held = [None] * len(self._held)


class CudaBridge(Bridge):
    """A CUDA engine: DeviceArrays aliased through DLPack on cuda:N."""

    def __init__(self, index: int) -> None:
        self.torch_device = torch.device("cuda", index)

    def tensor(self, buf: Any, dtype: DType) -> torch.Tensor:
        return torch.utils.dlpack.from_dlpack(buf)

    def address(self, buf: Any) -> int:
        return int(buf.ptr)

    def torch_done(self) -> None:
        # An event on torch's current stream, not a device-wide sync: only
        # what torch queued before this point is waited for.
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(self.torch_device))
        ev.synchronize()


class StandinBridge(Bridge):
    """The CPU stand-in under a CPU torch: copies through the runtime."""

    aliases = False

    def tensor(self, buf: Any, dtype: DType) -> torch.Tensor:
        return _from_numpy(buf.numpy(), dtype)

    def write(self, buf: Any, dtype: DType, value: torch.Tensor) -> None:
        v = value.detach().reshape(buf.shape).contiguous()
        if dtype == DType.BF16:
            v = v.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        else:
            v = v.to(torch.float16 if dtype == DType.F16 else torch.float32).numpy()
        buf.copy_from(v)

    def address(self, buf: Any) -> int:
        return int(buf.ptr)


def bridge_for(engine: Any) -> Bridge:
    """The bridge of a zero.Engine's device."""
    kind = engine.device.kind
    if kind == DeviceKind.CPU:
        return Bridge()
    if kind == DeviceKind.CUDA:
        return CudaBridge(engine.device.index)
    return StandinBridge()


def model_device(model: torch.nn.Module) -> Optional[torch.device]:
    """The one device of the model's non-meta params and buffers (None if it
    has none); a model spread over devices raises naming two of them."""
    seen: Optional[torch.device] = None
    first = ""
    tensors = list(model.named_parameters()) + list(model.named_buffers())
    for name, t in tensors:
        if t.device.type == "meta":
            continue
        if seen is None:
            seen, first = t.device, name
        elif t.device != seen:
            raise ValueError(
                f"zero.torch: {first!r} is on {seen} and {name!r} on {t.device}; "
                "the runtime keeps a model's state on one device")
    return seen


def is_device_array(buf: Any) -> bool:
    return isinstance(buf, DeviceArray)
