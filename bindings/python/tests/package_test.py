"""Import-time checks of the zero package: a missing system library is named
with its Debian package; the source tree (bindings/python/zero, without the
built extension) explains itself instead of a circular-import error."""
import os
import shutil
import subprocess
import sys

import zero
from zero import _requirements as req

PKG = os.path.dirname(os.path.abspath(zero.__file__))
PY = "/usr/bin/python3"


def test_every_required_library_loads_here():
    assert req.missing() == []


def test_missing_library_names_it_and_its_apt_package():
    pairs = req.missing([("libhwy.so.1", "libhwy1"), ("libnot-there.so.7", "libnotthere7")])
    assert pairs == [("libnot-there.so.7", "libnotthere7")]
    err = ImportError("libhwy.so.1: cannot open shared object file: No such file or directory")
    msg = req.explain_import_error(err, PKG)
    assert "libhwy.so.1" in msg and "apt-get install libhwy1" in msg
    err = ImportError("libabsl_cord.so.20220623: cannot open shared object file")
    assert "apt-get install libabsl20220623" in req.explain_import_error(err, PKG)


def _source_copy(tmp_path):
    """The package's .py files alone (its subpackages' too): what
    bindings/python/zero holds."""
    src = tmp_path / "zero"
    src.mkdir()
    for name in os.listdir(PKG):
        path = os.path.join(PKG, name)
        if name.endswith(".py"):
            shutil.copy(path, src / name)
        elif os.path.isfile(os.path.join(path, "__init__.py")):
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    return src


def test_source_tree_import_explains_itself(tmp_path):
    _source_copy(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    out = subprocess.run([PY, "-c", "import zero"], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    assert out.returncode != 0
    assert "source tree" in out.stderr and "circular" not in out.stderr, out.stderr


def test_running_inside_the_package_dir_explains_the_torch_shadow(tmp_path):
    src = _source_copy(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    out = subprocess.run([PY, "-c", "import torch"], cwd=src, env=env,
                         capture_output=True, text=True)
    assert out.returncode != 0
    assert "imported as `torch`" in out.stderr, out.stderr
