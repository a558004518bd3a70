#!/usr/bin/env python3
"""How ranks wait when they share cores with other work: zero.torch and
DeepSpeed (over gloo, ``DS_ACCELERATOR=cpu``) on the test GPT of
examples/python/gpt_train.py at 2 ranks (mpirun), each with and without a
background load of busy processes started by this script, in one run.

    PYTHONPATH=<dir holding zero/> /usr/bin/python3 bench/loaded_wait_bench.py
        [--loads 0,2] [--modes zero1,zero2,zero3,ds1,ds2,ds3] [--ranks 2]
        [--dim 384] [--layers 4] [--heads 6] [--ctx 128] [--batch 2]
        [--steps 8] [--warmup 2] [--repeat 2]
        [--venv /opt/zero-venvs/torch-current] [--zero-path LABEL=DIR]
        [--zero-env LABEL=NAME=VALUE]

``zeroN@LABEL`` runs zero from ``--zero-path LABEL=DIR`` (an older build),
interleaved with the others, for before/after comparisons in one run; and
with ``--zero-env LABEL=NAME=VALUE`` in its ranks' environment (this build
unless the label also has a path): e.g. ``zero2@bell`` and ``zero2@nobell``
with ``--zero-env bell=ZERO_MPI_DOORBELL=1 --zero-env nobell=ZERO_MPI_DOORBELL=0``
compare the two settings of a knob in one build.

A load of N runs N processes that spin (``while True: pass``) for the whole
of each measured run, so the ranks compete with them for the node's cores.
What the figures say: a rank's step needs its CPU time (``cpu_ms``: the
process's CPU, every thread) plus whatever wall time it spends neither
computing nor holding a core; ``wall_per_cpu`` over 1 means time lost
waiting, for a peer or for the scheduler to hand a core back. A rank that
waits by blocking gives its core to the load and should get it back as
soon as its peer's data is there; one that spins keeps it but burns CPU
that counts here too.

Both frameworks run the venv's torch (same torch, same model, same data,
same ds_config sections; DeepSpeed gets torch's AdamW as a client
optimizer, so it needs no JIT build), one torch thread per rank
(``--threads``). Prints JSON lines: a header with the load averages; one
line per (round, load, mode, rank) with every step's wall and CPU; one
summary per (load, mode) over all rounds: the median step's wall and CPU of
the slowest rank, the median and maximum of wall/CPU over every rank's
steps, and the load averages seen around its runs.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples", "python")
sys.path.insert(0, HERE)
from torch_compare import free_port  # noqa: E402

VENV = os.environ.get("ZERO_TORCH_CURRENT_VENV", "/opt/zero-venvs/torch-current")
MODES = ["zero1", "zero2", "zero3", "ds1", "ds2", "ds3"]


def loadavg() -> List[float]:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def config(stage: int, world: int, args: argparse.Namespace) -> dict:
    sys.path.insert(0, EXAMPLES)
    import gpt_train
    cfg = gpt_train.ds_config(stage, world)
    cfg["train_batch_size"] = args.batch * world
    cfg["train_micro_batch_size_per_gpu"] = args.batch
    cfg["steps_per_print"] = 10**9  # DeepSpeed takes 0 as a modulus
    # DeepSpeed's default buckets would each hold the whole model.
    cfg["zero_optimization"].update(reduce_bucket_size=args.bucket,
                                    allgather_bucket_size=args.bucket,
                                    stage3_prefetch_bucket_size=args.bucket)
    return cfg


def worker(args: argparse.Namespace) -> None:
    """One rank of one mode (launched by mpirun)."""
    import torch
    torch.set_num_threads(args.threads)
    sys.path.insert(0, EXAMPLES)
    import gpt_train

    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    world = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    mode = args.worker  # MODE or MODE@LABEL (zero from --zero-path LABEL=DIR)
    stage = int(mode.split("@")[0][-1])
    cfg = config(stage, world, args)
    model = gpt_train.make_model(ctx=args.ctx, dim=args.dim, layers=args.layers,
                                 heads=args.heads)
    data = gpt_train.batches(args.warmup + args.steps, ctx=args.ctx,
                             global_batch=args.batch * world)
    if mode.startswith("zero"):
        import zero.torch as zt
        engine, _, _, _ = zt.initialize(model=model, model_parameters=model.parameters(),
                                        config=cfg)
        close = engine.destroy
    else:
        import deepspeed
        for k, v in (("RANK", rank), ("WORLD_SIZE", world), ("LOCAL_RANK", rank),
                     ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", os.environ["BENCH_PORT"])):
            os.environ[k] = str(v)
        deepspeed.init_distributed(dist_backend="gloo")
        p = cfg.pop("optimizer")["params"]
        cfg["zero_allow_untested_optimizer"] = True
        opt = torch.optim.AdamW(model.parameters(), lr=p["lr"], betas=tuple(p["betas"]),
                                eps=p["eps"], weight_decay=p["weight_decay"])
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)

        def close():
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()
    wall: List[float] = []
    cpu: List[float] = []
    losses: List[float] = []
    for i, (x, y) in enumerate(data):
        xs, ys = x.chunk(world)[rank], y.chunk(world)[rank]
        t0, c0 = time.perf_counter(), time.process_time()
        loss = engine(xs, ys)
        engine.backward(loss)
        engine.step()
        t1, c1 = time.perf_counter(), time.process_time()
        losses.append(float(loss))
        if i >= args.warmup:
            wall.append(t1 - t0)
            cpu.append(c1 - c0)
    close()
    out = {"mode": mode, "rank": rank, "ranks": world, "torch": torch.__version__,
           "wall_ms": [round(w * 1e3, 2) for w in wall],
           "cpu_ms": [round(c * 1e3, 2) for c in cpu],
           "losses": [round(v, 6) for v in losses]}
    with open(os.path.join(args.outdir, f"{mode}.{rank}.json"), "w") as f:
        json.dump(out, f)


def start_load(n: int) -> List[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop_load(procs: List[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def run_mode(args, mpirun: str, mode: str, load: int, outdir: str,
             env: Dict[str, str]) -> List[dict]:
    label = mode.split("@")[1] if "@" in mode else None
    paths = dict(kv.split("=", 1) for kv in args.zero_path)
    if label in paths:  # an older zero beside this one, for A/B runs
        env = dict(env, PYTHONPATH=paths[label])
    extra = dict(kv.split("=", 1)[1].split("=", 1) for kv in args.zero_env
                 if kv.split("=", 1)[0] == label) if label else {}
    env = dict(env, **extra)
    env = dict(env, BENCH_PORT=str(free_port()), DS_ACCELERATOR="cpu",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = [mpirun, "-np", str(args.ranks), "--oversubscribe", "--bind-to", "none",
           "--mca", "btl", "self,vader", "-x", "PYTHONPATH", "-x", "BENCH_PORT",
           "-x", "DS_ACCELERATOR",
           *(["-x", "OMP_NUM_THREADS"] if "OMP_NUM_THREADS" in env else []),
           *sum((["-x", k] for k in extra), []),
           args.python, os.path.abspath(__file__), "--worker", mode, "--outdir", outdir,
           *sum(([f"--{k}", str(getattr(args, k))] for k in
                 ("dim", "layers", "heads", "ctx", "batch", "steps", "warmup",
                  "bucket", "threads")), [])]
    procs = start_load(load)
    la0 = loadavg()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                              timeout=args.timeout)
    except subprocess.TimeoutExpired:
        proc = None
    finally:
        la1 = loadavg()
        stop_load(procs)
    if proc is None or proc.returncode != 0:
        print(json.dumps({"mode": mode, "load": load, "error":
                          "timeout" if proc is None else proc.returncode,
                          "stderr": "" if proc is None else proc.stderr[-2000:]}), flush=True)
        return []
    rows = []
    for r in range(args.ranks):
        with open(os.path.join(outdir, f"{mode}.{r}.json")) as f:
            rows.append(dict(json.load(f), load=load, loadavg_before=la0, loadavg_after=la1))
    return rows


def summary(mode: str, load: int, runs: List[List[dict]]) -> dict:
    ratios = [w / c for rows in runs for r in rows for w, c in zip(r["wall_ms"], r["cpu_ms"])]
    # The slowest rank's median per run, then the median over runs.
    wall = statistics.median(max(statistics.median(r["wall_ms"]) for r in rows) for rows in runs)
    cpu = statistics.median(max(statistics.median(r["cpu_ms"]) for r in rows) for rows in runs)
    las = [r[k][0] for rows in runs for r in rows for k in ("loadavg_before", "loadavg_after")]
    return {"summary": mode, "load": load, "runs": len(runs), "wall_ms": round(wall, 1),
            "cpu_ms": round(cpu, 1), "wall_per_cpu_median": round(statistics.median(ratios), 3),
            "wall_per_cpu_max": round(max(ratios), 3),
            "wall_per_cpu_p90": round(sorted(ratios)[int(0.9 * (len(ratios) - 1))], 3),
            "loadavg_1min": [min(las), max(las)]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", default="0,2", help="busy background processes, per setting")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--batch", type=int, default=2, help="sequences per rank per step")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2, help="rounds; modes interleave")
    ap.add_argument("--bucket", type=int, default=500_000)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--venv", default=VENV)
    ap.add_argument("--zero-path", action="append", default=[], metavar="LABEL=DIR",
                    help="a mode zeroN@LABEL imports zero from DIR (repeatable)")
    ap.add_argument("--zero-env", action="append", default=[], metavar="LABEL=NAME=VALUE",
                    help="a mode zeroN@LABEL runs with NAME=VALUE set (repeatable)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per run")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--outdir", help=argparse.SUPPRESS)
    ap.add_argument("--python", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    mpirun = shutil.which("mpirun")
    if not mpirun:
        print("loaded_wait_bench: mpirun not found", file=sys.stderr)
        return 2
    args.python = os.path.join(args.venv, "bin", "python")
    import importlib.util
    spec = importlib.util.find_spec("zero")
    # Only zero's own directory on the workers' path: this Python's path
    # would hand Debian's torch to the venv's Python.
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(spec.origin))
               if spec is not None and spec.origin else "")
    loads = [int(x) for x in args.loads.split(",")]
    modes = args.modes.split(",")
    print(json.dumps({"bench": "loaded_wait_bench", "ranks": args.ranks, "loads": loads,
                      "modes": modes, "cpus": os.cpu_count(), "loadavg": loadavg(),
                      "dim": args.dim, "layers": args.layers, "ctx": args.ctx,
                      "batch": args.batch, "steps": args.steps, "warmup": args.warmup,
                      "torch_threads": args.threads,
                      "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}), flush=True)
    runs: Dict[tuple, List[List[dict]]] = {}
    t_start = time.time()
    ok = True
    with tempfile.TemporaryDirectory() as outdir:
        for rnd in range(args.repeat):
            for load in loads:
                for mode in modes:
                    rows = run_mode(args, mpirun, mode, load, outdir, env)
                    ok &= bool(rows)
                    for r in rows:
                        print(json.dumps(dict(r, run=rnd)), flush=True)
                    if rows:
                        runs.setdefault((load, mode), []).append(rows)
    for (load, mode), rr in runs.items():
        print(json.dumps(summary(mode, load, rr)), flush=True)
    print(json.dumps({"bench_done": True, "wall_s": round(time.time() - t_start, 1),
                      "loadavg": loadavg()}), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
