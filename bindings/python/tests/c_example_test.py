"""zero.Engine driven from numpy ends bitwise equal to the C example
(examples/c/mlp_train.c): same model, data, seeds, config and arithmetic
(examples/python/mlp_train.py mirrors it)."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import mlp_train

C_EXAMPLE = os.path.join("examples", "c", "mlp_train")
PY_EXAMPLE = os.path.join("examples", "python", "mlp_train.py")
MPIRUN = ["-np", "4", "--oversubscribe", "--allow-run-as-root",
          "--mca", "btl", "self,vader"]


def c_run(tmp_path, args, mpirun=False):
    dump = tmp_path / "c.bin"
    cmd = [os.path.abspath(C_EXAMPLE), "--quiet", "--dump", str(dump), *args]
    if mpirun:
        cmd = [shutil.which("mpirun"), *MPIRUN, *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return np.fromfile(dump, dtype=np.float32)


def flat(params):
    return np.concatenate([params[n].ravel() for n in mlp_train.NAMES])


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_default_config_matches_c_bitwise(tmp_path, stage):
    want = c_run(tmp_path, ["--stage", str(stage)])
    got = flat(mlp_train.train(mlp_train.default_config(stage, True))["params"])
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("precision,stage", [("bf16", 2), ("fp16", 3)])
def test_half_precision_config_matches_c_bitwise(tmp_path, precision, stage):
    cfg = mlp_train.default_config(stage, True)
    cfg[precision] = {"enabled": True}
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(cfg))
    want = c_run(tmp_path, ["--config", str(path)])
    got = flat(mlp_train.train(cfg)["params"])
    assert got.tobytes() == want.tobytes()


def test_four_ranks_under_mpirun_match_c_bitwise(tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(mlp_train.default_config(3, True)))
    want = c_run(tmp_path, ["--config", str(path)], mpirun=True)
    dump = tmp_path / "py.bin"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    cmd = [shutil.which("mpirun"), *MPIRUN, "-x", "PYTHONPATH", sys.executable,
           os.path.abspath(PY_EXAMPLE), "--config", str(path), "--quiet",
           "--dump", str(dump)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert np.fromfile(dump, np.float32).tobytes() == want.tobytes()
