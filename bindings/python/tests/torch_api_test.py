"""zero.torch against DeepSpeed's API and semantics, one rank in this process:
stage-3 params used outside their module, state dicts, save_16bit_model,
GatheredParameters, clip_grad_norm_, initialize's 4-tuple and failure
cleanup, get_lr, the engine's query methods, fp16 on the CPU, activation
checkpointing; on 2 ranks (mpirun): the GPT example against torch DDP."""
import argparse
import json
import os
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_train  # noqa: E402  (examples/python)
import torch_model  # noqa: E402
import zero  # noqa: E402
import zero.engine  # noqa: E402
import zero.torch as zt  # noqa: E402

STEPS = 4


def train_losses(model, cfg, steps=STEPS):
    engine, _, _, _ = zt.initialize(model=model, config=cfg)
    try:
        losses = []
        for x, y in gpt_train.batches(steps):
            loss = engine(x, y)
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
        return losses, engine.full_state_dict()
    finally:
        engine.destroy()


# ---- 1. stage 3: params used outside the module that owns them -------------

def test_stage3_hand_tied_head_matches_stage2_exactly():
    want, want_params = train_losses(gpt_train.make_model(), gpt_train.ds_config(2))
    got, got_params = train_losses(gpt_train.make_model(), gpt_train.ds_config(3))
    assert got == want
    for name in want_params:
        assert torch.equal(got_params[name], want_params[name]), name


class ListTiedGPT(gpt_train.TinyGPT):
    """The head weight reached through a plain list, not an attribute."""

    def __init__(self):
        super().__init__()
        self.refs = [self.wte.weight]

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1])
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.refs[0])
        return F.cross_entropy(logits.reshape(-1, gpt_train.VOCAB), targets.reshape(-1))


def make_list_tied():
    torch.manual_seed(0)
    return ListTiedGPT()


def test_stage3_param_reached_by_reference_matches_stage2_exactly():
    want, _ = train_losses(make_list_tied(), gpt_train.ds_config(2))
    got, _ = train_losses(make_list_tied(), gpt_train.ds_config(3))
    assert got == want


def test_stage3_released_params_are_nan_placeholders():
    model = gpt_train.make_model()
    with zt.initialize(model, gpt_train.ds_config(3)):
        w = model.wte.weight
        assert w.shape == (gpt_train.VOCAB, gpt_train.DIM)
        assert torch.isnan(w).all()  # never zeros that compute silently


# ---- 2. state_dict, save_16bit_model, GatheredParameters --------------------

def trained_engine(stage, dtype="fp32", steps=2, **extra):
    model = gpt_train.make_model()
    cfg = gpt_train.ds_config(stage, dtype=dtype)
    cfg["zero_optimization"].update(extra)
    engine, _, _, _ = zt.initialize(model=model, config=cfg)
    for x, y in gpt_train.batches(steps):
        engine.backward(engine(x, y))
        engine.step()
    return model, engine


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_stage3_state_dict_holds_the_runtime_values(dtype):
    model, engine = trained_engine(3, dtype)
    with engine:
        sd = model.state_dict()
        masters = engine.full_state_dict()
        for name, p in model.named_parameters():
            v = sd[name]
            assert v.dtype == engine.dtype and v.shape == p.shape
            assert 0 not in v.stride()
            assert torch.equal(v, engine.working_value(p)), name
            if dtype == "fp32":
                assert torch.equal(v, masters[name]), name
            else:
                assert torch.equal(v, masters[name].to(torch.bfloat16)), name
        # The tied head appears once, with real values.
        assert not torch.isnan(sd["wte.weight"]).any()
    model2, engine2 = trained_engine(2, dtype)
    with engine2:
        for name, v in model2.state_dict().items():
            assert torch.equal(v, sd[name]), name


