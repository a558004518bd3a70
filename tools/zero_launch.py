#!/usr/bin/env python3
"""zero-launch: runs a program on several ranks, as the `deepspeed` launcher.

    zero-launch [--hostfile F] [--num_nodes N] [--num_gpus N | --num_procs N]
                [--include SPEC | --exclude SPEC] [--master_addr A]
                [--master_port P] [--dry-run] PROGRAM [ARGS...]

With a hostfile (default /job/hostfile, DeepSpeed's format: `worker1
slots=8`, `#` comments, a repeated host is an error) the ranks spread over
its hosts; without one they run on this host: --num_gpus/--num_procs of
them (default: one per GPU nvidia-smi lists, else 1). --include/--exclude
take DeepSpeed's syntax (`worker1:0,1@worker2`; `localhost:0,1` without a
hostfile), --num_nodes keeps the first N hosts, --num_gpus the first N
slots of each. A PROGRAM ending in .py runs under this Python with -u.

OpenMPI's mpirun starts and wires the ranks (as DeepSpeed's OpenMPI
runner); each rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE,
MASTER_ADDR and MASTER_PORT (default: the first host, 29500) and, when
nvidia-smi exists, CUDA_VISIBLE_DEVICES set to its own slot (one GPU per
local rank).
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections import OrderedDict


class HostfileError(ValueError):
    pass


# Host names: letters, digits, '.', '_' and '-', not starting with '-' (the
# mpirun hostfile and the --include/--exclude syntax give ':', '@', ',' and
# blanks a meaning). Slot counts: ASCII digits, at most MAX_SLOTS.
HOST_RE = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*", re.ASCII)
MAX_SLOTS = 1 << 16


def check_host(host, where):
    if not HOST_RE.fullmatch(host):
        raise HostfileError(f"{where}: host {host!r} is not a host name "
                            "(letters, digits, '.', '_', '-')")
    return host


def parse_hostfile(text):
    """Returns an OrderedDict host -> slots."""
    hosts = OrderedDict()
    # Lines as a text editor counts them (str.splitlines also splits at
    # \x0b, \x1c, \u2028, ...), so errors name the right line.
    for lineno, raw in enumerate(text.split("\n"), 1):
        line = raw.split("#", 1)[0].strip(" \t\r")
        if not line:
            continue
        m = re.fullmatch(r"(\S+)[ \t]+slots=([0-9]+)", line, re.ASCII)
        if not m:
            raise HostfileError(f"hostfile line {lineno}: expected 'HOST slots=N', got {raw!r}")
        host = check_host(m.group(1), f"hostfile line {lineno}")
        if len(m.group(2)) > 6 or not 1 <= int(m.group(2)) <= MAX_SLOTS:
            raise HostfileError(f"hostfile line {lineno}: slots must be 1..{MAX_SLOTS}, "
                                f"got {m.group(2)}")
        if host in hosts:
            raise HostfileError(f"hostfile line {lineno}: host {host!r} is repeated")
        hosts[host] = int(m.group(2))
    if not hosts:
        raise HostfileError("hostfile: no hosts")
    return hosts


def parse_filter(spec):
    """'worker1:0,1@worker2' -> {'worker1': [0, 1], 'worker2': None}."""
    out = OrderedDict()
    for part in spec.split("@"):
        if not part:
            raise HostfileError(f"filter {spec!r}: empty host entry")
        host, sep, slots = part.partition(":")
        check_host(host, f"filter {spec!r}")
        if host in out:
            raise HostfileError(f"filter {spec!r}: host {host!r} is repeated")
        if not sep:
            out[host] = None
            continue
        ids = slots.split(",")
        if not all(re.fullmatch(r"[0-9]{1,6}", i, re.ASCII) for i in ids):
            raise HostfileError(f"filter {spec!r}: slots of {host!r} must be integers >= 0")
        out[host] = sorted({int(i) for i in ids})
    return out


def select(hosts, include=None, exclude=None, num_nodes=-1, num_gpus=-1):
    """Applies DeepSpeed's filters; returns OrderedDict host -> slot count."""
    return OrderedDict((h, len(s)) for h, s in
                       select_slots(hosts, include, exclude, num_nodes, num_gpus).items())


def select_slots(hosts, include=None, exclude=None, num_nodes=-1, num_gpus=-1):
    """As select, but host -> the list of chosen slot (GPU) ids."""
    if include and exclude:
        raise HostfileError("--include and --exclude are mutually exclusive")
    chosen = OrderedDict((h, list(range(n))) for h, n in hosts.items())
    if include:
        new = OrderedDict()
        for h, slots in parse_filter(include).items():
            if h not in hosts:
                raise HostfileError(f"--include: unknown host {h!r}")
            if slots is not None and max(slots) >= hosts[h]:
                raise HostfileError(f"--include: {h!r} has {hosts[h]} slots, asked for slot {max(slots)}")
            new[h] = slots if slots is not None else list(range(hosts[h]))
        chosen = new
    if exclude:
        for h, slots in parse_filter(exclude).items():
            if h not in hosts:
                raise HostfileError(f"--exclude: unknown host {h!r}")
            if slots is not None and max(slots) >= hosts[h]:
                raise HostfileError(f"--exclude: {h!r} has {hosts[h]} slots, asked for slot {max(slots)}")
            if slots is None:
                chosen.pop(h, None)
            elif h in chosen:
                chosen[h] = [s for s in chosen[h] if s not in slots]
                if not chosen[h]:
                    chosen.pop(h)
    if num_nodes > 0:
        chosen = OrderedDict(list(chosen.items())[:num_nodes])
    if num_gpus > 0:
        chosen = OrderedDict((h, s[:num_gpus]) for h, s in chosen.items())
    if not chosen:
        raise HostfileError("no slots left after filtering")
    return chosen


