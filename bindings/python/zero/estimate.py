"""zero.estimate: memory per rank before launching (the C ABI's
zero_estimate_memory_params and zero_estimate_memory, the engine's own
allocation rules and param decisions; docs/ARCHITECTURE.md, "Memory
estimator"). The command-line form is ``zero-estimate``."""
from __future__ import annotations

import json
import math
import os
import struct
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _zero_c
from ._abi_tables import MEMORY_ESTIMATE_FIELDS
from .dtypes import DType
from .engine import load_config

Shapes = Union[int, str, "os.PathLike[str]", Mapping[str, Sequence[int]], Sequence[Sequence[int]], Any]


def _gpt_shaped(total: int, hidden: int) -> List[Tuple[int, ...]]:
    """The shapes of a GPT of about `total` params at width `hidden` (as
    zero-estimate --params does)."""
    h = max(1, hidden)
    layer = 12 * h * h + 13 * h
    layers = (total - 50257 * h - 2 * h) // layer
    if layers < 1:
        layers = max(0, total // (2 * layer))
    vocab = max(1, (total - layers * layer - 2 * h) // h)
    shapes: List[Tuple[int, ...]] = [(vocab, h)]
    for _ in range(layers):
        shapes += [(h,), (h,), (3 * h, h), (3 * h,), (h, h), (h,), (h,), (h,),
                   (4 * h, h), (4 * h,), (h, 4 * h), (h,)]
    return shapes + [(h,), (h,)]


class _Named:
    """Params with names, as an engine is given them (zero_estimate_memory_params)."""

    def __init__(self) -> None:
        self.names: List[str] = []
        self.shapes: List[List[int]] = []
        self.dtypes: List[Optional[DType]] = []  # None: the config's working dtype
        self.trainable: List[bool] = []
        self.use_muon: List[Optional[bool]] = []

    def add(self, name: str, shape: Sequence[int], dtype: Optional[DType] = None,
            trainable: bool = True, use_muon: Optional[bool] = None) -> None:
        self.names.append(str(name))
        self.shapes.append([int(d) for d in shape])
        self.dtypes.append(dtype)
        self.trainable.append(bool(trainable))
        self.use_muon.append(use_muon)


_SAFETENSORS_DTYPES = {"F32": DType.F32, "F16": DType.F16, "BF16": DType.BF16}


def _safetensors_params(path: str, out: _Named) -> None:
    """Names, shapes and dtypes from a .safetensors header or an index's shard files."""
    if path.endswith(".json"):
        with open(path, "r", encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        base = os.path.dirname(path)
        for s in shards:
            _safetensors_params(os.path.join(base, s), out)
        return
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    for k, v in header.items():
        if k != "__metadata__":
            out.add(k, v["shape"], _SAFETENSORS_DTYPES.get(v.get("dtype")))


def _torch_params(module: Any, out: _Named) -> None:
    """A torch module's params as zero.torch registers them: every one, by its
    name; frozen where ``requires_grad`` is off; Muon's half from a param's
    own ``use_muon`` attribute, else the runtime's rule; the working dtype."""
    for name, p in module.named_parameters():
        use_muon = getattr(p, "use_muon", None)
        out.add(name, tuple(p.shape), None, bool(p.requires_grad),
                None if use_muon is None else bool(use_muon))


def _named(params: Shapes) -> Optional[_Named]:
    """The named form of `params`, or None for a count or a list of shapes."""
    out = _Named()
    if isinstance(params, (str, os.PathLike)):
        _safetensors_params(os.fspath(params), out)
    elif hasattr(params, "named_parameters"):  # a torch module, on meta or not
        _torch_params(params, out)
    elif isinstance(params, Mapping):
        for name, shape in params.items():
            out.add(name, tuple(shape))
    else:
        return None
    return out


def _shapes(params: Shapes, hidden: int) -> List[Tuple[int, ...]]:
    if isinstance(params, int):
        return _gpt_shaped(params, hidden or max(64, round((params / 480) ** 0.5 / 64) * 64))
    return [tuple(s) for s in params]


def _working_dtype(cfg: Mapping[str, Any]) -> DType:
    """The engine's working dtype by DeepSpeed's keys (fp16, bf16 or its
    alias bfloat16, ``enabled``): the dtype zero.torch registers frozen
    params in. Trainable params are held in it whatever is passed."""
    def enabled(key: str) -> bool:
        section = cfg.get(key)
        return isinstance(section, Mapping) and section.get("enabled") is True
    if enabled("fp16"):
        return DType.F16
    if enabled("bf16") or enabled("bfloat16"):
        return DType.BF16
    return DType.F32


def estimate(params: Shapes, config: Any = None, *, ranks_per_node: int = 1, nodes: int = 1,
             gpu: bool = True, hidden: int = 0, frozen: Iterable[str] = (),
             use_muon: Optional[Mapping[str, bool]] = None) -> Dict[str, int]:
    """Bytes per rank an engine of `config` (a ds_config dict, path or JSON
    text; stage, precision, offload, bucket sizes, optimizer) would hold for
    `params`: a parameter count (a GPT-shaped model of that size, width
    `hidden`), a ``.safetensors`` file or index, a torch module (meta tensors
    are fine), a dict of name -> shape or a list of shapes. The fields of
    ``zero_memory_estimate`` (``zero._abi_tables.MEMORY_ESTIMATE_FIELDS``):
    zero_stats' categories plus device/host placement.

    Params with names (a file, a module, a dict) are estimated as an engine
    is given them (C ABI 1.16, ``zero_estimate_memory_params``): a module's
    params with ``requires_grad`` off, and the names in `frozen`, are frozen
    (held whole, no gradient or optimizer state); with optimizer Muon each
    param's half is `use_muon`'s entry for its name, else a torch param's own
    ``use_muon`` attribute, else DeepSpeed's rule (at least 2-D, no "embed"
    or "lm_head" in the name) -- the runtime's own decisions. A count or a
    list of shapes has no names: every param trainable, every 2-D one on
    Muon (C ABI 1.5, ``zero_estimate_memory``)."""
    cfg_dict = load_config(config) if config is not None else {}
    cfg = json.dumps(cfg_dict)
    named = _named(params)
    frozen_set = set(frozen)
    muon_of = dict(use_muon or {})
    if named is None:
        if frozen_set or muon_of:
            raise ValueError("estimate: frozen and use_muon name params; give a dict of "
                             "name -> shape, a .safetensors file or a torch module")
        shapes = _shapes(params, hidden)
        numel = [int(math.prod(s)) for s in shapes]
        ndim = [len(s) for s in shapes]
        raw = _zero_c.estimate_memory(cfg, numel, ndim, int(ranks_per_node), int(nodes),
                                      bool(gpu))
    else:
        unknown = (frozen_set | set(muon_of)) - set(named.names)
        if unknown:
            raise ValueError(f"estimate: no param named {sorted(unknown)[0]!r}")
        working = _working_dtype(cfg_dict)
        trainable = [t and n not in frozen_set for n, t in zip(named.names, named.trainable)]
        muon = [muon_of.get(n, m) for n, m in zip(named.names, named.use_muon)]
        raw = _zero_c.estimate_memory_params(
            cfg, named.names, named.shapes,
            [int(working if d is None else d) for d in named.dtypes], trainable,
            [0 if m is None else (1 if m else 2) for m in muon],  # zero_muon_use
            int(ranks_per_node), int(nodes), bool(gpu))
    return {name: int(raw[name]) for name, _, _ in MEMORY_ESTIMATE_FIELDS}
