#!/usr/bin/env python3
"""zero.torch (ZeRO stages 1-3) against torch DDP + Adam and DDP +
ZeroRedundancyOptimizer (gloo), same model and data, 4 ranks on this machine.

    /usr/bin/python3 bench/torch_compare.py [--ranks 4] [--hidden 768]
        [--layers 4] [--batch 16] [--steps 6] [--warmup 2]
        [--modes zero1,zero2,zero3,ddp_adam,ddp_zero_redundancy]

Each mode runs in fresh processes (one `mpirun -np RANKS` per mode) so the
peak RSS of a rank (getrusage ru_maxrss) belongs to that mode alone. Prints
JSON lines to stdout: one per mode and rank (step time median, peak RSS,
RSS growth over the model-only baseline, final loss), then one summary per
mode with ratios against DDP + Adam. Needs Debian's python3-torch,
openmpi-bin and the `zero` package on PYTHONPATH (or installed from the
wheel //bindings/python:wheel).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

MODES = ["zero1", "zero2", "zero3", "ddp_adam", "ddp_zero_redundancy"]
LR = 1e-3


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def make_model(hidden: int, layers: int):
    import torch

    torch.manual_seed(0)
    mods: List[torch.nn.Module] = []
    for _ in range(layers):
        mods += [torch.nn.Linear(hidden, hidden), torch.nn.LayerNorm(hidden),
                 torch.nn.GELU()]
    mods.append(torch.nn.Linear(hidden, hidden))
    return torch.nn.Sequential(*mods)


def make_batches(n: int, global_batch: int, hidden: int):
    import torch

    g = torch.Generator().manual_seed(1)
    return [(torch.randn(global_batch, hidden, generator=g),
             torch.randn(global_batch, hidden, generator=g)) for _ in range(n)]


def worker(args: argparse.Namespace) -> None:
    """One rank of one mode (launched by mpirun)."""
    import torch

    torch.set_num_threads(1)
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    world = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    mode = args.worker
    model = make_model(args.hidden, args.layers)
    batches = make_batches(args.warmup + args.steps, args.batch * world,
                           args.hidden)
    loss_fn = torch.nn.functional.mse_loss
    baseline = rss_mb()
    times: List[float] = []
    extra: Dict[str, float] = {}

    if mode.startswith("zero"):
        import zero.torch as zt

        config = {
            "train_micro_batch_size_per_gpu": args.batch,
            "steps_per_print": 0,
            "optimizer": {"type": "Adam", "params": {"lr": LR}},
            # DeepSpeed's default buckets (5e8 elements) would each hold the
            # whole model here; a few 1e5 elements is what a user would tune to.
            "zero_optimization": {"stage": int(mode[-1]),
                                  "reduce_bucket_size": args.bucket,
                                  "allgather_bucket_size": args.bucket,
                                  "stage3_prefetch_bucket_size": args.bucket},
        }
        engine = zt.initialize(model, config)
        assert engine.world_size == world
        for i, (x, y) in enumerate(batches):
            xs, ys = x.chunk(world)[rank], y.chunk(world)[rank]
            t0 = time.perf_counter()
            loss = loss_fn(engine(xs), ys)
            engine.backward(loss)
            engine.step()
            if i >= args.warmup:
                times.append(time.perf_counter() - t0)
        stats = engine.stats()
        extra["model_state_mb"] = (stats["master_bytes"] + stats["optimizer_bytes"]
                                   + stats["grad_bytes"] + stats["param_bytes"]) / 2**20
        final_loss = float(loss.detach())
        engine.close(keep_values=False)
    else:
        import torch.distributed as dist
        from torch.distributed.optim import ZeroRedundancyOptimizer
        from torch.nn.parallel import DistributedDataParallel as DDP

        dist.init_process_group(
            "gloo", rank=rank, world_size=world,
            init_method=f"tcp://127.0.0.1:{os.environ['BENCH_PORT']}")
        ddp = DDP(model)
        if mode == "ddp_adam":
            opt = torch.optim.Adam(ddp.parameters(), lr=LR)
        else:
            opt = ZeroRedundancyOptimizer(ddp.parameters(),
                                          optimizer_class=torch.optim.Adam, lr=LR)
        for i, (x, y) in enumerate(batches):
            xs, ys = x.chunk(world)[rank], y.chunk(world)[rank]
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(xs), ys)
            loss.backward()
            opt.step()
            if i >= args.warmup:
                times.append(time.perf_counter() - t0)
        final_loss = float(loss.detach())
        dist.barrier()
        dist.destroy_process_group()

    out = {"mode": mode, "rank": rank, "world": world,
           "step_ms": statistics.median(times) * 1e3,
           "peak_rss_mb": peak_rss_mb(), "baseline_rss_mb": baseline,
           "rss_growth_mb": peak_rss_mb() - baseline,
           "final_local_loss": final_loss, **extra}
    with open(os.path.join(args.outdir, f"{mode}.{rank}.json"), "w") as f:
        json.dump(out, f)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def driver(args: argparse.Namespace) -> int:
    mpirun = shutil.which("mpirun")
    if not mpirun:
        print("torch_compare: mpirun not found (apt-get install openmpi-bin)",
              file=sys.stderr)
        return 1
    n_params = args.layers * (args.hidden * args.hidden + 3 * args.hidden) + \
        args.hidden * args.hidden + args.hidden
    print(json.dumps({"bench": "torch_compare", "ranks": args.ranks,
                      "params": n_params, "hidden": args.hidden,
                      "layers": args.layers, "micro_batch": args.batch,
                      "steps": args.steps, "warmup": args.warmup,
                      "dtype": "fp32", "optimizer": "Adam",
                      "zero_bucket_elements": args.bucket,
                      "malloc_mmap_threshold": args.mmap_threshold}), flush=True)
    results: Dict[str, List[dict]] = {}
    with tempfile.TemporaryDirectory() as outdir:
        for mode in args.modes.split(","):
            env = dict(os.environ, BENCH_PORT=str(free_port()),
                       OMP_NUM_THREADS="1")
            if args.mmap_threshold > 0:
                env["MALLOC_MMAP_THRESHOLD_"] = str(args.mmap_threshold)
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in [env.get("PYTHONPATH", "")] + sys.path if p)
            cmd = [mpirun, "-np", str(args.ranks), "--oversubscribe",
                   "--allow-run-as-root", "--bind-to", "none",
                   "--mca", "btl", "self,vader",
                   "-x", "PYTHONPATH", "-x", "BENCH_PORT", "-x", "OMP_NUM_THREADS",
                   *(["-x", "MALLOC_MMAP_THRESHOLD_"] if args.mmap_threshold > 0 else []),
                   sys.executable, os.path.abspath(__file__), "--worker", mode,
                   "--outdir", outdir, "--hidden", str(args.hidden),
                   "--layers", str(args.layers), "--batch", str(args.batch),
                   "--steps", str(args.steps), "--warmup", str(args.warmup),
                   "--bucket", str(args.bucket)]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                  timeout=args.timeout)
            if proc.returncode != 0:
                print(json.dumps({"mode": mode, "error": proc.returncode,
                                  "stderr": proc.stderr[-2000:]}), flush=True)
                continue
            rows = []
            for r in range(args.ranks):
                with open(os.path.join(outdir, f"{mode}.{r}.json")) as f:
                    rows.append(json.load(f))
                print(json.dumps(rows[-1]), flush=True)
            results[mode] = rows

    def summary(rows: List[dict]) -> dict:
        return {"step_ms_max": max(r["step_ms"] for r in rows),
                "peak_rss_mb_max": max(r["peak_rss_mb"] for r in rows),
                "rss_growth_mb_max": max(r["rss_growth_mb"] for r in rows)}

    base = summary(results["ddp_adam"]) if "ddp_adam" in results else None
    for mode, rows in results.items():
        s = {"summary": mode, **summary(rows)}
        if base:
            s["step_time_ratio_vs_ddp_adam"] = s["step_ms_max"] / base["step_ms_max"]
            s["peak_rss_ratio_vs_ddp_adam"] = s["peak_rss_mb_max"] / base["peak_rss_mb_max"]
            s["rss_growth_ratio_vs_ddp_adam"] = (
                s["rss_growth_mb_max"] / base["rss_growth_mb_max"])
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v)
                          for k, v in s.items()}), flush=True)
    return 0 if len(results) == len(args.modes.split(",")) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16, help="micro-batch per rank")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--bucket", type=int, default=500_000,
                    help="zero reduce/allgather/prefetch bucket, elements")
    ap.add_argument("--mmap-threshold", type=int, default=131072,
                    help="MALLOC_MMAP_THRESHOLD_ for every mode (fixes glibc's "
                    "sliding threshold so freed buffers leave the peak RSS "
                    "comparable); 0 keeps glibc's default")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--timeout", type=int, default=150, help="seconds per mode")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--outdir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
