"""zero.torch's device path.

On this CPU machine it runs through the stand-in for a GPU
(ZERO_GPU_STANDIN=1: ``initialize(..., device="cuda:0")`` puts the runtime
on the stand-in; torch, CPU-only here, cannot hold tensors on it, so the
bridge copies through the runtime): stages 0-3 x fp32/bf16/fp16 x hooks on
and off with accumulation end bitwise equal to zero.torch on the CPU device
(params and every step's norm). The DLPack aliasing a CUDA model gets is
checked on host memory (torch.from_dlpack of a zero.DeviceArray); training a
CUDA model needs a GPU and is SKIPPED here (tools/device_check.sh runs it).
"""
import os
import sys

import numpy as np
import pytest
import torch

os.environ["ZERO_GPU_STANDIN"] = "1"

import zero  # noqa: E402
import zero.torch as zt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# examples/python (gpt_train) from the source tree, as tools/device_check.sh
# runs this file; under Bazel //examples/python:gpt_train_lib puts it on the path.
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "examples", "python"))
import gpt_train  # noqa: E402
import torch_model  # noqa: E402

GAS = 2


def _train(stage, dtype, hooks, device, model_device=None):
    cfg = torch_model.ds_config(stage, gas=GAS)
    if dtype != "fp32":
        cfg[dtype] = {"enabled": True}
    model = torch_model.make_model()
    if model_device is not None:
        model = model.to(model_device)
    engine = zt.initialize(model, cfg, comm=zero.Comm.self_(), device=device,
                           overlap_grad_hooks=hooks)
    try:
        norms = []
        for x, y in torch_model.make_data(3):
            for xm, ym in zip(x.chunk(GAS), y.chunk(GAS)):
                if model_device is not None:
                    xm, ym = xm.to(model_device), ym.to(model_device)
                out = engine(xm.to(engine.compute_dtype))
                loss = torch_model.loss_fn(out.float(), ym)
                engine.backward(loss)
                info = engine.step()
                if info.boundary:
                    norms.append(info.grad_norm)
        params = engine.full_state_dict()
        device_type = engine.zero.device.type
    finally:
        engine.close()
    return params, norms, device_type


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("hooks", [True, False])
def test_standin_device_trains_bit_for_bit_like_the_cpu(stage, dtype, hooks):
    dev, dn, kind = _train(stage, dtype, hooks, "cuda:0")
    assert kind == "standin"
    cpu, cn, kind = _train(stage, dtype, hooks, None)
    assert kind == "cpu"
    assert dn == cn and len(dn) == 3
    for name in cpu:
        assert torch.equal(dev[name], cpu[name]), name
    # It trained: fp32 within tolerance of plain torch.
    if dtype == "fp32":
        torch_model.assert_params_close(cpu, torch_model.train_reference(gas=GAS, steps=3))


def test_params_follow_the_runtime_after_each_step_on_the_standin():
    # Stage 1: the module's params (copies on the stand-in) equal the
    # runtime's working copy after every optimizer step.
    model = torch_model.make_model()
    engine = zt.initialize(model, torch_model.ds_config(1), comm=zero.Comm.self_(),
                           device="cuda")
    try:
        for x, y in torch_model.make_data(2):
            engine.backward(torch_model.loss_fn(engine(x), y))
            engine.step()
            for name, p in model.named_parameters():
                i = engine._index[id(p)]
                want = engine._bufs[i].numpy()
                assert np.array_equal(p.detach().numpy(), want), name
    finally:
        engine.close()


@pytest.mark.parametrize("dtype,torch_dtype", [(zero.DType.F32, torch.float32),
                                                (zero.DType.BF16, torch.bfloat16),
                                                (zero.DType.F16, torch.float16)])
def test_torch_from_dlpack_aliases_a_device_array(dtype, torch_dtype):
    # What CudaBridge does with a GPU engine's buffers, on host memory
    # (DLPack device type kDLCPU): torch gets the same memory, its dtype.
    cfg = {"zero_optimization": {"stage": 1}, "optimizer": {"type": "Adam"},
           "steps_per_print": 0}
    if dtype == zero.DType.BF16:
        cfg["bf16"] = {"enabled": True}
    if dtype == zero.DType.F16:
        cfg["fp16"] = {"enabled": True}
    with zero.Engine(cfg, comm=zero.Comm.self_()) as eng:
        eng.register_param("w", np.arange(6, dtype=np.float32).reshape(2, 3))
        eng.finalize()
        view = eng.gather("w", writable=True)
        arr = zero.DeviceArray(eng, view.ctypes.data, (2, 3), dtype, eng.device, writable=True)
        t = torch.utils.dlpack.from_dlpack(arr)
        del arr
        assert t.dtype == torch_dtype and t.shape == (2, 3) and t.device.type == "cpu"
        assert t.data_ptr() == view.ctypes.data
        assert torch.equal(t.float(), torch.arange(6, dtype=torch.float32).reshape(2, 3))
        eng.release("w")


