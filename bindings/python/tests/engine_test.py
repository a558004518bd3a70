"""zero.Engine over numpy: views, errors, life cycle, communicators."""
import json
import threading

import numpy as np
import pytest

import zero
from thread_ranks import on_ranks

ADAMW = {"type": "AdamW", "params": {"lr": 0.1, "weight_decay": 0.0}}


def config(stage=0, **extra):
    cfg = {"zero_optimization": {"stage": stage}, "optimizer": ADAMW,
           "steps_per_print": 0}
    cfg.update(extra)
    return cfg


def make_engine(stage=0, comm=None, **extra):
    eng = zero.Engine(config(stage, **extra), comm=comm)
    eng.register_param("w", np.arange(6, dtype=np.float32).reshape(2, 3))
    eng.register_param("frozen", np.array([1.0, 2.0]), trainable=False)
    eng.finalize()
    return eng


def test_gather_is_a_readonly_zero_copy_view_of_the_working_copy():
    with make_engine() as eng:
        a = eng.gather("w")
        b = eng.gather(0)
        assert a.shape == (2, 3) and a.dtype == np.float32
        assert a.ctypes.data == b.ctypes.data  # the runtime's memory, twice
        assert not a.flags.writeable
        np.testing.assert_array_equal(a, np.arange(6).reshape(2, 3))
        eng.release(0)
        eng.release(0)


def test_step_updates_the_gathered_view_in_place():
    with make_engine(stage=1) as eng:
        w = eng.gather("w")
        g = eng.grad_buffer("w")
        assert g.flags.writeable and not g.any()  # zero-filled
        g[...] = 1.0
        eng.grad_ready("w")
        info = eng.step()
        assert isinstance(info, zero.StepInfo)
        assert info.boundary and not info.skipped and info.global_step == 1
        # AdamW's first step moves every element by lr against the gradient.
        np.testing.assert_allclose(w, np.arange(6).reshape(2, 3) - 0.1, rtol=1e-6)
        np.testing.assert_array_equal(eng.read_master("w"), w)
        eng.release("w")


def test_gather_into_writes_the_gathered_bits_into_the_callers_array():
    # Stage 3 on 2 thread ranks, bf16: gather_into (C ABI 1.7) gives the bits
    # gather gives (uint16, bf16's numpy dtype), held until release; a wrong
    # array is refused naming the param; stage 1 copies the resident copy.
    values = np.linspace(-3, 3, 700, dtype=np.float32).reshape(35, 20)

    def rank_main(r, comm):
        cfg = config(3, bf16={"enabled": True})
        cfg["zero_optimization"]["stage3_param_persistence_threshold"] = 10
        with zero.Engine(cfg, comm=comm) as eng:
            eng.register_param("w", values)
            eng.finalize()
            ref = eng.gather("w").copy()
            eng.release("w")
            out = np.zeros((35, 20), np.uint16)
            assert eng.gather_into("w", out) is out
            np.testing.assert_array_equal(out, ref)
            np.testing.assert_array_equal(out, zero.float32_to_bf16(values))
            with pytest.raises(zero.FailedPreconditionError, match="gather 'w'"):
                eng.gather("w")
            eng.release("w")
            with pytest.raises(zero.FailedPreconditionError, match="not gathered"):
                eng.release("w")
            with pytest.raises(zero.InvalidArgumentError, match="gather_into 'w'"):
                eng.gather_into("w", np.zeros((35, 20), np.float16))
            with pytest.raises(zero.InvalidArgumentError, match="gather_into 'w'"):
                eng.gather_into("w", np.zeros(7, np.uint16))  # the runtime: 14 bytes given

    on_ranks(2, rank_main)
    with make_engine(stage=1) as eng:  # since 1.8: a copy below stage 3
        out = eng.gather_into("w", np.zeros((2, 3), np.float32))
        np.testing.assert_array_equal(out, np.arange(6).reshape(2, 3))
        eng.release("w")


def test_register_accepts_buffer_protocol_and_array_like():
    with zero.Engine(config()) as eng:
        eng.register_param("mv", memoryview(np.ones(4, np.float64)))
        eng.register_param("list", [[1, 2], [3, 4]])
        eng.register_param("zeros", shape=(3,))
        eng.finalize()
        assert [p.shape for p in eng.params] == [(4,), (2, 2), (3,)]
        assert eng.num_params == 3 and eng.find_param("list") == 1
        assert eng.param_numel("list") == 4
        with eng.gathered("list", "zeros") as (a, b):
            np.testing.assert_array_equal(a, [[1, 2], [3, 4]])
            assert not b.any()


