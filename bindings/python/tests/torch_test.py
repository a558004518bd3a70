"""zero.torch trains like plain torch + AdamW: stages 0-3, one rank in this
process and four ranks under mpirun, fp32, within 1e-5 relative; a run saved
and resumed midway ends bitwise equal to the uninterrupted one."""
import os
import shutil
import subprocess
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402
import zero  # noqa: E402
import zero.torch as zt  # noqa: E402

REFERENCE = torch_model.train_reference()


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_one_rank_matches_torch_adamw(stage):
    params, stats, infos = torch_model.train_zero(stage)
    torch_model.assert_params_close(params, REFERENCE)
    assert stats["stage"] == stage
    assert [i.global_step for i in infos] == list(range(1, torch_model.STEPS + 1))


@pytest.mark.parametrize("stage", [0, 3])
def test_grads_handed_in_after_backward_match_hooks(stage):
    params, _, _ = torch_model.train_zero(stage, overlap_grad_hooks=False)
    torch_model.assert_params_close(params, REFERENCE)


@pytest.mark.parametrize("policy", [torch.nn.Linear, 500,
                                    lambda m, name: name in ("0", "3")])
def test_stage3_wrap_policy_trains_bitwise_like_per_module_gathers(policy):
    """FSDP-style units (by class, by size, by a callable): the same values
    are gathered, so training is bit for bit that of per-module gathers."""
    want, _, _ = torch_model.train_zero(3)
    got, _, _ = torch_model.train_zero(3, wrap_policy=policy)
    assert sorted(got) == sorted(want)
    for name in want:
        assert torch.equal(got[name], want[name]), name
    torch_model.assert_params_close(got, REFERENCE)


class _Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = torch.nn.Linear(d, d)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x):
        return torch.nn.functional.gelu(self.norm(self.fc(x)))


def test_stage3_wrap_policy_gathers_per_block_with_fewer_hooks():
    """A unit gathers its whole subtree in one pre-forward hook (the block's
    Linear and LayerNorm read gathered values inside it); only units get
    forward hooks; a bad policy is refused by name."""
    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), _Block(16), _Block(16),
                                   torch.nn.Linear(16, 2))

    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(3))
    y = torch.randn(4, 2, generator=torch.Generator().manual_seed(4))
    results = {}
    for policy in (None, {_Block}):
        m = model()
        with zt.initialize(m, torch_model.ds_config(3), wrap_policy=policy) as engine:
            seen = []
            h = m[1].fc.register_forward_pre_hook(
                lambda mod, inp: seen.append(mod.weight.stride() != (0, 0)))
            for _ in range(3):
                loss = torch_model.loss_fn(engine(x), y)
                engine.backward(loss)
                engine.step()
            h.remove()
            assert all(seen) and seen  # gathered when the inner Linear runs
            assert all(c == 0 for c in engine._gather_count)
            results[policy is None] = (len(engine._hooks), engine.wrapped_modules,
                                       engine.full_state_dict())
    hooks_all, names_all, params_all = results[True]
    hooks_blk, names_blk, params_blk = results[False]
    assert names_blk == ["", "1", "2"]
    assert len(names_all) == 9  # root, 2 Linears, 2 blocks x (self, fc, norm)
    assert hooks_blk < hooks_all
    for name in params_all:
        assert torch.equal(params_blk[name], params_all[name]), name
    with pytest.raises(zero.InvalidArgumentError, match="wrap_policy"):
        zt.initialize(model(), torch_model.ds_config(3), wrap_policy="Block")


@pytest.mark.parametrize("stage,policy", [(1, None), (2, None), (3, None),
                                          (3, torch.nn.Linear)])
