"""zero's DeepSpeed compatibility layer: the ``deepspeed`` import name backed
by zero.torch, so that HF ``Trainer(args=TrainingArguments(deepspeed=...))``
and ``accelerate`` with a DeepSpeedPlugin run unchanged on zero.

Opt in with ``ZERO_DEEPSPEED=1`` (tools/install_deepspeed_compat.sh puts a
``.pth`` hook in the interpreter's site-packages that then puts this
directory first on ``sys.path``). Importing it prints which ``deepspeed``
is active; with a real DeepSpeed also installed and no ``ZERO_DEEPSPEED=1``
the import is refused as ambiguous (docs/DEEPSPEED_COMPAT.md, "The deepspeed
import name")."""
from __future__ import annotations

import os as _os
import sys as _sys

from . import _selection

_selection.announce()

import torch as _torch  # noqa: E402

from zero.torch import GatheredParameters as _GatheredParameters  # noqa: E402,F401
from zero.torch.ds_compat import DeepSpeedCompatEngine as DeepSpeedEngine  # noqa: E402
from zero.torch.ds_compat import install_stage3_param_attributes as _install_attrs  # noqa: E402

from . import comm, zero  # noqa: E402
from .comm import init_distributed  # noqa: E402
from ._initialize import add_config_arguments, initialize, tp_model_init  # noqa: E402
from . import accelerator, checkpoint, ops, runtime, utils  # noqa: E402

__version__ = _selection.VERSION
__version_major__, __version_minor__, __version_patch__ = 0, 19, 8
__git_hash__ = "zero"
__git_branch__ = "zero"

_install_attrs()

__all__ = ["initialize", "init_distributed", "tp_model_init", "add_config_arguments",
           "DeepSpeedEngine", "comm", "zero", "ops", "utils", "checkpoint", "runtime",
           "accelerator", "__version__"]
