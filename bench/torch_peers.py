"""The frameworks zero.torch is measured against, one training step each,
for the bench drivers (torch_gpt_bench.py, host_overhead_bench.py): torch
DDP + AdamW, DDP + ZeroRedundancyOptimizer, FSDP2 (``fully_shard``) and
DeepSpeed, all over gloo on this CPU, all with torch's AdamW.

Modes: ``ddp``, ``ddp_zero_redundancy``; ``fsdp2`` (resharded after
forward: ZeRO-3's memory), ``fsdp2_grad_op`` (``reshard_after_forward=
False``: params kept after forward, gradients and optimizer state sharded,
FSDP's SHARD_GRAD_OP, ZeRO-2's); ``dsN`` (DeepSpeed stage N) and
``dsN_offload`` (with ``offload_optimizer: cpu``). DeepSpeed gets the
config zero.torch gets, less its ``optimizer`` section: a client
torch.optim.AdamW (``zero_allow_untested_optimizer``;
``zero_force_ds_cpu_optimizer: false`` with offload), so no CPU Adam
extension is built and every peer runs the same optimizer code.
"""
from __future__ import annotations

import copy
import os
from typing import Any, Callable, Dict, Optional, Tuple

PEER_PREFIXES = ("ddp", "fsdp2", "ds")


def is_peer(mode: str) -> bool:
    return mode.startswith(PEER_PREFIXES)


def _adamw_args(cfg: Optional[Dict[str, Any]], lr: float) -> Dict[str, Any]:
    p = dict(((cfg or {}).get("optimizer") or {}).get("params") or {})
    out = dict(lr=p.get("lr", lr), betas=tuple(p.get("betas", (0.9, 0.999))),
               eps=p.get("eps", 1e-8), weight_decay=p.get("weight_decay", 0.0))
    return out


def make_peer(mode: str, model: Any, cfg: Dict[str, Any], rank: int, world: int,
              port: str, loss_of: Callable[[Any, Any, Any], Any],
              fsdp_units: Optional[Callable[[Any], Any]] = None,
              lr: float = 1e-3) -> Tuple[Callable[[Any, Any], Any], Callable[[], None]]:
    """(step(x, y) -> loss, close()) for ``mode`` over ``model``.
    ``loss_of(module, x, y)`` runs the (wrapped) module and returns the
    loss; ``fsdp_units(model)`` yields the submodules FSDP2 shards as units
    before the root (default: every direct child)."""
    import torch
    import torch.distributed as dist

    opt_args = _adamw_args(cfg, lr)
    if mode.startswith("ds"):
        import deepspeed
        for k, v in (("RANK", rank), ("WORLD_SIZE", world), ("LOCAL_RANK", rank),
                     ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", port)):
            os.environ[k] = str(v)
        deepspeed.init_distributed(dist_backend="gloo")
        dcfg = copy.deepcopy(cfg)
        dcfg.pop("optimizer", None)
        dcfg["zero_allow_untested_optimizer"] = True
        if not dcfg.get("steps_per_print"):  # 0 is zero's "never"; DeepSpeed divides by it
            dcfg["steps_per_print"] = 10**9
        stage = int(mode[2])
        zo = dcfg.setdefault("zero_optimization", {})
        zo["stage"] = stage
        if mode.endswith("_offload"):
            zo["offload_optimizer"] = {"device": "cpu"}
            dcfg["zero_force_ds_cpu_optimizer"] = False
        opt = torch.optim.AdamW(model.parameters(), **opt_args)
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=dcfg)

        def ds_step(x, y):
            loss = loss_of(engine, x, y)
            engine.backward(loss)
            engine.step()
            return loss

        def ds_close():
            dist.barrier()
            dist.destroy_process_group()
        return ds_step, ds_close

    dist.init_process_group("gloo", rank=rank, world_size=world,
                            init_method=f"tcp://127.0.0.1:{port}")
    if mode.startswith("fsdp2"):
        from torch.distributed.fsdp import fully_shard
        # fully_shard takes the params as they are: every rank starts from
        # rank 0's, as the other peers do.
        for p in model.parameters():
            dist.broadcast(p.data, 0)
        reshard = mode != "fsdp2_grad_op"
        units = fsdp_units(model) if fsdp_units is not None else list(model.children())
        for m in units:
            fully_shard(m, reshard_after_forward=reshard)
        fully_shard(model, reshard_after_forward=reshard)
        wrapped = model
        opt = torch.optim.AdamW(model.parameters(), **opt_args)
    elif mode in ("ddp", "ddp_zero_redundancy"):
        from torch.distributed.optim import ZeroRedundancyOptimizer
        from torch.nn.parallel import DistributedDataParallel as DDP
        wrapped = DDP(model)  # broadcasts rank 0's params, as zero.torch does
        if mode == "ddp":
            opt = torch.optim.AdamW(wrapped.parameters(), **opt_args)
        else:
            opt = ZeroRedundancyOptimizer(wrapped.parameters(),
                                          optimizer_class=torch.optim.AdamW, **opt_args)
    else:
        raise ValueError(f"unknown peer mode {mode!r}")

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_of(wrapped, x, y)
        loss.backward()
        opt.step()
        return loss

    def close():
        dist.barrier()
        dist.destroy_process_group()
    return step, close