def test_steady_steps_make_no_placeholders_or_gradient_views(stage, policy,
                                                             monkeypatch):
    """Once warm, a step registers no hook (they are registered
    at initialize), makes no placeholder (stage 3: each param's is made
    once) and no new view of a gradient buffer (their
    addresses repeat, so the cached tensors are reused); training stays that
    of plain torch (gradients written anywhere but the runtime's buffers
    would not train)."""
    model = torch_model.make_model()
    data = torch_model.make_data(torch_model.STEPS)
    with zt.initialize(model, torch_model.ds_config(stage), wrap_policy=policy) as engine:
        def run(batches):
            for x, y in batches:
                engine.backward(torch_model.loss_fn(engine(x), y))
                engine.step()

        run(data[:2])
        made = engine._grad_views.made
        pool = engine._gather_pool
        buffers = pool.made if pool is not None else None
        assert (stage == 3) == (pool is not None)
        assert made == sum(engine._trainable)  # one view per trainable param so far

        def no_placeholder(*a, **k):
            raise AssertionError("a placeholder made during a steady step")

        def no_hook(*a, **k):
            raise AssertionError("a hook registered during a steady step")

        monkeypatch.setattr(zt.stage3, "_placeholder", no_placeholder)
        hooks = len(engine._hooks)
        for owner, name in ((torch.nn.Module, "register_forward_pre_hook"),
                            (torch.nn.Module, "register_forward_hook"),
                            (torch.nn.Module, "register_full_backward_hook"),
                            (torch.Tensor, "register_hook")):
            monkeypatch.setattr(owner, name, no_hook)
        run(data[2:])
        assert len(engine._hooks) == hooks
        assert engine._grad_views.made == made
        if pool is not None:
            # Stage 3: the gathered copies went into buffers of the warm-up
            # steps (no fresh pages per gather; nothing kept a view).
            assert 0 < buffers == pool.made and pool.kept_by_views == 0
        monkeypatch.undo()
        params = engine.full_state_dict()
    torch_model.assert_params_close(params, REFERENCE)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_gradient_accumulation_matches_torch(stage):
    params, _, infos = torch_model.train_zero(stage, gas=2)
    torch_model.assert_params_close(params, torch_model.train_reference(gas=2))
    assert [i.boundary for i in infos[:2]] == [False, True]


def test_params_share_runtime_memory_in_stages_0_to_2():
    model = torch_model.make_model()
    with zt.initialize(model, torch_model.ds_config(2)) as engine:
        w = model[0].weight
        view = engine.zero.gather("0.weight")
        assert w.data_ptr() == view.ctypes.data
        engine.zero.release("0.weight")
        x, y = torch_model.make_data()[0]
        engine.backward(torch_model.loss_fn(engine(x), y))
        before = w.detach().clone()
        engine.step()
        assert not torch.equal(before, w.detach())  # updated in place


def test_stage3_releases_params_between_uses():
    model = torch_model.make_model()
    with zt.initialize(model, torch_model.ds_config(3)) as engine:
        w = model[0].weight
        assert w.shape == (torch_model.HIDDEN, torch_model.IN)
        assert w.stride() == (0, 0)  # a placeholder, not the values
        x, y = torch_model.make_data()[0]
        loss = torch_model.loss_fn(engine(x), y)
        assert w.stride() == (0, 0)  # released after forward
        engine.backward(loss)
        engine.step()
        assert all(c == 0 for c in engine._gather_count)


class _MatT(torch.nn.Module):
    """``x @ w.t()`` by hand, not torch.nn.Linear (whose stage-3 forward
    saves the param itself): autograd saves the *view* ``w.t()`` of the
    gathered copy for the input's gradient, and it outlives the release.
    ``u``, of the same shape, is read without being saved (its buffer is
    free again at release), so the layers' gathers do not simply take the
    buffers back in the order they were given up."""

    def __init__(self, d):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(d, d) * 0.5)
        self.u = torch.nn.Parameter(torch.randn(d, d) * 0.1)

    def forward(self, x):
        return torch.tanh(x @ self.w.t() + self.u.sum(0))


def _matt_model(dtype=torch.float32):
    torch.manual_seed(5)
    return torch.nn.Sequential(_MatT(8), _MatT(8), _MatT(8), _MatT(8)).to(dtype)


