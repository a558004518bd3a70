"""Activation checkpointing: the ``activation_checkpointing`` section of a
ds_config, applied by wrapping the model's repeated blocks."""
from __future__ import annotations

import functools
import warnings
from typing import Any, List, Optional, Tuple

import torch

from ..errors import InvalidArgumentError, UnimplementedError


#: ``activation_checkpointing`` keys of DeepSpeed's config and their
#: defaults; zero.torch reports the ones set otherwise (see
#: _ActivationCheckpointing).
_AC_DEEPSPEED_KEYS = {
    "partition_activations": False,
    "cpu_checkpointing": False,
    "contiguous_memory_optimization": False,
    "number_checkpoints": None,
    "synchronize_checkpoint_boundary": False,
    "profile": False,
}
#: zero's own key in that section: class names of the modules to checkpoint.
_AC_MODULES_KEY = "zero_checkpoint_modules"

_AC_WHY = {
    "partition_activations": "no model parallelism in zero.torch, so there is "
                             "no model-parallel group to partition the "
                             "checkpoints over",
    "cpu_checkpointing": "zero.torch models run on the CPU, so the checkpoints "
                         "are in host memory already",
    "contiguous_memory_optimization": "checkpoints are torch's own tensors, not "
                                      "copied into one buffer",
    "number_checkpoints": "only sizes the contiguous buffer",
    "synchronize_checkpoint_boundary": "no device streams to synchronize on the CPU",
    "profile": "no checkpoint timers",
}


def _checkpoint_supports_non_reentrant() -> bool:
    import inspect
    import torch.utils.checkpoint as ckpt
    try:
        return "use_reentrant" in inspect.signature(ckpt.checkpoint).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False


class _ActivationCheckpointing:
    """The ``activation_checkpointing`` section of a ds_config, as zero.torch
    applies it. DeepSpeed leaves checkpointing to the model code
    (``deepspeed.checkpointing.checkpoint(fn, *args)``); zero.torch instead
    wraps the model's repeated blocks when the section is present (and not
    ``"enabled": false``):

    * ``zero_checkpoint_modules`` (zero's own key; a list of class names):
      every module whose class name (``type(m).__name__``) is listed, the
      outermost only (a listed module inside another is left alone);
    * otherwise every child of every ``torch.nn.ModuleList`` that holds
      params (a transformer's layers), again the outermost only.

    A wrapped module's ``forward`` runs under torch's non-reentrant
    ``torch.utils.checkpoint.checkpoint`` (``use_reentrant=False``): its
    forward keeps no activations, and its backward runs the forward again
    (stage 3: the recomputation gathers the params again through the same
    module hooks) only while grad is enabled.
    """

    def __init__(self, section: Any) -> None:
        self.enabled = isinstance(section, dict) and section.get("enabled", True) is not False
        section = section if isinstance(section, dict) else {}
        names = section.get(_AC_MODULES_KEY)
        if names is not None and (not isinstance(names, list) or
                                  not all(isinstance(n, str) for n in names)):
            raise InvalidArgumentError(
                f"activation_checkpointing.{_AC_MODULES_KEY}: expected a list of "
                f"module class names, got {names!r}")
        self.module_names: Optional[List[str]] = names
        self.no_effect = [k for k, default in _AC_DEEPSPEED_KEYS.items()
                          if k in section and section[k] not in (default, "auto")
                          and not (default is False and section[k] is None)]

    def select(self, model: torch.nn.Module) -> List[Tuple[str, torch.nn.Module]]:
        """(name, module) of the modules to checkpoint, in registration order."""
        if self.module_names is not None:
            wanted = set(self.module_names)
            candidates = {id(m) for m in model.modules()
                          if type(m).__name__ in wanted}
        else:
            candidates = set()
            for m in model.modules():
                if isinstance(m, torch.nn.ModuleList):
                    candidates.update(id(c) for c in m.children()
                                      if next(c.parameters(), None) is not None)
        out: List[Tuple[str, torch.nn.Module]] = []

        def walk(prefix: str, m: torch.nn.Module) -> None:
            for name, child in m.named_children():
                full = f"{prefix}.{name}" if prefix else name
                if id(child) in candidates:
                    out.append((full, child))  # its descendants stay unwrapped
                else:
                    walk(full, child)

        if id(model) in candidates:
            return [("", model)]
        walk("", model)
        return out

    def warning(self) -> Optional[str]:
        if not self.no_effect:
            return None
        return ("zero.torch: activation_checkpointing: accepted without effect: " +
                "; ".join(f"{k} ({_AC_WHY[k]})" for k in self.no_effect))


