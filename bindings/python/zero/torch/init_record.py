"""What ``zero.torch.Init`` records of how each tensor made under it got its
values, and the replay that gives one of them its values later.

Under Init, factories make ``meta`` tensors (no memory) and the model's own
init code (``reset_parameters``, a Hugging Face model's ``_init_weights``,
plain ``torch.ones`` in a custom ``__init__``) runs on them as usual. Each meta
storage made that way gets a record: how it was made (the factory call, or
the op over other recorded tensors) and every in-place op later applied to it
through any view (``.data``, ``weight[pad]``, ``nn.init.normal_``), with the
generator state before each op that draws random numbers. An in-place op on
a recorded tensor runs on a scratch CPU tensor of the same layout instead, so
the generator advances exactly as without Init (whatever the program draws
next is the same too) and bad arguments fail as they do without it; the meta
tensor itself is left as it is (its layout is all it has), and a random
factory's meta tensor takes its layout from the CPU draw. Neither runs a meta
kernel: torch >= 2.0 implements many in Python (torch._refs: ``normal_``,
``add_``, ``randn``), and the first ``torch._check`` one makes imports sympy,
torch._dynamo, torch._inductor and triton, ~150 MB of RSS and 2 s, for a
model whose init is only ``normal_`` or ``randn``. (Functional ops over
recorded tensors, e.g. a rotary embedding's ``inv_freq``, still run on meta.)

Replaying a record with the generator set to each saved state gives the
values plain construction gives, bit for bit, one storage at a time: the
engine materialises one param, keeps the part its rank owns and frees it, so
no rank ever holds more than the largest param on top of its states.
"""
from __future__ import annotations

import inspect
import itertools
import threading
from typing import Any, Dict, List, Optional, Tuple

import torch

#: Factory functions Init sends to the meta device (given no ``device``).
#: ``torch.tensor(data)`` is not one: it copies values the program already
#: holds, and libraries probe ``torch.tensor([]).device`` for a device
#: context (transformers >= 5 skips its weight init when that is ``meta``).
FACTORIES = {
    torch.empty, torch.zeros, torch.ones, torch.full, torch.rand, torch.randn,
    torch.randint, torch.empty_strided, torch.arange, torch.eye,
    torch.linspace, torch.randperm, torch.normal,
}
_RANDOM_FACTORIES = {torch.rand, torch.randn, torch.randint, torch.randperm,
                     torch.normal}

# In-place ops that only change a tensor's metadata or autograd flags (no
# values to record).
_METADATA_OPS = {"requires_grad_", "retain_grad", "share_memory_", "squeeze_",
                 "unsqueeze_", "t_", "transpose_", "as_strided_", "swapdims_",
                 "swapaxes_", "detach_", "resize_"}
# In-place ops known not to draw random numbers (no generator state kept,
# no scratch run).
_DETERMINISTIC_OPS = {"zero_", "fill_", "copy_", "mul_", "div_", "add_", "sub_",
                      "clamp_", "clamp_min_", "clamp_max_", "constant_", "zeros_",
                      "ones_", "eye_", "dirac_", "masked_fill_", "fill_diagonal_",
                      "__setitem__", "__iadd__", "__isub__", "__imul__",
                      "__itruediv__", "abs_", "neg_", "sqrt_", "pow_", "exp_",
                      "log_", "tril_", "triu_", "index_fill_", "scatter_"}
_INPLACE_DUNDERS = {"__setitem__", "__iadd__", "__isub__", "__imul__",
                    "__itruediv__", "__ifloordiv__", "__ipow__", "__iand__",
                    "__ior__", "__ixor__", "__ilshift__", "__irshift__"}
# Functional ops that draw random numbers from their inputs' shapes.
_RANDOM_FUNCS = {"rand_like", "randn_like", "randint_like", "bernoulli",
                 "multinomial", "poisson", "normal", "dropout", "rrelu"}
# In-place ops that write every element of their target (earlier ops on that
# target need not be replayed).
_OVERWRITE_OPS = {"normal_", "uniform_", "zero_", "fill_", "copy_", "random_",
                  "trunc_normal_", "constant_", "zeros_", "ones_",
                  "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_",
                  "xavier_normal_", "orthogonal_"}

_seq = itertools.count()

# torch >= 2.1's nn.init functions that do not dispatch to torch-function
# modes as a whole (trunc_normal_, orthogonal_, dirac_, sparse_) return at
# once for a meta tensor, drawing nothing; told a recorded tensor is not
# meta, they run their in-place ops on it, recorded like any others.
_IS_META = inspect.getattr_static(torch.Tensor, "is_meta")
_NN_INIT_FILE = torch.nn.init.__file__