def test_config_from_dict_path_and_json_text(tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(config(2)))
    for cfg in (config(2), str(path), path, json.dumps(config(2))):
        with zero.Engine(cfg) as eng:
            eng.register_param("w", np.zeros(4, np.float32))
            eng.finalize()
            assert eng.stats()["stage"] == 2


def test_stats_is_a_dict_of_the_c_fields():
    with make_engine(stage=2) as eng:
        stats = eng.stats()
        assert stats["rank"] == 0 and stats["world_size"] == 1
        assert stats["stage"] == 2
        assert {"master_bytes", "sent_allgather", "micro_step",
                "sent_bytes_allreduce"} <= set(stats)


def test_loss_scale_is_one_in_fp32():
    with make_engine() as eng:
        assert eng.loss_scale == 1.0


def test_unknown_config_key_raises_with_its_key_path():
    with pytest.raises(zero.InvalidArgumentError) as e:
        zero.Engine(config(zero_optimization={"stage": 1, "bogus_key": 3}))
    assert "zero_optimization.bogus_key" in str(e.value)
    assert e.value.status == 1 and isinstance(e.value, zero.ZeroError)


def test_stage_out_of_range_raises_with_its_key_path():
    with pytest.raises(zero.InvalidArgumentError, match=r"zero_optimization\.stage"):
        zero.Engine(config(4))


def test_unknown_param_name_raises_not_found():
    with make_engine() as eng:
        with pytest.raises(zero.NotFoundError):
            eng.find_param("nope")
        with pytest.raises(zero.NotFoundError):
            eng.gather("nope")


def test_bad_param_id_raises_invalid_argument():
    with make_engine() as eng:
        with pytest.raises(zero.InvalidArgumentError):
            eng.gather(99)


def test_use_after_close_raises_and_close_is_idempotent():
    eng = make_engine()
    eng.close()
    eng.close()
    assert eng.closed
    for call in (lambda: eng.step(), lambda: eng.gather(0),
                 lambda: eng.grad_buffer(0), lambda: eng.stats(),
                 lambda: eng.loss_scale, lambda: eng.read_master(0),
                 lambda: eng.register_param("x", [1.0]), lambda: eng.finalize()):
        with pytest.raises(zero.FailedPreconditionError, match="closed"):
            call()


def test_comm_close_while_an_engine_uses_it_raises():
    comm = zero.Comm.self_()
    eng = make_engine(comm=comm)
    with pytest.raises(zero.FailedPreconditionError):
        comm.close()
    eng.close()
    comm.close()
    with pytest.raises(zero.FailedPreconditionError):
        comm.rank


def test_comm_self_alias_makes_a_one_rank_comm():
    with zero.Comm.self() as comm:
        assert (comm.rank, comm.size, comm.kind) == (0, 1, "self")


def test_engine_made_without_comm_uses_one_rank():
    with make_engine() as eng:
        assert (eng.rank, eng.world_size) == (0, 1)
        assert eng.comm.kind == "self"


def test_bf16_helpers_round_trip():
    x = np.array([1.0, -2.5, 3.140625, 0.0], np.float32)
    bits = zero.float32_to_bf16(x)
    assert bits.dtype == np.uint16
    np.testing.assert_array_equal(zero.bf16_to_float32(bits), x)
    # Round to nearest even.
    assert zero.float32_to_bf16(np.float32(1.0 + 2**-8))[()] == 0x3F80
    assert zero.float32_to_bf16(np.float32(1.0 + 3 * 2**-8))[()] == 0x3F82


def test_bf16_engine_exposes_uint16_bits():
    with zero.Engine(config(1, bf16={"enabled": True})) as eng:
        eng.register_param("w", np.array([1.0, 2.0, 3.0], np.float32))
        eng.finalize()
        with eng.gathered("w") as (w,):
            assert w.dtype == np.uint16
            np.testing.assert_array_equal(zero.bf16_to_float32(w), [1, 2, 3])
        eng.set_grad("w", np.ones(3, np.float32))
        eng.step()


