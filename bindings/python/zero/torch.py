"""zero.torch: a DeepSpeed-shaped engine for PyTorch modules.

::

    engine, optimizer, _, lr_scheduler = zero.torch.initialize(
        model=model, config="ds_config.json")          # launched by mpirun
    for batch, target in data:
        loss = loss_fn(engine(batch), target)
        engine.backward(loss)
        engine.step()

(``engine = zero.torch.initialize(model, ds_config)``, the short form with a
module first, returns the engine alone.)

The runtime owns the model state. Stages 0-2: every param's storage *is* the
runtime's working copy (``param.data = torch.from_numpy(view)``, no copy);
the optimizer updates it in place in :meth:`ZeroTorchEngine.step`. Stage 3:
a released param is a zero-stride placeholder of its full shape (one
element of memory, NaN, so that a value computed from it cannot pass for a
real one); forward pre-hooks gather a module's own params, forward hooks
release them, and autograd functions wrapped around the module's outputs and
inputs gather them again for its backward and release them after.
The gathered values are copied into torch-owned tensors in stage 3, because
autograd may save views of a param (``weight.t()`` in ``F.linear``) that must
stay valid after the runtime frees its gathered copy; ``torch.nn.Linear``
modules get a linear function that saves the parameter itself instead (as
DeepSpeed does), so their copies die at release rather than living until
backward. On the CPU the copies go into torch-owned buffers reused from one
gather to the next (_torch_bridge.GatherPool: no fresh pages per gather),
which the runtime all-gathers into directly (``gather_into``, C ABI 1.7: no
copy out of its own buffer; prefetched params are copied from their
prefetch buffer once; fp16, computed in fp32 on the CPU, is copied and
cast as before); a
buffer that a tensor still references at release (a saved view) is left to
that tensor and never written again.
Stage 3 on the CPU, gradients: a Linear weight whose only gradient is its
Linear's (one edge into its AccumulateGrad node, counted by a walk of the
graph before backward) gets it computed by the Linear's backward straight
into the runtime's gradient buffer and handed in there; every other
gradient is handed in by a hook on its AccumulateGrad node, after autograd
summed it.

Stage 3, params used outside the module that owns them (a tied head:
``F.linear(x, self.wte.weight)`` in the parent's forward): as DeepSpeed does,
reading ``module.weight`` during a forward gathers the param and registers it
as an *external* param of the module whose forward is running, which from
then on gathers it for its forward and backward like its own. A param reached
another way (a reference kept in a list or closure) is caught when a torch
function receives it during ``engine(...)`` and handled the same way.

fp16 on the CPU: torch has no fp16 kernels for stock modules on the CPU
(``addmm`` for ``Half``), so with ``fp16.enabled`` the module computes in
fp32: params are fp32 copies of the runtime's fp16 working values (refreshed
after every optimizer step; stage 3: upcast when gathered), fp16 floating
inputs of ``engine(...)`` are upcast, gradients are cast to fp16 when handed
to the runtime (after loss scaling, so overflow is detected as in DeepSpeed).

CUDA models (zero/_torch_bridge.py): a model on ``cuda:N`` (or
``initialize(..., device="cuda:N")``, which moves a CPU model there) puts the
runtime's state on that GPU; stages 0-2 alias each param to the runtime's
device memory through DLPack (``torch.from_dlpack`` of a zero.DeviceArray, no
copy), stage 3 copies gathered device buffers into torch-owned CUDA tensors.
Ordering with torch's current stream uses events: the runtime's work is done
when its calls return; torch's queued work is waited for (an event on its
current stream) before a gradient is handed over, before a gathered buffer
is released and before the optimizer step overwrites params. fp16 on a GPU
computes in fp16. Tests run this path on the CPU stand-in for a GPU
(``ZERO_GPU_STANDIN=1``), where torch cannot hold device tensors and values
are copied instead of aliased; the aliasing itself is tested on a GPU only.

Activation checkpointing (an ``activation_checkpointing`` section in the
config): the model's repeated blocks run under torch's non-reentrant
``torch.utils.checkpoint`` (see _ActivationCheckpointing for which ones); in
stage 3 their recomputation in backward gathers their params again through
the same hooks.

Params on the ``meta`` device (``zero.torch.Init()``, ``device="meta"``) are
registered with init specs inferred from their modules (torch's defaults) or
the user's ``init_fn``, so no rank ever holds a whole param outside a gather;
``pretrained=`` loads safetensors after registration (see ``initialize``).

Gradients reach the runtime from hooks on each param's gradient accumulator
(so stages 2-3 reduce buckets while backward goes on and never hold the whole
gradient); after backward, trainable params whose hook did not fire are
handed in (as zeros) in reverse registration order. Every rank must run the
same graph, so hooks fire in the same order on every rank (the runtime's
collectives require it).
"""
from __future__ import annotations

if __name__ == "torch":  # this file, imported as the top-level `torch`
    raise ImportError(
        "zero/torch.py was imported as `torch`: Python runs from the zero "
        "package's own directory (bindings/python/zero), so `import torch` "
        "finds this file instead of PyTorch. Run from another directory.")

import atexit
import contextlib
import functools
import math
import os
import types
import warnings
import weakref
from collections import OrderedDict
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

try:
    from torch.overrides import TorchFunctionMode as _TorchFunctionMode
except ImportError:  # older torch: attribute reads still gather
    _TorchFunctionMode = None  # type: ignore[assignment,misc]

import numpy as np
import torch

from . import _torch_bridge
from .comm import Comm
from .dtypes import DType
from .engine import ConfigLike, Engine, StepInfo, load_config
from .errors import (FailedPreconditionError, InvalidArgumentError,
                     UnimplementedError, ZeroError)

__all__ = ["initialize", "ZeroTorchEngine", "GatheredParameters", "Init"]

#: The file save_checkpoint writes client_state to, inside DIR/TAG.
CLIENT_STATE_FILE = "client_state.pt"

_TORCH_DTYPE = {
    DType.F32: torch.float32,
    DType.F16: torch.float16,
    DType.BF16: torch.bfloat16,
}


def _move_module(model: torch.nn.Module, device: torch.device) -> None:
    """Moves the module's non-meta params and buffers to ``device`` (meta
    params are described, and placed when registered)."""
    with torch.no_grad():
        for m in model.modules():
            for key, p in m._parameters.items():
                if p is not None and not p.is_meta:
                    p.data = p.data.to(device)
            for key, b in list(m._buffers.items()):
                if b is not None and not b.is_meta:
                    m._buffers[key] = b.to(device)


def _placeholder(shape: Sequence[int], dtype: torch.dtype,
                 device: Any = "cpu") -> torch.Tensor:
    """A released stage-3 param: full shape, one element of storage, NaN
    (a result computed from it cannot pass for a real one)."""
    return torch.full((), float("nan"), dtype=dtype, device=device).expand(tuple(shape))


class _PostBackward(torch.autograd.Function):
    """Identity on a module's inputs; its backward runs once the module's
    backward has produced input gradients: release the module's params."""

    @staticmethod
    def forward(ctx, owner, module, *tensors):  # type: ignore[override]
        ctx.owner = owner
        ctx.module = module
        return tensors if len(tensors) != 1 else tensors[0]

    @staticmethod
    def backward(ctx, *grads):  # type: ignore[override]
        ctx.owner._release_module(ctx.module, backward=True)
        return (None, None) + grads


class _PreBackward(torch.autograd.Function):
    """Identity on a module's outputs; its backward runs before the module's
    backward: gather the module's params again."""

    @staticmethod
    def forward(ctx, owner, module, *tensors):  # type: ignore[override]
        ctx.owner = owner
        ctx.module = module
        return tensors if len(tensors) != 1 else tensors[0]

    @staticmethod
    def backward(ctx, *grads):  # type: ignore[override]
        ctx.owner._gather_module(ctx.module, backward=True)
        return (None, None) + grads


class _Zero3Linear(torch.autograd.Function):
    """F.linear that saves the weight *parameter* rather than a view of its
    current storage (as DeepSpeed's LinearFunctionForZeroStage3 does), so a
    stage-3 weight's gathered copy dies when the module releases it and the
    backward reads the copy gathered again for it."""

    @staticmethod
    def forward(ctx, input, weight, bias):  # type: ignore[override]
        ctx.save_for_backward(input, weight, bias)
        return torch.nn.functional.linear(input, weight, bias)

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        input, weight, bias = ctx.saved_tensors
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = grad_out.matmul(weight)
        g2 = grad_out.reshape(-1, grad_out.shape[-1])
        if ctx.needs_input_grad[1]:
            x2 = input.reshape(-1, input.shape[-1])
            if not _hand_in_weight_grad(weight, g2, x2):
                grad_weight = g2.t().mm(x2)
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = g2.sum(0)
        return grad_input, grad_weight, grad_bias