def test_save_16bit_model_stage3_gathers_into_a_loadable_file(tmp_path):
    model, engine = trained_engine(3, "bf16",
                                   stage3_gather_16bit_weights_on_model_save=True)
    with engine:
        assert engine.save_16bit_model(str(tmp_path)) is True
        want = engine.full_state_dict()
    sd = torch.load(tmp_path / "pytorch_model.bin")
    assert set(sd) == set(gpt_train.make_model().state_dict())
    for name, w in want.items():
        assert sd[name].dtype == torch.bfloat16
        assert torch.equal(sd[name], w.to(torch.bfloat16)), name
    plain = gpt_train.make_model()
    plain.load_state_dict(sd)  # a plain torch model takes it as-is


def test_save_16bit_model_stage3_without_gather_flag_saves_nothing(tmp_path):
    _, engine = trained_engine(3, stage3_gather_16bit_weights_on_model_save=False)
    with engine:
        with pytest.warns(UserWarning, match="stage3_gather_16bit_weights_on_model_save"):
            assert engine.save_16bit_model(str(tmp_path), "m.bin") is False
    assert not (tmp_path / "m.bin").exists()


def test_save_16bit_model_stage2_fp16_and_excluded_frozen(tmp_path):
    model, engine = trained_engine(2, "fp16")
    with engine:
        assert engine.save_16bit_model(str(tmp_path), "m.bin")
        want = engine.full_state_dict()
    sd = torch.load(tmp_path / "m.bin")
    for name, w in want.items():
        assert sd[name].dtype == torch.float16
        assert torch.equal(sd[name], w.to(torch.float16)), name
    model = torch_model.make_model()  # its first LayerNorm weight is frozen
    with zt.initialize(model, torch_model.ds_config(2)) as engine:
        engine.save_16bit_model(str(tmp_path), "f.bin", exclude_frozen_parameters=True)
    assert "1.weight" not in torch.load(tmp_path / "f.bin")


def test_gathered_parameters_reads_stage3_values():
    model, engine = trained_engine(3)
    with engine:
        want = engine.full_state_dict()
        ps = [model.wte.weight, model.ln_f.bias]
        with zt.GatheredParameters(ps):
            assert torch.equal(model.wte.weight, want["wte.weight"])
            assert torch.equal(model.ln_f.bias, want["ln_f.bias"])
        assert torch.isnan(model.wte.weight).all()  # released again
        assert all(c == 0 for c in engine._gather_count)


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_gathered_parameters_with_modifier_rank_writes_masters(stage):
    """Writes inside GatheredParameters(modifier_rank=0) reach the fp32
    masters (they survive the next step); untouched params keep theirs."""
    model, engine = trained_engine(stage)
    with engine:
        before = engine.full_state_dict()
        new_bias = torch.linspace(-1.0, 1.0, model.ln_f.bias.numel())
        with zt.GatheredParameters([model.wte.weight, model.ln_f.bias], modifier_rank=0):
            with torch.no_grad():
                model.ln_f.bias.copy_(new_bias)
        after = engine.full_state_dict()
        assert torch.equal(after["ln_f.bias"], new_bias)
        assert torch.equal(after["wte.weight"], before["wte.weight"])
        masters = engine.zero.read_master("ln_f.bias")
        assert torch.equal(torch.from_numpy(masters), new_bias)
        if stage < 3:  # the module's own tensor shows the write too
            assert torch.equal(model.ln_f.bias.detach(), new_bias)
        assert all(c == (0 if stage == 3 else 1) for c in engine._gather_count)


def test_gathered_parameters_is_a_no_op_in_stage2():
    model, engine = trained_engine(2)
    with engine:
        before = model.wte.weight.data_ptr()
        with zt.GatheredParameters(model.parameters()):
            assert model.wte.weight.data_ptr() == before


# ---- 4. clip_grad_norm_ ----------------------------------------------------

