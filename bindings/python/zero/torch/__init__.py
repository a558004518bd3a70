"""zero.torch: a DeepSpeed-shaped engine for PyTorch modules.

::

    engine, optimizer, _, lr_scheduler = zero.torch.initialize(
        model=model, config="ds_config.json")          # launched by mpirun
    for batch, target in data:
        loss = loss_fn(engine(batch), target)
        engine.backward(loss)
        engine.step()

(``engine = zero.torch.initialize(model, ds_config)``, the short form with a
module first, returns the engine alone.)

The runtime owns the model state. Stages 0-2: every param's storage *is* the
runtime's working copy (``param.data = torch.from_numpy(view)``, no copy);
the optimizer updates it in place in :meth:`ZeroTorchEngine.step`. Stage 3:
a released param is a zero-stride placeholder of its full shape (one
element of memory, NaN, so that a value computed from it cannot pass for a
real one); forward pre-hooks gather a module's own params, forward hooks
release them, and autograd functions wrapped around the module's outputs and
inputs gather them again for its backward and release them after.
The gathered values are copied into torch-owned tensors in stage 3, because
autograd may save views of a param (``weight.t()`` in ``F.linear``) that must
stay valid after the runtime frees its gathered copy; ``torch.nn.Linear``
modules get a linear function that saves the parameter itself instead (as
DeepSpeed does), so their copies die at release rather than living until
backward. On the CPU the copies go into torch-owned buffers reused from one
gather to the next (_torch_bridge.GatherPool: no fresh pages per gather),
which the runtime all-gathers into directly (``gather_into``, C ABI 1.7: no
copy out of its own buffer; prefetched params are copied from their
prefetch buffer once; fp16, computed in fp32 on the CPU, is copied and
cast as before); a
buffer that a tensor still references at release (a saved view) is left to
that tensor and never written again.
Stage 3 on the CPU, gradients: a Linear weight whose only gradient is its
Linear's (one edge into its AccumulateGrad node, counted by a walk of the
graph before backward) gets it computed by the Linear's backward straight
into the runtime's gradient buffer and handed in there; every other
gradient is handed in by a hook on its AccumulateGrad node, after autograd
summed it.

Stage 3, params used outside the module that owns them (a tied head:
``F.linear(x, self.wte.weight)`` in the parent's forward): as DeepSpeed does,
reading ``module.weight`` during a forward gathers the param and registers it
as an *external* param of the module whose forward is running, which from
then on gathers it for its forward and backward like its own. A param reached
another way (a reference kept in a list or closure) is caught when a torch
function receives it during ``engine(...)`` and handled the same way.

fp16 on the CPU: torch has no fp16 kernels for stock modules on the CPU
(``addmm`` for ``Half``), so with ``fp16.enabled`` the module computes in
fp32: params are fp32 copies of the runtime's fp16 working values (refreshed
after every optimizer step; stage 3: upcast when gathered), fp16 floating
inputs of ``engine(...)`` are upcast, gradients are cast to fp16 when handed
to the runtime (after loss scaling, so overflow is detected as in DeepSpeed).

CUDA models (zero/_torch_bridge.py): a model on ``cuda:N`` (or
``initialize(..., device="cuda:N")``, which moves a CPU model there) puts the
runtime's state on that GPU; stages 0-2 alias each param to the runtime's
device memory through DLPack (``torch.from_dlpack`` of a zero.DeviceArray, no
copy), stage 3 copies gathered device buffers into torch-owned CUDA tensors.
Ordering with torch's current stream uses events: the runtime's work is done
when its calls return; torch's queued work is waited for (an event on its
current stream) before a gradient is handed over, before a gathered buffer
is released and before the optimizer step overwrites params. fp16 on a GPU
computes in fp16. Tests run this path on the CPU stand-in for a GPU
(``ZERO_GPU_STANDIN=1``), where torch cannot hold device tensors and values
are copied instead of aliased; the aliasing itself is tested on a GPU only.

Activation checkpointing (an ``activation_checkpointing`` section in the
config): the model's repeated blocks run under torch's non-reentrant
``torch.utils.checkpoint`` (see _ActivationCheckpointing for which ones); in
stage 3 their recomputation in backward gathers their params again through
the same hooks.

Params built under ``zero.torch.Init()`` get the values the model's own
init code gives them (recorded on meta tensors and replayed one param at a
time, see construct.Init); params on the ``meta`` device otherwise
(``Init(init_specs=True)``, ``device="meta"``) are registered with init specs
inferred from their modules (torch's defaults) or the user's ``init_fn``; no
rank ever holds more than one whole param outside a gather. ``pretrained=``
loads safetensors after registration (see ``initialize``).

Gradients reach the runtime from hooks on each param's gradient accumulator
(so stages 2-3 reduce buckets while backward goes on and never hold the whole
gradient); after backward, trainable params whose hook did not fire are
handed in (as zeros) in reverse registration order. Every rank must run the
same graph, so hooks fire in the same order on every rank (the runtime's
collectives require it).
"""
from __future__ import annotations


if __name__ == "torch":  # this package, imported as the top-level `torch`
    raise ImportError(
        "zero/torch/ was imported as `torch`: Python runs from the zero "
        "package's own directory (bindings/python/zero), so `import torch` "
        "finds this package instead of PyTorch. Run from another directory.")

# The package's files, one concept each: api (initialize), engine
# (ZeroTorchEngine), state (TrainingState), hooks, stage3, params,
# state_dict (with GatheredParameters), construct (Init), checkpointing,
# optim, launch (live engines, exception hook, host comm), clip, ds_compat
# (DeepSpeedCompatEngine: the engine of zero's DeepSpeed layer).
from .api import initialize
from .clip import _install_clip_guards
from .construct import Init
from .engine import ZeroTorchEngine
from .hooks import _ZeroParamDict
from .join import Join
from .launch import _live
from .optim import ZeroLRScheduler, ZeroOptimizer
from .state import TrainingState
from .state_dict import CLIENT_STATE_FILE, GatheredParameters

__all__ = ["initialize", "ZeroTorchEngine", "GatheredParameters", "Init", "Join"]

_install_clip_guards()
