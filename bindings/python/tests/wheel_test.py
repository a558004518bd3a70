"""The wheel installs into a fresh venv (offline) and trains one step there,
finding libzero_c.so next to the extension through its $ORIGIN rpath."""
import glob
import os
import subprocess
import sys
import textwrap
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))

SCRIPT = textwrap.dedent("""
    import os, sys
    import numpy as np
    import zero
    assert os.path.dirname(zero.__file__).startswith(sys.prefix), zero.__file__
    with zero.Engine({"zero_optimization": {"stage": 2},
                      "optimizer": {"type": "AdamW", "params": {"lr": 0.1}},
                      "steps_per_print": 0}) as eng:
        eng.register_param("w", np.ones(4, np.float32))
        eng.finalize()
        eng.set_grad("w", np.ones(4, np.float32))
        info = eng.step()
        assert info.global_step == 1, info
        np.testing.assert_allclose(eng.read_master("w"), 0.9, rtol=1e-6)
    print("wheel ok")
""")


def find_wheel():
    wheels = glob.glob(os.path.join(HERE, "..", "zero-*.whl"))
    assert len(wheels) == 1, wheels
    return os.path.abspath(wheels[0])


def test_wheel_holds_package_extension_and_library():
    names = zipfile.ZipFile(find_wheel()).namelist()
    for want in ("zero/__init__.py", "zero/torch/__init__.py", "zero/torch/engine.py",
                 "zero/torch/api.py", "zero/_zero_c.so",
                 "zero/libzero_c.so.1", "zero/launch.py", "zero/_requirements.py",
                 "zero-1.0.0.dist-info/RECORD",
                 "zero-1.0.0.dist-info/entry_points.txt"):
        assert want in names, names


def test_wheel_states_its_system_requirements_and_console_script():
    zf = zipfile.ZipFile(find_wheel())
    meta = zf.read("zero-1.0.0.dist-info/METADATA").decode()
    for pkg in ("libabsl20220623", "libhwy1", "liburing2", "libxxhash0", "libopenmpi3"):
        assert f"Requires-External: {pkg}\n" in meta, meta
    eps = zf.read("zero-1.0.0.dist-info/entry_points.txt").decode()
    assert "zero-launch = zero.launch:main_exit" in eps


def test_wheel_installs_in_fresh_venv_and_steps():
    tmp = os.environ.get("TEST_TMPDIR") or os.path.abspath("tmp")
    venv = os.path.join(tmp, "venv")
    python = "/usr/bin/python3"
    subprocess.run([python, "-m", "venv", "--system-site-packages", venv],
                   check=True)
    vpython = os.path.join(venv, "bin", "python")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONSAFEPATH", "LD_LIBRARY_PATH")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    subprocess.run([vpython, "-m", "pip", "install", "--no-index", "--no-deps",
                    "--quiet", find_wheel()], check=True, env=env, cwd=tmp)
    out = subprocess.run([vpython, "-c", SCRIPT], env=env, cwd=tmp,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "wheel ok" in out.stdout
    # The console script: two ranks of a .py program on this host.
    prog = os.path.join(tmp, "rank.py")
    with open(prog, "w") as f:
        # Each rank writes its own file: two ranks' stdout lines can interleave
        # mid-line through mpirun's output forwarding.
        f.write("import os, sys, zero\n"
                "r = os.environ['RANK']\n"
                "open('rank.%%s.txt' %% r, 'w').write('rank %%s %%s %%s' %% "
                "(r, os.environ['WORLD_SIZE'], sys.prefix == %r))\n" % venv)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl="self,vader")
    out = subprocess.run([os.path.join(venv, "bin", "zero-launch"), "--num_procs", "2",
                          prog], env=env, cwd=tmp, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    got = []
    for r in range(2):
        with open(os.path.join(tmp, "rank.%d.txt" % r)) as f:
            got.append(f.read())
    assert got == ["rank 0 2 True", "rank 1 2 True"], out.stdout + out.stderr
