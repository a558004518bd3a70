#!/usr/bin/env python3
"""A GPT at real sizes (~350M and ~1.3B params, bf16, seq 1024) on one GPU:
zero.torch at stages 0-3 and with ``offload_optimizer: cpu`` (exact, and
overlapped where the runtime accepts ``offload_optimizer.delayed_update``)
against plain torch AdamW and against DeepSpeed's same configurations, in
one run with one deadline. Run by tools/device_check.sh on a lent GPU.

    python3 bench/gpt_device_bench.py [--sizes 350m,1.3b] [--seconds 260]
        [--modes torch,zero0,...,ds_offload] [--steps 3] [--warmup 2]
        [--batch 8] [--seq 1024] [--ds-site DIR]
    DEVICE_CHECK_DRY_RUN=1 python3 bench/gpt_device_bench.py   # tiny, on the CPU

Each (size, framework) runs in a fresh process (torch and zero.torch in one,
DeepSpeed in another: one world-1 process group each), the modes one after
the other, each on a model made from the same seed. Per mode: the median
step (``step_ms``, after ``--warmup`` steps, the device synchronized),
tokens/s, MFU (6 x params + 12 x layers x dim x seq FLOPs per token over the
GPU's dense bf16 peak: H100/H200 989 TFLOP/s, ``ZERO_PEAK_TFLOPS`` for
others), and the peak device memory the mode took (the device's used memory
sampled every 5 ms over the mode, less what was used before it: zero's
runtime allocates outside torch's allocator, so torch's own counter would
miss it). A mode that would not end before the deadline is skipped with a
line saying so; one that fails prints its error. Then the ratios: every mode
against plain torch (step time, memory), zero.torch against DeepSpeed's
same configuration, and ZeRO-Offload overlapped against the GPU-resident
stage and against exact offload. Everything is a JSON line on stdout.

DeepSpeed comes from ``--ds-site`` (the device bundle's wheels unpacked by
tools/device_check.sh; appended to sys.path, so the machine's own packages
win), else this Python's own; without it its modes print "not available".
Its non-offload modes take torch's AdamW (``torch_adam``), offload its CPU
Adam (JIT-built with the machine's compiler on first use, into
``TORCH_EXTENSIONS_DIR``). ``DEVICE_CHECK_DRY_RUN=1`` (or ``--dry-run``)
runs every mode on the CPU with a tiny model so the whole path is
exercised without a GPU (//tests:gpt_device_bench_dry_test).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional

SIZES = {  # name: (layers, dim, heads); vocab 50304, tied head
    "350m": (24, 1024, 16),
    "1.3b": (24, 2048, 16),
    "tiny": (2, 64, 2),
}
VOCAB = 50304
ZERO_MODES = ["torch", "zero0", "zero1", "zero2", "zero3", "zero_offload",
              "zero_offload_overlap"]
DS_MODES = ["ds0", "ds1", "ds2", "ds3", "ds_offload"]
LR = 1e-4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def emit(d: dict) -> None:
    print(json.dumps(d, separators=(",", ":")), flush=True)


def make_model(layers: int, dim: int, heads: int, vocab: int, seq: int):
    import torch
    import torch.nn.functional as F

    def attention(q, k, v):
        if hasattr(F, "scaled_dot_product_attention"):  # flash attention on a GPU
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        t = q.shape[-2]  # torch < 2.0 (the dry run on Debian's torch)
        w = (q @ k.transpose(-1, -2)) / (q.shape[-1] ** 0.5)
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
        return w.masked_fill(mask, float("-inf")).softmax(-1) @ v

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = torch.nn.LayerNorm(dim)
            self.qkv = torch.nn.Linear(dim, 3 * dim)
            self.proj = torch.nn.Linear(dim, dim)
            self.ln2 = torch.nn.LayerNorm(dim)
            self.fc = torch.nn.Linear(dim, 4 * dim)
            self.out = torch.nn.Linear(4 * dim, dim)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, dim // heads).unbind(2)
            a = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, dim))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = torch.nn.Embedding(vocab, dim)
            self.wpe = torch.nn.Embedding(seq, dim)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))
            self.ln = torch.nn.LayerNorm(dim)
            for e in (self.wte, self.wpe):  # GPT-2's init (nn.Embedding's is N(0, 1))
                torch.nn.init.normal_(e.weight, std=0.02)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for b in self.blocks:
                x = b(x)
            logits = F.linear(self.ln(x), self.wte.weight)  # tied head
            return F.cross_entropy(logits.float().view(-1, vocab), targets.view(-1))

    torch.manual_seed(0)
    return GPT()


def ds_config(mode: str, batch: int) -> dict:
    stage = 2 if "offload" in mode else int(mode[-1])
    cfg = {"train_batch_size": batch, "train_micro_batch_size_per_gpu": batch,
           "gradient_accumulation_steps": 1, "steps_per_print": 10**9,
           "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW", "params": {"lr": LR, "betas": [0.9, 0.999],
                                                     "eps": 1e-8, "weight_decay": 0.0}},
           "zero_optimization": {"stage": stage}}
    if "offload" in mode:
        cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if mode.endswith("_overlap"):
            cfg["zero_optimization"]["offload_optimizer"]["delayed_update"] = True
    elif mode.startswith("ds"):
        cfg["optimizer"]["params"]["torch_adam"] = True  # no fused-Adam JIT build
    return cfg


class MemPeak:
    """The device's used memory, sampled on a thread (cudaMemGetInfo)."""

    def __init__(self, dev) -> None:
        import torch
        self.torch, self.dev = torch, dev
        self.base = self.peak = self._used()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _used(self) -> int:
        if self.dev.type != "cuda":
            return 0
        free, total = self.torch.cuda.mem_get_info(self.dev)
        return total - free

    def _run(self) -> None:
        while not self.stop.wait(0.005):
            self.peak = max(self.peak, self._used())

    def done(self) -> float:
        self.stop.set()
        self.thread.join()
        self.peak = max(self.peak, self._used())
        return (self.peak - self.base) / 2**30


