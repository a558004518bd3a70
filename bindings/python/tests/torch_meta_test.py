"""zero.torch.initialize with params on the meta device, the init-spec path
(zero.torch.Init(init_specs=True), device="meta"): init
specs inferred from module types match torch's own initialization in
distribution, training from them works, pretrained= loads a safetensors file
exactly, unknown module types and meta buffers are refused by name. Under
mpirun (world 3, stage 3) a meta-built model gets the same values as in one
process, torch's statistics per param, and trains like the eager model."""
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_train  # noqa: E402  (examples/python)
import zero  # noqa: E402
import zero.torch as zt  # noqa: E402
from torch_meta_worker import padding_model, sharded_config  # noqa: E402

STEPS = 6


def cfg(stage):
    c = gpt_train.ds_config(stage)
    c["steps_per_print"] = 0
    return c


def meta_gpt():
    with zt.Init(init_specs=True):
        return gpt_train.TinyGPT()


def torch_default_gpt(seed=0):
    """TinyGPT with torch's module defaults (its own GPT-2 init undone)."""
    model = gpt_train.make_model(seed)
    torch.manual_seed(seed)
    for m in model.modules():
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()
    return model


def expected(name, p, model):
    """(kind, a, b): 'const' value, 'uniform' bound or 'normal' std."""
    mod = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
    leaf = name.rsplit(".", 1)[-1]
    if isinstance(mod, torch.nn.Linear):
        fan_in = mod.in_features
        if leaf == "weight":
            return "uniform", math.sqrt(6 / ((1 + 5) * fan_in))
        return "uniform", 1 / math.sqrt(fan_in)
    if isinstance(mod, torch.nn.Embedding):
        return "normal", 1.0
    if isinstance(mod, torch.nn.LayerNorm):
        return "const", 1.0 if leaf == "weight" else 0.0
    raise AssertionError(name)


def check_stats(values, kind, b, name):
    v = values.double().reshape(-1)
    n = v.numel()
    if kind == "const":
        assert torch.all(v == b), name
        return
    std = b / math.sqrt(3) if kind == "uniform" else b
    assert abs(v.mean().item()) < 5 * std / math.sqrt(n), name
    # sample std within ~5 standard errors (kurtosis-safe margin)
    assert abs(v.std().item() - std) < 5 * std * math.sqrt(2 / n) + 1e-6, name
    if kind == "uniform":
        assert v.abs().max().item() <= b * (1 + 1e-6), name


@pytest.mark.parametrize("stage", [1, 3])
def test_meta_init_matches_torch_defaults(stage):
    model = meta_gpt()
    assert all(p.is_meta for p in model.parameters())
    engine = zt.initialize(model, cfg(stage))
    try:
        ref = torch_default_gpt()
        sd = engine.full_state_dict()
        for name, p in ref.named_parameters():
            kind, b = expected(name, p, ref)
            check_stats(sd[name], kind, b, name)
            # torch's own values pass the same check
            check_stats(p.detach(), kind, b, name)
            assert sd[name].shape == p.shape
        # no param holds memory beyond a placeholder at stage 3
        if stage == 3:
            for p in model.parameters():
                assert p.stride() == (0,) * p.dim()
    finally:
        engine.destroy()


def test_meta_init_same_at_both_stages():
    a = zt.initialize(meta_gpt(), cfg(1))
    try:
        sa = a.full_state_dict()
    finally:
        a.destroy()
    b = zt.initialize(meta_gpt(), cfg(3))
    try:
        sb = b.full_state_dict()
    finally:
        b.destroy()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def train(model, stage, **kw):
    engine = zt.initialize(model, cfg(stage), **kw)
    try:
        losses = []
        for x, y in gpt_train.batches(STEPS):
            loss = engine(x, y)
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
        return losses
    finally:
        engine.destroy()


