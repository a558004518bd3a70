"""zero.torch: a DeepSpeed-shaped engine for PyTorch modules.

::

    engine = zero.torch.initialize(model, ds_config)   # launched by mpirun
    for batch, target in data:
        loss = loss_fn(engine(batch), target)
        engine.backward(loss)
        engine.step()

The runtime owns the model state. Stages 0-2: every param's storage *is* the
runtime's working copy (``param.data = torch.from_numpy(view)``, no copy);
the optimizer updates it in place in :meth:`ZeroTorchEngine.step`. Stage 3:
a released param is a zero-stride placeholder of its full shape (one
element of memory); forward pre-hooks gather a module's own params, forward
hooks release them, and autograd functions wrapped around the module's
outputs and inputs gather them again for its backward and release them after.
The gathered values are copied into torch-owned tensors in stage 3, because
autograd may save views of a param (``weight.t()`` in ``F.linear``) that must
stay valid after the runtime frees its gathered copy; ``torch.nn.Linear``
modules get a linear function that saves the parameter itself instead (as
DeepSpeed does), so their copies die at release rather than living until
backward.

Gradients reach the runtime from hooks on each param's gradient accumulator
(so stages 2-3 reduce buckets while backward goes on and never hold the whole
gradient); after backward, trainable params whose hook did not fire are
handed in (as zeros) in reverse registration order. Every rank must run the
same graph, so hooks fire in the same order on every rank (the runtime's
collectives require it). Limitation (as in DeepSpeed): in stage 3 a param
must be used only inside the forward of a module that owns it.
"""
from __future__ import annotations

import atexit
import types
import weakref
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import numpy as np
import torch

from .comm import Comm
from .dtypes import DType
from .engine import ConfigLike, Engine, StepInfo
from .errors import FailedPreconditionError

__all__ = ["initialize", "ZeroTorchEngine"]

_TORCH_DTYPE = {
    DType.F32: torch.float32,
    DType.F16: torch.float16,
    DType.BF16: torch.bfloat16,
}


