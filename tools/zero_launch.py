#!/usr/bin/env python3
"""zero-launch: runs a program on several ranks, as the `deepspeed` launcher.

    zero-launch [--hostfile F] [--num_nodes N] [--num_gpus N | --num_procs N]
                [--include SPEC | --exclude SPEC] [--master_addr A]
                [--master_port P] [--launch_agent PATH] [--launcher_args STR]
                [--max_restarts N [--elastic [--min_ranks M]]]
                [--launcher openmpi|slurm] [--dry-run]
                [--module | --no_python] [--local_rank_arg | --no_local_rank]
                [accelerate launch's flags] PROGRAM [ARGS...]

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

--max_restarts N (torchrun's flag): when the job fails (any rank exits
non-zero or dies), start it again, up to N times; each rank gets
ZERO_LAUNCH_RESTART (0 for the first run, as torchrun's
TORCHELASTIC_RESTART_COUNT). The program resumes by loading `latest` at
start. With --elastic the slot of the rank that failed first (the earliest
to end abnormally: ranks that the failure took down end later) is left out
of the next run, so it restarts on the ranks still available (4 -> 3) and
the load reshards; --min_ranks M (default 1) is the fewest it restarts on.

The deepspeed launcher's program flags: --module (`python -u -m PROGRAM`),
--no_python, --local_rank_arg (each rank's program gets `--local_rank=N`
right after its name, as deepspeed passes it; off by default, deepspeed's
--no_local_rank, since LOCAL_RANK is in the environment either way),
--save_pid, --enable_each_rank_log DIR, --force_multi (no effect).
`accelerate launch`'s flags: --num_processes (ranks in all, over
--num_machines hosts), --main_process_ip/--main_process_port (=
--master_addr/--master_port), --deepspeed_hostfile, --machine_rank 0 only
(one zero-launch starts every host), and --use_deepspeed with its DeepSpeed
flags (--deepspeed_config_file, --zero_stage, --gradient_accumulation_steps,
--gradient_clipping, --offload_{optimizer,param}_device, --zero3_init_flag,
--zero3_save_16bit_model, --deepspeed_moe_layer_cls_names) and
--mixed_precision, which become the ACCELERATE_* variables `accelerate
launch` gives its ranks: `accelerate launch --num_processes 2 --use_deepspeed
--deepspeed_config_file ds.json train.py` is `zero-launch` with the same flags.

--launcher slurm (as `deepspeed --launcher slurm`): inside a Slurm
allocation (sbatch/salloc: SLURM_JOB_ID set), the ranks start with
`srun --mpi=pmix` over the allocation's tasks instead of mpirun; the
hostfile and filters are not used (Slurm placed the tasks), and
--launcher_args go to srun.
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


def program_command(program, module=False, no_python=False):
    """A .py program runs under this Python, unbuffered (as deepspeed);
    --module runs `python -u -m PROGRAM`, --no_python the program as given."""
    program = list(program)
    if module:
        return [sys.executable, "-u", "-m"] + program
    if program and program[0].endswith(".py") and not no_python:
        return [sys.executable, "-u"] + program
    return program


def local_rank_at(command, program):
    """Where deepspeed puts `--local_rank=N`: right after the script (or
    module, or program) name, before the program's own arguments."""
    return len(command) - len(program) + 1