def test_a_standin_device_array_is_refused_by_torch():
    # The stand-in's memory is not host memory: torch must not take it as such.
    with zero.Engine({"zero_optimization": {"stage": 0}, "optimizer": {"type": "Adam"},
                      "steps_per_print": 0}, comm=zero.Comm.self_(), device="cuda") as eng:
        eng.register_param("w", np.ones(3, np.float32))
        eng.finalize()
        a = eng.gather("w")
        # torch 2.11 raises ModuleNotFoundError (an ImportError) for a DLPack
        # device type it does not know; earlier versions RuntimeError.
        with pytest.raises((RuntimeError, BufferError, TypeError, ImportError)):
            torch.utils.dlpack.from_dlpack(a)
        eng.release("w")


needs_gpu = pytest.mark.skipif(
    not torch.cuda.is_available() or os.environ.get("ZERO_TORCH_CUDA") != "1",
    reason="needs a CUDA GPU and a --config=cuda libzero_c (ZERO_TORCH_CUDA=1, "
           "tools/device_check.sh): this torch is CPU-only")


@needs_gpu
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_cuda_model_matches_plain_torch_on_the_gpu(stage):
    os.environ["ZERO_GPU_STANDIN"] = "0"
    try:
        got, norms, kind = _train(stage, "fp32", True, None, model_device="cuda:0")
    finally:
        os.environ["ZERO_GPU_STANDIN"] = "1"
    assert kind == "cuda" and len(norms) == 3
    want = torch_model.train_reference(gas=GAS, steps=3)
    torch_model.assert_params_close({k: v.cpu() for k, v in got.items()}, want)


@needs_gpu
def test_cuda_params_alias_the_runtime_at_stage_1():
    os.environ["ZERO_GPU_STANDIN"] = "0"
    try:
        model = torch_model.make_model().to("cuda:0")
        engine = zt.initialize(model, torch_model.ds_config(1), comm=zero.Comm.self_())
        try:
            for name, p in model.named_parameters():
                i = engine._index[id(p)]
                assert p.device.type == "cuda"
                assert p.data_ptr() == engine._bufs[i].ptr, name
        finally:
            engine.close()
    finally:
        os.environ["ZERO_GPU_STANDIN"] = "1"


