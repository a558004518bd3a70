"""zero.Engine: the sharded training state of one model on one rank."""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import weakref
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _zero_c
from ._abi_tables import COMM_LOG_ENTRY_FIELDS, STATS_FIELDS, STEP_BREAKDOWN_FIELDS, StepInfo
from .comm import Comm
from .device import Device, DeviceArray, parse_device
from .dtypes import DType, dtype_of
from .errors import InvalidArgumentError, NotFoundError
from .progress import ProgressArg, Reporter

ParamRef = Union[int, str]
ConfigLike = Union[Mapping[str, Any], str, "os.PathLike[str]"]
PathLike = Union[str, "os.PathLike[str]"]


@dataclasses.dataclass(frozen=True)
class ParamInfo:
    """A registered parameter as the runtime describes it
    (``zero_param_info``, :meth:`Engine.param_info`)."""

    id: int                 #: registration order: 0, 1, ...
    name: str               #: the unique registered name
    shape: Tuple[int, ...]  #: full (unsharded) shape
    dtype: DType            #: element type of the working copy
    trainable: bool         #: False: frozen, no gradient or optimizer state

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


def load_config(config: ConfigLike) -> Dict[str, Any]:
    """A DeepSpeed config as a dict, from a dict, a file path or JSON text."""
    if isinstance(config, Mapping):
        return json.loads(json.dumps(dict(config)))  # deep copy, JSON-clean
    if isinstance(config, os.PathLike):
        with open(config, "r", encoding="utf-8") as f:
            return json.load(f)
    if isinstance(config, str):
        text = config.strip()
        if text.startswith("{"):
            return json.loads(text)
        with open(config, "r", encoding="utf-8") as f:
            return json.load(f)
    raise TypeError(
        f"config must be a dict, a path or JSON text, got {type(config).__name__}")


class _View:
    """Exposes engine memory to numpy through __array_interface__ and keeps
    the Python engine alive as the array's base."""

    __slots__ = ("__array_interface__", "_owner")

    def __init__(self, owner: "Engine", address: int, shape: Tuple[int, ...],
                 dtype: np.dtype, readonly: bool) -> None:
        self._owner = owner
        self.__array_interface__ = {
            "version": 3,
            "shape": tuple(shape),
            "typestr": dtype.str,
            "data": (address, readonly),
            "strides": None,
        }