def _zero3_linear_forward(self: torch.nn.Linear, input: torch.Tensor) -> torch.Tensor:
    return _Zero3Linear.apply(input, self.weight, self.bias)


def _hand_in_weight_grad(weight: torch.Tensor, g2: torch.Tensor, x2: torch.Tensor) -> bool:
    """Stage 3 on the host: a Linear weight's gradient ``g2.t() @ x2``
    computed straight into the runtime's gradient buffer and handed in, so
    torch allocates no gradient tensor and nothing is copied (issue 18).
    Only for a weight with exactly one edge into its AccumulateGrad node in
    the graph being run (ZeroTorchEngine._count_grad_edges): this Linear's,
    so autograd has no other gradient to add to it. False: the caller computes it
    as usual (autograd's AccumulateGrad and the grad hook hand it in)."""
    owner = _owner_of(weight)
    if owner is None:
        return False
    e, i = owner
    if (not e._direct_grads or e._uses[i] != 1 or e._handed[i]
            or not e._trainable[i] or e._closed):
        return False
    if not (g2.dtype == x2.dtype == e.compute_dtype):  # autocast, say: as usual
        return False
    pid = e._ids[i]
    buf = e._grad_views.tensor(i, pid, e.zero._grad_buffer_address(pid))
    torch.mm(g2.t(), x2, out=buf)
    e._handed[i] = True
    e._direct[i] = True
    e.zero.grad_ready(pid)
    e.direct_weight_grads += 1
    return True


def _wrap_tensors(fn, owner, module, value):
    """Applies fn to the grad-requiring tensors in value (a tensor or a flat
    tuple/list of them); other structures are returned unchanged."""
    if isinstance(value, torch.Tensor):
        if value.requires_grad:
            return fn.apply(owner, module, value)
        return value
    if isinstance(value, (tuple, list)):
        idx = [i for i, v in enumerate(value)
               if isinstance(v, torch.Tensor) and v.requires_grad]
        if not idx:
            return value
        out = fn.apply(owner, module, *[value[i] for i in idx])
        if len(idx) == 1:
            out = (out,)
        items = list(value)
        for i, o in zip(idx, out):
            items[i] = o
        return type(value)(items) if isinstance(value, tuple) else items
    return value


class _CallableInt(int):
    """An int that can also be called (``engine.gradient_accumulation_steps``
    was an attribute; DeepSpeed's is a method: both spellings work)."""

    def __call__(self) -> int:
        return int(self)


class _ZeroParamDict(OrderedDict):
    """A stage-3 module's ``_parameters``: reading a released param during a
    forward gathers it for the module whose forward is running (DeepSpeed's
    ZeROOrderedDict). Iteration (``named_parameters``) does not gather."""

    def __init__(self, engine: "ZeroTorchEngine", items: Any) -> None:
        super().__init__(items)
        self._engine_ref = weakref.ref(engine)

    def __getitem__(self, key: str) -> Any:
        value = super().__getitem__(key)
        if value is not None:
            engine = self._engine_ref()
            if engine is not None and engine._fwd_stack:
                engine._on_param_use(value)
        return value

    def __reduce__(self):  # a copy of the module is a plain module
        return (OrderedDict, (list(OrderedDict.items(self)),))


if _TorchFunctionMode is not None:
    class _Stage3Guard(_TorchFunctionMode):
        """Active during ``engine(...)`` in stage 3: a released param handed
        to a torch function is gathered first (see _on_param_use)."""

        def __init__(self, engine: "ZeroTorchEngine") -> None:
            super().__init__()
            self.engine = engine

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            engine = self.engine
            # Not while the engine itself moves params (``p.data = ...`` is a
            # torch function too).
            if engine._fwd_stack and not engine._busy:
                for a in args:
                    if type(a) is torch.nn.Parameter:
                        engine._on_param_use(a)
                    elif type(a) in (list, tuple):
                        for b in a:
                            if type(b) is torch.nn.Parameter:
                                engine._on_param_use(b)
                for a in kwargs.values():
                    if type(a) is torch.nn.Parameter:
                        engine._on_param_use(a)
            return func(*args, **kwargs)
else:  # pragma: no cover
    _Stage3Guard = None  # type: ignore[assignment,misc]


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


class _LrSchedule:
    """The runtime's learning-rate schedule (core/optim/lr_schedule.cc, as
    DeepSpeed's runtime/lr_schedules.py) computed from the config, so the lr
    of the *next* optimizer step is known before it runs."""

    def __init__(self, config: Dict[str, Any]) -> None:
        opt = config.get("optimizer") or {}
        self.lr = float((opt.get("params") or {}).get("lr", 1e-3))
        sched = config.get("scheduler")
        self.type = None if not sched else sched.get("type")
        p = (sched or {}).get("params") or {}

        def num(key: str, default: float) -> float:
            v = p.get(key, default)
            return default if v == "auto" else float(v)

        self.warmup_num_steps = int(num("warmup_num_steps", 1000))
        self.warmup_type = p.get("warmup_type", "log")
        self.total_num_steps = int(num("total_num_steps", -1))
        self.warmup_min_ratio = num("warmup_min_ratio", 0.0)
        self.cos_min_ratio = num("cos_min_ratio", 0.0001)
        self.warmup_min_lr = num("warmup_min_lr", 0.0)
        self.warmup_max_lr = (self.lr if p.get("warmup_max_lr") == "auto"
                              else num("warmup_max_lr", 0.001))

    def _gamma(self, it: int, warmup: int) -> float:
        if self.warmup_type == "log":
            return math.log(it + 1) / math.log(warmup)
        return it / warmup

    def lr_at(self, it: int) -> float:
        """LrAt(last_batch_iteration)."""
        warmup = max(2, self.warmup_num_steps)
        if self.type in ("WarmupLR", "WarmupDecayLR"):
            if it < 0:
                return self.warmup_min_lr
            if it < warmup:
                gamma = self._gamma(it, warmup)
            elif self.type == "WarmupLR":
                gamma = 1.0
            else:
                gamma = max(0.0, (self.total_num_steps - it) /
                            max(1.0, float(self.total_num_steps - warmup)))
            return self.warmup_min_lr + (self.warmup_max_lr - self.warmup_min_lr) * gamma
        if self.type == "WarmupCosineLR":
            if it < 0:
                return 0.0
            if it < warmup:
                ratio = (self.warmup_min_ratio + self._gamma(it, warmup) *
                         (1.0 - self.warmup_min_ratio))
            else:
                real_last = it - warmup + 1
                real_total = self.total_num_steps - warmup
                ratio = (1.0 + math.cos(math.pi * real_last / real_total)) / 2.0
                ratio = max(0.0, self.cos_min_ratio + (1.0 - self.cos_min_ratio) * ratio)
            return self.lr * ratio
        return self.lr

    def lr_for_step(self, t: int) -> float:
        """The lr of 0-based optimizer step t (DeepSpeed steps its scheduler
        after each optimizer step)."""
        return self.lr_at(t - 1)


class ZeroOptimizer:
    """``initialize``'s optimizer: a read-only view of the runtime's
    optimizer (it runs inside :meth:`ZeroTorchEngine.step`). ``param_groups``
    holds one group: the trainable params, the lr of the next step and the
    config's hyperparameters; writing into it changes nothing."""

    def __init__(self, engine: "ZeroTorchEngine") -> None:
        self._engine = weakref.proxy(engine)
        opt = engine.zero.config.get("optimizer") or {}
        self.type: str = opt.get("type", "")
        self._hyper = {k: (tuple(v) if isinstance(v, list) else v)
                       for k, v in (opt.get("params") or {}).items()}

    @property
    def param_groups(self) -> List[Dict[str, Any]]:
        e = self._engine
        group = dict(self._hyper)
        group["params"] = [p for p, t in zip(e._params, e._trainable) if t]
        group["lr"] = e.get_lr()[0]
        return [group]

    def get_lr(self) -> List[float]:
        return self._engine.get_lr()

    @property
    def loss_scale(self) -> float:
        return self._engine.loss_scale

    cur_scale = loss_scale

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._engine.zero_grad(set_to_none)

    def step(self, closure: Any = None) -> None:
        raise UnimplementedError(
            "zero.torch optimizer.step(): the runtime's optimizer runs inside "
            "engine.step() at the gradient-accumulation boundary; call that")

    def state_dict(self) -> Dict[str, Any]:
        raise UnimplementedError(
            "zero.torch optimizer.state_dict(): the optimizer states are sharded "
            "in the runtime; use engine.save_checkpoint()")

    def __repr__(self) -> str:
        return f"<zero.torch.ZeroOptimizer {self.type} (runs in engine.step())>"


