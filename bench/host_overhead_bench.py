#!/usr/bin/env python3
"""Host overhead per step, per module and per param: zero.torch at stages
0-3 against FSDP2 (``fully_shard`` over gloo) and DeepSpeed (stages 0-2,
``DS_ACCELERATOR=cpu``) on a model whose compute is negligible: ``--layers``
``Linear(--width, --width)`` in a ``Sequential``, batch 1, so what a step
costs is the frameworks' own host work (hooks, bookkeeping, collectives'
launch and wait), not arithmetic.

    tools/install_current_torch.sh        # the peers' torch (once, cached)
    /usr/bin/python3 bench/host_overhead_bench.py [--layers 200] [--width 16]
        [--ranks 2] [--steps 30] [--warmup 5] [--repeat 2] [--bucket 500000000]
        [--modes zero0,zero1,zero2,zero3,zero3_per_param,fsdp2,ds0,ds1,ds2,torch]
        [--venv /opt/zero-venvs/torch-current]

Every framework gets the same ds_config, ``reduce_bucket_size`` and
``allgather_bucket_size`` included (``--bucket``, DeepSpeed's default 5e8:
one bucket for this model); ``--bucket 0`` leaves them out, and then zero
sizes its buckets from the model (hidden², 256 elements here: one bucket,
one all-reduce, per param) while DeepSpeed keeps 5e8. The peers' steps are
torch_peers.py's.

Every (mode, round) runs in fresh processes (``mpirun -np RANKS``). zero.torch
runs under the venv's Python when the venv can import it (same CPython ABI as
the Bazel-built extension), else under /usr/bin/python3 with Debian's torch;
the header line says which (``zero_python``, ``zero_torch``). FSDP2 and
DeepSpeed run under the venv's current torch; ``torch`` is one process of
plain torch (forward, backward, AdamW; no distribution), the floor any
framework adds to.

Prints JSON lines: a header; one line per (round, mode, rank); one summary
per mode from its fastest round (by the slowest rank's median step):
``step_us`` (wall), ``cpu_us`` (the process's CPU, all threads),
``main_cpu_us`` (the training thread's CPU: the host path itself),
``threads_cpu_us`` (every other thread of the process by name: the
runtime's, gloo's, torch's pools), each also ``_per_module`` (over the
Linear modules) and ``_per_param`` (over the param tensors); then the ratios
``zero3 / fsdp2``, ``zeroN / dsN`` (N = 0-2) and ``zero3 / zero3_per_param``
on each of those figures. ``zero3_per_param`` is stage 3 with one runtime
call per param for each gather and release (``ZERO_TORCH_PER_PARAM_CALLS=1``,
as zero.torch was before C ABI 1.15's batched calls); ``zero3`` makes one per
module.
Compute is negligible, so the machine's other load moves ``step_us``; the
CPU figures are steadier.
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
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_compare import free_port  # noqa: E402
from torch_gpt_bench import threads_cpu_s  # noqa: E402
import torch_peers  # noqa: E402

VENV = os.environ.get("ZERO_TORCH_CURRENT_VENV", "/opt/zero-venvs/torch-current")
MODES = ["zero0", "zero1", "zero2", "zero3", "zero3_per_param", "fsdp2", "ds0", "ds1", "ds2",
         "torch"]
LR = 1e-3


def make_model(layers: int, width: int):
    import torch
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])


def ds_config(stage: int, world: int, bucket: int = 0) -> dict:
    """The config every framework gets. ``bucket`` > 0 names
    reduce_bucket_size and allgather_bucket_size (elements) for all of them;
    0 leaves them out, and then the peers differ: DeepSpeed takes 5e8, zero
    sizes them from the model (hidden², docs/DEEPSPEED_COMPAT.md), 256
    elements for Linear(16, 16): one bucket reduced per param."""
    zo = {"stage": stage}
    if bucket > 0:
        zo.update(reduce_bucket_size=bucket, allgather_bucket_size=bucket)
    return {"train_batch_size": world, "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,
            "optimizer": {"type": "AdamW", "params": {"lr": LR, "weight_decay": 0.0}},
            "zero_optimization": zo,
            "steps_per_print": 10**9}


def worker(args: argparse.Namespace) -> None:
    """One rank of one mode (launched by mpirun, or alone for ``torch``)."""
    import torch
    torch.set_num_threads(1)
    mode = args.worker
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    model = make_model(args.layers, args.width)
    n_modules = args.layers
    n_params = len(list(model.parameters()))
    g = torch.Generator().manual_seed(1 + rank)
    data = [(torch.randn(1, args.width, generator=g), torch.randn(1, args.width, generator=g))
            for _ in range(args.warmup + args.steps)]

    if mode.startswith("zero"):
        if mode == "zero3_per_param":  # one runtime call per param, as before C ABI 1.15
            os.environ["ZERO_TORCH_PER_PARAM_CALLS"] = "1"
        import zero.torch as zt
        engine, _, _, _ = zt.initialize(model=model, model_parameters=model.parameters(),
                                        config=ds_config(int(mode[4]), world, args.bucket))
        assert engine.world_size == world

        def step(x, y):
            loss = torch.nn.functional.mse_loss(engine(x), y)
            engine.backward(loss)
            engine.step()
            return loss
        close = engine.destroy
    elif torch_peers.is_peer(mode):  # fsdp2: one unit per Linear, as zero3 gathers per module
        step, close = torch_peers.make_peer(
            mode, model, ds_config(int(mode[2]) if mode.startswith("ds") else 0, world,
                                   args.bucket),
            rank, world, os.environ["BENCH_PORT"],
            lambda m, x, y: torch.nn.functional.mse_loss(m(x), y), lr=LR)
    else:  # torch: one process, no distribution
        opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)

        def step(x, y):
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss
        close = None

    wall: List[float] = []
    cpu: List[float] = []
    main: List[float] = []
    others: List[Dict[str, float]] = []
    losses: List[float] = []
    for i, (x, y) in enumerate(data):
        o0 = threads_cpu_s()
        t0, c0, h0 = time.perf_counter(), time.process_time(), time.thread_time()
        loss = step(x, y)
        t1, c1, h1 = time.perf_counter(), time.process_time(), time.thread_time()
        o1 = threads_cpu_s()
        losses.append(float(loss))
        if i >= args.warmup:
            wall.append(t1 - t0)
            cpu.append(c1 - c0)
            main.append(h1 - h0)
            others.append({k: v - o0.get(k, 0.0) for k, v in o1.items()})
    if close is not None:
        close()
    names = sorted(set().union(*others))
    out = {"mode": mode, "rank": rank, "ranks": world, "torch": torch.__version__,
           "python": sys.executable, "modules": n_modules, "params": n_params,
           "step_us": statistics.median(wall) * 1e6,
           "cpu_us": statistics.median(cpu) * 1e6,
           "main_cpu_us": statistics.median(main) * 1e6,
           "threads_cpu_us_by_name": {k: round(statistics.median(o.get(k, 0.0) for o in others)
                                               * 1e6, 1) for k in names},
           "threads_cpu_us": statistics.median(sum(o.values()) for o in others) * 1e6,
           "losses": losses[:3] + losses[-1:]}
    with open(os.path.join(args.outdir, f"{mode}.{rank}.json"), "w") as f:
        json.dump(out, f)


def zero_importable(python: str, env: Dict[str, str]) -> bool:
    r = subprocess.run([python, "-c", "import zero.torch"], env=env,
                       capture_output=True, text=True, timeout=300)
    return r.returncode == 0


def venv_env(venv: str) -> Tuple[Dict[str, str], str, bool]:
    """(the workers' environment, the venv's Python, whether it imports
    torch). Only zero's own directory goes on the workers' path: this
    Python's sys.path would hand Debian's torch to the venv's Python."""
    import importlib.util
    spec = importlib.util.find_spec("zero")
    zero_dir = (os.path.dirname(os.path.dirname(spec.origin))
                if spec is not None and spec.origin else "")
    env = dict(os.environ)
    env["PYTHONPATH"] = zero_dir
    venv_py = os.path.join(venv, "bin", "python")
    have_venv = (os.access(venv_py, os.X_OK)
                 and subprocess.run([venv_py, "-c", "import torch"], env=env,
                                    capture_output=True).returncode == 0)
    return env, venv_py, have_venv


