"""zero's DeepSpeed layer, one process: which ``deepspeed`` is active (never
a real DeepSpeed shadowed silently), every name the HF and accelerate
integrations call with DeepSpeed's semantics or a clear error, and the
engine's DeepSpeed names against plain-torch references. Each case runs in
the current-torch venv (it has the real DeepSpeed to be ambiguous with)."""
import os
import subprocess
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ds_compat_harness as H  # noqa: E402


def run(code, which="zero", extra_env=None, pythonpath=None, expect_ok=True):
    py = H.venv_python()
    env = H.env_for(which)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    env.update(extra_env or {})
    r = subprocess.run([py, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                       text=True, timeout=300)
    if expect_ok:
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    return r


def test_selection_never_shadows_a_real_deepspeed_silently(tmp_path):
    layer_first = os.pathsep.join([H.SHIM_DIR, H.zero_path()])
    r = run("import deepspeed", pythonpath=layer_first, extra_env={"ZERO_DEEPSPEED": ""},
            expect_ok=False)
    assert r.returncode != 0
    assert "ambiguous" in r.stderr and H.SHIM_DIR in r.stderr and "site-packages/deepspeed" in r.stderr
    r = run("import deepspeed", pythonpath=layer_first, extra_env={"ZERO_DEEPSPEED": "0"},
            expect_ok=False)
    assert "ZERO_DEEPSPEED='0' does not choose zero's DeepSpeed layer" in r.stderr
    r = run("import deepspeed; print(deepspeed.__file__)")  # ZERO_DEEPSPEED=1
    assert "zero_deepspeed" in r.stdout
    assert "zero's DeepSpeed compatibility layer is active" in r.stderr
    assert "the real DeepSpeed at" in r.stderr and "is not used" in r.stderr
    r = run("import deepspeed; print(deepspeed.__file__)", which="real")
    assert "site-packages/deepspeed" in r.stdout and "zero's DeepSpeed" not in r.stderr
    # The opt-in install: a .pth that adds the layer only under ZERO_DEEPSPEED=1.
    site = tmp_path / "site"
    subprocess.run(["bash", os.path.join(H.REPO, "tools", "install_deepspeed_compat.sh"),
                    "--site-dir", str(site)], check=True, capture_output=True)
    code = f"import site; site.addsitedir({str(site)!r}); import deepspeed; print(deepspeed.__file__)"
    for choice, where in (("1", "zero_deepspeed"), ("", "site-packages/deepspeed")):
        r = run(code, pythonpath=H.zero_path(), extra_env={"ZERO_DEEPSPEED": choice})
        assert where in r.stdout, (choice, r.stdout)


def test_module_level_names():
    run("""
        import importlib.metadata, logging, torch
        import deepspeed
        from zero.errors import UnimplementedError
        assert deepspeed.__version__ == importlib.metadata.version("deepspeed") == "0.19.8+zero"
        from transformers.integrations.deepspeed import is_deepspeed_available
        from accelerate.utils import is_deepspeed_available as acc_available
        assert is_deepspeed_available() and acc_available()
        deepspeed.init_distributed()            # one process: a world of 1 over gloo
        import deepspeed.comm as dist
        assert torch.distributed.is_initialized() and dist.get_rank() == 0 and dist.get_world_size() == 1
        dist.barrier(); t = torch.ones(2); dist.all_reduce(t); assert t.tolist() == [1.0, 1.0]
        try:
            deepspeed.tp_model_init(torch.nn.Linear(2, 2), tp_size=2, dtype=torch.float32)
            raise SystemExit("tp_model_init did not raise")
        except UnimplementedError as e:
            assert "tensor parallelism" in str(e)
        from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPDataLoaderAdapter
        for make in (lambda: UlyssesSPDataLoaderAdapter(None, sp_rank=0),
                     lambda: deepspeed.utils.groups._get_sequence_parallel_group()):
            try:
                make(); raise SystemExit("Ulysses did not raise")
            except UnimplementedError as e:
                assert "Ulysses" in str(e)
        from deepspeed.utils import logger, groups, set_z3_leaf_modules
        assert isinstance(logger, logging.Logger)
        assert groups._get_data_parallel_world_size() == 1 and groups._get_sequence_parallel_world_size() == 1
        m = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), torch.nn.Linear(2, 2))
        assert set_z3_leaf_modules(m, [torch.nn.Linear]) == [m[0], m[2]] and m[0]._z3_leaf
        assert deepspeed.utils.get_z3_leaf_modules(m) == [m[0], m[2]]
        try:
            set_z3_leaf_modules(m, [torch.nn.Conv1d]); raise SystemExit("no error")
        except ValueError:
            pass
        from deepspeed.checkpoint.utils import clone_tensors_for_torch_save
        big = torch.arange(10.0); item = {"a": [big[2:4]], "b": (big,), "c": 3}
        c = clone_tensors_for_torch_save(item)
        assert c["c"] == 3 and torch.equal(c["a"][0], big[2:4]) and isinstance(c["b"], tuple)
        assert c["a"][0].untyped_storage().nbytes() == 8  # only its own elements
        assert c["b"][0].data_ptr() != big.data_ptr()
        from deepspeed.runtime.utils import move_to_device
        x = torch.ones(2); out = move_to_device([x, {"k": (x,)}], "cpu")
        assert torch.equal(out[1]["k"][0], x)
        y = torch.ones(2); z = move_to_device(y, "cpu", criterion_func=lambda t: torch.is_tensor(t))
        assert z is y
        from deepspeed.runtime.lr_schedules import VALID_LR_SCHEDULES
        assert VALID_LR_SCHEDULES == ["LRRangeTest", "OneCycle", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"]
        from deepspeed.accelerator import get_accelerator
        acc = get_accelerator()
        assert acc.device_name() == "cpu" and acc.current_device_name() == "cpu"
        assert acc.communication_backend_name() == "gloo" and acc.is_available()
        from deepspeed.runtime.zero import partition_parameters as pp
        assert pp._orig_torch_arange is torch.arange
        f = pp.zero_wrapper_for_fp_tensor_constructor(torch.ones, torch.float16, target_device="cpu")
        assert f(3).dtype == torch.float16 and f(3, dtype=torch.int64).dtype == torch.int64
        assert {s.name for s in pp.ZeroParamStatus} == {"AVAILABLE", "NOT_AVAILABLE", "INFLIGHT"}
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        torch.manual_seed(0); p1 = torch.nn.Parameter(torch.randn(4)); p2 = torch.nn.Parameter(p1.detach().clone())
        o1 = DeepSpeedCPUAdam([p1], lr=0.1, weight_decay=0.01); o2 = torch.optim.AdamW([p2], lr=0.1, weight_decay=0.01)
        for _ in range(3):
            for p, o in ((p1, o1), (p2, o2)):
                o.zero_grad(); (p * p).sum().backward(); o.step()
        assert torch.equal(p1, p2)
        from deepspeed import DeepSpeedEngine
        from deepspeed.runtime.engine import DeepSpeedEngine as E2
        assert DeepSpeedEngine is E2
        print("ok")
        """)


ENGINE = """
    import copy, torch, deepspeed
    from zero.errors import FailedPreconditionError
    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    def cfg(stage, gas=2, **extra):
        c = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": gas,
             "optimizer": {"type": "SGD", "params": {"lr": 0.1}}, "zero_optimization": {"stage": stage}}
        c.update(extra)
        return c
    torch.manual_seed(1)
    xs = [torch.randn(2, 4) for _ in range(4)]
"""


def test_engine_boundary_override_post_step_hook_and_config():
    run(ENGINE + """
    ref = model()                       # plain torch: SGD on the mean of 2 micro-batches
    loss = sum(ref(x).square().mean() for x in xs[:2]) / 2
    loss.backward()
    with torch.no_grad():
        expect = [p - 0.1 * p.grad for p in ref.parameters()]
    for stage in (0, 1, 2, 3):
        m = model()
        engine, opt, _, _ = deepspeed.initialize(model=m, model_parameters=m.parameters(),
                                                 config=cfg(stage))
        assert engine.config["zero_optimization"]["stage"] == stage
        assert engine.config["optimizer"]["type"] == "SGD"
        calls = []
        engine.register_post_step_hook(lambda mod, o: calls.append((mod is m, o is opt)))
        # accelerate's pattern: the boundary said before each backward, step() only at it.
        engine.set_gradient_accumulation_boundary(False)
        engine.backward(engine(xs[0]).square().mean())
        assert calls == [] and engine.global_steps == 0
        engine.set_gradient_accumulation_boundary(True)
        engine.backward(engine(xs[1]).square().mean())
        engine.step()
        assert calls == [(True, True)] and engine.global_steps == 1 and opt.overflow is False
        with deepspeed.zero.GatheredParameters(list(m.parameters())):
            got = [p.detach().clone() for p in m.parameters()]
        err = max(float((a - b).abs().max()) for a, b in zip(got, expect))
        assert err < 1e-6, (stage, err)
        # A boundary the runtime's count does not have: refused before the backward.
        engine.set_gradient_accumulation_boundary(True)
        try:
            engine.backward(engine(xs[2]).square().mean())
            raise SystemExit("no error")
        except FailedPreconditionError as e:
            assert "micro-step 3" in str(e) and "gradient_accumulation_steps=2" in str(e), e
        engine.close()
    print("ok")
    """)


def test_stage3_param_attributes_and_consolidated_state_dict():
    run(ENGINE + """
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
    m = model()
    frozen = m[2].bias
    frozen.requires_grad_(False)
    plain = torch.nn.Linear(2, 2).weight
    engine, _, _, _ = deepspeed.initialize(model=m, config=cfg(3, gas=1),
                                           model_parameters=[p for p in m.parameters() if p.requires_grad])
    ps = list(m.parameters())
    assert [p.ds_numel for p in ps] == [32, 8, 16, 2]
    assert [tuple(p.ds_shape) for p in ps] == [(8, 4), (8,), (2, 8), (2,)]
    assert len({p.ds_id for p in ps}) == 4
    assert all(p.ds_status == ZeroParamStatus.NOT_AVAILABLE for p in ps)
    with deepspeed.zero.GatheredParameters(ps):
        assert all(p.ds_status == ZeroParamStatus.AVAILABLE for p in ps)
        full = {k: v.detach().clone() for k, v in zip(["0.weight", "0.bias", "2.weight", "2.bias"], ps)}
    assert not hasattr(plain, "ds_numel") and not hasattr(plain, "ds_status")
    try:
        ps[0].ds_tensor; raise SystemExit("no error")
    except AttributeError as e:
        assert "ds_tensor of param" in str(e) and "GatheredParameters" in str(e)
    sd = engine._zero3_consolidated_16bit_state_dict()
    assert list(sd) == list(full) and all(torch.equal(sd[k], full[k]) for k in full)
    sd = engine._zero3_consolidated_16bit_state_dict(exclude_frozen_parameters=True)
    assert "2.bias" not in sd and len(sd) == 3
    # module.state_dict() outside: DeepSpeed's partitioned form, not collective.
    assert all(v.numel() == 0 for v in m.state_dict().values())
    engine.close()
    m2 = model()
    e2, _, _, _ = deepspeed.initialize(model=m2, config=cfg(2, gas=1))
    try:
        e2._zero3_consolidated_16bit_state_dict(); raise SystemExit("no error")
    except ValueError as e:
        assert "ZeRO-3" in str(e)
    e2.close()
    # set_z3_leaf_modules: a leaf gathers its whole subtree for its forward
    # (its second Linear's params are all there while its first runs; without
    # the mark not all of them are); the losses are the same.
    seen, losses = {}, {}
    for leaf in (False, True):
        outer = torch.nn.Sequential(model(), torch.nn.Linear(2, 2))
        if leaf:
            deepspeed.utils.set_z3_leaf_modules(outer[0], [torch.nn.Sequential])
        inner = outer[0]
        def record(mod, args, leaf=leaf, inner=inner):
            seen.setdefault(leaf, {p.ds_status for p in inner[2].parameters()})
        c3 = cfg(3, gas=1)
        # No gathers ahead and no persistent small params: each module gathers its own.
        c3["zero_optimization"].update(stage3_prefetch_bucket_size=0, stage3_param_persistence_threshold=0)
        e, _, _, _ = deepspeed.initialize(model=outer, config=c3)
        inner[0].register_forward_pre_hook(record)
        losses[leaf] = []
        for x in xs:
            loss = e(x).square().mean()
            e.backward(loss); e.step()
            losses[leaf].append(float(loss))
        e.close()
    assert ZeroParamStatus.NOT_AVAILABLE in seen[False], seen
    assert seen[True] == {ZeroParamStatus.AVAILABLE}, seen
    assert losses[False] == losses[True], losses
    print("ok")
    """)


def test_overflow_and_refusals():
    run(ENGINE + """
    from zero.errors import UnimplementedError, FailedPreconditionError
    m = model()
    c = cfg(2, gas=1, fp16={"enabled": True, "initial_scale_power": 4})
    engine, opt, _, _ = deepspeed.initialize(model=m, config=c)
    engine.backward(engine(xs[0]).sum() * float("inf"))
    engine.step()
    assert opt.overflow is True and engine.global_steps == 0
    engine.backward(engine(xs[1]).square().mean())
    engine.step()
    assert opt.overflow is False
    engine.close()
    bare = {k: v for k, v in cfg(1).items() if k not in ("optimizer", "scheduler")}
    rms = torch.optim.RMSprop(model().parameters())
    for kw, msg in ((dict(optimizer=rms), "maps only torch.optim.AdamW, Adam and SGD"),
                    (dict(optimizer=torch.optim.AdamW(model().parameters(), amsgrad=True)), "amsgrad=True"),
                    (dict(lr_scheduler=lambda o: None), "add a \\"scheduler\\" block")):
        try:
            deepspeed.initialize(model=model(), config=bare, **kw); raise SystemExit("no error")
        except UnimplementedError as e:
            assert msg in str(e), e
    o = torch.optim.AdamW(model().parameters())
    try:
        deepspeed.initialize(model=model(), config=bare, optimizer=o,
                             lr_scheduler=torch.optim.lr_scheduler.StepLR(o, 2)); raise SystemExit("no error")
    except UnimplementedError as e:
        assert "cannot take a client scheduler's lr" in str(e), e
    # HF's linear schedule runs one step ahead of the config's schedulers: refused.
    import transformers
    o = torch.optim.AdamW(model().parameters())
    try:
        deepspeed.initialize(model=model(), config=bare, optimizer=o,
                             lr_scheduler=transformers.get_linear_schedule_with_warmup(o, 2, 5))
        raise SystemExit("no error")
    except UnimplementedError as e:
        assert "cannot take a client scheduler's lr" in str(e), e
    # A client AdamW and HF's constant schedule: the runtime's optimizer and
    # lr of every step are the client's (its LambdaLR stepped alone).
    m = model()
    o = torch.optim.AdamW(m.parameters(), lr=0.02, betas=(0.8, 0.9), eps=1e-7, weight_decay=0.01)
    s = transformers.get_constant_schedule(o)
    engine, eo, _, _ = deepspeed.initialize(model=m, config=bare, optimizer=o, lr_scheduler=s)
    p = engine.zero.config["optimizer"]
    assert p["type"] == "AdamW" and p["params"] == {"lr": 0.02, "betas": [0.8, 0.9], "eps": 1e-7,
                                                    "weight_decay": 0.01}, p
    want = []
    for _ in range(6):
        want.append(o.param_groups[0]["lr"]); o.step(); s.step()
    assert [engine.zero.lr_for_step(t) for t in range(6)] == want, want
    assert eo.param_groups[0]["lr"] == 0.02
    engine.close()
    # Param groups with their own hyperparameters (the runtime has one set): refused.
    m = model()
    groups = [{"params": [m[0].weight], "weight_decay": 0.1}, {"params": [m[0].bias], "weight_decay": 0.0}]
    try:
        deepspeed.initialize(model=m, model_parameters=groups, config=cfg(1)); raise SystemExit("no error")
    except UnimplementedError as e:
        assert "param group 0 sets weight_decay=0.1" in str(e), e
    # torch.distributed over 2 ranks that MPI did not start (torchrun): refused, naming zero-launch.
    import deepspeed._initialize as di
    di.comm.get_world_size = lambda group=None: 2
    try:
        deepspeed.initialize(model=model(), config=cfg(1)); raise SystemExit("no error")
    except FailedPreconditionError as e:
        assert "zero-launch" in str(e) and "not started by MPI" in str(e), e
    print("ok")
    """)