def test_clip_grad_norm_on_engine_params_names_gradient_clipping():
    model = torch_model.make_model()
    engine = zt.initialize(model, torch_model.ds_config(2))
    x, y = torch_model.make_data()[0]
    engine.backward(torch_model.loss_fn(engine(x), y))
    with pytest.raises(zero.FailedPreconditionError, match="gradient_clipping"):
        torch.nn.utils.clip_grad_norm_(engine.parameters(), 1.0)
    with pytest.raises(zero.FailedPreconditionError, match="gradient_clipping"):
        torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)
    engine.step()
    engine.close()
    # Params no engine manages clip as usual.
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.full((3,), 4.0)
    norm = torch.nn.utils.clip_grad_norm_([p], 1.0)
    assert abs(norm.item() - 48 ** 0.5) < 1e-5
    assert abs(p.grad.norm().item() - 1.0) < 1e-5


def test_gradient_clipping_config_clips_like_torch():
    max_norm = 0.05
    model = torch_model.make_model()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=torch_model.LR, betas=torch_model.BETAS,
                            eps=torch_model.EPS, weight_decay=torch_model.WEIGHT_DECAY)
    for x, y in torch_model.make_data():
        opt.zero_grad()
        torch_model.loss_fn(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(params, max_norm)
        opt.step()
    want = dict(model.named_parameters())
    cfg = dict(torch_model.ds_config(2), gradient_clipping=max_norm)
    with zt.initialize(torch_model.make_model(), cfg) as engine:
        for x, y in torch_model.make_data():
            engine.backward(torch_model.loss_fn(engine(x), y))
            engine.step()
        got = engine.full_state_dict()
    torch_model.assert_params_close(got, {k: v.detach() for k, v in want.items()})


# ---- 6. initialize and the engine's API ------------------------------------

def test_initialize_returns_deepspeeds_four_tuple(tmp_path):
    cfg_path = tmp_path / "ds_config.json"
    cfg = gpt_train.ds_config(1)
    cfg["scheduler"] = {"type": "WarmupLR",
                        "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3,
                                   "warmup_num_steps": 10}}
    cfg_path.write_text(json.dumps(cfg))
    args = argparse.Namespace(deepspeed_config=str(cfg_path), local_rank=0)
    model = gpt_train.make_model()
    data = torch.utils.data.TensorDataset(*gpt_train.batches(1)[0])
    engine, optimizer, loader, sched = zt.initialize(
        args=args, model=model, model_parameters=model.parameters(),
        training_data=data)
    with engine:
        assert isinstance(engine, zt.ZeroTorchEngine)
        assert engine._orig_data == []  # the module's own copy is freed
        assert optimizer.param_groups[0]["lr"] == 0.0
        assert optimizer.param_groups[0]["betas"] == (0.9, 0.999)
        assert len(optimizer.param_groups[0]["params"]) == len(list(model.parameters()))
        assert sched.get_lr() == [0.0] and sched.last_batch_iteration == -1
        x, y = next(iter(loader))
        assert x.shape == (gpt_train.GLOBAL_BATCH, gpt_train.CTX)
        with pytest.raises(NotImplementedError, match="engine.step"):
            optimizer.step()
        with pytest.raises(NotImplementedError, match="engine steps"):
            sched.step()
    engine, optimizer, loader, sched = zt.initialize(
        model=gpt_train.make_model(), config_params=gpt_train.ds_config(0))
    with engine:
        assert loader is None and sched is None and optimizer is not None
        assert engine._orig_data == []
    with zt.initialize(gpt_train.make_model(), gpt_train.ds_config(3)) as engine:
        assert engine._orig_data == []