def run_mode(args, mpirun: str, python: str, mode: str, outdir: str, env: Dict[str, str]
             ) -> List[dict]:
    env = dict(env, BENCH_PORT=str(free_port()), OMP_NUM_THREADS="1",
               DS_ACCELERATOR="cpu", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    ranks = 1 if mode == "torch" else args.ranks
    cmd = [mpirun, "-np", str(ranks), "--oversubscribe", "--bind-to", "none",
           "--mca", "btl", "self,vader",
           "-x", "PYTHONPATH", "-x", "BENCH_PORT", "-x", "OMP_NUM_THREADS",
           "-x", "DS_ACCELERATOR",
           python, os.path.abspath(__file__), "--worker", mode, "--outdir", outdir,
           "--layers", str(args.layers), "--width", str(args.width),
           "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--bucket", str(args.bucket)]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                              timeout=args.timeout)
    except subprocess.TimeoutExpired:
        print(json.dumps({"mode": mode, "error": f"timeout after {args.timeout} s"}), flush=True)
        return []
    if proc.returncode != 0:
        print(json.dumps({"mode": mode, "error": proc.returncode,
                          "stderr": proc.stderr[-2000:]}), flush=True)
        return []
    rows = []
    for r in range(ranks):
        path = os.path.join(outdir, f"{mode}.{r}.json")
        with open(path) as f:
            rows.append(json.load(f))
        os.unlink(path)
        print(json.dumps(rows[-1]), flush=True)
    return rows