def test_thread_comm_ranks_average_their_gradients():
    world = 2

    def rank_main(r, comm):
        with zero.Engine(config(2), comm=comm) as eng:
            eng.register_param("w", np.zeros(8, np.float32))
            eng.finalize()
            eng.set_grad("w", np.full(8, float(r + 1), np.float32))
            eng.step()
            with eng.gathered("w") as (w,):
                return w.copy()

    results = on_ranks(world, rank_main)
    # AdamW's first step: -lr * sign(mean gradient) everywhere, on both ranks.
    for r in range(world):
        np.testing.assert_allclose(results[r], np.full(8, -0.1), rtol=1e-6)


def test_status_codes_map_to_exception_classes():
    for status, cls in zero.errors.ERRORS_BY_STATUS.items():
        e = zero.error_from_status(status, "msg")
        assert type(e) is cls and e.status == status and str(e) == "msg"
        assert zero._zero_c.status_string(status)
    assert type(zero.error_from_status(77, "x")) is zero.ZeroError


def test_library_version_matches_header_major():
    assert zero.version() // 10000 == zero.HEADER_VERSION // 10000


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_write_master_sets_masters_and_working_copy(stage):
    with make_engine(stage=stage) as eng:
        new = np.arange(6, dtype=np.float32).reshape(2, 3) * -2.0
        eng.write_master("w", new)
        eng.write_master("frozen", np.array([7.0, 8.0]))
        np.testing.assert_array_equal(eng.read_master("w"), new)
        np.testing.assert_array_equal(eng.read_master("frozen"), [7.0, 8.0])
        with eng.gathered("w") as (w,):
            np.testing.assert_array_equal(w, new)
            with pytest.raises(zero.FailedPreconditionError, match="gathered"):
                eng.write_master("w", new)
        with pytest.raises(ValueError, match="shape"):
            eng.write_master("w", np.zeros(5))


@pytest.mark.parametrize("stage", [0, 3])
def test_write_master_range_sets_only_that_range(stage):
    with make_engine(stage=stage) as eng:
        before = eng.read_master("w")
        eng.write_master_range("w", 3, np.array([-1.0, -2.0]))
        want = before.copy().reshape(-1)
        want[3:5] = [-1.0, -2.0]
        np.testing.assert_array_equal(eng.read_master("w").reshape(-1), want)
        with eng.gathered("w") as (w,):
            np.testing.assert_array_equal(w.reshape(-1), want)
        with pytest.raises(zero.InvalidArgumentError, match="'w'"):
            eng.write_master_range("w", 5, np.zeros(2))


def test_comm_broadcast_and_abort_over_threads():
    world = 3
    comms = zero.Comm.threads(world)
    got = [None] * world
    errors = [None] * world

    def rank_main(r):
        v = np.full(4, r, dtype=np.int64)
        comms[r].broadcast(v, root=1)
        got[r] = v.copy()
        comms[r].barrier()
        if r == 2:
            comms[r].abort("ValueError: bad batch")
            return
        try:
            comms[r].barrier()
        except zero.ZeroError as e:  # noqa: PERF203
            errors[r] = str(e)

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for c in comms:
        c.close()
    for r in range(world):
        np.testing.assert_array_equal(got[r], [1, 1, 1, 1])
    for r in (0, 1):
        assert errors[r] and "rank 2 failed: ValueError: bad batch" in errors[r], errors


def _init_model(eng, calls):
    def fill(name, offset, count):
        calls.append((offset, count))
        return np.arange(offset, offset + count, dtype=np.float64) * 0.5
    eng.register_param("w", shape=(40, 8), init=zero.InitSpec.kaiming_uniform(seed=3))
    eng.register_param("b", shape=(40,), init=zero.InitSpec.fan_in_uniform(8, seed=3))
    eng.register_param("ln", shape=(8,), init=zero.InitSpec.ones())
    eng.register_param("f", shape=(300,), init=fill)
    eng.finalize()


def test_register_by_init_spec_and_fill_is_the_same_at_every_world():
    want = {}
    with zero.Engine(config(0)) as eng:
        _init_model(eng, [])
        for n in ("w", "b", "ln", "f"):
            want[n] = eng.read_master(n).copy()
    assert np.all(np.abs(want["w"]) <= 1 / np.sqrt(8)) and want["w"].std() > 0.1
    assert np.all(np.abs(want["b"]) <= 1 / np.sqrt(8))
    np.testing.assert_array_equal(want["ln"], np.ones(8))
    np.testing.assert_array_equal(want["f"], np.arange(300) * 0.5)
    world = 3
    calls = [[] for _ in range(world)]

    def rank_main(r, comm):
        with zero.Engine(config(3), comm=comm) as eng:
            _init_model(eng, calls[r])
            return {n: eng.read_master(n).copy() for n in want}

    got = on_ranks(world, rank_main)
    for r in range(world):
        for n in want:
            np.testing.assert_array_equal(got[r][n], want[n])
        # Stage 3: each rank fills only part of "f".
        assert sum(c for _, c in calls[r]) < 300 * 2


