"""Which ``deepspeed`` is active: zero's layer must never shadow a real
DeepSpeed silently. ``ZERO_DEEPSPEED=1`` chooses this layer; without it, a
real DeepSpeed elsewhere on ``sys.path`` makes the import ambiguous and it is
refused, naming both."""
from __future__ import annotations

import os
import sys

VERSION = "0.19.8+zero"  # the DeepSpeed release whose names it provides
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def real_deepspeed() -> str:
    """The directory of another ``deepspeed`` package on sys.path, or ''."""
    for entry in sys.path:
        base = os.path.abspath(entry or os.getcwd())
        if os.path.realpath(base) == os.path.realpath(_HERE):
            continue
        init = os.path.join(base, "deepspeed", "__init__.py")
        if os.path.isfile(init):
            return os.path.dirname(init)
    return ""


def _rank0() -> bool:
    for key in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        if key in os.environ:
            return os.environ[key] == "0"
    return True


def announce() -> None:
    choice = os.environ.get("ZERO_DEEPSPEED", "")
    real = real_deepspeed()
    if choice not in ("", "1"):
        raise ImportError(
            f"deepspeed: ZERO_DEEPSPEED={choice!r} does not choose zero's DeepSpeed layer, "
            f"yet {_HERE} is on sys.path ahead of any other deepspeed; remove it from "
            "PYTHONPATH to use the real DeepSpeed, or set ZERO_DEEPSPEED=1")
    if real and choice != "1":
        raise ImportError(
            f"deepspeed: ambiguous: zero's DeepSpeed layer ({_HERE}) is on sys.path and a real "
            f"DeepSpeed is installed ({real}). Set ZERO_DEEPSPEED=1 to run on zero, or remove "
            f"{_HERE} from PYTHONPATH to run on the real DeepSpeed")
    if _rank0():
        shadowed = (f"; the real DeepSpeed at {real} is not used" if real
                    else "; no real DeepSpeed is installed")
        print(f"[zero] deepspeed {VERSION}: zero's DeepSpeed compatibility layer is active "
              f"({_HERE}){shadowed}", file=sys.stderr, flush=True)
