"""Stage 3's param lifecycle: placeholders for released params, gathers
into torch-owned copies (GatherPool buffers on the host) and releases, and
Linear weight gradients computed straight into the runtime's buffer."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

import numpy as np
import torch

from .launch import _owner_of


def _placeholder(shape: Sequence[int], dtype: torch.dtype,
                 device: Any = "cpu") -> torch.Tensor:
    """A released stage-3 param: full shape, one element of storage, NaN
    (a result computed from it cannot pass for a real one)."""
    return torch.full((), float("nan"), dtype=dtype, device=device).expand(tuple(shape))

class _Zero3Linear(torch.autograd.Function):
    """F.linear that saves the weight *parameter* rather than a view of its
    current storage (as DeepSpeed's LinearFunctionForZeroStage3 does), so a
    stage-3 weight's gathered copy dies when the module releases it and the
    backward reads the copy gathered again for it."""

    @staticmethod
    def forward(ctx, input, weight, bias):  # type: ignore[override]
        ctx.save_for_backward(input, weight, bias)
        return torch.nn.functional.linear(input, weight, bias)

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        input, weight, bias = ctx.saved_tensors
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = grad_out.matmul(weight)
        g2 = grad_out.reshape(-1, grad_out.shape[-1])
        if ctx.needs_input_grad[1]:
            x2 = input.reshape(-1, input.shape[-1])
            if not _hand_in_weight_grad(weight, g2, x2):
                grad_weight = g2.t().mm(x2)
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = g2.sum(0)
        return grad_input, grad_weight, grad_bias


def _zero3_linear_forward(self: torch.nn.Linear, input: torch.Tensor) -> torch.Tensor:
    return _Zero3Linear.apply(input, self.weight, self.bias)


def _hand_in_weight_grad(weight: torch.Tensor, g2: torch.Tensor, x2: torch.Tensor) -> bool:
    """Stage 3 on the host: a Linear weight's gradient ``g2.t() @ x2``
    computed straight into the runtime's gradient buffer and handed in, so
    torch allocates no gradient tensor and nothing is copied.
    Only for a weight with exactly one edge into its AccumulateGrad node in
    the graph being run (ZeroTorchEngine._count_grad_edges): this Linear's,
    so autograd has no other gradient to add to it. False: the caller computes it
    as usual (autograd's AccumulateGrad and the grad hook hand it in)."""
    owner = _owner_of(weight)
    if owner is None:
        return False
    e, i = owner
    if (not e._direct_grads or e._uses[i] != 1 or e._handed[i]
            or not e._trainable[i] or e._closed):
        return False
    if not (g2.dtype == x2.dtype == e.compute_dtype):  # autocast, say: as usual
        return False
    pid = e._ids[i]
    buf = e._grad_views.tensor(i, pid, e.zero._grad_buffer_address(pid))
    torch.mm(g2.t(), x2, out=buf)
    e._handed[i] = True
    e._direct[i] = True
    e.zero.grad_ready(pid)
    e.direct_weight_grads += 1
    return True


class _Block:
    """A gather unit's params as the runtime's batched calls take them
    (zero_engine_gather_into_many / zero_engine_release_many, C ABI 1.15):
    their ids, sizes and (filled at each gather) destinations in arrays made
    once, so a module's gather and release are one call each with no Python
    object per param or per call beyond the pool's buffers. Rebuilt when the
    unit's list grows (an external param joins it)."""

    __slots__ = ("n", "ids", "dsts", "nbytes", "ids_addr", "dsts_addr", "bytes_addr",
                 "taken")

    def __init__(self, idx: List[int], ids: List[int], shapes: List[tuple],
                 element_size: int) -> None:
        self.n = len(idx)
        self.ids = np.array([ids[i] for i in idx], dtype=np.int32)
        self.nbytes = np.array([int(np.prod(shapes[i], dtype=np.int64)) * element_size
                                for i in idx], dtype=np.uintp)
        self.dsts = np.zeros(self.n, dtype=np.uintp)
        self.ids_addr = int(self.ids.ctypes.data)
        self.dsts_addr = int(self.dsts.ctypes.data)
        self.bytes_addr = int(self.nbytes.ctypes.data)
        #: Per entry during a gather: the pool's tensor a first gather took.
        self.taken: List[Optional[torch.Tensor]] = [None] * self.n


class _Stage3Params:
    """ZeroTorchEngine's part: gathering and releasing stage-3 params."""

    def _gather_new(self, i: int) -> torch.Tensor:
        """Stage 3 on the host: param i's working copy gathered into a new
        tensor of the runtime's dtype (gather_into; a plain gather is refused
        while a module holds the param in a GatherPool buffer)."""
        out = torch.empty(tuple(self._params[i].shape), dtype=self.dtype)
        self.zero._gather_into_address(self._ids[i], self._runtime_dtype, out.data_ptr(),
                                       out.numel() * out.element_size())
        self.zero.release(self._ids[i])
        return out

    def _gather_param(self, i: int) -> None:
        if self._gather_into:  # host: the runtime writes into the pool's buffer
            pid = self._ids[i]
            if self._gather_count[i] == 0:
                t, address, nbytes = self._gather_pool.take(i, tuple(self._params[i].shape))
                try:
                    self.zero._gather_into_address(pid, self._runtime_dtype, address, nbytes)
                except BaseException:
                    self._gather_pool.give_back(i)
                    raise
                self._gather_count[i] = 1
                self._params[i].data = t
            else:
                # Nested: a gather of the runtime's count, into the buffer
                # it already wrote (nothing is copied).
                address, nbytes = self._gather_pool.held(i)
                self.zero._gather_into_address(pid, self._runtime_dtype, address, nbytes)
                self._gather_count[i] += 1
            return
        if self._gather_views is not None:  # host: no view object per gather
            pid = self._ids[i]
            address = self.zero._gather_address(pid)
            self._gather_count[i] += 1
            if self._gather_count[i] == 1:
                # A torch-owned copy: autograd may keep views of it (its
                # buffer is reused only once none does, see GatherPool).
                self._params[i].data = self._gather_pool.copy(
                    i, self._gather_views.tensor(i, pid, address))
            return
        view = self.zero.gather(self._ids[i], writable=True)
        self._gather_count[i] += 1
        if self._gather_count[i] == 1:
            # A torch-owned copy: autograd may keep views of it.
            self._params[i].data = self._bridge.tensor(view, self.zero.dtype).to(
                self.compute_dtype, copy=True)
            self._bridge.torch_done()  # copied before the buffer is released

    def _gather_module(self, module: torch.nn.Module, backward: bool = False) -> None:
        idx = self._module_params.get(id(module))
        if not idx:
            return
        if not self._gather_into:
            for i in idx:
                self._gather_param(i)
            return
        # Inside a Join the runtime calls go through zero.Engine, where the
        # Join records them for its shadow micro-steps (join.py).
        joined = getattr(self, "_join", None) is not None
        if self._batched_calls and not joined:
            self._gather_block(self._block_of(id(module), idx), idx)
            return
        # One call per param: the host's steady state, the whole module in
        # one loop over bound locals (_gather_param's first branch, param by
        # param in order).
        counts, ids, params, shapes = (self._gather_count, self._ids, self._params,
                                       self._shapes)
        pool, dtype = self._gather_pool, self._runtime_dtype
        gather_into = (self.zero._c.gather_into if not joined
                       else self.zero._gather_into_address)
        for i in idx:
            if counts[i] == 0:
                t, address, nbytes = pool.take(i, shapes[i])
                try:
                    gather_into(ids[i], dtype, address, nbytes)
                except BaseException:
                    pool.give_back(i)
                    raise
                counts[i] = 1
                params[i].data = t
            else:
                self._gather_param(i)

    def _block_of(self, key: int, idx: List[int]) -> _Block:
        """The _Block of the unit whose id() is ``key`` (params ``idx``)."""
        block = self._blocks.get(key)
        if block is None or block.n != len(idx):
            block = _Block(idx, self._ids, self._shapes, self._gather_element_size)
            self._blocks[key] = block
        return block

    def _gather_block(self, block: _Block, idx: List[int]) -> None:
        """The host's steady state: a unit's params gathered by one runtime
        call (every rank gathers the same list in the same order, as the
        single calls did). A param's first gather takes a pool buffer; a
        nested one (held already, or named twice) is written again into the
        buffer it holds, as _gather_param does."""
        counts, params, shapes = self._gather_count, self._params, self._shapes
        pool, dsts, taken = self._gather_pool, block.dsts, block.taken
        k = 0
        try:
            for i in idx:
                n = counts[i]
                if n == 0:
                    t, dsts[k], _ = pool.take(i, shapes[i])
                    taken[k] = t
                else:
                    dsts[k] = pool.held(i)[0]
                counts[i] = n + 1
                k += 1
            self.zero._c.gather_into_many(block.ids_addr, block.n, self._runtime_dtype,
                                          block.dsts_addr, block.bytes_addr)
        except BaseException:
            # The runtime gathered none of the list: every count and buffer
            # taken above goes back.
            for j in range(k):
                i = idx[j]
                counts[i] -= 1
                if taken[j] is not None:
                    taken[j] = None
                    pool.give_back(i)
            raise
        for j, i in enumerate(idx):
            t = taken[j]
            if t is not None:
                taken[j] = None
                params[i].data = t

    def _release_module(self, module: torch.nn.Module, backward: bool = False) -> None:
        idx = self._module_params.get(id(module))
        if not idx:
            return
        if self._batched_calls and getattr(self, "_join", None) is None:
            if self._release_if_held(id(module), idx):
                return
        # As _release_param for each gathered param, in one loop (the guard
        # stood back once for the module).
        counts, ids, params, holders = (self._gather_count, self._ids, self._params,
                                        self._placeholders)
        pool = self._gather_pool
        release = (self.zero._c.release if getattr(self, "_join", None) is None
                   else self.zero.release)
        self._busy += 1
        try:
            for i in idx:
                n = counts[i]
                if n <= 0:
                    continue
                counts[i] = n - 1
                release(ids[i])
                if n == 1:
                    params[i].data = holders[i]
                    if pool is not None:
                        pool.give_back(i)
        finally:
            self._busy -= 1

    def _release_if_held(self, key: int, idx: List[int]) -> bool:
        """_release_module's steady state: when every param of the unit
        (id() ``key``) is gathered, one runtime call releases them all (or,
        failing, none), then each one's last release puts its placeholder
        back. False: some param is not gathered; nothing was done."""
        # Counted down as checked (a param the list names twice must be
        # held twice), and back up if any is not held or the call fails.
        counts = self._gather_count
        k = 0
        for i in idx:
            if counts[i] <= 0:
                break
            counts[i] -= 1
            k += 1
        try:
            if k < len(idx):
                return False
            block = self._block_of(key, idx)
            self.zero._c.release_many(block.ids_addr, block.n)
            k = 0
        finally:
            for j in range(k):
                counts[idx[j]] += 1
        params, holders, pool = self._params, self._placeholders, self._gather_pool
        self._busy += 1
        try:
            for i in idx:
                if counts[i] == 0:
                    params[i].data = holders[i]
                    pool.give_back(i)
        finally:
            self._busy -= 1
        return True

    def _release_leftovers(self) -> None:
        """After a backward: what the hooks left gathered (the modules whose
        inputs needed no gradient never ran the _ModuleBackward around
        them), a unit at a time where it is held whole, else param by
        param, until nothing is."""
        if self._batched_calls and getattr(self, "_join", None) is None:
            for key, idx in self._module_params.items():
                if idx:
                    self._release_if_held(key, idx)
        for i in range(len(self._params)):
            while self._gather_count[i] > 0:
                self._release_param(i)

    def _release_param(self, i: int) -> None:
        self._gather_count[i] -= 1
        self.zero.release(self._ids[i])
        if self._gather_count[i] == 0:
            p = self._params[i]
            self._busy += 1
            try:
                p.data = self._placeholders[i]
            finally:
                self._busy -= 1
            if self._gather_pool is not None:
                self._gather_pool.give_back(i)