# accelerate launch's DeepSpeed flags -> the variables it gives the ranks
# (accelerate.utils.launch.prepare_deepspeed_cmd_env), so that `accelerate
# launch --use_deepspeed ...` becomes `zero-launch --use_deepspeed ...`.
ACCELERATE_ENV = (
    ("zero_stage", "ACCELERATE_DEEPSPEED_ZERO_STAGE"),
    ("gradient_accumulation_steps", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS"),
    ("gradient_clipping", "ACCELERATE_GRADIENT_CLIPPING"),
    ("offload_optimizer_device", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE"),
    ("offload_param_device", "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE"),
    ("zero3_init_flag", "ACCELERATE_DEEPSPEED_ZERO3_INIT"),
    ("zero3_save_16bit_model", "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL"),
    ("deepspeed_config_file", "ACCELERATE_DEEPSPEED_CONFIG_FILE"),
    ("deepspeed_moe_layer_cls_names", "ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES"),
)


def accelerate_env(a):
    """The ACCELERATE_* variables of `accelerate launch`'s flags; {} when
    none of them was given."""
    env = {}
    if a.use_deepspeed:
        env["ACCELERATE_USE_DEEPSPEED"] = "true"
    for attr, key in ACCELERATE_ENV:
        value = getattr(a, attr)
        if value is not None:
            if not a.use_deepspeed:
                raise HostfileError(f"--{attr} is a DeepSpeed flag of accelerate launch: "
                                    "give --use_deepspeed too")
            env[key] = str(value) if attr == "deepspeed_config_file" else str(value).lower()
    if a.mixed_precision is not None:
        env["ACCELERATE_MIXED_PRECISION"] = a.mixed_precision
    return env


def mpirun_command(selected, hostfile_path, program, master_addr=None, master_port=None,
                   bind_gpus=False, launch_agent=None, launcher_args="", extra_env=None,
                   module=False, no_python=False, local_rank_arg=False):
    """selected: host -> slot count or list of slot ids (the GPUs to bind).
    launch_agent: a program OpenMPI runs in place of ssh to start its
    daemon on each host (--mca plm_rsh_agent); launcher_args: more mpirun
    arguments (DeepSpeed's --launcher_args), split as a shell would."""
    counts = OrderedDict((h, s if isinstance(s, int) else len(s)) for h, s in selected.items())
    total = sum(counts.values())
    cmd = ["mpirun", "-n", str(total), "-hostfile", hostfile_path, "--map-by", "slot"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if launch_agent:
        cmd += ["--mca", "plm_rsh_agent", os.path.abspath(launch_agent)]
    cmd += shlex.split(launcher_args or "")
    if master_addr is None:
        first = next(iter(counts))
        master_addr = "127.0.0.1" if first in ("localhost", "127.0.0.1") else first
    env = [("MASTER_ADDR", master_addr), ("MASTER_PORT", 29500 if master_port is None else master_port)]
    if bind_gpus:
        slots = ";".join(",".join(str(i) for i in (s if not isinstance(s, int) else range(s)))
                         for s in selected.values())
        env.append((SLOTS_ENV, slots))
    env += sorted((extra_env or {}).items())
    run = program_command(program, module, no_python)
    if local_rank_arg:  # as deepspeed: each rank's program gets --local_rank=N
        env.append((LOCAL_RANK_ARG_ENV, local_rank_at(run, program)))
    for k, v in env:
        cmd += ["-x", f"{k}={v}"]
    for k in ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH"):
        if k in os.environ:
            cmd += ["-x", k]
    # Each rank starts through this file, which sets the torch-style
    # variables from OpenMPI's and then becomes the program.
    shim = [sys.executable, "-u", os.path.abspath(__file__), RANK_SHIM_FLAG]
    return cmd + shim + run


SLOTS_ENV = "ZERO_LAUNCH_SLOTS"
LOCAL_RANK_ARG_ENV = "ZERO_LAUNCH_LOCAL_RANK_AT"
RANK_SHIM_FLAG = "--zero-launch-rank"


def rank_env(environ):
    """The variables one rank gets, from OpenMPI's (OMPI_COMM_WORLD_*) and
    the GPU slots of each host (ZERO_LAUNCH_SLOTS: `0,1;2,3`, hosts in
    order; ranks fill them in order, --map-by slot)."""
    rank = int(environ.get("OMPI_COMM_WORLD_RANK", environ.get(
        "PMIX_RANK", environ.get("SLURM_PROCID", "0"))))
    size = int(environ.get("OMPI_COMM_WORLD_SIZE", environ.get("SLURM_NTASKS", "1")))
    local = int(environ.get("OMPI_COMM_WORLD_LOCAL_RANK", environ.get("SLURM_LOCALID", "0")))
    local_size = int(environ.get("OMPI_COMM_WORLD_LOCAL_SIZE",
                                 environ.get("SLURM_NTASKS_PER_NODE", "1").split("(")[0]))
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


STATUS_ENV = "ZERO_LAUNCH_STATUS_DIR"
RESTART_ENV = "ZERO_LAUNCH_RESTART"


def rank_main(program):
    os.environ.update(rank_env(os.environ))
    os.environ.pop(SLOTS_ENV, None)
    at = os.environ.pop(LOCAL_RANK_ARG_ENV, None)
    if at is not None:
        at = int(at)
        program = program[:at] + [f"--local_rank={os.environ['LOCAL_RANK']}"] + program[at:]
    status_dir = os.environ.pop(STATUS_ENV, None)
    if not status_dir:
        os.execvp(program[0], program)
    # Restarts: stay the program's parent to record how and when it ended
    # (the launcher finds the rank that failed first), forwarding signals.
    import signal
    import time
    child = subprocess.Popen(program)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: child.send_signal(s))
    while True:
        try:
            rc = child.wait()
            break
        except InterruptedError:
            continue
    ended = time.time()
    rank = os.environ.get("RANK", "0")
    with open(os.path.join(status_dir, f"rank.{rank}"), "w") as f:
        f.write(f"{rank} {rc} {ended:.6f}\n")
    if rc < 0:  # died of a signal: end the same way
        signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
    return rc


def first_failed_rank(status_dir):
    """The rank whose program ended abnormally first (exit != 0 or a
    signal), from the shims' records; None when none did."""
    failed = []
    for name in os.listdir(status_dir):
        if not name.startswith("rank."):
            continue
        try:
            with open(os.path.join(status_dir, name)) as f:
                rank, rc, ended = f.read().split()
        except (OSError, ValueError):
            continue
        if int(rc) != 0:
            failed.append((float(ended), int(rank)))
    # A rank that died without a record (its shim killed with it) is the
    # culprit before any that recorded.
    return min(failed)[1] if failed else None


def unrecorded_rank(status_dir, world):
    recorded = {n.split(".", 1)[1] for n in os.listdir(status_dir) if n.startswith("rank.")}
    missing = [r for r in range(world) if str(r) not in recorded]
    return missing[0] if len(missing) == 1 else None


def drop_rank(selected, rank):
    """selected (host -> slot ids, ranks fill them in order) without the
    slot of `rank`."""
    out = OrderedDict()
    first = 0
    for h, slots in selected.items():
        slots = list(slots)
        if first <= rank < first + len(slots):
            del slots[rank - first]
        first += len(selected[h])
        if slots:
            out[h] = slots
    return out


def srun_command(program, launcher_args="", module=False, no_python=False):
    """The ranks of a Slurm allocation: srun starts one per task, wired by
    PMIx (Debian's OpenMPI and Slurm share it; PMI2 does not start it).
    srun passes this process's environment on (accelerate's variables, the
    --local_rank position)."""
    cmd = ["srun", "--mpi=pmix"] + shlex.split(launcher_args or "")
    shim = [sys.executable, "-u", os.path.abspath(__file__), RANK_SHIM_FLAG]
    return cmd + shim + program_command(program, module, no_python)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == RANK_SHIM_FLAG:
        return rank_main(argv[1:])
    # No abbreviations: the program's own flags (--deepspeed ds.json) must not
    # pass for a prefix of this launcher's (--deepspeed_config_file).
    ap = argparse.ArgumentParser(prog="zero-launch", description=__doc__.splitlines()[0],
                                 allow_abbrev=False)
    ap.add_argument("--hostfile", default="/job/hostfile")
    ap.add_argument("--num_nodes", type=int, default=-1)
    ap.add_argument("--num_gpus", "--num_procs", dest="num_gpus", type=int, default=-1,
                    help="ranks per host (without a hostfile: on this host)")
    ap.add_argument("--include", default="")
    ap.add_argument("--exclude", default="")
    ap.add_argument("--master_addr")
    ap.add_argument("--master_port", type=int)
    ap.add_argument("--launch_agent",
                    help="run this in place of ssh to start each host's OpenMPI daemon "
                         "(tools/zero_launch_agent.sh: host aliases of this machine)")
    ap.add_argument("--launcher_args", default="", help="more mpirun (or srun) arguments")
    ap.add_argument("--launcher", choices=("openmpi", "slurm"), default="openmpi",
                    help="slurm: srun --mpi=pmix inside an allocation (sbatch, salloc)")
    ap.add_argument("--max_restarts", type=int, default=0,
                    help="restart a failed job up to N times (the program loads latest)")
    ap.add_argument("--elastic", action="store_true",
                    help="restart without the slot of the rank that failed first")
    ap.add_argument("--min_ranks", type=int, default=1,
                    help="--elastic: the fewest ranks to restart on")
    ap.add_argument("--dry-run", action="store_true", help="print the mpirun command only")
    # The deepspeed launcher's program flags.
    ap.add_argument("--module", "-m", action="store_true", help="run PROGRAM as `python -u -m PROGRAM`")
    ap.add_argument("--no_python", action="store_true", help="run PROGRAM as given, even a .py")
    ap.add_argument("--local_rank_arg", action="store_true",
                    help="give each rank's program --local_rank=N after its name, as deepspeed does "
                         "(off by default: LOCAL_RANK is set either way)")
    ap.add_argument("--no_local_rank", action="store_true",
                    help="deepspeed's flag: no --local_rank argument (zero-launch's default)")
    ap.add_argument("--force_multi", action="store_true",
                    help="deepspeed's flag: multi-node launch even for one host (mpirun always is)")
    ap.add_argument("--save_pid", action="store_true",
                    help="write this launcher's pid to /tmp/<pid>.deepspeed (as deepspeed)")
    ap.add_argument("--enable_each_rank_log", metavar="DIR",
                    help="each rank's output in its own file under DIR (mpirun --output-filename)")
    # accelerate launch's flags (its DeepSpeed ones and the process layout).
    acc = ap.add_argument_group("accelerate launch's flags")
    acc.add_argument("--num_processes", type=int, help="ranks in all (over --num_machines hosts)")
    acc.add_argument("--num_machines", type=int, help="hosts (accelerate's --num_machines)")
    acc.add_argument("--machine_rank", type=int, default=0,
                     help="must be 0: zero-launch starts every host's ranks from the first")
    acc.add_argument("--main_process_ip", help="= --master_addr")
    acc.add_argument("--main_process_port", type=int, help="= --master_port")
    acc.add_argument("--deepspeed_hostfile", help="= --hostfile")
    acc.add_argument("--use_deepspeed", action="store_true")
    acc.add_argument("--mixed_precision", choices=("no", "fp16", "bf16"))
    acc.add_argument("--deepspeed_multinode_launcher", choices=("openmpi", "standard", "slurm"))
    for attr, _key in ACCELERATE_ENV:
        acc.add_argument("--" + attr)
    ap.add_argument("program", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    if not a.program:
        ap.error("no program to launch")
    if a.local_rank_arg and a.no_local_rank:
        ap.error("--local_rank_arg and --no_local_rank contradict each other")
    if a.machine_rank:
        ap.error(f"--machine_rank {a.machine_rank}: zero-launch starts the ranks of every host "
                 "from the first one (mpirun over the hostfile); run it once, there, with --machine_rank 0")
    if a.main_process_ip:
        a.master_addr = a.main_process_ip
    if a.main_process_port is not None:
        a.master_port = a.main_process_port
    if a.deepspeed_hostfile:
        a.hostfile = a.deepspeed_hostfile
    if a.deepspeed_multinode_launcher == "slurm":
        a.launcher = "slurm"
    if a.num_machines is not None and a.num_nodes < 0:
        a.num_nodes = a.num_machines
    if a.num_processes is not None:
        machines = a.num_machines or 1
        if a.num_processes % machines:
            ap.error(f"--num_processes {a.num_processes} is not a multiple of --num_machines {machines}")
        a.num_gpus = a.num_processes // machines
    try:
        extra_env = accelerate_env(a)
    except HostfileError as e:
        ap.error(str(e))
    if a.save_pid:
        with open(f"/tmp/{os.getpid()}.deepspeed", "w") as f:
            f.write(str(os.getpid()))
    if a.enable_each_rank_log:
        os.makedirs(a.enable_each_rank_log, exist_ok=True)
        a.launcher_args = (a.launcher_args + " --output-filename "
                           + shlex.quote(a.enable_each_rank_log)).strip()
    if a.master_port is not None and not 1 <= a.master_port <= 65535:
        ap.error(f"--master_port must be 1..65535, got {a.master_port}")
    if a.num_gpus > MAX_SLOTS:
        ap.error(f"--num_gpus/--num_procs must be at most {MAX_SLOTS}, got {a.num_gpus}")
    if a.max_restarts < 0:
        ap.error(f"--max_restarts must be >= 0, got {a.max_restarts}")
    if a.elastic and a.launcher == "slurm":
        ap.error("--elastic needs --launcher openmpi (Slurm places the tasks itself)")
    if a.launcher == "slurm":
        if "SLURM_JOB_ID" not in os.environ and not a.dry_run:
            print("zero_launch: --launcher slurm runs inside a Slurm allocation "
                  "(sbatch or salloc: SLURM_JOB_ID is not set)", file=sys.stderr)
            return 2
        os.environ.update(extra_env)
        if a.local_rank_arg:
            os.environ[LOCAL_RANK_ARG_ENV] = str(local_rank_at(
                program_command(a.program, a.module, a.no_python), a.program))
        return run_with_restarts(
            a, lambda _sel, _path: srun_command(a.program, a.launcher_args, a.module, a.no_python),
            None, 0)
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

    def command(sel, path):
        return mpirun_command(sel, path, a.program, a.master_addr, a.master_port,
                              bind_gpus=gpus > 0, launch_agent=a.launch_agent,
                              launcher_args=a.launcher_args, extra_env=extra_env,
                              module=a.module, no_python=a.no_python,
                              local_rank_arg=a.local_rank_arg)
    return run_with_restarts(a, command, selected, gpus)


def run_with_restarts(a, command, selected, gpus):
    """Runs the job, and again after a failure up to --max_restarts times
    (--elastic: without the slot of the rank that failed first)."""
    restart = 0
    while True:
        path = None
        if selected is not None:
            with tempfile.NamedTemporaryFile("w", suffix=".hostfile", delete=False) as f:
                for h, s in selected.items():
                    f.write(f"{h} slots={len(s)}\n")
                path = f.name
        cmd = command(selected, path)
        print(" ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
        if a.dry_run:
            if path:
                os.unlink(path)
            return 0
        status_dir = tempfile.mkdtemp(prefix="zero-launch-status.") if a.max_restarts else None
        env = dict(os.environ)
        env[RESTART_ENV] = str(restart)
        if status_dir:
            env[STATUS_ENV] = status_dir
            if a.launcher == "openmpi":  # mpirun passes only what -x names
                cmd = cmd[:1] + ["-x", f"{STATUS_ENV}={status_dir}",
                                 "-x", f"{RESTART_ENV}={restart}"] + cmd[1:]
        elif a.launcher == "openmpi":
            cmd = cmd[:1] + ["-x", f"{RESTART_ENV}={restart}"] + cmd[1:]
        try:
            rc = subprocess.call(cmd, env=env)
        finally:
            if path:
                os.unlink(path)
        world = sum(len(s) for s in selected.values()) if selected is not None else 0
        failed = None
        if status_dir:
            failed = first_failed_rank(status_dir)
            if failed is None and world:
                failed = unrecorded_rank(status_dir, world)
            shutil.rmtree(status_dir, ignore_errors=True)
        if rc == 0 or restart >= a.max_restarts:
            if rc != 0 and a.max_restarts:
                print(f"zero_launch: the job failed (exit {rc}) after {restart} restart(s) "
                      f"of --max_restarts {a.max_restarts}; giving up", file=sys.stderr)
            return rc
        restart += 1
        if a.elastic:
            if failed is None:
                print(f"zero_launch: the job failed (exit {rc}) but no rank's failure was "
                      "recorded; restarting on the same ranks", file=sys.stderr)
            else:
                remaining = drop_rank(selected, failed)
                n = sum(len(s) for s in remaining.values())
                if n < a.min_ranks:
                    print(f"zero_launch: rank {failed} failed; {n} rank(s) left, fewer than "
                          f"--min_ranks {a.min_ranks}; giving up", file=sys.stderr)
                    return rc
                selected = remaining
        n = sum(len(s) for s in selected.values()) if selected is not None else 0
        print(f"zero_launch: the job failed (exit {rc}"
              + (f", rank {failed} first" if failed is not None else "")
              + f"); restart {restart} of {a.max_restarts}"
              + (f" on {n} ranks" if n else ""), file=sys.stderr)


def main_exit():
    """The ``zero-launch`` console script of the wheel (this file is
    ``zero/launch.py`` there)."""
    sys.exit(main())


if __name__ == "__main__":
    sys.exit(main())