def _matt_data():
    g = torch.Generator().manual_seed(6)
    return [(torch.randn(16, 8, generator=g), torch.randn(16, 8, generator=g))
            for _ in range(4)]


def test_stage3_saved_views_of_gathered_params_keep_their_values():
    """Gathered copies reused: each _MatT's saved ``w.t()``
    outlives its release while the next one, a param of the same shape,
    is gathered. Its buffer must not be handed to that param (the backward
    would use the next layer's weights): training equals float64 torch,
    and the buffers were left to the views."""
    ref = _matt_model(torch.float64)
    opt = torch.optim.AdamW(ref.parameters(), lr=torch_model.LR,
                            betas=torch_model.BETAS, eps=torch_model.EPS,
                            weight_decay=torch_model.WEIGHT_DECAY)
    for x, y in _matt_data():
        opt.zero_grad()
        torch_model.loss_fn(ref(x.double()), y.double()).backward()
        opt.step()
    model = _matt_model()
    with zt.initialize(model, torch_model.ds_config(3)) as engine:
        for x, y in _matt_data():
            engine.backward(torch_model.loss_fn(engine(x), y))
            engine.step()
        # Layers 1-3 save a view in each forward (layer 0's input needs no
        # gradient); the copies regathered for backward are not saved.
        assert engine._gather_pool.kept_by_views >= 3 * len(_matt_data())
        got = engine.full_state_dict()
    torch_model.assert_params_close(got, dict(ref.named_parameters()))


def test_stage3_tensor_kept_over_a_step_keeps_its_values():
    """A tensor over a gathered param kept past the release and an optimizer
    step (``p.data`` inside GatheredParameters) keeps the values it had:
    its buffer is never reused for a later gather."""
    model = torch_model.make_model()
    data = torch_model.make_data()
    with zt.initialize(model, torch_model.ds_config(3)) as engine:
        w = model[3].weight
        with zt.GatheredParameters([w]):
            kept = w.data
            want = kept.clone()
        for x, y in data:
            engine.backward(torch_model.loss_fn(engine(x), y))
            engine.step()
        with zt.GatheredParameters([w]):
            assert not torch.equal(w.data, want)  # trained since
        assert torch.equal(kept, want)


def test_stage3_linear_weight_grads_go_straight_to_the_runtime():
    """At stage 3 on the CPU a Linear weight whose only gradient
    is its Linear's gets it computed straight into the runtime's gradient
    buffer (no torch gradient tensor, no copy); training equals torch."""
    model = torch_model.make_model()
    data = torch_model.make_data()
    linears = sum(1 for m in model if isinstance(m, torch.nn.Linear))
    with zt.initialize(model, torch_model.ds_config(3)) as engine:
        for x, y in data:
            engine.backward(torch_model.loss_fn(engine(x), y))
            engine.step()
        assert engine.direct_weight_grads == linears * len(data)
        got = engine.full_state_dict()
    torch_model.assert_params_close(got, REFERENCE)


class _TwiceUsed(torch.nn.Module):
    """A Linear whose weight also feeds the output directly: two gradients
    for it, which autograd sums; it must not be handed in from the Linear."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(7)
        self.fc = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.head(torch.tanh(self.fc(x)) + 0.1 * self.fc.weight.sum(0))


def _head_extra(m):
    """A second gradient for the head's weight, from outside the forward."""
    return 0.05 * m.head.weight.sum()


def _twice_used_reference(extra_at) -> dict:
    """float64 torch AdamW on _TwiceUsed over _matt_data(), the loss of step
    k plus _head_extra when extra_at(k)."""
    ref = _TwiceUsed().double()
    opt = torch.optim.AdamW(ref.parameters(), lr=torch_model.LR,
                            betas=torch_model.BETAS, eps=torch_model.EPS,
                            weight_decay=torch_model.WEIGHT_DECAY)
    for k, (x, y) in enumerate(_matt_data()):
        opt.zero_grad()
        loss = torch_model.loss_fn(ref(x.double()), y.double())
        (loss + _head_extra(ref) if extra_at(k) else loss).backward()
        opt.step()
    return dict(ref.named_parameters())