def hides_meta(func: Any, args: Any, caller: Any) -> bool:
    """Whether ``func`` is ``t.is_meta`` asked by torch.nn.init code (frame
    ``caller``) about a recorded tensor: answered False."""
    return (getattr(func, "__self__", None) is _IS_META and caller is not None
            and caller.f_code.co_filename == _NN_INIT_FILE
            and bool(args) and record_of(args[0]) is not None)


def _storage(t: torch.Tensor) -> Any:
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t._storage()


def _key(t: torch.Tensor) -> int:
    return int(_storage(t)._cdata)


def _extent(size, stride, offset: int) -> int:
    """Elements of storage a view of this layout reaches."""
    if any(int(s) == 0 for s in size):
        return max(int(offset), 1)
    return int(offset) + 1 + sum((int(s) - 1) * int(st) for s, st in zip(size, stride))


class _Ref:
    """A recorded tensor as an op's argument: its storage's record, its view
    of that storage, and when (ops on the storage before ``seq`` apply)."""
    __slots__ = ("rec", "size", "stride", "offset", "seq")

    def __init__(self, rec: "Record", t: torch.Tensor, seq: int) -> None:
        self.rec, self.seq = rec, seq
        self.size, self.stride = tuple(t.size()), tuple(t.stride())
        self.offset = int(t.storage_offset())


class Record:
    """One meta storage made under Init: ``make`` (seq, func, args, kwargs,
    generator state or None, factory?) and ``ops`` (seq, target _Ref, func,
    args, kwargs, generator state or None) in program order."""
    __slots__ = ("keep", "dtype", "numel", "layout", "make", "ops")

    def __init__(self, out: torch.Tensor, make: Tuple) -> None:
        self.keep = _storage(out)  # keeps the key unique while recorded
        self.dtype = out.dtype
        self.layout = (tuple(out.size()), tuple(out.stride()), int(out.storage_offset()))
        self.numel = _extent(out.size(), out.stride(), out.storage_offset())
        self.make = make
        self.ops: List[Tuple] = []


#: storage key -> its record; an entry lives as long as the process (a few
#: hundred bytes a param, plus 5 KB per random draw) unless taken by an engine.
RECORDS: Dict[int, Record] = {}


def record_of(t: Any) -> Optional[Record]:
    if isinstance(t, torch.Tensor) and t.is_meta:
        return RECORDS.get(_key(t))
    return None


def _map(value: Any, fn) -> Any:
    if isinstance(value, (list, tuple)):
        out = [_map(v, fn) for v in value]
        return type(value)(out) if isinstance(value, tuple) else out
    if isinstance(value, dict):
        return {k: _map(v, fn) for k, v in value.items()}
    return fn(value)


def _to_refs(args: Any, kwargs: Dict[str, Any], seq: int) -> Tuple[Any, Any]:
    def ref(v: Any) -> Any:
        rec = record_of(v)
        return _Ref(rec, v, seq) if rec is not None else v
    return _map(args, ref), _map(kwargs, ref)


def _any(args: Any, kwargs: Dict[str, Any], pred) -> bool:
    """Whether ``pred`` holds for any value among the arguments."""
    found = []

    def see(v: Any) -> Any:
        if not found and pred(v):
            found.append(v)
        return v
    _map(args, see)
    _map(kwargs, see)
    return bool(found)


def _tracked(args: Any, kwargs: Dict[str, Any]) -> bool:
    return _any(args, kwargs, lambda v: record_of(v) is not None)


def _untracked_meta(args: Any, kwargs: Dict[str, Any]) -> bool:
    """Whether a meta tensor Init did not make is among the arguments."""
    return _any(args, kwargs, lambda v: (isinstance(v, torch.Tensor) and v.is_meta
                                         and record_of(v) is None))


def _generator(kwargs: Dict[str, Any]) -> Any:
    gen = kwargs.get("generator")
    return gen if gen is not None else torch.default_generator


#: Scratch buffers by dtype, reused: one allocation per size reached, not
#: one per op (glibc keeps freed blocks of a param's size in the heap once
#: its mmap threshold has risen past them, so per-op buffers grew the RSS
#: of construction by up to the model's size on torch 2.x).
_SCRATCH: Dict[torch.dtype, List[torch.Tensor]] = {}


