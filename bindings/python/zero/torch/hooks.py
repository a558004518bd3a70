"""The hooks zero.torch puts on the module: stage 3's forward pre/post hooks
and the autograd function that gathers and releases around a module's
backward, the param reads that gather (external params), the wrap policy's
gather units, and the grad hooks that hand gradients to the runtime."""
from __future__ import annotations

import types
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Dict, Optional, Set, Tuple

try:
    from torch.overrides import TorchFunctionMode as _TorchFunctionMode
except ImportError:  # older torch: attribute reads still gather
    _TorchFunctionMode = None  # type: ignore[assignment,misc]

import torch

from ..errors import FailedPreconditionError, InvalidArgumentError
from .stage3 import _zero3_linear_forward
from .state import TrainingState

if TYPE_CHECKING:
    from .engine import ZeroTorchEngine


class _ModuleBackward(torch.autograd.Function):
    """Identity on a module's inputs or outputs; its backward calls
    ``action(module, backward=True)``. Around the inputs it runs once the
    module's backward has produced input gradients (the action releases the
    module's params); around the outputs, before the module's backward (the
    action gathers them again)."""

    @staticmethod
    def forward(ctx, action, module, *tensors):  # type: ignore[override]
        ctx.action = action
        ctx.module = module
        return tensors if len(tensors) != 1 else tensors[0]

    @staticmethod
    def backward(ctx, *grads):  # type: ignore[override]
        ctx.action(ctx.module, backward=True)
        return (None, None) + grads


def _wrap_tensors(action, module, value):
    """Applies _ModuleBackward(action) to the grad-requiring tensors in
    value (a tensor or a flat tuple/list of them); other structures are
    returned unchanged."""
    if isinstance(value, torch.Tensor):
        if value.requires_grad:
            return _ModuleBackward.apply(action, module, value)
        return value
    if isinstance(value, (tuple, list)):
        idx = [i for i, v in enumerate(value)
               if isinstance(v, torch.Tensor) and v.requires_grad]
        if not idx:
            return value
        out = _ModuleBackward.apply(action, module, *[value[i] for i in idx])
        if len(idx) == 1:
            out = (out,)
        items = list(value)
        for i, o in zip(idx, out):
            items[i] = o
        return type(value)(items) if isinstance(value, tuple) else items
    return value


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

        def __enter__(self):
            # The hooks step the guard off the mode stack while they run
            # (_guard_off): their own torch calls (``p.data =``, the
            # autograd Functions) then skip its Python dispatch.
            object.__setattr__(self.engine, "_guard", self)
            return super().__enter__()

        def __exit__(self, *exc):
            object.__setattr__(self.engine, "_guard", None)
            return super().__exit__(*exc)

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

# torch's function-mode stack (torch 1.13 and later), for _guard_off. The
# push/pop helpers of torch.overrides, not torch._C's: on torch 1.13 they
# also switch the C++ side's dispatch off at an empty stack and back on.
_len_mode_stack = getattr(torch._C, "_len_torch_function_stack", None)
_mode_at = getattr(torch._C, "_get_function_stack_at", None)
_pop_mode = getattr(torch.overrides, "_pop_mode", None)
_push_mode = getattr(torch.overrides, "_push_mode", None)
if None in (_len_mode_stack, _mode_at, _pop_mode, _push_mode):  # pragma: no cover
    def _len_mode_stack() -> int:  # type: ignore[misc]
        return 0


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


class _ModuleHooks:
    """ZeroTorchEngine's part: installing and removing its hooks, and what
    they do."""

    #: The stage-3 guard while ``engine(...)`` runs under it (set by
    #: _Stage3Guard.__enter__/__exit__), else None.
    _guard: Any = None

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

    def _guard_off(self) -> Any:
        """The stage-3 guard, taken off the top of torch's function-mode
        stack (None: it is not on top, e.g. a user's mode is inside it): a
        hook's own torch calls then cost what they cost without it (each
        went through the mode's Python dispatch, ~6 us on torch 1.13). The
        hook pushes it back when done (_guard_on)."""
        guard = self._guard
        if guard is None:
            return None
        n = _len_mode_stack()
        if n == 0 or _mode_at(n - 1) is not guard:
            return None
        return _pop_mode()

    def _pre_forward(self, module: torch.nn.Module, inputs: Tuple[Any, ...]):
        self._busy += 1
        guard = self._guard_off()
        try:
            self._fwd_stack.append(module)
            self._gather_module(module)
            if torch.is_grad_enabled() and self._module_params[id(module)]:
                return _wrap_tensors(self._release_module, module, inputs)
            return None
        finally:
            if guard is not None:
                _push_mode(guard)
            self._busy -= 1

    def _post_forward(self, module: torch.nn.Module, inputs: Any, output: Any):
        self._busy += 1
        guard = self._guard_off()
        try:
            if self._fwd_stack and self._fwd_stack[-1] is module:
                self._fwd_stack.pop()
            self._release_module(module)
            if torch.is_grad_enabled() and self._module_params[id(module)]:
                return _wrap_tensors(self._gather_module, module, output)
            return None
        finally:
            if guard is not None:
                _push_mode(guard)
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

    def _install_grad_hooks(self) -> None:
        for i, p in enumerate(self._params):
            if not self._trainable[i]:
                continue
            # The AccumulateGrad node of p (kept alive so it is reused).
            acc = p.expand_as(p).grad_fn.next_functions[0][0]

            def hook(*_unused, i=i):
                if self._state is TrainingState.IDLE:
                    self._state = TrainingState.PLAIN_BACKWARD  # see step()
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
