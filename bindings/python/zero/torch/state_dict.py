"""The model's state out of and into the runtime: state dicts, the 16-bit
model file, checkpoints, and ``GatheredParameters``."""
from __future__ import annotations

import os
import warnings
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from ..errors import UnimplementedError, ZeroError
from .launch import _host_comm, _owner_of

if TYPE_CHECKING:
    from .engine import ZeroTorchEngine


#: The file save_checkpoint writes client_state to, inside DIR/TAG.
CLIENT_STATE_FILE = "client_state.pt"


class _StateDicts:
    """ZeroTorchEngine's part: its state dicts, saving and loading."""

    def full_state_dict(self) -> Dict[str, torch.Tensor]:
        """COLLECTIVE (every rank calls it). Every param's full fp32 master weights,
        by name, as new tensors."""
        self._check_open()
        return {name: torch.from_numpy(self.zero.read_master(pid))
                for name, pid in zip(self._names, self._ids)}

    def save_pretrained(self, save_directory: str, max_shard_size: Any = "5GB",
                        dtype: Optional[torch.dtype] = None) -> List[str]:
        """COLLECTIVE. Writes the model in the Hugging Face layout for
        ``from_pretrained``: ``model.safetensors``, or when it exceeds
        ``max_shard_size`` ``model-0000N-of-0000M.safetensors`` with
        ``model.safetensors.index.json``; plus the module's ``config.json``
        (and ``generation_config.json``) when it has one. Params (the fp32
        master values, cast to ``dtype``, default the working dtype) and
        persistent buffers, tied params once under their first name, as HF
        saves them. Read one param at a time; rank 0 holds one shard file at
        most (hf_export.py). Returns the paths written (rank 0)."""
        self._check_open()
        from .hf_export import save_pretrained
        return save_pretrained(self, save_directory, max_shard_size, dtype)

    def gathered_for_generation(self) -> "GatheredParameters":
        """COLLECTIVE at stage 3 (entry and exit). A context in which every
        param is gathered once and held, so ``engine.module.generate(...)``
        (or any run of many forwards without backward) gathers each param
        once instead of once per forward (per token), as TRL's
        ``unwrap_model_for_generation`` does with DeepSpeed. Every rank holds
        the whole model's working copy meanwhile. Stages 0-2: nothing to do."""
        self._check_open()
        return GatheredParameters(list(self._params))

    def working_value(self, param: torch.nn.Parameter) -> torch.Tensor:
        """COLLECTIVE in stage 3. A new tensor holding ``param``'s full working
        copy (the runtime's dtype: fp16/bf16/fp32)."""
        self._check_open()
        i = self._index[id(param)]
        if self._gather_into:
            return self._gather_new(i)
        view = self.zero.gather(self._ids[i], writable=True)  # copied at once
        try:
            out = self._bridge.tensor(view, self.zero.dtype).clone()
            self._bridge.torch_done()
            return out
        finally:
            self.zero.release(self._ids[i])

    def save_16bit_model(self, save_dir: str,
                         save_filename: str = "pytorch_model.bin",
                         exclude_frozen_parameters: bool = False) -> bool:
        """COLLECTIVE. As DeepSpeed: rank 0 writes the module's state dict in
        the working dtype (fp16/bf16; fp32 if neither) to
        ``save_dir/save_filename`` with ``torch.save``. Stage 3 gathers every
        param, and only when ``zero_optimization.
        stage3_gather_16bit_weights_on_model_save`` is true; otherwise, as
        DeepSpeed, nothing is saved, a warning says why and it returns False."""
        self._check_open()
        path = os.path.join(os.fspath(save_dir), save_filename)
        if self.stage == 3 and not self.zero_gather_16bit_weights_on_model_save():
            warnings.warn(
                f"save_16bit_model: did not save the model {path} because "
                "`stage3_gather_16bit_weights_on_model_save` is False")
            return False
        state = self.module.state_dict()  # gathered by the state-dict hooks
        frozen = {n for n, t in zip(self._names, self._trainable) if not t}
        out = OrderedDict()
        for k, v in state.items():
            if exclude_frozen_parameters and k in frozen:
                continue
            out[k] = v.detach().clone() if self.stage < 3 and not self._upcast else v
        if self.global_rank == 0:
            os.makedirs(save_dir, exist_ok=True)
            torch.save(out, path + ".tmp")
            os.replace(path + ".tmp", path)
        self.zero.comm.barrier()
        return True

    def save_checkpoint(self, save_dir: str, tag: Optional[str] = None,
                        client_state: Optional[dict] = None,
                        save_latest: bool = True,
                        exclude_frozen_parameters: bool = False, *,
                        asynchronous: bool = False, keep_last: int = 0) -> bool:
        """COLLECTIVE. Saves the training state to ``save_dir/tag`` (default
        tag ``global_step{N}``, as DeepSpeed) and points ``save_dir/latest``
        at it (:meth:`zero.Engine.save`). Call it right after the
        :meth:`step` that ends an accumulation. ``client_state`` (any
        picklable dict) is written by rank 0 next to the runtime's files as
        ``client_state.pt``; the directory must be shared by all ranks.
        Returns True, as DeepSpeed does.

        ``asynchronous=True`` returns once this rank's state is copied; the
        runtime writes the files and publishes ``latest`` in the background
        while training goes on, and the next save, load,
        :meth:`wait_checkpoint` or close waits for it and raises its failure
        on every rank (docs/ARCHITECTURE.md, "Asynchronous checkpoints").
        ``keep_last=K`` keeps the K newest tags, deleting older ones only
        after the new one is published.

        ``exclude_frozen_parameters=True`` (as DeepSpeed, what ``transformers``
        passes for a PEFT model): the frozen params (``requires_grad=False``)
        are left out, so a LoRA/adapter checkpoint holds only the trainable
        params and their optimizer state. Load it with
        ``load_module_strict=False`` into an engine built on the same frozen
        base: the frozen params keep the values they were built with.

        A module with a Hugging Face ``config`` (``save_pretrained``) has it
        written beside the runtime's files (``config.json``,
        ``generation_config.json``; not with ``asynchronous=True``), where
        ``zero-ckpt export --hf`` finds it."""
        self._check_open()
        if not save_latest:
            raise UnimplementedError(
                "save_checkpoint(save_latest=False): the runtime always points "
                "DIR/latest at the tag it saved")
        if tag is None:
            tag = f"global_step{self.global_steps}"
        tag = str(tag)
        if asynchronous and client_state:
            raise UnimplementedError(
                "save_checkpoint(client_state=..., asynchronous=True): the "
                "tag is published in the background, so client_state.pt "
                "cannot be written beside it; save synchronously or keep "
                "client state elsewhere")
        self.zero.save(save_dir, tag, asynchronous=asynchronous, keep_last=keep_last,
                       exclude_frozen=bool(exclude_frozen_parameters))
        if asynchronous:
            return True
        tag_dir = os.path.join(os.fspath(save_dir), tag)
        if client_state and self.global_rank == 0:
            path = os.path.join(tag_dir, CLIENT_STATE_FILE)
            torch.save(dict(client_state), path + ".tmp")
            os.replace(path + ".tmp", path)
        if self.global_rank == 0:
            from .hf_export import save_hf_configs
            save_hf_configs(self.module, tag_dir)
        self.zero.comm.barrier()  # every rank returns once the file exists
        return True

    def wait_checkpoint(self) -> None:
        """COLLECTIVE. Waits for an asynchronous :meth:`save_checkpoint` in
        flight and raises its failure, on every rank."""
        self._check_open()
        self.zero.wait_checkpoint()

    def load_checkpoint(self, load_dir: str, tag: Optional[str] = None,
                        load_module_strict: bool = True,
                        load_optimizer_states: bool = True,
                        load_lr_scheduler_states: bool = True,
                        load_module_only: bool = False,
                        custom_load_fn: Any = None
                        ) -> Tuple[Optional[str], Optional[dict]]:
        """COLLECTIVE. Restores ``load_dir/tag`` (None: the tag named by
        ``load_dir/latest``), saved at any world size or stage, with steps and
        loss scale (:meth:`zero.Engine.load`). Call it after
        :func:`initialize` or right after the :meth:`step` that ends an
        accumulation. Returns ``(load_path, client_state)`` as DeepSpeed does:
        ``client_state`` is what :meth:`save_checkpoint` was given (``{}`` if
        nothing); ``(None, None)`` when ``tag`` is None and there is no
        ``latest`` file.

        ``load_module_only`` (or ``load_optimizer_states=False``) starts the
        optimizer moments at zero; ``load_module_strict=False`` lets params
        the checkpoint lacks keep their values. The learning-rate schedule
        comes from the config and the restored step, so
        ``load_lr_scheduler_states`` changes nothing.

        Stages 0-2: the module's params keep aliasing the runtime's working
        copy, which now holds the loaded values. Stage 3: params are gathered
        afresh at their next use. A corrupt checkpoint raises
        :class:`zero.DataLossError` naming the file; if the engine's state was
        partly overwritten it is unusable afterwards (make a new one).
        """
        self._check_open()
        if custom_load_fn is not None:
            raise UnimplementedError("load_checkpoint(custom_load_fn=...)")
        load_dir = os.fspath(load_dir)
        if tag is None:
            latest = os.path.join(load_dir, "latest")
            if not os.path.isfile(latest):
                warnings.warn(f"load_checkpoint: no checkpoint tag given and "
                              f"{latest} does not exist; nothing loaded")
                return None, None
            with open(latest, "r", encoding="utf-8") as f:
                tag = f.read().strip()
        tag = str(tag)
        # The runtime loads only while no param is gathered; in stages 0-2
        # params stay gathered for the engine's life, so release them for the
        # load and gather them again (the resident copy does not move).
        held = [i for i in range(len(self._params)) if self._gather_count[i] > 0]
        for i in held:
            self.zero.release(self._ids[i])
        try:
            self.zero.load(load_dir, tag,
                           load_optimizer_states=(load_optimizer_states and
                                                  not load_module_only),
                           allow_missing=not load_module_strict)
        except BaseException:
            for i in held:  # best effort: a broken engine refuses gathers
                try:
                    self._regather_resident(i)
                except ZeroError:
                    self._gather_count[i] = 0
            raise
        for i in held:
            self._regather_resident(i)
        stats = self.zero.stats()
        self.global_steps = int(stats["global_step"])
        self.micro_steps = self.global_steps * self.gradient_accumulation_steps
        self._handed = [False] * len(self._params)
        load_path = os.path.join(load_dir, tag)
        client_state: dict = {}
        client_file = os.path.join(load_path, CLIENT_STATE_FILE)
        if os.path.isfile(client_file):
            client_state = torch.load(client_file, map_location="cpu",
                                      weights_only=False)
        return load_path, client_state

    def _state_dict_value(self, p: torch.nn.Parameter) -> torch.Tensor:
        """What ``module.state_dict()`` holds for a managed param (zero's
        DeepSpeed layer gives DeepSpeed's stage-3 form, ds_compat.py)."""
        return self.working_value(p)

    def _install_state_dict_hooks(self) -> None:
        """``module.state_dict()`` holds the runtime's working values (stage
        3: gathered, so COLLECTIVE), never placeholders (or fp32 copies)."""
        owned = {id(m): [(n, p) for n, p in m._parameters.items()
                         if p is not None and id(p) in self._index]
                 for m in self.module.modules()}

        def hook(module, state_dict, prefix, local_metadata):
            if self._closed:
                return None
            for name, p in owned.get(id(module), ()):
                key = prefix + name
                if key in state_dict:
                    state_dict[key] = self._state_dict_value(p)
            return None

        for m in self.module.modules():
            if owned.get(id(m)):
                self._hooks.append(m._register_state_dict_hook(hook))


class GatheredParameters:
    """As ``deepspeed.zero.GatheredParameters``: within the context the
    given params hold their full working values (stage 3: gathered on entry,
    COLLECTIVE, every rank in the same order; released on exit). Stages 0-2
    params always hold them, so nothing happens.

    ``modifier_rank``: params may be written inside the context on that
    rank; on exit (COLLECTIVE) its values are broadcast and every param whose
    values changed is set in the runtime — fp32 master weights and working
    copies (zero.Engine.write_master) — so the change survives the next
    optimizer step. ``None``: read only; writes are not kept.""" 

    def __init__(self, params: Any, modifier_rank: Optional[int] = None,
                 fwd_module: Any = None, enabled: bool = True) -> None:
        if isinstance(params, torch.Tensor):
            params = [params]
        self.params = [p for p in (params or []) if p is not None]
        self.modifier_rank = modifier_rank
        self.enabled = enabled
        self._held: List[Tuple[ZeroTorchEngine, int]] = []

    def __enter__(self) -> None:
        if not self.enabled:
            return None
        owned = [o for o in (_owner_of(p) for p in self.params) if o is not None]
        self._owned = owned
        for e, i in owned:
            if e.stage == 3:
                e._gather_param(i)
                self._held.append((e, i))
        # What each param held on entry, to tell which ones were written.
        self._before = ([_full_values(e, i) for e, i in owned]
                        if self.modifier_rank is not None else [])
        return None

    def __exit__(self, *exc: Any) -> None:
        writes: List[Tuple[ZeroTorchEngine, int, np.ndarray]] = []
        if self.modifier_rank is not None and exc[0] is None:
            for (e, i), before in zip(self._owned, self._before):
                values = _full_values(e, i)
                if e.zero.comm.size > 1:
                    with _host_comm(e.zero.comm) as host_comm:
                        host_comm.broadcast(values, root=self.modifier_rank)
                # The same on every rank: values and `before` agree everywhere.
                if not np.array_equal(values, before):
                    writes.append((e, i, values))
        held, self._held = self._held, []
        for e, i in reversed(held):
            if not e._closed and e._gather_count[i] > 0:
                e._release_param(i)
        for e, i, values in writes:
            e._write_param(i, values)
            e._refresh_upcast()


def _full_values(e: "ZeroTorchEngine", i: int) -> np.ndarray:
    """Param i's full values as the module sees them (gathered at stage 3),
    as a new contiguous fp32 array."""
    return e._params[i].data.detach().to(torch.float32).cpu().contiguous().numpy().copy()