def _scratch(args: Any, kwargs: Dict[str, Any]) -> Tuple[Any, Any]:
    """Recorded tensors replaced by zeros of their layout (CPU), each in a
    buffer of its own for this op."""
    used: Dict[torch.dtype, int] = {}

    def z(v: Any) -> Any:
        if record_of(v) is None:
            return v
        n = _extent(v.size(), v.stride(), v.storage_offset())
        bufs = _SCRATCH.setdefault(v.dtype, [])
        i = used[v.dtype] = used.get(v.dtype, -1) + 1
        if i == len(bufs):
            bufs.append(torch.zeros(0, dtype=v.dtype))
        if bufs[i].numel() < n:
            bufs[i] = torch.zeros(n, dtype=v.dtype)
        base = bufs[i][:n]
        base.zero_()
        return base.as_strided(v.size(), v.stride(), v.storage_offset())
    return _map(args, z), _map(kwargs, z)


#: What ``_advance`` says an op returned: its target (the first argument).
_TARGET = object()


def _advance(func: Any, args: Any, kwargs: Dict[str, Any],
             draws: bool = True) -> Tuple[Any, Any]:
    """Runs ``func`` on scratch tensors of the same layouts so the generator
    moves as in plain construction (and bad arguments raise as there).
    Returns the state before it, or None when nothing was drawn (or
    ``draws`` is False: not looked at), and what it returned: ``_TARGET``
    for its first argument, else its value."""
    gen = _generator(kwargs)
    before = gen.get_state() if draws else None
    sargs, skw = _scratch(args, kwargs)
    out = func(*sargs, **skw)
    if sargs and out is sargs[0]:
        out = _TARGET
    if before is None or torch.equal(gen.get_state(), before):
        return None, out
    return before, out


class Recorder:
    """Init's torch-function handler: factories to meta, with records."""

    def factory(self, func: Any, args: Any, kwargs: Dict[str, Any]) -> Any:
        real = dict(kwargs)
        del real["device"]  # "meta"
        state = None
        if func in _RANDOM_FACTORIES and "out" not in real:
            gen = _generator(real)
            state = gen.get_state()
            # The draws plain construction makes; the meta tensor takes
            # their layout (randn's meta kernel is Python on torch >= 2.0).
            drawn = func(*args, **dict(real, device="cpu"))
            if not isinstance(drawn, torch.Tensor):
                return drawn
            out = torch.empty_strided(drawn.size(), drawn.stride(), dtype=drawn.dtype,
                                      device="meta", requires_grad=drawn.requires_grad)
            del drawn
        else:
            out = func(*args, **kwargs)
            if not isinstance(out, torch.Tensor):
                return out
            if func in _RANDOM_FACTORIES:
                gen = _generator(real)
                state = gen.get_state()
                func(*args, **dict(real, device="cpu"))
        seq = next(_seq)
        a, k = _to_refs(args, real, seq)
        RECORDS[_key(out)] = Record(out, (seq, func, a, k, state, True))
        return out

    def op(self, func: Any, args: Any, kwargs: Dict[str, Any]) -> Any:
        if not _tracked(args, kwargs):
            return func(*args, **kwargs)
        if not args and "tensor" in kwargs:  # torch.nn.init.*(tensor=...)
            kwargs = dict(kwargs)
            args = (kwargs.pop("tensor"),)
        name = getattr(func, "__name__", "")
        inplace = (name in _INPLACE_DUNDERS or
                   (name.endswith("_") and not name.startswith("__")))
        if inplace and name not in _METADATA_OPS:
            target = args[0] if args else None
            rec = record_of(target)
            if rec is None:
                return func(*args, **kwargs)
            try:
                state, out = _advance(func, args, kwargs,
                                      draws=name not in _DETERMINISTIC_OPS)
            except (RuntimeError, NotImplementedError, TypeError):
                if name not in _DETERMINISTIC_OPS or not _untracked_meta(args, kwargs):
                    raise
                # Not runnable on CPU (a meta argument Init did not make):
                # the meta kernel checks it.
                state, out = None, func(*args, **kwargs)
            else:
                # It writes values only: the meta target stays as it is and
                # is what the op returns (``__setitem__``: None); anything
                # else it returns comes from its meta kernel.
                out = target if out is _TARGET else (
                    None if out is None else func(*args, **kwargs))
            seq = next(_seq)
            a, k = _to_refs(args, kwargs, seq)
            rec.ops.append((seq, a[0], func, a, k, state))
            return out
        if inplace:
            return func(*args, **kwargs)
        state = _advance(func, args, kwargs)[0] if name in _RANDOM_FUNCS else None
        seq = next(_seq)
        try:
            out = func(*args, **kwargs)
        except (RuntimeError, NotImplementedError, TypeError):
            # The op has no meta kernel (or mixes devices): computed now.
            return _map_eager(func, args, kwargs, state)
        if isinstance(out, torch.Tensor) and out.is_meta and record_of(out) is None:
            a, k = _to_refs(args, kwargs, seq)
            RECORDS[_key(out)] = Record(out, (seq, func, a, k, state, False))
        elif isinstance(out, (list, tuple)) and any(
                isinstance(o, torch.Tensor) and o.is_meta and record_of(o) is None
                for o in out):
            return _map_eager(func, args, kwargs, state)
        return out


