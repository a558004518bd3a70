"""The launcher glue: the live engines, a failure on one rank stopping every
rank (the exception hook, the engines closed at exit), and host-memory
communication over the engines' ranks."""
from __future__ import annotations

import atexit
import contextlib
import weakref
from typing import TYPE_CHECKING, Any, Iterator, List, Optional, Tuple

import torch

from ..comm import Comm

if TYPE_CHECKING:
    from .engine import ZeroTorchEngine


_live: "weakref.WeakSet[ZeroTorchEngine]" = weakref.WeakSet()


_previous_excepthook: Any = None


def _abort_on_uncaught(tp: Any, value: Any, tb: Any) -> None:
    """sys.excepthook while zero.torch engines exist: the traceback, then
    every peer stopped (zero.Comm.abort) instead of waiting for this rank
    until comm_timeout_seconds, and this rank not stuck in MPI_Finalize."""
    _previous_excepthook(tp, value, tb)
    for e in list(_live_torch_engines):
        if not e._closed and e.zero.comm.size > 1:
            import sys
            sys.stderr.flush()
            e.zero.comm.abort(f"uncaught {tp.__name__}: {value}")
            return


def _install_excepthook() -> None:
    global _previous_excepthook
    import sys
    if _previous_excepthook is None:
        _previous_excepthook = sys.excepthook
        sys.excepthook = _abort_on_uncaught


#: Live ZeroTorchEngines (weak), for the exception hook.
_live_torch_engines: "weakref.WeakSet[ZeroTorchEngine]" = weakref.WeakSet()


@atexit.register
def _close_live_engines() -> None:
    for e in list(_live):
        try:
            e.close(keep_values=False)
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


def _owner_of(p: Any) -> Optional[Tuple[ZeroTorchEngine, int]]:
    """(engine, index) of a param a live engine manages, else None."""
    for e in list(_live):
        i = e._index.get(id(p))
        if i is not None and e._params[i] is p:
            return e, i
    return None

def _broadcast_from_rank0(tensors: List[torch.Tensor], comm: Any) -> None:
    """Overwrites every tensor with rank 0's values: torch.distributed's
    broadcast when it is initialized, else the runtime communicator's
    (zero.Comm.broadcast, the tensor's bytes)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        for t in tensors:
            data = t.data
            if data.dtype == torch.bool:  # gloo has no bool
                data = data.view(torch.uint8)
            torch.distributed.broadcast(data, src=0)
        return
    if comm.size == 1:
        return
    with _host_comm(comm) as host_comm:
        for t in tensors:
            data = t.data
            if data.numel() == 0:
                continue
            raw = data.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy().copy()
            host_comm.broadcast(raw, root=0)
            out = torch.from_numpy(raw).view(data.dtype).view(data.shape)
            with torch.no_grad():
                data.copy_(out)


@contextlib.contextmanager
def _host_comm(comm: Any) -> Iterator[Any]:
    """A communicator over the same ranks for host buffers: ``comm`` itself,
    or, for an NCCL one (device memory only), MPI_COMM_WORLD, the ranks
    zero.Comm.nccl spans."""
    if comm.kind != "nccl":
        yield comm
        return
    host = Comm.mpi()
    try:
        yield host
    finally:
        host.close()