def test_initialize_config_sources_are_checked():
    model = gpt_train.make_model()
    args = argparse.Namespace(deepspeed_config="x.json")
    with pytest.raises(zero.InvalidArgumentError, match="both"):
        zt.initialize(args=args, model=model, config=gpt_train.ds_config(0))
    with pytest.raises(zero.InvalidArgumentError, match="no DeepSpeed config"):
        zt.initialize(model=model)
    with pytest.raises(NotImplementedError, match="optimizer"):
        zt.initialize(model=model, config=gpt_train.ds_config(0),
                      optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    assert not list(zero.engine._live_engines)


@pytest.mark.parametrize("stage", [0, 3])
def test_failed_initialize_leaves_no_engine_and_the_module_intact(monkeypatch, stage):
    model = gpt_train.make_model()
    before = {n: (p.data_ptr(), p.detach().clone()) for n, p in model.named_parameters()}
    with pytest.raises(zero.InvalidArgumentError, match="zero_optimisation"):
        zt.initialize(model=model, config={"zero_optimisation": {"stage": stage}})

    def boom(self):
        raise zero.MismatchError("finalize failed (injected)")

    monkeypatch.setattr(zero.engine.Engine, "finalize", boom)
    with pytest.raises(zero.MismatchError, match="injected"):
        zt.initialize(model=model, config=gpt_train.ds_config(stage))
    monkeypatch.undo()
    with pytest.raises(TypeError):  # the dataloader fails after the engine exists
        zt.initialize(model=model, config=gpt_train.ds_config(stage), training_data=3)
    assert not list(zero.engine._live_engines)
    assert not list(zt._live)
    assert type(model.wte._parameters) is not zt._ZeroParamDict
    for n, p in model.named_parameters():
        assert p.data_ptr() == before[n][0] and torch.equal(p, before[n][1]), n
    loss = model(*gpt_train.batches(1)[0])  # still a plain working module
    assert torch.isfinite(loss)


SCHEDULERS = [
    {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-4, "warmup_max_lr": 1e-3,
                                    "warmup_num_steps": 4}},
    {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3,
                                    "warmup_num_steps": 3, "warmup_type": "linear"}},
    {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3,
                                         "warmup_num_steps": 2, "total_num_steps": 6}},
    {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 2, "total_num_steps": 6}},
    None,
]


@pytest.mark.parametrize("sched", SCHEDULERS)
def test_get_lr_is_the_lr_of_the_next_step(sched):
    cfg = dict(torch_model.ds_config(1, gas=2))
    if sched:
        cfg["scheduler"] = sched
    engine, optimizer, _, lr_scheduler = zt.initialize(
        model=torch_model.make_model(), config=cfg)
    with engine:
        for x, y in torch_model.make_data(6):
            want = engine.get_lr()
            assert want == optimizer.get_lr() and want[0] == want[0]  # not nan
            if lr_scheduler is not None:
                assert lr_scheduler.get_lr() == want == lr_scheduler.get_last_lr()
            for xm, ym in zip(x.chunk(2), y.chunk(2)):
                engine.backward(torch_model.loss_fn(engine(xm), ym))
                info = engine.step()
            assert info.boundary
            assert info.lr == pytest.approx(want[0], rel=1e-12, abs=1e-15)


def test_engine_query_methods_and_no_sync():
    cfg = dict(torch_model.ds_config(1, gas=2), train_batch_size=torch_model.GLOBAL_BATCH)
    del cfg["train_micro_batch_size_per_gpu"]
    engine = zt.initialize(torch_model.make_model(), cfg)
    with engine:
        assert engine.gradient_accumulation_steps() == 2
        assert engine.gradient_accumulation_steps == 2  # the old attribute
        assert engine.train_batch_size() == torch_model.GLOBAL_BATCH
        assert engine.train_micro_batch_size_per_gpu() == torch_model.GLOBAL_BATCH // 2
        assert engine.zero_optimization_stage() == 1
        assert not engine.fp16_enabled() and not engine.bfloat16_enabled()
        assert not engine.was_step_applied()
        x, y = torch_model.make_data()[0]
        with engine.no_sync():
            engine.backward(torch_model.loss_fn(engine(x[:8]), y[:8]))
            engine.step()
            assert not engine.was_step_applied()
            with pytest.raises(zero.FailedPreconditionError, match="reentry"):
                with engine.no_sync():
                    pass
        engine.backward(torch_model.loss_fn(engine(x[8:]), y[8:]))
        assert engine.step().boundary
        assert engine.was_step_applied()
    with pytest.raises(zero.FailedPreconditionError):
        engine.step()
    for stage in (2, 3):
        cfg = dict(torch_model.ds_config(stage), bf16={"enabled": True})
        engine = zt.initialize(torch_model.make_model(), cfg)
        assert engine.bfloat16_enabled() and engine.zero_optimization_stage() == stage
        with pytest.raises(zero.FailedPreconditionError, match=f"ZeRO stage {stage}"):
            with engine.no_sync():
                pass
        engine.destroy()
        with pytest.raises(zero.FailedPreconditionError):
            engine(x)


