"""Uneven inputs: DDP's ``Join`` for a ZeroTorchEngine. Inside the context a
rank whose data ran out shadows its peers' micro-steps until every rank's
has, instead of leaving them waiting in a collective.

Each micro-step starts (the first forward after a step) with a one-float
all-reduce of "still training" over the engine's communicator; a rank that
left its loop sits in ``__exit__`` contributing 0. While the sum is not 0 a
finished rank runs a shadow micro-step: the runtime calls of its own last
real micro-step replayed in their order (stage 3's gathers and releases,
so its peers' all-gathers pair up, and every grad_ready) with each gradient
handed in as zeros, then ``step()``. The zeros count in the average, as
DDP's ``Join(divide_by_initial_world_size=True)``: a step equals the one in
which the finished rank handed in zero gradients.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from ..errors import FailedPreconditionError

if TYPE_CHECKING:
    from .engine import ZeroTorchEngine

# The zero.Engine calls a micro-step makes that pair with the peers' (the
# collectives of stage 3 and of the gradient reduction), recorded by name.
_RECORDED = ("gather", "_gather_address", "_gather_into_address", "release", "grad_ready")


class Join:
    """``with zero.torch.Join(engine): for batch in loader: ...`` (or
    ``with engine.join(): ...``): ranks may run different numbers of
    micro-steps inside; each finished rank takes part in the others' with
    zero gradients until all are done, so every rank leaves the context
    after the same number of micro-steps (and optimizer steps).

    COLLECTIVE: every rank enters and leaves it. A finished rank replays its
    last micro-step inside the context, so it must have run one there
    (else an error on that rank, and its peers are stopped). Leaving between
    a forward and its ``step()`` is refused the same way. ``enable=False``
    (or one rank) makes it do nothing."""

    def __init__(self, engine: "ZeroTorchEngine", enable: bool = True) -> None:
        self._engine = engine
        self._enabled = bool(enable) and engine.zero.world_size > 1
        self._voted = False  # a forward of this micro-step voted already
        self._current: List[Tuple[Any, ...]] = []
        self._last: Optional[List[Tuple[Any, ...]]] = None
        self._scratch: Dict[int, torch.Tensor] = {}
        self._calls: Dict[str, Any] = {}  # the zero.Engine's own, unrecorded
        self._shadowing = False
        #: Shadow micro-steps this rank ran (after its data ended).
        self.shadow_steps = 0

    # ---- the context -------------------------------------------------

    def __enter__(self) -> "Join":
        if not self._enabled:
            return self
        e = self._engine
        e._check_open()
        if getattr(e, "_join", None) is not None:
            raise FailedPreconditionError("zero.torch Join: the engine is in a Join already")
        z = e.zero
        for name in _RECORDED:
            self._calls[name] = getattr(z, name)
            setattr(z, name, self._recorder(name, self._calls[name]))
        e._join = self
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if not self._enabled:
            return
        try:
            if exc_type is None:
                self._shadow_until_all_done()
        finally:
            self._uninstall()

    def _uninstall(self) -> None:
        z = self._engine.zero
        for name in _RECORDED:
            z.__dict__.pop(name, None)
        self._engine._join = None
        self._scratch.clear()

    def _recorder(self, name: str, call: Any) -> Any:
        current = self._current

        def recorded(*args: Any, **kwargs: Any) -> Any:
            current.append((name, args, kwargs))
            return call(*args, **kwargs)
        return recorded

    # ---- the engine's side -------------------------------------------

    def _on_forward(self) -> None:
        """The first forward of a micro-step: this rank still trains."""
        if not self._voted:
            self._voted = True
            self._vote(True)

    def _on_step(self) -> None:
        """A micro-step ended: its calls are what a shadow replays."""
        self._voted = False
        if not self._shadowing:
            self._last = list(self._current)
        self._current.clear()

    # ---- the finished rank's side ------------------------------------

    def _vote(self, training: bool) -> int:
        """COLLECTIVE. How many ranks still train this micro-step."""
        flag = np.array([1.0 if training else 0.0], np.float32)
        return int(round(float(self._engine.zero.comm.allreduce_sum(flag)[0])))

    def _refuse(self, why: str) -> None:
        """An error here and its peers stopped (they wait in a collective)."""
        e = self._engine
        rank = e.zero.comm.rank
        msg = f"zero.torch Join: rank {rank} {why}"
        if e.zero.comm.size > 1:
            e.zero.comm.abort(msg)
        raise FailedPreconditionError(msg)

    def _shadow_until_all_done(self) -> None:
        if self._voted or self._current:
            self._refuse("left the Join inside a micro-step (a forward, backward or "
                         "gradient without its step()); end the micro-step with step()")
        while self._vote(False) > 0:
            if self._last is None:
                self._refuse("ran out of data before its first micro-step inside the "
                             "Join: a finished rank replays its last micro-step")
            self._shadow_micro_step()

    def _shadow_micro_step(self) -> None:
        """This rank's last micro-step's runtime calls, in their order, with
        zero gradients and no forward, then step()."""
        e = self._engine
        calls = self._calls
        assert self._last is not None
        for name, args, kwargs in self._last:
            if name == "grad_ready":
                pid = args[0]
                e.zero._grad_buffer_address(pid)  # zero-filled: the gradient is 0
                calls["grad_ready"](pid)
            elif name == "_gather_into_address":
                pid, dtype, _, nbytes = args
                buf = self._scratch.get(pid)
                if buf is None or buf.numel() != nbytes:
                    buf = self._scratch[pid] = torch.empty(nbytes, dtype=torch.uint8)
                calls[name](pid, dtype, buf.data_ptr(), nbytes)
            else:  # gather, _gather_address, release: the same call again
                calls[name](*args, **kwargs)
        e.micro_steps += 1
        self._shadowing = True
        try:
            e.step()
        finally:
            self._shadowing = False
        self.shadow_steps += 1
