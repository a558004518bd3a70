"""``engine.save_pretrained(dir)``: the Hugging Face layout (``config.json``,
``model.safetensors`` or ``model-0000N-of-0000M.safetensors`` with
``model.safetensors.index.json``) written from the runtime's shards. Params
are read one at a time (``zero.Engine.read_master``, collective) and only
rank 0 keeps them, until a shard file is full: its peak host memory is one
shard file, not the model."""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from ..errors import InvalidArgumentError

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"

_UNITS = {"KB": 10 ** 3, "MB": 10 ** 6, "GB": 10 ** 9, "KIB": 2 ** 10,
          "MIB": 2 ** 20, "GIB": 2 ** 30, "B": 1}


def parse_size(size: Any) -> int:
    """``"5GB"``, ``"200MB"``, ``"10KiB"`` or a byte count, as HF's
    ``max_shard_size``."""
    if isinstance(size, int):
        return size
    text = str(size).strip().upper()
    for unit in sorted(_UNITS, key=len, reverse=True):
        if text.endswith(unit):
            return int(float(text[:-len(unit)]) * _UNITS[unit])
    raise InvalidArgumentError(f"save_pretrained: max_shard_size {size!r}: expected "
                               "bytes or a size such as \"5GB\"")


def plan_shards(sizes: List[Tuple[str, int]], limit: int) -> List[List[str]]:
    """Names in order, cut into files of at most ``limit`` bytes (a larger
    tensor gets a file of its own), as HF cuts them."""
    files: List[List[str]] = [[]]
    used = 0
    for name, nbytes in sizes:
        if files[-1] and used + nbytes > limit:
            files.append([])
            used = 0
        files[-1].append(name)
        used += nbytes
    return files


def persistent_buffers(module: torch.nn.Module) -> List[Tuple[str, torch.Tensor]]:
    out = []
    seen = set()
    for mname, m in module.named_modules():
        for key, b in m._buffers.items():
            if b is None or key in m._non_persistent_buffers_set or id(b) in seen:
                continue
            seen.add(id(b))
            out.append((f"{mname}.{key}" if mname else key, b))
    return out


def save_hf_configs(module: torch.nn.Module, out_dir: str) -> None:
    """``config.json`` and ``generation_config.json`` of a Hugging Face
    module into ``out_dir`` (nothing for another module)."""
    for attr in ("config", "generation_config"):
        cfg = getattr(module, attr, None)
        if cfg is not None and hasattr(cfg, "save_pretrained"):
            cfg.save_pretrained(out_dir)


def save_pretrained(engine: Any, save_directory: str, max_shard_size: Any = "5GB",
                    dtype: Optional[torch.dtype] = None) -> List[str]:
    """COLLECTIVE. See ZeroTorchEngine.save_pretrained; returns the files
    written (rank 0; [] elsewhere)."""
    from safetensors.torch import save_file

    dtype = engine.dtype if dtype is None else dtype
    limit = parse_size(max_shard_size)
    item = torch.empty((), dtype=dtype).element_size()
    buffers = persistent_buffers(engine.module)
    sizes = [(n, int(np.prod(engine._params[i].shape, dtype=np.int64)) * item)
             for i, n in enumerate(engine._names)]
    sizes += [(n, b.numel() * b.element_size()) for n, b in buffers]
    files = plan_shards(sizes, limit)
    if len(files) == 1:
        names = [SINGLE_FILE]
    else:
        names = [f"model-{k + 1:05d}-of-{len(files):05d}.safetensors"
                 for k in range(len(files))]
    where = {n: names[k] for k, group in enumerate(files) for n in group}
    rank0 = engine.global_rank == 0
    out_dir = os.fspath(save_directory)
    if rank0:
        os.makedirs(out_dir, exist_ok=True)
    index = {n: i for i, n in enumerate(engine._names)}
    buffer_of = dict(buffers)
    written: List[str] = []
    for k, group in enumerate(files):
        tensors: Dict[str, torch.Tensor] = {}
        for n in group:
            if n in buffer_of:
                value = buffer_of[n].detach().to("cpu")
            else:  # collective: every rank reads it, rank 0 keeps it
                value = torch.from_numpy(engine.zero.read_master(engine._ids[index[n]]))
            if rank0:
                tensors[n] = value.to(dtype).contiguous()
            del value
        if rank0:
            path = os.path.join(out_dir, names[k])
            save_file(tensors, path + ".tmp", metadata={"format": "pt"})
            os.replace(path + ".tmp", path)
            written.append(path)
        tensors.clear()
    if rank0:
        if len(names) > 1:
            total = sum(b for _, b in sizes)
            with open(os.path.join(out_dir, INDEX_FILE), "w", encoding="utf-8") as f:
                json.dump({"metadata": {"total_size": total}, "weight_map": where},
                          f, indent=2, sort_keys=True)
            written.append(os.path.join(out_dir, INDEX_FILE))
        save_hf_configs(engine.module, out_dir)
    engine.zero.comm.barrier()  # every rank returns once the files exist
    return written