# ---- 3. fp16 on the CPU ----------------------------------------------------

@pytest.mark.parametrize("stage", [0, 2, 3])
def test_fp16_computes_in_fp32_on_the_cpu(stage):
    want, _ = train_losses(gpt_train.make_model(), gpt_train.ds_config(stage))
    model = gpt_train.make_model()
    engine, _, _, _ = zt.initialize(model=model,
                                    config=gpt_train.ds_config(stage, dtype="fp16"))
    with engine:
        assert engine.fp16_enabled() and engine.loss_scale == 256
        got = []
        for x, y in gpt_train.batches(STEPS):
            loss = engine(x, y)
            engine.backward(loss)
            engine.step()
            got.append(loss.item())
        assert engine.global_steps == STEPS
        # The module's values are the runtime's fp16 working copy.
        sd = model.state_dict()
        for name, p in model.named_parameters():
            assert sd[name].dtype == torch.float16
            assert torch.equal(sd[name], engine.working_value(p)), name
            if stage < 3:
                assert torch.equal(p.detach(), sd[name].float()), name
        # fp16 inputs are taken too (upcast).
        out = engine(torch.zeros(2, 4, dtype=torch.long))
        assert out.dtype == torch.float32
        lin = torch.nn.Linear(4, 4).half()
        with zt.initialize(lin, {"fp16": {"enabled": True}, "steps_per_print": 0,
                                 "zero_optimization": {"stage": stage}}) as e2:
            assert e2(torch.ones(3, 4, dtype=torch.float16)).dtype == torch.float32
    for a, b in zip(got, want):
        assert abs(a - b) < 1e-2 * abs(b)


# ---- 8. activation_checkpointing -------------------------------------------

def train_counting(stage, ac, steps=STEPS, **cfg_extra):
    """The GPT example with (ac: the section) or without activation
    checkpointing: losses, final masters, the bytes autograd keeps saved
    from the first forward (params excluded), the stage-3 gathers per step
    and the checkpointed module names."""
    cfg = gpt_train.ds_config(stage)
    if ac is not None:
        cfg["activation_checkpointing"] = ac
    cfg["zero_optimization"].update(cfg_extra)
    engine, _, _, _ = zt.initialize(model=gpt_train.make_model(), config=cfg)
    gathers = [0]

    class CountingRuntime:  # counts the runtime's gathers, whatever calls them
        def __init__(self, inner):
            self._inner = inner

        def __getattr__(self, name):
            return getattr(self._inner, name)

        def gather_into(self, *a):
            gathers[0] += 1
            return self._inner.gather_into(*a)

        def gather(self, *a):
            gathers[0] += 1
            return self._inner.gather(*a)

        def gather_into_many(self, ids, count, *a):  # a unit's params in one call
            gathers[0] += count
            return self._inner.gather_into_many(ids, count, *a)

    engine.zero._c = CountingRuntime(engine.zero._c)
    with engine:
        losses, saved, per_step = [], [], []
        for x, y in gpt_train.batches(steps):
            kept = {}

            def pack(t):
                if id(t) not in engine._index:  # activations, not params
                    kept[t.data_ptr()] = t.numel() * t.element_size()
                return t

            gathers[0] = 0
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss = engine(x, y)
            engine.backward(loss)
            engine.step()
            per_step.append(gathers[0])
            saved.append(sum(kept.values()))
            losses.append(loss.item())
            assert all(c == 0 for c in engine._gather_count) or stage < 3
        return (losses, engine.full_state_dict(), saved[0], per_step,
                list(engine.checkpointed_modules))


