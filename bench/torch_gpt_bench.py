#!/usr/bin/env python3
"""zero.torch (ZeRO stages 1-3) against torch DDP + AdamW and DDP +
ZeroRedundancyOptimizer (gloo) on the byte-level GPT of
examples/python/gpt_train.py, scaled to ~7M params, at 2 and 4 ranks.

    bazel build //bench:torch_gpt_bench && bazel-bin/bench/torch_gpt_bench
    /usr/bin/python3 bench/torch_gpt_bench.py [--ranks 2,4] [--dim 384]
        [--layers 4] [--heads 6] [--ctx 64] [--batch 1] [--steps 4]
        [--warmup 1] [--repeat 2]
        [--modes zero1,zero2,zero3,zero3_wrap,ddp,ddp_zero_redundancy,compute_only]

Seeing where the time goes (the seed's tuning checklist; ``--observe``,
``bench/observe_all.sh`` runs it and ``bench/plot.py`` draws it):
``compute_only`` times the model's forward+backward alone (torch, no zero,
no optimizer); ``comm_onlyN`` runs a zero engine of stage N over the same
params at the same bucket sizes with no model compute and reports the time
its collectives took per step (the comms log); ``zero0``..``zero3`` with
``--observe`` add the step breakdown (``wall_clock_breakdown``, medians per
phase) and the model-state bytes per rank measured (``zero_stats``) beside
``zero.estimate``'s for the same config.

Modes ``zeroN_offload`` add ``offload_optimizer: cpu``; the peers of
torch_peers.py (``ddp``, ``ddp_zero_redundancy``, ``fsdp2``,
``fsdp2_grad_op``, ``dsN``, ``dsN_offload``; FSDP2 and DeepSpeed need a
current torch: run this file with the venv's Python, as peer_table.py does)
get the config zero gets. Modes ``zeroN_ac`` add the ds_config ``activation_checkpointing`` section
(zero.torch recomputes each block in backward); ``zero3_wrap`` gathers per
transformer block (``wrap_policy={Block}``) instead of per module. Every (ranks, mode) runs in
fresh processes (one ``mpirun -np RANKS`` each) so a rank's peak RSS
(getrusage ru_maxrss) belongs to that mode alone. Same model (rank 0's
init), same data (each rank its slice of every global batch), same AdamW.
Prints JSON lines to stdout: a header, one line per (round, ranks, mode,
rank): step time and the process's CPU time per step (medians over --steps
after --warmup; CPU time counts every thread, so it is less sensitive to
other load on the machine), peak RSS, the RSS before the model was made
(after imports) and the growth over it, losses; then one summary per
(ranks, mode) from its fastest of --repeat runs (rounds interleave the
modes): the maximum over ranks and ratios against DDP at the same rank
count (step time, CPU time, peak RSS, RSS growth) and the largest loss
difference from DDP; with ``compute_only`` in the modes (the default) also
``compute_floor_cpu_vs_ddp`` (the forward+backward alone over DDP's step: no
step of this model can take less) and ``beyond_compute_cpu_vs_ddp`` (the
mode's CPU beyond that floor over DDP's beyond it). Needs Debian's python3-torch, openmpi-bin and the
``zero`` package on PYTHONPATH (or installed from //bindings/python:wheel).
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
import threading
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples", "python")
sys.path.insert(0, HERE)
from torch_compare import free_port, peak_rss_mb, rss_mb  # noqa: E402
import torch_peers  # noqa: E402

MODES = ["zero1", "zero2", "zero3", "zero3_wrap", "ddp", "ddp_zero_redundancy", "compute_only"]


def threads_cpu_s() -> Dict[str, float]:
    """CPU seconds so far of this process's threads other than the calling
    one, summed by thread name (/proc/self/task/*/comm; zero names its own
    threads zero-*). Read with clock_gettime on each thread's CPU clock
    (nanoseconds; /proc's utime counts 10 ms ticks)."""
    me = threading.get_native_id()
    out: Dict[str, float] = {}
    for t in os.listdir("/proc/self/task"):
        tid = int(t)
        if tid == me:
            continue
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                name = f.read().strip()
            cpu = time.clock_gettime(((~tid) << 3) | 6)  # CPUCLOCK_SCHED of tid
        except OSError:
            continue  # the thread ended meanwhile
        out[name] = out.get(name, 0.0) + cpu
    return out


def threads_delta(before: Dict[str, float], after: Dict[str, float]) -> Dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


class Attribution:
    """Where a zero.torch step's time goes, by self time (a region's time
    less that of regions entered inside it): ``zero_python`` (zero.torch's
    own Python: engine.forward/backward/step and its hooks), ``runtime``
    (calls into the C runtime, ``zero._zero_c``) and ``torch`` (the model's
    forward and autograd's backward). zero.torch's hooks run inside torch's
    regions and are counted as zero_python there. The stage-3 guard (a
    TorchFunctionMode) runs inside the model's torch functions and is not
    separated. Times are the calling thread's CPU time (time.thread_time),
    which other load on the machine disturbs far less than wall time; each
    wrapped call adds two clock reads."""

    def __init__(self) -> None:
        self.stack: List[list] = []
        self.self_s: Dict[str, float] = {}
        self.calls: Dict[str, int] = {}

    def wrap(self, cat: str, f):
        stack, self_s, calls = self.stack, self.self_s, self.calls

        def wrapped(*a, **k):
            now = time.thread_time()
            if stack:
                top = stack[-1]
                self_s[top[0]] = self_s.get(top[0], 0.0) + now - top[1]
            stack.append([cat, now])
            try:
                return f(*a, **k)
            finally:
                end = time.thread_time()
                c, t = stack.pop()
                self_s[c] = self_s.get(c, 0.0) + end - t
                calls[c] = calls.get(c, 0) + 1
                if stack:
                    stack[-1][1] = end
        return wrapped

    def take(self) -> Dict[str, float]:
        out = {f"{k}_ms": v * 1e3 for k, v in self.self_s.items()}
        out.update({f"{k}_calls": v for k, v in self.calls.items()})
        self.self_s.clear()
        self.calls.clear()
        return out


def instrument_zero_torch(att: Attribution) -> None:
    """Before initialize: zero.torch's entry points and hooks (class level,
    so the hooks registered at setup are the wrapped ones) and autograd."""
    import torch
    import zero.torch as zt

    cls = zt.ZeroTorchEngine
    for name in ("forward", "backward", "step", "_pre_forward", "_post_forward",
                 "_gather_module", "_release_module", "_release_param",
                 "_hand_in", "_on_param_use"):
        setattr(cls, name, att.wrap("zero_python", getattr(cls, name)))
    torch.autograd.backward = att.wrap("torch", torch.autograd.backward)


class RuntimeProxy:
    """Stands in for a zero.Engine's C module: each call is a runtime region."""

    def __init__(self, inner, att: Attribution) -> None:
        self._inner = inner
        self._att = att

    def __getattr__(self, name):
        f = getattr(self._inner, name)
        return self._att.wrap("runtime", f) if callable(f) else f


def bench_config(args: argparse.Namespace, stage: int, world: int,
                 activation_checkpointing: bool = False) -> dict:
    """The ds_config of every zero mode and of DeepSpeed: gpt_train's, at
    --batch per rank and --bucket elements per bucket."""
    import gpt_train
    cfg = gpt_train.ds_config(stage, world, activation_checkpointing=activation_checkpointing)
    cfg["train_batch_size"] = args.batch * world
    cfg["train_micro_batch_size_per_gpu"] = args.batch
    # DeepSpeed's default buckets (5e8 elements) would each hold the whole
    # model; a few 1e5 elements is what a user would tune to.
    cfg["zero_optimization"].update(
        reduce_bucket_size=args.bucket, allgather_bucket_size=args.bucket,
        stage3_prefetch_bucket_size=args.bucket)
    return cfg


def worker(args: argparse.Namespace) -> None:
    """One rank of one mode (launched by mpirun)."""
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, EXAMPLES)
    import gpt_train

    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    world = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    full_mode = args.worker  # "MODE" or "MODE@LABEL" (--zero-path LABEL=DIR)
    mode = full_mode.split("@")[0]
    if mode.startswith("zero"):
        import zero.torch as ds
    sizes = dict(ctx=args.ctx, dim=args.dim, layers=args.layers, heads=args.heads)
    data = gpt_train.batches(args.warmup + args.steps, ctx=args.ctx,
                             global_batch=args.batch * world)
    baseline = rss_mb()  # imports done, no model yet
    model = gpt_train.make_model(**sizes)
    n_params = sum(p.numel() for p in model.parameters())
    times: List[float] = []
    cpu_times: List[float] = []
    thread_times: List[float] = []  # the calling thread's CPU time
    others: List[Dict[str, float]] = []  # other threads' CPU by name
    losses: List[float] = []
    extra: Dict[str, float] = {}

    if mode == "compute_only":
        for i, (x, y) in enumerate(data):
            xs, ys = x.chunk(world)[rank], y.chunk(world)[rank]
            o0 = threads_cpu_s()
            t0, c0, h0 = time.perf_counter(), time.process_time(), time.thread_time()
            loss = model(xs, ys)
            loss.backward()
            model.zero_grad(set_to_none=True)
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            dh = time.thread_time() - h0
            od = threads_delta(o0, threads_cpu_s())
            losses.append(loss.item())
            if i >= args.warmup:
                times.append(dt)
                cpu_times.append(dc)
                thread_times.append(dh)
                others.append(od)
    elif mode.startswith("comm_only"):
        extra.update(comm_only(args, model, int(mode[-1]), world, times, cpu_times))
    elif mode.startswith("zero"):
        stage = int(mode[4])
        cfg = bench_config(args, stage, world, activation_checkpointing=mode.endswith("_ac"))
        if "_offload" in mode:  # ZeRO-Offload: the optimizer's state and step on the host
            cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
        # zero3_wrap: stage 3 gathering per transformer block (wrap_policy).
        wrap = {gpt_train.Block} if "_wrap" in mode else None
        if args.observe:
            cfg["wall_clock_breakdown"] = True
            import zero
            est = zero.estimate({n: tuple(p.shape) for n, p in model.named_parameters()},
                                cfg, ranks_per_node=world, gpu=False)
            extra["estimated"] = {k: est[k] for k in MODEL_STATE}
        breakdowns: List[Dict[str, float]] = []
        att = Attribution() if args.overhead else None
        if att is not None:
            instrument_zero_torch(att)
        engine, _, _, _ = ds.initialize(model=model,
                                        model_parameters=model.parameters(),
                                        config=cfg, wrap_policy=wrap)
        assert engine.world_size == world
        if att is not None:
            engine.zero._c = RuntimeProxy(engine.zero._c, att)
            model.forward = att.wrap("torch", model.forward)
            att.take()
        parts: List[Dict[str, float]] = []
        for i, (x, y) in enumerate(data):
            xs, ys = x.chunk(world)[rank], y.chunk(world)[rank]
            o0 = threads_cpu_s()
            t0, c0, h0 = time.perf_counter(), time.process_time(), time.thread_time()
            loss = engine(xs, ys)
            engine.backward(loss)
            engine.step()
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            dh = time.thread_time() - h0
            od = threads_delta(o0, threads_cpu_s())
            losses.append(loss.item())
            part = att.take() if att is not None else {}
            if i >= args.warmup:
                times.append(dt)
                cpu_times.append(dc)
                thread_times.append(dh)
                others.append(od)
                if att is not None:
                    parts.append(part)
                if args.observe:
                    breakdowns.append(engine.zero.step_breakdown())
        if parts:
            extra["overhead_per_step"] = {
                k: round(statistics.median(p.get(k, 0) for p in parts), 3)
                for k in sorted(set().union(*parts))}
        stats = engine.stats()
        extra["model_state_mb"] = (stats["master_bytes"] + stats["optimizer_bytes"]
                                   + stats["grad_bytes"] + stats["param_bytes"]) / 2**20
        if args.observe:
            extra["measured"] = {k: stats[k] for k in MODEL_STATE}
            extra["breakdown_ms"] = {k: statistics.median(b[k] for b in breakdowns)
                                     for k in breakdowns[0] if k.endswith("_ms")}
        engine.destroy()
    else:  # a peer framework (torch_peers.py), on the config zero gets
        step, close = torch_peers.make_peer(
            mode, model, bench_config(args, int(mode[2]) if mode.startswith("ds") else 0,
                                      world),
            rank, world, os.environ["BENCH_PORT"], lambda m, x, y: m(x, y),
            fsdp_units=lambda m: [b for b in m.modules() if isinstance(b, gpt_train.Block)],
            lr=gpt_train.LR)
        for i, (x, y) in enumerate(data):
            xs, ys = x.chunk(world)[rank], y.chunk(world)[rank]
            o0 = threads_cpu_s()
            t0, c0, h0 = time.perf_counter(), time.process_time(), time.thread_time()
            loss = step(xs, ys)
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            dh = time.thread_time() - h0
            od = threads_delta(o0, threads_cpu_s())
            losses.append(loss.item())
            if i >= args.warmup:
                times.append(dt)
                cpu_times.append(dc)
                thread_times.append(dh)
                others.append(od)
        close()

    peak = peak_rss_mb()
    out = {"ranks": world, "mode": full_mode, "rank": rank, "params": n_params,
           "step_ms": statistics.median(times) * 1e3,
           "step_cpu_ms": statistics.median(cpu_times) * 1e3,
           "step_thread_cpu_ms": (statistics.median(thread_times) * 1e3
                                  if thread_times else None),
           # Per step, the other threads' CPU time by thread name (median).
           "other_threads_cpu_ms": ({k: round(statistics.median(o.get(k, 0.0) for o in others)
                                              * 1e3, 2)
                                     for k in sorted(set().union(*others))}
                                    if others else None),
           "peak_rss_mb": peak, "baseline_rss_mb": baseline,
           "rss_growth_mb": peak - baseline, "losses": losses, **extra}
    with open(os.path.join(args.outdir, f"{world}.{full_mode}.{rank}.json"), "w") as f:
        json.dump(out, f)


# zero_stats' model-state categories, measured and estimated.
MODEL_STATE = ("param_bytes", "grad_bytes", "master_bytes", "optimizer_bytes", "buffer_bytes")


def comm_only(args: argparse.Namespace, model, stage: int, world: int,
              times: List[float], cpu_times: List[float]) -> Dict[str, float]:
    """A stage-`stage` zero engine over the model's params (same buckets),
    stepped with no model compute: gathers (stage 3) and gradients handed in
    as backward would; the time its data collectives took per step, from the
    comms log (control traffic left out)."""
    import numpy as np
    import zero

    cfg = {"zero_optimization": {"stage": stage, "reduce_bucket_size": args.bucket,
                                 "allgather_bucket_size": args.bucket,
                                 "stage3_prefetch_bucket_size": args.bucket},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
           "steps_per_print": 0, "comms_logger": {"enabled": True}}
    eng = zero.Engine(cfg, comm=zero.Comm.mpi())
    names = []
    for name, p in model.named_parameters():
        eng.register_param(name, p.detach().numpy())
        names.append(name)
    eng.finalize()

    def collective_ms() -> float:
        return sum(e["total_ms"] for e in eng.comm_log() if not e["control"])

    comm = []
    for i in range(args.warmup + args.steps):
        before = collective_ms()
        t0, c0 = time.perf_counter(), time.process_time()
        if stage == 3:
            for n in names:  # forward
                eng.gather(n)
                eng.release(n)
        for n in reversed(names):  # backward
            if stage == 3:
                eng.gather(n)
            eng.grad_buffer(n)[...] = np.float32(1e-3)
            eng.grad_ready(n)
            if stage == 3:
                eng.release(n)
        eng.step()
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        if i >= args.warmup:
            times.append(dt)
            cpu_times.append(dc)
            comm.append(collective_ms() - before)
    eng.close()
    return {"comm_ms": statistics.median(comm) if comm else 0.0}


def run_mode(args: argparse.Namespace, mpirun: str, ranks: int, mode: str,
             outdir: str, rnd: int) -> List[dict]:
    env = dict(os.environ, BENCH_PORT=str(free_port()), OMP_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if args.mmap_threshold > 0:
        env["MALLOC_MMAP_THRESHOLD_"] = str(args.mmap_threshold)
    # MODE@LABEL: zero from --zero-path LABEL=DIR (e.g. an older build), for
    # side-by-side comparisons of two zero.torch versions in one run.
    label = mode.split("@")[1] if "@" in mode else None
    front = [dict(kv.split("=", 1) for kv in args.zero_path)[label]] if label else []
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in front + [env.get("PYTHONPATH", "")] + sys.path if p)
    cmd = [mpirun, "-np", str(ranks), "--oversubscribe", "--bind-to", "none",
           "--mca", "btl", "self,vader",
           "-x", "PYTHONPATH", "-x", "BENCH_PORT", "-x", "OMP_NUM_THREADS",
           *(["-x", "MALLOC_MMAP_THRESHOLD_"] if args.mmap_threshold > 0 else []),
           sys.executable, os.path.abspath(__file__), "--worker", mode,
           "--outdir", outdir, "--dim", str(args.dim), "--layers", str(args.layers),
           "--heads", str(args.heads), "--ctx", str(args.ctx),
           "--batch", str(args.batch), "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--bucket", str(args.bucket),
           *(["--observe"] if args.observe else []),
           *(["--overhead"] if args.overhead else [])]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                              timeout=args.timeout)
    except subprocess.TimeoutExpired:
        print(json.dumps({"ranks": ranks, "mode": mode,
                          "error": f"timeout after {args.timeout} s"}), flush=True)
        return []
    if proc.returncode != 0:
        print(json.dumps({"ranks": ranks, "mode": mode, "error": proc.returncode,
                          "stderr": proc.stderr[-2000:]}), flush=True)
        return []
    rows = []
    for r in range(ranks):
        with open(os.path.join(outdir, f"{ranks}.{mode}.{r}.json")) as f:
            rows.append(dict(json.load(f), run=rnd))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def summary(rows: List[dict]) -> dict:
    return {"run": rows[0]["run"],
            "step_ms_max": max(r["step_ms"] for r in rows),
            "step_cpu_ms_max": max(r["step_cpu_ms"] for r in rows),
            "step_thread_cpu_ms_max": max(r.get("step_thread_cpu_ms") or 0 for r in rows),
            "peak_rss_mb_max": max(r["peak_rss_mb"] for r in rows),
            "rss_growth_mb_max": max(r["rss_growth_mb"] for r in rows)}


def driver(args: argparse.Namespace) -> int:
    mpirun = shutil.which("mpirun")
    if not mpirun:
        print("torch_gpt_bench: mpirun not found (apt-get install openmpi-bin)",
              file=sys.stderr)
        return 1
    ranks_list = [int(r) for r in args.ranks.split(",")]
    modes = args.modes.split(",")
    print(json.dumps({"bench": "torch_gpt_bench", "ranks": ranks_list,
                      "model": "examples/python/gpt_train.py TinyGPT",
                      "dim": args.dim, "layers": args.layers, "heads": args.heads,
                      "ctx": args.ctx, "micro_batch_per_rank": args.batch,
                      "steps": args.steps, "warmup": args.warmup,
                      "repeat": args.repeat, "dtype": "fp32",
                      "optimizer": "AdamW", "torch_threads_per_rank": 1,
                      "cpus": os.cpu_count(), "zero_bucket_elements": args.bucket,
                      "malloc_mmap_threshold": args.mmap_threshold}), flush=True)
    t_start = time.time()
    ok = True
    # Rounds interleave the modes, so load from elsewhere on the machine
    # falls on all of them; a summary takes each mode's fastest run.
    runs: Dict[int, Dict[str, List[List[dict]]]] = {r: {} for r in ranks_list}
    with tempfile.TemporaryDirectory() as outdir:
        for rnd in range(args.repeat):
            for ranks in ranks_list:
                for mode in modes:
                    rows = run_mode(args, mpirun, ranks, mode, outdir, rnd)
                    if rows:
                        runs[ranks].setdefault(mode, []).append(rows)
                    else:
                        ok = False
    for ranks in ranks_list:
        results = {mode: min(tries, key=lambda rows: summary(rows)["step_ms_max"])
                   for mode, tries in runs[ranks].items()}
        base = results.get("ddp")
        bsum = summary(base) if base else None
        for mode, rows in results.items():
            s = {"summary": mode, "ranks": ranks, "params": rows[0]["params"],
                 **summary(rows)}
            oh = [r["overhead_per_step"] for r in rows if "overhead_per_step" in r]
            if oh:
                s["overhead_per_step_max"] = {k: max(o.get(k, 0) for o in oh)
                                              for k in sorted(set().union(*oh))}
            zr = results.get("ddp_zero_redundancy")
            if zr:
                s["step_time_vs_ddp_zero_redundancy"] = (
                    s["step_ms_max"] / summary(zr)["step_ms_max"])
                s["step_cpu_vs_ddp_zero_redundancy"] = (
                    s["step_cpu_ms_max"] / summary(zr)["step_cpu_ms_max"])
            if bsum:
                s["step_time_vs_ddp"] = s["step_ms_max"] / bsum["step_ms_max"]
                s["step_cpu_vs_ddp"] = s["step_cpu_ms_max"] / bsum["step_cpu_ms_max"]
                if bsum["step_thread_cpu_ms_max"]:
                    s["step_thread_cpu_vs_ddp"] = (s["step_thread_cpu_ms_max"]
                                                   / bsum["step_thread_cpu_ms_max"])
                s["peak_rss_vs_ddp"] = s["peak_rss_mb_max"] / bsum["peak_rss_mb_max"]
                s["rss_growth_vs_ddp"] = s["rss_growth_mb_max"] / bsum["rss_growth_mb_max"]
                comp = results.get("compute_only")
                if comp and mode != "compute_only":
                    # The floor no step of the same model can go under: the
                    # forward and backward alone. beyond_compute: this mode's
                    # CPU over that floor against DDP's (0: nothing but the
                    # model; 1: as much as DDP's all-reduce and AdamW).
                    c = summary(comp)["step_cpu_ms_max"]
                    s["compute_floor_cpu_vs_ddp"] = c / bsum["step_cpu_ms_max"]
                    if bsum["step_cpu_ms_max"] > c:
                        s["beyond_compute_cpu_vs_ddp"] = (
                            (s["step_cpu_ms_max"] - c) / (bsum["step_cpu_ms_max"] - c))
                if mode != "compute_only":  # it takes no optimizer step
                    s["loss_max_abs_diff_vs_ddp"] = max(
                        abs(a - b) for r, rb in zip(rows, base)
                        for a, b in zip(r["losses"], rb["losses"]))
            print(json.dumps({k: (round(v, 3) if isinstance(v, float) and
                                  not k.startswith("loss") else v)
                              for k, v in s.items()}), flush=True)
    print(json.dumps({"bench_done": True, "wall_s": round(time.time() - t_start, 1)}),
          flush=True)
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4", help="comma-separated rank counts")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1, help="sequences per rank per step")
    ap.add_argument("--steps", type=int, default=4, help="timed steps (median)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=2,
                    help="rounds over all runs; summaries take the fastest")
    ap.add_argument("--bucket", type=int, default=500_000,
                    help="zero reduce/allgather/prefetch bucket, elements")
    ap.add_argument("--mmap-threshold", type=int, default=131072,
                    help="MALLOC_MMAP_THRESHOLD_ for every mode (fixes glibc's "
                    "sliding threshold so freed buffers leave the peak RSS "
                    "comparable); 0 keeps glibc's default")
    ap.add_argument("--modes", default=",".join(MODES),
                    help="also compute_only, comm_only0..3, zero0, zeroN_offload, "
                    "fsdp2, fsdp2_grad_op, dsN, dsN_offload (torch_peers.py)")
    ap.add_argument("--observe", action="store_true",
                    help="zero modes: step breakdown, measured and estimated memory")
    ap.add_argument("--overhead", action="store_true",
                    help="zero modes: per step, the self time of zero.torch's own Python, "
                         "of runtime calls and of torch (class Attribution)")
    ap.add_argument("--zero-path", action="append", default=[], metavar="LABEL=DIR",
                    help="a mode MODE@LABEL imports zero from DIR (repeatable)")
    ap.add_argument("--timeout", type=int, default=240, help="seconds per run")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--outdir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