def test_a_raising_fill_fails_finalize_naming_the_param():
    def fill(name, offset, count):
        raise ValueError("no such file")
    with zero.Engine(config(0)) as eng:
        eng.register_param("broken", shape=(4,), init=fill)
        with pytest.raises(zero.InvalidArgumentError, match="'broken'.*no such file"):
            eng.finalize()
    with zero.Engine(config(0)) as eng:
        with pytest.raises(zero.InvalidArgumentError):
            eng.register_param("x", np.zeros(4), init=zero.InitSpec.zeros())
        with pytest.raises(zero.InvalidArgumentError):
            eng.register_param("x", shape=(4,), init=zero.InitSpec.kaiming_uniform())


def test_step_breakdown_and_comm_log():
    """wall_clock_breakdown and comms_logger through the C ABI (1.5)."""
    with make_engine(stage=1, wall_clock_breakdown=True,
                     comms_logger={"enabled": True}) as eng:
        for _ in range(2):
            eng.gather("w")
            eng.grad_buffer("w")[...] = 1.0
            eng.grad_ready("w")
            eng.release("w")
            eng.step()
        b = eng.step_breakdown()
        assert b["global_step"] == 2 and b["micro_steps"] == 1
        assert b["step_ms"] > 0 and b["update_ms"] > 0
        parts = b["forward_ms"] + b["backward_ms"] + b["optimizer_ms"]
        assert parts <= b["step_ms"] * 1.05 + 0.01
        log = eng.comm_log()
        assert all(e["count"] > 0 and 0 <= e["op"] <= 3 for e in log)
        assert isinstance(log[0]["control"], bool) if log else True
        assert "comms log" in eng.comm_log_summary()
    with make_engine() as eng:
        with pytest.raises(zero.FailedPreconditionError, match="wall_clock_breakdown"):
            eng.step_breakdown()
        with pytest.raises(zero.FailedPreconditionError, match="comms_logger"):
            eng.comm_log()


def test_divergent_ranks_fail_alike_and_flight_record_names_the_params():
    """Rank 1 gathers another expert than rank 0 at stage 3: both fail with
    MismatchError naming both params within seconds, the engine refuses
    further calls, and each rank's flight record (C ABI 1.9) ends with the
    collective where they parted, "diverged", naming its own param."""
    import time

    def rank_main(r, comm):
        cfg = config(3, comm_timeout_seconds=60)
        cfg["zero_optimization"]["stage3_param_persistence_threshold"] = 0
        with zero.Engine(cfg, comm=comm) as eng:
            for name in ("experts.0", "experts.1"):
                eng.register_param(name, np.ones(8, np.float32))
            eng.finalize()
            start = time.monotonic()
            with pytest.raises(zero.MismatchError) as err:
                eng.gather("experts.%d" % r)
            assert time.monotonic() - start < 2.5
            assert "rank 0 all-gathers 'experts.0'" in str(err.value)
            assert "rank 1 all-gathers 'experts.1'" in str(err.value)
            with pytest.raises(zero.ZeroError):
                eng.gather("experts.0")
            record = eng.flight_record()
            assert record and all(e["rank"] == r for e in record)
            assert [e["outcome"] for e in record[:-1]] == ["done"] * (len(record) - 1)
            assert record[-1]["outcome"] == "diverged"
            assert record[-1]["param"] == "experts.%d" % r
            assert record[-1]["call"] == "gather" and record[-1]["op"] == "all-gather"
            return [(e["seq"], e["op"], e["elems"]) for e in record]

    records = on_ranks(2, rank_main)
    assert records[0] == records[1]  # the same collectives up to the divergence