def test_two_ranks_on_comm_nccl_equal_comm_mpi_on_the_cpu(tmp_path):
    """zero.torch over zero.Comm.nccl() at 2 MPI ranks (the NCCL-shaped
    stand-in: device buffers only, so rank 0's initial weights cannot be
    broadcast through it from host memory) equals zero.Comm.mpi() on the
    CPU bit for bit, stages 1 and 3, fp32 and bf16."""
    import shutil
    import subprocess

    mpirun = shutil.which("mpirun")
    assert mpirun, "openmpi-bin is required"
    env = dict(os.environ, ZERO_GPU_STANDIN="1",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    env.setdefault("OMPI_MCA_plm_rsh_agent", "")
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_device_worker.py")
    cmd = [mpirun, "-np", "2", "--oversubscribe", "--allow-run-as-root",
           "--mca", "btl", "self,vader", "-x", "PYTHONPATH", "-x", "ZERO_GPU_STANDIN",
           sys.executable, worker, "--out", str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for r in range(2):
        got = torch.load(tmp_path / f"rank{r}.pt")
        assert sorted(got) == ["1_bf16", "1_fp32", "3_bf16", "3_fp32"]
        for key, res in got.items():
            assert res["dn"] == res["cn"] and len(res["dn"]) == 3, key
            for name in res["cpu"]:
                assert torch.equal(res["dev"][name], res["cpu"][name]), (r, key, name)


# A GPT-shaped model (examples/python/gpt_train.py: token and position
# embeddings, causal attention, a head tied to the token embedding) through
# zero.torch's device path against plain torch AdamW on the same device. On
# a GPU (ZERO_TORCH_CUDA=1, tools/device_check.sh) both train on cuda:0 at a
# size worth timing, and each one's median step time is appended as a JSON
# line to $ZERO_TORCH_TIMING_OUT (the device check prints them); here the
# runtime is on the stand-in and the reference on the CPU.
def _cuda_run():
    return torch.cuda.is_available() and os.environ.get("ZERO_TORCH_CUDA") == "1"


def _gpt_sizes():
    if _cuda_run():
        return dict(ctx=128, dim=512, layers=4, heads=8), 8
    return dict(ctx=16, dim=32, layers=2, heads=2), 3


def _gpt_train(stage, sizes, steps, use_zero):
    import time

    dev = torch.device("cuda:0") if _cuda_run() else torch.device("cpu")
    model = gpt_train.make_model(**sizes).to(dev)
    data = gpt_train.batches(steps, ctx=sizes["ctx"])
    if use_zero:
        engine = zt.initialize(model, gpt_train.ds_config(stage), comm=zero.Comm.self_(),
                               device="cuda:0")
        kind = engine.zero.device.type
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=gpt_train.LR, betas=(0.9, 0.999),
                                eps=1e-8, weight_decay=0.0)
        kind = dev.type
    times, losses = [], []
    try:
        for x, y in data:
            x, y = x.to(dev), y.to(dev)
            t0 = time.perf_counter()
            if use_zero:
                loss = engine(x, y)
                engine.backward(loss)
                engine.step()
            else:
                opt.zero_grad()
                loss = model(x, y)
                loss.backward()
                opt.step()
            losses.append(loss.item())  # waits for the device
            times.append(time.perf_counter() - t0)
        if use_zero:
            params = engine.full_state_dict()
        else:
            params = {k: v.detach().cpu() for k, v in model.named_parameters()}
    finally:
        if use_zero:
            engine.close()
    n = sum(p.numel() for p in params.values())
    return params, losses, sorted(times[1:])[len(times[1:]) // 2], kind, n


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_gpt_on_the_device_matches_plain_torch_on_the_same_device(stage):
    cuda = _cuda_run()
    os.environ["ZERO_GPU_STANDIN"] = "0" if cuda else "1"
    try:
        sizes, steps = _gpt_sizes()
        got, got_losses, zero_s, kind, n = _gpt_train(stage, sizes, steps, True)
        want, want_losses, torch_s, _, _ = _gpt_train(stage, sizes, steps, False)
    finally:
        os.environ["ZERO_GPU_STANDIN"] = "1"
    assert kind == ("cuda" if cuda else "standin")
    # Within fp32 rounding of plain torch: 1e-5 of each tensor's magnitude,
    # plus 0.1 % of one step's Adam update per step.
    atol = 1e-3 * gpt_train.LR * steps
    # The key bias (the middle third of qkv.bias) is set apart: softmax
    # ignores a shift of every key, so its exact gradient is 0 and each run
    # applies Adam to its own rounding noise. Adam scales that noise up to
    # about lr * g / eps per step, and on a GPU (other GEMM orders) g is
    # large enough that this reaches a good fraction of lr: there the only
    # bound that holds for two correct runs is Adam's own, |update| <= lr
    # per step in each run (bias-corrected, beta1 < sqrt(beta2)).
    noise_atol = 2 * gpt_train.LR * steps
    dim = sizes["dim"]
    assert sorted(got) == sorted(want)
    bad = []
    for name in want:
        g, w = got[name].float(), want[name].float()
        scale = w.abs().max().item()
        if name.endswith("qkv.bias"):
            key = slice(dim, 2 * dim)
            err = (g[key] - w[key]).abs().max().item()
            if err > noise_atol:
                bad.append(f"{name}[key]: max abs err {err} > {noise_atol}")
            g = torch.cat([g[:dim], g[2 * dim:]])
            w = torch.cat([w[:dim], w[2 * dim:]])
        err = (g - w).abs().max().item()
        if err > 1e-5 * scale + atol:
            bad.append(f"{name}: max abs err {err} vs scale {scale}")
    assert not bad, f"stage {stage}: " + "; ".join(bad)
    assert np.allclose(got_losses, want_losses, rtol=1e-5, atol=0), (got_losses, want_losses)
    out = os.environ.get("ZERO_TORCH_TIMING_OUT")
    if cuda and out:
        import json

        with open(out, "a") as f:
            f.write(json.dumps({
                "kind": "torch_gpt_vs_torch", "stage": stage, "params": n, "steps": steps,
                "device": torch.cuda.get_device_name(0), "zero_step_ms": 1e3 * zero_s,
                "torch_step_ms": 1e3 * torch_s, "ratio": zero_s / torch_s}) + "\n")