def _checkpointed_forward(forward: Any) -> Any:
    """``forward`` run under torch's non-reentrant activation checkpoint
    while grad is enabled. The recomputation runs the whole forward: torch
    >= 2.1 otherwise stops it by an exception once the saved tensors are
    back, past the pre-forward hooks that gathered stage 3's params and
    before the post-forward hooks that release them."""
    from torch.utils import checkpoint as ckpt

    whole = getattr(ckpt, "set_checkpoint_early_stop", None)

    @functools.wraps(forward)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return forward(*args, **kwargs)
        if whole is None:
            return ckpt.checkpoint(forward, *args, use_reentrant=False, **kwargs)
        with whole(False):
            return ckpt.checkpoint(forward, *args, use_reentrant=False, **kwargs)

    wrapper._zero_checkpointed = True  # type: ignore[attr-defined]
    return wrapper


def _takes_use_cache(module: torch.nn.Module) -> bool:
    import inspect
    try:
        return "use_cache" in inspect.signature(module.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins
        return False


def _cache_off_forward(forward: Any) -> Any:
    """``forward`` called with ``use_cache=False`` while training with grad
    enabled, as a Hugging Face model does itself under its own gradient
    checkpointing: a checkpointed block that appends to a cache object
    (``DynamicCache``) would append again when its forward is recomputed."""

    @functools.wraps(forward)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        owner = getattr(forward, "__self__", None)
        training = owner.training if isinstance(owner, torch.nn.Module) else True
        if training and torch.is_grad_enabled():
            kwargs["use_cache"] = False
        return forward(*args, **kwargs)

    wrapper._zero_checkpointed = True  # type: ignore[attr-defined]
    return wrapper


class _CheckpointedModules:
    """ZeroTorchEngine's part: wrapping the selected modules' forward
    (undone by _ModuleHooks._remove_hooks)."""

    def _install_activation_checkpointing(self) -> None:
        """The ``activation_checkpointing`` section: wraps the selected
        modules' forward (see _ActivationCheckpointing). After the stage-3
        hooks, so a patched Linear forward is the one wrapped."""
        section = self._ac_section
        if section is None:
            return
        ac = _ActivationCheckpointing(section)
        if not ac.enabled:
            return
        msg = ac.warning()
        if msg and self.zero.rank == 0:
            warnings.warn(msg, stacklevel=5)
        if not _checkpoint_supports_non_reentrant():  # pragma: no cover
            raise UnimplementedError(
                "activation_checkpointing: this torch has no non-reentrant "
                "torch.utils.checkpoint (use_reentrant=False, torch >= 1.11), "
                "which zero.torch needs; remove the section or update torch")
        selected = ac.select(self.module)
        for name, module in selected:
            own = vars(module).get("forward")
            module.forward = _checkpointed_forward(module.forward)
            self._checkpointed.append((module, own))
            self.checkpointed_modules.append(name)
        # The outermost modules above a checkpointed one that take use_cache
        # (a Hugging Face model) run without a cache while training.
        inside = {id(m) for _, m in selected}
        for m in self._cache_owners(self.module, inside):
            own = vars(m).get("forward")
            m.forward = _cache_off_forward(m.forward)
            self._checkpointed.append((m, own))

    @staticmethod
    def _cache_owners(root: torch.nn.Module, selected: Any) -> List[torch.nn.Module]:
        out: List[torch.nn.Module] = []

        def walk(m: torch.nn.Module) -> None:
            if id(m) in selected:
                return
            if _takes_use_cache(m) and any(id(d) in selected for d in m.modules()):
                out.append(m)
                return
            for child in m.children():
                walk(child)

        walk(root)
        return out