@pytest.mark.parametrize("stage", [1, 3])
def test_training_from_meta_decreases_loss_like_eager(stage):
    eager = train(torch_default_gpt(), stage)
    meta = train(meta_gpt(), stage)
    assert meta[-1] < meta[0] - 0.3
    assert eager[-1] < eager[0] - 0.3
    # same distributions: the starting losses agree closely
    assert abs(meta[0] - eager[0]) < 0.5
    # different draws train differently; the drops are alike (observed:
    # 6.4 vs 7.4 from ~19.6)
    drop_m, drop_e = meta[0] - meta[-1], eager[0] - eager[-1]
    assert 0.5 * drop_e < drop_m < 2.0 * drop_e


@pytest.mark.parametrize("stage", [1, 3])
def test_pretrained_loads_safetensors_exactly(tmp_path, stage):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    src = gpt_train.make_model(seed=5)
    tensors = {k: v.detach().numpy().copy() for k, v in src.state_dict().items()}
    path = tmp_path / "model.safetensors"
    safetensors_numpy.save_file(tensors, str(path))
    engine = zt.initialize(meta_gpt(), cfg(stage), pretrained=str(path))
    try:
        sd = engine.full_state_dict()
        assert set(sd) == set(tensors)
        for k, v in tensors.items():
            assert np.array_equal(sd[k].numpy(), v), k
        with torch.no_grad():
            x, y = gpt_train.batches(1)[0]
            assert engine(x, y).item() == pytest.approx(src(x, y).item(), rel=1e-5)
    finally:
        engine.destroy()


class Custom(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.empty(8))
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(x) * self.scale


def test_unknown_module_type_raises_naming_param_and_module():
    with zt.Init(init_specs=True):
        model = torch.nn.Sequential(Custom())
    with pytest.raises(zero.InvalidArgumentError, match=r"'0\.scale'.*Custom"):
        zt.initialize(model, cfg(3))
    # nothing left half set up: the module keeps its meta params
    assert all(p.is_meta for p in model.parameters())


def test_init_fn_fills_every_meta_param():
    with zt.Init(init_specs=True):
        model = torch.nn.Sequential(Custom())
    seen = []

    def fill(name, offset, count):
        seen.append(name)
        return np.arange(offset, offset + count, dtype=np.float32)

    engine = zt.initialize(model, cfg(3), init_fn=fill)
    try:
        sd = engine.full_state_dict()
        assert torch.equal(sd["0.scale"], torch.arange(8.0))
        assert torch.equal(sd["0.lin.weight"].reshape(-1), torch.arange(64.0))
        assert set(seen) == {"0.scale", "0.lin.weight", "0.lin.bias"}
    finally:
        engine.destroy()


