"""Shared by the DeepSpeed-compatibility tests: the current-torch venv (PyPI
torch, transformers, accelerate and the real DeepSpeed, made by
tools/install_current_torch.sh), zero's package directory, and a 2-rank
zero-launch of a script once on zero's DeepSpeed layer and once on the real
DeepSpeed (DS_ACCELERATOR=cpu), the reference."""
from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from typing import Dict, List, Optional

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PY_DIR = os.path.dirname(os.path.dirname(HERE))      # bindings/python
REPO = os.path.dirname(os.path.dirname(PY_DIR))
SHIM_DIR = os.path.join(PY_DIR, "zero_deepspeed")
LAUNCH = os.path.join(REPO, "tools", "zero_launch.py")
VENV = os.environ.get("ZERO_TORCH_CURRENT_VENV", "/opt/zero-venvs/torch-current")


def venv_python() -> str:
    """The venv's Python; installed by tools/install_current_torch.sh when
    ZERO_TEST_INSTALL_CURRENT_TORCH=1, else the test is skipped saying why."""
    py = os.path.join(VENV, "bin", "python")
    ok = os.access(py, os.X_OK) and subprocess.run(
        [py, "-c", "import torch, transformers, accelerate, deepspeed"],
        capture_output=True, env=dict(os.environ, DS_ACCELERATOR="cpu")).returncode == 0
    if not ok and os.environ.get("ZERO_TEST_INSTALL_CURRENT_TORCH") == "1":
        r = subprocess.run(["bash", os.path.join(REPO, "tools", "install_current_torch.sh"), VENV])
        ok = r.returncode == 0 and os.access(py, os.X_OK)
    if not ok:
        pytest.skip(f"the current-torch venv {VENV} (torch, transformers, accelerate, real DeepSpeed) "
                    "is not installed: run tools/install_current_torch.sh, or set "
                    "ZERO_TEST_INSTALL_CURRENT_TORCH=1 to let the test install it (~6 GB)")
    return py


def zero_path() -> str:
    """The directory holding the ``zero`` package with its built extension."""
    spec = importlib.util.find_spec("zero")
    if spec is not None and spec.origin:
        return os.path.dirname(os.path.dirname(spec.origin))
    for d in sorted(glob.glob(os.path.join(REPO, "bazel-bin", "bindings", "python", "*.runfiles",
                                           "*", "bindings", "python"))):
        if os.path.exists(os.path.join(d, "zero", "_zero_c.so")):
            return d
    pytest.skip("zero is not importable (bazel build //bindings/python:zero, then put its "
                "runfiles' bindings/python on PYTHONPATH)")


def need_mpirun() -> None:
    if not shutil.which("mpirun"):
        pytest.skip("mpirun not found (apt-get install openmpi-bin): zero-launch needs it")


def env_for(which: str) -> Dict[str, str]:
    """which: 'zero' (zero's layer, opted in) or 'real' (DeepSpeed on the CPU)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ZERO_DEEPSPEED", "ACCELERATE_", "OMPI_", "PMIX_"))}
    env.update(OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu", TOKENIZERS_PARALLELISM="false",
               HF_HUB_OFFLINE="1", TRANSFORMERS_NO_ADVISORY_WARNINGS="1")
    if which == "zero":
        env["ZERO_DEEPSPEED"] = "1"
        env["PYTHONPATH"] = os.pathsep.join([SHIM_DIR, zero_path()])
    else:
        env["PYTHONPATH"] = ""  # the real DeepSpeed of the venv
    return env


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(which: str, launcher_args: List[str], program: List[str], out: str,
           timeout: float = 400, env_extra: Optional[Dict[str, str]] = None,
           check: bool = True) -> subprocess.CompletedProcess:
    """zero-launch LAUNCHER_ARGS PROGRAM on 2 local ranks (mpirun on shared
    memory, oversubscribed: 2 loaded cores)."""
    env = env_for(which)
    env.update(env_extra or {})
    mpi = "--oversubscribe --bind-to none --mca btl self,vader -x DS_ACCELERATOR -x OMP_NUM_THREADS"
    if which == "zero":
        mpi += " -x ZERO_DEEPSPEED"
    for k in (env_extra or {}):
        mpi += f" -x {k}"
    cmd = [sys.executable if sys.executable else "python3", LAUNCH, "--launcher_args", mpi]
    if not any(a in ("--master_port", "--main_process_port") for a in launcher_args):
        cmd += ["--master_port", str(free_port())]
    cmd += launcher_args + program
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=out)
    if check and r.returncode != 0:
        raise AssertionError(f"{which} run failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}")
    return r


def rank_losses(out: str, world: int = 2) -> List[List[float]]:
    runs = []
    for r in range(world):
        with open(os.path.join(out, f"losses.{r}.json")) as f:
            runs.append(json.load(f))
    return runs


def compare_saved(py: str, a: str, b: str, atol: float) -> str:
    """Loads both saved HF models with from_pretrained in the venv and
    returns the largest weight difference (raises if over atol)."""
    code = (
        "import sys, torch, transformers\n"
        "m = [transformers.AutoModelForCausalLM.from_pretrained(p, torch_dtype=torch.float32).state_dict()"
        " for p in sys.argv[1:3]]\n"
        "assert m[0].keys() == m[1].keys(), (sorted(m[0].keys() ^ m[1].keys()))\n"
        "d = max(float((m[0][k].float() - m[1][k].float()).abs().max()) for k in m[0])\n"
        "print(d)\n"
        f"assert d <= {atol}, d\n")
    r = subprocess.run([py, "-c", code, a, b], capture_output=True, text=True,
                       env=dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=""), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip()