def _as_tensor(view: np.ndarray, dtype: DType) -> torch.Tensor:
    """A torch tensor sharing the memory of an engine view."""
    if dtype == DType.BF16:
        return torch.from_numpy(view.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(view)


def _placeholder(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """A released stage-3 param: full shape, one element of storage."""
    return torch.zeros((), dtype=dtype).expand(tuple(shape))


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
            grad_weight = g2.t().mm(input.reshape(-1, input.shape[-1]))
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = g2.sum(0)
        return grad_input, grad_weight, grad_bias


def _zero3_linear_forward(self: torch.nn.Linear, input: torch.Tensor) -> torch.Tensor:
    return _Zero3Linear.apply(input, self.weight, self.bias)


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
                 overlap_grad_hooks: bool = True) -> None:
        super().__init__()
        for name, p in model.named_parameters():
            if p.device.type != "cpu":
                raise ValueError(
                    f"zero.torch: param {name!r} is on {p.device}; the runtime "
                    "holds model state in CPU memory, so the model must be too")
        self.module = model
        self.zero = Engine(config, comm)
        self.dtype = _TORCH_DTYPE[self.zero.dtype]
        self.stage = int(self.zero.stats()["stage"])  # as the runtime parsed it
        gas = self.zero.config.get("gradient_accumulation_steps", 1)
        self.gradient_accumulation_steps = int(gas) if isinstance(gas, int) else 1
        self.overlap_grad_hooks = overlap_grad_hooks
        self.global_steps = 0
        self.micro_steps = 0
        self.last_step_info: Optional[StepInfo] = None

        trainable_set: Optional[Set[int]] = None
        if model_parameters is not None:
            trainable_set = {id(p) for p in model_parameters}

        self._names: List[str] = []
        self._params: List[torch.nn.Parameter] = []
        self._ids: List[int] = []
        self._index: Dict[int, int] = {}  # id(param) -> index in _params
        self._trainable: List[bool] = []
        for name, p in model.named_parameters():
            trainable = p.requires_grad and (
                trainable_set is None or id(p) in trainable_set)
            init = p.detach().to(torch.float32).cpu().contiguous().numpy()
            pid = self.zero.register_param(name, init, trainable=trainable)
            self._index[id(p)] = len(self._params)
            self._names.append(name)
            self._params.append(p)
            self._ids.append(pid)
            self._trainable.append(trainable)
            if not trainable:
                p.requires_grad_(False)
        self.zero.finalize()

        self._gather_count = [0] * len(self._params)
        self._handed = [False] * len(self._params)
        self._grad_accs: List[Any] = []
        self._hooks: List[Any] = []
        self._module_params: Dict[int, List[int]] = {}
        self._patched_linears: List[torch.nn.Module] = []
        self._closed = False

        if self.stage < 3:
            for i, p in enumerate(self._params):
                view = self.zero.gather(self._ids[i], writable=True)
                self._gather_count[i] = 1
                p.data = _as_tensor(view, self.zero.dtype)
        else:
            for i, p in enumerate(self._params):
                p.data = _placeholder(p.shape, self.dtype)
            self._install_stage3_hooks()
        if overlap_grad_hooks:
            self._install_grad_hooks()
        _live.add(self)

    # ---- DeepSpeed-shaped API ----------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Runs the wrapped module."""
        self._check_open()
        return self.module(*args, **kwargs)

    def backward(self, loss: torch.Tensor, retain_graph: bool = False,
                 scale_wrt_gas: bool = True) -> None:
        """Backward of ``loss`` times the loss scale (divided by the
        gradient-accumulation steps unless ``scale_wrt_gas`` is False), then
        hands every trainable param's gradient to the runtime."""
        self._check_open()
        self._handed = [False] * len(self._params)
        factor = self.zero.loss_scale
        if scale_wrt_gas and self.gradient_accumulation_steps > 1:
            factor /= self.gradient_accumulation_steps
        scaled = loss if factor == 1.0 else loss * factor
        scaled.backward(retain_graph=retain_graph)
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

    def step(self) -> StepInfo:
        """Ends the micro-step (COLLECTIVE); at the boundary the optimizer
        updates the params in place."""
        self._check_open()
        info = self.zero.step()
        self._handed = [False] * len(self._params)
        self.last_step_info = info
        self.global_steps = info.global_step
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
        """Learning rate of the last step (DeepSpeed returns one per group)."""
        return [self.last_step_info.lr if self.last_step_info else float("nan")]

    def get_global_grad_norm(self) -> float:
        return self.last_step_info.grad_norm if self.last_step_info else float("nan")

    @property
    def local_rank(self) -> int:
        return self.zero.rank

    @property
    def global_rank(self) -> int:
        return self.zero.rank

    @property
    def world_size(self) -> int:
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

    def save_checkpoint(self, save_dir: str, tag: Optional[str] = None,
                        client_state: Optional[dict] = None) -> None:
        """Not available: the C ABI v1 has no save/load entry points."""
        raise NotImplementedError(
            "save_checkpoint: the zero C ABI v1 has no checkpoint save/load "
            "yet (zero_engine_save/zero_engine_load)")

    def load_checkpoint(self, load_dir: str, tag: Optional[str] = None,
                        **kwargs: Any) -> Tuple[None, dict]:
        """Not available: the C ABI v1 has no save/load entry points."""
        raise NotImplementedError(
            "load_checkpoint: the zero C ABI v1 has no checkpoint save/load "
            "yet (zero_engine_save/zero_engine_load)")

    def close(self, keep_values: bool = True) -> None:
        """Frees the runtime; the params become torch-owned tensors holding
        their last working values (stage 3: gathered, so COLLECTIVE; with
        ``keep_values=False`` they become zeros and nothing is collective).
        Idempotent; the engine raises on use afterwards."""
        if self._closed:
            return
        self._closed = True
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self._grad_accs.clear()
        for m in self._patched_linears:
            del m.forward  # back to torch.nn.Linear.forward
        self._patched_linears.clear()
        if not self.zero.closed:
            for i, p in enumerate(self._params):
                if self.stage < 3:
                    p.data = p.data.clone() if keep_values else torch.zeros(
                        p.shape, dtype=self.dtype)
                elif keep_values:
                    view = self.zero.gather(self._ids[i], writable=True)
                    p.data = _as_tensor(view, self.zero.dtype).clone()
                    self.zero.release(self._ids[i])
                else:
                    p.data = torch.zeros(p.shape, dtype=self.dtype)
        self.zero.close()
        _live.discard(self)

    def __enter__(self) -> "ZeroTorchEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- internals ---------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise FailedPreconditionError(
                "ZeroTorchEngine is closed (used after close)")

    def _hand_in(self, i: int) -> None:
        """Copies param i's gradient (if any) into the runtime and frees it."""
        p = self._params[i]
        pid = self._ids[i]
        grad = p.grad
        buf = self.zero.grad_buffer(pid)
        if grad is not None:
            _as_tensor(buf, self.zero.dtype).copy_(grad.reshape(buf.shape))
            p.grad = None
        self.zero.grad_ready(pid)
        self._handed[i] = True

    def _install_grad_hooks(self) -> None:
        for i, p in enumerate(self._params):
            if not self._trainable[i]:
                continue
            # The AccumulateGrad node of p (kept alive so it is reused).
            acc = p.expand_as(p).grad_fn.next_functions[0][0]

            def hook(*_unused, i=i):
                if self._params[i].grad is not None and not self._handed[i]:
                    self._hand_in(i)

            self._hooks.append(acc.register_hook(hook))
            self._grad_accs.append(acc)

    def _install_stage3_hooks(self) -> None:
        for module in self.module.modules():
            idx = [self._index[id(p)] for p in module.parameters(recurse=False)
                   if id(p) in self._index]
            if not idx:
                continue
            self._module_params[id(module)] = idx
            if type(module) is torch.nn.Linear and "forward" not in vars(module):
                module.forward = types.MethodType(_zero3_linear_forward, module)
                self._patched_linears.append(module)
            self._hooks.append(module.register_forward_pre_hook(self._pre_forward))
            self._hooks.append(module.register_forward_hook(self._post_forward))

    def _pre_forward(self, module: torch.nn.Module, inputs: Tuple[Any, ...]):
        self._gather_module(module)
        if torch.is_grad_enabled():
            return _wrap_tensors(_PostBackward, self, module, inputs)
        return None

    def _post_forward(self, module: torch.nn.Module, inputs: Any, output: Any):
        self._release_module(module)
        if torch.is_grad_enabled():
            return _wrap_tensors(_PreBackward, self, module, output)
        return None

    def _gather_module(self, module: torch.nn.Module, backward: bool = False) -> None:
        for i in self._module_params.get(id(module), ()):
            view = self.zero.gather(self._ids[i], writable=True)
            self._gather_count[i] += 1
            if self._gather_count[i] == 1:
                # A torch-owned copy: autograd may keep views of it.
                self._params[i].data = _as_tensor(view, self.zero.dtype).clone()

    def _release_module(self, module: torch.nn.Module, backward: bool = False) -> None:
        for i in self._module_params.get(id(module), ()):
            if self._gather_count[i] > 0:
                self._release_param(i)

    def _release_param(self, i: int) -> None:
        self._gather_count[i] -= 1
        self.zero.release(self._ids[i])
        if self._gather_count[i] == 0:
            p = self._params[i]
            p.data = _placeholder(p.shape, self.dtype)