class ZeroLRScheduler:
    """``initialize``'s lr_scheduler: a view of the runtime's schedule (the
    ``scheduler`` block of the config), stepped by :meth:`ZeroTorchEngine.step`
    after each optimizer step as DeepSpeed's engine does."""

    def __init__(self, engine: "ZeroTorchEngine") -> None:
        self._engine = weakref.proxy(engine)
        self.type: str = engine._lr_schedule.type or ""

    @property
    def last_batch_iteration(self) -> int:
        return self._engine.global_steps - 1

    def get_lr(self) -> List[float]:
        """The lr the next optimizer step uses."""
        return self._engine.get_lr()

    def get_last_lr(self) -> List[float]:
        """As DeepSpeed: the lr the last scheduler step set, which the next
        optimizer step uses."""
        return self._engine.get_lr()

    def step(self, *args: Any, **kwargs: Any) -> None:
        raise UnimplementedError(
            "zero.torch lr_scheduler.step(): the engine steps the schedule after "
            "each optimizer step (inside engine.step()), as DeepSpeed's engine "
            "does with a scheduler from the config; do not step it yourself")

    def state_dict(self) -> Dict[str, Any]:
        return {"last_batch_iteration": self.last_batch_iteration}

    def __repr__(self) -> str:
        return f"<zero.torch.ZeroLRScheduler {self.type}>"


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


#: ``activation_checkpointing`` keys of DeepSpeed's config and their
#: defaults; zero.torch reports the ones set otherwise (see
#: _ActivationCheckpointing).
_AC_DEEPSPEED_KEYS = {
    "partition_activations": False,
    "cpu_checkpointing": False,
    "contiguous_memory_optimization": False,
    "number_checkpoints": None,
    "synchronize_checkpoint_boundary": False,
    "profile": False,
}
#: zero's own key in that section: class names of the modules to checkpoint.
_AC_MODULES_KEY = "zero_checkpoint_modules"

_AC_WHY = {
    "partition_activations": "no model parallelism in zero.torch, so there is "
                             "no model-parallel group to partition the "
                             "checkpoints over",
    "cpu_checkpointing": "zero.torch models run on the CPU, so the checkpoints "
                         "are in host memory already",
    "contiguous_memory_optimization": "checkpoints are torch's own tensors, not "
                                      "copied into one buffer",
    "number_checkpoints": "only sizes the contiguous buffer",
    "synchronize_checkpoint_boundary": "no device streams to synchronize on the CPU",
    "profile": "no checkpoint timers",
}


def _checkpoint_supports_non_reentrant() -> bool:
    import inspect
    import torch.utils.checkpoint as ckpt
    try:
        return "use_reentrant" in inspect.signature(ckpt.checkpoint).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False


class _ActivationCheckpointing:
    """The ``activation_checkpointing`` section of a ds_config, as zero.torch
    applies it. DeepSpeed leaves checkpointing to the model code
    (``deepspeed.checkpointing.checkpoint(fn, *args)``); zero.torch instead
    wraps the model's repeated blocks when the section is present (and not
    ``"enabled": false``):

    * ``zero_checkpoint_modules`` (zero's own key; a list of class names):
      every module whose class name (``type(m).__name__``) is listed, the
      outermost only (a listed module inside another is left alone);
    * otherwise every child of every ``torch.nn.ModuleList`` that holds
      params (a transformer's layers), again the outermost only.

    A wrapped module's ``forward`` runs under torch's non-reentrant
    ``torch.utils.checkpoint.checkpoint`` (``use_reentrant=False``): its
    forward keeps no activations, and its backward runs the forward again
    (stage 3: the recomputation gathers the params again through the same
    module hooks) only while grad is enabled.
    """

    def __init__(self, section: Any) -> None:
        self.enabled = isinstance(section, dict) and section.get("enabled", True) is not False
        section = section if isinstance(section, dict) else {}
        names = section.get(_AC_MODULES_KEY)
        if names is not None and (not isinstance(names, list) or
                                  not all(isinstance(n, str) for n in names)):
            raise InvalidArgumentError(
                f"activation_checkpointing.{_AC_MODULES_KEY}: expected a list of "
                f"module class names, got {names!r}")
        self.module_names: Optional[List[str]] = names
        self.no_effect = [k for k, default in _AC_DEEPSPEED_KEYS.items()
                          if k in section and section[k] not in (default, "auto")
                          and not (default is False and section[k] is None)]

    def select(self, model: torch.nn.Module) -> List[Tuple[str, torch.nn.Module]]:
        """(name, module) of the modules to checkpoint, in registration order."""
        if self.module_names is not None:
            wanted = set(self.module_names)
            candidates = {id(m) for m in model.modules()
                          if type(m).__name__ in wanted}
        else:
            candidates = set()
            for m in model.modules():
                if isinstance(m, torch.nn.ModuleList):
                    candidates.update(id(c) for c in m.children()
                                      if next(c.parameters(), None) is not None)
        out: List[Tuple[str, torch.nn.Module]] = []

        def walk(prefix: str, m: torch.nn.Module) -> None:
            for name, child in m.named_children():
                full = f"{prefix}.{name}" if prefix else name
                if id(child) in candidates:
                    out.append((full, child))  # its descendants stay unwrapped
                else:
                    walk(full, child)

        if id(model) in candidates:
            return [("", model)]
        walk("", model)
        return out

    def warning(self) -> Optional[str]:
        if not self.no_effect:
            return None
        return ("zero.torch: activation_checkpointing: accepted without effect: " +
                "; ".join(f"{k} ({_AC_WHY[k]})" for k in self.no_effect))


