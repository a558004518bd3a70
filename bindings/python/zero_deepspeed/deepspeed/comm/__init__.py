"""``deepspeed.comm``: torch.distributed under DeepSpeed's names. The
integrations use it for their own collectives (metrics, barriers, samplers);
the zero runtime reduces and gathers over its own communicator (MPI, set up
by zero-launch or mpirun), which ``deepspeed.initialize`` checks spans the same
ranks."""
from __future__ import annotations

import datetime
import os
from typing import Any, Optional

import torch
import torch.distributed as _dist

from zero.comm import launched_by_mpi, launcher_rank_and_size

ReduceOp = _dist.ReduceOp


def _mpi_discovery(distributed_port: int) -> None:
    """As DeepSpeed's: the torch-style variables from the MPI launcher's."""
    rank, size = launcher_rank_and_size()
    local = os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(size))
    os.environ.setdefault("LOCAL_RANK", local)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(distributed_port))


def init_distributed(dist_backend: Optional[str] = None, auto_mpi_discovery: bool = True,
                     distributed_port: int = 29500, verbose: bool = True,
                     timeout: Any = datetime.timedelta(minutes=30), init_method: Optional[str] = None,
                     dist_init_required: Optional[bool] = None, config: Any = None,
                     rank: int = -1, world_size: int = -1) -> None:
    """As ``deepspeed.init_distributed``: torch.distributed's default group
    from the launcher's variables (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT; under mpirun without them, from OpenMPI's when
    ``auto_mpi_discovery``). Backend: the one asked for, else nccl with a
    GPU, gloo without. Already initialized: nothing to do."""
    if dist_init_required is False or _dist.is_initialized():
        return
    if auto_mpi_discovery and "RANK" not in os.environ and launched_by_mpi():
        _mpi_discovery(distributed_port)
    if "RANK" not in os.environ and rank < 0:  # one process, as DeepSpeed
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(distributed_port))
    backend = dist_backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "ccl":  # DeepSpeed's CPU accelerator's name; oneCCL is not used here
        backend = "gloo"
    kw = {"backend": backend, "timeout": timeout}
    if init_method is not None:
        kw["init_method"] = init_method
    if rank >= 0:
        kw["rank"] = rank
    if world_size > 0:
        kw["world_size"] = world_size
    _dist.init_process_group(**kw)


def is_initialized() -> bool:
    return _dist.is_available() and _dist.is_initialized()


def get_rank(group: Any = None) -> int:
    return _dist.get_rank(group) if is_initialized() else 0


def get_world_size(group: Any = None) -> int:
    return _dist.get_world_size(group) if is_initialized() else 1


def get_local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")))


def get_global_rank(group: Any = None, group_rank: int = 0) -> int:
    return _dist.get_global_rank(group, group_rank) if group is not None else group_rank


def log_summary(*args: Any, **kwargs: Any) -> None:
    """DeepSpeed's comms logger summary: zero's is Engine.comm_log_summary()."""


def __getattr__(name: str) -> Any:
    """Every other name (barrier, all_reduce, broadcast, all_gather,
    new_group, ...) is torch.distributed's."""
    try:
        return getattr(_dist, name)
    except AttributeError:
        raise AttributeError(f"deepspeed.comm (zero's DeepSpeed layer) has no {name!r}: "
                             "neither does torch.distributed") from None