def test_step_breakdown_nvme_time(tmp_path):
    """NVMe time in the breakdown (C ABI 1.6): optimizer state on NVMe."""
    nvme = {"device": "nvme", "nvme_path": str(tmp_path)}
    eng = zero.Engine(config(1, wall_clock_breakdown=True,
                             zero_optimization={"stage": 1, "offload_optimizer": nvme}))
    with eng:
        eng.register_param("w", np.ones((64, 64), dtype=np.float32))
        eng.finalize()
        for _ in range(2):
            eng.grad_buffer("w")[...] = 1.0
            eng.grad_ready("w")
            eng.step()
        b = eng.step_breakdown()
        assert b["nvme_read_bytes"] >= 64 * 64 * 12 and b["nvme_write_bytes"] >= 64 * 64 * 12
        assert b["nvme_read_ms"] > 0 and b["nvme_write_ms"] > 0
        assert b["nvme_exposed_ms"] + b["nvme_hidden_ms"] <= b["optimizer_ms"] * 1.05 + 0.01
    with make_engine(wall_clock_breakdown=True) as eng:
        eng.step()
        assert eng.step_breakdown()["nvme_read_ms"] == 0.0


def test_estimate_matches_an_engine_and_the_zero_formula():
    """zero.estimate (C ABI 1.5): what an engine of the same config measures."""
    cfg = config(2)
    shapes = {"w": (2, 3)}
    est = zero.estimate(shapes, cfg, ranks_per_node=1, gpu=False)
    with make_engine(stage=2) as eng:
        eng.gather("w")
        eng.grad_buffer("w")[...] = 1.0
        eng.grad_ready("w")
        eng.release("w")
        eng.step()
        st = eng.stats()
    for k in ("param_bytes", "grad_bytes", "master_bytes", "optimizer_bytes", "buffer_bytes"):
        assert est[k] == st[k], k
    big = zero.estimate([(4096, 4096), (4096,)], {"fp16": {"enabled": True},
                        "zero_optimization": {"stage": 3}}, ranks_per_node=8)
    psi = big["padded_numel"]
    assert big["param_bytes"] >= 2 * psi // 8
    assert big["master_bytes"] + big["optimizer_bytes"] == 12 * psi // 8
    gpt = zero.estimate(1_000_000_000, {"zero_optimization": {"stage": 1}}, hidden=2048)
    assert abs(gpt["trainable_numel"] - 1e9) / 1e9 < 0.05
    with pytest.raises(zero.InvalidArgumentError, match="stage"):
        zero.estimate(shapes, {"zero_optimization": {"stage": 7}})


