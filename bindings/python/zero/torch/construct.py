"""Construction without whole params: ``zero.torch.Init`` (meta params), the
init specs inferred from torch's module defaults, and the engine's part of
turning meta params into registered ones."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Tuple

import numpy as np
import torch

from ..errors import InvalidArgumentError, UnimplementedError
from . import stage3
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

    def _infer_meta_specs(self, model: torch.nn.Module) -> List[Tuple[torch.nn.Parameter, int]]:
        """Refuses meta buffers; gives each meta param an init spec (or the
        user's init_fn) and replaces it (_replace_meta_params). Returns the
        nn.Embedding padding rows to zero once registered."""

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
        return padding_rows

    def _zero_padding_rows(self, padding_rows: List[Tuple[torch.nn.Parameter, int]]) -> None:
        """Once registered: each padding row written as zeros."""
        # nn.Embedding(padding_idx=...): its row is zero (no spec says
        # that), written as a range: no rank holds the whole param for it.
        for p, row in padding_rows:
            pid = self._ids[self._index[id(p)]]
            width = int(p.numel()) // int(p.shape[0])
            self.zero.write_master_range(pid, row * width,
                                         np.zeros(width, dtype=np.float32))
