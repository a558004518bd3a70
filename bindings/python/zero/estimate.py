"""zero.estimate: memory per rank before launching (the C ABI's
zero_estimate_memory, the engine's own allocation rules; docs/ARCHITECTURE.md,
"Memory estimator"). The command-line form is ``zero-estimate``."""
from __future__ import annotations

import json
import math
import os
import struct
from typing import Any, Dict, List, Mapping, Sequence, Tuple, Union

from . import _zero_c
from ._abi_tables import MEMORY_ESTIMATE_FIELDS
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


def _safetensors_shapes(path: str) -> List[Tuple[int, ...]]:
    """Shapes from a .safetensors header or an index's shard files."""
    if path.endswith(".json"):
        with open(path, "r", encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        base = os.path.dirname(path)
        out: List[Tuple[int, ...]] = []
        for s in shards:
            out += _safetensors_shapes(os.path.join(base, s))
        return out
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return [tuple(v["shape"]) for k, v in header.items() if k != "__metadata__"]


def _shapes(params: Shapes, hidden: int) -> List[Tuple[int, ...]]:
    if isinstance(params, int):
        return _gpt_shaped(params, hidden or max(64, round((params / 480) ** 0.5 / 64) * 64))
    if isinstance(params, (str, os.PathLike)):
        return _safetensors_shapes(os.fspath(params))
    if hasattr(params, "parameters"):  # a torch module, on meta or not
        return [tuple(p.shape) for p in params.parameters() if p.requires_grad]
    if isinstance(params, Mapping):
        return [tuple(s) for s in params.values()]
    return [tuple(s) for s in params]


def estimate(params: Shapes, config: Any = None, *, ranks_per_node: int = 1, nodes: int = 1,
             gpu: bool = True, hidden: int = 0) -> Dict[str, int]:
    """Bytes per rank an engine of `config` (a ds_config dict, path or JSON
    text; stage, precision, offload, bucket sizes) would hold for `params`:
    a parameter count (a GPT-shaped model of that size, width `hidden`), a
    ``.safetensors`` file or index, a torch module (meta tensors are fine),
    a dict of name -> shape or a list of shapes. The fields of
    ``zero_memory_estimate`` (``zero._abi_tables.MEMORY_ESTIMATE_FIELDS``):
    zero_stats' categories plus device/host placement."""
    cfg = json.dumps(load_config(config) if config is not None else {})
    shapes = _shapes(params, hidden)
    numel = [int(math.prod(s)) for s in shapes]
    ndim = [len(s) for s in shapes]
    raw = _zero_c.estimate_memory(cfg, numel, ndim, int(ranks_per_node), int(nodes), bool(gpu))
    return {name: int(raw[name]) for name, _, _ in MEMORY_ESTIMATE_FIELDS}