def run_mode(mode: str, args, dev, sizes, deadline: float, est_s: float) -> dict:
    import torch
    layers, dim, heads = sizes
    out = {"kind": "gpt_device", "size": args.size, "mode": mode}
    if time.time() + est_s > deadline:
        return dict(out, status="skipped", why="no time left before the deadline")
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
    mem = MemPeak(dev)
    t_start = time.time()
    model = make_model(layers, dim, heads, args.vocab, args.seq).to(dev)
    n = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(1)
    data = [(torch.randint(0, args.vocab, (args.batch, args.seq), generator=g).to(dev),
             torch.randint(0, args.vocab, (args.batch, args.seq), generator=g).to(dev))
            for _ in range(2)]
    close = None
    if mode == "torch":
        opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=0.0, **({"fused": True} if dev.type == "cuda"
                                                     else {}))

        def step(x, y):
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                loss = model(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss
    elif mode.startswith("zero"):
        import zero
        import zero.torch as zt
        try:
            engine, _, _, _ = zt.initialize(model=model, config=ds_config(mode, args.batch),
                                            comm=zero.Comm.self_(),
                                            device=str(dev) if dev.type == "cuda" else None)
        except Exception as e:  # noqa: BLE001  the key may not exist yet
            if mode.endswith("_overlap") and "delayed_update" in str(e):
                mem.done()
                return dict(out, status="not available",
                            why=f"offload_optimizer.delayed_update refused: {str(e)[:200]}")
            raise
        close = engine.close

        def step(x, y):
            loss = engine(x, y)
            engine.backward(loss)
            engine.step()
            return loss
    else:
        import deepspeed
        # The same ds_config as zero's (offload: DeepSpeed picks its CPU Adam).
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                               config=ds_config(mode, args.batch))

        def step(x, y):
            loss = engine(x, y)
            engine.backward(loss)
            engine.step()
            return loss

        def close():
            engine.destroy()
    init_s = time.time() - t_start
    times: List[float] = []
    losses: List[float] = []
    for i in range(args.warmup + args.steps):
        x, y = data[i % len(data)]
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        loss = step(x, y)
        losses.append(float(loss))  # waits for the device
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
        if time.time() > deadline:
            break
    peak = mem.done()
    torch_peak = (torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else 0.0)
    if close is not None:
        close()
    del model, data
    if not times:
        return dict(out, status="FAILED", why="the deadline came before a timed step")
    step_s = statistics.median(times)
    tokens = args.batch * args.seq
    flops = (6 * n + 12 * layers * dim * args.seq) * tokens
    peak_flops = args.peak_tflops * 1e12 if args.peak_tflops else None
    return dict(out, status="ok", params=n, batch=args.batch, seq=args.seq, steps=len(times),
                step_ms=round(step_s * 1e3, 2), tokens_per_s=round(tokens / step_s, 1),
                mfu=round(flops / step_s / peak_flops, 4) if peak_flops else None,
                peak_gpu_mem_gib=round(peak, 3), torch_allocator_peak_gib=round(torch_peak, 3),
                init_s=round(init_s, 1), loss_first=round(losses[0], 4),
                loss_last=round(losses[-1], 4),
                mode_s=round(time.time() - t_start, 1))


