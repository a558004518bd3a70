"""ZeroTorchEngine: the DeepSpeed-shaped front over a zero runtime. Its
parts live by concern: params.py (registration and storage), stage3.py
(gather and release), hooks.py (module and grad hooks), state_dict.py
(state dicts and checkpoints), construct.py (meta params),
checkpointing.py (activation checkpointing)."""
from __future__ import annotations

import contextlib
import os
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

import torch

from .. import _torch_bridge
from ..comm import Comm
from ..dtypes import DType
from ..engine import ConfigLike, Engine, StepInfo, load_config
from ..errors import FailedPreconditionError, ZeroError
from .checkpointing import _CheckpointedModules
from .construct import _MetaConstruction, _move_module
from .hooks import _ModuleHooks, _Stage3Guard
from .join import Join
from .launch import _install_excepthook, _live, _live_torch_engines
from .optim import ZeroLRScheduler, ZeroOptimizer
from .params import _ParamStorage
from .stage3 import _Stage3Params
from .state import TrainingState
from .state_dict import _StateDicts


_TORCH_DTYPE = {
    DType.F32: torch.float32,
    DType.F16: torch.float16,
    DType.BF16: torch.bfloat16,
}


class _CallableInt(int):
    """An int that can also be called (``engine.gradient_accumulation_steps``
    was an attribute; DeepSpeed's is a method: both spellings work)."""

    def __call__(self) -> int:
        return int(self)


def _upcast_inputs(value: Any) -> Any:
    """fp16 floating tensors in (nested lists/tuples/dicts of) value, as fp32."""
    if isinstance(value, torch.Tensor):
        return value.float() if value.dtype == torch.float16 else value
    if isinstance(value, (list, tuple)):
        items = [_upcast_inputs(v) for v in value]
        if isinstance(value, tuple):
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        return items
    if isinstance(value, dict):
        return type(value)((k, _upcast_inputs(v)) for k, v in value.items())
    return value