AC_SECTION = {"partition_activations": False, "cpu_checkpointing": False,
              "contiguous_memory_optimization": False,
              "synchronize_checkpoint_boundary": False}


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_activation_checkpointing_same_losses_fewer_saved_activations(stage):
    want, want_params, want_saved, want_gathers, names = train_counting(stage, None)
    assert names == []
    got, got_params, got_saved, got_gathers, names = train_counting(stage, AC_SECTION)
    assert names == ["blocks.0", "blocks.1"]  # the ModuleList's children
    assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-6, (got, want)
    for name in want_params:
        assert torch.allclose(got_params[name], want_params[name], rtol=0, atol=1e-6), name
    # The blocks keep no activations: what stays saved is the embeddings',
    # the final LayerNorm's and the head's (under a third here).
    assert got_saved < 0.35 * want_saved, (got_saved, want_saved)
    if stage == 3:
        # The recomputed forward of each block gathers its 12 params again.
        per_block = len(list(gpt_train.Block().parameters()))
        assert all(g - w == gpt_train.LAYERS * per_block
                   for g, w in zip(got_gathers, want_gathers)), (got_gathers, want_gathers)


def test_activation_checkpointing_stage3_without_prefetch_and_with_bf16():
    for extra in ({"overlap_comm": False}, {"stage3_max_live_parameters": 20000}):
        want = train_counting(3, None, **extra)[0]
        assert train_counting(3, AC_SECTION, **extra)[0] == want, extra
    cfg = gpt_train.ds_config(3, dtype="bf16")
    want, _ = train_losses(gpt_train.make_model(), cfg)
    got, _ = train_losses(gpt_train.make_model(),
                          dict(cfg, activation_checkpointing=AC_SECTION))
    assert got == want


def test_activation_checkpointing_module_policy_and_reports():
    # zero's own key: class names; the outermost match only.
    sec = dict(AC_SECTION, zero_checkpoint_modules=["LayerNorm", "Block"])
    *_, names = train_counting(2, sec, steps=1)
    assert names == ["blocks.0", "blocks.1", "ln_f"]
    *_, names = train_counting(2, dict(AC_SECTION, zero_checkpoint_modules=["Linear"]),
                               steps=1)
    assert names == [f"blocks.{b}.{m}" for b in range(gpt_train.LAYERS)
                     for m in ("qkv", "proj", "fc", "out")]
    *_, names = train_counting(2, dict(AC_SECTION, zero_checkpoint_modules=[]), steps=1)
    assert names == []
    *_, names = train_counting(2, {"enabled": False}, steps=1)
    assert names == []
    with pytest.raises(zero.InvalidArgumentError, match="zero_checkpoint_modules"):
        zt.initialize(gpt_train.make_model(), dict(
            gpt_train.ds_config(2),
            activation_checkpointing={"zero_checkpoint_modules": "Block"}))
    # The DeepSpeed keys without effect are named in one warning.
    model = gpt_train.make_model()
    cfg = dict(gpt_train.ds_config(3), activation_checkpointing={
        "partition_activations": True, "cpu_checkpointing": True,
        "number_checkpoints": 4, "profile": False})
    with pytest.warns(UserWarning) as rec:
        engine = zt.initialize(model, cfg)
    msgs = [str(w.message) for w in rec if "activation_checkpointing" in str(w.message)]
    assert len(msgs) == 1, msgs
    assert "partition_activations" in msgs[0] and "cpu_checkpointing" in msgs[0]
    assert "number_checkpoints" in msgs[0] and "profile" not in msgs[0]
    with engine:
        assert "forward" in vars(model.blocks[0].qkv)  # stage 3's Linear
        assert getattr(model.blocks[0].forward, "_zero_checkpointed", False)
        with torch.no_grad():  # nothing to recompute: runs the forward as is
            assert torch.isfinite(engine(*gpt_train.batches(1)[0]))
    # close() gives the modules their own forward back.
    assert "forward" not in vars(model.blocks[0])
    assert "forward" not in vars(model.blocks[0].qkv)


# ---- multi-rank: 5. broadcast from rank 0; 7. the GPT example vs DDP -------