def _checkpointed_forward(forward: Any) -> Any:
    """``forward`` run under torch's non-reentrant activation checkpoint
    while grad is enabled."""
    from torch.utils.checkpoint import checkpoint

    @functools.wraps(forward)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return forward(*args, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    wrapper._zero_checkpointed = True  # type: ignore[attr-defined]
    return wrapper


def _wrap_units(model: torch.nn.Module, policy: Any) -> Optional[Set[int]]:
    """Stage 3's gather units (FSDP's auto-wrap policies), as ids of modules;
    None: every module (no policy). ``policy`` is

    - a module class or a tuple/list/set of them: every module of such a
      type is a unit (FSDP's ``ModuleWrapPolicy``, e.g. the transformer
      block class);
    - an int N: bottom-up, a module whose params not yet in a unit number at
      least N elements becomes one (FSDP's ``size_based_auto_wrap_policy``
      with ``min_num_params``);
    - a callable ``(module, name) -> bool``.

    The root is always a unit too: it takes the params no other unit does.
    """
    if policy is None:
        return None
    units: Set[int] = {id(model)}
    if isinstance(policy, bool):
        raise InvalidArgumentError("wrap_policy: expected module classes, an int or a callable")
    if isinstance(policy, int):
        if policy < 1:
            raise InvalidArgumentError(f"wrap_policy: min_num_params must be >= 1, got {policy}")

        # Children before parents (reverse pre-order); a module shared by
        # two parents counts once.
        left: Dict[int, int] = {}
        for m in reversed(list(model.modules())):
            n = sum(p.numel() for p in m.parameters(recurse=False))
            n += sum(left.pop(id(c), 0) for c in m.children())
            if m is not model and n >= policy:
                units.add(id(m))
                n = 0
            left[id(m)] = n
        return units
    if isinstance(policy, type):
        policy = (policy,)
    if isinstance(policy, (tuple, list, set, frozenset)):
        classes = tuple(policy)
        if not classes or not all(isinstance(c, type) and issubclass(c, torch.nn.Module)
                                  for c in classes):
            raise InvalidArgumentError(
                f"wrap_policy: expected torch.nn.Module subclasses, got {policy!r}")
        units.update(id(m) for m in model.modules() if isinstance(m, classes))
        return units
    if callable(policy):
        units.update(id(m) for n, m in model.named_modules() if policy(m, n))
        return units
    raise InvalidArgumentError(
        f"wrap_policy: expected module classes, an int or a callable, got {policy!r}")


class ZeroTorchEngine(torch.nn.Module):
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
    # are plain ints and lists).
    _HOT_ATTRS = frozenset({"_busy", "_handed", "_fwd_stack", "_in_backward",
                            "_plain_backward"})

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ZeroTorchEngine._HOT_ATTRS:
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def _replace_meta_params(self, model: torch.nn.Module) -> None:
        """Meta params cannot take CPU storage (``p.data = ...`` refuses the
        device change), so each becomes a new CPU Parameter (a one-element
        placeholder of its shape until set up), in every module that holds
        it (tied params stay tied). ``_meta_new``: id(new) -> its spec."""
        specs = self._meta_specs
        new: Dict[int, torch.nn.Parameter] = {}
        for m in model.modules():
            for key, p in list(m._parameters.items()):
                if p is None or id(p) not in specs:
                    continue
                q = new.get(id(p))
                if q is None:
                    q = torch.nn.Parameter(_placeholder(p.shape, self.compute_dtype,
                                                        self._bridge.torch_device),
                                           requires_grad=p.requires_grad)
                    new[id(p)] = q
                    self._meta_new[id(q)] = specs[id(p)]
                self._replaced.append((m, key, p))
                m._parameters[key] = q
        self._meta_map = new

    def _drop_originals(self) -> None:
        """Once set up: the module's own tensors, kept only to give them
        back if the setup fails, are freed (a full copy of the model)."""
        self._orig_data = []

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
        self._lr_schedule = _LrSchedule(self.zero.config)
        self.overlap_grad_hooks = overlap_grad_hooks
        self.global_steps = 0
        self.micro_steps = 0
        self.last_step_info: Optional[StepInfo] = None
        self._step_applied = False
        self._inside_no_sync = False
        self._fwd_stack: List[torch.nn.Module] = []
        self._busy = 0  # > 0 while hooks move params (the guard stands back)

        for bname, b in model.named_buffers():
            if b.device.type == "meta":
                raise InvalidArgumentError(
                    f"zero.torch.initialize: buffer {bname!r} is on the meta "
                    "device; zero.torch infers initial values for params only. "
                    "Create buffers with real values (outside zero.torch.Init, "
                    "or with device=\"cpu\") before initialize")
        # Meta params: an init spec (or the user's init_fn) each, inferred
        # from the owning module before anything changes.
        specs: Dict[int, Any] = {}
        padding_rows: List[Tuple[torch.nn.Parameter, int]] = []
        for mname, m in model.named_modules():
            for key, p in m._parameters.items():
                if p is None or not p.is_meta or id(p) in specs:
                    continue
                full = f"{mname}.{key}" if mname else key
                if self._init_fn is not None:
                    specs[id(p)] = self._init_fn
                else:
                    specs[id(p)] = _meta_init_spec(m, key, p, full,
                                                   self._init_seed)
                    pad = getattr(m, "padding_idx", None)
                    if isinstance(m, torch.nn.Embedding) and pad is not None:
                        padding_rows.append((p, int(pad)))
        if specs:
            self._meta_specs = specs
            self._replace_meta_params(model)
            padding_rows = [(self._meta_map[id(p)], r) for p, r in padding_rows]

        # Every rank starts from rank 0's values, as DeepSpeed's engine
        # broadcasts them (ranks seeded differently would otherwise train
        # different models and average their gradients). Meta params are
        # the same everywhere by construction (a spec is rank-independent).
        named = list(model.named_parameters())
        _broadcast_from_rank0([p for _, p in named if id(p) not in self._meta_new]
                              + list(model.buffers()), self.zero.comm)

        self._names: List[str] = []
        self._ids: List[int] = []
        self._index: Dict[int, int] = {}  # id(param) -> index in _params
        self._trainable: List[bool] = []
        for name, p in named:
            trainable = p.requires_grad and (
                trainable_set is None or id(p) in trainable_set)
            spec = self._meta_new.get(id(p))
            if spec is not None:
                pid = self.zero.register_param(name, shape=tuple(p.shape),
                                               trainable=trainable, init=spec)
            else:
                init = p.detach().to(torch.float32).cpu().contiguous().numpy()
                pid = self.zero.register_param(name, init, trainable=trainable)
            self._index[id(p)] = len(self._params)
            self._names.append(name)
            self._params.append(p)
            self._orig_data.append(p.data)
            self._ids.append(pid)
            self._trainable.append(trainable)
        self.zero.finalize()
        # nn.Embedding(padding_idx=...): its row is zero (no spec says
        # that), written as a range: no rank holds the whole param for it.
        for p, row in padding_rows:
            pid = self._ids[self._index[id(p)]]
            width = int(p.numel()) // int(p.shape[0])
            self.zero.write_master_range(pid, row * width,
                                         np.zeros(width, dtype=np.float32))
        if self._pretrained is not None:
            self.zero.load_safetensors(os.fspath(self._pretrained))
        for p, t in zip(self._params, self._trainable):
            if not t:
                p.requires_grad_(False)

        self._gather_count = [0] * len(self._params)
        self._handed = [False] * len(self._params)
        # Whether engine.backward is running, and whether a grad hook ran
        # outside it since the last step (a plain loss.backward()).
        self._in_backward = False
        self._plain_backward = False
        # Stage 3 on the host: Linear weights whose gradient goes straight
        # into the runtime's buffer (_hand_in_weight_grad). _uses: per param,
        # the graph edges into its AccumulateGrad node in the backward being
        # run; _direct: handed in that way in this backward.
        self._direct_grads = (self.stage == 3 and not self._upcast
                              and type(self._bridge) is _torch_bridge.Bridge
                              and overlap_grad_hooks)
        self._acc_index: Dict[int, int] = {}  # id(AccumulateGrad node) -> index
        self._no_uses = [0] * len(self._params)
        self._uses = self._no_uses
        self._direct = [False] * len(self._params)
        #: Weight gradients handed in without a torch gradient tensor.
        self.direct_weight_grads = 0
        self._module_params: Dict[int, List[int]] = {}
        # Stages 0-2 with fp16: the runtime's fp16 working copies, whose fp32
        # copies the params hold.
        self._views: List[Optional[torch.Tensor]] = [None] * len(self._params)
        # Stages 0-2: the resident gathered buffers (refreshed from after
        # each optimizer step when the bridge copies instead of aliasing).
        self._bufs: List[Any] = [None] * len(self._params)
        # Host memory: tensors over the runtime's gradient buffers and (stage
        # 3) gathered copies, kept per param and reused while the address
        # repeats (_torch_bridge.ViewCache); None on a device bridge.
        host = type(self._bridge) is _torch_bridge.Bridge
        n = len(self._params)
        self._grad_views = _torch_bridge.ViewCache(self.zero, self._bridge, n) if host else None
        self._gather_views = _torch_bridge.ViewCache(self.zero, self._bridge, n) if host else None
        # Stage 3 on the host: torch-owned buffers for the gathered copies,
        # reused while no tensor over them outlives a release.
        self._gather_pool = (_torch_bridge.GatherPool(n, self.compute_dtype)
                             if host and self.stage == 3 else None)
        # ... and the runtime gathers straight into them (gather_into, C ABI
        # 1.7) unless torch computes in another dtype (fp16 on the CPU).
        self._gather_into = self._gather_pool is not None and not self._upcast
        self._runtime_dtype = int(self.zero.dtype)
        # Stage 3: each param's placeholder, made once (a release is then
        # one ``p.data =``, no allocation).
        self._placeholders: List[Optional[torch.Tensor]] = [None] * n

        if self.stage < 3:
            for i, p in enumerate(self._params):
                view = self.zero.gather(self._ids[i], writable=True)
                self._gather_count[i] = 1
                self._bufs[i] = view
                t = self._bridge.tensor(view, self.zero.dtype)
                if self._upcast:
                    self._views[i] = t
                    p.data = t.to(torch.float32)
                else:
                    p.data = t
        else:
            for i, p in enumerate(self._params):
                self._placeholders[i] = _placeholder(p.shape, self.compute_dtype,
                                                     self._bridge.torch_device)
                p.data = self._placeholders[i]
            self._install_stage3_hooks()
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
        self._in_backward = True
        try:
            scaled.backward(retain_graph=retain_graph)
        except BaseException as e:
            self._abort_peers("backward", e)
            raise
        finally:
            self._in_backward = False
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
            # Modules whose inputs needed no gradient never ran _PostBackward.
            for i in range(len(self._params)):
                while self._gather_count[i] > 0:
                    self._release_param(i)
        self.micro_steps += 1

    def _finish_plain_backward(self) -> None:
        """At step(), after a ``loss.backward()`` that did not come through
        engine.backward (the grad hooks saw it): the same completion, or an
        error where its gradients cannot be right. Without it, stage 3 kept
        the first module's params gathered over the update, and the next
        forward computed with the pre-step values (a silent wrong result)."""
        self._plain_backward = False
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
        if self._plain_backward:
            self._finish_plain_backward()
        # The optimizer overwrites the working copy torch's queued forward and
        # backward may still read (a GPU): those finish first.
        self._bridge.torch_done()
        info = self.zero.step()
        self._handed = [False] * len(self._params)
        self.last_step_info = info
        self.global_steps = info.global_step
        if info.boundary:
            self._step_applied = not info.skipped
            if not info.skipped:
                self._refresh_upcast()
        return info

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
        config's ``scheduler`` and the steps taken, as the runtime computes it."""
        return [self._lr_schedule.lr_for_step(self.global_steps)]

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

    def full_state_dict(self) -> Dict[str, torch.Tensor]:
        """COLLECTIVE (every rank calls it). Every param's full fp32 master weights,
        by name, as new tensors."""
        self._check_open()
        return {name: torch.from_numpy(self.zero.read_master(pid))
                for name, pid in zip(self._names, self._ids)}

    def working_value(self, param: torch.nn.Parameter) -> torch.Tensor:
        """COLLECTIVE in stage 3. A new tensor holding ``param``'s full working
        copy (the runtime's dtype: fp16/bf16/fp32)."""
        self._check_open()
        i = self._index[id(param)]
        if self._gather_into:
            return self._gather_new(i)
        view = self.zero.gather(self._ids[i], writable=True)  # copied at once
        try:
            out = self._bridge.tensor(view, self.zero.dtype).clone()
            self._bridge.torch_done()
            return out
        finally:
            self.zero.release(self._ids[i])

    def _gather_new(self, i: int) -> torch.Tensor:
        """Stage 3 on the host: param i's working copy gathered into a new
        tensor of the runtime's dtype (gather_into; a plain gather is refused
        while a module holds the param in a GatherPool buffer)."""
        out = torch.empty(tuple(self._params[i].shape), dtype=self.dtype)
        self.zero._gather_into_address(self._ids[i], self._runtime_dtype, out.data_ptr(),
                                       out.numel() * out.element_size())
        self.zero.release(self._ids[i])
        return out

    def save_16bit_model(self, save_dir: str,
                         save_filename: str = "pytorch_model.bin",
                         exclude_frozen_parameters: bool = False) -> bool:
        """COLLECTIVE. As DeepSpeed: rank 0 writes the module's state dict in
        the working dtype (fp16/bf16; fp32 if neither) to
        ``save_dir/save_filename`` with ``torch.save``. Stage 3 gathers every
        param, and only when ``zero_optimization.
        stage3_gather_16bit_weights_on_model_save`` is true; otherwise, as
        DeepSpeed, nothing is saved, a warning says why and it returns False."""
        self._check_open()
        path = os.path.join(os.fspath(save_dir), save_filename)
        if self.stage == 3 and not self.zero_gather_16bit_weights_on_model_save():
            warnings.warn(
                f"save_16bit_model: did not save the model {path} because "
                "`stage3_gather_16bit_weights_on_model_save` is False")
            return False
        state = self.module.state_dict()  # gathered by the state-dict hooks
        frozen = {n for n, t in zip(self._names, self._trainable) if not t}
        out = OrderedDict()
        for k, v in state.items():
            if exclude_frozen_parameters and k in frozen:
                continue
            out[k] = v.detach().clone() if self.stage < 3 and not self._upcast else v
        if self.global_rank == 0:
            os.makedirs(save_dir, exist_ok=True)
            torch.save(out, path + ".tmp")
            os.replace(path + ".tmp", path)
        self.zero.comm.barrier()
        return True

    def save_checkpoint(self, save_dir: str, tag: Optional[str] = None,
                        client_state: Optional[dict] = None,
                        save_latest: bool = True,
                        exclude_frozen_parameters: bool = False) -> bool:
        """COLLECTIVE. Saves the training state to ``save_dir/tag`` (default
        tag ``global_step{N}``, as DeepSpeed) and points ``save_dir/latest``
        at it (:meth:`zero.Engine.save`). Call it right after the
        :meth:`step` that ends an accumulation. ``client_state`` (any
        picklable dict) is written by rank 0 next to the runtime's files as
        ``client_state.pt``; the directory must be shared by all ranks.
        Returns True, as DeepSpeed does."""
        self._check_open()
        if not save_latest:
            raise UnimplementedError(
                "save_checkpoint(save_latest=False): the runtime always points "
                "DIR/latest at the tag it saved")
        if exclude_frozen_parameters:
            raise UnimplementedError(
                "save_checkpoint(exclude_frozen_parameters=True): the runtime "
                "saves every param")
        if tag is None:
            tag = f"global_step{self.global_steps}"
        tag = str(tag)
        self.zero.save(save_dir, tag)
        if client_state and self.global_rank == 0:
            path = os.path.join(os.fspath(save_dir), tag, CLIENT_STATE_FILE)
            torch.save(dict(client_state), path + ".tmp")
            os.replace(path + ".tmp", path)
        self.zero.comm.barrier()  # every rank returns once the file exists
        return True
    def load_checkpoint(self, load_dir: str, tag: Optional[str] = None,
                        load_module_strict: bool = True,
                        load_optimizer_states: bool = True,
                        load_lr_scheduler_states: bool = True,
                        load_module_only: bool = False,
                        custom_load_fn: Any = None
                        ) -> Tuple[Optional[str], Optional[dict]]:
        """COLLECTIVE. Restores ``load_dir/tag`` (None: the tag named by
        ``load_dir/latest``), saved at any world size or stage, with steps and
        loss scale (:meth:`zero.Engine.load`). Call it after
        :func:`initialize` or right after the :meth:`step` that ends an
        accumulation. Returns ``(load_path, client_state)`` as DeepSpeed does:
        ``client_state`` is what :meth:`save_checkpoint` was given (``{}`` if
        nothing); ``(None, None)`` when ``tag`` is None and there is no
        ``latest`` file.

        ``load_module_only`` (or ``load_optimizer_states=False``) starts the
        optimizer moments at zero; ``load_module_strict=False`` lets params
        the checkpoint lacks keep their values. The learning-rate schedule
        comes from the config and the restored step, so
        ``load_lr_scheduler_states`` changes nothing.

        Stages 0-2: the module's params keep aliasing the runtime's working
        copy, which now holds the loaded values. Stage 3: params are gathered
        afresh at their next use. A corrupt checkpoint raises
        :class:`zero.DataLossError` naming the file; if the engine's state was
        partly overwritten it is unusable afterwards (make a new one).
        """
        self._check_open()
        if custom_load_fn is not None:
            raise UnimplementedError("load_checkpoint(custom_load_fn=...)")
        load_dir = os.fspath(load_dir)
        if tag is None:
            latest = os.path.join(load_dir, "latest")
            if not os.path.isfile(latest):
                warnings.warn(f"load_checkpoint: no checkpoint tag given and "
                              f"{latest} does not exist; nothing loaded")
                return None, None
            with open(latest, "r", encoding="utf-8") as f:
                tag = f.read().strip()
        tag = str(tag)
        # The runtime loads only while no param is gathered; in stages 0-2
        # params stay gathered for the engine's life, so release them for the
        # load and gather them again (the resident copy does not move).
        held = [i for i in range(len(self._params)) if self._gather_count[i] > 0]
        for i in held:
            self.zero.release(self._ids[i])
        try:
            self.zero.load(load_dir, tag,
                           load_optimizer_states=(load_optimizer_states and
                                                  not load_module_only),
                           allow_missing=not load_module_strict)
        except BaseException:
            for i in held:  # best effort: a broken engine refuses gathers
                try:
                    self._regather_resident(i)
                except ZeroError:
                    self._gather_count[i] = 0
            raise
        for i in held:
            self._regather_resident(i)
        stats = self.zero.stats()
        self.global_steps = int(stats["global_step"])
        self.micro_steps = self.global_steps * self.gradient_accumulation_steps
        self._handed = [False] * len(self._params)
        load_path = os.path.join(load_dir, tag)
        client_state: dict = {}
        client_file = os.path.join(load_path, CLIENT_STATE_FILE)
        if os.path.isfile(client_file):
            client_state = torch.load(client_file, map_location="cpu",
                                      weights_only=False)
        return load_path, client_state

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

    def _install_activation_checkpointing(self) -> None:
        """The ``activation_checkpointing`` section: wraps the selected
        modules' forward (see _ActivationCheckpointing). After the stage-3
        hooks, so a patched Linear forward is the one wrapped."""
        section = self._ac_section
        if section is None:
            return
        ac = _ActivationCheckpointing(section)
        if not ac.enabled:
            return
        msg = ac.warning()
        if msg and self.zero.rank == 0:
            warnings.warn(msg, stacklevel=5)
        if not _checkpoint_supports_non_reentrant():  # pragma: no cover
            raise UnimplementedError(
                "activation_checkpointing: this torch has no non-reentrant "
                "torch.utils.checkpoint (use_reentrant=False, torch >= 1.11), "
                "which zero.torch needs; remove the section or update torch")
        for name, module in ac.select(self.module):
            own = vars(module).get("forward")
            module.forward = _checkpointed_forward(module.forward)
            self._checkpointed.append((module, own))
            self.checkpointed_modules.append(name)

    def _remove_hooks(self) -> None:
        for m, own in reversed(self._checkpointed):
            if own is None:
                del m.forward
            else:
                m.forward = own
        self._checkpointed.clear()
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self._grad_accs.clear()
        for m in self._patched_linears:
            del m.forward  # back to torch.nn.Linear.forward
        self._patched_linears.clear()
        for m, cls in self._patched_dicts:
            m.__dict__["_parameters"] = cls(dict.items(m.__dict__["_parameters"]))
        self._patched_dicts.clear()

    def _refresh_upcast(self) -> None:
        """Stages 0-2, after the runtime changed the working values: params
        that do not alias them take them (fp16 upcast copies; a bridge that
        copies, the stand-in). Nothing to do when params alias the runtime."""
        if self.stage == 3 or (self._bridge.aliases and not self._upcast):
            return
        with torch.no_grad():
            for i, p in enumerate(self._params):
                if not self._bridge.aliases and self._bufs[i] is not None:
                    t = self._bridge.tensor(self._bufs[i], self.zero.dtype)
                    if self._upcast:
                        self._views[i] = t
                    p.data.copy_(t)
                elif self._views[i] is not None:
                    p.data.copy_(self._views[i])

    def _regather_resident(self, i: int) -> None:
        """Stages 0-2: gathers param i again after a release; its storage is
        the runtime's resident copy, which keeps its address."""
        view = self.zero.gather(self._ids[i], writable=True)
        self._bufs[i] = view
        p = self._params[i]
        if self._upcast or not self._bridge.aliases:
            t = self._bridge.tensor(view, self.zero.dtype)
            if self._upcast:
                self._views[i] = t
            with torch.no_grad():
                p.data.copy_(t)
        elif p.data.data_ptr() != self._bridge.address(view):  # not expected; stay correct
            p.data = self._bridge.tensor(view, self.zero.dtype)

    def _write_param(self, i: int, values: np.ndarray) -> None:
        """Sets param i to ``values`` (full fp32, the same on every rank)
        wherever the runtime holds it: the fp32 master and the working copies
        (zero.Engine.write_master). Stages 0-2 release the resident gather
        for the write and take it again (same address)."""
        resident = self.stage < 3 and self._gather_count[i] > 0
        if resident:
            self.zero.release(self._ids[i])
        try:
            self.zero.write_master(self._ids[i], values)
        finally:
            if resident:
                self._regather_resident(i)

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

    def _hand_in(self, i: int) -> None:
        """Copies param i's gradient (if any) into the runtime and frees it."""
        p = self._params[i]
        pid = self._ids[i]
        grad = p.grad
        if self._grad_views is not None:  # host: the cached tensor over the buffer
            t = self._grad_views.tensor(i, pid, self.zero._grad_buffer_address(pid))
            if grad is not None:
                with torch.no_grad():
                    t.copy_(grad)
                p.grad = None
            self.zero.grad_ready(pid)
            self._handed[i] = True
            return
        buf = self.zero.grad_buffer(pid)
        if grad is not None:
            self._bridge.write(buf, self.zero.dtype, grad)
            p.grad = None
            self._bridge.torch_done()  # the copy lands before the runtime reads it
        self.zero.grad_ready(pid)
        self._handed[i] = True

    def _count_grad_edges(self, root: Any) -> None:
        """_uses[i]: the edges into param i's AccumulateGrad node in the
        graph under ``root`` (how many gradients autograd will sum for it),
        by one walk over the graph's nodes before it runs."""
        uses = [0] * len(self._params)
        self._uses = uses
        if root is None:
            return
        acc_index = self._acc_index
        # The Python objects of autograd's C++ nodes live only while
        # referenced (an id can come back for another node): the walk keeps
        # every one it met. The AccumulateGrad ones are kept in _grad_accs.
        seen = {id(root): root}
        stack = [root]
        while stack:
            for nxt, _ in stack.pop().next_functions:
                if nxt is None:
                    continue
                j = acc_index.get(id(nxt))
                if j is not None:
                    uses[j] += 1
                elif id(nxt) not in seen:
                    seen[id(nxt)] = nxt
                    stack.append(nxt)

    def _install_grad_hooks(self) -> None:
        for i, p in enumerate(self._params):
            if not self._trainable[i]:
                continue
            # The AccumulateGrad node of p (kept alive so it is reused).
            acc = p.expand_as(p).grad_fn.next_functions[0][0]

            def hook(*_unused, i=i):
                if not self._in_backward:
                    self._plain_backward = True  # loss.backward(): see step()
                if self._params[i].grad is not None:
                    if not self._handed[i]:
                        self._hand_in(i)
                    elif self._direct[i]:
                        raise FailedPreconditionError(
                            f"zero.torch: param {self._names[i]!r} got a gradient "
                            "from a use outside engine(...) after its Linear's "
                            "gradient was handed to the runtime; use it inside "
                            "the forward (or inside zero.torch.GatheredParameters, "
                            "which the next backward accounts for)")

            self._hooks.append(acc.register_hook(hook))
            self._grad_accs.append(acc)  # kept alive: id(acc) stays its own
            self._acc_index[id(acc)] = i

    def _install_stage3_hooks(self) -> None:
        # Without a wrap policy every module is a unit and gets the hooks
        # (gathering its own params): the stack of running forwards tells
        # which module a param used outside its owner belongs to. With one,
        # only the units do (the root always is one), each gathering the
        # params of its subtree that no nested unit takes.
        units = _wrap_units(self.module, self._wrap_policy)
        #: Names of the modules that gather for their subtree (stage 3).
        self.wrapped_modules = [n for n, m in self.module.named_modules()
                                if units is None or id(m) in units]

        # Pre-order, each module once (as modules()), with the unit it is in.
        stack = [(self.module, self.module)]
        seen: Set[int] = set()
        while stack:
            module, unit = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            if units is None or id(module) in units:
                unit = module
                self._module_params.setdefault(id(module), [])
            idx = [self._index[id(p)] for p in module.parameters(recurse=False)
                   if id(p) in self._index]
            self._module_params[id(unit)].extend(idx)
            if idx:
                # dict.items, not .items(): torch 2.11 made _parameters a
                # plain dict, and OrderedDict.items rejects one.
                cls = type(module._parameters)
                module.__dict__["_parameters"] = _ZeroParamDict(
                    self, dict.items(module._parameters))
                self._patched_dicts.append((module, cls))
            if type(module) is torch.nn.Linear and "forward" not in vars(module):
                module.forward = types.MethodType(_zero3_linear_forward, module)
                self._patched_linears.append(module)
            if unit is module:
                self._hooks.append(module.register_forward_pre_hook(self._pre_forward))
                self._hooks.append(module.register_forward_hook(self._post_forward))
            stack.extend((c, unit) for c in reversed(list(module.children())))

    def _install_state_dict_hooks(self) -> None:
        """``module.state_dict()`` holds the runtime's working values (stage
        3: gathered, so COLLECTIVE), never placeholders (or fp32 copies)."""
        owned = {id(m): [(n, p) for n, p in m._parameters.items()
                         if p is not None and id(p) in self._index]
                 for m in self.module.modules()}

        def hook(module, state_dict, prefix, local_metadata):
            if self._closed:
                return None
            for name, p in owned.get(id(module), ()):
                key = prefix + name
                if key in state_dict:
                    state_dict[key] = self.working_value(p)
            return None

        for m in self.module.modules():
            if owned.get(id(m)):
                self._hooks.append(m._register_state_dict_hook(hook))

    def _pre_forward(self, module: torch.nn.Module, inputs: Tuple[Any, ...]):
        self._busy += 1
        try:
            self._fwd_stack.append(module)
            self._gather_module(module)
            if torch.is_grad_enabled() and self._module_params[id(module)]:
                return _wrap_tensors(_PostBackward, self, module, inputs)
            return None
        finally:
            self._busy -= 1

    def _post_forward(self, module: torch.nn.Module, inputs: Any, output: Any):
        self._busy += 1
        try:
            if self._fwd_stack and self._fwd_stack[-1] is module:
                self._fwd_stack.pop()
            self._release_module(module)
            if torch.is_grad_enabled() and self._module_params[id(module)]:
                return _wrap_tensors(_PreBackward, self, module, output)
            return None
        finally:
            self._busy -= 1

    def _on_param_use(self, p: torch.Tensor) -> None:
        """Stage 3, during a forward: ``p`` is read by the module whose
        forward is running. A param that module does not gather yet becomes
        one of its (external) params: gathered now and, from now on, with its
        own in forward and backward (DeepSpeed's register_external_parameter)."""
        i = self._index.get(id(p))
        if i is None or self._busy or self._params[i] is not p or not self._fwd_stack:
            return
        module = self._fwd_stack[-1]
        idx = self._module_params.setdefault(id(module), [])
        if i in idx:
            return
        idx.append(i)
        self._busy += 1
        try:
            self._gather_param(i)
        finally:
            self._busy -= 1

    def _gather_param(self, i: int) -> None:
        if self._gather_into:  # host: the runtime writes into the pool's buffer
            pid = self._ids[i]
            if self._gather_count[i] == 0:
                t, address, nbytes = self._gather_pool.take(i, tuple(self._params[i].shape))
                try:
                    self.zero._gather_into_address(pid, self._runtime_dtype, address, nbytes)
                except BaseException:
                    self._gather_pool.give_back(i)
                    raise
                self._gather_count[i] = 1
                self._params[i].data = t
            else:
                # Nested: a gather of the runtime's count, into the buffer
                # it already wrote (nothing is copied).
                address, nbytes = self._gather_pool.held(i)
                self.zero._gather_into_address(pid, self._runtime_dtype, address, nbytes)
                self._gather_count[i] += 1
            return
        if self._gather_views is not None:  # host: no view object per gather
            pid = self._ids[i]
            address = self.zero._gather_address(pid)
            self._gather_count[i] += 1
            if self._gather_count[i] == 1:
                # A torch-owned copy: autograd may keep views of it (its
                # buffer is reused only once none does, see GatherPool).
                self._params[i].data = self._gather_pool.copy(
                    i, self._gather_views.tensor(i, pid, address))
            return
        view = self.zero.gather(self._ids[i], writable=True)
        self._gather_count[i] += 1
        if self._gather_count[i] == 1:
            # A torch-owned copy: autograd may keep views of it.
            self._params[i].data = self._bridge.tensor(view, self.zero.dtype).to(
                self.compute_dtype, copy=True)
            self._bridge.torch_done()  # copied before the buffer is released

    def _gather_module(self, module: torch.nn.Module, backward: bool = False) -> None:
        for i in self._module_params.get(id(module), ()):
            self._gather_param(i)

    def _release_module(self, module: torch.nn.Module, backward: bool = False) -> None:
        for i in self._module_params.get(id(module), ()):
            if self._gather_count[i] > 0:
                self._release_param(i)

    def _release_param(self, i: int) -> None:
        self._gather_count[i] -= 1
        self.zero.release(self._ids[i])
        if self._gather_count[i] == 0:
            p = self._params[i]
            self._busy += 1
            try:
                p.data = self._placeholders[i]
            finally:
                self._busy -= 1
            if self._gather_pool is not None:
                self._gather_pool.give_back(i)


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


_NORM_TYPES = (torch.nn.LayerNorm, torch.nn.GroupNorm,
               torch.nn.modules.batchnorm._NormBase)
_FAN_IN_TYPES = (torch.nn.Linear, torch.nn.modules.conv._ConvNd)


def _meta_init_spec(m: torch.nn.Module, key: str, p: torch.Tensor,
                    full: str, seed: int) -> Any:
    """The zero.InitSpec torch's own reset_parameters would draw from for
    param ``key`` of module ``m`` (a meta param named ``full``):

    * nn.Linear, nn.Conv*d, nn.ConvTranspose*d: weight kaiming_uniform
      (a = sqrt(5)), bias U(+-1/sqrt(fan_in)), fan_in from the weight's shape
      as torch computes it (Linear: in_features; Conv: in_channels/groups *
      prod(kernel_size));
    * nn.Embedding: weight normal(0, 1) (padding_idx's row is zeroed after
      finalize);
    * nn.LayerNorm, nn.GroupNorm, nn.BatchNorm*: weight ones, bias zeros.

    Anything else raises naming the param and module type (pass init_fn)."""
    from .engine import InitSpec
    if isinstance(m, _FAN_IN_TYPES):
        w = m._parameters.get("weight")
        if key == "weight":
            return InitSpec.kaiming_uniform(a=math.sqrt(5), seed=seed)
        if key == "bias" and w is not None and w.dim() >= 2:
            fan_in = int(w.shape[1]) * int(np.prod(w.shape[2:], dtype=np.int64))
            return InitSpec.fan_in_uniform(fan_in, seed=seed)
    elif isinstance(m, torch.nn.Embedding) and key == "weight":
        return InitSpec.normal(0.0, 1.0, seed=seed)
    elif isinstance(m, _NORM_TYPES):
        if key == "weight":
            return InitSpec.ones()
        if key == "bias":
            return InitSpec.zeros()
    raise InvalidArgumentError(
        f"zero.torch.initialize: param {full!r} (shape {tuple(p.shape)}) of "
        f"module type {type(m).__module__}.{type(m).__qualname__} is on the "
        "meta device and zero.torch does not know that module's default "
        "initialization; pass init_fn=fn(name, offset, count) -> values, or "
        "build that module with real values")


#: Factory functions that zero.torch.Init sends to the meta device.
_FACTORIES = {
    torch.empty, torch.zeros, torch.ones, torch.full, torch.rand, torch.randn,
    torch.randint, torch.empty_strided, torch.arange, torch.eye,
    torch.linspace, torch.tensor,
}


class Init:
    """Builds a model without memory for its params (as
    ``deepspeed.zero.Init``): within the context, torch factory functions
    (``torch.empty``, ``zeros``, ``randn``, ...) called without a ``device``
    make ``meta`` tensors, so ``torch.nn.Linear(...)`` and friends get meta
    params and their ``reset_parameters`` does nothing. ``initialize`` then
    registers each meta param with an init spec inferred from its module
    (see ``initialize``'s ``init_fn``); each rank computes only the
    elements it holds. Buffers made inside the context are meta too and are
    refused by ``initialize``: make them with ``device="cpu"``, or outside.
    (``torch.device("meta")`` as a context, in torch >= 2.0, does the same.)
    """

    def __init__(self, enabled: bool = True) -> None:
        if _TorchFunctionMode is None:
            raise UnimplementedError(
                "zero.torch.Init needs torch.overrides.TorchFunctionMode "
                "(torch >= 1.13); build modules with device=\"meta\" instead")
        self.enabled = enabled
        self._mode: Any = None

    def __enter__(self) -> "Init":
        if self.enabled:
            self._mode = _MetaMode()
            self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(*exc)


if _TorchFunctionMode is not None:
    class _MetaMode(_TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func in _FACTORIES and kwargs.get("device") is None:
                kwargs["device"] = "meta"
            return func(*args, **kwargs)


class GatheredParameters:
    """As ``deepspeed.zero.GatheredParameters``: within the context the
    given params hold their full working values (stage 3: gathered on entry,
    COLLECTIVE, every rank in the same order; released on exit). Stages 0-2
    params always hold them, so nothing happens.

    ``modifier_rank``: params may be written inside the context on that
    rank; on exit (COLLECTIVE) its values are broadcast and every param whose
    values changed is set in the runtime — fp32 master weights and working
    copies (zero.Engine.write_master) — so the change survives the next
    optimizer step. ``None``: read only; writes are not kept.""" 

    def __init__(self, params: Any, modifier_rank: Optional[int] = None,
                 fwd_module: Any = None, enabled: bool = True) -> None:
        if isinstance(params, torch.Tensor):
            params = [params]
        self.params = [p for p in (params or []) if p is not None]
        self.modifier_rank = modifier_rank
        self.enabled = enabled
        self._held: List[Tuple[ZeroTorchEngine, int]] = []

    def __enter__(self) -> None:
        if not self.enabled:
            return None
        owned = [o for o in (_owner_of(p) for p in self.params) if o is not None]
        self._owned = owned
        for e, i in owned:
            if e.stage == 3:
                e._gather_param(i)
                self._held.append((e, i))
        # What each param held on entry, to tell which ones were written.
        self._before = ([_full_values(e, i) for e, i in owned]
                        if self.modifier_rank is not None else [])
        return None

    def __exit__(self, *exc: Any) -> None:
        writes: List[Tuple[ZeroTorchEngine, int, np.ndarray]] = []
        if self.modifier_rank is not None and exc[0] is None:
            for (e, i), before in zip(self._owned, self._before):
                values = _full_values(e, i)
                if e.zero.comm.size > 1:
                    with _host_comm(e.zero.comm) as host_comm:
                        host_comm.broadcast(values, root=self.modifier_rank)
                # The same on every rank: values and `before` agree everywhere.
                if not np.array_equal(values, before):
                    writes.append((e, i, values))
        held, self._held = self._held, []
        for e, i in reversed(held):
            if not e._closed and e._gather_count[i] > 0:
                e._release_param(i)
        for e, i, values in writes:
            e._write_param(i, values)
            e._refresh_upcast()


def _full_values(e: "ZeroTorchEngine", i: int) -> np.ndarray:
    """Param i's full values as the module sees them (gathered at stage 3),
    as a new contiguous fp32 array."""
    return e._params[i].data.detach().to(torch.float32).cpu().contiguous().numpy().copy()


def _guard_clip(orig: Any, what: str) -> Any:
    """Wraps torch.nn.utils.clip_grad_* so that params zero.torch manages
    are refused: their gradients live in the runtime (handed over during
    backward), so torch would see none and clip nothing (and return 0)."""
    if getattr(orig, "_zero_guard", False):
        return orig

    @functools.wraps(orig)
    def wrapper(parameters, *args, **kwargs):
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        else:
            parameters = list(parameters)
        for p in parameters:
            owner = _owner_of(p)
            if owner is not None:
                e, i = owner
                raise FailedPreconditionError(
                    f"torch.nn.utils.{what}: param {e._names[i]!r} is managed by "
                    "zero.torch; its gradient lives in the runtime (handed over "
                    "during engine.backward), so torch sees none and would "
                    "clip nothing. Set \"gradient_clipping\": MAX_NORM in the "
                    "ds_config: the runtime clips by the global norm over all "
                    "ranks in engine.step() (engine.get_global_grad_norm() "
                    "reports the norm)")
        return orig(parameters, *args, **kwargs)

    wrapper._zero_guard = True  # type: ignore[attr-defined]
    return wrapper


def _install_clip_guards() -> None:
    import torch.nn.utils as nn_utils
    import torch.nn.utils.clip_grad as clip_mod
    for what in ("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_"):
        for mod in (nn_utils, clip_mod):
            orig = getattr(mod, what, None)
            if orig is not None:
                setattr(mod, what, _guard_clip(orig, what))


_install_clip_guards()


def _dataloader(engine: ZeroTorchEngine, training_data: Any,
                collate_fn: Any) -> Any:
    """As DeepSpeed's: micro batches of this rank's share (a
    DistributedSampler over the data-parallel ranks)."""
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    sampler = DistributedSampler(training_data, num_replicas=engine.world_size,
                                 rank=engine.global_rank)
    return DataLoader(training_data,
                      batch_size=engine.train_micro_batch_size_per_gpu(),
                      sampler=sampler, collate_fn=collate_fn)


def initialize(args: Any = None, model: Any = None, optimizer: Any = None,
               model_parameters: Optional[Iterable[torch.nn.Parameter]] = None,
               training_data: Any = None, lr_scheduler: Any = None,
               distributed_port: int = 29500, mpu: Any = None,
               dist_init_required: Optional[bool] = None,
               collate_fn: Any = None, config: Optional[ConfigLike] = None,
               config_params: Optional[ConfigLike] = None, *,
               comm: Optional[Comm] = None,
               overlap_grad_hooks: bool = True,
               init_fn: Any = None, pretrained: Any = None,
               init_seed: int = 0, wrap_policy: Any = None,
               device: Any = None) -> Any:
    """Moves ``model``'s state into a zero runtime, as ``deepspeed.initialize``.

    DeepSpeed's form (keywords, or ``args`` first)::

        engine, optimizer, dataloader, lr_scheduler = zero.torch.initialize(
            args=args, model=model, model_parameters=params,
            config="ds_config.json")   # or config_params=, or args.deepspeed_config

    returns ``(engine, optimizer, training_dataloader, lr_scheduler)``:
    ``optimizer`` is a view of the runtime's optimizer (None without an
    ``optimizer`` block), ``training_dataloader`` a DataLoader over
    ``training_data`` (None without it), ``lr_scheduler`` a view of the
    config's ``scheduler`` (None without one). The short form
    ``initialize(model, config)`` (a module first) returns the engine alone.

    Args:
        model: the module; every rank starts from rank 0's param and buffer
            values (broadcast, as DeepSpeed does: torch.distributed when
            initialized, else the runtime's communicator). Values are cast to
            the working dtype of the config (fp16/bf16).
        config / config_params / args.deepspeed_config: DeepSpeed ds_config
            (dict, path or JSON text); exactly one source.
        model_parameters: the params to train (default: every param with
            ``requires_grad``); the others are registered frozen.
        optimizer, lr_scheduler, mpu: client objects are refused (the runtime
            runs the optimizer and schedule of the config).
        comm: the ranks; default MPI when launched by mpirun, else one rank.
        overlap_grad_hooks: hand gradients over from autograd hooks as
            backward produces them (default); False hands them in after
            backward, in reverse registration order.
        wrap_policy: stage 3's gather units, as FSDP's auto-wrap policies:
            module classes, an int (min params per unit, bottom-up) or a
            callable ``(module, name) -> bool`` (see _wrap_units). Default:
            every module gathers its own params.
        init_fn, init_seed: models larger than one rank. Params on the
            ``meta`` device (``device="meta"``, ``zero.torch.Init()``) are
            never materialized whole: each is registered with an init spec
            (zero.InitSpec, seed ``init_seed``) inferred from its module as
            torch's defaults (see _meta_init_spec: Linear, Conv*, Embedding,
            LayerNorm/GroupNorm/BatchNorm; other module types raise naming
            the param), and each rank computes only the elements it holds.
            ``init_fn(name, offset, count) -> values`` instead fills every
            meta param (called during finalize for this rank's elements).
            Values come from the runtime's generator: same distributions as
            torch's, not the same numbers. Meta buffers are refused.
        device: where the runtime keeps the state: ``"cuda:N"`` (default:
            the model's GPU when its params are on one; then gathered params
            alias the runtime's device memory through DLPack), ``"cpu"``.
            A CPU model given ``"cuda:N"`` is moved there, as DeepSpeed's
            engine moves it. With ``ZERO_GPU_STANDIN=1`` (tests), ``"cuda"`` is
            the CPU stand-in and the model stays on the CPU.
        pretrained: a ``.safetensors`` file or a Hugging Face
            ``model.safetensors.index.json``, loaded after the params are
            registered (zero.Engine.load_safetensors; each rank reads only
            what it holds); every param must be in it.

    A failure leaves no engine behind and the module with its own tensors.
    """
    if isinstance(args, torch.nn.Module):  # the short form: (model, config)
        if model is not None and config is not None:
            raise InvalidArgumentError(
                "initialize(model, config): config given twice")
        cfg = model if model is not None else config
        if cfg is None:
            cfg = config_params
        if cfg is None:
            raise InvalidArgumentError("initialize(model, config): no config")
        return ZeroTorchEngine(args, cfg, comm=comm,
                               model_parameters=model_parameters,
                               overlap_grad_hooks=overlap_grad_hooks,
                               init_fn=init_fn, pretrained=pretrained,
                               init_seed=init_seed, wrap_policy=wrap_policy,
                               device=device)
    if not isinstance(model, torch.nn.Module):
        raise InvalidArgumentError(
            f"initialize: model must be a torch.nn.Module, got {type(model).__name__}")
    if config is None:
        config = config_params
    elif config_params is not None:
        raise InvalidArgumentError(
            "initialize: give config or config_params, not both")
    args_cfg = getattr(args, "deepspeed_config", None) if args is not None else None
    if args_cfg is not None:
        if config is not None:
            raise InvalidArgumentError(
                "initialize: not sure how to proceed, given a DeepSpeed config "
                "both in args.deepspeed_config and in initialize(config=...)")
        config = args_cfg
    if config is None:
        raise InvalidArgumentError(
            "initialize: no DeepSpeed config: pass config=, config_params= or "
            "args.deepspeed_config")
    if optimizer is not None:
        raise UnimplementedError(
            "initialize(optimizer=...): client optimizers are not supported; the "
            "runtime runs the \"optimizer\" block of the config (Adam, AdamW, SGD)")
    if lr_scheduler is not None:
        raise UnimplementedError(
            "initialize(lr_scheduler=...): client schedulers are not supported; "
            "the runtime runs the \"scheduler\" block of the config")
    if mpu is not None:
        raise UnimplementedError("initialize(mpu=...): model parallelism")
    engine = ZeroTorchEngine(model, config, comm=comm,
                             model_parameters=model_parameters,
                             overlap_grad_hooks=overlap_grad_hooks,
                             init_fn=init_fn, pretrained=pretrained,
                             init_seed=init_seed, wrap_policy=wrap_policy,
                             device=device, _keep_originals=True)
    loader = None
    if training_data is not None:
        try:
            loader = _dataloader(engine, training_data, collate_fn)
        except BaseException:
            engine._undo_setup()
            raise
    engine._drop_originals()
    return engine, engine.optimizer, loader, engine.lr_scheduler