class ZeroTorchEngine(_ParamStorage, _Stage3Params, _ModuleHooks, _StateDicts,
                      _MetaConstruction, _CheckpointedModules, torch.nn.Module):

    """A PyTorch module whose parameters, gradients and optimizer states live
    in a zero runtime; made by :func:`initialize`.

    ``engine(*args)`` runs the wrapped module, :meth:`backward` hands the
    gradients over, :meth:`step` ends the micro-step (the optimizer runs at
    the gradient-accumulation boundary).
    """

    def __init__(self, model: torch.nn.Module, config: ConfigLike,
                 comm: Optional[Comm] = None,
                 model_parameters: Optional[Iterable[torch.nn.Parameter]] = None,
                 overlap_grad_hooks: bool = True, *,
                 init_fn: Any = None, pretrained: Any = None,
                 init_seed: int = 0, wrap_policy: Any = None,
                 device: Any = None, _keep_originals: bool = False) -> None:
        super().__init__()
        self._wrap_policy = wrap_policy
        # The runtime's device: `device`, else the model's (a CUDA model puts
        # the state on its GPU), else the communicator's (NCCL) or the CPU.
        model_dev = _torch_bridge.model_device(model)
        if device is None and model_dev is not None and model_dev.type == "cuda":
            device = f"cuda:{model_dev.index or 0}"
        trainable_set: Optional[Set[int]] = None
        if model_parameters is not None:
            trainable_set = {id(p) for p in model_parameters}
        self.module = model
        self._closed = False
        self._hooks: List[Any] = []
        self._grad_accs: List[Any] = []
        self._patched_linears: List[torch.nn.Module] = []
        # (module, the class its _parameters had: OrderedDict before torch
        # 2.11, dict since), so release puts back what torch made.
        self._patched_dicts: List[Tuple[torch.nn.Module, type]] = []
        # (module, its own forward attribute before wrapping, or None).
        self._checkpointed: List[Tuple[torch.nn.Module, Any]] = []
        #: Names of the modules run under activation checkpointing.
        self.checkpointed_modules: List[str] = []
        self._params: List[torch.nn.Parameter] = []
        self._orig_data: List[torch.Tensor] = []
        # Meta params replaced by CPU ones: (module, key, the meta param).
        self._replaced: List[Tuple[torch.nn.Module, str, torch.nn.Parameter]] = []
        self._init_fn = init_fn
        self._pretrained = pretrained
        self._init_seed = int(init_seed)
        self._meta_new: Dict[int, Any] = {}
        self._meta_specs: Dict[int, Any] = {}
        self._meta_map: Dict[int, torch.nn.Parameter] = {}
        # The activation_checkpointing section is zero.torch's to apply (the
        # runtime would report it as without effect); the rest goes down.
        cfg = dict(load_config(config))
        self._ac_section = cfg.pop("activation_checkpointing", None)
        self.zero = Engine(cfg, comm, device=None if device is None else str(device))
        self._bridge = _torch_bridge.bridge_for(self.zero)
        if model_dev is not None and model_dev != self._bridge.torch_device:
            if self._bridge.torch_device.type == "cpu":
                self.zero.close()
                raise ValueError(
                    f"zero.torch: the model is on {model_dev} and the runtime on "
                    f"{self.zero.device}; give initialize(device=...) the model's device")
            _move_module(model, self._bridge.torch_device)  # as DeepSpeed's engine does
        _live_torch_engines.add(self)
        _install_excepthook()
        try:
            self._setup(model, trainable_set, overlap_grad_hooks)
        except BaseException:
            self._undo_setup()
            raise
        if not _keep_originals:
            self._drop_originals()
        _live.add(self)

    # Set in every hook (hundreds of times a step): stored directly, not
    # through nn.Module.__setattr__'s parameter/buffer/module checks (they
    # are plain ints, lists and a TrainingState).
    _HOT_ATTRS = frozenset({"_busy", "_handed", "_fwd_stack", "_state"})

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ZeroTorchEngine._HOT_ATTRS:
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def _setup(self, model: torch.nn.Module, trainable_set: Optional[Set[int]],
               overlap_grad_hooks: bool) -> None:
        self.dtype = _TORCH_DTYPE[self.zero.dtype]
        # fp16 on the CPU computes in fp32 (see the module docstring); on a
        # GPU in fp16.
        self._upcast = (self.zero.dtype == DType.F16
                        and self._bridge.torch_device.type == "cpu")
        self.compute_dtype = torch.float32 if self._upcast else self.dtype
        self.stage = int(self.zero.stats()["stage"])  # as the runtime parsed it
        # As the runtime resolved it ("auto" and batch arithmetic applied);
        # both engine.gradient_accumulation_steps and ...() work.
        self.gradient_accumulation_steps = _CallableInt(
            self.zero.gradient_accumulation_steps)
        self.overlap_grad_hooks = overlap_grad_hooks
        self.global_steps = 0
        self.micro_steps = 0
        self.last_step_info: Optional[StepInfo] = None
        self._step_applied = False
        self._state = TrainingState.IDLE
        self._inside_no_sync = False
        self._fwd_stack: List[torch.nn.Module] = []
        self._busy = 0  # > 0 while hooks move params (the guard stands back)
        self._join: Optional[Join] = None  # the Join this engine is in, if any

        padding_rows = self._infer_meta_specs(model)
        self._register_params(model, trainable_set, padding_rows)
        self._make_param_buffers(overlap_grad_hooks)
        self._place_params()
        if self.stage == 3 or self._upcast:
            self._install_state_dict_hooks()
        self._install_activation_checkpointing()
        if overlap_grad_hooks:
            self._install_grad_hooks()
        self.optimizer: Optional[ZeroOptimizer] = (
            ZeroOptimizer(self) if "optimizer" in self.zero.config else None)
        self.lr_scheduler: Optional[ZeroLRScheduler] = (
            ZeroLRScheduler(self) if self.zero.config.get("scheduler") else None)

    def _undo_setup(self) -> None:
        """A failed initialize: the module gets its own tensors back and no
        runtime is left behind."""
        self._closed = True
        self._remove_hooks()
        for p, data in zip(self._params, self._orig_data):
            if id(p) not in self._meta_new:
                p.data = data
        for m, key, old in reversed(self._replaced):
            m._parameters[key] = old
        self._replaced = []
        _live.discard(self)
        try:
            self.zero.close()
        except Exception:  # noqa: BLE001 - the original error matters
            pass

    # ---- DeepSpeed-shaped API ----------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Runs the wrapped module (fp16: in fp32, fp16 inputs upcast)."""
        self._check_open()
        if self._join is not None:
            self._join._on_forward()
        if self._upcast:
            args = _upcast_inputs(args)
            kwargs = _upcast_inputs(kwargs)
        try:
            if self.stage < 3:
                return self.module(*args, **kwargs)
            self._fwd_stack = []
            if _Stage3Guard is None:
                return self.module(*args, **kwargs)
            with _Stage3Guard(self):
                return self.module(*args, **kwargs)
        except BaseException as e:
            if torch.is_grad_enabled():  # a training forward: ranks diverge
                self._abort_peers("forward", e)
            raise

    def backward(self, loss: torch.Tensor, retain_graph: bool = False,
                 scale_wrt_gas: bool = True) -> None:
        """Backward of ``loss`` times the loss scale (divided by the
        gradient-accumulation steps unless ``scale_wrt_gas`` is False), then
        hands every trainable param's gradient to the runtime."""
        self._check_open()
        self._handed = [False] * len(self._params)
        self._direct = [False] * len(self._params)
        factor = self.zero.loss_scale
        if scale_wrt_gas and self.gradient_accumulation_steps > 1:
            factor /= self.gradient_accumulation_steps
        scaled = loss if factor == 1.0 else loss * factor
        if self._direct_grads:
            self._count_grad_edges(scaled.grad_fn)
        outer, self._state = self._state, TrainingState.BACKWARD
        try:
            scaled.backward(retain_graph=retain_graph)
        except BaseException as e:
            self._abort_peers("backward", e)
            raise
        finally:
            self._state = outer
            if self._direct_grads:
                # The counts hold for this graph only: a backward that does
                # not come through here (loss.backward()) hands every
                # gradient in after autograd summed it.
                self._uses = self._no_uses
        self._finish_backward()

    def _finish_backward(self) -> None:
        """What a backward leaves to do once autograd is done."""
        # Trainable params the hooks did not hand in (no gradient, or hooks
        # off), in reverse registration order: the same on every rank.
        for i in reversed(range(len(self._params))):
            if self._trainable[i] and not self._handed[i]:
                self._hand_in(i)
        if self.stage == 3:
            self._release_leftovers()
        self.micro_steps += 1

    def _finish_plain_backward(self) -> None:
        """At step(), after a ``loss.backward()`` that did not come through
        engine.backward (the grad hooks saw it): the same completion, or an
        error where its gradients cannot be right. Without it, stage 3 kept
        the first module's params gathered over the update, and the next
        forward computed with the pre-step values (a silent wrong result)."""
        self._state = TrainingState.IDLE
        if self.zero.loss_scale != 1.0:
            raise FailedPreconditionError(
                "zero.torch: step() after loss.backward(): with fp16 dynamic "
                f"loss scaling (scale {self.zero.loss_scale:g}) the gradients "
                "must come from engine.backward(loss), which multiplies the "
                "loss by the scale the runtime divides them by")
        self._finish_backward()

    def step(self) -> StepInfo:
        """Ends the micro-step (COLLECTIVE); at the boundary the optimizer
        updates the params in place."""
        self._check_open()
        if self._state is TrainingState.PLAIN_BACKWARD:
            self._finish_plain_backward()
        # The optimizer overwrites the working copy torch's queued forward and
        # backward may still read (a GPU): those finish first.
        self._bridge.torch_done()
        info = self.zero.step()
        if self._join is not None:
            self._join._on_step()
        self._handed = [False] * len(self._params)
        self.last_step_info = info
        self.global_steps = info.global_step
        if info.boundary:
            self._step_applied = not info.skipped
            if not info.skipped:
                self._refresh_upcast()
        return info

    def join(self, enable: bool = True) -> Join:
        """``with engine.join(): ...``: uneven inputs, see :class:`Join`."""
        return Join(self, enable)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drops any gradient torch holds (gradients live in the runtime)."""
        for p in self._params:
            p.grad = None

    def is_gradient_accumulation_boundary(self) -> bool:
        """True when the next :meth:`step` runs the optimizer."""
        return (self.micro_steps % self.gradient_accumulation_steps) == 0

    @property
    def loss_scale(self) -> float:
        """Scale applied in :meth:`backward` (1 unless fp16)."""
        return self.zero.loss_scale

    def get_lr(self) -> List[float]:
        """The learning rate of the next optimizer step, one per param group
        (DeepSpeed: the lr its scheduler last set on the optimizer). From the
        config's ``scheduler`` and the steps taken: the runtime's schedule."""
        return [self.zero.lr_for_step(self.global_steps)]

    def get_global_grad_norm(self) -> float:
        """Global L2 norm of the unscaled gradients of the last step."""
        return self.last_step_info.grad_norm if self.last_step_info else float("nan")

    def was_step_applied(self) -> bool:
        """Whether the last optimizer step updated the params (False before
        any step and after an fp16 overflow skip)."""
        return self._step_applied

    def train_batch_size(self) -> int:
        """micro batch * gradient accumulation steps * world size."""
        return (self.train_micro_batch_size_per_gpu() *
                int(self.gradient_accumulation_steps) * self.world_size)

    def train_micro_batch_size_per_gpu(self) -> int:
        """As the runtime resolves it: the config's value, else
        ``train_batch_size / (gas * world)``, else 1."""
        cfg = self.zero.config
        mb = cfg.get("train_micro_batch_size_per_gpu")
        if isinstance(mb, int) and mb > 0:
            return mb
        tb = cfg.get("train_batch_size")
        if isinstance(tb, int) and tb > 0:
            return tb // (int(self.gradient_accumulation_steps) * self.world_size)
        return 1

    def fp16_enabled(self) -> bool:
        return self.zero.dtype == DType.F16

    def bfloat16_enabled(self) -> bool:
        return self.zero.dtype == DType.BF16

    def zero_optimization_stage(self) -> int:
        return self.stage

    def zero_optimization_partition_gradients(self) -> bool:
        return self.stage >= 2

    def zero_gather_16bit_weights_on_model_save(self) -> bool:
        zo = self.zero.config.get("zero_optimization") or {}
        return bool(zo.get("stage3_gather_16bit_weights_on_model_save",
                           zo.get("stage3_gather_fp16_weights_on_model_save", False)))

    def gradient_clipping(self) -> float:
        return float(self.zero.config.get("gradient_clipping", 0.0))

    @contextlib.contextmanager
    def no_sync(self):
        """As DeepSpeed: refused with gradient partitioning (stages 2-3).
        Stages 0-1 reduce gradients only at the accumulation boundary
        anyway, so inside the context nothing changes."""
        if self.zero_optimization_partition_gradients():
            raise FailedPreconditionError(
                "no_sync context manager is incompatible with gradient "
                f"partitioning logic of ZeRO stage {self.stage}")
        if self._inside_no_sync:
            raise FailedPreconditionError("no_sync context manager reentry is unsupported")
        self._inside_no_sync = True
        try:
            yield
        finally:
            self._inside_no_sync = False

    @property
    def local_rank(self) -> int:
        lr = os.environ.get("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK"))
        return int(lr) if lr is not None else self.zero.rank

    @property
    def global_rank(self) -> int:
        return self.zero.rank

    @property
    def world_size(self) -> int:
        return self.zero.world_size

    @property
    def dp_world_size(self) -> int:
        return self.zero.world_size

    def stats(self) -> Dict[str, int]:
        """The runtime's memory and traffic counters (see zero.Engine.stats)."""
        return self.zero.stats()

    def close(self, keep_values: bool = True) -> None:
        """Frees the runtime; the params become torch-owned tensors holding
        their last working values (stage 3: gathered, so COLLECTIVE; with
        ``keep_values=False`` they become zeros and nothing is collective).
        Idempotent; the engine raises on use afterwards."""
        if self._closed:
            return
        self._closed = True
        self._remove_hooks()
        if not self.zero.closed:
            for i, p in enumerate(self._params):
                if not keep_values:
                    p.data = torch.zeros(p.shape, dtype=self.dtype,
                                         device=self._bridge.torch_device)
                elif self.stage < 3:
                    src = self._views[i] if self._upcast else p.data
                    p.data = src.clone()
                elif getattr(self, "_gather_into", False):
                    p.data = self._gather_new(i)
                else:
                    view = self.zero.gather(self._ids[i], writable=True)
                    p.data = self._bridge.tensor(view, self.zero.dtype).clone()
                    self._bridge.torch_done()
                    self.zero.release(self._ids[i])
        for cache in (getattr(self, "_grad_views", None), getattr(self, "_gather_views", None),
                      getattr(self, "_gather_pool", None)):
            if cache is not None:
                cache.clear()
        self.zero.close()
        _live.discard(self)

    def destroy(self) -> None:
        """DeepSpeed's name for :meth:`close`."""
        self.close()

    def __enter__(self) -> "ZeroTorchEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- internals ---------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise FailedPreconditionError(
                "ZeroTorchEngine is closed (used after close)")

    def _abort_peers(self, where: str, exc: BaseException) -> None:
        """An exception (not the runtime's own, which every rank sees) left
        ``where`` on this rank: the step is half done here, so the ranks can
        no longer pair their collectives. Every rank is stopped at once
        (zero.Comm.abort: under MPI the job ends) rather than pairing
        collectives across steps or waiting out comm_timeout_seconds."""
        if isinstance(exc, ZeroError) or self._closed:
            return
        comm = self.zero.comm
        if comm.size > 1:
            import sys
            import traceback
            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
            sys.stderr.flush()
            comm.abort(f"{type(exc).__name__} in zero.torch {where}: {exc}")
