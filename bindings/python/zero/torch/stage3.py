"""Stage 3's param lifecycle: placeholders for released params, gathers
into torch-owned copies (GatherPool buffers on the host) and releases, and
Linear weight gradients computed straight into the runtime's buffer."""
from __future__ import annotations

from typing import Any, Sequence

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
        # The host's steady state, the whole module in one loop over bound
        # locals (_gather_param's first branch, param by param in order):
        # twice per module and step, so its per-param Python is the
        # host overhead that stage 3 adds.
        counts, ids, params, shapes = (self._gather_count, self._ids, self._params,
                                       self._shapes)
        pool, dtype = self._gather_pool, self._runtime_dtype
        # Inside a Join the runtime calls go through zero.Engine, where the
        # Join records them for its shadow micro-steps (join.py).
        gather_into = (self.zero._c.gather_into if getattr(self, "_join", None) is None
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

    def _release_module(self, module: torch.nn.Module, backward: bool = False) -> None:
        idx = self._module_params.get(id(module))
        if not idx:
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
