"""Construction without whole params: ``zero.torch.Init`` (meta params), the
init specs inferred from torch's module defaults, and the engine's part of
turning meta params into registered ones."""
from __future__ import annotations

import math
import sys
from typing import Any, Dict, List, Tuple

import numpy as np
import torch

from ..errors import InvalidArgumentError, UnimplementedError
from . import init_record, stage3
from .hooks import _TorchFunctionMode


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
    from ..engine import InitSpec
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


class Init:
    """Builds a model without memory for its params (as
    ``deepspeed.zero.Init``): within the context, torch factory functions
    (``torch.empty``, ``zeros``, ``randn``, ...) called without a ``device``
    make ``meta`` tensors, and the model's own init code runs on them as
    usual and is recorded (zero/torch/init_record.py). ``initialize`` then
    gives each meta param the values that code gives it without Init, bit
    for bit (a Hugging Face model: its ``_init_weights``), materialising one
    param at a time and keeping this rank's part, and materialises meta
    buffers. The generator ends where plain construction leaves it.

    ``init_specs=True`` records nothing: ``initialize`` then infers an init
    spec per param from its module type (torch's defaults, drawn by the
    runtime: the same distributions, not the same numbers; see
    ``_meta_init_spec``), refuses module types it does not know and meta
    buffers. Only asked for, never chosen in place of the model's code.
    (``torch.device("meta")`` as a context, in torch >= 2.0, is that path too.)
    """

    def __init__(self, enabled: bool = True, init_specs: bool = False) -> None:
        if _TorchFunctionMode is None:
            raise UnimplementedError(
                "zero.torch.Init needs torch.overrides.TorchFunctionMode "
                "(torch >= 1.13); build modules with device=\"meta\" instead")
        self.enabled = enabled
        self.init_specs = init_specs
        self._mode: Any = None

    def __enter__(self) -> "Init":
        if self.enabled:
            self._mode = _MetaMode(None if self.init_specs else init_record.Recorder())
            self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(*exc)


if _TorchFunctionMode is not None:
    class _MetaMode(_TorchFunctionMode):
        def __init__(self, recorder: Any) -> None:
            super().__init__()
            self.recorder = recorder

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func in init_record.FACTORIES and kwargs.get("device") is None:
                kwargs["device"] = "meta"
                if self.recorder is not None:
                    return self.recorder.factory(func, args, kwargs)
                return func(*args, **kwargs)
            if self.recorder is not None:
                if init_record.hides_meta(func, args, sys._getframe(1)):
                    return False
                return self.recorder.op(func, args, kwargs)
            return func(*args, **kwargs)


class _MetaConstruction:
    """ZeroTorchEngine's part: init specs for its meta params, and those
    params replaced by placeholders the runtime fills."""

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
                    q = torch.nn.Parameter(stage3._placeholder(p.shape, self.compute_dtype,
                                                        self._bridge.torch_device),
                                           requires_grad=p.requires_grad)
                    new[id(p)] = q
                    self._meta_new[id(q)] = specs[id(p)]
                self._replaced.append((m, key, p))
                m._parameters[key] = q
        self._meta_map = new

    def _materialise_meta_buffers(self, model: torch.nn.Module) -> None:
        """Meta buffers (and meta tensors kept as plain module attributes,
        e.g. a rotary embedding's ``original_inv_freq``) that zero.torch.Init
        recorded get the values their code gives them; any other meta buffer
        is refused by name."""
        done: Dict[int, torch.Tensor] = {}
        with init_record.Replay() as rp:
            for mname, m in model.named_modules():
                for key, b in list(m._buffers.items()):
                    if b is None or not b.is_meta:
                        continue
                    if init_record.record_of(b) is None:
                        full = f"{mname}.{key}" if mname else key
                        raise InvalidArgumentError(
                            f"zero.torch.initialize: buffer {full!r} is on the meta "
                            "device and was not made under zero.torch.Init (which "
                            "records how it gets its values); create it with real "
                            "values, or build the model inside zero.torch.Init()")
                    if id(b) not in done:
                        done[id(b)] = rp.value(b).to(self._bridge.torch_device)
                    m._buffers[key] = done[id(b)]
                for key, v in list(vars(m).items()):
                    if (isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter)
                            and init_record.record_of(v) is not None):
                        if id(v) not in done:
                            done[id(v)] = rp.value(v).to(self._bridge.torch_device)
                        object.__setattr__(m, key, done[id(v)])

    def _infer_meta_specs(self, model: torch.nn.Module) -> List[Tuple[torch.nn.Parameter, int]]:
        """Materialises recorded meta buffers; gives each meta param an init
        spec, the user's init_fn, or (made under zero.torch.Init) the replay
        of its own init code (written once registered, _write_meta_values),
        and replaces it (_replace_meta_params). Returns the nn.Embedding
        padding rows to zero once registered (init-spec params only)."""
        self._materialise_meta_buffers(model)
        # Meta params: an init spec (or the user's init_fn) each, inferred
        # from the owning module before anything changes.
        from ..engine import InitSpec
        specs: Dict[int, Any] = {}
        padding_rows: List[Tuple[torch.nn.Parameter, int]] = []
        replayed: List[torch.nn.Parameter] = []
        for mname, m in model.named_modules():
            for key, p in m._parameters.items():
                if p is None or not p.is_meta or id(p) in specs:
                    continue
                full = f"{mname}.{key}" if mname else key
                if self._init_fn is not None:
                    specs[id(p)] = self._init_fn
                elif init_record.record_of(p) is not None:
                    # Its own code's values are written once registered
                    # (pretrained= covers every param: nothing to replay).
                    specs[id(p)] = InitSpec.zeros()
                    if self._pretrained is None:
                        replayed.append(p)
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
            self._replayed = [(self._meta_map[id(p)], p) for p in replayed]
        return padding_rows

    def _write_meta_values(self, padding_rows: List[Tuple[torch.nn.Parameter, int]]) -> None:
        """Once registered: params made under zero.torch.Init get their own
        code's values, one whole param at a time (every rank computes the
        same values; the runtime keeps what this rank holds); init-spec
        params get their padding rows zeroed."""
        for q, meta in getattr(self, "_replayed", []):
            with init_record.Replay() as rp:
                values = rp.value(meta).to(torch.float32).contiguous().numpy()
            self.zero.write_master(self._ids[self._index[id(q)]], values)
            del values
        self._replayed = []
        self._zero_padding_rows(padding_rows)

    def _zero_padding_rows(self, padding_rows: List[Tuple[torch.nn.Parameter, int]]) -> None:
        """Once registered: each padding row written as zeros."""
        # nn.Embedding(padding_idx=...): its row is zero (no spec says
        # that), written as a range: no rank holds the whole param for it.
        for p, row in padding_rows:
            pid = self._ids[self._index[id(p)]]
            width = int(p.numel()) // int(p.shape[0])
            self.zero.write_master_range(pid, row * width,
                                         np.zeros(width, dtype=np.float32))