def _map_eager(func: Any, args: Any, kwargs: Dict[str, Any], state: Any) -> Any:
    """An op over recorded tensors computed on their values now (the
    generator ends where ``_advance`` left it)."""
    with Replay() as rp:
        seq = next(_seq)
        a, k = _to_refs(args, kwargs, seq)
        a, k = rp.resolve(a), rp.resolve(k)
        if state is not None:
            _generator(k).set_state(state)
        with torch.no_grad():
            return func(*a, **k)


#: Replays set the process's generator: one at a time (thread ranks).
_REPLAY_LOCK = threading.RLock()


class Replay:
    """Materialises recorded tensors; the generators are as before on exit
    (each replayed draw sets the state it was recorded at). Holds a process
    lock meanwhile: another thread drawing random numbers at that moment
    would see the replayed states."""

    def __init__(self) -> None:
        self._cache: Dict[Tuple[int, int], torch.Tensor] = {}

    def __enter__(self) -> "Replay":
        _REPLAY_LOCK.acquire()
        self._state = torch.default_generator.get_state()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            torch.default_generator.set_state(self._state)
            self._cache.clear()
        finally:
            _REPLAY_LOCK.release()

    def value(self, t: torch.Tensor) -> torch.Tensor:
        """The values the recorded meta tensor ``t`` holds now (its view)."""
        rec = record_of(t)
        base = self._base(rec, None)
        return base.as_strided(t.size(), t.stride(), t.storage_offset())

    def resolve(self, value: Any) -> Any:
        def one(v: Any) -> Any:
            if isinstance(v, _Ref):
                return self._base(v.rec, v.seq).as_strided(v.size, v.stride, v.offset)
            return v
        return _map(value, one)

    def _base(self, rec: Record, upto: Optional[int]) -> torch.Tensor:
        """The storage of ``rec`` as of ``upto`` (None: after every op)."""
        ops = [o for o in rec.ops if upto is None or o[0] < upto]
        ck = (id(rec), len(ops))
        if ck in self._cache:
            return self._cache[ck]
        # From the last op that writes every element (earlier values and
        # draws do not matter: each draw starts from its own saved state).
        start = next((i for i in range(len(ops) - 1, -1, -1)
                      if _writes_all(ops[i], rec)), None)
        if start is None:
            start, base = 0, self._make(rec)
        else:
            base = torch.empty(rec.numel, dtype=rec.dtype, device="cpu")
        for seq, tgt, func, a, k, state in ops[start:]:
            view = base.as_strided(tgt.size, tgt.stride, tgt.offset)
            args = [view] + list(self.resolve(list(a[1:])))
            kw = self.resolve(k)
            if state is not None:
                _generator(kw).set_state(state)
            with torch.no_grad():
                func(*args, **kw)
        self._cache[ck] = base
        return base

    def _make(self, rec: Record) -> torch.Tensor:
        seq, func, a, k, state, is_factory = rec.make
        args, kw = self.resolve(a), self.resolve(k)
        if state is not None:
            _generator(kw).set_state(state)
        if is_factory:
            kw = dict(kw)
            kw["device"] = "cpu"
        with torch.no_grad():
            out = func(*args, **kw)
        base = torch.empty(rec.numel, dtype=rec.dtype, device="cpu")
        size, stride, offset = rec.layout
        base.as_strided(size, stride, offset).copy_(out)
        return base


def _contiguous(size, stride) -> bool:
    expect = 1
    for s, st in reversed(list(zip(size, stride))):
        if int(s) != 1 and int(st) != expect:
            return False
        expect *= int(s)
    return True


def _writes_all(op: Tuple, rec: Record) -> bool:
    seq, tgt, func, a, k, state = op
    return (getattr(func, "__name__", "") in _OVERWRITE_OPS and tgt.offset == 0
            and all(int(s) > 0 for s in tgt.size)
            and _contiguous(tgt.size, tgt.stride)
            and _extent(tgt.size, tgt.stride, 0) == rec.numel)