def worker(args) -> None:
    """One (size, framework) process: its modes in order, a JSON line each."""
    import torch
    if args.ds_site:
        sys.path.append(args.ds_site)  # the machine's own packages first
    dry = args.dry_run
    dev = torch.device("cpu" if dry or not torch.cuda.is_available() else "cuda:0")
    if dev.type == "cpu":
        torch.set_num_threads(1)  # a tiny model: more threads only wait on each other
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        torch.backends.cuda.matmul.allow_tf32 = True
    modes = args.worker.split(",")
    if modes[0].startswith("ds"):
        if dev.type != "cuda":
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        try:
            import deepspeed  # noqa: F401
        except Exception as e:  # noqa: BLE001
            for m in modes:
                emit({"kind": "gpt_device", "size": args.size, "mode": m,
                      "status": "not available", "why": f"deepspeed: {str(e)[:200]}"})
            return
        for k, v in (("RANK", 0), ("WORLD_SIZE", 1), ("LOCAL_RANK", 0),
                     ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", args.port)):
            os.environ[k] = str(v)
        deepspeed.init_distributed(dist_backend="nccl" if dev.type == "cuda" else "gloo")
    sizes = SIZES[args.size]
    est = 1.0  # seconds the next mode may take: the longest so far
    for m in modes:
        if dry and m == "ds_offload":
            emit({"kind": "gpt_device", "size": args.size, "mode": m, "status": "skipped",
                  "why": "dry run: DeepSpeed's CPU Adam would JIT-build here"})
            continue
        t0 = time.time()
        try:
            r = run_mode(m, args, dev, sizes, args.deadline, est)
        except Exception as e:  # noqa: BLE001  reported, the next mode runs
            r = {"kind": "gpt_device", "size": args.size, "mode": m, "status": "FAILED",
                 "why": f"{type(e).__name__}: {str(e)[:300]}"}
        if r["status"] == "ok":
            r["device"] = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
            est = max(est, time.time() - t0)
        emit(r)


def ratios(rows: List[dict]) -> List[dict]:
    """Every mode over plain torch; zero.torch over DeepSpeed's same config;
    overlapped offload over the resident stage and over exact offload."""
    out = []
    for size in sorted({r["size"] for r in rows}):
        ok = {r["mode"]: r for r in rows if r["size"] == size and r["status"] == "ok"}
        ran = {r["mode"] for r in rows if r["size"] == size}

        def ratio(a: str, b: str, what: str) -> None:
            if a in ok and b in ok:
                out.append({"kind": "gpt_device_ratio", "size": size, "mode": a, "vs": b,
                            "step_time": round(ok[a]["step_ms"] / ok[b]["step_ms"], 3),
                            "tokens_per_s": round(ok[a]["tokens_per_s"]
                                                  / ok[b]["tokens_per_s"], 3),
                            "peak_gpu_mem": (round(ok[a]["peak_gpu_mem_gib"]
                                                   / ok[b]["peak_gpu_mem_gib"], 3)
                                             if ok[b]["peak_gpu_mem_gib"] > 0 else None),
                            "what": what})
            elif (a in ok or b in ok) and a in ran and b in ran:
                out.append({"kind": "gpt_device_ratio", "size": size, "mode": a, "vs": b,
                            "step_time": None, "what": what,
                            "why": f"{a if a not in ok else b} did not run"})
        for m in ZERO_MODES[1:] + DS_MODES:
            ratio(m, "torch", "over plain torch AdamW on the same GPU")
        for s in range(4):
            ratio(f"zero{s}", f"ds{s}", "zero.torch over DeepSpeed, same config")
        ratio("zero_offload", "ds_offload", "zero.torch over DeepSpeed, same config")
        ratio("zero_offload_overlap", "ds_offload", "overlapped zero over DeepSpeed's offload")
        ratio("zero_offload_overlap", "zero2", "overlapped offload over the GPU-resident step")
        ratio("zero_offload_overlap", "zero_offload", "overlapped over exact offload")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=None, help="350m,1.3b (dry run: tiny)")
    ap.add_argument("--modes", default=",".join(ZERO_MODES + DS_MODES))
    ap.add_argument("--seconds", type=float, default=260, help="the whole run's deadline")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=None, help="sequences per step (8; dry 2)")
    ap.add_argument("--seq", type=int, default=None, help="tokens per sequence (1024; dry 32)")
    ap.add_argument("--ds-site", default=os.environ.get("ZERO_DS_SITE", ""))
    ap.add_argument("--dry-run", action="store_true",
                    default=os.environ.get("DEVICE_CHECK_DRY_RUN") == "1")
    ap.add_argument("--peak-tflops", type=float, default=None)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--size", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--port", default="29511", help=argparse.SUPPRESS)
    ap.add_argument("--vocab", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    dry = args.dry_run
    args.batch = args.batch or (2 if dry else 8)
    args.seq = args.seq or (32 if dry else 1024)
    args.vocab = args.vocab or (256 if dry else VOCAB)
    if args.worker:
        worker(args)
        return 0
    if args.peak_tflops is None and not dry:
        env_peak = os.environ.get("ZERO_PEAK_TFLOPS")
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout if not env_peak else ""
        args.peak_tflops = (float(env_peak) if env_peak else
                            989.4 if ("H100" in name or "H200" in name) else None)
    sizes = (args.sizes or ("tiny" if dry else "350m,1.3b")).split(",")
    modes = args.modes.split(",")
    deadline = time.time() + args.seconds
    emit({"kind": "gpt_device_bench", "sizes": {s: SIZES[s] for s in sizes}, "modes": modes,
          "batch": args.batch, "seq": args.seq, "vocab": args.vocab, "dtype": "bf16",
          "dry_run": dry, "seconds": args.seconds, "peak_tflops": args.peak_tflops,
          "ds_site": args.ds_site or None})
    rows: List[dict] = []
    for size in sizes:
        for group in ([m for m in modes if not m.startswith("ds")],
                      [m for m in modes if m.startswith("ds")]):
            if not group:
                continue
            left = deadline - time.time()
            if left < 5:
                for m in group:
                    rows.append({"kind": "gpt_device", "size": size, "mode": m,
                                 "status": "skipped", "why": "no time left before the deadline"})
                    emit(rows[-1])
                continue
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", ",".join(group),
                   "--size", size, "--deadline", str(deadline), "--port", str(free_port()),
                   "--steps", str(args.steps), "--warmup", str(args.warmup),
                   "--batch", str(args.batch), "--seq", str(args.seq),
                   "--vocab", str(args.vocab), "--ds-site", args.ds_site,
                   *(["--dry-run"] if dry else []),
                   *(["--peak-tflops", str(args.peak_tflops)] if args.peak_tflops else [])]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True,
                                      timeout=max(5.0, left + 30))
                lines, err, rc = proc.stdout, proc.stderr, proc.returncode
            except subprocess.TimeoutExpired as e:
                lines = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
                err, rc = "timeout", 124
            seen = set()
            for line in lines.splitlines():
                if line.startswith('{"kind":"gpt_device"'):
                    r = json.loads(line)
                    rows.append(r)
                    seen.add(r["mode"])
                    emit(r)
            for m in group:
                if m not in seen:  # the process died before its line
                    rows.append({"kind": "gpt_device", "size": size, "mode": m,
                                 "status": "FAILED", "why": f"rc {rc}: {err[-400:]}"})
                    emit(rows[-1])
    for r in ratios(rows):
        emit(r)
    failed = [f"{r['size']}/{r['mode']}" for r in rows if r["status"] == "FAILED"]
    emit({"kind": "gpt_device_summary", "ok": sum(r["status"] == "ok" for r in rows),
          "failed": failed, "skipped": [f"{r['size']}/{r['mode']}" for r in rows
                                        if r["status"] in ("skipped", "not available")],
          "seconds": round(args.seconds - (deadline - time.time()), 1)})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