@pytest.mark.parametrize("outside", [False, True])
def test_stage3_weight_with_two_gradients_is_summed_first(outside):
    """The fc weight gets a second gradient from inside the forward, or
    from outside it (GatheredParameters): only the head's weight goes
    straight to the runtime, and training equals float64 torch."""
    data = _matt_data()
    extra = _head_extra
    want = _twice_used_reference(lambda k: outside)
    model = _TwiceUsed()
    with zt.initialize(model, torch_model.ds_config(3)) as engine:
        for x, y in data:
            if outside:
                with zt.GatheredParameters([model.head.weight]):
                    loss = torch_model.loss_fn(engine(x), y) + extra(model)
            else:
                loss = torch_model.loss_fn(engine(x), y)
            engine.backward(loss)
            engine.step()
        assert engine.direct_weight_grads == (0 if outside else 1) * len(data)
        got = engine.full_state_dict()
    torch_model.assert_params_close(got, want)


def test_frozen_param_stays_put():
    model = torch_model.make_model()
    frozen = model[1].weight.detach().clone()
    with zt.initialize(model, torch_model.ds_config(1)) as engine:
        for x, y in torch_model.make_data():
            engine.backward(torch_model.loss_fn(engine(x), y))
            engine.step()
        assert torch.equal(engine.full_state_dict()["1.weight"], frozen)


def test_use_after_close_raises():
    engine = zt.initialize(torch_model.make_model(), torch_model.ds_config(0))
    engine.close()
    with pytest.raises(zero.FailedPreconditionError):
        engine.step()
    with pytest.raises(zero.FailedPreconditionError):
        engine.zero.gather(0)


@pytest.mark.parametrize("stage", [1, 3])
def test_resumed_run_ends_equal_to_the_uninterrupted_run(tmp_path, stage):
    want, _, _ = torch_model.train_zero(stage, steps=torch_model.RESUME_STEPS)
    got, (path, client_state), kept = torch_model.train_zero_resumed(
        stage, str(tmp_path))
    assert path == str(tmp_path / f"global_step{torch_model.SAVE_AT}")
    assert client_state == {"step": torch_model.SAVE_AT}
    assert (tmp_path / "latest").read_text().strip() == os.path.basename(path)
    if stage < 3:
        assert kept  # params still alias the runtime's working copy
    for name in want:
        assert torch.equal(got[name], want[name]), name
    torch_model.assert_params_close(
        got, torch_model.train_reference(steps=torch_model.RESUME_STEPS))


@pytest.mark.parametrize("stage", [1, 3])
def test_asynchronous_save_checkpoint_resumes_like_the_synchronous_one(tmp_path, stage):
    """save_checkpoint(asynchronous=True, keep_last=2) while training goes
    on: the tags written in the background resume bit for bit like the
    uninterrupted run; only the 2 newest tags are kept; client_state with
    an asynchronous save is refused by name."""
    data = torch_model.make_data(torch_model.RESUME_STEPS)
    with zt.initialize(torch_model.make_model(), torch_model.ds_config(stage)) as engine:
        for t, (x, y) in enumerate(data[:torch_model.SAVE_AT]):
            engine.backward(torch_model.loss_fn(engine(x), y))
            engine.step()
            engine.save_checkpoint(str(tmp_path), asynchronous=True, keep_last=2)
        with pytest.raises(zero.UnimplementedError, match="client_state"):
            engine.save_checkpoint(str(tmp_path), client_state={"a": 1}, asynchronous=True)
        engine.wait_checkpoint()
    kept = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("global_step"))
    assert kept == [f"global_step{torch_model.SAVE_AT - 1}", f"global_step{torch_model.SAVE_AT}"]
    model = torch_model.make_model()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    with zt.initialize(model, torch_model.ds_config(stage)) as engine:
        path, client_state = engine.load_checkpoint(str(tmp_path))
        assert path == str(tmp_path / f"global_step{torch_model.SAVE_AT}")
        assert not client_state  # none was saved
        for x, y in data[torch_model.SAVE_AT:]:
            engine.backward(torch_model.loss_fn(engine(x), y))
            engine.step()
        got = engine.full_state_dict()
    want, _, _ = torch_model.train_zero(stage, steps=torch_model.RESUME_STEPS)
    for name in want:
        assert torch.equal(got[name], want[name]), name