FIGURES = ("step_us", "cpu_us", "main_cpu_us", "threads_cpu_us")


def summarize(mode: str, rounds: List[List[dict]]) -> dict:
    best = min(rounds, key=lambda rows: max(r["step_us"] for r in rows))
    out = {"summary": mode, "torch": best[0]["torch"], "python": best[0]["python"],
           "ranks": best[0]["ranks"], "modules": best[0]["modules"],
           "params": best[0]["params"]}
    for k in FIGURES:
        v = max(r[k] for r in best)  # the slowest rank
        out[k] = round(v, 1)
        out[k + "_per_module"] = round(v / best[0]["modules"], 2)
        out[k + "_per_param"] = round(v / best[0]["params"], 2)
    out["threads_cpu_us_by_name"] = best[0]["threads_cpu_us_by_name"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker")
    ap.add_argument("--outdir")
    ap.add_argument("--layers", type=int, default=200)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--bucket", type=int, default=500_000_000,
                    help="reduce/allgather bucket elements in every framework's config "
                         "(DeepSpeed's default); 0: left out (zero then sizes it from "
                         "the model, DeepSpeed takes 5e8)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--venv", default=VENV, help="the current torch (tools/install_current_torch.sh)")
    ap.add_argument("--zero-python", default=None,
                    help="the Python that runs zero.torch (default: the venv's if it can "
                         "import zero.torch, else /usr/bin/python3)")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0

    mpirun = shutil.which("mpirun")
    if not mpirun:
        print("host_overhead_bench: mpirun not found (apt-get install openmpi-bin)",
              file=sys.stderr)
        return 2
    env, venv_py, have_venv = venv_env(args.venv)
    modes = args.modes.split(",")
    zero_py = args.zero_python
    if zero_py is None:
        zero_py = venv_py if have_venv and zero_importable(venv_py, env) else "/usr/bin/python3"
    peer_py = venv_py if have_venv else "/usr/bin/python3"

    def version(py: str) -> Optional[str]:
        r = subprocess.run([py, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, env=env)
        return r.stdout.strip() or None

    header = {"bench": "host_overhead", "layers": args.layers, "width": args.width,
              "ranks": args.ranks, "bucket": args.bucket, "steps": args.steps, "warmup": args.warmup,
              "repeat": args.repeat, "date": time.strftime("%Y-%m-%d"),
              "zero_python": zero_py, "zero_torch": version(zero_py),
              "peer_python": peer_py, "peer_torch": version(peer_py),
              "load_avg": os.getloadavg()[0]}
    if not have_venv:
        header["note"] = (f"no venv at {args.venv} (tools/install_current_torch.sh): "
                          "FSDP2 and DeepSpeed run on /usr/bin/python3's torch, if at all")
    elif zero_py != venv_py:
        header["note"] = ("zero.torch cannot be imported by the venv's Python: zero.torch "
                          "runs on Debian's torch, FSDP2 and DeepSpeed on the venv's")
    print(json.dumps(header), flush=True)

    results: Dict[str, List[List[dict]]] = {m: [] for m in modes}
    outdir = tempfile.mkdtemp(prefix="host_overhead_")
    try:
        for _ in range(args.repeat):  # rounds interleave the modes
            for mode in modes:
                py = zero_py if mode.startswith("zero") else (
                    "/usr/bin/python3" if mode == "torch" and not have_venv else peer_py)
                rows = run_mode(args, mpirun, py, mode, outdir, env)
                if rows:
                    results[mode].append(rows)
    finally:
        shutil.rmtree(outdir, ignore_errors=True)

    summary = {m: summarize(m, r) for m, r in results.items() if r}
    for s in summary.values():
        print(json.dumps(s), flush=True)
    pairs = ([("zero3", "fsdp2"), ("zero3_per_param", "fsdp2"), ("zero3", "zero3_per_param")]
             + [(f"zero{n}", f"ds{n}") for n in range(3)])
    for a, b in pairs:
        if a in summary and b in summary:
            print(json.dumps({"ratio": f"{a}/{b}",
                              **{k: round(summary[a][k] / summary[b][k], 3)
                                 for k in FIGURES if summary[b][k] > 0}}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