def _gpt_like(torch):
    """An embedding, 2-D hidden weights with biases, a norm and an LM head."""
    class GptLike(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = torch.nn.Embedding(40, 24)
            self.fc = torch.nn.Linear(24, 48)
            self.proj = torch.nn.Linear(48, 24)
            self.norm = torch.nn.LayerNorm(24)
            self.lm_head = torch.nn.Linear(24, 40, bias=False)

        def forward(self, idx):
            x = self.embed_tokens(idx)
            x = x + self.proj(torch.relu(self.fc(x)))
            return self.lm_head(self.norm(x))

    torch.manual_seed(0)
    return GptLike()


@pytest.mark.parametrize("optimizer", ["Muon", "AdamW"])
def test_estimate_of_a_torch_module_uses_its_names_and_frozen_params(optimizer):
    """zero.estimate(module) (C ABI 1.16): the names decide Muon's half as the
    runtime does (the embedding and the LM head on AdamW) and frozen params
    are held, not trained: within 2 % of what zero.torch's engine measures
    after a step; the shapes alone (C ABI 1.5) count the frozen param as
    trainable and the embedding and head on Muon."""
    torch = pytest.importorskip("torch")
    import zero.torch as zt
    cfg = {"zero_optimization": {"stage": 1}, "steps_per_print": 0,
           "optimizer": {"type": optimizer, "params": {"lr": 0.01}}}
    model = _gpt_like(torch)
    model.fc.weight.requires_grad_(False)
    est = zero.estimate(model, cfg, gpu=False)
    engine, _, _, _ = zt.initialize(model=model, config=cfg)
    try:
        idx = torch.randint(0, 40, (2, 5))
        loss = engine(idx).float().pow(2).mean()
        engine.backward(loss)
        engine.step()
        st = engine.zero.stats()
    finally:
        engine.destroy()
    assert est["trainable_numel"] == st["trainable_numel"]
    assert st["frozen_bytes"] == 48 * 24 * 4
    for k in ("param_bytes", "grad_bytes", "master_bytes", "optimizer_bytes", "frozen_bytes"):
        assert abs(est[k] - st[k]) <= 0.02 * st[k], (k, est[k], st[k])
    buffers = st["buffer_bytes"] - st["live_gathered_bytes"]
    assert abs(est["buffer_bytes"] - buffers) <= 0.02 * buffers, (est["buffer_bytes"], buffers)
    shapes = [tuple(p.shape) for p in model.parameters()]
    unnamed = zero.estimate(shapes, cfg, gpu=False)
    assert unnamed["trainable_numel"] == est["trainable_numel"] + 48 * 24
    if optimizer == "Muon":
        # The embedding and the head orthogonalised too: more Muon buffers.
        assert unnamed["buffer_bytes"] > est["buffer_bytes"]
    # A dict of name -> shape with `frozen` is the same description.
    named = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert zero.estimate(named, cfg, gpu=False, frozen=["fc.weight"]) == est
    # `use_muon` by name overrides the rule: the head back on Muon.
    if optimizer == "Muon":
        head_on = zero.estimate(named, cfg, gpu=False, frozen=["fc.weight"],
                                use_muon={"lm_head.weight": True})
        assert head_on["buffer_bytes"] > est["buffer_bytes"]


def test_estimate_of_named_params_refuses_as_registration_does():
    """The runtime's refusals name the param; names the params lack, and
    names given with a bare list of shapes, are refused here."""
    cfg = {"optimizer": {"type": "Muon", "params": {"lr": 0.01}}}
    with pytest.raises(zero.InvalidArgumentError, match="'b'.*use_muon on a 1-D"):
        zero.estimate({"a": (4, 4), "b": (4,)}, cfg, use_muon={"b": True})
    with pytest.raises(zero.InvalidArgumentError, match="'a'.*dimension < 1"):
        zero.estimate({"a": (4, 0)}, cfg)
    with pytest.raises(ValueError, match="no param named 'c'"):
        zero.estimate({"a": (4, 4)}, cfg, frozen=["c"])
    with pytest.raises(ValueError, match="frozen and use_muon name params"):
        zero.estimate([(4, 4)], cfg, frozen=["a"])


def test_estimate_reads_shapes_from_safetensors_an_index_and_a_torch_module(tmp_path):
    """zero.estimate's inputs: each way of naming the same params gives the
    estimate of the explicit dict of name -> shape (and a different one does
    not). Named params size the "auto" buckets by their real smaller
    dimension; a bare list of shapes takes each matrix as square."""
    shapes = [(300, 200), (200,), (10, 300)]
    cfg = {"fp16": {"enabled": True}, "zero_optimization": {"stage": 2}}
    want = zero.estimate(dict(zip("abc", shapes)), cfg, ranks_per_node=4)
    unnamed = zero.estimate(shapes, cfg, ranks_per_node=4)
    assert unnamed["trainable_numel"] == want["trainable_numel"]

    def write_st(path, named):
        header, off = {}, 0
        for name, shp in named.items():
            n = int(np.prod(shp)) * 2
            header[name] = {"dtype": "F16", "shape": list(shp), "data_offsets": [off, off + n]}
            off += n
        header["__metadata__"] = {"format": "pt"}
        raw = json.dumps(header).encode()
        with open(path, "wb") as f:
            f.write(len(raw).to_bytes(8, "little") + raw + bytes(off))

    write_st(tmp_path / "model.safetensors", {"a": shapes[0], "b": shapes[1], "c": shapes[2]})
    assert zero.estimate(str(tmp_path / "model.safetensors"), cfg, ranks_per_node=4) == want
    write_st(tmp_path / "s1.safetensors", {"a": shapes[0], "b": shapes[1]})
    write_st(tmp_path / "s2.safetensors", {"c": shapes[2]})
    with open(tmp_path / "model.safetensors.index.json", "w") as f:
        json.dump({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors",
                                  "c": "s2.safetensors"}}, f)
    assert zero.estimate(str(tmp_path / "model.safetensors.index.json"), cfg,
                         ranks_per_node=4) == want
    assert zero.estimate(dict(zip("ab", shapes[:2])), cfg, ranks_per_node=4) != want
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(300, 200, device="meta"),
                                torch.nn.Linear(200, 10, bias=False, device="meta"))
    # nn.Linear(300, 200): weight (200, 300), bias (200,); the second (10, 200).
    got = zero.estimate(model, cfg, ranks_per_node=4)
    assert got == zero.estimate({"0.weight": (200, 300), "0.bias": (200,),
                                 "1.weight": (10, 200)}, cfg, ranks_per_node=4)
    assert got["trainable_numel"] == 200 * 300 + 200 + 10 * 200
