"""Checkpoint files without an engine: export to safetensors, reshard.

Saving and loading are :meth:`zero.Engine.save` and :meth:`zero.Engine.load`
(collective, on a live engine); a checkpoint is the directory ``DIR/TAG``
written by them, with ``DIR/latest`` naming the newest tag.
"""
from __future__ import annotations

import os
from typing import Optional, Union

from . import _zero_c
from .dtypes import DType
from .engine import PathLike
from .progress import ProgressArg, Reporter


def export_safetensors(dir: PathLike, tag: Optional[str], out_path: PathLike,
                       dtype: Union[str, DType] = "fp32", *,
                       progress: ProgressArg = None) -> None:
    """Writes every param of checkpoint ``dir/tag`` (None: the tag
    ``dir/latest`` names) as one safetensors file at ``out_path``: the fp32
    master values, or rounded to ``dtype`` (``"fp32"``, ``"fp16"``,
    ``"bf16"`` or a :class:`DType`). Needs no engine or communicator.

    A missing checkpoint raises :class:`zero.NotFoundError`, a corrupt one
    :class:`zero.DataLossError` naming the file. ``progress``: see
    :mod:`zero.progress` (a cancelled export leaves nothing at ``out_path``).
    """
    with Reporter(progress) as r:
        _zero_c.export_safetensors(os.fspath(dir), None if tag is None else str(tag),
                                   os.fspath(out_path), int(DType.parse(dtype)), r.callback)


def reshard(dir: PathLike, tag: Optional[str], out_dir: PathLike, world: int, *,
            progress: ProgressArg = None) -> None:
    """Rewrites checkpoint ``dir/tag`` (None: the tag ``dir/latest`` names)
    as ``out_dir/tag`` for ``world`` ranks, cut as an engine of that world
    lays its shards out, so each rank of the new run reads only its own file
    (loading reshards by itself; this does it ahead of time, as
    ``zero-ckpt reshard``). Needs no engine. ``progress``: see
    :mod:`zero.progress`."""
    with Reporter(progress) as r:
        _zero_c.reshard(os.fspath(dir), None if tag is None else str(tag),
                        os.fspath(out_dir), int(world), r.callback)
