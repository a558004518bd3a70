"""Communicators: the group of ranks an engine shards its state over."""
from __future__ import annotations

import atexit
import os
import weakref
from typing import List, Optional, Tuple

import numpy as np

from . import _zero_c


class Comm:
    """A group of ranks (a ``zero_comm_t``).

    Make one with :meth:`self_`, :meth:`mpi`, :meth:`threads` or
    :meth:`default`. An engine keeps its communicator alive; :meth:`close`
    raises while an engine still uses it. Usable as a context manager.
    """

    def __init__(self, handle: "_zero_c.Comm", kind: str) -> None:
        self._c = handle
        self.kind = kind
        _live_comms.add(self)

    @classmethod
    def self_(cls) -> "Comm":
        """A one-rank communicator that needs no MPI."""
        return cls(_zero_c.Comm.create_self(), "self")

    #: Alias of :meth:`self_` (``zero.Comm.self()``).
    self = self_

    @classmethod
    def mpi(cls) -> "Comm":
        """MPI_COMM_WORLD (initializes MPI; zero finalizes it at exit)."""
        return cls(_zero_c.Comm.create_mpi(), "mpi")

    @classmethod
    def nccl(cls, device: Optional[int] = None) -> "Comm":
        """MPI_COMM_WORLD's ranks over NCCL, this rank's state on GPU
        ``device`` (default: :func:`default_gpu`). Engines on it keep their
        state on that GPU. Needs a libzero_c built with ``--config=cuda``;
        with ``ZERO_GPU_STANDIN=1`` it is the CPU stand-in (tests)."""
        if device is None:
            device = default_gpu()
        return cls(_zero_c.Comm.create_nccl(int(device)), "nccl")

    @classmethod
    def threads(cls, world_size: int) -> List["Comm"]:
        """``world_size`` in-process ranks; use rank r from one thread only."""
        return [cls(h, "threads") for h in _zero_c.Comm.create_threads(world_size)]

    @classmethod
    def default(cls) -> "Comm":
        """MPI when launched by mpirun (OMPI_COMM_WORLD_SIZE or PMI_SIZE set),
        else a one-rank communicator."""
        if launched_by_mpi():
            return cls.mpi()
        return cls.self_()

    @property
    def rank(self) -> int:
        """This rank, 0..size-1."""
        return self._c.rank()

    @property
    def size(self) -> int:
        """Number of ranks."""
        return self._c.size()

    @property
    def closed(self) -> bool:
        return self._c.closed

    def barrier(self) -> None:
        """COLLECTIVE. Waits for every rank."""
        self._c.barrier()

    def allreduce_sum(self, values: np.ndarray) -> np.ndarray:
        """COLLECTIVE. Sum of a float32 array over ranks, in place when
        ``values`` is a contiguous writable float32 array; returns it."""
        arr = values
        if not (isinstance(arr, np.ndarray) and arr.dtype == np.float32
                and arr.flags.c_contiguous and arr.flags.writeable):
            arr = np.array(values, dtype=np.float32, copy=True, order="C")
        self._c.allreduce_sum_f32(arr.ctypes.data, arr.size)
        return arr

    def broadcast(self, values: np.ndarray, root: int = 0) -> np.ndarray:
        """COLLECTIVE. ``values`` (a contiguous writable array, any dtype)
        replaced by rank ``root``'s, in place; returns it."""
        if not (isinstance(values, np.ndarray) and values.flags.c_contiguous
                and values.flags.writeable):
            raise TypeError("broadcast: values must be a contiguous writable numpy array")
        self._c.broadcast(values.ctypes.data, values.nbytes, int(root))
        return values

    def abort(self, reason: str) -> None:
        """NOT collective: this rank gives up; every peer fails promptly
        with "rank N failed: <reason>". Under MPI the whole job is aborted
        and this does not return; thread communicators break their group."""
        self._c.abort(str(reason))

    def close(self) -> None:
        """Frees the communicator (idempotent)."""
        self._c.close()

    def __enter__(self) -> "Comm":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return f"<zero.Comm {self.kind} closed>"
        return f"<zero.Comm {self.kind} rank={self.rank} size={self.size}>"


def default_gpu() -> int:
    """This rank's GPU: 0 when ``CUDA_VISIBLE_DEVICES`` shows it one GPU
    (zero-launch gives each local rank its own slot that way), else its
    local rank (``LOCAL_RANK``, OpenMPI's ``OMPI_COMM_WORLD_LOCAL_RANK``),
    else 0."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and len([v for v in visible.split(",") if v.strip()]) == 1:
        return 0
    return int(os.environ.get("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")))


def launched_by_mpi() -> bool:
    """True when an MPI launcher started this process."""
    return any(k in os.environ for k in
               ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))


def launcher_rank_and_size() -> Tuple[int, int]:
    """(rank, world size) the launcher announced, without initializing MPI;
    (0, 1) when not launched by MPI."""
    for rank_key, size_key in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                               ("PMI_RANK", "PMI_SIZE")):
        if size_key in os.environ:
            return int(os.environ.get(rank_key, "0")), int(os.environ[size_key])
    return 0, 1




_live_comms: "weakref.WeakSet[Comm]" = weakref.WeakSet()


@atexit.register
def _close_live_comms() -> None:
    # Runs after the engines' handler (atexit is last-in first-out).
    for c in list(_live_comms):
        try:
            c.close()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass
