"""The module's params as the runtime's: registered (rank 0's values, or
init specs), placed on the runtime's storage (stages 0-2: its working copy;
stage 3: placeholders), written, refreshed after a step, and their
gradients handed in."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Set, Tuple

import numpy as np
import torch

from .. import _torch_bridge
from . import stage3
from .launch import _broadcast_from_rank0


class _ParamStorage:
    """ZeroTorchEngine's part: its params' registration and storage."""

    def _register_params(self, model: torch.nn.Module, trainable_set: Optional[Set[int]],
                         padding_rows: List[Tuple[torch.nn.Parameter, int]]) -> None:
        """Registers every param with the runtime (trainable or frozen) and
        finalizes it; the padding rows zeroed, ``pretrained`` loaded."""
        # Every rank starts from rank 0's values, as DeepSpeed's engine
        # broadcasts them (ranks seeded differently would otherwise train
        # different models and average their gradients). Meta params are
        # the same everywhere by construction (a spec is rank-independent).
        named = list(model.named_parameters())
        _broadcast_from_rank0([p for _, p in named if id(p) not in self._meta_new]
                              + list(model.buffers()), self.zero.comm)

        self._names: List[str] = []
        self._ids: List[int] = []
        self._index: Dict[int, int] = {}  # id(param) -> index in _params
        self._trainable: List[bool] = []
        for name, p in named:
            trainable = p.requires_grad and (
                trainable_set is None or id(p) in trainable_set)
            spec = self._meta_new.get(id(p))
            # Optimizer Muon: a param's own `use_muon` attribute, as
            # DeepSpeed's; without one the runtime applies DeepSpeed's rule.
            use_muon = getattr(p, "use_muon", None)
            use_muon = None if use_muon is None else bool(use_muon)
            if spec is not None:
                pid = self.zero.register_param(name, shape=tuple(p.shape),
                                               trainable=trainable, init=spec,
                                               use_muon=use_muon)
            else:
                init = p.detach().to(torch.float32).cpu().contiguous().numpy()
                pid = self.zero.register_param(name, init, trainable=trainable,
                                               use_muon=use_muon)
            self._index[id(p)] = len(self._params)
            self._names.append(name)
            self._params.append(p)
            self._orig_data.append(p.data)
            self._ids.append(pid)
            self._trainable.append(trainable)
        self.zero.finalize()
        self._write_meta_values(padding_rows)
        if self._pretrained is not None:
            self.zero.load_safetensors(os.fspath(self._pretrained))
        for p, t in zip(self._params, self._trainable):
            if not t:
                p.requires_grad_(False)

        self._gather_count = [0] * len(self._params)
        self._handed = [False] * len(self._params)

    def _make_param_buffers(self, overlap_grad_hooks: bool) -> None:
        """The per-param state the hooks use (gradient views, stage-3 pools
        and placeholders, fp16 copies)."""

        # Stage 3 on the host: Linear weights whose gradient goes straight
        # into the runtime's buffer (_hand_in_weight_grad). _uses: per param,
        # the graph edges into its AccumulateGrad node in the backward being
        # run; _direct: handed in that way in this backward.
        self._direct_grads = (self.stage == 3 and not self._upcast
                              and type(self._bridge) is _torch_bridge.Bridge
                              and overlap_grad_hooks)
        self._acc_index: Dict[int, int] = {}  # id(AccumulateGrad node) -> index
        self._no_uses = [0] * len(self._params)
        self._uses = self._no_uses
        self._direct = [False] * len(self._params)
        #: Weight gradients handed in without a torch gradient tensor.
        self.direct_weight_grads = 0
        self._module_params: Dict[int, List[int]] = {}
        # Stages 0-2 with fp16: the runtime's fp16 working copies, whose fp32
        # copies the params hold.
        self._views: List[Optional[torch.Tensor]] = [None] * len(self._params)
        # Stages 0-2: the resident gathered buffers (refreshed from after
        # each optimizer step when the bridge copies instead of aliasing).
        self._bufs: List[Any] = [None] * len(self._params)
        # Host memory: tensors over the runtime's gradient buffers and (stage
        # 3) gathered copies, kept per param and reused while the address
        # repeats (_torch_bridge.ViewCache); None on a device bridge.
        host = type(self._bridge) is _torch_bridge.Bridge
        n = len(self._params)
        self._grad_views = _torch_bridge.ViewCache(self.zero, self._bridge, n) if host else None
        self._gather_views = _torch_bridge.ViewCache(self.zero, self._bridge, n) if host else None
        # Stage 3 on the host: torch-owned buffers for the gathered copies,
        # reused while no tensor over them outlives a release.
        self._gather_pool = (_torch_bridge.GatherPool(n, self.compute_dtype)
                             if host and self.stage == 3 else None)
        # ... and the runtime gathers straight into them (gather_into, C ABI
        # 1.7) unless torch computes in another dtype (fp16 on the CPU).
        self._gather_into = self._gather_pool is not None and not self._upcast
        self._runtime_dtype = int(self.zero.dtype)
        # ... a unit's params in one runtime call per gather and release
        # (C ABI 1.15; stage3._Block). ZERO_TORCH_PER_PARAM_CALLS=1: one call
        # per param, as before (host_overhead_bench.py compares the two).
        self._batched_calls = (self._gather_into and
                               os.environ.get("ZERO_TORCH_PER_PARAM_CALLS", "") != "1")
        self._blocks: Dict[int, Any] = {}  # id(unit module) -> stage3._Block
        self._gather_element_size = torch.empty((), dtype=self.compute_dtype).element_size()
        # Stage 3: each param's placeholder, made once (a release is then
        # one ``p.data =``, no allocation), and its shape as a tuple (the
        # GatherPool's key, read at every gather).
        self._placeholders: List[Optional[torch.Tensor]] = [None] * n
        self._shapes: List[Tuple[int, ...]] = [tuple(p.shape) for p in self._params]

    def _place_params(self) -> None:
        """Stages 0-2: each param over its resident gathered copy; stage 3:
        each over its placeholder, with the module hooks installed."""

        if self.stage < 3:
            for i, p in enumerate(self._params):
                view = self.zero.gather(self._ids[i], writable=True)
                self._gather_count[i] = 1
                self._bufs[i] = view
                t = self._bridge.tensor(view, self.zero.dtype)
                if self._upcast:
                    self._views[i] = t
                    p.data = t.to(torch.float32)
                else:
                    p.data = t
        else:
            for i, p in enumerate(self._params):
                self._placeholders[i] = stage3._placeholder(p.shape, self.compute_dtype,
                                                     self._bridge.torch_device)
                p.data = self._placeholders[i]
            self._install_stage3_hooks()

    def _drop_originals(self) -> None:
        """Once set up: the module's own tensors, kept only to give them
        back if the setup fails, are freed (a full copy of the model)."""
        self._orig_data = []

    def _refresh_upcast(self) -> None:
        """Stages 0-2, after the runtime changed the working values: params
        that do not alias them take them (fp16 upcast copies; a bridge that
        copies, the stand-in). Nothing to do when params alias the runtime."""
        if self.stage == 3 or (self._bridge.aliases and not self._upcast):
            return
        with torch.no_grad():
            for i, p in enumerate(self._params):
                if not self._bridge.aliases and self._bufs[i] is not None:
                    t = self._bridge.tensor(self._bufs[i], self.zero.dtype)
                    if self._upcast:
                        self._views[i] = t
                    p.data.copy_(t)
                elif self._views[i] is not None:
                    p.data.copy_(self._views[i])

    def _regather_resident(self, i: int) -> None:
        """Stages 0-2: gathers param i again after a release; its storage is
        the runtime's resident copy, which keeps its address."""
        view = self.zero.gather(self._ids[i], writable=True)
        self._bufs[i] = view
        p = self._params[i]
        if self._upcast or not self._bridge.aliases:
            t = self._bridge.tensor(view, self.zero.dtype)
            if self._upcast:
                self._views[i] = t
            with torch.no_grad():
                p.data.copy_(t)
        elif p.data.data_ptr() != self._bridge.address(view):  # not expected; stay correct
            p.data = self._bridge.tensor(view, self.zero.dtype)

    def _write_param(self, i: int, values: np.ndarray) -> None:
        """Sets param i to ``values`` (full fp32, the same on every rank)
        wherever the runtime holds it: the fp32 master and the working copies
        (zero.Engine.write_master). Stages 0-2 release the resident gather
        for the write and take it again (same address)."""
        resident = self.stage < 3 and self._gather_count[i] > 0
        if resident:
            self.zero.release(self._ids[i])
        try:
            self.zero.write_master(self._ids[i], values)
        finally:
            if resident:
                self._regather_resident(i)

    def _hand_in(self, i: int) -> None:
        """Copies param i's gradient (if any) into the runtime and frees it."""
        p = self._params[i]
        pid = self._ids[i]
        grad = p.grad
        views = self._grad_views
        if views is not None:  # host: the cached tensor over the buffer
            # The steady state, once per param and micro-step: the binding's
            # calls directly (zero.Engine's checks are for ids from users;
            # these are the engine's own), the view cache's hit inline.
            # Inside a Join grad_ready goes through zero.Engine, where the
            # Join records it (join.py).
            z = self.zero
            address = z._c.grad_buffer(pid)
            slot = views.slots[i]
            t = slot[0][1] if slot and slot[0][0] == address else views.tensor(i, pid, address)
            if grad is not None:
                if grad.requires_grad:  # a create_graph backward: copy untracked
                    with torch.no_grad():
                        t.copy_(grad)
                else:  # nothing to track: no grad-mode switch per param
                    t.copy_(grad)
                p.grad = None
            if self._join is None:
                z._c.grad_ready(pid)
            else:
                z.grad_ready(pid)
            self._handed[i] = True
            return
        buf = self.zero.grad_buffer(pid)
        if grad is not None:
            self._bridge.write(buf, self.zero.dtype, grad)
            p.grad = None
            self._bridge.torch_done()  # the copy lands before the runtime reads it
        self.zero.grad_ready(pid)
        self._handed[i] = True