def test_load_checkpoint_without_latest_returns_none(tmp_path):
    with zt.initialize(torch_model.make_model(), torch_model.ds_config(1)) as engine:
        with pytest.warns(UserWarning, match="latest"):
            assert engine.load_checkpoint(str(tmp_path)) == (None, None)
        with pytest.raises(zero.NotFoundError):
            engine.load_checkpoint(str(tmp_path), tag="nope")


def test_load_checkpoint_module_only_and_no_client_state(tmp_path):
    with zt.initialize(torch_model.make_model(), torch_model.ds_config(2)) as engine:
        x, y = torch_model.make_data()[0]
        engine.backward(torch_model.loss_fn(engine(x), y))
        engine.step()
        assert engine.save_checkpoint(str(tmp_path), tag="t") is True
        want = engine.full_state_dict()
    model = torch_model.make_model()
    with zt.initialize(model, torch_model.ds_config(2)) as engine:
        path, client_state = engine.load_checkpoint(str(tmp_path), "t",
                                                    load_module_only=True)
        assert path == str(tmp_path / "t") and client_state == {}
        assert engine.global_steps == 1
        for name, p in model.named_parameters():
            assert torch.equal(p.detach(), want[name]), name


def test_corrupt_checkpoint_raises_data_loss_naming_the_file(tmp_path):
    with zt.initialize(torch_model.make_model(), torch_model.ds_config(1)) as engine:
        engine.save_checkpoint(str(tmp_path), tag="t")
    shard = tmp_path / "t" / "rank_00000.bin"
    data = bytearray(shard.read_bytes())
    data[-8] ^= 0x01
    shard.write_bytes(bytes(data))
    with zt.initialize(torch_model.make_model(), torch_model.ds_config(1)) as engine:
        with pytest.raises(zero.DataLossError, match="rank_00000.bin"):
            engine.load_checkpoint(str(tmp_path))