@pytest.mark.parametrize("stage", [1, 3])
def test_device_meta_modules_and_embedding_padding_row(stage):
    # The padding row is written with write_master_range: at stage 3 no rank
    # reads or writes the whole embedding for it.
    model = torch.nn.Sequential(
        torch.nn.Embedding(10, 6, padding_idx=2, device="meta"),
        torch.nn.Conv1d(6, 4, 3, groups=2, device="meta"))
    engine = zt.initialize(model, cfg(stage))
    try:
        sd = engine.full_state_dict()
        assert torch.all(sd["0.weight"][2] == 0)
        assert sd["0.weight"][3].abs().sum() > 0
        bound = 1 / math.sqrt(6 // 2 * 3)
        assert sd["1.bias"].abs().max() <= bound
        assert sd["1.weight"].abs().max() <= math.sqrt(6 / (6 * 9))
    finally:
        engine.destroy()


def full_params(model, config):
    engine = zt.initialize(model, config)
    try:
        return engine.full_state_dict()
    finally:
        engine.destroy()


def check_padding(got, want):
    """got: padding_model()'s params; want: padding_model(False)'s, the same
    specs without padding_idx. Padding rows zero, every other element the
    spec's value bit for bit."""
    assert set(got) == set(want)
    for name, row in (("0.weight", 1), ("1.weight", 63)):
        assert torch.all(got[name][row] == 0), name
        assert want[name][row].abs().sum() > 0, name  # the spec's row is not zero
        keep = [r for r in range(want[name].shape[0]) if r != row]
        assert torch.equal(got[name][keep], want[name][keep]), name
    for name in ("2.weight", "2.bias"):
        assert torch.equal(got[name], want[name]), name


@pytest.mark.parametrize("stage", [0, 3])
def test_padding_rows_written_as_ranges(stage, monkeypatch):
    want = full_params(padding_model(False), sharded_config(stage))

    def whole(*a, **k):
        raise AssertionError("padding_idx must not read or write a whole param")
    if stage == 3:
        with monkeypatch.context() as mp:
            for k in ("write_master", "read_master", "gather"):
                mp.setattr(zero.Engine, k, whole)
            engine = zt.initialize(padding_model(), sharded_config(stage))
    else:
        engine = zt.initialize(padding_model(), sharded_config(stage))
    try:
        got = engine.full_state_dict()
    finally:
        engine.destroy()
    check_padding(got, want)


def test_meta_buffer_refused_by_name():
    with zt.Init(init_specs=True):
        model = torch.nn.BatchNorm1d(4)
    with pytest.raises(zero.InvalidArgumentError, match="running_mean"):
        zt.initialize(model, cfg(1))


def test_pretrained_index_json_and_failure_restores_meta(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    import json
    src = gpt_train.make_model(seed=7)
    tensors = {k: v.detach().numpy().copy() for k, v in src.state_dict().items()}
    names = sorted(tensors)
    half = len(names) // 2
    shards = {"a.safetensors": names[:half], "b.safetensors": names[half:]}
    for fname, keys in shards.items():
        safetensors_numpy.save_file({k: tensors[k] for k in keys}, str(tmp_path / fname))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": {
        k: f for f, keys in shards.items() for k in keys}}))
    engine = zt.initialize(meta_gpt(), cfg(3), pretrained=str(index))
    try:
        sd = engine.full_state_dict()
        for k, v in tensors.items():
            assert np.array_equal(sd[k].numpy(), v), k
    finally:
        engine.destroy()
    model = meta_gpt()
    with pytest.raises(zero.ZeroError):
        zt.initialize(model, cfg(1), pretrained=str(tmp_path / "missing.safetensors"))
    assert all(p.is_meta for p in model.parameters())


def test_meta_model_under_mpirun_world3_stage3(tmp_path):
    """torch_meta_worker.py on 3 MPI ranks, stage 3, every param sharded: the
    meta model's params right after initialize equal the one-process stage-3
    and stage-0 ones bit for bit (each element drawn from (seed, name, index)
    by whichever rank owns it) and so have torch's statistics; meta and eager
    (torch's defaults) models train alike on the ranks' slices; padding_idx
    rows are zero and the rest of those embeddings the spec's values."""
    mpirun = shutil.which("mpirun")
    assert mpirun, "openmpi-bin is required"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.setdefault("OMPI_MCA_plm_rsh_agent", "")
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "torch_meta_worker.py")
    cmd = [mpirun, "-np", "3", "--oversubscribe", "--allow-run-as-root",
           "--mca", "btl", "self,vader", "-x", "PYTHONPATH",
           sys.executable, worker, "--out", str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = torch.load(tmp_path / "meta_init.pt")
    want = full_params(meta_gpt(), sharded_config(3))
    want0 = full_params(meta_gpt(), sharded_config(0))
    ref = torch_default_gpt()
    assert set(got) == set(want) == set(want0)
    for name, p in ref.named_parameters():
        assert torch.equal(got[name], want[name]), name
        assert torch.equal(got[name], want0[name]), name
        kind, b = expected(name, p, ref)
        check_stats(got[name], kind, b, name)
    per_rank = [json.loads((tmp_path / f"losses{r}.json").read_text()) for r in range(3)]
    meta = [sum(r["meta"][k] for r in per_rank) / 3 for k in range(STEPS)]
    eager = [sum(r["eager"][k] for r in per_rank) / 3 for k in range(STEPS)]
    assert meta[-1] < meta[0] - 0.3 and eager[-1] < eager[0] - 0.3, (meta, eager)
    assert abs(meta[0] - eager[0]) < 0.5, (meta, eager)
    drop_m, drop_e = meta[0] - meta[-1], eager[0] - eager[-1]
    assert 0.5 * drop_e < drop_m < 2.0 * drop_e, (meta, eager)
    check_padding(torch.load(tmp_path / "padding_init.pt"),
                  full_params(padding_model(False), sharded_config(0)))
