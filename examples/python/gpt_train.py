#!/usr/bin/env python3
"""A small GPT-style byte-level language model trained with zero.torch.

    python3 gpt_train.py [--stage S] [--steps N] [--dtype fp32|bf16|fp16]
                         [--activation_checkpointing]
                         [--offload_optimizer none|cpu|cpu_delayed]
                         [--save_dir DIR] [--resume] [--json]
    mpirun -np 2 python3 gpt_train.py --stage 3       # or: zero-launch --num_procs 2 gpt_train.py

Written against DeepSpeed's documented API (``initialize`` returning
``(engine, optimizer, training_dataloader, lr_scheduler)``, ``backward``,
``step``, ``save_checkpoint``, ``load_checkpoint``, ``save_16bit_model``):
``ds`` below is ``zero.torch``; with DeepSpeed installed, ``import deepspeed
as ds`` runs the same loop. The head is tied to the token embedding by hand
(``F.linear(x, self.wte.weight)`` in the model's own forward), which ZeRO
stage 3 handles by gathering the embedding for the parent module.

Every rank takes its slice of each global batch, so the losses match a
single-process torch run (fp32) within rounding. ``--activation_checkpointing``
adds DeepSpeed's ``activation_checkpointing`` section to the config: zero.torch
then recomputes each block in backward instead of keeping its activations
(same losses, less activation memory). ``--offload_optimizer cpu`` adds
``offload_optimizer: {"device": "cpu"}``; ``cpu_delayed`` adds
``"delayed_update": true`` too (docs/ARCHITECTURE.md, "Offload", "The delayed
update": each step's forward reads the params of one update earlier). With
``--json`` the output has ``eval_loss`` too: the final fp32 master's loss on
held-out batches in a plain torch model.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

import zero
import zero.torch as ds

VOCAB, CTX, DIM, LAYERS, HEADS = 256, 32, 32, 2, 2
GLOBAL_BATCH = 8      # sequences per optimizer step, over all ranks
LR = 3e-3

TEXT = (b"ZeRO removes the memory redundancies of data-parallel training by "
        b"partitioning optimizer states, gradients and parameters across the "
        b"ranks, while keeping the computational granularity and communication "
        b"volume of data parallelism. Stage one shards the optimizer states, "
        b"stage two the gradients as well, and stage three the parameters, "
        b"which are gathered just before a module needs them and released "
        b"right after. ") * 4


class Block(torch.nn.Module):
    def __init__(self, dim: int = DIM, heads: int = HEADS) -> None:
        super().__init__()
        self.dim, self.heads = dim, heads
        self.ln1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.fc = torch.nn.Linear(dim, 4 * dim)
        self.out = torch.nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(self.dim, dim=2)
        heads = self.heads
        hs = self.dim // heads
        q = q.view(b, t, heads, hs).transpose(1, 2)
        k = k.view(b, t, heads, hs).transpose(1, 2)
        v = v.view(b, t, heads, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(torch.nn.Module):
    """Token and position embeddings, `layers` blocks, a final LayerNorm and
    a head tied to the token embedding by hand (default sizes: the module's
    constants)."""

    def __init__(self, ctx: int = CTX, dim: int = DIM, layers: int = LAYERS,
                 heads: int = HEADS) -> None:
        super().__init__()
        self.wte = torch.nn.Embedding(VOCAB, dim)
        self.wpe = torch.nn.Embedding(ctx, dim)
        self.blocks = torch.nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(dim)
        for m in self.modules():  # GPT-2's initialization
            if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
                torch.nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, torch.nn.Linear):
                torch.nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor,
                targets: Optional[torch.Tensor] = None) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)  # a CUDA model too
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # the tied head
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().reshape(-1, VOCAB),
                               targets.reshape(-1))


def make_model(seed: int = 0, **sizes: int) -> TinyGPT:
    """TinyGPT(**sizes) (ctx, dim, layers, heads) initialized from `seed`."""
    torch.manual_seed(seed)
    return TinyGPT(**sizes)


def batches(steps: int, seed: int = 1, ctx: int = CTX,
            global_batch: int = GLOBAL_BATCH) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    """`steps` global batches of (inputs, next-byte targets)."""
    data = torch.tensor(list(TEXT), dtype=torch.long)
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        starts = torch.randint(0, len(data) - ctx - 1, (global_batch,), generator=g)
        x = torch.stack([data[s:s + ctx] for s in starts.tolist()])
        y = torch.stack([data[s + 1:s + ctx + 1] for s in starts.tolist()])
        out.append((x, y))
    return out


OFFLOAD = ("none", "cpu", "cpu_delayed")


def ds_config(stage: int, world: int = 1, dtype: str = "fp32",
              activation_checkpointing: bool = False, offload: str = "none") -> Dict:
    cfg = {
        "train_batch_size": GLOBAL_BATCH,
        "train_micro_batch_size_per_gpu": GLOBAL_BATCH // world,
        "steps_per_print": 0,
        "optimizer": {"type": "AdamW",
                      "params": {"lr": LR, "betas": [0.9, 0.999], "eps": 1e-8,
                                 "weight_decay": 0.0}},
        "zero_optimization": {
            "stage": stage,
            "stage3_gather_16bit_weights_on_model_save": True,
        },
    }
    if offload != "none":
        cfg["zero_optimization"]["offload_optimizer"] = {
            "device": "cpu", "delayed_update": offload == "cpu_delayed"}
    if activation_checkpointing:  # DeepSpeed's section, its defaults
        cfg["activation_checkpointing"] = {
            "partition_activations": False,
            "cpu_checkpointing": False,
            "contiguous_memory_optimization": False,
            "synchronize_checkpoint_boundary": False,
        }
    if dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif dtype == "fp16":
        cfg["fp16"] = {"enabled": True, "initial_scale_power": 8}
    return cfg


def eval_loss(state_dict: Dict[str, torch.Tensor], n: int = 4) -> float:
    """The mean loss of the model with `state_dict` (fp32) on `n` held-out
    global batches (seed 2; training's are seed 1), in plain torch."""
    model = make_model()
    model.load_state_dict(state_dict)
    with torch.no_grad():
        return sum(model(x, y).item() for x, y in batches(n, seed=2)) / n


def train(stage: int, steps: int, rank: int = 0, world: int = 1,
          dtype: str = "fp32", save_dir: Optional[str] = None,
          resume: bool = False, log=None,
          activation_checkpointing: bool = False, offload: str = "none",
          evaluated: Optional[Dict[int, float]] = None) -> List[float]:
    """Trains `steps` optimizer steps; returns this rank's losses. With
    save_dir: checkpoints (and a 16-bit model) at the end, or with resume
    loads save_dir first and trains on. `evaluated`: {step: anything, ...}; after
    each of those steps sets its value to eval_loss of the fp32 master
    (collective; the master after every update so far, a delayed one's in
    flight included, not the params that step's forward read)."""
    model = make_model()
    engine, optimizer, _, lr_scheduler = ds.initialize(
        model=model, model_parameters=model.parameters(),
        config=ds_config(stage, world, dtype, activation_checkpointing, offload))
    try:
        first = 0
        if resume and save_dir:
            path, client_state = engine.load_checkpoint(save_dir)
            if path is not None:
                first = client_state["step"]
        losses = []
        for step, (x, y) in enumerate(batches(steps)):
            if step < first:
                continue
            xs, ys = x.chunk(world)[rank], y.chunk(world)[rank]
            loss = engine(xs, ys)
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
            if evaluated is not None and step + 1 in evaluated:
                evaluated[step + 1] = eval_loss(engine.full_state_dict())
            if log:
                log(f"step {step + 1} loss {losses[-1]:.4f} lr {engine.get_lr()[0]:.2e}")
        if save_dir:
            engine.save_checkpoint(save_dir, client_state={"step": steps})
            engine.save_16bit_model(save_dir)
        return losses
    finally:
        engine.destroy()


def train_torch(steps: int, delayed: bool = False,
                evaluated: Optional[Dict[int, float]] = None) -> List[float]:
    """Plain single-process torch, AdamW on each whole global batch.
    `delayed`: the one-step delayed update's rule (docs/ARCHITECTURE.md, "The
    delayed update"): step t+1's forward and backward read the params as
    they were before step t's update, and each update applies its gradients
    to the latest params. `evaluated` as in train()."""
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=0.0)
    seen = make_model() if delayed else model  # what the forward reads
    losses = []
    for step, (x, y) in enumerate(batches(steps)):
        opt.zero_grad()
        seen.zero_grad()
        loss = seen(x, y)
        loss.backward()
        before = [p.detach().clone() for p in model.parameters()] if delayed else []
        if delayed:
            for p, q in zip(model.parameters(), seen.parameters()):
                p.grad = q.grad
        opt.step()
        if delayed:
            with torch.no_grad():
                for q, b in zip(seen.parameters(), before):
                    q.copy_(b)
        losses.append(loss.item())
        if evaluated is not None and step + 1 in evaluated:
            evaluated[step + 1] = eval_loss(model.state_dict())
    return losses


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    ap.add_argument("--activation_checkpointing", action="store_true",
                    help="recompute each block in backward (ds_config section)")
    ap.add_argument("--offload_optimizer", choices=OFFLOAD, default="none",
                    help="offload_optimizer cpu, exact or with delayed_update")
    ap.add_argument("--save_dir")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--json", action="store_true", help="print the losses as JSON")
    a = ap.parse_args(argv)
    rank, world = zero.launcher_rank_and_size()
    if GLOBAL_BATCH % world:
        print(f"gpt_train: {world} ranks do not divide the batch {GLOBAL_BATCH}",
              file=sys.stderr)
        return 2
    log = None if a.json or rank != 0 else print
    evaluated: Dict[int, float] = {a.steps: math.nan}
    losses = train(a.stage, a.steps, rank, world, a.dtype, a.save_dir, a.resume, log,
                   a.activation_checkpointing, a.offload_optimizer,
                   evaluated if a.json else None)
    if a.json:
        print(json.dumps({"rank": rank, "losses": losses, "eval_loss": evaluated[a.steps]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