def local_gpu_count():
    """GPUs nvidia-smi lists (0 without nvidia-smi or when it fails)."""
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def program_command(program):
    """A .py program runs under this Python, unbuffered (as deepspeed)."""
    program = list(program)
    if program and program[0].endswith(".py"):
        return [sys.executable, "-u"] + program
    return program


def mpirun_command(selected, hostfile_path, program, master_addr=None, master_port=None,
                   bind_gpus=False):
    """selected: host -> slot count or list of slot ids (the GPUs to bind)."""
    counts = OrderedDict((h, s if isinstance(s, int) else len(s)) for h, s in selected.items())
    total = sum(counts.values())
    cmd = ["mpirun", "-n", str(total), "-hostfile", hostfile_path, "--map-by", "slot"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if master_addr is None:
        first = next(iter(counts))
        master_addr = "127.0.0.1" if first in ("localhost", "127.0.0.1") else first
    env = [("MASTER_ADDR", master_addr), ("MASTER_PORT", 29500 if master_port is None else master_port)]
    if bind_gpus:
        slots = ";".join(",".join(str(i) for i in (s if not isinstance(s, int) else range(s)))
                         for s in selected.values())
        env.append((SLOTS_ENV, slots))
    for k, v in env:
        cmd += ["-x", f"{k}={v}"]
    for k in ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH"):
        if k in os.environ:
            cmd += ["-x", k]
    # Each rank starts through this file, which sets the torch-style
    # variables from OpenMPI's and then becomes the program.
    shim = [sys.executable, "-u", os.path.abspath(__file__), RANK_SHIM_FLAG]
    return cmd + shim + program_command(program)


SLOTS_ENV = "ZERO_LAUNCH_SLOTS"
RANK_SHIM_FLAG = "--zero-launch-rank"


def rank_env(environ):
    """The variables one rank gets, from OpenMPI's (OMPI_COMM_WORLD_*) and
    the GPU slots of each host (ZERO_LAUNCH_SLOTS: `0,1;2,3`, hosts in
    order; ranks fill them in order, --map-by slot)."""
    rank = int(environ.get("OMPI_COMM_WORLD_RANK", environ.get("PMIX_RANK", "0")))
    size = int(environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    local = int(environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
    local_size = int(environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1"))
    env = {"RANK": str(rank), "WORLD_SIZE": str(size), "LOCAL_RANK": str(local),
           "LOCAL_SIZE": str(local_size)}
    slots = environ.get(SLOTS_ENV)
    if slots:
        per_host = [[int(x) for x in h.split(",") if x] for h in slots.split(";")]
        first = 0
        for gpus in per_host:
            if rank < first + len(gpus):
                env["CUDA_VISIBLE_DEVICES"] = str(gpus[rank - first])
                break
            first += len(gpus)
    return env


def rank_main(program):
    os.environ.update(rank_env(os.environ))
    os.environ.pop(SLOTS_ENV, None)
    os.execvp(program[0], program)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == RANK_SHIM_FLAG:
        return rank_main(argv[1:])
    ap = argparse.ArgumentParser(prog="zero-launch", description=__doc__.splitlines()[0])
    ap.add_argument("--hostfile", default="/job/hostfile")
    ap.add_argument("--num_nodes", type=int, default=-1)
    ap.add_argument("--num_gpus", "--num_procs", dest="num_gpus", type=int, default=-1,
                    help="ranks per host (without a hostfile: on this host)")
    ap.add_argument("--include", default="")
    ap.add_argument("--exclude", default="")
    ap.add_argument("--master_addr")
    ap.add_argument("--master_port", type=int)
    ap.add_argument("--dry-run", action="store_true", help="print the mpirun command only")
    ap.add_argument("program", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    if not a.program:
        ap.error("no program to launch")
    if a.master_port is not None and not 1 <= a.master_port <= 65535:
        ap.error(f"--master_port must be 1..65535, got {a.master_port}")
    if a.num_gpus > MAX_SLOTS:
        ap.error(f"--num_gpus/--num_procs must be at most {MAX_SLOTS}, got {a.num_gpus}")
    gpus = local_gpu_count()
    try:
        if os.path.isfile(a.hostfile):
            with open(a.hostfile, "rb") as f:
                data = f.read()
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise HostfileError(f"hostfile {a.hostfile}: not UTF-8 text ({e.reason} at byte {e.start})")
            hosts = parse_hostfile(text)
        else:  # this host alone, as deepspeed without a hostfile
            n = a.num_gpus if a.num_gpus > 0 else max(gpus, 1)
            hosts = OrderedDict([("localhost", n)])
        selected = select_slots(hosts, a.include or None, a.exclude or None,
                                a.num_nodes, a.num_gpus)
    except (OSError, HostfileError) as e:
        print(f"zero_launch: {e}", file=sys.stderr)
        return 2
    with tempfile.NamedTemporaryFile("w", suffix=".hostfile", delete=False) as f:
        for h, s in selected.items():
            f.write(f"{h} slots={len(s)}\n")
        path = f.name
    cmd = mpirun_command(selected, path, a.program, a.master_addr, a.master_port,
                         bind_gpus=gpus > 0)
    print(" ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
    if a.dry_run:
        os.unlink(path)
        return 0
    try:
        return subprocess.call(cmd)
    finally:
        os.unlink(path)


def main_exit():
    """The ``zero-launch`` console script of the wheel (this file is
    ``zero/launch.py`` there)."""
    sys.exit(main())


if __name__ == "__main__":
    sys.exit(main())