_live: "weakref.WeakSet[ZeroTorchEngine]" = weakref.WeakSet()


@atexit.register
def _close_live_engines() -> None:
    for e in list(_live):
        try:
            e.close(keep_values=False)
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


def initialize(model: torch.nn.Module, config: ConfigLike, *,
               comm: Optional[Comm] = None,
               model_parameters: Optional[Iterable[torch.nn.Parameter]] = None,
               overlap_grad_hooks: bool = True) -> ZeroTorchEngine:
    """Moves ``model``'s state into a zero runtime; returns the engine.

    Args:
        model: the module; its parameters (fp32 values) become the initial
            values on every rank (same seed on every rank, as in DeepSpeed).
            They are cast to the working dtype of the config (fp16/bf16).
        config: DeepSpeed ds_config (dict, path or JSON text).
        comm: the ranks; default MPI when launched by mpirun, else one rank.
        model_parameters: the params to train (default: every param with
            ``requires_grad``); the others are registered frozen.
        overlap_grad_hooks: hand gradients over from autograd hooks as
            backward produces them (default); False hands them in after
            backward, in reverse registration order.
    """
    return ZeroTorchEngine(model, config, comm=comm,
                           model_parameters=model_parameters,
                           overlap_grad_hooks=overlap_grad_hooks)