def test_gradient_accumulation_steps_auto_comes_from_the_runtime():
    cfg = dict(torch_model.ds_config(1), gradient_accumulation_steps="auto",
               train_batch_size=torch_model.GLOBAL_BATCH,
               train_micro_batch_size_per_gpu=torch_model.GLOBAL_BATCH // 4)
    with zt.initialize(torch_model.make_model(), cfg) as engine:
        assert engine.gradient_accumulation_steps == 4


def test_two_ranks_under_mpirun_resume_equal_to_the_uninterrupted_run(tmp_path):
    proc = _mpirun(2, tmp_path, "--resume", "--stages", "1,3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reference = torch_model.train_reference(steps=torch_model.RESUME_STEPS)
    for stage in (1, 3):
        want = torch.load(tmp_path / f"stage{stage}.pt")
        got = torch.load(tmp_path / f"stage{stage}_resumed.pt")
        for name in want:
            assert torch.equal(got[name], want[name]), (stage, name)
        torch_model.assert_params_close(got, reference)


def _mpirun(np_, out, *worker_args):
    """Runs torch_worker.py on np_ ranks writing to `out`."""
    mpirun = shutil.which("mpirun")
    assert mpirun, "openmpi-bin is required"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.setdefault("OMPI_MCA_plm_rsh_agent", "")  # no ssh: one node
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "torch_worker.py")
    cmd = [mpirun, "-np", str(np_), "--oversubscribe", "--allow-run-as-root",
           "--mca", "btl", "self,vader", "-x", "PYTHONPATH",
           sys.executable, worker, "--out", str(out), *worker_args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True,
                          timeout=600)


def test_four_ranks_under_mpirun_match_torch_adamw(tmp_path):
    proc = _mpirun(4, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for stage in range(4):
        params = torch.load(tmp_path / f"stage{stage}.pt")
        torch_model.assert_params_close(params, REFERENCE)


def test_bf16_params_are_bf16_views_and_stages_agree():
    finals = {}
    for stage in (0, 3):
        model = torch_model.make_model()
        cfg = dict(torch_model.ds_config(stage), bf16={"enabled": True})
        with zt.initialize(model, cfg) as engine:
            assert model[0].weight.dtype == torch.bfloat16
            for x, y in torch_model.make_data():
                loss = torch_model.loss_fn(engine(x.to(torch.bfloat16)).float(), y)
                engine.backward(loss)
                engine.step()
            finals[stage] = engine.full_state_dict()
    torch_model.assert_params_close(finals[3], finals[0], rtol=1e-2)


def test_meta_params_are_initialized_from_module_defaults():
    # Meta params are accepted (torch_meta_test covers them);
    # a frozen meta param stays frozen.
    model = torch_model.make_model().to("meta")
    engine = zt.initialize(model, torch_model.ds_config(0))
    try:
        sd = engine.full_state_dict()
        assert torch.equal(sd["1.weight"], torch.ones(torch_model.HIDDEN))
        assert not model[1].weight.requires_grad
        assert engine.zero.param("1.weight").trainable is False
    finally:
        engine.destroy()



@pytest.mark.parametrize("stage", [1, 2, 3])
def test_plain_loss_backward_trains_like_engine_backward(stage):
    """``loss.backward()`` instead of ``engine.backward(loss)`` (fp32, no
    accumulation) trains like float64 torch at every stage. Stage 3 used to
    keep the first Linear gathered over the update (its input needs no
    gradient, so its post-backward never ran) and compute the next forward
    with pre-step weights: 4e-4 off, silently."""
    with zt.initialize(torch_model.make_model(), torch_model.ds_config(stage)) as engine:
        for x, y in torch_model.make_data():
            torch_model.loss_fn(engine(x), y).backward()
            engine.step()
        got = engine.full_state_dict()
    torch_model.assert_params_close(got, REFERENCE)


def test_plain_loss_backward_with_loss_scaling_is_an_error():
    """With fp16 dynamic loss scaling a plain ``loss.backward()`` gives
    gradients the runtime would divide by the scale: step() refuses."""
    cfg = dict(torch_model.ds_config(1), fp16={"enabled": True})
    with zt.initialize(torch_model.make_model(), cfg) as engine:
        x, y = torch_model.make_data()[0]
        torch_model.loss_fn(engine(x), y).backward()
        with pytest.raises(zero.errors.FailedPreconditionError, match="engine.backward"):
            engine.step()


def test_stage3_edge_counts_do_not_outlive_their_backward():
    """The per-param gradient counts of one engine.backward are not used by
    a later plain ``loss.backward()``, whose graph may differ: there a
    weight with two gradients is summed by autograd and handed in once,
    so training still equals float64 torch (with the previous counts its
    Linear handed in one of the two and the second raised)."""
    data = _matt_data()
    extra = _head_extra
    want = _twice_used_reference(lambda k: k % 2)
    model = _TwiceUsed()
    with zt.initialize(model, torch_model.ds_config(3)) as engine:
        for k, (x, y) in enumerate(data):
            if k % 2:
                with zt.GatheredParameters([model.head.weight]):
                    loss = torch_model.loss_fn(engine(x), y) + extra(model)
                loss.backward()
            else:
                engine.backward(torch_model.loss_fn(engine(x), y))
            engine.step()
        got = engine.full_state_dict()
    torch_model.assert_params_close(got, want)
