#!/usr/bin/env python3
"""Launches a zero program on several machines from a DeepSpeed hostfile.

    zero_launch.py [--hostfile F] [--num_nodes N] [--num_gpus N]
                   [--include SPEC | --exclude SPEC] [--master_addr A]
                   [--master_port P] [--dry-run] PROGRAM [ARGS...]

Reads DeepSpeed's hostfile format (`worker1 slots=8`, `#` comments, a
repeated host is an error) and its --include/--exclude syntax
(`worker1:0,1@worker2`), then runs OpenMPI's mpirun with an equivalent
hostfile, as DeepSpeed's OpenMPI runner does. No transport or process
manager of its own: mpirun starts and wires the ranks.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections import OrderedDict


class HostfileError(ValueError):
    pass


def parse_hostfile(text):
    """Returns an OrderedDict host -> slots."""
    hosts = OrderedDict()
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"(\S+)\s+slots=(\d+)", line)
        if not m:
            raise HostfileError(f"hostfile line {lineno}: expected 'HOST slots=N', got {raw!r}")
        host, slots = m.group(1), int(m.group(2))
        if host in hosts:
            raise HostfileError(f"hostfile line {lineno}: host {host!r} is repeated")
        if slots < 1:
            raise HostfileError(f"hostfile line {lineno}: slots must be >= 1")
        hosts[host] = slots
    if not hosts:
        raise HostfileError("hostfile: no hosts")
    return hosts


def parse_filter(spec):
    """'worker1:0,1@worker2' -> {'worker1': [0, 1], 'worker2': None}."""
    out = OrderedDict()
    for part in spec.split("@"):
        if not part:
            raise HostfileError(f"filter {spec!r}: empty host entry")
        if ":" in part:
            host, slots = part.split(":", 1)
            try:
                out[host] = sorted({int(s) for s in slots.split(",")})
            except ValueError:
                raise HostfileError(f"filter {spec!r}: slots of {host!r} must be integers")
        else:
            out[part] = None
    return out


def select(hosts, include=None, exclude=None, num_nodes=-1, num_gpus=-1):
    """Applies DeepSpeed's filters; returns OrderedDict host -> slot count."""
    if include and exclude:
        raise HostfileError("--include and --exclude are mutually exclusive")
    chosen = OrderedDict((h, list(range(n))) for h, n in hosts.items())
    if include:
        f = parse_filter(include)
        new = OrderedDict()
        for h, slots in f.items():
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
            if slots is None:
                chosen.pop(h, None)
            else:
                chosen[h] = [s for s in chosen[h] if s not in slots]
                if not chosen[h]:
                    chosen.pop(h)
    if num_nodes > 0:
        chosen = OrderedDict(list(chosen.items())[:num_nodes])
    if num_gpus > 0:
        chosen = OrderedDict((h, s[:num_gpus]) for h, s in chosen.items())
    if not chosen:
        raise HostfileError("no slots left after filtering")
    return OrderedDict((h, len(s)) for h, s in chosen.items())


def mpirun_command(selected, hostfile_path, program, master_addr=None, master_port=None):
    total = sum(selected.values())
    cmd = ["mpirun", "-n", str(total), "-hostfile", hostfile_path, "--map-by", "slot"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    for k, v in (("MASTER_ADDR", master_addr), ("MASTER_PORT", master_port)):
        if v is not None:
            cmd += ["-x", f"{k}={v}"]
    return cmd + list(program)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hostfile", default="/job/hostfile")
    ap.add_argument("--num_nodes", type=int, default=-1)
    ap.add_argument("--num_gpus", type=int, default=-1)
    ap.add_argument("--include", default="")
    ap.add_argument("--exclude", default="")
    ap.add_argument("--master_addr")
    ap.add_argument("--master_port", type=int)
    ap.add_argument("--dry-run", action="store_true", help="print the mpirun command only")
    ap.add_argument("program", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    if not a.program:
        ap.error("no program to launch")
    try:
        with open(a.hostfile) as f:
            hosts = parse_hostfile(f.read())
        selected = select(hosts, a.include or None, a.exclude or None, a.num_nodes, a.num_gpus)
    except (OSError, HostfileError) as e:
        print(f"zero_launch: {e}", file=sys.stderr)
        return 2
    with tempfile.NamedTemporaryFile("w", suffix=".hostfile", delete=False) as f:
        for h, n in selected.items():
            f.write(f"{h} slots={n}\n")
        path = f.name
    cmd = mpirun_command(selected, path, a.program, a.master_addr, a.master_port)
    print(" ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
    if a.dry_run:
        return 0
    try:
        return subprocess.call(cmd)
    finally:
        os.unlink(path)


if __name__ == "__main__":
    sys.exit(main())