@dataclasses.dataclass(frozen=True)
class InitSpec:
    """Initial values described, not copied (C ABI 1.4, ``zero_init_spec``).

    Element i of a param is a function of (seed, the param's name, i) alone
    (Philox4x32-10), the same at every world size and stage; each rank
    computes only the elements it holds. Build one with the class methods.
    """
    kind: int = 0  # zero_init_kind
    seed: int = 0
    value: float = 0.0
    low: float = 0.0
    high: float = 1.0
    mean: float = 0.0
    std: float = 1.0
    a: float = 5.0 ** 0.5
    fan_in: int = 0  # 0: from the shape (shape[1] * prod(shape[2:]))

    # zero_init_kind's values (zero_c.h); they never change.
    ZEROS, ONES, CONSTANT, UNIFORM, NORMAL, TRUNC_NORMAL, KAIMING_UNIFORM, \
        FAN_IN_UNIFORM = range(8)

    @classmethod
    def zeros(cls) -> "InitSpec":
        return cls(kind=cls.ZEROS)

    @classmethod
    def ones(cls) -> "InitSpec":
        """LayerNorm's weight."""
        return cls(kind=cls.ONES)

    @classmethod
    def constant(cls, value: float) -> "InitSpec":
        return cls(kind=cls.CONSTANT, value=float(value))

    @classmethod
    def uniform(cls, low: float, high: float, seed: int = 0) -> "InitSpec":
        return cls(kind=cls.UNIFORM, low=float(low), high=float(high), seed=seed)

    @classmethod
    def normal(cls, mean: float = 0.0, std: float = 1.0, seed: int = 0) -> "InitSpec":
        """nn.Embedding's weight: normal(0, 1)."""
        return cls(kind=cls.NORMAL, mean=float(mean), std=float(std), seed=seed)

    @classmethod
    def trunc_normal(cls, mean: float = 0.0, std: float = 1.0, low: float = -2.0,
                     high: float = 2.0, seed: int = 0) -> "InitSpec":
        return cls(kind=cls.TRUNC_NORMAL, mean=float(mean), std=float(std),
                   low=float(low), high=float(high), seed=seed)

    @classmethod
    def kaiming_uniform(cls, a: float = 5.0 ** 0.5, fan_in: int = 0,
                        seed: int = 0) -> "InitSpec":
        """nn.Linear's weight default (a = sqrt(5))."""
        return cls(kind=cls.KAIMING_UNIFORM, a=float(a), fan_in=int(fan_in), seed=seed)

    @classmethod
    def fan_in_uniform(cls, fan_in: int, seed: int = 0) -> "InitSpec":
        """nn.Linear's bias default: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
        return cls(kind=cls.FAN_IN_UNIFORM, fan_in=int(fan_in), seed=seed)


class Engine:
    """One sharded training state (a ``zero_engine_t``) on this rank.

    Life: construct, :meth:`register_param` every parameter (same order and
    values on every rank), :meth:`finalize`, then per micro-step
    :meth:`gather`/:meth:`release` (stage 3), :meth:`grad_buffer` +
    :meth:`grad_ready` per trainable param, :meth:`step`. :meth:`close` (or
    leaving a ``with`` block) frees everything; later calls raise
    :class:`zero.FailedPreconditionError`.

    Params are named by id (registration order) or by name. Views returned by
    :meth:`gather` and :meth:`grad_buffer` are zero-copy numpy arrays over the
    runtime's memory (fp16 as ``float16``, bf16 as ``uint16`` bits): they are
    valid only until the matching :meth:`release` / :meth:`grad_ready` (and
    never after :meth:`close`).

    Args:
        config: DeepSpeed ds_config as a dict, a path to a JSON file, or JSON
            text. Unknown keys raise :class:`zero.InvalidArgumentError` naming
            the key path.
        comm: the ranks to shard over; default :meth:`Comm.default` (MPI when
            launched by mpirun), which the engine then owns and closes.
        device: where the state lives: ``"cpu"``, ``"cuda"`` / ``"cuda:N"``
            (default: the CPU, or the GPU of a :meth:`Comm.nccl`). On a GPU,
            :meth:`gather` and :meth:`grad_buffer` return
            :class:`zero.DeviceArray` (DLPack) instead of numpy views, and a
            host communicator (mpi, threads) is staged through host memory.
    """

    def __init__(self, config: ConfigLike, comm: Optional[Comm] = None,
                 device: Optional[str] = None) -> None:
        self.config: Dict[str, Any] = load_config(config)
        self._owns_comm = comm is None
        self.comm: Comm = Comm.default() if comm is None else comm
        try:
            self._c = _zero_c.Engine(json.dumps(self.config), self.comm._c)
            if device is not None:
                try:
                    self._c.set_device(*parse_device(device))
                except BaseException:
                    self._c.close()  # lets the communicator close
                    raise
        except BaseException:
            if self._owns_comm:
                self.comm.close()
            raise
        #: Working dtype of trainable params (fp16/bf16 in the config).
        self.dtype: DType = DType(self._c.dtype())
        #: Where the state lives (:class:`zero.Device`).
        self.device: Device = Device.from_c(self._c.device_info())
        self._params: List[ParamInfo] = []
        self._by_name: Dict[str, ParamInfo] = {}
        self._finalized = False
        _live_engines.add(self)

    # ---- registration -------------------------------------------------

    def register_param(self, name: str, value: Any = None, *,
                       shape: Optional[Sequence[int]] = None,
                       trainable: bool = True,
                       dtype: Optional[DType] = None,
                       init: Any = None,
                       use_muon: Optional[bool] = None) -> int:
        """Registers a parameter before :meth:`finalize`; returns its id.

        Args:
            name: unique name.
            value: initial values: a numpy array or anything exposing the
                buffer protocol or ``__array__``; converted to float32 (copied
                by the runtime). None: zeros of ``shape``.
            shape: the shape when ``value`` is None (default: value's shape).
            trainable: False registers a frozen param (no gradient or
                optimizer state; the LoRA case).
            dtype: element type of the working copy; default the engine's
                (trainable params must use the engine's dtype).
            init: instead of ``value`` (``shape`` required): an
                :class:`InitSpec`, or a callable ``fill(name, offset, count)``
                returning ``count`` values of the flat param from ``offset``,
                called during :meth:`finalize` only for elements this rank
                holds; an exception in it fails finalize on every rank.
            use_muon: with optimizer Muon, True puts the param on Muon (it
                must be at least 2-D), False on AdamW; None: DeepSpeed's
                rule (at least 2-D, no "embed" or "lm_head" in the name).
        """
        muon = 0 if use_muon is None else (1 if use_muon else 2)  # zero_muon_use
        if init is not None:
            if value is not None:
                raise InvalidArgumentError(
                    f"register_param({name!r}): give value or init, not both")
            if shape is None:
                raise InvalidArgumentError(
                    f"register_param({name!r}): init needs a shape")
            shape_i = [int(s) for s in shape]
            dt_i = int(self.dtype if dtype is None else DType(dtype))
            if isinstance(init, InitSpec):
                pid = self._c.register_param_init(
                    name, shape_i, dt_i, bool(trainable), int(init.kind), int(init.seed),
                    float(init.value), float(init.low), float(init.high),
                    float(init.mean), float(init.std), float(init.a), int(init.fan_in),
                    muon)
            elif callable(init):
                user = init

                def fill(pname: str, offset: int, count: int) -> np.ndarray:
                    out = np.ascontiguousarray(
                        np.asarray(user(pname, offset, count), dtype=np.float32).reshape(-1))
                    return out
                pid = self._c.register_param_fill(name, shape_i, dt_i, bool(trainable), fill,
                                                  muon)
            else:
                raise InvalidArgumentError(
                    f"register_param({name!r}): init must be a zero.InitSpec or a callable")
            return self._remember(name, pid)
        init_v: Optional[np.ndarray] = None
        if value is not None:
            # order="C", not ascontiguousarray: that makes 0-d values 1-d.
            init_v = np.asarray(value, dtype=np.float32, order="C")
            if shape is not None and tuple(shape) != init_v.shape:
                raise InvalidArgumentError(
                    f"register_param({name!r}): shape {tuple(shape)} differs "
                    f"from the value's shape {init_v.shape}")
            shape = init_v.shape
        elif shape is None:
            raise InvalidArgumentError(
                f"register_param({name!r}): give a value or a shape")
        shape_t = tuple(int(s) for s in shape)
        dt = self.dtype if dtype is None else DType(dtype)
        address = 0 if init_v is None else init_v.ctypes.data
        pid = self._c.register_param(name, list(shape_t), int(dt), address,
                                     bool(trainable), muon)
        return self._remember(name, pid)

    def _remember(self, name: str, pid: int) -> int:
        # The runtime is the record; this is a cache of what it registered.
        info = self.param_info(pid)
        while len(self._params) <= pid:
            self._params.append(None)  # type: ignore[arg-type]
        self._params[pid] = info
        self._by_name[name] = info
        return pid

    def finalize(self, *, progress: ProgressArg = None) -> None:
        """COLLECTIVE. Lays out and allocates the shards; raises
        :class:`zero.MismatchError` if ranks registered different params.
        ``progress``: of the NVMe tier's preallocation and first write
        (:mod:`zero.progress`)."""
        with self._progress(progress):
            self._c.finalize()
        self._finalized = True

    @contextlib.contextmanager
    def _progress(self, progress: ProgressArg) -> Iterator[None]:
        """The engine reports to ``progress`` for the duration (a terminal
        line on rank 0 by default)."""
        with Reporter(progress, show=self.comm.rank == 0) as r:
            if r.callback is None:
                yield
                return
            self._c.set_progress(r.callback)
            try:
                yield
            finally:
                if not self._c.closed:
                    self._c.set_progress(None)

    # ---- lookup -------------------------------------------------------

    def param(self, p: ParamRef) -> ParamInfo:
        """The :class:`ParamInfo` of a param id or name (cached at
        registration; unknown ones raise the runtime's error)."""
        if isinstance(p, str):
            info = self._by_name.get(p)
            if info is None:
                # Let the runtime say it (raises NotFoundError); keeps the
                # message the C side gives.
                self._c.find_param(p)
                raise NotFoundError(f"unknown param {p!r}")
            return info
        pid = int(p)
        if 0 <= pid < len(self._params) and self._params[pid] is not None:
            return self._params[pid]
        self._c.param_numel(pid)  # raises the runtime's error for a bad id
        raise InvalidArgumentError(f"unknown param id {pid}")

    def param_info(self, p: ParamRef) -> ParamInfo:
        """What the runtime registered for a param id or name: name, shape,
        dtype, trainable (``zero_engine_param_info``). Unknown names raise
        :class:`zero.NotFoundError`, bad ids :class:`zero.InvalidArgumentError`."""
        pid = self._c.find_param(p) if isinstance(p, str) else int(p)
        d = self._c.param_info(pid)
        return ParamInfo(pid, d["name"], tuple(int(x) for x in d["shape"]),
                         DType(d["dtype"]), bool(d["trainable"]))

    @property
    def params(self) -> List[ParamInfo]:
        """Registered params in registration order."""
        return list(self._params)

    @property
    def num_params(self) -> int:
        return self._c.num_params()

    def find_param(self, name: str) -> int:
        """The id of a param by name (raises :class:`zero.NotFoundError`)."""
        return self._c.find_param(name)

    def param_numel(self, p: ParamRef) -> int:
        return self._c.param_numel(self.param(p).id)

    @property
    def gradient_accumulation_steps(self) -> int:
        """How many :meth:`step` calls make one optimizer step, as the
        runtime resolved it (``"auto"`` and batch arithmetic applied)."""
        return self._c.gradient_accumulation_steps()

    @property
    def rank(self) -> int:
        return self.comm.rank

    @property
    def world_size(self) -> int:
        return self.comm.size

    # ---- data ---------------------------------------------------------

    def _view(self, address: int, info: ParamInfo, readonly: bool) -> Any:
        if not self.device.host_accessible:
            return DeviceArray(self, address, info.shape, info.dtype, self.device,
                               writable=not readonly)
        return np.asarray(_View(self, address, info.shape, info.dtype.numpy,
                                readonly))

    def gather(self, p: ParamRef, *, writable: bool = False) -> Any:
        """COLLECTIVE in stage 3. The full working copy of ``p`` as a
        zero-copy view, valid until the matching :meth:`release`. Gathers
        nest. Read-only unless ``writable`` (the optimizer owns the values;
        ``writable`` exists for frameworks that insist on writable storage)."""
        info = self.param(p)
        return self._view(self._c.gather(info.id), info, readonly=not writable)

    def _gather_address(self, pid: int) -> int:
        """:meth:`gather` of param id ``pid`` without a view: the working
        copy's address (zero.torch keeps its own views, see ViewCache)."""
        return self._c.gather(pid)

    def _grad_buffer_address(self, pid: int) -> int:
        """:meth:`grad_buffer` of param id ``pid`` without a view."""
        return self._c.grad_buffer(pid)

    def gather_into(self, p: ParamRef, out: np.ndarray) -> np.ndarray:
        """COLLECTIVE in stage 3 (C ABI 1.7; every stage since 1.8). A gather of ``p`` whose full
        working copy is written into ``out`` (a writable C-contiguous numpy
        array of ``p``'s element count and dtype, :attr:`DType.numpy`: bf16
        as uint16 bits) and returned. On a host device a param not gathered
        already is all-gathered straight into ``out`` (no copy); a prefetched
        one is copied from the runtime's buffer. Ended by :meth:`release`
        like :meth:`gather`, and counted like one until then; ``out`` must
        stay unwritten until the param's last release (a nested gather_into
        copies from it; a plain :meth:`gather` of the param is refused
        meanwhile). Stages 0-2: a copy of the resident working copy, held and
        released alike, so one code path serves every stage. A copy is not
        updated by the optimizer: :meth:`step` at the accumulation boundary
        refuses while one is held (as it does for any stage-3 gather)."""
        info = self.param(p)
        if (not isinstance(out, np.ndarray) or not out.flags.c_contiguous
                or not out.flags.writeable or out.dtype != info.dtype.numpy):
            raise InvalidArgumentError(
                f"gather_into {info.name!r}: out must be a writable C-contiguous numpy "
                f"array of {info.dtype.numpy} (the param's {info.dtype.name}), got "
                f"{type(out).__name__}"
                + (f" of {out.dtype}" if isinstance(out, np.ndarray) else ""))
        self._c.gather_into(info.id, int(info.dtype), int(out.ctypes.data), int(out.nbytes))
        return out

    def _gather_into_address(self, pid: int, dtype: int, address: int, nbytes: int) -> None:
        """:meth:`gather_into` of param id ``pid`` at ``address`` (zero.torch's
        GatherPool buffers), no checks on this side (the runtime checks size
        and dtype)."""
        self._c.gather_into(pid, dtype, address, nbytes)

    def release(self, p: ParamRef) -> None:
        """Ends one :meth:`gather` (or :meth:`gather_into`) of ``p``."""
        self._c.release(self.param(p).id)

    @contextlib.contextmanager
    def gathered(self, *params: ParamRef) -> Iterator[List[np.ndarray]]:
        """Context manager: gathers ``params`` (in order), yields their views,
        releases them on exit (numpy views, or :class:`zero.DeviceArray` on a GPU)."""
        done: List[int] = []
        try:
            views = []
            for p in params:
                info = self.param(p)
                views.append(self.gather(info.id))
                done.append(info.id)
            yield views
        finally:
            for pid in reversed(done):
                if not self._c.closed:
                    self.release(pid)

    def grad_buffer(self, p: ParamRef) -> Any:
        """A zero-filled writable view for this micro-step's gradient of a
        trainable param; write or add into it, then :meth:`grad_ready`. On a
        GPU a :class:`zero.DeviceArray` (DLPack; :meth:`DeviceArray.copy_from`)."""
        info = self.param(p)
        return self._view(self._c.grad_buffer(info.id), info, readonly=False)

    def grad_ready(self, p: ParamRef) -> None:
        """COLLECTIVE in stages 2-3 (same params, same order on every rank).
        Hands the gradient over; its buffer is invalid afterwards."""
        self._c.grad_ready(self.param(p).id)

    def set_grad(self, p: ParamRef, grad: Any,
                 dtype: "str | int | DType | None" = None) -> None:
        """COLLECTIVE as :meth:`grad_ready`. Hands in ``grad`` (host memory,
        ``p``'s element count, any float dtype: float32, float16, or bf16 bits
        as uint16, which ``dtype`` may name instead) as this micro-step's
        gradient of ``p``, rounded to the param's dtype inside the runtime
        with its own rounding (C ABI 1.8 ``zero_engine_set_grad``: the same
        bits as :func:`zero.convert` into :meth:`grad_buffer`, then
        :meth:`grad_ready`). Other numeric arrays are taken as float32 first."""
        info = self.param(p)
        src = np.asarray(grad)
        if dtype is not None:
            src_dt = DType.parse(dtype)
        elif src.dtype in (np.float32, np.float16, np.uint16):
            src_dt = dtype_of(src)
        else:
            src_dt = DType.F32
        src = np.ascontiguousarray(src, dtype=src_dt.numpy)
        self._c.set_grad(info.id, int(src_dt), int(src.ctypes.data), int(src.nbytes))

    def lr_for_step(self, step: int) -> float:
        """The learning rate of 0-based optimizer step ``step`` (skipped steps
        not counted, as :attr:`StepInfo.global_step`), from the runtime's
        schedule (the config's ``scheduler``, else the optimizer's lr): the
        next update's is ``lr_for_step(global_step)``. NOT collective."""
        return self._c.lr_for_step(int(step))

    @property
    def loss_scale(self) -> float:
        """The factor to multiply the loss by before backward (1 unless fp16)."""
        return self._c.loss_scale()

    def step(self) -> StepInfo:
        """COLLECTIVE. Ends a micro-step; at the accumulation boundary
        reduces, unscales, clips and runs the optimizer (or skips on fp16
        overflow). Gradients not handed in count as zero. At the boundary a
        param still gathered as a copy the update would not reach (any
        stage-3 gather, a :meth:`gather_into` at any stage, e.g. a step
        inside :meth:`gathered`) raises FailedPreconditionError naming it,
        before anything changes: release it, step again, gather again."""
        return StepInfo.from_c(self._c.step())

    def report_samples(self, samples: int) -> None:
        """Adds to the samples/s count of the periodic print."""
        self._c.report_samples(int(samples))

    def read_master(self, p: ParamRef) -> np.ndarray:
        """COLLECTIVE (every rank calls it). A new float32 array holding the param's
        full fp32 master weights."""
        info = self.param(p)
        out = np.empty(info.shape, dtype=np.float32)
        self._c.read_master(info.id, out.ctypes.data)
        return out

    def write_master(self, p: ParamRef, values: np.ndarray) -> None:
        """NOT collective. Sets the param to ``values`` (its shape, any float
        dtype; the same on every rank): the fp32 master weights this rank owns
        and every working copy it holds. Refused while the param is gathered
        or mid-accumulation."""
        info = self.param(p)
        arr = np.ascontiguousarray(values, dtype=np.float32)
        if arr.shape != tuple(info.shape):
            raise ValueError(f"write_master '{info.name}': shape {arr.shape}, "
                             f"expected {tuple(info.shape)}")
        self._c.write_master(info.id, arr.ctypes.data)

    def write_master_range(self, p: ParamRef, offset: int,
                           values: np.ndarray) -> None:
        """NOT collective (C ABI 1.5). Like :meth:`write_master` for the
        ``values.size`` elements starting at flat element ``offset`` of the
        param (row-major) only: the part of the fp32 master this rank owns
        and of every working copy it holds, so no rank needs the whole param
        (e.g. one row of an embedding at stage 3). A range outside the param
        raises :class:`zero.InvalidArgumentError` naming it."""
        info = self.param(p)
        arr = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
        self._c.write_master_range(info.id, int(offset), int(arr.size),
                                   arr.ctypes.data)

    # ---- checkpoints ----------------------------------------------------

    def save(self, dir: PathLike, tag: str, *, progress: ProgressArg = None,
             asynchronous: bool = False, keep_last: int = 0,
             exclude_frozen: bool = False) -> None:
        """COLLECTIVE. Writes the full training state (params, optimizer
        states, steps, loss scale) to ``dir/tag`` atomically, then points
        ``dir/latest`` at it; a failed save leaves earlier tags whole.
        Refused mid-accumulation (:class:`zero.FailedPreconditionError`).
        ``progress``: see :mod:`zero.progress`; a cancel on any rank raises
        :class:`zero.CancelledError` on every rank.

        ``asynchronous``: return once this rank's state is copied; the files
        are written and ``latest`` published in the background (no progress).
        The next save, load, :meth:`wait_checkpoint` or close waits for it and
        raises its failure, on every rank, instead of doing its own work.
        ``keep_last`` K > 0: after publishing, delete the oldest tags of
        ``dir`` beyond the newest K.

        ``exclude_frozen`` (C ABI 1.14): leave the frozen params (registered
        with ``trainable=False``) out, as DeepSpeed's
        ``save_checkpoint(exclude_frozen_parameters=True)``: an adapter's
        checkpoint. :meth:`load` it with ``allow_missing=True`` into an
        engine whose frozen params already hold the base model."""
        with self._progress(None if asynchronous else progress):
            self._c.save(os.fspath(dir), str(tag), bool(asynchronous), int(keep_last),
                         bool(exclude_frozen))

    def wait_checkpoint(self) -> None:
        """COLLECTIVE. Waits for an asynchronous save in flight; raises its
        failure (the same on every rank)."""
        self._c.wait_checkpoint()

    def set_preemption(self, dir: Optional[PathLike], *, signal: int = 15,
                       tag: Optional[str] = None, exit: bool = True,
                       exit_code: int = 0) -> None:
        """COLLECTIVE. On ``signal`` (SIGTERM) at any rank, every rank finishes
        the step that ends the accumulation, saves it to ``dir/tag`` (None:
        ``global_step<N>``) and exits with ``exit_code`` (0: 128 + signal)
        printing why; with ``exit=False`` that :meth:`step` raises
        :class:`zero.CancelledError` instead. ``dir`` None turns it off."""
        self._c.set_preemption(None if dir is None else os.fspath(dir), int(signal),
                               tag, bool(exit), int(exit_code))

    def load(self, dir: PathLike, tag: Optional[str] = None, *,
             load_optimizer_states: bool = True,
             allow_missing: bool = False, progress: ProgressArg = None) -> None:
        """COLLECTIVE. Restores ``dir/tag`` (None: the tag ``dir/latest``
        names), saved at any world size or stage, with steps and loss scale.
        Call it with every param released, not mid-accumulation. In stages
        0-2 a param's working copy keeps its address, so arrays gathered
        before show the loaded values.

        Args:
            load_optimizer_states: False starts the optimizer moments at zero.
            allow_missing: True lets params the checkpoint lacks keep their
                values (otherwise :class:`zero.FailedPreconditionError` names
                them). Params the engine lacks are always refused.
            progress: see :mod:`zero.progress` (a cancelled load, like a
                failed one, leaves the engine unusable).

        A missing tag raises :class:`zero.NotFoundError`, a corrupt file
        :class:`zero.DataLossError` naming it; a load that fails after it
        began changing state leaves the engine unusable (make a new one).
        Fails alike on every rank.
        """
        with self._progress(progress):
            self._c.load(os.fspath(dir), None if tag is None else str(tag),
                         bool(load_optimizer_states), bool(allow_missing))

    def load_safetensors(self, path: PathLike, allow_missing: bool = False,
                         prefix_strip: Optional[str] = None,
                         prefix_add: Optional[str] = None) -> int:
        """COLLECTIVE. Sets params from pretrained weights: ``path`` is a
        ``.safetensors`` file or a Hugging Face ``model.safetensors.index.json``
        (its ``weight_map`` names shard files beside it). F32, F16 and BF16
        tensors load, widened to fp32 exactly. Each rank reads only the
        elements it holds (its owned master range and its working copy).
        Call it after finalize with every param released, not
        mid-accumulation.

        Args:
            allow_missing: True lets params the file lacks keep their values
                (otherwise :class:`zero.NotFoundError` names them).
            prefix_strip, prefix_add: a tensor named ``N`` in the file loads
                into the param ``prefix_add + N`` with a leading
                ``prefix_strip`` removed first (e.g. ``"model."``).

        Returns the tensor bytes this rank read. A wrong shape or dtype
        raises :class:`zero.InvalidArgumentError` naming tensor, file and
        shapes; a corrupt or truncated file :class:`zero.DataLossError`.
        Everything is validated on every rank before anything is written;
        fails alike on every rank. Tensors no param takes are listed in one
        warning line on rank 0.
        """
        return self._c.load_safetensors(os.fspath(path), bool(allow_missing),
                                        prefix_strip, prefix_add)

    def step_breakdown(self) -> Dict[str, float]:
        """The last optimizer step's wall time by phase, in ms, and its NVMe
        bytes (the fields of ``zero_step_breakdown``:
        ``zero._abi_tables.STEP_BREAKDOWN_FIELDS``). Needs
        ``"wall_clock_breakdown": true`` in the config (or ``"zero_trace"``);
        otherwise :class:`zero.FailedPreconditionError`."""
        raw = self._c.step_breakdown()
        return {name: (float(raw[name]) if kind == "float" else int(raw[name]))
                for name, kind, _ in STEP_BREAKDOWN_FIELDS}

    def comm_log(self) -> List[Dict[str, Any]]:
        """The collective log (``"comms_logger": {"enabled": true}``): one
        dict per collective and message-size bucket (``op``: 0 all_gather,
        1 reduce_scatter, 2 all_reduce, 3 broadcast; ``control``; count,
        bytes, sent_bytes, times and nccl-tests' algbw/busbw in GB/s)."""
        out = []
        for raw in self._c.comm_log():
            out.append({name: (bool(raw[name]) if kind == "bool" else
                               float(raw[name]) if kind == "float" else int(raw[name]))
                        for name, kind, _ in COMM_LOG_ENTRY_FIELDS})
        return out

    def comm_log_summary(self) -> str:
        """The collective log as DeepSpeed's log_summary table."""
        return self._c.comm_log_summary()

    def flight_record(self) -> List[Dict[str, Any]]:
        """This rank's last collectives, oldest first
        (``zero_engine_flight_record``): one dict each with rank, comm, seq,
        op, elems, dtype, call, step, micro_step, param, params, bucket and
        outcome. Readable after an error: where the ranks diverged, the last
        one's outcome is ``"diverged"`` (README.md, "When ranks disagree")."""
        return [json.loads(line) for line in self._c.flight_record().splitlines() if line]

    def device_memory(self) -> Dict[str, int]:
        """What the engine's device holds now (``zero_engine_device``):
        ``device_bytes`` allocated and their high-water mark
        ``device_peak_bytes``, ``device_reserved_bytes`` held by the CUDA
        caching allocator, ``pinned_host_bytes`` of page-locked host staging."""
        d = self._c.device_info()
        return {k: int(d[k]) for k in ("device_bytes", "device_peak_bytes",
                                        "device_reserved_bytes", "pinned_host_bytes")}

    def stats(self) -> Dict[str, int]:
        """Bytes per category on this rank and elements sent per collective
        (the fields of ``zero_stats``, in its order: ``zero._abi_tables.STATS_FIELDS``)."""
        raw = self._c.stats()
        return {name: int(raw[name]) for name, _, _ in STATS_FIELDS}

    # ---- life ---------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._c.closed

    def close(self) -> None:
        """Frees the engine (idempotent); closes the comm if the engine made it.
        At stage 3 it first completes a prefetch still in flight (collective:
        close on every rank); other Python threads run meanwhile."""
        c = getattr(self, "_c", None)
        if c is None:
            return
        c.close()
        if self._owns_comm and not self.comm.closed:
            self.comm.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else (
            "finalized" if self._finalized else "registering")
        return (f"<zero.Engine {state} dtype={self.dtype.name} "
                f"params={len(self._params)}>")


_live_engines: "weakref.WeakSet[Engine]" = weakref.WeakSet()


@atexit.register
def _close_live_engines() -> None:
    # Before the C library's own exit handlers (which finalize MPI).
    for e in list(_live_engines):
        try:
            e.close()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass
