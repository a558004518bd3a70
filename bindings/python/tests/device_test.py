"""zero.Engine on a device, through the CPU stand-in for a GPU.

ZERO_GPU_STANDIN=1 makes "cuda" the stand-in (core/backend/standin_select.h),
so these tests run the bindings' real GPU path: Engine(device="cuda:0"),
zero.Comm.nccl(), DeviceArray with DLPack, zero_engine_copy. Training on it
is bitwise equal to the same training on the CPU device (params and every
step's norm); host reads of device pointers die.
"""
import ctypes
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

os.environ["ZERO_GPU_STANDIN"] = "1"

import zero  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import device_worker  # noqa: E402
from thread_ranks import on_ranks  # noqa: E402
from device_worker import SHAPES, build, config, train  # noqa: E402


def _run_world(world, stage, dtype, device):
    """Trains on `world` thread ranks; returns (masters, norms) by rank."""
    def rank_main(r, comm):
        with build(config(stage, dtype, gas=2), comm, device) as eng:
            return train(eng, r, steps=4)

    return on_ranks(world, rank_main)


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_training_on_the_device_equals_the_cpu_bit_for_bit(world, stage, dtype):
    dev = _run_world(world, stage, dtype, "cuda:0")
    cpu = _run_world(world, stage, dtype, None)
    for r in range(world):
        for n in SHAPES:
            np.testing.assert_array_equal(dev[r][0][n], cpu[r][0][n], err_msg=f"rank {r} {n}")
        assert dev[r][1] == cpu[r][1]  # every step's norm, exactly
    # And it trained: the params moved.
    start = build(config(stage, dtype), zero.Comm.self_())
    moved = [not np.array_equal(start.read_master(n), cpu[0][0][n]) for n in SHAPES]
    start.close()
    assert all(moved)


def test_device_buffers_are_device_arrays_with_dlpack():
    with build(config(1), zero.Comm.self_(), "cuda:0") as eng:
        assert eng.device.type == "standin" and not eng.device.host_accessible
        assert str(eng.device) == "standin:0"
        w = eng.gather("w1")
        assert isinstance(w, zero.DeviceArray)
        assert w.shape == (6, 5) and w.dtype == zero.DType.F32 and w.nbytes == 120
        assert w.__dlpack_device__() == (12, 0)  # kDLExtDev: not host memory
        with pytest.raises(TypeError, match="device memory cannot be read by the host"):
            np.asarray(w)
        # numpy's DLPack consumer refuses a device that is not the CPU.
        with pytest.raises((BufferError, RuntimeError, TypeError)):
            np.from_dlpack(w)
        rng = np.random.default_rng(7)
        np.testing.assert_array_equal(w.numpy(), rng.standard_normal((6, 5)).astype(np.float32) * 0.3)
        with pytest.raises(TypeError, match="read-only"):
            w.copy_from(np.zeros((6, 5)))
        eng.release("w1")
        g = eng.grad_buffer("w2")
        assert isinstance(g, zero.DeviceArray) and g.writable
        assert not g.numpy().any()  # zero-filled on the device
        g.copy_from(np.full((5, 3), 0.5, np.float32))
        np.testing.assert_array_equal(g.numpy(), np.full((5, 3), 0.5, np.float32))
        eng.grad_ready("w2")


def test_device_memory_equals_the_stats_categories():
    # The device's own count of its allocations against the engine's
    # accounting of model states and buffers (zero_stats), after a step.
    for device in ("cuda:0", None):
        with build(config(1), zero.Comm.self_(), device) as eng:
            train(eng, 0, steps=2)
            m = eng.device_memory()
            s = eng.stats()
            held = sum(s[k] for k in ("master_bytes", "optimizer_bytes", "grad_bytes",
                                      "param_bytes", "frozen_bytes", "buffer_bytes"))
            if device is not None:  # the stand-in counts the bytes asked for
                assert m["device_bytes"] == held, (m, s)
            else:  # the CPU device rounds each allocation up to 128 bytes
                assert held <= m["device_bytes"] <= held + 128 * 16, (m, s)
            assert m["device_peak_bytes"] >= m["device_bytes"]
            assert m["pinned_host_bytes"] == 0 and m["device_reserved_bytes"] == 0


def test_pinned_host_bytes_are_the_offloaded_shard():
    cfg = config(3)
    cfg["zero_optimization"]["offload_param"] = {"device": "cpu", "pin_memory": True}
    with build(cfg, zero.Comm.self_(), "cuda:0") as eng:
        train(eng, 0, steps=1)
        # One rank: the shard is every trainable element (padded), fp32.
        assert eng.device_memory()["pinned_host_bytes"] == eng.stats()["padded_numel"] * 4
    cfg["zero_optimization"]["offload_param"]["pin_memory"] = False
    with build(cfg, zero.Comm.self_(), "cuda:0") as eng:
        assert eng.device_memory()["pinned_host_bytes"] == 0


def test_a_cpu_engine_keeps_numpy_views_and_reports_the_cpu():
    with build(config(1), zero.Comm.self_()) as eng:
        assert eng.device.type == "cpu" and eng.device.host_accessible
        assert eng.device.dlpack_device_type == 1
        w = eng.gather("w1")
        assert isinstance(w, np.ndarray)
        eng.release("w1")


def test_dlpack_capsule_keeps_its_owner_alive_and_numpy_reads_a_cpu_one():
    # The capsule path on host memory, readable by numpy: the same code that
    # hands a CUDA pointer to torch.from_dlpack, checked where it can be read.
    with build(config(1), zero.Comm.self_()) as eng:
        view = eng.gather("w1")
        arr = zero.DeviceArray(eng, view.ctypes.data, view.shape, zero.DType.F32,
                               eng.device, writable=False)
        got = np.from_dlpack(arr)
        del arr
        np.testing.assert_array_equal(got, view)
        assert got.ctypes.data == view.ctypes.data  # aliased, no copy
        eng.release("w1")


def test_a_host_read_of_a_device_pointer_dies():
    # The guard of the stand-in, reached through the bindings: reading the
    # address a DeviceArray carries is SIGSEGV, as on a GPU.
    code = textwrap.dedent("""
        import ctypes, os, sys
        os.environ["ZERO_GPU_STANDIN"] = "1"
        sys.path.insert(0, %r)
        import zero, device_worker as w
        eng = w.build(w.config(1), zero.Comm.self_(), "cuda:0")
        a = eng.gather("w1")
        print("read", flush=True)
        print(ctypes.c_float.from_address(a.ptr).value, flush=True)
    """ % os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    if "ASAN_OPTIONS" in env:
        # Under tools/san_run.sh asan: let the SIGSEGV through instead of
        # ASan's report and abort, so the same death is asserted.
        env["ASAN_OPTIONS"] += ":handle_segv=0"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert "read" in proc.stdout, proc.stderr
    assert proc.returncode == -11, (proc.returncode, proc.stdout, proc.stderr)


def test_without_the_switch_cuda_is_never_the_standin():
    # A CPU build names the missing CUDA build; a CUDA build (the device
    # bundle) finds no GPU on a CPU machine, or the real GPU: never the stand-in.
    os.environ["ZERO_GPU_STANDIN"] = "0"
    try:
        try:
            with zero.Engine(config(0), comm=zero.Comm.self_(), device="cuda:0") as eng:
                assert eng.device.type == "cuda"
        except zero.UnimplementedError as e:
            assert "config=cuda" in str(e)
            with pytest.raises(zero.UnimplementedError, match="config=cuda"):
                zero.Comm.nccl(0)
        except zero.FailedPreconditionError as e:
            assert "CUDA device" in str(e)
    finally:
        os.environ["ZERO_GPU_STANDIN"] = "1"
    with pytest.raises(zero.InvalidArgumentError, match="expected 'cpu', 'cuda'"):
        zero.Engine(config(0), comm=zero.Comm.self_(), device="tpu")


def test_default_gpu_follows_the_launcher(monkeypatch):
    from zero.comm import default_gpu
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("OMPI_COMM_WORLD_LOCAL_RANK", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert default_gpu() == 3
    # zero-launch's one slot per local rank: the rank sees one GPU, index 0.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert default_gpu() == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    assert default_gpu() == 3
    monkeypatch.delenv("LOCAL_RANK")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2")
    assert default_gpu() == 2
    monkeypatch.delenv("OMPI_COMM_WORLD_LOCAL_RANK")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert default_gpu() == 0


def test_set_device_after_register_refused():
    eng = zero.Engine(config(0), comm=zero.Comm.self_())
    eng.register_param("w", np.ones(3, np.float32))
    with pytest.raises(zero.ZeroError):
        eng._c.set_device("standin", 0)
    eng.close()


def test_nccl_comm_under_mpirun_equals_mpi_on_the_cpu(tmp_path):
    """zero.Comm.nccl() at 2 ranks (the NCCL-shaped stand-in over MPI): every
    stage, fp32 and bf16, bitwise equal to zero.Comm.mpi() on the CPU."""
    mpirun = shutil.which("mpirun")
    assert mpirun, "openmpi-bin is required"
    env = dict(os.environ, ZERO_GPU_STANDIN="1",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    env.setdefault("OMPI_MCA_plm_rsh_agent", "")
    cmd = [mpirun, "-np", "2", "--oversubscribe", "--allow-run-as-root",
           "--mca", "btl", "self,vader", "-x", "PYTHONPATH", "-x", "ZERO_GPU_STANDIN",
           sys.executable, device_worker.__file__, "--out", str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for r in range(2):
        got = np.load(tmp_path / f"rank{r}.npz")
        keys = [k for k in got.files if k.endswith("_dev")]
        assert len(keys) == 4 * 2 * (len(SHAPES) + 1)
        for k in keys:
            np.testing.assert_array_equal(got[k], got[k[:-4] + "_cpu"], err_msg=f"rank {r} {k}")