def _mpirun(np_, *worker_args):
    import shutil
    import subprocess
    mpirun = shutil.which("mpirun")
    assert mpirun, "openmpi-bin is required"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.setdefault("OMPI_MCA_plm_rsh_agent", "")
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "torch_api_worker.py")
    cmd = [mpirun, "-np", str(np_), "--oversubscribe", "--allow-run-as-root",
           "--mca", "btl", "self,vader", "-x", "PYTHONPATH",
           sys.executable, worker, *worker_args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("dist", [False, True])
def test_ranks_starting_from_different_weights_train_rank0s_model(tmp_path, dist):
    args = ["broadcast", str(tmp_path)] + (["--dist"] if dist else [])
    proc = _mpirun(2, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reference = torch_model.train_reference()
    for stage in (2, 3):
        torch_model.assert_params_close(
            torch.load(tmp_path / f"broadcast_stage{stage}.pt"), reference)


def test_gpt_example_matches_torch_and_ddp():
    want = gpt_train.train_torch(STEPS + 1)
    for stage in range(4):
        got = gpt_train.train(stage, STEPS + 1)
        assert max(abs(a - b) for a, b in zip(got, want)) < 1e-4, (stage, got, want)


def test_gpt_example_two_ranks_matches_ddp(tmp_path):
    """The example script (DeepSpeed's API; only its import names zero), run
    through its own main() on 2 ranks at stages 0-3, with and without
    activation checkpointing, against torch DDP (gloo) on the same data."""
    proc = _mpirun(2, "gpt", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in (0, 1):
        losses = json.loads((tmp_path / f"gpt_rank{rank}.json").read_text())
        for stage in range(4):
            got, want = losses[f"zero{stage}"], losses["ddp"]
            assert len(got) == len(want)
            assert max(abs(a - b) for a, b in zip(got, want)) < 1e-4, (rank, stage)
            ac = losses[f"zero{stage}_ac"]
            assert len(ac) == len(got)
            assert max(abs(a - b) for a, b in zip(ac, got)) <= 1e-6, (rank, stage)


@pytest.mark.parametrize("stage", [0, 3])
def test_gpt_example_saves_and_resumes(tmp_path, stage, capsys):
    full = gpt_train.train(stage, 6)
    assert gpt_train.main(["--stage", str(stage), "--steps", "4", "--json",
                           "--save_dir", str(tmp_path)]) == 0
    assert (tmp_path / "latest").read_text().strip() == "global_step4"
    sd = torch.load(tmp_path / "pytorch_model.bin")
    assert set(sd) == set(gpt_train.make_model().state_dict())
    assert gpt_train.main(["--stage", str(stage), "--steps", "6", "--json",
                           "--resume", "--save_dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    first, resumed = (json.loads(line)["losses"] for line in lines)
    assert first == full[:4] and resumed == full[4:]


@pytest.mark.parametrize("stage,where", [(2, "forward"), (3, "forward"), (3, "uncaught")])
def test_a_failing_rank_ends_the_job_promptly_naming_it(tmp_path, stage, where):
    """Items 4-5: rank 1 raises (caught and skipped inside a training
    forward, or uncaught); every rank ends within seconds, not after
    comm_timeout_seconds (300 s), and the message names rank 1."""
    import time
    t0 = time.monotonic()
    proc = _mpirun(2, "fail", str(tmp_path), str(stage), where)
    secs = time.monotonic() - t0
    assert proc.returncode != 0, proc.stdout + proc.stderr
    # Half of comm_timeout_seconds: a job that waited for the timeout fails.
    # (Not 60 s: under tools/san_run.sh asan, two ranks importing torch with
    # the ASan runtime preloaded took 67 s on a loaded 2-core machine.)
    assert secs < 150, secs
    want = ("ValueError in zero.torch forward: bad batch on purpose" if where == "forward"
            else "uncaught RuntimeError: data loader died")
    assert "rank 1 of 2 failed: " + want in proc.stderr, proc.stderr
